//! The address a visitor counts under for every per-address limit: an IPv6
//! address by its /64 (one host usually holds the whole prefix, so per full
//! address it would get each limit 2^64 times over), an IPv4-mapped address
//! as its IPv4 one. The web server's connection caps and sign-in throttle,
//! the Stream's per-address message limit and the cap on customers' plan
//! cards all count through here, so one host is one address to each of them.

use std::net::IpAddr;

/// `ip` as the per-address limits count it.
pub fn counted_as(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6((u128::from(v6) & !((1u128 << 64) - 1)).into()),
        },
        v4 => v4,
    }
}

/// The counting key of an address recorded as text (an inbound message's
/// `ip`). Text that is not an address is its own key.
pub fn counted_key(ip: &str) -> String {
    match ip.parse::<IpAddr>() {
        Ok(addr) => counted_as(addr).to_string(),
        Err(_) => ip.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv6_counts_by_its_64_and_mapped_ipv4_as_ipv4() {
        assert_eq!(counted_key("2001:db8:1:2::1"), "2001:db8:1:2::");
        assert_eq!(
            counted_key("2001:db8:1:2:ffff:eeee:dddd:cccc"),
            counted_key("2001:db8:1:2::9")
        );
        assert_ne!(
            counted_key("2001:db8:1:3::1"),
            counted_key("2001:db8:1:2::1")
        );
        assert_eq!(counted_key("::ffff:192.0.2.7"), "192.0.2.7");
        assert_eq!(counted_key("192.0.2.7"), "192.0.2.7");
        assert_ne!(counted_key("192.0.2.7"), counted_key("192.0.2.8"));
        assert_eq!(counted_key("::1"), "::");
        assert_eq!(counted_key("not an address"), "not an address");
    }
}
