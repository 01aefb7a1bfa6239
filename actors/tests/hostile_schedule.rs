//! The §15 hostile-model suite, continued: the model writes a goal's
//! `schedule`. One the scheduler would not run as the card shows it —
//! unreadable (approved, then only logged "invalid; not scheduled"), every
//! second, never, or with a line break that makes the card show more than
//! the schedule — gets no card and no work item.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod hostile_kit;

use std::time::Duration;

use common::{Fx, to_planner};
use hostile_kit::*;

fn goal(id: &str, schedule: &str) -> String {
    format!(
        "---\nid: {id}\ntype: goal\ntitle: \"Watch {id}\"\nschedule: {schedule}\n\
         verify:\n  - name: ok\n    run: \"true\"\n    expect: {{exit_code: 0}}\n---\n\nKeep it green.\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_goal_schedule_the_scheduler_would_not_run_gets_no_card() {
    let f = Fx::hostile().await;
    let cases = [
        (
            "g-every-second",
            "\"@every 1s\"",
            "more often than once every 10 s",
        ),
        ("g-minute-61", "\"61 * * * *\"", "not valid"),
        ("g-six-fields", "\"* * * * * *\"", "not valid"),
        ("g-reboot", "\"@reboot\"", "not valid"),
        ("g-feb-31", "\"0 0 31 2 *\"", "never fires"),
        ("g-newline", "\"* * * * *\\nrm -rf /\"", "line break"),
    ];
    for (id, schedule, _) in &cases {
        f.fake
            .push(to_planner())
            .push(planner_reply(true, &goal(id, schedule)));
    }
    let rt = f.runtime().await;
    for (id, _, says) in &cases {
        let reply = rt.turn("owner", &format!("watch {id}")).await;
        assert!(
            reply.contains("nothing was scheduled") && reply.contains(says),
            "{id}: {reply}"
        );
        assert!(f.store.work_items().get(id).unwrap().is_none(), "{id}");
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(rt.cards().is_empty(), "a card for a bad schedule");
    rt.stop().await;
    f.assert_chain_ok();
}

/// A goal's card says what approving it commits to beyond the plan: how
/// long the standing approval lasts and how many fix tasks it covers (from
/// the configuration), that its checks run once at approval, and the zone
/// its cron schedule is read in — the owner of a "0 9 * * *" goal learns
/// which 9 o'clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_goal_card_names_its_zone_and_what_the_standing_approval_covers() {
    let f = Fx::hostile_with(|c| {
        c.scheduler.timezone = "Asia/Tokyo".into();
        c.approval.standing_ttl_minutes = 7 * 24 * 60;
        c.autonomy.max_standing_executions = 5;
    })
    .await;
    f.fake
        .push(to_planner())
        .push(planner_reply(true, &goal("g-tokyo", "\"0 9 * * *\"")));
    let rt = f.runtime().await;
    rt.turn("owner", "watch g-tokyo").await;
    let cards = rt.cards();
    let card = cards
        .iter()
        .find(|c| c.card.work_item_id() == Some("g-tokyo"))
        .unwrap_or_else(|| panic!("no card: {cards:?}"));
    let silas_core::cards::CardPayload::Plan(plan) = &card.card else {
        panic!("{card:?}");
    };
    assert_eq!(
        plan.plan.terms.as_deref(),
        Some(
            "standing for 7 days from your answer, covering at most 5 fix tasks; its checks \
             run once when you approve, then on `0 9 * * *` in Asia/Tokyo time"
        )
    );
    rt.stop().await;
    f.assert_chain_ok();
}
