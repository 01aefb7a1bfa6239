//! The executor's tool loop (§7.3): the model calls tools through OpenAI
//! tool calling; every call goes through the wrapper chain
//! ([`crate::toolset`]); approval-sensitive calls pause the loop and return
//! control to the runtime ([`ToolLoopOutcome::ApprovalRequired`]) instead of
//! executing. The loop checks the work item's budget (`BudgetUsed::exceeds`,
//! `>=`) and its request cap before **every** model request, and charges
//! each response's tokens and cost to the budget.
//!
//! Tool execution itself is the [`ToolExecutor`] trait, implemented by the
//! execution layer (sandbox); tests use a double. Besides the chain's own
//! approval stage, the executor may [screen](ToolExecutor::screen) a call
//! and defer it (§5.2.1 c2: an `on_tool_call` gate said `require_approval`);
//! a deferred call pauses the run exactly like an approval-sensitive tool.
//! A [`PausedRun`] is plain serialisable data, so a pause survives a restart.

use serde::{Deserialize, Serialize};
use silas_core::model::work::{Budget, BudgetUsed};

use crate::error::LlmError;
use crate::provider::{BoxFuture, ChatMessage, ChatRequest, Provider, ToolCall, Usage, charge};
use crate::toolset::{CallDecision, ToolDef, Toolset};

/// What a tool run returns to the model.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolOutput {
    pub success: bool,
    /// Text given back to the model as the tool message (untrusted).
    pub content: String,
}

/// Runs tools. Implemented by the execution layer; its errors become a failed
/// tool result the model can react to.
pub trait ToolExecutor: Send + Sync {
    fn execute<'a>(&'a self, call: &'a ToolCall, tool: &'a ToolDef) -> BoxFuture<'a, ToolOutput>;

    /// Asked before [`execute`](Self::execute) for a call the wrapper chain
    /// lets run now. [`Screening::Defer`] pauses the run for approval; a
    /// resumed, approved call is executed without asking again.
    fn screen<'a>(&'a self, _call: &'a ToolCall, _tool: &'a ToolDef) -> BoxFuture<'a, Screening> {
        Box::pin(async { Screening::Run })
    }

    /// Told of a call the wrapper chain refused before the executor saw it
    /// (a tool that does not exist or is not offered): the model is told
    /// `refused: …`; the executor may record it.
    fn refused(&self, _call: &ToolCall, _reason: &str) {}
}

/// The executor's verdict on a call before it runs.
#[derive(Clone, Debug, PartialEq)]
pub enum Screening {
    Run,
    /// Pause for the owner's approval, with the reason shown to them.
    Defer {
        reason: String,
        /// The arguments that would run once approved, when the executor
        /// rewrote them (a gate's redaction): what the owner is shown.
        arguments: Option<serde_json::Value>,
    },
}

/// Limits of one loop run.
#[derive(Clone, Debug, PartialEq)]
pub struct LoopLimits {
    /// Model requests this run may make (`llm.max_tool_rounds`).
    pub max_requests: u32,
    pub budget: Budget,
    /// USD per token pair, from the price table: `(input, output)` per
    /// million tokens. `None` prices at 0.
    pub price: Option<silas_core::config::ModelPrice>,
}

/// A run paused for approval: everything needed to resume it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PausedRun {
    pub request: ChatRequest,
    /// The call awaiting approval, with its arguments as they will run once
    /// approved: when the executor's gates rewrote them (a redaction), the
    /// rewritten ones, here and in the transcript — the card shows these and
    /// the model's raw text is not kept.
    pub call: ToolCall,
    /// Calls of the same model turn not yet handled (run after the decision).
    pub remaining: Vec<ToolCall>,
    pub requests_made: u32,
    /// Why the call needs approval (the chain's policy or the executor's screen).
    #[serde(default)]
    pub reason: String,
}

/// The runtime's answer to a paused call.
#[derive(Clone, Debug, PartialEq)]
pub enum ApprovalResolution {
    /// Approved: run it (through the executor) and continue.
    Approved,
    /// Declined: tell the model and continue without running it.
    Declined { reason: String },
}

/// How a loop run ended.
#[derive(Clone, Debug, PartialEq)]
pub enum ToolLoopOutcome {
    /// The model answered without (further) tool calls.
    Finished {
        content: Option<String>,
        request: ChatRequest,
        requests_made: u32,
    },
    /// A call needs approval; nothing was executed for it.
    ApprovalRequired(Box<PausedRun>),
    /// The budget was exhausted before the next request.
    BudgetExhausted { requests_made: u32 },
    /// `max_requests` reached before the model finished.
    RequestLimit { requests_made: u32 },
    /// The provider failed (after its retries).
    Failed { error: LlmError, requests_made: u32 },
}

/// Runs the loop from a fresh request.
pub async fn run_tool_loop(
    provider: &dyn Provider,
    toolset: &dyn Toolset,
    executor: &dyn ToolExecutor,
    request: ChatRequest,
    limits: &LoopLimits,
    used: &mut BudgetUsed,
    usage: &mut Usage,
) -> ToolLoopOutcome {
    drive(
        provider,
        toolset,
        executor,
        request,
        Vec::new(),
        0,
        limits,
        used,
        usage,
    )
    .await
}

/// Resumes a paused run after the runtime's decision.
#[allow(clippy::too_many_arguments)]
pub async fn resume_tool_loop(
    provider: &dyn Provider,
    toolset: &dyn Toolset,
    executor: &dyn ToolExecutor,
    paused: PausedRun,
    resolution: ApprovalResolution,
    limits: &LoopLimits,
    used: &mut BudgetUsed,
    usage: &mut Usage,
) -> ToolLoopOutcome {
    let PausedRun {
        mut request,
        call,
        remaining,
        requests_made,
        ..
    } = paused;
    let content = match resolution {
        ApprovalResolution::Approved => match toolset.decide(&call) {
            // Re-checked: access may have changed while paused.
            CallDecision::Execute(tool) | CallDecision::ApprovalRequired(tool) => {
                executor.execute(&call, &tool).await.content
            }
            CallDecision::Refused { reason } => {
                executor.refused(&call, &reason);
                format!("refused: {reason}")
            }
        },
        ApprovalResolution::Declined { reason } => format!("declined by the owner: {reason}"),
    };
    request.messages.push(ChatMessage::Tool {
        call_id: call.id.clone(),
        content,
    });
    drive(
        provider,
        toolset,
        executor,
        request,
        remaining,
        requests_made,
        limits,
        used,
        usage,
    )
    .await
}

/// `call` with the gates' rewritten arguments, written into the model's own
/// turn in the transcript too (the stored pause and the next request keep
/// only what will run).
fn screened_call(request: &mut ChatRequest, call: ToolCall, args: &serde_json::Value) -> ToolCall {
    let call = ToolCall {
        arguments: args.to_string(),
        ..call
    };
    let turn = request.messages.iter_mut().rev().find_map(|m| match m {
        ChatMessage::Assistant { tool_calls, .. } => Some(tool_calls),
        _ => None,
    });
    if let Some(asked) = turn.and_then(|calls| calls.iter_mut().find(|c| c.id == call.id)) {
        asked.arguments = call.arguments.clone();
    }
    call
}

/// What happened to one requested call.
enum Handled {
    /// The tool message to give back to the model.
    Answer(String),
    /// Pause the run for approval (reason, rewritten arguments).
    Pause(String, Option<serde_json::Value>),
}

/// Handles pending calls of the current model turn, then asks the model
/// again, until it finishes, pauses or hits a limit.
#[allow(clippy::too_many_arguments)]
async fn drive(
    provider: &dyn Provider,
    toolset: &dyn Toolset,
    executor: &dyn ToolExecutor,
    mut request: ChatRequest,
    mut pending: Vec<ToolCall>,
    mut requests_made: u32,
    limits: &LoopLimits,
    used: &mut BudgetUsed,
    usage: &mut Usage,
) -> ToolLoopOutcome {
    loop {
        // 1. Handle the calls of the last model turn, in order.
        while !pending.is_empty() {
            let call = pending.remove(0);
            let handled = match toolset.decide(&call) {
                CallDecision::Execute(tool) => match executor.screen(&call, &tool).await {
                    Screening::Run => Handled::Answer(executor.execute(&call, &tool).await.content),
                    Screening::Defer { reason, arguments } => Handled::Pause(reason, arguments),
                },
                CallDecision::Refused { reason } => {
                    executor.refused(&call, &reason);
                    Handled::Answer(format!("refused: {reason}"))
                }
                CallDecision::ApprovalRequired(_) => {
                    Handled::Pause(format!("{} requires the owner's approval", call.name), None)
                }
            };
            let content = match handled {
                Handled::Answer(content) => content,
                Handled::Pause(reason, screened) => {
                    // The pause is stored until the owner answers: it keeps
                    // the arguments as the gates rewrote them.
                    let call = match &screened {
                        Some(args) => screened_call(&mut request, call, args),
                        None => call,
                    };
                    return ToolLoopOutcome::ApprovalRequired(Box::new(PausedRun {
                        request,
                        call,
                        remaining: pending,
                        requests_made,
                        reason,
                    }));
                }
            };
            request.messages.push(ChatMessage::Tool {
                call_id: call.id.clone(),
                content,
            });
        }
        // 2. Limits are checked before every request.
        if used.exceeds(&limits.budget) {
            return ToolLoopOutcome::BudgetExhausted { requests_made };
        }
        if requests_made >= limits.max_requests {
            return ToolLoopOutcome::RequestLimit { requests_made };
        }
        // 3. Ask the model, offering exactly what the chain allows now.
        request.tools = toolset.specs();
        requests_made += 1;
        let resp = match provider.complete(&request).await {
            Ok(r) => r,
            Err(error) => {
                return ToolLoopOutcome::Failed {
                    error,
                    requests_made,
                };
            }
        };
        usage.add(resp.usage);
        charge(
            used,
            resp.usage,
            crate::provider::cost_usd(limits.price.as_ref(), resp.usage),
        );
        if resp.tool_calls.is_empty() {
            return ToolLoopOutcome::Finished {
                content: resp.content,
                request,
                requests_made,
            };
        }
        request.messages.push(ChatMessage::Assistant {
            content: resp.content,
            tool_calls: resp.tool_calls.clone(),
        });
        pending = resp.tool_calls;
    }
}
