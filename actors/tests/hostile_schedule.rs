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
