//! Golden vectors: the canonical JSON module must match Python's
//! `json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)`
//! byte for byte. Vectors come from `tests/golden/gen_canonical.py`, which
//! shares no code with the Rust implementation.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::Value;
use silas_core::canonical;

#[derive(serde::Deserialize)]
struct Vector {
    name: String,
    input: String,
    canonical: String,
    sha256: String,
}

#[test]
fn rust_matches_python_byte_for_byte() {
    let vectors: Vec<Vector> =
        serde_json::from_str(include_str!("../../tests/golden/canonical_vectors.json")).unwrap();
    assert!(vectors.len() >= 15, "golden file lost vectors");
    for v in &vectors {
        let value: Value = serde_json::from_str(&v.input).unwrap();
        let bytes = canonical::to_bytes(&value).unwrap();
        assert_eq!(
            String::from_utf8(bytes.clone()).unwrap(),
            v.canonical,
            "vector {}",
            v.name
        );
        assert_eq!(bytes, v.canonical.as_bytes(), "vector {}", v.name);
        assert_eq!(canonical::sha256_hex(&bytes), v.sha256, "vector {}", v.name);
    }
}

#[test]
fn canonical_output_is_a_fixed_point() {
    // Parsing canonical text and canonicalising again yields the same bytes.
    let vectors: Vec<Vector> =
        serde_json::from_str(include_str!("../../tests/golden/canonical_vectors.json")).unwrap();
    for v in &vectors {
        let value: Value = serde_json::from_str(&v.canonical).unwrap();
        assert_eq!(
            canonical::to_string(&value).unwrap(),
            v.canonical,
            "vector {}",
            v.name
        );
    }
}
