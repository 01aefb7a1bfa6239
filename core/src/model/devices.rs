//! Owner devices of the web channel (issue #12): each paired browser or the
//! local CLI holds its own random credential; the store keeps only its hash.

use serde::{Deserialize, Serialize};

use crate::Timestamp;

/// One owner device. `token_sha256` is the hex SHA-256 of the device's
/// bearer token — the token itself is never stored, logged or audited.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnerDevice {
    pub device_id: String,
    pub label: String,
    pub token_sha256: String,
    pub created_at: Timestamp,
    pub last_seen: Option<Timestamp>,
    pub revoked: bool,
}
