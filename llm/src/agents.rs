//! The four agents of §7 — Proxy, Planner, Executor, Scorer — as thin
//! wrappers binding a provider, a model, its price and a system prompt to
//! `run_structured_agent` and the tool loop. Every call charges its tokens
//! and cost to the `BudgetUsed` it is given.

use std::sync::Arc;
use std::time::Duration;

use silas_core::config::{Config, ModelPrice};
use silas_core::model::agents::{AgentResponse, RouteDecision};
use silas_core::model::execution::ExecutorAgentOutput;
use silas_core::model::work::{Budget, BudgetUsed};

use crate::error::LlmError;
use crate::judge::GateModelBinding;
use crate::prompts::{self, RenderedContext};
use crate::provider::{
    ChatMessage, ChatRequest, Provider, ResponseSchema, Usage, charge, cost_usd,
};
use crate::route::RouteDraft;
use crate::schema::ScorerOutput;
use crate::structured::{
    CallKind, FallbackCause, REPAIR_MARKER, Structured, StructuredContext, StructuredOutput,
    StructuredRun, parse_output, proxy_fallback, run_structured_agent, summarize,
};
use crate::tool_loop::{
    ApprovalResolution, LoopLimits, PausedRun, ToolExecutor, ToolLoopOutcome, resume_tool_loop,
    run_tool_loop,
};
use crate::toolset::Toolset;

/// The scorer's hard timeout (§5.7).
pub const SCORER_TIMEOUT: Duration = Duration::from_secs(2);

/// One model binding.
#[derive(Clone)]
pub struct Agent {
    pub provider: Arc<dyn Provider>,
    /// Provider-side model id.
    pub model: String,
    /// Price per million tokens, if listed in `llm.prices`.
    pub price: Option<ModelPrice>,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("provider", &self.provider.name())
            .field("model", &self.model)
            .finish_non_exhaustive()
    }
}

impl Agent {
    /// `provider` and `model` for `spec`, priced at the chain's first
    /// member (the preferred one) from `llm.prices`.
    pub fn priced(cfg: &Config, spec: &str, provider: Arc<dyn Provider>, model: String) -> Agent {
        Agent {
            provider,
            model,
            price: Config::model_chain(spec)
                .first()
                .and_then(|m| cfg.llm.prices.get(*m))
                .copied(),
        }
    }

    fn request(&self, system: String, user: &str) -> ChatRequest {
        ChatRequest::new(self.model.clone(), system, user)
    }

    async fn structured<T: StructuredOutput>(
        &self,
        request: ChatRequest,
        ctx: &StructuredContext,
        used: &mut BudgetUsed,
    ) -> StructuredRun<T> {
        let run = run_structured_agent::<T>(self.provider.as_ref(), request, ctx).await;
        charge(used, run.usage, cost_usd(self.price.as_ref(), run.usage));
        run
    }
}

/// How an executor run ended.
#[derive(Clone, Debug, PartialEq)]
pub enum ExecutorOutcome {
    /// The model finished: a valid output or the executor fallback (the
    /// attempt fails with `executor_structured_output_invalid`).
    Completed(Structured<ExecutorAgentOutput>),
    /// A tool call awaits the owner's approval; resume with
    /// [`Agents::resume_executor`].
    ApprovalRequired(Box<PausedRun>),
    /// Budget reached before the next request (`>=`).
    BudgetExhausted,
    /// `llm.max_tool_rounds` reached.
    RequestLimit,
}

/// The configured agents.
#[derive(Clone, Debug)]
pub struct Agents {
    pub proxy: Agent,
    pub planner: Agent,
    pub executor: Agent,
    pub scorer: Agent,
    pub ctx: StructuredContext,
    pub max_tool_rounds: u32,
    /// The scorer's own breaker (§5.7): open after 3 consecutive failures
    /// or timeouts, for 5 minutes; shared by every scope.
    pub scorer_breaker: Arc<ScorerBreaker>,
    /// `gates.llm_defaults.model` for LLM gates (§5.5.3), bound by
    /// [`crate::select::build_agents_with_board`] when one of its members
    /// has its key.
    pub gate_model: GateModelBinding,
}

/// §5.7's scorer circuit breaker.
#[derive(Debug)]
pub struct ScorerBreaker(std::sync::Mutex<crate::chain::Breaker>);

impl Default for ScorerBreaker {
    fn default() -> Self {
        ScorerBreaker(std::sync::Mutex::new(crate::chain::Breaker::new(
            crate::chain::BreakerPolicy {
                failure_threshold: 3,
                open_for: Duration::from_secs(300),
            },
        )))
    }
}

impl ScorerBreaker {
    fn with<T>(&self, f: impl FnOnce(&mut crate::chain::Breaker) -> T) -> T {
        match self.0.lock() {
            Ok(mut b) => f(&mut b),
            Err(p) => f(&mut p.into_inner()),
        }
    }

    /// The breaker's state now (for tests and status).
    pub fn state(&self) -> crate::chain::BreakerState {
        self.with(|b| b.state())
    }
}

impl Agents {
    /// Binds each `models.*` spec to `provider_for(spec)`.
    pub fn from_config(
        cfg: &Config,
        mut provider_for: impl FnMut(&str) -> Result<(Arc<dyn Provider>, String), LlmError>,
    ) -> Result<Agents, LlmError> {
        Self::from_config_by_role(cfg, |_, spec| provider_for(spec))
    }

    /// [`Self::from_config`], telling `provider_for` which role it binds.
    pub fn from_config_by_role(
        cfg: &Config,
        mut provider_for: impl FnMut(CallKind, &str) -> Result<(Arc<dyn Provider>, String), LlmError>,
    ) -> Result<Agents, LlmError> {
        let mut bind = |role: CallKind, spec: &str| -> Result<Agent, LlmError> {
            let (provider, model) = provider_for(role, spec)?;
            Ok(Agent::priced(cfg, spec, provider, model))
        };
        Ok(Agents {
            proxy: bind(CallKind::Proxy, &cfg.models.proxy)?,
            planner: bind(CallKind::Planner, &cfg.models.planner)?,
            executor: bind(CallKind::Executor, &cfg.models.executor)?,
            scorer: bind(CallKind::Scorer, &cfg.models.scorer)?,
            ctx: StructuredContext::from_config(cfg),
            max_tool_rounds: cfg.llm.max_tool_rounds,
            scorer_breaker: Default::default(),
            gate_model: GateModelBinding::Unavailable(
                "no model for LLM gates: the daemon runs on the offline responder".into(),
            ),
        })
    }

    /// The context window the turn's prompt must fit: the smaller of the
    /// proxy's and the planner's (both see the same context), when known.
    pub fn context_window(&self) -> Option<u64> {
        [&self.proxy, &self.planner]
            .iter()
            .filter_map(|a| a.provider.context_window())
            .min()
    }

    /// Learns unconfigured context windows from the servers' model
    /// listings (the daemon runs it in the background at start).
    pub async fn discover_context_windows(&self) {
        for a in [&self.proxy, &self.planner] {
            a.provider.discover_context_window(&a.model).await;
        }
    }

    /// Characters of the longest turn system prompt before any context
    /// (§3.5 `system_actual`), counting the response schema, which a
    /// server without `json_schema` support gets in the prompt.
    pub fn system_prompt_chars(&self) -> usize {
        // The prompts and schemas are constants: rendered once, not per turn.
        static CHARS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
        *CHARS.get_or_init(|| {
            let empty = RenderedContext::default();
            let proxy = prompts::proxy_system(&empty).len()
                + crate::schema::route_decision().to_string().len();
            let planner = prompts::planner_system(&empty).len()
                + crate::schema::agent_response().to_string().len();
            proxy.max(planner)
        })
    }

    /// True when the agents run on the offline responder (for the UI label).
    pub fn is_offline(&self) -> bool {
        self.proxy.provider.is_offline()
    }

    /// Proxy: classify a turn (§7.1).
    pub async fn route(
        &self,
        context: &RenderedContext,
        message: &str,
        used: &mut BudgetUsed,
    ) -> StructuredRun<RouteDecision> {
        let req = self.proxy.request(prompts::proxy_system(context), message);
        let run = self
            .proxy
            .structured::<RouteDraft>(req, &self.ctx, used)
            .await;
        let (draft, repaired) = match run.outcome {
            Structured::Valid { value, repaired } => (value, repaired),
            Structured::Fallback { value, cause } => {
                return StructuredRun {
                    outcome: Structured::Fallback { value, cause },
                    requests: run.requests,
                    usage: run.usage,
                    coerced: run.coerced,
                };
            }
        };
        if !draft.needs_reply() {
            let outcome = match draft.complete() {
                Some(value) => Structured::Valid { value, repaired },
                // Unreachable by `needs_reply`; kept total without a panic.
                None => Structured::Fallback {
                    value: proxy_fallback(&self.ctx.default_profile),
                    cause: FallbackCause::InvalidOutput("no reply".into()),
                },
            };
            return StructuredRun {
                outcome,
                requests: run.requests,
                usage: run.usage,
                coerced: run.coerced,
            };
        }
        // A direct route without its reply (small local models): ask the
        // same model for the reply alone, validated like any answer.
        tracing::info!("the proxy chose a direct answer without writing it; asking for the reply");
        let req = self.proxy.request(prompts::reply_system(context), message);
        let reply = self
            .proxy
            .structured::<AgentResponse>(req, &self.ctx, used)
            .await;
        let requests = run.requests + reply.requests;
        let mut usage = run.usage;
        usage.add(reply.usage);
        let mut coerced = run.coerced;
        coerced.extend(reply.coerced);
        let outcome = match reply.outcome {
            Structured::Valid { value, repaired: r } => match draft.with_reply(value) {
                Ok(value) => Structured::Valid {
                    value,
                    repaired: repaired || r,
                },
                Err(why) => Structured::Fallback {
                    value: proxy_fallback(&self.ctx.default_profile),
                    cause: FallbackCause::InvalidOutput(why),
                },
            },
            Structured::Fallback { cause, .. } => Structured::Fallback {
                value: proxy_fallback(&self.ctx.default_profile),
                cause,
            },
        };
        StructuredRun {
            outcome,
            requests,
            usage,
            coerced,
        }
    }

    /// Planner: respond/plan (§7.2). Counts one planner call.
    pub async fn plan(
        &self,
        context: &RenderedContext,
        message: &str,
        used: &mut BudgetUsed,
    ) -> StructuredRun<AgentResponse> {
        used.planner_calls = used.planner_calls.saturating_add(1);
        let req = self
            .planner
            .request(prompts::planner_system(context), message);
        self.planner.structured(req, &self.ctx, used).await
    }

    /// Scorer (§5.7) under its 2-second hard timeout; a timeout is a
    /// provider failure and yields the heuristic-eviction fallback.
    pub async fn score(
        &self,
        current_goal: &str,
        recent_turns: &str,
        blocks: &str,
        used: &mut BudgetUsed,
    ) -> StructuredRun<ScorerOutput> {
        let prompt = prompts::scorer_prompt(current_goal, recent_turns, blocks);
        let req = self.scorer.request(String::new(), &prompt);
        let req = ChatRequest {
            messages: vec![ChatMessage::User(prompt)],
            ..req
        };
        let now = std::time::Instant::now();
        if !self.scorer_breaker.with(|b| b.allow(now).0) {
            return StructuredRun {
                outcome: Structured::Fallback {
                    value: ScorerOutput::fallback(&self.ctx),
                    cause: FallbackCause::Provider(LlmError::Api {
                        status: None,
                        message: "the scorer's circuit breaker is open".into(),
                    }),
                },
                requests: 0,
                usage: Usage::default(),
                coerced: Vec::new(),
            };
        }
        let run = self.score_within_timeout(req, used).await;
        self.scorer_breaker.with(|b| match run.outcome {
            Structured::Valid { .. } => drop(b.on_success()),
            Structured::Fallback { .. } => drop(b.on_failure(std::time::Instant::now())),
        });
        run
    }

    async fn score_within_timeout(
        &self,
        req: ChatRequest,
        used: &mut BudgetUsed,
    ) -> StructuredRun<ScorerOutput> {
        match tokio::time::timeout(SCORER_TIMEOUT, self.scorer.structured(req, &self.ctx, used))
            .await
        {
            Ok(run) => run,
            Err(_) => StructuredRun {
                outcome: Structured::Fallback {
                    value: ScorerOutput::fallback(&self.ctx),
                    cause: FallbackCause::Provider(LlmError::Timeout {
                        seconds: SCORER_TIMEOUT.as_secs(),
                    }),
                },
                requests: 1,
                usage: Usage::default(),
                coerced: Vec::new(),
            },
        }
    }

    fn limits(&self, budget: &Budget) -> LoopLimits {
        LoopLimits {
            max_requests: self.max_tool_rounds,
            budget: budget.clone(),
            price: self.executor.price,
        }
    }

    /// Executor (§7.3): runs the tool loop over `toolset` for a work item's
    /// briefing, then validates the final answer as `ExecutorAgentOutput`
    /// (one repair round inside the same limits, then the fallback).
    pub async fn execute(
        &self,
        briefing: &str,
        skills: &[String],
        toolset: &dyn Toolset,
        tools: &dyn ToolExecutor,
        budget: &Budget,
        used: &mut BudgetUsed,
    ) -> ExecutorOutcome {
        used.executor_runs = used.executor_runs.saturating_add(1);
        let mut req = self.executor.request(
            prompts::executor_system(briefing, skills),
            "Carry out the briefing now.",
        );
        req.response_schema = Some(ResponseSchema {
            name: ExecutorAgentOutput::SCHEMA_NAME.to_owned(),
            schema: ExecutorAgentOutput::schema(),
        });
        let limits = self.limits(budget);
        let mut usage = Usage::default();
        let out = run_tool_loop(
            self.executor.provider.as_ref(),
            toolset,
            tools,
            req,
            &limits,
            used,
            &mut usage,
        )
        .await;
        self.finish(out, toolset, tools, &limits, used, false).await
    }

    /// Resumes an executor run paused for approval.
    pub async fn resume_executor(
        &self,
        paused: PausedRun,
        resolution: ApprovalResolution,
        toolset: &dyn Toolset,
        tools: &dyn ToolExecutor,
        budget: &Budget,
        used: &mut BudgetUsed,
    ) -> ExecutorOutcome {
        let limits = self.limits(budget);
        let mut usage = Usage::default();
        let out = resume_tool_loop(
            self.executor.provider.as_ref(),
            toolset,
            tools,
            paused,
            resolution,
            &limits,
            used,
            &mut usage,
        )
        .await;
        self.finish(out, toolset, tools, &limits, used, false).await
    }

    async fn finish(
        &self,
        mut out: ToolLoopOutcome,
        toolset: &dyn Toolset,
        tools: &dyn ToolExecutor,
        limits: &LoopLimits,
        used: &mut BudgetUsed,
        mut repaired: bool,
    ) -> ExecutorOutcome {
        loop {
            match out {
                ToolLoopOutcome::ApprovalRequired(p) => {
                    return ExecutorOutcome::ApprovalRequired(p);
                }
                ToolLoopOutcome::BudgetExhausted { .. } => return ExecutorOutcome::BudgetExhausted,
                ToolLoopOutcome::RequestLimit { .. } => return ExecutorOutcome::RequestLimit,
                ToolLoopOutcome::Failed { error, .. } => {
                    return ExecutorOutcome::Completed(Structured::Fallback {
                        value: ExecutorAgentOutput::fallback(&self.ctx),
                        cause: FallbackCause::Provider(error),
                    });
                }
                ToolLoopOutcome::Finished {
                    content,
                    mut request,
                    ..
                } => match parse_output::<ExecutorAgentOutput>(content.as_deref(), &self.ctx) {
                    Ok(value) => {
                        return ExecutorOutcome::Completed(Structured::Valid { value, repaired });
                    }
                    Err(summary) if repaired => {
                        return ExecutorOutcome::Completed(Structured::Fallback {
                            value: ExecutorAgentOutput::fallback(&self.ctx),
                            cause: FallbackCause::InvalidOutput(summary),
                        });
                    }
                    Err(summary) => {
                        // One repair round, same tools and limits: the
                        // answer, then the error summary as the prompt.
                        repaired = true;
                        request.messages.push(ChatMessage::Assistant {
                            content,
                            tool_calls: Vec::new(),
                        });
                        request.messages.push(ChatMessage::User(format!(
                            "{}{}",
                            REPAIR_MARKER.trim_start(),
                            summarize(&summary)
                        )));
                        let mut usage = Usage::default();
                        out = run_tool_loop(
                            self.executor.provider.as_ref(),
                            toolset,
                            tools,
                            request,
                            limits,
                            used,
                            &mut usage,
                        )
                        .await;
                    }
                },
            }
        }
    }
}
