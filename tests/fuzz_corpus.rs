//! The fuzz corpora as ordinary regression tests on stable (issue #19 item
//! 7): every input under `fuzz/corpus/<target>/` (seeds, and every crash a
//! fuzzing run found, saved there) goes through the same entry point as
//! the cargo-fuzz target in `fuzz/fuzz_targets/`, each within a time bound.
//! A panic, a hang or an unbounded result fails the test and names the
//! file. The nightly fuzzing itself is `.ci/fuzz-smoke.sh`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Generous for a debug build; a hang (an alias bomb, a quadratic path)
/// takes far longer.
const PER_INPUT: Duration = Duration::from_secs(5);

fn corpus(target: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no corpus for {target}");
    files
}

/// Runs `check` over every corpus file of `target` on its own thread, so a
/// panic or a hang is reported with the file's name.
fn each(target: &str, check: fn(&[u8])) {
    for file in corpus(target) {
        let data = std::fs::read(&file).unwrap();
        let started = Instant::now();
        let (tx, rx) = std::sync::mpsc::channel();
        let handle = std::thread::spawn(move || {
            check(&data);
            let _ = tx.send(());
        });
        match rx.recv_timeout(PER_INPUT) {
            Ok(()) => {}
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                panic!("{} took longer than {PER_INPUT:?}", file.display())
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                let why = handle.join().err().map(|e| {
                    e.downcast_ref::<String>()
                        .cloned()
                        .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_default()
                });
                panic!("{} panicked: {why:?}", file.display())
            }
        }
        let _ = handle.join();
        eprintln!(
            "{target}/{}: ok in {:?}",
            file.file_name().unwrap().to_string_lossy(),
            started.elapsed()
        );
    }
}

#[test]
fn plan_parser_corpus() {
    each("plan_parser", |data| {
        if let Ok(text) = std::str::from_utf8(data) {
            let _ = silas_actors::turn::plan::parse_plan(text);
        }
    });
}

#[test]
fn client_frame_corpus() {
    each("client_frame", |data| {
        if let Ok(f) = serde_json::from_slice::<silas_web::protocol::ClientFrame>(data) {
            let _ = f.request_id();
            let _ = f.is_workspace_op();
        }
    });
}

#[test]
fn skill_manifest_corpus() {
    each("skill_manifest", |data| {
        if let Ok(text) = std::str::from_utf8(data) {
            let _ = silas_skill::manifest::parse(text);
        }
    });
}

#[test]
fn config_yaml_corpus() {
    each("config_yaml", |data| {
        if let Ok(text) = std::str::from_utf8(data) {
            let env = silas_core::config::MapEnv::new();
            if let Ok(cfg) = silas_core::config::Config::from_yaml_str(text, &env) {
                let _ = cfg.validate();
            }
        }
    });
}
