//! The daemon side of the control socket: binding `{data_dir}/control.sock`
//! (stale-socket replacement, mode 0660, the daemon's group) and serving
//! connections.
//!
//! Every connection authenticates with an owner credential in its first
//! request ([`Request::Hello`]), checked by the same [`OwnerAuth`] as the web
//! channel: failures are audited and throttled per peer (the connecting
//! uid, from the kernel). Until then every other request is refused with
//! `E_CHANNEL_AUTH`. A malformed or oversized frame gets an
//! `E_CHANNEL_PROTOCOL` response and the connection stays open. Connections
//! are bounded ([`MAX_CONNECTIONS`]), idle ones closed after
//! [`IDLE_TIMEOUT`], and each request is bounded by [`REQUEST_TIMEOUT`].

use std::future::Future;
use std::io::ErrorKind;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use silas_core::ErrorCode;
use tokio::io::BufReader;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

use super::protocol::{
    FrameRead, MAX_REQUEST_BYTES, PROTOCOL_VERSION, Request, Response, read_frame, write_frame,
};
use crate::auth::{AuthOutcome, Credential, OwnerAuth, Peer};
use crate::ws::BoxFuture;

/// Connections served at once; more are told so and closed.
pub const MAX_CONNECTIONS: usize = 16;
/// Longest a request may take (an audit verification walks the whole log).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);
/// A connection with no request for this long is closed.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(300);
/// The channel name in authentication audit entries.
pub const CHANNEL: &str = "control";

/// What the daemon does with an authenticated request (never `hello`).
pub trait ControlBackend: Send + Sync + 'static {
    fn handle(&self, caller: &Credential, req: Request) -> BoxFuture<'_, Response>;
}

#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("another Silas daemon is already serving {0} (stop it first, or use another data dir)")]
    AlreadyRunning(PathBuf),
    #[error("{0} exists and is not a socket; remove it and start again")]
    NotASocket(PathBuf),
    #[error("cannot {what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
}

impl silas_core::Coded for ControlError {
    fn code(&self) -> ErrorCode {
        match self {
            ControlError::AlreadyRunning(_) => ErrorCode::ECfgInvalid,
            ControlError::NotASocket(_) | ControlError::Io { .. } => ErrorCode::ECfgIo,
        }
    }
}

fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> ControlError + use<> {
    let path = path.to_path_buf();
    move |source| ControlError::Io { what, path, source }
}

/// A bound, not yet serving, control socket.
pub struct ControlListener {
    listener: UnixListener,
    path: PathBuf,
}

/// Bind `path` (inside a tokio runtime). A leftover socket nobody listens
/// on is replaced; a live one means another daemon serves it. The socket is
/// set up under a temporary name (mode 0660, group `group`) and renamed into
/// place, so it is never reachable with wider permissions.
pub fn bind(path: &Path, group: Option<u32>) -> Result<ControlListener, ControlError> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => {
            match std::os::unix::net::UnixStream::connect(path) {
                Ok(_) => return Err(ControlError::AlreadyRunning(path.to_path_buf())),
                // ECONNREFUSED: nobody listens; the rename below replaces it.
                Err(e) if e.kind() == ErrorKind::ConnectionRefused => {
                    tracing::info!(path = %path.display(), "replacing a stale control socket");
                }
                Err(e) => return Err(io("probe", path)(e)),
            }
        }
        Ok(_) => return Err(ControlError::NotASocket(path.to_path_buf())),
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => return Err(io("inspect", path)(e)),
    }
    let tmp = path.with_extension(format!("sock.{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let std_listener = std::os::unix::net::UnixListener::bind(&tmp).map_err(io("bind", &tmp))?;
    let prepared = (|| {
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o660))
            .map_err(io("set permissions on", &tmp))?;
        if let Some(gid) = group {
            std::os::unix::fs::chown(&tmp, None, Some(gid))
                .map_err(io("set the group of", &tmp))?;
        }
        std_listener
            .set_nonblocking(true)
            .map_err(io("configure", &tmp))?;
        std::fs::rename(&tmp, path).map_err(io("move into place", path))
    })();
    if let Err(e) = prepared {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    let listener = UnixListener::from_std(std_listener).map_err(io("listen on", path))?;
    Ok(ControlListener {
        listener,
        path: path.to_path_buf(),
    })
}

impl ControlListener {
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Serve until `shutdown` resolves, then remove the socket file.
    pub fn serve(
        self,
        auth: Arc<OwnerAuth>,
        backend: Arc<dyn ControlBackend>,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> JoinHandle<()> {
        let ControlListener { listener, path } = self;
        let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
        tokio::spawn(async move {
            tokio::pin!(shutdown);
            let mut conns = tokio::task::JoinSet::new();
            loop {
                tokio::select! {
                    () = &mut shutdown => break,
                    accepted = listener.accept() => {
                        let Ok((stream, _)) = accepted else { continue };
                        match slots.clone().try_acquire_owned() {
                            Ok(permit) => {
                                let (auth, backend) = (auth.clone(), backend.clone());
                                conns.spawn(async move {
                                    connection(stream, auth, backend).await;
                                    drop(permit);
                                });
                            }
                            Err(_) => {
                                conns.spawn(refuse_busy(stream));
                            }
                        }
                    }
                    Some(_) = conns.join_next(), if !conns.is_empty() => {}
                }
            }
            conns.abort_all();
            let _ = std::fs::remove_file(&path);
        })
    }
}

async fn refuse_busy(mut stream: UnixStream) {
    let resp = Response::error(
        ErrorCode::EChannelRateLimited,
        format!("the daemon serves at most {MAX_CONNECTIONS} control connections at once"),
    );
    let _ = tokio::time::timeout(Duration::from_secs(1), write_frame(&mut stream, &resp)).await;
}

/// One connection: authenticate, then answer requests until it closes.
async fn connection(stream: UnixStream, auth: Arc<OwnerAuth>, backend: Arc<dyn ControlBackend>) {
    let peer = stream.peer_cred().ok().map(|c| Peer::LocalUid(c.uid()));
    let (rd, mut wr) = stream.into_split();
    let mut rd = BufReader::new(rd);
    let mut session = Session {
        auth,
        peer,
        who: None,
    };
    let mut buf = Vec::new();
    loop {
        let read = tokio::time::timeout(
            IDLE_TIMEOUT,
            read_frame(&mut rd, MAX_REQUEST_BYTES, &mut buf),
        )
        .await;
        let resp = match read {
            Err(_) | Ok(Err(_)) | Ok(Ok(FrameRead::Eof)) => break,
            Ok(Ok(FrameRead::TooLarge)) => Response::error(
                ErrorCode::EChannelProtocol,
                format!("request longer than {MAX_REQUEST_BYTES} bytes"),
            ),
            Ok(Ok(FrameRead::Frame)) => session.answer(&buf, backend.as_ref()).await,
        };
        if write_frame(&mut wr, &resp).await.is_err() {
            break;
        }
    }
}

/// A connection's authentication state.
pub struct Session {
    auth: Arc<OwnerAuth>,
    peer: Option<Peer>,
    who: Option<Credential>,
}

impl Session {
    pub fn new(auth: Arc<OwnerAuth>, peer: Option<Peer>) -> Self {
        Session {
            auth,
            peer,
            who: None,
        }
    }

    /// The response to one raw frame.
    pub async fn answer(&mut self, frame: &[u8], backend: &dyn ControlBackend) -> Response {
        let req = match serde_json::from_slice::<Request>(frame) {
            Ok(r) => r,
            // serde's message names the field or variant at fault; it goes
            // back to this peer only, never to a log.
            Err(e) => {
                return Response::error(
                    ErrorCode::EChannelProtocol,
                    format!("malformed request: {e}"),
                );
            }
        };
        if let Request::Hello { version, token } = &req {
            return self.hello(*version, token.expose());
        }
        // A device revoked since this connection authenticated loses it.
        if let Some(Credential::Device(id)) = &self.who
            && self.auth.is_revoked(id)
        {
            self.who = None;
        }
        let Some(who) = self.who.clone() else {
            return match self.auth.check_peer(self.peer, None, CHANNEL) {
                AuthOutcome::Throttled => throttled(),
                _ => Response::error(
                    ErrorCode::EChannelAuth,
                    "not authenticated: send hello with an owner credential first",
                ),
            };
        };
        match tokio::time::timeout(REQUEST_TIMEOUT, backend.handle(&who, req)).await {
            Ok(resp) => resp,
            Err(_) => Response::error(
                ErrorCode::EChannelTimeout,
                format!(
                    "the request took longer than {}s",
                    REQUEST_TIMEOUT.as_secs()
                ),
            ),
        }
    }

    fn hello(&mut self, version: u32, token: &str) -> Response {
        if version != PROTOCOL_VERSION {
            return Response::error(
                ErrorCode::EChannelProtocol,
                format!(
                    "protocol version {version} is not supported; this daemon speaks {PROTOCOL_VERSION} (use the same silas binary as the daemon)"
                ),
            );
        }
        self.who = None;
        match self.auth.check_peer(self.peer, Some(token), CHANNEL) {
            AuthOutcome::Owner(c) => {
                self.who = Some(c);
                Response::Welcome {
                    version: PROTOCOL_VERSION,
                }
            }
            AuthOutcome::Throttled => throttled(),
            AuthOutcome::Refused => Response::error(
                ErrorCode::EChannelAuth,
                "not an owner credential (missing, wrong or revoked)",
            ),
        }
    }
}

fn throttled() -> Response {
    Response::error(
        ErrorCode::EChannelRateLimited,
        "too many failed authentications; try again in a minute",
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::auth::{AuthAudit, EphemeralDevices, FAILED_AUTH_LIMIT};
    use crate::control::protocol::OwnerToken;
    use std::sync::Mutex;

    struct Echo;
    impl ControlBackend for Echo {
        fn handle(&self, caller: &Credential, req: Request) -> BoxFuture<'_, Response> {
            let caller = caller.clone();
            Box::pin(async move {
                match req {
                    Request::WorkShow { id } => Response::DeviceRevoked {
                        device_id: format!("{id}:{}", caller.device_id().unwrap_or("config")),
                        already: false,
                    },
                    _ => Response::error(ErrorCode::EChannelProtocol, "unexpected"),
                }
            })
        }
    }

    #[derive(Default)]
    struct Rec(Mutex<Vec<(String, serde_json::Value)>>);
    impl AuthAudit for Rec {
        fn record(&self, e: &str, d: serde_json::Value) {
            self.0.lock().unwrap().push((e.into(), d));
        }
    }

    fn hello(token: &str) -> Vec<u8> {
        serde_json::to_vec(&Request::Hello {
            version: PROTOCOL_VERSION,
            token: OwnerToken::new(token.into()),
        })
        .unwrap()
    }

    fn code(r: &Response) -> Option<ErrorCode> {
        match r {
            Response::Error { code, .. } => Some(*code),
            _ => None,
        }
    }

    #[tokio::test]
    async fn requests_need_a_valid_hello_and_failures_are_audited() {
        let rec = Arc::new(Rec::default());
        let auth = Arc::new(OwnerAuth::new(None, Arc::new(EphemeralDevices), rec.clone()).unwrap());
        let (dev, token) = auth.create_device("local CLI").unwrap();
        let mut s = Session::new(auth.clone(), Some(Peer::LocalUid(1000)));
        let show = br#"{"op":"work_show","id":"w1"}"#;
        // No hello: refused, audited as a missing credential.
        assert_eq!(
            code(&s.answer(show, &Echo).await),
            Some(ErrorCode::EChannelAuth)
        );
        // Garbage: a protocol error, the session carries on.
        assert_eq!(
            code(&s.answer(b"\x00garbage", &Echo).await),
            Some(ErrorCode::EChannelProtocol)
        );
        assert_eq!(
            code(&s.answer(&hello("wrong"), &Echo).await),
            Some(ErrorCode::EChannelAuth)
        );
        let old = br#"{"op":"hello","version":0,"token":"x"}"#;
        assert_eq!(
            code(&s.answer(old, &Echo).await),
            Some(ErrorCode::EChannelProtocol)
        );
        assert!(matches!(
            s.answer(&hello(&token), &Echo).await,
            Response::Welcome { version: 1 }
        ));
        match s.answer(show, &Echo).await {
            Response::DeviceRevoked { device_id, .. } => {
                assert_eq!(device_id, format!("w1:{}", dev.device_id))
            }
            other => panic!("{other:?}"),
        }
        // Revoking the device ends this session's authentication too.
        auth.revoke(&dev.device_id).unwrap();
        assert_eq!(
            code(&s.answer(show, &Echo).await),
            Some(ErrorCode::EChannelAuth)
        );
        let log = rec.0.lock().unwrap();
        let failed: Vec<_> = log.iter().filter(|(e, _)| e == "web.auth_failed").collect();
        assert_eq!(failed.len(), 3, "{log:?}");
        assert!(
            failed
                .iter()
                .all(|(_, d)| d["channel"] == CHANNEL && d["remote"] == "local uid 1000")
        );
        assert!(
            failed
                .iter()
                .any(|(_, d)| d["reason"] == "missing_credential")
        );
        assert!(
            failed
                .iter()
                .any(|(_, d)| d["reason"] == "invalid_credential")
        );
        assert!(log.iter().all(|(_, d)| !d.to_string().contains(&token)));
    }

    #[tokio::test]
    async fn failures_are_throttled_per_local_uid() {
        let auth = Arc::new(OwnerAuth::ephemeral(None));
        let (_, token) = auth.create_device("local CLI").unwrap();
        let mut bad = Session::new(auth.clone(), Some(Peer::LocalUid(1001)));
        for _ in 0..FAILED_AUTH_LIMIT {
            assert_eq!(
                code(&bad.answer(&hello("nope"), &Echo).await),
                Some(ErrorCode::EChannelAuth)
            );
        }
        // Over budget: a guess is refused before comparison...
        assert_eq!(
            code(&bad.answer(&hello("nope"), &Echo).await),
            Some(ErrorCode::EChannelRateLimited)
        );
        // ...while a device credential still passes (256 random bits: the
        // throttle protects nothing there, and refusing it locked the owner
        // out for whoever else shares the uid).
        assert_eq!(code(&bad.answer(&hello(&token), &Echo).await), None);
        // Another uid is unaffected.
        let mut good = Session::new(auth, Some(Peer::LocalUid(1002)));
        assert!(matches!(
            good.answer(&hello(&token), &Echo).await,
            Response::Welcome { .. }
        ));
    }

    #[tokio::test]
    async fn bind_replaces_a_stale_socket_and_refuses_a_live_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("control.sock");
        // A socket file left behind by a killed daemon: nobody listens.
        drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
        assert!(path.exists());
        let live = bind(&path, None).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o660);
        let again = bind(&path, None).err().unwrap();
        assert!(matches!(again, ControlError::AlreadyRunning(_)), "{again}");
        drop(live);
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, b"not a socket").unwrap();
        assert!(matches!(
            bind(&path, None).err().unwrap(),
            ControlError::NotASocket(_)
        ));
    }
}
