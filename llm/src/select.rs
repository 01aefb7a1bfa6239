//! Which provider `silas start` uses. If any configured model names the
//! `offline` provider, or a model's provider needs an API key whose
//! environment variable is unset and `llm.offline_fallback` is true, every
//! agent runs on the offline responder (mixing a real proxy with an offline
//! planner would be confusing) and the startup line says why. With the
//! fallback disabled a missing key is an error.

use std::collections::BTreeMap;
use std::sync::Arc;

use silas_core::config::{Config, EnvSource, OFFLINE_PROVIDER};

use crate::agents::Agents;
use crate::error::LlmError;
use crate::negotiate::EventSink;
use crate::offline::OfflineProvider;
use crate::openai::OpenAiProvider;
use crate::provider::{Provider, RetryPolicy};

/// The decision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProviderChoice {
    /// Real OpenAI-compatible endpoints (the distinct `provider` names used).
    Remote { providers: Vec<String> },
    /// The rule-based offline responder, and why.
    Offline { reason: String },
}

impl ProviderChoice {
    pub fn is_offline(&self) -> bool {
        matches!(self, ProviderChoice::Offline { .. })
    }

    /// The one startup line `silas start` prints.
    pub fn startup_line(&self, cfg: &Config) -> String {
        match self {
            ProviderChoice::Offline { reason } => {
                format!("model: offline ({reason}) — rule-based responder, not an LLM")
            }
            ProviderChoice::Remote { .. } => format!(
                "model: {} (proxy), {} (planner), {} (executor), {} (scorer)",
                cfg.models.proxy, cfg.models.planner, cfg.models.executor, cfg.models.scorer
            ),
        }
    }
}

/// Decides from the configuration and the environment (no I/O beyond `env`).
pub fn choose_provider(cfg: &Config, env: &dyn EnvSource) -> Result<ProviderChoice, LlmError> {
    let mut providers = Vec::new();
    for spec in [
        &cfg.models.proxy,
        &cfg.models.planner,
        &cfg.models.executor,
        &cfg.models.scorer,
    ] {
        let endpoint = cfg.resolve_model(spec).map_err(|e| LlmError::Api {
            status: None,
            message: e.to_string(),
        })?;
        if endpoint.provider == OFFLINE_PROVIDER {
            return Ok(ProviderChoice::Offline {
                reason: format!("configured as {spec}"),
            });
        }
        if let Some(var) = &endpoint.api_key_env
            && env.var(var).is_none_or(|v| v.trim().is_empty())
        {
            if cfg.llm.offline_fallback {
                return Ok(ProviderChoice::Offline {
                    reason: format!("no {var} set"),
                });
            }
            return Err(LlmError::MissingKey {
                provider: endpoint.provider,
                var: var.clone(),
            });
        }
        if !providers.contains(&endpoint.provider) {
            providers.push(endpoint.provider);
        }
    }
    Ok(ProviderChoice::Remote { providers })
}

/// The offline responder configured for this config's profiles.
pub fn offline_provider(cfg: &Config) -> OfflineProvider {
    let work = if cfg.context.profiles.contains_key("coding") {
        "coding".to_owned()
    } else {
        cfg.context.default_profile.clone()
    };
    OfflineProvider::new(cfg.context.default_profile.clone(), work)
}

/// Builds the agents for `choice`: one shared provider per provider name.
pub fn build_agents(
    cfg: &Config,
    env: &dyn EnvSource,
    choice: &ProviderChoice,
) -> Result<Agents, LlmError> {
    build_agents_with_events(cfg, env, choice, None)
}

/// [`build_agents`], with every HTTP provider reporting its [`LlmEvent`]s
/// (structured-mode downgrades) to `events`.
///
/// [`LlmEvent`]: crate::negotiate::LlmEvent
pub fn build_agents_with_events(
    cfg: &Config,
    env: &dyn EnvSource,
    choice: &ProviderChoice,
    events: Option<EventSink>,
) -> Result<Agents, LlmError> {
    if choice.is_offline() {
        let offline: Arc<dyn Provider> = Arc::new(offline_provider(cfg));
        return Agents::from_config(cfg, |_| Ok((offline.clone(), "rules".to_owned())));
    }
    let policy = RetryPolicy::from_config(&cfg.llm);
    let mut built: BTreeMap<String, Arc<dyn Provider>> = BTreeMap::new();
    Agents::from_config(cfg, |spec| {
        let endpoint = cfg.resolve_model(spec).map_err(|e| LlmError::Api {
            status: None,
            message: e.to_string(),
        })?;
        let provider = match built.get(&endpoint.provider) {
            Some(p) => p.clone(),
            None => {
                let mut http = OpenAiProvider::from_endpoint(&endpoint, env, policy)?;
                if let Some(sink) = &events {
                    http = http.with_events(sink.clone());
                }
                let p: Arc<dyn Provider> = Arc::new(http);
                built.insert(endpoint.provider.clone(), p.clone());
                p
            }
        };
        Ok((provider, endpoint.model))
    })
}

#[cfg(test)]
mod tests {
    use silas_core::config::MapEnv;

    use super::*;

    #[test]
    fn choice_table() {
        let with_models = |spec: &str| {
            let mut c = Config::default();
            c.models.proxy = spec.into();
            c.models.planner = spec.into();
            c.models.executor = spec.into();
            c.models.scorer = spec.into();
            c
        };
        let no_fallback = {
            let mut c = Config::default();
            c.llm.offline_fallback = false;
            c
        };
        let key = MapEnv::new().with("OPENROUTER_API_KEY", "sk-test");
        let blank = MapEnv::new().with("OPENROUTER_API_KEY", "  ");
        let none = MapEnv::new();
        let cases: Vec<(&str, Config, &MapEnv, Result<ProviderChoice, ()>)> = vec![
            (
                "key set",
                Config::default(),
                &key,
                Ok(ProviderChoice::Remote {
                    providers: vec!["openrouter".into()],
                }),
            ),
            (
                "key missing",
                Config::default(),
                &none,
                Ok(ProviderChoice::Offline {
                    reason: "no OPENROUTER_API_KEY set".into(),
                }),
            ),
            (
                "key blank",
                Config::default(),
                &blank,
                Ok(ProviderChoice::Offline {
                    reason: "no OPENROUTER_API_KEY set".into(),
                }),
            ),
            ("fallback off", no_fallback, &none, Err(())),
            (
                "ollama needs no key",
                with_models("ollama:llama3"),
                &none,
                Ok(ProviderChoice::Remote {
                    providers: vec!["ollama".into()],
                }),
            ),
            (
                "offline configured",
                with_models("offline:rules"),
                &key,
                Ok(ProviderChoice::Offline {
                    reason: "configured as offline:rules".into(),
                }),
            ),
        ];
        for (name, cfg, env, want) in cases {
            let got = choose_provider(&cfg, env).map_err(|_| ());
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn startup_line_is_honest() {
        let cfg = Config::default();
        let c = choose_provider(&cfg, &MapEnv::new()).unwrap();
        assert_eq!(
            c.startup_line(&cfg),
            "model: offline (no OPENROUTER_API_KEY set) — rule-based responder, not an LLM"
        );
        let agents = build_agents(&cfg, &MapEnv::new(), &c).unwrap();
        assert!(agents.is_offline());
        let c = choose_provider(&cfg, &MapEnv::new().with("OPENROUTER_API_KEY", "k")).unwrap();
        assert!(
            c.startup_line(&cfg)
                .starts_with("model: openrouter:anthropic/claude-haiku-4-5 (proxy)")
        );
        let agents =
            build_agents(&cfg, &MapEnv::new().with("OPENROUTER_API_KEY", "k"), &c).unwrap();
        assert!(!agents.is_offline());
        assert!(
            !format!("{agents:?}").contains("\"k\""),
            "the key is never in Debug output"
        );
    }
}
