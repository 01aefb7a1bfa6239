//! Each verdict of `silas doctor` from its inputs.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use super::checks::*;

fn fact(path: &str, mode: Option<u32>) -> PathFact {
    PathFact {
        path: PathBuf::from(path),
        mode,
    }
}

#[test]
fn config_lists_problems_or_passes() {
    assert_eq!(config("x.yaml", &[]).status, Status::Pass);
    let c = config("x.yaml", &["a: bad".into(), "b: worse".into()]);
    assert_eq!(c.status, Status::Fail);
    assert!(c.line().contains("a: bad; b: worse"), "{}", c.line());
    assert!(c.line().contains("silas config check"));
}

#[test]
fn modes_wider_than_allowed_fail_with_the_chmod_that_narrows_them() {
    let c = mode(
        "keys-dir",
        &fact("/d/keys", Some(0o40755)),
        0o700,
        WhenAbsent::NeedsInit,
    );
    assert_eq!(c.status, Status::Fail);
    assert_eq!(c.fix.as_deref(), Some("chmod 700 /d/keys"));
    assert!(
        c.line().starts_with("FAIL keys-dir: /d/keys is 0755"),
        "{}",
        c.line()
    );

    let c = mode(
        "key-file",
        &fact("/d/k", Some(0o644)),
        0o600,
        WhenAbsent::NeedsInit,
    );
    assert_eq!(c.fix.as_deref(), Some("chmod 600 /d/k"));
    // Narrower than the maximum is fine; so are the data dir's traverse bits.
    for (m, max) in [
        (0o400, 0o600),
        (0o700, 0o711),
        (0o710, 0o711),
        (0o711, 0o711),
    ] {
        let c = mode("x", &fact("/d", Some(m)), max, WhenAbsent::NeedsInit);
        assert_eq!(c.status, Status::Pass, "{m:o}");
    }
    let c = mode(
        "data-dir",
        &fact("/d", Some(0o755)),
        0o711,
        WhenAbsent::NeedsInit,
    );
    assert_eq!(c.fix.as_deref(), Some("chmod 711 /d"));
}

/// A mode that shuts Silas itself out (0000, a file without write) fails
/// with the chmod that gives it back, not a pass for being private.
#[test]
fn a_mode_closed_to_its_owner_fails() {
    let c = mode(
        "data-dir",
        &fact("/d", Some(0o000)),
        0o711,
        WhenAbsent::NeedsInit,
    );
    assert_eq!(
        (c.status, c.fix.as_deref()),
        (Status::Fail, Some("chmod 700 /d"))
    );
    assert!(c.detail.contains("cannot use it"), "{}", c.detail);
    let c = mode(
        "key-file",
        &fact("/d/k", Some(0o200)),
        0o600,
        WhenAbsent::NeedsInit,
    );
    assert_eq!(
        (c.status, c.fix.as_deref()),
        (Status::Fail, Some("chmod 600 /d/k"))
    );
    let c = mode(
        "data-dir",
        &fact("/d", Some(0o711)),
        0o711,
        WhenAbsent::NeedsInit,
    );
    assert_eq!(c.status, Status::Pass);
}

#[test]
fn missing_paths_need_init_unless_created_on_first_use() {
    let c = mode(
        "store-file",
        &fact("/d/s", None),
        0o600,
        WhenAbsent::NeedsInit,
    );
    assert_eq!(
        (c.status, c.fix.as_deref()),
        (Status::Fail, Some("silas init"))
    );
    let c = mode(
        "secrets-dir",
        &fact("/d/secrets", None),
        0o700,
        WhenAbsent::Fine,
    );
    assert_eq!(c.status, Status::Pass);
}

fn anc(path: &str, mode: u32, uid: u32, gid: u32) -> Ancestor {
    Ancestor {
        path: path.into(),
        mode,
        uid,
        gid,
    }
}

#[test]
fn traversal_uses_owner_group_or_other_bits() {
    let nobody = (65534, 65534);
    assert!(can_traverse(&anc("/", 0o755, 0, 0), nobody.0, nobody.1));
    assert!(!can_traverse(&anc("/t", 0o700, 0, 0), nobody.0, nobody.1));
    // Group bit for nobody's group, owner bit for nobody; other bit ignored then.
    assert!(can_traverse(
        &anc("/g", 0o710, 0, 65534),
        nobody.0,
        nobody.1
    ));
    assert!(!can_traverse(
        &anc("/g", 0o701, 0, 65534),
        nobody.0,
        nobody.1
    ));
    assert!(!can_traverse(
        &anc("/o", 0o011, 65534, 0),
        nobody.0,
        nobody.1
    ));
}

#[test]
fn a_root_daemon_needs_every_ancestor_traversable_by_nobody() {
    let sandbox = Path::new("/srv/t/data/sandbox");
    let chain = vec![
        anc("/", 0o755, 0, 0),
        anc("/srv", 0o755, 0, 0),
        anc("/srv/t", 0o700, 0, 0),
        anc("/srv/t/data", 0o711, 0, 0),
        anc("/srv/t/data/sandbox", 0o711, 0, 0),
    ];
    let c = sandbox_reachable(true, sandbox, &chain, 65534, 65534);
    assert_eq!(c.status, Status::Fail);
    assert_eq!(c.fix.as_deref(), Some("chmod o+x /srv/t"));
    assert!(c.detail.contains("/srv/t (0700"), "{}", c.detail);
    // Not root: the sandbox is this user; nothing to traverse.
    assert_eq!(
        sandbox_reachable(false, sandbox, &chain, 65534, 65534).status,
        Status::Pass
    );
    let mut ok = chain.clone();
    ok[2].mode = 0o711;
    assert_eq!(
        sandbox_reachable(true, sandbox, &ok, 65534, 65534).status,
        Status::Pass
    );
}

#[test]
fn landlock_levels() {
    assert_eq!(landlock(0).status, Status::Fail);
    assert_eq!(landlock(2).status, Status::Fail);
    assert_eq!(landlock(3).status, Status::Warn);
    assert_eq!(landlock(5).status, Status::Warn);
    assert_eq!(landlock(6).status, Status::Pass);
    assert_eq!(landlock(9).status, Status::Pass);
}

const CONFINED: silas_sandbox::Confinement = silas_sandbox::Confinement {
    isolation: silas_sandbox::Isolation::UserNamespace,
    landlock_abi: 6,
    pid_namespace: true,
    private_proc: false,
};

#[test]
fn sandbox_trial_verdicts() {
    let key = Path::new("/d/keys/owner.key");
    let ran = sandbox_trial(
        &Trial::Ran {
            exit_code: Some(0),
            secret_read: false,
            confinement: CONFINED,
        },
        key,
    );
    assert_eq!(
        ran.iter().map(|c| c.status).collect::<Vec<_>>(),
        vec![Status::Pass, Status::Pass]
    );
    assert!(ran[0].detail.contains("user + empty network namespace"));
    assert!(ran[0].detail.contains("landlock ABI 6"));
    let leaked = sandbox_trial(
        &Trial::Ran {
            exit_code: Some(0),
            secret_read: true,
            confinement: CONFINED,
        },
        key,
    );
    assert_eq!(leaked[1].status, Status::Fail);
    assert!(leaked[1].detail.contains("could read /d/keys/owner.key"));
    let missing = sandbox_trial(
        &Trial::Unavailable("E_SANDBOX_UNAVAILABLE: network namespace: EPERM".into()),
        key,
    );
    assert_eq!(missing.len(), 1);
    assert_eq!(missing[0].status, Status::Fail);
    assert!(missing[0].detail.contains("network namespace"));
    assert_eq!(
        sandbox_trial(&Trial::NotInitialised, key)[0].fix.as_deref(),
        Some("silas init")
    );
}

#[test]
fn port_held_by_our_daemon_passes_for_doctor_but_not_for_start() {
    let a = "127.0.0.1:8420";
    assert_eq!(port(a, &PortState::Free, true).status, Status::Pass);
    assert_eq!(port(a, &PortState::Silas, false).status, Status::Pass);
    assert_eq!(port(a, &PortState::Silas, true).status, Status::Fail);
    let other = port(a, &PortState::Other("no HTTP answer".into()), false);
    assert_eq!(other.status, Status::Fail);
    assert!(other.line().contains(a) && other.line().contains("channels.web.port"));
}

#[test]
fn model_verdicts() {
    let offline = model(&Model::Offline {
        reason: "no OPENROUTER_API_KEY set".into(),
    });
    assert_eq!(offline.status, Status::Warn);
    assert!(offline.detail.contains("offline"));
    assert_eq!(
        model(&Model::Listed {
            base: "http://x/v1".into(),
            models: 3,
            missing: None,
        })
        .status,
        Status::Pass
    );
    let typo = model(&Model::Listed {
        base: "http://x/v1".into(),
        models: 1,
        missing: Some("qwen-typo".into()),
    });
    assert_eq!(typo.status, Status::Warn);
    assert!(
        typo.detail.contains("\"qwen-typo\" is not among"),
        "{}",
        typo.detail
    );
    for m in [
        Model::Refused {
            base: "b".into(),
            status: 401,
        },
        Model::NotOpenAi {
            base: "b".into(),
            detail: "d".into(),
        },
        Model::Unreachable {
            base: "b".into(),
            error: "refused".into(),
        },
    ] {
        assert_eq!(model(&m).status, Status::Fail, "{m:?}");
    }
    let busy = model(&Model::Silent {
        base: "http://127.0.0.1:8080/v1".into(),
        seconds: 2,
    });
    assert_eq!(busy.status, Status::Warn);
    assert!(busy.detail.contains("no answer within 2 s"), "{busy:?}");
}

#[test]
fn credential_and_store_verdicts() {
    let ok = owner_credential(Ok("file".into()), Some(Path::new("/d/cli.token")));
    assert!(ok.iter().all(|c| c.status == Status::Pass));
    let bad = owner_credential(Err(("no key".into(), "silas init".into())), None);
    assert_eq!(bad[0].status, Status::Fail);
    assert_eq!(bad[1].status, Status::Warn);
    // The key error's own fix, and only it: a group-readable key file said
    // "run chmod 600" in its text and "silas init" as the fix.
    let err = silas_keys::KeyError::InsecurePermissions {
        path: "/d/keys/owner.key".into(),
        mode: 0o644,
    };
    let bad = owner_credential(Err((err.to_string(), err.fix())), None);
    assert_eq!(bad[0].fix.as_deref(), Some("chmod 600 /d/keys/owner.key"));

    assert_eq!(store(&StoreState::Opens, false).status, Status::Pass);
    assert_eq!(store(&StoreState::InUse, true).status, Status::Pass);
    assert!(
        store(&StoreState::InUse, true)
            .detail
            .contains("running Silas daemon")
    );
    assert_eq!(store(&StoreState::InUse, false).status, Status::Fail);
    assert_eq!(store(&StoreState::Absent, false).status, Status::Fail);
}

#[test]
fn clock_before_a_known_time_fails() {
    use chrono::TimeZone;
    let built = chrono::Utc.with_ymd_and_hms(2026, 1, 10, 0, 0, 0).unwrap();
    let later = chrono::Utc.with_ymd_and_hms(2026, 2, 1, 0, 0, 0).unwrap();
    let early = chrono::Utc.with_ymd_and_hms(2020, 1, 1, 0, 0, 0).unwrap();
    assert_eq!(clock(later, &[("the build", built)]).status, Status::Pass);
    let c = clock(early, &[("the build", built)]);
    assert_eq!(c.status, Status::Fail);
    assert!(c.detail.contains("before the build"));
    // A few seconds of skew against the last audit entry is not a failure.
    let skew = built - chrono::Duration::seconds(30);
    assert_eq!(clock(skew, &[("audit", built)]).status, Status::Pass);
}

#[test]
fn a_tz_silas_cannot_read_is_a_warning_naming_the_zone_used() {
    let ok = timezone("local", "Europe/Vienna", None);
    assert_eq!(ok.status, Status::Pass);
    assert_eq!(
        ok.detail,
        "cron times are in Europe/Vienna (scheduler.timezone: local)"
    );
    let unread = timezone("local", "UTC", Some("CET-1CEST"));
    assert_eq!(unread.status, Status::Warn);
    assert!(
        unread.detail.contains("TZ=\"CET-1CEST\""),
        "{}",
        unread.detail
    );
    assert!(unread.detail.ends_with("cron times are in UTC instead"));
    assert!(
        unread.line().contains("scheduler.timezone"),
        "{}",
        unread.line()
    );
}

#[test]
fn any_fail_sets_the_exit_code() {
    let pass = Check::pass("a", "ok");
    let warn = Check::warn("b", "hm", "do x");
    assert!(!any_failed(&[pass.clone(), warn.clone()]));
    assert!(any_failed(&[pass, warn, Check::fail("c", "no", "fix")]));
}

#[test]
fn telegram_verdicts_name_the_fix_and_never_the_token() {
    let ok = telegram(&Telegram::Answered {
        api: "http://127.0.0.1:1".into(),
        bot: "silas_bot".into(),
    });
    assert_eq!(ok.status, Status::Pass);
    assert!(ok.line().contains("@silas_bot"), "{}", ok.line());
    let bad = telegram(&Telegram::Rejected {
        api: "https://api.telegram.org".into(),
        status: 401,
    });
    assert_eq!(bad.status, Status::Fail);
    assert!(
        bad.line().contains("SILAS_TELEGRAM_TOKEN"),
        "{}",
        bad.line()
    );
    let down = telegram(&Telegram::Unreachable {
        api: "https://api.telegram.org".into(),
        error: "connection refused".into(),
    });
    assert_eq!(down.status, Status::Fail);
    assert!(down.line().contains("api_url"));
    assert_eq!(
        telegram(&Telegram::StoredToken { api: "x".into() }).status,
        Status::Warn
    );
}

#[test]
fn open_files_are_raised_to_the_hard_limit_and_warned_when_it_is_low() {
    assert_eq!(open_files_target(1024, Some(1_048_576)), 65_536);
    assert_eq!(open_files_target(1024, Some(4096)), 4096);
    assert_eq!(open_files_target(1024, None), 65_536);
    assert_eq!(
        open_files_target(200_000, Some(1_048_576)),
        200_000,
        "never lowered"
    );
    let c = open_files(1024, Some(524_288));
    assert_eq!(c.status, Status::Pass);
    assert!(
        c.line().contains("raises the soft limit to 65536"),
        "{}",
        c.line()
    );
    let c = open_files(1024, Some(4096));
    assert_eq!(c.status, Status::Warn);
    assert!(c.line().contains("LimitNOFILE"), "{}", c.line());
}

#[test]
fn another_user_is_warned_that_unreadable_reads_as_missing() {
    let d = Path::new("/srv/silas/data");
    let other = user(d, Some(998), 1000);
    assert_eq!(other.status, Status::Warn);
    assert!(
        other.line().contains("belongs to uid 998"),
        "{}",
        other.line()
    );
    assert!(other.line().contains("sudo -u '#998'"), "{}", other.line());
    assert_eq!(user(d, Some(1000), 1000).status, Status::Pass);
    assert_eq!(user(d, None, 1000).status, Status::Pass);
}

#[test]
fn a_nearly_full_disk_warns_and_a_full_one_fails() {
    let d = Path::new("/d");
    assert_eq!(disk(d, Some(10 << 30)).status, Status::Pass);
    assert_eq!(disk(d, Some(300 << 20)).status, Status::Warn);
    let full = disk(d, Some(1 << 20));
    assert_eq!(full.status, Status::Fail);
    assert!(full.line().contains("1 MiB free for /d"), "{}", full.line());
    assert_eq!(disk(d, None).status, Status::Pass);
}
