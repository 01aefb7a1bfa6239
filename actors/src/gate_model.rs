//! The LLM gate provider's seam to the model layer (§5.5.3): `silas-gates`
//! builds the constrained prompt and reads the answer; this asks
//! `gates.llm_defaults.model` through [`GateModelBinding`], within the §18.5
//! model-call limits (a gate's call counts like any other), and audits
//! every call as `gate_model_call` — gate, lane, model, tokens and cost,
//! never the prompt or the answer (they carry the checked text).

use std::sync::Arc;
use std::time::Instant;

use serde_json::{Value, json};
use silas_core::config::Config;
pub use silas_gates::QualityJudge;
use silas_gates::{BoxFuture, JudgeError, JudgeRequest};
use silas_llm::LlmError;
use silas_llm::judge::GateModelBinding;
use silas_storage::Store;

use crate::limits::RuntimeLimits;

/// The audit event of one gate model call.
pub const GATE_MODEL_CALL: &str = "gate_model_call";
/// Response-schema names of the two gate answers.
pub const QUALITY_SCHEMA: &str = "gate_quality";
pub const POLICY_SCHEMA: &str = "gate_policy";
/// The limits key of an evaluation with neither a scope nor a work item.
const NO_SCOPE: &str = "gates";

/// [`QualityJudge`] over the daemon's gate model.
pub struct ModelJudge {
    binding: GateModelBinding,
    price: Option<silas_core::config::ModelPrice>,
    limits: Arc<RuntimeLimits>,
    store: Store,
}

impl ModelJudge {
    pub fn new(
        config: &Config,
        binding: GateModelBinding,
        limits: Arc<RuntimeLimits>,
        store: Store,
    ) -> Self {
        let price = config
            .llm
            .prices
            .get(config.gates.llm_defaults.model.as_str())
            .copied();
        ModelJudge {
            binding,
            price,
            limits,
            store,
        }
    }

    async fn ask(&self, req: JudgeRequest<'_>) -> Result<Value, JudgeError> {
        let scope = req.scope.as_deref().unwrap_or(NO_SCOPE);
        let mut data = json!({
            "gate": req.gate.name,
            "lane": if req.promoted { "policy" } else { "quality" },
            "scope_id": scope,
            "model": self.binding.model(),
        });
        if let Err(kind) = self.limits.llm_call(scope, Instant::now()) {
            data["outcome"] = json!("refused");
            data["limit"] = json!(kind.config_key());
            self.audit(data);
            return Err(JudgeError::Api(format!(
                "model-call limit reached ({})",
                kind.config_key()
            )));
        }
        let name = if req.promoted {
            POLICY_SCHEMA
        } else {
            QUALITY_SCHEMA
        };
        if let GateModelBinding::Unavailable(why) = &self.binding {
            data["outcome"] = json!("failed");
            data["error"] = json!(why);
            self.audit(data);
            return Err(JudgeError::Unavailable(why.clone()));
        }
        // The checked value may be a tool call's arguments, which no
        // inbound redaction saw: secrets never reach a model request.
        let prompt = silas_core::secrets::redact(&req.prompt).0;
        let out = self.binding.judge(prompt, name, Arc::new(req.schema)).await;
        match out {
            Ok(judged) => {
                data["outcome"] = json!("answered");
                data["prompt_tokens"] = json!(judged.usage.prompt_tokens);
                data["completion_tokens"] = json!(judged.usage.completion_tokens);
                data["cost_usd"] = json!(silas_llm::provider::cost_usd(
                    self.price.as_ref(),
                    judged.usage
                ));
                self.audit(data);
                Ok(judged.value)
            }
            Err(e) => {
                let (summary, err) = judge_error(&e);
                data["outcome"] = json!("failed");
                data["error"] = json!(summary);
                self.audit(data);
                Err(err)
            }
        }
    }

    fn audit(&self, data: Value) {
        let Value::Object(data) = data else { return };
        if let Err(e) = self.store.audit().log(GATE_MODEL_CALL, data) {
            tracing::error!(code = %silas_core::Coded::code(&e), "audit write failed: {e}");
        }
    }
}

/// What a failed gate model call is recorded as: never the server's own
/// text, which may echo the prompt and with it the checked text (a gate's
/// reason lands in the audit, the owner's Activity and the block message).
fn judge_error(e: &LlmError) -> (String, JudgeError) {
    let summary = match e {
        LlmError::Timeout { seconds } => format!("timed out after {seconds} s"),
        LlmError::RateLimited { attempts, .. } => {
            format!("rate limited by the model server after {attempts} attempt(s)")
        }
        LlmError::Api {
            status: Some(status),
            ..
        } => format!("the model server answered HTTP {status}"),
        LlmError::Api { status: None, .. } => "the model server could not be reached".into(),
        LlmError::Parse { .. } => "the answer was not one JSON object".into(),
        LlmError::NotChatApi { .. } => "the model server's answer is not a chat completion".into(),
        LlmError::MissingKey { var, .. } => format!("{var} is not set"),
    };
    let err = match e {
        LlmError::Timeout { .. } => JudgeError::Timeout,
        LlmError::Parse { .. } => JudgeError::Parse(summary.clone()),
        _ => JudgeError::Api(summary.clone()),
    };
    (summary, err)
}

impl QualityJudge for ModelJudge {
    fn judge<'a>(&'a self, req: JudgeRequest<'a>) -> BoxFuture<'a, Result<Value, JudgeError>> {
        Box::pin(self.ask(req))
    }
}

/// The judge when no gate model is wired (unit tests, a runner built
/// without the daemon's agents): every LLM gate fails with this reason.
pub struct NoModel;

impl QualityJudge for NoModel {
    fn judge<'a>(&'a self, _req: JudgeRequest<'a>) -> BoxFuture<'a, Result<Value, JudgeError>> {
        Box::pin(async { Err(JudgeError::Api("no model for LLM gates".into())) })
    }
}

#[cfg(test)]
mod tests {
    use silas_core::model::gates::{Gate, GateTrigger};

    use super::*;

    fn request(gate: &Gate, scope: &str) -> JudgeRequest<'static> {
        JudgeRequest {
            gate: Box::leak(Box::new(gate.clone())),
            prompt: "judge <<<DATA\nsecret-ish text\nDATA>>>".into(),
            schema: json!({}),
            promoted: true,
            scope: Some(scope.into()),
        }
    }

    /// A gate's model call is a model call: past the scope's per-minute
    /// limit it is refused (a promoted gate then blocks) and audited
    /// without the judged text.
    #[tokio::test]
    async fn gate_model_calls_count_against_the_model_call_limits() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_in(dir.path()).unwrap();
        let mut cfg = Config::default();
        cfg.limits.llm_calls_per_minute_per_scope = 1;
        let limits = Arc::new(RuntimeLimits::from_config(&cfg.limits));
        let judge = ModelJudge::new(
            &cfg,
            GateModelBinding::Unavailable("no key for the gate model".into()),
            limits,
            store.clone(),
        );
        let gate = Gate::new("g", GateTrigger::EveryAgentResponse);
        let first = judge.judge(request(&gate, "ws-1")).await.unwrap_err();
        assert!(first.to_string().contains("no key"), "{first}");
        let second = judge.judge(request(&gate, "ws-1")).await.unwrap_err();
        assert!(
            second
                .to_string()
                .contains("limits.llm_calls_per_minute_per_scope"),
            "{second}"
        );
        // Another scope still has its own allowance.
        let other = judge.judge(request(&gate, "ws-2")).await.unwrap_err();
        assert!(other.to_string().contains("no key"), "{other}");
        let entries = store.audit().tail(10).unwrap();
        let calls: Vec<_> = entries
            .iter()
            .filter(|e| e.event == GATE_MODEL_CALL)
            .collect();
        let outcomes: Vec<_> = calls.iter().map(|e| e.data["outcome"].clone()).collect();
        assert_eq!(
            outcomes,
            vec![json!("failed"), json!("refused"), json!("failed")]
        );
        for e in calls {
            assert_eq!(e.data["gate"], "g");
            assert_eq!(e.data["lane"], "policy");
            assert!(
                !Value::Object(e.data.clone())
                    .to_string()
                    .contains("secret-ish")
            );
        }
    }
}
