//! Canonical JSON: the one place that turns data into the bytes Silas hashes or
//! signs. Every hash and signature payload in the system (plan hash, spawn-policy
//! hash, batch hash, autonomy-threshold binding, approval-token signing payload,
//! signed-message payload, audit entry hash) goes through [`to_bytes`]; the
//! projections themselves live in [`crate::projections`] and call only this.
//!
//! The output is byte-identical to Python's
//! `json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")`,
//! the reference the spec is written against. Exact rules:
//!
//! * **Objects**: keys sorted by Unicode code point (equal to UTF-8 byte order),
//!   `{"a":1,"b":2}` — no whitespace anywhere. Sorting is done here explicitly,
//!   independent of how `serde_json::Map` happens to be ordered in the build.
//! * **Strings**: UTF-8, non-ASCII written raw (not `\u` escaped). Escaped are
//!   `"` → `\"`, `\` → `\\`, U+0008 → `\b`, U+000C → `\f`, U+000A → `\n`,
//!   U+000D → `\r`, U+0009 → `\t`, every other code point below U+0020 →
//!   `\u00xx` (lowercase hex). `/`, U+007F and U+2028/2029 are not escaped.
//! * **Integers**: decimal, no sign for non-negative, no leading zeros; the
//!   range is that of `i64`/`u64` (larger integers are refused by the parser).
//! * **Floats**: Python `repr`: the shortest decimal that round-trips; a float
//!   with an integral value keeps `.0` (`2.0`); exponent form is used when the
//!   decimal exponent is < -4 or >= 16, with a sign and at least two digits
//!   (`1e-05`, `1.5e+16`); `-0.0` stays `-0.0`. NaN and ±infinity are refused
//!   (Python would emit the non-JSON tokens `NaN`/`Infinity`).
//! * **Literals**: `true`, `false`, `null`.

use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// Why a value has no canonical form.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CanonicalError {
    #[error("non-finite float has no canonical JSON form")]
    NonFiniteFloat,
    #[error("value cannot be represented as JSON: {0}")]
    NotJson(String),
}

/// Canonical bytes of any serialisable value.
pub fn of<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, CanonicalError> {
    let v = serde_json::to_value(value).map_err(|e| CanonicalError::NotJson(e.to_string()))?;
    to_bytes(&v)
}

/// Canonical bytes of a JSON value.
pub fn to_bytes(value: &Value) -> Result<Vec<u8>, CanonicalError> {
    let mut out = Vec::with_capacity(256);
    write_value(&mut out, value)?;
    Ok(out)
}

/// Canonical text of a JSON value (the bytes are always valid UTF-8).
pub fn to_string(value: &Value) -> Result<String, CanonicalError> {
    let bytes = to_bytes(value)?;
    String::from_utf8(bytes).map_err(|e| CanonicalError::NotJson(e.to_string()))
}

/// Lowercase hex SHA-256 of some bytes.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex_lower(&Sha256::digest(bytes))
}

/// Lowercase hex SHA-256 of the canonical bytes of a value.
pub fn hash_of<T: Serialize + ?Sized>(value: &T) -> Result<String, CanonicalError> {
    Ok(sha256_hex(&of(value)?))
}

pub fn hex_lower(bytes: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(HEX[(b >> 4) as usize] as char);
        s.push(HEX[(b & 0x0f) as usize] as char);
    }
    s
}

fn write_value(out: &mut Vec<u8>, value: &Value) -> Result<(), CanonicalError> {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                out.extend_from_slice(i.to_string().as_bytes());
            } else if let Some(u) = n.as_u64() {
                out.extend_from_slice(u.to_string().as_bytes());
            } else {
                let f = n.as_f64().ok_or(CanonicalError::NonFiniteFloat)?;
                write_float(out, f)?;
            }
        }
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_value(out, item)?;
            }
            out.push(b']');
        }
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            out.push(b'{');
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_string(out, k);
                out.push(b':');
                write_value(out, v)?;
            }
            out.push(b'}');
        }
    }
    Ok(())
}

fn write_string(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let escape: Option<&[u8]> = match b {
            b'"' => Some(b"\\\""),
            b'\\' => Some(b"\\\\"),
            b'\n' => Some(b"\\n"),
            b'\r' => Some(b"\\r"),
            b'\t' => Some(b"\\t"),
            0x08 => Some(b"\\b"),
            0x0c => Some(b"\\f"),
            _ => None,
        };
        if let Some(esc) = escape {
            out.extend_from_slice(&bytes[start..i]);
            out.extend_from_slice(esc);
            start = i + 1;
        } else if b < 0x20 {
            // Multi-byte UTF-8 sequences never contain bytes < 0x80, so this is
            // always a whole control character.
            out.extend_from_slice(&bytes[start..i]);
            out.extend_from_slice(format!("\\u{b:04x}").as_bytes());
            start = i + 1;
        }
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

/// Python `float.__repr__`, built from Rust's shortest round-trip digits.
fn write_float(out: &mut Vec<u8>, f: f64) -> Result<(), CanonicalError> {
    if !f.is_finite() {
        return Err(CanonicalError::NonFiniteFloat);
    }
    // `{:e}` yields the shortest round-trip digits: "1.5e-7", "-2e0", "0e0".
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').ok_or(CanonicalError::NonFiniteFloat)?;
    let exp: i32 = exp.parse().map_err(|_| CanonicalError::NonFiniteFloat)?;
    let (negative, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => (true, m),
        None => (false, mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let mut s = String::new();
    if negative {
        s.push('-');
    }
    if (-4..16).contains(&exp) {
        if exp < 0 {
            s.push_str("0.");
            for _ in 0..(-exp - 1) {
                s.push('0');
            }
            s.push_str(&digits);
        } else {
            let int_len = exp as usize + 1;
            if digits.len() <= int_len {
                s.push_str(&digits);
                for _ in digits.len()..int_len {
                    s.push('0');
                }
                s.push_str(".0");
            } else {
                s.push_str(&digits[..int_len]);
                s.push('.');
                s.push_str(&digits[int_len..]);
            }
        }
    } else {
        s.push_str(&digits[..1]);
        if digits.len() > 1 {
            s.push('.');
            s.push_str(&digits[1..]);
        }
        s.push('e');
        s.push(if exp < 0 { '-' } else { '+' });
        s.push_str(&format!("{:02}", exp.abs()));
    }
    out.extend_from_slice(s.as_bytes());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn canon(v: Value) -> String {
        to_string(&v).unwrap()
    }

    #[test]
    fn sorts_keys_recursively_without_whitespace() {
        let v = json!({"b": 1, "a": {"d": [1, 2], "c": null}, "A": true});
        assert_eq!(canon(v), r#"{"A":true,"a":{"c":null,"d":[1,2]},"b":1}"#);
    }

    #[test]
    fn escapes_like_python_with_raw_non_ascii() {
        let v = json!("q\"b\\n\n\r\t\u{8}\u{c}\u{1}\u{1f}\u{7f}/é日本🙂\u{2028}");
        assert_eq!(
            canon(v),
            "\"q\\\"b\\\\n\\n\\r\\t\\b\\f\\u0001\\u001f\u{7f}/é日本🙂\u{2028}\""
        );
    }

    #[test]
    fn floats_follow_python_repr() {
        let cases: &[(f64, &str)] = &[
            (2.0, "2.0"),
            (0.1, "0.1"),
            (-0.0, "-0.0"),
            (0.0, "0.0"),
            (1e16, "1e+16"),
            (1.5e16, "1.5e+16"),
            (9999999999999998.0, "9999999999999998.0"),
            (123456789012345678.0, "1.2345678901234568e+17"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1.5e-7, "1.5e-07"),
            (1e100, "1e+100"),
            (-2.5, "-2.5"),
            (5e-324, "5e-324"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
            (100.0, "100.0"),
            (0.30000000000000004, "0.30000000000000004"),
        ];
        for (f, want) in cases {
            let mut out = Vec::new();
            write_float(&mut out, *f).unwrap();
            assert_eq!(String::from_utf8(out).unwrap(), *want, "float {f:?}");
        }
    }

    #[test]
    fn integers_and_literals() {
        assert_eq!(
            canon(json!([0, -1, u64::MAX, i64::MIN, true, false, null])),
            format!("[0,-1,{},{},true,false,null]", u64::MAX, i64::MIN)
        );
    }

    #[test]
    fn non_finite_floats_are_refused() {
        let mut out = Vec::new();
        assert_eq!(
            write_float(&mut out, f64::NAN),
            Err(CanonicalError::NonFiniteFloat)
        );
        assert_eq!(
            write_float(&mut out, f64::INFINITY),
            Err(CanonicalError::NonFiniteFloat)
        );
    }

    #[test]
    fn sha256_hex_is_lowercase() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
