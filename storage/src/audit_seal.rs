//! Tamper evidence for the audit log beyond the hash chain (§4.16, §15).
//!
//! The hash chain alone only catches naive edits: anyone who can write the
//! redb file can rewrite entries, recompute every hash and checkpoint, or cut
//! the tail. Two things close that gap:
//!
//! * **Signed checkpoints.** Every checkpoint carries an Ed25519 signature by
//!   the owner key over [`projections::audit_checkpoint_payload`]. This crate
//!   never sees the key (it sits below `silas-keys`): callers pass a
//!   [`CheckpointSigner`] / [`CheckpointVerifier`] implemented where the key
//!   lives.
//! * **A head mirror outside the store.** The latest signed head (sequence,
//!   entry hash, checkpoint ID, signature) is also written to
//!   `{data_dir}/audit.head` ([`HEAD_MIRROR_FILE`], 0600, temp file + fsync +
//!   rename + directory fsync). Deleting checkpoints from the store then no
//!   longer hides a rewrite or a cut tail: the mirror still names the head.
//!
//! [`assess`] is the pure verdict over a verified chain, its checkpoints and
//! the mirror. Still undetected, by construction: rolling back the store and
//! the mirror *together* to an earlier consistent state, removing both every
//! checkpoint and the mirror (the report then says no entry is covered by a
//! signed checkpoint), and anything done by someone holding the owner key
//! or able to replace it in the keystore. A checkpoint whose signature does
//! not verify (written before signing, or under a replaced key) is accepted
//! only when a later verified head covers it: the hash chain links
//! everything before that head to it.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use silas_core::{Base64Bytes, Timestamp, projections};

use crate::audit::Checkpoint;
use crate::error::{StoreError, StoreResult};

/// File name of the head mirror, next to the store file in the data dir.
pub const HEAD_MIRROR_FILE: &str = "audit.head";
const MIRROR_VERSION: u8 = 1;

/// Signs checkpoint payloads with the owner key.
pub trait CheckpointSigner: Send + Sync {
    /// A detached Ed25519 signature (64 bytes) over `payload`.
    fn sign(&self, payload: &[u8]) -> Vec<u8>;
}

/// Checks checkpoint signatures against the owner public key.
pub trait CheckpointVerifier {
    fn verify(&self, payload: &[u8], signature: &[u8]) -> bool;
}

/// The signing payload of a checkpoint (through `silas_core::projections`).
pub fn checkpoint_payload(cp: &Checkpoint) -> StoreResult<Vec<u8>> {
    projections::audit_checkpoint_payload(
        &cp.checkpoint_id,
        cp.head_seq,
        &cp.head_hash,
        &cp.created_at,
    )
    .map_err(|e| StoreError::Encoding {
        table: "audit_checkpoints",
        detail: e.to_string(),
    })
}

/// Whether a checkpoint carries a signature that verifies.
pub fn signature_valid(cp: &Checkpoint, verifier: &dyn CheckpointVerifier) -> StoreResult<bool> {
    match &cp.signature {
        None => Ok(false),
        Some(sig) => Ok(verifier.verify(&checkpoint_payload(cp)?, sig.as_slice())),
    }
}

/// The latest signed chain head, as mirrored outside the store.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HeadMirror {
    pub version: u8,
    pub seq: u64,
    pub entry_hash: String,
    pub checkpoint_id: String,
    pub created_at: Timestamp,
    pub signature: Base64Bytes,
}

impl HeadMirror {
    /// The mirror of a signed checkpoint; `None` for an unsigned one.
    pub fn of(cp: &Checkpoint) -> Option<HeadMirror> {
        Some(HeadMirror {
            version: MIRROR_VERSION,
            seq: cp.head_seq,
            entry_hash: cp.head_hash.clone(),
            checkpoint_id: cp.checkpoint_id.clone(),
            created_at: cp.created_at,
            signature: cp.signature.clone()?,
        })
    }

    /// The checkpoint this mirror restates (to check its signature).
    pub fn as_checkpoint(&self) -> Checkpoint {
        Checkpoint {
            checkpoint_id: self.checkpoint_id.clone(),
            head_seq: self.seq,
            head_hash: self.entry_hash.clone(),
            created_at: self.created_at,
            signature: Some(self.signature.clone()),
        }
    }

    /// Read the mirror; `Ok(None)` when the file does not exist.
    pub fn read(path: &Path) -> StoreResult<Option<HeadMirror>> {
        let bytes = match fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => {
                return Err(StoreError::Io(format!(
                    "cannot read {}: {e}",
                    path.display()
                )));
            }
        };
        let mirror: HeadMirror =
            serde_json::from_slice(&bytes).map_err(|e| StoreError::Encoding {
                table: "audit.head",
                detail: e.to_string(),
            })?;
        if mirror.version != MIRROR_VERSION {
            return Err(StoreError::Encoding {
                table: "audit.head",
                detail: format!("unknown version {}", mirror.version),
            });
        }
        Ok(Some(mirror))
    }

    /// Replace the mirror atomically: a crash leaves the old or the new
    /// file, never a torn one.
    pub fn write(&self, path: &Path) -> StoreResult<()> {
        let io = |what: &str, e: std::io::Error| {
            StoreError::Io(format!("audit head mirror {}: {what}: {e}", path.display()))
        };
        let body = serde_json::to_vec(self).map_err(|e| StoreError::Encoding {
            table: "audit.head",
            detail: e.to_string(),
        })?;
        let tmp = tmp_path(path);
        // A leftover temp file from a crash is ours to replace.
        let _ = fs::remove_file(&tmp);
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(|e| io("create temp file", e))?;
        f.write_all(&body).map_err(|e| io("write", e))?;
        f.sync_all().map_err(|e| io("fsync", e))?;
        drop(f);
        fs::rename(&tmp, path).map_err(|e| io("rename", e))?;
        // A bare file name has the empty path as parent: the current dir.
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| io("fsync directory", e))?;
        Ok(())
    }
}

fn tmp_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    path.with_file_name(name)
}

/// The outcome of a sealed verification.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SealReport {
    /// Entries in the store.
    pub chain_len: u64,
    /// Checkpoints whose signature verified.
    pub signed_checkpoints: u64,
    /// Checkpoints without a signature that verifies (written before
    /// checkpoints were signed, or under an owner key since replaced) that a
    /// later verified head covers: reported, harmless, since the hash chain
    /// links everything before that head to it.
    pub unsigned_superseded: Vec<String>,
    /// Highest sequence number a verified signature vouches for (a signed
    /// checkpoint or the mirror).
    pub covered_through: Option<u64>,
    /// `first..=last` entries after the last signed checkpoint: protected by
    /// the hash chain only.
    pub uncovered: Option<(u64, u64)>,
    /// Why the log is not trustworthy; `None` when it verifies.
    pub problem: Option<String>,
}

/// The verdict on a chain whose hashes already verified.
///
/// * `hash_at(seq)`: the recomputed hash of the stored entry `seq`, `None`
///   when there is none.
/// * `mirror`: the head mirror, `None` when the file is absent.
///
/// Checkpoints that verify and the mirror must match the chain; one without
/// a verifying signature is refused unless a later verified head covers it.
pub fn assess(
    chain_len: u64,
    hash_at: &dyn Fn(u64) -> StoreResult<Option<String>>,
    checkpoints: &[Checkpoint],
    mirror: Option<&HeadMirror>,
    verifier: &dyn CheckpointVerifier,
) -> StoreResult<SealReport> {
    let mut report = SealReport {
        chain_len,
        signed_checkpoints: 0,
        unsigned_superseded: Vec::new(),
        covered_through: None,
        uncovered: None,
        problem: None,
    };
    let mut unverified: Vec<&Checkpoint> = Vec::new();
    for cp in checkpoints {
        if !signature_valid(cp, verifier)? {
            unverified.push(cp);
            continue;
        }
        if let Some(p) = head_mismatch("checkpoint", &cp.checkpoint_id, cp, chain_len, hash_at)? {
            report.problem = Some(p);
            return Ok(report);
        }
        report.signed_checkpoints += 1;
        report.covered_through = report.covered_through.max(Some(cp.head_seq));
    }
    if let Some(m) = mirror {
        let cp = m.as_checkpoint();
        if !signature_valid(&cp, verifier)? {
            report.problem = Some(format!(
                "the head mirror ({HEAD_MIRROR_FILE}) has a signature that does not verify against the owner key"
            ));
            return Ok(report);
        }
        if let Some(p) = head_mismatch(
            "the head mirror of",
            &m.checkpoint_id,
            &cp,
            chain_len,
            hash_at,
        )? {
            report.problem = Some(p);
            return Ok(report);
        }
        report.covered_through = report.covered_through.max(Some(m.seq));
    } else if report.signed_checkpoints > 0 {
        report.problem = Some(format!(
            "the head mirror ({HEAD_MIRROR_FILE}) is missing although the store has signed checkpoints"
        ));
        return Ok(report);
    }
    for cp in unverified {
        if report.covered_through.is_some_and(|c| c >= cp.head_seq) {
            report.unsigned_superseded.push(cp.checkpoint_id.clone());
            continue;
        }
        // Past the end, even an unsigned checkpoint still shows a naive cut.
        let problem = match head_mismatch("checkpoint", &cp.checkpoint_id, cp, chain_len, hash_at)?
        {
            Some(p) => p,
            None if cp.signature.is_none() => format!(
                "checkpoint {} (entry {}) is unsigned and no signed checkpoint covers it",
                cp.checkpoint_id, cp.head_seq
            ),
            None => format!(
                "checkpoint {} (entry {}) has a signature that does not verify against the owner key (forged or rewritten)",
                cp.checkpoint_id, cp.head_seq
            ),
        };
        report.problem = Some(problem);
        return Ok(report);
    }
    let first_uncovered = report.covered_through.map_or(0, |c| c + 1);
    if first_uncovered < chain_len {
        report.uncovered = Some((first_uncovered, chain_len - 1));
    }
    Ok(report)
}

/// A problem when `cp`'s head is not the stored entry at its sequence.
fn head_mismatch(
    what: &str,
    id: &str,
    cp: &Checkpoint,
    chain_len: u64,
    hash_at: &dyn Fn(u64) -> StoreResult<Option<String>>,
) -> StoreResult<Option<String>> {
    if cp.head_seq >= chain_len {
        return Ok(Some(format!(
            "truncated: {what} {id} covers entry {} but the store has only {chain_len} entries",
            cp.head_seq
        )));
    }
    match hash_at(cp.head_seq)? {
        Some(h) if h == cp.head_hash => Ok(None),
        _ => Ok(Some(format!(
            "rewritten: entry {} does not match {what} {id}",
            cp.head_seq
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in key: the "signature" is the payload's hash salted with a
    /// secret. Real Ed25519 is exercised in `tests/audit.rs`; here only the
    /// verdict logic is under test.
    struct Fake(&'static str);
    impl CheckpointSigner for Fake {
        fn sign(&self, payload: &[u8]) -> Vec<u8> {
            let mut b = self.0.as_bytes().to_vec();
            b.extend_from_slice(payload);
            silas_core::canonical::sha256_hex(&b).into_bytes()
        }
    }
    impl CheckpointVerifier for Fake {
        fn verify(&self, payload: &[u8], signature: &[u8]) -> bool {
            self.sign(payload) == signature
        }
    }

    fn hashes(n: u64) -> impl Fn(u64) -> StoreResult<Option<String>> {
        move |seq| Ok((seq < n).then(|| format!("h{seq}")))
    }

    fn cp(seq: u64, key: Option<&Fake>) -> Checkpoint {
        let mut cp = Checkpoint {
            checkpoint_id: format!("cp-{seq}"),
            head_seq: seq,
            head_hash: format!("h{seq}"),
            created_at: Timestamp::parse("2026-01-15T10:00:00Z").unwrap(),
            signature: None,
        };
        if let Some(k) = key {
            cp.signature = Some(Base64Bytes(k.sign(&checkpoint_payload(&cp).unwrap())));
        }
        cp
    }

    const KEY: Fake = Fake("owner");

    #[test]
    fn signed_checkpoint_and_mirror_verify_and_report_the_uncovered_window() {
        let c = cp(4, Some(&KEY));
        let m = HeadMirror::of(&c).unwrap();
        let r = assess(8, &hashes(8), &[c], Some(&m), &KEY).unwrap();
        assert_eq!(r.problem, None);
        assert_eq!(r.signed_checkpoints, 1);
        assert_eq!(r.covered_through, Some(4));
        assert_eq!(r.uncovered, Some((5, 7)));
    }

    #[test]
    fn nothing_checkpointed_is_a_pass_with_everything_uncovered() {
        let r = assess(3, &hashes(3), &[], None, &KEY).unwrap();
        assert_eq!(r.problem, None);
        assert_eq!(r.uncovered, Some((0, 2)));
        let r = assess(0, &hashes(0), &[], None, &KEY).unwrap();
        assert_eq!((r.problem, r.uncovered), (None, None));
    }

    #[test]
    fn fully_covered_chain_has_no_window() {
        let c = cp(7, Some(&KEY));
        let m = HeadMirror::of(&c).unwrap();
        let r = assess(8, &hashes(8), &[c], Some(&m), &KEY).unwrap();
        assert_eq!((r.problem, r.uncovered), (None, None));
    }

    #[test]
    fn checkpoint_signed_by_another_key_is_forged() {
        let c = cp(4, Some(&Fake("attacker")));
        let r = assess(8, &hashes(8), &[c], None, &KEY).unwrap();
        assert!(r.problem.unwrap().contains("does not verify"));
    }

    #[test]
    fn checkpoint_of_a_replaced_key_is_superseded_by_a_later_one_of_the_current_key() {
        let old = cp(3, Some(&Fake("previous key")));
        let current = cp(5, Some(&KEY));
        let m = HeadMirror::of(&current).unwrap();
        let r = assess(8, &hashes(8), &[old.clone(), current], Some(&m), &KEY).unwrap();
        assert_eq!(r.problem, None);
        assert_eq!(r.unsigned_superseded, vec!["cp-3".to_string()]);
        // Not covered by a later verified head: refused.
        let r = assess(
            8,
            &hashes(8),
            &[cp(6, Some(&Fake("x"))), old],
            Some(&m),
            &KEY,
        )
        .unwrap();
        assert!(
            r.problem
                .unwrap()
                .contains("cp-6 (entry 6) has a signature that does not verify")
        );
    }

    #[test]
    fn checkpoint_whose_head_was_rewritten_is_detected() {
        let c = cp(4, Some(&KEY));
        let m = HeadMirror::of(&c).unwrap();
        let rewritten = |seq: u64| Ok((seq < 8).then(|| format!("x{seq}")));
        let r = assess(8, &rewritten, &[c], Some(&m), &KEY).unwrap();
        assert!(r.problem.unwrap().starts_with("rewritten: entry 4"));
        // Checkpoints deleted too: the mirror still catches it.
        let r = assess(8, &rewritten, &[], Some(&m), &KEY).unwrap();
        assert!(r.problem.unwrap().contains("head mirror"));
    }

    #[test]
    fn tail_cut_below_the_mirrored_head_is_detected_even_without_checkpoints() {
        let m = HeadMirror::of(&cp(6, Some(&KEY))).unwrap();
        let r = assess(4, &hashes(4), &[], Some(&m), &KEY).unwrap();
        let p = r.problem.unwrap();
        assert!(p.starts_with("truncated:"), "{p}");
        assert!(p.contains("only 4 entries"), "{p}");
    }

    #[test]
    fn tampered_mirror_is_detected() {
        let mut m = HeadMirror::of(&cp(4, Some(&KEY))).unwrap();
        m.seq = 2; // "roll back" the mirror without the key
        let r = assess(8, &hashes(8), &[], Some(&m), &KEY).unwrap();
        assert!(r.problem.unwrap().contains("does not verify"));
    }

    #[test]
    fn missing_mirror_with_signed_checkpoints_is_detected() {
        let r = assess(8, &hashes(8), &[cp(4, Some(&KEY))], None, &KEY).unwrap();
        assert!(r.problem.unwrap().contains("missing"));
    }

    #[test]
    fn unsigned_checkpoints_are_superseded_or_a_failure() {
        let signed = cp(5, Some(&KEY));
        let m = HeadMirror::of(&signed).unwrap();
        let r = assess(
            8,
            &hashes(8),
            &[cp(3, None), signed.clone()],
            Some(&m),
            &KEY,
        )
        .unwrap();
        assert_eq!(r.problem, None);
        assert_eq!(r.unsigned_superseded, vec!["cp-3".to_string()]);
        let r = assess(8, &hashes(8), &[cp(6, None), signed], Some(&m), &KEY).unwrap();
        assert!(r.problem.unwrap().contains("cp-6 (entry 6) is unsigned"));
        let r = assess(8, &hashes(8), &[cp(3, None)], None, &KEY).unwrap();
        assert!(r.problem.unwrap().contains("unsigned"));
    }

    #[test]
    fn mirror_file_round_trips_atomically_with_mode_0600() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(HEAD_MIRROR_FILE);
        assert_eq!(HeadMirror::read(&path).unwrap(), None);
        let m = HeadMirror::of(&cp(4, Some(&KEY))).unwrap();
        m.write(&path).unwrap();
        let m2 = HeadMirror::of(&cp(9, Some(&KEY))).unwrap();
        m2.write(&path).unwrap();
        assert_eq!(HeadMirror::read(&path).unwrap(), Some(m2));
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert!(!tmp_path(&path).exists());
        fs::write(&path, b"{not json").unwrap();
        assert!(HeadMirror::read(&path).is_err());
    }
}
