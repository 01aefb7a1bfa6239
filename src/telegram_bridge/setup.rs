//! Building the Telegram channel at daemon start: the token (config or the
//! encrypted secret store), the persisted callback key, the client, outbox,
//! bridge and poller, and the tasks that run them.

use std::sync::Arc;
use std::time::Duration;

use silas_actors::approval::OwnerSessions;
use silas_actors::cards::CardTimeouts;
use silas_core::config::Config;
use silas_core::{Coded, ErrorCode};
use silas_keys::secrets::{SecretError, SecretStore};
use silas_storage::Store;
use silas_telegram::policy::callback::CallbackSigner;
use silas_telegram::{BotClient, Outbox, Poller, PollerConfig, RetryPolicy, TelegramSettings};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::{TelegramBridge, TelegramBridgeArgs};
use crate::error::CliError;

/// The secret-store ref of the callback MAC key: persisted, so buttons
/// already in the chat still verify after a restart.
pub const CALLBACK_KEY_REF: &str = "telegram-callback-key";
/// How often resolved cards lose their buttons.
const SWEEP_EVERY: Duration = Duration::from_secs(2);

fn coded(e: impl Coded + std::fmt::Display) -> CliError {
    CliError::new(e.code(), e.to_string())
}

/// The callback key, created on first use.
fn callback_key(secrets: &SecretStore) -> Result<[u8; 32], CliError> {
    let stored = match secrets.get(CALLBACK_KEY_REF) {
        Ok(v) => v,
        Err(SecretError::Missing(_)) => {
            let mut key = zeroize::Zeroizing::new([0u8; 32]);
            getrandom::fill(key.as_mut_slice()).map_err(|e| {
                CliError::new(ErrorCode::EChannelAuth, format!("no randomness: {e}"))
            })?;
            match secrets.put(CALLBACK_KEY_REF, key.as_slice()) {
                Ok(()) | Err(SecretError::Exists(_)) => {}
                Err(e) => return Err(coded(e)),
            }
            secrets.get(CALLBACK_KEY_REF).map_err(coded)?
        }
        Err(e) => return Err(coded(e)),
    };
    <[u8; 32]>::try_from(stored.as_slice()).map_err(|_| {
        CliError::new(
            ErrorCode::EChannelAuth,
            format!("secret {CALLBACK_KEY_REF} is not a 32-byte key"),
        )
    })
}

/// The settings, with the token from the secret store when `token` is unset.
fn settings(cfg: &Config, secrets: &SecretStore) -> Result<TelegramSettings, CliError> {
    let mut tg = cfg.channels.telegram.clone();
    let blank = tg.token.as_deref().is_none_or(|t| t.trim().is_empty());
    if blank && let Some(r) = tg.token_ref.as_deref().filter(|r| !r.trim().is_empty()) {
        let raw = secrets.get(r.trim()).map_err(|e| {
            CliError::new(
                e.code(),
                format!("channels.telegram.token_ref: the bot token is not readable: {e}"),
            )
        })?;
        let token = std::str::from_utf8(&raw).map_err(|_| {
            CliError::new(
                ErrorCode::ECfgInvalid,
                "channels.telegram.token_ref: the stored value is not text",
            )
        })?;
        silas_core::secrets::register_known(token);
        tg.token = Some(token.trim().to_string());
    }
    TelegramSettings::from_config(&tg).map_err(coded)
}

/// The running channel: the bridge (also the runtime's Telegram sink) and
/// the poller that feeds it.
pub struct TelegramChannel {
    pub bridge: Arc<TelegramBridge>,
    poller: Poller<Arc<TelegramBridge>>,
}

/// `None` when `channels.telegram.enabled` is false.
pub fn build(
    cfg: &Config,
    store: &Store,
    secrets: &SecretStore,
    owners: &OwnerSessions,
    timeouts: CardTimeouts,
    web_url: String,
) -> Result<Option<TelegramChannel>, CliError> {
    if !cfg.channels.telegram.enabled {
        return Ok(None);
    }
    let settings = settings(cfg, secrets)?;
    let client = BotClient::new(&settings.api_url, settings.token.clone()).map_err(coded)?;
    let outbox = Outbox::new(client.clone(), RetryPolicy::default());
    let bridge = TelegramBridge::new(
        TelegramBridgeArgs {
            store: store.clone(),
            settings,
            signer: CallbackSigner::new(callback_key(secrets)?),
            outbox: outbox.clone(),
            timeouts,
            chatbot_active: cfg.active_goal.is_some(),
            web_url: Some(web_url),
        },
        owners,
    );
    let poller = Poller::new(
        client,
        store.telegram_updates(),
        outbox,
        bridge.clone(),
        PollerConfig::default(),
    );
    Ok(Some(TelegramChannel { bridge, poller }))
}

impl TelegramChannel {
    /// The poll loop's state, for `/health` and `silas status`.
    pub fn health(&self) -> Arc<silas_telegram::ChannelHealth> {
        self.poller.health()
    }

    /// Starts polling (after the Stream is registered), the edit flusher
    /// and the sweeper; all stop when `stop` turns true.
    pub fn spawn(self, stop: watch::Receiver<bool>) -> Vec<JoinHandle<()>> {
        let TelegramChannel { bridge, poller } = self;
        let flusher = tokio::spawn(bridge.outbox().run_flusher(stop.clone()));
        let sweeper = tokio::spawn(bridge.clone().run_sweeper(SWEEP_EVERY, stop.clone()));
        let waiting = bridge.clone();
        tokio::spawn(async move {
            waiting.clear_stale_progress().await;
            waiting.show_waiting_cards().await;
        });
        let polling = tokio::spawn(async move {
            if let Err(e) = poller.run(stop).await {
                tracing::error!(code = %e.code(), "telegram channel stopped: {e}");
            }
        });
        vec![polling, flusher, sweeper]
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use silas_keys::KekSources;

    use super::*;

    fn secrets(dir: &std::path::Path) -> SecretStore {
        let env = silas_core::config::MapEnv::default();
        SecretStore::open(
            dir,
            KekSources::new("SILAS_KEYSTORE_KEK", "silas-kek", Arc::new(env)),
        )
        .unwrap()
    }

    fn cfg(token: Option<&str>, token_ref: Option<&str>) -> Config {
        let mut cfg = Config::default();
        let tg = &mut cfg.channels.telegram;
        tg.enabled = true;
        tg.token = token.map(str::to_string);
        tg.token_ref = token_ref.map(str::to_string);
        tg.owner_chat_id = Some("1001".into());
        cfg
    }

    #[test]
    fn the_token_comes_from_config_or_the_secret_store() {
        let dir = tempfile::tempdir().unwrap();
        let store = secrets(dir.path());
        store.put("sec-tg", b"777:STORED-canary-token\n").unwrap();
        let s = settings(&cfg(None, Some("sec-tg")), &store).unwrap();
        assert_eq!(s.token.bot_id(), "777");
        // A configured token wins over the ref.
        let s = settings(&cfg(Some("888:CFG-token"), Some("sec-tg")), &store).unwrap();
        assert_eq!(s.token.bot_id(), "888");
        // A ref with nothing behind it names the key, not the value.
        let e = settings(&cfg(None, Some("sec-missing")), &store).unwrap_err();
        let line = e.one_line();
        assert!(line.contains("channels.telegram.token_ref"), "{line}");
        assert!(!line.contains("canary"), "{line}");
    }

    #[test]
    fn the_callback_key_is_created_once_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let first = callback_key(&secrets(dir.path())).unwrap();
        let again = callback_key(&secrets(dir.path())).unwrap();
        assert_eq!(first, again);
        assert_ne!(first, [0u8; 32]);
    }
}
