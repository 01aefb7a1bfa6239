//! Model providers (an addition to §11): OpenAI-compatible endpoints that
//! `provider:model` strings such as `openrouter:anthropic/claude-haiku-4-5`
//! resolve against.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize};

use super::error::ConfigError;

/// One OpenAI-compatible model provider.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ProviderConfig {
    /// Base URL of the OpenAI-compatible API (e.g. `https://openrouter.ai/api/v1`).
    pub base_url: String,
    /// Name of the environment variable holding the API key; `None` for
    /// providers that need no key (a local Ollama).
    pub api_key_env: Option<String>,
    /// How structured output is requested (`auto` by default).
    pub structured_output: StructuredOutputMode,
    /// Seconds one model call may take on this provider; `None` uses
    /// `llm.timeout_seconds`. CPU inference on a small server needs minutes.
    pub timeout_seconds: Option<u64>,
    /// The model's context window in tokens; `None` takes it from the
    /// server's model listing when it gives one. Prompts are fitted to it.
    pub context_window: Option<u64>,
    /// How tools are offered (`auto` by default).
    pub tool_calling: ToolCallingMode,
    /// Sampling temperature sent with every request that sets none of its
    /// own (`None`: the server's default). 0 makes a local model's answers
    /// repeatable; gate checks always use `gates.llm_defaults.temperature`.
    pub temperature: Option<f64>,
}

/// `providers.<name>.tool_calling`: how tools are offered to a provider.
/// Many local servers reject `tools` or answer with the call as text.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolCallingMode {
    /// Start native; step down to `prompt` for the rest of the process when
    /// the server rejects `tools`/`tool_choice`.
    #[default]
    Auto,
    /// OpenAI `tools` on the wire (a call written as text is still read).
    Native,
    /// No `tools` on the wire: the definitions and a JSON calling format in
    /// the system prompt, the call parsed from the answer's text.
    Prompt,
}

impl ToolCallingMode {
    pub fn as_str(self) -> &'static str {
        match self {
            ToolCallingMode::Auto => "auto",
            ToolCallingMode::Native => "native",
            ToolCallingMode::Prompt => "prompt",
        }
    }
}

/// `providers.<name>.structured_output`: how a provider is asked for JSON
/// that follows a schema. Servers differ: OpenAI, OpenRouter, vLLM,
/// llama.cpp's server and Ollama ≥ 0.5 take `json_schema`;
/// llama-cpp-python, LM Studio and older servers only `json_object`; some
/// take neither. The answer is validated on our side in every mode.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StructuredOutputMode {
    /// Start with `json_schema`; step down when the server rejects
    /// `response_format`, and remember the working mode for the process.
    #[default]
    Auto,
    /// `response_format: {type: json_schema, json_schema: …}`.
    JsonSchema,
    /// `response_format: {type: json_object}`, the schema in the prompt.
    JsonObject,
    /// No `response_format`; the schema in the system prompt and the JSON
    /// extracted from the text.
    Prompt,
}

impl StructuredOutputMode {
    pub fn as_str(self) -> &'static str {
        match self {
            StructuredOutputMode::Auto => "auto",
            StructuredOutputMode::JsonSchema => "json_schema",
            StructuredOutputMode::JsonObject => "json_object",
            StructuredOutputMode::Prompt => "prompt",
        }
    }
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
                structured_output: StructuredOutputMode::Auto,
                timeout_seconds: None,
                context_window: None,
                tool_calling: ToolCallingMode::Auto,
                temperature: None,
            },
        )
    })
    .collect()
}

/// A `provider:model` string resolved against `providers:`.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ModelEndpoint {
    /// Provider name (the part before the first `:`).
    pub provider: String,
    pub base_url: String,
    pub api_key_env: Option<String>,
    /// Provider-side model id (everything after the first `:`).
    pub model: String,
    pub structured_output: StructuredOutputMode,
    /// `providers.<name>.timeout_seconds`.
    pub timeout_seconds: Option<u64>,
    /// `providers.<name>.context_window`.
    pub context_window: Option<u64>,
    pub tool_calling: ToolCallingMode,
    /// `providers.<name>.temperature`.
    pub temperature: Option<f64>,
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
    #[serde(default)]
    structured_output: Option<StructuredOutputMode>,
    #[serde(default)]
    timeout_seconds: Option<u64>,
    #[serde(default)]
    context_window: Option<u64>,
    tool_calling: Option<ToolCallingMode>,
    #[serde(default)]
    temperature: Option<f64>,
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
            None => builtin.as_ref().and_then(|b| b.api_key_env.clone()),
        };
        let structured_output = entry
            .structured_output
            .or_else(|| builtin.as_ref().map(|b| b.structured_output))
            .unwrap_or_default();
        let tool_calling = entry
            .tool_calling
            .or_else(|| builtin.as_ref().map(|b| b.tool_calling))
            .unwrap_or_default();
        out.insert(
            name,
            ProviderConfig {
                base_url,
                api_key_env,
                structured_output,
                timeout_seconds: entry
                    .timeout_seconds
                    .or_else(|| builtin.as_ref().and_then(|b| b.timeout_seconds)),
                context_window: entry
                    .context_window
                    .or_else(|| builtin.as_ref().and_then(|b| b.context_window)),
                tool_calling,
                temperature: entry
                    .temperature
                    .or_else(|| builtin.as_ref().and_then(|b| b.temperature)),
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
    if provider == super::operations::OFFLINE_PROVIDER {
        // The built-in rule-based responder: no endpoint, no key.
        return Ok(ModelEndpoint {
            provider: provider.to_owned(),
            base_url: String::new(),
            api_key_env: None,
            model: model.to_owned(),
            structured_output: StructuredOutputMode::Prompt,
            timeout_seconds: None,
            context_window: None,
            tool_calling: ToolCallingMode::Prompt,
            temperature: None,
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
        structured_output: p.structured_output,
        timeout_seconds: p.timeout_seconds,
        context_window: p.context_window,
        tool_calling: p.tool_calling,
        temperature: p.temperature,
    })
}

pub(crate) fn model_error(spec: &str, message: String) -> ConfigError {
    ConfigError::Model {
        spec: spec.to_owned(),
        message,
    }
}

#[cfg(test)]
mod tests {
    use crate::Coded;
    use crate::config::{Config, MapEnv};

    use super::*;

    fn load(yaml: &str) -> Result<Config, super::super::ConfigError> {
        Config::from_yaml_str(yaml, &MapEnv::new())
    }

    #[test]
    fn structured_output_defaults_to_auto_and_parses_each_mode() {
        let cfg = load("silas: {}\n").unwrap();
        for p in cfg.providers.values() {
            assert_eq!(p.structured_output, StructuredOutputMode::Auto);
        }
        for (text, want) in [
            ("auto", StructuredOutputMode::Auto),
            ("json_schema", StructuredOutputMode::JsonSchema),
            ("json_object", StructuredOutputMode::JsonObject),
            ("prompt", StructuredOutputMode::Prompt),
        ] {
            let yaml = format!(
                "silas:\n  providers:\n    local: {{ base_url: \"http://127.0.0.1:8080/v1\", structured_output: {text} }}\n    ollama: {{ structured_output: {text} }}\n  models:\n    proxy: \"local:m\"\n"
            );
            let cfg = load(&yaml).unwrap();
            assert_eq!(cfg.providers["local"].structured_output, want, "{text}");
            // A partially given built-in keeps its base URL.
            assert_eq!(cfg.providers["ollama"].structured_output, want);
            assert_eq!(
                cfg.providers["ollama"].base_url,
                "http://127.0.0.1:11434/v1"
            );
            let e = cfg.resolve_model(&cfg.models.proxy).unwrap();
            assert_eq!(e.structured_output, want);
            assert_eq!(want.as_str(), text);
        }
    }

    #[test]
    fn tool_calling_defaults_to_auto_and_parses_each_mode() {
        let cfg = load("silas: {}\n").unwrap();
        for p in cfg.providers.values() {
            assert_eq!(p.tool_calling, ToolCallingMode::Auto);
        }
        for (text, want) in [
            ("auto", ToolCallingMode::Auto),
            ("native", ToolCallingMode::Native),
            ("prompt", ToolCallingMode::Prompt),
        ] {
            let yaml = format!(
                "silas:\n  providers:\n    local: {{ base_url: \"http://127.0.0.1:8080/v1\", tool_calling: {text} }}\n    ollama: {{ tool_calling: {text} }}\n  models:\n    proxy: \"local:m\"\n"
            );
            let cfg = load(&yaml).unwrap();
            assert_eq!(cfg.providers["local"].tool_calling, want, "{text}");
            assert_eq!(cfg.providers["ollama"].tool_calling, want);
            assert_eq!(
                cfg.providers["ollama"].base_url,
                "http://127.0.0.1:11434/v1"
            );
            let e = cfg.resolve_model(&cfg.models.proxy).unwrap();
            assert_eq!(e.tool_calling, want);
            assert_eq!(want.as_str(), text);
        }
        let e = load("silas:\n  providers:\n    ollama: { tool_calling: xml }\n").unwrap_err();
        assert_eq!(e.key(), Some("providers.ollama.tool_calling"), "{e}");
        assert!(e.code().as_str().starts_with("E_CFG_"), "{e}");
    }

    #[test]
    fn a_bad_structured_output_value_names_the_key() {
        let e = load("silas:\n  providers:\n    ollama: { structured_output: xml }\n").unwrap_err();
        assert_eq!(e.key(), Some("providers.ollama.structured_output"), "{e}");
        assert!(e.code().as_str().starts_with("E_CFG_"), "{e}");
        assert!(
            e.to_string()
                .starts_with("providers.ollama.structured_output"),
            "{e}"
        );
    }
}
