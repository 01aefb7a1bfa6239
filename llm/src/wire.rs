//! The chat-completions request as sent, borrowed from our [`ChatRequest`].
//!
//! async-openai's request types own every string and JSON tree, so sending
//! through them copied the whole system prompt, every tool's parameter
//! schema and the response schema on each model call, then dropped the
//! copies — a fifth of a loaded daemon's CPU went to cloning and freeing the
//! schema trees alone (issue #19). The body here borrows all of it and is
//! serialised straight into the HTTP request (`create_byot`); tests check it
//! is the very JSON async-openai's types serialise to.
//!
//! Structured output follows `mode` (see [`crate::negotiate`]): a
//! `json_schema` response format, a `json_object` one with the schema next
//! to the type (llama-cpp-python turns it into a grammar; servers that do
//! not know it ignore it or reject it, which steps down), or the schema in
//! the system prompt.
//!
//! Prompted tools: no `tools` on the wire, the definitions in the system
//! prompt, the history as text; and while tools are offered the schema goes
//! into the prompt too (structured `prompt` mode for this request), since a
//! grammar-constrained answer could not be a tool call.

use std::borrow::Cow;

use serde::{Serialize, Serializer};
use serde_json::Value;

use crate::negotiate::{WireMode, put_schema_in_prompt};
use crate::provider::{ChatMessage, ChatRequest, ToolCall, ToolSpec};
use crate::toolprompt::{ToolWire, put_tools_in_prompt, render_history};

/// A request body as sent.
#[derive(Debug, Serialize)]
pub struct WireBody<'a> {
    /// Borrowed unless the schema or the tools go into the prompt, which
    /// rewrites the messages.
    #[serde(serialize_with = "messages")]
    messages: Cow<'a, [ChatMessage]>,
    model: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_format: Option<Format<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_completion_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f32>,
    #[serde(skip_serializing_if = "<[_]>::is_empty", serialize_with = "tools")]
    tools: &'a [ToolSpec],
}

/// Our request → the JSON body sent, in structured-output `mode` with tools
/// offered as `tools` says, as a tree for tests to read.
#[cfg(test)]
pub(crate) fn to_wire(req: &ChatRequest, mode: WireMode, tools: ToolWire) -> Value {
    serde_json::to_value(wire_body(req, mode, tools)).unwrap_or(Value::Null)
}

/// The body sent, in structured-output `mode` with tools offered as
/// `tools` says.
pub fn wire_body(req: &ChatRequest, mut mode: WireMode, tools: ToolWire) -> WireBody<'_> {
    let mut messages = Cow::Borrowed(req.messages.as_slice());
    let mut offered = req.tools.as_slice();
    if tools == ToolWire::Prompt {
        let mut prompted = render_history(&req.messages);
        if !offered.is_empty() {
            put_tools_in_prompt(&mut prompted, offered);
            mode = WireMode::Prompt;
        }
        messages = Cow::Owned(prompted);
        offered = &[];
    }
    let schema = req.response_schema.as_ref();
    if let Some(schema) = schema.filter(|_| mode.schema_in_prompt()) {
        put_schema_in_prompt(messages.to_mut(), schema);
    }
    let response_format = schema.and_then(|s| match mode {
        WireMode::JsonSchema => Some(Format::JsonSchema {
            json_schema: JsonSchema {
                name: &s.name,
                schema: &s.schema,
                // Not strict: strict mode requires every property to be
                // required, which the spec's optional fields are not. We
                // validate on our side regardless.
                strict: false,
            },
        }),
        WireMode::JsonObject => Some(Format::JsonObject { schema: &s.schema }),
        WireMode::Prompt => None,
    });
    WireBody {
        messages,
        model: &req.model,
        response_format,
        max_completion_tokens: req.max_completion_tokens,
        temperature: req.temperature,
        tools: offered,
    }
}

#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Format<'a> {
    JsonSchema { json_schema: JsonSchema<'a> },
    JsonObject { schema: &'a Value },
}

#[derive(Debug, Serialize)]
struct JsonSchema<'a> {
    name: &'a str,
    schema: &'a Value,
    strict: bool,
}

/// One message in the API's shape (`role` beside the fields).
#[derive(Serialize)]
#[serde(tag = "role", rename_all = "lowercase")]
enum Message<'a> {
    System {
        content: &'a str,
    },
    User {
        content: &'a str,
    },
    Assistant {
        #[serde(skip_serializing_if = "Option::is_none")]
        content: Option<&'a str>,
        #[serde(skip_serializing_if = "<[_]>::is_empty", serialize_with = "calls")]
        tool_calls: &'a [ToolCall],
    },
    Tool {
        content: &'a str,
        tool_call_id: &'a str,
    },
}

impl<'a> From<&'a ChatMessage> for Message<'a> {
    fn from(m: &'a ChatMessage) -> Self {
        match m {
            ChatMessage::System(t) => Message::System { content: t },
            ChatMessage::User(t) => Message::User { content: t },
            ChatMessage::Assistant {
                content,
                tool_calls,
            } => Message::Assistant {
                content: content.as_deref(),
                tool_calls,
            },
            ChatMessage::Tool { call_id, content } => Message::Tool {
                content,
                tool_call_id: call_id,
            },
        }
    }
}

/// `{"type": "function", …}`, for offered tools and the calls made.
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Tagged<T> {
    Function(T),
}

#[derive(Serialize)]
struct Offered<'a> {
    function: Definition<'a>,
}

#[derive(Serialize)]
struct Definition<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a Value,
}

#[derive(Serialize)]
struct Call<'a> {
    id: &'a str,
    function: CallFunction<'a>,
}

#[derive(Serialize)]
struct CallFunction<'a> {
    name: &'a str,
    arguments: &'a str,
}

// `serialize_with` hands over a reference to the field itself.
#[allow(clippy::ptr_arg)]
fn messages<S: Serializer>(m: &Cow<'_, [ChatMessage]>, s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(m.iter().map(Message::from))
}

fn tools<S: Serializer>(t: &&[ToolSpec], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(t.iter().map(|t| {
        Tagged::Function(Offered {
            function: Definition {
                name: &t.name,
                description: &t.description,
                parameters: &t.parameters,
            },
        })
    }))
}

fn calls<S: Serializer>(c: &&[ToolCall], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(c.iter().map(|c| {
        Tagged::Function(Call {
            id: &c.id,
            function: CallFunction {
                name: &c.name,
                arguments: &c.arguments,
            },
        })
    }))
}

#[cfg(test)]
#[path = "wire_tests.rs"]
mod tests;
