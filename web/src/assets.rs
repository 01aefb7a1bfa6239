//! The PWA shell (spec §8.2), embedded in the binary: `GET /` (index.html),
//! `/app.js`, `/app.css`, `/manifest.json`, `/sw.js`, `/icon.svg`, each with
//! its content type. Nothing is read from disk at runtime, so the daemon is
//! one file and the page cannot be swapped underneath it.
//!
//! Every HTTP response of the server — assets, API, rejections — carries the
//! [`SECURITY_HEADERS`] (see [`with_security_headers`]): a strict CSP that
//! allows only this origin (no inline script or style, no framing), `nosniff`
//! and `no-referrer`.

use warp::Filter;
use warp::Reply;
use warp::http::StatusCode;
use warp::http::header::{CACHE_CONTROL, CONTENT_TYPE, HeaderValue};
use warp::reply::Response;

/// One embedded file.
#[derive(Clone, Copy, Debug)]
pub struct Asset {
    /// URL path it is served at.
    pub path: &'static str,
    pub content_type: &'static str,
    pub body: &'static [u8],
}

/// The shell, in the order the service worker caches it.
pub const ASSETS: &[Asset] = &[
    Asset {
        path: "/",
        content_type: "text/html; charset=utf-8",
        body: include_bytes!("../assets/index.html"),
    },
    Asset {
        path: "/app.css",
        content_type: "text/css; charset=utf-8",
        body: include_bytes!("../assets/app.css"),
    },
    Asset {
        path: "/app.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../assets/app.js"),
    },
    Asset {
        path: "/manifest.json",
        content_type: "application/manifest+json",
        body: include_bytes!("../assets/manifest.json"),
    },
    Asset {
        path: "/sw.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../assets/sw.js"),
    },
    Asset {
        path: "/icon.svg",
        content_type: "image/svg+xml",
        body: include_bytes!("../assets/icon.svg"),
    },
];

/// Headers on every HTTP response.
pub const SECURITY_HEADERS: &[(&str, &str)] = &[
    (
        "content-security-policy",
        "default-src 'self'; connect-src 'self'; img-src 'self' data:; style-src 'self'; \
         script-src 'self'; frame-ancestors 'none'",
    ),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "no-referrer"),
    // No other site may embed a response (`<img src=…/icon.svg>`,
    // `<script src=…/app.js>`): a page could tell from its loading that
    // Silas runs on this port.
    ("cross-origin-resource-policy", "same-origin"),
];

/// The embedded asset served at `path`, if any.
pub fn find(path: &str) -> Option<&'static Asset> {
    let path = if path == "/index.html" { "/" } else { path };
    ASSETS.iter().find(|a| a.path == path)
}

fn respond(asset: &'static Asset) -> Response {
    let mut res = asset.body.into_response();
    res.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(asset.content_type));
    // Loopback server, tiny files: always revalidate so an upgraded binary
    // serves its own shell (the service worker is network-first too).
    res.headers_mut()
        .insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    res
}

/// `GET` (and `HEAD`) of the embedded shell; any other path is not found.
pub fn routes() -> impl Filter<Extract = (Response,), Error = warp::Rejection> + Clone {
    warp::get()
        .or(warp::head())
        .unify()
        .and(warp::path::full())
        .and_then(|full: warp::path::FullPath| async move {
            find(full.as_str())
                .map(respond)
                .ok_or_else(warp::reject::not_found)
        })
}

/// Turn any rejection into a plain-text response (so it, too, gets the
/// security headers), keeping warp's status codes for the cases we meet.
pub async fn recover(err: warp::Rejection) -> Result<Response, std::convert::Infallible> {
    use warp::reject::{
        InvalidHeader, InvalidQuery, LengthRequired, MethodNotAllowed, MissingHeader,
        PayloadTooLarge, UnsupportedMediaType,
    };
    // A body that does not parse is the request's fault whatever else the
    // other routes said: warp would otherwise answer `POST /pair` with a
    // bad body as 405, from the GET-only routes tried after it.
    let status = if err
        .find::<warp::filters::body::BodyDeserializeError>()
        .is_some()
    {
        StatusCode::BAD_REQUEST
    } else if err.is_not_found() {
        StatusCode::NOT_FOUND
    } else if err.find::<MethodNotAllowed>().is_some() {
        StatusCode::METHOD_NOT_ALLOWED
    } else if err.find::<PayloadTooLarge>().is_some() {
        StatusCode::PAYLOAD_TOO_LARGE
    } else if err.find::<LengthRequired>().is_some() {
        StatusCode::LENGTH_REQUIRED
    } else if err.find::<UnsupportedMediaType>().is_some() {
        StatusCode::UNSUPPORTED_MEDIA_TYPE
    } else if err.find::<MissingHeader>().is_some()
        || err.find::<InvalidHeader>().is_some()
        || err.find::<InvalidQuery>().is_some()
    {
        StatusCode::BAD_REQUEST
    } else {
        // Body deserialisation, a missing WebSocket upgrade, …
        StatusCode::BAD_REQUEST
    };
    let reason = status.canonical_reason().unwrap_or("error");
    let mut res = reason.into_response();
    *res.status_mut() = status;
    res.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    Ok(res)
}

/// Add [`SECURITY_HEADERS`] to a response.
pub fn with_security_headers(reply: impl warp::Reply) -> warp::reply::Response {
    let mut res = reply.into_response();
    for (name, value) in SECURITY_HEADERS {
        res.headers_mut()
            .insert(*name, HeaderValue::from_static(value));
    }
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_asset_is_non_empty_and_index_aliases_root() {
        for a in ASSETS {
            assert!(!a.body.is_empty(), "{}", a.path);
        }
        assert_eq!(find("/index.html").map(|a| a.path), Some("/"));
        assert!(find("/nope").is_none());
    }

    #[test]
    fn shell_never_reaches_outside_this_origin() {
        for a in ASSETS {
            let text = String::from_utf8_lossy(a.body);
            for bad in ["http://", "https://", "innerHTML", "eval("] {
                if a.path == "/icon.svg" && bad == "http://" {
                    continue; // the SVG namespace URI
                }
                assert!(!text.contains(bad), "{} contains {bad}", a.path);
            }
        }
    }
}
