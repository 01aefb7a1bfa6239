//! The launcher's isolation steps, run while it is still single-threaded and
//! before the command exists. Each returns `E_SANDBOX_UNAVAILABLE` naming the
//! kernel feature it lacks; the caller then runs nothing.
//!
//! Network isolation for `network: false` (see [`NetworkIsolation`]):
//! - **root**: `unshare(CLONE_NEWNET)`, then the `nobody` user
//!   ([`Isolation::RootNamespaces`]);
//! - **unprivileged**: `unshare(CLONE_NEWUSER | CLONE_NEWNET)` with the
//!   caller's uid/gid mapped to themselves, so files the command creates stay
//!   the daemon user's ([`Isolation::UserNamespace`]); the launcher then gives
//!   up the namespace's capabilities;
//! - **fallback** when the kernel refuses those namespaces (sysctls, AppArmor,
//!   a container's seccomp profile): the host network namespace with the
//!   [`crate::seccomp`] filter (no socket at all, no io_uring, no
//!   namespace changes) plus landlock's abstract-unix-socket scope, which in
//!   the host namespace would otherwise reach host services
//!   ([`Isolation::Seccomp`]). If that is refused too, nothing runs and the
//!   error names both.
//!
//! With network through the egress proxy, seccomp also refuses every IPv4
//! and IPv6 socket but a TCP stream (landlock cannot filter UDP).
//!
//! In every other mode a seccomp filter still refuses `socket(AF_UNIX)`
//! (named unix sockets are out of landlock's reach before its ABI 9 and of
//! a network namespace's: the daemon user's tmux, agents and buses would be
//! a way out); if it cannot be installed nothing runs.

use std::path::PathBuf;

use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, LandlockStatus, NetPort,
    RestrictSelf, Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope,
    path_beneath_rules,
};
use rustix::process::{Resource, Rlimit, Signal};
use rustix::thread::{CapabilitySet, CapabilitySets, UnshareFlags};

use crate::launcher::{SANDBOX_GID, SANDBOX_UID};
use crate::spec::{Confinement, Isolation, NetworkIsolation, SandboxError, SandboxSpec};

/// System directories every command may read and execute from.
const SYSTEM_READ_EXEC: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt",
];
/// Pseudo-filesystems and devices commands commonly need.
const SYSTEM_READ: &[&str] = &["/proc", "/dev/urandom", "/dev/random", "/dev/zero"];
const SYSTEM_READ_WRITE: &[&str] = &["/dev/null"];

const NET_WHAT: &str = "network isolation (network_access=false)";

pub(crate) fn unavailable(what: &str, e: impl std::fmt::Display) -> SandboxError {
    SandboxError::Unavailable {
        what: what.to_string(),
        detail: e.to_string(),
    }
}

/// The egress port landlock must enforce: only with network granted (without
/// network the command is cut off entirely).
pub(crate) fn egress_port(spec: &SandboxSpec) -> Option<u16> {
    spec.egress_proxy_port.filter(|_| spec.network)
}

/// What the network step decided; seccomp is installed last (after landlock).
enum NetPlan {
    /// Decided. In the namespace modes the launcher is inside a user
    /// namespace of its own, so process accounting is exact.
    Done(Isolation),
    /// Isolated, but the process count is shared with the uid's other tasks.
    SharedCount(Isolation),
    /// Seccomp still to install; `refused` says why namespaces were not used
    /// (`None` when seccomp was asked for).
    Seccomp { refused: Option<String> },
}

/// Every isolation step, in order. Returns how the command will be confined.
pub(crate) fn isolate(spec: &SandboxSpec) -> Result<Confinement, SandboxError> {
    let parent = rustix::process::getppid();
    rustix::process::setsid().map_err(|e| unavailable("new session", e))?;
    let me = rustix::process::getpid();
    rustix::process::set_child_subreaper(Some(me))
        .map_err(|e| unavailable("child subreaper", e))?;

    let root = rustix::process::geteuid().is_root();
    // Counted before /proc is narrowed (below): the process allowance of a
    // root launcher without a user namespace adds what `nobody` runs.
    let nobody_tasks = if root { tasks_of_user(SANDBOX_UID) } else { 0 };
    let private_proc = root && private_proc();
    let mut is_nobody = false;
    let plan = if !spec.network {
        network_plan(spec.network_isolation, root, &mut is_nobody)?
    } else if egress_port(spec).is_some() {
        NetPlan::Done(Isolation::EgressProxy)
    } else {
        NetPlan::Done(Isolation::HostNetwork)
    };
    let mut in_userns = matches!(
        plan,
        NetPlan::Done(Isolation::UserNamespace | Isolation::RootNamespaces)
    );
    let pid_namespace = pid_namespace(root && !is_nobody, &mut in_userns)?;

    set_limits(spec, in_userns, root.then_some(nobody_tasks))?;
    if root && !is_nobody {
        drop_root()?;
    }
    if in_userns {
        // The namespace's capabilities are the launcher's only; a non-root
        // uid keeps none across exec anyway, this just ends them sooner.
        rustix::thread::set_capabilities(None, empty_caps())
            .map_err(|e| unavailable("dropping user-namespace capabilities", e))?;
    }
    // After every credential change: the kernel clears the parent-death
    // signal whenever the effective uid/gid changes.
    rustix::process::set_parent_process_death_signal(Some(Signal::KILL))
        .map_err(|e| unavailable("parent death signal", e))?;
    if rustix::process::getppid() != parent {
        return Err(SandboxError::Launcher(
            "the daemon went away during isolation".into(),
        ));
    }

    let refused = match &plan {
        NetPlan::Seccomp { refused } => Some(refused.clone()),
        NetPlan::Done(_) | NetPlan::SharedCount(_) => None,
    };
    let landlock_abi = confine_filesystem(spec, refused.is_some()).map_err(|e| match &refused {
        Some(Some(why)) => unavailable(NET_WHAT, format!("{why}, and the seccomp fallback: {e}")),
        _ => e,
    })?;
    let isolation = match plan {
        NetPlan::Done(Isolation::EgressProxy) => {
            crate::seccomp::deny_all_but_tcp()
                .map_err(|e| unavailable("socket confinement to TCP (seccomp)", e))?;
            Isolation::EgressProxy
        }
        NetPlan::Done(i) | NetPlan::SharedCount(i) => {
            crate::seccomp::deny_unix_sockets()
                .map_err(|e| unavailable("unix socket confinement (seccomp)", e))?;
            i
        }
        NetPlan::Seccomp { refused } => {
            crate::seccomp::deny_network().map_err(|e| {
                let detail = match refused {
                    Some(why) => format!("{why}, and seccomp unavailable ({e})"),
                    None => format!("seccomp unavailable ({e})"),
                };
                unavailable(NET_WHAT, detail)
            })?;
            Isolation::Seccomp
        }
    };
    Ok(Confinement {
        isolation,
        landlock_abi,
        pid_namespace,
        private_proc,
    })
}

/// Root only: a mount namespace of the launcher's own, private (nothing
/// mounted in it reaches the host), with a fresh `/proc` mounted
/// `hidepid=2`. The host's `/proc` lists every process with its command
/// line (world-readable: a key passed as an argument, the daemon's own);
/// this one shows a process only to whoever may trace it, so the command,
/// as `nobody` without capabilities, sees its own processes. Unprivileged
/// launchers cannot mount a `/proc` of the host's processes. `false` where
/// the kernel refuses: a defence in depth, like the PID namespace.
fn private_proc() -> bool {
    if unshare(UnshareFlags::NEWNS).is_err() {
        return false;
    }
    mount(None, c"/", None, libc::MS_REC | libc::MS_PRIVATE, None)
        && mount(
            Some(c"proc"),
            c"/proc",
            Some(c"proc"),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            Some(c"hidepid=2"),
        )
}

/// `mount(2)`; whether it succeeded. (libc rather than rustix's `mount`
/// feature: a feature changes the crate's build hash and with it every
/// symbol name the start-up order file lists.)
#[allow(unsafe_code)]
fn mount(
    source: Option<&std::ffi::CStr>,
    target: &std::ffi::CStr,
    fstype: Option<&std::ffi::CStr>,
    flags: libc::c_ulong,
    data: Option<&std::ffi::CStr>,
) -> bool {
    let ptr = |s: Option<&std::ffi::CStr>| s.map_or(std::ptr::null(), std::ffi::CStr::as_ptr);
    // SAFETY: every pointer is a NUL-terminated string that outlives the
    // call, or null where mount(2) accepts null.
    unsafe {
        libc::mount(
            ptr(source),
            target.as_ptr(),
            ptr(fstype),
            flags,
            ptr(data).cast(),
        ) == 0
    }
}

const PID_WHAT: &str = "process namespace";

/// A new PID namespace for the command (the launcher stays outside: only its
/// children enter it, the command as their first process). Creating one
/// needs privilege in the launcher's user namespace: root, or a namespace of
/// its own — an unprivileged launcher without one (network granted, or the
/// seccomp fallback) enters one now, its uid mapped to itself. `false` where
/// the kernel refuses: a defence in depth, not a reason to run nothing (the
/// subreaper and landlock's signal scope remain).
fn pid_namespace(privileged: bool, in_userns: &mut bool) -> Result<bool, SandboxError> {
    if privileged || *in_userns {
        return Ok(unshare(UnshareFlags::NEWPID).is_ok());
    }
    match user_namespace(UnshareFlags::NEWUSER | UnshareFlags::NEWPID, PID_WHAT)? {
        Ok(()) => {
            *in_userns = true;
            Ok(true)
        }
        Err(_) => Ok(false),
    }
}

fn network_plan(
    mode: NetworkIsolation,
    root: bool,
    is_nobody: &mut bool,
) -> Result<NetPlan, SandboxError> {
    match mode {
        NetworkIsolation::Seccomp => Ok(NetPlan::Seccomp { refused: None }),
        NetworkIsolation::Auto if root => Ok(match unshare(UnshareFlags::NEWNET) {
            Ok(()) => {
                // Every root-started sandbox runs as `nobody`, and
                // RLIMIT_NPROC counts per user: one command's fork bomb
                // would starve every other sandbox of processes. As nobody,
                // in a user namespace of its own, the count is per
                // namespace (Linux >= 5.14), so each sandbox gets exactly
                // its allowance. Where user namespaces are refused the
                // shared count remains (set_limits adds nobody's tasks).
                drop_root()?;
                *is_nobody = true;
                match user_namespace(UnshareFlags::NEWUSER, NET_WHAT)? {
                    Ok(()) => NetPlan::Done(Isolation::RootNamespaces),
                    Err(_) => NetPlan::SharedCount(Isolation::RootNamespaces),
                }
            }
            Err(e) => NetPlan::Seccomp {
                refused: Some(format!("network namespace refused ({e})")),
            },
        }),
        NetworkIsolation::Auto => {
            match user_namespace(UnshareFlags::NEWUSER | UnshareFlags::NEWNET, NET_WHAT)? {
                Ok(()) => Ok(NetPlan::Done(Isolation::UserNamespace)),
                Err(why) => Ok(NetPlan::Seccomp { refused: Some(why) }),
            }
        }
        NetworkIsolation::UserNamespace => {
            if root {
                // Root maps nobody, so the command runs as nobody as in root mode.
                drop_root()?;
                *is_nobody = true;
            }
            user_namespace(UnshareFlags::NEWUSER | UnshareFlags::NEWNET, NET_WHAT)?
                .map_err(|why| unavailable(NET_WHAT, why))?;
            Ok(NetPlan::Done(Isolation::UserNamespace))
        }
    }
}

#[allow(unsafe_code)]
fn unshare(flags: UnshareFlags) -> rustix::io::Result<()> {
    // SAFETY: `unshare_unsafe` is unsafe only because `CLONE_FILES` can split
    // the fd table between threads. We pass namespace flags only, and the
    // launcher is still single-threaded here (no thread is ever spawned).
    unsafe { rustix::thread::unshare_unsafe(flags) }
}

/// Enter a new user namespace (with `flags`: also a new network or PID
/// namespace), mapping the current uid/gid to themselves. The outer `Err` is
/// fatal (the namespace was entered but could not be set up: nothing may
/// run; `what` names the step); the inner `Err` is the kernel's refusal,
/// after which a fallback may apply.
fn user_namespace(flags: UnshareFlags, what: &str) -> Result<Result<(), String>, SandboxError> {
    let uid = rustix::process::geteuid().as_raw();
    let gid = rustix::process::getegid().as_raw();
    if let Err(e) = unshare(flags) {
        return Ok(Err(format!("user namespaces refused ({e})")));
    }
    // An unprivileged process may map only its own ids, and a gid map needs
    // setgroups denied first (so dropping a group can never grant access).
    let write = |file: &str, content: String| {
        std::fs::write(format!("/proc/self/{file}"), content).map_err(|e| {
            unavailable(
                what,
                format!("user namespace entered but /proc/self/{file} refused: {e}"),
            )
        })
    };
    // A launcher that just switched from root to nobody is not dumpable, so
    // its /proc/self files belong to root: dumpable only while writing.
    let dumpable = |on: bool| {
        use rustix::process::DumpableBehavior::{Dumpable, NotDumpable};
        rustix::process::set_dumpable_behavior(if on { Dumpable } else { NotDumpable })
            .map_err(|e| unavailable(what, format!("cannot set up the user namespace: {e}")))
    };
    let was_dumpable = rustix::process::dumpable_behavior()
        .map(|d| d == rustix::process::DumpableBehavior::Dumpable)
        .unwrap_or(false);
    dumpable(true)?;
    write("setgroups", "deny".into())?;
    write("uid_map", format!("{uid} {uid} 1"))?;
    write("gid_map", format!("{gid} {gid} 1"))?;
    dumpable(was_dumpable)?;
    Ok(Ok(()))
}

fn empty_caps() -> CapabilitySets {
    CapabilitySets {
        effective: CapabilitySet::empty(),
        permitted: CapabilitySet::empty(),
        inheritable: CapabilitySet::empty(),
    }
}

fn set_limit(resource: Resource, what: &str, value: u64) -> Result<(), SandboxError> {
    let limit = Rlimit {
        current: Some(value),
        maximum: Some(value),
    };
    rustix::process::setrlimit(resource, limit).map_err(|e| unavailable(what, e))
}

/// `nobody_tasks`: for a root launcher, the tasks `nobody` ran at its start.
fn set_limits(
    spec: &SandboxSpec,
    in_userns: bool,
    nobody_tasks: Option<u64>,
) -> Result<(), SandboxError> {
    let l = &spec.limits;
    set_limit(
        Resource::As,
        "address space limit",
        l.memory_mb.saturating_mul(1 << 20),
    )?;
    set_limit(Resource::Cpu, "CPU time limit", l.cpu_seconds)?;
    set_limit(
        Resource::Fsize,
        "file size limit",
        l.file_size_mb.saturating_mul(1 << 20),
    )?;
    set_limit(Resource::Core, "core dump limit", 0)?;
    // RLIMIT_NPROC counts the tasks of the real uid, the launcher included.
    // Inside our own user namespace (Linux >= 5.14 counts per namespace and
    // uid) that is the launcher alone, so the allowance is exact. Otherwise
    // the uid's tasks everywhere count, and the sandbox gets its allowance on
    // top of what that user already runs (as root the launcher is about to
    // become `nobody`, one more task of that user).
    let existing = match nobody_tasks {
        _ if in_userns => 1,
        Some(n) => n + 1,
        None => tasks_of_user(rustix::process::getuid().as_raw()),
    };
    set_limit(
        Resource::Nproc,
        "process limit",
        existing.saturating_add(l.max_processes),
    )
}

fn drop_root() -> Result<(), SandboxError> {
    // Order matters: groups and gid need privilege, so uid goes last.
    rustix::thread::set_thread_groups(&[])
        .map_err(|e| unavailable("dropping supplementary groups", e))?;
    rustix::thread::set_thread_gid(rustix::process::Gid::from_raw(SANDBOX_GID))
        .map_err(|e| unavailable("dropping to the sandbox group", e))?;
    rustix::thread::set_thread_uid(rustix::process::Uid::from_raw(SANDBOX_UID))
        .map_err(|e| unavailable("dropping to the sandbox user", e))
}

/// `no_new_privs` and the landlock ruleset; returns the kernel's landlock ABI.
/// `scope_abstract`: the command stays in the host network namespace without
/// network, so host abstract unix sockets must be scoped away too.
fn confine_filesystem(spec: &SandboxSpec, scope_abstract: bool) -> Result<u32, SandboxError> {
    rustix::thread::set_no_new_privs(true).map_err(|e| unavailable("no_new_privs", e))?;
    let abi = ABI::V3;
    let read = AccessFs::from_read(abi);
    let all = AccessFs::from_all(abi);
    let egress = egress_port(spec);
    let what = if egress.is_some() {
        "landlock filesystem, network and abstract-socket confinement (ABI 6)"
    } else if scope_abstract {
        "landlock filesystem and abstract-socket confinement (ABI 6)"
    } else {
        "landlock filesystem confinement"
    };
    let err = |e: landlock::RulesetError| unavailable(what, e);
    let mut rw: Vec<PathBuf> = vec![spec.work_dir.clone()];
    rw.extend(spec.write_paths.iter().cloned());
    rw.extend(SYSTEM_READ_WRITE.iter().map(PathBuf::from));
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(all)
        .map_err(err)?;
    if egress.is_some() {
        // Handling both rights and granting only connect to one port: every
        // other TCP connect and every TCP bind is refused. HardRequirement
        // makes a kernel without landlock network support an error here.
        ruleset = ruleset
            .handle_access(AccessNet::from_all(ABI::V4))
            .map_err(err)?;
    }
    if egress.is_some() || scope_abstract {
        // The host namespace also exposes the host's abstract unix sockets
        // (namespaced by netns, invisible to filesystem rules — the
        // containerd-shim escape, CVE-2020-15257): scoping them needs ABI 6.
        ruleset = ruleset.scope(Scope::AbstractUnixSocket).map_err(err)?;
    }
    if kernel_landlock_abi() >= 6 {
        // No signal to a process outside the sandbox — the daemon above all,
        // which an unprivileged daemon's command could otherwise kill (same
        // uid) wherever no PID namespace hides it. Asked only where the
        // kernel has it: older kernels keep the namespace's protection.
        ruleset = ruleset.scope(Scope::Signal).map_err(err)?;
    }
    let mut created = ruleset
        .create()
        .map_err(err)?
        .add_rules(path_beneath_rules(
            crate::hidden::system_grants(SYSTEM_READ_EXEC, &spec.hidden_paths),
            read,
        ))
        .map_err(err)?
        .add_rules(path_beneath_rules(
            SYSTEM_READ,
            AccessFs::ReadFile | AccessFs::ReadDir,
        ))
        .map_err(err)?
        .add_rules(path_beneath_rules(&spec.read_paths, read))
        .map_err(err)?
        .add_rules(path_beneath_rules(&rw, all))
        .map_err(err)?;
    if let Some(port) = egress {
        created = created
            .add_rule(NetPort::new(port, AccessNet::ConnectTcp))
            .map_err(err)?;
    }
    let status = created.restrict_self().map_err(err)?;
    if status.ruleset != RulesetStatus::FullyEnforced {
        return Err(unavailable(
            what,
            format!("kernel enforces it only {:?}", status.ruleset),
        ));
    }
    Ok(landlock_version(status.landlock))
}

/// The landlock ABI a status names: the kernel's own when it is newer than
/// the `landlock` crate knows, else the one both know; 0 without landlock.
pub fn landlock_version(status: LandlockStatus) -> u32 {
    match status {
        LandlockStatus::Available {
            effective_abi,
            kernel_abi,
        } => kernel_abi
            .and_then(|v| u32::try_from(v).ok())
            .unwrap_or(effective_abi as u32),
        _ => 0,
    }
}

/// The running kernel's landlock ABI, restricting nothing: with no flag set,
/// `RestrictSelf::apply` makes no `landlock_restrict_self` call and, told
/// so, sets no `no_new_privs` (`silas doctor`).
pub fn kernel_landlock_abi() -> u32 {
    RestrictSelf::default()
        .no_new_privs(false)
        .apply()
        .map(|s| landlock_version(s.landlock))
        .unwrap_or(0)
}

/// Tasks (threads count) currently run by `uid`.
fn tasks_of_user(uid: u32) -> u64 {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let mut n = 0u64;
    for e in dir.flatten() {
        let path = e.path();
        let owned = std::fs::read_to_string(path.join("status"))
            .ok()
            .is_some_and(|s| {
                s.lines()
                    .find(|l| l.starts_with("Uid:"))
                    .and_then(|l| l.split_whitespace().nth(1))
                    .and_then(|v| v.parse::<u32>().ok())
                    == Some(uid)
            });
        if owned {
            n += std::fs::read_dir(path.join("task"))
                .map(|t| t.count() as u64)
                .unwrap_or(1);
        }
    }
    n
}
