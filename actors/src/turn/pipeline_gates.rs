//! Turn steps 0, 1 and 10 (§5.1, §5.1.1): the active gate set, the input
//! and output gate lanes and a policy block's escalation. Split from
//! `pipeline.rs` along the step seam.

use super::*;

impl Turn<'_> {
    /// Step 0: system gates + the active work item's gates, compiled once.
    pub(super) fn active_gate_set(&mut self) -> Result<(), TurnError> {
        self.step("active_gate_set");
        match ActiveGateSet::compile(&self.deps.config.gates.system, &[]) {
            Ok(set) => self.active = set,
            Err(e) => {
                // A gate set that cannot be compiled fails closed: the
                // input lane blocks the turn (§18.1 E_GATE_*).
                self.push(
                    "gate_set_invalid",
                    json!({"error": e.to_string(), "code": ErrorCode::EGateProvider.as_str()}),
                );
                self.blocked = true;
                self.reply = Some(escalation::POLITE_REDIRECT_MESSAGE.to_string());
            }
        }
        Ok(())
    }

    pub(super) fn gate_context(&self, key: &str, text: &str) -> JsonObject {
        obj(
            json!({key: text, "sender_id": self.record.message.sender_id,
                   "scope_id": self.scope.scope_id}),
        )
    }

    /// Applies a policy block's escalation (§5.1.1); returns the text sent
    /// instead of a response.
    pub(super) fn escalate(&mut self, outcome: &GateOutcome, lane: &str) -> String {
        let Some(r) = outcome.blocked() else {
            return escalation::POLITE_REDIRECT_MESSAGE.to_string();
        };
        let on_block = self
            .active
            .gates()
            .iter()
            .find(|g| g.name == r.gate_name)
            .map(|g| g.on_block.clone())
            .unwrap_or_else(|| "report".to_string());
        let block = GateBlock {
            gate_name: r.gate_name.clone(),
            reason: r.reason.clone(),
            on_block,
            sender_id: self.record.message.sender_id.clone(),
        };
        let plan = escalation::plan(&block, None, ChannelCaps::default(), 0);
        // The escalation's own `gate_blocked` (with sender) replaces the runner's.
        let runner_events = outcome
            .audit
            .iter()
            .filter(|e| e.event != silas_gates::audit::names::GATE_BLOCKED)
            .cloned()
            .collect::<Vec<_>>();
        self.push_events(runner_events);
        self.push_events(plan.audit);
        let mut text = None;
        for s in plan.steps {
            match s {
                EscalationStep::SendMessage(m) => text = Some(m),
                EscalationStep::ReportToOwner => self.push(
                    "gate_block_reported",
                    json!({"gate": block.gate_name, "scope_id": self.scope.scope_id}),
                ),
                _ => {}
            }
        }
        if self.scope.scope_id == crate::turn::OWNER_SCOPE
            && silas_gates::provider::is_fail_closed(r)
        {
            // The owner's own gate could not decide: saying so beats the
            // text its `on_block` has for a verdict (customers never see it).
            return owner_fail_closed_text(&r.gate_name, &r.reason, lane);
        }
        text.unwrap_or_else(|| "This request was blocked by a policy gate.".to_string())
    }

    /// The reply when a gate asks for an approval no card can carry yet: the
    /// owner learns which gate; anyone else gets the polite redirect.
    fn approval_unavailable_text(&self, gate: &str, lane: &str) -> String {
        if self.scope.scope_id != crate::turn::OWNER_SCOPE {
            return escalation::POLITE_REDIRECT_MESSAGE.to_string();
        }
        owner_fail_closed_text(
            gate,
            "it asks for an approval, which a gate cannot ask for yet",
            lane,
        )
    }

    /// This turn's active gates for `trigger`, charged to the turn's
    /// evaluation budget (`max_gate_evals_per_turn`).
    pub(super) async fn run_gates(&mut self, trigger: GateTrigger, ctx: JsonObject) -> GateOutcome {
        self.deps
            .gates
            .check_gates(self.active.gates(), trigger, None, ctx, &mut self.budget)
            .await
    }

    /// Step 1: input gates, two lanes; a policy block escalates and stops.
    pub(super) async fn input_gates(&mut self) -> Result<(), TurnError> {
        self.step("input_gates");
        if self.blocked {
            return Ok(());
        }
        let ctx = self.gate_context("message", &self.text);
        let outcome = self.run_gates(GateTrigger::EveryUserMessage, ctx).await;
        if outcome.blocked().is_some() {
            self.reply = Some(self.escalate(&outcome, "input"));
            self.blocked = true;
            return Ok(());
        }
        self.push_events(outcome.audit.clone());
        if let Some(gate) = outcome
            .approvals_required()
            .next()
            .map(|r| r.gate_name.clone())
        {
            // Gate approval cards need the card flow of the review issue;
            // until then a required approval fails closed.
            self.push("gate_approval_unavailable", json!({"lane": "input"}));
            self.reply = Some(self.approval_unavailable_text(&gate, "input"));
            self.blocked = true;
            return Ok(());
        }
        if let Some(Value::String(m)) = outcome.merged_context.get("message") {
            self.text = m.clone();
        }
        if !outcome.quality_results.is_empty() {
            self.push(
                "quality_gate_input",
                json!({"results": outcome.quality_results.len()}),
            );
        }
        self.input = Some(outcome);
        Ok(())
    }

    /// Step 8: output gates; a policy block suppresses the response.
    pub(super) async fn output_gates(&mut self) -> Result<(), TurnError> {
        self.step("output_gates");
        let Some(resp) = self.response.as_mut() else {
            return Ok(());
        };
        let ctx = obj(json!({"response": resp.message,
                             "sender_id": self.record.message.sender_id,
                             "scope_id": self.scope.scope_id}));
        // Field-level borrows: `resp` borrows `self.response` mutably.
        let outcome = self
            .deps
            .gates
            .check_gates(
                self.active.gates(),
                GateTrigger::EveryAgentResponse,
                None,
                ctx,
                &mut self.budget,
            )
            .await;
        if outcome.blocked().is_some() {
            self.reply = Some(self.escalate(&outcome, "output"));
            self.response = None;
            self.blocked = true;
            return Ok(());
        }
        if let Some(gate) = outcome
            .approvals_required()
            .next()
            .map(|r| r.gate_name.clone())
        {
            // As on input: no gate approval card yet, so it fails closed —
            // recorded with every gate's evaluation, as a block is.
            self.push_events(outcome.audit.clone());
            self.push("gate_approval_unavailable", json!({"lane": "output"}));
            self.reply = Some(self.approval_unavailable_text(&gate, "output"));
            self.response = None;
            self.blocked = true;
            return Ok(());
        }
        if let Some(Value::String(m)) = outcome.merged_context.get("response") {
            resp.message = m.clone();
        }
        if !outcome.quality_results.is_empty() {
            self.push(
                "quality_gate_output",
                json!({"results": outcome.quality_results.len()}),
            );
        }
        self.push_events(outcome.audit);
        Ok(())
    }
}

/// What the owner is told when one of their gates could not reach a verdict
/// and blocked to be safe (`silas_gates::provider::fail_closed`). The reason
/// names only the kind of failure (providers never put checked text in it);
/// it is cut all the same, as it lands in the chronicle.
fn owner_fail_closed_text(gate: &str, reason: &str, lane: &str) -> String {
    const MAX_REASON: usize = 200;
    let reason = if reason.chars().count() > MAX_REASON {
        format!(
            "{}…",
            silas_core::never_log::truncate_chars(reason, MAX_REASON)
        )
    } else {
        reason.to_owned()
    };
    let what = if lane == "output" {
        "my reply was withheld"
    } else {
        "your message was not processed"
    };
    format!(
        "Your gate \"{gate}\" could not reach a verdict ({reason}), so {what} to be safe. \
         Nothing else ran; Activity has the details."
    )
}

#[cfg(test)]
mod tests {
    use super::owner_fail_closed_text;

    #[test]
    fn the_owner_is_told_which_gate_failed_and_why() {
        let t = owner_fail_closed_text(
            "tone",
            "LLM gate failed closed: model call limit reached",
            "input",
        );
        assert!(t.contains("\"tone\""), "{t}");
        assert!(t.contains("model call limit reached"), "{t}");
        assert!(t.contains("your message was not processed"), "{t}");
        let t = owner_fail_closed_text("tone", "x", "output");
        assert!(t.contains("my reply was withheld"), "{t}");
    }

    #[test]
    fn a_long_reason_is_cut() {
        let t = owner_fail_closed_text("g", &"é".repeat(5000), "input");
        assert!(t.chars().count() < 400, "{}", t.len());
        assert!(t.contains('…'));
    }
}
