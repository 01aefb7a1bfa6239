//! Configuration loading on arbitrary YAML: a config or an error naming
//! the key, never a panic (validation included).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let env = silas_core::config::MapEnv::new();
        if let Ok(cfg) = silas_core::config::Config::from_yaml_str(text, &env) {
            let _ = cfg.validate();
        }
    }
});
