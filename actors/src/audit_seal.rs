//! The owner key as the audit log's checkpoint signer and verifier (§4.16).
//! Storage sits below `silas-keys` and only knows the two traits; this is
//! where the key meets them.

use std::sync::Arc;

use silas_keys::OwnerKey;
use silas_storage::{CheckpointSigner, CheckpointVerifier};

/// Signs checkpoints with, and verifies them against, the owner key.
#[derive(Clone)]
pub struct OwnerSeal(Arc<OwnerKey>);

impl OwnerSeal {
    pub fn new(key: Arc<OwnerKey>) -> Self {
        OwnerSeal(key)
    }
}

impl CheckpointSigner for OwnerSeal {
    fn sign(&self, payload: &[u8]) -> Vec<u8> {
        self.0.sign(payload).to_bytes().to_vec()
    }
}

impl CheckpointVerifier for OwnerSeal {
    fn verify(&self, payload: &[u8], signature: &[u8]) -> bool {
        silas_keys::verify(&self.0.verifying_key(), payload, signature)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_verify_only_under_the_same_key_and_payload() {
        let seal = OwnerSeal::new(Arc::new(OwnerKey::generate().unwrap()));
        let other = OwnerSeal::new(Arc::new(OwnerKey::generate().unwrap()));
        let sig = seal.sign(b"head 7");
        assert!(seal.verify(b"head 7", &sig));
        assert!(!seal.verify(b"head 8", &sig));
        assert!(!other.verify(b"head 7", &sig));
    }
}
