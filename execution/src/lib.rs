//! `silas-execution`: what runs approved work and what checks it (spec §4.6,
//! §4.10, §5.3, §9.2–9.3).
//!
//! * [`executors`] — the executor registry: `shell_exec` and `python_exec`
//!   turn an [`ExecutionEnvelope`](silas_core::model::execution::ExecutionEnvelope)
//!   into a sandboxed run in a fresh work directory and return an
//!   `ExecutionResult` whose output is `external` taint and secret-redacted
//!   *before* truncation; protocol details go only to `metadata`.
//! * [`web_search`] — the provider-backed `web_search` executor (Tavily),
//!   registered only when `search.provider` and `search.api_key` are set;
//!   query length, result count, timeout and domain allowlist limits; the
//!   provider connection goes through the NetworkGuard.
//! * [`verification`] — the VerificationRunner: every check in its own
//!   sandbox instance, separate from execution, in a fresh empty work dir
//!   with the artifacts staged read-only in `./artifacts/`
//!   (`$SILAS_ARTIFACTS`), a minimal environment, network off unless the
//!   check asks, the shared `Expectation` predicates (`silas_gates::expect`),
//!   `file_exists` confined to permitted directories.
//! * [`artifacts`] — how produced files leave a sandbox: plain regular files
//!   only (no symlink followed, no fifo/device/hard link), mode 0600 without
//!   setuid/setgid/sticky, into 0700 directories.
//!
//! **Architecture invariant:** nothing here runs a command except through
//! `silas_sandbox`; a sandbox that cannot isolate yields a failed result, never
//! an unsandboxed run, and verification never passes by default on errors.

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod artifacts;
pub mod cleanup;
pub mod connection_setup;
pub mod executors;
pub mod mcp;
pub mod mcp_registry;
pub mod mcp_schema;
pub mod verification;
pub mod web_search;

/// 128 random bits, hex: IDs for work directories.
pub(crate) fn random_id() -> String {
    let mut b = [0u8; 16];
    // Without randomness fall back to time-based uniqueness; IDs only name
    // directories, they are not secrets.
    if getrandom::fill(&mut b).is_err() {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        b = nanos.to_le_bytes();
    }
    silas_core::canonical::hex_lower(&b)
}
