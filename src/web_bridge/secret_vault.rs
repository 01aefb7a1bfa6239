//! [`SecretVault`]: the `SecretSink` behind `POST /secrets/{ref_id}`. Split
//! from `web_bridge.rs` along that seam.

use std::sync::Arc;

use serde_json::Value;
use silas_actors::cards::CardTimeouts;
use silas_core::cards::CardPayload;
use silas_core::{Coded, Timestamp};
use silas_keys::secrets::{SecretError, SecretStore, valid_ref};
use silas_storage::{PendingCard, Store};
use silas_web::ws::{SecretSink, SecretStoreError};

/// The `SecretSink` of `POST /secrets/{ref_id}`: accepts a value only for a
/// pending `secure_input_request` card that is not past its deadline,
/// stores it encrypted (`SecretStore`), audits `secret_stored` with the ref
/// and label only. Never logs, echoes or keeps the value.
pub struct SecretVault {
    store: Store,
    secrets: Arc<SecretStore>,
    timeouts: CardTimeouts,
}

impl SecretVault {
    pub fn new(store: Store, secrets: Arc<SecretStore>, timeouts: CardTimeouts) -> SecretVault {
        SecretVault {
            store,
            secrets,
            timeouts,
        }
    }

    /// Whether a value was stored under `ref_id`.
    pub fn fulfilled(&self, ref_id: &str) -> bool {
        self.secrets.contains(ref_id)
    }

    pub fn describe(&self) -> String {
        self.secrets.describe()
    }
}

impl SecretSink for SecretVault {
    fn store(
        &self,
        ref_id: &str,
        value: zeroize::Zeroizing<String>,
    ) -> Result<(), SecretStoreError> {
        if !valid_ref(ref_id) {
            return Err(SecretStoreError::UnknownRef);
        }
        if self.secrets.contains(ref_id) {
            return Err(SecretStoreError::AlreadyFulfilled);
        }
        let card = match self.store.records::<PendingCard>().get(ref_id) {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(code = %e.code(), "secure input: cannot read pending cards: {e}");
                return Err(SecretStoreError::Failed);
            }
        };
        let Some(card) = card.filter(|c| {
            matches!(c.card, CardPayload::SecureInput(_))
                && !silas_actors::cards::is_expired(c, &self.timeouts, Timestamp::now())
        }) else {
            return Err(SecretStoreError::UnknownRef);
        };
        match self.secrets.put(ref_id, value.as_bytes()) {
            Ok(()) => {}
            Err(SecretError::Exists(_)) => return Err(SecretStoreError::AlreadyFulfilled),
            Err(e) => {
                // The error names the ref and path only, never the value.
                tracing::error!(code = %e.code(), "secure input: not stored: {e}");
                return Err(SecretStoreError::Failed);
            }
        }
        let label = match &card.card {
            CardPayload::SecureInput(s) => s.label.as_str(),
            _ => "",
        };
        let mut data = silas_core::model::JsonObject::new();
        data.insert("ref_id".into(), Value::from(ref_id));
        data.insert("label".into(), Value::from(label));
        if let Err(e) = self.store.audit().log("secret_stored", data) {
            tracing::error!(code = %e.code(), "audit write failed: {e}");
        }
        Ok(())
    }
}
