//! How `silas chat` prints a card: budget, checks and what the plan hash
//! covers, so a text approval shows what a web card shows; and how it says
//! what it cannot show, and why the daemon closed the socket.

use std::path::PathBuf;

use serde_json::Value;
use silas_core::ErrorCode;

use super::{TOKEN_ENV, out};
use crate::error::CliError;

pub(super) fn or_none(list: &[String]) -> String {
    if list.is_empty() {
        "none".into()
    } else {
        list.join(", ")
    }
}

/// `key=value` pairs of a JSON object's scalar fields, in order.
pub(super) fn render_budget(budget: &Value) -> String {
    match budget {
        Value::Object(o) => o
            .iter()
            .map(|(k, v)| match v {
                Value::String(s) => format!("{k}={s}"),
                other => format!("{k}={other}"),
            })
            .collect::<Vec<_>>()
            .join(", "),
        Value::Null => "(none)".into(),
        other => other.to_string(),
    }
}

/// One line per verification check: its name and what it runs.
pub(super) fn render_checks(verify: &Value) -> Vec<String> {
    let Some(checks) = verify.as_array().filter(|a| !a.is_empty()) else {
        return vec!["  checks: (none)".into()];
    };
    let mut lines = vec!["  checks:".to_string()];
    for c in checks {
        let name = c.get("name").and_then(Value::as_str).unwrap_or("check");
        // Network is part of what the owner approves for a check (§5.3).
        let net = if c.get("network").and_then(Value::as_bool) == Some(true) {
            " [network]"
        } else {
            ""
        };
        match c.get("run").and_then(Value::as_str) {
            Some(run) => lines.push(format!("    - {name}{net}: {run}")),
            None => lines.push(format!("    - {name}{net}")),
        }
    }
    lines
}

/// What the plan hash covers beyond title and body: how it runs, what it
/// builds on, its checks (and which get network), gates, access and
/// escalation — so a text approval shows what a web card shows.
pub(super) fn render_plan(p: &silas_core::risk::PlanView) -> Vec<String> {
    let mut lines = vec![format!(
        "  kind: {}{}",
        p.kind,
        if p.standing {
            " (standing approval: every cycle)"
        } else {
            ""
        }
    )];
    let mut field = |name: &str, v: String| {
        if !v.is_empty() {
            lines.push(format!("  {name}: {v}"));
        }
    };
    if let Some(ws) = &p.workspace {
        field(
            "workspace",
            ws.line().trim_start_matches("Workspace: ").to_string(),
        );
        for l in ws.detail_lines() {
            field("workspace", l);
        }
    }
    field("schedule", p.schedule.clone().unwrap_or_default());
    field("approval", p.terms.clone().unwrap_or_default());
    field("tasks", p.tasks.join(", "));
    field("depends on", p.depends_on.join(", "));
    field("part of", p.parent.clone().unwrap_or_default());
    field("continues", p.follow_up_of.clone().unwrap_or_default());
    field("uses artifacts", p.input_artifacts_from.join(", "));
    field("gates", p.gates.join("; "));
    field("access", p.access_levels.join("; "));
    field("on failure", p.escalation.join("; "));
    // Indented: the briefing's own lines cannot pass for this card's fields.
    field(
        "fix tasks",
        p.on_failure
            .as_deref()
            .unwrap_or_default()
            .replace('\n', "\n      | "),
    );
    field("skills", p.skills.join(", "));
    if p.checks.is_empty() {
        lines.push("  checks: (none)".into());
    } else {
        lines.push("  checks:".into());
        for c in &p.checks {
            let net = if c.network { "  [NETWORK]" } else { "" };
            let expect = if c.expect.is_empty() {
                String::new()
            } else {
                format!("  (expects {})", c.expect)
            };
            lines.push(format!("    - {}: {}{net}{expect}", c.name, c.run));
        }
    }
    lines
}

/// Frames the text channel does not render. A card (it carries a
/// `request_id`) is pointed out — it is left to the web app and times out
/// server-side with its safe default; feeds for the web app's other panes
/// (activity, …) are not chat and are skipped.
pub(super) fn other_frame(kind: &str, raw: &Value) {
    if raw.get("request_id").is_some_and(|r| !r.is_null()) {
        if let Some(step) = setup_step_text(kind, raw) {
            out(step);
        }
        out(format!(
            "({kind} card received: answer it in the web app; the text channel answers plan approvals only)"
        ));
    }
}

/// What a connection setup step asks the owner to do, for the text
/// channel: a device code is useless unless it is seen (before, `silas
/// chat` showed only that a card had come). Nothing to answer here: the
/// setup goes on by itself once the owner has signed in.
pub(super) fn setup_step_text(kind: &str, raw: &Value) -> Option<String> {
    if kind != "connection_setup_step" {
        return None;
    }
    let s = |k: &str| raw.get(k).and_then(Value::as_str).filter(|v| !v.is_empty());
    let service = s("service").unwrap_or("the service");
    match s("step_type")? {
        "device_code" => Some(format!(
            "To connect {service}: open {} and enter the code {}. The setup goes on by itself once you have.",
            s("verification_url")?,
            s("user_code")?
        )),
        "browser_redirect" => Some(format!(
            "To connect {service}: open {} and sign in. The setup goes on by itself once you have.",
            s("auth_url")?
        )),
        _ => None,
    }
}

/// Which owner credential `silas chat` connected with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Credential {
    /// `--token`.
    Flag,
    /// The [`TOKEN_ENV`] variable.
    Env,
    /// The CLI credential file the daemon writes.
    CliFile(PathBuf),
    /// `channels.web.auth_token`.
    Config,
    /// None found; where the CLI credential file should have been.
    Missing(PathBuf),
}

impl Credential {
    /// What was refused, and what to do about it.
    fn refused(&self) -> String {
        let fix = format!("pass another with --token or {TOKEN_ENV}");
        match self {
            Credential::Flag => {
                "the token passed with --token is wrong or revoked (`silas pair` makes a new device)"
                    .to_string()
            }
            Credential::Env => format!(
                "the token in {TOKEN_ENV} is wrong or revoked (`silas pair` makes a new device)"
            ),
            Credential::CliFile(p) => format!(
                "the CLI credential {} is revoked or stale (restarting `silas start` issues a new one), or {fix}",
                p.display()
            ),
            Credential::Config => {
                format!("channels.web.auth_token is not an owner credential; {fix}")
            }
            Credential::Missing(p) => format!(
                "no credential: {} does not exist (`silas start` writes it), or {fix}",
                p.display()
            ),
        }
    }
}

/// The daemon closed the socket: why, as one coded line.
pub(super) fn closed(code: Option<u16>, credential: &Credential) -> CliError {
    match code {
        Some(c) if c == silas_web::ws::CLOSE_UNAUTHORIZED => CliError::new(
            ErrorCode::EChannelAuth,
            format!(
                "the daemon refused the connection (close {c}): {}",
                credential.refused()
            ),
        ),
        Some(c) if c == silas_web::ws::CLOSE_GOING_AWAY => CliError::new(
            ErrorCode::EChannelDisconnected,
            format!("the daemon is shutting down (close {c})"),
        ),
        Some(c) => CliError::new(
            ErrorCode::EChannelDisconnected,
            format!("the daemon closed the connection (close {c})"),
        ),
        None => CliError::new(
            ErrorCode::EChannelDisconnected,
            "the daemon closed the connection",
        ),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn card_rendering() {
        let b = render_budget(&json!({"max_tokens": 10, "max_cost_usd": 0.5}));
        assert!(
            b.contains("max_tokens=10") && b.contains("max_cost_usd=0.5"),
            "{b}"
        );
        let c = render_checks(&json!([{"name": "exists", "run": "test -f notes.txt"}]));
        assert_eq!(c, vec!["  checks:", "    - exists: test -f notes.txt"]);
        assert_eq!(render_checks(&json!([])), vec!["  checks: (none)"]);
        let c = render_checks(&json!([{"name": "fetch", "run": "curl x", "network": true}]));
        assert_eq!(c, vec!["  checks:", "    - fetch [network]: curl x"]);
    }

    #[test]
    fn a_setup_step_shows_the_code_and_where_to_enter_it() {
        let step = json!({"type": "connection_setup_step", "request_id": "conn-step-1",
            "step_type": "device_code", "verification_url": "https://example.org/device",
            "user_code": "WDJB-MJHT", "service": "Example"});
        assert_eq!(
            setup_step_text("connection_setup_step", &step).as_deref(),
            Some(
                "To connect Example: open https://example.org/device and enter the code \
                 WDJB-MJHT. The setup goes on by itself once you have."
            )
        );
        let redirect =
            json!({"step_type": "browser_redirect", "auth_url": "https://example.org/login"});
        assert!(
            setup_step_text("connection_setup_step", &redirect)
                .is_some_and(|t| t.contains("open https://example.org/login and sign in"))
        );
        assert_eq!(setup_step_text("gate_approval", &step), None);
    }

    #[test]
    fn plan_rendering_shows_what_the_hash_covers() {
        let mut w = silas_core::model::work::WorkItem::new(
            "g",
            silas_core::model::work::WorkItemType::Goal,
            "watch",
        );
        w.schedule = Some("0 9 * * *".into());
        w.follow_up_of = Some("t-0".into());
        w.input_artifacts_from = vec!["*".into()];
        let mut c = silas_core::model::work::VerificationCheck::new(
            "fetch",
            "curl https://example.org",
            serde_json::from_value(json!({"exit_code": 0})).unwrap(),
        );
        c.network = true;
        w.verify.push(c);
        w.on_failure = "spawn_task".into();
        w.failure_context = Some("restart the feed".into());
        w.workspace = Some(silas_core::model::workspace::WorkspaceUse {
            commit_message: Some("chore: notes".into()),
            ..silas_core::model::workspace::WorkspaceUse::read("notes")
        });
        let mut view = silas_core::risk::PlanView::of(&w);
        view.terms = Some("standing for 30 days from your answer".into());
        let lines = render_plan(&view).join("\n");
        for want in [
            "workspace: notes (path not looked up) — read",
            "approval: standing for 30 days from your answer",
            "workspace: Commits locally: chore: notes",
            "kind: goal (standing approval: every cycle)",
            "schedule: 0 9 * * *",
            "continues: t-0",
            "uses artifacts: *",
            "- fetch: curl https://example.org  [NETWORK]  (expects {\"exit_code\":0})",
            // The goal only reads its workspace: no fix task starts, and the
            // card says so rather than promising one.
            "fix tasks: a failed check is reported; no fix task starts, since this goal only reads workspace 'notes'",
        ] {
            assert!(lines.contains(want), "{want} missing in:\n{lines}");
        }
        // With write access the briefing is shown.
        if let Some(ws) = w.workspace.as_mut() {
            ws.access = silas_core::model::workspace::Access::Write;
        }
        let lines = render_plan(&silas_core::risk::PlanView::of(&w)).join("\n");
        let want = "fix tasks: a failed check starts a fix task under this approval, briefed: \"restart the feed\"";
        assert!(lines.contains(want), "{want} missing in:\n{lines}");
    }
}
