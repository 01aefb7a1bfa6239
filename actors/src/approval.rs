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
use silas_core::model::approval::{
    ApprovalDecision, ApprovalScope, ApprovalToken, ChangesApproval, ToolCallApproval,
};
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
    /// The answer did not arrive on a connection that authenticated as the
    /// owner: only the owner approves (§0.5.2, §5.11).
    #[error("only the owner can approve: {channel} connection {connection_id} is not the owner's")]
    NotOwner {
        channel: String,
        connection_id: String,
    },
    /// The engine actor is down or did not answer in time: no token.
    #[error("approval engine unavailable: {0}")]
    Unavailable(String),
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
            ApprovalError::NotOwner { .. } => ErrorCode::EChannelAuth,
            ApprovalError::Unavailable(_) => ErrorCode::EChannelTimeout,
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
    ToolCall(ToolCallApproval),
    Changes(ChangesApproval),
    SkillInstall(silas_core::model::skills::SkillInstallApproval),
    ConnectionPermission(silas_core::model::approval::ConnectionPermissionApproval),
}

impl OwnedSubject {
    pub fn as_subject(&self) -> Subject<'_> {
        match self {
            OwnedSubject::WorkItem(w) => Subject::WorkItem(w),
            OwnedSubject::Batch(b) => Subject::Batch(b),
            OwnedSubject::AutonomyThreshold(p) => Subject::AutonomyThreshold(p),
            OwnedSubject::ToolCall(c) => Subject::ToolCall(c),
            OwnedSubject::Changes(c) => Subject::Changes(c),
            OwnedSubject::SkillInstall(s) => Subject::SkillInstall(s),
            OwnedSubject::ConnectionPermission(c) => Subject::ConnectionPermission(c),
        }
    }
}

/// Where an answer to a card arrived: the channel and the live connection.
/// Plain data that proves nothing by itself — the engine checks it against
/// the connections the channels registered as owner-authenticated.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AnswerOrigin {
    pub channel: String,
    pub connection_id: String,
}

impl AnswerOrigin {
    pub fn new(channel: impl Into<String>, connection_id: impl Into<String>) -> Self {
        AnswerOrigin {
            channel: channel.into(),
            connection_id: connection_id.into(),
        }
    }
}

/// The connections that authenticated as the owner, as the channel layer
/// reports them (registered after authentication, removed on close). The
/// engine's only source of "this answer is the owner's": a connection that
/// never authenticated with an owner credential is never in it. Each maps to
/// the paired device whose credential it presented, when it was a device's
/// (the audit of an approval names it).
#[derive(Clone, Default)]
pub struct OwnerSessions(Arc<std::sync::RwLock<SessionDevices>>);

/// (channel, connection id) → the paired device, if a device's credential.
type SessionDevices = std::collections::HashMap<(String, String), Option<String>>;

impl OwnerSessions {
    fn key(channel: &str, connection_id: &str) -> (String, String) {
        (channel.to_string(), connection_id.to_string())
    }

    /// `connection_id` on `channel` authenticated with an owner credential.
    pub fn authenticated(&self, channel: &str, connection_id: &str) {
        self.authenticated_device(channel, connection_id, None);
    }

    /// As [`Self::authenticated`], with the paired device whose credential
    /// it presented (`None`: the configured token, or a channel's own owner
    /// identity such as the Telegram owner chat).
    pub fn authenticated_device(
        &self,
        channel: &str,
        connection_id: &str,
        device_id: Option<String>,
    ) {
        if let Ok(mut s) = self.0.write() {
            s.insert(Self::key(channel, connection_id), device_id);
        }
    }

    /// The paired device behind `origin`, if it is a live owner connection
    /// that presented a device's credential.
    pub fn device(&self, origin: &AnswerOrigin) -> Option<String> {
        self.0
            .read()
            .ok()?
            .get(&Self::key(&origin.channel, &origin.connection_id))
            .cloned()
            .flatten()
    }

    /// The connection closed (or its credential was revoked).
    pub fn closed(&self, channel: &str, connection_id: &str) {
        if let Ok(mut s) = self.0.write() {
            s.remove(&Self::key(channel, connection_id));
        }
    }

    /// Whether `origin` is a live owner-authenticated connection. A poisoned
    /// lock answers no: fail closed.
    pub fn is_owner(&self, origin: &AnswerOrigin) -> bool {
        self.0
            .read()
            .map(|s| s.contains_key(&Self::key(&origin.channel, &origin.connection_id)))
            .unwrap_or(false)
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
    owners: OwnerSessions,
}

impl ApprovalService {
    pub fn new(store: Store, key: Arc<OwnerKey>, policy: IssuePolicy) -> Self {
        ApprovalService {
            store,
            key,
            policy,
            owners: OwnerSessions::default(),
        }
    }

    /// Uses `sessions` (shared with the channel that authenticates owners).
    pub fn with_owner_sessions(mut self, sessions: OwnerSessions) -> Self {
        self.owners = sessions;
        self
    }

    /// The owner-authenticated connections this engine trusts answers from
    /// (shared by clones: the channel registers, the engine checks).
    pub fn owner_sessions(&self) -> OwnerSessions {
        self.owners.clone()
    }

    /// Whether an answer from `origin` is the owner's.
    pub fn is_owner(&self, origin: &AnswerOrigin) -> bool {
        self.owners.is_owner(origin)
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
    /// The approval must have arrived on a connection that authenticated as
    /// the owner; anything else is refused and audited — there is no other
    /// way to mint a token.
    pub fn issue_token(
        &self,
        subject: Subject<'_>,
        decision: &ApprovalDecision,
        scope: ApprovalScope,
        origin: &AnswerOrigin,
        now: Timestamp,
    ) -> Result<ApprovalToken, ApprovalError> {
        if !self.owners.is_owner(origin) {
            self.audit(
                "approval.refused_not_owner",
                json!({"channel": origin.channel, "connection_id": origin.connection_id,
                       "scope": scope, "verdict": decision.verdict.as_str()}),
            )?;
            return Err(ApprovalError::NotOwner {
                channel: origin.channel.clone(),
                connection_id: origin.connection_id.clone(),
            });
        }
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
        // The channel is the server's record of where the owner answered
        // (signed with the rest); whatever a client put there is replaced.
        token.conditions.insert(
            silas_core::model::approval::APPROVED_VIA_KEY.to_string(),
            Value::from(origin.channel.as_str()),
        );
        let payload = projections::token_signing_payload(&token)
            .map_err(|e| ApprovalError::Issue(IssueError::Unhashable(e.to_string())))?;
        token.signature = Base64Bytes(self.key.sign(&payload).to_bytes().to_vec());
        let audit = obj(
            json!({"token_id": token.token_id, "work_item_id": token.work_item_id,
            "scope": token.scope, "plan_hash": token.plan_hash, "expires_at": token.expires_at,
            "max_executions": token.max_executions, "approval_strength": token.approval_strength,
            "channel": origin.channel, "device_id": self.owners.device(origin)}),
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

    /// What a standing (goal) approval issued now would cover, for its card.
    pub fn standing_limits(&self) -> silas_core::goal_terms::StandingLimits {
        silas_core::goal_terms::StandingLimits {
            ttl_minutes: self.policy.standing_ttl_minutes,
            max_executions: self.policy.max_standing_executions,
        }
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
        origin: AnswerOrigin,
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
    /// Non-consuming check of a goal's standing token (§5.2.3).
    CheckStanding {
        token: ApprovalToken,
        goal: WorkItem,
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

impl ApprovalEngine {
    /// The daemon's permanent child, registered as [`APPROVAL_ENGINE_NAME`]
    /// so [`ApprovalHandle::daemon`] follows its restarts.
    pub fn child_spec(service: ApprovalService) -> crate::supervisor::ChildSpec {
        crate::supervisor::ChildSpec {
            label: "approval_engine".into(),
            mode: crate::supervisor::RestartMode::Permanent,
            spawn: Arc::new(move |parent| {
                let service = service.clone();
                Box::pin(async move {
                    let (r, _) = Actor::spawn_linked(
                        Some(APPROVAL_ENGINE_NAME.into()),
                        ApprovalEngine,
                        service,
                        parent,
                    )
                    .await?;
                    Ok(r.get_cell())
                })
            }),
        }
    }
}

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
                origin,
                reply,
            } => {
                if !reply.is_closed() {
                    let _ = reply.send(svc.issue_token(
                        subject.as_subject(),
                        &decision,
                        scope,
                        &origin,
                        now,
                    ));
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
            ApprovalMsg::CheckStanding { token, goal, reply } => {
                if !reply.is_closed() {
                    let _ = reply.send(svc.check_standing(&token, &goal, now));
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

/// Registered name of the daemon's ApprovalEngine.
pub const APPROVAL_ENGINE_NAME: &str = "silas.approvals";
/// Bound on one round trip to the engine (a consuming verify commits one
/// redb transaction; this is far above that).
pub const APPROVAL_RPC_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

enum EngineTarget {
    Named(Arc<str>),
    Standalone(
        Arc<tokio::sync::Mutex<Option<ActorRef<ApprovalMsg>>>>,
        ApprovalService,
    ),
}

/// The callers' handle to the ApprovalEngine actor: the one way the runtime
/// turns an answer into a token. The daemon's finds [`APPROVAL_ENGINE_NAME`]
/// per call; tests use a standalone engine. No fallback: an engine that
/// cannot answer is an error, never an approval.
#[derive(Clone)]
pub struct ApprovalHandle {
    target: Arc<EngineTarget>,
}

impl ApprovalHandle {
    /// The daemon's supervised engine.
    pub fn daemon() -> Self {
        ApprovalHandle {
            target: Arc::new(EngineTarget::Named(Arc::from(APPROVAL_ENGINE_NAME))),
        }
    }

    /// An unsupervised engine over `service`, spawned on first use.
    pub fn standalone(service: ApprovalService) -> Self {
        ApprovalHandle {
            target: Arc::new(EngineTarget::Standalone(
                Arc::new(tokio::sync::Mutex::new(None)),
                service,
            )),
        }
    }

    async fn actor(&self) -> Result<ActorRef<ApprovalMsg>, ApprovalError> {
        let unavailable = ApprovalError::Unavailable;
        match self.target.as_ref() {
            EngineTarget::Named(name) => ractor::registry::where_is(name.as_ref())
                .map(ActorRef::from)
                .ok_or_else(|| unavailable(format!("no approval engine registered as {name}"))),
            EngineTarget::Standalone(slot, service) => {
                let mut slot = slot.lock().await;
                if let Some(a) = slot.as_ref()
                    && a.get_status() == ractor::ActorStatus::Running
                {
                    return Ok(a.clone());
                }
                let (a, _) = Actor::spawn(None, ApprovalEngine, service.clone())
                    .await
                    .map_err(|e| unavailable(e.to_string()))?;
                *slot = Some(a.clone());
                Ok(a)
            }
        }
    }

    async fn call<T: Send + 'static>(
        &self,
        msg: impl FnOnce(Reply<T>) -> ApprovalMsg,
    ) -> Result<T, ApprovalError> {
        let actor = self.actor().await?;
        match actor.call(msg, Some(APPROVAL_RPC_TIMEOUT)).await {
            Ok(ractor::rpc::CallResult::Success(r)) => r,
            Ok(ractor::rpc::CallResult::Timeout) => Err(ApprovalError::Unavailable(
                "approval engine did not answer in time".into(),
            )),
            Ok(ractor::rpc::CallResult::SenderError) => Err(ApprovalError::Unavailable(
                "approval engine stopped before answering".into(),
            )),
            Err(e) => Err(ApprovalError::Unavailable(format!(
                "approval engine unreachable: {e}"
            ))),
        }
    }

    /// Mint a token for the owner's answer that arrived on `origin`.
    pub async fn issue_token(
        &self,
        subject: OwnedSubject,
        decision: ApprovalDecision,
        scope: ApprovalScope,
        origin: AnswerOrigin,
    ) -> Result<ApprovalToken, ApprovalError> {
        self.call(|reply| ApprovalMsg::Issue {
            subject,
            decision,
            scope,
            origin,
            reply,
        })
        .await
    }

    /// Consuming verification of a work item's token.
    pub async fn verify(
        &self,
        token: ApprovalToken,
        work_item: WorkItem,
        spawned_task: Option<WorkItem>,
    ) -> Result<ApprovalToken, ApprovalError> {
        self.call(|reply| ApprovalMsg::Verify {
            token,
            work_item,
            spawned_task,
            reply,
        })
        .await
    }

    /// Non-consuming check of a goal's standing token.
    pub async fn check_standing(
        &self,
        token: ApprovalToken,
        goal: WorkItem,
    ) -> Result<(), ApprovalError> {
        self.call(|reply| ApprovalMsg::CheckStanding { token, goal, reply })
            .await
    }

    /// Consuming verification of a token bound to another subject.
    pub async fn verify_subject(
        &self,
        token: ApprovalToken,
        subject: OwnedSubject,
    ) -> Result<ApprovalToken, ApprovalError> {
        self.call(|reply| ApprovalMsg::VerifySubject {
            token,
            subject,
            reply,
        })
        .await
    }
}
