//! SKILL.md front matter on arbitrary text: parsed with problems listed,
//! never a panic.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = silas_skill::manifest::parse(text);
    }
});
