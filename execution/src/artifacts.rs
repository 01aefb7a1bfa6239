//! Moving artifact files out of a sandbox run without letting them carry
//! privileges (issue #12 item 6; spec §0.5, §9).
//!
//! The daemon copies what a sandboxed command produced — possibly as root —
//! into its own keeping. A naive copy would preserve a setuid bit the command
//! set on its own file (and, done by root, hand it a root owner) or follow a
//! symlink the command planted to a host secret. Here every copy:
//!
//! * opens the source with `O_NOFOLLOW | O_NONBLOCK` and checks the *opened*
//!   file (`fstat`, no race with a swap after a listing) is a regular file with
//!   a single link — symlinks, fifos, sockets, devices and hard links to files
//!   elsewhere are refused;
//! * creates the destination fresh (`O_CREAT | O_EXCL | O_NOFOLLOW`) with mode
//!   0600 from the start and sets exactly that mode afterwards, so neither the
//!   source's special bits nor the umask decide it;
//! * writes into directories created 0700.

use std::fs::{DirBuilder, File, OpenOptions, Permissions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use silas_core::{Coded, ErrorCode};

/// Mode of every stored or staged artifact file: owner read/write, nothing
/// else (no execute, no setuid/setgid/sticky).
pub const ARTIFACT_FILE_MODE: u32 = 0o600;
/// Mode of directories that hold artifacts.
pub const PRIVATE_DIR_MODE: u32 = 0o700;

#[derive(Debug, thiserror::Error)]
pub enum ArtifactError {
    /// The source is not something that may become an artifact.
    #[error("E_SANDBOX_FAILED: refusing artifact {path}: {why}")]
    Refused { path: String, why: &'static str },
    #[error("E_SANDBOX_FAILED: artifact {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: io::Error,
    },
}

impl Coded for ArtifactError {
    fn code(&self) -> ErrorCode {
        ErrorCode::ESandboxFailed
    }
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> ArtifactError + '_ {
    move |source| ArtifactError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// Why a file of this kind cannot be an artifact, or `None` for a plain file.
/// Pure, so the policy is testable without making devices.
pub fn refusal(file_type: std::fs::FileType, nlink: u64) -> Option<&'static str> {
    use std::os::unix::fs::FileTypeExt;
    if file_type.is_symlink() {
        Some("symbolic link")
    } else if file_type.is_dir() {
        Some("directory")
    } else if file_type.is_fifo() {
        Some("fifo")
    } else if file_type.is_socket() {
        Some("socket")
    } else if file_type.is_block_device() || file_type.is_char_device() {
        Some("device")
    } else if !file_type.is_file() {
        Some("not a regular file")
    } else if nlink != 1 {
        // A second name means the content also lives somewhere we did not
        // create: never copy a hard link to a host file.
        Some("hard-linked file")
    } else {
        None
    }
}

/// `path` and missing parents created 0700; an existing `path` is set to
/// 0700 (a directory left by an older layout may be wider).
pub fn create_private_dir(path: &Path) -> Result<(), ArtifactError> {
    DirBuilder::new()
        .recursive(true)
        .mode(PRIVATE_DIR_MODE)
        .create(path)
        .and_then(|_| std::fs::set_permissions(path, Permissions::from_mode(PRIVATE_DIR_MODE)))
        .map_err(io_err(path))
}

/// Opens `src` for reading without following a symlink or blocking on a
/// fifo, and returns it only if it is a plain regular file.
fn open_plain(src: &Path) -> Result<File, ArtifactError> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags((rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK).bits() as i32)
        .open(src)
        .map_err(|e| {
            // ELOOP is what O_NOFOLLOW answers for a symlink.
            if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) {
                ArtifactError::Refused {
                    path: src.display().to_string(),
                    why: "symbolic link",
                }
            } else {
                io_err(src)(e)
            }
        })?;
    let meta = file.metadata().map_err(io_err(src))?;
    if let Some(why) = refusal(meta.file_type(), meta.nlink()) {
        return Err(ArtifactError::Refused {
            path: src.display().to_string(),
            why,
        });
    }
    Ok(file)
}

/// Copies one plain file to a new `dst` (which must not exist) with mode
/// [`ARTIFACT_FILE_MODE`]. Returns the bytes copied.
pub fn copy_plain_file(src: &Path, dst: &Path) -> Result<u64, ArtifactError> {
    copy_with_mode(src, dst, ARTIFACT_FILE_MODE)
}

/// [`copy_plain_file`] with an explicit mode; special bits are always
/// masked off.
pub fn copy_with_mode(src: &Path, dst: &Path, mode: u32) -> Result<u64, ArtifactError> {
    let mode = mode & 0o777;
    let mut from = open_plain(src)?;
    let mut to = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode & 0o600)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(dst)
        .map_err(io_err(dst))?;
    let n = io::copy(&mut from, &mut to).map_err(io_err(dst))?;
    // Exactly `mode`, whatever the umask did to the creation mode.
    to.set_permissions(Permissions::from_mode(mode))
        .map_err(io_err(dst))?;
    Ok(n)
}

/// Copies the plain files at the top level of `from` into `to` with `mode`;
/// every other entry (symlinks, directories, fifos, devices, hard links) is
/// skipped and named in the returned list.
pub fn copy_plain_files(from: &Path, to: &Path, mode: u32) -> Result<Vec<PathBuf>, ArtifactError> {
    let mut skipped = Vec::new();
    for entry in std::fs::read_dir(from).map_err(io_err(from))? {
        let entry = entry.map_err(io_err(from))?;
        let path = entry.path();
        match copy_with_mode(&path, &to.join(entry.file_name()), mode) {
            Ok(_) => {}
            Err(ArtifactError::Refused { .. }) => skipped.push(path),
            Err(e) => return Err(e),
        }
    }
    Ok(skipped)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn mode(p: &Path) -> u32 {
        std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn setuid_and_execute_bits_never_survive_a_copy() {
        let d = tempfile::tempdir().unwrap();
        let src = d.path().join("tool");
        std::fs::write(&src, b"#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&src, Permissions::from_mode(0o6755)).unwrap();
        assert_eq!(mode(&src), 0o6755);
        let dst = d.path().join("stored");
        assert_eq!(copy_plain_file(&src, &dst).unwrap(), 10);
        assert_eq!(mode(&dst), 0o600);
        // Even a caller asking for special bits does not get them.
        let dst2 = d.path().join("staged");
        copy_with_mode(&src, &dst2, 0o4755).unwrap();
        assert_eq!(mode(&dst2), 0o755);
    }

    #[test]
    fn symlinks_are_refused_not_followed() {
        let d = tempfile::tempdir().unwrap();
        let secret = d.path().join("owner.key");
        std::fs::write(&secret, b"SECRET").unwrap();
        let link = d.path().join("key-link");
        symlink(&secret, &link).unwrap();
        let dst = d.path().join("out");
        let err = copy_plain_file(&link, &dst).unwrap_err();
        assert!(
            matches!(
                err,
                ArtifactError::Refused {
                    why: "symbolic link",
                    ..
                }
            ),
            "{err}"
        );
        assert_eq!(err.code(), ErrorCode::ESandboxFailed);
        assert!(!dst.exists());
        let shadow = d.path().join("shadow-link");
        symlink("/etc/shadow", &shadow).unwrap();
        assert!(matches!(
            copy_plain_file(&shadow, &dst),
            Err(ArtifactError::Refused { .. })
        ));
    }

    #[test]
    fn fifos_hard_links_and_directories_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let fifo = d.path().join("pipe");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        // Would block forever on open without O_NONBLOCK.
        assert!(matches!(
            copy_plain_file(&fifo, &d.path().join("a")),
            Err(ArtifactError::Refused { why: "fifo", .. })
        ));
        let orig = d.path().join("orig");
        std::fs::write(&orig, b"x").unwrap();
        std::fs::hard_link(&orig, d.path().join("second")).unwrap();
        assert!(matches!(
            copy_plain_file(&d.path().join("second"), &d.path().join("b")),
            Err(ArtifactError::Refused {
                why: "hard-linked file",
                ..
            })
        ));
        std::fs::create_dir(d.path().join("sub")).unwrap();
        assert!(copy_plain_file(&d.path().join("sub"), &d.path().join("c")).is_err());
    }

    #[test]
    fn an_existing_destination_is_never_written_through() {
        let d = tempfile::tempdir().unwrap();
        let src = d.path().join("src");
        std::fs::write(&src, b"new").unwrap();
        let victim = d.path().join("victim");
        std::fs::write(&victim, b"old").unwrap();
        let dst = d.path().join("dst");
        symlink(&victim, &dst).unwrap();
        assert!(copy_plain_file(&src, &dst).is_err());
        assert_eq!(std::fs::read(&victim).unwrap(), b"old");
    }

    #[test]
    fn copying_a_directory_keeps_only_plain_files() {
        let d = tempfile::tempdir().unwrap();
        let from = d.path().join("from");
        std::fs::create_dir(&from).unwrap();
        std::fs::write(from.join("a.txt"), b"a").unwrap();
        symlink("/etc/shadow", from.join("b.txt")).unwrap();
        std::fs::create_dir(from.join("dir")).unwrap();
        let to = d.path().join("to");
        create_private_dir(&to).unwrap();
        assert_eq!(mode(&to), 0o700);
        let mut skipped = copy_plain_files(&from, &to, 0o644).unwrap();
        skipped.sort();
        assert_eq!(skipped, vec![from.join("b.txt"), from.join("dir")]);
        assert_eq!(std::fs::read(to.join("a.txt")).unwrap(), b"a");
        assert_eq!(mode(&to.join("a.txt")), 0o644);
        assert!(!to.join("b.txt").exists());
    }

    #[test]
    fn create_private_dir_narrows_an_existing_wide_dir() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("artifacts");
        std::fs::create_dir(&p).unwrap();
        std::fs::set_permissions(&p, Permissions::from_mode(0o755)).unwrap();
        create_private_dir(&p).unwrap();
        assert_eq!(mode(&p), 0o700);
    }

    #[test]
    fn refusal_policy_table() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("f");
        std::fs::write(&f, b"").unwrap();
        let ft = std::fs::metadata(&f).unwrap().file_type();
        assert_eq!(refusal(ft, 1), None);
        assert_eq!(refusal(ft, 2), Some("hard-linked file"));
        let dt = std::fs::metadata(d.path()).unwrap().file_type();
        assert_eq!(refusal(dt, 1), Some("directory"));
        let ct = std::fs::metadata("/dev/null").unwrap().file_type();
        assert_eq!(refusal(ct, 1), Some("device"));
    }
}
