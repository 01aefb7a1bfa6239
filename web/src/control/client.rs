//! The CLI side of the control socket.

use std::io::ErrorKind;
use std::path::Path;
use std::time::Duration;

use silas_core::ErrorCode;
use tokio::io::BufReader;
use tokio::net::UnixStream;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};

use super::protocol::{
    FrameRead, MAX_RESPONSE_BYTES, OwnerToken, PROTOCOL_VERSION, Request, Response, read_frame,
    write_frame,
};

/// How long the CLI waits for one response (a little over the daemon's own
/// per-request bound).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(130);

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// No socket, or nobody listening on it: no daemon runs.
    #[error("no Silas daemon is running")]
    NotRunning,
    #[error("control socket: {0}")]
    Io(#[from] std::io::Error),
    /// The daemon answered with an error.
    #[error("{message}")]
    Refused { code: ErrorCode, message: String },
    #[error("unexpected answer from the daemon: {0}")]
    Protocol(String),
}

impl silas_core::Coded for ClientError {
    fn code(&self) -> ErrorCode {
        match self {
            ClientError::NotRunning | ClientError::Io(_) => ErrorCode::EChannelDisconnected,
            ClientError::Refused { code, .. } => *code,
            ClientError::Protocol(_) => ErrorCode::EChannelProtocol,
        }
    }
}

/// An authenticated connection to the daemon.
pub struct ControlClient {
    rd: BufReader<OwnedReadHalf>,
    wr: OwnedWriteHalf,
    buf: Vec<u8>,
}

impl ControlClient {
    /// Connect to `path` (not yet authenticated): [`ClientError::NotRunning`]
    /// when no daemon listens there.
    pub async fn open(path: &Path) -> Result<Self, ClientError> {
        let stream = match UnixStream::connect(path).await {
            Ok(s) => s,
            Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::ConnectionRefused) => {
                return Err(ClientError::NotRunning);
            }
            Err(e) => return Err(ClientError::Io(e)),
        };
        let (rd, wr) = stream.into_split();
        Ok(ControlClient {
            rd: BufReader::new(rd),
            wr,
            buf: Vec::new(),
        })
    }

    /// Authenticate with an owner credential.
    pub async fn hello(mut self, token: OwnerToken) -> Result<Self, ClientError> {
        match self
            .call(&Request::Hello {
                version: PROTOCOL_VERSION,
                token,
            })
            .await?
        {
            Response::Welcome { .. } => Ok(self),
            other => Err(unexpected(&other)),
        }
    }

    /// [`Self::open`] then [`Self::hello`].
    pub async fn connect(path: &Path, token: OwnerToken) -> Result<Self, ClientError> {
        Self::open(path).await?.hello(token).await
    }

    /// One request, one response; a [`Response::Error`] becomes
    /// [`ClientError::Refused`].
    pub async fn call(&mut self, req: &Request) -> Result<Response, ClientError> {
        let exchange = async {
            write_frame(&mut self.wr, req).await?;
            match read_frame(&mut self.rd, MAX_RESPONSE_BYTES, &mut self.buf).await? {
                FrameRead::Frame => {}
                FrameRead::TooLarge => {
                    return Err(ClientError::Protocol(format!(
                        "response longer than {MAX_RESPONSE_BYTES} bytes"
                    )));
                }
                FrameRead::Eof => {
                    return Err(ClientError::Io(std::io::Error::new(
                        ErrorKind::UnexpectedEof,
                        "the daemon closed the connection",
                    )));
                }
            }
            serde_json::from_slice::<Response>(&self.buf)
                .map_err(|e| ClientError::Protocol(e.to_string()))
        };
        let resp = tokio::time::timeout(CALL_TIMEOUT, exchange)
            .await
            .map_err(|_| ClientError::Refused {
                code: ErrorCode::EChannelTimeout,
                message: format!(
                    "no answer from the daemon within {}s",
                    CALL_TIMEOUT.as_secs()
                ),
            })??;
        match resp {
            Response::Error { code, message } => Err(ClientError::Refused { code, message }),
            ok => Ok(ok),
        }
    }
}

/// A response of the wrong kind for the request.
pub fn unexpected(resp: &Response) -> ClientError {
    let kind = serde_json::to_value(resp)
        .ok()
        .and_then(|v| v.get("kind").and_then(|k| k.as_str()).map(str::to_owned))
        .unwrap_or_else(|| "?".into());
    ClientError::Protocol(format!("got a {kind} response"))
}
