//! What `silas chat` does with each server frame: replies, notices and
//! work status printed, cards rendered and queued for an answer. Split from
//! `chat.rs` along that seam.

use serde_json::Value;
use silas_core::model::approval::ChangesAction;
use silas_core::terminal::one_line;
use silas_web::protocol::ServerFrame;

use super::render::{or_none, other_frame, render_budget, render_checks, render_plan};
use super::{Card, Session, TERMINAL, out};

impl Session {
    /// Prints one server frame; queues approval cards.
    pub(super) fn on_frame(&mut self, text: &str) {
        let Ok(raw) = serde_json::from_str::<Value>(text) else {
            out(format!("(unreadable frame) {text}"));
            return;
        };
        let kind = raw
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let Ok(frame) = serde_json::from_value::<ServerFrame>(raw.clone()) else {
            other_frame(&kind, &raw);
            return;
        };
        match frame {
            ServerFrame::AuthOk { scope_id, model } => {
                let model = model.map(|m| format!("; {}", m.description));
                out(format!(
                    "connected (scope {scope_id}{})",
                    model.unwrap_or_default()
                ));
            }
            ServerFrame::Message {
                text, sender, id, ..
            } => {
                if let Some(id) = id {
                    // Acknowledged whether shown now or before: a reply
                    // sent again (a reconnect, a daemon restart) under an
                    // id this session has shown is not shown twice.
                    self.acks.push(id.clone());
                    if !self.shown.insert(id.clone()) {
                        return;
                    }
                    // Only a reply to one of ours answers a message: a
                    // notice ("Session rehydrated"), or the reply to an
                    // earlier session's message, counted as one let a
                    // piped session end before the reply it waited for.
                    if self.replies.reply(id) {
                        self.outstanding.replies = self.outstanding.replies.saturating_sub(1);
                    }
                }
                for (i, l) in text.lines().enumerate() {
                    if i == 0 {
                        out(format!("{sender}> {l}"));
                    } else {
                        out(format!("{:width$}  {l}", "", width = sender.len()));
                    }
                }
            }
            ServerFrame::ApprovalRequest {
                request_id,
                title,
                body,
                budget,
                verify,
                risk_level,
                risk_reasons,
                plan,
                from_scope,
            } => {
                out(format!(
                    "── approval requested: {title}  [{} risk]",
                    risk_level.as_str()
                ));
                for r in &risk_reasons {
                    out(format!("  risk: {r}"));
                }
                if let Some(scope) = &from_scope {
                    out(format!("  asked by a customer ({scope})"));
                }
                for l in body.lines() {
                    out(format!("  {l}"));
                }
                out(format!("  budget: {}", render_budget(&budget)));
                if let Some(p) = &plan {
                    for l in render_plan(p) {
                        out(l);
                    }
                } else {
                    for l in render_checks(&verify) {
                        out(l);
                    }
                }
                self.queue_card(Card {
                    request_id,
                    high_risk: risk_level >= silas_core::risk::RiskLevel::High,
                    starts_work: true,
                });
            }
            ServerFrame::ApplyChanges {
                request_id,
                title,
                phase,
                workspace,
                path,
                files,
                total_added,
                total_removed,
                protected_note,
                refused,
                diff,
                diff_truncated,
                commit_message,
                undo_until,
                risk_level,
                ..
            } => {
                let head = match phase {
                    ChangesAction::Apply => "apply these changes",
                    ChangesAction::Undo => "undo this apply",
                };
                // Names the executor chose (a file called "x\nfake line")
                // stay on their own line: one_line, not just printable.
                out(format!(
                    "── {head}? {}  [{} risk]",
                    one_line(&title),
                    risk_level.as_str()
                ));
                out(format!(
                    "  workspace {workspace} ({path}): {} file(s), +{total_added} −{total_removed}",
                    files.len()
                ));
                for f in &files {
                    let flag = if f.protected {
                        "  ⚠ defines the checks"
                    } else {
                        ""
                    };
                    out(format!(
                        "    {} {} (+{} −{}){flag}",
                        f.kind,
                        one_line(&f.path),
                        f.added,
                        f.removed
                    ));
                }
                if let Some(note) = &protected_note {
                    out(format!("  warning: {}", one_line(note)));
                }
                for r in &refused {
                    out(format!("  not applied: {}", one_line(r)));
                }
                if let Some(m) = &commit_message {
                    out(format!("  then commits locally: {}", one_line(m)));
                }
                if let Some(t) = &undo_until {
                    out(format!("  undo possible until {t}"));
                }
                if phase == ChangesAction::Apply {
                    for l in diff.lines() {
                        out(format!("  {l}"));
                    }
                    if diff_truncated {
                        out("  … (diff cut; the whole diff is the task's changes.diff)");
                    }
                }
                self.queue_card(Card {
                    request_id,
                    high_risk: risk_level >= silas_core::risk::RiskLevel::High,
                    starts_work: true,
                });
            }
            ServerFrame::SkillInstall {
                request_id,
                skill,
                content_hash,
                source,
                description,
                scripts,
                network,
                credentials,
                warnings,
                findings,
                transformation,
                mcp_server,
                risk_level,
                ..
            } => {
                out(format!(
                    "── install the skill {skill}? ({})  [{} risk]",
                    source.origin_text(),
                    risk_level.as_str()
                ));
                out(format!("  {description}"));
                out(format!("  content hash {content_hash}"));
                out(format!("  scripts (dry-run first): {}", or_none(&scripts)));
                out(format!("  network: {}", or_none(&network)));
                if !credentials.is_empty() {
                    out(format!("  credentials: {}", credentials.join(", ")));
                }
                if let Some(server) = mcp_server {
                    out(format!(
                        "  MCP server: {server} (tools listed and bound at the dry run)"
                    ));
                }
                out(format!("  report: valid, {warnings} warning(s)"));
                for f in findings.iter().chain(&transformation) {
                    out(format!("    {f}"));
                }
                self.queue_card(Card {
                    request_id,
                    high_risk: risk_level >= silas_core::risk::RiskLevel::High,
                    starts_work: false,
                });
            }
            // Shown, not counted: the reply it announces is still due.
            ServerFrame::Progress { text, .. } => out(format!("… {text}")),
            ServerFrame::Accepted { id, .. } => {
                if self.replies.accepted(id) {
                    self.outstanding.replies = self.outstanding.replies.saturating_sub(1);
                }
            }
            ServerFrame::WorkStatus {
                work_item_id,
                status,
                summary,
                verification,
            } => {
                // A summary that starts with its own status says it once.
                let summary = summary
                    .strip_prefix(status.as_str())
                    .and_then(|rest| rest.strip_prefix(": "))
                    .unwrap_or(summary.as_str());
                out(format!("[work {work_item_id}] {status}: {summary}"));
                for c in verification.as_array().into_iter().flatten() {
                    let name = c.get("name").and_then(Value::as_str).unwrap_or("check");
                    let passed = c.get("passed").and_then(Value::as_bool).unwrap_or(false);
                    let reason = c.get("reason").and_then(Value::as_str).unwrap_or("");
                    let mark = if passed { "passed" } else { "FAILED" };
                    out(format!("    {name}: {mark} {reason}"));
                    // The check's own words, indented under it (never
                    // mistaken for the daemon's lines).
                    let detail = c.get("detail").and_then(Value::as_str).unwrap_or("");
                    for line in detail.lines() {
                        out(format!("      | {line}"));
                    }
                }
                if TERMINAL.contains(&status.as_str()) {
                    self.outstanding.work = self.outstanding.work.saturating_sub(1);
                }
            }
            ServerFrame::Error {
                code,
                message,
                request_id,
            } => {
                match request_id {
                    // An answer to a card that is gone: its work will not run.
                    Some(r) => {
                        out(format!("error[{code}] (card {r}): {message}"));
                        self.outstanding.work = self.outstanding.work.saturating_sub(1);
                    }
                    // A refused message (busy_retry, rate_limited, …) gets no reply.
                    None => {
                        out(format!("error[{code}]: {message}"));
                        self.outstanding.replies = self.outstanding.replies.saturating_sub(1);
                    }
                }
            }
            // Card types the text channel cannot answer: shown, left to the
            // web app (they time out server-side with their safe default).
            _ => other_frame(&kind, &raw),
        }
    }
}
