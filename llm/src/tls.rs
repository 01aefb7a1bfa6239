//! The process-wide rustls crypto provider.
//!
//! reqwest is built with `rustls-no-provider` (no aws-lc-rs, so no
//! aws-lc-sys C/cmake build): it compiles no crypto backend of its own and
//! *panics* in `ClientBuilder::build()` when no process-level
//! [`rustls::crypto::CryptoProvider`] is installed. [`ensure_crypto_provider`]
//! installs `ring`; the one client this crate builds (in
//! `OpenAiProvider::from_endpoint`) calls it first, so no construction order
//! can reach that panic. `silas-netguard` has the same function (same layer,
//! no shared dependency); `src/main.rs` calls this one at startup. Whichever
//! runs first wins; the rest are no-ops.

/// Installs rustls's `ring` provider as the process default unless a
/// provider is already installed. Idempotent and cheap; safe to call from
/// any thread, any number of times.
pub fn ensure_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Err = another thread installed one in between: a provider exists
        // either way, which is all a client build needs.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn installs_ring_once_and_is_idempotent() {
        ensure_crypto_provider();
        ensure_crypto_provider();
        let p = rustls::crypto::CryptoProvider::get_default().expect("a provider is installed");
        let ring = rustls::crypto::ring::default_provider();
        assert_eq!(format!("{:?}", p.key_provider), "Ring");
        assert_eq!(p.cipher_suites, ring.cipher_suites);
    }
}
