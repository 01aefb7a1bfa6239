//! JSON request bodies read inside the handler, after its Host/Origin and
//! credential checks, within [`BODY_TIMEOUT`] and a size cap. warp's
//! `body::json()` filter ran before any check and waited for a body that
//! never came for as long as the client liked: 20,000 such requests, no
//! credential needed, used up the daemon's descriptors and locked the
//! owner out (the 10 s header timeout does not cover bodies). Its
//! rejections also surfaced as "405 Method Not Allowed".

use std::time::Duration;

use futures_util::{Stream, StreamExt};
use serde::de::DeserializeOwned;
use warp::Buf;
use warp::http::StatusCode;

/// The whole body must arrive within this, as the header must.
pub const BODY_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a body was not read.
#[derive(Debug, PartialEq, Eq)]
pub enum BodyError {
    /// Not sent whole within [`BODY_TIMEOUT`].
    TimedOut,
    /// Over the route's cap.
    TooLarge { limit: usize },
    /// Not the JSON the route takes.
    Invalid,
    /// The connection failed while reading.
    Read,
}

impl BodyError {
    pub fn status(&self) -> StatusCode {
        match self {
            BodyError::TimedOut => StatusCode::REQUEST_TIMEOUT,
            BodyError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            BodyError::Invalid | BodyError::Read => StatusCode::BAD_REQUEST,
        }
    }

    pub fn message(&self) -> String {
        match self {
            BodyError::TimedOut => "the request body was not sent in time".into(),
            BodyError::TooLarge { limit } => format!("the request body is over {limit} bytes"),
            BodyError::Invalid => "the request body is not the JSON this route takes".into(),
            BodyError::Read => "the request body could not be read".into(),
        }
    }
}

/// Reads at most `limit` bytes of `body` within `timeout` and decodes them.
pub async fn read_json<T, S, B>(body: S, limit: usize, timeout: Duration) -> Result<T, BodyError>
where
    T: DeserializeOwned,
    S: Stream<Item = Result<B, warp::Error>>,
    B: Buf,
{
    let read = async {
        // Sized once (so never reallocated) and wiped on drop: the secure
        // input's body is a secret.
        let mut bytes = zeroize::Zeroizing::new(Vec::with_capacity(limit));
        let mut body = std::pin::pin!(body);
        while let Some(chunk) = body.next().await {
            let mut chunk = chunk.map_err(|_| BodyError::Read)?;
            if bytes.len().saturating_add(chunk.remaining()) > limit {
                return Err(BodyError::TooLarge { limit });
            }
            while chunk.has_remaining() {
                let part = chunk.chunk();
                bytes.extend_from_slice(part);
                let n = part.len();
                chunk.advance(n);
            }
        }
        Ok(bytes)
    };
    let bytes = tokio::time::timeout(timeout, read)
        .await
        .map_err(|_| BodyError::TimedOut)??;
    serde_json::from_slice(bytes.as_slice()).map_err(|_| BodyError::Invalid)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use futures_util::stream;

    #[derive(serde::Deserialize, Debug, PartialEq)]
    struct B {
        code: String,
    }

    fn chunks(parts: &[&'static str]) -> impl Stream<Item = Result<&'static [u8], warp::Error>> {
        stream::iter(parts.iter().map(|p| Ok(p.as_bytes())).collect::<Vec<_>>())
    }

    #[tokio::test]
    async fn a_body_in_parts_is_read_and_decoded() {
        let b: B = read_json(chunks(&["{\"co", "de\":\"x\"}"]), 64, BODY_TIMEOUT)
            .await
            .unwrap();
        assert_eq!(b, B { code: "x".into() });
    }

    #[tokio::test]
    async fn over_the_cap_or_not_json_is_refused() {
        let big =
            read_json::<B, _, _>(chunks(&["{\"code\":\"", "xxxxxxxxxx\"}"]), 12, BODY_TIMEOUT)
                .await
                .unwrap_err();
        assert_eq!(big, BodyError::TooLarge { limit: 12 });
        assert_eq!(big.status(), StatusCode::PAYLOAD_TOO_LARGE);
        let bad = read_json::<B, _, _>(chunks(&["code=x"]), 64, BODY_TIMEOUT)
            .await
            .unwrap_err();
        assert_eq!(bad, BodyError::Invalid);
        assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
    }

    #[tokio::test]
    async fn a_body_that_never_comes_times_out() {
        let never = stream::pending::<Result<&'static [u8], warp::Error>>();
        let started = std::time::Instant::now();
        let out = read_json::<B, _, _>(never, 64, Duration::from_millis(100))
            .await
            .unwrap_err();
        assert_eq!(out, BodyError::TimedOut);
        assert_eq!(out.status(), StatusCode::REQUEST_TIMEOUT);
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}
