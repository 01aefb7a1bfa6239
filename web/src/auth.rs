//! Owner authentication (issue #12): the owner is always authenticated,
//! loopback included. Each owner device holds its own random credential
//! (256 bits); only its SHA-256 is kept (the store via [`DeviceStore`]).
//! A device is created by redeeming a one-time pairing code (10 min, single
//! use, kept hashed in memory) or by the daemon for the local CLI. A
//! configured `channels.web.auth_token` stays an owner credential too.
//!
//! Failed authentications are throttled per remote address: once
//! [`FAILED_AUTH_LIMIT`] failures fall in the last [`FAILED_AUTH_WINDOW`],
//! further attempts from that address are refused before any comparison.
//! Every failure is audited (address and reason, never token material).
//! The policy parts ([`PairingCodes`], [`Throttle`]) take the clock as an
//! argument so they are unit-tested without waiting.

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::json;
use silas_core::Timestamp;
use silas_core::canonical::{hex_lower, sha256_hex};
use silas_core::model::devices::OwnerDevice;
use tokio::sync::broadcast;

use crate::customers::{CapRefusal, CustomerConnections, CustomerSlot};

/// How long a pairing code can be redeemed.
pub const PAIRING_CODE_TTL: Duration = Duration::from_secs(10 * 60);
/// Failed authentications per address tolerated within the window.
pub const FAILED_AUTH_LIMIT: usize = 50;
pub const FAILED_AUTH_WINDOW: Duration = Duration::from_secs(60);
/// WebSocket connections allowed to be open before they authenticate
/// in-band (a first `auth` frame). A connection whose credential rides in
/// the subprotocol header is checked before the upgrade and never counts.
pub const MAX_UNAUTHENTICATED: u32 = 64;
/// Of those, from one address (an IPv6 /64): one client cannot hold them
/// all. In-band authentication is only the web app's fallback for a token
/// a header cannot carry, one socket per tab, so 8 is ample.
pub const MAX_UNAUTHENTICATED_PER_ADDRESS: u32 = 8;
/// Pairing codes outstanding at once (older ones are dropped first).
const MAX_PAIRING_CODES: usize = 32;
/// Addresses tracked by the throttle; beyond this the stalest are dropped.
const MAX_THROTTLED_ADDRESSES: usize = 4096;

/// What [`OwnerAuth::revoke`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Revocation {
    Revoked,
    AlreadyRevoked,
    NoSuchDevice,
}

#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("no randomness available: {0}")]
    Random(String),
    #[error("cannot persist the device record: {0}")]
    Store(String),
}

impl silas_core::Coded for AuthError {
    fn code(&self) -> silas_core::ErrorCode {
        match self {
            AuthError::Random(_) => silas_core::ErrorCode::ECfgIo,
            AuthError::Store(_) => silas_core::ErrorCode::EDbIo,
        }
    }
}

/// A fresh random secret: 32 bytes, lowercase hex.
pub fn new_secret() -> Result<String, AuthError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| AuthError::Random(e.to_string()))?;
    Ok(hex_lower(&bytes))
}

/// A device label as stored: at most 64 characters, with no control or
/// bidirectional-override characters — a label is printed to the owner's
/// terminal, where an escape sequence or a newline would rewrite the lines
/// around it. Empty after that: "device".
pub fn printable_label(label: &str) -> String {
    let cut = |c: char| {
        c.is_whitespace()
            || c.is_control()
            || matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
    };
    let words: Vec<&str> = label.split(cut).filter(|w| !w.is_empty()).collect();
    let kept: String = words.join(" ").chars().take(64).collect();
    if kept.is_empty() {
        "device".to_string()
    } else {
        kept
    }
}

/// What the store keeps of a token or code.
pub fn secret_hash(secret: &str) -> String {
    sha256_hex(secret.as_bytes())
}

/// Why a pairing code was not accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PairRefusal {
    /// Never issued, or already redeemed (indistinguishable on purpose).
    Unknown,
    Expired,
}

impl PairRefusal {
    pub fn as_str(self) -> &'static str {
        match self {
            PairRefusal::Unknown => "unknown_or_used_code",
            PairRefusal::Expired => "expired_code",
        }
    }
}

/// Outstanding pairing codes, by hash, with their expiry.
#[derive(Debug, Default)]
pub struct PairingCodes {
    /// Code hash → (expiry, the device whose credential asked for it;
    /// `None` for the config token or the daemon's first start).
    codes: HashMap<String, (Instant, Option<String>)>,
}

impl PairingCodes {
    pub fn insert(&mut self, code: &str, issuer: Option<&str>, now: Instant) {
        self.codes.retain(|_, (exp, _)| *exp > now);
        if self.codes.len() >= MAX_PAIRING_CODES
            && let Some(oldest) = self
                .codes
                .iter()
                .min_by_key(|(_, (exp, _))| *exp)
                .map(|(k, _)| k.clone())
        {
            self.codes.remove(&oldest);
        }
        self.codes.insert(
            secret_hash(code),
            (now + PAIRING_CODE_TTL, issuer.map(str::to_string)),
        );
    }

    /// Consume `code`: valid once, before its expiry. The device that
    /// asked for it, if one did.
    pub fn redeem(&mut self, code: &str, now: Instant) -> Result<Option<String>, PairRefusal> {
        // Removed whatever the outcome: an expired code never comes back.
        match self.codes.remove(&secret_hash(code)) {
            None => Err(PairRefusal::Unknown),
            Some((exp, _)) if exp <= now => Err(PairRefusal::Expired),
            Some((_, issuer)) => Ok(issuer),
        }
    }

    /// Drops every code `device_id` asked for; how many. A revoked
    /// device's codes must not outlive it: a stolen device's holder asked
    /// for one, was revoked, and paired again with it.
    pub fn forget_issued_by(&mut self, device_id: &str) -> usize {
        let before = self.codes.len();
        self.codes
            .retain(|_, (_, issuer)| issuer.as_deref() != Some(device_id));
        before - self.codes.len()
    }
}

/// Who is authenticating: a remote address (web) or the local user on the
/// other end of the control socket (by uid, from the kernel's peer
/// credentials). Failures are throttled per peer either way.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Peer {
    Ip(IpAddr),
    LocalUid(u32),
}

impl From<IpAddr> for Peer {
    /// An IPv6 address counts as its /64 (one host usually holds the whole
    /// prefix: per address it had 50 guesses a minute from each of 2^64),
    /// an IPv4-mapped one as the IPv4 address, as the customer caps count.
    /// Every IPv4 loopback address is one peer here: a local process may
    /// send from any of 127/8, and one rotating through them wrote 10,000
    /// failed sign-ins to the owner's audit log in 9 s (red-team F5). The
    /// customer caps, bounded by their totals, count them apart.
    fn from(ip: IpAddr) -> Self {
        match silas_core::address::counted_as(ip) {
            IpAddr::V4(v4) if v4.is_loopback() => Peer::Ip(IpAddr::V4(Ipv4Addr::LOCALHOST)),
            counted => Peer::Ip(counted),
        }
    }
}

impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Peer::Ip(ip) => write!(f, "{ip}"),
            Peer::LocalUid(uid) => write!(f, "local uid {uid}"),
        }
    }
}

/// At [`MAX_THROTTLED_ADDRESSES`] peers, forgets the one whose `last` is
/// oldest, so a new peer fits.
fn make_room<V>(map: &mut HashMap<Peer, V>, last: impl Fn(&V) -> Option<Instant>) {
    if map.len() < MAX_THROTTLED_ADDRESSES {
        return;
    }
    if let Some(stale) = map.iter().min_by_key(|(_, v)| last(v)).map(|(p, _)| *p) {
        map.remove(&stale);
    }
}

/// Failed-authentication counts per peer over a sliding window.
#[derive(Debug, Default)]
pub struct Throttle {
    failures: HashMap<Peer, VecDeque<Instant>>,
    /// Per throttled peer: when its refusals were last audited, and how
    /// many were refused since without an entry.
    refusals: HashMap<Peer, (Instant, u64)>,
}

impl Throttle {
    /// Whether `ip` may attempt to authenticate now.
    pub fn allowed(&mut self, ip: impl Into<Peer>, now: Instant) -> bool {
        let ip = ip.into();
        let Some(q) = self.failures.get_mut(&ip) else {
            self.refusals.remove(&ip);
            return true;
        };
        while q
            .front()
            .is_some_and(|t| now.saturating_duration_since(*t) >= FAILED_AUTH_WINDOW)
        {
            q.pop_front();
        }
        if q.is_empty() {
            self.failures.remove(&ip);
            self.refusals.remove(&ip);
            return true;
        }
        q.len() < FAILED_AUTH_LIMIT
    }

    /// A throttled attempt from `peer` was refused: `Some(n)` when it is to
    /// be audited (the first of its lock-out, then at most once per window),
    /// `n` the refusals left unaudited since the last entry. One entry per
    /// refused request let any client that reaches the port grow the audit
    /// log (and the owner's Activity) by thousands of entries a minute.
    pub fn refused(&mut self, peer: impl Into<Peer>, now: Instant) -> Option<u64> {
        let peer = peer.into();
        match self.refusals.get_mut(&peer) {
            Some((last, quiet)) if now.saturating_duration_since(*last) < FAILED_AUTH_WINDOW => {
                *quiet += 1;
                None
            }
            Some((last, quiet)) => {
                let n = *quiet;
                *last = now;
                *quiet = 0;
                Some(n)
            }
            None => {
                // Bounded like `failures`: the peer audited longest ago goes.
                make_room(&mut self.refusals, |(t, _)| Some(*t));
                self.refusals.insert(peer, (now, 0));
                Some(0)
            }
        }
    }

    pub fn record_failure(&mut self, ip: impl Into<Peer>, now: Instant) {
        let ip = ip.into();
        if !self.failures.contains_key(&ip) {
            // Bounded memory: forget the address whose last failure is oldest.
            make_room(&mut self.failures, |q| q.back().copied());
        }
        let q = self.failures.entry(ip).or_default();
        q.push_back(now);
        // Only the most recent LIMIT failures matter for the decision.
        while q.len() > FAILED_AUTH_LIMIT {
            q.pop_front();
        }
    }
}

/// Where device records live (the redb store in the daemon).
pub trait DeviceStore: Send + Sync + 'static {
    fn load(&self) -> Result<Vec<OwnerDevice>, String>;
    fn save(&self, device: &OwnerDevice) -> Result<(), String>;
    /// Save a `last_seen` refresh; may skip the fsync (losing one is harmless).
    fn save_seen(&self, device: &OwnerDevice) -> Result<(), String> {
        self.save(device)
    }
}

/// No persistence: devices last as long as the process (tests, tools).
pub struct EphemeralDevices;

impl DeviceStore for EphemeralDevices {
    fn load(&self) -> Result<Vec<OwnerDevice>, String> {
        Ok(Vec::new())
    }
    fn save(&self, _: &OwnerDevice) -> Result<(), String> {
        Ok(())
    }
}

/// Where authentication events go (the audit log in the daemon).
pub trait AuthAudit: Send + Sync + 'static {
    fn record(&self, event: &str, data: serde_json::Value);
}

/// Audits to the tracing log only.
pub struct LogAudit;

impl AuthAudit for LogAudit {
    fn record(&self, event: &str, data: serde_json::Value) {
        tracing::info!(event, %data, "web auth");
    }
}

/// Which owner credential a connection presented.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Credential {
    /// The configured `channels.web.auth_token`.
    ConfigToken,
    /// A paired (or CLI) device.
    Device(String),
}

impl Credential {
    pub fn device_id(&self) -> Option<&str> {
        match self {
            Credential::Device(id) => Some(id),
            Credential::ConfigToken => None,
        }
    }
}

/// Result of checking a presented credential.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AuthOutcome {
    Owner(Credential),
    /// The address is over its failure budget: nothing was compared.
    Throttled,
    Refused,
}

/// The owner's credentials and the rules around them.
pub struct OwnerAuth {
    config_token: Option<String>,
    /// device_id → record (the store's contents, cached).
    devices: Mutex<HashMap<String, OwnerDevice>>,
    store: Arc<dyn DeviceStore>,
    audit: Arc<dyn AuthAudit>,
    codes: Mutex<PairingCodes>,
    /// The local CLI's device (`set_local_device`).
    local_device: Mutex<Option<String>>,
    throttle: Mutex<Throttle>,
    revoked: broadcast::Sender<String>,
    /// Sockets waiting for an in-band `auth` frame: counted per address
    /// and in all like chatbot customers (the same bookkeeping).
    unauthenticated: Arc<CustomerConnections>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic elsewhere while holding the lock leaves plain data behind.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn unauthenticated_caps() -> Arc<CustomerConnections> {
    CustomerConnections::new(MAX_UNAUTHENTICATED_PER_ADDRESS, MAX_UNAUTHENTICATED)
}

fn remote(peer: Option<Peer>) -> String {
    peer.map(|p| p.to_string())
        .unwrap_or_else(|| "unknown".into())
}

impl OwnerAuth {
    /// Load the devices from `store`.
    pub fn new(
        config_token: Option<String>,
        store: Arc<dyn DeviceStore>,
        audit: Arc<dyn AuthAudit>,
    ) -> Result<Self, AuthError> {
        let loaded = store.load().map_err(AuthError::Store)?;
        let devices = loaded
            .into_iter()
            .map(|d| (d.device_id.clone(), d))
            .collect();
        Ok(OwnerAuth {
            config_token: config_token.filter(|t| !t.is_empty()),
            devices: Mutex::new(devices),
            store,
            audit,
            codes: Mutex::new(PairingCodes::default()),
            local_device: Mutex::new(None),
            throttle: Mutex::new(Throttle::default()),
            revoked: broadcast::channel(16).0,
            unauthenticated: unauthenticated_caps(),
        })
    }

    /// No devices, no persistence, audit to the log.
    pub fn ephemeral(config_token: Option<String>) -> Self {
        OwnerAuth {
            config_token: config_token.filter(|t| !t.is_empty()),
            devices: Mutex::new(HashMap::new()),
            store: Arc::new(EphemeralDevices),
            audit: Arc::new(LogAudit),
            codes: Mutex::new(PairingCodes::default()),
            local_device: Mutex::new(None),
            throttle: Mutex::new(Throttle::default()),
            revoked: broadcast::channel(16).0,
            unauthenticated: unauthenticated_caps(),
        }
    }

    pub fn has_config_token(&self) -> bool {
        self.config_token.is_some()
    }

    /// Whether `ip` is over its failure budget (checked before comparing).
    pub fn throttled(&self, ip: Option<IpAddr>) -> bool {
        self.throttled_peer(ip.map(Peer::from))
    }

    fn throttled_peer(&self, peer: Option<Peer>) -> bool {
        peer.is_some_and(|p| !lock(&self.throttle).allowed(p, Instant::now()))
    }

    /// Record and audit one failed authentication from `ip`.
    pub fn failed(&self, ip: Option<IpAddr>, channel: &str, reason: &str) {
        self.failed_peer(ip.map(Peer::from), channel, reason);
    }

    /// [`Self::failed`] for any kind of peer.
    pub fn failed_peer(&self, peer: Option<Peer>, channel: &str, reason: &str) {
        if let Some(p) = peer {
            lock(&self.throttle).record_failure(p, Instant::now());
        }
        self.audit.record(
            "web.auth_failed",
            json!({"remote": remote(peer), "channel": channel, "reason": reason}),
        );
    }

    /// [`Self::throttled`], audited when it refuses.
    pub fn throttled_now(&self, ip: Option<IpAddr>, channel: &str) -> bool {
        self.throttled_now_peer(ip.map(Peer::from), channel)
    }

    fn throttled_now_peer(&self, peer: Option<Peer>, channel: &str) -> bool {
        let refused = self.throttled_peer(peer);
        if refused {
            self.audit_throttled(peer, channel);
        }
        refused
    }

    /// A refusal of a throttled peer, audited once per window (see
    /// [`Throttle::refused`]).
    fn audit_throttled(&self, peer: Option<Peer>, channel: &str) {
        let Some(p) = peer else { return };
        if let Some(unaudited) = lock(&self.throttle).refused(p, Instant::now()) {
            self.audit.record(
                "web.auth_throttled",
                json!({"remote": remote(peer), "channel": channel,
                       "refused_since_last_entry": unaudited}),
            );
        }
    }

    /// Compare `token` with the owner credentials (no throttle, no audit).
    pub fn identify(&self, token: &str) -> Option<Credential> {
        if let Some(expected) = &self.config_token
            && crate::ws::token_eq(token, expected)
        {
            return Some(Credential::ConfigToken);
        }
        self.device_of(token).map(Credential::Device)
    }

    /// The live device whose credential `token` is.
    fn device_of(&self, token: &str) -> Option<String> {
        // Hash lookup: the tokens are 256-bit random, so timing on their
        // hashes reveals nothing usable.
        let hash = secret_hash(token);
        lock(&self.devices)
            .values()
            .find(|d| !d.revoked && crate::ws::token_eq(&d.token_sha256, &hash))
            .map(|d| d.device_id.clone())
    }

    /// The full check: throttle first, then compare; failures recorded and
    /// audited, a device's `last_seen` refreshed on success.
    ///
    /// A locked-out address may still present a device credential. Device
    /// tokens are 256-bit random, so the throttle protects none of them,
    /// while refusing them let anyone sharing the owner's address lock the
    /// owner out: any local process on loopback, or every client at once
    /// behind a reverse proxy. The configured `auth_token` is the owner's
    /// own choice and may be guessable: it stays throttled.
    pub fn check(&self, ip: Option<IpAddr>, token: Option<&str>, channel: &str) -> AuthOutcome {
        self.check_peer(ip.map(Peer::from), token, channel)
    }

    /// [`Self::check`] for any kind of peer (the control socket's local uid).
    pub fn check_peer(
        &self,
        peer: Option<Peer>,
        token: Option<&str>,
        channel: &str,
    ) -> AuthOutcome {
        if self.throttled_peer(peer) {
            if let Some(id) = token
                .filter(|t| !t.is_empty())
                .and_then(|t| self.device_of(t))
            {
                self.touch(&id);
                return AuthOutcome::Owner(Credential::Device(id));
            }
            self.audit_throttled(peer, channel);
            return AuthOutcome::Throttled;
        }
        let found = token
            .filter(|t| !t.is_empty())
            .and_then(|t| self.identify(t));
        match found {
            Some(c) => {
                if let Credential::Device(id) = &c {
                    self.touch(id);
                }
                AuthOutcome::Owner(c)
            }
            // A request over the network without any credential is not a
            // guess: neither counted nor audited. A browser sends one from
            // any page that embeds the URL (an `<img>` needs no CORS), so
            // counting it let any page the owner visited lock the address
            // out of pairing and `auth_token` sign-in, and auditing it let
            // anyone fill the owner's log and Activity. A local process on
            // the control socket is one uid, throttled like a guess.
            None if token.is_none_or(str::is_empty) && matches!(peer, Some(Peer::Ip(_)) | None) => {
                tracing::debug!(channel, "request without a credential refused");
                AuthOutcome::Refused
            }
            None => {
                let reason = if token.is_some_and(|t| !t.is_empty()) {
                    "invalid_credential"
                } else {
                    "missing_credential"
                };
                self.failed_peer(peer, channel, reason);
                AuthOutcome::Refused
            }
        }
    }

    fn touch(&self, device_id: &str) {
        let updated = {
            let mut devices = lock(&self.devices);
            devices.get_mut(device_id).map(|d| {
                d.last_seen = Some(Timestamp::now());
                d.clone()
            })
        };
        if let Some(d) = updated
            && let Err(e) = self.store.save_seen(&d)
        {
            tracing::warn!(device_id, "cannot record last_seen: {e}");
        }
    }

    /// A new device with a fresh credential: the record and the token
    /// (returned once; only its hash is kept).
    /// `label` comes from the pairing client and is later printed by
    /// `silas devices list`: see [`printable_label`].
    pub fn create_device(&self, label: &str) -> Result<(OwnerDevice, String), AuthError> {
        self.add_device(label, None)
    }

    /// [`Self::create_device`], audited with the device whose pairing code
    /// it redeemed (`paired_by`), if one asked for it.
    fn add_device(
        &self,
        label: &str,
        paired_by: Option<&str>,
    ) -> Result<(OwnerDevice, String), AuthError> {
        let token = new_secret()?;
        let id = new_secret()?;
        let device = OwnerDevice {
            device_id: format!("dev-{}", &id[..16]),
            label: printable_label(label),
            token_sha256: secret_hash(&token),
            created_at: Timestamp::now(),
            last_seen: None,
            revoked: false,
        };
        self.store.save(&device).map_err(AuthError::Store)?;
        lock(&self.devices).insert(device.device_id.clone(), device.clone());
        self.audit.record(
            "web.device_added",
            json!({"device_id": device.device_id, "label": device.label,
                   "paired_by": paired_by}),
        );
        Ok((device, token))
    }

    /// A fresh pairing code (valid [`PAIRING_CODE_TTL`], once).
    pub fn issue_pairing_code(&self, issuer: Option<&Credential>) -> Result<String, AuthError> {
        let code = new_secret()?;
        let by = issuer.and_then(Credential::device_id);
        lock(&self.codes).insert(&code, by, Instant::now());
        self.audit
            .record("web.pairing_code_issued", json!({"issued_by": by}));
        Ok(code)
    }

    /// Pins the local CLI's device: the web API never revokes it (a stolen
    /// browser token revoked it, and `silas stop`/`status` failed until a
    /// restart). It is replaced with `cli.token` at the daemon's start.
    pub fn set_local_device(&self, device_id: &str) {
        *lock(&self.local_device) = Some(device_id.to_string());
    }

    /// Whether `device_id` is the pinned local CLI device.
    pub fn is_local_device(&self, device_id: &str) -> bool {
        lock(&self.local_device).as_deref() == Some(device_id)
    }

    /// Exchange a pairing code for a new device credential.
    pub fn redeem(
        &self,
        ip: Option<IpAddr>,
        code: &str,
        label: &str,
    ) -> Result<(OwnerDevice, String), RedeemError> {
        if self.throttled_now(ip, "pair") {
            return Err(RedeemError::Throttled);
        }
        let outcome = lock(&self.codes).redeem(code, Instant::now());
        let issuer = match outcome {
            Ok(issuer) => issuer,
            Err(why) => {
                self.failed(ip, "pair", why.as_str());
                return Err(RedeemError::Refused(why));
            }
        };
        self.add_device(label, issuer.as_deref())
            .map_err(RedeemError::Internal)
    }

    /// Every device, oldest first.
    pub fn list(&self) -> Vec<OwnerDevice> {
        let mut all: Vec<_> = lock(&self.devices).values().cloned().collect();
        all.sort_by(|a, b| (a.created_at, &a.device_id).cmp(&(b.created_at, &b.device_id)));
        all
    }

    /// Revoke a device: its token is refused from now on and its open
    /// sockets are closed. A device revoked before is left as it is (no
    /// second audit entry).
    pub fn revoke(&self, device_id: &str) -> Result<Revocation, AuthError> {
        let updated = {
            let devices = lock(&self.devices);
            match devices.get(device_id) {
                None => return Ok(Revocation::NoSuchDevice),
                Some(d) if d.revoked => return Ok(Revocation::AlreadyRevoked),
                Some(d) => OwnerDevice {
                    revoked: true,
                    ..d.clone()
                },
            }
        };
        let device = updated;
        self.store.save(&device).map_err(AuthError::Store)?;
        lock(&self.devices).insert(device.device_id.clone(), device);
        let codes_dropped = lock(&self.codes).forget_issued_by(device_id);
        self.audit.record(
            "web.device_revoked",
            json!({"device_id": device_id, "pairing_codes_dropped": codes_dropped}),
        );
        // No receiver simply means no open socket.
        let _ = self.revoked.send(device_id.to_string());
        Ok(Revocation::Revoked)
    }

    /// Revocations as they happen (sessions close their socket on a match).
    pub fn revocations(&self) -> broadcast::Receiver<String> {
        self.revoked.subscribe()
    }

    /// Whether a device is (now) revoked or unknown.
    pub fn is_revoked(&self, device_id: &str) -> bool {
        lock(&self.devices).get(device_id).is_none_or(|d| d.revoked)
    }

    /// Take a slot for a connection from `ip` that is to authenticate
    /// in-band, or which cap refuses it: [`MAX_UNAUTHENTICATED_PER_ADDRESS`]
    /// from its address (an IPv6 /64), or [`MAX_UNAUTHENTICATED`] in all.
    pub fn unauthenticated_slot(&self, ip: Option<IpAddr>) -> Result<UnauthSlot, CapRefusal> {
        self.unauthenticated
            .acquire(ip)
            .map(|slot| UnauthSlot { _slot: slot })
    }

    /// Sockets open now that have not authenticated yet.
    pub fn unauthenticated_open(&self) -> u32 {
        self.unauthenticated.open()
    }
}

/// Why a pairing code exchange failed.
#[derive(Debug)]
pub enum RedeemError {
    Throttled,
    Refused(PairRefusal),
    Internal(AuthError),
}

/// Held while a connection is unauthenticated; released on drop (also when
/// the upgrade never happens).
pub struct UnauthSlot {
    _slot: CustomerSlot,
}

#[cfg(test)]
#[path = "auth_tests.rs"]
mod tests;
