//! Long-lived sandboxed processes (setup scripts, MCP servers): the daemon
//! side of the launcher's stream mode ([`crate::stream`]).
//!
//! [`SubprocessSandbox::spawn`] isolates exactly as a one-shot run does and
//! fails closed the same way: it returns only once the launcher reports the
//! command started confined, or with the launcher's error. The caller gets a
//! [`SandboxProcess`]: its stdin (an `AsyncWrite`) and stdout (an `AsyncRead`,
//! e.g. for `BufReader::lines`) are in-memory pipes that two tasks frame to
//! and from the launcher.
//!
//! **Lifetime:** dropping the [`SandboxProcess`] (or [`SandboxProcess::kill`])
//! closes the launcher's stdin; the launcher then kills every descendant of
//! the command, even ones that left its session. If the launcher has not
//! ended [`LAUNCHER_GRACE`] later, its process group is SIGKILLed. The
//! spec's timeout bounds the whole lifetime.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio::process::{Child, ChildStdin, ChildStdout};
use tokio::sync::{oneshot, watch};

use crate::launcher::{
    Report, Request, TAG_CLOSE_INPUT, TAG_INPUT, TAG_REPORT, TAG_STARTED, TAG_STDERR, TAG_STDOUT,
    encode_request,
};
use crate::manager::{LAUNCHER_GRACE, SubprocessSandbox, decode_report, read_frame};
use crate::spec::{Confinement, SandboxError, SandboxSpec, Termination};

/// Buffer of each in-memory pipe between the caller and the framing tasks.
const PIPE_BUFFER: usize = 64 * 1024;
/// How long the launcher may take to isolate and start the command.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// How a long-lived process ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessExit {
    pub termination: Termination,
    /// Its stderr, up to the spec's `max_output_bytes`.
    pub stderr: String,
}

/// A running sandboxed command. Dropping it kills the command and every
/// descendant.
#[derive(Debug)]
pub struct SandboxProcess {
    stdin: Option<DuplexStream>,
    stdout: Option<DuplexStream>,
    confinement: Confinement,
    exit: Option<oneshot::Receiver<Result<ProcessExit, SandboxError>>>,
    /// `true` (or dropped) = stop: the launcher's stdin is closed.
    stop: watch::Sender<bool>,
    pid: Option<u32>,
}

impl SandboxProcess {
    /// How the command is confined.
    pub fn confinement(&self) -> Confinement {
        self.confinement
    }

    /// The launcher's pid (the command is its child).
    pub fn launcher_pid(&self) -> Option<u32> {
        self.pid
    }

    /// The command's stdin; dropping it closes the command's stdin (the
    /// command keeps running).
    pub fn take_stdin(&mut self) -> Option<DuplexStream> {
        self.stdin.take()
    }

    /// The command's stdout, as it comes.
    pub fn take_stdout(&mut self) -> Option<DuplexStream> {
        self.stdout.take()
    }

    /// Kill the command and every descendant now.
    pub fn kill(&self) {
        let _ = self.stop.send(true);
    }

    /// Wait for the command to end (by itself, by [`kill`](Self::kill) or at
    /// the timeout). A second call returns an error.
    pub async fn wait(&mut self) -> Result<ProcessExit, SandboxError> {
        let rx = self
            .exit
            .take()
            .ok_or_else(|| SandboxError::Launcher("already waited".into()))?;
        rx.await
            .map_err(|_| SandboxError::Launcher("the supervising task ended".into()))?
    }
}

impl SubprocessSandbox {
    /// Start a long-lived command under the same confinement as [`run`]
    /// (see the module docs). Errors mean it is not running.
    ///
    /// [`run`]: SubprocessSandbox::run
    pub async fn spawn(&self, spec: &SandboxSpec) -> Result<SandboxProcess, SandboxError> {
        let request = encode_request(&Request {
            spec: spec.clone(),
            stream: true,
        })?;
        // Not killed on drop: the launcher must live to kill the command's
        // descendants; the supervising task holds the backstop instead.
        let mut child = self.start_launcher(false)?;
        let pid = child.id();
        let (Some(mut to_launcher), Some(mut from_launcher)) =
            (child.stdin.take(), child.stdout.take())
        else {
            kill_group(pid);
            return Err(SandboxError::Launcher("launcher without pipes".into()));
        };
        if let Err(e) = to_launcher.write_all(&request).await {
            kill_group(pid);
            return Err(SandboxError::Launcher(format!("cannot send the spec: {e}")));
        }
        let started = tokio::time::timeout(START_TIMEOUT, read_frame(&mut from_launcher)).await;
        let confinement = match started {
            Ok(Ok(Some((TAG_STARTED, payload)))) => serde_json::from_slice::<Confinement>(&payload)
                .map_err(|e| SandboxError::Launcher(format!("malformed start frame: {e}"))),
            Ok(Ok(Some((TAG_REPORT, payload)))) => match decode_report(&payload) {
                Ok(Report { result: Err(e), .. }) => Err(e),
                Ok(_) => Err(SandboxError::Launcher("ended before starting".into())),
                Err(e) => Err(e),
            },
            Ok(Ok(Some((tag, _)))) => Err(SandboxError::Launcher(format!(
                "unexpected frame {tag} before start"
            ))),
            Ok(Ok(None)) => Err(SandboxError::Launcher(
                "launcher ended without a report".into(),
            )),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(SandboxError::Timeout(START_TIMEOUT.as_secs())),
        };
        let confinement = match confinement {
            Ok(c) => c,
            Err(e) => {
                kill_group(pid);
                let _ = child.wait().await;
                return Err(e);
            }
        };

        let (stop, stop_rx) = watch::channel(false);
        let (caller_in, task_in) = tokio::io::duplex(PIPE_BUFFER);
        let (caller_out, task_out) = tokio::io::duplex(PIPE_BUFFER);
        let (exit_tx, exit_rx) = oneshot::channel();
        tokio::spawn(write_input(task_in, to_launcher, stop_rx.clone()));
        let lifetime = spec.timeout + LAUNCHER_GRACE;
        let cap = spec.max_output_bytes;
        tokio::spawn(async move {
            let result = supervise(child, from_launcher, task_out, stop_rx, lifetime, cap).await;
            let _ = exit_tx.send(result);
        });
        Ok(SandboxProcess {
            stdin: Some(caller_in),
            stdout: Some(caller_out),
            confinement,
            exit: Some(exit_rx),
            stop,
            pid,
        })
    }
}

/// SIGKILL the launcher's process group (it leads its own session).
pub(crate) fn kill_group(pid: Option<u32>) {
    if let Some(p) = pid.and_then(|p| rustix::process::Pid::from_raw(p as i32)) {
        let _ = rustix::process::kill_process_group(p, rustix::process::Signal::KILL);
    }
}

/// Resolves once a stop is asked for or the handle is gone.
async fn stopped(mut stop: watch::Receiver<bool>) {
    // An error means the sender (the handle) was dropped: also a stop.
    let _ = stop.wait_for(|s| *s).await;
}

/// Caller's stdin → `I` frames; its end → one `C` frame. The launcher's
/// stdin stays open until the stop, whose end-of-file kills everything.
async fn write_input(
    mut from_caller: DuplexStream,
    mut to: ChildStdin,
    stop: watch::Receiver<bool>,
) {
    let forward = async {
        let mut buf = vec![0u8; PIPE_BUFFER];
        loop {
            let n = from_caller.read(&mut buf).await.unwrap_or(0);
            let tag = if n == 0 { TAG_CLOSE_INPUT } else { TAG_INPUT };
            if to.write_all(&frame(tag, &buf[..n])).await.is_err() || n == 0 {
                return;
            }
        }
    };
    tokio::select! {
        _ = forward => stopped(stop).await,
        _ = stopped(stop.clone()) => {}
    }
    drop(to);
}

fn frame(tag: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(5 + payload.len());
    f.push(tag);
    // Payloads are at most PIPE_BUFFER bytes.
    f.extend_from_slice(
        &u32::try_from(payload.len())
            .unwrap_or(u32::MAX)
            .to_be_bytes(),
    );
    f.extend_from_slice(payload);
    f
}

/// Launcher frames → the caller's stdout; collect stderr and the report;
/// enforce the lifetime and the stop backstop; reap the launcher.
async fn supervise(
    mut child: Child,
    mut from: ChildStdout,
    mut to_caller: DuplexStream,
    stop: watch::Receiver<bool>,
    lifetime: Duration,
    cap: usize,
) -> Result<ProcessExit, SandboxError> {
    let pid = child.id();
    let mut stderr = Vec::new();
    let pump = async {
        let mut report = None;
        while let Some((tag, payload)) = read_frame(&mut from).await? {
            match tag {
                // A caller that stopped reading loses output, not the process.
                TAG_STDOUT => {
                    let _ = to_caller.write_all(&payload).await;
                }
                TAG_STDERR => {
                    let room = cap.saturating_sub(stderr.len());
                    stderr.extend_from_slice(&payload[..payload.len().min(room)]);
                }
                TAG_REPORT => report = Some(decode_report(&payload)?),
                t => return Err(SandboxError::Launcher(format!("unknown frame tag {t}"))),
            }
        }
        report.ok_or_else(|| SandboxError::Launcher("launcher ended without a report".into()))
    };
    let backstop = async {
        stopped(stop).await;
        tokio::time::sleep(LAUNCHER_GRACE).await;
    };
    let outcome = tokio::select! {
        r = tokio::time::timeout(lifetime, pump) => r.unwrap_or(Err(SandboxError::Timeout(
            lifetime.saturating_sub(LAUNCHER_GRACE).as_secs(),
        ))),
        _ = backstop => Err(SandboxError::Launcher(
            "the launcher did not end after the stop; killed".into(),
        )),
    };
    drop(to_caller);
    if outcome.is_err() {
        kill_group(pid);
        let _ = child.start_kill();
    }
    let _ = child.wait().await;
    let report = outcome?;
    Ok(ProcessExit {
        termination: report.result?,
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
    })
}
