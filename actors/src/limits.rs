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
        // A known key (every take but a scope's first) costs one lookup and
        // no String.
        if let Some(q) = self.events.get_mut(key) {
            return take_in(q, self.max, self.window, now);
        }
        let mut q = VecDeque::new();
        let took = take_in(&mut q, self.max, self.window, now);
        self.events.insert(key.to_owned(), q);
        took
    }

    /// Whether `key` could take an event at `now` (nothing recorded).
    pub fn would_allow(&self, key: &str, now: Instant) -> bool {
        self.remaining(key, now) > 0
    }

    /// Events `key` may still take in the window ending at `now`.
    /// O(log n) in the events in the window (issue #19: the load tool's
    /// lifted limits let one scope's window hold tens of thousands).
    pub fn remaining(&self, key: &str, now: Instant) -> u32 {
        let used = self
            .events
            .get(key)
            .map_or(0, |q| q.len() - expired_prefix(q, self.window, now));
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
        self.retry_after_keeping(key, now, 0)
    }

    /// How long until `key` has more than `keep` events left in its window
    /// (zero if it has now).
    pub fn retry_after_keeping(&self, key: &str, now: Instant, keep: u32) -> Duration {
        let remaining = self.remaining(key, now);
        if remaining > keep {
            return Duration::ZERO;
        }
        // The oldest events inside the window leave first (they are kept in
        // time order): the one whose leaving frees the slot decides.
        let must_leave = (keep - remaining) as usize;
        self.events
            .get(key)
            .and_then(|q| q.get(expired_prefix(q, self.window, now) + must_leave))
            .map_or(Duration::ZERO, |first| {
                self.window
                    .saturating_sub(now.saturating_duration_since(*first))
            })
    }

    /// Drops keys with no event in the window (bounded memory).
    pub fn prune(&mut self, now: Instant) {
        let window = self.window;
        self.events.retain(|_, q| {
            let keep = q
                .back()
                .is_some_and(|t| now.saturating_duration_since(*t) < window);
            if keep {
                // Past events and a burst's capacity go too, so a scope that
                // stays active keeps only what its current window holds.
                q.drain(..expired_prefix(q, window, now));
                if q.capacity() > 4 * q.len().max(MIN_EVENTS) {
                    q.shrink_to(2 * q.len());
                }
            }
            keep
        });
        // `retain` keeps the table sized for the busiest minute ever (a
        // burst of chatbot visitors): give it back once mostly empty.
        let len = self.events.len();
        if self.events.capacity() > 4 * len.max(MIN_KEYS) {
            self.events.shrink_to(2 * len);
        }
    }
}

/// One take from one key's window (see [`RateLimiter::try_take`]).
fn take_in(q: &mut VecDeque<Instant>, max: u32, window: Duration, now: Instant) -> bool {
    let expired = expired_prefix(q, window, now);
    q.drain(..expired);
    if q.len() as u64 >= u64::from(max) {
        return false;
    }
    // Kept in time order even when callers on different threads read the
    // clock in one order and take the shared lock in the other: an event
    // recorded a few microseconds late only leaves the window that much
    // later (never earlier), and the order is what lets every query
    // binary-search the window instead of walking it.
    let at = q.back().map_or(now, |last| now.max(*last));
    q.push_back(at);
    true
}

/// How many of `q`'s events (oldest first, in time order) have left the
/// window ending at `now`.
fn expired_prefix(q: &VecDeque<Instant>, window: Duration, now: Instant) -> usize {
    q.partition_point(|t| now.saturating_duration_since(*t) >= window)
}

/// Below this many keys a limiter's table is not worth shrinking.
const MIN_KEYS: usize = 64;
/// Below this many events a key's window is not worth shrinking.
const MIN_EVENTS: usize = 64;

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

    /// The share of the global window only the owner's scope may use, so
    /// anonymous chatbot visitors cannot spend the owner's model calls
    /// (§18.6's "reject lowest-priority non-owner traffic first", as the
    /// turn queue does): a fifth of it.
    pub fn owner_reserve(&self) -> u32 {
        self.global.max / 5
    }

    /// The global slots `scope` must leave free: the owner's reserve for
    /// every scope but the owner's.
    fn kept_from(&self, scope: &str) -> u32 {
        if scope == crate::turn::OWNER_SCOPE {
            0
        } else {
            self.owner_reserve()
        }
    }

    /// Takes one event for `scope`; on refusal nothing is recorded and the
    /// error says which limit was reached (the scope's own first, so a
    /// noisy scope is told about itself rather than about everyone). Other
    /// scopes than the owner's stop short of [`Self::owner_reserve`].
    pub fn try_take(&mut self, scope: &str, now: Instant) -> Result<(), LimitKind> {
        if !self.per_scope.would_allow(scope, now) {
            return Err(LimitKind::LlmScope);
        }
        if self.global.remaining(GLOBAL_KEY, now) <= self.kept_from(scope) {
            return Err(LimitKind::LlmGlobal);
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
            .max(
                self.global
                    .retry_after_keeping(GLOBAL_KEY, now, self.kept_from(scope)),
            )
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
    /// Held while a customer's plan card is counted against the cap of
    /// waiting customer cards and filed: every scope has a TurnProcessor
    /// of its own, and a count and a put apart let concurrent turns past
    /// the cap (22–23 of 20 got in).
    customer_cards: Mutex<()>,
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
            customer_cards: Mutex::new(()),
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

    /// The filing of one customer plan card: count, check, save and file
    /// while it is held. Only customers' plans take it (a handful, each
    /// held for one durable write); a poisoned lock is recovered.
    pub fn customer_card_filing(&self) -> std::sync::MutexGuard<'_, ()> {
        self.customer_cards
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
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
mod tests;
