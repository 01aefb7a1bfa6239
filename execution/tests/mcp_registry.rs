//! The daemon's MCP registry over the real sandbox and the fixture server:
//! started lazily and reused, stopped when idle and at shutdown with no
//! process left behind, restarted at most `max_restarts` times after a
//! crash, refused (and not started again) when its tools changed after
//! approval, and without network unless it declares hosts.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Map, Value, json};
use silas_core::{Coded, ErrorCode};
use silas_execution::mcp::{McpError, McpTool, tools_hash};
use silas_execution::mcp_registry::{McpApproval, McpPlan, McpRegistry, McpRegistryConfig};

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/mcp-notes");

struct Fx {
    base: tempfile::TempDir,
    registry: Arc<McpRegistry>,
    starts: Arc<AtomicUsize>,
}

fn fx(edit: impl FnOnce(&mut McpRegistryConfig)) -> Fx {
    let base = tempfile::tempdir().unwrap();
    std::fs::set_permissions(base.path(), PermissionsExt::from_mode(0o755)).unwrap();
    let mut cfg = McpRegistryConfig::new(base.path().join("work"));
    cfg.call_timeout = Duration::from_secs(20);
    edit(&mut cfg);
    Fx {
        base,
        registry: Arc::new(McpRegistry::new(common::sandbox(), cfg)),
        starts: Arc::new(AtomicUsize::new(0)),
    }
}

impl Fx {
    /// Stages the fixture into the session's work dir, as the daemon stages
    /// a skill's approved files; counts starts.
    fn prepare(
        &self,
        env: Vec<(String, String)>,
        hosts: Vec<String>,
    ) -> impl FnOnce(&Path) -> Result<McpPlan, McpError> + use<> {
        let starts = self.starts.clone();
        move |work: &Path| {
            starts.fetch_add(1, Ordering::SeqCst);
            let dir = work.join("skill");
            std::fs::create_dir_all(dir.join("scripts")).unwrap();
            for f in ["SKILL.md", "scripts/server.py"] {
                std::fs::copy(Path::new(FIXTURE).join(f), dir.join(f)).unwrap();
            }
            Ok(McpPlan {
                skill_dir: dir,
                command: "scripts/server.py".into(),
                args: Vec::new(),
                env,
                hosts,
            })
        }
    }

    async fn approval(&self) -> McpApproval {
        let tools: Vec<McpTool> = self
            .registry
            .list_for_install("mcp-notes", self.prepare(Vec::new(), Vec::new()))
            .await
            .unwrap();
        McpApproval {
            content_hash: "c1".into(),
            tools_hash: tools_hash(&tools),
        }
    }

    async fn call(&self, approval: &McpApproval, query: &str) -> Result<String, McpError> {
        self.call_with(approval, query, Vec::new()).await
    }

    async fn call_with(
        &self,
        approval: &McpApproval,
        query: &str,
        env: Vec<(String, String)>,
    ) -> Result<String, McpError> {
        let mut args = Map::new();
        args.insert("query".into(), Value::from(query));
        self.registry
            .call(
                "mcp-notes",
                approval,
                self.prepare(env, Vec::new()),
                "search_notes",
                args,
            )
            .await
            .map(|o| o.text)
    }

    /// Processes whose command line names this test's directory (the
    /// staged server and its launcher).
    fn processes(&self) -> Vec<u32> {
        processes_naming(self.base.path())
    }

    async fn wait_no_processes(&self) {
        for _ in 0..100 {
            if self.processes().is_empty() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("processes left behind: {:?}", self.processes());
    }
}

fn processes_naming(dir: &Path) -> Vec<u32> {
    let needle = dir.display().to_string();
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmd) = std::fs::read(PathBuf::from("/proc").join(pid.to_string()).join("cmdline"))
        else {
            continue;
        };
        if String::from_utf8_lossy(&cmd).contains(&needle) {
            out.push(pid);
        }
    }
    out
}

#[tokio::test]
async fn a_server_starts_once_is_reused_and_is_stopped_when_idle_leaving_no_process() {
    let f = fx(|c| c.idle_timeout = Duration::from_millis(300));
    let approval = f.approval().await;
    // The install listing ran its own server and stopped it.
    assert_eq!(f.starts.load(Ordering::SeqCst), 1);
    f.wait_no_processes().await;

    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port().to_string();
    let env = vec![("MCP_TEST_PORT".to_string(), port)];
    let out = f.call_with(&approval, "cats", env).await.unwrap();
    assert!(out.contains("found 2 notes about cats"), "{out}");
    // No declared hosts: no network, not even loopback.
    assert!(out.contains("net=refused"), "{out}");
    assert!(listener.accept().is_err());
    let out = f.call(&approval, "dogs").await.unwrap();
    assert!(out.contains("dogs"), "{out}");
    assert_eq!(
        f.starts.load(Ordering::SeqCst),
        2,
        "the second call reused it"
    );
    assert_eq!(f.registry.running_skills(), ["mcp-notes"]);
    assert!(!f.processes().is_empty());

    // Not idle yet: kept.
    assert_eq!(f.registry.reap_idle(), 0);
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(f.registry.reap_idle(), 1);
    assert!(f.registry.running_skills().is_empty());
    f.wait_no_processes().await;
    // The session's work dir went with it.
    let left: Vec<_> = std::fs::read_dir(f.base.path().join("work"))
        .unwrap()
        .collect();
    assert!(left.is_empty(), "{left:?}");

    // The next call starts it again.
    f.call(&approval, "birds").await.unwrap();
    assert_eq!(f.starts.load(Ordering::SeqCst), 3);
    f.registry.shutdown().await;
    f.wait_no_processes().await;
}

#[tokio::test]
async fn the_reaper_task_stops_idle_servers_by_itself() {
    let f = fx(|c| c.idle_timeout = Duration::from_millis(200));
    let approval = f.approval().await;
    let _reaper = f.registry.spawn_reaper();
    f.call(&approval, "cats").await.unwrap();
    assert!(!f.processes().is_empty());
    f.wait_no_processes().await;
    assert!(f.registry.running_skills().is_empty());
}

#[tokio::test]
async fn shutdown_kills_every_server_and_starts_none_after() {
    let f = fx(|_| {});
    let approval = f.approval().await;
    f.call(&approval, "cats").await.unwrap();
    assert!(!f.processes().is_empty());
    f.registry.shutdown().await;
    f.wait_no_processes().await;
    let err = f.call(&approval, "cats").await.unwrap_err();
    assert!(matches!(err, McpError::ShutDown), "{err}");
    assert_eq!(err.code(), ErrorCode::ESandboxUnavailable);
    assert!(f.processes().is_empty());
}

/// An answer over the message limit fails the call at once, saying why,
/// instead of leaving it to its timeout (rmcp drops an over-long line and
/// reads on); the session is dropped like a crashed one's, and the next
/// call gets a fresh server.
#[tokio::test]
async fn an_oversized_answer_fails_the_call_at_once() {
    let f = fx(|c| c.call_timeout = Duration::from_secs(120));
    let approval = f.approval().await;
    let t0 = std::time::Instant::now();
    let err = f.call(&approval, "flood").await.unwrap_err();
    assert!(
        t0.elapsed() < Duration::from_secs(30),
        "took {:?}",
        t0.elapsed()
    );
    assert!(matches!(err, McpError::Protocol { .. }), "{err}");
    assert!(
        err.to_string().contains("a message over 8388608 bytes"),
        "{err}"
    );
    let out = f.call(&approval, "cats").await.unwrap();
    assert!(out.contains("cats"), "{out}");
}

#[tokio::test]
async fn a_crashing_server_is_restarted_at_most_max_restarts_times() {
    let f = fx(|c| c.max_restarts = 1);
    let approval = f.approval().await;
    // Crash 1: the call fails, the session is dropped.
    let err = f.call(&approval, "crash").await.unwrap_err();
    assert!(matches!(err, McpError::Protocol { .. }), "{err}");
    // Restart 1 works.
    let out = f.call(&approval, "cats").await.unwrap();
    assert!(out.contains("cats"), "{out}");
    assert_eq!(f.starts.load(Ordering::SeqCst), 3);
    // Crash 2: over the limit, never started again.
    f.call(&approval, "crash").await.unwrap_err();
    let err = f.call(&approval, "cats").await.unwrap_err();
    assert!(matches!(err, McpError::GaveUp { failures: 2, .. }), "{err}");
    assert_eq!(err.code(), ErrorCode::ESandboxFailed);
    assert_eq!(
        f.starts.load(Ordering::SeqCst),
        3,
        "no start past the limit"
    );
    f.wait_no_processes().await;

    // A new approval starts afresh.
    let again = McpApproval {
        content_hash: "c2".into(),
        ..approval
    };
    f.call(&again, "cats").await.unwrap();
    f.registry.shutdown().await;
}

#[tokio::test]
async fn a_server_whose_tools_changed_is_refused_and_not_started_again() {
    let f = fx(|_| {});
    let approval = f.approval().await;
    let changed = vec![("MCP_TEST_VARIANT".to_string(), "changed".to_string())];
    let err = f
        .call_with(&approval, "cats", changed.clone())
        .await
        .unwrap_err();
    assert!(matches!(err, McpError::ToolsChanged { .. }), "{err}");
    assert_eq!(err.code(), ErrorCode::EApprovalHash);
    assert_eq!(f.starts.load(Ordering::SeqCst), 2);
    f.wait_no_processes().await;
    // Refused until approved again: even a well-behaved start is not tried.
    let err = f.call(&approval, "cats").await.unwrap_err();
    assert!(matches!(err, McpError::ToolsChanged { .. }), "{err}");
    assert_eq!(f.starts.load(Ordering::SeqCst), 2);
    // Approval of the new list (the owner saw it): runs.
    let tools = f
        .registry
        .list_for_install("mcp-notes", f.prepare(changed.clone(), Vec::new()))
        .await
        .unwrap();
    let reapproved = McpApproval {
        content_hash: approval.content_hash.clone(),
        tools_hash: tools_hash(&tools),
    };
    let out = f.call_with(&reapproved, "cats", changed).await.unwrap();
    assert!(out.contains("cats"), "{out}");
    f.registry.shutdown().await;
}

#[tokio::test]
async fn a_server_declaring_hosts_without_an_egress_guard_does_not_start() {
    let f = fx(|_| {});
    let approval = f.approval().await;
    f.wait_no_processes().await;
    let mut args = Map::new();
    args.insert("query".into(), json!("cats"));
    let err = f
        .registry
        .call(
            "mcp-notes",
            &approval,
            f.prepare(Vec::new(), vec!["api.example.org".into()]),
            "search_notes",
            args,
        )
        .await
        .unwrap_err();
    assert!(matches!(err, McpError::Prepare { .. }), "{err}");
    assert_eq!(err.code(), ErrorCode::ESandboxUnavailable);
    assert!(f.processes().is_empty());
}

#[tokio::test]
async fn a_server_declaring_hosts_reaches_only_those_through_its_own_proxy() {
    let base = tempfile::tempdir().unwrap();
    std::fs::set_permissions(base.path(), PermissionsExt::from_mode(0o755)).unwrap();
    let guard = silas_netguard::NetworkGuard::new(
        &silas_netguard::NetworkGuardConfig::default(),
        Arc::new(silas_netguard::ScriptedResolver::new()),
    )
    .unwrap();
    let mut f = fx(|_| {});
    f.registry = Arc::new(
        McpRegistry::new(
            common::sandbox(),
            McpRegistryConfig::new(base.path().join("work")),
        )
        .with_egress_guard(guard),
    );
    let approval = f.approval().await;
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port().to_string();
    let env = vec![
        ("MCP_TEST_PORT".to_string(), port),
        (
            "MCP_TEST_PROXY_TARGET".to_string(),
            "undeclared.example.net:443".to_string(),
        ),
    ];
    let mut args = Map::new();
    args.insert("query".into(), json!("cats"));
    let out = f
        .registry
        .call(
            "mcp-notes",
            &approval,
            f.prepare(env, vec!["api.example.org".into()]),
            "search_notes",
            args,
        )
        .await
        .unwrap()
        .text;
    // Direct connections are cut off; the proxy refuses the undeclared host.
    assert!(out.contains("net=refused"), "{out}");
    assert!(listener.accept().is_err());
    assert!(out.contains("proxy=HTTP/1.1 403"), "{out}");
    assert!(out.contains("not a host this run may reach"), "{out}");
    f.registry.shutdown().await;
}

#[tokio::test]
async fn arguments_the_bound_schema_refuses_never_reach_the_server() {
    let f = fx(|_| {});
    let approval = f.approval().await;
    let mut args = Map::new();
    args.insert("query".into(), json!(["not", "a", "string"]));
    let err = f
        .registry
        .call(
            "mcp-notes",
            &approval,
            f.prepare(Vec::new(), Vec::new()),
            "search_notes",
            args,
        )
        .await
        .unwrap_err();
    assert!(matches!(err, McpError::InvalidArguments { .. }), "{err}");
    assert!(
        err.to_string().contains("$.query: must be of type string"),
        "{err}"
    );
    // Not a server failure: the session stays up and is reused.
    let out = f.call(&approval, "cats").await.unwrap();
    assert!(out.contains("cats"), "{out}");
    assert_eq!(f.starts.load(Ordering::SeqCst), 2);
    f.registry.shutdown().await;
}

/// A call that times out kills its server at once: a call another work
/// item already had waiting on the same (one-request-at-a-time) server
/// fails then instead of sitting out its own whole timeout, and the next
/// call gets a fresh server.
#[tokio::test]
async fn a_hung_call_kills_its_server_and_frees_the_calls_behind_it() {
    let f = Arc::new(fx(|c| c.call_timeout = Duration::from_secs(3)));
    let approval = f.approval().await;
    assert!(f.call(&approval, "cats").await.unwrap().contains("cats"));
    let hung = {
        let (f, approval) = (f.clone(), approval.clone());
        tokio::spawn(async move { f.call(&approval, "hang").await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Queued behind the hung call, with a timeout of its own (3 s).
    let t0 = std::time::Instant::now();
    let behind = {
        let (f, approval) = (f.clone(), approval.clone());
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(1500)).await;
            f.call(&approval, "dogs").await
        })
    };
    let err = hung.await.unwrap().unwrap_err();
    assert!(err.to_string().contains("timed out"), "{err}");
    // The call behind it ends with the kill (about 2.5 s after start), not
    // at its own timeout 4.5 s after start.
    let behind = behind.await.unwrap();
    assert!(
        t0.elapsed() < Duration::from_millis(4200),
        "{:?}: {behind:?}",
        t0.elapsed()
    );
    // The next call starts a fresh server and is answered.
    let out = f.call(&approval, "birds").await.unwrap();
    assert!(out.contains("birds"), "{out}");
}

/// A hung call whose caller goes away (its work item cancelled: the run is
/// killed, the call's future dropped) takes its server with it: the server
/// stayed busy with the abandoned call, and the next work item's call sat
/// out its whole timeout behind it.
#[tokio::test]
async fn an_abandoned_hung_call_frees_the_server_at_once() {
    let f = Arc::new(fx(|c| c.call_timeout = Duration::from_secs(30)));
    let approval = f.approval().await;
    assert!(f.call(&approval, "cats").await.unwrap().contains("cats"));
    let hung = {
        let (f, approval) = (f.clone(), approval.clone());
        tokio::spawn(async move { f.call(&approval, "hang").await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    hung.abort();
    let _ = hung.await;
    let t0 = std::time::Instant::now();
    let out = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            if let Ok(out) = f.call(&approval, "birds").await {
                return out;
            }
        }
    })
    .await
    .expect("the next call waited behind the abandoned one");
    assert!(out.contains("birds"), "{out}");
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
}

/// A tool name model APIs would refuse as a function name (path
/// characters, or too long once namespaced) fails the install listing,
/// naming it; nothing is bound, no process is left.
#[tokio::test]
async fn a_tool_name_model_apis_refuse_is_refused_at_install() {
    let f = fx(|_| {});
    let err = f
        .registry
        .list_for_install(
            "mcp-notes",
            f.prepare(
                vec![("MCP_TEST_VARIANT".into(), "badname".into())],
                Vec::new(),
            ),
        )
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("\"../../escape\" is refused"),
        "{err}"
    );
    f.wait_no_processes().await;
}

#[test]
fn tool_names_are_checked_as_model_apis_take_them() {
    use silas_execution::mcp::{MAX_TOOL_NAME, TOOL_PREFIX, valid_tool_name};
    assert_eq!(TOOL_PREFIX, silas_llm::toolset::MCP_TOOL_PREFIX);
    assert!(valid_tool_name("notes", "search_notes"));
    assert!(valid_tool_name("notes", "get-v2"));
    for bad in ["", "../../escape", "a b", "x.y", "naïve", "a/b"] {
        assert!(!valid_tool_name("notes", bad), "{bad:?}");
    }
    // At most 64 characters as `mcp__<skill>__<tool>`.
    let room = MAX_TOOL_NAME - TOOL_PREFIX.len() - "notes".len() - 2;
    assert!(valid_tool_name("notes", &"t".repeat(room)));
    assert!(!valid_tool_name("notes", &"t".repeat(room + 1)));
}
