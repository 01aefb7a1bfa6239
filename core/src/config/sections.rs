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

pub(super) fn s(v: &str) -> String {
    v.to_owned()
}

pub(super) fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| (*x).to_owned()).collect()
}

fn deltas(pairs: &[(&str, f64)]) -> BTreeMap<String, f64> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
}

/// The model used by a provider-qualified spec: `provider:model`.
pub(super) const HAIKU: &str = "openrouter:anthropic/claude-haiku-4-5";
pub(super) const SONNET: &str = "openrouter:anthropic/claude-sonnet-4-5";

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
