//! Where the key-encryption key (KEK) for the file keystore comes from.
//!
//! Lookup order, first hit wins:
//!
//! 1. the file `$CREDENTIALS_DIRECTORY/<credential>`: a systemd credential
//!    (`LoadCredential=` / `LoadCredentialEncrypted=` / `SetCredential=`),
//!    which systemd exposes only to the service, outside its environment;
//! 2. the environment variable named by `keystore.kek_env`.
//!
//! The credential comes first because it is the better place for a secret:
//! environment variables leak into child processes, `/proc/<pid>/environ` and
//! environment dumps. One trailing newline (`\n` or `\r\n`) is ignored in
//! either source, so `echo "$KEK" > file` and `KEK=… silas` agree. An empty
//! KEK, or a credential file that exists but cannot be read, is an error
//! rather than a silent fall back to a plaintext key.
//!
//! The environment is injected ([`EnvSource`]) so tests never touch the real
//! process environment, and the KEK bytes are read only when needed and
//! zeroised on drop.

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use silas_core::config::{EnvSource, ProcessEnv};
use zeroize::Zeroizing;

use crate::KeyError;

/// The variable systemd sets to the service's credentials directory.
pub const CREDENTIALS_DIRECTORY_ENV: &str = "CREDENTIALS_DIRECTORY";
/// Default of `keystore.kek_env`.
pub const DEFAULT_KEK_ENV: &str = "SILAS_KEYSTORE_KEK";
/// Default of `keystore.kek_credential`.
pub const DEFAULT_KEK_CREDENTIAL: &str = "silas-kek";

/// Where a KEK was found. Displays as the source's name, never its value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KekOrigin {
    /// A systemd credential file.
    Credential(PathBuf),
    /// An environment variable (its name).
    Env(String),
}

impl fmt::Display for KekOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KekOrigin::Credential(p) => write!(f, "systemd credential {}", p.display()),
            KekOrigin::Env(v) => write!(f, "environment variable {v}"),
        }
    }
}

/// A key-encryption key and where it came from. `Debug` shows only the origin.
pub struct Kek {
    bytes: Zeroizing<Vec<u8>>,
    origin: KekOrigin,
}

impl fmt::Debug for Kek {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Kek(from {})", self.origin)
    }
}

impl Kek {
    /// A KEK from raw bytes (trailing-newline rule applied; empty refused).
    pub fn new(bytes: Zeroizing<Vec<u8>>, origin: KekOrigin) -> Result<Kek, KeyError> {
        let mut bytes = bytes;
        strip_one_newline(&mut bytes);
        if bytes.is_empty() {
            return Err(KeyError::KekUnusable {
                origin: origin.to_string(),
                detail: "is empty".into(),
            });
        }
        Ok(Kek { bytes, origin })
    }

    pub fn origin(&self) -> &KekOrigin {
        &self.origin
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

/// Removes one trailing `\n` or `\r\n` in place. `truncate` keeps the
/// allocation, which `Zeroizing` clears in full on drop.
fn strip_one_newline(bytes: &mut Vec<u8>) {
    if bytes.last() == Some(&b'\n') {
        bytes.truncate(bytes.len() - 1);
        if bytes.last() == Some(&b'\r') {
            bytes.truncate(bytes.len() - 1);
        }
    }
}

/// The configured KEK sources (see the module docs for the order).
#[derive(Clone)]
pub struct KekSources {
    env_var: String,
    credential: String,
    credentials_dir: Option<PathBuf>,
    env: Arc<dyn EnvSource + Send + Sync>,
}

impl fmt::Debug for KekSources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Names and the directory only: the environment may hold the KEK.
        f.debug_struct("KekSources")
            .field("env_var", &self.env_var)
            .field("credential", &self.credential)
            .field("credentials_dir", &self.credentials_dir)
            .finish_non_exhaustive()
    }
}

impl KekSources {
    /// Sources named by configuration, read from `env`; the credentials
    /// directory is `env`'s `CREDENTIALS_DIRECTORY`, if set and non-empty.
    pub fn new(
        env_var: impl Into<String>,
        credential: impl Into<String>,
        env: Arc<dyn EnvSource + Send + Sync>,
    ) -> KekSources {
        let credentials_dir = env
            .var(CREDENTIALS_DIRECTORY_ENV)
            .filter(|d| !d.is_empty())
            .map(PathBuf::from);
        KekSources {
            env_var: env_var.into(),
            credential: credential.into(),
            credentials_dir,
            env,
        }
    }

    /// [`KekSources::new`] over the real process environment.
    pub fn from_process_env(env_var: impl Into<String>, credential: impl Into<String>) -> Self {
        KekSources::new(env_var, credential, Arc::new(ProcessEnv))
    }

    /// The default names (`SILAS_KEYSTORE_KEK`, `silas-kek`) read from `env`.
    pub fn defaults(env: Arc<dyn EnvSource + Send + Sync>) -> KekSources {
        KekSources::new(DEFAULT_KEK_ENV, DEFAULT_KEK_CREDENTIAL, env)
    }

    /// Overrides the credentials directory (`None`: no credential lookup).
    pub fn with_credentials_dir(mut self, dir: Option<PathBuf>) -> KekSources {
        self.credentials_dir = dir;
        self
    }

    pub fn env_var(&self) -> &str {
        &self.env_var
    }

    pub fn credential(&self) -> &str {
        &self.credential
    }

    pub fn credentials_dir(&self) -> Option<&Path> {
        self.credentials_dir.as_deref()
    }

    /// Both sources, for messages: "the systemd credential `silas-kek` …
    /// or the environment variable SILAS_KEYSTORE_KEK".
    pub fn describe(&self) -> String {
        format!(
            "the systemd credential `{}` (LoadCredential=, read from ${}) or the environment \
             variable {}",
            self.credential, CREDENTIALS_DIRECTORY_ENV, self.env_var
        )
    }

    fn credential_path(&self) -> Option<PathBuf> {
        self.credentials_dir
            .as_ref()
            .map(|dir| dir.join(&self.credential))
    }

    /// Where a KEK would come from right now, without reading its value
    /// (the variable's value is read only to test it for emptiness).
    pub fn probe(&self) -> Option<KekOrigin> {
        if let Some(path) = self.credential_path()
            && path.exists()
        {
            return Some(KekOrigin::Credential(path));
        }
        let set = self
            .env
            .var(&self.env_var)
            .map(Zeroizing::new)
            .is_some_and(|v| !v.is_empty());
        set.then(|| KekOrigin::Env(self.env_var.clone()))
    }

    /// The KEK from the first source that has one; `Ok(None)` when neither
    /// does. A source that exists but is unusable is an error.
    pub fn lookup(&self) -> Result<Option<Kek>, KeyError> {
        if let Some(path) = self.credential_path() {
            match fs::read(&path) {
                Ok(bytes) => {
                    return Kek::new(Zeroizing::new(bytes), KekOrigin::Credential(path)).map(Some);
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    return Err(KeyError::KekUnusable {
                        origin: KekOrigin::Credential(path).to_string(),
                        detail: format!("cannot be read: {e}"),
                    });
                }
            }
        }
        match self.env.var(&self.env_var) {
            None => Ok(None),
            Some(value) => {
                let value = Zeroizing::new(value);
                let bytes = Zeroizing::new(value.as_bytes().to_vec());
                Kek::new(bytes, KekOrigin::Env(self.env_var.clone())).map(Some)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use silas_core::config::MapEnv;

    fn sources(env: MapEnv) -> KekSources {
        KekSources::defaults(Arc::new(env))
    }

    #[test]
    fn nothing_configured_is_none() {
        let s = sources(MapEnv::new());
        assert!(s.lookup().unwrap().is_none());
        assert!(s.probe().is_none());
    }

    #[test]
    fn env_variable_is_used_with_one_newline_stripped() {
        let s = sources(MapEnv::new().with(DEFAULT_KEK_ENV, "hunter2\n"));
        let kek = s.lookup().unwrap().unwrap();
        assert_eq!(kek.bytes(), b"hunter2");
        assert_eq!(kek.origin(), &KekOrigin::Env(DEFAULT_KEK_ENV.into()));
        assert_eq!(s.probe(), Some(KekOrigin::Env(DEFAULT_KEK_ENV.into())));
        assert!(!format!("{kek:?}").contains("hunter2"));
    }

    #[test]
    fn credential_wins_over_env() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("silas-kek"), b"from-credential\r\n").unwrap();
        let env = MapEnv::new()
            .with(DEFAULT_KEK_ENV, "from-env")
            .with(CREDENTIALS_DIRECTORY_ENV, dir.path().to_str().unwrap());
        let s = sources(env);
        assert_eq!(s.credentials_dir(), Some(dir.path()));
        let kek = s.lookup().unwrap().unwrap();
        assert_eq!(kek.bytes(), b"from-credential");
        assert!(matches!(kek.origin(), KekOrigin::Credential(_)));
    }

    #[test]
    fn missing_credential_falls_back_to_env() {
        let dir = tempfile::tempdir().unwrap();
        let s = sources(MapEnv::new().with(DEFAULT_KEK_ENV, "e"))
            .with_credentials_dir(Some(dir.path().to_path_buf()));
        assert_eq!(s.lookup().unwrap().unwrap().bytes(), b"e");
    }

    #[test]
    fn empty_or_unreadable_sources_are_errors() {
        let s = sources(MapEnv::new().with(DEFAULT_KEK_ENV, "\n"));
        let e = s.lookup().unwrap_err();
        assert!(e.to_string().contains("SILAS_KEYSTORE_KEK"), "{e}");
        assert!(e.to_string().contains("empty"), "{e}");

        let dir = tempfile::tempdir().unwrap();
        // A directory where the credential file should be: exists, unreadable.
        fs::create_dir(dir.path().join("silas-kek")).unwrap();
        let s = sources(MapEnv::new()).with_credentials_dir(Some(dir.path().to_path_buf()));
        let e = s.lookup().unwrap_err();
        assert!(e.to_string().contains("cannot be read"), "{e}");
    }

    #[test]
    fn describe_names_both_sources() {
        let s = KekSources::new("MY_KEK", "my-cred", Arc::new(MapEnv::new()));
        let d = s.describe();
        assert!(d.contains("MY_KEK") && d.contains("`my-cred`"), "{d}");
        assert!(d.contains("CREDENTIALS_DIRECTORY"), "{d}");
    }
}
