//! Model providers (an addition to §11): OpenAI-compatible endpoints that
//! `provider:model` strings such as `openrouter:anthropic/claude-haiku-4-5`
//! resolve against.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize};

use super::error::ConfigError;

/// One OpenAI-compatible model provider.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ProviderConfig {
    /// Base URL of the OpenAI-compatible API (e.g. `https://openrouter.ai/api/v1`).
    pub base_url: String,
    /// Name of the environment variable holding the API key; `None` for
    /// providers that need no key (a local Ollama).
    pub api_key_env: Option<String>,
}

/// The built-in providers, merged into `providers:` when absent:
/// `openrouter`, `openai` and `ollama`.
pub fn builtin_providers() -> BTreeMap<String, ProviderConfig> {
    [
        (
            "openrouter",
            "https://openrouter.ai/api/v1",
            Some("OPENROUTER_API_KEY"),
        ),
        (
            "openai",
            "https://api.openai.com/v1",
            Some("OPENAI_API_KEY"),
        ),
        ("ollama", "http://127.0.0.1:11434/v1", None),
    ]
    .into_iter()
    .map(|(name, url, key)| {
        (
            name.to_owned(),
            ProviderConfig {
                base_url: url.to_owned(),
                api_key_env: key.map(str::to_owned),
            },
        )
    })
    .collect()
}

/// A `provider:model` string resolved against `providers:`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ModelEndpoint {
    /// Provider name (the part before the first `:`).
    pub provider: String,
    pub base_url: String,
    pub api_key_env: Option<String>,
    /// Provider-side model id (everything after the first `:`).
    pub model: String,
}

/// The on-disk shape of a provider entry. For a built-in provider a missing
/// field keeps the built-in value (an explicit `api_key_env: null` removes
/// the key); a custom provider must give `base_url` (checked by validation,
/// which sees an empty string here).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ProviderEntry {
    #[serde(default)]
    base_url: Option<String>,
    #[serde(default, deserialize_with = "present")]
    api_key_env: Option<Option<String>>,
}

/// Distinguishes "absent" (`None`, via `default`) from "explicitly null"
/// (`Some(None)`).
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(d).map(Some)
}

/// `deserialize_with` for `providers:`: the user's entries merged over the
/// built-ins.
pub(crate) fn deserialize_providers<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<String, ProviderConfig>, D::Error> {
    let entries = BTreeMap::<String, ProviderEntry>::deserialize(d)?;
    let mut out = builtin_providers();
    for (name, entry) in entries {
        let builtin = out.remove(&name);
        let base_url = entry
            .base_url
            .or_else(|| builtin.as_ref().map(|b| b.base_url.clone()))
            .unwrap_or_default();
        let api_key_env = match entry.api_key_env {
            Some(explicit) => explicit,
            None => builtin.and_then(|b| b.api_key_env),
        };
        out.insert(
            name,
            ProviderConfig {
                base_url,
                api_key_env,
            },
        );
    }
    Ok(out)
}

/// Splits `provider:model` at the first `:` and looks the provider up. The
/// reserved provider `offline` resolves to an endpoint with an empty
/// `base_url` and no key.
/// The error is the bare rule text; callers attach the key or the spec.
pub(crate) fn resolve(
    providers: &BTreeMap<String, ProviderConfig>,
    spec: &str,
) -> Result<ModelEndpoint, String> {
    let Some((provider, model)) = spec.split_once(':') else {
        return Err(format!(
            "expected \"provider:model\" (e.g. \"openrouter:anthropic/claude-haiku-4-5\"), got {spec:?}"
        ));
    };
    if provider.is_empty() || model.is_empty() {
        return Err(format!(
            "expected \"provider:model\" with both parts non-empty, got {spec:?}"
        ));
    }
    if provider == super::sections::OFFLINE_PROVIDER {
        // The built-in rule-based responder: no endpoint, no key.
        return Ok(ModelEndpoint {
            provider: provider.to_owned(),
            base_url: String::new(),
            api_key_env: None,
            model: model.to_owned(),
        });
    }
    let Some(p) = providers.get(provider) else {
        let known: Vec<&str> = providers.keys().map(String::as_str).collect();
        return Err(format!(
            "unknown provider {provider:?} in {spec:?} (configured providers: {})",
            known.join(", ")
        ));
    };
    Ok(ModelEndpoint {
        provider: provider.to_owned(),
        base_url: p.base_url.clone(),
        api_key_env: p.api_key_env.clone(),
        model: model.to_owned(),
    })
}

pub(crate) fn model_error(spec: &str, message: String) -> ConfigError {
    ConfigError::Model {
        spec: spec.to_owned(),
        message,
    }
}
