//! The bot token: a secret that sits in every Bot API request URL.
//!
//! It is kept in a zeroized buffer, has no `Display`, and its `Debug` is
//! redacted; [`BotToken::scrub`] removes it from any text before that text can
//! reach an error, a log or the audit log.

use zeroize::Zeroizing;

use crate::error::TelegramError;

#[derive(Clone)]
pub struct BotToken(Zeroizing<String>);

impl std::fmt::Debug for BotToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BotToken(<redacted>)")
    }
}

impl BotToken {
    /// Accepts `<bot id>:<secret>` as BotFather issues it
    /// ([`silas_core::config::looks_like_bot_token`]: the shape also keeps
    /// the token from changing the request path).
    pub fn new(raw: &str) -> Result<BotToken, TelegramError> {
        let raw = raw.trim();
        if !silas_core::config::looks_like_bot_token(raw) {
            // The value itself is never echoed.
            return Err(TelegramError::Config(
                "channels.telegram.token: not a bot token (expected <bot id>:<secret>)".into(),
            ));
        }
        Ok(BotToken(Zeroizing::new(raw.to_string())))
    }

    /// The bot's numeric id (the public part before `:`).
    pub fn bot_id(&self) -> &str {
        self.0.split_once(':').map_or("", |(id, _)| id)
    }

    pub(crate) fn expose(&self) -> &str {
        &self.0
    }

    /// `text` with every occurrence of the token (and of its secret part)
    /// replaced, for anything derived from a request.
    pub fn scrub(&self, text: &str) -> String {
        let mut out = text.replace(self.0.as_str(), "<token>");
        if let Some((_, secret)) = self.0.split_once(':') {
            out = out.replace(secret, "<token>");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CANARY: &str = "123456:CANARY-secret_token";

    #[test]
    fn debug_never_shows_the_token() {
        let t = BotToken::new(CANARY).unwrap();
        let dbg = format!("{t:?}");
        assert!(!dbg.contains("CANARY"), "{dbg}");
        assert_eq!(t.bot_id(), "123456");
    }

    #[test]
    fn malformed_tokens_are_refused_without_echo() {
        for bad in [
            "", "abc", "12:", ":abc", "12:a/b", "12:a?b", "x1:abc", "12:a b",
        ] {
            let err = BotToken::new(bad).unwrap_err().to_string();
            assert!(err.contains("channels.telegram.token"), "{err}");
            if !bad.is_empty() {
                assert!(!err.contains(bad), "{err}");
            }
        }
    }

    #[test]
    fn scrub_removes_token_and_secret() {
        let t = BotToken::new(CANARY).unwrap();
        let s = t.scrub("GET http://h/bot123456:CANARY-secret_token/getMe and CANARY-secret_token");
        assert!(!s.contains("CANARY"), "{s}");
    }
}
