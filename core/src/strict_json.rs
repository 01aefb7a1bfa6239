//! JSON read strictly where an ambiguity is a security question: serde_json
//! keeps the last of two equal keys, so `{"action":"block","action":"continue"}`
//! reads as `continue` — while a person, a log viewer or another parser may
//! read the first. A verdict that says two things is no verdict.

use std::collections::HashSet;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

/// The first key repeated within one object anywhere in `text`, if any
/// (`None` too when `text` is not JSON: parsing it reports that).
pub fn duplicate_key(text: &str) -> Option<String> {
    match serde_json::from_str::<Unique>(text) {
        Err(e) if e.is_data() => Some(e.to_string()),
        _ => None,
    }
}

struct Unique;

impl<'de> Deserialize<'de> for Unique {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(UniqueVisitor)
    }
}

struct UniqueVisitor;

impl<'de> Visitor<'de> for UniqueVisitor {
    type Value = Unique;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<Unique, E> {
        Ok(Unique)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Unique, E> {
        Ok(Unique)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Unique, E> {
        Ok(Unique)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Unique, E> {
        Ok(Unique)
    }

    fn visit_str<E>(self, _: &str) -> Result<Unique, E> {
        Ok(Unique)
    }

    fn visit_unit<E>(self) -> Result<Unique, E> {
        Ok(Unique)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<Unique, A::Error> {
        while a.next_element::<Unique>()?.is_some() {}
        Ok(Unique)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<Unique, A::Error> {
        let mut seen = HashSet::new();
        while let Some(k) = a.next_key::<String>()? {
            if !seen.insert(k.clone()) {
                return Err(de::Error::custom(format!("duplicate key {k:?}")));
            }
            a.next_value::<Unique>()?;
        }
        Ok(Unique)
    }
}

/// `T` read from `value`; a failure names the field it is about
/// (`` `verify[0].expect`: invalid type: string "0", expected a map ``), so
/// whoever wrote the value — often a model, asked again with the error —
/// knows what to change.
pub fn from_value_at<T: serde::de::DeserializeOwned>(
    value: serde_json::Value,
) -> Result<T, String> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        if path == "." {
            e.inner().to_string()
        } else {
            format!("`{path}`: {}", e.inner())
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeated_keys_are_found_at_any_depth_and_nothing_else_is() {
        let cases: &[(&str, Option<&str>)] = &[
            (
                r#"{"action":"block","reason":"x","action":"continue"}"#,
                Some("action"),
            ),
            (r#"{"a":{"b":1,"b":2}}"#, Some("b")),
            (r#"[{"k":1},{"k":2,"k":3}]"#, Some("k")),
            // The same key in two objects, or escaped alike, is fine/found.
            (r#"[{"k":1},{"k":2}]"#, None),
            (r#"{"a\u0062":1,"ab":2}"#, Some("ab")),
            (
                r#"{"action":"continue","reason":"ok","score":0.5,"flags":[],"n":null,"t":true}"#,
                None,
            ),
            // Not JSON: for the parser to report.
            ("{not json", None),
            ("", None),
        ];
        for (text, want) in cases {
            let got = duplicate_key(text);
            match want {
                Some(k) => assert!(
                    got.as_deref()
                        .is_some_and(|m| m.contains(&format!("{k:?}"))),
                    "{text}: {got:?}"
                ),
                None => assert_eq!(got, None, "{text}"),
            }
        }
    }
}

#[cfg(test)]
mod from_value_at_tests {
    use super::from_value_at;
    use serde::Deserialize;
    use serde_json::json;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Check {
        name: String,
        expect: Expect,
    }
    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Expect {
        exit_code: i32,
    }
    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Plan {
        verify: Vec<Check>,
    }

    #[test]
    fn a_failure_names_its_field() {
        let bad = json!({"verify": [{"name": "a", "expect": {"exit_code": 0}},
                                    {"name": "b", "expect": {"exit_code": "zero"}}]});
        let e = from_value_at::<Plan>(bad).unwrap_err();
        assert!(
            e.starts_with("`verify[1].expect.exit_code`: invalid type"),
            "{e}"
        );
        let unknown = json!({"verify": [{"name": "a", "expect": {"code": 0}}]});
        let e = from_value_at::<Plan>(unknown).unwrap_err();
        assert!(
            e.starts_with("`verify[0].expect.code`: unknown field"),
            "{e}"
        );
        let e = from_value_at::<Plan>(json!([])).unwrap_err();
        assert!(!e.starts_with('`'), "{e}");
        assert!(from_value_at::<Plan>(json!({"verify": []})).is_ok());
    }
}
