//! `NetworkGuard::check`: the one decision every web_fetch hop goes through.
//!
//! Order: parse the URL; refuse schemes other than http(s), userinfo and
//! blocked ports; apply the host allowlist and its method rule; resolve the
//! host **once** (IP-literal hosts are not resolved); classify every answer
//! and refuse the host if **any** answer is blocked and not exempted by an
//! operator-trusted CIDR. The result, [`ValidatedTarget`], carries the
//! validated addresses; the fetcher connects only to those, so a DNS answer
//! that changes after the check (rebinding) is never used.
//!
//! Policy choice for mixed answers: one blocked answer among several (an A
//! record to a public address and a AAAA to `fd00::1`, say) refuses the whole
//! host rather than filtering it out. A name that resolves into a private
//! network is either misconfigured or an attack, and filtering would make
//! the outcome depend on answer order and caching.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use url::{Host, Url};

use crate::config::{ConfigError, NetworkGuardConfig, ValidConfig};
use crate::error::GuardError;
use crate::policy::{
    AllowlistDecision, BlockedRange, Method, allowlist_decision, classify_ip, is_exempt,
    normalize_host,
};
use crate::resolver::Resolver;

/// A destination that passed every check, with the addresses to connect to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValidatedTarget {
    pub method: Method,
    /// The URL to request (fragment removed).
    pub url: Url,
    /// Normalised host (lowercase, no trailing dot, no IPv6 brackets).
    pub host: String,
    pub port: u16,
    /// The first validated address: where the connection is meant to go.
    pub addr: SocketAddr,
    /// Every validated address (`addr` first), in resolver order. The
    /// fetcher's pinned DNS hands exactly these to the HTTP client.
    pub addrs: Vec<SocketAddr>,
    /// Addresses allowed only because an operator-trusted CIDR exempts them.
    pub exempted: Vec<(IpAddr, BlockedRange)>,
    /// The host was an IP literal (no DNS lookup happened).
    pub ip_literal: bool,
}

/// A bare destination (no URL, no allowlist) that passed the address and
/// port rules: what the egress proxy connects to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Destination {
    /// Normalised host (lowercase, no trailing dot, no IPv6 brackets).
    pub host: String,
    pub port: u16,
    /// Every validated address, in resolver order; never re-resolved.
    pub addrs: Vec<SocketAddr>,
    /// Addresses allowed only because an operator-trusted CIDR exempts them.
    pub exempted: Vec<(IpAddr, BlockedRange)>,
}

/// The single choke point for web_fetch egress.
#[derive(Clone)]
pub struct NetworkGuard {
    config: Arc<ValidConfig>,
    resolver: Arc<dyn Resolver>,
}

impl std::fmt::Debug for NetworkGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NetworkGuard")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl NetworkGuard {
    /// Validate the configuration and build a guard over `resolver`
    /// ([`crate::SystemResolver`] in production).
    pub fn new(
        config: &NetworkGuardConfig,
        resolver: Arc<dyn Resolver>,
    ) -> Result<Self, ConfigError> {
        Ok(NetworkGuard {
            config: Arc::new(config.validate()?),
            resolver,
        })
    }

    pub fn config(&self) -> &ValidConfig {
        &self.config
    }

    /// Check `method` on `url` (a string from the model or a redirect).
    pub async fn check(&self, method: Method, url: &str) -> Result<ValidatedTarget, GuardError> {
        let url = Url::parse(url).map_err(|e| GuardError::InvalidUrl(e.to_string()))?;
        self.check_url(method, url).await
    }

    /// Check an already-parsed URL.
    pub async fn check_url(
        &self,
        method: Method,
        mut url: Url,
    ) -> Result<ValidatedTarget, GuardError> {
        let scheme = url.scheme();
        if scheme != "http" && scheme != "https" {
            return Err(GuardError::UnsupportedScheme(scheme.to_string()));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(GuardError::UserInfo);
        }
        url.set_fragment(None);
        let port = url
            .port_or_known_default()
            .ok_or_else(|| GuardError::InvalidUrl("no port".into()))?;
        if port == 0 {
            return Err(GuardError::InvalidUrl("port 0".into()));
        }
        if self.config.blocked_ports.contains(&port) {
            return Err(GuardError::BlockedPort(port));
        }
        let (host, literal) = match url.host() {
            Some(Host::Domain(d)) => (normalize_host(d), None),
            Some(Host::Ipv4(a)) => (a.to_string(), Some(IpAddr::V4(a))),
            Some(Host::Ipv6(a)) => (a.to_string(), Some(IpAddr::V6(a))),
            None => return Err(GuardError::InvalidUrl("no host".into())),
        };
        if host.is_empty() {
            return Err(GuardError::InvalidUrl("empty host".into()));
        }
        match allowlist_decision(&self.config.allowlist, &host, method) {
            AllowlistDecision::Allowed => {}
            AllowlistDecision::HostNotListed => return Err(GuardError::HostNotAllowed(host)),
            AllowlistDecision::MethodNotAllowed => {
                return Err(GuardError::MethodNotAllowed { method, host });
            }
        }
        let (addrs, exempted) = self.validate_addresses(&host, literal, port).await?;
        let Some(addr) = addrs.first().copied() else {
            return Err(GuardError::NoAddresses(host));
        };
        Ok(ValidatedTarget {
            method,
            url,
            host,
            port,
            addr,
            addrs,
            exempted,
            ip_literal: literal.is_some(),
        })
    }

    /// Check a bare destination (`host`, `port`) without the web_fetch
    /// allowlist: the egress proxy's decision for an approved network check,
    /// which may reach any *public* host. Same port, address and
    /// trusted-CIDR rules as [`Self::check_url`]; the result carries the only
    /// addresses the caller may connect to.
    pub async fn check_destination(
        &self,
        host: &str,
        port: u16,
    ) -> Result<Destination, GuardError> {
        if port == 0 {
            return Err(GuardError::InvalidUrl("port 0".into()));
        }
        if self.config.blocked_ports.contains(&port) {
            return Err(GuardError::BlockedPort(port));
        }
        let bare = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        let literal: Option<IpAddr> = bare.parse().ok();
        let host = match literal {
            Some(ip) => ip.to_string(),
            None => normalize_host(bare),
        };
        // A name is plain DNS characters only (what a client may send in
        // CONNECT is otherwise unchecked text).
        let name_ok = |h: &str| {
            h.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b))
        };
        if host.is_empty() || (literal.is_none() && !name_ok(&host)) {
            return Err(GuardError::InvalidUrl("invalid host".into()));
        }
        let (addrs, exempted) = self.validate_addresses(&host, literal, port).await?;
        if addrs.is_empty() {
            return Err(GuardError::NoAddresses(host));
        }
        Ok(Destination {
            host,
            port,
            addrs,
            exempted,
        })
    }

    /// Resolve once (unless `literal`) and classify every answer; one
    /// blocked, non-exempted answer refuses the host.
    async fn validate_addresses(
        &self,
        host: &str,
        literal: Option<IpAddr>,
        port: u16,
    ) -> Result<(Vec<SocketAddr>, Vec<(IpAddr, BlockedRange)>), GuardError> {
        let answers = match literal {
            Some(ip) => vec![ip],
            None => self.resolve_once(host).await?,
        };
        let mut addrs: Vec<SocketAddr> = Vec::with_capacity(answers.len());
        let mut exempted = Vec::new();
        for ip in answers {
            if let Some(range) = classify_ip(ip) {
                if !is_exempt(ip, range, &self.config.trusted) {
                    return Err(GuardError::BlockedAddress {
                        host: host.to_string(),
                        addr: ip,
                        range,
                    });
                }
                exempted.push((ip, range));
            }
            let sa = SocketAddr::new(ip, port);
            if !addrs.contains(&sa) {
                addrs.push(sa);
            }
        }
        Ok((addrs, exempted))
    }

    async fn resolve_once(&self, host: &str) -> Result<Vec<IpAddr>, GuardError> {
        let timeout: Duration = self.config.resolve_timeout;
        match tokio::time::timeout(timeout, self.resolver.resolve(host)).await {
            Err(_) => Err(GuardError::ResolveTimeout(host.to_string())),
            Ok(Err(e)) => Err(GuardError::Resolve {
                host: host.to_string(),
                reason: e.0,
            }),
            Ok(Ok(v)) if v.is_empty() => Err(GuardError::NoAddresses(host.to_string())),
            Ok(Ok(v)) => Ok(v),
        }
    }
}
