//! The control socket's wire protocol: one JSON object per line, one
//! [`Request`] enum from the CLI and one [`Response`] enum from the daemon,
//! versioned by [`PROTOCOL_VERSION`] (sent in [`Request::Hello`]).
//!
//! Frames are bounded ([`MAX_REQUEST_BYTES`] in, [`MAX_RESPONSE_BYTES`]
//! out): [`read_frame`] never buffers more than its limit and skips the rest
//! of an oversized line, so the connection stays usable after it.

use serde::{Deserialize, Serialize};
use silas_core::model::devices::OwnerDevice;
use silas_core::model::work::{WorkItem, WorkItemStatus, WorkItemType};
use silas_core::model::workspace::Workspace;
use silas_core::{ErrorCode, Timestamp};
use silas_storage::{AuditEntry, SealReport};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite, AsyncWriteExt};

use crate::ws::QueuePressure;

/// Bumped on any incompatible change to [`Request`] or [`Response`].
pub const PROTOCOL_VERSION: u32 = 1;
/// The socket's file name inside the data dir.
pub const SOCKET_FILE: &str = "control.sock";
/// Largest request line the daemon reads (requests are small).
pub const MAX_REQUEST_BYTES: usize = 64 * 1024;
/// Largest response line the CLI reads (an audit tail can be long).
pub const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;
/// Most audit entries one `audit_tail` returns.
pub const MAX_TAIL_LINES: usize = 10_000;

/// An owner credential on the wire: never printed by `Debug`, wiped on drop.
#[derive(Clone, Serialize, Deserialize)]
#[serde(transparent)]
pub struct OwnerToken(String);

impl OwnerToken {
    pub fn new(token: String) -> Self {
        OwnerToken(token)
    }
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for OwnerToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OwnerToken(<redacted>)")
    }
}

impl Drop for OwnerToken {
    fn drop(&mut self) {
        zeroize::Zeroize::zeroize(&mut self.0);
    }
}

/// CLI → daemon. The first request on a connection must be `hello`.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    /// Protocol version and the owner credential.
    Hello {
        version: u32,
        token: OwnerToken,
    },
    Status,
    /// Shut down in order, as on SIGTERM (`silas stop`).
    Stop,
    AuditTail {
        lines: usize,
    },
    /// `None`: the whole chain; `Some("latest")` or a checkpoint id.
    AuditVerify {
        from_checkpoint: Option<String>,
    },
    /// The owner has seen the tampering recorded so far.
    AuditAcknowledge,
    Pair,
    DevicesList,
    DevicesRevoke {
        device_id: String,
    },
    WorkList,
    WorkShow {
        id: String,
    },
    WorkCancel {
        id: String,
    },
    ConfigCheck,
    /// The owner's registered workspaces (issue #15).
    WorkspaceList,
    /// Register `path` (absolute: the CLI resolves it against its own cwd).
    WorkspaceAdd {
        name: String,
        path: String,
        writable: bool,
    },
    WorkspaceRemove {
        name: String,
    },
    /// Erase memories (issue #18): one of `id`, `scope` + `query`, `scope`.
    MemoryForget {
        #[serde(default)]
        id: Option<String>,
        #[serde(default)]
        scope: Option<String>,
        #[serde(default)]
        query: Option<String>,
    },
    /// Write the bundle to `path` (absolute, resolved by the CLI).
    MemoryExport {
        path: String,
        #[serde(default)]
        since: Option<String>,
        #[serde(default)]
        include_raw: bool,
    },
    /// Read a bundle from `path`; `replace` swaps the whole memory.
    MemoryImport {
        path: String,
        #[serde(default)]
        replace: bool,
    },
    /// Start the setup conversation of an installed connection skill
    /// (issue #17 item 6); `settings` are non-secret environment values the
    /// skill declares (a server URL).
    ConnectionAdd {
        skill: String,
        #[serde(default)]
        settings: std::collections::BTreeMap<String, String>,
    },
    ConnectionList,
    /// Ask the owner (card) for more service permissions on a connection.
    ConnectionEscalate {
        connection_id: String,
        permissions: Vec<String>,
        reason: String,
    },
}

/// Daemon → CLI: exactly one per request.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Response {
    Welcome {
        version: u32,
    },
    Status(Box<StatusReport>),
    /// The daemon (`pid`) has begun its orderly shutdown.
    Stopping {
        pid: u32,
    },
    AuditTail {
        entries: Vec<AuditEntry>,
    },
    AuditVerified(AuditVerifyReport),
    /// How many tampering records were acknowledged (0: none were open).
    AuditAcknowledged {
        entries: usize,
    },
    PairingLink {
        link: String,
    },
    Devices {
        devices: Vec<DeviceInfo>,
    },
    DeviceRevoked {
        device_id: String,
        /// It was revoked before: nothing changed.
        #[serde(default)]
        already: bool,
    },
    WorkItems {
        items: Vec<WorkSummary>,
    },
    WorkItem {
        item: Box<WorkItem>,
        /// What became of its change set (apply, decline, undo), oldest
        /// first; empty when it had none (or long ago).
        #[serde(default)]
        changes: Vec<silas_core::model::workspace::ChangeStep>,
    },
    WorkCancelled(CancelReport),
    Config(Box<ConfigReport>),
    Workspaces {
        workspaces: Vec<Workspace>,
    },
    WorkspaceAdded {
        workspace: Workspace,
    },
    WorkspaceRemoved {
        workspace: Workspace,
    },
    MemoryForgotten {
        ids: Vec<String>,
    },
    MemoryExported {
        records: usize,
    },
    MemoryImported {
        records: usize,
        replaced: usize,
    },
    /// The setup runs in the daemon; its cards go to the owner's channels.
    ConnectionSetupStarted {
        connection_id: String,
    },
    Connections {
        connections: Vec<silas_core::model::connections::Connection>,
    },
    /// The escalation card was sent; the answer is audited.
    ConnectionEscalationAsked {
        connection_id: String,
    },
    /// The request failed or was refused; the connection stays open.
    Error {
        code: ErrorCode,
        message: String,
    },
}

impl Response {
    pub fn error(code: ErrorCode, message: impl Into<String>) -> Self {
        Response::Error {
            code,
            message: message.into(),
        }
    }
}

/// `silas status`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StatusReport {
    pub version: String,
    pub pid: u32,
    pub started_at: Timestamp,
    pub uptime_seconds: u64,
    /// `http://host:port` of the web channel.
    pub web_url: String,
    /// Open web connections.
    pub connections: usize,
    /// Turn-queue pressure; `None` while the turn runtime is restarting.
    pub queue: Option<QueuePressure>,
    /// Cards waiting for an answer (from the store).
    pub pending_cards: usize,
    /// Ids of the work items running now.
    pub running_work: Vec<String>,
    /// Registered scheduler jobs, soonest first (`None` when disabled).
    pub next_jobs: Option<Vec<NextJob>>,
    /// Model providers' circuit-breaker states (issue #16).
    #[serde(default)]
    pub providers: std::collections::BTreeMap<String, String>,
    /// Other channels' states (`telegram` → "ok", "paused: …").
    #[serde(default)]
    pub channels: std::collections::BTreeMap<String, String>,
    /// The models the agents use, or that the daemon runs offline (the
    /// `model: …` line `silas start` printed; the CLI's own environment may
    /// hold a key the daemon's does not).
    #[serde(default)]
    pub model: String,
}

/// One scheduler job as `silas status` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NextJob {
    pub job_id: String,
    pub action: String,
    pub target: Option<String>,
    pub schedule: String,
    pub next_fire: Option<Timestamp>,
}

/// `silas audit verify`: the hash chain checked, and the sealed report.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditVerifyReport {
    pub entries_checked: u64,
    pub seal: SealReport,
}

/// An owner device without its credential hash.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceInfo {
    pub device_id: String,
    pub label: String,
    pub created_at: Timestamp,
    pub last_seen: Option<Timestamp>,
    pub revoked: bool,
}

impl From<&OwnerDevice> for DeviceInfo {
    fn from(d: &OwnerDevice) -> Self {
        DeviceInfo {
            device_id: d.device_id.clone(),
            label: d.label.clone(),
            created_at: d.created_at,
            last_seen: d.last_seen,
            revoked: d.revoked,
        }
    }
}

/// One line of `silas work list`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkSummary {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: WorkItemType,
    pub title: String,
    pub status: WorkItemStatus,
    pub attempts: u64,
    pub parent: Option<String>,
    pub created_at: Timestamp,
}

impl From<&WorkItem> for WorkSummary {
    fn from(w: &WorkItem) -> Self {
        WorkSummary {
            id: w.id.clone(),
            kind: w.kind,
            title: w.title.clone(),
            status: w.status,
            attempts: w.attempts,
            parent: w.parent.clone(),
            created_at: w.created_at,
        }
    }
}

/// What `silas work cancel` did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CancelReport {
    pub id: String,
    /// The status it had when cancelled.
    pub previous: WorkItemStatus,
    /// The status it has now (`failed`; `done` for a goal).
    pub now: WorkItemStatus,
    /// It had already ended: nothing was done (`previous` == `now`).
    #[serde(default)]
    pub already_ended: bool,
    /// Whether a run was in flight and was stopped.
    pub was_running: bool,
    /// Further items ended with it (a project's unfinished tasks).
    pub also_cancelled: Vec<String>,
}

/// `silas config check` against the running daemon.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConfigReport {
    /// The file the daemon loaded, or "built-in defaults".
    pub source: String,
    /// The configuration in force, secrets replaced by [`REDACTED`].
    pub running: Box<silas_core::config::Config>,
    pub on_disk: OnDiskConfig,
}

/// The replacement text of a secret in a [`ConfigReport`].
pub const REDACTED: &str = "<redacted>";

/// The configuration file now, compared with the one in force.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum OnDiskConfig {
    Same,
    /// Valid, but differs in these top-level sections (a restart applies it).
    Differs {
        sections: Vec<String>,
    },
    /// Would not load or validate: one `error[CODE]: …` line per problem.
    Invalid {
        errors: Vec<String>,
    },
}

/// How one frame read ended.
#[derive(Debug, PartialEq, Eq)]
pub enum FrameRead {
    /// A complete line is in the buffer (without its newline).
    Frame,
    /// The line was longer than the limit; it was skipped.
    TooLarge,
    /// The peer closed (a partial last line is dropped).
    Eof,
}

/// Read one newline-terminated frame into `buf`, holding at most `max` bytes.
pub async fn read_frame<R: AsyncBufRead + Unpin>(
    r: &mut R,
    max: usize,
    buf: &mut Vec<u8>,
) -> std::io::Result<FrameRead> {
    buf.clear();
    let mut oversized = false;
    loop {
        let avail = r.fill_buf().await?;
        if avail.is_empty() {
            return Ok(FrameRead::Eof);
        }
        let (chunk, done) = match avail.iter().position(|b| *b == b'\n') {
            Some(i) => (i, true),
            None => (avail.len(), false),
        };
        if !oversized {
            if buf.len() + chunk > max {
                oversized = true;
                buf.clear();
            } else {
                buf.extend_from_slice(&avail[..chunk]);
            }
        }
        r.consume(if done { chunk + 1 } else { chunk });
        if done {
            return Ok(if oversized {
                FrameRead::TooLarge
            } else {
                FrameRead::Frame
            });
        }
    }
}

/// Write `msg` as one frame (JSON never contains a raw newline).
pub async fn write_frame<W: AsyncWrite + Unpin, T: Serialize>(
    w: &mut W,
    msg: &T,
) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(msg).map_err(std::io::Error::other)?;
    line.push(b'\n');
    w.write_all(&line).await?;
    w.flush().await
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use tokio::io::BufReader;

    #[tokio::test]
    async fn frames_are_split_on_newlines_and_bounded() {
        let input = b"{\"op\":\"status\"}\nAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\n{\"op\":\"work_list\"}\ntail";
        // A tiny read buffer: frames span several fills.
        let mut r = BufReader::with_capacity(4, &input[..]);
        let mut buf = Vec::new();
        assert_eq!(
            read_frame(&mut r, 20, &mut buf).await.unwrap(),
            FrameRead::Frame
        );
        let req: Request = serde_json::from_slice(&buf).unwrap();
        assert!(matches!(req, Request::Status));
        assert_eq!(
            read_frame(&mut r, 20, &mut buf).await.unwrap(),
            FrameRead::TooLarge
        );
        assert!(buf.is_empty());
        // The oversized line was skipped whole: the next frame is intact.
        assert_eq!(
            read_frame(&mut r, 20, &mut buf).await.unwrap(),
            FrameRead::Frame
        );
        assert_eq!(buf, b"{\"op\":\"work_list\"}");
        assert_eq!(
            read_frame(&mut r, 20, &mut buf).await.unwrap(),
            FrameRead::Eof
        );
    }

    #[tokio::test]
    async fn requests_and_responses_round_trip() {
        let mut out = Vec::new();
        write_frame(
            &mut out,
            &Request::Hello {
                version: PROTOCOL_VERSION,
                token: OwnerToken::new("s3cret".into()),
            },
        )
        .await
        .unwrap();
        write_frame(&mut out, &Response::error(ErrorCode::EChannelAuth, "no"))
            .await
            .unwrap();
        let text = String::from_utf8(out.clone()).unwrap();
        assert_eq!(text.lines().count(), 2);
        assert!(text.starts_with("{\"op\":\"hello\",\"version\":1,\"token\":\"s3cret\"}\n"));
        assert!(text.contains("\"code\":\"E_CHANNEL_AUTH\""), "{text}");
        let mut r = BufReader::new(&out[..]);
        let mut buf = Vec::new();
        read_frame(&mut r, MAX_REQUEST_BYTES, &mut buf)
            .await
            .unwrap();
        let req: Request = serde_json::from_slice(&buf).unwrap();
        match &req {
            Request::Hello { version, token } => {
                assert_eq!(*version, PROTOCOL_VERSION);
                assert_eq!(token.expose(), "s3cret");
            }
            other => panic!("{other:?}"),
        }
        // Debug never shows the credential.
        assert!(!format!("{req:?}").contains("s3cret"));
        read_frame(&mut r, MAX_RESPONSE_BYTES, &mut buf)
            .await
            .unwrap();
        let resp: Response = serde_json::from_slice(&buf).unwrap();
        assert!(matches!(
            resp,
            Response::Error {
                code: ErrorCode::EChannelAuth,
                ..
            }
        ));
    }

    #[test]
    fn unknown_ops_and_fields_are_refused() {
        assert!(serde_json::from_str::<Request>(r#"{"op":"format_disk"}"#).is_err());
        assert!(serde_json::from_str::<Request>(r#"{"op":"work_show","id":"w","x":1}"#).is_err());
        assert!(serde_json::from_str::<Request>(r#"{"op":"work_show"}"#).is_err());
        let r: Request = serde_json::from_str(r#"{"op":"work_show","id":"w1"}"#).unwrap();
        assert!(matches!(r, Request::WorkShow { id } if id == "w1"));
    }
}
