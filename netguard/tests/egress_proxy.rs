//! The egress proxy decides on validated addresses only: a public name is
//! tunnelled (through the test-only dial redirect to a loopback server),
//! loopback / metadata / private / IPv6 loopback targets and names resolving
//! into private ranges get 403 with nothing connected, and every refusal is
//! handed back as data.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use silas_core::ErrorCode;
use silas_netguard::{
    EgressLimits, EgressProxy, NetworkGuard, NetworkGuardConfig, ScriptedResolver,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const PUBLIC: &str = "93.184.216.34";

/// A loopback server that counts connections and answers every one with a
/// fixed HTTP response (after echoing nothing back).
async fn counting_server() -> (SocketAddr, Arc<AtomicUsize>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let hits = Arc::new(AtomicUsize::new(0));
    let h = hits.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            h.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let mut got = Vec::new();
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                let first = String::from_utf8_lossy(&got)
                    .lines()
                    .next()
                    .unwrap_or("")
                    .to_string();
                let body = format!("origin saw: {first}");
                let resp = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = s.write_all(resp.as_bytes()).await;
            });
        }
    });
    (addr, hits)
}

fn resolver() -> Arc<ScriptedResolver> {
    let public: IpAddr = PUBLIC.parse().unwrap();
    let private: IpAddr = "10.1.2.3".parse().unwrap();
    let meta: IpAddr = "169.254.169.254".parse().unwrap();
    Arc::new(
        ScriptedResolver::new()
            .with("public.test", &[&[public]])
            .with("intranet.test", &[&[private]])
            .with("mixed.test", &[&[public, meta]])
            .with("other.test", &[&[public]])
            .with("api.skill.test", &[&[public]]),
    )
}

async fn proxy_to(server: SocketAddr, port: u16) -> EgressProxy {
    proxy_with(server, port, EgressLimits::default()).await
}

/// [`proxy_to`] with other limits.
async fn proxy_with(server: SocketAddr, port: u16, limits: EgressLimits) -> EgressProxy {
    let guard = NetworkGuard::new(&NetworkGuardConfig::default(), resolver()).unwrap();
    let from = SocketAddr::new(PUBLIC.parse().unwrap(), port);
    EgressProxy::start_redirecting_dials_for_tests(guard, limits, from, server)
        .await
        .unwrap()
}

/// Send `request` to the proxy, return everything it answers.
async fn ask(proxy: &EgressProxy, request: &str) -> String {
    let mut s = TcpStream::connect(proxy.addr()).await.unwrap();
    s.write_all(request.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out))
        .await
        .expect("proxy answered in time")
        .unwrap();
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test]
async fn connect_to_a_public_name_tunnels_to_the_validated_address() {
    let (server, hits) = counting_server().await;
    let proxy = proxy_to(server, 443).await;
    let mut s = TcpStream::connect(proxy.addr()).await.unwrap();
    s.write_all(b"CONNECT public.test:443 HTTP/1.1\r\nHost: public.test:443\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 256];
    let n = s.read(&mut buf).await.unwrap();
    assert!(
        String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&buf[..n])
    );
    // Inside the tunnel the bytes reach the origin unchanged.
    s.write_all(b"GET /inside HTTP/1.1\r\nHost: public.test\r\n\r\n")
        .await
        .unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.unwrap();
    assert!(String::from_utf8_lossy(&out).contains("origin saw: GET /inside HTTP/1.1"));
    assert_eq!(hits.load(Ordering::SeqCst), 1);
    assert!(proxy.take_refusals().0.is_empty());
}

#[tokio::test]
async fn plain_http_to_a_public_name_is_forwarded_in_origin_form() {
    let (server, hits) = counting_server().await;
    let proxy = proxy_to(server, 80).await;
    let out = ask(
        &proxy,
        "GET http://public.test/a?b=1 HTTP/1.1\r\nHost: public.test\r\nProxy-Authorization: Basic c2VjcmV0\r\n\r\n",
    )
    .await;
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    assert!(out.contains("origin saw: GET /a?b=1 HTTP/1.1"), "{out}");
    assert_eq!(hits.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn blocked_targets_get_403_and_nothing_is_connected() {
    let (server, hits) = counting_server().await;
    let sp = server.port();
    // The redirect would send an allowed decision to the server: any hit
    // below means a refused target was dialled.
    let proxy = proxy_to(server, sp).await;
    let cases = [
        format!("CONNECT 127.0.0.1:{sp} HTTP/1.1\r\n\r\n"),
        format!("GET http://127.0.0.1:{sp}/ HTTP/1.1\r\nHost: x\r\n\r\n"),
        "CONNECT 169.254.169.254:80 HTTP/1.1\r\n\r\n".to_string(),
        "GET http://169.254.169.254/latest/meta-data/ HTTP/1.1\r\nHost: x\r\n\r\n".to_string(),
        "CONNECT 10.0.0.1:443 HTTP/1.1\r\n\r\n".to_string(),
        format!("CONNECT [::1]:{sp} HTTP/1.1\r\n\r\n"),
        "GET http://[::1]/ HTTP/1.1\r\nHost: x\r\n\r\n".to_string(),
        "CONNECT intranet.test:443 HTTP/1.1\r\n\r\n".to_string(),
        "GET http://intranet.test/ HTTP/1.1\r\nHost: x\r\n\r\n".to_string(),
        // One metadata answer among public ones refuses the whole name.
        "CONNECT mixed.test:443 HTTP/1.1\r\n\r\n".to_string(),
        // Blocked port on a public name.
        "CONNECT public.test:22 HTTP/1.1\r\n\r\n".to_string(),
        // IPv4-mapped loopback.
        format!("CONNECT [::ffff:127.0.0.1]:{sp} HTTP/1.1\r\n\r\n"),
    ];
    for req in &cases {
        let out = ask(&proxy, req).await;
        assert!(out.starts_with("HTTP/1.1 403"), "{req:?} → {out}");
    }
    assert_eq!(
        hits.load(Ordering::SeqCst),
        0,
        "a refused target was connected"
    );
    let (refusals, dropped) = proxy.take_refusals();
    assert_eq!(refusals.len(), cases.len());
    assert_eq!(dropped, 0);
    assert!(
        refusals
            .iter()
            .all(|r| r.status == 403 && r.code == ErrorCode::EGateBlocked)
    );
    let meta = &refusals[2];
    assert_eq!(meta.target, "169.254.169.254:80");
    assert!(meta.reason.contains("metadata"), "{}", meta.reason);
    // The refusal of a name never carries the resolved private address.
    let intranet = &refusals[7];
    assert_eq!(intranet.target, "intranet.test:443");
    assert!(!intranet.reason.contains("10.1.2.3"), "{}", intranet.reason);
    // Taken means emptied.
    assert!(proxy.take_refusals().0.is_empty());
}

#[tokio::test]
async fn malformed_and_oversized_requests_are_refused() {
    let (server, hits) = counting_server().await;
    let proxy = proxy_to(server, 443).await;
    let out = ask(&proxy, "CONNECT public.test HTTP/1.1\r\n\r\n").await;
    assert!(out.starts_with("HTTP/1.1 400"), "{out}");
    let out = ask(
        &proxy,
        "GET /relative HTTP/1.1\r\nHost: public.test\r\n\r\n",
    )
    .await;
    assert!(out.starts_with("HTTP/1.1 400"), "{out}");
    let out = ask(&proxy, "GET https://public.test/ HTTP/1.1\r\n\r\n").await;
    assert!(out.starts_with("HTTP/1.1 400"), "{out}");
    let big = format!(
        "CONNECT public.test:443 HTTP/1.1\r\nX-Pad: {}\r\n\r\n",
        "a".repeat(20_000)
    );
    let out = ask(&proxy, &big).await;
    assert!(out.starts_with("HTTP/1.1 431"), "{out}");
    assert_eq!(hits.load(Ordering::SeqCst), 0);
    assert_eq!(proxy.take_refusals().0.len(), 4);
}

#[tokio::test]
async fn connections_beyond_the_limit_get_503() {
    let (server, _hits) = counting_server().await;
    let limits = EgressLimits {
        max_tunnels: 1,
        ..EgressLimits::default()
    };
    let proxy = proxy_with(server, 443, limits).await;
    // The first connection holds the only slot (it never finishes its head).
    let mut first = TcpStream::connect(proxy.addr()).await.unwrap();
    first
        .write_all(b"CONNECT public.test:443 HTTP/1.1\r\n")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let out = ask(&proxy, "CONNECT public.test:443 HTTP/1.1\r\n\r\n").await;
    assert!(out.starts_with("HTTP/1.1 503"), "{out}");
    let (refusals, _) = proxy.take_refusals();
    assert_eq!(refusals.len(), 1);
    assert_eq!(refusals[0].status, 503);
}

#[tokio::test]
async fn an_idle_client_is_dropped() {
    let (server, _hits) = counting_server().await;
    let limits = EgressLimits {
        idle_timeout: Duration::from_millis(200),
        ..EgressLimits::default()
    };
    let proxy = proxy_with(server, 443, limits).await;
    let mut s = TcpStream::connect(proxy.addr()).await.unwrap();
    s.write_all(b"CONNECT public.test:443").await.unwrap();
    let mut out = Vec::new();
    // Closed by the proxy well before this outer bound.
    tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out))
        .await
        .expect("the proxy closed the idle connection")
        .unwrap();
    assert!(out.is_empty());
}

#[test]
fn authority_parsing() {
    use silas_netguard::proxy::parse_authority;
    assert_eq!(parse_authority("a.test:443"), Some(("a.test".into(), 443)));
    assert_eq!(parse_authority("[::1]:8080"), Some(("::1".into(), 8080)));
    assert_eq!(parse_authority("a.test"), None);
    assert_eq!(parse_authority("a.test:99999"), None);
    assert_eq!(parse_authority("user@a.test:443"), None);
    assert_eq!(parse_authority(":443"), None);
    assert_eq!(parse_authority("[::1]"), None);
}

#[tokio::test]
async fn a_client_that_half_closes_still_gets_the_response() {
    let (server, hits) = counting_server().await;
    let proxy = proxy_to(server, 80).await;
    let mut s = TcpStream::connect(proxy.addr()).await.unwrap();
    s.write_all(b"GET http://public.test/half HTTP/1.0\r\n\r\n")
        .await
        .unwrap();
    s.shutdown().await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out))
        .await
        .unwrap()
        .unwrap();
    let out = String::from_utf8_lossy(&out);
    assert!(out.contains("origin saw: GET /half HTTP/1.0"), "{out}");
    assert_eq!(hits.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_head_dripped_slowly_is_cut_off_at_one_idle_period() {
    let (server, hits) = counting_server().await;
    let limits = EgressLimits {
        idle_timeout: Duration::from_millis(300),
        ..EgressLimits::default()
    };
    let proxy = proxy_with(server, 443, limits).await;
    let mut s = TcpStream::connect(proxy.addr()).await.unwrap();
    let started = std::time::Instant::now();
    // One byte every 100 ms never lets a per-read timeout fire.
    for b in b"CONNECT public.test:443 HTTP/1.1\r\n\r\n" {
        if s.write_all(&[*b]).await.is_err() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out).await;
    assert!(out.is_empty(), "{}", String::from_utf8_lossy(&out));
    assert!(started.elapsed() < Duration::from_secs(3));
    assert_eq!(hits.load(Ordering::SeqCst), 0);
}

/// A per-skill proxy (`start_for_hosts`): the declared host is tunnelled, an
/// undeclared public host gets 403 before anything is resolved or
/// connected, and a declared host that resolves to a private address is
/// still refused by the guard.
#[tokio::test]
async fn a_skill_proxy_reaches_exactly_the_declared_hosts() {
    let (server, hits) = counting_server().await;
    let guard = NetworkGuard::new(&NetworkGuardConfig::default(), resolver()).unwrap();
    let from = SocketAddr::new(PUBLIC.parse().unwrap(), 80);
    let proxy = EgressProxy::start_for_hosts_redirecting_dials_for_tests(
        guard,
        EgressLimits::default(),
        vec![
            "*.skill.test".into(),
            "public.test".into(),
            "intranet.test".into(),
        ],
        from,
        server,
    )
    .await
    .unwrap();
    let ok = ask(
        &proxy,
        "GET http://public.test/x HTTP/1.1\r\nHost: public.test\r\n\r\n",
    )
    .await;
    assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
    let sub = ask(
        &proxy,
        "GET http://API.skill.test/y HTTP/1.1\r\nHost: api.skill.test\r\n\r\n",
    )
    .await;
    assert!(sub.starts_with("HTTP/1.1 200"), "{sub}");
    assert_eq!(hits.load(Ordering::SeqCst), 2);
    // Public, resolvable, but not declared: refused, nothing connected.
    let other = ask(
        &proxy,
        "GET http://other.test/ HTTP/1.1\r\nHost: other.test\r\n\r\n",
    )
    .await;
    assert!(other.starts_with("HTTP/1.1 403"), "{other}");
    let tunnel = ask(
        &proxy,
        "CONNECT other.test:80 HTTP/1.1\r\nHost: other.test:80\r\n\r\n",
    )
    .await;
    assert!(tunnel.starts_with("HTTP/1.1 403"), "{tunnel}");
    // The wildcard matches subdomains only, not the bare suffix.
    let bare = ask(
        &proxy,
        "GET http://skill.test/ HTTP/1.1\r\nHost: skill.test\r\n\r\n",
    )
    .await;
    assert!(bare.starts_with("HTTP/1.1 403"), "{bare}");
    // Declared, but private: the guard still refuses it.
    let private = ask(
        &proxy,
        "GET http://intranet.test/ HTTP/1.1\r\nHost: intranet.test\r\n\r\n",
    )
    .await;
    assert!(private.starts_with("HTTP/1.1 403"), "{private}");
    assert_eq!(hits.load(Ordering::SeqCst), 2);
    let (refused, _) = proxy.take_refusals();
    let targets: Vec<&str> = refused.iter().map(|r| r.target.as_str()).collect();
    assert_eq!(
        targets,
        [
            "other.test:80",
            "other.test:80",
            "skill.test:80",
            "intranet.test:80"
        ]
    );
    assert!(refused[0].reason.contains("not a host this run may reach"));
    assert_eq!(refused[0].code, ErrorCode::EGateBlocked);
}

#[tokio::test]
async fn a_proxy_for_declared_hosts_refuses_every_other_host_before_any_lookup() {
    let (server, hits) = counting_server().await;
    let sp = server.port();
    let guard = NetworkGuard::new(&NetworkGuardConfig::default(), resolver()).unwrap();
    let hosts = vec!["intranet.test".to_string(), "*.declared.test".to_string()];
    let proxy = EgressProxy::start_for_hosts(guard, EgressLimits::default(), hosts)
        .await
        .unwrap();
    // Public, but not declared: refused by the list (the guard would let
    // public.test through).
    for req in [
        "CONNECT public.test:443 HTTP/1.1\r\n\r\n".to_string(),
        "GET http://public.test/ HTTP/1.1\r\nHost: x\r\n\r\n".to_string(),
        format!("CONNECT 127.0.0.1:{sp} HTTP/1.1\r\n\r\n"),
        "CONNECT evildeclared.test:443 HTTP/1.1\r\n\r\n".to_string(),
    ] {
        let out = ask(&proxy, &req).await;
        assert!(out.starts_with("HTTP/1.1 403"), "{req:?} → {out}");
        assert!(
            out.contains("not a host this run may reach"),
            "{req:?} → {out}"
        );
    }
    // Declared, and still checked by the guard: its private address is
    // refused for that reason, not the list's.
    let out = ask(&proxy, "CONNECT intranet.test:443 HTTP/1.1\r\n\r\n").await;
    assert!(out.starts_with("HTTP/1.1 403"), "{out}");
    assert!(!out.contains("not a host this run may reach"), "{out}");
    assert_eq!(hits.load(Ordering::SeqCst), 0);
    let (refusals, _) = proxy.take_refusals();
    assert_eq!(refusals.len(), 5);
    assert_eq!(refusals[0].target, "public.test:443");
}

/// A skill's per-run proxy: only its declared hosts; a declared name the
/// owner pinned to loopback (with loopback trusted) reaches the loopback
/// server through the real dial path; an undeclared public name is refused
/// before it is resolved; a pin alone does not make loopback reachable.
#[tokio::test]
async fn a_host_restricted_proxy_reaches_only_declared_hosts_and_pins_need_trust() {
    use std::collections::BTreeMap;
    let (server, hits) = counting_server().await;
    let lo: IpAddr = "127.0.0.1".parse().unwrap();
    let scripted = resolver();
    let pinned = Arc::new(silas_netguard::PinnedResolver::new(
        BTreeMap::from([("oauth.example.com".to_string(), vec![lo])]),
        scripted.clone(),
    ));
    let trusting = NetworkGuardConfig {
        trusted_private_cidrs: vec!["127.0.0.1/32".into()],
        ..NetworkGuardConfig::default()
    };
    let guard = NetworkGuard::new(&trusting, pinned.clone()).unwrap();
    let hosts = vec!["oauth.example.com".to_string()];
    let proxy = EgressProxy::start_for_hosts(guard, EgressLimits::default(), hosts.clone())
        .await
        .unwrap();
    let sp = server.port();
    let out = ask(
        &proxy,
        &format!("GET http://oauth.example.com:{sp}/device/code HTTP/1.1\r\nHost: x\r\n\r\n"),
    )
    .await;
    assert!(out.contains("origin saw: GET /device/code"), "{out}");
    assert_eq!(hits.load(Ordering::SeqCst), 1);
    for req in [
        "CONNECT public.test:443 HTTP/1.1\r\n\r\n".to_string(),
        "GET http://public.test/ HTTP/1.1\r\nHost: x\r\n\r\n".to_string(),
        format!("CONNECT 127.0.0.1:{sp} HTTP/1.1\r\n\r\n"),
    ] {
        let out = ask(&proxy, &req).await;
        assert!(out.starts_with("HTTP/1.1 403"), "{req:?} → {out}");
        assert!(out.contains("not a host this run may reach"), "{out}");
    }
    assert_eq!(scripted.calls("public.test"), 0, "refused before resolving");
    assert_eq!(hits.load(Ordering::SeqCst), 1);

    // Without the trusted CIDR the pinned loopback answer is still blocked.
    let guard = NetworkGuard::new(&NetworkGuardConfig::default(), pinned).unwrap();
    let proxy = EgressProxy::start_for_hosts(guard, EgressLimits::default(), hosts.clone())
        .await
        .unwrap();
    let out = ask(
        &proxy,
        &format!("GET http://oauth.example.com:{sp}/ HTTP/1.1\r\nHost: x\r\n\r\n"),
    )
    .await;
    assert!(out.starts_with("HTTP/1.1 403"), "{out}");
    assert_eq!(hits.load(Ordering::SeqCst), 1);
}
