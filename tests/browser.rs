//! The PWA in a real browser against the real daemon: `silas start` on port 0
//! with no API key (the labelled offline responder), then Debian's headless
//! Chromium, driven by playwright-core (`tests/browser/flow.mjs`), opens the
//! pairing link the daemon printed (the code leaves the address bar and
//! becomes a stored device token) at 375×812, walks the first-run onboarding (which must label the
//! offline model), waits for "connected", sends "create a file notes.txt
//! containing hello", approves the plan card on the Review surface on its
//! risk ladder (confirm chip or slide), waits for "Done — Verified: n/n checks
//! passed" on the Activity surface and the result card in the Stream, then
//! checks the 1280×800 split layout and Activity slide-over. It fails on any
//! console error and any request to a host other than the daemon.
//!
//! Every other card type is covered by `web/tests/pwa_cards.rs` (a scripted
//! backend, same browser driver).
//!
//! Needs `/usr/bin/chromium` (`apt-get install -y chromium`) and
//! `npm ci --prefix tests/browser`; `.ci/run` does both. When either is
//! missing the test FAILS and says how to install it — it never passes
//! silently. Screenshots land in `target/tmp/browser/`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::{silas, start_daemon};

const CHROMIUM: &str = "/usr/bin/chromium";

fn browser_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser")
}

/// Fail loudly, with the fix, when the machine lacks the browser or driver.
fn require_tools() {
    let chromium = std::env::var("SILAS_CHROMIUM").unwrap_or_else(|_| CHROMIUM.to_string());
    assert!(
        Path::new(&chromium).exists(),
        "{chromium} not found: the browser test needs Debian's Chromium. Install it with \
         `sudo apt-get update && sudo apt-get install -y chromium` (.ci/run does this), \
         or point SILAS_CHROMIUM at a Chromium binary."
    );
    assert!(
        Command::new("node")
            .arg("--version")
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success()),
        "`node` not found: the browser test drives Chromium with playwright-core on Node.js"
    );
    assert!(
        browser_dir().join("node_modules/playwright-core").is_dir(),
        "playwright-core is not installed: run `npm ci --prefix tests/browser` (.ci/run does this)"
    );
}

#[test]
fn pwa_chat_review_approve_activity_in_headless_chromium() {
    require_tools();
    let dir = tempfile::tempdir().unwrap();
    let (_daemon, addr, banner) = start_daemon(silas(dir.path()), Stdio::null());
    // The real pairing flow: the link `silas start` printed.
    let link = banner
        .iter()
        .find_map(|l| {
            l.split_once("http://")
                .filter(|(_, r)| r.contains("#pair="))
        })
        .map(|(_, rest)| format!("http://{}", rest.trim()))
        .unwrap_or_else(|| panic!("no pairing link in {banner:?}"));
    let shots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("browser");
    std::fs::create_dir_all(&shots).unwrap();

    let mut flow = Command::new("node")
        .arg(browser_dir().join("flow.mjs"))
        .arg(format!("http://{addr}"))
        .arg(&shots)
        .arg(&link)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(180);
    let status = loop {
        if let Some(s) = flow.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = flow.kill();
            let _ = flow.wait();
            panic!("browser flow did not finish within 180 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let out = flow.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        status.success(),
        "browser flow failed (screenshots in {}):\n{stdout}\n{stderr}",
        shots.display()
    );
    assert!(stdout.contains("browser flow ok"), "{stdout}\n{stderr}");
    for shot in [
        "0-onboarding.png",
        "1-connected.png",
        "2-review.png",
        "3-activity.png",
        "3b-result.png",
        "4-desktop.png",
        "5-desktop-activity.png",
    ] {
        assert!(shots.join(shot).is_file(), "no screenshot {shot}");
    }
}
