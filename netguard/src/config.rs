//! `NetworkGuardConfig`: the operator's egress settings with safe defaults
//! (empty allowlist = no web_fetch at all, no trusted private ranges, ssh /
//! telnet / smtp / rdp ports always blocked). Not yet wired into the §11
//! config schema; the daemon builds one and passes it to
//! [`crate::NetworkGuard::new`], which validates it.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use silas_core::{Coded, ErrorCode};

use crate::policy::{Cidr, CidrParseError, DEFAULT_BLOCKED_PORTS, HostPatternError, HostRule};

/// Operator egress configuration for web_fetch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkGuardConfig {
    /// Hosts web_fetch may reach and with which methods. Empty (the
    /// default) refuses every destination.
    #[serde(default)]
    pub allowlist: Vec<HostRule>,
    /// Private ranges the operator deliberately allows (a homelab NAS).
    /// Cloud metadata endpoints are never exempted. Default empty.
    #[serde(default)]
    pub trusted_private_cidrs: Vec<String>,
    /// Ports refused in addition to [`DEFAULT_BLOCKED_PORTS`], which are
    /// always refused and cannot be removed.
    #[serde(default)]
    pub extra_blocked_ports: Vec<u16>,
    /// Redirects followed before giving up (each one re-validated).
    #[serde(default = "default_max_redirects")]
    pub max_redirects: usize,
    #[serde(default = "default_resolve_timeout")]
    pub resolve_timeout_seconds: u64,
    #[serde(default = "default_connect_timeout")]
    pub connect_timeout_seconds: u64,
    /// Upper bound for one whole fetch, all hops included; an envelope's
    /// `timeout_seconds` can only shorten it.
    #[serde(default = "default_request_timeout")]
    pub request_timeout_seconds: u64,
    /// Bytes of response body read at most; the rest is never downloaded.
    #[serde(default = "default_max_response_bytes")]
    pub max_response_bytes: usize,
    #[serde(default = "default_user_agent")]
    pub user_agent: String,
}

fn default_max_redirects() -> usize {
    5
}
fn default_resolve_timeout() -> u64 {
    5
}
fn default_connect_timeout() -> u64 {
    10
}
fn default_request_timeout() -> u64 {
    30
}
fn default_max_response_bytes() -> usize {
    2 * 1024 * 1024
}
fn default_user_agent() -> String {
    format!("silas-web-fetch/{}", env!("CARGO_PKG_VERSION"))
}

impl Default for NetworkGuardConfig {
    fn default() -> Self {
        NetworkGuardConfig {
            allowlist: Vec::new(),
            trusted_private_cidrs: Vec::new(),
            extra_blocked_ports: Vec::new(),
            max_redirects: default_max_redirects(),
            resolve_timeout_seconds: default_resolve_timeout(),
            connect_timeout_seconds: default_connect_timeout(),
            request_timeout_seconds: default_request_timeout(),
            max_response_bytes: default_max_response_bytes(),
            user_agent: default_user_agent(),
        }
    }
}

/// A configuration the guard refuses to start with (`E_CFG_INVALID`).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("network_guard.allowlist: {0}")]
    HostPattern(#[from] HostPatternError),
    #[error("network_guard.trusted_private_cidrs: {0}")]
    Cidr(#[from] CidrParseError),
    #[error("network_guard.{0} must be greater than zero")]
    Zero(&'static str),
    #[error("network_guard.max_redirects must be at most 20, got {0}")]
    TooManyRedirects(usize),
    #[error("network_guard.user_agent must be visible ASCII")]
    UserAgent,
}

impl Coded for ConfigError {
    fn code(&self) -> ErrorCode {
        ErrorCode::ECfgInvalid
    }
}

/// A checked configuration, the form the guard and fetcher use.
#[derive(Clone, Debug)]
pub struct ValidConfig {
    pub allowlist: Vec<HostRule>,
    pub trusted: Vec<Cidr>,
    pub blocked_ports: Vec<u16>,
    pub max_redirects: usize,
    pub resolve_timeout: Duration,
    pub connect_timeout: Duration,
    pub request_timeout: Duration,
    pub max_response_bytes: usize,
    pub user_agent: String,
}

impl NetworkGuardConfig {
    pub fn validate(&self) -> Result<ValidConfig, ConfigError> {
        for r in &self.allowlist {
            r.validate()?;
        }
        let trusted = self
            .trusted_private_cidrs
            .iter()
            .map(|s| s.trim().parse::<Cidr>())
            .collect::<Result<Vec<_>, _>>()?;
        for (name, v) in [
            ("resolve_timeout_seconds", self.resolve_timeout_seconds),
            ("connect_timeout_seconds", self.connect_timeout_seconds),
            ("request_timeout_seconds", self.request_timeout_seconds),
            ("max_response_bytes", self.max_response_bytes as u64),
        ] {
            if v == 0 {
                return Err(ConfigError::Zero(name));
            }
        }
        if self.max_redirects > 20 {
            return Err(ConfigError::TooManyRedirects(self.max_redirects));
        }
        if self.user_agent.is_empty() || !self.user_agent.bytes().all(|b| (0x20..0x7f).contains(&b))
        {
            return Err(ConfigError::UserAgent);
        }
        let mut blocked_ports: Vec<u16> = DEFAULT_BLOCKED_PORTS.to_vec();
        blocked_ports.extend(&self.extra_blocked_ports);
        blocked_ports.sort_unstable();
        blocked_ports.dedup();
        Ok(ValidConfig {
            allowlist: self.allowlist.clone(),
            trusted,
            blocked_ports,
            max_redirects: self.max_redirects,
            resolve_timeout: Duration::from_secs(self.resolve_timeout_seconds),
            connect_timeout: Duration::from_secs(self.connect_timeout_seconds),
            request_timeout: Duration::from_secs(self.request_timeout_seconds),
            max_response_bytes: self.max_response_bytes,
            user_agent: self.user_agent.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Method;

    #[test]
    fn defaults_deny_everything_and_block_ports() {
        let c = NetworkGuardConfig::default();
        assert!(c.allowlist.is_empty() && c.trusted_private_cidrs.is_empty());
        let v = c.validate().unwrap();
        assert_eq!(v.blocked_ports, vec![22, 23, 25, 3389]);
        assert_eq!(v.max_redirects, 5);
        let parsed: NetworkGuardConfig = serde_json::from_str("{}").unwrap();
        assert_eq!(parsed, c);
    }

    #[test]
    fn deserialises_rules_and_extra_ports() {
        let c: NetworkGuardConfig = serde_json::from_value(serde_json::json!({
            "allowlist": [{"pattern": "*.example.org"}, {"pattern": "api.example.org", "methods": ["POST"]}],
            "trusted_private_cidrs": ["192.168.1.0/24"],
            "extra_blocked_ports": [6379, 22]
        }))
        .unwrap();
        assert_eq!(c.allowlist[1].methods, vec![Method::Post]);
        let v = c.validate().unwrap();
        assert_eq!(v.blocked_ports, vec![22, 23, 25, 3389, 6379]);
        assert_eq!(v.trusted.len(), 1);
        assert!(
            serde_json::from_value::<NetworkGuardConfig>(serde_json::json!({"allow": []})).is_err(),
            "unknown keys are refused"
        );
        assert!(
            serde_json::from_value::<NetworkGuardConfig>(
                serde_json::json!({"allowlist": [{"pattern": "x.org", "methods": ["CONNECT"]}]})
            )
            .is_err()
        );
    }

    #[test]
    fn invalid_values_are_cfg_invalid() {
        let bad = [
            NetworkGuardConfig {
                trusted_private_cidrs: vec!["10.0.0.1/8".into()],
                ..Default::default()
            },
            NetworkGuardConfig {
                allowlist: vec![HostRule::new("http://x.org", &[])],
                ..Default::default()
            },
            NetworkGuardConfig {
                max_response_bytes: 0,
                ..Default::default()
            },
            NetworkGuardConfig {
                max_redirects: 21,
                ..Default::default()
            },
            NetworkGuardConfig {
                user_agent: "a\nb".into(),
                ..Default::default()
            },
        ];
        for c in bad {
            let e = c.validate().unwrap_err();
            assert_eq!(e.code(), ErrorCode::ECfgInvalid, "{e}");
        }
    }
}
