//! The Stream's handling of a background work status change: audited,
//! shown to the scope that asked (with the item's open cards when it waits
//! for the owner or is done), and, at its end, a line to the chatbot
//! customer whose conversation caused it (`turn::customer_update`).
//! A method of [`StreamState`]; the actor in `stream.rs` sequences it.

use super::*;
use crate::turn::customer_update::{self, CustomerUpdate};

impl StreamState {
    pub(super) async fn work_status(
        &mut self,
        event: WorkStatusEvent,
    ) -> Result<(), ActorProcessingErr> {
        let deps = self.args.deps.clone();
        audit(
            &deps,
            "work_status",
            json!({"work_item_id": event.work_item_id, "scope_id": event.scope_id,
                   "status": event.status}),
        )?;
        // An item waiting for the owner (a fix task's plan card, a paused
        // tool call's card) brings its open cards along, and so does a done
        // one (its apply or undo card).
        let waiting = matches!(
            event.status,
            crate::work::WorkStatusKind::Blocked | crate::work::WorkStatusKind::Done
        )
        .then(|| approval_flow::open_cards_for(&deps, &event.work_item_id))
        .transpose()?
        .unwrap_or_default();
        let update = CustomerUpdate::of_status(event.status);
        let work_item_id = event.work_item_id.clone();
        // Nobody connected (a goal's cycle at night) is the usual case: the
        // status is in the store, the cards come again.
        if let Err(e) = deps.sink.send(Outbound::WorkStatus { event }).await {
            undelivered("work status", e);
        }
        for card in waiting {
            if let Err(e) = deps.sink.send(Outbound::Card { card }).await {
                undelivered("approval card", e);
            }
        }
        if let Some(update) = update
            && let Some(work) = deps.store.work_items().get(&work_item_id)?
        {
            customer_update::tell(&deps, &work, update).await;
        }
        Ok(())
    }
}
