//! Caps on chatbot customers' connections. In a chatbot deployment a
//! connection without a credential is a customer, so anyone who reaches the
//! port can open one; without a cap one client held every descriptor of the
//! daemon (the owner's own socket and `/health` then timed out). A customer
//! counts against its address and against all customers together
//! (`limits.customer_connections_per_ip` / `_total`); an IPv6 client counts
//! by its /64, which one host can fill with addresses. Owner connections are
//! never counted here. The same bookkeeping, with caps of its own, counts
//! the sockets waiting for an in-band `auth` frame
//! ([`crate::auth::OwnerAuth::unauthenticated_slot`]).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};

/// Which cap refused a customer connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CapRefusal {
    PerAddress,
    Total,
}

impl CapRefusal {
    /// The HTTP body's `error`.
    pub fn message(self) -> &'static str {
        match self {
            CapRefusal::PerAddress => "too many customer connections from this address",
            CapRefusal::Total => "too many customer connections",
        }
    }
}

#[derive(Default)]
struct Counts {
    total: u32,
    /// Only addresses with an open connection: a gone visitor leaves no entry.
    by_address: HashMap<Option<IpAddr>, u32>,
}

/// The open customer connections, by address.
pub struct CustomerConnections {
    per_address: u32,
    total: u32,
    counts: Mutex<Counts>,
}

impl CustomerConnections {
    pub fn new(per_address: u32, total: u32) -> Arc<Self> {
        Arc::new(CustomerConnections {
            per_address,
            total,
            counts: Mutex::new(Counts::default()),
        })
    }

    /// The caps of the default configuration (`limits:`).
    pub fn with_defaults() -> Arc<Self> {
        let l = silas_core::config::LimitsConfig::default();
        Self::new(l.customer_connections_per_ip, l.customer_connections_total)
    }

    /// A slot for a customer connection from `ip`, held for its lifetime.
    pub fn acquire(self: &Arc<Self>, ip: Option<IpAddr>) -> Result<CustomerSlot, CapRefusal> {
        // The address a connection counts under (an IPv6 /64).
        let key = ip.map(silas_core::address::counted_as);
        let mut c = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        if c.total >= self.total {
            return Err(CapRefusal::Total);
        }
        let n = c.by_address.entry(key).or_insert(0);
        if *n >= self.per_address {
            return Err(CapRefusal::PerAddress);
        }
        *n += 1;
        c.total += 1;
        Ok(CustomerSlot {
            owner: self.clone(),
            key,
        })
    }

    /// Open customer connections (all addresses).
    pub fn open(&self) -> u32 {
        self.counts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .total
    }

    /// Addresses with an open customer connection.
    pub fn addresses(&self) -> usize {
        self.counts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .by_address
            .len()
    }

    fn release(&self, key: Option<IpAddr>) {
        let mut c = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        c.total = c.total.saturating_sub(1);
        if let Some(n) = c.by_address.get_mut(&key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                c.by_address.remove(&key);
            }
        }
    }
}

/// One open customer connection; released on drop.
pub struct CustomerSlot {
    owner: Arc<CustomerConnections>,
    key: Option<IpAddr>,
}

impl Drop for CustomerSlot {
    fn drop(&mut self) {
        self.owner.release(self.key);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn ip(s: &str) -> Option<IpAddr> {
        Some(s.parse().unwrap())
    }

    #[test]
    fn each_address_has_its_cap_and_all_together_theirs() {
        let caps = CustomerConnections::new(2, 3);
        let a1 = caps.acquire(ip("10.0.0.1")).unwrap();
        let _a2 = caps.acquire(ip("10.0.0.1")).unwrap();
        assert_eq!(
            caps.acquire(ip("10.0.0.1")).err(),
            Some(CapRefusal::PerAddress)
        );
        let _b1 = caps.acquire(ip("10.0.0.2")).unwrap();
        assert_eq!(caps.acquire(ip("10.0.0.3")).err(), Some(CapRefusal::Total));
        // A closed connection frees its slot under both caps.
        drop(a1);
        assert_eq!(caps.open(), 2);
        let _a3 = caps.acquire(ip("10.0.0.1")).unwrap();
        assert_eq!(caps.open(), 3);
    }

    #[test]
    fn ipv6_counts_by_its_64_and_mapped_ipv4_as_ipv4() {
        let caps = CustomerConnections::new(1, 100);
        let _a = caps.acquire(ip("2001:db8:1:2::1")).unwrap();
        assert_eq!(
            caps.acquire(ip("2001:db8:1:2:ffff::9")).err(),
            Some(CapRefusal::PerAddress),
            "another address of the same /64"
        );
        let _b = caps.acquire(ip("2001:db8:1:3::1")).unwrap();
        let _c = caps.acquire(ip("192.0.2.7")).unwrap();
        assert_eq!(
            caps.acquire(ip("::ffff:192.0.2.7")).err(),
            Some(CapRefusal::PerAddress)
        );
        // No address (not a TCP peer) is one bucket of its own.
        let _d = caps.acquire(None).unwrap();
        assert_eq!(caps.acquire(None).err(), Some(CapRefusal::PerAddress));
    }

    #[test]
    fn gone_visitors_leave_nothing_behind() {
        let caps = CustomerConnections::new(4, 10_000);
        for round in 0..5u8 {
            let slots: Vec<CustomerSlot> = (0..200u8)
                .map(|i| caps.acquire(ip(&format!("10.{round}.{i}.1"))).unwrap())
                .collect();
            assert_eq!(caps.addresses(), 200);
            drop(slots);
            assert_eq!((caps.open(), caps.addresses()), (0, 0));
        }
    }
}
