//! [`KeyError`]: every keystore failure, coded `E_CFG_KEYSTORE`.
//!
//! Messages name the store and what to do about the failure. They never carry
//! key material: variants hold paths, store names and descriptions built by
//! this crate, never a byte buffer or a foreign error that might embed one
//! (keyring errors are rendered field by field in `keyring.rs` for that reason).

use silas_core::{Coded, ErrorCode};

#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("keystore {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error(
        "keystore {path}: key file is accessible by group or others (mode {mode:o}); run `chmod 600 {path}`"
    )]
    InsecurePermissions { path: String, mode: u32 },
    #[error("keystore {path}: malformed key file: {detail}")]
    Malformed { path: String, detail: String },
    #[error("keystore {path}: no owner key; run `silas init`")]
    Missing { path: String },
    #[error("the OS random number generator failed: {0}")]
    Random(String),
    /// An encrypted key file and no key-encryption key in any source.
    #[error(
        "keystore {path}: the key file is encrypted but no key-encryption key is available; \
         provide {sources}"
    )]
    KekMissing { path: String, sources: String },
    /// A KEK source exists but cannot be used (unreadable, empty).
    #[error("key-encryption key from {origin}: {detail}")]
    KekUnusable { origin: String, detail: String },
    /// AEAD authentication failed: the KEK differs from the one the file was
    /// sealed with, or the file was modified.
    #[error(
        "keystore {path}: wrong key-encryption key (from {origin}), or the key file was modified: \
         the encrypted key does not authenticate"
    )]
    WrongKek { path: String, origin: String },
    /// The OS keystore could not be reached or refused the operation.
    #[error(
        "OS keystore {store}: cannot {action}: {detail}; on a headless server use \
         `keystore.backend: file` (encrypted when a key-encryption key is provided, see config/silas.yaml)"
    )]
    Keyring {
        store: String,
        action: &'static str,
        detail: String,
    },
}

impl KeyError {
    /// The one thing to do about it (`silas doctor`'s fix line).
    pub fn fix(&self) -> String {
        match self {
            KeyError::InsecurePermissions { path, .. } => format!("chmod 600 {path}"),
            KeyError::Missing { .. } => "silas init".into(),
            KeyError::KekMissing { sources, .. } => format!("provide {sources}"),
            KeyError::KekUnusable { origin, .. } => {
                format!("fix the key-encryption key in {origin}")
            }
            KeyError::WrongKek { .. } => {
                "provide the key-encryption key the key file was sealed with".into()
            }
            KeyError::Keyring { .. } => "set `keystore.backend: file` on a headless server".into(),
            KeyError::Io { .. } | KeyError::Malformed { .. } | KeyError::Random(_) => {
                "silas init (or provide the key-encryption key the error names)".into()
            }
        }
    }
}

impl Coded for KeyError {
    fn code(&self) -> ErrorCode {
        ErrorCode::ECfgKeystore
    }
}
