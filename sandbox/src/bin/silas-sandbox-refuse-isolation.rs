//! Test helper: `silas-sandbox-refuse-isolation [--namespaces-only] PROGRAM
//! [ARGS...]` runs PROGRAM under seccomp filters that make `unshare` fail
//! with EPERM and `seccomp`/`prctl(PR_SET_SECCOMP)` fail with EINVAL — a
//! real-kernel stand-in for a host that allows neither namespaces nor seccomp
//! filters, so the sandbox's fail-closed path can be tested. With
//! `--namespaces-only` only `unshare` fails: a host that refuses namespaces
//! (the seccomp fallback's case). It only ever removes abilities.

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::process::ExitCode;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

/// A filter failing syscall `nr` (when its first argument equals `arg0`, if
/// given) with `errno`, allowing everything else.
fn refuse(nr: i64, arg0: Option<u64>, errno: i32) -> Result<BpfProgram, String> {
    let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(|e| e.to_string())?;
    let rule = match arg0 {
        Some(v) => {
            let c = SeccompCondition::new(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, v)
                .map_err(|e| e.to_string())?;
            vec![SeccompRule::new(vec![c]).map_err(|e| e.to_string())?]
        }
        None => Vec::new(),
    };
    let filter = SeccompFilter::new(
        BTreeMap::from([(nr, rule)]),
        SeccompAction::Allow,
        SeccompAction::Errno(errno as u32),
        arch,
    )
    .map_err(|e| e.to_string())?;
    BpfProgram::try_from(filter).map_err(|e| e.to_string())
}

fn install(namespaces_only: bool) -> Result<(), String> {
    let mut programs = vec![refuse(libc::SYS_unshare, None, libc::EPERM)?];
    if !namespaces_only {
        // The `seccomp` refusal goes last: after it no filter can be installed.
        programs.push(refuse(
            libc::SYS_prctl,
            Some(libc::PR_SET_SECCOMP as u64),
            libc::EINVAL,
        )?);
        programs.push(refuse(libc::SYS_seccomp, None, libc::EINVAL)?);
    }
    for program in programs {
        seccompiler::apply_filter(&program).map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn main() -> ExitCode {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let namespaces_only = args.first().is_some_and(|a| a == "--namespaces-only");
    if namespaces_only {
        args.remove(0);
    }
    let Some((program, rest)) = args.split_first() else {
        eprintln!("usage: silas-sandbox-refuse-isolation [--namespaces-only] PROGRAM [ARGS...]");
        return ExitCode::from(2);
    };
    if let Err(e) = install(namespaces_only) {
        eprintln!("cannot install the refusing filters: {e}");
        return ExitCode::from(2);
    }
    let e = std::process::Command::new(program).args(rest).exec();
    eprintln!("cannot run {program}: {e}");
    ExitCode::from(2)
}
