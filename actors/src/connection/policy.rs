//! The ConnectionManager's pure decisions: proactive token refresh timing
//! (§5.10.3) and failure recovery (§5.10.4). No I/O, `now` is an argument.

use chrono::Duration;
use silas_core::Timestamp;
use silas_core::model::connections::{
    ConnectionFailureType, HealthCheckResult, RecoveryOption, RecoveryRiskLevel,
};

/// §5.10.3's windows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RefreshPolicy {
    /// Refresh an access token this long before it expires (default 10 min).
    pub refresh_ahead: Duration,
    /// Act on a refresh token expiring within this window (default 7 days).
    pub refresh_token_window: Duration,
    /// A connection unused this long is dormant (default 30 days).
    pub dormant_after: Duration,
}

impl Default for RefreshPolicy {
    fn default() -> Self {
        RefreshPolicy {
            refresh_ahead: Duration::minutes(10),
            refresh_token_window: Duration::days(7),
            dormant_after: Duration::days(30),
        }
    }
}

/// What to do after a health check (§5.10.3 steps 1–4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RefreshPlan {
    /// Run `refresh_token` now (steps 1 and 3).
    pub refresh_now: bool,
    /// The refresh is the dormant-connection keep-alive of step 3 (audited
    /// as `proactive_refresh_dormant`).
    pub dormant_refresh: bool,
    /// Surface a re-authentication suggestion: the refresh token expires in
    /// this many whole days (step 2).
    pub reauth_in_days: Option<i64>,
    /// When to check again (step 4), if the access token expires.
    pub next_check: Option<Timestamp>,
}

/// When to check for a refresh next: `token_expires_at - refresh_ahead`, if
/// that is still ahead of `now`.
pub fn next_refresh_check(
    token_expires_at: Option<Timestamp>,
    now: Timestamp,
    p: &RefreshPolicy,
) -> Option<Timestamp> {
    token_expires_at
        .map(|e| e.minus(p.refresh_ahead))
        .filter(|t| *t > now)
}

/// §5.10.3 after one health check. `last_used` is when the connection was
/// last used for an action (`None`: never, or not tracked).
pub fn plan_refresh(
    health: &HealthCheckResult,
    last_used: Option<Timestamp>,
    now: Timestamp,
    p: &RefreshPolicy,
) -> RefreshPlan {
    let access_due = health
        .token_expires_at
        .is_some_and(|e| e.minus(p.refresh_ahead) <= now);
    let refresh_token_closing = health
        .refresh_token_expires_at
        .filter(|r| r.minus(p.refresh_token_window) <= now);
    let used_recently = last_used.is_some_and(|u| now.datetime() - u.datetime() <= p.dormant_after);
    let (reauth_in_days, dormant_refresh) = match refresh_token_closing {
        Some(r) if used_recently => (
            Some((r.datetime() - now.datetime()).num_days().max(0)),
            false,
        ),
        Some(_) => (None, true),
        None => (None, false),
    };
    RefreshPlan {
        refresh_now: access_due || dormant_refresh,
        dormant_refresh,
        reauth_in_days,
        next_check: if access_due {
            // Decided again from the refreshed token's expiry.
            None
        } else {
            next_refresh_check(health.token_expires_at, now, p)
        },
    }
}

/// Whether a health-check error says the access token expired (§5.10.4
/// step 1). Scripts write free text; these are the markers OAuth services
/// and HTTP use for it.
pub fn is_token_error(error: &str) -> bool {
    let e = error.to_ascii_lowercase();
    [
        "expired",
        "invalid_token",
        "invalid_grant",
        "unauthorized",
        "401",
    ]
    .iter()
    .any(|m| e.contains(m))
}

/// The next automatic step for an unhealthy connection (§5.10.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecoveryStep {
    /// Run `refresh_token.py` (token-related error, not yet tried).
    Refresh,
    /// Run `recover.py` (not yet tried).
    Recover,
    /// Stop: surface a failure card, mark the connection `failed`, audit.
    Surface,
}

/// Each automatic remedy is tried at most once per health check; repeated
/// failures go to the owner, never into a silent loop (§5.10.4 step 4).
pub fn next_recovery_step(
    error: Option<&str>,
    tried_refresh: bool,
    tried_recover: bool,
    auto_recovery: bool,
) -> RecoveryStep {
    if !auto_recovery {
        return RecoveryStep::Surface;
    }
    if !tried_refresh && !tried_recover && error.is_some_and(is_token_error) {
        return RecoveryStep::Refresh;
    }
    if !tried_recover {
        return RecoveryStep::Recover;
    }
    RecoveryStep::Surface
}

fn option(action: &str, label: &str, description: &str, risk: RecoveryRiskLevel) -> RecoveryOption {
    RecoveryOption {
        action: action.to_owned(),
        label: label.to_owned(),
        description: description.to_owned(),
        risk_level: risk,
    }
}

/// The ConnectionFailureCard for a failure type (§5.10.4 table): message
/// and recovery options. `retry_in_minutes` fills "Try again in N minutes"
/// for `rate_limited`.
pub fn failure_card(
    kind: ConnectionFailureType,
    service: &str,
    retry_in_minutes: Option<u32>,
) -> (String, Vec<RecoveryOption>) {
    use ConnectionFailureType as F;
    use RecoveryRiskLevel::{Low, Medium};
    let skip = option("skip", "Skip", "Leave the connection off for now.", Low);
    match kind {
        F::EnterprisePolicyBlock => (
            format!(
                "Your organization's IT policy prevents personal apps from accessing {service}."
            ),
            vec![
                option(
                    "request_admin_approval",
                    "Draft IT request",
                    "Prepare an email to your IT admin asking for consent (you review it first).",
                    Low,
                ),
                option(
                    "use_personal_account",
                    "Use personal account",
                    "Connect a personal account instead.",
                    Medium,
                ),
                skip,
            ],
        ),
        F::ConsentDenied => (
            format!("You declined the authorization. {service} wasn't connected."),
            vec![
                option("retry", "Retry", "Start the authorization again.", Low),
                option(
                    "retry_fewer_permissions",
                    "Retry with fewer permissions",
                    "Ask only for the minimum permissions.",
                    Low,
                ),
                skip,
            ],
        ),
        F::MfaRequired => (
            format!("{service} requires multi-factor authentication to complete setup."),
            vec![
                option(
                    "retry",
                    "Retry",
                    "Try again and complete the MFA prompt.",
                    Low,
                ),
                skip,
            ],
        ),
        F::TokenRevoked => (
            format!(
                "Your {service} access was revoked (changed password, admin action, or expired)."
            ),
            vec![
                option(
                    "reconnect",
                    "Reconnect",
                    "Run the setup conversation again.",
                    Medium,
                ),
                skip,
            ],
        ),
        F::RateLimited => {
            let n = retry_in_minutes.unwrap_or(15);
            (
                format!("{service} is temporarily limiting requests. Try again in {n} minutes."),
                vec![
                    option(
                        "retry_later",
                        &format!("Retry in {n} minutes"),
                        "Check the connection again later.",
                        Low,
                    ),
                    skip,
                ],
            )
        }
        F::ServiceUnavailable => (
            format!("{service} is not responding."),
            vec![
                option(
                    "retry_later",
                    "Retry later",
                    "Check the connection again later.",
                    Low,
                ),
                skip,
            ],
        ),
        F::Unknown => (
            format!("The connection to {service} failed."),
            vec![
                option("retry", "Retry", "Try the connection again.", Low),
                skip,
            ],
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        Timestamp::parse(s).unwrap()
    }

    fn health(token: Option<&str>, refresh: Option<&str>) -> HealthCheckResult {
        HealthCheckResult {
            healthy: true,
            token_expires_at: token.map(ts),
            refresh_token_expires_at: refresh.map(ts),
            latency_ms: 12,
            error: None,
            warnings: vec![],
        }
    }

    const NOW: &str = "2026-06-17T12:00:00Z";

    #[test]
    fn refreshes_inside_the_ahead_window_only() {
        let p = RefreshPolicy::default();
        let now = ts(NOW);
        // Expires in 9 minutes: refresh now.
        let plan = plan_refresh(&health(Some("2026-06-17T12:09:00Z"), None), None, now, &p);
        assert!(plan.refresh_now && !plan.dormant_refresh);
        assert_eq!(plan.next_check, None);
        // Exactly 10 minutes: due (boundary inclusive).
        assert!(
            plan_refresh(&health(Some("2026-06-17T12:10:00Z"), None), None, now, &p).refresh_now
        );
        // Expires in an hour: check again at 50 minutes (Outlook example).
        let plan = plan_refresh(&health(Some("2026-06-17T13:00:00Z"), None), None, now, &p);
        assert!(!plan.refresh_now);
        assert_eq!(plan.next_check, Some(ts("2026-06-17T12:50:00Z")));
        // Already expired: refresh.
        assert!(
            plan_refresh(&health(Some("2026-06-17T11:00:00Z"), None), None, now, &p).refresh_now
        );
    }

    #[test]
    fn tokens_that_never_expire_need_nothing() {
        // Notion internal token.
        let plan = plan_refresh(
            &health(None, None),
            None,
            ts(NOW),
            &RefreshPolicy::default(),
        );
        assert_eq!(
            plan,
            RefreshPlan {
                refresh_now: false,
                dormant_refresh: false,
                reauth_in_days: None,
                next_check: None
            }
        );
    }

    #[test]
    fn closing_refresh_window_suggests_reauth_when_used_else_keeps_alive() {
        let p = RefreshPolicy::default();
        let now = ts(NOW);
        let h = health(Some("2026-06-17T13:00:00Z"), Some("2026-06-22T12:00:00Z"));
        // Used 3 days ago: suggest reconnecting (5 days left), no refresh.
        let plan = plan_refresh(&h, Some(ts("2026-06-14T12:00:00Z")), now, &p);
        assert_eq!(plan.reauth_in_days, Some(5));
        assert!(!plan.refresh_now && !plan.dormant_refresh);
        // Unused for 40 days: refresh proactively to slide the window.
        let plan = plan_refresh(&h, Some(ts("2026-05-08T12:00:00Z")), now, &p);
        assert!(plan.refresh_now && plan.dormant_refresh);
        assert_eq!(plan.reauth_in_days, None);
        // Never used counts as dormant.
        assert!(plan_refresh(&h, None, now, &p).dormant_refresh);
        // Refresh token 8 days out: nothing yet.
        let h = health(Some("2026-06-17T13:00:00Z"), Some("2026-06-25T12:00:00Z"));
        let plan = plan_refresh(&h, None, now, &p);
        assert!(!plan.refresh_now && plan.reauth_in_days.is_none());
    }

    #[test]
    fn recovery_order_and_single_attempts() {
        use RecoveryStep::*;
        let expired = Some("401 Unauthorized: token expired");
        assert_eq!(next_recovery_step(expired, false, false, true), Refresh);
        assert_eq!(next_recovery_step(expired, true, false, true), Recover);
        assert_eq!(next_recovery_step(expired, true, true, true), Surface);
        let down = Some("connection refused");
        assert_eq!(next_recovery_step(down, false, false, true), Recover);
        assert_eq!(next_recovery_step(down, false, true, true), Surface);
        assert_eq!(next_recovery_step(None, false, false, true), Recover);
        // Auto-recovery off: straight to the owner.
        assert_eq!(next_recovery_step(expired, false, false, false), Surface);
    }

    #[test]
    fn token_error_markers() {
        for yes in [
            "Token expired",
            "invalid_grant",
            "HTTP 401",
            "Unauthorized",
            "invalid_token",
        ] {
            assert!(is_token_error(yes), "{yes}");
        }
        for no in ["timeout", "503 Service Unavailable", "DNS failure"] {
            assert!(!is_token_error(no), "{no}");
        }
    }

    #[test]
    fn failure_cards_follow_the_spec_table() {
        use ConnectionFailureType as F;
        let actions = |k, n| {
            failure_card(k, "Microsoft 365", n)
                .1
                .into_iter()
                .map(|o| o.action)
                .collect::<Vec<_>>()
        };
        assert_eq!(
            actions(F::EnterprisePolicyBlock, None),
            ["request_admin_approval", "use_personal_account", "skip"]
        );
        assert_eq!(
            actions(F::ConsentDenied, None),
            ["retry", "retry_fewer_permissions", "skip"]
        );
        assert_eq!(actions(F::MfaRequired, None), ["retry", "skip"]);
        assert_eq!(actions(F::TokenRevoked, None), ["reconnect", "skip"]);
        assert_eq!(actions(F::RateLimited, Some(5)), ["retry_later", "skip"]);
        assert_eq!(
            actions(F::ServiceUnavailable, None),
            ["retry_later", "skip"]
        );
        let (msg, opts) = failure_card(F::RateLimited, "GitHub", Some(5));
        assert!(msg.contains("GitHub") && msg.contains("5 minutes"), "{msg}");
        assert_eq!(opts[0].label, "Retry in 5 minutes");
        let (msg, _) = failure_card(F::EnterprisePolicyBlock, "Microsoft 365", None);
        assert!(msg.contains("IT policy") && msg.contains("Microsoft 365"));
        // Every card offers a way out.
        for k in F::ALL {
            assert!(actions(*k, None).contains(&"skip".to_owned()), "{k:?}");
        }
    }
}
