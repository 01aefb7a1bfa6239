//! Pure egress policy: which IP addresses are never a web_fetch destination,
//! which ports are refused, how host allowlist rules and operator-trusted
//! CIDRs match. Plain functions over `std::net` types, no I/O, table-tested.
//!
//! The range tables below are the whole policy; they are written as data so
//! they can be audited line by line against the IANA special-purpose
//! registries (RFC 6890 and successors). Order matters: the first matching
//! row wins, so the most specific rows (cloud metadata) come first.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Why an address is never a destination.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RangeKind {
    /// `::` (and `0.0.0.0`, reported as [`RangeKind::ThisNetwork`]).
    Unspecified,
    /// 0.0.0.0/8: "this network"; connecting to 0.0.0.0 reaches localhost on Linux.
    ThisNetwork,
    /// RFC 1918: 10/8, 172.16/12, 192.168/16.
    Private,
    /// 100.64/10, RFC 6598 carrier-grade NAT shared space.
    SharedCgnat,
    /// 127/8, ::1.
    Loopback,
    /// 169.254/16, fe80::/10.
    LinkLocal,
    /// A cloud instance-metadata / credentials endpoint. Never exemptable.
    CloudMetadata,
    /// 192.0.0/24, IETF protocol assignments.
    IetfProtocol,
    /// 192.0.2/24, 198.51.100/24, 203.0.113/24, 2001:db8::/32, 3fff::/20.
    Documentation,
    /// 198.18/15, 2001:2::/48.
    Benchmarking,
    /// 224/4, ff00::/8.
    Multicast,
    /// 240/4 (future use).
    Reserved,
    /// 255.255.255.255.
    Broadcast,
    /// fc00::/7 unique local addresses.
    UniqueLocal,
    /// fec0::/10, deprecated site-local.
    SiteLocal,
    /// 2001::/32 Teredo tunnelling (the embedded address is obfuscated).
    Teredo,
    /// 64:ff9b:1::/48, local-use NAT64 (RFC 8215).
    Nat64Local,
    /// 100::/64 discard-only.
    DiscardOnly,
    /// Outside 2000::/3, the only IPv6 space allocated for global unicast.
    NotGlobalUnicast,
}

impl RangeKind {
    pub fn as_str(&self) -> &'static str {
        use RangeKind::*;
        match self {
            Unspecified => "unspecified",
            ThisNetwork => "this-network",
            Private => "private",
            SharedCgnat => "carrier-grade NAT",
            Loopback => "loopback",
            LinkLocal => "link-local",
            CloudMetadata => "cloud metadata endpoint",
            IetfProtocol => "IETF protocol assignments",
            Documentation => "documentation",
            Benchmarking => "benchmarking",
            Multicast => "multicast",
            Reserved => "reserved",
            Broadcast => "broadcast",
            UniqueLocal => "unique local",
            SiteLocal => "site-local",
            Teredo => "Teredo",
            Nat64Local => "local-use NAT64",
            DiscardOnly => "discard-only",
            NotGlobalUnicast => "not global unicast",
        }
    }
}

/// A blocked range: its kind and the CIDR row that matched.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct BlockedRange {
    pub kind: RangeKind,
    pub cidr: &'static str,
}

impl fmt::Display for BlockedRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.kind.as_str(), self.cidr)
    }
}

/// (network, prefix length, kind, CIDR as written)
type V4Row = (u32, u8, RangeKind, &'static str);

const fn v4(a: u8, b: u8, c: u8, d: u8) -> u32 {
    u32::from_be_bytes([a, b, c, d])
}

/// Every blocked IPv4 range, most specific first.
pub const V4_BLOCKED: &[V4Row] = &[
    // Cloud metadata / credential endpoints first: reported distinctly and
    // never exempted by `trusted_private_cidrs`.
    (
        v4(169, 254, 169, 254),
        32,
        RangeKind::CloudMetadata,
        "169.254.169.254/32",
    ),
    (
        v4(169, 254, 170, 2),
        32,
        RangeKind::CloudMetadata,
        "169.254.170.2/32",
    ), // AWS ECS task credentials
    (
        v4(100, 100, 100, 200),
        32,
        RangeKind::CloudMetadata,
        "100.100.100.200/32",
    ), // Alibaba Cloud
    (
        v4(168, 63, 129, 16),
        32,
        RangeKind::CloudMetadata,
        "168.63.129.16/32",
    ), // Azure WireServer
    (
        v4(255, 255, 255, 255),
        32,
        RangeKind::Broadcast,
        "255.255.255.255/32",
    ),
    (v4(0, 0, 0, 0), 8, RangeKind::ThisNetwork, "0.0.0.0/8"),
    (v4(10, 0, 0, 0), 8, RangeKind::Private, "10.0.0.0/8"),
    (
        v4(100, 64, 0, 0),
        10,
        RangeKind::SharedCgnat,
        "100.64.0.0/10",
    ),
    (v4(127, 0, 0, 0), 8, RangeKind::Loopback, "127.0.0.0/8"),
    (
        v4(169, 254, 0, 0),
        16,
        RangeKind::LinkLocal,
        "169.254.0.0/16",
    ),
    (v4(172, 16, 0, 0), 12, RangeKind::Private, "172.16.0.0/12"),
    (
        v4(192, 0, 0, 0),
        24,
        RangeKind::IetfProtocol,
        "192.0.0.0/24",
    ),
    (
        v4(192, 0, 2, 0),
        24,
        RangeKind::Documentation,
        "192.0.2.0/24",
    ),
    (v4(192, 168, 0, 0), 16, RangeKind::Private, "192.168.0.0/16"),
    (
        v4(198, 18, 0, 0),
        15,
        RangeKind::Benchmarking,
        "198.18.0.0/15",
    ),
    (
        v4(198, 51, 100, 0),
        24,
        RangeKind::Documentation,
        "198.51.100.0/24",
    ),
    (
        v4(203, 0, 113, 0),
        24,
        RangeKind::Documentation,
        "203.0.113.0/24",
    ),
    (v4(224, 0, 0, 0), 4, RangeKind::Multicast, "224.0.0.0/4"),
    (v4(240, 0, 0, 0), 4, RangeKind::Reserved, "240.0.0.0/4"),
];

/// How an IPv6 row is handled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum V6Action {
    Block(RangeKind),
    /// Classify by the IPv4 address embedded in the low 32 bits.
    EmbeddedLow32,
    /// 6to4: classify by the IPv4 address in bits 16..48.
    Embedded6to4,
}

type V6Row = (u128, u8, V6Action, &'static str);

const fn v6(s: [u16; 8]) -> u128 {
    let mut out: u128 = 0;
    let mut i = 0;
    while i < 8 {
        out = (out << 16) | s[i] as u128;
        i += 1;
    }
    out
}

/// Every IPv6 rule, most specific first. Anything not matched here and not
/// in 2000::/3 is blocked as [`RangeKind::NotGlobalUnicast`].
const V6_RULES: &[V6Row] = &[
    (
        v6([0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254]),
        128,
        V6Action::Block(RangeKind::CloudMetadata),
        "fd00:ec2::254/128",
    ),
    (0, 128, V6Action::Block(RangeKind::Unspecified), "::/128"),
    (1, 128, V6Action::Block(RangeKind::Loopback), "::1/128"),
    (
        v6([0, 0, 0, 0, 0, 0xffff, 0, 0]),
        96,
        V6Action::EmbeddedLow32,
        "::ffff:0:0/96",
    ),
    (0, 96, V6Action::EmbeddedLow32, "::/96"),
    (
        v6([0x64, 0xff9b, 0, 0, 0, 0, 0, 0]),
        96,
        V6Action::EmbeddedLow32,
        "64:ff9b::/96",
    ),
    (
        v6([0x64, 0xff9b, 1, 0, 0, 0, 0, 0]),
        48,
        V6Action::Block(RangeKind::Nat64Local),
        "64:ff9b:1::/48",
    ),
    (
        v6([0x100, 0, 0, 0, 0, 0, 0, 0]),
        64,
        V6Action::Block(RangeKind::DiscardOnly),
        "100::/64",
    ),
    (
        v6([0x2001, 0, 0, 0, 0, 0, 0, 0]),
        32,
        V6Action::Block(RangeKind::Teredo),
        "2001::/32",
    ),
    (
        v6([0x2001, 2, 0, 0, 0, 0, 0, 0]),
        48,
        V6Action::Block(RangeKind::Benchmarking),
        "2001:2::/48",
    ),
    (
        v6([0x2001, 0xdb8, 0, 0, 0, 0, 0, 0]),
        32,
        V6Action::Block(RangeKind::Documentation),
        "2001:db8::/32",
    ),
    (
        v6([0x3fff, 0, 0, 0, 0, 0, 0, 0]),
        20,
        V6Action::Block(RangeKind::Documentation),
        "3fff::/20",
    ),
    (
        v6([0x2002, 0, 0, 0, 0, 0, 0, 0]),
        16,
        V6Action::Embedded6to4,
        "2002::/16",
    ),
    (
        v6([0xfc00, 0, 0, 0, 0, 0, 0, 0]),
        7,
        V6Action::Block(RangeKind::UniqueLocal),
        "fc00::/7",
    ),
    (
        v6([0xfe80, 0, 0, 0, 0, 0, 0, 0]),
        10,
        V6Action::Block(RangeKind::LinkLocal),
        "fe80::/10",
    ),
    (
        v6([0xfec0, 0, 0, 0, 0, 0, 0, 0]),
        10,
        V6Action::Block(RangeKind::SiteLocal),
        "fec0::/10",
    ),
    (
        v6([0xff00, 0, 0, 0, 0, 0, 0, 0]),
        8,
        V6Action::Block(RangeKind::Multicast),
        "ff00::/8",
    ),
];

const fn mask4(prefix: u8) -> u32 {
    if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - prefix as u32)
    }
}

const fn mask6(prefix: u8) -> u128 {
    if prefix == 0 {
        0
    } else {
        u128::MAX << (128 - prefix as u32)
    }
}

fn classify_v4(ip: Ipv4Addr) -> Option<BlockedRange> {
    let x = u32::from(ip);
    V4_BLOCKED
        .iter()
        .find(|(net, prefix, _, _)| x & mask4(*prefix) == *net)
        .map(|(_, _, kind, cidr)| BlockedRange { kind: *kind, cidr })
}

fn low32(x: u128) -> Ipv4Addr {
    Ipv4Addr::from((x & 0xffff_ffff) as u32)
}

fn sixto4(x: u128) -> Ipv4Addr {
    Ipv4Addr::from(((x >> 80) & 0xffff_ffff) as u32)
}

/// The IPv4 address an IPv6 address stands for, if it is one of the
/// IPv4-embedding forms (mapped, compatible, NAT64 well-known prefix, 6to4).
pub fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let x = u128::from(ip);
    for (net, prefix, action, _) in V6_RULES {
        if x & mask6(*prefix) == *net {
            return match action {
                V6Action::EmbeddedLow32 => Some(low32(x)),
                V6Action::Embedded6to4 => Some(sixto4(x)),
                V6Action::Block(_) => None,
            };
        }
    }
    None
}

fn classify_v6(ip: Ipv6Addr) -> Option<BlockedRange> {
    let x = u128::from(ip);
    for (net, prefix, action, cidr) in V6_RULES {
        if x & mask6(*prefix) == *net {
            return match action {
                V6Action::Block(kind) => Some(BlockedRange { kind: *kind, cidr }),
                V6Action::EmbeddedLow32 => classify_v4(low32(x)),
                V6Action::Embedded6to4 => classify_v4(sixto4(x)),
            };
        }
    }
    if x & mask6(3) != v6([0x2000, 0, 0, 0, 0, 0, 0, 0]) {
        return Some(BlockedRange {
            kind: RangeKind::NotGlobalUnicast,
            cidr: "outside 2000::/3",
        });
    }
    None
}

/// The blocked range an address falls in, or `None` if it is a public
/// destination. IPv6 forms that embed an IPv4 address are classified by that
/// address (a mapped `::ffff:10.0.0.1` is private, `::ffff:8.8.8.8` is not).
pub fn classify_ip(ip: IpAddr) -> Option<BlockedRange> {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

/// Ports web_fetch never connects to (ssh, telnet, smtp, rdp).
pub const DEFAULT_BLOCKED_PORTS: &[u16] = &[22, 23, 25, 3389];

/// An operator-configured CIDR (`10.0.0.0/8`, `192.168.1.20`, `fd00::/8`).
/// A bare address is a single-host range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid CIDR {0:?}: expected ADDRESS or ADDRESS/PREFIX with no host bits set")]
pub struct CidrParseError(pub String);

impl Cidr {
    pub fn new(addr: IpAddr, prefix: u8) -> Result<Self, CidrParseError> {
        let ok = match addr {
            IpAddr::V4(a) => prefix <= 32 && u32::from(a) & !mask4(prefix) == 0,
            IpAddr::V6(a) => prefix <= 128 && u128::from(a) & !mask6(prefix) == 0,
        };
        if ok {
            Ok(Cidr { addr, prefix })
        } else {
            Err(CidrParseError(format!("{addr}/{prefix}")))
        }
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip) {
            (IpAddr::V4(net), IpAddr::V4(a)) => u32::from(a) & mask4(self.prefix) == u32::from(net),
            (IpAddr::V6(net), IpAddr::V6(a)) => {
                u128::from(a) & mask6(self.prefix) == u128::from(net)
            }
            _ => false,
        }
    }
}

impl FromStr for Cidr {
    type Err = CidrParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || CidrParseError(s.to_string());
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => {
                let addr: IpAddr = a.parse().map_err(|_| err())?;
                if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(err());
                }
                (addr, p.parse::<u8>().map_err(|_| err())?)
            }
            None => {
                let addr: IpAddr = s.parse().map_err(|_| err())?;
                (addr, if addr.is_ipv4() { 32 } else { 128 })
            }
        };
        Cidr::new(addr, prefix).map_err(|_| err())
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// Whether an operator-trusted CIDR exempts `ip` from a block. Cloud
/// metadata is never exempt. IPv4-embedding IPv6 forms are matched by their
/// embedded IPv4 address too, so trusting `127.0.0.1/32` also covers
/// `::ffff:127.0.0.1`.
pub fn is_exempt(ip: IpAddr, range: BlockedRange, trusted: &[Cidr]) -> bool {
    if range.kind == RangeKind::CloudMetadata {
        return false;
    }
    let embedded = match ip {
        IpAddr::V6(a) => embedded_v4(a).map(IpAddr::V4),
        IpAddr::V4(_) => None,
    };
    trusted
        .iter()
        .any(|c| c.contains(ip) || embedded.is_some_and(|e| c.contains(e)))
}

/// HTTP methods web_fetch may use. CONNECT and TRACE are never allowed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Method {
    Get,
    Head,
    Post,
    Put,
    Patch,
    Delete,
    Options,
}

impl Method {
    pub fn as_str(&self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Head => "HEAD",
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Patch => "PATCH",
            Method::Delete => "DELETE",
            Method::Options => "OPTIONS",
        }
    }

    /// Case-insensitive; `None` for anything else (CONNECT, TRACE, …).
    pub fn parse(s: &str) -> Option<Method> {
        Some(match s.to_ascii_uppercase().as_str() {
            "GET" => Method::Get,
            "HEAD" => Method::Head,
            "POST" => Method::Post,
            "PUT" => Method::Put,
            "PATCH" => Method::Patch,
            "DELETE" => Method::Delete,
            "OPTIONS" => Method::Options,
            _ => return None,
        })
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Methods a rule allows when it names none: read-only ones.
pub const DEFAULT_METHODS: &[Method] = &[Method::Get, Method::Head];

/// One allowlist entry: a host pattern and the methods allowed on it.
///
/// `pattern` is an exact host (`docs.rs`, an IP literal such as `192.0.2.7`
/// or `::1`) or a wildcard `*.example.org`, which matches `example.org` itself
/// and every subdomain at any depth (never `evilexample.org`). Matching is
/// ASCII case-insensitive and ignores one trailing dot; internationalised
/// names are written in their punycode (`xn--`) form. An empty `methods`
/// means [`DEFAULT_METHODS`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostRule {
    pub pattern: String,
    #[serde(default)]
    pub methods: Vec<Method>,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid host pattern {0:?}: expected a host name, an IP literal or *.domain")]
pub struct HostPatternError(pub String);

/// Lowercase and drop one trailing dot.
pub fn normalize_host(host: &str) -> String {
    let h = host.strip_suffix('.').unwrap_or(host);
    let h = h
        .strip_prefix('[')
        .and_then(|x| x.strip_suffix(']'))
        .unwrap_or(h);
    h.to_ascii_lowercase()
}

fn valid_label(l: &str) -> bool {
    !l.is_empty()
        && l.len() <= 63
        && l.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

impl HostRule {
    pub fn new(pattern: &str, methods: &[Method]) -> Self {
        HostRule {
            pattern: pattern.to_string(),
            methods: methods.to_vec(),
        }
    }

    /// Check the pattern's shape.
    pub fn validate(&self) -> Result<(), HostPatternError> {
        let p = normalize_host(&self.pattern);
        if p.parse::<IpAddr>().is_ok() {
            return Ok(());
        }
        let name = p.strip_prefix("*.").unwrap_or(&p);
        if name.is_empty() || !name.split('.').all(valid_label) {
            return Err(HostPatternError(self.pattern.clone()));
        }
        Ok(())
    }

    pub fn matches_host(&self, host: &str) -> bool {
        let host = normalize_host(host);
        let pattern = normalize_host(&self.pattern);
        if let Some(apex) = pattern.strip_prefix("*.") {
            if host.parse::<IpAddr>().is_ok() {
                return false;
            }
            return host == apex
                || (host.len() > apex.len() + 1
                    && host.ends_with(apex)
                    && host.as_bytes()[host.len() - apex.len() - 1] == b'.');
        }
        match (host.parse::<IpAddr>(), pattern.parse::<IpAddr>()) {
            (Ok(a), Ok(b)) => a == b,
            (Err(_), Err(_)) => host == pattern,
            _ => false,
        }
    }

    pub fn allows_method(&self, method: Method) -> bool {
        if self.methods.is_empty() {
            DEFAULT_METHODS.contains(&method)
        } else {
            self.methods.contains(&method)
        }
    }
}

/// The outcome of an allowlist lookup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AllowlistDecision {
    Allowed,
    /// No rule matches the host (an empty allowlist matches nothing).
    HostNotListed,
    /// Some rule matches the host, none allows the method.
    MethodNotAllowed,
}

/// Whether `method` on `host` is allowed: any matching rule that allows the
/// method suffices (rules are a union).
pub fn allowlist_decision(rules: &[HostRule], host: &str, method: Method) -> AllowlistDecision {
    let mut host_listed = false;
    for r in rules.iter().filter(|r| r.matches_host(host)) {
        host_listed = true;
        if r.allows_method(method) {
            return AllowlistDecision::Allowed;
        }
    }
    if host_listed {
        AllowlistDecision::MethodNotAllowed
    } else {
        AllowlistDecision::HostNotListed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn kind(s: &str) -> Option<RangeKind> {
        classify_ip(ip(s)).map(|r| r.kind)
    }

    /// Every blocked IPv4 range: first, an inner and the last address, and
    /// the addresses just outside each edge (allowed unless another row
    /// claims them).
    #[test]
    fn ipv4_table() {
        use RangeKind::*;
        let blocked: &[(&str, RangeKind, &str)] = &[
            ("0.0.0.0", ThisNetwork, "0.0.0.0/8"),
            ("0.1.2.3", ThisNetwork, "0.0.0.0/8"),
            ("0.255.255.255", ThisNetwork, "0.0.0.0/8"),
            ("10.0.0.0", Private, "10.0.0.0/8"),
            ("10.0.0.1", Private, "10.0.0.0/8"),
            ("10.255.255.255", Private, "10.0.0.0/8"),
            ("100.64.0.0", SharedCgnat, "100.64.0.0/10"),
            ("100.100.1.1", SharedCgnat, "100.64.0.0/10"),
            ("100.127.255.255", SharedCgnat, "100.64.0.0/10"),
            ("127.0.0.1", Loopback, "127.0.0.0/8"),
            ("127.0.0.0", Loopback, "127.0.0.0/8"),
            ("127.255.255.254", Loopback, "127.0.0.0/8"),
            ("169.254.0.0", LinkLocal, "169.254.0.0/16"),
            ("169.254.169.253", LinkLocal, "169.254.0.0/16"),
            ("169.254.255.255", LinkLocal, "169.254.0.0/16"),
            ("169.254.169.254", CloudMetadata, "169.254.169.254/32"),
            ("169.254.170.2", CloudMetadata, "169.254.170.2/32"),
            ("100.100.100.200", CloudMetadata, "100.100.100.200/32"),
            ("168.63.129.16", CloudMetadata, "168.63.129.16/32"),
            ("172.16.0.0", Private, "172.16.0.0/12"),
            ("172.20.1.1", Private, "172.16.0.0/12"),
            ("172.31.255.255", Private, "172.16.0.0/12"),
            ("192.0.0.0", IetfProtocol, "192.0.0.0/24"),
            ("192.0.0.192", IetfProtocol, "192.0.0.0/24"),
            ("192.0.0.255", IetfProtocol, "192.0.0.0/24"),
            ("192.0.2.0", Documentation, "192.0.2.0/24"),
            ("192.0.2.255", Documentation, "192.0.2.0/24"),
            ("192.168.0.0", Private, "192.168.0.0/16"),
            ("192.168.1.1", Private, "192.168.0.0/16"),
            ("192.168.255.255", Private, "192.168.0.0/16"),
            ("198.18.0.0", Benchmarking, "198.18.0.0/15"),
            ("198.19.255.255", Benchmarking, "198.18.0.0/15"),
            ("198.51.100.0", Documentation, "198.51.100.0/24"),
            ("198.51.100.255", Documentation, "198.51.100.0/24"),
            ("203.0.113.0", Documentation, "203.0.113.0/24"),
            ("203.0.113.255", Documentation, "203.0.113.0/24"),
            ("224.0.0.0", Multicast, "224.0.0.0/4"),
            ("239.255.255.250", Multicast, "224.0.0.0/4"),
            ("239.255.255.255", Multicast, "224.0.0.0/4"),
            ("240.0.0.0", Reserved, "240.0.0.0/4"),
            ("250.1.2.3", Reserved, "240.0.0.0/4"),
            ("255.255.255.254", Reserved, "240.0.0.0/4"),
            ("255.255.255.255", Broadcast, "255.255.255.255/32"),
        ];
        for (a, k, cidr) in blocked {
            let r = classify_ip(ip(a)).unwrap_or_else(|| panic!("{a} not blocked"));
            assert_eq!((r.kind, r.cidr), (*k, *cidr), "{a}");
        }
        let allowed = [
            "1.0.0.0",
            "1.1.1.1",
            "8.8.8.8",
            "9.255.255.255",
            "11.0.0.0",
            "100.63.255.255",
            "100.128.0.0",
            "126.255.255.255",
            "128.0.0.0",
            "169.253.255.255",
            "169.255.0.0",
            "172.15.255.255",
            "172.32.0.0",
            "191.255.255.255",
            "192.0.1.0",
            "192.0.3.0",
            "192.167.255.255",
            "192.169.0.0",
            "198.17.255.255",
            "198.20.0.0",
            "198.51.99.255",
            "198.51.101.0",
            "203.0.112.255",
            "203.0.114.0",
            "223.255.255.255",
            "93.184.215.14",
            "168.63.129.17",
        ];
        for a in allowed {
            assert_eq!(classify_ip(ip(a)), None, "{a}");
        }
    }

    #[test]
    fn ipv6_table() {
        use RangeKind::*;
        let blocked: &[(&str, RangeKind)] = &[
            ("::", Unspecified),
            ("::1", Loopback),
            ("fc00::", UniqueLocal),
            ("fd12:3456::1", UniqueLocal),
            ("fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", UniqueLocal),
            ("fe80::", LinkLocal),
            ("fe80::1", LinkLocal),
            ("febf:ffff::1", LinkLocal),
            ("fec0::1", SiteLocal),
            ("ff00::", Multicast),
            ("ff02::1", Multicast),
            ("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Multicast),
            ("2001:db8::", Documentation),
            ("2001:db8:ffff:ffff:ffff:ffff:ffff:ffff", Documentation),
            ("3fff::1", Documentation),
            ("2001:2::1", Benchmarking),
            ("2001::1", Teredo),
            ("100::1", DiscardOnly),
            ("64:ff9b:1::1", Nat64Local),
            ("fd00:ec2::254", CloudMetadata),
            // Embedded IPv4: mapped, compatible, NAT64, 6to4.
            ("::ffff:127.0.0.1", Loopback),
            ("::ffff:10.1.2.3", Private),
            ("::ffff:169.254.169.254", CloudMetadata),
            ("::ffff:0.0.0.0", ThisNetwork),
            ("::ffff:100.64.0.1", SharedCgnat),
            ("::127.0.0.1", Loopback),
            ("::10.0.0.1", Private),
            ("::169.254.169.254", CloudMetadata),
            ("64:ff9b::10.0.0.1", Private),
            ("64:ff9b::169.254.169.254", CloudMetadata),
            ("64:ff9b::127.0.0.1", Loopback),
            ("2002:a00:1::", Private),           // 6to4 of 10.0.0.1
            ("2002:7f00:1::1", Loopback),        // 6to4 of 127.0.0.1
            ("2002:a9fe:a9fe::", CloudMetadata), // 6to4 of 169.254.169.254
            // Not global unicast.
            ("4000::1", NotGlobalUnicast),
            ("::ffff:0:a00:1", NotGlobalUnicast), // SIIT form, outside ::/96 and mapped
            ("1::1", NotGlobalUnicast),
            ("5f00::1", NotGlobalUnicast),
        ];
        for (a, k) in blocked {
            assert_eq!(kind(a), Some(*k), "{a}");
        }
        let allowed = [
            "2606:4700:4700::1111",
            "2001:4860:4860::8888",
            "2a00:1450:4001::1",
            "::ffff:8.8.8.8",
            "::8.8.8.8",
            "64:ff9b::8.8.8.8",
            "2002:808:808::1",
            "3ffe::1",
        ];
        for a in allowed {
            assert_eq!(kind(a), None, "{a}");
        }
    }

    #[test]
    fn embedded_forms() {
        let cases = [
            ("::ffff:1.2.3.4", Some("1.2.3.4")),
            ("::1.2.3.4", Some("1.2.3.4")),
            ("64:ff9b::1.2.3.4", Some("1.2.3.4")),
            ("2002:102:304::", Some("1.2.3.4")),
            ("2606:4700::1", None),
            ("::1", None),
        ];
        for (a, e) in cases {
            let IpAddr::V6(a6) = ip(a) else { panic!() };
            assert_eq!(embedded_v4(a6), e.map(|s| s.parse().unwrap()), "{a}");
        }
    }

    #[test]
    fn cidr_parse_and_contains() {
        let c: Cidr = "127.0.0.1/32".parse().unwrap();
        assert!(c.contains(ip("127.0.0.1")));
        assert!(!c.contains(ip("127.0.0.2")));
        assert!(!c.contains(ip("::1")));
        let c: Cidr = "192.168.10.0/24".parse().unwrap();
        assert!(c.contains(ip("192.168.10.200")));
        assert!(!c.contains(ip("192.168.11.1")));
        let c: Cidr = "fd00::/8".parse().unwrap();
        assert!(c.contains(ip("fd12::1")));
        let c: Cidr = "192.168.1.20".parse().unwrap();
        assert_eq!(c.to_string(), "192.168.1.20/32");
        let c: Cidr = "0.0.0.0/0".parse().unwrap();
        assert!(c.contains(ip("8.8.8.8")));
        for bad in [
            "",
            "10.0.0.1/8",
            "10.0.0.0/33",
            "10.0.0.0/",
            "10.0.0.0/+8",
            "x/8",
            "::1/129",
            "fd00::1/8",
        ] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad}");
        }
    }

    #[test]
    fn exemptions() {
        let trusted: Vec<Cidr> = ["127.0.0.1/32", "169.254.0.0/16", "192.168.1.0/24"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        let check = |a: &str| {
            let r = classify_ip(ip(a)).unwrap();
            is_exempt(ip(a), r, &trusted)
        };
        assert!(check("127.0.0.1"));
        assert!(check("::ffff:127.0.0.1"));
        assert!(!check("127.0.0.2"));
        assert!(check("192.168.1.5"));
        assert!(!check("192.168.2.5"));
        assert!(check("169.254.1.1"));
        // Metadata is never exempt, whatever the operator trusts.
        assert!(!check("169.254.169.254"));
        assert!(!check("::ffff:169.254.169.254"));
        assert!(!check("169.254.170.2"));
        let everything: Vec<Cidr> = vec!["0.0.0.0/0".parse().unwrap(), "::/0".parse().unwrap()];
        for a in ["169.254.169.254", "fd00:ec2::254", "100.100.100.200"] {
            assert!(
                !is_exempt(ip(a), classify_ip(ip(a)).unwrap(), &everything),
                "{a}"
            );
        }
    }

    #[test]
    fn methods() {
        assert_eq!(Method::parse("get"), Some(Method::Get));
        assert_eq!(Method::parse("Post"), Some(Method::Post));
        for bad in ["CONNECT", "TRACE", "", "GET ", "FOO"] {
            assert_eq!(Method::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn host_patterns() {
        let r = HostRule::new("*.example.org", &[]);
        for h in [
            "example.org",
            "www.example.org",
            "a.b.example.org",
            "WWW.Example.ORG",
            "www.example.org.",
        ] {
            assert!(r.matches_host(h), "{h}");
        }
        for h in [
            "evilexample.org",
            "example.org.evil.com",
            "example.com",
            "org",
            ".example.org.x",
        ] {
            assert!(!r.matches_host(h), "{h}");
        }
        let r = HostRule::new("docs.rs", &[]);
        assert!(r.matches_host("docs.rs") && r.matches_host("DOCS.RS."));
        assert!(!r.matches_host("www.docs.rs"));
        let r = HostRule::new("::1", &[]);
        assert!(r.matches_host("[::1]") && r.matches_host("0:0::1"));
        let r = HostRule::new("[::1]", &[]);
        assert!(r.matches_host("::1"));
        let r = HostRule::new("10.0.0.1", &[]);
        assert!(r.matches_host("10.0.0.1") && !r.matches_host("10.0.0.2"));
        for ok in [
            "docs.rs",
            "*.example.org",
            "10.0.0.1",
            "::1",
            "[::1]",
            "xn--bcher-kva.example",
            "Example.ORG.",
        ] {
            assert!(HostRule::new(ok, &[]).validate().is_ok(), "{ok}");
        }
        for bad in [
            "",
            "*",
            "*.",
            "a.*.org",
            "exa mple.org",
            "http://x.org",
            "x.org/",
            "a..org",
            "x.org:80",
            "*.*.org",
            "bücher.de",
        ] {
            assert!(HostRule::new(bad, &[]).validate().is_err(), "{bad}");
        }
    }

    #[test]
    fn method_rules_and_allowlist() {
        let rules = vec![
            HostRule::new("*.example.org", &[]),
            HostRule::new("api.example.org", &[Method::Post]),
        ];
        use AllowlistDecision::*;
        assert_eq!(
            allowlist_decision(&rules, "www.example.org", Method::Get),
            Allowed
        );
        assert_eq!(
            allowlist_decision(&rules, "www.example.org", Method::Head),
            Allowed
        );
        assert_eq!(
            allowlist_decision(&rules, "www.example.org", Method::Post),
            MethodNotAllowed
        );
        // Union: the wildcard gives GET, the exact rule adds POST.
        assert_eq!(
            allowlist_decision(&rules, "api.example.org", Method::Post),
            Allowed
        );
        assert_eq!(
            allowlist_decision(&rules, "api.example.org", Method::Get),
            Allowed
        );
        assert_eq!(
            allowlist_decision(&rules, "api.example.org", Method::Delete),
            MethodNotAllowed
        );
        assert_eq!(
            allowlist_decision(&rules, "example.com", Method::Get),
            HostNotListed
        );
        assert_eq!(
            allowlist_decision(&[], "example.org", Method::Get),
            HostNotListed
        );
        // Explicit methods replace the default: a POST-only rule refuses GET.
        let post_only = vec![HostRule::new("hook.example", &[Method::Post])];
        assert_eq!(
            allowlist_decision(&post_only, "hook.example", Method::Get),
            MethodNotAllowed
        );
    }
}
