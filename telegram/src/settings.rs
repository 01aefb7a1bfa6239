//! `channels.telegram` turned into typed transport settings: the ids parsed,
//! the token shape-checked and wrapped (config validation already named any
//! bad key at startup; this repeats the checks so a caller cannot skip them).

use silas_core::config::TelegramChannelConfig;
use silas_core::risk::RiskLevel;

use crate::error::TelegramError;
use crate::policy::identity::OwnerIdentity;
use crate::token::BotToken;

#[derive(Clone, Debug)]
pub struct TelegramSettings {
    pub api_url: String,
    pub token: BotToken,
    pub owner: OwnerIdentity,
    pub max_approval_risk: RiskLevel,
}

fn id(key: &str, v: Option<&str>) -> Result<Option<i64>, TelegramError> {
    match v.map(str::trim).filter(|v| !v.is_empty()) {
        None => Ok(None),
        Some(v) => v
            .parse::<i64>()
            .ok()
            .filter(|id| *id != 0)
            .map(Some)
            .ok_or_else(|| TelegramError::Config(format!("{key}: not a Telegram id: {v:?}"))),
    }
}

impl TelegramSettings {
    pub fn from_config(cfg: &TelegramChannelConfig) -> Result<TelegramSettings, TelegramError> {
        let token = cfg
            .token
            .as_deref()
            .filter(|t| !t.trim().is_empty())
            .ok_or_else(|| {
                TelegramError::Config(
                    "channels.telegram.token: not set (set SILAS_TELEGRAM_TOKEN)".into(),
                )
            })?;
        let chat_id = id(
            "channels.telegram.owner_chat_id",
            cfg.owner_chat_id.as_deref(),
        )?
        .ok_or_else(|| {
            TelegramError::Config(
                "channels.telegram.owner_chat_id: not set (set SILAS_TELEGRAM_OWNER_ID)".into(),
            )
        })?;
        let user_id = id(
            "channels.telegram.owner_user_id",
            cfg.owner_user_id.as_deref(),
        )?;
        if user_id.is_some_and(|u| u < 0) {
            return Err(TelegramError::Config(
                "channels.telegram.owner_user_id: a user id is positive".into(),
            ));
        }
        if chat_id < 0 && user_id.is_none() {
            return Err(TelegramError::Config(
                "channels.telegram.owner_user_id: required when owner_chat_id is a group".into(),
            ));
        }
        Ok(TelegramSettings {
            api_url: cfg.api_url.trim().to_string(),
            token: BotToken::new(token)?,
            owner: OwnerIdentity { chat_id, user_id },
            max_approval_risk: cfg.max_approval_risk,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> TelegramChannelConfig {
        TelegramChannelConfig {
            enabled: true,
            token: Some("42:SECRET-canary".into()),
            owner_chat_id: Some(" 1001 ".into()),
            ..TelegramChannelConfig::default()
        }
    }

    #[test]
    fn a_valid_section_becomes_typed_settings() {
        let s = TelegramSettings::from_config(&cfg()).unwrap();
        assert_eq!(s.api_url, "https://api.telegram.org");
        assert_eq!(
            s.owner,
            OwnerIdentity {
                chat_id: 1001,
                user_id: None
            }
        );
        assert_eq!(s.max_approval_risk, RiskLevel::Medium);
        assert_eq!(s.token.bot_id(), "42");
        assert!(!format!("{s:?}").contains("SECRET"));
    }

    #[test]
    fn each_bad_key_is_named_and_the_token_never_echoed() {
        type Breaker = fn(&mut TelegramChannelConfig);
        let cases: Vec<(&str, Breaker)> = vec![
            ("channels.telegram.token", |c| c.token = None),
            ("channels.telegram.token", |c| {
                c.token = Some("SECRET-no-bot-id".into())
            }),
            ("channels.telegram.owner_chat_id", |c| {
                c.owner_chat_id = None
            }),
            ("channels.telegram.owner_chat_id", |c| {
                c.owner_chat_id = Some("@me".into())
            }),
            ("channels.telegram.owner_user_id", |c| {
                c.owner_user_id = Some("-3".into())
            }),
            ("channels.telegram.owner_user_id", |c| {
                c.owner_chat_id = Some("-1001".into())
            }),
        ];
        for (key, break_it) in cases {
            let mut c = cfg();
            break_it(&mut c);
            let err = TelegramSettings::from_config(&c).unwrap_err().to_string();
            assert!(err.contains(key), "{key}: {err}");
            assert!(!err.contains("SECRET"), "{err}");
        }
        let mut group = cfg();
        group.owner_chat_id = Some("-1001".into());
        group.owner_user_id = Some("7".into());
        let s = TelegramSettings::from_config(&group).unwrap();
        assert_eq!(s.owner.user_id, Some(7));
    }
}
