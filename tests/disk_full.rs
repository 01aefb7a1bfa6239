//! A full disk pauses the daemon instead of ending it (run as the README
//! says: `silas start`, no config, the offline responder). The data dir sits
//! on a small tmpfs of its own; once it is full a message makes the store
//! fail, the daemon says the disk is full and waits; when space is freed it
//! starts again by itself and answers. Mounting needs CAP_SYS_ADMIN (root
//! here and in CI); without it the test says it was skipped.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use support::{Daemon, silas};

/// Unmounts the test's tmpfs when dropped (after the daemon is gone).
struct Mounted(PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

fn mount_small_fs(at: &Path) -> Option<Mounted> {
    std::fs::create_dir_all(at).unwrap();
    let ok = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=80m,mode=0755", "tmpfs"])
        .arg(at)
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    ok.then(|| Mounted(at.to_path_buf()))
}

/// The first line from `rx` that `pred` accepts, within `within`.
fn wait_line(
    rx: &mpsc::Receiver<String>,
    seen: &mut Vec<String>,
    within: Duration,
    pred: impl Fn(&str) -> bool,
) -> String {
    let end = Instant::now() + within;
    while let Some(left) = end.checked_duration_since(Instant::now()) {
        match rx.recv_timeout(left) {
            Ok(l) => {
                seen.push(l.clone());
                if pred(&l) {
                    return l;
                }
            }
            Err(_) => break,
        }
    }
    panic!("line never came: {seen:#?}");
}

fn addr_of(line: &str) -> String {
    let rest = line.split_once("http://").unwrap().1;
    rest.split('/').next().unwrap().to_string()
}

/// One scripted `silas chat` message; its stdout.
fn chat(dir: &Path, addr: &str, text: &str) -> String {
    let mut child = silas(dir)
        .args(["chat", "--url", &format!("ws://{addr}/ws")])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    writeln!(child.stdin.take().unwrap(), "{text}").unwrap();
    // A message the store cannot take must not hang the test.
    let end = Instant::now() + Duration::from_secs(40);
    while child.try_wait().unwrap().is_none() && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let out = child.wait_with_output().unwrap();
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Writes zeros into `path` until the filesystem refuses.
fn fill(path: &Path) {
    let mut f = std::fs::File::create(path).unwrap();
    let chunk = vec![0u8; 1 << 20];
    while f.write_all(&chunk).is_ok() {}
    let _ = f.sync_all();
}

#[test]
fn a_full_disk_pauses_the_daemon_and_free_space_brings_it_back() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("small");
    let Some(_mounted) = mount_small_fs(&dir) else {
        eprintln!("SKIPPED: cannot mount a tmpfs here (needs CAP_SYS_ADMIN)");
        return;
    };
    let mut child = silas(&dir)
        .env("SILAS__CHANNELS__WEB__PORT", "0")
        .arg("start")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    for pipe in [
        Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
        Box::new(child.stderr.take().unwrap()),
    ] {
        let tx = tx.clone();
        std::thread::spawn(move || {
            for l in BufReader::new(pipe).lines() {
                let Ok(l) = l else { break };
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
    }
    let mut daemon = Daemon { child };
    let mut seen = Vec::new();
    let running = |l: &str| l.starts_with("Silas is running");
    let first = addr_of(&wait_line(&rx, &mut seen, Duration::from_secs(30), running));
    let out = chat(&dir, &first, "hello");
    assert!(out.contains("silas> "), "{out}");

    // Full: the next message makes the store fail; the daemon says why and
    // waits instead of ending.
    fill(&dir.join("fill"));
    let refused = chat(&dir, &first, "are you still there?");
    // The sender is told why its message was not taken: the store's error
    // when its own record hit the full disk, or the shutdown when another
    // write hit it first — never a bare E_CHANNEL_TIMEOUT "runtime unavailable".
    assert!(
        (refused.contains("error[E_DB_IO]") && refused.contains("No space left on device"))
            || refused.contains("error[E_CHANNEL_DISCONNECTED]"),
        "{refused}"
    );
    assert!(!refused.contains("E_CHANNEL_TIMEOUT"), "{refused}");
    let said = wait_line(&rx, &mut seen, Duration::from_secs(60), |l| {
        l.contains("is full")
    });
    assert!(
        said.starts_with("E_DB_IO: the disk holding ")
            && said.contains("Waiting for 32 MiB free to start again"),
        "{said}"
    );
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        daemon.child.try_wait().unwrap().is_none(),
        "the daemon ended on a full disk: {seen:#?}"
    );

    // Space again: it starts by itself and answers.
    std::fs::remove_file(dir.join("fill")).unwrap();
    wait_line(&rx, &mut seen, Duration::from_secs(30), |l| {
        l == "Free space is back: Silas starts again."
    });
    let second = addr_of(&wait_line(&rx, &mut seen, Duration::from_secs(30), running));
    let out = chat(&dir, &second, "hello again");
    assert!(out.contains("silas> "), "{out}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("silas> ") && !l.contains("rehydrated")),
        "{out}"
    );
    daemon.stop_blocking();
}
