//! End-to-end tests of the owner keystores through the public API: the
//! encrypted file format, KEK sources, plaintext→encrypted migration,
//! tamper detection, the keyring backend on a mock and on the real OS store,
//! and a canary check that no formatted value ever contains the secret.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use silas_core::config::MapEnv;
use silas_keys::{
    CREDENTIALS_DIRECTORY_ENV, DEFAULT_KEK_ENV, FileFormat, FileKeystore, InitOutcome, KdfParams,
    KekOrigin, KekSources, KeyError, KeyringKeystore, OwnerKeystore,
};

/// Cheap Argon2id cost so the suite stays fast; one test uses the default.
const FAST: KdfParams = KdfParams {
    m_cost_kib: 256,
    t_cost: 1,
    p_cost: 1,
};

fn env_with_kek(kek: &str) -> Arc<MapEnv> {
    Arc::new(MapEnv::new().with(DEFAULT_KEK_ENV, kek))
}

fn file_store(dir: &Path, env: Arc<MapEnv>) -> FileKeystore {
    FileKeystore::in_data_dir(dir, KekSources::defaults(env)).with_kdf_params(FAST)
}

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_slice(&fs::read(path).unwrap()).unwrap()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn b64_decode(s: &str) -> Vec<u8> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.decode(s).unwrap()
}

#[test]
fn encrypted_round_trip_with_default_cost() {
    let dir = tempfile::tempdir().unwrap();
    let ks = FileKeystore::in_data_dir(dir.path(), KekSources::defaults(env_with_kek("s3cret")));
    let start = Instant::now();
    let out = ks.init(false).unwrap();
    let key = ks.load().unwrap();
    eprintln!(
        "init + load with default Argon2id cost: {:?}",
        start.elapsed()
    );
    assert_eq!(key.public_key_hex(), out.public_key());
    let v = json(ks.path());
    assert_eq!(v["version"], 2);
    assert_eq!(v["kdf"], "argon2id");
    assert_eq!(v["cipher"], "xchacha20poly1305");
    assert_eq!(v["kdf_params"]["m_cost_kib"], 65536);
    assert_eq!(v["kdf_params"]["t_cost"], 3);
    assert_eq!(v["public_key"], out.public_key());
    assert_eq!(b64_decode(v["salt"].as_str().unwrap()).len(), 16);
    assert_eq!(b64_decode(v["nonce"].as_str().unwrap()).len(), 24);
    assert_eq!(b64_decode(v["ciphertext"].as_str().unwrap()).len(), 48);
    assert!(v.get("secret_key").is_none());
    let mode = fs::metadata(ks.path()).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
}

#[test]
fn wrong_kek_is_refused_without_panicking() {
    let dir = tempfile::tempdir().unwrap();
    file_store(dir.path(), env_with_kek("right"))
        .init(false)
        .unwrap();
    let e = file_store(dir.path(), env_with_kek("wrong"))
        .load()
        .unwrap_err();
    assert!(matches!(e, KeyError::WrongKek { .. }), "{e}");
    let text = e.to_string();
    assert!(text.contains("wrong key-encryption key"), "{text}");
    assert!(
        text.contains("environment variable SILAS_KEYSTORE_KEK"),
        "{text}"
    );
    assert!(
        !text.contains("right") && !text.contains("wrong\""),
        "{text}"
    );
    // init without force must not "fix" it by generating a new key.
    assert!(matches!(
        file_store(dir.path(), env_with_kek("wrong")).init(false),
        Err(KeyError::WrongKek { .. })
    ));
}

#[test]
fn encrypted_file_without_kek_names_both_sources() {
    let dir = tempfile::tempdir().unwrap();
    file_store(dir.path(), env_with_kek("k"))
        .init(false)
        .unwrap();
    let sources = KekSources::new("MY_KEK_VAR", "my-kek-cred", Arc::new(MapEnv::new()));
    let ks = FileKeystore::in_data_dir(dir.path(), sources);
    let e = ks.load().unwrap_err();
    assert!(matches!(e, KeyError::KekMissing { .. }), "{e}");
    let text = e.to_string();
    assert!(text.contains("MY_KEK_VAR"), "{text}");
    assert!(text.contains("`my-kek-cred`"), "{text}");
    assert!(text.contains("CREDENTIALS_DIRECTORY"), "{text}");
    assert!(ks.init(false).is_err());
    let d = ks.describe();
    assert!(
        d.contains("encrypted; no key-encryption key available"),
        "{d}"
    );
}

#[test]
fn plaintext_key_is_reencrypted_in_place_keeping_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let plain = file_store(dir.path(), Arc::new(MapEnv::new()));
    let created = plain.init(false).unwrap();
    assert!(
        plain.describe().contains("unencrypted, mode 0600"),
        "{}",
        plain.describe()
    );
    let before = json(plain.path());
    let secret_b64 = before["secret_key"].as_str().unwrap().to_owned();
    let secret = b64_decode(&secret_b64);

    let sealed = file_store(dir.path(), env_with_kek("kek"));
    let d = sealed.describe();
    assert!(
        d.contains("unencrypted") && d.contains("rerun `silas init`"),
        "{d}"
    );
    let out = sealed.init(false).unwrap();
    assert_eq!(
        out,
        InitOutcome::Encrypted {
            public_key: created.public_key().to_owned()
        }
    );
    assert_eq!(sealed.format().unwrap(), Some(FileFormat::Encrypted));
    let after = json(sealed.path());
    assert_eq!(after["public_key"], before["public_key"]);
    assert_eq!(after["created_at"], before["created_at"]);
    assert_eq!(
        sealed.load().unwrap().public_key_hex(),
        created.public_key()
    );
    let mode = fs::metadata(sealed.path()).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);

    // The sealed file holds the secret in no form.
    let raw = fs::read(sealed.path()).unwrap();
    let text = String::from_utf8(raw.clone()).unwrap();
    assert!(!text.contains(&secret_b64));
    assert!(!text.contains(&hex(&secret)));
    assert!(!raw.windows(secret.len()).any(|w| w == secret.as_slice()));
    let ct = b64_decode(after["ciphertext"].as_str().unwrap());
    assert!(!ct.windows(8).any(|w| secret.windows(8).any(|s| s == w)));

    // Second run: nothing left to do.
    assert_eq!(
        sealed.init(false).unwrap(),
        InitOutcome::KeptExisting {
            public_key: created.public_key().to_owned()
        }
    );
    assert!(sealed.describe().contains("encrypted: XChaCha20-Poly1305"));
}

#[test]
fn tampering_with_any_sealed_field_is_detected() {
    let dir = tempfile::tempdir().unwrap();
    let ks = file_store(dir.path(), env_with_kek("kek"));
    ks.init(false).unwrap();
    let original = json(ks.path());
    let other_key = {
        let d = tempfile::tempdir().unwrap();
        let o = file_store(d.path(), Arc::new(MapEnv::new()));
        o.init(false).unwrap().public_key().to_owned()
    };
    let flip = |field: &str| {
        let mut bytes = b64_decode(original[field].as_str().unwrap());
        bytes[0] ^= 0x01;
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(bytes)
    };
    let cases: Vec<(&str, serde_json::Value)> = vec![
        ("ciphertext", flip("ciphertext").into()),
        ("salt", flip("salt").into()),
        ("nonce", flip("nonce").into()),
        ("public_key", other_key.into()),
    ];
    for (field, value) in cases {
        let mut v = original.clone();
        v[field] = value;
        fs::write(ks.path(), serde_json::to_vec_pretty(&v).unwrap()).unwrap();
        let e = ks.load().unwrap_err();
        assert!(matches!(e, KeyError::WrongKek { .. }), "{field}: {e}");
    }
    // Truncated fields and unknown fields are malformed, not a panic.
    let mut v = original.clone();
    v["nonce"] = "AAAA".into();
    fs::write(ks.path(), serde_json::to_vec(&v).unwrap()).unwrap();
    assert!(matches!(ks.load(), Err(KeyError::Malformed { .. })));
    let mut v = original.clone();
    v["secret_key"] = "AAAA".into();
    fs::write(ks.path(), serde_json::to_vec(&v).unwrap()).unwrap();
    assert!(matches!(ks.load(), Err(KeyError::Malformed { .. })));
    // Untouched, it still opens.
    fs::write(ks.path(), serde_json::to_vec(&original).unwrap()).unwrap();
    ks.load().unwrap();
}

#[test]
fn kek_from_a_systemd_credentials_directory() {
    let data = tempfile::tempdir().unwrap();
    let creds = tempfile::tempdir().unwrap();
    fs::write(creds.path().join("silas-kek"), "from-credential\n").unwrap();
    let env = Arc::new(
        MapEnv::new()
            .with(CREDENTIALS_DIRECTORY_ENV, creds.path().to_str().unwrap())
            .with(DEFAULT_KEK_ENV, "from-env"),
    );
    let ks = file_store(data.path(), env);
    let out = ks.init(false).unwrap();
    assert!(
        ks.describe().contains(&format!(
            "systemd credential {}",
            creds.path().join("silas-kek").display()
        )),
        "{}",
        ks.describe()
    );

    // The credential, not the variable, sealed it: the variable alone fails…
    let e = file_store(data.path(), env_with_kek("from-env"))
        .load()
        .unwrap_err();
    assert!(matches!(e, KeyError::WrongKek { .. }), "{e}");
    // …and the credential alone (explicit directory, no variable) opens it.
    let only_cred = FileKeystore::in_data_dir(
        data.path(),
        KekSources::defaults(Arc::new(MapEnv::new()))
            .with_credentials_dir(Some(creds.path().to_path_buf())),
    );
    assert_eq!(only_cred.load().unwrap().public_key_hex(), out.public_key());
    let kek = only_cred.kek_sources().lookup().unwrap().unwrap();
    assert!(matches!(kek.origin(), KekOrigin::Credential(_)));
}

#[test]
fn keyring_backend_round_trip_on_the_mock_store() {
    let store = keyring_core::mock::Store::new().unwrap();
    let ks = OwnerKeystore::from(KeyringKeystore::with_store("alice", store));
    assert_eq!(ks.backend(), "keyring");
    assert!(!ks.exists().unwrap());
    let out = ks.init(false).unwrap();
    assert!(matches!(out, InitOutcome::Created { .. }));
    assert!(ks.exists().unwrap());
    let key = ks.load().unwrap();
    assert_eq!(key.public_key_hex(), out.public_key());
    let sig = key.sign(b"approve");
    assert!(silas_keys::verify(
        &key.verifying_key(),
        b"approve",
        &sig.to_bytes()
    ));
    assert!(matches!(
        ks.init(false).unwrap(),
        InitOutcome::KeptExisting { .. }
    ));
    assert_eq!(ks.encrypted_at_rest(), None);
    assert!(ks.describe().contains("user=\"alice\""));
}

#[test]
fn keyring_backend_on_the_real_os_store_fails_cleanly_here() {
    // This machine (and CI) has no session bus: the Secret Service cannot be
    // reached. On a desktop with one, the call must still come back in time.
    let no_bus = std::env::var_os("DBUS_SESSION_BUS_ADDRESS").is_none()
        && std::env::var_os("XDG_RUNTIME_DIR").is_none_or(|d| !Path::new(&d).join("bus").exists());
    let timeout = Duration::from_secs(10);
    let ks = OwnerKeystore::from(KeyringKeystore::secret_service("owner").with_timeout(timeout));
    let start = Instant::now();
    let result = ks.exists();
    assert!(start.elapsed() < timeout + Duration::from_secs(5));
    if no_bus {
        let e = result.unwrap_err();
        let text = e.to_string();
        eprintln!("{text}");
        assert!(matches!(e, KeyError::Keyring { .. }), "{text}");
        assert!(
            text.starts_with("OS keystore Secret Service (D-Bus): cannot read the owner key"),
            "{text}"
        );
        assert!(text.contains("keystore.backend: file"), "{text}");
        assert_eq!(silas_core::Coded::code(&e).to_string(), "E_CFG_KEYSTORE");
        assert!(matches!(ks.init(false), Err(KeyError::Keyring { .. })));
        assert!(matches!(ks.load(), Err(KeyError::Keyring { .. })));
    }
}

/// Formats everything this crate hands out, with `{:?}` and (where it has
/// one) `{}`, and checks that neither the secret nor the KEK ever appears.
#[test]
fn canary_no_formatted_value_contains_the_secret() {
    let kek = "canary-kek-value-1234";
    let dir = tempfile::tempdir().unwrap();
    let plain = file_store(dir.path(), Arc::new(MapEnv::new()));
    let init_plain = plain.init(false).unwrap();
    let secret = b64_decode(json(plain.path())["secret_key"].as_str().unwrap());
    let forbidden = [
        {
            use base64::Engine;
            base64::engine::general_purpose::STANDARD.encode(&secret)
        },
        {
            use base64::Engine;
            base64::engine::general_purpose::STANDARD_NO_PAD.encode(&secret)
        },
        hex(&secret),
        hex(&secret).to_uppercase(),
        format!("{:?}", secret),
        kek.to_owned(),
    ];

    let mut shown: Vec<String> = Vec::new();
    let mut show = |debug: String, display: Option<String>| {
        shown.push(debug);
        shown.extend(display);
    };

    let key = plain.load().unwrap();
    show(format!("{key:?}"), None);
    show(format!("{init_plain:?}"), None);
    show(format!("{plain:?}"), Some(plain.describe()));
    let sealed = file_store(dir.path(), env_with_kek(kek));
    let init_sealed = sealed.init(false).unwrap();
    show(format!("{init_sealed:?}"), None);
    show(format!("{sealed:?}"), Some(sealed.describe()));
    show(format!("{:?}", sealed.format()), None);
    show(
        format!("{:?}", sealed.kek_sources()),
        Some(sealed.kek_sources().describe()),
    );
    let kek_value = sealed.kek_sources().lookup().unwrap().unwrap();
    show(
        format!("{kek_value:?}"),
        Some(kek_value.origin().to_string()),
    );
    show(format!("{:?}", KdfParams::DEFAULT), None);
    let owner_file = OwnerKeystore::from(sealed.clone());
    show(format!("{owner_file:?}"), Some(owner_file.describe()));

    // Every error kind the file backend produces.
    let mut errors: Vec<KeyError> = Vec::new();
    errors.push(
        file_store(dir.path(), env_with_kek("nope"))
            .load()
            .unwrap_err(),
    );
    errors.push(
        FileKeystore::in_data_dir(dir.path(), KekSources::defaults(Arc::new(MapEnv::new())))
            .load()
            .unwrap_err(),
    );
    errors.push(
        file_store(dir.path(), env_with_kek(""))
            .init(false)
            .unwrap_err(),
    );
    let other = tempfile::tempdir().unwrap();
    errors.push(
        file_store(other.path(), env_with_kek(kek))
            .load()
            .unwrap_err(),
    );
    fs::set_permissions(sealed.path(), fs::Permissions::from_mode(0o640)).unwrap();
    errors.push(sealed.load().unwrap_err());
    fs::set_permissions(sealed.path(), fs::Permissions::from_mode(0o600)).unwrap();
    let mut v = json(sealed.path());
    v["kdf_params"]["t_cost"] = 0.into();
    fs::write(sealed.path(), serde_json::to_vec(&v).unwrap()).unwrap();
    errors.push(sealed.load().unwrap_err());

    // The keyring backend, on a mock holding the same secret.
    let store = keyring_core::mock::Store::new().unwrap();
    let ring = KeyringKeystore::with_store("owner", store.clone());
    ring.init(false).unwrap();
    let entry =
        keyring_core::api::CredentialStoreApi::build(&*store, "silas", "owner", None).unwrap();
    {
        use base64::Engine;
        entry
            .set_password(&base64::engine::general_purpose::STANDARD.encode(&secret))
            .unwrap();
    }
    let ring_key = ring.load().unwrap();
    assert_eq!(ring_key.public_key_hex(), init_plain.public_key());
    show(format!("{ring_key:?}"), None);
    show(format!("{ring:?}"), Some(ring.describe()));
    let owner_ring = OwnerKeystore::from(ring.clone());
    show(format!("{owner_ring:?}"), Some(owner_ring.describe()));
    let cred: &keyring_core::mock::Cred = entry.as_any().downcast_ref().unwrap();
    cred.set_error(keyring_core::Error::NoStorageAccess("locked".into()));
    errors.push(ring.load().unwrap_err());
    entry.set_password("%%%").unwrap();
    errors.push(ring.load().unwrap_err());
    errors.push(
        KeyringKeystore::secret_service("owner")
            .with_timeout(Duration::from_secs(10))
            .load()
            .unwrap_err(),
    );

    let kinds: std::collections::BTreeSet<String> = errors
        .iter()
        .map(|e| {
            format!("{e:?}")
                .split([' ', '{', '('])
                .next()
                .unwrap()
                .to_owned()
        })
        .collect();
    for kind in [
        "WrongKek",
        "KekMissing",
        "KekUnusable",
        "Missing",
        "InsecurePermissions",
        "Malformed",
        "Keyring",
    ] {
        assert!(kinds.contains(kind), "no {kind} error exercised: {kinds:?}");
    }
    for e in &errors {
        show(format!("{e:?}"), Some(e.to_string()));
    }

    for text in &shown {
        for f in &forbidden {
            assert!(!text.contains(f.as_str()), "secret leaked in: {text}");
        }
    }
}
