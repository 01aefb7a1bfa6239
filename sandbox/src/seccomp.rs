//! The seccomp filters. Two, by mode (see `isolate.rs`):
//!
//! **Every mode: no unix socket of its own**, nor any other family but IPv4
//! and IPv6 ([`deny_unix_sockets`]).
//! Landlock does not govern `connect(2)` to a *named* unix socket (before
//! its ABI 9), and a network namespace does not hide them: a command running
//! as the daemon's user could reach every socket that user can — the
//! owner's tmux, ssh-agent, the session bus and `systemd --user`
//! (`systemd-run`), `docker.sock` — and through them run anything outside.
//! So `socket(AF_UNIX, …)` fails with `EPERM`, and `socketpair` is allowed
//! for `AF_UNIX` stream and seqpacket pairs only (connected to each other
//! for good: they cannot connect or send anywhere else — a datagram pair
//! could `sendto` any named datagram socket, the journal's or syslog's). No
//! `io_uring` either: it opens sockets without the `socket` syscall.
//!
//! **With network through the egress proxy** ([`deny_all_but_tcp`]): the
//! same, and IPv4/IPv6 sockets only as TCP streams. Landlock lets TCP
//! connect only to the proxy's port but has no rule for UDP or raw sockets:
//! without this a command could send datagrams (DNS queries included) to
//! any host, around the proxy and its allowlist. Sends with `MSG_FASTOPEN`
//! are refused too: TCP Fast Open connects inside `sendto`/`sendmsg`, out of
//! landlock's connect rule.
//!
//! **The seccomp fallback** ([`deny_network`]), the network isolation when
//! the kernel refuses user namespaces to an unprivileged launcher: the
//! command stays in the host network namespace, so every way to a socket
//! fails with `EPERM`:
//! - `socket` for every family, `socketpair` for anything but an `AF_UNIX`
//!   stream or seqpacket pair;
//! - `io_uring_setup`/`enter`/`register`, as above;
//! - `unshare` and `setns`: no namespace games from inside.
//!
//! Other syscalls are allowed. Syscalls of a foreign ABI are refused too: the
//! compiled filter kills a process using another architecture's calling
//! convention (i386 on x86_64), and a second filter refuses x32 syscall
//! numbers, which share x86_64's audit arch. Architectures other than x86_64
//! and aarch64 fail closed.
//!
//! Limits: `clone`/`clone3` namespace flags are not inspected (clone3 passes
//! them in memory seccomp cannot read); a new namespace made that way is
//! empty, and the fallback exists because the kernel refuses them anyway.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch, sock_filter,
};

/// Install the fallback's network filter on the calling (single-threaded)
/// process; it is inherited by everything it starts. Needs `no_new_privs`.
pub(crate) fn deny_network() -> Result<(), String> {
    install(network_filter()?)
}

/// Install the unix-socket filter (every mode but the fallback, whose
/// network filter refuses every socket already).
pub(crate) fn deny_unix_sockets() -> Result<(), String> {
    install(unix_socket_filter()?)
}

fn install(program: BpfProgram) -> Result<(), String> {
    seccompiler::apply_filter(&program).map_err(|e| e.to_string())?;
    if let Some(guard) = x32_guard() {
        seccompiler::apply_filter(&guard).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Install the egress filter: the unix-socket filter's rules, and IPv4/IPv6
/// sockets only as TCP streams (landlock confines TCP to the proxy port; it
/// has no rule for UDP, raw sockets or other stream protocols).
pub(crate) fn deny_all_but_tcp() -> Result<(), String> {
    install(egress_filter()?)
}

/// [`unix_socket_filter`] plus, for `socket`: any type but `SOCK_STREAM`
/// (UDP, raw and packet sockets would go around the proxy: a datagram to
/// any host, DNS included) and any protocol but TCP's (`0` or
/// `IPPROTO_TCP`: SCTP and MPTCP streams are not landlock's TCP); and any
/// send with `MSG_FASTOPEN` (a connect landlock does not see).
pub fn egress_filter() -> Result<BpfProgram, String> {
    let cond = |arg: u8, op: SeccompCmpOp, value: u64| {
        SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, value).map_err(|e| e.to_string())
    };
    let rule = |conds: Vec<SeccompCondition>| SeccompRule::new(conds).map_err(|e| e.to_string());
    let mut socket = vec![rule(vec![
        cond(0, SeccompCmpOp::Ne, libc::AF_INET as u64)?,
        cond(0, SeccompCmpOp::Ne, libc::AF_INET6 as u64)?,
    ])?];
    for kind in (0..16u64).filter(|k| *k != libc::SOCK_STREAM as u64) {
        socket.push(rule(vec![cond(1, SeccompCmpOp::MaskedEq(0xf), kind)?])?);
    }
    socket.push(rule(vec![
        cond(2, SeccompCmpOp::Ne, 0)?,
        cond(2, SeccompCmpOp::Ne, libc::IPPROTO_TCP as u64)?,
    ])?);
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    rules.insert(libc::SYS_socket, socket);
    rules.insert(libc::SYS_socketpair, not_a_unix_stream_pair()?);
    // TCP Fast Open connects inside `sendto`/`sendmsg` (`MSG_FASTOPEN` with
    // an address), where landlock's connect rule never looks: a check could
    // reach loopback, the LAN or a metadata service around the proxy.
    let fast_open = libc::MSG_FASTOPEN as u64;
    for (nr, flags_arg) in [
        (libc::SYS_sendto, 3),
        (libc::SYS_sendmsg, 2),
        (libc::SYS_sendmmsg, 3),
    ] {
        rules.insert(
            nr,
            vec![rule(vec![cond(
                flags_arg,
                SeccompCmpOp::MaskedEq(fast_open),
                fast_open,
            )?])?],
        );
    }
    for nr in IO_URING {
        rules.insert(nr, Vec::new());
    }
    compile(rules)
}

/// `socket` of any family but `AF_INET`/`AF_INET6` (so no `AF_UNIX`, and
/// none of the families a network namespace does not cut off: `AF_VSOCK`
/// reaches the hypervisor's services from any namespace, netlink families
/// such as audit and uevents are not per-namespace), any `socketpair` but
/// a unix stream or seqpacket pair, and io_uring refused; everything else
/// allowed. glibc's resolver copes without netlink (it assumes both address
/// families are configured).
pub fn unix_socket_filter() -> Result<BpfProgram, String> {
    let not = |family: i32| {
        SeccompCondition::new(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Ne, family as u64)
            .map_err(|e| e.to_string())
    };
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    // The conditions of one rule must all hold: neither IPv4 nor IPv6.
    rules.insert(
        libc::SYS_socket,
        vec![
            SeccompRule::new(vec![not(libc::AF_INET)?, not(libc::AF_INET6)?])
                .map_err(|e| e.to_string())?,
        ],
    );
    rules.insert(libc::SYS_socketpair, not_a_unix_stream_pair()?);
    for nr in IO_URING {
        rules.insert(nr, Vec::new());
    }
    compile(rules)
}

/// Rules (any one matching refuses the call) for `socketpair(domain, type,
/// …)` that is not `AF_UNIX` + `SOCK_STREAM`/`SOCK_SEQPACKET` (the type's
/// low four bits; the rest are `SOCK_NONBLOCK`/`SOCK_CLOEXEC`). Both kinds
/// are connected to each other for good: `connect` says `EISCONN` and an
/// address given to `sendto` is an error (stream) or ignored (seqpacket).
/// std's `Command::spawn` uses a seqpacket pair.
fn not_a_unix_stream_pair() -> Result<Vec<SeccompRule>, String> {
    let cond = |arg: u8, op: SeccompCmpOp, value: u64| {
        SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, value)
            .map_err(|e| e.to_string())
            .and_then(|c| SeccompRule::new(vec![c]).map_err(|e| e.to_string()))
    };
    let mut rules = vec![cond(0, SeccompCmpOp::Ne, libc::AF_UNIX as u64)?];
    let connected = [libc::SOCK_STREAM as u64, libc::SOCK_SEQPACKET as u64];
    for kind in (0..16u64).filter(|k| !connected.contains(k)) {
        rules.push(cond(1, SeccompCmpOp::MaskedEq(0xf), kind)?);
    }
    Ok(rules)
}

const IO_URING: [i64; 3] = [
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
];

/// Matching calls fail with `EPERM`, the rest are allowed.
fn compile(rules: BTreeMap<i64, Vec<SeccompRule>>) -> Result<BpfProgram, String> {
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        target_arch()?,
    )
    .map_err(|e| e.to_string())?;
    BpfProgram::try_from(filter).map_err(|e| e.to_string())
}

/// The compiled filter for the running architecture.
pub fn network_filter() -> Result<BpfProgram, String> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    rules.insert(libc::SYS_socketpair, not_a_unix_stream_pair()?);
    // An empty rule list matches the syscall unconditionally.
    for nr in IO_URING
        .into_iter()
        .chain([libc::SYS_socket, libc::SYS_unshare, libc::SYS_setns])
    {
        rules.insert(nr, Vec::new());
    }
    compile(rules)
}

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn target_arch() -> Result<TargetArch, String> {
    TargetArch::try_from(std::env::consts::ARCH).map_err(|e| e.to_string())
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn target_arch() -> Result<TargetArch, String> {
    Err(format!(
        "no seccomp network filter for architecture {}",
        std::env::consts::ARCH
    ))
}

/// x32 syscalls carry x86_64's audit arch with bit 30 set in the number, so
/// the main filter's number checks would miss them: refuse them all.
fn x32_guard() -> Option<BpfProgram> {
    if !cfg!(target_arch = "x86_64") {
        return None;
    }
    // seccomp_data: nr at offset 0, arch at offset 4.
    // BPF_LD | BPF_W | BPF_ABS (BPF_LD and BPF_W are 0).
    const LD_W_ABS: u16 = 0x20;
    const JEQ_K: u16 = 0x05 | 0x10;
    const JGE_K: u16 = 0x05 | 0x30;
    const RET_K: u16 = 0x06;
    const AUDIT_ARCH_X86_64: u32 = 62 | 0x8000_0000 | 0x4000_0000;
    const X32_SYSCALL_BIT: u32 = 0x4000_0000;
    let op = |code, jt, jf, k| sock_filter { code, jt, jf, k };
    Some(vec![
        op(LD_W_ABS, 0, 0, 4),
        op(JEQ_K, 0, 3, AUDIT_ARCH_X86_64),
        op(LD_W_ABS, 0, 0, 0),
        op(JGE_K, 0, 1, X32_SYSCALL_BIT),
        op(RET_K, 0, 0, libc::SECCOMP_RET_ERRNO | libc::EPERM as u32),
        op(RET_K, 0, 0, libc::SECCOMP_RET_ALLOW),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_filter_compiles_for_this_architecture() {
        let program = network_filter().unwrap();
        // Arch check + one block per filtered syscall at least.
        assert!(program.len() > 10, "{}", program.len());
        assert!(unix_socket_filter().unwrap().len() > 6);
        assert!(egress_filter().unwrap().len() > unix_socket_filter().unwrap().len());
        if cfg!(target_arch = "x86_64") {
            assert_eq!(x32_guard().unwrap().len(), 6);
        }
    }
}
