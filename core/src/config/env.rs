//! Environment access for configuration loading: the [`EnvSource`]
//! abstraction, `${VAR}` interpolation of string scalars and `SILAS__…`
//! key-path overrides. Both passes work on the untyped YAML tree, before the
//! typed deserialisation.

use std::collections::BTreeMap;

use serde_yaml_ng::{Mapping, Value};

use super::error::ConfigError;

/// Prefix of environment variables that override configuration keys.
pub const OVERRIDE_PREFIX: &str = "SILAS__";

/// Separator between key segments in an override variable name.
pub const OVERRIDE_SEPARATOR: &str = "__";

/// Where configuration loading reads environment variables from. The
/// process environment is [`ProcessEnv`]; tests and embedders use
/// [`MapEnv`] so that nothing touches the real process environment.
pub trait EnvSource {
    /// The value of one variable, `None` when unset (or not valid UTF-8).
    fn var(&self, name: &str) -> Option<String>;
    /// Every variable, in any order. Used to discover `SILAS__…` overrides.
    fn vars(&self) -> Box<dyn Iterator<Item = (String, String)> + '_>;
}

/// The real process environment. Variables whose name or value is not valid
/// UTF-8 are treated as unset.
#[derive(Clone, Copy, Debug, Default)]
pub struct ProcessEnv;

impl EnvSource for ProcessEnv {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }

    fn vars(&self) -> Box<dyn Iterator<Item = (String, String)> + '_> {
        Box::new(
            std::env::vars_os()
                .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?))),
        )
    }
}

/// An in-memory environment (for tests, or to load with an empty environment).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MapEnv(BTreeMap<String, String>);

impl MapEnv {
    /// An empty environment.
    pub fn new() -> Self {
        MapEnv::default()
    }

    /// Builder-style insert.
    pub fn with(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.0.insert(name.into(), value.into());
        self
    }

    /// Sets one variable.
    pub fn set(&mut self, name: impl Into<String>, value: impl Into<String>) {
        self.0.insert(name.into(), value.into());
    }
}

impl<K: Into<String>, V: Into<String>> FromIterator<(K, V)> for MapEnv {
    fn from_iter<T: IntoIterator<Item = (K, V)>>(iter: T) -> Self {
        MapEnv(
            iter.into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        )
    }
}

impl EnvSource for MapEnv {
    fn var(&self, name: &str) -> Option<String> {
        self.0.get(name).cloned()
    }

    fn vars(&self) -> Box<dyn Iterator<Item = (String, String)> + '_> {
        Box::new(self.0.iter().map(|(k, v)| (k.clone(), v.clone())))
    }
}

// ---------------------------------------------------------------------------
// key paths

/// Renders a key path as the dotted form used in every error message:
/// map keys joined by `.`, sequence indices as `[i]`, and the leading
/// `silas` root segment dropped (`silas.channels.web.port` →
/// `channels.web.port`). The bare root renders as `silas`.
pub(crate) fn dotted<S: AsRef<str>>(segments: &[S]) -> String {
    let rest = match segments.first() {
        Some(first) if first.as_ref() == "silas" => &segments[1..],
        _ => segments,
    };
    if rest.is_empty() {
        return "silas".to_owned();
    }
    let mut out = String::new();
    for seg in rest {
        let seg = seg.as_ref();
        if !out.is_empty() && !seg.starts_with('[') {
            out.push('.');
        }
        out.push_str(seg);
    }
    out
}

fn key_segment(key: &Value) -> String {
    match key {
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::Null => "null".to_owned(),
        _ => "?".to_owned(),
    }
}

// ---------------------------------------------------------------------------
// ${VAR} interpolation

/// Replaces `${VAR}` references in every string scalar of the tree (mapping
/// keys are left alone):
///
/// * a scalar that is exactly `${VAR}` becomes VAR's value, or `null` when
///   VAR is unset;
/// * `${VAR}` inside a longer string is replaced by VAR's value, or by the
///   empty string when VAR is unset;
/// * `$${` is an escape for a literal `${`; any other `$` is literal.
///
/// Substituted values are always strings — they are never re-parsed as
/// YAML. An unterminated `${` or an invalid variable name is an error
/// naming the key.
pub(crate) fn interpolate(value: &mut Value, env: &dyn EnvSource) -> Result<(), ConfigError> {
    let mut path = Vec::new();
    interpolate_at(value, env, &mut path)
}

fn interpolate_at(
    value: &mut Value,
    env: &dyn EnvSource,
    path: &mut Vec<String>,
) -> Result<(), ConfigError> {
    match value {
        Value::String(s) => {
            if s.contains('$') {
                match interpolate_str(s, env) {
                    Ok(Some(new)) => *s = new,
                    Ok(None) => *value = Value::Null,
                    Err(message) => return Err(ConfigError::parse(Some(dotted(path)), message)),
                }
            }
        }
        Value::Sequence(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                path.push(format!("[{i}]"));
                interpolate_at(item, env, path)?;
                path.pop();
            }
        }
        Value::Mapping(map) => {
            for (k, v) in map.iter_mut() {
                path.push(key_segment(k));
                interpolate_at(v, env, path)?;
                path.pop();
            }
        }
        Value::Tagged(tagged) => interpolate_at(&mut tagged.value, env, path)?,
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
    Ok(())
}

fn is_var_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
}

/// `Ok(None)` means "the whole scalar was an unset `${VAR}`: make it null".
pub(crate) fn interpolate_str(s: &str, env: &dyn EnvSource) -> Result<Option<String>, String> {
    if let Some(name) = s.strip_prefix("${").and_then(|r| r.strip_suffix('}'))
        && is_var_name(name)
    {
        return Ok(env.var(name));
    }
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(pos) = rest.find('$') {
        out.push_str(&rest[..pos]);
        let at = &rest[pos..];
        if let Some(after) = at.strip_prefix("$${") {
            out.push_str("${");
            rest = after;
        } else if let Some(after) = at.strip_prefix("${") {
            let Some(end) = after.find('}') else {
                return Err(format!(
                    "unterminated \"${{\" in {s:?} (write \"$${{\" for a literal \"${{\")"
                ));
            };
            let name = &after[..end];
            if !is_var_name(name) {
                return Err(format!(
                    "invalid environment variable reference \"${{{name}}}\" in {s:?} \
                     (names match [A-Za-z_][A-Za-z0-9_]*; write \"$${{\" for a literal \"${{\")"
                ));
            }
            out.push_str(&env.var(name).unwrap_or_default());
            rest = &after[end + 1..];
        } else {
            out.push('$');
            rest = &at[1..];
        }
    }
    out.push_str(rest);
    Ok(Some(out))
}

// ---------------------------------------------------------------------------
// SILAS__A__B__C overrides

/// One applied override, remembered so that a later schema error on its key
/// can name the environment variable responsible.
#[derive(Clone, Debug)]
pub(crate) struct AppliedOverride {
    pub var: String,
    /// Full segment path including the `silas` root.
    pub path: Vec<String>,
}

/// Applies every `SILAS__A__B__C=value` variable as `silas.a.b.c = value`
/// (segments lower-cased; the value parsed by [`parse_override_value`]).
/// Variables are applied in name order so the outcome is deterministic.
/// Missing intermediate mappings (or `null` ones) are created; a non-mapping
/// intermediate is an error naming the key.
pub(crate) fn apply_overrides(
    root: &mut Value,
    env: &dyn EnvSource,
) -> Result<Vec<AppliedOverride>, ConfigError> {
    let mut vars: Vec<(String, String)> = env
        .vars()
        .filter(|(k, _)| k.starts_with(OVERRIDE_PREFIX))
        .collect();
    vars.sort();
    let mut applied = Vec::with_capacity(vars.len());
    for (var, raw) in vars {
        let tail = &var[OVERRIDE_PREFIX.len()..];
        let mut path = vec!["silas".to_owned()];
        for seg in tail.split(OVERRIDE_SEPARATOR) {
            if seg.is_empty() {
                return Err(ConfigError::parse(
                    None,
                    format!(
                        "environment variable {var}: empty key segment \
                         (expected {OVERRIDE_PREFIX}SECTION__KEY with single \"__\" separators)"
                    ),
                ));
            }
            path.push(seg.to_lowercase());
        }
        set_path(root, &path, parse_override_value(&raw), &var)?;
        applied.push(AppliedOverride { var, path });
    }
    Ok(applied)
}

fn set_path(root: &mut Value, path: &[String], value: Value, var: &str) -> Result<(), ConfigError> {
    let mut node = root;
    for (depth, seg) in path.iter().enumerate() {
        if node.is_null() {
            *node = Value::Mapping(Mapping::new());
        }
        let Value::Mapping(map) = node else {
            return Err(ConfigError::invalid(
                dotted(&path[..depth]),
                format!("cannot apply environment variable {var}: this key is not a mapping"),
            ));
        };
        let key = Value::String(seg.clone());
        if depth + 1 == path.len() {
            map.insert(key, value);
            return Ok(());
        }
        node = map.entry(key).or_insert(Value::Null);
    }
    Ok(())
}

/// Parses an override value as a YAML scalar: empty, `null`, `~` → null;
/// `true`/`false` → bool; integer or float literals → numbers; a quoted
/// string or a flow collection (`[a, b]`, `{k: v}`) → parsed as YAML;
/// anything else is taken verbatim as a string (so secrets containing `#`,
/// `: ` or spaces are never mangled by YAML comment/mapping syntax).
pub(crate) fn parse_override_value(raw: &str) -> Value {
    let t = raw.trim();
    if t.is_empty() {
        return Value::Null;
    }
    let parsed = || serde_yaml_ng::from_str::<Value>(t).ok();
    match t.as_bytes()[0] {
        b'[' | b'{' => {
            if let Some(v @ (Value::Sequence(_) | Value::Mapping(_))) = parsed() {
                return v;
            }
        }
        b'"' | b'\'' => {
            if let Some(v @ Value::String(_)) = parsed() {
                return v;
            }
        }
        _ if !t.contains(|c: char| c.is_whitespace() || c == '#') => {
            if let Some(v @ (Value::Null | Value::Bool(_) | Value::Number(_))) = parsed() {
                return v;
            }
        }
        _ => {}
    }
    Value::String(raw.to_owned())
}
