//! `silas-netguard`: the single choke point for web_fetch network egress
//! (meao M2 NetworkGuard; spec §3.7 ExecutionResult rules, §9.2–9.3).
//!
//! * [`policy`] — pure: blocked IP ranges ([`classify_ip`]), blocked ports,
//!   host allowlist rules with methods, operator-trusted CIDRs.
//! * [`NetworkGuard::check`] — URL → allowlist → one DNS lookup → every
//!   answer classified → [`ValidatedTarget`] with the addresses to use.
//! * [`GuardedFetcher`] — connects only to validated addresses (pinned DNS,
//!   no proxy), re-checks every redirect, caps the body.
//! * [`executor::web_fetch`] — envelope in, `ExecutionResult` out: body
//!   redacted before truncation into `return_value`, protocol details only in
//!   `metadata`, taint `external`.
//! * [`proxy::EgressProxy`] — loopback HTTP/CONNECT proxy for sandboxed
//!   commands granted network: every target through
//!   [`NetworkGuard::check_destination`], refusals returned as data.
//! * [`tls::ensure_crypto_provider`] — installs rustls's `ring` provider
//!   (reqwest is built without one) before any client is built.
//!
//! **Architecture invariant:** nothing in this crate opens a connection to
//! an address that did not come out of `NetworkGuard::check` for that very
//! hop; there is no unguarded fetch path.

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod config;
pub mod error;
pub mod executor;
pub mod fetch;
pub mod guard;
pub mod policy;
pub mod proxy;
pub mod resolver;
pub mod tls;

pub use config::{ConfigError, NetworkGuardConfig, ValidConfig};
pub use error::{FetchError, GuardError};
pub use executor::{WEB_FETCH, web_fetch};
pub use fetch::{FetchFailure, FetchRequest, FetchResponse, GuardedFetcher, Hop};
pub use guard::{Destination, NetworkGuard, ValidatedTarget};
pub use policy::{BlockedRange, Cidr, HostRule, Method, RangeKind, classify_ip};
pub use proxy::{EgressLimits, EgressProxy, EgressRefusal};
pub use resolver::{PinnedResolver, ResolveError, Resolver, ScriptedResolver, SystemResolver};
pub use tls::ensure_crypto_provider;
