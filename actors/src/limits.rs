//! Rate limits and backpressure as pure arithmetic (spec §11 `limits` /
//! `backpressure`, §18.5, §18.6). Time is an argument, so every rule is
//! tested without sleeping; the actors only sequence them:
//!
//! * the Stream owns the inbound [`RateLimiter`]s, the [`TurnQueues`] and a
//!   [`CardLimits`] (card answers per scope; suggestion and autonomy-proposal
//!   cards opened through `StreamHandle::ask`);
//! * [`RuntimeLimits`] is shared (one `Arc`) by the turn pipeline and the
//!   WorkExecutor: model calls per scope plus the global cap, web searches
//!   per scope, memory ops per scope. It is the only limiter behind a lock,
//!   because turns of different scopes and background work run concurrently.
//!
//! What counts as one "LLM call" (§18.5): one agent run — a Proxy routing,
//! a Planner call, an executor attempt (or its resumption after an approval
//! pause), a planner consultation. The requests inside one run (a schema
//! repair retry, the executor's tool rounds) are bounded separately by
//! `llm.max_tool_rounds` and the work item's budget; counting at the run
//! boundary is what lets a refusal happen *before* anything reaches a model.
//!
//! Every window lives in memory: a restart starts all windows afresh (the
//! longest, autonomy proposals per week, included). Refusals never record an
//! event, so a refused attempt does not extend its own lock-out.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use silas_core::config::LimitsConfig;

/// One hour.
pub const HOUR: Duration = Duration::from_secs(3600);
/// One week.
pub const WEEK: Duration = Duration::from_secs(7 * 24 * 3600);

/// Which §18.5 limit refused something. [`LimitKind::as_str`] is the `limit`
/// field of the `security_rate_limited` audit entry (the inbound limits
/// write `scope` / `ip` there).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LimitKind {
    /// Card/approval answers per scope per minute.
    Card,
    /// Model calls of one scope per minute.
    LlmScope,
    /// Model calls of all scopes together per minute.
    LlmGlobal,
    /// `web_search` calls per scope per minute.
    WebSearch,
    /// Memory ops per scope per minute.
    MemoryOps,
    /// Proactive suggestion cards per scope per hour.
    Suggestion,
    /// Autonomy-threshold proposal cards per scope per week.
    AutonomyProposal,
}

impl LimitKind {
    pub const ALL: [LimitKind; 7] = [
        LimitKind::Card,
        LimitKind::LlmScope,
        LimitKind::LlmGlobal,
        LimitKind::WebSearch,
        LimitKind::MemoryOps,
        LimitKind::Suggestion,
        LimitKind::AutonomyProposal,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            LimitKind::Card => "card",
            LimitKind::LlmScope => "llm_scope",
            LimitKind::LlmGlobal => "llm_global",
            LimitKind::WebSearch => "web_search",
            LimitKind::MemoryOps => "memory_ops",
            LimitKind::Suggestion => "suggestion",
            LimitKind::AutonomyProposal => "autonomy_proposal",
        }
    }

    /// The `limits.*` key that sets this limit (for messages and docs).
    pub fn config_key(self) -> &'static str {
        match self {
            LimitKind::Card => "limits.card_submissions_per_minute_per_scope",
            LimitKind::LlmScope => "limits.llm_calls_per_minute_per_scope",
            LimitKind::LlmGlobal => "limits.llm_calls_per_minute_global",
            LimitKind::WebSearch => "limits.web_search_calls_per_minute_per_scope",
            LimitKind::MemoryOps => "limits.memory_ops_per_minute_per_scope",
            LimitKind::Suggestion => "limits.suggestions_per_hour_per_scope",
            LimitKind::AutonomyProposal => "limits.autonomy_proposals_per_week_per_scope",
        }
    }
}

impl std::fmt::Display for LimitKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The deterministic safe reply of a turn whose model call was refused
/// (§18.5): no model saw the message.
pub const LLM_RATE_LIMITED_MESSAGE: &str = "I am handling too many requests right now, so I did not work on this message. Please wait a minute and send it again.";
/// The tool result of a refused `web_search` call (the model reads it).
pub const WEB_SEARCH_RATE_LIMITED_MESSAGE: &str = "web_search refused: the search rate limit for this conversation is reached; nothing was searched. Continue without searching or try again in a minute.";

/// A sliding one-window limit per key (`n` events per `window`).
#[derive(Clone, Debug)]
pub struct RateLimiter {
    max: u32,
    window: Duration,
    events: HashMap<String, VecDeque<Instant>>,
}

impl RateLimiter {
    pub fn per_minute(max: u32) -> Self {
        RateLimiter::new(max, Duration::from_secs(60))
    }

    pub fn per_hour(max: u32) -> Self {
        RateLimiter::new(max, HOUR)
    }

    pub fn per_week(max: u32) -> Self {
        RateLimiter::new(max, WEEK)
    }

    pub fn new(max: u32, window: Duration) -> Self {
        RateLimiter {
            max,
            window,
            events: HashMap::new(),
        }
    }

    /// Takes one event for `key` at `now`; `false` (nothing recorded) when
    /// the key has used its allowance in the window.
    pub fn try_take(&mut self, key: &str, now: Instant) -> bool {
        let q = self.events.entry(key.to_string()).or_default();
        while let Some(&first) = q.front() {
            if now.saturating_duration_since(first) >= self.window {
                q.pop_front();
            } else {
                break;
            }
        }
        if q.len() as u64 >= u64::from(self.max) {
            return false;
        }
        q.push_back(now);
        true
    }

    /// Whether `key` could take an event at `now` (nothing recorded).
    pub fn would_allow(&self, key: &str, now: Instant) -> bool {
        self.remaining(key, now) > 0
    }

    /// Events `key` may still take in the window ending at `now`.
    pub fn remaining(&self, key: &str, now: Instant) -> u32 {
        let used = self.events.get(key).map_or(0, |q| {
            q.iter()
                .filter(|t| now.saturating_duration_since(**t) < self.window)
                .count()
        });
        let used = u32::try_from(used).unwrap_or(u32::MAX);
        self.max.saturating_sub(used)
    }

    /// Takes up to `n` events for `key` at `now`; returns how many were
    /// taken (the rest are over the limit and not recorded).
    pub fn take_up_to(&mut self, key: &str, n: u32, now: Instant) -> u32 {
        let mut taken = 0;
        while taken < n && self.try_take(key, now) {
            taken += 1;
        }
        taken
    }

    /// How long until `key` may take an event again (zero if it may now).
    pub fn retry_after(&self, key: &str, now: Instant) -> Duration {
        if self.would_allow(key, now) {
            return Duration::ZERO;
        }
        // Full: the oldest event inside the window decides. Events are
        // pushed in time order, so it is the first one still inside.
        self.events
            .get(key)
            .and_then(|q| {
                q.iter()
                    .find(|t| now.saturating_duration_since(**t) < self.window)
            })
            .map_or(Duration::ZERO, |first| {
                self.window
                    .saturating_sub(now.saturating_duration_since(*first))
            })
    }

    /// Drops keys with no event in the window (bounded memory).
    pub fn prune(&mut self, now: Instant) {
        let window = self.window;
        self.events.retain(|_, q| {
            q.back()
                .is_some_and(|t| now.saturating_duration_since(*t) < window)
        });
        // `retain` keeps the table sized for the busiest minute ever (a
        // burst of chatbot visitors): give it back once mostly empty.
        let len = self.events.len();
        if self.events.capacity() > 4 * len.max(MIN_KEYS) {
            self.events.shrink_to(2 * len);
        }
    }
}

/// Below this many keys a limiter's table is not worth shrinking.
const MIN_KEYS: usize = 64;

/// A per-key limit under a global cap (§18.5 "LLM calls per minute per
/// scope + global cap"). An event is taken from both or from neither.
#[derive(Clone, Debug)]
pub struct ScopedWithGlobal {
    per_scope: RateLimiter,
    global: RateLimiter,
}

/// The one key of the global window.
const GLOBAL_KEY: &str = "";

impl ScopedWithGlobal {
    pub fn new(per_scope: RateLimiter, global: RateLimiter) -> Self {
        ScopedWithGlobal { per_scope, global }
    }

    /// Takes one event for `scope`; on refusal nothing is recorded and the
    /// error says which limit was reached (the scope's own first, so a
    /// noisy scope is told about itself rather than about everyone).
    pub fn try_take(&mut self, scope: &str, now: Instant) -> Result<(), LimitKind> {
        if !self.per_scope.would_allow(scope, now) {
            return Err(LimitKind::LlmScope);
        }
        if !self.global.try_take(GLOBAL_KEY, now) {
            return Err(LimitKind::LlmGlobal);
        }
        self.per_scope.try_take(scope, now);
        Ok(())
    }

    /// How long until `scope` may take an event again.
    pub fn retry_after(&self, scope: &str, now: Instant) -> Duration {
        self.per_scope
            .retry_after(scope, now)
            .max(self.global.retry_after(GLOBAL_KEY, now))
    }

    pub fn prune(&mut self, now: Instant) {
        self.per_scope.prune(now);
        self.global.prune(now);
    }
}

/// Prune the shared limiters after this many takes (bounded memory without
/// a timer).
const PRUNE_EVERY: u32 = 1024;

#[derive(Debug)]
struct Shared {
    llm: ScopedWithGlobal,
    web_search: RateLimiter,
    memory_ops: RateLimiter,
    takes: u32,
}

impl Shared {
    fn tick(&mut self, now: Instant) {
        self.takes = self.takes.wrapping_add(1);
        if self.takes.is_multiple_of(PRUNE_EVERY) {
            self.prune(now);
        }
    }

    fn prune(&mut self, now: Instant) {
        self.llm.prune(now);
        self.web_search.prune(now);
        self.memory_ops.prune(now);
    }
}

/// The §18.5 limits shared by the turn pipeline and the WorkExecutor (one
/// `Arc` for the daemon, so the global model-call cap covers both). The lock
/// is a std mutex held only for the arithmetic, never across an await; a
/// poisoned lock is recovered (the counters stay meaningful).
#[derive(Debug)]
pub struct RuntimeLimits {
    shared: Mutex<Shared>,
    /// How long background work waits for a model-call slot before it ends
    /// the attempt (see [`RuntimeLimits::work_wait_max`]).
    work_wait_max: Duration,
}

/// Default of [`RuntimeLimits::work_wait_max`]: one full window.
pub const WORK_LLM_WAIT_MAX: Duration = Duration::from_secs(60);

impl RuntimeLimits {
    pub fn from_config(limits: &LimitsConfig) -> Self {
        RuntimeLimits {
            shared: Mutex::new(Shared {
                llm: ScopedWithGlobal::new(
                    RateLimiter::per_minute(limits.llm_calls_per_minute_per_scope),
                    RateLimiter::per_minute(limits.llm_calls_per_minute_global),
                ),
                web_search: RateLimiter::per_minute(limits.web_search_calls_per_minute_per_scope),
                memory_ops: RateLimiter::per_minute(limits.memory_ops_per_minute_per_scope),
                takes: 0,
            }),
            work_wait_max: WORK_LLM_WAIT_MAX,
        }
    }

    /// Replaces how long background work waits for a model-call slot
    /// (tests use zero: refuse at once).
    pub fn with_work_wait_max(mut self, wait: Duration) -> Self {
        self.work_wait_max = wait;
        self
    }

    /// Background work is not interactive, so over the model-call limit it
    /// waits for the window to free a slot (backpressure) instead of failing
    /// at once — but at most this long per call; past it the attempt ends
    /// (`E_CHANNEL_RATE_LIMITED`) and counts like any failed attempt, so an
    /// item still ends deterministically within `max_attempts`.
    pub fn work_wait_max(&self) -> Duration {
        self.work_wait_max
    }

    fn with<T>(&self, f: impl FnOnce(&mut Shared) -> T) -> T {
        let mut g = self.shared.lock().unwrap_or_else(PoisonError::into_inner);
        f(&mut g)
    }

    /// Forgets the keys whose windows have passed, without waiting for the
    /// [`PRUNE_EVERY`]th take: called on the Stream's sweep, so the last
    /// visitors' windows go once their minute is over even when no one
    /// comes after them (issue #19 item 3).
    pub fn prune(&self, now: Instant) {
        self.with(|s| s.prune(now))
    }

    /// One model call for `scope` at `now`.
    pub fn llm_call(&self, scope: &str, now: Instant) -> Result<(), LimitKind> {
        self.with(|s| {
            s.tick(now);
            s.llm.try_take(scope, now)
        })
    }

    /// How long until `scope` may make a model call again.
    pub fn llm_retry_after(&self, scope: &str, now: Instant) -> Duration {
        self.with(|s| s.llm.retry_after(scope, now))
    }

    /// One `web_search` call for `scope` at `now`.
    pub fn web_search(&self, scope: &str, now: Instant) -> Result<(), LimitKind> {
        self.with(|s| {
            s.tick(now);
            if s.web_search.try_take(scope, now) {
                Ok(())
            } else {
                Err(LimitKind::WebSearch)
            }
        })
    }

    /// `n` memory ops for `scope` at `now`: how many of them (the first
    /// ones, in order) are within the limit.
    pub fn memory_ops(&self, scope: &str, n: u32, now: Instant) -> u32 {
        self.with(|s| {
            s.tick(now);
            s.memory_ops.take_up_to(scope, n, now)
        })
    }
}

/// The card limits the Stream applies (§18.5): answers per scope per
/// minute, and — when a card is opened through `StreamHandle::ask` —
/// suggestion cards per scope per hour and autonomy-threshold proposals per
/// scope per week.
#[derive(Clone, Debug)]
pub struct CardLimits {
    answers: RateLimiter,
    suggestions: RateLimiter,
    autonomy: RateLimiter,
}

/// Which card limit a card type falls under when it is opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenLimit {
    Suggestion,
    AutonomyProposal,
    /// Not rate limited when opened (its answers still are).
    None,
}

impl OpenLimit {
    /// Suggestion cards and autonomy-threshold reviews are the proactive
    /// cards §18.5 bounds; every other card is opened by the owner's own
    /// request or by work the owner approved.
    pub fn for_kind(kind: crate::cards::CardKind) -> OpenLimit {
        match kind {
            crate::cards::CardKind::Suggestion => OpenLimit::Suggestion,
            crate::cards::CardKind::AutonomyThreshold => OpenLimit::AutonomyProposal,
            _ => OpenLimit::None,
        }
    }
}

impl CardLimits {
    pub fn from_config(limits: &LimitsConfig) -> Self {
        CardLimits {
            answers: RateLimiter::per_minute(limits.card_submissions_per_minute_per_scope),
            suggestions: RateLimiter::per_hour(limits.suggestions_per_hour_per_scope),
            autonomy: RateLimiter::per_week(limits.autonomy_proposals_per_week_per_scope),
        }
    }

    /// One card answer (any card type, any outcome: a flood of bogus
    /// answers is what the limit is for) from `scope` at `now`.
    pub fn answer(&mut self, scope: &str, now: Instant) -> Result<(), LimitKind> {
        if self.answers.try_take(scope, now) {
            Ok(())
        } else {
            Err(LimitKind::Card)
        }
    }

    /// Opening a card of `limit`'s class for `scope` at `now`.
    pub fn open(&mut self, limit: OpenLimit, scope: &str, now: Instant) -> Result<(), LimitKind> {
        let (limiter, kind) = match limit {
            OpenLimit::None => return Ok(()),
            OpenLimit::Suggestion => (&mut self.suggestions, LimitKind::Suggestion),
            OpenLimit::AutonomyProposal => (&mut self.autonomy, LimitKind::AutonomyProposal),
        };
        if limiter.try_take(scope, now) {
            Ok(())
        } else {
            Err(kind)
        }
    }

    pub fn prune(&mut self, now: Instant) {
        self.answers.prune(now);
        self.suggestions.prune(now);
        self.autonomy.prune(now);
    }
}

/// Whether a new turn may be queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    Admit,
    /// The scope already has `max_per_scope` pending turns.
    ScopeFull,
    /// The global bound is reached (or, for non-owner traffic, the share of
    /// it reserved for the owner).
    GlobalFull,
}

/// Pending-turn counts per scope and in total (§18.6).
#[derive(Clone, Debug, Default)]
pub struct TurnQueues {
    pub max_per_scope: u32,
    pub max_total: u32,
    pending: HashMap<String, u32>,
    total: u32,
}

impl TurnQueues {
    pub fn new(max_per_scope: u32, max_total: u32) -> Self {
        TurnQueues {
            max_per_scope,
            max_total,
            pending: HashMap::new(),
            total: 0,
        }
    }

    /// Slots of the global queue only the owner may use: "reject
    /// lowest-priority non-owner traffic first" (§18.6) — non-owner turns are
    /// refused once the queue is 90 % full.
    pub fn owner_reserve(&self) -> u32 {
        self.max_total / 10
    }

    /// Decides admission of one more turn for `scope` (nothing recorded).
    pub fn admission(&self, scope: &str, is_owner: bool) -> Admission {
        if self.pending(scope) >= self.max_per_scope {
            return Admission::ScopeFull;
        }
        let limit = if is_owner {
            self.max_total
        } else {
            self.max_total.saturating_sub(self.owner_reserve())
        };
        if self.total >= limit {
            return Admission::GlobalFull;
        }
        Admission::Admit
    }

    pub fn push(&mut self, scope: &str) {
        *self.pending.entry(scope.to_string()).or_default() += 1;
        self.total = self.total.saturating_add(1);
    }

    pub fn pop(&mut self, scope: &str) {
        if let Some(n) = self.pending.get_mut(scope)
            && *n > 0
        {
            *n -= 1;
            self.total = self.total.saturating_sub(1);
            if *n == 0 {
                self.pending.remove(scope);
            }
        }
    }

    pub fn pending(&self, scope: &str) -> u32 {
        self.pending.get(scope).copied().unwrap_or(0)
    }

    pub fn total(&self) -> u32 {
        self.total
    }

    /// Scopes with pending turns and their depth (for `/health`, §18.6).
    pub fn depths(&self) -> impl Iterator<Item = (&str, u32)> {
        self.pending.iter().map(|(s, n)| (s.as_str(), *n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sliding_window() {
        let t0 = Instant::now();
        let mut l = RateLimiter::new(2, Duration::from_secs(60));
        assert!(l.try_take("a", t0));
        assert!(l.try_take("a", t0 + Duration::from_secs(1)));
        assert!(!l.try_take("a", t0 + Duration::from_secs(2)));
        assert!(!l.would_allow("a", t0 + Duration::from_secs(2)));
        assert!(
            l.try_take("b", t0 + Duration::from_secs(2)),
            "keys are independent"
        );
        // The first event leaves the window after 60 s.
        assert!(l.try_take("a", t0 + Duration::from_secs(60)));
        l.prune(t0 + Duration::from_secs(600));
        assert!(l.events.is_empty());
    }

    /// A burst of visitors, then their minute passes: the table shrinks
    /// back instead of staying sized for the burst.
    #[test]
    fn prune_gives_back_the_table_of_a_burst() {
        let t0 = Instant::now();
        let mut l = RateLimiter::per_minute(5);
        for i in 0..10_000 {
            assert!(l.try_take(&format!("web:visitor-{i}"), t0));
        }
        assert!(l.events.capacity() >= 10_000);
        let later = t0 + Duration::from_secs(30);
        assert!(l.try_take("web:still-here", later));
        l.prune(later + Duration::from_secs(45));
        assert_eq!(l.events.len(), 1, "only the recent key stays");
        assert!(
            l.events.capacity() <= 4 * MIN_KEYS,
            "capacity {}",
            l.events.capacity()
        );
        // Its window is intact.
        assert_eq!(l.remaining("web:still-here", later), 4);
    }

    #[test]
    fn queues_per_scope_global_and_owner_reserve() {
        let mut q = TurnQueues::new(2, 10);
        q.push("s");
        q.push("s");
        assert_eq!(q.admission("s", true), Admission::ScopeFull);
        assert_eq!(q.admission("t", true), Admission::Admit);
        for i in 0..7 {
            q.push(&format!("x{i}"));
        }
        // 9 of 10 used: non-owner traffic hits the owner reserve first.
        assert_eq!(q.admission("c", false), Admission::GlobalFull);
        assert_eq!(q.admission("owner", true), Admission::Admit);
        q.push("owner");
        assert_eq!(q.admission("owner", true), Admission::GlobalFull);
        q.pop("s");
        q.pop("s");
        q.pop("s");
        assert_eq!(q.pending("s"), 0);
        assert_eq!(q.total(), 8);
    }
    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn window_boundary_is_exclusive_at_exactly_the_window() {
        let t0 = Instant::now();
        let mut l = RateLimiter::per_minute(1);
        assert!(l.try_take("s", t0));
        // 59.999 s later the event is still inside the window.
        assert!(!l.try_take("s", t0 + Duration::from_millis(59_999)));
        assert_eq!(l.retry_after("s", t0 + secs(45)), secs(15));
        // At exactly 60 s it has left.
        assert_eq!(l.retry_after("s", t0 + secs(60)), Duration::ZERO);
        assert!(l.try_take("s", t0 + secs(60)));
    }

    #[test]
    fn refusals_are_not_recorded() {
        let t0 = Instant::now();
        let mut l = RateLimiter::per_minute(1);
        assert!(l.try_take("s", t0));
        for i in 1..50 {
            assert!(!l.try_take("s", t0 + secs(i)));
        }
        // Hammering did not extend the lock-out.
        assert!(l.try_take("s", t0 + secs(60)));
    }

    #[test]
    fn take_up_to_grants_what_is_left_in_order() {
        let t0 = Instant::now();
        let mut l = RateLimiter::per_minute(5);
        assert_eq!(l.remaining("s", t0), 5);
        assert_eq!(l.take_up_to("s", 3, t0), 3);
        assert_eq!(l.take_up_to("s", 4, t0 + secs(1)), 2);
        assert_eq!(l.take_up_to("s", 4, t0 + secs(2)), 0);
        assert_eq!(l.take_up_to("t", 4, t0 + secs(2)), 4, "scopes independent");
        // The first three leave at 60 s, the next two at 61 s.
        assert_eq!(l.remaining("s", t0 + secs(60)), 3);
        assert_eq!(l.remaining("s", t0 + secs(61)), 5);
        assert_eq!(l.take_up_to("s", 0, t0 + secs(61)), 0);
    }

    #[test]
    fn hour_and_week_windows() {
        let t0 = Instant::now();
        let mut h = RateLimiter::per_hour(2);
        assert!(h.try_take("s", t0));
        assert!(h.try_take("s", t0 + secs(10)));
        assert!(!h.try_take("s", t0 + secs(3599)));
        assert!(h.try_take("s", t0 + secs(3600)));
        let mut w = RateLimiter::per_week(1);
        assert!(w.try_take("s", t0));
        assert!(!w.try_take("s", t0 + WEEK - secs(1)));
        assert_eq!(w.retry_after("s", t0 + WEEK - secs(1)), secs(1));
        assert!(w.try_take("s", t0 + WEEK));
    }

    #[test]
    fn scoped_limit_under_a_global_cap() {
        let t0 = Instant::now();
        let mut l = ScopedWithGlobal::new(RateLimiter::per_minute(2), RateLimiter::per_minute(3));
        assert_eq!(l.try_take("a", t0), Ok(()));
        assert_eq!(l.try_take("a", t0), Ok(()));
        assert_eq!(l.try_take("a", t0), Err(LimitKind::LlmScope));
        // Another scope has its own allowance...
        assert_eq!(l.try_take("b", t0), Ok(()));
        // ...but the global cap (3) is reached across scopes.
        assert_eq!(l.try_take("b", t0), Err(LimitKind::LlmGlobal));
        assert_eq!(l.try_take("c", t0), Err(LimitKind::LlmGlobal));
        // A refusal by the global cap took nothing from the scope: once the
        // window moves on, "b" has both its slots again... after the first
        // three leave.
        assert_eq!(l.retry_after("c", t0 + secs(30)), secs(30));
        assert_eq!(l.try_take("b", t0 + secs(60)), Ok(()));
        assert_eq!(l.try_take("b", t0 + secs(60)), Ok(()));
        assert_eq!(l.try_take("b", t0 + secs(60)), Err(LimitKind::LlmScope));
    }

    #[test]
    fn a_refused_scope_does_not_use_the_global_cap() {
        let t0 = Instant::now();
        let mut l = ScopedWithGlobal::new(RateLimiter::per_minute(1), RateLimiter::per_minute(2));
        assert_eq!(l.try_take("a", t0), Ok(()));
        for _ in 0..10 {
            assert_eq!(l.try_take("a", t0), Err(LimitKind::LlmScope));
        }
        assert_eq!(l.try_take("b", t0), Ok(()), "the global slot is still free");
    }

    fn config(f: impl FnOnce(&mut LimitsConfig)) -> LimitsConfig {
        let mut c = LimitsConfig::default();
        f(&mut c);
        c
    }

    #[test]
    fn runtime_limits_follow_the_config() {
        let t0 = Instant::now();
        let r = RuntimeLimits::from_config(&config(|c| {
            c.llm_calls_per_minute_per_scope = 1;
            c.llm_calls_per_minute_global = 2;
            c.web_search_calls_per_minute_per_scope = 2;
            c.memory_ops_per_minute_per_scope = 3;
        }));
        assert_eq!(r.llm_call("a", t0), Ok(()));
        assert_eq!(r.llm_call("a", t0), Err(LimitKind::LlmScope));
        assert_eq!(r.llm_retry_after("a", t0 + secs(20)), secs(40));
        assert_eq!(r.llm_call("b", t0), Ok(()));
        assert_eq!(r.llm_call("c", t0), Err(LimitKind::LlmGlobal));
        assert_eq!(r.web_search("a", t0), Ok(()));
        assert_eq!(r.web_search("a", t0), Ok(()));
        assert_eq!(r.web_search("a", t0), Err(LimitKind::WebSearch));
        assert_eq!(r.web_search("b", t0), Ok(()));
        assert_eq!(r.memory_ops("a", 2, t0), 2);
        assert_eq!(r.memory_ops("a", 2, t0), 1);
        assert_eq!(r.memory_ops("a", 2, t0 + secs(59)), 0);
        assert_eq!(r.memory_ops("b", 5, t0), 3);
        assert_eq!(r.memory_ops("a", 5, t0 + secs(60)), 3);
        assert_eq!(r.work_wait_max(), WORK_LLM_WAIT_MAX);
        let r = r.with_work_wait_max(Duration::ZERO);
        assert_eq!(r.work_wait_max(), Duration::ZERO);
    }

    #[test]
    fn runtime_limits_prune_keeps_counting_right() {
        let t0 = Instant::now();
        let r = RuntimeLimits::from_config(&config(|c| c.memory_ops_per_minute_per_scope = 1));
        // Many distinct scopes trigger a prune; live windows survive it.
        assert_eq!(r.memory_ops("keep", 1, t0), 1);
        for i in 0..(PRUNE_EVERY * 2) {
            r.memory_ops(&format!("s{i}"), 1, t0 + secs(1));
        }
        assert_eq!(r.memory_ops("keep", 1, t0 + secs(2)), 0);
        // Much later every window has closed and been dropped.
        for i in 0..PRUNE_EVERY {
            r.memory_ops(&format!("late{i}"), 1, t0 + secs(600));
        }
        let live = r.with(|s| s.memory_ops.events.len());
        assert!(live <= PRUNE_EVERY as usize, "{live}");
    }

    /// The last visitors' windows go once their minute has passed, with no
    /// take after them to trigger the counted prune (the Stream's sweep
    /// calls this).
    #[test]
    fn runtime_limits_forget_the_last_visitors_on_a_timed_prune() {
        let t0 = Instant::now();
        let r = RuntimeLimits::from_config(&LimitsConfig::default());
        for i in 0..200 {
            let scope = format!("web:visitor-{i}");
            assert_eq!(r.llm_call(&scope, t0), Ok(()));
            assert_eq!(r.memory_ops(&scope, 1, t0), 1);
            assert_eq!(r.web_search(&scope, t0), Ok(()));
        }
        assert_eq!(r.llm_call("web:recent", t0 + secs(50)), Ok(()));
        let sizes = |r: &RuntimeLimits| {
            r.with(|s| {
                (
                    s.llm.per_scope.events.len(),
                    s.memory_ops.events.len(),
                    s.web_search.events.len(),
                )
            })
        };
        r.prune(t0 + secs(30));
        assert_eq!(sizes(&r), (201, 200, 200), "windows still open are kept");
        r.prune(t0 + secs(61));
        assert_eq!(sizes(&r), (1, 0, 0), "only the recent scope is left");
        // Its window is intact: one call taken, the rest of its minute left.
        assert_eq!(
            r.with(|s| s.llm.per_scope.remaining("web:recent", t0 + secs(61))),
            LimitsConfig::default().llm_calls_per_minute_per_scope - 1
        );
    }

    #[test]
    fn card_limits() {
        let t0 = Instant::now();
        let mut c = CardLimits::from_config(&config(|c| {
            c.card_submissions_per_minute_per_scope = 2;
            c.suggestions_per_hour_per_scope = 1;
            c.autonomy_proposals_per_week_per_scope = 1;
        }));
        assert_eq!(c.answer("a", t0), Ok(()));
        assert_eq!(c.answer("a", t0), Ok(()));
        assert_eq!(c.answer("a", t0), Err(LimitKind::Card));
        assert_eq!(c.answer("b", t0), Ok(()));
        assert_eq!(c.answer("a", t0 + secs(60)), Ok(()));

        assert_eq!(c.open(OpenLimit::None, "a", t0), Ok(()));
        assert_eq!(c.open(OpenLimit::None, "a", t0), Ok(()));
        assert_eq!(c.open(OpenLimit::Suggestion, "a", t0), Ok(()));
        assert_eq!(
            c.open(OpenLimit::Suggestion, "a", t0 + secs(3599)),
            Err(LimitKind::Suggestion)
        );
        assert_eq!(c.open(OpenLimit::Suggestion, "b", t0), Ok(()));
        assert_eq!(c.open(OpenLimit::Suggestion, "a", t0 + HOUR), Ok(()));
        // Separate allowances per class.
        assert_eq!(c.open(OpenLimit::AutonomyProposal, "a", t0), Ok(()));
        assert_eq!(
            c.open(OpenLimit::AutonomyProposal, "a", t0 + WEEK - secs(1)),
            Err(LimitKind::AutonomyProposal)
        );
        assert_eq!(c.open(OpenLimit::AutonomyProposal, "a", t0 + WEEK), Ok(()));
        c.prune(t0 + WEEK * 2);
        assert_eq!(c.answers.events.len(), 0);
    }

    #[test]
    fn open_limit_classes() {
        use crate::cards::CardKind;
        for k in CardKind::ALL {
            let want = match k {
                CardKind::Suggestion => OpenLimit::Suggestion,
                CardKind::AutonomyThreshold => OpenLimit::AutonomyProposal,
                _ => OpenLimit::None,
            };
            assert_eq!(OpenLimit::for_kind(k), want, "{k:?}");
        }
    }

    #[test]
    fn limit_names_are_distinct_and_name_their_config_key() {
        let mut names: Vec<&str> = LimitKind::ALL.iter().map(|k| k.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), LimitKind::ALL.len());
        let keys: Vec<&str> = LimitsConfig::default()
            .fields()
            .iter()
            .map(|(k, _)| *k)
            .collect();
        for k in LimitKind::ALL {
            let key = k.config_key().trim_start_matches("limits.");
            assert!(keys.contains(&key), "{k}: {key}");
            // Not the inbound limits' names ("scope", "ip").
            assert!(!matches!(k.as_str(), "scope" | "ip"));
        }
    }
}
