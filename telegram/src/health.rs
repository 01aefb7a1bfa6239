//! What `/health` and `silas status` say of the Telegram channel: the
//! poller's latest outcome, shared with the daemon. A token the Bot API
//! rejects, or a Bot API that cannot be reached, otherwise shows only in
//! the log while the owner's messages go unanswered.

use std::sync::Mutex;

use silas_core::ErrorCode;

/// The poll loop's state after its latest step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChannelState {
    /// No poll step has finished yet.
    Connecting,
    /// The latest poll step worked.
    Ok,
    /// The Bot API rejected the token (401/404); it is asked again after a
    /// pause.
    TokenRejected,
    /// The latest `failures` steps failed, the newest with `code`; the loop
    /// backs off.
    Failing { failures: u32, code: ErrorCode },
}

impl ChannelState {
    /// One line for an owner: what is wrong and where to look. Never an
    /// error's text (it could carry a proxy's page, or worse).
    pub fn describe(&self) -> String {
        match self {
            ChannelState::Connecting => "connecting".to_owned(),
            ChannelState::Ok => "ok".to_owned(),
            ChannelState::TokenRejected => {
                "paused: the Bot API rejects the token (channels.telegram.token); retrying"
                    .to_owned()
            }
            ChannelState::Failing { failures, code } => format!(
                "failing: {failures} poll step(s) in a row ({}); retrying",
                code.as_str()
            ),
        }
    }
}

/// The shared cell the poller writes and the daemon reads.
#[derive(Debug)]
pub struct ChannelHealth {
    state: Mutex<ChannelState>,
}

impl Default for ChannelHealth {
    fn default() -> Self {
        ChannelHealth {
            state: Mutex::new(ChannelState::Connecting),
        }
    }
}

impl ChannelHealth {
    pub fn state(&self) -> ChannelState {
        // A poisoned cell still holds the last state written.
        *self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn set(&self, state: ChannelState) {
        *self.state.lock().unwrap_or_else(|p| p.into_inner()) = state;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_read_as_one_line_each() {
        let h = ChannelHealth::default();
        assert_eq!(h.state().describe(), "connecting");
        h.set(ChannelState::Ok);
        assert_eq!(h.state().describe(), "ok");
        h.set(ChannelState::TokenRejected);
        assert!(h.state().describe().contains("channels.telegram.token"));
        h.set(ChannelState::Failing {
            failures: 3,
            code: ErrorCode::EChannelTimeout,
        });
        let d = h.state().describe();
        assert!(d.starts_with("failing: 3 poll step(s)"), "{d}");
        assert!(d.contains("E_CHANNEL_TIMEOUT"), "{d}");
    }
}
