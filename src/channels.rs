//! The runtime's one [`ChannelSink`] over every attached channel: the web
//! channel always, Telegram when enabled. A reply goes back only to the
//! channel its message came from; cards, notices and work status of a scope
//! go to every channel that shows that scope (the owner's scope is on both),
//! and count as delivered if any channel took them.

use std::sync::Arc;

use silas_actors::channel::{BoxFuture, ChannelError, ChannelSink, Outbound};

use crate::telegram_bridge::TelegramBridge;
use crate::web_bridge::WebBridge;

pub struct Channels {
    pub web: Arc<WebBridge>,
    pub telegram: Option<Arc<TelegramBridge>>,
}

impl ChannelSink for Channels {
    fn send(&self, out: Outbound) -> BoxFuture<'_, Result<(), ChannelError>> {
        Box::pin(async move {
            let Some(tg) = self.telegram.as_ref().filter(|t| t.serves(&out)) else {
                return self.web.send(out).await;
            };
            if matches!(out, Outbound::Reply { .. }) {
                return tg.send(out).await;
            }
            let web = self.web.send(out.clone()).await;
            let telegram = tg.send(out).await;
            if let Err(e) = &telegram {
                tracing::warn!(error = %e, "telegram delivery failed");
            }
            match (web, telegram) {
                (Ok(()), _) | (_, Ok(())) => Ok(()),
                (Err(e), Err(_)) => Err(e),
            }
        })
    }
}
