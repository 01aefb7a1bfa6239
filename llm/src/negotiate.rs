//! Structured-output negotiation per provider (issue #16, item 1).
//!
//! Servers differ in how they can be asked for schema-shaped JSON:
//!
//! * [`WireMode::JsonSchema`] — `response_format: {type: json_schema}`
//!   (OpenAI, OpenRouter, vLLM, llama.cpp's server, Ollama ≥ 0.5);
//! * [`WireMode::JsonObject`] — `response_format: {type: json_object,
//!   schema}` plus the schema in the system prompt (llama-cpp-python, which
//!   turns `schema` into a grammar, LM Studio, older servers);
//! * [`WireMode::Prompt`] — no `response_format`; the schema in the system
//!   prompt and the JSON extracted from the text ([`extract_json`]).
//!
//! With `structured_output: auto` a provider starts at `json_schema` and a
//! [`Negotiator`] steps down one mode each time the server rejects the
//! request naming `response_format` ([`rejects_response_format`]). The
//! working mode is kept for the life of the process and each downgrade is
//! reported once ([`LlmEvent::StructuredModeDowngraded`]), however many calls
//! race into the same rejection. A rejected `response_format` is never sent
//! again unchanged. Validation happens on our side in every mode.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use serde::Serialize;
use silas_core::config::StructuredOutputMode;

use crate::error::LlmError;
use crate::provider::{ChatMessage, ResponseSchema};

/// What a request actually carries on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WireMode {
    JsonSchema,
    JsonObject,
    Prompt,
}

impl WireMode {
    pub fn as_str(self) -> &'static str {
        match self {
            WireMode::JsonSchema => "json_schema",
            WireMode::JsonObject => "json_object",
            WireMode::Prompt => "prompt",
        }
    }

    /// The next, less demanding mode.
    pub fn next(self) -> Option<WireMode> {
        match self {
            WireMode::JsonSchema => Some(WireMode::JsonObject),
            WireMode::JsonObject => Some(WireMode::Prompt),
            WireMode::Prompt => None,
        }
    }

    /// Whether the schema goes into the system prompt.
    pub fn schema_in_prompt(self) -> bool {
        self != WireMode::JsonSchema
    }

    fn to_u8(self) -> u8 {
        match self {
            WireMode::JsonSchema => 0,
            WireMode::JsonObject => 1,
            WireMode::Prompt => 2,
        }
    }

    fn from_u8(v: u8) -> WireMode {
        match v {
            0 => WireMode::JsonSchema,
            1 => WireMode::JsonObject,
            _ => WireMode::Prompt,
        }
    }
}

/// The outcome of [`Negotiator::step_down`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepDown {
    /// This call moved the provider to the mode (report it).
    Changed(WireMode),
    /// Another call already moved it lower; use this mode, report nothing.
    AlreadyLower(WireMode),
    /// No mode left to try (or the mode is fixed by configuration).
    Exhausted,
}

/// One provider's structured-output mode for the process.
#[derive(Debug)]
pub struct Negotiator {
    auto: bool,
    current: AtomicU8,
}

impl Negotiator {
    pub fn new(configured: StructuredOutputMode) -> Self {
        let (auto, start) = match configured {
            StructuredOutputMode::Auto => (true, WireMode::JsonSchema),
            StructuredOutputMode::JsonSchema => (false, WireMode::JsonSchema),
            StructuredOutputMode::JsonObject => (false, WireMode::JsonObject),
            StructuredOutputMode::Prompt => (false, WireMode::Prompt),
        };
        Negotiator {
            auto,
            current: AtomicU8::new(start.to_u8()),
        }
    }

    /// The mode the next request uses.
    pub fn mode(&self) -> WireMode {
        WireMode::from_u8(self.current.load(Ordering::Acquire))
    }

    pub fn is_auto(&self) -> bool {
        self.auto
    }

    /// The server rejected a request sent in `from`: move one mode down.
    /// Compare-and-swap, so concurrent rejections of the same mode make
    /// exactly one downgrade (and one audit record).
    pub fn step_down(&self, from: WireMode) -> StepDown {
        if !self.auto {
            return StepDown::Exhausted;
        }
        let Some(next) = from.next() else {
            return StepDown::Exhausted;
        };
        match self.current.compare_exchange(
            from.to_u8(),
            next.to_u8(),
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => StepDown::Changed(next),
            // Modes only ever decrease: a different current value is lower.
            Err(now) if now > from.to_u8() => StepDown::AlreadyLower(WireMode::from_u8(now)),
            Err(_) => StepDown::Exhausted,
        }
    }
}

/// Whether a failed call is the server refusing our `response_format`
/// (any 4xx/5xx, or an unparsable error body, whose text names it).
pub fn rejects_response_format(err: &LlmError) -> bool {
    match err {
        LlmError::Api { status, message } => {
            status.is_none_or(|s| (400..=599).contains(&s))
                && message.to_ascii_lowercase().contains("response_format")
        }
        _ => false,
    }
}

/// A model-layer event the daemon writes to the audit log.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum LlmEvent {
    /// `llm_structured_mode_downgraded`: a provider now uses a less
    /// demanding structured-output mode (once per downgrade per process).
    StructuredModeDowngraded(ModeDowngrade),
    /// `llm_tool_mode_downgraded`: a provider rejected `tools` and now
    /// offers them in the prompt (once per process).
    ToolModeDowngraded(crate::toolprompt::ToolModeDowngrade),
    /// `llm_breaker_changed`: a provider's circuit breaker changed state.
    BreakerChanged {
        provider: String,
        from: crate::chain::BreakerState,
        to: crate::chain::BreakerState,
    },
}

/// The data of [`LlmEvent::StructuredModeDowngraded`]. The server's error
/// text is not included: only its status.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ModeDowngrade {
    pub provider: String,
    pub from: WireMode,
    pub to: WireMode,
    pub status: Option<u16>,
}

impl LlmEvent {
    /// The audit event name.
    pub fn name(&self) -> &'static str {
        match self {
            LlmEvent::StructuredModeDowngraded(_) => "llm_structured_mode_downgraded",
            LlmEvent::ToolModeDowngraded(_) => "llm_tool_mode_downgraded",
            LlmEvent::BreakerChanged { .. } => "llm_breaker_changed",
        }
    }

    /// The audit data (the variant's fields).
    pub fn data(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }
}

/// Where providers report [`LlmEvent`]s (the daemon: the audit log).
pub type EventSink = Arc<dyn Fn(LlmEvent) + Send + Sync>;

/// The instruction that carries the schema in `json_object` and `prompt`
/// modes.
pub fn schema_instruction(schema: &ResponseSchema) -> String {
    let text = serde_json::to_string(&schema.schema).unwrap_or_default();
    format!(
        "\n\n# Output format\nReply with exactly one JSON object and nothing else (no prose, no code fence). \
         It must validate against this JSON Schema (named {}):\n{text}",
        schema.name
    )
}

/// Adds the schema instruction to the system prompt (a system message is
/// inserted first when the request has none, e.g. the scorer's).
pub fn put_schema_in_prompt(messages: &mut Vec<ChatMessage>, schema: &ResponseSchema) {
    let instruction = schema_instruction(schema);
    match messages.iter_mut().find_map(|m| match m {
        ChatMessage::System(t) => Some(t),
        _ => None,
    }) {
        Some(text) => text.push_str(&instruction),
        None => messages.insert(0, ChatMessage::System(instruction.trim_start().to_owned())),
    }
}

/// The JSON object in a model's text: the whole text when it is one, else
/// the body of the first fenced code block that holds an object, else the
/// first balanced `{…}`. Returns the trimmed text when none is found, so
/// the parser reports the real error.
pub fn extract_json(text: &str) -> &str {
    let t = text.trim();
    if t.starts_with('{') && t.ends_with('}') {
        return t;
    }
    if let Some(block) = fenced_block(t)
        && block.starts_with('{')
    {
        return block;
    }
    first_balanced_object(t).unwrap_or(t)
}

/// The trimmed body of the first ```…``` block (its language tag dropped).
fn fenced_block(text: &str) -> Option<&str> {
    let start = text.find("```")?;
    let rest = &text[start + 3..];
    // The language tag runs to the end of the fence's line.
    let body_start = rest.find('\n').map_or(0, |i| i + 1);
    let body = &rest[body_start..];
    let end = body.find("```").unwrap_or(body.len());
    Some(body[..end].trim())
}

/// The first `{…}` whose braces balance, skipping braces inside strings.
fn first_balanced_object(text: &str) -> Option<&str> {
    let start = text.find('{')?;
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for (i, c) in text[start..].char_indices() {
        if in_string {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_string = true,
            '{' => depth += 1,
            '}' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return Some(&text[start..=start + i]);
                }
            }
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn auto_steps_down_once_per_mode_and_fixed_modes_never_do() {
        let n = Negotiator::new(StructuredOutputMode::Auto);
        assert_eq!(n.mode(), WireMode::JsonSchema);
        assert_eq!(
            n.step_down(WireMode::JsonSchema),
            StepDown::Changed(WireMode::JsonObject)
        );
        // A second call that also failed in json_schema: no second report.
        assert_eq!(
            n.step_down(WireMode::JsonSchema),
            StepDown::AlreadyLower(WireMode::JsonObject)
        );
        assert_eq!(n.mode(), WireMode::JsonObject);
        assert_eq!(
            n.step_down(WireMode::JsonObject),
            StepDown::Changed(WireMode::Prompt)
        );
        assert_eq!(n.step_down(WireMode::Prompt), StepDown::Exhausted);
        assert_eq!(n.mode(), WireMode::Prompt);
        for (cfg, mode) in [
            (StructuredOutputMode::JsonSchema, WireMode::JsonSchema),
            (StructuredOutputMode::JsonObject, WireMode::JsonObject),
            (StructuredOutputMode::Prompt, WireMode::Prompt),
        ] {
            let n = Negotiator::new(cfg);
            assert_eq!(n.mode(), mode);
            assert_eq!(n.step_down(mode), StepDown::Exhausted, "{cfg:?}");
            assert_eq!(n.mode(), mode);
        }
    }

    #[test]
    fn rejection_classification() {
        let api = |status: Option<u16>, m: &str| LlmError::Api {
            status,
            message: m.into(),
        };
        let llama_cpp_python = "1 validation error for CreateChatCompletionRequest\nresponse_format.type\n  Input should be 'text' or 'json_object'";
        let table = [
            (api(Some(500), llama_cpp_python), true),
            (
                api(
                    Some(400),
                    "Unknown parameter: 'response_format.json_schema'",
                ),
                true,
            ),
            (api(Some(422), "invalid RESPONSE_FORMAT"), true),
            (
                api(None, r#"{"detail":[{"loc":["body","response_format"]}]}"#),
                true,
            ),
            (api(Some(500), "out of memory"), false),
            (api(Some(429), "slow down"), false),
            (api(Some(200), "response_format"), false),
            (LlmError::Timeout { seconds: 1 }, false),
            (
                LlmError::Parse {
                    message: "response_format".into(),
                },
                false,
            ),
        ];
        for (e, want) in table {
            assert_eq!(rejects_response_format(&e), want, "{e:?}");
        }
    }

    #[test]
    fn schema_goes_into_the_system_prompt() {
        let schema = ResponseSchema {
            name: "RouteDecision".into(),
            schema: json!({"type": "object", "properties": {"route": {"enum": ["direct"]}}}).into(),
        };
        let mut with_system = vec![
            ChatMessage::System("You are the proxy.".into()),
            ChatMessage::User("hi".into()),
        ];
        put_schema_in_prompt(&mut with_system, &schema);
        let ChatMessage::System(s) = &with_system[0] else {
            panic!()
        };
        assert!(
            s.starts_with("You are the proxy.\n\n# Output format"),
            "{s}"
        );
        assert!(
            s.contains("RouteDecision") && s.contains(r#""enum":["direct"]"#),
            "{s}"
        );
        assert_eq!(with_system[1], ChatMessage::User("hi".into()));
        let mut no_system = vec![ChatMessage::User("score".into())];
        put_schema_in_prompt(&mut no_system, &schema);
        assert!(
            matches!(&no_system[0], ChatMessage::System(s) if s.starts_with("# Output format"))
        );
        assert_eq!(no_system.len(), 2);
    }

    #[test]
    fn extraction_table() {
        let obj = r#"{"a": "x}", "b": {"c": 1}}"#;
        let table = [
            (obj.to_owned(), obj),
            (format!("  {obj}\n"), obj),
            (format!("```json\n{obj}\n```"), obj),
            (
                format!("Sure! Here it is:\n```\n{obj}\n```\nAnything else?"),
                obj,
            ),
            (format!("Here you go: {obj} — hope it helps {{x}}"), obj),
            (
                r#"{"s": "a \"quoted\" } brace"} tail"#.to_owned(),
                r#"{"s": "a \"quoted\" } brace"}"#,
            ),
            ("no json here".to_owned(), "no json here"),
            ("{unbalanced".to_owned(), "{unbalanced"),
        ];
        for (input, want) in table {
            assert_eq!(extract_json(&input), want, "{input:?}");
        }
    }

    #[test]
    fn downgrade_event_shape() {
        let e = LlmEvent::StructuredModeDowngraded(ModeDowngrade {
            provider: "local".into(),
            from: WireMode::JsonSchema,
            to: WireMode::JsonObject,
            status: Some(500),
        });
        assert_eq!(e.name(), "llm_structured_mode_downgraded");
        assert_eq!(
            e.data(),
            json!({"provider": "local", "from": "json_schema", "to": "json_object", "status": 500})
        );
    }
}
