//! The ApprovalEngine (spec §4.4, §5.11, §5.12): mints owner-signed tokens,
//! verifies them (consuming one execution nonce), checks them (consuming
//! none), and classifies signed messages. [`ApprovalService`] does the work
//! over the pure core (`silas_core::approval`, `silas_core::taint`), the store
//! (ledger + nonces, one transaction per consumption) and the owner key;
//! [`ApprovalEngine`] is the actor shell that serialises requests.
//!
//! Fail closed: a storage error is an error, never an authorisation. Every
//! issuance, verification and refusal is audited (without message content).

use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use serde_json::{Value, json};
use silas_core::approval::{self, Denial, IssueError, IssuePolicy, Subject};
use silas_core::model::approval::{ApprovalDecision, ApprovalScope, ApprovalToken};
use silas_core::model::messages::{ChannelMessage, SignedMessage};
use silas_core::model::review::{AutonomyThresholdProposal, BatchProposal};
use silas_core::model::work::WorkItem;
use silas_core::taint::{self, Classification, SignatureEvidence};
use silas_core::{Base64Bytes, Coded, ErrorCode, Timestamp, canonical, projections};
use silas_keys::OwnerKey;
use silas_storage::{NonceDomain, Store, StoreError};

/// Why an approval request failed.
#[derive(Debug, thiserror::Error)]
pub enum ApprovalError {
    #[error("approval denied: {0}")]
    Denied(Denial),
    #[error("token not issued: {0}")]
    Issue(IssueError),
    #[error("approval store unavailable: {0}")]
    Store(#[from] StoreError),
    #[error("no randomness available: {0}")]
    Random(String),
}

impl ApprovalError {
    pub fn denial(&self) -> Option<&Denial> {
        match self {
            ApprovalError::Denied(d) => Some(d),
            _ => None,
        }
    }
}

impl Coded for ApprovalError {
    fn code(&self) -> ErrorCode {
        match self {
            ApprovalError::Denied(d) => d.code(),
            ApprovalError::Issue(_) => ErrorCode::EApprovalScope,
            ApprovalError::Store(e) => e.code(),
            ApprovalError::Random(_) => ErrorCode::EApprovalNonce,
        }
    }
}

/// An owned [`Subject`], for messages.
// Moved once into a message that ractor boxes anyway; boxing again buys nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug)]
pub enum OwnedSubject {
    WorkItem(WorkItem),
    Batch(BatchProposal),
    AutonomyThreshold(AutonomyThresholdProposal),
}

impl OwnedSubject {
    pub fn as_subject(&self) -> Subject<'_> {
        match self {
            OwnedSubject::WorkItem(w) => Subject::WorkItem(w),
            OwnedSubject::Batch(b) => Subject::Batch(b),
            OwnedSubject::AutonomyThreshold(p) => Subject::AutonomyThreshold(p),
        }
    }
}

/// 128 random bits as lowercase hex.
pub fn random_id() -> Result<String, ApprovalError> {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).map_err(|e| ApprovalError::Random(e.to_string()))?;
    Ok(canonical::hex_lower(&b))
}

fn obj(v: Value) -> silas_core::model::JsonObject {
    match v {
        Value::Object(o) => o,
        _ => Default::default(),
    }
}

/// The approval engine's work, without the actor.
#[derive(Clone)]
pub struct ApprovalService {
    store: Store,
    key: Arc<OwnerKey>,
    policy: IssuePolicy,
}

impl ApprovalService {
    pub fn new(store: Store, key: Arc<OwnerKey>, policy: IssuePolicy) -> Self {
        ApprovalService { store, key, policy }
    }

    /// The owner's public key (hex), for logs and the audit trail.
    pub fn owner_public_key_hex(&self) -> String {
        self.key.public_key_hex()
    }

    fn sig_ok(&self) -> impl Fn(&[u8], &[u8]) -> bool + '_ {
        let vk = self.key.verifying_key();
        move |payload: &[u8], sig: &[u8]| silas_keys::verify(&vk, payload, sig)
    }

    fn audit(&self, event: &str, data: Value) -> Result<(), ApprovalError> {
        self.store.audit().log(event, obj(data))?;
        Ok(())
    }

    fn deny<T>(&self, op: &str, token: &ApprovalToken, d: Denial) -> Result<T, ApprovalError> {
        self.audit(
            "approval.denied",
            json!({"op": op, "token_id": token.token_id, "work_item_id": token.work_item_id,
                   "scope": token.scope, "reason": d.kind(), "code": d.code().as_str()}),
        )?;
        Err(ApprovalError::Denied(d))
    }

    /// Mint and sign a token after the owner approved (§5.11 issue_token).
    pub fn issue_token(
        &self,
        subject: Subject<'_>,
        decision: &ApprovalDecision,
        scope: ApprovalScope,
        now: Timestamp,
    ) -> Result<ApprovalToken, ApprovalError> {
        let mut token = approval::unsigned_token(
            subject,
            decision,
            scope,
            &self.policy,
            now,
            random_id()?,
            random_id()?,
        )
        .map_err(ApprovalError::Issue)?;
        let payload = projections::token_signing_payload(&token)
            .map_err(|e| ApprovalError::Issue(IssueError::Unhashable(e.to_string())))?;
        token.signature = Base64Bytes(self.key.sign(&payload).to_bytes().to_vec());
        let audit = obj(
            json!({"token_id": token.token_id, "work_item_id": token.work_item_id,
            "scope": token.scope, "plan_hash": token.plan_hash, "expires_at": token.expires_at,
            "max_executions": token.max_executions, "approval_strength": token.approval_strength}),
        );
        self.store
            .approvals()
            .record_issued(&token, ("approval.issued".into(), audit))?;
        Ok(token)
    }

    /// Consuming verification (§5.11 verify): returns the updated token.
    pub fn verify(
        &self,
        token: &ApprovalToken,
        work_item: &WorkItem,
        spawned_task: Option<&WorkItem>,
        now: Timestamp,
    ) -> Result<ApprovalToken, ApprovalError> {
        match approval::authorize_execution(token, work_item, spawned_task, now, &self.sig_ok()) {
            Ok(binding) => self.consume(token, &binding.exec_hash, now),
            Err(d) => self.deny("verify", token, d),
        }
    }

    /// Consuming verification of a batch or autonomy-threshold token.
    pub fn verify_subject(
        &self,
        token: &ApprovalToken,
        subject: Subject<'_>,
        now: Timestamp,
    ) -> Result<ApprovalToken, ApprovalError> {
        match approval::authorize_subject(token, subject, now, &self.sig_ok()) {
            Ok(binding) => self.consume(token, &binding.exec_hash, now),
            Err(d) => self.deny("verify", token, d),
        }
    }

    fn consume(
        &self,
        token: &ApprovalToken,
        exec_hash: &str,
        now: Timestamp,
    ) -> Result<ApprovalToken, ApprovalError> {
        let exec_nonce = random_id()?;
        let audit = |t: &ApprovalToken| {
            let data = json!({"token_id": t.token_id, "work_item_id": t.work_item_id,
                              "exec_hash": exec_hash, "executions_used": t.executions_used,
                              "max_executions": t.max_executions});
            ("approval.verified".to_string(), obj(data))
        };
        let consumed =
            self.store
                .approvals()
                .consume_execution(token, exec_hash, &exec_nonce, now, audit)?;
        match consumed {
            Ok(updated) => Ok(updated),
            Err(d) => self.deny("verify", token, d),
        }
    }

    /// Non-consuming check at execution entry (§5.11 check): signature,
    /// binding, expiry, and a prior `verify` of this very work.
    pub fn check(
        &self,
        token: &ApprovalToken,
        work_item: &WorkItem,
        now: Timestamp,
    ) -> Result<(), ApprovalError> {
        // Counters come from the ledger, not from the caller's copy.
        let stored = match self.store.approvals().get(&token.token_id)? {
            Some(t) if approval::same_signed_token(&t, token) => t,
            Some(_) | None => {
                // Report a forged signature as such before "unknown".
                if let Err(d) = approval::check(token, work_item, now, &self.sig_ok()) {
                    return self.deny("check", token, d);
                }
                return self.deny("check", token, Denial::UnknownToken);
            }
        };
        let binding = match approval::check(&stored, work_item, now, &self.sig_ok()) {
            Ok(b) => b,
            Err(d) => return self.deny("check", token, d),
        };
        self.require_verified(token, &binding)
    }

    /// `check`'s last condition: a prior consuming `verify` recorded this
    /// exact execution's nonce.
    fn require_verified(
        &self,
        token: &ApprovalToken,
        binding: &approval::ExecutionBinding,
    ) -> Result<(), ApprovalError> {
        if self
            .store
            .nonces()
            .has_execution(&binding.token_id, &binding.exec_hash)?
        {
            Ok(())
        } else {
            self.deny("check", token, Denial::NotYetVerified)
        }
    }

    /// Non-consuming check of a non-plan token (a paused tool call's) before
    /// the approved action runs: the ledger's copy, its binding to `subject`,
    /// and the execution nonce a prior `verify_subject` recorded.
    pub fn check_subject(
        &self,
        token: &ApprovalToken,
        subject: Subject<'_>,
        now: Timestamp,
    ) -> Result<(), ApprovalError> {
        let stored = match self.store.approvals().get(&token.token_id)? {
            Some(t) if approval::same_signed_token(&t, token) => t,
            Some(_) | None => return self.deny("check", token, Denial::UnknownToken),
        };
        let binding = match approval::check_subject(&stored, subject, now, &self.sig_ok()) {
            Ok(b) => b,
            Err(d) => return self.deny("check", token, d),
        };
        self.require_verified(token, &binding)
    }

    /// Non-consuming check of a goal's standing token at each cycle
    /// (§5.2.3), against the ledger's copy: a token the ledger does not hold,
    /// or holds with other signed fields, is refused as unknown (revoked).
    pub fn check_standing(
        &self,
        token: &ApprovalToken,
        goal: &WorkItem,
        now: Timestamp,
    ) -> Result<(), ApprovalError> {
        let stored = match self.store.approvals().get(&token.token_id)? {
            Some(t) if approval::same_signed_token(&t, token) => t,
            Some(_) | None => {
                if let Err(d) = approval::check_standing(token, goal, now, &self.sig_ok()) {
                    return self.deny("check", token, d);
                }
                return self.deny("check", token, Denial::UnknownToken);
            }
        };
        approval::check_standing(&stored, goal, now, &self.sig_ok())
            .or_else(|d| self.deny("check", token, d))
    }

    /// `approval.default_ttl_minutes`: also how long an approval card waits.
    pub fn default_ttl_minutes(&self) -> u32 {
        self.policy.default_ttl_minutes
    }

    /// Taint of an inbound message (§3.1, §5.1 step 2). Records the message
    /// nonce only for a valid, fresh signature; audits replay attempts.
    pub fn classify_message(
        &self,
        message: &ChannelMessage,
        signed: Option<&SignedMessage>,
        known_identity: bool,
        now: Timestamp,
    ) -> Result<Classification, ApprovalError> {
        let evidence = match signed {
            None => None,
            Some(s) => {
                let payload = projections::signed_message_payload(
                    &s.message.text,
                    &s.message.timestamp,
                    &s.nonce,
                )
                .map_err(|e| ApprovalError::Issue(IssueError::Unhashable(e.to_string())))?;
                let valid = (self.sig_ok())(&payload, s.signature.as_slice());
                let fresh = taint::is_fresh(s.message.timestamp, now);
                let nonce_fresh = valid
                    && fresh
                    && self
                        .store
                        .nonces()
                        .record(NonceDomain::Msg, &s.nonce, now)?;
                Some(SignatureEvidence {
                    signature_valid: valid,
                    timestamp: s.message.timestamp,
                    nonce_fresh,
                })
            }
        };
        let c = taint::classify(evidence, now, known_identity);
        if c.is_replay_attempt() {
            self.audit(
                "replay_attempt",
                json!({"channel": message.channel, "sender_id": message.sender_id,
                       "reason": match c { Classification::External(r) => format!("{r:?}").to_lowercase(), _ => String::new() }}),
            )?;
        } else if c == Classification::External(taint::ExternalReason::BadSignature) {
            self.audit(
                "message.bad_signature",
                json!({"channel": message.channel, "sender_id": message.sender_id}),
            )?;
        }
        Ok(c)
    }
}

pub type Reply<T> = RpcReplyPort<Result<T, ApprovalError>>;

/// Requests to the approval engine. Plain owned data.
// ractor boxes each message into the mailbox, so variant sizes do not matter.
#[allow(clippy::large_enum_variant)]
pub enum ApprovalMsg {
    Issue {
        subject: OwnedSubject,
        decision: ApprovalDecision,
        scope: ApprovalScope,
        reply: Reply<ApprovalToken>,
    },
    Verify {
        token: ApprovalToken,
        work_item: WorkItem,
        spawned_task: Option<WorkItem>,
        reply: Reply<ApprovalToken>,
    },
    VerifySubject {
        token: ApprovalToken,
        subject: OwnedSubject,
        reply: Reply<ApprovalToken>,
    },
    Check {
        token: ApprovalToken,
        work_item: WorkItem,
        reply: Reply<()>,
    },
    ClassifyMessage {
        message: ChannelMessage,
        signed: Option<SignedMessage>,
        known_identity: bool,
        reply: Reply<Classification>,
    },
}

pub struct ApprovalEngine;

impl Actor for ApprovalEngine {
    type Msg = ApprovalMsg;
    type State = ApprovalService;
    type Arguments = ApprovalService;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        service: ApprovalService,
    ) -> Result<ApprovalService, ActorProcessingErr> {
        // All durable state (ledger, nonces) is read from the store per request,
        // so a restarted engine needs nothing else.
        Ok(service)
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        msg: ApprovalMsg,
        svc: &mut ApprovalService,
    ) -> Result<(), ActorProcessingErr> {
        let now = Timestamp::now();
        match msg {
            ApprovalMsg::Issue {
                subject,
                decision,
                scope,
                reply,
            } => {
                if !reply.is_closed() {
                    let _ =
                        reply.send(svc.issue_token(subject.as_subject(), &decision, scope, now));
                }
            }
            ApprovalMsg::Verify {
                token,
                work_item,
                spawned_task,
                reply,
            } => {
                // Consuming: run even if the caller went away, so the outcome
                // (and its audit entry) is the same as if it had waited.
                let _ = reply.send(svc.verify(&token, &work_item, spawned_task.as_ref(), now));
            }
            ApprovalMsg::VerifySubject {
                token,
                subject,
                reply,
            } => {
                let _ = reply.send(svc.verify_subject(&token, subject.as_subject(), now));
            }
            ApprovalMsg::Check {
                token,
                work_item,
                reply,
            } => {
                if !reply.is_closed() {
                    let _ = reply.send(svc.check(&token, &work_item, now));
                }
            }
            ApprovalMsg::ClassifyMessage {
                message,
                signed,
                known_identity,
                reply,
            } => {
                let _ = reply.send(svc.classify_message(
                    &message,
                    signed.as_ref(),
                    known_identity,
                    now,
                ));
            }
        }
        Ok(())
    }
}
