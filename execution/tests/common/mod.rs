//! Shared by the execution crate's sandbox tests.
#![allow(dead_code, clippy::unwrap_used)]

use silas_sandbox::{Launcher, SubprocessSandbox};

/// The sandbox launcher binary, built on demand when only this crate's tests
/// were compiled (the workspace build always has it).
pub fn launcher() -> Launcher {
    if let Ok(l) = Launcher::sibling_binary() {
        return l;
    }
    let status = std::process::Command::new(env!("CARGO"))
        .args([
            "build",
            "-p",
            "silas-sandbox",
            "--bin",
            "silas-sandbox-exec",
        ])
        .status()
        .unwrap();
    assert!(status.success());
    Launcher::sibling_binary().unwrap()
}

pub fn sandbox() -> SubprocessSandbox {
    SubprocessSandbox::new(launcher())
}
