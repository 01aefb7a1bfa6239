//! The store file is owner-only from the moment it exists (issue #12 item 6).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;

use silas_storage::{STORE_FILE, Store};

fn mode(p: &std::path::Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

#[test]
fn a_new_store_file_is_created_0600() {
    let d = tempfile::tempdir().unwrap();
    let store = Store::open_in(d.path()).unwrap();
    assert_eq!(store.path(), d.path().join(STORE_FILE));
    // Not narrowed afterwards by `init`: Store::open alone gives 0600
    // (redb by itself creates the file with the umask's 0644).
    assert_eq!(mode(store.path()), 0o600);
    drop(store);
    // Reopening a real store works and keeps the mode.
    let store = Store::open_in(d.path()).unwrap();
    store.audit().log("t", Default::default()).unwrap();
    assert_eq!(mode(store.path()), 0o600);
}

#[test]
fn an_older_world_readable_store_is_narrowed_on_open() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join(STORE_FILE);
    drop(Store::open(&path).unwrap());
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let store = Store::open(&path).unwrap();
    assert_eq!(mode(store.path()), 0o600);
}
