//! The daemon under load: the real `silas` binary started over a scratch
//! directory with the bench configuration and a zero-latency fake model.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::json;
use silas_testkit::{FakeLlm, Reply};

use crate::{BENCH_CONFIG, BenchError};

/// How to start the daemon.
#[derive(Clone, Debug)]
pub struct DaemonOpts {
    /// The `silas` binary to run.
    pub silas: PathBuf,
    /// A chatbot deployment (an active goal): connections without the
    /// owner credential are customers, each in its own scope.
    pub chatbot: bool,
}

/// A running daemon; SIGKILLed and reaped on drop (its scratch directory
/// goes with it).
pub struct Daemon {
    child: Child,
    addr: String,
    owner_token: String,
    _fake: FakeLlm,
    _dir: tempfile::TempDir,
}

/// The one reply of the zero-latency model: a direct route with its answer.
fn direct_reply() -> Reply {
    Reply::json(&json!({
        "route": "direct", "reason": "bench",
        "response": {"message": "Hello!"},
        "interaction_register": "status",
        "interaction_mode": "default_and_offer",
        "context_profile": "conversation"
    }))
}

fn io(what: &str, e: impl std::fmt::Display) -> BenchError {
    BenchError::new(format!("{what}: {e}"))
}

/// The `host:port` in the daemon's readiness banner.
pub fn banner_addr(line: &str) -> Option<String> {
    if !line.starts_with("Silas is running") {
        return None;
    }
    let (_, rest) = line.split_once("http://")?;
    Some(rest.split('/').next()?.to_string())
}

/// The daemon runs inside its scratch dir, where a relative program path
/// with a directory in it (`target/release/silas`) would name nothing: it
/// is the caller's, resolved here. A bare name stays a `PATH` lookup.
fn program_from_here(p: &Path) -> PathBuf {
    if p.is_relative() && p.components().count() > 1 {
        std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
    } else {
        p.to_path_buf()
    }
}

impl Daemon {
    /// Starts `silas start` on a free loopback port and waits (≤ 60 s) for
    /// its readiness banner.
    pub async fn start(opts: &DaemonOpts) -> Result<Daemon, BenchError> {
        let fake = FakeLlm::zero_latency(direct_reply())
            .await
            .map_err(|e| io("fake model", e))?;
        let dir = tempfile::tempdir().map_err(|e| io("scratch dir", e))?;
        // A root daemon's sandbox user must traverse the scratch dir.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711))
            .map_err(|e| io("scratch dir", e))?;
        let config = dir.path().join("silas.yaml");
        std::fs::write(
            &config,
            BENCH_CONFIG.replace("@BASE_URL@", &fake.base_url()),
        )
        .map_err(|e| io("bench config", e))?;
        let log = std::fs::File::create(dir.path().join("daemon.log"))
            .map_err(|e| io("daemon log", e))?;
        let data = dir.path().join("data");
        let mut cmd = Command::new(program_from_here(&opts.silas));
        cmd.current_dir(dir.path())
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", dir.path())
            .env("SILAS__CHANNELS__WEB__PORT", "0")
            .arg("--data-dir")
            .arg(&data)
            .arg("--config")
            .arg(&config)
            .arg("start")
            .stdout(Stdio::piped())
            .stderr(log);
        if opts.chatbot {
            let goal = dir.path().join("goal.md");
            std::fs::write(&goal, "Answer customers' questions.\n")
                .map_err(|e| io("goal file", e))?;
            cmd.env("SILAS__ACTIVE_GOAL", &goal);
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| io(&format!("starting {}", opts.silas.display()), e))?;
        let Some(stdout) = child.stdout.take() else {
            let _ = child.kill();
            return Err(BenchError::new("daemon stdout not piped"));
        };
        let (tx, rx) = mpsc::channel();
        // Reads the banner, then keeps draining so the daemon never blocks
        // on a full pipe.
        std::thread::spawn(move || {
            let mut sent = false;
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if !sent && let Some(addr) = banner_addr(&line) {
                    let _ = tx.send(addr);
                    sent = true;
                }
            }
        });
        let addr =
            match tokio::task::spawn_blocking(move || rx.recv_timeout(Duration::from_secs(60)))
                .await
            {
                Ok(Ok(addr)) => addr,
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    let log =
                        std::fs::read_to_string(dir.path().join("daemon.log")).unwrap_or_default();
                    return Err(BenchError::new(format!(
                        "the daemon did not announce readiness within 60 s; its log:\n{log}"
                    )));
                }
            };
        let owner_token = read_token(&data).inspect_err(|_| {
            let _ = child.kill();
            let _ = child.wait();
        })?;
        Ok(Daemon {
            child,
            addr,
            owner_token,
            _fake: fake,
            _dir: dir,
        })
    }

    pub fn addr(&self) -> &str {
        &self.addr
    }

    pub fn owner_token(&self) -> &str {
        &self.owner_token
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The daemon's resident set size now, in KiB (`VmRSS`).
    pub fn rss_kib(&self) -> Option<u64> {
        rss_kib(self.pid())
    }

    /// The daemon's resident set now, anonymous and file-backed.
    pub fn rss_split(&self) -> Option<RssSplit> {
        rss_split(self.pid())
    }

    /// Whether the daemon is still running.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn read_token(data: &Path) -> Result<String, BenchError> {
    let path = data.join("cli.token");
    std::fs::read_to_string(&path)
        .map(|t| t.trim().to_string())
        .map_err(|e| io(&format!("owner credential {}", path.display()), e))
}

/// `VmRSS` of process `pid` in KiB, from `/proc/{pid}/status`.
pub fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    parse_vm_rss(&status)
}

/// The `VmRSS:` line of a `/proc/*/status` text, in KiB.
pub fn parse_vm_rss(status: &str) -> Option<u64> {
    status_kib(status, "VmRSS:")
}

/// The resident set split into anonymous pages (the heap, stacks) and
/// file-backed ones (the binary, mmap'd files), in KiB: heap growth and a
/// growing mapped file look alike in `VmRSS`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RssSplit {
    pub anon_kib: u64,
    pub file_kib: u64,
}

/// `RssAnon:` and `RssFile:` of a `/proc/*/status` text.
pub fn parse_rss_split(status: &str) -> Option<RssSplit> {
    Some(RssSplit {
        anon_kib: status_kib(status, "RssAnon:")?,
        file_kib: status_kib(status, "RssFile:")?,
    })
}

/// The same split of process `pid` now.
pub fn rss_split(pid: u32) -> Option<RssSplit> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    parse_rss_split(&status)
}

fn status_kib(status: &str, key: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}

/// Raises this process's soft open-file limit to its hard limit (many
/// client sockets); returns the soft limit in force afterwards.
pub fn raise_open_files() -> u64 {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut lim = getrlimit(Resource::Nofile);
    if lim.current < lim.maximum {
        lim.current = lim.maximum;
        let _ = setrlimit(Resource::Nofile, lim);
    }
    getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn banner_addr_reads_host_and_port() {
        let line = "Silas is running: web app and API at http://127.0.0.1:4312/ (health: http://127.0.0.1:4312/health). Press Ctrl-C to stop.";
        assert_eq!(banner_addr(line).as_deref(), Some("127.0.0.1:4312"));
        assert_eq!(banner_addr("Silas: starting at http://x/"), None);
    }

    #[test]
    fn vm_rss_is_read_in_kib() {
        let status = "Name:\tsilas\nVmPeak:\t  100 kB\nVmRSS:\t   20812 kB\nThreads:\t4\n";
        assert_eq!(parse_vm_rss(status), Some(20_812));
        assert_eq!(parse_vm_rss("Name:\tx\n"), None);
        // This process has one.
        assert!(rss_kib(std::process::id()).unwrap() > 0);
    }

    #[test]
    fn rss_splits_into_anonymous_and_file_backed_pages() {
        let status =
            "VmRSS:	   30000 kB\nRssAnon:	   21000 kB\nRssFile:	    8500 kB\nRssShmem:	 500 kB\n";
        assert_eq!(
            parse_rss_split(status),
            Some(RssSplit {
                anon_kib: 21_000,
                file_kib: 8_500
            })
        );
        assert_eq!(parse_rss_split("VmRSS:\t1 kB\nRssAnon:\t1 kB\n"), None);
        let own = rss_split(std::process::id()).unwrap();
        assert!(own.anon_kib > 0 && own.file_kib > 0, "{own:?}");
    }
}
