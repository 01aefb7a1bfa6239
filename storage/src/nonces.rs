//! Replay protection (spec §4.5) and the approval-token ledger (§5.11).
//!
//! Nonces live under `"{domain}:{binding}"` with their `recorded_at`: domain
//! `msg` binds the message nonce itself; domain `exec` binds
//! `"{token_id}:{plan_or_spawn_hash}:{nonce}"`, so an execution nonce is tied
//! to the content it authorised. Recording is an atomic check-and-insert.
//!
//! The ledger keeps each issued token's authoritative state. Consuming an
//! execution — checking the counters, recording the execution nonce, bumping
//! `executions_used`, appending to `execution_nonces`, and mirroring the token
//! onto the work item that carries it — is **one write transaction**, so a
//! crash can never leave a recorded nonce without the counter (or the
//! reverse), and a restarted process cannot replay a consumed execution.

use std::sync::Arc;

use redb::{Database, ReadableDatabase, ReadableTable, ReadableTableMetadata};
use silas_core::Timestamp;
use silas_core::approval::{Denial, same_signed_token};
use silas_core::model::JsonObject;
use silas_core::model::approval::ApprovalToken;

use crate::audit::Sanitized;
use crate::codec;
use crate::error::{StoreError, StoreResult};
use crate::schema::{APPROVAL_TOKENS, NONCES, WORK_ITEMS};
use crate::work_items::{get_in, put_in};

/// The nonce domains of §4.5.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NonceDomain {
    /// Signed-message replay nonces.
    Msg,
    /// Approval execution nonces (content-bound).
    Exec,
}

impl NonceDomain {
    pub fn as_str(&self) -> &'static str {
        match self {
            NonceDomain::Msg => "msg",
            NonceDomain::Exec => "exec",
        }
    }
}

pub fn nonce_key(domain: NonceDomain, binding: &str) -> String {
    format!("{}:{binding}", domain.as_str())
}

/// The content-bound binding of an execution nonce.
pub fn exec_binding(token_id: &str, plan_or_spawn_hash: &str, nonce: &str) -> String {
    format!("{token_id}:{plan_or_spawn_hash}:{nonce}")
}

#[derive(Clone)]
pub struct NonceStore {
    db: Arc<Database>,
}

impl NonceStore {
    pub(crate) fn new(db: Arc<Database>) -> Self {
        NonceStore { db }
    }

    pub fn is_used(&self, domain: NonceDomain, binding: &str) -> StoreResult<bool> {
        let txn = self.db.begin_read()?;
        let t = txn.open_table(NONCES)?;
        Ok(t.get(nonce_key(domain, binding).as_str())?.is_some())
    }

    /// Record a nonce; `false` (and nothing written) if it was already used.
    pub fn record(&self, domain: NonceDomain, binding: &str, at: Timestamp) -> StoreResult<bool> {
        let key = nonce_key(domain, binding);
        let txn = self.db.begin_write()?;
        let fresh = {
            let mut t = txn.open_table(NONCES)?;
            let exists = t.get(key.as_str())?.is_some();
            if !exists {
                t.insert(key.as_str(), at.as_micros())?;
            }
            !exists
        };
        if fresh {
            txn.commit()?;
        }
        Ok(fresh)
    }

    /// Remove nonces recorded before `older_than`; returns how many.
    pub fn prune_expired(&self, older_than: Timestamp) -> StoreResult<u64> {
        let cutoff = older_than.as_micros();
        let txn = self.db.begin_write()?;
        let removed = {
            let mut t = txn.open_table(NONCES)?;
            let before = t.len()?;
            t.retain(|_, recorded_at| recorded_at >= cutoff)?;
            before - t.len()?
        };
        txn.commit()?;
        Ok(removed)
    }

    /// Whether some execution of `token_id` was bound to `hash` (what
    /// `check()` requires: the work was authorised by a prior `verify()`).
    pub fn has_execution(&self, token_id: &str, hash: &str) -> StoreResult<bool> {
        let prefix = nonce_key(NonceDomain::Exec, &format!("{token_id}:{hash}:"));
        let txn = self.db.begin_read()?;
        let t = txn.open_table(NONCES)?;
        let mut range = t.range(prefix.as_str()..)?;
        match range.next() {
            Some(row) => Ok(row?.0.value().starts_with(&prefix)),
            None => Ok(false),
        }
    }

    pub fn len(&self) -> StoreResult<u64> {
        let txn = self.db.begin_read()?;
        Ok(txn.open_table(NONCES)?.len()?)
    }

    pub fn is_empty(&self) -> StoreResult<bool> {
        Ok(self.len()? == 0)
    }
}

/// The issued tokens and their usage state.
#[derive(Clone)]
pub struct ApprovalLedger {
    db: Arc<Database>,
}

impl ApprovalLedger {
    pub(crate) fn new(db: Arc<Database>) -> Self {
        ApprovalLedger { db }
    }

    /// Record a freshly issued token, with its audit entry in the same
    /// transaction. Refuses a duplicate `token_id`.
    pub fn record_issued(
        &self,
        token: &ApprovalToken,
        audit: (String, JsonObject),
    ) -> StoreResult<()> {
        let txn = self.db.begin_write()?;
        crate::audit::append_in(&txn, &Sanitized::new(vec![audit]))?;
        {
            let mut t = txn.open_table(APPROVAL_TOKENS)?;
            if t.get(token.token_id.as_str())?.is_some() {
                return Err(StoreError::Invalid(format!(
                    "token {} already issued",
                    token.token_id
                )));
            }
            t.insert(
                token.token_id.as_str(),
                codec::encode("approval_tokens", token)?.as_slice(),
            )?;
        }
        txn.commit()?;
        Ok(())
    }

    pub fn get(&self, token_id: &str) -> StoreResult<Option<ApprovalToken>> {
        let txn = self.db.begin_read()?;
        let t = txn.open_table(APPROVAL_TOKENS)?;
        let found = t.get(token_id)?;
        match found {
            Some(v) => Ok(Some(codec::decode("approval_tokens", v.value())?)),
            None => Ok(None),
        }
    }

    /// §5.11 steps 6–8 in one transaction: the presented token must be the
    /// issued one, have executions left, and the execution nonce must be new.
    /// `audit` builds the entry recorded with the change (same transaction).
    /// Returns the updated token, or the denial (nothing written).
    pub fn consume_execution(
        &self,
        presented: &ApprovalToken,
        exec_hash: &str,
        exec_nonce: &str,
        now: Timestamp,
        audit: impl FnOnce(&ApprovalToken) -> (String, JsonObject),
    ) -> StoreResult<Result<ApprovalToken, Denial>> {
        let txn = self.db.begin_write()?;
        let updated = {
            let mut tokens = txn.open_table(APPROVAL_TOKENS)?;
            let stored: Option<ApprovalToken> = match tokens.get(presented.token_id.as_str())? {
                Some(v) => Some(codec::decode("approval_tokens", v.value())?),
                None => None,
            };
            let Some(mut token) = stored.filter(|t| same_signed_token(t, presented)) else {
                return Ok(Err(Denial::UnknownToken));
            };
            if token.executions_used >= token.max_executions {
                return Ok(Err(Denial::Exhausted {
                    used: token.executions_used,
                    max: token.max_executions,
                }));
            }
            let key = nonce_key(
                NonceDomain::Exec,
                &exec_binding(&token.token_id, exec_hash, exec_nonce),
            );
            let mut nonces = txn.open_table(NONCES)?;
            if nonces.get(key.as_str())?.is_some() {
                return Ok(Err(Denial::Replay));
            }
            nonces.insert(key.as_str(), now.as_micros())?;
            token.executions_used += 1;
            token.execution_nonces.push(exec_nonce.to_string());
            tokens.insert(
                token.token_id.as_str(),
                codec::encode("approval_tokens", &token)?.as_slice(),
            )?;
            token
        };
        // Mirror onto the work item carrying this token, in the same transaction.
        let holder = get_in(&txn.open_table(WORK_ITEMS)?, &updated.work_item_id)?;
        if let Some(old) = holder
            && old
                .approval_token
                .as_ref()
                .is_some_and(|t| t.token_id == updated.token_id)
        {
            let mut new = old.clone();
            new.approval_token = Some(updated.clone());
            put_in(&txn, &new, Some(&old))?;
        }
        crate::audit::append_in(&txn, &Sanitized::new(vec![audit(&updated)]))?;
        txn.commit()?;
        Ok(Ok(updated))
    }
}
