//! Network through an egress proxy port: from inside the sandbox, TCP
//! connect reaches only that port, TCP bind nowhere, and the proxy variables
//! name it. (The proxy's own decisions are tested in silas-netguard.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};

use silas_sandbox::{Launcher, SandboxError, SandboxSpec, SubprocessSandbox};

fn sandbox() -> SubprocessSandbox {
    SubprocessSandbox::new(Launcher {
        program: PathBuf::from(env!("CARGO_BIN_EXE_silas-sandbox-exec")),
        args: Vec::new(),
    })
}

fn probe(port: u16) -> String {
    format!(
        "import socket\ntry:\n socket.create_connection((\"127.0.0.1\",{port}),timeout=2); print(\"CONNECTED-{port}\")\nexcept Exception as e: print(\"refused-{port}\", e)\n"
    )
}

fn egress_spec(script: &str, work: &Path, proxy_port: u16) -> SandboxSpec {
    let mut spec = SandboxSpec::new(
        vec!["python3".into(), "-c".into(), script.into()],
        work.to_path_buf(),
    );
    spec.env.push(("NO_PROXY".into(), "*".into()));
    spec.env
        .push(("https_proxy".into(), "http://evil.test:1".into()));
    spec.network = true;
    spec.egress_proxy_port = Some(proxy_port);
    spec
}

#[tokio::test]
async fn only_the_proxy_port_is_reachable_and_bind_is_refused() {
    let proxy = TcpListener::bind("127.0.0.1:0").unwrap();
    let proxy_port = proxy.local_addr().unwrap().port();
    let other = TcpListener::bind("127.0.0.1:0").unwrap();
    let other_port = other.local_addr().unwrap().port();
    other.set_nonblocking(true).unwrap();
    let base = tempfile::tempdir().unwrap();
    let work = sandbox().fresh_work_dir(base.path(), "egress-1").unwrap();
    let script = format!(
        "{}{}import os,socket\nfor k in sorted(os.environ):\n  print('ENV', k, os.environ[k])\ntry:\n  s=socket.socket(); s.bind(('127.0.0.1',0)); s.listen(); print('BOUND')\nexcept Exception as e: print('bind-refused', e)\n",
        probe(other_port),
        probe(proxy_port)
    );
    let out = sandbox()
        .run(&egress_spec(&script, &work, proxy_port))
        .await
        .unwrap();
    assert!(out.success(), "{out:?}");
    assert!(
        out.stdout.contains(&format!("refused-{other_port}")),
        "{out:?}"
    );
    assert!(
        other.accept().is_err(),
        "the sandbox reached a port other than the proxy's"
    );
    assert!(
        out.stdout.contains(&format!("CONNECTED-{proxy_port}")),
        "{out:?}"
    );
    assert!(out.stdout.contains("bind-refused"), "{out:?}");
    let url = format!("http://127.0.0.1:{proxy_port}");
    for k in [
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "http_proxy",
        "https_proxy",
        "ALL_PROXY",
    ] {
        assert!(
            out.stdout.contains(&format!("ENV {k} {url}\n")),
            "{k}: {}",
            out.stdout
        );
    }
    assert!(!out.stdout.contains("NO_PROXY"), "{}", out.stdout);
    assert!(!out.stdout.contains("evil.test"), "{}", out.stdout);
}

#[tokio::test]
async fn egress_port_zero_is_refused_before_anything_runs() {
    let base = tempfile::tempdir().unwrap();
    let work = sandbox().fresh_work_dir(base.path(), "egress-2").unwrap();
    let marker = work.join("ran");
    let script = format!("open({:?},'w').write('x')", marker.display().to_string());
    let err = sandbox()
        .run(&egress_spec(&script, &work, 0))
        .await
        .unwrap_err();
    assert!(matches!(err, SandboxError::Invalid(_)), "{err}");
    assert!(!marker.exists());
}

#[test]
fn proxy_variables_replace_the_callers() {
    let env = vec![
        ("PATH".to_string(), "/bin".to_string()),
        ("no_proxy".to_string(), "*".to_string()),
        ("Http_Proxy".to_string(), "http://x".to_string()),
    ];
    let out = silas_sandbox::launcher::egress_env(&env, 3128);
    assert!(out.contains(&("PATH".into(), "/bin".into())));
    assert!(
        !out.iter()
            .any(|(k, v)| k.eq_ignore_ascii_case("no_proxy") || v == "http://x")
    );
    assert_eq!(
        out.iter()
            .filter(|(_, v)| v == "http://127.0.0.1:3128")
            .count(),
        6
    );
}

/// Staying in the host network namespace would expose the host's abstract
/// unix sockets (namespaced by netns, not by the filesystem — the
/// containerd-shim escape, CVE-2020-15257); landlock's scope closes them.
#[tokio::test]
async fn host_abstract_unix_sockets_are_out_of_reach() {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixListener};
    let name = format!("silas-egress-test-{}", std::process::id());
    let listener =
        UnixListener::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes()).unwrap()).unwrap();
    listener.set_nonblocking(true).unwrap();
    let proxy = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = tempfile::tempdir().unwrap();
    let work = sandbox().fresh_work_dir(base.path(), "egress-3").unwrap();
    let script = format!(
        "import socket\ntry:\n  s=socket.socket(socket.AF_UNIX); s.connect('\\0{name}'); print('CONNECTED')\nexcept Exception as e: print('refused', e)\n"
    );
    let out = sandbox()
        .run(&egress_spec(
            &script,
            &work,
            proxy.local_addr().unwrap().port(),
        ))
        .await
        .unwrap();
    assert!(out.stdout.contains("refused"), "{out:?}");
    assert!(
        listener.accept().is_err(),
        "the sandbox reached a host abstract socket"
    );
}

/// Landlock confines TCP connect only: without the seccomp rules a command
/// sent datagrams (DNS queries included) to any host around the proxy, and
/// TCP Fast Open (`MSG_FASTOPEN` on a send) connected anywhere. Now only a
/// TCP stream socket can be made, no send may fast-open, and the proxy still
/// answers.
#[tokio::test]
async fn udp_raw_sockets_and_fast_open_are_refused_with_egress() {
    let catcher = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    // Not the proxy: TCP Fast Open must not reach it either.
    let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
    tcp.set_nonblocking(true).unwrap();
    let tcp_port = tcp.local_addr().unwrap().port();
    catcher.set_nonblocking(true).unwrap();
    let udp_port = catcher.local_addr().unwrap().port();
    let proxy = TcpListener::bind("127.0.0.1:0").unwrap();
    let proxy_port = proxy.local_addr().unwrap().port();
    let base = tempfile::tempdir().unwrap();
    let work = sandbox().fresh_work_dir(base.path(), "egress-udp").unwrap();
    let script = format!(
        "import socket\n\
         def tryit(label, f):\n  try:\n    f(); print(label, 'ALLOWED')\n  except Exception as e: print(label, 'refused', e)\n\
         tryit('udp4', lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'leak', ('127.0.0.1', {udp_port})))\n\
         tryit('udp6', lambda: socket.socket(socket.AF_INET6, socket.SOCK_DGRAM))\n\
         tryit('raw', lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP))\n\
         tryit('sctp', lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM, 132))\n\
         tryit('dgram-nonblock', lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM | socket.SOCK_NONBLOCK))\n\
         tryit('fastopen', lambda: socket.socket().sendto(b'leak', 0x20000000, ('127.0.0.1', {tcp_port})))\n\
         tryit('fastopen-msg', lambda: socket.socket().sendmsg([b'leak'], [], 0x20000000, ('127.0.0.1', {tcp_port})))\n\
         {}",
        probe(proxy_port)
    );
    let out = sandbox()
        .run(&egress_spec(&script, &work, proxy_port))
        .await
        .unwrap();
    assert!(out.success(), "{out:?}");
    for label in [
        "udp4",
        "udp6",
        "raw",
        "sctp",
        "dgram-nonblock",
        "fastopen",
        "fastopen-msg",
    ] {
        assert!(
            out.stdout.contains(&format!("{label} refused")),
            "{label}: {}",
            out.stdout
        );
    }
    let mut buf = [0u8; 16];
    assert!(catcher.recv_from(&mut buf).is_err(), "a datagram got out");
    assert!(tcp.accept().is_err(), "a Fast Open connect got out");
    assert!(
        out.stdout.contains(&format!("CONNECTED-{proxy_port}")),
        "{out:?}"
    );
}
