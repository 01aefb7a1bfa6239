//! `silas chat` (spec §8.4) against the real daemon binary (offline
//! responder, no API key): a plan card rendered as text and approved with
//! `y` runs to `work_status` done; a card left unanswered past the approval
//! timeout is declined (fail closed) and nothing is dispatched, as the
//! daemon's audit log shows; with no daemon the client says so in one line.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use support::{audit_events, silas, start};

/// A running `silas chat` with its stdin held by the test and its stdout
/// lines collected on a thread.
struct Chat {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Chat {
    fn spawn(dir: &std::path::Path, addr: &str, extra: &[&str]) -> Chat {
        let mut child = silas(dir)
            .arg("chat")
            .arg("--url")
            .arg(format!("ws://{addr}/ws"))
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        let out = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines() {
                let Ok(l) = l else { break };
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        Chat {
            child,
            stdin,
            lines,
            seen: Vec::new(),
        }
    }

    fn say(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
    }

    /// Waits for a stdout line satisfying `pred`; every line seen is kept.
    fn expect(&mut self, what: &str, within: Duration, pred: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => {
                    self.seen.push(l.clone());
                    if pred(&l) {
                        return l;
                    }
                }
                Err(_) => panic!("no line {what} within {within:?}; saw {:#?}", self.seen),
            }
        }
    }

    /// Closes stdin and waits for a clean exit.
    fn finish(mut self) -> Vec<String> {
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            assert!(Instant::now() < deadline, "chat did not exit after EOF");
            std::thread::sleep(Duration::from_millis(50));
        };
        while let Ok(l) = self.lines.recv_timeout(Duration::from_millis(200)) {
            self.seen.push(l);
        }
        assert!(status.success(), "chat exit {status:?}: {:#?}", self.seen);
        self.seen.clone()
    }
}

impl Drop for Chat {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn is_prompt(l: &str) -> bool {
    l.starts_with("approve? [y/N]")
}

#[test]
fn chat_approves_with_y_and_declines_on_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let (daemon, addr) = start(dir.path());

    // 1. message → plan card as text → "y" → the work runs to done.
    let mut chat = Chat::spawn(dir.path(), &addr, &[]);
    chat.expect("connected", Duration::from_secs(10), |l| {
        l.starts_with("connected (scope owner")
    });
    chat.say("create a file notes.txt containing hello");
    let title = chat.expect("card title", Duration::from_secs(30), |l| {
        l.starts_with("── approval requested:")
    });
    assert!(title.contains("notes.txt"), "{title}");
    let budget = chat.expect("budget", Duration::from_secs(5), |l| {
        l.trim_start().starts_with("budget:")
    });
    assert!(budget.contains("max_cost_usd="), "{budget}");
    chat.expect("checks", Duration::from_secs(5), |l| {
        l.trim_start().starts_with("- file_exists:")
    });
    let ask = chat.expect("prompt", Duration::from_secs(5), is_prompt);
    assert!(ask.contains("120 s"), "default approval timeout: {ask}");
    chat.say("y");
    chat.expect("approved", Duration::from_secs(5), |l| l == "approved.");
    let done = chat.expect("terminal status", Duration::from_secs(90), |l| {
        l.starts_with("[work ")
            && [" done:", " failed:", " stuck:", " blocked:"]
                .iter()
                .any(|s| l.contains(s))
    });
    assert!(done.contains(" done:"), "{done}");
    chat.expect("check outcome", Duration::from_secs(5), |l| {
        l.contains("file_exists: passed")
    });
    let seen = chat.finish();
    assert!(
        seen.iter()
            .any(|l| l.contains("[work ") && l.contains(" running:")),
        "{seen:#?}"
    );

    // 2. Another plan, no answer within the 2 s timeout → declined.
    let mut chat = Chat::spawn(dir.path(), &addr, &["--approval-timeout", "2"]);
    chat.expect("connected", Duration::from_secs(10), |l| {
        l.starts_with("connected")
    });
    chat.say("create a file other.txt containing nope");
    let ask = chat.expect("prompt", Duration::from_secs(30), is_prompt);
    assert!(ask.contains("2 s"), "{ask}");
    let asked_at = Instant::now();
    chat.expect("declined", Duration::from_secs(10), |l| {
        l == "declined (no answer within 2 s): nothing runs."
    });
    assert!(asked_at.elapsed() >= Duration::from_millis(1500));
    chat.expect("daemon's notice", Duration::from_secs(10), |l| {
        l.contains("was not approved; nothing runs.")
    });
    let seen = chat.finish();
    assert!(!seen.iter().any(|l| l.starts_with("[work ")), "{seen:#?}");

    // 3. A card arriving after input ended cannot be answered: declined.
    let mut chat = Chat::spawn(dir.path(), &addr, &[]);
    chat.say("create a file third.txt containing nope");
    drop(chat.stdin.take());
    let seen = chat.finish();
    assert!(
        seen.iter()
            .any(|l| l == "declined (input closed): nothing runs."),
        "{seen:#?}"
    );

    // Orderly stop, then the audit shows one dispatch and two declines.
    daemon.stop_blocking();
    let events = audit_events(dir.path());
    let count = |name: &str| events.iter().filter(|e| e["event"] == name).count();
    assert_eq!(count("plan_proposed"), 3);
    assert_eq!(count("work_dispatched"), 1, "only the approved plan ran");
    assert_eq!(count("approval.issued"), 1, "no token for a declined plan");
    assert_eq!(count("plan_declined"), 2);
    let declined: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| e["event"] == "plan_declined")
        .collect();
    assert!(declined.iter().all(|e| e["data"]["verdict"] == "declined"));
}

#[test]
fn chat_without_a_daemon_says_to_start_one() {
    let dir = tempfile::tempdir().unwrap();
    // A port nobody listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = silas(dir.path())
        .env("SILAS__CHANNELS__WEB__PORT", port.to_string())
        .arg("chat")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("error[E_CHANNEL_DISCONNECTED]"), "{err}");
    assert!(err.contains("no Silas daemon runs on"), "{err}");
    assert!(err.contains("silas start"), "{err}");
}

/// Red-team F2: with the daemon stopped, any local process may listen on
/// its port, and `silas chat` handed it the CLI's owner credential (which
/// then worked on the real daemon). Without `--url` the CLI connects only
/// where the data dir's control socket says the daemon listens: with none
/// answering, nothing is sent — nor by `silas pair` or `silas devices`.
#[test]
fn with_the_daemon_stopped_no_cli_command_sends_its_credential_to_the_port() {
    let dir = tempfile::tempdir().unwrap();
    let (daemon, _) = start(dir.path());
    daemon.stop_blocking();
    let token = support::owner_token(&dir.path().join("data"));
    // Someone else now holds the port the configuration names.
    let squatter = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    squatter.set_nonblocking(true).unwrap();
    let port = squatter.local_addr().unwrap().port();
    for args in [&["chat"][..], &["pair"], &["devices", "list"]] {
        let child = silas(dir.path())
            .env("SILAS__CHANNELS__WEB__PORT", port.to_string())
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // One that talked to the squatter would wait for its answer.
        let (done, finished) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = done.send(child.wait_with_output());
        });
        let out = finished
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("{args:?} is waiting on the squatter"))
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.starts_with("error[E_CHANNEL_DISCONNECTED]") && err.contains("silas start"),
            "{args:?}: {err}"
        );
    }
    match squatter.accept() {
        Ok((mut conn, _)) => {
            use std::io::Read;
            let mut got = Vec::new();
            conn.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
            let _ = conn.read_to_end(&mut got);
            let got = String::from_utf8_lossy(&got);
            panic!(
                "a CLI command connected to the squatter (token sent: {}): {got}",
                got.contains(&token)
            );
        }
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock),
    }
}

/// Runs `silas chat` with all of `script` piped on stdin at once (then
/// EOF), as `printf '...' | silas chat` does; its stdout lines once it exits.
fn piped_chat(dir: &std::path::Path, addr: &str, script: &str) -> Vec<String> {
    let mut child = silas(dir)
        .arg("chat")
        .arg("--url")
        .arg(format!("ws://{addr}/ws"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(script.as_bytes())
        .unwrap();
    let out = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        BufReader::new(out)
            .lines()
            .map_while(Result::ok)
            .collect::<Vec<_>>()
    });
    let deadline = Instant::now() + Duration::from_secs(150);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("piped chat did not finish");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let lines = reader.join().unwrap();
    assert!(status.success(), "chat exit {status:?}: {lines:#?}");
    lines
}

/// The session printed an approved item's work ending `done`.
fn work_done(lines: &[String]) -> bool {
    lines
        .iter()
        .any(|l| l.starts_with("[work ") && l.contains(" done:"))
}

/// A direct reply from the fake model's proxy.
fn direct(text: &str) -> silas_testkit::Reply {
    silas_testkit::Reply::json(&serde_json::json!({
        "route": "direct", "reason": "chat",
        "response": {"message": text}, "interaction_register": "status",
        "interaction_mode": "default_and_offer", "context_profile": "conversation"}))
}

/// A config in `dir` whose every model is `fake`, without retries.
fn fake_config(dir: &std::path::Path, fake: &silas_testkit::FakeLlm) -> std::path::PathBuf {
    let config = dir.join("silas.yaml");
    std::fs::write(
        &config,
        format!(
            "silas:\n  models:\n    proxy: \"fake:m\"\n    planner: \"fake:m\"\n    executor: \"fake:m\"\n    scorer: \"fake:m\"\n  providers:\n    fake:\n      base_url: \"{}\"\n      api_key_env: null\n  llm:\n    max_retries: 0\n",
            fake.base_url()
        ),
    )
    .unwrap();
    config
}

/// The daemon started in `dir` with `config`.
fn start_with(dir: &std::path::Path, config: &std::path::Path) -> (support::Daemon, String) {
    let mut cmd = silas(dir);
    cmd.arg("--config").arg(config);
    let (daemon, addr, _) = support::start_daemon(cmd, Stdio::null());
    (daemon, addr)
}

/// Item 5: `printf 'create a file … \ny\n' | silas chat` — the queued `y`
/// answers the card once it has been printed, and the work reaches done.
#[test]
fn piped_chat_answers_the_card_with_the_queued_line() {
    let dir = tempfile::tempdir().unwrap();
    let (daemon, addr) = start(dir.path());
    let lines = piped_chat(
        dir.path(),
        &addr,
        "create a file notes.txt containing hi\ny\n",
    );
    let pos = |pred: &dyn Fn(&str) -> bool| lines.iter().position(|l| pred(l));
    let card = pos(&|l| l.starts_with("── approval requested:")).expect("card");
    let prompt = pos(&|l| is_prompt(l)).expect("prompt");
    let approved = pos(&|l| l == "approved.").unwrap_or_else(|| panic!("{lines:#?}"));
    assert!(card < prompt && prompt < approved, "{lines:#?}");
    assert!(work_done(&lines), "{lines:#?}");
    // The `y` was an answer, never a chat message.
    daemon.stop_blocking();
    let events = audit_events(dir.path());
    let count = |name: &str| events.iter().filter(|e| e["event"] == name).count();
    assert_eq!(count("approval.issued"), 1);
    assert_eq!(count("work_dispatched"), 1);
}

/// A card already waiting when a script connects (another client's, or
/// one re-sent after a restart) is not the script's to answer: before, the
/// script's first line declined it and a `y` meant for its own plan
/// approved it. It is shown and left open; the script's own card is
/// answered as usual.
#[test]
fn a_piped_session_leaves_cards_it_did_not_raise() {
    let dir = tempfile::tempdir().unwrap();
    let (daemon, addr) = start(dir.path());
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut frames = Vec::new();
    let (mut web, _) = rt.block_on(support::connect(&addr, Duration::from_secs(10)));
    rt.block_on(support::send(
        &mut web,
        serde_json::json!({"type": "message", "text": "create a file other.txt containing web"}),
    ));
    let other = rt.block_on(support::frame_of_type(
        &mut web,
        "approval_request",
        Duration::from_secs(60),
        &mut frames,
    ));
    // The web client stays connected, so its card stays open.
    let lines = piped_chat(
        dir.path(),
        &addr,
        "create a file notes.txt containing hi\ny\n",
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("(left open: this card was waiting")),
        "{lines:#?}"
    );
    assert_eq!(
        lines.iter().filter(|l| *l == "approved.").count(),
        1,
        "{lines:#?}"
    );
    assert!(work_done(&lines), "{lines:#?}");
    // Stopped with the web client still there: its card stays stored, so
    // any decline of it would be the script's.
    daemon.stop_blocking();
    drop(web);
    let events = audit_events(dir.path());
    let issued: Vec<_> = events
        .iter()
        .filter(|e| e["event"] == "approval.issued")
        .collect();
    assert_eq!(issued.len(), 1, "{issued:#?}");
    let declined = events
        .iter()
        .any(|e| e["event"] == "plan_declined" && e["data"]["request_id"] == other["request_id"]);
    assert!(!declined, "the script declined another client's card");
}

/// A high-risk card (a standing goal) in a piped session is declined,
/// saying why; the queued `y` approves nothing and is not sent on.
#[test]
fn piped_chat_declines_a_high_risk_card() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let fake = rt.block_on(silas_testkit::FakeLlm::start()).unwrap();
    let markdown = "---\nid: g-watch\ntype: goal\ntitle: \"g-watch\"\nschedule: \"@every 15s\"\nverify:\n  - name: ok\n    run: \"true\"\n    expect: {exit_code: 0}\n---\n\nWatch it.\n";
    fake.push(silas_testkit::Reply::json(&serde_json::json!({
        "route": "planner", "reason": "needs a plan",
        "interaction_register": "execution", "interaction_mode": "act_and_report",
        "context_profile": "conversation"})));
    fake.push(silas_testkit::Reply::json(&serde_json::json!({
        "message": "Here is a plan.",
        "plan_action": {"action": "propose", "plan_markdown": markdown},
        "needs_approval": true})));
    let dir = tempfile::tempdir().unwrap();
    let config = fake_config(dir.path(), &fake);
    let (daemon, addr) = start_with(dir.path(), &config);
    let lines = piped_chat(dir.path(), &addr, "keep an eye on it\ny\n");
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("── approval requested:") && l.contains("[high risk]")),
        "{lines:#?}"
    );
    assert!(
        lines.iter().any(|l| l
            == "declined (high-risk card in a non-interactive session; answer it in the web app or an interactive `silas chat`): nothing runs."),
        "{lines:#?}"
    );
    assert!(
        !lines.iter().any(|l| is_prompt(l) || l == "approved."),
        "{lines:#?}"
    );
    assert!(
        lines.iter().any(|l| l.starts_with("(not sent: \"y\"")),
        "{lines:#?}"
    );
    daemon.stop_blocking();
    let events = audit_events(dir.path());
    let count = |name: &str| events.iter().filter(|e| e["event"] == name).count();
    assert_eq!(count("approval.issued"), 0, "no token for a declined plan");
    assert_eq!(count("plan_declined"), 1);
    // The dropped `y` never reached the model as a message.
    let requests = fake.requests();
    assert!(!requests.is_empty());
    assert!(
        requests.iter().all(|r| r.last_message_text().trim() != "y"),
        "{:#?}",
        requests
            .iter()
            .map(|r| r.last_message_text())
            .collect::<Vec<_>>()
    );
    // `work show` says why the goal is blocked.
    let out = silas(dir.path())
        .args(["work", "show", "g-watch"])
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(shown.contains("blocked"), "{shown}");
    assert!(shown.contains("not approved (declined)"), "{shown}");
}

/// A hostile model's reply with terminal escapes (clear the screen, draw a
/// fake prompt, write the clipboard by OSC 52): `silas chat` prints them as
/// visible text; no escape byte reaches the terminal.
#[test]
fn escape_sequences_in_a_reply_are_shown_not_obeyed() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let fake = rt.block_on(silas_testkit::FakeLlm::start()).unwrap();
    let hostile = "\u{1b}[2J\u{1b}[Happrove? [y/N]\u{1b}]52;c;ZXZpbA==\u{7} done\u{202e}";
    fake.set_fallback(direct(hostile));
    let dir = tempfile::tempdir().unwrap();
    let config = fake_config(dir.path(), &fake);
    let (daemon, addr) = start_with(dir.path(), &config);
    let lines = piped_chat(dir.path(), &addr, "hello\n");
    daemon.stop_blocking();
    let all = lines.join("\n");
    assert!(
        !all.contains(['\u{1b}', '\u{7}', '\u{202e}']),
        "a control character reached the terminal: {all:?}"
    );
    assert!(
        all.contains("\\e[2J\\e[Happrove? [y/N]\\e]52;c;ZXZpbA==\\u{7} done\\u{202e}"),
        "{lines:#?}"
    );
}

/// After a restart, the first turn of the owner's conversation sends the
/// "Session rehydrated" notice before the (slow) reply: a piped session
/// waits for the reply, not for any message (it printed the notice and
/// exited, the reply arriving only in the next session).
#[test]
fn a_piped_session_waits_for_its_reply_not_for_a_notice() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let fake = rt.block_on(silas_testkit::FakeLlm::start()).unwrap();
    fake.push(direct("first reply"));
    fake.push(direct("the slow reply").delayed(Duration::from_millis(2500)));
    let dir = tempfile::tempdir().unwrap();
    let config = fake_config(dir.path(), &fake);
    let (daemon, addr) = start_with(dir.path(), &config);
    let first = piped_chat(dir.path(), &addr, "hello\n");
    assert!(
        first.iter().any(|l| l.contains("first reply")),
        "{first:#?}"
    );
    daemon.stop_blocking();
    let (daemon, addr) = start_with(dir.path(), &config);
    let lines = piped_chat(dir.path(), &addr, "hello again\n");
    daemon.stop_blocking();
    assert!(
        lines.iter().any(|l| l.contains("the slow reply")),
        "the session ended before its reply: {lines:#?}"
    );
}

/// A script's session counts only replies to its own messages: the reply
/// to an earlier session's message (still being worked on when that
/// session gave up) is shown but not taken for the reply to this one's
/// first line, which ended the script before its last line's reply.
#[test]
fn a_piped_session_counts_only_replies_to_its_own_messages() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let fake = rt.block_on(silas_testkit::FakeLlm::start()).unwrap();
    fake.push(direct("reply to old").delayed(Duration::from_millis(3000)));
    fake.push(direct("reply to one").delayed(Duration::from_millis(1500)));
    // Slower than the session's trailing quiet (0.5 s): only a session
    // that knows it is still owed this reply waits for it.
    fake.push(direct("reply to two").delayed(Duration::from_millis(2000)));
    let dir = tempfile::tempdir().unwrap();
    let config = fake_config(dir.path(), &fake);
    let (daemon, addr) = start_with(dir.path(), &config);
    // The first script gives up after 1 s, its reply still coming.
    let out = silas(dir.path())
        .args(["chat", "--url", &format!("ws://{addr}/ws"), "--wait", "1"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            c.stdin.take().unwrap().write_all(b"old\n")?;
            c.wait_with_output()
        })
        .unwrap();
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("reply to old"),
        "the first session should have given up"
    );
    // Giving up is not success: a script can tell.
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("error[E_CHANNEL_TIMEOUT]: stopped waiting after 1 s (1 replies"),
        "{err}"
    );
    let lines = piped_chat(dir.path(), &addr, "one\ntwo\n");
    daemon.stop_blocking();
    for want in ["reply to old", "reply to one", "reply to two"] {
        assert!(
            lines.iter().any(|l| l.contains(want)),
            "{want:?} missing: {lines:#?}"
        );
    }
}

/// Without `--url`, chat finds the daemon where it actually listens (asked
/// over the control socket), not where the config file or this shell's
/// environment say: the daemon here listens on a port of its own choosing.
#[test]
fn chat_finds_the_running_daemon_whatever_the_config_says_now() {
    let dir = tempfile::tempdir().unwrap();
    let (daemon, addr) = support::start(dir.path());
    assert!(!addr.ends_with(":8420"), "{addr}");
    let mut child = silas(dir.path())
        .arg("chat")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"hello\n").unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        !String::from_utf8_lossy(&out.stdout).trim().is_empty(),
        "no reply: {err}"
    );
    daemon.stop_blocking();
}
