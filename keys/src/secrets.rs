//! The credential store behind `POST /secrets/{ref_id}` (§0.5 secret
//! isolation rule, §5.10.1): values are encrypted at rest, one 0600 file
//! per `ref_id` under `{data_dir}/secrets/` (a 0700 directory), never in
//! redb, never in a log, an audit entry or a frame.
//!
//! Why this shape: the spec's "OS keyring" is not available on headless
//! machines (see `keyring.rs`), and the owner key already has a store with
//! the properties we need. The store's 32-byte data key is kept by that
//! same machinery — a [`FileKeystore`] at `{data_dir}/keys/secrets.key`:
//! sealed with Argon2id → XChaCha20-Poly1305 under the key-encryption key
//! when one is configured (systemd credential or `SILAS_KEYSTORE_KEK`),
//! 0600 plaintext otherwise (then the secrets are only as safe as that
//! file, like the owner key; `describe()` says which). Each value is sealed
//! with XChaCha20-Poly1305 under the data key, a fresh random 24-byte nonce
//! and the `ref_id` as associated data (a file renamed to another ref does
//! not open). Files are written through a temp file and an atomic hard
//! link, so a ref is fulfilled at most once.
//!
//! No value is ever formatted: errors name the ref and the path only.

use std::fs;
use std::path::{Path, PathBuf};

use chacha20poly1305::aead::{AeadInOut, KeyInit};
use chacha20poly1305::{Key, Tag, XChaCha20Poly1305, XNonce};
use zeroize::Zeroizing;

use crate::{FileKeystore, KekSources, KeyError, OwnerKey};

const NONCE_LEN: usize = 24;
const TAG_LEN: usize = 16;
const FILE_MAGIC: &[u8; 8] = b"silasec1";
/// Largest value accepted (the web endpoint allows 16 KiB bodies).
pub const MAX_SECRET_BYTES: usize = 16 * 1024;

/// Why a secret could not be stored or read. Never carries the value.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("secret ref {0:?} is not a valid ref id")]
    BadRef(String),
    #[error("secret ref {0:?} already holds a value")]
    Exists(String),
    #[error("secret ref {0:?} holds no value")]
    Missing(String),
    #[error("secret value larger than {MAX_SECRET_BYTES} bytes")]
    TooLarge,
    #[error("secret ref {0:?} does not authenticate (wrong data key or modified file)")]
    Authentication(String),
    #[error(transparent)]
    Key(#[from] KeyError),
}

impl silas_core::Coded for SecretError {
    fn code(&self) -> silas_core::ErrorCode {
        use silas_core::ErrorCode;
        match self {
            SecretError::BadRef(_) | SecretError::TooLarge => ErrorCode::EChannelProtocol,
            SecretError::Exists(_) | SecretError::Missing(_) => ErrorCode::EDbNotFound,
            SecretError::Authentication(_) => ErrorCode::ECfgKeystore,
            SecretError::Key(e) => e.code(),
        }
    }
}

/// The encrypted-at-rest credential store.
pub struct SecretStore {
    dir: PathBuf,
    keystore: FileKeystore,
    data_key: OwnerKey,
}

impl std::fmt::Debug for SecretStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SecretStore({})", self.dir.display())
    }
}

/// A ref id is used as a file name: ASCII letters, digits, `-` and `_`.
pub fn valid_ref(ref_id: &str) -> bool {
    !ref_id.is_empty()
        && ref_id.len() <= 128
        && ref_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

fn aad(ref_id: &str) -> Vec<u8> {
    let mut aad = b"silas secret v1\0".to_vec();
    aad.extend_from_slice(ref_id.as_bytes());
    aad
}

impl SecretStore {
    /// Opens (creating on first use) the store under `data_dir`.
    pub fn open(data_dir: &Path, kek: KekSources) -> Result<SecretStore, SecretError> {
        let keystore = FileKeystore::new(data_dir.join("keys").join("secrets.key"), kek);
        let (_, data_key) = keystore.open(false)?;
        let dir = data_dir.join("secrets");
        if !dir.exists() {
            use std::os::unix::fs::DirBuilderExt;
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&dir)
                .map_err(|e| io(&dir, e))?;
        }
        Ok(SecretStore {
            dir,
            keystore,
            data_key,
        })
    }

    /// Where the data key lives and whether it is encrypted at rest.
    pub fn describe(&self) -> String {
        format!(
            "secrets in {} (data key: {})",
            self.dir.display(),
            self.keystore.describe()
        )
    }

    fn path(&self, ref_id: &str) -> PathBuf {
        self.dir.join(format!("{ref_id}.sec"))
    }

    fn cipher(&self) -> XChaCha20Poly1305 {
        let seed = self.data_key.seed();
        let seed: &[u8; 32] = &seed;
        let key: &Key = seed.into();
        XChaCha20Poly1305::new(key)
    }

    pub fn contains(&self, ref_id: &str) -> bool {
        valid_ref(ref_id) && self.path(ref_id).exists()
    }

    /// Seals and writes `value` under `ref_id`; refuses to overwrite.
    pub fn put(&self, ref_id: &str, value: &[u8]) -> Result<(), SecretError> {
        if !valid_ref(ref_id) {
            return Err(SecretError::BadRef(ref_id.to_string()));
        }
        if value.len() > MAX_SECRET_BYTES {
            return Err(SecretError::TooLarge);
        }
        let mut nonce = [0u8; NONCE_LEN];
        getrandom::fill(&mut nonce).map_err(|e| KeyError::Random(e.to_string()))?;
        let mut buf = Zeroizing::new(value.to_vec());
        let tag = self
            .cipher()
            .encrypt_inout_detached(
                &XNonce::from(nonce),
                &aad(ref_id),
                buf.as_mut_slice().into(),
            )
            .map_err(|_| SecretError::Authentication(ref_id.to_string()))?;
        let mut body = Vec::with_capacity(FILE_MAGIC.len() + NONCE_LEN + buf.len() + TAG_LEN);
        body.extend_from_slice(FILE_MAGIC);
        body.extend_from_slice(&nonce);
        body.extend_from_slice(&buf);
        body.extend_from_slice(tag.as_slice());
        let path = self.path(ref_id);
        write_new_private(&self.dir, &path, &body).map_err(|e| {
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                SecretError::Exists(ref_id.to_string())
            } else {
                SecretError::Key(io(&path, e))
            }
        })
    }

    /// Deletes the value under `ref_id`: a cancelled connection setup
    /// removes what it stored, and a re-setup replaces the old token.
    /// Returns whether a value was there.
    pub fn remove(&self, ref_id: &str) -> Result<bool, SecretError> {
        if !valid_ref(ref_id) {
            return Err(SecretError::BadRef(ref_id.to_string()));
        }
        let path = self.path(ref_id);
        match fs::remove_file(&path) {
            Ok(()) => {
                fs::File::open(&self.dir)
                    .and_then(|d| d.sync_all())
                    .map_err(|e| io(&self.dir, e))?;
                Ok(true)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(io(&path, e).into()),
        }
    }

    /// Reads and opens the value stored under `ref_id`.
    pub fn get(&self, ref_id: &str) -> Result<Zeroizing<Vec<u8>>, SecretError> {
        if !valid_ref(ref_id) {
            return Err(SecretError::BadRef(ref_id.to_string()));
        }
        let path = self.path(ref_id);
        let body = match fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(SecretError::Missing(ref_id.to_string()));
            }
            Err(e) => return Err(io(&path, e).into()),
        };
        let bad = || SecretError::Authentication(ref_id.to_string());
        let rest = body.strip_prefix(FILE_MAGIC.as_slice()).ok_or_else(bad)?;
        if rest.len() < NONCE_LEN + TAG_LEN {
            return Err(bad());
        }
        let (nonce, rest) = rest.split_at(NONCE_LEN);
        let (ct, tag) = rest.split_at(rest.len() - TAG_LEN);
        let nonce = <[u8; NONCE_LEN]>::try_from(nonce).map_err(|_| bad())?;
        let tag = Tag::try_from(tag).map_err(|_| bad())?;
        let mut buf = Zeroizing::new(ct.to_vec());
        self.cipher()
            .decrypt_inout_detached(
                &XNonce::from(nonce),
                &aad(ref_id),
                buf.as_mut_slice().into(),
                &tag,
            )
            .map_err(|_| bad())?;
        Ok(buf)
    }
}

/// Writes `body` to `path` (0600) through a temp file and an atomic hard
/// link, so the file appears complete or not at all and is never replaced.
fn write_new_private(dir: &Path, path: &Path, body: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut tmp_name = path.file_name().unwrap_or_default().to_os_string();
    tmp_name.push(".tmp");
    let tmp = dir.join(tmp_name);
    let _ = fs::remove_file(&tmp);
    let written = (|| {
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(body)?;
        f.sync_all()?;
        fs::hard_link(&tmp, path)
    })();
    let _ = fs::remove_file(&tmp);
    written?;
    fs::File::open(dir).and_then(|d| d.sync_all())
}

fn io(path: &Path, source: std::io::Error) -> KeyError {
    KeyError::Io {
        path: path.display().to_string(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn no_kek() -> KekSources {
        let env = silas_core::config::MapEnv::default();
        KekSources::new("SILAS_KEYSTORE_KEK", "silas-kek", std::sync::Arc::new(env))
    }

    #[test]
    fn a_removed_value_is_gone_and_the_ref_can_be_filled_again() {
        let d = tempfile::tempdir().unwrap();
        let store = SecretStore::open(d.path(), no_kek()).unwrap();
        store.put("conn_x_access", b"old").unwrap();
        assert!(store.remove("conn_x_access").unwrap());
        assert!(!store.contains("conn_x_access"));
        assert!(matches!(
            store.get("conn_x_access"),
            Err(SecretError::Missing(_))
        ));
        assert!(!store.remove("conn_x_access").unwrap());
        store.put("conn_x_access", b"new").unwrap();
        assert_eq!(store.get("conn_x_access").unwrap().as_slice(), b"new");
        assert!(matches!(store.remove("../x"), Err(SecretError::BadRef(_))));
    }

    #[test]
    fn values_round_trip_encrypted_and_private() {
        let d = tempfile::tempdir().unwrap();
        let store = SecretStore::open(d.path(), no_kek()).unwrap();
        let canary = b"CANARY-s3cr3t-value-0123456789";
        store.put("sec-abc", canary).unwrap();
        assert!(store.contains("sec-abc"));
        assert_eq!(store.get("sec-abc").unwrap().as_slice(), canary);
        // Encrypted at rest: the file never holds the value.
        let raw = fs::read(d.path().join("secrets/sec-abc.sec")).unwrap();
        assert!(!raw.windows(canary.len()).any(|w| w == canary));
        let mode = fs::metadata(d.path().join("secrets/sec-abc.sec"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let dmode = fs::metadata(d.path().join("secrets"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(dmode & 0o777, 0o700);
        // Once only.
        assert!(matches!(
            store.put("sec-abc", b"x"),
            Err(SecretError::Exists(_))
        ));
        // Reopening finds the same data key.
        let again = SecretStore::open(d.path(), no_kek()).unwrap();
        assert_eq!(again.get("sec-abc").unwrap().as_slice(), canary);
    }

    #[test]
    fn refs_are_file_name_safe_and_bound_to_their_file() {
        let d = tempfile::tempdir().unwrap();
        let store = SecretStore::open(d.path(), no_kek()).unwrap();
        for bad in ["", "../x", "a/b", "a.b", &"x".repeat(129)] {
            assert!(
                matches!(store.put(bad, b"v"), Err(SecretError::BadRef(_))),
                "{bad}"
            );
        }
        store.put("one", b"value").unwrap();
        fs::copy(
            d.path().join("secrets/one.sec"),
            d.path().join("secrets/two.sec"),
        )
        .unwrap();
        assert!(matches!(
            store.get("two"),
            Err(SecretError::Authentication(_))
        ));
        assert!(matches!(store.get("three"), Err(SecretError::Missing(_))));
        assert!(matches!(
            store.put("big", &vec![0u8; MAX_SECRET_BYTES + 1]),
            Err(SecretError::TooLarge)
        ));
    }
}
