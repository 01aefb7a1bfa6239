use async_openai::types::chat::{
    ChatCompletionMessageToolCall, ChatCompletionMessageToolCalls,
    ChatCompletionRequestAssistantMessage, ChatCompletionRequestAssistantMessageContent,
    ChatCompletionRequestMessage, ChatCompletionRequestSystemMessage,
    ChatCompletionRequestToolMessage, ChatCompletionRequestUserMessage, ChatCompletionTool,
    ChatCompletionTools, CreateChatCompletionRequest, FunctionCall, FunctionObject, ResponseFormat,
    ResponseFormatJsonSchema,
};
use serde_json::json;

use super::*;
use crate::provider::ResponseSchema;

fn request() -> ChatRequest {
    let mut r = ChatRequest::new("m", "You are the proxy.", "hello");
    r.response_schema = Some(ResponseSchema {
        name: "RouteDecision".into(),
        schema: json!({"type": "object", "required": ["route"]}).into(),
    });
    r
}

fn to_wire_n(r: &ChatRequest, mode: WireMode) -> Value {
    to_wire(r, mode, ToolWire::Native)
}

fn system_text(body: &Value) -> String {
    body["messages"][0]["content"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn request_shape_per_mode() {
    let r = request();
    let schema = json!({"type": "object", "required": ["route"]});

    let body = to_wire_n(&r, WireMode::JsonSchema);
    assert_eq!(body["response_format"]["type"], "json_schema");
    assert_eq!(
        body["response_format"]["json_schema"]["name"],
        "RouteDecision"
    );
    assert_eq!(body["response_format"]["json_schema"]["schema"], schema);
    assert_eq!(
        system_text(&body),
        "You are the proxy.",
        "schema not in the prompt"
    );

    let body = to_wire_n(&r, WireMode::JsonObject);
    assert_eq!(
        body["response_format"],
        json!({"type": "json_object", "schema": schema})
    );
    let sys = system_text(&body);
    assert!(
        sys.starts_with("You are the proxy.\n\n# Output format"),
        "{sys}"
    );
    assert!(
        sys.contains(r#"{"required":["route"],"type":"object"}"#),
        "{sys}"
    );

    let body = to_wire_n(&r, WireMode::Prompt);
    assert!(body.get("response_format").is_none(), "{body}");
    assert!(system_text(&body).contains("# Output format"));

    // Without a schema (tool rounds, plain calls) no mode adds anything.
    let plain = ChatRequest::new("m", "sys", "u");
    for mode in [WireMode::JsonSchema, WireMode::JsonObject, WireMode::Prompt] {
        let body = to_wire_n(&plain, mode);
        assert!(body.get("response_format").is_none(), "{mode:?}");
        assert_eq!(system_text(&body), "sys");
    }
    assert_eq!(to_wire_n(&r, WireMode::Prompt)["model"].as_str(), Some("m"));
}

/// Every message kind, tools, a schema and the optional fields.
fn full_request() -> ChatRequest {
    let mut r = request();
    r.max_completion_tokens = Some(512);
    r.temperature = Some(0.25);
    r.tools = vec![ToolSpec {
        name: "python_exec".into(),
        description: "Runs Python.".into(),
        parameters: json!({"type": "object", "properties": {"code": {"type": "string"}}}).into(),
    }];
    r.messages.extend([
        ChatMessage::Assistant {
            content: Some("Let me check.".into()),
            tool_calls: vec![ToolCall {
                id: "call_1".into(),
                name: "python_exec".into(),
                arguments: r#"{"code":"print(1)"}"#.into(),
            }],
        },
        ChatMessage::Tool {
            call_id: "call_1".into(),
            content: "1".into(),
        },
        ChatMessage::Assistant {
            content: None,
            tool_calls: vec![],
        },
        ChatMessage::Assistant {
            content: Some("Done.".into()),
            tool_calls: vec![],
        },
    ]);
    r
}

/// The body async-openai's own request types serialise to, built the way
/// requests were sent before the borrowed body (cloning everything).
fn reference(req: &ChatRequest, mode: WireMode, tools: ToolWire) -> Value {
    let mut req = req.clone();
    let mut mode = mode;
    if tools == ToolWire::Prompt {
        req.messages = render_history(&req.messages);
        if !req.tools.is_empty() {
            put_tools_in_prompt(&mut req.messages, &req.tools);
            mode = WireMode::Prompt;
        }
        req.tools.clear();
    }
    if let Some(schema) = req
        .response_schema
        .as_ref()
        .filter(|_| mode.schema_in_prompt())
    {
        put_schema_in_prompt(&mut req.messages, schema);
    }
    let typed = CreateChatCompletionRequest {
        messages: req.messages.iter().map(typed_message).collect(),
        model: req.model.clone(),
        tools: (!req.tools.is_empty()).then(|| {
            req.tools
                .iter()
                .map(|t| {
                    ChatCompletionTools::Function(ChatCompletionTool {
                        function: FunctionObject {
                            name: t.name.clone(),
                            description: Some(t.description.clone()),
                            parameters: Some((*t.parameters).clone()),
                            strict: None,
                        },
                    })
                })
                .collect()
        }),
        response_format: req
            .response_schema
            .as_ref()
            .filter(|_| mode == WireMode::JsonSchema)
            .map(|s| ResponseFormat::JsonSchema {
                json_schema: ResponseFormatJsonSchema {
                    description: None,
                    name: s.name.clone(),
                    schema: (*s.schema).clone(),
                    strict: Some(false),
                },
            }),
        max_completion_tokens: req.max_completion_tokens,
        temperature: req.temperature,
        ..Default::default()
    };
    let mut body = serde_json::to_value(&typed).unwrap();
    if let (WireMode::JsonObject, Some(s)) = (mode, &req.response_schema) {
        body["response_format"] = json!({"type": "json_object", "schema": *s.schema});
    }
    body
}

fn typed_message(m: &ChatMessage) -> ChatCompletionRequestMessage {
    match m {
        ChatMessage::System(t) => ChatCompletionRequestSystemMessage::from(t.as_str()).into(),
        ChatMessage::User(t) => ChatCompletionRequestUserMessage::from(t.as_str()).into(),
        ChatMessage::Assistant {
            content,
            tool_calls,
        } => ChatCompletionRequestAssistantMessage {
            content: content
                .as_ref()
                .map(|c| ChatCompletionRequestAssistantMessageContent::Text(c.clone())),
            tool_calls: (!tool_calls.is_empty()).then(|| {
                tool_calls
                    .iter()
                    .map(|c| {
                        ChatCompletionMessageToolCalls::Function(ChatCompletionMessageToolCall {
                            id: c.id.clone(),
                            function: FunctionCall {
                                name: c.name.clone(),
                                arguments: c.arguments.clone(),
                            },
                        })
                    })
                    .collect()
            }),
            ..Default::default()
        }
        .into(),
        ChatMessage::Tool { call_id, content } => ChatCompletionRequestToolMessage {
            content: content.as_str().into(),
            tool_call_id: call_id.clone(),
        }
        .into(),
    }
}

#[test]
fn the_borrowed_body_is_what_async_openai_sends() {
    let plain = ChatRequest::new("m", "sys", "u");
    for req in [request(), full_request(), plain] {
        for mode in [WireMode::JsonSchema, WireMode::JsonObject, WireMode::Prompt] {
            for tools in [ToolWire::Native, ToolWire::Prompt] {
                let body = wire_body(&req, mode, tools);
                // The bytes on the wire, not just the tree.
                let sent: Value =
                    serde_json::from_slice(&serde_json::to_vec(&body).unwrap()).unwrap();
                assert_eq!(sent, reference(&req, mode, tools), "{mode:?} {tools:?}");
            }
        }
    }
}

#[test]
fn nothing_is_copied_unless_the_prompt_changes() {
    let mut r = full_request();
    for (mode, tools, borrowed) in [
        (WireMode::JsonSchema, ToolWire::Native, true),
        (WireMode::JsonObject, ToolWire::Native, false),
        (WireMode::Prompt, ToolWire::Native, false),
        (WireMode::JsonSchema, ToolWire::Prompt, false),
    ] {
        let body = wire_body(&r, mode, tools);
        assert_eq!(
            matches!(body.messages, Cow::Borrowed(_)),
            borrowed,
            "{mode:?} {tools:?}"
        );
    }
    // Without a schema or tools no mode rewrites the prompt.
    r.response_schema = None;
    r.tools.clear();
    for mode in [WireMode::JsonSchema, WireMode::JsonObject, WireMode::Prompt] {
        let body = wire_body(&r, mode, ToolWire::Native);
        assert!(matches!(body.messages, Cow::Borrowed(_)), "{mode:?}");
    }
}
