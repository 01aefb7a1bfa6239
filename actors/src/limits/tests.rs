//! Unit tests of the pure limit arithmetic (`limits.rs`).

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

/// Chatbot visitors cannot spend the owner's model calls: a fifth of the
/// global window is the owner's alone, and a refused visitor is told when
/// a slot outside that share frees.
#[test]
fn a_fifth_of_the_global_cap_is_kept_for_the_owner() {
    let t0 = Instant::now();
    let mut l = ScopedWithGlobal::new(RateLimiter::per_minute(100), RateLimiter::per_minute(10));
    assert_eq!(l.owner_reserve(), 2);
    for i in 0..8u64 {
        assert_eq!(l.try_take(&format!("visitor-{i}"), t0 + secs(i)), Ok(()));
    }
    assert_eq!(
        l.try_take("visitor-9", t0 + secs(10)),
        Err(LimitKind::LlmGlobal)
    );
    // The first visitor's call leaves the window at t0 + 60 s.
    assert_eq!(l.retry_after("visitor-9", t0 + secs(10)), secs(50));
    assert_eq!(l.retry_after("owner", t0 + secs(10)), Duration::ZERO);
    assert_eq!(l.try_take("owner", t0 + secs(10)), Ok(()));
    assert_eq!(l.try_take("owner", t0 + secs(10)), Ok(()));
    assert_eq!(
        l.try_take("owner", t0 + secs(10)),
        Err(LimitKind::LlmGlobal)
    );
    assert_eq!(l.retry_after("owner", t0 + secs(10)), secs(50));
    // The owner's two calls count too: visitors are served again once
    // three of their own have left (t0, t0 + 1 s, t0 + 2 s).
    assert_eq!(
        l.try_take("visitor-9", t0 + secs(60)),
        Err(LimitKind::LlmGlobal)
    );
    assert_eq!(l.retry_after("visitor-9", t0 + secs(60)), secs(2));
    assert_eq!(l.try_take("visitor-9", t0 + secs(62)), Ok(()));
    assert_eq!(
        l.try_take("visitor-9", t0 + secs(62)),
        Err(LimitKind::LlmGlobal)
    );
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

/// The window's queries binary-search it (O(log n)): check them against a
/// plain count of the events still inside, over takes at irregular times,
/// refusals, windows passing and prunes, for several limits.
#[test]
fn window_queries_agree_with_a_count_of_the_events_inside() {
    let t0 = Instant::now();
    let window = secs(10);
    for max in [1u32, 2, 3, 7, 50] {
        let mut l = RateLimiter::new(max, window);
        let mut taken: Vec<Instant> = Vec::new();
        // A fixed pseudo-random walk of gaps (0–3.9 s), so clusters, exact
        // window edges and quiet spells all occur.
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15 ^ u64::from(max);
        let mut now = t0;
        for step in 0..2_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            now += Duration::from_millis(x % 4_000);
            let inside: Vec<&Instant> = taken
                .iter()
                .filter(|t| now.saturating_duration_since(**t) < window)
                .collect();
            let used = u32::try_from(inside.len()).unwrap();
            assert_eq!(
                l.remaining("k", now),
                max.saturating_sub(used),
                "step {step}"
            );
            let expect_retry = if used < max {
                Duration::ZERO
            } else {
                window - now.saturating_duration_since(*inside[0])
            };
            assert_eq!(l.retry_after("k", now), expect_retry, "step {step}");
            let took = l.try_take("k", now);
            assert_eq!(took, used < max, "step {step}");
            if took {
                taken.push(now);
            }
            if step % 97 == 0 {
                l.prune(now);
            }
        }
    }
}

/// Two threads may read the clock in one order and take the shared lock in
/// the other. The later reading is recorded for both, so the window stays
/// in time order (what the binary search needs) and the early reading's
/// event leaves the window late, never early.
#[test]
fn a_clock_read_before_the_last_event_is_recorded_at_it() {
    let t0 = Instant::now();
    let mut l = RateLimiter::new(2, secs(60));
    assert!(l.try_take("k", t0 + secs(5)));
    assert!(l.try_take("k", t0 + secs(1)));
    assert!(!l.try_take("k", t0 + secs(6)));
    // Both count until 60 s after the later reading, then both leave.
    assert_eq!(l.remaining("k", t0 + secs(64)), 0);
    assert_eq!(l.retry_after("k", t0 + secs(64)), secs(1));
    assert_eq!(l.remaining("k", t0 + secs(65)), 2);
}

/// A busy scope's window is cut to what it holds now by the prune, with the
/// capacity of its burst given back.
#[test]
fn prune_trims_an_active_keys_window_after_a_burst() {
    let t0 = Instant::now();
    let mut l = RateLimiter::per_minute(100_000);
    for i in 0..50_000u32 {
        assert!(l.try_take("busy", t0 + Duration::from_micros(u64::from(i))));
    }
    let later = t0 + secs(61);
    assert!(l.try_take("busy", later));
    l.prune(later);
    let q = &l.events["busy"];
    assert_eq!(q.len(), 1);
    assert!(q.capacity() <= 4 * MIN_EVENTS, "capacity {}", q.capacity());
    assert_eq!(l.remaining("busy", later), 99_999);
}

/// One address (its visitors' messages, each at least one model call)
/// cannot take the whole share of the global model-call window visitors
/// may use: with 240 per address against 240 for all visitors, eight
/// connections from one address shut every other visitor out in 0.4 s
/// (red-team, session 40).
#[test]
fn by_default_one_address_gets_at_most_half_the_visitors_model_calls() {
    let cfg = silas_core::config::LimitsConfig::default();
    let llm = ScopedWithGlobal::new(
        RateLimiter::per_minute(cfg.llm_calls_per_minute_per_scope),
        RateLimiter::per_minute(cfg.llm_calls_per_minute_global),
    );
    let visitors_share = cfg.llm_calls_per_minute_global - llm.owner_reserve();
    assert!(
        cfg.ws_messages_per_minute_per_ip * 2 <= visitors_share,
        "{} per address against {visitors_share} for all visitors",
        cfg.ws_messages_per_minute_per_ip
    );
}
