//! The shutdown signals of `silas start` (§18.2), split from `daemon.rs`.

use std::time::Duration;

use silas_core::ErrorCode;

use crate::error::CliError;

/// How long each remaining shutdown step waits once a second signal has
/// hurried the stop.
pub(super) const HURRIED_GRACE: Duration = Duration::from_secs(2);

/// SIGTERM, SIGINT and SIGHUP, by name. SIGHUP is a closed terminal (an
/// SSH session ending under a foreground `silas start`): its default action
/// killed the daemon on the spot, with no drain and no audit checkpoint; it
/// now shuts down cleanly like the others (the configuration is not
/// reloaded: restart for that). A second signal while stopping hurries the
/// stop: running turns are not waited for (they are replayed at the next
/// start), the audit checkpoint is still written.
pub(super) struct ShutdownSignals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl ShutdownSignals {
    pub(super) async fn next(&mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.int.recv() => "SIGINT",
            _ = self.hup.recv() => "SIGHUP",
        }
    }

    /// The three handlers, installed now: from here on each of these
    /// signals is an orderly stop, never the default action.
    pub(super) fn install() -> Result<Self, CliError> {
        use tokio::signal::unix::{SignalKind, signal};
        let install = |kind: SignalKind, name: &str| {
            signal(kind).map_err(|e| {
                CliError::new(
                    ErrorCode::ECfgIo,
                    format!("cannot install {name} handler: {e}"),
                )
            })
        };
        Ok(ShutdownSignals {
            term: install(SignalKind::terminate(), "SIGTERM")?,
            int: install(SignalKind::interrupt(), "SIGINT")?,
            hup: install(SignalKind::hangup(), "SIGHUP")?,
        })
    }
}
