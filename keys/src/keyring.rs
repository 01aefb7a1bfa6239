//! The OS keystore backend: the owner key in the desktop Secret Service
//! (GNOME Keyring, KWallet, KeePassXC…) over D-Bus, through `keyring-core`
//! and `zbus-secret-service-keyring-store` (pure Rust, no libdbus).
//!
//! The item is keyed by service `silas` and user = `owner_id`; its value is
//! the 32-byte seed in standard base64. The public key is derived on load.
//!
//! Every store call runs on a short-lived thread and is abandoned after a
//! timeout: the Secret Service client blocks with no deadline of its own, and
//! a locked collection waits for an unlock prompt nobody may ever see on a
//! headless machine. A timed-out call is reported as an error; the thread is
//! left to finish or die with the process (its copy of the secret is
//! zeroised when it ends).
//!
//! Errors from the store are rendered field by field (`detail`): some
//! `keyring_core::Error` variants carry the stored bytes (`BadEncoding`,
//! `BadDataFormat`) or entries whose `Debug` may print a secret
//! (`Ambiguous`), so they are never formatted wholesale.

use std::fmt;
use std::sync::Arc;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use keyring_core::{CredentialStore, Entry};
use zeroize::Zeroizing;

use crate::{InitOutcome, KeyError, OwnerKey};

/// The keyring service name of the owner key.
pub const KEYRING_SERVICE: &str = "silas";

/// How long one keystore call may take, including the D-Bus connect.
pub const DEFAULT_KEYRING_TIMEOUT: Duration = Duration::from_secs(30);

const SECRET_SERVICE: &str = "Secret Service (D-Bus)";

#[derive(Clone)]
enum Backend {
    /// Connect to the session bus's Secret Service on every call.
    SecretService,
    /// A given `keyring-core` store (tests: `keyring_core::mock::Store`).
    Store(Arc<CredentialStore>),
}

/// The owner key in an OS credential store.
#[derive(Clone)]
pub struct KeyringKeystore {
    service: String,
    user: String,
    backend: Backend,
    timeout: Duration,
}

impl fmt::Debug for KeyringKeystore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The store's own Debug may list credentials (the mock prints their
        // secrets), so only its name is shown.
        f.debug_struct("KeyringKeystore")
            .field("store", &self.store_name())
            .field("service", &self.service)
            .field("user", &self.user)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl KeyringKeystore {
    /// The Secret Service on the session bus, item `silas`/`user`.
    pub fn secret_service(user: impl Into<String>) -> Self {
        KeyringKeystore {
            service: KEYRING_SERVICE.to_owned(),
            user: user.into(),
            backend: Backend::SecretService,
            timeout: DEFAULT_KEYRING_TIMEOUT,
        }
    }

    /// Any `keyring-core` credential store, e.g. the in-memory
    /// `keyring_core::mock::Store` in tests (no desktop session needed).
    pub fn with_store(user: impl Into<String>, store: Arc<CredentialStore>) -> Self {
        KeyringKeystore {
            backend: Backend::Store(store),
            ..KeyringKeystore::secret_service(user)
        }
    }

    /// Bound on each store call.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The store's name for messages.
    pub fn store_name(&self) -> String {
        match &self.backend {
            Backend::SecretService => SECRET_SERVICE.to_owned(),
            Backend::Store(store) => store.vendor(),
        }
    }

    fn location(&self) -> String {
        format!(
            "{} item service={:?} user={:?}",
            self.store_name(),
            self.service,
            self.user
        )
    }

    pub fn describe(&self) -> String {
        format!("OS keystore: {}", self.location())
    }

    /// Runs `op` on the item, on a worker thread bounded by the timeout.
    fn run<T, F>(&self, action: &'static str, op: F) -> Result<T, KeyError>
    where
        T: Send + 'static,
        F: FnOnce(&Entry) -> keyring_core::Result<T> + Send + 'static,
    {
        let fail = |detail: String| KeyError::Keyring {
            store: self.store_name(),
            action,
            detail,
        };
        let backend = self.backend.clone();
        let (service, user) = (self.service.clone(), self.user.clone());
        let (tx, rx) = mpsc::sync_channel(1);
        thread::Builder::new()
            .name("silas-keyring".into())
            .spawn(move || {
                let result = (|| {
                    let store: Arc<CredentialStore> = match backend {
                        Backend::SecretService => zbus_secret_service_keyring_store::Store::new()?,
                        Backend::Store(store) => store,
                    };
                    let entry = store.build(&service, &user, None)?;
                    op(&entry)
                })();
                // The receiver is gone after a timeout; nothing to do then.
                let _ = tx.send(result);
            })
            .map_err(|e| fail(format!("cannot start the keystore thread: {e}")))?;
        match rx.recv_timeout(self.timeout) {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => Err(fail(detail(&e))),
            Err(RecvTimeoutError::Timeout) => Err(fail(format!(
                "no answer within {} s (is the keyring locked and waiting for an unlock prompt?)",
                self.timeout.as_secs_f64()
            ))),
            Err(RecvTimeoutError::Disconnected) => {
                Err(fail("the keystore client failed unexpectedly".into()))
            }
        }
    }

    /// The stored base64 seed, `None` when there is no item.
    fn get(&self) -> Result<Option<Zeroizing<String>>, KeyError> {
        self.run("read the owner key", |entry| match entry.get_password() {
            Ok(p) => Ok(Some(Zeroizing::new(p))),
            Err(keyring_core::Error::NoEntry) => Ok(None),
            Err(e) => Err(e),
        })
    }

    fn decode(&self, b64: &str) -> Result<OwnerKey, KeyError> {
        let malformed = || KeyError::Malformed {
            path: self.location(),
            detail: "the stored owner key is not a base64-encoded 32-byte seed".into(),
        };
        let secret = Zeroizing::new(STANDARD.decode(b64).map_err(|_| malformed())?);
        let seed: &[u8; 32] = secret.as_slice().try_into().map_err(|_| malformed())?;
        Ok(OwnerKey::from_seed(seed))
    }

    pub fn exists(&self) -> Result<bool, KeyError> {
        self.get().map(|v| v.is_some())
    }

    pub fn load(&self) -> Result<OwnerKey, KeyError> {
        match self.get()? {
            Some(b64) => self.decode(&b64),
            None => Err(KeyError::Missing {
                path: self.location(),
            }),
        }
    }

    /// Creates the key if absent; keeps an existing one unless `force`.
    pub fn init(&self, force: bool) -> Result<InitOutcome, KeyError> {
        self.open(force).map(|(outcome, _)| outcome)
    }

    /// [`KeyringKeystore::init`], also returning the key (one store read
    /// instead of two).
    pub fn open(&self, force: bool) -> Result<(InitOutcome, OwnerKey), KeyError> {
        let existing = self.get()?;
        if let Some(b64) = &existing
            && !force
        {
            let key = self.decode(b64)?;
            let public_key = key.public_key_hex();
            return Ok((InitOutcome::KeptExisting { public_key }, key));
        }
        let key = OwnerKey::generate()?;
        let b64 = Zeroizing::new(STANDARD.encode(key.seed().as_slice()));
        self.run("store the owner key", move |entry| entry.set_password(&b64))?;
        let public_key = key.public_key_hex();
        let outcome = if existing.is_some() {
            InitOutcome::Replaced { public_key }
        } else {
            InitOutcome::Created { public_key }
        };
        Ok((outcome, key))
    }
}

/// A keyring error as text, without any variant's payload bytes or entries.
fn detail(e: &keyring_core::Error) -> String {
    use keyring_core::Error as E;
    match e {
        E::PlatformFailure(err) => format!("platform failure: {err}"),
        E::NoStorageAccess(err) => {
            format!("no access to the store (locked, or the unlock was refused): {err}")
        }
        E::NoEntry => "no such item".into(),
        E::BadEncoding(_) => "the stored value is not valid UTF-8".into(),
        E::BadDataFormat(_, _) => "the stored value is malformed".into(),
        E::BadStoreFormat(reason) => format!("the store's data is malformed: {reason}"),
        E::TooLong(name, len) => format!("{name} is longer than the store's limit of {len}"),
        E::Invalid(what, reason) => format!("invalid {what}: {reason}"),
        E::Ambiguous(items) => format!("{} items match the owner key", items.len()),
        E::NoDefaultStore => "no credential store is available".into(),
        E::NotSupportedByStore(what) => format!("not supported by this store: {what}"),
        _ => "unknown keystore error".into(),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::time::Instant;

    use keyring_core::api::CredentialStoreApi;
    use keyring_core::mock;

    use super::*;

    fn mock_keystore() -> (KeyringKeystore, Arc<mock::Store>) {
        let store = mock::Store::new().unwrap();
        (KeyringKeystore::with_store("owner", store.clone()), store)
    }

    #[test]
    fn mock_round_trip_keep_and_replace() {
        let (ks, _store) = mock_keystore();
        assert!(!ks.exists().unwrap());
        assert!(matches!(ks.load(), Err(KeyError::Missing { .. })));
        let created = ks.init(false).unwrap();
        assert!(matches!(created, InitOutcome::Created { .. }));
        assert!(ks.exists().unwrap());
        assert_eq!(ks.load().unwrap().public_key_hex(), created.public_key());
        assert_eq!(
            ks.init(false).unwrap(),
            InitOutcome::KeptExisting {
                public_key: created.public_key().to_owned()
            }
        );
        let replaced = ks.init(true).unwrap();
        assert!(matches!(replaced, InitOutcome::Replaced { .. }));
        assert_ne!(replaced.public_key(), created.public_key());
        assert_eq!(ks.load().unwrap().public_key_hex(), replaced.public_key());
    }

    #[test]
    fn stored_value_is_the_base64_seed_under_service_silas() {
        let (ks, store) = mock_keystore();
        ks.init(false).unwrap();
        let key = ks.load().unwrap();
        let entry = store.build(KEYRING_SERVICE, "owner", None).unwrap();
        let stored = Zeroizing::new(entry.get_password().unwrap());
        assert_eq!(*stored, STANDARD.encode(key.seed().as_slice()));
    }

    #[test]
    fn store_errors_are_clean_keystore_errors() {
        let (ks, store) = mock_keystore();
        ks.init(false).unwrap();
        let entry = store.build(KEYRING_SERVICE, "owner", None).unwrap();
        let cred: &mock::Cred = entry.as_any().downcast_ref().unwrap();
        cred.set_error(keyring_core::Error::NoStorageAccess(
            "collection is locked".into(),
        ));
        let e = ks.load().unwrap_err();
        let text = e.to_string();
        assert!(matches!(e, KeyError::Keyring { .. }), "{text}");
        assert!(text.contains("Mock store"), "{text}");
        assert!(text.contains("collection is locked"), "{text}");
        assert!(text.contains("keystore.backend: file"), "{text}");
        assert_eq!(
            silas_core::Coded::code(&e),
            silas_core::ErrorCode::ECfgKeystore
        );
        // The error was consumed; the key is still there.
        ks.load().unwrap();

        entry.set_password("not base64 at all!").unwrap();
        assert!(matches!(ks.load(), Err(KeyError::Malformed { .. })));
    }

    /// A store whose every call blocks, like a Secret Service waiting for an
    /// unlock prompt.
    #[derive(Debug)]
    struct Stuck;

    impl CredentialStoreApi for Stuck {
        fn vendor(&self) -> String {
            "stuck store".into()
        }
        fn id(&self) -> String {
            "stuck".into()
        }
        fn build(
            &self,
            _: &str,
            _: &str,
            _: Option<&HashMap<&str, &str>>,
        ) -> keyring_core::Result<Entry> {
            thread::sleep(Duration::from_secs(3600));
            Err(keyring_core::Error::NoEntry)
        }
        fn as_any(&self) -> &dyn std::any::Any {
            self
        }
    }

    #[test]
    fn a_blocking_store_times_out() {
        let ks = KeyringKeystore::with_store("owner", Arc::new(Stuck))
            .with_timeout(Duration::from_millis(200));
        let start = Instant::now();
        let e = ks.init(false).unwrap_err();
        assert!(start.elapsed() < Duration::from_secs(5));
        let text = e.to_string();
        assert!(
            text.contains("stuck store") && text.contains("no answer within"),
            "{text}"
        );
    }

    #[test]
    fn describe_and_debug_name_the_store_only() {
        let (ks, _store) = mock_keystore();
        ks.init(false).unwrap();
        let d = ks.describe();
        assert!(d.starts_with("OS keystore: Mock store"), "{d}");
        assert!(
            d.contains("service=\"silas\"") && d.contains("user=\"owner\""),
            "{d}"
        );
        let secret = STANDARD.encode(ks.load().unwrap().seed().as_slice());
        assert!(!format!("{ks:?}").contains(&secret));
        assert_eq!(
            KeyringKeystore::secret_service("o").store_name(),
            SECRET_SERVICE
        );
    }
}
