//! The daemon side: [`SubprocessSandbox`] starts the launcher, hands it the
//! spec on stdin, decodes its frames, and keeps an outer deadline (the spec's
//! timeout plus a grace period) after which the launcher's whole process group
//! is SIGKILLed — so even a wedged launcher cannot outlive its budget.

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};

use crate::launcher::{
    MAX_FRAME, Report, Request, SANDBOX_GID, SANDBOX_UID, TAG_REPORT, TAG_STDERR, TAG_STDOUT,
    encode_request,
};
use crate::spec::{Confinement, SandboxError, SandboxOutput, SandboxSpec};

/// Extra time the launcher gets beyond the command's timeout to clean up.
pub(crate) const LAUNCHER_GRACE: Duration = Duration::from_secs(5);

/// How to start the launcher: a program and leading arguments, e.g.
/// `silas __sandbox-exec` or the `silas-sandbox-exec` binary.
#[derive(Clone, Debug)]
pub struct Launcher {
    pub program: PathBuf,
    pub args: Vec<String>,
}

impl Launcher {
    /// The `silas-sandbox-exec` binary in the same target directory as the
    /// running executable (tests and benches live in `target/<profile>/deps`).
    pub fn sibling_binary() -> Result<Launcher, SandboxError> {
        let mut dir = std::env::current_exe().map_err(|e| {
            SandboxError::Launcher(format!("cannot locate the running executable: {e}"))
        })?;
        dir.pop();
        if dir.ends_with("deps") {
            dir.pop();
        }
        let program = dir.join("silas-sandbox-exec");
        if !program.is_file() {
            return Err(SandboxError::Launcher(format!(
                "{} not built (build the silas-sandbox package's binaries)",
                program.display()
            )));
        }
        Ok(Launcher {
            program,
            args: Vec::new(),
        })
    }

    /// The running executable in launcher mode (`<exe> __sandbox-exec`).
    pub fn current_exe() -> Result<Launcher, SandboxError> {
        let program = std::env::current_exe().map_err(|e| {
            SandboxError::Launcher(format!("cannot locate the silas executable: {e}"))
        })?;
        Ok(Launcher {
            program,
            args: vec![crate::LAUNCHER_ARG.to_string()],
        })
    }
}

/// An execution id usable as one directory name under a work base: ASCII
/// letters, digits, `-` and `_` only, so it can never name a path elsewhere.
pub fn is_plain_dir_name(execution_id: &str) -> bool {
    !execution_id.is_empty()
        && execution_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// The default sandbox backend (§9.1): one launcher process per execution.
#[derive(Clone, Debug)]
pub struct SubprocessSandbox {
    launcher: Launcher,
}

impl SubprocessSandbox {
    pub fn new(launcher: Launcher) -> Self {
        SubprocessSandbox { launcher }
    }

    /// A fresh, private work directory `base/<execution_id>` for one run,
    /// owned by the sandbox user when the daemon runs as root.
    pub fn fresh_work_dir(&self, base: &Path, execution_id: &str) -> Result<PathBuf, SandboxError> {
        if !is_plain_dir_name(execution_id) {
            return Err(SandboxError::Invalid(format!(
                "unsafe execution id {execution_id:?}"
            )));
        }
        let dir = base.join(execution_id);
        std::fs::DirBuilder::new()
            .recursive(true)
            // Traversable so the unprivileged sandbox user reaches its own dir.
            .mode(0o711)
            .create(base)
            .and_then(|_| std::fs::DirBuilder::new().mode(0o700).create(&dir))
            .map_err(|e| {
                SandboxError::Invalid(format!("cannot create work dir {}: {e}", dir.display()))
            })?;
        if rustix::process::geteuid().is_root() {
            rustix::fs::chown(
                &dir,
                Some(rustix::fs::Uid::from_raw(SANDBOX_UID)),
                Some(rustix::fs::Gid::from_raw(SANDBOX_GID)),
            )
            .map_err(|e| {
                SandboxError::Invalid(format!(
                    "cannot hand {} to the sandbox user: {e}",
                    dir.display()
                ))
            })?;
        }
        Ok(dir)
    }

    /// Hand a prepared tree (a workspace copy) to the sandbox user when the
    /// daemon runs as root, so the command can work in it; otherwise the
    /// daemon's own files already are the sandbox's. Symlinks are changed
    /// themselves, never followed: a link in the copy cannot make the daemon
    /// give away a file outside it. A root that is itself a symlink is refused.
    pub fn hand_over_tree(&self, root: &Path) -> Result<(), SandboxError> {
        let meta = std::fs::symlink_metadata(root)
            .map_err(|e| SandboxError::Invalid(format!("cannot read {}: {e}", root.display())))?;
        if !meta.is_dir() {
            return Err(SandboxError::Invalid(format!(
                "{} is not a directory",
                root.display()
            )));
        }
        if !rustix::process::geteuid().is_root() {
            return Ok(());
        }
        let uid = Some(rustix::fs::Uid::from_raw(SANDBOX_UID));
        let gid = Some(rustix::fs::Gid::from_raw(SANDBOX_GID));
        let mut stack = vec![root.to_path_buf()];
        while let Some(path) = stack.pop() {
            rustix::fs::chownat(
                rustix::fs::CWD,
                &path,
                uid,
                gid,
                rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
            )
            .map_err(|e| {
                SandboxError::Invalid(format!(
                    "cannot hand {} to the sandbox user: {e}",
                    path.display()
                ))
            })?;
            let is_dir = std::fs::symlink_metadata(&path)
                .map(|m| m.is_dir())
                .unwrap_or(false);
            if is_dir {
                let entries = std::fs::read_dir(&path).map_err(|e| {
                    SandboxError::Invalid(format!("cannot list {}: {e}", path.display()))
                })?;
                for entry in entries.flatten() {
                    stack.push(entry.path());
                }
            }
        }
        Ok(())
    }

    /// Run one command. Errors mean it did not run as asked; a command that
    /// ran and failed is an `Ok` with its termination.
    pub async fn run(&self, spec: &SandboxSpec) -> Result<SandboxOutput, SandboxError> {
        let started = Instant::now();
        let input = encode_request(&Request {
            spec: spec.clone(),
            stream: false,
        })?;
        let mut child = self.start_launcher(true)?;
        let pid = child.id();
        // Until the report is in, the whole group dies with this future: a
        // caller that stops waiting (a cancelled work item) must stop the
        // command too. Killing only the launcher (kill_on_drop) left the
        // command running, re-parented to init, to its own end.
        let group = GroupGuard(pid);
        if let Some(mut stdin) = child.stdin.take() {
            stdin
                .write_all(&input)
                .await
                .map_err(|e| SandboxError::Launcher(format!("cannot send the spec: {e}")))?;
        }
        let mut stdout = child
            .stdout
            .take()
            .ok_or_else(|| SandboxError::Launcher("launcher has no stdout".into()))?;

        let budget = spec.timeout + LAUNCHER_GRACE;
        let frames =
            tokio::time::timeout(budget, read_frames(&mut stdout, spec.max_output_bytes)).await;
        let frames = match frames {
            Ok(f) => f,
            Err(_) => {
                drop(group);
                let _ = child.kill().await;
                return Err(SandboxError::Timeout(spec.timeout.as_secs()));
            }
        };
        let _ = child.wait().await;
        // Reaped: the pid may be reused from here on.
        group.disarm();
        let (stdout_bytes, stderr_bytes, report) = frames?;
        let report = report
            .ok_or_else(|| SandboxError::Launcher("launcher ended without a report".into()))?;
        let termination = report.result?;
        let confinement = report
            .confinement
            .ok_or_else(|| SandboxError::Launcher("report without confinement".into()))?;
        Ok(SandboxOutput {
            termination,
            stdout: with_marker(stdout_bytes, report.stdout_dropped),
            stderr: with_marker(stderr_bytes, report.stderr_dropped),
            stdout_dropped: report.stdout_dropped,
            stderr_dropped: report.stderr_dropped,
            duration: started.elapsed(),
            confinement,
        })
    }

    /// Start the launcher process (its stderr discarded: the report frame
    /// carries every message).
    pub(crate) fn start_launcher(&self, kill_on_drop: bool) -> Result<Child, SandboxError> {
        Command::new(&self.launcher.program)
            .args(&self.launcher.args)
            .env_clear()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(kill_on_drop)
            .spawn()
            .map_err(|e| {
                SandboxError::Launcher(format!(
                    "cannot start {}: {e}",
                    self.launcher.program.display()
                ))
            })
    }

    /// Run `/bin/true` confined, without network, in a fresh work dir under
    /// `base` (removed afterwards), and say how it was confined: which
    /// network isolation this host grants the daemon and the landlock ABI.
    /// An error means commands cannot run here (`E_SANDBOX_UNAVAILABLE`
    /// names the missing kernel feature).
    pub async fn probe(&self, base: &Path) -> Result<Confinement, SandboxError> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let id = format!("probe-{}-{nanos}", std::process::id());
        let work = self.fresh_work_dir(base, &id)?;
        let mut spec = SandboxSpec::new(vec!["/bin/true".into()], work.clone());
        spec.timeout = Duration::from_secs(10);
        let result = self.run(&spec).await;
        // Best effort: a leftover empty dir is harmless.
        let _ = std::fs::remove_dir_all(&work);
        let out = result?;
        if !out.success() {
            return Err(SandboxError::Launcher(format!(
                "the probe command ended {:?}",
                out.termination
            )));
        }
        Ok(out.confinement)
    }
}

type Frames = (Vec<u8>, Vec<u8>, Option<Report>);

async fn read_frames(
    src: &mut (impl AsyncReadExt + Unpin),
    cap: usize,
) -> Result<Frames, SandboxError> {
    let (mut out, mut err, mut report) = (Vec::new(), Vec::new(), None);
    while let Some((tag, payload)) = read_frame(src).await? {
        let len = payload.len();
        match tag {
            TAG_STDOUT if out.len() + len <= cap => out.extend_from_slice(&payload),
            TAG_STDERR if err.len() + len <= cap => err.extend_from_slice(&payload),
            TAG_STDOUT | TAG_STDERR => {
                return Err(SandboxError::Launcher(
                    "launcher exceeded the output cap".into(),
                ));
            }
            TAG_REPORT => report = Some(decode_report(&payload)?),
            t => return Err(SandboxError::Launcher(format!("unknown frame tag {t}"))),
        }
    }
    Ok((out, err, report))
}

/// One launcher frame (tag, payload); `None` at a clean end of stream.
pub(crate) async fn read_frame(
    src: &mut (impl AsyncReadExt + Unpin),
) -> Result<Option<(u8, Vec<u8>)>, SandboxError> {
    let mut header = [0u8; 5];
    match src.read_exact(&mut header).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => {
            return Err(SandboxError::Launcher(format!(
                "reading launcher output: {e}"
            )));
        }
    }
    let len = u32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize;
    if len > MAX_FRAME {
        return Err(SandboxError::Launcher(format!(
            "oversized frame ({len} bytes)"
        )));
    }
    let mut payload = vec![0u8; len];
    src.read_exact(&mut payload)
        .await
        .map_err(|e| SandboxError::Launcher(format!("truncated frame: {e}")))?;
    Ok(Some((header[0], payload)))
}

pub(crate) fn decode_report(payload: &[u8]) -> Result<Report, SandboxError> {
    serde_json::from_slice(payload)
        .map_err(|e| SandboxError::Launcher(format!("malformed report: {e}")))
}

fn with_marker(bytes: Vec<u8>, dropped: u64) -> String {
    let mut s = String::from_utf8_lossy(&bytes).into_owned();
    if dropped > 0 {
        s.push_str(&format!("\n[output truncated: {dropped} more bytes]"));
    }
    s
}

/// SIGKILLs the launcher's process group (it leads its own session, and
/// the command is in it) when dropped armed.
struct GroupGuard(Option<u32>);

impl GroupGuard {
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        crate::process::kill_group(self.0);
    }
}
