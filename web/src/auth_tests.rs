use super::*;

/// Every audit entry `OwnerAuth` writes, in order.
struct Rec(Mutex<Vec<(String, serde_json::Value)>>);

impl AuthAudit for Rec {
    fn record(&self, e: &str, d: serde_json::Value) {
        self.0.lock().unwrap().push((e.into(), d));
    }
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[test]
fn pairing_code_is_single_use_and_expires() {
    let t0 = Instant::now();
    let mut codes = PairingCodes::default();
    codes.insert("code-a", None, t0);
    codes.insert("code-b", None, t0);
    assert_eq!(codes.redeem("wrong", t0), Err(PairRefusal::Unknown));
    assert_eq!(
        codes.redeem("code-a", t0 + Duration::from_secs(599)),
        Ok(None)
    );
    assert_eq!(codes.redeem("code-a", t0), Err(PairRefusal::Unknown));
    assert_eq!(
        codes.redeem("code-b", t0 + PAIRING_CODE_TTL),
        Err(PairRefusal::Expired)
    );
    // An expired code is gone, not merely refused.
    assert_eq!(codes.redeem("code-b", t0), Err(PairRefusal::Unknown));
}

#[test]
fn pairing_codes_are_bounded() {
    let t0 = Instant::now();
    let mut codes = PairingCodes::default();
    for i in 0..(MAX_PAIRING_CODES + 5) {
        codes.insert(&format!("c{i}"), None, t0 + Duration::from_millis(i as u64));
    }
    assert_eq!(codes.codes.len(), MAX_PAIRING_CODES);
    assert_eq!(codes.redeem("c0", t0), Err(PairRefusal::Unknown));
    let last = format!("c{}", MAX_PAIRING_CODES + 4);
    assert_eq!(codes.redeem(&last, t0), Ok(None));
}

#[test]
fn device_labels_are_printable() {
    assert_eq!(printable_label("Kai's phone"), "Kai's phone");
    assert_eq!(
        printable_label("evil\u{1b}[31mRED\nline2\u{202e}txt"),
        "evil [31mRED line2 txt"
    );
    assert_eq!(printable_label("\u{7}\t\n"), "device");
    assert_eq!(printable_label(&"ü".repeat(100)).chars().count(), 64);
}

#[test]
fn throttled_refusals_are_audited_once_per_window_with_the_count_between() {
    let t0 = Instant::now();
    let mut th = Throttle::default();
    let a = ip("10.0.0.1");
    assert_eq!(th.refused(a, t0), Some(0), "the first is audited");
    for i in 1..=99u64 {
        assert_eq!(th.refused(a, t0 + Duration::from_millis(i * 100)), None);
    }
    // Another address has its own first entry.
    assert_eq!(th.refused(ip("10.0.0.2"), t0), Some(0));
    // A window after the last entry: one more, carrying the 99 between.
    assert_eq!(th.refused(a, t0 + FAILED_AUTH_WINDOW), Some(99));
    assert_eq!(th.refused(a, t0 + FAILED_AUTH_WINDOW), None);
    // Once the lock-out has lifted, the next one is audited at once.
    assert!(th.allowed(a, t0 + FAILED_AUTH_WINDOW));
    assert_eq!(
        th.refused(a, t0 + FAILED_AUTH_WINDOW + Duration::from_secs(1)),
        Some(0)
    );
}

#[test]
fn throttle_refuses_the_51st_attempt_per_address_within_a_minute() {
    let t0 = Instant::now();
    let mut th = Throttle::default();
    let a = ip("10.0.0.1");
    for i in 0..FAILED_AUTH_LIMIT {
        assert!(th.allowed(a, t0), "attempt {}", i + 1);
        th.record_failure(a, t0 + Duration::from_millis(i as u64));
    }
    assert!(!th.allowed(a, t0 + Duration::from_secs(1)));
    // Another address is unaffected.
    assert!(th.allowed(ip("10.0.0.2"), t0));
    // The window slides: a minute after the failures, attempts resume.
    assert!(th.allowed(a, t0 + FAILED_AUTH_WINDOW + Duration::from_millis(60)));
}

/// One IPv6 /64 is one address for the throttle: a host rotating through
/// its prefix gets 50 guesses a minute in all, not per address.
#[test]
fn an_ipv6_prefix_is_throttled_as_one_address() {
    let auth = OwnerAuth::ephemeral(None);
    for i in 0..FAILED_AUTH_LIMIT {
        let a = ip(&format!("2001:db8:1:2::{:x}", i + 1));
        assert_eq!(
            auth.check(Some(a), Some("nope"), "ws"),
            AuthOutcome::Refused
        );
    }
    assert_eq!(
        auth.check(Some(ip("2001:db8:1:2:ffff::9")), Some("nope"), "ws"),
        AuthOutcome::Throttled
    );
    // Another /64, and an IPv4-mapped address as its IPv4 one.
    assert_eq!(
        auth.check(Some(ip("2001:db8:1:3::1")), Some("nope"), "ws"),
        AuthOutcome::Refused
    );
    for _ in 0..FAILED_AUTH_LIMIT {
        auth.check(Some(ip("192.0.2.7")), Some("nope"), "ws");
    }
    assert_eq!(
        auth.check(Some(ip("::ffff:192.0.2.7")), Some("nope"), "ws"),
        AuthOutcome::Throttled
    );
}

#[test]
fn check_throttles_before_comparing_and_audits_failures() {
    let rec = Arc::new(Rec(Mutex::new(Vec::new())));
    let auth = OwnerAuth::new(None, Arc::new(EphemeralDevices), rec.clone()).unwrap();
    let (dev, token) = auth.create_device("laptop").unwrap();
    let bad = Some(ip("10.0.0.9"));
    for _ in 0..FAILED_AUTH_LIMIT {
        assert_eq!(auth.check(bad, Some("nope"), "ws"), AuthOutcome::Refused);
    }
    // A paired device's token still passes: 256 random bits need no
    // throttle, and refusing it let the failures lock the owner out.
    assert_eq!(
        auth.check(bad, Some(&token), "ws"),
        AuthOutcome::Owner(Credential::Device(dev.device_id.clone()))
    );
    // A client hammering on while locked out adds no entry per request.
    for _ in 0..500 {
        assert_eq!(auth.check(bad, Some("nope"), "ws"), AuthOutcome::Throttled);
    }
    assert_eq!(
        auth.check(Some(ip("10.0.0.10")), Some(&token), "ws"),
        AuthOutcome::Owner(Credential::Device(dev.device_id.clone()))
    );
    let log = rec.0.lock().unwrap();
    let failed = log.iter().filter(|(e, _)| e == "web.auth_failed").count();
    assert_eq!(failed, FAILED_AUTH_LIMIT);
    let throttled: Vec<_> = log
        .iter()
        .filter(|(e, _)| e == "web.auth_throttled")
        .collect();
    assert_eq!(throttled.len(), 1, "{throttled:?}");
    assert_eq!(throttled[0].1["refused_since_last_entry"], 0);
    for (_, d) in log.iter() {
        assert!(!d.to_string().contains(&token), "token in audit: {d}");
    }
}

#[test]
fn a_locked_out_address_keeps_device_credentials_not_the_config_token() {
    let auth = OwnerAuth::ephemeral(Some("owner-chosen".into()));
    let (dev, token) = auth.create_device("cli").unwrap();
    let shared = Some(ip("127.0.0.1"));
    for _ in 0..FAILED_AUTH_LIMIT {
        assert_eq!(
            auth.check(shared, Some("guess"), "ws"),
            AuthOutcome::Refused
        );
    }
    assert_eq!(
        auth.check(shared, Some(&token), "ws"),
        AuthOutcome::Owner(Credential::Device(dev.device_id.clone()))
    );
    // The configured token may be weak: guesses at it stay throttled,
    // the right one included, and so do wrong and missing tokens.
    for t in [Some("owner-chosen"), Some("guess"), Some(""), None] {
        assert_eq!(auth.check(shared, t, "ws"), AuthOutcome::Throttled, "{t:?}");
    }
    // A revoked device gets no way past the lock-out.
    assert_eq!(auth.revoke(&dev.device_id).unwrap(), Revocation::Revoked);
    assert_eq!(
        auth.check(shared, Some(&token), "ws"),
        AuthOutcome::Throttled
    );
}

#[test]
fn revoked_device_is_refused_and_announced() {
    let auth = OwnerAuth::ephemeral(None);
    let (dev, token) = auth.create_device("phone").unwrap();
    let mut rx = auth.revocations();
    assert!(matches!(
        auth.check(None, Some(&token), "ws"),
        AuthOutcome::Owner(_)
    ));
    assert_eq!(auth.revoke(&dev.device_id).unwrap(), Revocation::Revoked);
    assert_eq!(rx.try_recv().unwrap(), dev.device_id);
    assert_eq!(auth.check(None, Some(&token), "ws"), AuthOutcome::Refused);
    // Again: nothing changes, nothing is announced a second time.
    assert_eq!(
        auth.revoke(&dev.device_id).unwrap(),
        Revocation::AlreadyRevoked
    );
    assert!(rx.try_recv().is_err());
    assert_eq!(
        auth.revoke("dev-unknown").unwrap(),
        Revocation::NoSuchDevice
    );
    // Only the hash is kept.
    assert!(auth.list().iter().all(|d| d.token_sha256 != token));
}

#[test]
fn unauthenticated_slots_are_capped_per_address_and_in_all_and_released() {
    let auth = OwnerAuth::ephemeral(None);
    let one = Some(ip("10.0.0.1"));
    let mine: Vec<_> = (0..MAX_UNAUTHENTICATED_PER_ADDRESS)
        .map(|_| auth.unauthenticated_slot(one).unwrap())
        .collect();
    assert_eq!(
        auth.unauthenticated_slot(one).err(),
        Some(CapRefusal::PerAddress)
    );
    let others: Vec<_> = (MAX_UNAUTHENTICATED_PER_ADDRESS..MAX_UNAUTHENTICATED)
        .map(|i| {
            let from = ip(&format!("10.1.{}.1", i / MAX_UNAUTHENTICATED_PER_ADDRESS));
            auth.unauthenticated_slot(Some(from)).unwrap()
        })
        .collect();
    assert_eq!(auth.unauthenticated_open(), MAX_UNAUTHENTICATED);
    assert_eq!(
        auth.unauthenticated_slot(Some(ip("10.2.0.1"))).err(),
        Some(CapRefusal::Total)
    );
    drop(mine);
    assert!(auth.unauthenticated_slot(one).is_ok());
    drop(others);
    assert_eq!(auth.unauthenticated_open(), 0);
}

/// A pairing attempt from a locked-out address is refused before its code
/// is looked at: the code stays good for the owner elsewhere.
#[test]
fn a_throttled_pairing_attempt_does_not_use_up_its_code() {
    let auth = OwnerAuth::ephemeral(None);
    let code = auth.issue_pairing_code(None).unwrap();
    let locked = Some(ip("10.0.0.9"));
    for _ in 0..FAILED_AUTH_LIMIT {
        auth.check(locked, Some("guess"), "ws");
    }
    assert!(matches!(
        auth.redeem(locked, &code, "phone"),
        Err(RedeemError::Throttled)
    ));
    assert!(auth.redeem(Some(ip("10.0.0.10")), &code, "phone").is_ok());
}

/// Red-team F4/F5: a request without any credential is no guess. Browsers
/// send one from any page that embeds the URL (`<img src=…/devices>`), so
/// counting it let a web page lock the owner's address out of pairing and
/// `auth_token` sign-in; auditing it let anyone fill the owner's log. And
/// every loopback address is one host: rotating through 127/8 is one
/// address's 50 guesses.
#[test]
fn no_credential_is_neither_counted_nor_audited_and_loopback_is_one_address() {
    let rec = Arc::new(Rec(Mutex::new(Vec::new())));
    let auth = OwnerAuth::new(
        Some("owner-chosen".into()),
        Arc::new(EphemeralDevices),
        rec.clone(),
    )
    .unwrap();
    let home = Some(ip("127.0.0.1"));
    for _ in 0..(FAILED_AUTH_LIMIT * 4) {
        assert_eq!(auth.check(home, None, "http"), AuthOutcome::Refused);
        assert_eq!(auth.check(home, Some(""), "http"), AuthOutcome::Refused);
    }
    assert!(
        rec.0.lock().unwrap().is_empty(),
        "{:?}",
        rec.0.lock().unwrap()
    );
    assert_eq!(
        auth.check(home, Some("owner-chosen"), "ws"),
        AuthOutcome::Owner(Credential::ConfigToken)
    );
    for i in 0..FAILED_AUTH_LIMIT {
        let from = ip(&format!("127.9.{}.{}", i / 200, i % 200 + 1));
        assert_eq!(
            auth.check(Some(from), Some("guess"), "ws"),
            AuthOutcome::Refused
        );
    }
    assert_eq!(
        auth.check(Some(ip("127.0.0.2")), Some("owner-chosen"), "ws"),
        AuthOutcome::Throttled
    );
    let failed = rec
        .0
        .lock()
        .unwrap()
        .iter()
        .filter(|(e, _)| e == "web.auth_failed")
        .count();
    assert_eq!(failed, FAILED_AUTH_LIMIT);
}

/// Red-team F3: a stolen device's holder asked for pairing codes, was
/// revoked, and paired a fresh device with one. A revoked device's codes go
/// with it, and the audit names who asked for a code and who paired.
#[test]
fn a_revoked_devices_pairing_codes_go_with_it() {
    let rec = Arc::new(Rec(Mutex::new(Vec::new())));
    let auth = OwnerAuth::new(None, Arc::new(EphemeralDevices), rec.clone()).unwrap();
    let (stolen, _) = auth.create_device("laptop").unwrap();
    let (kept, _) = auth.create_device("phone").unwrap();
    let by = |d: &OwnerDevice| Credential::Device(d.device_id.clone());
    let thiefs = auth.issue_pairing_code(Some(&by(&stolen))).unwrap();
    let owners = auth.issue_pairing_code(Some(&by(&kept))).unwrap();
    let first_start = auth.issue_pairing_code(None).unwrap();
    assert_eq!(auth.revoke(&stolen.device_id).unwrap(), Revocation::Revoked);
    let from = Some(ip("10.0.0.3"));
    assert!(matches!(
        auth.redeem(from, &thiefs, "browser"),
        Err(RedeemError::Refused(PairRefusal::Unknown))
    ));
    let (paired, _) = auth.redeem(from, &owners, "tablet").unwrap();
    assert!(auth.redeem(from, &first_start, "desktop").is_ok());
    let log = rec.0.lock().unwrap();
    let issued: Vec<_> = log
        .iter()
        .filter(|(e, _)| e == "web.pairing_code_issued")
        .map(|(_, d)| d["issued_by"].clone())
        .collect();
    assert_eq!(
        issued,
        [
            serde_json::json!(stolen.device_id),
            serde_json::json!(kept.device_id),
            serde_json::Value::Null
        ]
    );
    assert!(log.iter().any(|(e, d)| e == "web.device_revoked"
        && d["device_id"] == stolen.device_id.as_str()
        && d["pairing_codes_dropped"] == 1));
    assert!(log.iter().any(|(e, d)| e == "web.device_added"
        && d["device_id"] == paired.device_id.as_str()
        && d["paired_by"] == kept.device_id.as_str()));
}
