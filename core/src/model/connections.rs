//! Connection models: the service-connection record of spec §2.5
//! (`Connection`, `ConnectionStatus`, `ConnectionPermission`) and the §3.12
//! setup-conversation, auth-strategy, health-check and failure models.
//! Secrets never appear here — only opaque keyring reference ids.

use serde::{Deserialize, Serialize};

use super::JsonObject;
use crate::Timestamp;

spec_enum! {
    /// Lifecycle state of a service connection (§2.5).
    #[derive(Default)]
    pub enum ConnectionStatus {
        #[default]
        Proposed => "proposed",
        Connecting => "connecting",
        Active => "active",
        Paused => "paused",
        Failed => "failed",
    }
}

spec_enum! {
    /// Silas-level permission tier on a connection (§2.5). Every tier requires
    /// `tap` verification; the tier controls UX friction, not authorization —
    /// actions still need a signed approval token.
    pub enum ConnectionPermission {
        Observe => "observe",
        Draft => "draft",
        Act => "act",
        Manage => "manage",
    }
}

spec_enum! {
    /// How a connection authenticates (§3.12).
    pub enum AuthStrategy {
        DeviceCode => "device_code",
        BrowserRedirect => "browser_redirect",
        SecureInput => "secure_input",
    }
}

spec_enum! {
    /// The `type` of a [`SetupStep`], as echoed in [`SetupStepResponse`].
    pub enum SetupStepType {
        DeviceCode => "device_code",
        BrowserRedirect => "browser_redirect",
        SecureInput => "secure_input",
        Progress => "progress",
        Completion => "completion",
        Failure => "failure",
    }
}

spec_enum! {
    /// The user's action on a setup step (§3.12).
    pub enum SetupAction {
        Done => "done",
        Cancel => "cancel",
        Trouble => "trouble",
        Retry => "retry",
    }
}

spec_enum! {
    /// Why a connection script failed (§3.12).
    pub enum ConnectionFailureType {
        EnterprisePolicyBlock => "enterprise_policy_block",
        ConsentDenied => "consent_denied",
        MfaRequired => "mfa_required",
        RateLimited => "rate_limited",
        ServiceUnavailable => "service_unavailable",
        TokenRevoked => "token_revoked",
        Unknown => "unknown",
    }
}

spec_enum! {
    /// Risk of a recovery option, for the risk ladder (§3.12).
    pub enum RecoveryRiskLevel {
        Low => "low",
        Medium => "medium",
        High => "high",
    }
}

/// A managed service connection (§2.5). `connection_id` is its own namespace,
/// never a channel session id.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Connection {
    pub connection_id: String,
    pub name: String,
    pub domain: String,
    pub skill_name: String,
    pub auth_strategy: AuthStrategy,
    #[serde(default)]
    pub permissions: Vec<ConnectionPermission>,
    #[serde(default)]
    pub permissions_granted: Vec<String>,
    #[serde(default)]
    pub permissions_available: Vec<String>,
    /// Immutable after first setup (audit trail); enforced by the manager.
    #[serde(default)]
    pub initial_permissions: Vec<String>,
    #[serde(default)]
    pub status: ConnectionStatus,
    /// Cron expression for connectivity checks.
    pub health_check: String,
    #[serde(default)]
    pub token_expires_at: Option<Timestamp>,
    #[serde(default)]
    pub refresh_token_expires_at: Option<Timestamp>,
    #[serde(default)]
    pub last_health_check: Option<Timestamp>,
    #[serde(default)]
    pub last_refresh: Option<Timestamp>,
    /// Non-secret parameters the owner gave at setup (a server URL, a
    /// tenant), passed to every script of the connection as environment
    /// variables; only names the skill declares in `requirements.env`.
    #[serde(default)]
    pub settings: std::collections::BTreeMap<String, String>,
}

/// A request to collect a secret through the secure input path (§3.12).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SecureInputRequest {
    pub ref_id: String,
    pub label: String,
    /// Visual hint only, never used for validation.
    #[serde(default)]
    pub input_hint: Option<String>,
    /// Rendered by the channel: `instructions` (str), `help_url` (str|null).
    #[serde(default)]
    pub guidance: JsonObject,
}

/// What the agent learns after a secret is submitted: only success (§3.12).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SecureInputCompleted {
    pub ref_id: String,
    pub success: bool,
}

/// One step emitted by a connection setup script, discriminated by `type`
/// (§3.12).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum SetupStep {
    DeviceCode {
        verification_url: String,
        user_code: String,
        /// Seconds.
        expires_in: u64,
        /// Seconds.
        poll_interval: u64,
    },
    BrowserRedirect {
        auth_url: String,
        /// host:port of the localhost callback server.
        listening_on: String,
    },
    SecureInput {
        request: SecureInputRequest,
    },
    Progress {
        message: String,
        #[serde(default)]
        progress_pct: Option<f64>,
    },
    Completion {
        success: bool,
        summary: String,
        #[serde(default)]
        permissions_granted: Vec<String>,
    },
    Failure {
        failure: ConnectionFailure,
    },
}

impl SetupStep {
    pub fn step_type(&self) -> SetupStepType {
        match self {
            SetupStep::DeviceCode { .. } => SetupStepType::DeviceCode,
            SetupStep::BrowserRedirect { .. } => SetupStepType::BrowserRedirect,
            SetupStep::SecureInput { .. } => SetupStepType::SecureInput,
            SetupStep::Progress { .. } => SetupStepType::Progress,
            SetupStep::Completion { .. } => SetupStepType::Completion,
            SetupStep::Failure { .. } => SetupStepType::Failure,
        }
    }
}

/// The user's response to a setup step (§3.12).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SetupStepResponse {
    pub step_type: SetupStepType,
    pub action: SetupAction,
}

/// Structured output of a connection's `health_check.py` (§3.12).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HealthCheckResult {
    pub healthy: bool,
    #[serde(default)]
    pub token_expires_at: Option<Timestamp>,
    #[serde(default)]
    pub refresh_token_expires_at: Option<Timestamp>,
    /// 0 when the probe never got a response.
    #[serde(default)]
    pub latency_ms: u64,
    #[serde(default)]
    pub error: Option<String>,
    #[serde(default)]
    pub warnings: Vec<String>,
}

/// A structured connection failure with recovery paths (§3.12).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConnectionFailure {
    pub failure_type: ConnectionFailureType,
    pub service: String,
    pub message: String,
    #[serde(default)]
    pub recovery_options: Vec<RecoveryOption>,
}

/// One way out of a connection failure (§3.12).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RecoveryOption {
    pub action: String,
    pub label: String,
    pub description: String,
    pub risk_level: RecoveryRiskLevel,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::model::test_support::{assert_enum_strings, round_trip};

    #[test]
    fn enum_strings() {
        assert_enum_strings(
            ConnectionStatus::ALL,
            &[
                (ConnectionStatus::Proposed, "proposed"),
                (ConnectionStatus::Connecting, "connecting"),
                (ConnectionStatus::Active, "active"),
                (ConnectionStatus::Paused, "paused"),
                (ConnectionStatus::Failed, "failed"),
            ],
        );
        assert_enum_strings(
            ConnectionPermission::ALL,
            &[
                (ConnectionPermission::Observe, "observe"),
                (ConnectionPermission::Draft, "draft"),
                (ConnectionPermission::Act, "act"),
                (ConnectionPermission::Manage, "manage"),
            ],
        );
        assert_enum_strings(
            AuthStrategy::ALL,
            &[
                (AuthStrategy::DeviceCode, "device_code"),
                (AuthStrategy::BrowserRedirect, "browser_redirect"),
                (AuthStrategy::SecureInput, "secure_input"),
            ],
        );
        assert_enum_strings(
            SetupStepType::ALL,
            &[
                (SetupStepType::DeviceCode, "device_code"),
                (SetupStepType::BrowserRedirect, "browser_redirect"),
                (SetupStepType::SecureInput, "secure_input"),
                (SetupStepType::Progress, "progress"),
                (SetupStepType::Completion, "completion"),
                (SetupStepType::Failure, "failure"),
            ],
        );
        assert_enum_strings(
            SetupAction::ALL,
            &[
                (SetupAction::Done, "done"),
                (SetupAction::Cancel, "cancel"),
                (SetupAction::Trouble, "trouble"),
                (SetupAction::Retry, "retry"),
            ],
        );
        assert_enum_strings(
            ConnectionFailureType::ALL,
            &[
                (
                    ConnectionFailureType::EnterprisePolicyBlock,
                    "enterprise_policy_block",
                ),
                (ConnectionFailureType::ConsentDenied, "consent_denied"),
                (ConnectionFailureType::MfaRequired, "mfa_required"),
                (ConnectionFailureType::RateLimited, "rate_limited"),
                (
                    ConnectionFailureType::ServiceUnavailable,
                    "service_unavailable",
                ),
                (ConnectionFailureType::TokenRevoked, "token_revoked"),
                (ConnectionFailureType::Unknown, "unknown"),
            ],
        );
        assert_enum_strings(
            RecoveryRiskLevel::ALL,
            &[
                (RecoveryRiskLevel::Low, "low"),
                (RecoveryRiskLevel::Medium, "medium"),
                (RecoveryRiskLevel::High, "high"),
            ],
        );
    }

    #[test]
    fn connection_defaults_and_round_trip() {
        let c: Connection = serde_json::from_value(json!({
            "connection_id": "conn-1", "name": "Outlook — user@example.com",
            "domain": "personal", "skill_name": "outlook", "auth_strategy": "device_code",
            "health_check": "*/30 * * * *"
        }))
        .unwrap();
        assert_eq!(c.status, ConnectionStatus::Proposed);
        assert!(c.permissions.is_empty());
        let v = round_trip(&c);
        assert!(v["token_expires_at"].is_null() && v["last_refresh"].is_null());

        let mut c = c;
        c.permissions = vec![ConnectionPermission::Observe, ConnectionPermission::Draft];
        c.permissions_granted = vec!["Mail.ReadBasic".into(), "offline_access".into()];
        c.status = ConnectionStatus::Active;
        c.token_expires_at = Some(Timestamp::parse("2026-01-15T11:00:00Z").unwrap());
        let v = round_trip(&c);
        assert_eq!(v["permissions"], json!(["observe", "draft"]));

        let mut j = v;
        j["last_refresh"] = json!("2026-01-15T10:00:00");
        assert!(
            serde_json::from_value::<Connection>(j).is_err(),
            "naive datetime"
        );
    }

    fn failure() -> ConnectionFailure {
        ConnectionFailure {
            failure_type: ConnectionFailureType::EnterprisePolicyBlock,
            service: "Microsoft 365".into(),
            message: "Your organisation blocks third-party apps".into(),
            recovery_options: vec![RecoveryOption {
                action: "request_admin_approval".into(),
                label: "Ask your IT admin".into(),
                description: "Sends a consent request".into(),
                risk_level: RecoveryRiskLevel::Low,
            }],
        }
    }

    #[test]
    fn setup_step_is_tagged_by_type() {
        let steps = [
            (
                SetupStep::DeviceCode {
                    verification_url: "https://microsoft.com/devicelogin".into(),
                    user_code: "ABCD-EFGH".into(),
                    expires_in: 900,
                    poll_interval: 5,
                },
                "device_code",
            ),
            (
                SetupStep::BrowserRedirect {
                    auth_url: "https://accounts.spotify.com/authorize".into(),
                    listening_on: "127.0.0.1:8765".into(),
                },
                "browser_redirect",
            ),
            (
                SetupStep::SecureInput {
                    request: SecureInputRequest {
                        ref_id: "ref_1".into(),
                        label: "Notion integration token".into(),
                        input_hint: Some("ntn_...".into()),
                        guidance: json!({"instructions": "Paste it", "help_url": null})
                            .as_object()
                            .unwrap()
                            .clone(),
                    },
                },
                "secure_input",
            ),
            (
                SetupStep::Progress {
                    message: "Waiting".into(),
                    progress_pct: None,
                },
                "progress",
            ),
            (
                SetupStep::Completion {
                    success: true,
                    summary: "Connected".into(),
                    permissions_granted: vec!["Mail.ReadBasic".into()],
                },
                "completion",
            ),
            (SetupStep::Failure { failure: failure() }, "failure"),
        ];
        for (step, tag) in steps {
            let v = round_trip(&step);
            assert_eq!(v["type"], tag);
            assert_eq!(step.step_type().as_str(), tag);
        }
        let p: SetupStep =
            serde_json::from_value(json!({"type": "progress", "message": "m"})).unwrap();
        assert_eq!(
            p,
            SetupStep::Progress {
                message: "m".into(),
                progress_pct: None
            }
        );
        assert!(round_trip(&p)["progress_pct"].is_null());
        assert!(serde_json::from_value::<SetupStep>(json!({"type": "magic_link"})).is_err());
    }

    #[test]
    fn responses_results_and_failures_round_trip() {
        let r: SetupStepResponse =
            serde_json::from_value(json!({"step_type": "device_code", "action": "trouble"}))
                .unwrap();
        round_trip(&r);
        round_trip(&SecureInputCompleted {
            ref_id: "ref_1".into(),
            success: true,
        });
        let h: HealthCheckResult =
            serde_json::from_value(json!({"healthy": false, "error": "401"})).unwrap();
        assert_eq!(h.latency_ms, 0);
        round_trip(&h);
        let v = round_trip(&failure());
        assert_eq!(v["failure_type"], "enterprise_policy_block");
        assert_eq!(v["recovery_options"][0]["risk_level"], "low");
    }
}
