//! The typed sections of `silas.yaml` (§11) that govern operation: limits
//! and backpressure, the sandbox, the keystore, approvals, connections,
//! gates, the scheduler, skills and the model client. Same rules as
//! `sections.rs`: unknown keys denied, missing keys from `Default`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::sections::{HAIKU, SONNET, s, strings};

// ---------------------------------------------------------------------------
// limits / backpressure

/// `limits:` — per-scope / per-IP rate limits (§18.5). All must be > 0.
/// The spec names the keys it lists; two are Silas's own because §18.5
/// requires the limit but §11 gives it no key: `card_submissions_per_minute_per_scope`
/// (approval/card answers) and `llm_calls_per_minute_global` (the global
/// model-call cap, which must be at least the per-scope allowance).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsConfig {
    pub ws_messages_per_minute_per_scope: u32,
    pub ws_messages_per_minute_per_ip: u32,
    pub card_submissions_per_minute_per_scope: u32,
    pub llm_calls_per_minute_per_scope: u32,
    pub llm_calls_per_minute_global: u32,
    pub web_search_calls_per_minute_per_scope: u32,
    pub memory_ops_per_minute_per_scope: u32,
    pub max_memory_ops_per_turn: u32,
    pub max_gate_evals_per_turn: u32,
    pub suggestions_per_hour_per_scope: u32,
    pub autonomy_proposals_per_week_per_scope: u32,
    /// Chatbot customers' open WebSocket connections from one address (an
    /// IPv6 /64); Silas's own, like the next (a customer needs no
    /// credential, so these bound what anyone reaching the port may hold).
    pub customer_connections_per_ip: u32,
    /// Chatbot customers' open WebSocket connections in all.
    pub customer_connections_total: u32,
    /// The most a plan may budget for itself. The model writes a plan's
    /// `budget:`; without a ceiling it could approve itself a runaway bill
    /// in the card's small print. A plan over it is refused before any card.
    pub plan_budget_ceiling: PlanBudgetCeiling,
}

/// `limits.plan_budget_ceiling` — each field bounds the same field of a
/// plan's `budget:` (a goal's applies per cycle). Defaults: ten times the
/// default plan budget in tokens and cost, four hours, ten attempts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PlanBudgetCeiling {
    pub max_tokens: u64,
    pub max_cost_usd: f64,
    pub max_wall_time_seconds: u64,
    pub max_attempts: u64,
    pub max_planner_calls: u64,
}

impl Default for PlanBudgetCeiling {
    fn default() -> Self {
        PlanBudgetCeiling {
            max_tokens: 2_000_000,
            max_cost_usd: 20.0,
            max_wall_time_seconds: 4 * 3600,
            max_attempts: 10,
            max_planner_calls: 10,
        }
    }
}

impl PlanBudgetCeiling {
    /// Every field of `budget` above its ceiling, as `field value > ceiling`
    /// (empty: within). A cost that is not a number is over.
    pub fn excess(&self, budget: &crate::model::work::Budget) -> Vec<String> {
        let asked = [
            budget.max_tokens,
            budget.max_wall_time_seconds,
            budget.max_attempts,
            budget.max_planner_calls,
        ];
        let mut over: Vec<String> = self
            .counts()
            .into_iter()
            .zip(asked)
            .filter(|((_, max), v)| v > max)
            .map(|((name, max), v)| format!("{name} {v} > {max}"))
            .collect();
        let cost = budget.max_cost_usd;
        if cost.is_nan() || cost > self.max_cost_usd {
            over.push(format!("max_cost_usd {cost} > {}", self.max_cost_usd));
        }
        over
    }

    /// The whole-number ceilings by key (all but the cost), for
    /// [`Self::excess`] and the config check.
    pub fn counts(&self) -> [(&'static str, u64); 4] {
        [
            ("max_tokens", self.max_tokens),
            ("max_wall_time_seconds", self.max_wall_time_seconds),
            ("max_attempts", self.max_attempts),
            ("max_planner_calls", self.max_planner_calls),
        ]
    }
}

impl LimitsConfig {
    pub fn fields(&self) -> [(&'static str, u32); 13] {
        [
            (
                "ws_messages_per_minute_per_scope",
                self.ws_messages_per_minute_per_scope,
            ),
            (
                "ws_messages_per_minute_per_ip",
                self.ws_messages_per_minute_per_ip,
            ),
            (
                "card_submissions_per_minute_per_scope",
                self.card_submissions_per_minute_per_scope,
            ),
            (
                "llm_calls_per_minute_per_scope",
                self.llm_calls_per_minute_per_scope,
            ),
            (
                "llm_calls_per_minute_global",
                self.llm_calls_per_minute_global,
            ),
            (
                "web_search_calls_per_minute_per_scope",
                self.web_search_calls_per_minute_per_scope,
            ),
            (
                "memory_ops_per_minute_per_scope",
                self.memory_ops_per_minute_per_scope,
            ),
            ("max_memory_ops_per_turn", self.max_memory_ops_per_turn),
            ("max_gate_evals_per_turn", self.max_gate_evals_per_turn),
            (
                "suggestions_per_hour_per_scope",
                self.suggestions_per_hour_per_scope,
            ),
            (
                "autonomy_proposals_per_week_per_scope",
                self.autonomy_proposals_per_week_per_scope,
            ),
            (
                "customer_connections_per_ip",
                self.customer_connections_per_ip,
            ),
            (
                "customer_connections_total",
                self.customer_connections_total,
            ),
        ]
    }
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            ws_messages_per_minute_per_scope: 60,
            ws_messages_per_minute_per_ip: 120,
            card_submissions_per_minute_per_scope: 30,
            llm_calls_per_minute_per_scope: 30,
            llm_calls_per_minute_global: 300,
            web_search_calls_per_minute_per_scope: 20,
            memory_ops_per_minute_per_scope: 120,
            max_memory_ops_per_turn: 10,
            max_gate_evals_per_turn: 32,
            suggestions_per_hour_per_scope: 6,
            autonomy_proposals_per_week_per_scope: 3,
            customer_connections_per_ip: 32,
            customer_connections_total: 1000,
            plan_budget_ceiling: PlanBudgetCeiling::default(),
        }
    }
}

/// `backpressure:` — bounded turn queues and shutdown grace.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BackpressureConfig {
    pub max_pending_turns_per_scope: u32,
    pub max_pending_turns_total: u32,
    /// May be 0 (stop immediately).
    pub shutdown_grace_seconds: u64,
    /// A chatbot scope whose last connection closed releases its turn
    /// processor after this long with nothing queued (issue #19); its
    /// state stays in the store and comes back with the next message.
    /// May be 0 (at the next sweep).
    pub idle_scope_release_seconds: u64,
}

impl Default for BackpressureConfig {
    fn default() -> Self {
        BackpressureConfig {
            max_pending_turns_per_scope: 20,
            max_pending_turns_total: 500,
            shutdown_grace_seconds: 30,
            idle_scope_release_seconds: 300,
        }
    }
}

// ---------------------------------------------------------------------------
// sandbox

/// `sandbox.backend`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SandboxBackend {
    #[default]
    Subprocess,
    Docker,
}

/// `sandbox:` — executor/verification sandbox.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SandboxConfig {
    pub backend: SandboxBackend,
    pub base_image: String,
    pub default_memory_mb: u32,
    pub default_cpu_seconds: u32,
    /// Where executors' work dirs and verification dirs live. `None` means
    /// `{data_dir}/sandbox`, or — for a root daemon whose data dir's parents
    /// the sandbox user cannot traverse (a checkout under `/root`) — a
    /// per-data-dir directory under `/var/lib/silas/sandbox`; use
    /// [`Config::sandbox_root`](super::Config::sandbox_root).
    pub root_dir: Option<std::path::PathBuf>,
    /// `None` means `{sandbox root}/verify`; use
    /// [`Config::verify_dir`](super::Config::verify_dir).
    pub verify_dir: Option<std::path::PathBuf>,
    /// `None` means `{data_dir}/customer_context`; use
    /// [`Config::customer_context_dir`](super::Config::customer_context_dir).
    pub customer_context_dir: Option<std::path::PathBuf>,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        SandboxConfig {
            backend: SandboxBackend::Subprocess,
            base_image: s("python:3.12-slim"),
            default_memory_mb: 512,
            default_cpu_seconds: 60,
            root_dir: None,
            verify_dir: None,
            customer_context_dir: None,
        }
    }
}

// ---------------------------------------------------------------------------
// keystore

/// `keystore.backend`: where the owner's Ed25519 signing key lives (§5.8).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeystoreBackend {
    /// A 0600 file (`keystore.path`), encrypted when a key-encryption key
    /// is available. Works on headless servers.
    #[default]
    File,
    /// The OS keystore (Secret Service over D-Bus); needs a desktop session.
    Keyring,
}

impl KeystoreBackend {
    pub fn as_str(self) -> &'static str {
        match self {
            KeystoreBackend::File => "file",
            KeystoreBackend::Keyring => "keyring",
        }
    }
}

/// `keystore:` — the owner signing key's store. Not in the spec's YAML: §5.8
/// names only the OS keyring, which a headless server often lacks.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KeystoreConfig {
    pub backend: KeystoreBackend,
    /// Key file for the `file` backend. `None` means
    /// `{data_dir}/keys/owner.key`; use
    /// [`Config::keystore_path`](super::Config::keystore_path).
    pub path: Option<std::path::PathBuf>,
    /// Environment variable holding the key-encryption key (the second
    /// source, after the systemd credential).
    pub kek_env: String,
    /// File name of the key-encryption key in `$CREDENTIALS_DIRECTORY`
    /// (systemd `LoadCredential=`), looked up first.
    pub kek_credential: String,
}

impl Default for KeystoreConfig {
    fn default() -> Self {
        KeystoreConfig {
            backend: KeystoreBackend::File,
            path: None,
            kek_env: s("SILAS_KEYSTORE_KEK"),
            kek_credential: s("silas-kek"),
        }
    }
}

// ---------------------------------------------------------------------------
// approval / nonce store / connections / batch review / autonomy

/// Approval-strength tiers in increasing order (§5: `tap < biometric <
/// biometric_confirm`). This spec issues `tap` only.
pub const APPROVAL_STRENGTHS: [&str; 3] = ["tap", "biometric", "biometric_confirm"];

/// Risk levels (§0.5 / §3.6) allowed in `approval.auto_approve_risk_levels`.
pub const RISK_LEVELS: [&str; 4] = ["low", "medium", "high", "irreversible"];

/// `approval:`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ApprovalConfig {
    pub default_ttl_minutes: u32,
    /// Lifetime of a goal's standing approval (every cycle re-checks it;
    /// past it the goal stops and asks to be renewed). Silas addition:
    /// the spec leaves the standing expiry window to policy (§14).
    pub standing_ttl_minutes: u32,
    pub max_executions: u32,
    /// Values from [`RISK_LEVELS`].
    pub auto_approve_risk_levels: Vec<String>,
    /// Approval scope → minimum strength (a value from [`APPROVAL_STRENGTHS`]).
    pub scope_min_strength: BTreeMap<String, String>,
    /// How long a plan card (and any other decision card) waits for the
    /// owner before it resolves to its safe default (§8.1: 300 s).
    pub plan_card_timeout_seconds: u64,
    /// How long a gate approval or checkpoint card waits before it resolves
    /// to `block` (§8.1: 120 s).
    pub gate_card_timeout_seconds: u64,
    /// How long an applied workspace change set can still be undone from
    /// its post-execution card (§0.5.5: 5 minutes, configurable).
    pub undo_window_seconds: u64,
}

impl Default for ApprovalConfig {
    fn default() -> Self {
        ApprovalConfig {
            default_ttl_minutes: 30,
            standing_ttl_minutes: 30 * 24 * 60,
            max_executions: 1,
            auto_approve_risk_levels: Vec::new(),
            scope_min_strength: [
                "self_update",
                "connection_act",
                "connection_manage",
                "autonomy_threshold",
                "skill_install",
            ]
            .into_iter()
            .map(|k| (k.to_owned(), s("tap")))
            .collect(),
            plan_card_timeout_seconds: 300,
            gate_card_timeout_seconds: 120,
            undo_window_seconds: 300,
        }
    }
}

/// `nonce_store:` — replay protection; the TTL must cover the approval TTL.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NonceStoreConfig {
    pub ttl_minutes: u32,
    pub prune_interval_minutes: u32,
}

impl Default for NonceStoreConfig {
    fn default() -> Self {
        NonceStoreConfig {
            ttl_minutes: 40,
            prune_interval_minutes: 10,
        }
    }
}

/// `connections:`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConnectionsConfig {
    pub health_check_default: String,
    pub auto_recovery_enabled: bool,
    pub recovery_max_attempts: u32,
    /// Host name → addresses the egress proxy of connection scripts uses
    /// instead of DNS (a self-hosted service, a provider behind a local
    /// relay). Explicit and audited at start (`connection.host_pins`); an
    /// address in a blocked range also needs `trusted_private_cidrs`.
    pub host_pins: std::collections::BTreeMap<String, Vec<String>>,
    /// Private ranges connection scripts may reach (never cloud metadata).
    pub trusted_private_cidrs: Vec<String>,
    /// How long one setup conversation may run before it is cancelled.
    pub setup_timeout_seconds: u64,
}

impl Default for ConnectionsConfig {
    fn default() -> Self {
        ConnectionsConfig {
            health_check_default: s("*/30 * * * *"),
            auto_recovery_enabled: true,
            recovery_max_attempts: 3,
            host_pins: Default::default(),
            trusted_private_cidrs: Vec::new(),
            setup_timeout_seconds: 900,
        }
    }
}

/// `batch_review.confidence:`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConfidenceConfig {
    pub high_min: f64,
    pub medium_min: f64,
}

impl Default for ConfidenceConfig {
    fn default() -> Self {
        ConfidenceConfig {
            high_min: 0.85,
            medium_min: 0.50,
        }
    }
}

/// `batch_review:`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BatchReviewConfig {
    pub default_size: u32,
    pub confidence: ConfidenceConfig,
}

impl Default for BatchReviewConfig {
    fn default() -> Self {
        BatchReviewConfig {
            default_size: 10,
            confidence: ConfidenceConfig::default(),
        }
    }
}

/// `autonomy:` — the autonomy calibrator.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AutonomyConfig {
    pub enabled: bool,
    pub min_samples: u32,
    pub window_actions: u32,
    pub window_days: u32,
    pub widen_correction_rate_max: f64,
    pub tighten_correction_rate_min: f64,
    pub hysteresis_delta: f64,
    pub max_standing_executions: u32,
    pub max_batch_review_size: u32,
    pub min_high_confidence: f64,
}

impl Default for AutonomyConfig {
    fn default() -> Self {
        AutonomyConfig {
            enabled: true,
            min_samples: 30,
            window_actions: 50,
            window_days: 14,
            widen_correction_rate_max: 0.05,
            tighten_correction_rate_min: 0.20,
            hysteresis_delta: 0.05,
            max_standing_executions: 100,
            max_batch_review_size: 50,
            min_high_confidence: 0.70,
        }
    }
}

// ---------------------------------------------------------------------------
// gates

/// A gate definition as written in YAML. Parsed into the gate model by the
/// runtime (gate runner); configuration only checks that each entry has a
/// unique non-empty string `name`.
pub type GateDefinition = serde_json::Map<String, serde_json::Value>;

/// `gates.llm_defaults:` — defaults for LLM-backed gate checks.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LlmGateDefaults {
    pub model: String,
    pub temperature: f64,
    pub timeout_seconds: u64,
    pub max_tokens: u32,
}

impl Default for LlmGateDefaults {
    fn default() -> Self {
        LlmGateDefaults {
            model: s(HAIKU),
            temperature: 0.0,
            timeout_seconds: 8,
            max_tokens: 256,
        }
    }
}

/// `gates:`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GatesConfig {
    /// Global gates, evaluated before work-item gates on every matching
    /// trigger.
    pub system: Vec<GateDefinition>,
    pub llm_defaults: LlmGateDefaults,
}

impl Default for GatesConfig {
    fn default() -> Self {
        let gate = |name: &str, on: &str, check: &str, on_block: &str| {
            let mut m = GateDefinition::new();
            for (k, v) in [
                ("name", name),
                ("on", on),
                ("provider", "guardrails_ai"),
                ("check", check),
                ("on_block", on_block),
            ] {
                m.insert(k.to_owned(), serde_json::Value::String(v.to_owned()));
            }
            m
        };
        GatesConfig {
            system: vec![
                gate(
                    "input_guard",
                    "every_user_message",
                    "jailbreak",
                    "polite_redirect",
                ),
                gate("pii_scrub", "every_agent_response", "pii", "report"),
            ],
            llm_defaults: LlmGateDefaults::default(),
        }
    }
}

// ---------------------------------------------------------------------------
// scheduler / skills

/// `scheduler:`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SchedulerConfig {
    pub enabled: bool,
    /// IANA time zone name, or `local` (the default: the host's zone, from
    /// `TZ`, `/etc/timezone` or `/etc/localtime`, else UTC); checked by the
    /// scheduler, not here.
    pub timezone: String,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            enabled: true,
            timezone: s("local"),
        }
    }
}

/// `skills.validation:` — the deterministic SKILL.md linter.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SkillValidationConfig {
    pub description_min_chars: u32,
    pub description_max_chars: u32,
    pub fail_on_process_heavy_description: bool,
    pub forbid_undeclared_env: bool,
}

impl Default for SkillValidationConfig {
    fn default() -> Self {
        SkillValidationConfig {
            description_min_chars: 24,
            description_max_chars: 1024,
            fail_on_process_heavy_description: true,
            forbid_undeclared_env: true,
        }
    }
}

/// `skills.import:`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SkillImportConfig {
    pub allow_external: bool,
    pub allowed_sources: Vec<String>,
    pub require_transform_report: bool,
}

impl Default for SkillImportConfig {
    fn default() -> Self {
        SkillImportConfig {
            allow_external: true,
            allowed_sources: strings(&["github", "local_path"]),
            require_transform_report: true,
        }
    }
}

/// `skills:`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SkillsConfig {
    pub validation: SkillValidationConfig,
    pub import: SkillImportConfig,
}

// ---------------------------------------------------------------------------
// llm (an addition to §11)

/// The provider name of the built-in offline responder (`offline:rules`).
/// Reserved: it needs no `providers:` entry and cannot be redefined there.
pub const OFFLINE_PROVIDER: &str = "offline";

/// Price of one model in USD per million tokens.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelPrice {
    pub input_per_mtok_usd: f64,
    pub output_per_mtok_usd: f64,
}

/// `llm:` — how model calls are made: per-request timeout, bounded
/// exponential backoff on 429/5xx/connection errors, the executor's tool-loop
/// request cap, the offline fallback and the price table that turns reported
/// token usage into `BudgetUsed.cost_usd`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LlmConfig {
    /// Per HTTP request, including reading the whole response.
    pub timeout_seconds: u64,
    /// Retries after the first attempt on 429, 5xx and connection errors.
    pub max_retries: u32,
    /// First backoff delay; doubled per retry up to `backoff_max_ms`.
    pub backoff_initial_ms: u64,
    pub backoff_max_ms: u64,
    /// Model requests one executor tool loop may make.
    pub max_tool_rounds: u32,
    /// `silas start` uses the built-in offline responder when the configured
    /// provider's API key variable is unset (false: refuse to start).
    pub offline_fallback: bool,
    /// `provider:model` → price. A model without an entry costs 0 (token
    /// budgets still apply).
    pub prices: BTreeMap<String, ModelPrice>,
    /// Consecutive provider failures (5xx, 429, timeouts, connection
    /// errors) that open its circuit breaker.
    pub breaker_failures: u32,
    /// How long an open breaker skips its provider before one probe call.
    pub breaker_open_seconds: u64,
}

impl Default for LlmConfig {
    fn default() -> Self {
        let price = |i, o| ModelPrice {
            input_per_mtok_usd: i,
            output_per_mtok_usd: o,
        };
        LlmConfig {
            timeout_seconds: 60,
            max_retries: 3,
            backoff_initial_ms: 500,
            backoff_max_ms: 8000,
            max_tool_rounds: 20,
            offline_fallback: true,
            prices: [(s(HAIKU), price(1.0, 5.0)), (s(SONNET), price(3.0, 15.0))]
                .into_iter()
                .collect(),
            breaker_failures: 3,
            breaker_open_seconds: 30,
        }
    }
}
