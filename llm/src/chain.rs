//! Provider fallback chains and per-provider circuit breakers (issue #16
//! item 4; meao's per-dependency breakers).
//!
//! `models.<role>` may name an ordered list (`[openrouter:…, ollama:…]`).
//! A [`ChainProvider`] tries its members in order: a member whose provider's
//! breaker is open is skipped; any failure moves on to the next member
//! (after that provider's own bounded retries). Only failures that say the
//! provider is unwell — 5xx, 429, timeouts, connection errors — count
//! against its breaker; a 4xx about the request does not. When no member
//! can be tried the call fails with `E_LLM_API` at once, and the role's
//! caller takes its deterministic fallback (the existing per-agent paths).
//!
//! [`Breaker`] is a pure state machine over an injected clock:
//! `closed` → (`failure_threshold` consecutive failures) → `open` for
//! `open_for` → `half_open`: one probe call is let through; its success
//! closes the breaker, its failure opens it again. Every state change is
//! reported as [`LlmEvent::BreakerChanged`] (audited by the daemon) and the
//! current states are on `/health` and in `silas status`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::error::LlmError;
use crate::negotiate::{EventSink, LlmEvent};
use crate::provider::{BoxFuture, ChatRequest, ChatResponse, Provider};

/// A breaker's state, as shown on `/health`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BreakerState {
    Closed,
    Open,
    HalfOpen,
}

impl BreakerState {
    pub fn as_str(self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::HalfOpen => "half_open",
        }
    }
}

/// Thresholds (`llm.breaker_failures`, `llm.breaker_open_seconds`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BreakerPolicy {
    pub failure_threshold: u32,
    pub open_for: Duration,
}

impl BreakerPolicy {
    pub fn from_config(llm: &silas_core::config::LlmConfig) -> Self {
        BreakerPolicy {
            failure_threshold: llm.breaker_failures,
            open_for: Duration::from_secs(llm.breaker_open_seconds),
        }
    }
}

impl Default for BreakerPolicy {
    fn default() -> Self {
        BreakerPolicy {
            failure_threshold: 3,
            open_for: Duration::from_secs(30),
        }
    }
}

/// One provider's breaker (pure: the caller passes the time).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Breaker {
    policy: BreakerPolicy,
    state: BreakerState,
    failures: u32,
    opened_at: Option<Instant>,
    /// Half-open: when the probe went out. A probe whose caller gave up
    /// (a cancelled turn) reports nothing; after `open_for` another may go.
    probing: Option<Instant>,
}

impl Breaker {
    pub fn new(policy: BreakerPolicy) -> Self {
        Breaker {
            policy,
            state: BreakerState::Closed,
            failures: 0,
            opened_at: None,
            probing: None,
        }
    }

    pub fn state(&self) -> BreakerState {
        self.state
    }

    /// Whether a call may go out now; moves `open` → `half_open` once the
    /// open interval is over (the change is returned) and lets exactly one
    /// probe through while half-open.
    pub fn allow(&mut self, now: Instant) -> (bool, Option<(BreakerState, BreakerState)>) {
        match self.state {
            BreakerState::Closed => (true, None),
            BreakerState::Open => {
                let over = self
                    .opened_at
                    .is_none_or(|t| now.saturating_duration_since(t) >= self.policy.open_for);
                if over {
                    self.state = BreakerState::HalfOpen;
                    self.probing = Some(now);
                    (true, Some((BreakerState::Open, BreakerState::HalfOpen)))
                } else {
                    (false, None)
                }
            }
            BreakerState::HalfOpen
                if self
                    .probing
                    .is_some_and(|t| now.saturating_duration_since(t) < self.policy.open_for) =>
            {
                (false, None)
            }
            BreakerState::HalfOpen => {
                self.probing = Some(now);
                (true, None)
            }
        }
    }

    /// The provider answered, but not usably (a body it could not parse, a
    /// 4xx): it is reachable, which is what the breaker tracks — a probe
    /// answered this way closes it. Left out, the probe stayed "out" for
    /// good and the provider was never asked again until a restart.
    pub fn on_answer(&mut self) -> Option<(BreakerState, BreakerState)> {
        match self.state {
            BreakerState::HalfOpen => self.on_success(),
            BreakerState::Closed | BreakerState::Open => None,
        }
    }

    pub fn on_success(&mut self) -> Option<(BreakerState, BreakerState)> {
        self.failures = 0;
        self.probing = None;
        let from = self.state;
        self.state = BreakerState::Closed;
        self.opened_at = None;
        (from != BreakerState::Closed).then_some((from, BreakerState::Closed))
    }

    pub fn on_failure(&mut self, now: Instant) -> Option<(BreakerState, BreakerState)> {
        self.probing = None;
        match self.state {
            BreakerState::HalfOpen => {
                self.state = BreakerState::Open;
                self.opened_at = Some(now);
                Some((BreakerState::HalfOpen, BreakerState::Open))
            }
            BreakerState::Open => None,
            BreakerState::Closed => {
                self.failures = self.failures.saturating_add(1);
                if self.failures >= self.policy.failure_threshold.max(1) {
                    self.state = BreakerState::Open;
                    self.opened_at = Some(now);
                    Some((BreakerState::Closed, BreakerState::Open))
                } else {
                    None
                }
            }
        }
    }
}

/// Whether an error says the provider is unwell (counts against its breaker).
pub fn is_provider_failure(e: &LlmError) -> bool {
    match e {
        LlmError::Timeout { .. } | LlmError::RateLimited { .. } => true,
        LlmError::Api { status: None, .. } => true,
        LlmError::Api {
            status: Some(s), ..
        } => *s == 429 || *s >= 500,
        LlmError::Parse { .. } | LlmError::NotChatApi { .. } | LlmError::MissingKey { .. } => false,
    }
}

/// The breakers of every provider, shared by all roles (one provider's
/// outage opens it for every role that uses it).
pub struct BreakerBoard {
    policy: BreakerPolicy,
    breakers: Mutex<BTreeMap<String, Breaker>>,
    events: Option<EventSink>,
}

impl BreakerBoard {
    pub fn new(policy: BreakerPolicy, events: Option<EventSink>) -> Self {
        BreakerBoard {
            policy,
            breakers: Mutex::new(BTreeMap::new()),
            events,
        }
    }

    fn with<R>(&self, provider: &str, f: impl FnOnce(&mut Breaker) -> R) -> R {
        let mut map = match self.breakers.lock() {
            Ok(m) => m,
            Err(poisoned) => poisoned.into_inner(),
        };
        let b = map
            .entry(provider.to_string())
            .or_insert_with(|| Breaker::new(self.policy));
        f(b)
    }

    fn report(&self, provider: &str, change: Option<(BreakerState, BreakerState)>) {
        if let (Some((from, to)), Some(sink)) = (change, &self.events) {
            sink(LlmEvent::BreakerChanged {
                provider: provider.to_string(),
                from,
                to,
            });
        }
    }

    pub fn allow(&self, provider: &str, now: Instant) -> bool {
        let (ok, change) = self.with(provider, |b| b.allow(now));
        self.report(provider, change);
        ok
    }

    pub fn success(&self, provider: &str) {
        let change = self.with(provider, Breaker::on_success);
        self.report(provider, change);
    }

    pub fn failure(&self, provider: &str, now: Instant) {
        let change = self.with(provider, |b| b.on_failure(now));
        self.report(provider, change);
    }

    /// An answer that was not usable ([`Breaker::on_answer`]).
    pub fn answered(&self, provider: &str) {
        let change = self.with(provider, Breaker::on_answer);
        self.report(provider, change);
    }

    /// Every provider's state, for `/health` and `silas status`.
    pub fn snapshot(&self) -> BTreeMap<String, BreakerState> {
        match self.breakers.lock() {
            Ok(m) => m.iter().map(|(k, b)| (k.clone(), b.state())).collect(),
            Err(p) => p
                .into_inner()
                .iter()
                .map(|(k, b)| (k.clone(), b.state()))
                .collect(),
        }
    }
}

/// One member of a chain: a provider and the model to ask it for.
#[derive(Clone)]
pub struct Member {
    pub provider: Arc<dyn Provider>,
    /// Provider-side model id.
    pub model: String,
}

/// A role's providers in order of preference (see the module doc).
pub struct ChainProvider {
    name: String,
    members: Vec<Member>,
    board: Arc<BreakerBoard>,
    /// Answers when every member's breaker is open (none could be asked):
    /// the labelled offline responder for the proxy and planner where
    /// `llm.offline_fallback` allows it.
    last_resort: Option<Arc<dyn Provider>>,
}

impl ChainProvider {
    pub fn new(members: Vec<Member>, board: Arc<BreakerBoard>) -> Self {
        let name = members
            .iter()
            .map(|m| m.provider.name().to_string())
            .collect::<Vec<_>>()
            .join("→");
        ChainProvider {
            name,
            members,
            board,
            last_resort: None,
        }
    }

    /// Asks `provider` when every member's breaker is open. Not when a
    /// member was asked and failed: that is the role's ordinary fallback.
    pub fn with_last_resort(mut self, provider: Arc<dyn Provider>) -> Self {
        self.last_resort = Some(provider);
        self
    }
}

impl Provider for ChainProvider {
    fn name(&self) -> &str {
        &self.name
    }

    /// The smallest known window of the members: any of them may get the
    /// call, and a prompt fitted to a larger one would be cut by the other.
    fn context_window(&self) -> Option<u64> {
        self.members
            .iter()
            .filter_map(|m| m.provider.context_window())
            .min()
    }

    fn discover_context_window<'a>(&'a self, _model: &'a str) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            for m in &self.members {
                m.provider.discover_context_window(&m.model).await;
            }
        })
    }

    fn complete<'a>(
        &'a self,
        request: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<ChatResponse, LlmError>> {
        Box::pin(async move {
            let mut last: Option<LlmError> = None;
            for m in &self.members {
                let provider = m.provider.name();
                if !self.board.allow(provider, Instant::now()) {
                    continue;
                }
                // (a member is asked: `last` is set below unless it answers)
                // A copy only when this member names another model: the
                // request (messages, schema) is the bulk of a turn's
                // allocations, and the first member usually matches.
                let req = if request.model == m.model {
                    std::borrow::Cow::Borrowed(request)
                } else {
                    let mut req = request.clone();
                    req.model = m.model.clone();
                    std::borrow::Cow::Owned(req)
                };
                match m.provider.complete(&req).await {
                    Ok(r) => {
                        self.board.success(provider);
                        return Ok(r);
                    }
                    Err(e) => {
                        if is_provider_failure(&e) {
                            self.board.failure(provider, Instant::now());
                        } else {
                            self.board.answered(provider);
                        }
                        tracing::warn!(provider, code = %silas_core::Coded::code(&e),
                            "model call failed; trying the next provider if any: {}", e.summary());
                        tracing::debug!(provider, "model call failure in full: {e}");
                        last = Some(e);
                    }
                }
            }
            if let (None, Some(resort)) = (&last, &self.last_resort) {
                tracing::warn!(chain = %self.name, resort = resort.name(),
                    "every provider of this role is open; the offline responder answers");
                return resort.complete(request).await;
            }
            Err(last.unwrap_or_else(|| LlmError::Api {
                status: None,
                message: format!(
                    "every provider of this role is unavailable (circuit open): {}",
                    self.name
                ),
            }))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn breaker_opens_after_the_threshold_probes_once_and_closes_on_success() {
        let policy = BreakerPolicy {
            failure_threshold: 2,
            open_for: Duration::from_secs(10),
        };
        let t0 = Instant::now();
        let mut b = Breaker::new(policy);
        assert_eq!(b.allow(t0), (true, None));
        assert_eq!(b.on_failure(t0), None);
        assert_eq!(
            b.on_failure(t0),
            Some((BreakerState::Closed, BreakerState::Open))
        );
        assert_eq!(b.allow(t0 + Duration::from_secs(9)), (false, None));
        // After the interval: one probe, nobody else meanwhile.
        assert_eq!(
            b.allow(t0 + Duration::from_secs(10)),
            (true, Some((BreakerState::Open, BreakerState::HalfOpen)))
        );
        assert_eq!(b.allow(t0 + Duration::from_secs(10)), (false, None));
        // The probe fails: open again, for a new interval.
        let t1 = t0 + Duration::from_secs(11);
        assert_eq!(
            b.on_failure(t1),
            Some((BreakerState::HalfOpen, BreakerState::Open))
        );
        assert_eq!(b.allow(t1 + Duration::from_secs(5)), (false, None));
        assert!(b.allow(t1 + Duration::from_secs(10)).0);
        // The next probe succeeds: closed, counter reset.
        assert_eq!(
            b.on_success(),
            Some((BreakerState::HalfOpen, BreakerState::Closed))
        );
        assert_eq!(
            b.on_failure(t1),
            None,
            "one failure after a reset stays closed"
        );
        assert_eq!(b.state(), BreakerState::Closed);
    }

    #[test]
    fn a_success_resets_the_count_of_consecutive_failures() {
        let mut b = Breaker::new(BreakerPolicy::default());
        let t = Instant::now();
        b.on_failure(t);
        b.on_failure(t);
        assert_eq!(b.on_success(), None);
        b.on_failure(t);
        b.on_failure(t);
        assert_eq!(b.state(), BreakerState::Closed);
        assert!(b.on_failure(t).is_some());
    }

    /// A probe answered with a body the daemon cannot read (a hostile or
    /// broken model server) closes the breaker: the server is reachable.
    /// It used to leave the probe "out" for good — the provider was never
    /// asked again before a restart.
    /// A breaker (one failure opens it for 5 s) that opened at `t`.
    fn opened_at(t: Instant) -> Breaker {
        let mut b = Breaker::new(BreakerPolicy {
            failure_threshold: 1,
            open_for: Duration::from_secs(5),
        });
        b.on_failure(t);
        b
    }

    #[test]
    fn a_probe_answered_unusably_closes_the_breaker() {
        let t = Instant::now();
        let mut b = opened_at(t);
        assert_eq!(b.state(), BreakerState::Open);
        let later = t + Duration::from_secs(6);
        assert!(b.allow(later).0, "the probe goes out");
        assert!(!b.allow(later).0, "one probe at a time");
        assert_eq!(
            b.on_answer(),
            Some((BreakerState::HalfOpen, BreakerState::Closed))
        );
        assert!(b.allow(later).0);
        // Closed: an unusable answer changes nothing.
        assert_eq!(b.on_answer(), None);
    }

    /// A probe whose caller gave up reports nothing: after `open_for`
    /// another probe may go.
    #[test]
    fn a_probe_that_never_reports_back_is_replaced() {
        let t = Instant::now();
        let mut b = opened_at(t);
        assert!(b.allow(t + Duration::from_secs(6)).0);
        assert!(!b.allow(t + Duration::from_secs(10)).0);
        assert!(b.allow(t + Duration::from_secs(11)).0);
        assert_eq!(b.state(), BreakerState::HalfOpen);
    }

    #[test]
    fn which_errors_count_against_a_provider() {
        let api = |s: Option<u16>| LlmError::Api {
            status: s,
            message: String::new(),
        };
        assert!(is_provider_failure(&api(Some(500))));
        assert!(is_provider_failure(&api(Some(503))));
        assert!(is_provider_failure(&api(Some(429))));
        assert!(is_provider_failure(&api(None)));
        assert!(is_provider_failure(&LlmError::Timeout { seconds: 1 }));
        assert!(!is_provider_failure(&api(Some(400))));
        assert!(!is_provider_failure(&api(Some(401))));
    }
}
