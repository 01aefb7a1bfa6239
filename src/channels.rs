//! The runtime's one [`ChannelSink`] over every attached channel: the web
//! channel always, Telegram when enabled. A reply goes back only to the
//! channel its message came from; cards, notices and work status of a scope
//! go to every channel that shows that scope (the owner's scope is on both),
//! and count as delivered if any channel took them.

use std::sync::Arc;

use silas_actors::cards::{CardResponse, CardTimeouts};
use silas_actors::channel::{BoxFuture, ChannelError, ChannelSink, Outbound};
use silas_actors::stream::StreamHandle;
use silas_storage::ReplyAck;

use crate::telegram_bridge::TelegramBridge;
use crate::web_bridge::WebBridge;

pub struct Channels {
    pub web: Arc<WebBridge>,
    pub telegram: Option<Arc<TelegramBridge>>,
}

impl ChannelSink for Channels {
    /// Telegram confirms its own sends; the web clients acknowledge by id.
    fn reply_ack(&self, out: &Outbound) -> ReplyAck {
        match self.telegram.as_ref() {
            Some(tg) if tg.serves(out) => ReplyAck::Channel,
            _ => self.web.reply_ack(out),
        }
    }

    fn reaches(&self, out: &Outbound) -> bool {
        match self.telegram.as_ref() {
            Some(tg) if tg.serves(out) => true,
            _ => self.web.reaches(out),
        }
    }

    fn send(&self, out: Outbound) -> BoxFuture<'_, Result<(), ChannelError>> {
        Box::pin(async move {
            let Some(tg) = self.telegram.as_ref().filter(|t| t.serves(&out)) else {
                return self.web.send(out).await;
            };
            // A reply and its progress go only to the channel it came from.
            if matches!(out, Outbound::Reply { .. } | Outbound::Progress { .. }) {
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

/// `/secret <label>` on any channel: open a secure input card for the owner
/// (each channel renders it: the web app's form, a link in Telegram), wait
/// for its resolution and return what to tell the owner — never the value.
pub async fn ask_for_secret(
    stream: &StreamHandle,
    scope_id: &str,
    label: &str,
    timeouts: &CardTimeouts,
) -> String {
    let guidance = serde_json::json!({
        "instructions": format!("Paste the value for \"{label}\". It goes straight to Silas's encrypted secret store, not into the chat."),
        "help_url": null,
    });
    match stream
        .request_secure_input(scope_id, label, None, guidance, timeouts)
        .await
    {
        Ok(answer)
            if answer.answered()
                && answer.response == (CardResponse::SecureInput { success: true }) =>
        {
            format!("Stored \"{label}\" securely as {}.", answer.request_id)
        }
        Ok(_) => format!("\"{label}\" was not stored."),
        Err(e) => format!("Could not ask for \"{label}\": {e}"),
    }
}
