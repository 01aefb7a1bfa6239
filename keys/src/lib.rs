//! `silas-keys`: the owner's Ed25519 signing key (spec §5.8).
//!
//! Owns key generation from the OS CSPRNG, the keystore the key lives in, and
//! signing/verification. The private key never leaves this crate except as a
//! [`OwnerKey`], whose `Debug` prints only the public key; nothing here logs.
//!
//! Keystore backends: [`FileKeystore`] keeps the key in
//! `{data_dir}/keys/owner.key`, created with mode 0600 inside a 0700 directory,
//! written with `create_new` so an existing key is never overwritten unless the
//! caller explicitly forces a replacement (which goes through a temp file and
//! an atomic rename). Loading refuses a key file readable by group or others,
//! as ssh does.

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

use std::fmt;
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};
use serde::{Deserialize, Serialize};
use silas_core::{Base64Bytes, Coded, ErrorCode, Timestamp, canonical};
use zeroize::Zeroizing;

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
}

impl Coded for KeyError {
    fn code(&self) -> ErrorCode {
        ErrorCode::ECfgKeystore
    }
}

/// The owner's signing key. Zeroised on drop (ed25519-dalek's `zeroize`).
pub struct OwnerKey {
    signing: SigningKey,
}

impl fmt::Debug for OwnerKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "OwnerKey(public={})", self.public_key_hex())
    }
}

impl OwnerKey {
    pub fn generate() -> Result<OwnerKey, KeyError> {
        let mut seed = Zeroizing::new([0u8; 32]);
        getrandom::fill(seed.as_mut()).map_err(|e| KeyError::Random(e.to_string()))?;
        Ok(OwnerKey {
            signing: SigningKey::from_bytes(&seed),
        })
    }

    pub fn verifying_key(&self) -> VerifyingKey {
        self.signing.verifying_key()
    }

    pub fn public_key_hex(&self) -> String {
        canonical::hex_lower(&self.verifying_key().to_bytes())
    }

    pub fn sign(&self, message: &[u8]) -> Signature {
        self.signing.sign(message)
    }
}

/// Verify a signature strictly (rejects malleable and small-order forms).
pub fn verify(key: &VerifyingKey, message: &[u8], signature: &[u8]) -> bool {
    let Ok(bytes) = <[u8; 64]>::try_from(signature) else {
        return false;
    };
    key.verify_strict(message, &Signature::from_bytes(&bytes))
        .is_ok()
}

#[derive(Serialize, Deserialize)]
struct KeyFile {
    version: u8,
    algorithm: String,
    public_key: String,
    secret_key: Base64Bytes,
    created_at: Timestamp,
}

/// What `init` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InitOutcome {
    Created { public_key: String },
    KeptExisting { public_key: String },
    Replaced { public_key: String },
}

/// Owner key in a 0600 file under the data dir.
#[derive(Debug, Clone)]
pub struct FileKeystore {
    path: PathBuf,
}

impl FileKeystore {
    pub fn in_data_dir(data_dir: &Path) -> Self {
        FileKeystore {
            path: data_dir.join("keys").join("owner.key"),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn describe(&self) -> String {
        format!("file keystore at {} (mode 0600)", self.path.display())
    }

    fn io(&self, source: std::io::Error) -> KeyError {
        KeyError::Io {
            path: self.path.display().to_string(),
            source,
        }
    }

    pub fn exists(&self) -> bool {
        self.path.exists()
    }

    /// Create the owner key if absent; keep an existing one unless `force`.
    pub fn init(&self, force: bool) -> Result<InitOutcome, KeyError> {
        if self.exists() && !force {
            let key = self.load()?;
            return Ok(InitOutcome::KeptExisting {
                public_key: key.public_key_hex(),
            });
        }
        let existed = self.exists();
        let key = OwnerKey::generate()?;
        self.write(&key, existed)?;
        let public_key = key.public_key_hex();
        Ok(if existed {
            InitOutcome::Replaced { public_key }
        } else {
            InitOutcome::Created { public_key }
        })
    }

    fn write(&self, key: &OwnerKey, replace: bool) -> Result<(), KeyError> {
        let dir = self.path.parent().ok_or_else(|| KeyError::Malformed {
            path: self.path.display().to_string(),
            detail: "key path has no parent directory".into(),
        })?;
        fs::create_dir_all(dir).map_err(|e| self.io(e))?;
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700)).map_err(|e| self.io(e))?;
        let file = KeyFile {
            version: 1,
            algorithm: "ed25519".into(),
            public_key: key.public_key_hex(),
            secret_key: Base64Bytes(key.signing.to_bytes().to_vec()),
            created_at: Timestamp::now(),
        };
        let body =
            Zeroizing::new(
                serde_json::to_vec_pretty(&file).map_err(|e| KeyError::Malformed {
                    path: self.path.display().to_string(),
                    detail: e.to_string(),
                })?,
            );
        let target = if replace {
            self.path.with_extension("key.new")
        } else {
            self.path.clone()
        };
        if replace {
            let _ = fs::remove_file(&target);
        }
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&target)
            .map_err(|e| self.io(e))?;
        f.write_all(&body).map_err(|e| self.io(e))?;
        f.sync_all().map_err(|e| self.io(e))?;
        if replace {
            fs::rename(&target, &self.path).map_err(|e| self.io(e))?;
        }
        Ok(())
    }

    pub fn load(&self) -> Result<OwnerKey, KeyError> {
        let path = self.path.display().to_string();
        let meta = match fs::metadata(&self.path) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(KeyError::Missing { path });
            }
            Err(e) => return Err(self.io(e)),
        };
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(KeyError::InsecurePermissions { path, mode });
        }
        let raw = Zeroizing::new(fs::read(&self.path).map_err(|e| self.io(e))?);
        let file: KeyFile = serde_json::from_slice(&raw).map_err(|e| KeyError::Malformed {
            path: path.clone(),
            detail: e.to_string(),
        })?;
        let secret = Zeroizing::new(file.secret_key.0);
        let seed: [u8; 32] = secret
            .as_slice()
            .try_into()
            .map_err(|_| KeyError::Malformed {
                path: path.clone(),
                detail: "secret key is not 32 bytes".into(),
            })?;
        let key = OwnerKey {
            signing: SigningKey::from_bytes(&seed),
        };
        if key.public_key_hex() != file.public_key {
            return Err(KeyError::Malformed {
                path,
                detail: "public key does not match the secret key".into(),
            });
        }
        Ok(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn init_creates_a_0600_key_and_keeps_it_on_rerun() {
        let dir = tempfile::tempdir().unwrap();
        let ks = FileKeystore::in_data_dir(dir.path());
        let InitOutcome::Created { public_key } = ks.init(false).unwrap() else {
            panic!("not created")
        };
        let mode = fs::metadata(ks.path()).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let dir_mode = fs::metadata(ks.path().parent().unwrap())
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(dir_mode, 0o700);
        assert_eq!(
            ks.init(false).unwrap(),
            InitOutcome::KeptExisting {
                public_key: public_key.clone()
            }
        );
        let InitOutcome::Replaced { public_key: new } = ks.init(true).unwrap() else {
            panic!("not replaced")
        };
        assert_ne!(new, public_key);
        assert_eq!(ks.load().unwrap().public_key_hex(), new);
    }

    #[test]
    fn sign_and_verify_strictly() {
        let key = OwnerKey::generate().unwrap();
        let sig = key.sign(b"payload");
        assert!(verify(&key.verifying_key(), b"payload", &sig.to_bytes()));
        assert!(!verify(&key.verifying_key(), b"payload!", &sig.to_bytes()));
        let mut bad = sig.to_bytes();
        bad[3] ^= 1;
        assert!(!verify(&key.verifying_key(), b"payload", &bad));
        assert!(!verify(&key.verifying_key(), b"payload", &bad[..63]));
        let other = OwnerKey::generate().unwrap();
        assert!(!verify(&other.verifying_key(), b"payload", &sig.to_bytes()));
    }

    #[test]
    fn loose_permissions_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let ks = FileKeystore::in_data_dir(dir.path());
        ks.init(false).unwrap();
        fs::set_permissions(ks.path(), fs::Permissions::from_mode(0o644)).unwrap();
        assert!(matches!(
            ks.load(),
            Err(KeyError::InsecurePermissions { .. })
        ));
    }

    #[test]
    fn missing_and_tampered_keys_are_reported() {
        let dir = tempfile::tempdir().unwrap();
        let ks = FileKeystore::in_data_dir(dir.path());
        assert!(matches!(ks.load(), Err(KeyError::Missing { .. })));
        ks.init(false).unwrap();
        let text = fs::read_to_string(ks.path()).unwrap();
        let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
        v["public_key"] = serde_json::Value::String("00".repeat(32));
        fs::write(ks.path(), serde_json::to_vec(&v).unwrap()).unwrap();
        assert!(matches!(ks.load(), Err(KeyError::Malformed { .. })));
    }

    #[test]
    fn debug_never_prints_the_secret() {
        let key = OwnerKey::generate().unwrap();
        let secret_b64 = Base64Bytes(key.signing.to_bytes().to_vec()).encode();
        let dbg = format!("{key:?}");
        assert!(!dbg.contains(&secret_b64));
        assert!(dbg.contains(&key.public_key_hex()));
    }
}
