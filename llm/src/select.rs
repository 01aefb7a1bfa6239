//! Which provider `silas start` uses. If any configured model names the
//! `offline` provider, or a model's provider needs an API key whose
//! environment variable is unset and `llm.offline_fallback` is true, every
//! agent runs on the offline responder (mixing a real proxy with an offline
//! planner would be confusing) and the startup line says why. With the
//! fallback disabled a missing key is an error.

use std::collections::BTreeMap;
use std::sync::Arc;

use silas_core::config::{Config, EnvSource, OFFLINE_PROVIDER};

use crate::agents::{Agent, Agents};
use crate::chain::{BreakerBoard, BreakerPolicy, ChainProvider, Member};
use crate::error::LlmError;
use crate::judge::{GateModel, GateModelBinding};
use crate::negotiate::EventSink;
use crate::offline::OfflineProvider;
use crate::openai::OpenAiProvider;
use crate::provider::{Provider, RetryPolicy};
use crate::structured::CallKind;

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

/// Whether a chain member can be called: its key variable (if any) is set.
fn has_key(endpoint: &silas_core::config::ModelEndpoint, env: &dyn EnvSource) -> bool {
    endpoint
        .api_key_env
        .as_ref()
        .is_none_or(|var| env.var(var).is_some_and(|v| !v.trim().is_empty()))
}

/// Decides from the configuration and the environment (no I/O beyond `env`).
/// A fallback chain needs one member with its key; members without theirs
/// are left out of the chain.
pub fn choose_provider(cfg: &Config, env: &dyn EnvSource) -> Result<ProviderChoice, LlmError> {
    let mut providers = Vec::new();
    // Roles whose every model lacks its key, with the first such variable.
    let mut keyless: Vec<(&str, silas_core::config::ModelEndpoint)> = Vec::new();
    for (role, spec) in [
        ("proxy", &cfg.models.proxy),
        ("planner", &cfg.models.planner),
        ("executor", &cfg.models.executor),
        ("scorer", &cfg.models.scorer),
    ] {
        let mut usable = Vec::new();
        let mut missing = None;
        for member in Config::model_chain(spec) {
            let endpoint = cfg.resolve_model(member).map_err(|e| LlmError::Api {
                status: None,
                message: e.to_string(),
            })?;
            if endpoint.provider == OFFLINE_PROVIDER {
                return Ok(ProviderChoice::Offline {
                    reason: format!("configured as {member}"),
                });
            }
            if has_key(&endpoint, env) {
                usable.push(endpoint.provider);
            } else if missing.is_none() {
                missing = Some(endpoint);
            }
        }
        if usable.is_empty() {
            let Some(endpoint) = missing else {
                return Err(LlmError::Api {
                    status: None,
                    message: format!("{spec:?} names no provider:model"),
                });
            };
            keyless.push((role, endpoint));
            continue;
        }
        for p in usable {
            if !providers.contains(&p) {
                providers.push(p);
            }
        }
    }
    let Some((_, endpoint)) = keyless.first() else {
        return Ok(ProviderChoice::Remote { providers });
    };
    let var = endpoint.api_key_env.clone().unwrap_or_default();
    if !cfg.llm.offline_fallback {
        return Err(LlmError::MissingKey {
            provider: endpoint.provider.clone(),
            var,
        });
    }
    // Some roles ready and some not (a local model set for the proxy and
    // the planner only): say which still point where, or the owner never
    // learns why the local server is not used.
    let reason = if providers.is_empty() {
        format!("no {var} set")
    } else {
        let roles: Vec<String> = keyless
            .iter()
            .map(|(role, e)| {
                format!(
                    "models.{role} ({}, {})",
                    e.provider,
                    e.api_key_env.as_deref().unwrap_or_default()
                )
            })
            .collect();
        format!(
            "no API key for {}; every role needs a usable model: set the key or point \
             the role at a configured one",
            roles.join(", ")
        )
    };
    Ok(ProviderChoice::Offline { reason })
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
    build_agents_with_board(cfg, env, choice, events).map(|(agents, _)| agents)
}

/// [`build_agents_with_events`], plus the providers' circuit breakers (for
/// `/health` and `silas status`). Every role runs through a
/// [`ChainProvider`] over its `models.<role>` members — one provider or an
/// ordered fallback list — sharing one breaker per provider.
pub fn build_agents_with_board(
    cfg: &Config,
    env: &dyn EnvSource,
    choice: &ProviderChoice,
    events: Option<EventSink>,
) -> Result<(Agents, Arc<BreakerBoard>), LlmError> {
    let board = Arc::new(BreakerBoard::new(
        BreakerPolicy::from_config(&cfg.llm),
        events.clone(),
    ));
    if choice.is_offline() {
        let offline: Arc<dyn Provider> = Arc::new(offline_provider(cfg));
        let agents = Agents::from_config(cfg, |_| Ok((offline.clone(), "rules".to_owned())))?;
        return Ok((agents, board));
    }
    let mut chains = Chains {
        cfg,
        env,
        board: board.clone(),
        events,
        built: BTreeMap::new(),
    };
    // With every provider of the proxy or planner open, the labelled
    // offline responder answers instead — where offline_fallback allows it.
    let resort: Option<Arc<dyn Provider>> = cfg
        .llm
        .offline_fallback
        .then(|| Arc::new(offline_provider(cfg).standing_in()) as Arc<dyn Provider>);
    let mut agents = Agents::from_config_by_role(cfg, |role, spec| {
        let (mut chain, first) = chains.chain(spec)?;
        if let (CallKind::Proxy | CallKind::Planner, Some(r)) = (role, &resort) {
            chain = chain.with_last_resort(r.clone());
        }
        Ok((Arc::new(chain) as Arc<dyn Provider>, first))
    })?;
    // LLM gates (§5.5.3) are optional: without a usable member the gates
    // that name them fail (open, or closed when promoted), the daemon runs.
    let defaults = &cfg.gates.llm_defaults;
    agents.gate_model = match chains.chain(&defaults.model) {
        Ok((chain, model)) => GateModelBinding::Bound(GateModel {
            agent: Agent::priced(cfg, &defaults.model, Arc::new(chain), model),
            temperature: defaults.temperature as f32,
            max_tokens: defaults.max_tokens,
        }),
        Err(e) => GateModelBinding::Unavailable(format!(
            "no model for gates.llm_defaults.model ({}): {e}",
            defaults.model
        )),
    };
    Ok((agents, board))
}

/// Builds role chains over one HTTP provider per provider name.
struct Chains<'a> {
    cfg: &'a Config,
    env: &'a dyn EnvSource,
    board: Arc<BreakerBoard>,
    events: Option<EventSink>,
    built: BTreeMap<String, Arc<dyn Provider>>,
}

impl Chains<'_> {
    /// The chain over `spec`'s members that have their key, and the first
    /// member's model id.
    fn chain(&mut self, spec: &str) -> Result<(ChainProvider, String), LlmError> {
        let mut members = Vec::new();
        for member in Config::model_chain(spec) {
            let endpoint = self.cfg.resolve_model(member).map_err(|e| LlmError::Api {
                status: None,
                message: e.to_string(),
            })?;
            // A member without its key is left out (choose_provider made
            // sure one member of each role's chain has one).
            if !has_key(&endpoint, self.env) {
                continue;
            }
            let provider = match self.built.get(&endpoint.provider) {
                Some(p) => p.clone(),
                None => {
                    let policy = RetryPolicy::for_endpoint(&self.cfg.llm, &endpoint);
                    let mut http = OpenAiProvider::from_endpoint(&endpoint, self.env, policy)?;
                    if let Some(sink) = &self.events {
                        http = http.with_events(sink.clone());
                    }
                    let p: Arc<dyn Provider> = Arc::new(http);
                    self.built.insert(endpoint.provider.clone(), p.clone());
                    p
                }
            };
            members.push(Member {
                provider,
                model: endpoint.model,
            });
        }
        let first = members
            .first()
            .map(|m| m.model.clone())
            .ok_or_else(|| LlmError::Api {
                status: None,
                message: format!("{spec:?} names no provider:model with its API key set"),
            })?;
        Ok((ChainProvider::new(members, self.board.clone()), first))
    }
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
        // A local model for some roles only: the reason names the roles
        // still pointing at a provider without its key.
        let mut half = Config::default();
        half.models.proxy = "ollama:llama3".into();
        half.models.planner = "ollama:llama3".into();
        let Ok(ProviderChoice::Offline { reason }) = choose_provider(&half, &none) else {
            panic!("half-configured roles run offline");
        };
        assert_eq!(
            reason,
            "no API key for models.executor (openrouter, OPENROUTER_API_KEY), models.scorer \
             (openrouter, OPENROUTER_API_KEY); every role needs a usable model: set the key or \
             point the role at a configured one"
        );
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
