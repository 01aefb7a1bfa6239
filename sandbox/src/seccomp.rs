//! The seccomp network filter: the fallback network isolation when the kernel
//! refuses user namespaces to an unprivileged launcher (see `isolate.rs`).
//!
//! The command stays in the host network namespace, so this filter makes
//! every way to a network socket fail with `EPERM`:
//! - `socket` and `socketpair` for any family but `AF_UNIX` (pipes and local
//!   IPC keep working; the host's *abstract* unix sockets are closed by
//!   landlock's scope, named ones by landlock's filesystem rules only as far
//!   as path access goes — see the crate docs);
//! - `io_uring_setup`/`enter`/`register`: io_uring opens sockets without the
//!   `socket` syscall, out of seccomp's sight;
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

/// Install the filter on the calling (single-threaded) process; it is
/// inherited by everything it starts. Sets `no_new_privs` (required).
pub(crate) fn deny_network() -> Result<(), String> {
    let program = network_filter()?;
    seccompiler::apply_filter(&program).map_err(|e| e.to_string())?;
    if let Some(guard) = x32_guard() {
        seccompiler::apply_filter(&guard).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// The compiled filter for the running architecture.
pub fn network_filter() -> Result<BpfProgram, String> {
    let arch = target_arch()?;
    let unix_only = || -> Result<Vec<SeccompRule>, String> {
        let not_unix = SeccompCondition::new(
            0,
            SeccompCmpArgLen::Dword,
            SeccompCmpOp::Ne,
            libc::AF_UNIX as u64,
        )
        .map_err(|e| e.to_string())?;
        Ok(vec![
            SeccompRule::new(vec![not_unix]).map_err(|e| e.to_string())?,
        ])
    };
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    rules.insert(libc::SYS_socket, unix_only()?);
    rules.insert(libc::SYS_socketpair, unix_only()?);
    // An empty rule list matches the syscall unconditionally.
    for nr in [
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
        libc::SYS_unshare,
        libc::SYS_setns,
    ] {
        rules.insert(nr, Vec::new());
    }
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .map_err(|e| e.to_string())?;
    BpfProgram::try_from(filter).map_err(|e| e.to_string())
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
        if cfg!(target_arch = "x86_64") {
            assert_eq!(x32_guard().unwrap().len(), 6);
        }
    }
}
