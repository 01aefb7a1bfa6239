//! The launcher's stream mode: the same isolation as a one-shot run, but the
//! command keeps running with a piped stdin, and its stdout is forwarded as it
//! comes (no cap: it is a protocol stream, e.g. an MCP server's; stderr keeps
//! the cap). The daemon side is [`crate::process`].
//!
//! After the request frame, the launcher's own stdin carries frames
//! (`I` = bytes for the command's stdin, `C` = close it). End-of-file there
//! means the daemon dropped the process (or died): every descendant is
//! killed at once. So nothing the command started outlives its handle.

use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::process::{Child, Stdio};
use std::time::Instant;

use rustix::event::{PollFd, PollFlags, Timespec};

use crate::isolate::isolate;
use crate::launcher::{
    MAX_FRAME, Report, Stream, TAG_CLOSE_INPUT, TAG_INPUT, TAG_STARTED, TAG_STDERR, TAG_STDOUT,
    drain, failure, kill_descendants, open_pidfd, spawn, validate, wait_child, write_frame,
};
use crate::spec::{SandboxError, SandboxSpec, Termination};

/// Input bytes held for the command before the launcher stops reading more
/// from the daemon (back-pressure instead of unbounded buffering).
const MAX_PENDING: usize = 1 << 20;

pub(crate) fn supervise(spec: &SandboxSpec, out: &mut impl Write) -> Report {
    let confinement = match validate(spec).and_then(|_| isolate(spec)) {
        Ok(c) => c,
        Err(e) => return failure(e),
    };
    let mut child = match spawn(spec, Stdio::piped()) {
        Ok(c) => c,
        Err(e) => return failure(e),
    };
    match serde_json::to_vec(&confinement) {
        Ok(json) => write_frame(out, TAG_STARTED, &json),
        Err(e) => {
            kill_descendants();
            return failure(SandboxError::Launcher(format!("cannot encode: {e}")));
        }
    }
    let mut streams = [
        Stream::new(
            child.stdout.take().map(OwnedFd::from),
            TAG_STDOUT,
            usize::MAX,
        ),
        Stream::new(
            child.stderr.take().map(OwnedFd::from),
            TAG_STDERR,
            spec.max_output_bytes,
        ),
    ];
    let input = child.stdin.take().map(OwnedFd::from);
    let result = pump(&mut child, &mut streams, input, spec, out);
    kill_descendants();
    drain(&mut streams, out);
    let [so, se] = streams.map(|s| s.dropped);
    Report {
        result,
        stdout_dropped: so,
        stderr_dropped: se,
        confinement: Some(confinement),
    }
}

/// What one poll slot watches.
#[derive(Clone, Copy)]
enum Slot {
    Output(usize),
    Exit,
    Daemon,
    Input,
}

/// The daemon's input frames, parsed as they arrive.
#[derive(Default)]
struct Inbox {
    raw: Vec<u8>,
    /// Bytes still to write to the command's stdin.
    pending: Vec<u8>,
    close_requested: bool,
}

impl Inbox {
    /// Move every complete frame out of `raw`. A malformed frame is a
    /// protocol error: the daemon side is this crate, so it means corruption.
    fn parse(&mut self) -> Result<(), SandboxError> {
        loop {
            let Some(header) = self.raw.get(..5) else {
                return Ok(());
            };
            let tag = header[0];
            let len = u32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize;
            if len > MAX_FRAME {
                return Err(SandboxError::Launcher(format!(
                    "oversized input frame ({len} bytes)"
                )));
            }
            if self.raw.len() < 5 + len {
                return Ok(());
            }
            match tag {
                TAG_INPUT if !self.close_requested => {
                    self.pending.extend_from_slice(&self.raw[5..5 + len]);
                }
                TAG_INPUT => {}
                TAG_CLOSE_INPUT => self.close_requested = true,
                t => {
                    return Err(SandboxError::Launcher(format!(
                        "unknown input frame tag {t}"
                    )));
                }
            }
            self.raw.drain(..5 + len);
        }
    }
}

/// Forward both ways until the command exits, the daemon goes away, or the
/// timeout passes — on this one thread, as in a one-shot run.
fn pump(
    child: &mut Child,
    streams: &mut [Stream; 2],
    mut input: Option<OwnedFd>,
    spec: &SandboxSpec,
    out: &mut impl Write,
) -> Result<Termination, SandboxError> {
    let deadline = Instant::now() + spec.timeout;
    let pidfd = open_pidfd(child)?;
    if let Some(fd) = &input {
        // A command that stops reading must not block the whole launcher.
        rustix::fs::fcntl_setfl(fd, rustix::fs::OFlags::NONBLOCK).map_err(|e| {
            kill_descendants();
            SandboxError::Launcher(format!("cannot set up the command's stdin: {e}"))
        })?;
    }
    let stdin = std::io::stdin();
    let daemon = stdin.as_fd();
    let mut inbox = Inbox::default();
    loop {
        let Some(remaining) = deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
        else {
            kill_descendants();
            return Ok(Termination::TimedOut);
        };
        let timeout = Timespec::try_from(remaining).ok();
        let mut slots = Vec::with_capacity(5);
        let mut fds = Vec::with_capacity(5);
        for (i, s) in streams.iter().enumerate() {
            if let Some(fd) = &s.fd {
                slots.push(Slot::Output(i));
                fds.push(PollFd::new(fd, PollFlags::IN));
            }
        }
        slots.push(Slot::Exit);
        fds.push(PollFd::new(&pidfd, PollFlags::IN));
        if inbox.pending.len() < MAX_PENDING {
            slots.push(Slot::Daemon);
            fds.push(PollFd::new(&daemon, PollFlags::IN));
        }
        if let Some(fd) = input.as_ref().filter(|_| !inbox.pending.is_empty()) {
            slots.push(Slot::Input);
            fds.push(PollFd::new(fd, PollFlags::OUT));
        }
        match rustix::event::poll(&mut fds, timeout.as_ref()) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => {
                kill_descendants();
                return Err(SandboxError::Launcher(format!("poll: {e}")));
            }
        }
        let ready: Vec<Slot> = slots
            .into_iter()
            .zip(&fds)
            .filter(|(_, p)| !p.revents().is_empty())
            .map(|(slot, _)| slot)
            .collect();
        drop(fds);
        let mut exited = false;
        for slot in ready {
            match slot {
                Slot::Output(i) => {
                    if let Some(s) = streams.get_mut(i) {
                        s.read_once(out);
                    }
                }
                Slot::Exit => exited = true,
                Slot::Daemon => {
                    let mut buf = [0u8; 64 * 1024];
                    match rustix::io::read(daemon, &mut buf) {
                        Ok(0) | Err(rustix::io::Errno::PIPE | rustix::io::Errno::BADF) => {
                            // The handle was dropped (or the daemon died):
                            // SIGKILL everything (which also reaps the command).
                            kill_descendants();
                            return Ok(Termination::Signaled { signal: 9 });
                        }
                        Ok(n) => {
                            inbox.raw.extend_from_slice(&buf[..n]);
                            if let Err(e) = inbox.parse() {
                                kill_descendants();
                                return Err(e);
                            }
                        }
                        Err(rustix::io::Errno::INTR | rustix::io::Errno::AGAIN) => {}
                        Err(e) => {
                            kill_descendants();
                            return Err(SandboxError::Launcher(format!("reading input: {e}")));
                        }
                    }
                }
                Slot::Input => {
                    if let Some(fd) = &input {
                        match rustix::io::write(fd, &inbox.pending) {
                            Ok(n) => {
                                inbox.pending.drain(..n);
                            }
                            Err(rustix::io::Errno::INTR | rustix::io::Errno::AGAIN) => {}
                            // The command closed its stdin: later input has nowhere to go.
                            Err(_) => {
                                input = None;
                                inbox.pending.clear();
                            }
                        }
                    }
                }
            }
        }
        if input.is_none() {
            inbox.pending.clear();
        }
        if inbox.close_requested && inbox.pending.is_empty() {
            input = None;
        }
        if exited {
            return wait_child(child);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(tag: u8, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![tag];
        f.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    #[test]
    fn input_frames_are_parsed_across_partial_reads() {
        let mut bytes = frame(TAG_INPUT, b"hello\n");
        bytes.extend(frame(TAG_INPUT, b"world\n"));
        bytes.extend(frame(TAG_CLOSE_INPUT, b""));
        bytes.extend(frame(TAG_INPUT, b"ignored after close\n"));
        let mut inbox = Inbox::default();
        for chunk in bytes.chunks(3) {
            inbox.raw.extend_from_slice(chunk);
            inbox.parse().unwrap();
        }
        assert_eq!(inbox.pending, b"hello\nworld\n");
        assert!(inbox.close_requested);
        assert!(inbox.raw.is_empty());
    }

    #[test]
    fn an_unknown_or_oversized_frame_is_a_protocol_error() {
        for raw in [frame(b'X', b""), vec![TAG_INPUT, 0xff, 0xff, 0xff, 0xff]] {
            let mut inbox = Inbox {
                raw,
                ..Inbox::default()
            };
            assert!(inbox.parse().is_err());
        }
    }
}
