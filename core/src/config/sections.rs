//! The typed sections of `silas.yaml` (§11). Every struct denies unknown
//! keys and fills missing keys from its `Default`, which carries the spec's
//! default values. Free-form registries (personality contexts/presets/event
//! weights, approval scope strengths, context profiles, providers) are maps.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::model::agents::{InteractionMode, InteractionRegister};
use crate::model::context::ContextProfile;

use super::serde_util::{
    deserialize_profiles, lenient_opt_string, model_chain, serialize_profiles,
};

fn s(v: &str) -> String {
    v.to_owned()
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| (*x).to_owned()).collect()
}

fn deltas(pairs: &[(&str, f64)]) -> BTreeMap<String, f64> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
}

/// The model used by a provider-qualified spec: `provider:model`.
const HAIKU: &str = "openrouter:anthropic/claude-haiku-4-5";
const SONNET: &str = "openrouter:anthropic/claude-sonnet-4-5";

// ---------------------------------------------------------------------------
// models / search

/// `models:` — `provider:model` strings, resolved against `providers:`.
/// Each may be an ordered list (a fallback chain), kept comma-separated;
/// [`super::model_chain`] splits it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ModelsConfig {
    #[serde(deserialize_with = "model_chain")]
    pub proxy: String,
    #[serde(deserialize_with = "model_chain")]
    pub planner: String,
    #[serde(deserialize_with = "model_chain")]
    pub executor: String,
    #[serde(deserialize_with = "model_chain")]
    pub scorer: String,
}

impl Default for ModelsConfig {
    fn default() -> Self {
        ModelsConfig {
            proxy: s(HAIKU),
            planner: s(SONNET),
            executor: s(HAIKU),
            scorer: s(HAIKU),
        }
    }
}

/// `search:` — the optional web-search executor. `web_search` is only
/// registered when both `provider` and `api_key` are non-empty; see
/// [`Config::web_search_enabled`](super::Config::web_search_enabled).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SearchConfig {
    pub provider: Option<String>,
    #[serde(deserialize_with = "lenient_opt_string")]
    pub api_key: Option<String>,
    pub timeout_seconds: u64,
    pub max_results: u32,
    pub max_query_chars: u32,
    /// Empty means the provider default (the global web).
    pub allowed_domains: Vec<String>,
}

impl Default for SearchConfig {
    fn default() -> Self {
        SearchConfig {
            provider: Some(s("tavily")),
            api_key: None,
            timeout_seconds: 8,
            max_results: 5,
            max_query_chars: 300,
            allowed_domains: Vec::new(),
        }
    }
}

// ---------------------------------------------------------------------------
// context / rehydration / memory

/// `context:` — the token budget (§3.5 TokenBudget) and zone profiles.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ContextConfig {
    pub total_tokens: u64,
    pub system_max: u64,
    pub skill_metadata_budget_pct: f64,
    pub eviction_threshold_pct: f64,
    pub scorer_threshold_pct: f64,
    pub max_subscription_tokens: u64,
    pub subscription_ttl_turns: u32,
    pub observation_mask_after_turns: u32,
    pub default_profile: String,
    /// Named zone allocations. Each profile's `name` is its map key.
    #[serde(
        deserialize_with = "deserialize_profiles",
        serialize_with = "serialize_profiles"
    )]
    pub profiles: BTreeMap<String, ContextProfile>,
}

fn profile(
    name: &str,
    chronicle_pct: f64,
    memory_pct: f64,
    workspace_pct: f64,
) -> (String, ContextProfile) {
    (
        name.to_owned(),
        ContextProfile {
            name: name.to_owned(),
            chronicle_pct,
            memory_pct,
            workspace_pct,
        },
    )
}

impl Default for ContextConfig {
    fn default() -> Self {
        ContextConfig {
            total_tokens: 180_000,
            system_max: 8_000,
            skill_metadata_budget_pct: 0.02,
            eviction_threshold_pct: 0.80,
            scorer_threshold_pct: 0.90,
            max_subscription_tokens: 2_000,
            subscription_ttl_turns: 10,
            observation_mask_after_turns: 5,
            default_profile: s("conversation"),
            profiles: [
                profile("conversation", 0.45, 0.20, 0.15),
                profile("coding", 0.20, 0.20, 0.40),
                profile("research", 0.20, 0.40, 0.20),
                profile("support", 0.40, 0.25, 0.15),
            ]
            .into_iter()
            .collect(),
        }
    }
}

/// `rehydration:` — startup restore of recent chronicle entries.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RehydrationConfig {
    pub max_chronicle_entries: u32,
}

impl Default for RehydrationConfig {
    fn default() -> Self {
        RehydrationConfig {
            max_chronicle_entries: 50,
        }
    }
}

/// `chronicle:` — conversation-history retention (§4.14). Not in the spec's
/// YAML; §4.14 names a configurable retention with a 90-day default.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ChronicleConfig {
    pub retention_days: u32,
}

impl Default for ChronicleConfig {
    fn default() -> Self {
        ChronicleConfig { retention_days: 90 }
    }
}

/// `audit:` — periodic checkpoints of the hash chain (§4.16), so routine
/// verification and truncation detection run from the latest checkpoint.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuditConfig {
    pub checkpoint_interval_minutes: u32,
}

impl Default for AuditConfig {
    fn default() -> Self {
        AuditConfig {
            checkpoint_interval_minutes: 60,
        }
    }
}

/// `memory:` — embeddings, consolidation and raw re-ingestion.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MemoryConfig {
    pub embedding_model: String,
    pub embedding_dim: u32,
    pub consolidation_interval_minutes: u32,
    pub raw_reingestion_enabled: bool,
    /// A §3.8 `ReingestionTier` value: `active` or `low_reingestion`.
    pub raw_reingestion_default_tier: String,
    pub portability_bundle_format: String,
}

impl Default for MemoryConfig {
    fn default() -> Self {
        MemoryConfig {
            embedding_model: s("all-MiniLM-L6-v2"),
            embedding_dim: 384,
            consolidation_interval_minutes: 30,
            raw_reingestion_enabled: true,
            raw_reingestion_default_tier: s("low_reingestion"),
            portability_bundle_format: s("jsonl-v1"),
        }
    }
}

// ---------------------------------------------------------------------------
// personality

/// The seven personality axes (§3.9 AxisProfile), each in `[0, 1]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PersonalityAxes {
    pub warmth: f64,
    pub assertiveness: f64,
    pub verbosity: f64,
    pub formality: f64,
    pub humor: f64,
    pub initiative: f64,
    pub certainty: f64,
}

/// Names of the personality axes, the keys allowed in context deltas,
/// presets and event-weight `axes` maps.
pub const PERSONALITY_AXES: [&str; 7] = [
    "warmth",
    "assertiveness",
    "verbosity",
    "formality",
    "humor",
    "initiative",
    "certainty",
];

impl PersonalityAxes {
    pub fn fields(&self) -> [(&'static str, f64); 7] {
        [
            ("warmth", self.warmth),
            ("assertiveness", self.assertiveness),
            ("verbosity", self.verbosity),
            ("formality", self.formality),
            ("humor", self.humor),
            ("initiative", self.initiative),
            ("certainty", self.certainty),
        ]
    }
}

impl Default for PersonalityAxes {
    fn default() -> Self {
        PersonalityAxes {
            warmth: 0.50,
            assertiveness: 0.75,
            verbosity: 0.30,
            formality: 0.30,
            humor: 0.40,
            initiative: 0.70,
            certainty: 0.80,
        }
    }
}

/// The four mood dimensions (§3.9 MoodState), each in `[0, 1]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MoodValues {
    pub energy: f64,
    pub patience: f64,
    pub curiosity: f64,
    pub frustration: f64,
}

/// Names of the mood dimensions, the keys allowed in event-weight `mood` maps.
pub const MOOD_DIMENSIONS: [&str; 4] = ["energy", "patience", "curiosity", "frustration"];

impl MoodValues {
    pub fn fields(&self) -> [(&'static str, f64); 4] {
        [
            ("energy", self.energy),
            ("patience", self.patience),
            ("curiosity", self.curiosity),
            ("frustration", self.frustration),
        ]
    }
}

impl Default for MoodValues {
    fn default() -> Self {
        MoodValues {
            energy: 0.50,
            patience: 0.50,
            curiosity: 0.50,
            frustration: 0.50,
        }
    }
}

/// How one personality event nudges mood and axes (deltas).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EventWeight {
    pub mood: BTreeMap<String, f64>,
    pub axes: BTreeMap<String, f64>,
}

/// `personality.mood:`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MoodConfig {
    pub neutral: MoodValues,
    /// Event name → mood/axis deltas.
    pub event_weights: BTreeMap<String, EventWeight>,
}

impl Default for MoodConfig {
    fn default() -> Self {
        let ew = |mood: &[(&str, f64)], axes: &[(&str, f64)]| EventWeight {
            mood: deltas(mood),
            axes: deltas(axes),
        };
        MoodConfig {
            neutral: MoodValues::default(),
            event_weights: [
                (
                    "task_completed",
                    ew(&[("energy", 0.05), ("frustration", -0.10)], &[]),
                ),
                (
                    "ci_failure",
                    ew(&[("frustration", 0.10), ("patience", -0.05)], &[]),
                ),
                (
                    "blocked",
                    ew(&[("frustration", 0.08), ("patience", -0.04)], &[]),
                ),
                ("compliment", ew(&[("energy", 0.10)], &[("warmth", 0.05)])),
                ("feedback_too_harsh", ew(&[], &[("assertiveness", -0.05)])),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect(),
        }
    }
}

/// `personality.voice:` — qualitative voice settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct VoiceConfig {
    pub tone: String,
    pub quirks: Vec<String>,
    pub speech_patterns: Vec<String>,
    pub anti_patterns: Vec<String>,
}

impl Default for VoiceConfig {
    fn default() -> Self {
        VoiceConfig {
            tone: s("direct, pragmatic, concise"),
            quirks: strings(&["names tradeoffs explicitly", "states assumptions"]),
            speech_patterns: strings(&["short actionable bullets", "clear next-step phrasing"]),
            anti_patterns: strings(&[
                "sycophantic agreement",
                "vague hedging",
                "performative hype",
            ]),
        }
    }
}

/// `personality:`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PersonalityConfig {
    pub enabled: bool,
    /// `per_connection` (default); single-user deployments map every turn
    /// to the `owner` scope.
    pub scope_mode: String,
    pub directive_tokens_min: u32,
    pub directive_tokens_max: u32,
    pub decay_rate_per_hour: f64,
    pub baseline: PersonalityAxes,
    /// Context key → axis deltas (each in `[-1, 1]`).
    pub contexts: BTreeMap<String, BTreeMap<String, f64>>,
    pub mood: MoodConfig,
    pub constitution: Vec<String>,
    pub voice: VoiceConfig,
    /// Preset name → absolute axis values (each in `[0, 1]`).
    pub presets: BTreeMap<String, BTreeMap<String, f64>>,
}

impl Default for PersonalityConfig {
    fn default() -> Self {
        let map = |entries: Vec<(&str, BTreeMap<String, f64>)>| {
            entries
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v))
                .collect::<BTreeMap<_, _>>()
        };
        PersonalityConfig {
            enabled: true,
            scope_mode: s("per_connection"),
            directive_tokens_min: 200,
            directive_tokens_max: 400,
            decay_rate_per_hour: 0.10,
            baseline: PersonalityAxes::default(),
            contexts: map(vec![
                (
                    "code_review",
                    deltas(&[
                        ("assertiveness", 0.20),
                        ("certainty", 0.10),
                        ("humor", -0.20),
                        ("verbosity", 0.10),
                    ]),
                ),
                (
                    "casual_chat",
                    deltas(&[
                        ("warmth", 0.20),
                        ("humor", 0.30),
                        ("formality", -0.30),
                        ("verbosity", -0.10),
                    ]),
                ),
                (
                    "crisis",
                    deltas(&[
                        ("verbosity", -0.30),
                        ("assertiveness", 0.20),
                        ("initiative", 0.30),
                        ("humor", -0.50),
                    ]),
                ),
                (
                    "group_chat",
                    deltas(&[
                        ("assertiveness", -0.10),
                        ("verbosity", -0.20),
                        ("initiative", -0.20),
                    ]),
                ),
                (
                    "deep_research",
                    deltas(&[
                        ("verbosity", 0.30),
                        ("certainty", -0.20),
                        ("humor", -0.30),
                        ("formality", 0.10),
                    ]),
                ),
            ]),
            mood: MoodConfig::default(),
            constitution: strings(&[
                "Never fabricate information",
                "Defend reasoning under pressure",
                "Private data stays private",
                "Own mistakes immediately",
            ]),
            voice: VoiceConfig::default(),
            presets: map(vec![
                ("default", BTreeMap::new()),
                (
                    "work",
                    deltas(&[
                        ("formality", 0.70),
                        ("humor", 0.10),
                        ("assertiveness", 0.80),
                    ]),
                ),
                (
                    "chill",
                    deltas(&[
                        ("warmth", 0.75),
                        ("humor", 0.70),
                        ("formality", 0.10),
                        ("assertiveness", 0.55),
                    ]),
                ),
                (
                    "review",
                    deltas(&[
                        ("humor", 0.00),
                        ("verbosity", 0.55),
                        ("assertiveness", 0.90),
                        ("certainty", 0.85),
                    ]),
                ),
            ]),
        }
    }
}

// ---------------------------------------------------------------------------
// interaction / suggestions / behavior preferences

/// `interaction:` — interaction modes per register (ADR-022).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct InteractionConfig {
    pub high_initiative_min: f64,
    /// Must define every [`InteractionRegister`].
    pub default_mode_by_register: BTreeMap<InteractionRegister, InteractionMode>,
    pub require_confirmation_on_material_ambiguity: bool,
}

impl Default for InteractionConfig {
    fn default() -> Self {
        use InteractionMode::*;
        use InteractionRegister::*;
        InteractionConfig {
            high_initiative_min: 0.65,
            default_mode_by_register: [
                (Exploration, DefaultAndOffer),
                (Execution, ActAndReport),
                (Review, ConfirmOnlyWhenRequired),
                (Status, DefaultAndOffer),
            ]
            .into_iter()
            .collect(),
            require_confirmation_on_material_ambiguity: true,
        }
    }
}

/// `suggestions:` — proactive suggestions on a heartbeat (needs the scheduler).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SuggestionsConfig {
    pub enabled: bool,
    pub heartbeat_cron: String,
    pub cooldown_minutes: u32,
    pub max_pending_per_scope: u32,
    pub dedupe_window_minutes: u32,
}

impl Default for SuggestionsConfig {
    fn default() -> Self {
        SuggestionsConfig {
            enabled: true,
            heartbeat_cron: s("*/15 * * * *"),
            cooldown_minutes: 120,
            max_pending_per_scope: 5,
            dedupe_window_minutes: 180,
        }
    }
}

/// `behavior_preferences:` — inferred owner preferences.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BehaviorPreferencesConfig {
    pub enabled: bool,
    pub promotion_requires_confirmation: bool,
    pub max_new_inferences_per_day: u32,
}

impl Default for BehaviorPreferencesConfig {
    fn default() -> Self {
        BehaviorPreferencesConfig {
            enabled: true,
            promotion_requires_confirmation: true,
            max_new_inferences_per_day: 20,
        }
    }
}

// ---------------------------------------------------------------------------
// channels

/// `channels.web:` — the WebSocket/PWA channel.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WebChannelConfig {
    pub enabled: bool,
    pub host: String,
    pub port: u16,
    /// Required whenever `host` is not a loopback address.
    #[serde(deserialize_with = "lenient_opt_string")]
    pub auth_token: Option<String>,
    /// Where the owner's devices reach the web app (e.g. behind a reverse
    /// proxy or on the LAN); links sent through other channels (Telegram's
    /// Review and secure-form links) use it. Default: the listen address.
    #[serde(deserialize_with = "lenient_opt_string")]
    pub public_url: Option<String>,
}

impl Default for WebChannelConfig {
    fn default() -> Self {
        WebChannelConfig {
            enabled: true,
            host: s("127.0.0.1"),
            port: 8420,
            auth_token: None,
            public_url: None,
        }
    }
}

/// `channels.telegram:`. The shipped file takes `token` and `owner_chat_id`
/// from `${SILAS_TELEGRAM_TOKEN}` / `${SILAS_TELEGRAM_OWNER_ID}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TelegramChannelConfig {
    pub enabled: bool,
    #[serde(deserialize_with = "lenient_opt_string")]
    pub token: Option<String>,
    /// The bot token kept in the encrypted secret store instead: the ref
    /// of a secret stored through the web app's secure form (`/secret
    /// Telegram bot token`). Used when `token` is unset.
    #[serde(deserialize_with = "lenient_opt_string")]
    pub token_ref: Option<String>,
    #[serde(deserialize_with = "lenient_opt_string")]
    pub owner_chat_id: Option<String>,
    /// The owner's Telegram user id: the only member whose messages and
    /// button presses count as the owner's in a group chat. Defaults to
    /// `owner_chat_id` when that is a private chat (there the ids coincide).
    #[serde(deserialize_with = "lenient_opt_string")]
    pub owner_user_id: Option<String>,
    /// Bot API base URL (a self-hosted Bot API server, or a fake in tests).
    pub api_url: String,
    /// Cards above this risk are not approvable with a tap in Telegram:
    /// the owner is sent to the web UI.
    pub max_approval_risk: crate::risk::RiskLevel,
}

/// The public Bot API.
pub const TELEGRAM_API_URL: &str = "https://api.telegram.org";

impl Default for TelegramChannelConfig {
    fn default() -> Self {
        TelegramChannelConfig {
            enabled: false,
            token: None,
            token_ref: None,
            owner_chat_id: None,
            owner_user_id: None,
            api_url: TELEGRAM_API_URL.to_string(),
            max_approval_risk: crate::risk::RiskLevel::Medium,
        }
    }
}

/// `channels.cli:`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CliChannelConfig {
    pub enabled: bool,
}

/// `channels:`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ChannelsConfig {
    pub web: WebChannelConfig,
    pub telegram: TelegramChannelConfig,
    pub cli: CliChannelConfig,
}

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
            ws_messages_per_minute_per_ip: 240,
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
    /// IANA time zone name; checked by the scheduler, not here.
    pub timezone: String,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            enabled: true,
            timezone: s("Europe/Vienna"),
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
