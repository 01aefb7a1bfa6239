//! What a sandboxed execution is asked to do and what it reports back.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use silas_core::{Coded, ErrorCode};

/// Resource limits applied with `setrlimit` before the command runs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Address space (RLIMIT_AS), MiB.
    pub memory_mb: u64,
    /// CPU time (RLIMIT_CPU), seconds.
    pub cpu_seconds: u64,
    /// Tasks (processes and threads) the command's tree may run at once
    /// (RLIMIT_NPROC; exact in a user namespace, otherwise on top of what
    /// the sandbox's uid already runs).
    pub max_processes: u64,
    /// Largest file it may write (RLIMIT_FSIZE), MiB.
    pub file_size_mb: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            memory_mb: 512,
            cpu_seconds: 60,
            max_processes: 64,
            file_size_mb: 64,
        }
    }
}

/// One execution. `argv[0]` is run directly (never through a shell unless the
/// caller's tool *is* a shell, in which case the script is one argv element).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxSpec {
    pub argv: Vec<String>,
    /// The complete environment of the command (nothing is inherited).
    pub env: Vec<(String, String)>,
    /// Working directory; readable, writable and executable.
    pub work_dir: PathBuf,
    /// Extra read-only paths.
    pub read_paths: Vec<PathBuf>,
    /// Extra read-write paths.
    pub write_paths: Vec<PathBuf>,
    /// `false` cuts the command off the network (see [`NetworkIsolation`]).
    pub network: bool,
    /// With `network`: the only TCP destination port the command may
    /// connect to (a loopback egress proxy, `silas_netguard::EgressProxy`).
    /// The command stays in the host network namespace, landlock refuses
    /// every other TCP connect and every TCP bind (ABI 4) and every host
    /// abstract unix socket (ABI 6), and the proxy variables point at
    /// `127.0.0.1:PORT`. Kernels without that landlock support (Linux < 6.12)
    /// fail closed (`E_SANDBOX_UNAVAILABLE`). Landlock does not restrict
    /// UDP, so seccomp refuses every IPv4/IPv6 socket but a TCP stream.
    /// `None` with `network` = the host network unfiltered.
    #[serde(default)]
    pub egress_proxy_port: Option<u16>,
    /// How `network: false` is enforced; `Auto` (the default) picks the
    /// strongest mechanism the kernel grants. Forcing one never weakens the
    /// rest: a forced mechanism the kernel refuses fails closed.
    #[serde(default)]
    pub network_isolation: NetworkIsolation,
    pub limits: Limits,
    pub timeout: Duration,
    /// Per stream; the rest is counted and dropped.
    pub max_output_bytes: usize,
    /// Paths the system directories' read grants must leave out (the
    /// daemon's data dir and config: see `hidden.rs`). Paths granted by name
    /// above are not affected. [`crate::hide_from_commands`] adds to it.
    #[serde(default)]
    pub hidden_paths: Vec<PathBuf>,
}

impl SandboxSpec {
    /// A spec with the defaults: no network, default limits, 60 s, 100 kB output.
    pub fn new(argv: Vec<String>, work_dir: PathBuf) -> Self {
        SandboxSpec {
            argv,
            env: vec![("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into())],
            work_dir,
            read_paths: Vec::new(),
            write_paths: Vec::new(),
            network: false,
            egress_proxy_port: None,
            network_isolation: NetworkIsolation::Auto,
            limits: Limits::default(),
            timeout: Duration::from_secs(60),
            max_output_bytes: 100_000,
            hidden_paths: Vec::new(),
        }
    }
}

/// The mechanism that cuts a `network: false` command off the network.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NetworkIsolation {
    /// Root: a new network namespace. Otherwise a new user + network
    /// namespace, or — when the kernel refuses user namespaces — seccomp.
    #[default]
    Auto,
    /// A new user + network namespace, or nothing runs.
    UserNamespace,
    /// The seccomp socket filter (host network namespace), or nothing runs.
    Seccomp,
}

/// Which isolation a run actually got (reported by the launcher).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Isolation {
    /// Root daemon: a new, empty network namespace, then the `nobody` user.
    RootNamespaces,
    /// A new user namespace (the daemon's uid/gid mapped to themselves)
    /// owning a new, empty network namespace.
    UserNamespace,
    /// Host network namespace; seccomp refuses every socket (but `socketpair`),
    /// io_uring and namespace changes, landlock scopes abstract unix sockets.
    Seccomp,
    /// Network granted through the egress proxy port only (landlock TCP rule).
    EgressProxy,
    /// Network granted, unfiltered.
    HostNetwork,
}

impl Isolation {
    /// One phrase for operators (`silas doctor`).
    pub fn describe(self) -> &'static str {
        match self {
            Isolation::RootNamespaces => {
                "empty network namespace, as nobody in a user namespace of its own"
            }
            Isolation::UserNamespace => "user + empty network namespace (unprivileged daemon)",
            Isolation::Seccomp => "seccomp socket filter (the kernel refused user namespaces)",
            Isolation::EgressProxy => "host network through the egress proxy only",
            Isolation::HostNetwork => "host network, unfiltered",
        }
    }
}

/// How a run was confined: the network isolation, the kernel's landlock
/// ABI (filesystem confinement is always landlock) and whether the command
/// got a process namespace of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Confinement {
    pub isolation: Isolation,
    pub landlock_abi: u32,
    /// The command is the first process of a new PID namespace: it sees and
    /// can signal no process outside it, and when it dies — killed with the
    /// launcher, which it follows through its parent-death signal — the
    /// kernel kills everything it started, `setsid` daemons included. Needs
    /// root or an unprivileged user namespace; without it the launcher's
    /// subreaper and landlock's signal scope (ABI 6) remain.
    #[serde(default)]
    pub pid_namespace: bool,
    /// The command's `/proc` is a fresh one mounted `hidepid=2` in a mount
    /// namespace of its own: it lists only the processes the command may
    /// trace (its own), not the host's command lines. Root launchers only.
    #[serde(default)]
    pub private_proc: bool,
}

/// How the command ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Termination {
    Exited {
        code: i32,
    },
    Signaled {
        signal: i32,
    },
    /// Killed (with every descendant) when the timeout passed.
    TimedOut,
}

/// For people: "exited with code 2", not the enum's debug form.
impl std::fmt::Display for Termination {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Termination::Exited { code } => write!(f, "exited with code {code}"),
            Termination::Signaled { signal } => write!(f, "killed by signal {signal}"),
            Termination::TimedOut => f.write_str("timed out"),
        }
    }
}

/// Captured output of one execution.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SandboxOutput {
    pub termination: Termination,
    pub stdout: String,
    pub stderr: String,
    /// Bytes the command wrote beyond `max_output_bytes` (0 = complete).
    pub stdout_dropped: u64,
    pub stderr_dropped: u64,
    pub duration: Duration,
    /// How the command was confined.
    pub confinement: Confinement,
}

impl SandboxOutput {
    pub fn success(&self) -> bool {
        self.termination == Termination::Exited { code: 0 }
    }
}

/// Why a command could not be run as asked. Never a silent unsandboxed run.
// Externally tagged: newtype variants cannot be internally tagged, and this
// crosses the launcher → daemon pipe.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SandboxError {
    /// The kernel cannot enforce what was requested (fail closed).
    #[error("E_SANDBOX_UNAVAILABLE: {what}: {detail}")]
    Unavailable { what: String, detail: String },
    /// The command itself could not be started.
    #[error("E_SANDBOX_FAILED: cannot start {program}: {detail}")]
    Spawn { program: String, detail: String },
    /// The request was malformed.
    #[error("E_SANDBOX_FAILED: invalid request: {0}")]
    Invalid(String),
    /// The launcher broke its protocol or died unexpectedly.
    #[error("E_SANDBOX_FAILED: sandbox launcher failed: {0}")]
    Launcher(String),
    /// The launcher itself had to be killed at the outer deadline.
    #[error("E_SANDBOX_TIMEOUT: timeout after {0}s")]
    Timeout(u64),
}

impl Coded for SandboxError {
    fn code(&self) -> ErrorCode {
        match self {
            SandboxError::Unavailable { .. } => ErrorCode::ESandboxUnavailable,
            SandboxError::Timeout(_) => ErrorCode::ESandboxTimeout,
            _ => ErrorCode::ESandboxFailed,
        }
    }
}
