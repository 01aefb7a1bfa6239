//! The plan parser (§7.2, YAML front matter + markdown) on arbitrary text:
//! it returns a plan or an error, never panics.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = silas_actors::turn::plan::parse_plan(text);
    }
});
