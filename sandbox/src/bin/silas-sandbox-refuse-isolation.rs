//! Test helper: `silas-sandbox-refuse-isolation PROGRAM [ARGS...]` runs
//! PROGRAM under seccomp filters that make `unshare` fail with EPERM and
//! `seccomp`/`prctl(PR_SET_SECCOMP)` fail with EINVAL — a real-kernel stand-in
//! for a host that allows neither namespaces nor seccomp filters, so the
//! sandbox's fail-closed path can be tested. It only ever removes abilities.

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

fn install() -> Result<(), String> {
    // The `seccomp` refusal goes last: after it no filter can be installed.
    for program in [
        refuse(libc::SYS_unshare, None, libc::EPERM)?,
        refuse(
            libc::SYS_prctl,
            Some(libc::PR_SET_SECCOMP as u64),
            libc::EINVAL,
        )?,
        refuse(libc::SYS_seccomp, None, libc::EINVAL)?,
    ] {
        seccompiler::apply_filter(&program).map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((program, rest)) = args.split_first() else {
        eprintln!("usage: silas-sandbox-refuse-isolation PROGRAM [ARGS...]");
        return ExitCode::from(2);
    };
    if let Err(e) = install() {
        eprintln!("cannot install the refusing filters: {e}");
        return ExitCode::from(2);
    }
    let e = std::process::Command::new(program).args(rest).exec();
    eprintln!("cannot run {program}: {e}");
    ExitCode::from(2)
}
