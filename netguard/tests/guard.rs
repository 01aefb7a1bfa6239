//! `NetworkGuard::check` with an injected resolver: every blocked range as a
//! DNS answer and as an IP literal, mixed A/AAAA answers, a DNS answer that
//! changes between lookups, allowlist and method rules, userinfo, schemes,
//! ports. No test here opens a connection.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::net::SocketAddr;
use std::sync::Arc;

use silas_core::{Coded, ErrorCode};
use silas_netguard::resolver::ResolveFuture;
use silas_netguard::{
    GuardError, HostRule, Method, NetworkGuard, NetworkGuardConfig, RangeKind, Resolver,
    ScriptedResolver,
};
use support::ip;

fn config(rules: &[(&str, &[Method])], trusted: &[&str]) -> NetworkGuardConfig {
    NetworkGuardConfig {
        allowlist: rules.iter().map(|(p, m)| HostRule::new(p, m)).collect(),
        trusted_private_cidrs: trusted.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

fn guard(cfg: &NetworkGuardConfig, resolver: Arc<ScriptedResolver>) -> NetworkGuard {
    NetworkGuard::new(cfg, resolver).unwrap()
}

/// A representative address for every blocked range, IPv4 and IPv6.
const BLOCKED: &[(&str, RangeKind)] = &[
    ("0.0.0.0", RangeKind::ThisNetwork),
    ("0.1.2.3", RangeKind::ThisNetwork),
    ("10.0.0.1", RangeKind::Private),
    ("100.64.0.1", RangeKind::SharedCgnat),
    ("100.127.255.254", RangeKind::SharedCgnat),
    ("127.0.0.1", RangeKind::Loopback),
    ("127.53.0.1", RangeKind::Loopback),
    ("169.254.1.1", RangeKind::LinkLocal),
    ("169.254.169.254", RangeKind::CloudMetadata),
    ("169.254.170.2", RangeKind::CloudMetadata),
    ("100.100.100.200", RangeKind::CloudMetadata),
    ("168.63.129.16", RangeKind::CloudMetadata),
    ("172.16.0.1", RangeKind::Private),
    ("172.31.255.254", RangeKind::Private),
    ("192.0.0.8", RangeKind::IetfProtocol),
    ("192.0.2.1", RangeKind::Documentation),
    ("192.168.1.1", RangeKind::Private),
    ("198.18.0.1", RangeKind::Benchmarking),
    ("198.19.1.1", RangeKind::Benchmarking),
    ("198.51.100.7", RangeKind::Documentation),
    ("203.0.113.9", RangeKind::Documentation),
    ("224.0.0.251", RangeKind::Multicast),
    ("239.255.255.250", RangeKind::Multicast),
    ("240.0.0.1", RangeKind::Reserved),
    ("255.255.255.255", RangeKind::Broadcast),
    ("::", RangeKind::Unspecified),
    ("::1", RangeKind::Loopback),
    ("fc00::1", RangeKind::UniqueLocal),
    ("fd00::1", RangeKind::UniqueLocal),
    ("fe80::1", RangeKind::LinkLocal),
    ("fec0::1", RangeKind::SiteLocal),
    ("ff02::1", RangeKind::Multicast),
    ("2001:db8::1", RangeKind::Documentation),
    ("fd00:ec2::254", RangeKind::CloudMetadata),
    ("::ffff:127.0.0.1", RangeKind::Loopback),
    ("::ffff:10.0.0.1", RangeKind::Private),
    ("::ffff:169.254.169.254", RangeKind::CloudMetadata),
    ("::ffff:100.64.0.1", RangeKind::SharedCgnat),
    ("::ffff:192.168.0.1", RangeKind::Private),
    ("::10.0.0.1", RangeKind::Private),
    ("::127.0.0.1", RangeKind::Loopback),
    ("64:ff9b::a00:1", RangeKind::Private),
    ("64:ff9b::169.254.169.254", RangeKind::CloudMetadata),
    ("64:ff9b:1::1", RangeKind::Nat64Local),
    ("2002:c0a8:101::1", RangeKind::Private),
    ("2001::1", RangeKind::Teredo),
    ("100::1", RangeKind::DiscardOnly),
    ("4000::1", RangeKind::NotGlobalUnicast),
];

#[tokio::test]
async fn every_blocked_range_refused_as_dns_answer() {
    let mut resolver = ScriptedResolver::new();
    for (i, (a, _)) in BLOCKED.iter().enumerate() {
        resolver = resolver.with(&format!("h{i}.test"), &[&[ip(a)]]);
    }
    let resolver = Arc::new(resolver);
    let g = guard(&config(&[("*.test", &[])], &[]), resolver.clone());
    for (i, (a, kind)) in BLOCKED.iter().enumerate() {
        let host = format!("h{i}.test");
        let e = g
            .check(Method::Get, &format!("https://{host}/x"))
            .await
            .unwrap_err();
        match &e {
            GuardError::BlockedAddress {
                host: h,
                addr,
                range,
            } => {
                assert_eq!(
                    (h.as_str(), *addr, range.kind),
                    (host.as_str(), ip(a), *kind),
                    "{a}"
                );
            }
            other => panic!("{a}: {other:?}"),
        }
        assert_eq!(e.code(), ErrorCode::EGateBlocked);
        let GuardError::BlockedAddress { range, .. } = &e else {
            unreachable!()
        };
        assert!(
            !e.to_string().replace(range.cidr, "").contains(a),
            "the message names no resolved IP: {e}"
        );
        assert_eq!(resolver.calls(&host), 1);
    }
}

#[tokio::test]
async fn every_blocked_range_refused_as_ip_literal() {
    let resolver = Arc::new(ScriptedResolver::new());
    let rules: Vec<String> = BLOCKED.iter().map(|(a, _)| a.to_string()).collect();
    let cfg = NetworkGuardConfig {
        allowlist: rules.iter().map(|p| HostRule::new(p, &[])).collect(),
        ..Default::default()
    };
    let g = guard(&cfg, resolver.clone());
    for (a, kind) in BLOCKED {
        let host = if a.contains(':') {
            format!("[{a}]")
        } else {
            a.to_string()
        };
        let e = g
            .check(Method::Get, &format!("http://{host}/latest/meta-data"))
            .await
            .unwrap_err();
        match e {
            GuardError::BlockedAddress { addr, range, .. } => {
                assert_eq!((addr, range.kind), (ip(a), *kind), "{a}")
            }
            other => panic!("{a}: {other:?}"),
        }
    }
    assert_eq!(resolver.total_calls(), 0, "IP literals are never resolved");
}

#[tokio::test]
async fn obfuscated_ipv4_literals_are_normalised_then_blocked() {
    let resolver = Arc::new(ScriptedResolver::new());
    let g = guard(
        &config(&[("127.0.0.1", &[]), ("169.254.169.254", &[])], &[]),
        resolver,
    );
    for url in [
        "http://2130706433/",
        "http://0x7f.1/",
        "http://0177.0.0.1/",
        "http://127.1/",
        "http://0x7f000001/",
        "http://2852039166/", // 169.254.169.254
        "http://0xa9.0xfe.0xa9.0xfe/",
    ] {
        let e = g.check(Method::Get, url).await.unwrap_err();
        assert!(
            matches!(e, GuardError::BlockedAddress { range, .. }
                if matches!(range.kind, RangeKind::Loopback | RangeKind::CloudMetadata)),
            "{url}: {e:?}"
        );
    }
}

#[tokio::test]
async fn mixed_a_and_aaaa_answers_any_blocked_refuses_the_host() {
    let pub4 = ip("93.184.215.14");
    let pub6 = ip("2606:2800:21f:cb07:6820:80da:af6b:8b2c");
    let resolver = Arc::new(
        ScriptedResolver::new()
            .with("good.test", &[&[pub4, pub6]])
            .with("ula.test", &[&[pub4, ip("fd00::1")]])
            .with("ll.test", &[&[ip("fe80::1"), pub4]])
            .with("mapped.test", &[&[pub6, ip("::ffff:10.0.0.1")]])
            .with("meta.test", &[&[pub6, pub4, ip("169.254.169.254")]]),
    );
    let g = guard(&config(&[("*.test", &[])], &[]), resolver);
    let t = g.check(Method::Get, "https://good.test/").await.unwrap();
    assert_eq!(t.addr, SocketAddr::new(pub4, 443));
    assert_eq!(
        t.addrs,
        vec![SocketAddr::new(pub4, 443), SocketAddr::new(pub6, 443)]
    );
    assert!(t.exempted.is_empty() && !t.ip_literal);
    for (host, bad, kind) in [
        ("ula.test", "fd00::1", RangeKind::UniqueLocal),
        ("ll.test", "fe80::1", RangeKind::LinkLocal),
        ("mapped.test", "::ffff:10.0.0.1", RangeKind::Private),
        ("meta.test", "169.254.169.254", RangeKind::CloudMetadata),
    ] {
        let e = g
            .check(Method::Get, &format!("https://{host}/"))
            .await
            .unwrap_err();
        match e {
            GuardError::BlockedAddress { addr, range, .. } => {
                assert_eq!((addr, range.kind), (ip(bad), kind), "{host}")
            }
            other => panic!("{host}: {other:?}"),
        }
    }
}

#[tokio::test]
async fn dns_answer_that_changes_between_lookups() {
    // First answer: the trusted test address. Second: a private address.
    let resolver = Arc::new(
        ScriptedResolver::new().with("fetch.test", &[&[ip("127.0.0.1")], &[ip("10.0.0.1")]]),
    );
    let g = guard(
        &config(&[("fetch.test", &[])], &["127.0.0.1/32"]),
        resolver.clone(),
    );
    let t = g
        .check(Method::Get, "http://fetch.test:8080/a")
        .await
        .unwrap();
    assert_eq!(resolver.calls("fetch.test"), 1, "one lookup per check");
    assert_eq!(t.addr, "127.0.0.1:8080".parse().unwrap());
    assert_eq!(t.addrs, vec![t.addr]);
    assert_eq!(t.exempted.len(), 1);
    // The target carries the validated address; a later lookup (what a
    // naive client would do at connect time) gets the rebound answer,
    // which the guard refuses.
    let e = g
        .check(Method::Get, "http://fetch.test:8080/a")
        .await
        .unwrap_err();
    assert!(
        matches!(e, GuardError::BlockedAddress { range, .. } if range.kind == RangeKind::Private)
    );
    assert_eq!(resolver.calls("fetch.test"), 2);
}

#[tokio::test]
async fn empty_allowlist_refuses_everything_without_lookup() {
    let resolver = Arc::new(ScriptedResolver::new().with("example.org", &[&[ip("93.184.215.14")]]));
    let g = guard(&NetworkGuardConfig::default(), resolver.clone());
    for url in [
        "https://example.org/",
        "http://93.184.215.14/",
        "https://docs.rs/",
    ] {
        let e = g.check(Method::Get, url).await.unwrap_err();
        assert!(matches!(e, GuardError::HostNotAllowed(_)), "{url}: {e:?}");
        assert_eq!(e.code(), ErrorCode::EGateBlocked);
    }
    assert_eq!(resolver.total_calls(), 0);
}

#[tokio::test]
async fn allowlist_and_method_rules() {
    let pub4 = ip("93.184.215.14");
    let resolver = Arc::new(
        ScriptedResolver::new()
            .with("www.example.org", &[&[pub4]])
            .with("api.example.org", &[&[pub4]])
            .with("example.org", &[&[pub4]])
            .with("evilexample.org", &[&[pub4]]),
    );
    let g = guard(
        &config(
            &[
                ("*.example.org", &[]),
                ("api.example.org", &[Method::Post, Method::Put]),
            ],
            &[],
        ),
        resolver.clone(),
    );
    assert!(
        g.check(Method::Get, "https://www.example.org/")
            .await
            .is_ok()
    );
    assert!(g.check(Method::Head, "https://example.org/").await.is_ok());
    assert!(
        g.check(Method::Post, "https://api.example.org/v1")
            .await
            .is_ok()
    );
    assert!(
        g.check(Method::Put, "https://api.example.org/v1")
            .await
            .is_ok()
    );
    let e = g
        .check(Method::Post, "https://www.example.org/")
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            GuardError::MethodNotAllowed {
                method: Method::Post,
                ..
            }
        ),
        "{e:?}"
    );
    assert_eq!(e.code(), ErrorCode::EGateBlocked);
    let e = g
        .check(Method::Delete, "https://api.example.org/v1")
        .await
        .unwrap_err();
    assert!(matches!(e, GuardError::MethodNotAllowed { .. }));
    let e = g
        .check(Method::Get, "https://evilexample.org/")
        .await
        .unwrap_err();
    assert!(matches!(e, GuardError::HostNotAllowed(h) if h == "evilexample.org"));
    // Refusals before DNS: the refused hosts were never looked up.
    assert_eq!(resolver.calls("evilexample.org"), 0);
    assert_eq!(resolver.calls("www.example.org"), 1);
    // Case and one trailing dot are normalised; the fragment is dropped.
    let t = g
        .check(Method::Get, "HTTPS://WWW.Example.ORG./p#frag")
        .await
        .unwrap();
    assert_eq!(t.host, "www.example.org");
    assert_eq!(t.url.fragment(), None);
}

#[tokio::test]
async fn userinfo_schemes_and_ports_refused_before_lookup() {
    let resolver = Arc::new(ScriptedResolver::new().with("x.test", &[&[ip("93.184.215.14")]]));
    let cfg = NetworkGuardConfig {
        extra_blocked_ports: vec![6379],
        ..config(&[("x.test", &[])], &[])
    };
    let g = guard(&cfg, resolver.clone());
    type Expect = fn(&GuardError) -> bool;
    let cases: &[(&str, Expect)] = &[
        ("https://user:pass@x.test/", |e| {
            matches!(e, GuardError::UserInfo)
        }),
        ("https://user@x.test/", |e| {
            matches!(e, GuardError::UserInfo)
        }),
        ("https://:pass@x.test/", |e| {
            matches!(e, GuardError::UserInfo)
        }),
        ("ftp://x.test/", |e| {
            matches!(e, GuardError::UnsupportedScheme(_))
        }),
        ("file:///etc/passwd", |e| {
            matches!(e, GuardError::UnsupportedScheme(_))
        }),
        ("gopher://x.test:70/", |e| {
            matches!(e, GuardError::UnsupportedScheme(_))
        }),
        ("http://x.test:22/", |e| {
            matches!(e, GuardError::BlockedPort(22))
        }),
        ("https://x.test:23/", |e| {
            matches!(e, GuardError::BlockedPort(23))
        }),
        ("http://x.test:25/", |e| {
            matches!(e, GuardError::BlockedPort(25))
        }),
        ("http://x.test:3389/", |e| {
            matches!(e, GuardError::BlockedPort(3389))
        }),
        ("http://x.test:6379/", |e| {
            matches!(e, GuardError::BlockedPort(6379))
        }),
    ];
    for (url, expect) in cases {
        let e = g.check(Method::Get, url).await.unwrap_err();
        assert!(expect(&e), "{url}: {e:?}");
        assert_eq!(e.code(), ErrorCode::EGateBlocked, "{url}");
    }
    for url in ["not a url", "http://", "https://x.test:99999/"] {
        let e = g.check(Method::Get, url).await.unwrap_err();
        assert_eq!(e.code(), ErrorCode::ESandboxFailed, "{url}: {e:?}");
    }
    assert_eq!(resolver.total_calls(), 0);
    assert!(g.check(Method::Get, "https://x.test:8443/").await.is_ok());
}

#[tokio::test]
async fn trusted_cidrs_exempt_private_but_never_metadata() {
    let resolver = Arc::new(
        ScriptedResolver::new()
            .with("nas.test", &[&[ip("192.168.1.20")]])
            .with("other.test", &[&[ip("192.168.2.20")]])
            .with("meta.test", &[&[ip("169.254.169.254")]]),
    );
    let g = guard(
        &config(
            &[("*.test", &[]), ("169.254.169.254", &[])],
            &["192.168.1.0/24", "169.254.0.0/16"],
        ),
        resolver,
    );
    let t = g.check(Method::Get, "http://nas.test/").await.unwrap();
    assert_eq!(t.exempted[0].0, ip("192.168.1.20"));
    assert_eq!(t.exempted[0].1.kind, RangeKind::Private);
    assert!(g.check(Method::Get, "http://other.test/").await.is_err());
    for url in [
        "http://meta.test/",
        "http://169.254.169.254/latest/meta-data",
    ] {
        let e = g.check(Method::Get, url).await.unwrap_err();
        assert!(
            matches!(e, GuardError::BlockedAddress { range, .. } if range.kind == RangeKind::CloudMetadata),
            "{url}: {e:?}"
        );
    }
}

struct NeverResolves;
impl Resolver for NeverResolves {
    fn resolve<'a>(&'a self, _host: &'a str) -> ResolveFuture<'a> {
        Box::pin(std::future::pending())
    }
}

#[tokio::test]
async fn resolver_failures() {
    let resolver = Arc::new(
        ScriptedResolver::new()
            .failing("gone.test", "NXDOMAIN")
            .with("empty.test", &[&[]]),
    );
    let g = guard(&config(&[("*.test", &[])], &[]), resolver);
    let e = g
        .check(Method::Get, "https://gone.test/")
        .await
        .unwrap_err();
    assert!(matches!(e, GuardError::Resolve { .. }), "{e:?}");
    assert_eq!(e.code(), ErrorCode::ESandboxFailed);
    let e = g
        .check(Method::Get, "https://empty.test/")
        .await
        .unwrap_err();
    assert!(matches!(e, GuardError::NoAddresses(_)), "{e:?}");

    let cfg = NetworkGuardConfig {
        resolve_timeout_seconds: 1,
        ..config(&[("*.test", &[])], &[])
    };
    let g = NetworkGuard::new(&cfg, Arc::new(NeverResolves)).unwrap();
    let e = g
        .check(Method::Get, "https://slow.test/")
        .await
        .unwrap_err();
    assert!(matches!(e, GuardError::ResolveTimeout(_)), "{e:?}");
    assert_eq!(e.code(), ErrorCode::ESandboxTimeout);
}

#[test]
fn invalid_config_is_refused() {
    let e = NetworkGuard::new(
        &config(&[("*.test", &[])], &["not-a-cidr"]),
        Arc::new(ScriptedResolver::new()),
    )
    .unwrap_err();
    assert_eq!(e.code(), ErrorCode::ECfgInvalid);
}
