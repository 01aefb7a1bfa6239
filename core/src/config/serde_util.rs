//! Small serde helpers for the configuration schema.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::model::context::ContextProfile;

/// Accepts a string or an integer (kept as its decimal text). Used for
/// identifiers and secrets that may look numeric — a Telegram chat id, a
/// numeric token — whether written unquoted in YAML or supplied through a
/// `SILAS__…` override (whose values are parsed as YAML scalars).
struct LenientString;

impl<'de> Visitor<'de> for LenientString {
    type Value = String;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<String, E> {
        Ok(v.to_owned())
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<String, E> {
        Ok(v)
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<String, E> {
        Ok(v.to_string())
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<String, E> {
        Ok(v.to_string())
    }
}

pub(crate) fn lenient_string<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    d.deserialize_any(LenientString)
}

struct LenientOptString;

impl<'de> Visitor<'de> for LenientOptString {
    type Value = Option<String>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string or null")
    }

    fn visit_none<E: de::Error>(self) -> Result<Option<String>, E> {
        Ok(None)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Option<String>, E> {
        Ok(None)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Option<String>, D::Error> {
        lenient_string(d).map(Some)
    }
}

pub(crate) fn lenient_opt_string<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<String>, D::Error> {
    d.deserialize_option(LenientOptString)
}

/// The on-disk shape of a context profile: the three shares, no `name`
/// (the name is the map key). Range/sum rules are checked by
/// [`Config::validate`](super::Config::validate), not here, so the error can
/// name the key.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ProfileEntry {
    chronicle_pct: f64,
    memory_pct: f64,
    workspace_pct: f64,
}

pub(crate) fn deserialize_profiles<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<String, ContextProfile>, D::Error> {
    let entries = BTreeMap::<String, ProfileEntry>::deserialize(d)?;
    Ok(entries
        .into_iter()
        .map(|(name, e)| {
            let profile = ContextProfile {
                name: name.clone(),
                chronicle_pct: e.chronicle_pct,
                memory_pct: e.memory_pct,
                workspace_pct: e.workspace_pct,
            };
            (name, profile)
        })
        .collect())
}

#[derive(Serialize)]
struct ProfileOut {
    chronicle_pct: f64,
    memory_pct: f64,
    workspace_pct: f64,
}

pub(crate) fn serialize_profiles<S: Serializer>(
    profiles: &BTreeMap<String, ContextProfile>,
    s: S,
) -> Result<S::Ok, S::Error> {
    let mut map = s.serialize_map(Some(profiles.len()))?;
    for (name, p) in profiles {
        map.serialize_entry(
            name,
            &ProfileOut {
                chronicle_pct: p.chronicle_pct,
                memory_pct: p.memory_pct,
                workspace_pct: p.workspace_pct,
            },
        )?;
    }
    map.end()
}

/// `models.<role>`: one `provider:model` string, or an ordered list of them
/// (a fallback chain, issue #16), kept as the comma-separated text that
/// [`super::model_chain`] splits again.
pub(crate) fn model_chain<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(String),
        Many(Vec<String>),
    }
    match OneOrMany::deserialize(d)? {
        OneOrMany::One(s) => Ok(s),
        OneOrMany::Many(v) if v.is_empty() => Err(de::Error::custom(
            "an empty list: name at least one provider:model",
        )),
        OneOrMany::Many(v) => {
            if let Some(bad) = v.iter().find(|s| s.contains(',')) {
                return Err(de::Error::custom(format!(
                    "{bad:?}: a model spec cannot contain a comma"
                )));
            }
            Ok(v.join(", "))
        }
    }
}
