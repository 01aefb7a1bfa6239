//! The error taxonomy of spec §18.1. Every error Silas reports maps to exactly
//! one [`ErrorCode`]; its string form (`E_CFG_INVALID`, …) is what appears in
//! CLI output, audit entries and protocol error frames.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The §18.1 families. The family decides the handling policy (fail fast,
/// retry, fail closed, …); the specific code names the failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorFamily {
    /// Configuration/startup: fail fast, refuse start.
    Cfg,
    /// Model API, parse, timeout: bounded retry, then fallback.
    Llm,
    /// Storage: retry transient, fail closed on corruption.
    Db,
    /// Executor/verification sandbox: fail the work item, never bypass verification.
    Sandbox,
    /// Gate providers: policy lane fails closed, quality lane fails open.
    Gate,
    /// Channel disconnects/timeouts: safe defaults.
    Channel,
    /// Signature/hash/nonce mismatch: hard deny with audit.
    Approval,
}

/// A specific taxonomy code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ErrorCode {
    // configuration / startup
    ECfgInvalid,
    ECfgUnknownKey,
    ECfgParse,
    ECfgIo,
    ECfgKeystore,
    // model layer
    ELlmApi,
    ELlmTimeout,
    ELlmParse,
    ELlmRateLimited,
    // storage
    EDbIo,
    EDbCorrupt,
    EDbSchemaMismatch,
    EDbEncoding,
    EDbNotFound,
    EDbAuditChainBroken,
    // sandbox
    ESandboxUnavailable,
    ESandboxTimeout,
    ESandboxFailed,
    // gates
    EGateProvider,
    EGateBlocked,
    // channels
    EChannelProtocol,
    EChannelDisconnected,
    EChannelTimeout,
    EChannelAuth,
    /// Over a §18.5 rate limit: refused deterministically, nothing done.
    EChannelRateLimited,
    // approval
    EApprovalSignature,
    EApprovalHash,
    EApprovalNonce,
    EApprovalExpired,
    EApprovalExhausted,
    EApprovalScope,
}

impl ErrorCode {
    pub fn as_str(&self) -> &'static str {
        use ErrorCode::*;
        match self {
            ECfgInvalid => "E_CFG_INVALID",
            ECfgUnknownKey => "E_CFG_UNKNOWN_KEY",
            ECfgParse => "E_CFG_PARSE",
            ECfgIo => "E_CFG_IO",
            ECfgKeystore => "E_CFG_KEYSTORE",
            ELlmApi => "E_LLM_API",
            ELlmTimeout => "E_LLM_TIMEOUT",
            ELlmParse => "E_LLM_PARSE",
            ELlmRateLimited => "E_LLM_RATE_LIMITED",
            EDbIo => "E_DB_IO",
            EDbCorrupt => "E_DB_CORRUPT",
            EDbSchemaMismatch => "E_DB_SCHEMA_MISMATCH",
            EDbEncoding => "E_DB_ENCODING",
            EDbNotFound => "E_DB_NOT_FOUND",
            EDbAuditChainBroken => "E_DB_AUDIT_CHAIN_BROKEN",
            ESandboxUnavailable => "E_SANDBOX_UNAVAILABLE",
            ESandboxTimeout => "E_SANDBOX_TIMEOUT",
            ESandboxFailed => "E_SANDBOX_FAILED",
            EGateProvider => "E_GATE_PROVIDER",
            EGateBlocked => "E_GATE_BLOCKED",
            EChannelProtocol => "E_CHANNEL_PROTOCOL",
            EChannelDisconnected => "E_CHANNEL_DISCONNECTED",
            EChannelTimeout => "E_CHANNEL_TIMEOUT",
            EChannelAuth => "E_CHANNEL_AUTH",
            EChannelRateLimited => "E_CHANNEL_RATE_LIMITED",
            EApprovalSignature => "E_APPROVAL_SIGNATURE",
            EApprovalHash => "E_APPROVAL_HASH",
            EApprovalNonce => "E_APPROVAL_NONCE",
            EApprovalExpired => "E_APPROVAL_EXPIRED",
            EApprovalExhausted => "E_APPROVAL_EXHAUSTED",
            EApprovalScope => "E_APPROVAL_SCOPE",
        }
    }

    pub fn family(&self) -> ErrorFamily {
        let s = self.as_str();
        if s.starts_with("E_CFG_") {
            ErrorFamily::Cfg
        } else if s.starts_with("E_LLM_") {
            ErrorFamily::Llm
        } else if s.starts_with("E_DB_") {
            ErrorFamily::Db
        } else if s.starts_with("E_SANDBOX_") {
            ErrorFamily::Sandbox
        } else if s.starts_with("E_GATE_") {
            ErrorFamily::Gate
        } else if s.starts_with("E_CHANNEL_") {
            ErrorFamily::Channel
        } else {
            ErrorFamily::Approval
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Implemented by every library error so the binary and the audit log can
/// report the taxonomy code without matching on concrete types.
pub trait Coded {
    fn code(&self) -> ErrorCode;
}

/// A panic's message, when it carried one (`panic!("…")` gives a `&str` or a
/// `String`); for the panic hook and every `catch_unwind` that reports one.
pub fn panic_text(payload: &(dyn std::any::Any + Send)) -> Option<String> {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serde_name_matches_as_str() {
        for code in [
            ErrorCode::ECfgInvalid,
            ErrorCode::EDbSchemaMismatch,
            ErrorCode::EApprovalNonce,
        ] {
            let json = serde_json::to_string(&code).unwrap();
            assert_eq!(json, format!("\"{}\"", code.as_str()));
        }
    }

    #[test]
    fn families() {
        assert_eq!(ErrorCode::ECfgUnknownKey.family(), ErrorFamily::Cfg);
        assert_eq!(
            ErrorCode::EChannelRateLimited.family(),
            ErrorFamily::Channel
        );
        assert_eq!(ErrorCode::EDbCorrupt.family(), ErrorFamily::Db);
        assert_eq!(ErrorCode::EApprovalExpired.family(), ErrorFamily::Approval);
        assert_eq!(
            ErrorCode::ESandboxUnavailable.family(),
            ErrorFamily::Sandbox
        );
    }

    #[test]
    fn a_panics_text_is_read_from_either_payload() {
        let of = |f: fn()| {
            std::panic::catch_unwind(f)
                .err()
                .and_then(|p| panic_text(&*p))
        };
        assert_eq!(of(|| panic!("plain")).as_deref(), Some("plain"));
        assert_eq!(of(|| panic!("{}", 7)).as_deref(), Some("7"));
        assert_eq!(of(|| std::panic::panic_any(3_u8)), None);
    }
}
