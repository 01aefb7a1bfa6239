//! Name resolution behind a trait so the guard resolves each host exactly
//! once per check and tests can inject answers. [`SystemResolver`] uses the
//! OS resolver (`getaddrinfo` via tokio); [`ScriptedResolver`] returns
//! scripted answers and counts calls (for tests of rebinding and mixed
//! A/AAAA answers, here and in other crates).

use std::collections::BTreeMap;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Mutex;

/// A resolution failure (NXDOMAIN, timeout inside the resolver, …).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ResolveError(pub String);

/// The future a [`Resolver`] returns.
pub type ResolveFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Vec<IpAddr>, ResolveError>> + Send + 'a>>;

/// Resolves a host name to all of its addresses (A and AAAA).
pub trait Resolver: Send + Sync {
    fn resolve<'a>(&'a self, host: &'a str) -> ResolveFuture<'a>;
}

/// The operating system's resolver.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemResolver;

impl Resolver for SystemResolver {
    fn resolve<'a>(&'a self, host: &'a str) -> ResolveFuture<'a> {
        Box::pin(async move {
            let addrs = tokio::net::lookup_host((host, 0))
                .await
                .map_err(|e| ResolveError(e.to_string()))?;
            Ok(addrs.map(|a| a.ip()).collect())
        })
    }
}

/// Owner-configured answers for some hosts (`connections.host_pins`), the
/// system resolver for the rest. A pin is an explicit, audited statement
/// "this name means these addresses" (a self-hosted service on the LAN, a
/// provider reached through a local relay); the guard still classifies
/// every pinned address, so a private one also needs a trusted CIDR.
pub struct PinnedResolver {
    pins: BTreeMap<String, Vec<IpAddr>>,
    fallback: std::sync::Arc<dyn Resolver>,
}

impl PinnedResolver {
    pub fn new(
        pins: BTreeMap<String, Vec<IpAddr>>,
        fallback: std::sync::Arc<dyn Resolver>,
    ) -> Self {
        let pins = pins
            .into_iter()
            .map(|(h, a)| (h.trim_end_matches('.').to_ascii_lowercase(), a))
            .collect();
        PinnedResolver { pins, fallback }
    }
}

impl Resolver for PinnedResolver {
    fn resolve<'a>(&'a self, host: &'a str) -> ResolveFuture<'a> {
        let key = host.trim_end_matches('.').to_ascii_lowercase();
        match self.pins.get(&key) {
            Some(addrs) => Box::pin(std::future::ready(Ok(addrs.clone()))),
            None => self.fallback.resolve(host),
        }
    }
}

#[derive(Debug, Default)]
struct Script {
    answers: Vec<Result<Vec<IpAddr>, ResolveError>>,
    calls: usize,
}

/// Scripted answers per host: the n-th lookup of a host gets its n-th
/// answer, the last answer repeats; unknown hosts fail like NXDOMAIN.
#[derive(Debug, Default)]
pub struct ScriptedResolver {
    hosts: Mutex<BTreeMap<String, Script>>,
}

impl ScriptedResolver {
    pub fn new() -> Self {
        Self::default()
    }

    /// Add answers for `host` (builder style).
    pub fn with(self, host: &str, answers: &[&[IpAddr]]) -> Self {
        self.set(host, answers.iter().map(|a| Ok(a.to_vec())).collect());
        self
    }

    /// A host whose every lookup fails.
    pub fn failing(self, host: &str, reason: &str) -> Self {
        self.set(host, vec![Err(ResolveError(reason.to_string()))]);
        self
    }

    fn set(&self, host: &str, answers: Vec<Result<Vec<IpAddr>, ResolveError>>) {
        if let Ok(mut h) = self.hosts.lock() {
            h.insert(host.to_ascii_lowercase(), Script { answers, calls: 0 });
        }
    }

    /// How many times `host` was looked up.
    pub fn calls(&self, host: &str) -> usize {
        self.hosts
            .lock()
            .ok()
            .and_then(|h| h.get(&host.to_ascii_lowercase()).map(|s| s.calls))
            .unwrap_or(0)
    }

    /// Lookups of all hosts together.
    pub fn total_calls(&self) -> usize {
        self.hosts
            .lock()
            .map(|h| h.values().map(|s| s.calls).sum())
            .unwrap_or(0)
    }
}

impl Resolver for ScriptedResolver {
    fn resolve<'a>(&'a self, host: &'a str) -> ResolveFuture<'a> {
        let answer = match self.hosts.lock() {
            Ok(mut h) => match h.get_mut(&host.to_ascii_lowercase()) {
                Some(s) => {
                    let i = s.calls.min(s.answers.len().saturating_sub(1));
                    s.calls += 1;
                    s.answers.get(i).cloned().unwrap_or_else(|| Ok(Vec::new()))
                }
                None => Err(ResolveError(format!("no such host: {host}"))),
            },
            Err(_) => Err(ResolveError("resolver state poisoned".into())),
        };
        Box::pin(std::future::ready(answer))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn pinned_hosts_answer_from_the_pins_and_the_rest_falls_through() {
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        let public: IpAddr = "93.184.216.34".parse().unwrap();
        let fallback = std::sync::Arc::new(ScriptedResolver::new().with("other.org", &[&[public]]));
        let r = PinnedResolver::new(
            BTreeMap::from([("OAuth.Example.com".to_string(), vec![lo])]),
            fallback.clone(),
        );
        assert_eq!(r.resolve("oauth.example.com.").await.unwrap(), vec![lo]);
        assert_eq!(fallback.total_calls(), 0);
        assert_eq!(r.resolve("other.org").await.unwrap(), vec![public]);
        assert!(r.resolve("unknown.org").await.is_err());
    }

    #[tokio::test]
    async fn scripted_answers_advance_and_repeat() {
        let a: IpAddr = "127.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.1".parse().unwrap();
        let r = ScriptedResolver::new()
            .with("Fetch.test", &[&[a], &[b]])
            .failing("gone.test", "NXDOMAIN");
        assert_eq!(r.resolve("fetch.test").await.unwrap(), vec![a]);
        assert_eq!(r.resolve("fetch.test").await.unwrap(), vec![b]);
        assert_eq!(r.resolve("fetch.test").await.unwrap(), vec![b]);
        assert_eq!(r.calls("fetch.test"), 3);
        assert!(r.resolve("gone.test").await.is_err());
        assert!(r.resolve("unknown.test").await.is_err());
        assert_eq!(r.total_calls(), 4);
    }
}
