//! The load tool (issue #19 item 5) run as a user runs it: the built
//! `silas-bench` binary starting the built `silas` daemon over loopback.
//! Small counts: this checks the tool tells the truth, not the figures
//! (those are in BENCHMARKS.md).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;

use serde_json::Value;

fn bench(args: &[&str]) -> Value {
    bench_from(Path::new("."), Path::new(env!("CARGO_BIN_EXE_silas")), args)
}

/// `silas-bench --silas <silas> --json …` run in `cwd`; its report.
fn bench_from(cwd: &Path, silas: &Path, args: &[&str]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_silas-bench"))
        .current_dir(cwd)
        .arg("--silas")
        .arg(silas)
        .args(["--json", "--max-seconds", "240"])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "silas-bench --silas {} {args:?}: {}\n{}",
        silas.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn many_scopes_answers_every_customer_turn_once() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("latencies.txt");
    let r = bench(&[
        "many-scopes",
        "--clients",
        "4",
        "--turns",
        "3",
        "--latencies",
        file.to_str().unwrap(),
    ]);
    // One latency per reply, in microseconds, the largest the report's max.
    let latencies: Vec<u64> = std::fs::read_to_string(&file)
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    assert_eq!(latencies.len(), 12);
    let max_ms = r["latency"]["max_ms"].as_f64().unwrap();
    let largest = *latencies.iter().max().unwrap() as f64 / 1000.0;
    assert!((largest - max_ms).abs() < 0.01, "{largest} vs {r}");
    assert_eq!(r["mode"], "many-scopes");
    assert_eq!(r["sent"], 12, "{r}");
    assert_eq!(r["replies"], 12, "{r}");
    assert_eq!(r["lost"], 0, "{r}");
    assert_eq!(r["duplicated"], 0, "{r}");
    assert_eq!(r["latency"]["count"], 12, "{r}");
    assert!(r["turns_per_second"].as_f64().unwrap() > 0.0, "{r}");
    assert!(r["rss"]["peak_kib"].as_u64().unwrap() > 1024, "{r}");
    assert_eq!(r["daemon_alive"], true);
}

#[test]
fn hot_scope_counts_every_message_as_replied_or_refused() {
    // 40 in flight against the default per-scope bound of 20: some are
    // refused, none vanish.
    let r = bench(&["hot-scope", "--turns", "40", "--in-flight", "40"]);
    let sent = r["sent"].as_u64().unwrap();
    let replies = r["replies"].as_u64().unwrap();
    let refused = r["refused"].as_u64().unwrap();
    assert_eq!(sent, 40, "{r}");
    assert_eq!(replies + refused, 40, "{r}");
    assert_eq!(r["lost"], 0, "{r}");
    assert!(replies >= 1, "{r}");
}

#[test]
fn idle_and_churn_report_memory() {
    let r = bench(&["idle", "--connections", "20"]);
    assert_eq!(r["connect_failures"], 0, "{r}");
    assert!(r["per_connection_kib"].as_f64().is_some(), "{r}");
    // The probe turn on an idle connection is answered.
    assert_eq!(r["replies"], 1, "{r}");

    let r = bench(&["churn", "--rounds", "2", "--visitors", "3", "--turns", "1"]);
    let rounds = r["rounds"].as_array().unwrap();
    assert_eq!(rounds.len(), 2, "{r}");
    assert_eq!(rounds[1]["visitors_so_far"], 6);
    assert!(rounds.iter().all(|x| x["rss_kib"].as_u64().unwrap() > 0));
    // Split into heap and mapped files, which add up to about the total.
    assert!(rounds.iter().all(|x| {
        let (anon, file) = (
            x["anon_kib"].as_u64().unwrap(),
            x["file_kib"].as_u64().unwrap(),
        );
        anon > 0 && file > 0 && anon + file <= x["rss_kib"].as_u64().unwrap() + 1024
    }));
    assert_eq!(r["replies"], 6, "{r}");
}

/// Issue #19 item 6: the bench acknowledges what it counts, so an owner
/// run leaves nothing to send again — the owner's next connection gets no
/// reply from it (unacknowledged ones would be resent there).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_run_leaves_no_reply_to_send_again() {
    use silas_loadtool::{Daemon, DaemonOpts, Mode, client, drive};
    let daemon = Daemon::start(&DaemonOpts {
        silas: env!("CARGO_BIN_EXE_silas").into(),
        chatbot: false,
    })
    .await
    .unwrap();
    let mode = Mode::HotScope {
        turns: 12,
        in_flight: 4,
    };
    let r = drive(&daemon, &mode).await.unwrap();
    assert_eq!((r.sent, r.replies, r.lost), (12, 12, 0), "{r:?}");

    let within = std::time::Duration::from_secs(10);
    let (mut ws, _) = client::connect(daemon.addr(), Some(daemon.owner_token()), within)
        .await
        .unwrap();
    let resent = client::next_chat(&mut ws, std::time::Duration::from_millis(1500)).await;
    assert_eq!(resent, None, "a reply of the run was sent again");
}

/// BENCHMARKS.md's commands pass `--silas target/release/silas`: a path
/// relative to where the bench is run, not to the daemon's scratch dir.
#[test]
fn a_relative_silas_path_is_the_callers() {
    let exe = Path::new(env!("CARGO_BIN_EXE_silas"));
    let (dir, name) = (exe.parent().unwrap(), exe.file_name().unwrap());
    let relative = Path::new(dir.file_name().unwrap()).join(name);
    let r = bench_from(
        dir.parent().unwrap(),
        &relative,
        &["many-scopes", "--clients", "1", "--turns", "1"],
    );
    assert_eq!(r["replies"], 1, "{r}");
}

#[test]
fn counts_out_of_bounds_are_refused_before_anything_starts() {
    let out = Command::new(env!("CARGO_BIN_EXE_silas-bench"))
        .args(["many-scopes", "--clients", "0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--clients"), "{err}");
}
