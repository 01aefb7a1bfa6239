//! Test support: a minimal HTTP/1.1 server on 127.0.0.1 that records every
//! request and answers from a route table. Tests only ever connect here.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[derive(Clone, Debug)]
pub struct Canned {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// Never answer (for timeouts).
    pub hang: bool,
}

impl Canned {
    pub fn ok(content_type: &str, body: impl Into<Vec<u8>>) -> Self {
        Canned {
            status: 200,
            headers: vec![("Content-Type".into(), content_type.into())],
            body: body.into(),
            hang: false,
        }
    }
    pub fn redirect(status: u16, location: &str) -> Self {
        Canned {
            status,
            headers: vec![("Location".into(), location.into())],
            body: Vec::new(),
            hang: false,
        }
    }
    pub fn hang() -> Self {
        Canned {
            status: 200,
            headers: Vec::new(),
            body: Vec::new(),
            hang: true,
        }
    }
    pub fn header(mut self, k: &str, v: &str) -> Self {
        self.headers.push((k.into(), v.into()));
        self
    }
}

#[derive(Clone, Debug)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    pub host: Option<String>,
    pub body: String,
    pub peer: SocketAddr,
}

pub struct TestServer {
    pub port: u16,
    requests: Arc<Mutex<Vec<Recorded>>>,
}

impl TestServer {
    /// Bind 127.0.0.1:0; `routes` gets the port (for absolute Locations).
    pub async fn start(routes: impl FnOnce(u16) -> Vec<(&'static str, Canned)>) -> TestServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let routes: Arc<BTreeMap<String, Canned>> = Arc::new(
            routes(port)
                .into_iter()
                .map(|(p, c)| (p.to_string(), c))
                .collect(),
        );
        let requests = Arc::new(Mutex::new(Vec::new()));
        let recorded = requests.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, peer)) = listener.accept().await else {
                    return;
                };
                let routes = routes.clone();
                let recorded = recorded.clone();
                tokio::spawn(async move {
                    let _ = serve(stream, peer, &routes, &recorded).await;
                });
            }
        });
        TestServer { port, requests }
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }

    pub fn url(&self, host: &str, path: &str) -> String {
        format!("http://{host}:{}{path}", self.port)
    }
}

async fn serve(
    mut stream: TcpStream,
    peer: SocketAddr,
    routes: &BTreeMap<String, Canned>,
    recorded: &Mutex<Vec<Recorded>>,
) -> std::io::Result<()> {
    let mut buf = Vec::new();
    let mut tmp = [0u8; 4096];
    let head_end = loop {
        let n = stream.read(&mut tmp).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&tmp[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let mut lines = head.split("\r\n");
    let mut first = lines.next().unwrap_or("").split(' ');
    let method = first.next().unwrap_or("").to_string();
    let path = first.next().unwrap_or("").to_string();
    let mut host = None;
    let mut len = 0usize;
    for l in lines {
        if let Some((k, v)) = l.split_once(':') {
            match k.trim().to_ascii_lowercase().as_str() {
                "host" => host = Some(v.trim().to_string()),
                "content-length" => len = v.trim().parse().unwrap_or(0),
                _ => {}
            }
        }
    }
    while buf.len() < head_end + len {
        let n = stream.read(&mut tmp).await?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&tmp[..n]);
    }
    let body = String::from_utf8_lossy(&buf[head_end..]).to_string();
    recorded.lock().unwrap().push(Recorded {
        method,
        path: path.clone(),
        host,
        body,
        peer,
    });
    let canned = routes.get(&path).cloned().unwrap_or(Canned {
        status: 404,
        headers: Vec::new(),
        body: b"not found".to_vec(),
        hang: false,
    });
    if canned.hang {
        tokio::time::sleep(Duration::from_secs(30)).await;
        return Ok(());
    }
    let mut out = format!("HTTP/1.1 {} X\r\nConnection: close\r\n", canned.status);
    for (k, v) in &canned.headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str(&format!("Content-Length: {}\r\n\r\n", canned.body.len()));
    stream.write_all(out.as_bytes()).await?;
    stream.write_all(&canned.body).await?;
    stream.shutdown().await
}

pub fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}
