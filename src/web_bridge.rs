//! Glue between the web channel (`silas-web`) and the turn runtime
//! (`silas-actors`): the binary is the only layer that sees both.
//!
//! Inbound: a chat `message` becomes an `InboundMessage` submitted to the
//! Stream (durably recorded before it is acknowledged); an
//! `approval_response` becomes the owner's decision on a pending card. A full
//! queue or a rate limit comes back as a typed error frame. Outbound: replies,
//! approval cards (filled from the stored work item), work-status events and
//! notices become the protocol's server frames on the scope's connections.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::Value;
use silas_actors::channel::{ChannelError, ChannelSink, Outbound};
use silas_actors::stream::{InboundMessage, StreamHandle, SubmitOutcome, scope_for};
use silas_core::model::approval::{ApprovalDecision, ApprovalStrength, ApprovalVerdict};
use silas_core::{Coded, Timestamp};
use silas_storage::Store;
use silas_web::protocol::{ClientFrame, ProtocolError, ServerFrame};
use silas_web::ws::{BoxFuture, ConnectionInfo, WebBackend};
use tokio::sync::mpsc;

struct Conn {
    scope_id: String,
    ip: Option<String>,
    outbound: mpsc::Sender<ServerFrame>,
}

pub struct WebBridge {
    store: Store,
    connections: Mutex<HashMap<String, Conn>>,
}

impl WebBridge {
    pub fn new(store: Store) -> Arc<WebBridge> {
        Arc::new(WebBridge {
            store,
            connections: Mutex::new(HashMap::new()),
        })
    }

    fn targets(
        &self,
        scope_id: &str,
        connection_id: Option<&str>,
    ) -> Vec<mpsc::Sender<ServerFrame>> {
        let Ok(conns) = self.connections.lock() else {
            return Vec::new();
        };
        if let Some(c) = connection_id.and_then(|id| conns.get(id)) {
            return vec![c.outbound.clone()];
        }
        conns
            .values()
            .filter(|c| c.scope_id == scope_id)
            .map(|c| c.outbound.clone())
            .collect()
    }

    fn frame_for(&self, out: &Outbound) -> Option<ServerFrame> {
        let now = Timestamp::now().to_string();
        Some(match out {
            Outbound::Reply { text, .. } | Outbound::OwnerNotice { text, .. } => {
                ServerFrame::Message {
                    text: text.clone(),
                    sender: "silas".into(),
                    timestamp: now,
                }
            }
            Outbound::WorkStatus { event } => ServerFrame::WorkStatus {
                work_item_id: event.work_item_id.clone(),
                status: serde_json::to_value(event.status)
                    .ok()?
                    .as_str()?
                    .to_string(),
                summary: event.summary.clone(),
                verification: serde_json::to_value(&event.verification)
                    .unwrap_or(Value::Array(vec![])),
            },
            Outbound::Card { card } => {
                let item_id = card.payload.get("work_item_id").and_then(Value::as_str)?;
                let item = self.store.work_items().get(item_id).ok().flatten()?;
                ServerFrame::ApprovalRequest {
                    request_id: card.request_id.clone(),
                    title: item.title.clone(),
                    body: item.body.clone(),
                    budget: serde_json::to_value(&item.budget).unwrap_or(Value::Null),
                    verify: serde_json::to_value(&item.verify).unwrap_or(Value::Null),
                }
            }
        })
    }
}

fn verdict(v: &str) -> Option<ApprovalVerdict> {
    match v {
        "approved" | "approve" => Some(ApprovalVerdict::Approved),
        "declined" | "decline" | "rejected" | "reject" => Some(ApprovalVerdict::Declined),
        "edit_requested" | "edit" => Some(ApprovalVerdict::EditRequested),
        _ => None,
    }
}

impl WebBackend for WebBridge {
    fn connected(
        &self,
        conn: ConnectionInfo,
        outbound: mpsc::Sender<ServerFrame>,
    ) -> BoxFuture<'_, Result<String, ProtocolError>> {
        let scope_id = scope_for(&conn.connection_id, conn.owner);
        if let Ok(mut conns) = self.connections.lock() {
            conns.insert(
                conn.connection_id.clone(),
                Conn {
                    scope_id: scope_id.clone(),
                    ip: conn.remote_ip.map(|ip| ip.to_string()),
                    outbound,
                },
            );
        }
        Box::pin(async move { Ok(scope_id) })
    }

    fn frame(
        &self,
        connection_id: &str,
        frame: ClientFrame,
    ) -> BoxFuture<'_, Result<(), ProtocolError>> {
        let conn = self.connections.lock().ok().and_then(|c| {
            c.get(connection_id)
                .map(|c| (c.scope_id.clone(), c.ip.clone()))
        });
        let connection_id = connection_id.to_string();
        Box::pin(async move {
            let (scope_id, ip) = conn.ok_or_else(|| {
                ProtocolError::new("E_CHANNEL_PROTOCOL", "unknown connection", None)
            })?;
            let stream = StreamHandle::find().ok_or_else(|| {
                ProtocolError::new(
                    "E_CHANNEL_UNAVAILABLE",
                    "the assistant is not running",
                    None,
                )
            })?;
            match frame {
                ClientFrame::Message { text, sender_id } => {
                    let m = InboundMessage {
                        scope_id,
                        channel: "web".into(),
                        sender_id: sender_id.unwrap_or_else(|| "owner".into()),
                        text,
                        signed: None,
                        connection_id,
                        ip,
                    };
                    match stream.submit(m).await {
                        Ok(SubmitOutcome::Accepted { .. }) => Ok(()),
                        Ok(SubmitOutcome::BusyRetry { retry_after_ms }) => Err(ProtocolError::new(
                            "busy_retry",
                            format!("busy, retry in {retry_after_ms} ms"),
                            None,
                        )),
                        Ok(SubmitOutcome::RateLimited { message }) => {
                            Err(ProtocolError::new("rate_limited", message, None))
                        }
                        Ok(SubmitOutcome::ShuttingDown) => Err(ProtocolError::new(
                            "E_CHANNEL_UNAVAILABLE",
                            "shutting down",
                            None,
                        )),
                        Err(e) => Err(ProtocolError::new(e.code().as_str(), e.to_string(), None)),
                    }
                }
                ClientFrame::ApprovalResponse {
                    request_id,
                    verdict: v,
                } => {
                    let verdict = verdict(&v).ok_or_else(|| {
                        ProtocolError::new(
                            "E_CHANNEL_PROTOCOL",
                            format!("unknown verdict {v:?}"),
                            Some(request_id.clone()),
                        )
                    })?;
                    let decision = ApprovalDecision {
                        verdict,
                        approval_strength: ApprovalStrength::Tap,
                        conditions: Default::default(),
                    };
                    stream
                        .decide_card(&request_id, decision)
                        .await
                        .map(|_| ())
                        .map_err(|e| {
                            ProtocolError::new(e.code().as_str(), e.to_string(), Some(request_id))
                        })
                }
                other => Err(ProtocolError::new(
                    "E_CHANNEL_UNSUPPORTED",
                    "this card type is not served yet",
                    other.request_id().map(str::to_string),
                )),
            }
        })
    }

    fn disconnected(&self, connection_id: &str) -> BoxFuture<'_, ()> {
        if let Ok(mut conns) = self.connections.lock() {
            conns.remove(connection_id);
        }
        Box::pin(async {})
    }
}

impl ChannelSink for WebBridge {
    fn send(&self, out: Outbound) -> BoxFuture<'_, Result<(), ChannelError>> {
        Box::pin(async move {
            let connection = match &out {
                Outbound::Reply { connection_id, .. } => Some(connection_id.clone()),
                _ => None,
            };
            let targets = self.targets(out.scope_id(), connection.as_deref());
            let Some(frame) = self.frame_for(&out) else {
                return Err(ChannelError::Disconnected(
                    "nothing to render for this card".into(),
                ));
            };
            if targets.is_empty() {
                return Err(ChannelError::Disconnected(format!(
                    "no connection for scope {}",
                    out.scope_id()
                )));
            }
            for t in targets {
                // A full queue means a stalled client; it catches up from the chronicle.
                let _ = t.try_send(frame.clone());
            }
            Ok(())
        })
    }
}
