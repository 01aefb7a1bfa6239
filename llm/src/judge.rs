//! The LLM gate provider's model (§5.5.3): `gates.llm_defaults.model` with
//! the spec's low-variance settings (temperature from
//! `gates.llm_defaults.temperature`, 0 by default; a strict
//! `max_tokens`). One call per gate evaluation, no repair round: a gate's
//! answer that does not parse is the gate's failure (open in the quality
//! lane, closed when promoted), decided by `silas-gates`.

use std::sync::Arc;

use serde_json::Value;

use crate::agents::Agent;
use crate::error::LlmError;
use crate::provider::{ChatMessage, ChatRequest, ResponseSchema, Usage};

/// The answer when it is exactly one JSON object, bare or as the only
/// fenced block — never an object picked out of prose: a judge explaining
/// that the checked text "contains {\"action\": \"continue\"}" must not
/// be read as that verdict (other calls use [`crate::negotiate::extract_json`]).
pub fn whole_object(text: &str) -> Option<&str> {
    let t = text.trim();
    let body = match t.strip_prefix("```").and_then(|r| r.strip_suffix("```")) {
        Some(fenced) => {
            // The language tag runs to the end of the fence's first line.
            let (tag, rest) = fenced.split_once('\n')?;
            if !tag.trim().chars().all(|c| c.is_ascii_alphanumeric()) {
                return None;
            }
            rest.trim()
        }
        None => t,
    };
    (body.starts_with('{') && body.ends_with('}') && !body.contains("```")).then_some(body)
}

/// The bound gate model.
#[derive(Clone, Debug)]
pub struct GateModel {
    pub agent: Agent,
    pub temperature: f32,
    pub max_tokens: u32,
}

/// What the gate model answered: its JSON object and what it cost.
#[derive(Clone, Debug, PartialEq)]
pub struct Judged {
    pub value: Value,
    pub usage: Usage,
}

/// The gate model, or why there is none (no key for its provider, the
/// offline responder): LLM gates then fail — open in the quality lane,
/// closed when promoted — with this reason.
#[derive(Clone, Debug)]
pub enum GateModelBinding {
    Bound(GateModel),
    Unavailable(String),
}

impl GateModelBinding {
    /// Asks the gate model. `name` is the response schema's name (also what
    /// a server without `json_schema` support is told in the prompt).
    pub async fn judge(
        &self,
        prompt: String,
        name: &str,
        schema: Arc<Value>,
    ) -> Result<Judged, LlmError> {
        let model = match self {
            GateModelBinding::Bound(m) => m,
            GateModelBinding::Unavailable(why) => {
                return Err(LlmError::Api {
                    status: None,
                    message: why.clone(),
                });
            }
        };
        let request = ChatRequest {
            model: model.agent.model.clone(),
            messages: vec![ChatMessage::User(prompt)],
            tools: Vec::new(),
            response_schema: Some(ResponseSchema {
                name: name.to_owned(),
                schema,
            }),
            max_completion_tokens: Some(model.max_tokens),
            temperature: Some(model.temperature),
        };
        let response = model.agent.provider.complete(&request).await?;
        let text = response.content.unwrap_or_default();
        let value = whole_object(&text)
            .ok_or_else(|| LlmError::Parse {
                message: "the gate model's answer is not one JSON object".into(),
            })
            .and_then(|json| {
                // Two values for one key is two verdicts: none counts.
                if let Some(dup) = silas_core::strict_json::duplicate_key(json) {
                    return Err(LlmError::Parse {
                        message: format!("the gate model's answer repeats a key: {dup}"),
                    });
                }
                serde_json::from_str(json).map_err(|e| LlmError::Parse {
                    message: format!("the gate model's answer is not JSON: {e}"),
                })
            })?;
        Ok(Judged {
            value,
            usage: response.usage,
        })
    }

    /// `provider:model` of the bound model (for the audit), if any.
    pub fn model(&self) -> Option<String> {
        match self {
            GateModelBinding::Bound(m) => {
                Some(format!("{}:{}", m.agent.provider.name(), m.agent.model))
            }
            GateModelBinding::Unavailable(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::provider::{BoxFuture, ChatResponse, Provider};

    /// Answers with fixed text and keeps the request it was sent.
    struct Canned {
        text: String,
        seen: std::sync::Mutex<Vec<ChatRequest>>,
    }

    impl Provider for Canned {
        fn name(&self) -> &str {
            "canned"
        }
        fn complete<'a>(
            &'a self,
            request: &'a ChatRequest,
        ) -> BoxFuture<'a, Result<ChatResponse, LlmError>> {
            self.seen.lock().unwrap().push(request.clone());
            let text = self.text.clone();
            Box::pin(async move {
                Ok(ChatResponse {
                    content: Some(text),
                    tool_calls: Vec::new(),
                    usage: Usage {
                        prompt_tokens: 30,
                        completion_tokens: 7,
                    },
                })
            })
        }
    }

    fn bound(text: &str) -> (GateModelBinding, Arc<Canned>) {
        let p = Arc::new(Canned {
            text: text.into(),
            seen: Default::default(),
        });
        let binding = GateModelBinding::Bound(GateModel {
            agent: Agent {
                provider: p.clone(),
                model: "judge-m".into(),
                price: None,
            },
            temperature: 0.0,
            max_tokens: 256,
        });
        (binding, p)
    }

    #[tokio::test]
    async fn one_low_variance_call_read_as_json() {
        let (j, p) = bound("```json\n{\"score\": 0.5, \"flags\": [], \"reason\": \"ok\"}\n```");
        let out = j
            .judge("the prompt".into(), "gate_quality", Arc::new(json!({})))
            .await
            .unwrap();
        assert_eq!(out.value["score"], 0.5);
        assert_eq!(out.usage.total(), 37);
        let seen = p.seen.lock().unwrap();
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0].temperature, Some(0.0));
        assert_eq!(seen[0].max_completion_tokens, Some(256));
        assert_eq!(seen[0].model, "judge-m");
        assert!(seen[0].tools.is_empty());
        assert_eq!(
            seen[0].response_schema.as_ref().map(|s| s.name.as_str()),
            Some("gate_quality")
        );
        assert_eq!(j.model().as_deref(), Some("canned:judge-m"));
    }

    #[test]
    fn only_a_whole_object_is_an_answer() {
        let verdict = "{\"action\": \"block\", \"reason\": \"abusive\"}";
        for ok in [
            verdict.to_owned(),
            format!("  {verdict}\n"),
            format!("```json\n{verdict}\n```"),
            format!("```\n{verdict}\n```"),
        ] {
            assert_eq!(whole_object(&ok), Some(verdict), "{ok:?}");
        }
        for bad in [
            format!("It contains {{\"action\": \"continue\"}}. My verdict: {verdict}"),
            format!("Verdict: {verdict}"),
            format!("```json\n{verdict}\n```\nand also ```{{}}```"),
            format!("```json\n{{\"action\": \"continue\"}}\n```\n```json\n{verdict}\n```"),
            "```python {}\n```".to_owned(),
            String::new(),
        ] {
            assert_eq!(whole_object(&bad), None, "{bad:?}");
        }
    }

    #[tokio::test]
    async fn prose_and_no_model_are_errors() {
        let (j, _) = bound("I think it is fine.");
        let e = j
            .judge("p".into(), "gate_quality", Arc::new(json!({})))
            .await
            .unwrap_err();
        assert!(matches!(e, LlmError::Parse { .. }), "{e}");
        // Two verdicts in one object (serde_json would keep the last).
        let (j, _) = bound(r#"{"action":"block","reason":"x","action":"continue"}"#);
        let e = j
            .judge("p".into(), "gate_policy", Arc::new(json!({})))
            .await
            .unwrap_err();
        assert!(
            matches!(&e, LlmError::Parse { message } if message.contains("repeats a key")),
            "{e}"
        );
        let none = GateModelBinding::Unavailable("no key".into());
        let e = none
            .judge("p".into(), "gate_quality", Arc::new(json!({})))
            .await
            .unwrap_err();
        assert!(e.to_string().contains("no key"), "{e}");
        assert_eq!(none.model(), None);
    }
}
