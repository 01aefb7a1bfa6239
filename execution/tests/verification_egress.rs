//! Issue #12 item 7 (network part) over the real sandbox: a `network: true`
//! check reaches the network only through its egress proxy. A direct connect
//! to a live loopback server is refused by landlock (the server sees
//! nothing); through the proxy, metadata and loopback get 403 and the
//! refusals come back in the result for the audit; a check without network
//! still has none at all.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::TcpListener;
use std::path::Path;

use common::sandbox;
use serde_json::json;
use silas_core::ErrorCode;
use silas_core::model::work::VerificationCheck;
use silas_execution::verification::VerificationRunner;
use silas_sandbox::Limits;

fn runner(verify: &Path) -> VerificationRunner {
    VerificationRunner::new(
        sandbox(),
        verify.to_path_buf(),
        Vec::new(),
        Limits::default(),
    )
}

fn check(name: &str, network: bool, python: &str, expect: &str) -> VerificationCheck {
    serde_json::from_value(json!({
        "name": name,
        "run": format!("python3 - <<'EOF'\n{python}\nEOF"),
        "expect": {"contains": expect},
        "timeout": 20,
        "network": network,
    }))
    .unwrap()
}

/// A live loopback "server": any accepted connection means the sandbox or
/// the proxy reached it.
fn live_server() -> (TcpListener, u16) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    l.set_nonblocking(true).unwrap();
    (l, port)
}

#[tokio::test]
async fn a_network_check_cannot_connect_directly_to_loopback() {
    let (server, port) = live_server();
    let verify = tempfile::tempdir().unwrap();
    // Proxies explicitly disabled: urllib connects straight to the server.
    let py = format!(
        "import urllib.request\nopener = urllib.request.build_opener(urllib.request.ProxyHandler({{}}))\ntry:\n    opener.open('http://127.0.0.1:{port}/', timeout=3)\n    print('DIRECT-REACHED')\nexcept Exception as e:\n    print('DIRECT-REFUSED', e)\n"
    );
    let r = runner(verify.path())
        .run_check(&check("direct", true, &py, "DIRECT-REFUSED"), None)
        .await;
    assert!(r.passed, "{r:?}");
    assert!(!r.output.contains("DIRECT-REACHED"));
    // EACCES from landlock, not a closed port or a missing route.
    assert!(r.output.contains("Permission denied"), "{r:?}");
    assert!(
        server.accept().is_err(),
        "the network check reached a loopback server directly"
    );
}

#[tokio::test]
async fn through_the_proxy_metadata_and_loopback_get_403_and_are_reported() {
    let (server, port) = live_server();
    let verify = tempfile::tempdir().unwrap();
    // Plain urllib honours HTTP_PROXY, which the sandbox points at the proxy.
    let py = format!(
        "import os, urllib.request, urllib.error\nprint('PROXY', os.environ.get('HTTP_PROXY', 'none').startswith('http://127.0.0.1:'))\nfor url in ['http://169.254.169.254/latest/meta-data/', 'http://127.0.0.1:{port}/']:\n    try:\n        urllib.request.urlopen(url, timeout=5)\n        print('REACHED', url)\n    except urllib.error.HTTPError as e:\n        print('STATUS', e.code)\n    except Exception as e:\n        print('ERROR', e)\n"
    );
    let r = runner(verify.path())
        .run_check(
            &check("via proxy", true, &py, "PROXY True\nSTATUS 403\nSTATUS 403"),
            None,
        )
        .await;
    assert!(r.passed, "{r:?}");
    assert!(!r.output.contains("REACHED"), "{r:?}");
    assert!(server.accept().is_err(), "the proxy connected to loopback");
    let targets: Vec<&str> = r
        .egress_refusals
        .iter()
        .map(|e| e.target.as_str())
        .collect();
    assert_eq!(
        targets,
        vec![
            "169.254.169.254:80".to_string(),
            format!("127.0.0.1:{port}")
        ],
        "{r:?}"
    );
    assert!(
        r.egress_refusals
            .iter()
            .all(|e| e.status == 403 && e.code == ErrorCode::EGateBlocked)
    );
    // The refusals travel with the stored result (for the daemon's audit).
    let stored = serde_json::to_value(&r).unwrap();
    assert_eq!(stored["egress_refusals"][0]["target"], "169.254.169.254:80");
}

#[tokio::test]
async fn a_check_without_network_has_no_network_and_no_proxy() {
    let (server, port) = live_server();
    let verify = tempfile::tempdir().unwrap();
    let py = format!(
        "import os, socket\nprint('PROXY', os.environ.get('HTTP_PROXY', 'none'))\ntry:\n    socket.create_connection(('127.0.0.1', {port}), timeout=2)\n    print('REACHED')\nexcept Exception as e:\n    print('NO-NETWORK', e)\n"
    );
    let r = runner(verify.path())
        .run_check(
            &check("offline", false, &py, "PROXY none\nNO-NETWORK"),
            None,
        )
        .await;
    assert!(r.passed, "{r:?}");
    assert!(r.egress_refusals.is_empty());
    assert!(server.accept().is_err());
    // Serialised results of checks without network keep their old shape.
    assert!(
        serde_json::to_value(&r)
            .unwrap()
            .get("egress_refusals")
            .is_none()
    );
}
