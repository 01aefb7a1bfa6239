//! The file keystore: the owner key in one JSON file, mode 0600.
//!
//! Two on-disk versions, told apart by `version`:
//!
//! * **1, plaintext** (the newcomer default, when no KEK is available):
//!   `{version, algorithm, public_key, secret_key (base64 seed), created_at}`.
//! * **2, encrypted** (whenever a KEK is available):
//!   `{version, algorithm, public_key, created_at, kdf: "argon2id",
//!   kdf_params: {m_cost_kib, t_cost, p_cost}, salt, cipher:
//!   "xchacha20poly1305", nonce, ciphertext}` with salt, nonce and
//!   ciphertext (seed + tag) in standard base64; see `sealed.rs`. The public
//!   key, version and creation time stay readable without the KEK.
//!
//! Writes never leave a half-written key behind: the body goes to a
//! `<name>.tmp` sibling (0600, `create_new`), is synced, and is then
//! hard-linked into place for a new key (which fails rather than overwrite a
//! key created concurrently) or renamed over the old file for a replacement
//! or re-encryption; the directory is synced afterwards. Loading refuses a
//! key file readable by group or others, as ssh does.
//!
//! Secret buffers (the seed, its base64 form, the serialised plaintext file,
//! the raw bytes read back) are `Zeroizing` and allocated once at their final
//! size, so no unzeroised copy is left behind by a reallocation.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Serialize};
use silas_core::{Base64Bytes, Timestamp};
use zeroize::Zeroizing;

use crate::kek::{Kek, KekSources};
use crate::sealed::{self, KdfParams, SealError, Sealed};
use crate::{InitOutcome, KeyError, OwnerKey};

/// File name of the key under `{data_dir}/keys/`.
pub const KEY_FILE_NAME: &str = "owner.key";

const ALGORITHM: &str = "ed25519";
const KDF: &str = "argon2id";
const CIPHER: &str = "xchacha20poly1305";
const PLAINTEXT_VERSION: u8 = 1;
const ENCRYPTED_VERSION: u8 = 2;

/// How a key file stores the secret.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileFormat {
    /// Version 1: the seed in clear (file mode is the only protection).
    Plaintext,
    /// Version 2: the seed sealed under a key-encryption key.
    Encrypted,
}

impl FileFormat {
    pub fn is_encrypted(self) -> bool {
        self == FileFormat::Encrypted
    }
}

/// Just the version, read without touching the rest of the file.
#[derive(Deserialize)]
struct Header {
    version: u8,
}

/// Version 1. The secret is borrowed from the (zeroised) raw bytes rather
/// than copied into an unzeroised `String`.
#[derive(Serialize, Deserialize)]
struct PlainFile<'a> {
    version: u8,
    #[serde(borrow)]
    algorithm: &'a str,
    #[serde(borrow)]
    public_key: &'a str,
    #[serde(borrow)]
    secret_key: &'a str,
    created_at: Timestamp,
}

/// Version 2: no secret in clear, so owned fields are fine.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SealedFile {
    version: u8,
    algorithm: String,
    public_key: String,
    created_at: Timestamp,
    kdf: String,
    kdf_params: KdfParams,
    salt: Base64Bytes,
    cipher: String,
    nonce: Base64Bytes,
    ciphertext: Base64Bytes,
}

/// A key read back from a file, with what is needed to rewrite it.
struct Stored {
    key: OwnerKey,
    format: FileFormat,
    created_at: Timestamp,
}

/// The owner key in a 0600 file; encrypted when [`KekSources`] yield a KEK.
#[derive(Debug, Clone)]
pub struct FileKeystore {
    path: PathBuf,
    kek: KekSources,
    kdf: KdfParams,
}

impl FileKeystore {
    /// A keystore at `path`, encrypting with a KEK from `kek` when one is
    /// available.
    pub fn new(path: impl Into<PathBuf>, kek: KekSources) -> Self {
        FileKeystore {
            path: path.into(),
            kek,
            kdf: KdfParams::DEFAULT,
        }
    }

    /// The default location, `{data_dir}/keys/owner.key`.
    pub fn in_data_dir(data_dir: &Path, kek: KekSources) -> Self {
        FileKeystore::new(data_dir.join("keys").join(KEY_FILE_NAME), kek)
    }

    /// Argon2id cost for keys sealed from now on (files record their own
    /// cost, so this never affects loading). Tests use cheap parameters.
    pub fn with_kdf_params(mut self, kdf: KdfParams) -> Self {
        self.kdf = kdf;
        self
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn kek_sources(&self) -> &KekSources {
        &self.kek
    }

    fn display_path(&self) -> String {
        self.path.display().to_string()
    }

    /// Human text: location, and whether the key is (or will be) encrypted
    /// and by what. Reads the file's header and probes the KEK sources;
    /// never contains key material.
    pub fn describe(&self) -> String {
        let at = format!("file keystore at {}", self.path.display());
        let encrypt_hint = || {
            format!(
                "to encrypt it, provide {} and rerun `silas init`",
                self.kek.describe()
            )
        };
        let sealed_by = |origin: &crate::KekOrigin| {
            format!(
                "{at} (encrypted: XChaCha20-Poly1305 under an Argon2id key derived from the \
                 key-encryption key in the {origin}; mode 0600)"
            )
        };
        match (self.format(), self.kek.probe()) {
            (Ok(Some(FileFormat::Encrypted)), Some(origin)) => sealed_by(&origin),
            (Ok(Some(FileFormat::Encrypted)), None) => format!(
                "{at} (encrypted; no key-encryption key available: provide {})",
                self.kek.describe()
            ),
            (Ok(None), Some(origin)) => sealed_by(&origin),
            (Ok(Some(FileFormat::Plaintext)), Some(origin)) => format!(
                "{at} (unencrypted, mode 0600; a key-encryption key is available in the \
                 {origin}: rerun `silas init` to encrypt it)"
            ),
            (Ok(Some(FileFormat::Plaintext) | None), None) => {
                format!("{at} (unencrypted, mode 0600; {})", encrypt_hint())
            }
            (Err(_), _) => format!("{at} (unreadable)"),
        }
    }

    fn io(&self, source: std::io::Error) -> KeyError {
        KeyError::Io {
            path: self.display_path(),
            source,
        }
    }

    fn malformed(&self, detail: impl Into<String>) -> KeyError {
        KeyError::Malformed {
            path: self.display_path(),
            detail: detail.into(),
        }
    }

    pub fn exists(&self) -> bool {
        self.path.exists()
    }

    /// The stored format, `None` when there is no key file. Reads only the
    /// version field.
    pub fn format(&self) -> Result<Option<FileFormat>, KeyError> {
        let raw = match fs::read(&self.path) {
            Ok(raw) => Zeroizing::new(raw),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(self.io(e)),
        };
        self.header(&raw).map(Some)
    }

    fn header(&self, raw: &[u8]) -> Result<FileFormat, KeyError> {
        // Position only: the file may hold a plaintext secret that serde's
        // message could quote.
        let header: Header = serde_json::from_slice(raw).map_err(|e| {
            self.malformed(format!(
                "not a key file: no readable version field (line {}, column {})",
                e.line(),
                e.column()
            ))
        })?;
        match header.version {
            PLAINTEXT_VERSION => Ok(FileFormat::Plaintext),
            ENCRYPTED_VERSION => Ok(FileFormat::Encrypted),
            v => Err(self.malformed(format!(
                "unsupported key file version {v} (this build reads {PLAINTEXT_VERSION} and \
                 {ENCRYPTED_VERSION})"
            ))),
        }
    }

    /// Creates the owner key if absent; keeps an existing one unless
    /// `force`. With a KEK available, a new key is written encrypted and an
    /// existing plaintext key is re-encrypted in place (same key, reported
    /// as [`InitOutcome::Encrypted`]).
    pub fn init(&self, force: bool) -> Result<InitOutcome, KeyError> {
        self.open(force).map(|(outcome, _)| outcome)
    }

    /// [`FileKeystore::init`], also returning the key, so a caller that
    /// needs both pays for one key derivation instead of two.
    pub fn open(&self, force: bool) -> Result<(InitOutcome, OwnerKey), KeyError> {
        let kek = self.kek.lookup()?;
        if self.exists() && !force {
            let stored = self.read(kek.as_ref())?;
            let public_key = stored.key.public_key_hex();
            if let (FileFormat::Plaintext, Some(kek)) = (stored.format, &kek) {
                self.write(&stored.key, &stored.created_at, Some(kek), true)?;
                return Ok((InitOutcome::Encrypted { public_key }, stored.key));
            }
            return Ok((InitOutcome::KeptExisting { public_key }, stored.key));
        }
        let existed = self.exists();
        let key = OwnerKey::generate()?;
        self.write(&key, &Timestamp::now(), kek.as_ref(), existed)?;
        let public_key = key.public_key_hex();
        let outcome = if existed {
            InitOutcome::Replaced { public_key }
        } else {
            InitOutcome::Created { public_key }
        };
        Ok((outcome, key))
    }

    /// Loads the owner key, decrypting it when the file is sealed (the KEK
    /// is looked up only then).
    pub fn load(&self) -> Result<OwnerKey, KeyError> {
        let needs_kek = self.format()? == Some(FileFormat::Encrypted);
        let kek = if needs_kek { self.kek.lookup()? } else { None };
        self.read(kek.as_ref()).map(|s| s.key)
    }

    fn read(&self, kek: Option<&Kek>) -> Result<Stored, KeyError> {
        let path = self.display_path();
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
        match self.header(&raw)? {
            FileFormat::Plaintext => self.read_plaintext(&raw),
            FileFormat::Encrypted => self.read_sealed(&raw, kek),
        }
    }

    fn read_plaintext(&self, raw: &[u8]) -> Result<Stored, KeyError> {
        // serde's messages can quote the offending value (e.g. an escaped
        // `secret_key` that cannot be borrowed), so only the position is kept.
        let file: PlainFile<'_> = serde_json::from_slice(raw).map_err(|e| {
            self.malformed(format!(
                "invalid version 1 key file (line {}, column {})",
                e.line(),
                e.column()
            ))
        })?;
        if file.algorithm != ALGORITHM {
            return Err(self.malformed(format!("unsupported algorithm {:?}", file.algorithm)));
        }
        let secret = Zeroizing::new(
            STANDARD
                .decode(file.secret_key)
                .map_err(|_| self.malformed("secret key is not valid base64"))?,
        );
        let key = self.key_from_secret(&secret, file.public_key)?;
        Ok(Stored {
            key,
            format: FileFormat::Plaintext,
            created_at: file.created_at,
        })
    }

    fn read_sealed(&self, raw: &[u8], kek: Option<&Kek>) -> Result<Stored, KeyError> {
        let file: SealedFile =
            serde_json::from_slice(raw).map_err(|e| self.malformed(e.to_string()))?;
        if file.algorithm != ALGORITHM || file.kdf != KDF || file.cipher != CIPHER {
            return Err(self.malformed(format!(
                "unsupported algorithm/kdf/cipher {:?}/{:?}/{:?}",
                file.algorithm, file.kdf, file.cipher
            )));
        }
        let fixed = |name: &str, bytes: &[u8], len: usize| {
            if bytes.len() == len {
                Ok(())
            } else {
                Err(self.malformed(format!("{name} must be {len} bytes, got {}", bytes.len())))
            }
        };
        fixed("salt", file.salt.as_slice(), sealed::SALT_LEN)?;
        fixed("nonce", file.nonce.as_slice(), sealed::NONCE_LEN)?;
        fixed(
            "ciphertext",
            file.ciphertext.as_slice(),
            sealed::CIPHERTEXT_LEN,
        )?;
        let mut s = Sealed {
            kdf: file.kdf_params,
            salt: [0; sealed::SALT_LEN],
            nonce: [0; sealed::NONCE_LEN],
            ciphertext: [0; sealed::CIPHERTEXT_LEN],
        };
        s.salt.copy_from_slice(file.salt.as_slice());
        s.nonce.copy_from_slice(file.nonce.as_slice());
        s.ciphertext.copy_from_slice(file.ciphertext.as_slice());
        let Some(kek) = kek else {
            return Err(KeyError::KekMissing {
                path: self.display_path(),
                sources: self.kek.describe(),
            });
        };
        let seed = sealed::open(&s, kek.bytes(), &sealed::aad(&file.public_key))
            .map_err(|e| self.seal_error(e, kek))?;
        let key = self.key_from_secret(seed.as_slice(), &file.public_key)?;
        Ok(Stored {
            key,
            format: FileFormat::Encrypted,
            created_at: file.created_at,
        })
    }

    fn seal_error(&self, e: SealError, kek: &Kek) -> KeyError {
        match e {
            SealError::Authentication => KeyError::WrongKek {
                path: self.display_path(),
                origin: kek.origin().to_string(),
            },
            SealError::Params(m) => self.malformed(m),
            SealError::Random(m) => KeyError::Random(m),
            SealError::Encrypt => self.malformed("encryption failed"),
        }
    }

    fn key_from_secret(&self, secret: &[u8], public_key: &str) -> Result<OwnerKey, KeyError> {
        let seed: &[u8; 32] = secret
            .try_into()
            .map_err(|_| self.malformed("secret key is not 32 bytes"))?;
        let key = OwnerKey::from_seed(seed);
        if key.public_key_hex() != public_key {
            return Err(self.malformed("public key does not match the secret key"));
        }
        Ok(key)
    }

    /// Serialises `key` (sealed when `kek` is given) and puts it in place.
    fn write(
        &self,
        key: &OwnerKey,
        created_at: &Timestamp,
        kek: Option<&Kek>,
        replace: bool,
    ) -> Result<(), KeyError> {
        let public_key = key.public_key_hex();
        // Allocated once, large enough for either version, so serde_json
        // never reallocates (which would leave an unzeroised copy).
        let mut body = Zeroizing::new(Vec::with_capacity(4096));
        let serialised = match kek {
            Some(kek) => {
                let s = sealed::seal(
                    &key.seed(),
                    kek.bytes(),
                    &sealed::aad(&public_key),
                    self.kdf,
                )
                .map_err(|e| self.seal_error(e, kek))?;
                let file = SealedFile {
                    version: ENCRYPTED_VERSION,
                    algorithm: ALGORITHM.into(),
                    public_key,
                    created_at: *created_at,
                    kdf: KDF.into(),
                    kdf_params: s.kdf,
                    salt: Base64Bytes(s.salt.to_vec()),
                    cipher: CIPHER.into(),
                    nonce: Base64Bytes(s.nonce.to_vec()),
                    ciphertext: Base64Bytes(s.ciphertext.to_vec()),
                };
                serde_json::to_writer_pretty(&mut *body, &file)
            }
            None => {
                let secret = Zeroizing::new(STANDARD.encode(key.seed().as_slice()));
                let file = PlainFile {
                    version: PLAINTEXT_VERSION,
                    algorithm: ALGORITHM,
                    public_key: &public_key,
                    secret_key: &secret,
                    created_at: *created_at,
                };
                serde_json::to_writer_pretty(&mut *body, &file)
            }
        };
        serialised.map_err(|e| self.malformed(e.to_string()))?;
        self.put_in_place(&body, replace)
    }

    fn put_in_place(&self, body: &[u8], replace: bool) -> Result<(), KeyError> {
        let dir = self
            .path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        // A missing directory is created private; an existing one (e.g. a
        // custom `keystore.path`) belongs to the operator and is left alone.
        if !dir.exists() {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|e| self.io(e))?;
        }
        let mut tmp_name = self
            .path
            .file_name()
            .ok_or_else(|| self.malformed("key path has no file name"))?
            .to_os_string();
        tmp_name.push(".tmp");
        let tmp = dir.join(tmp_name);
        // A leftover from an interrupted write holds no key we need: the
        // real file is only ever replaced by a complete one.
        let _ = fs::remove_file(&tmp);
        let written = (|| {
            let mut f = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&tmp)?;
            f.write_all(body)?;
            f.sync_all()?;
            if replace {
                fs::rename(&tmp, &self.path)
            } else {
                // Hard link: atomic, and fails instead of overwriting a key
                // that appeared meanwhile.
                fs::hard_link(&tmp, &self.path)?;
                fs::remove_file(&tmp)
            }
        })();
        if written.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        written.map_err(|e| self.io(e))?;
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| self.io(e))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use silas_core::config::MapEnv;

    use super::*;
    use crate::kek::DEFAULT_KEK_ENV;

    const FAST: KdfParams = KdfParams {
        m_cost_kib: 64,
        t_cost: 1,
        p_cost: 1,
    };

    fn plain(dir: &Path) -> FileKeystore {
        FileKeystore::in_data_dir(dir, KekSources::defaults(Arc::new(MapEnv::new())))
            .with_kdf_params(FAST)
    }

    fn with_env_kek(dir: &Path, kek: &str) -> FileKeystore {
        let env = MapEnv::new().with(DEFAULT_KEK_ENV, kek);
        FileKeystore::in_data_dir(dir, KekSources::defaults(Arc::new(env))).with_kdf_params(FAST)
    }

    #[test]
    fn init_creates_a_0600_key_and_keeps_it_on_rerun() {
        let dir = tempfile::tempdir().unwrap();
        let ks = plain(dir.path());
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
        assert_eq!(ks.format().unwrap(), Some(FileFormat::Plaintext));
        // No temp file left behind.
        let names: Vec<_> = fs::read_dir(ks.path().parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from(KEY_FILE_NAME)]);
    }

    #[test]
    fn plaintext_file_keeps_the_version_1_layout() {
        let dir = tempfile::tempdir().unwrap();
        let ks = plain(dir.path());
        ks.init(false).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&fs::read(ks.path()).unwrap()).unwrap();
        let mut keys: Vec<_> = v.as_object().unwrap().keys().cloned().collect();
        keys.sort();
        assert_eq!(
            keys,
            [
                "algorithm",
                "created_at",
                "public_key",
                "secret_key",
                "version"
            ]
        );
        assert_eq!(v["version"], 1);
    }

    #[test]
    fn loose_permissions_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let ks = plain(dir.path());
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
        let ks = plain(dir.path());
        assert!(matches!(ks.load(), Err(KeyError::Missing { .. })));
        ks.init(false).unwrap();
        let text = fs::read_to_string(ks.path()).unwrap();
        let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
        v["public_key"] = serde_json::Value::String("00".repeat(32));
        fs::write(ks.path(), serde_json::to_vec(&v).unwrap()).unwrap();
        assert!(matches!(ks.load(), Err(KeyError::Malformed { .. })));
        v["version"] = 9.into();
        fs::write(ks.path(), serde_json::to_vec(&v).unwrap()).unwrap();
        let e = ks.load().unwrap_err();
        assert!(
            e.to_string().contains("unsupported key file version 9"),
            "{e}"
        );
    }

    #[test]
    fn encrypted_round_trip_and_describe() {
        let dir = tempfile::tempdir().unwrap();
        let ks = with_env_kek(dir.path(), "correct horse");
        assert!(ks.describe().contains("encrypted"), "{}", ks.describe());
        let out = ks.init(false).unwrap();
        assert!(matches!(out, InitOutcome::Created { .. }));
        assert_eq!(ks.format().unwrap(), Some(FileFormat::Encrypted));
        assert_eq!(ks.load().unwrap().public_key_hex(), out.public_key());
        assert_eq!(
            ks.init(false).unwrap(),
            InitOutcome::KeptExisting {
                public_key: out.public_key().to_owned()
            }
        );
        let d = ks.describe();
        assert!(
            d.contains("encrypted") && d.contains("environment variable SILAS_KEYSTORE_KEK"),
            "{d}"
        );
        assert!(!d.contains("correct horse"));
    }

    #[test]
    fn open_returns_the_stored_key() {
        let dir = tempfile::tempdir().unwrap();
        let ks = with_env_kek(dir.path(), "k");
        let (created, key) = ks.open(false).unwrap();
        assert!(matches!(created, InitOutcome::Created { .. }));
        assert_eq!(key.public_key_hex(), ks.load().unwrap().public_key_hex());
        let (kept, again) = ks.open(false).unwrap();
        assert!(matches!(kept, InitOutcome::KeptExisting { .. }));
        assert_eq!(again.public_key_hex(), key.public_key_hex());
    }

    #[test]
    fn parse_errors_of_a_plaintext_file_never_quote_it() {
        let dir = tempfile::tempdir().unwrap();
        let ks = plain(dir.path());
        ks.init(false).unwrap();
        let mut v: serde_json::Value =
            serde_json::from_slice(&fs::read(ks.path()).unwrap()).unwrap();
        let secret = v["secret_key"].as_str().unwrap().to_owned();
        // An escaped string cannot be borrowed: serde would quote it.
        let escaped: String = secret
            .chars()
            .map(|c| format!("\\u{:04x}", c as u32))
            .collect();
        let text = serde_json::to_string(&v)
            .unwrap()
            .replace(&secret, &escaped);
        fs::write(ks.path(), &text).unwrap();
        let e = ks.load().unwrap_err();
        assert!(matches!(e, KeyError::Malformed { .. }), "{e}");
        assert!(!e.to_string().contains(&secret) && !format!("{e:?}").contains(&secret));
        // A wrong type elsewhere: same, position only.
        v["created_at"] = serde_json::Value::String(secret.clone());
        fs::write(ks.path(), serde_json::to_vec(&v).unwrap()).unwrap();
        let e = ks.load().unwrap_err();
        assert!(!e.to_string().contains(&secret), "{e}");
    }

    #[test]
    fn custom_path_in_existing_directory_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o750)).unwrap();
        let ks = FileKeystore::new(
            dir.path().join("silas-owner"),
            KekSources::defaults(Arc::new(MapEnv::new())),
        );
        ks.init(false).unwrap();
        let mode = fs::metadata(dir.path()).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o750);
        ks.load().unwrap();
    }
}
