//! `silas-sandbox`: running untrusted commands in real Linux isolation that
//! fails closed (spec §3.7 SandboxConfig, §4.7, §9.1; meao M4).
//!
//! The daemon ([`SubprocessSandbox`]) starts a launcher process
//! ([`launcher`]) that isolates *itself* — new session and subreaper, no
//! network unless requested (root: an empty network namespace; unprivileged:
//! a user + network namespace, or the [`seccomp`] socket filter where the
//! kernel refuses user namespaces), rlimits, `nobody` when started as root,
//! `no_new_privs`, landlock — and only then runs the command as its child,
//! supervising output, timeout and every descendant. If the kernel cannot
//! enforce a requested restriction the command does not run and the error
//! says what is missing (`E_SANDBOX_UNAVAILABLE`). Each run reports how it
//! was confined ([`Confinement`]); [`SubprocessSandbox::probe`] asks once.
//!
//! Long-lived commands ([`SubprocessSandbox::spawn`], [`process`]) get the
//! same launcher and isolation, with piped stdin and streamed stdout; they
//! die with every descendant when their [`SandboxProcess`] is dropped.
//!
//! **Architecture invariant:** no command ever runs outside a launcher that
//! completed its isolation steps; there is no "unsandboxed" code path.

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod hidden;
mod isolate;
pub mod launcher;
pub mod manager;
pub mod process;
pub mod reach;
pub mod seccomp;
pub mod spec;
mod stream;

pub use hidden::hide_from_commands;
pub use isolate::kernel_landlock_abi;
pub use manager::{Launcher, SubprocessSandbox};
pub use process::{ProcessExit, SandboxProcess};
pub use spec::{
    Confinement, Isolation, Limits, NetworkIsolation, SandboxError, SandboxOutput, SandboxSpec,
    Termination,
};

/// First argument that turns the `silas` binary into the launcher.
pub const LAUNCHER_ARG: &str = "__sandbox-exec";
