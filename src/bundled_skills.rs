//! The skills shipped inside the binary (issue #17): `coding` and
//! `skill-maker`, embedded at build time so a user who installs only the
//! binary has them. `silas init` (and the implicit init of `silas start`)
//! writes each into `skills_dir` when no folder of that name exists — an
//! existing folder is never touched. Nothing bundled is approved
//! automatically, and at its shipped bytes it is not offered unasked
//! either (two cards queued ahead of a newcomer's first plan): `silas skill
//! install NAME` offers its `skill_install` card. A shipped folder someone
//! changed is a different hash and is offered like any other folder.
//!
//! A bundled skill the owner removed (`silas skill remove NAME`) stays
//! removed: its name goes into `skills_dir/.bundled-removed`, which
//! [`place`] honours; `silas skill install NAME` puts it back ([`restore`]).

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use silas_core::ErrorCode;

use crate::error::CliError;

/// One embedded file: skill, path inside it, bytes, mode (the mode is part
/// of the content hash, so it is the repository's).
struct Embedded {
    skill: &'static str,
    path: &'static str,
    bytes: &'static [u8],
    mode: u32,
}

/// Every file of the bundled skills (the test below checks this list
/// against the repository's `skills/` folders, so it cannot drift).
const FILES: &[Embedded] = &[
    Embedded {
        skill: "coding",
        path: "SKILL.md",
        bytes: include_bytes!("../skills/coding/SKILL.md"),
        mode: 0o644,
    },
    Embedded {
        skill: "coding",
        path: "scripts/run_tests.py",
        bytes: include_bytes!("../skills/coding/scripts/run_tests.py"),
        mode: 0o755,
    },
    Embedded {
        skill: "skill-maker",
        path: "SKILL.md",
        bytes: include_bytes!("../skills/skill-maker/SKILL.md"),
        mode: 0o644,
    },
];

/// The bundled skills' names.
pub const BUNDLED: &[&str] = &["coding", "skill-maker"];

/// Each bundled skill's content hash as shipped: the loader's hash over
/// the embedded paths, modes and bytes (what [`place`] writes).
pub fn shipped() -> Vec<(String, String)> {
    use silas_skill::snapshot::{FileEntry, hash_files};
    BUNDLED
        .iter()
        .map(|name| {
            let mut files: Vec<FileEntry> = FILES
                .iter()
                .filter(|f| f.skill == *name)
                .map(|f| FileEntry {
                    path: f.path.to_string(),
                    mode: f.mode,
                    bytes: f.bytes.to_vec(),
                })
                .collect();
            files.sort_by(|a, b| a.path.cmp(&b.path));
            ((*name).to_string(), hash_files(&files))
        })
        .collect()
}

/// What placing one bundled skill did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Placed {
    Written(String),
    /// A folder of that name was already there (left as it is).
    Kept(String),
    /// The owner removed it: not written back.
    Removed(String),
}

/// The hidden file in `skills_dir` naming the bundled skills the owner
/// removed (one per line). Hidden: the skill loader skips it.
const REMOVED_FILE: &str = ".bundled-removed";

/// Whether `name` is one of the bundled skills.
pub fn is_bundled(name: &str) -> bool {
    BUNDLED.contains(&name)
}

/// The bundled skills the owner removed.
fn removed(skills_dir: &Path) -> Result<Vec<String>, CliError> {
    use std::io::Read;
    let path = skills_dir.join(REMOVED_FILE);
    let file = match fs::File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io(&path, e)),
    };
    // A few short names: what is past 4 KiB, or not UTF-8, is not ours and
    // must not stop `init` or `start`.
    let mut bytes = Vec::new();
    file.take(4096)
        .read_to_end(&mut bytes)
        .map_err(|e| io(&path, e))?;
    Ok(String::from_utf8_lossy(&bytes)
        .lines()
        .map(str::trim)
        .filter(|l| is_bundled(l))
        .map(str::to_owned)
        .collect())
}

/// Rewrites the removal record as `names` (deleted when empty), through a
/// temporary file renamed into place.
fn write_removed(skills_dir: &Path, names: &[String]) -> Result<(), CliError> {
    let path = skills_dir.join(REMOVED_FILE);
    if names.is_empty() {
        return match fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io(&path, e)),
            _ => Ok(()),
        };
    }
    let tmp = skills_dir.join(format!("{REMOVED_FILE}.{}", std::process::id()));
    let mut text = names.join("\n");
    text.push('\n');
    fs::write(&tmp, text).map_err(|e| io(&tmp, e))?;
    fs::rename(&tmp, &path).map_err(|e| io(&path, e))
}

/// Records that the owner removed bundled skill `name`, so no later
/// `init` or `start` writes it back.
pub fn record_removal(skills_dir: &Path, name: &str) -> Result<(), CliError> {
    if !is_bundled(name) {
        return Ok(());
    }
    let mut names = removed(skills_dir)?;
    if !names.iter().any(|n| n == name) {
        names.push(name.to_owned());
    }
    write_removed(skills_dir, &names)
}

/// Puts bundled skill `name` back as shipped (the owner asked to install it
/// again) and forgets its removal; `false` when a folder of that name is
/// already there.
pub fn restore(skills_dir: &Path, name: &str) -> Result<bool, CliError> {
    let mut names = removed(skills_dir)?;
    names.retain(|n| n != name);
    write_removed(skills_dir, &names)?;
    let placed = place(skills_dir)?;
    Ok(placed.contains(&Placed::Written(name.to_owned())))
}

fn io(path: &Path, e: std::io::Error) -> CliError {
    CliError::new(ErrorCode::ECfgIo, format!("{}: {e}", path.display()))
}

/// Writes each bundled skill absent from `skills_dir`. A skill is written
/// into a hidden temporary folder and renamed into place, so a crash never
/// leaves a half-written skill under its name.
pub fn place(skills_dir: &Path) -> Result<Vec<Placed>, CliError> {
    fs::create_dir_all(skills_dir).map_err(|e| io(skills_dir, e))?;
    let removed = removed(skills_dir)?;
    let mut out = Vec::new();
    for name in BUNDLED {
        let dest = skills_dir.join(name);
        if fs::symlink_metadata(&dest).is_ok() {
            out.push(Placed::Kept((*name).to_string()));
            continue;
        }
        if removed.iter().any(|n| n == name) {
            out.push(Placed::Removed((*name).to_string()));
            continue;
        }
        let tmp = skills_dir.join(format!(".{name}.bundled-{}", std::process::id()));
        if fs::symlink_metadata(&tmp).is_ok() {
            fs::remove_dir_all(&tmp).map_err(|e| io(&tmp, e))?;
        }
        for f in FILES.iter().filter(|f| f.skill == *name) {
            let path = tmp.join(f.path);
            if let Some(parent) = path.parent() {
                fs::create_dir_all(parent).map_err(|e| io(parent, e))?;
            }
            fs::write(&path, f.bytes).map_err(|e| io(&path, e))?;
            fs::set_permissions(&path, fs::Permissions::from_mode(f.mode))
                .map_err(|e| io(&path, e))?;
        }
        fs::rename(&tmp, &dest).map_err(|e| io(&dest, e))?;
        out.push(Placed::Written((*name).to_string()));
    }
    Ok(out)
}

/// One line for the init report, or `None` when nothing was written.
pub fn report(placed: &[Placed], skills_dir: &Path) -> Option<String> {
    let written: Vec<&str> = placed
        .iter()
        .filter_map(|p| match p {
            Placed::Written(n) => Some(n.as_str()),
            Placed::Kept(_) | Placed::Removed(_) => None,
        })
        .collect();
    (!written.is_empty()).then(|| {
        format!(
            "  bundled skills:       {} written to {} (not approved: `silas skill install NAME` offers its install card)",
            written.join(", "),
            skills_dir.display()
        )
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn repo_files(skill: &str) -> Vec<(String, Vec<u8>, u32)> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("skills")
            .join(skill);
        let mut out = Vec::new();
        let mut stack = vec![root.clone()];
        while let Some(d) = stack.pop() {
            for e in fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    stack.push(p);
                } else {
                    let rel = p.strip_prefix(&root).unwrap().display().to_string();
                    let mode = fs::metadata(&p).unwrap().mode() & 0o777;
                    out.push((rel, fs::read(&p).unwrap(), mode));
                }
            }
        }
        out.sort();
        out
    }

    #[test]
    fn the_embedded_list_is_exactly_the_repository_skills() {
        for name in BUNDLED {
            let mut embedded: Vec<(String, Vec<u8>, u32)> = FILES
                .iter()
                .filter(|f| f.skill == *name)
                .map(|f| (f.path.to_string(), f.bytes.to_vec(), f.mode))
                .collect();
            embedded.sort();
            let repo = repo_files(name);
            let paths = |v: &[(String, Vec<u8>, u32)]| -> Vec<(String, u32)> {
                v.iter().map(|(p, _, m)| (p.clone(), *m & 0o100)).collect()
            };
            assert_eq!(paths(&embedded), paths(&repo), "{name}");
            for ((p, a, _), (_, b, _)) in embedded.iter().zip(&repo) {
                assert_eq!(a, b, "{name}/{p}");
            }
        }
    }

    #[test]
    fn a_removed_bundled_skill_stays_removed_until_installed_again() {
        let tmp = tempfile::tempdir().unwrap();
        let skills = tmp.path().join("skills");
        place(&skills).unwrap();
        fs::remove_dir_all(skills.join("coding")).unwrap();
        record_removal(&skills, "coding").unwrap();
        record_removal(&skills, "coding").unwrap();
        // Not a bundled name: nothing recorded.
        record_removal(&skills, "mine").unwrap();
        assert_eq!(
            fs::read_to_string(skills.join(REMOVED_FILE)).unwrap(),
            "coding\n"
        );
        let placed = place(&skills).unwrap();
        assert!(
            placed.contains(&Placed::Removed("coding".into())),
            "{placed:?}"
        );
        assert!(!skills.join("coding").exists());
        assert!(skills.join("skill-maker").is_dir());
        // The loader does not see the record as a skill.
        let cat = silas_skill::SkillLoader::new(&skills).scan().unwrap();
        assert!(cat.broken.is_empty(), "{:?}", cat.broken);
        assert_eq!(cat.skills.len(), 1);
        // A record that is not text, or huge, neither stops placing nor
        // loses the names it holds.
        let mut junk = b"coding\n\xff\xfe\n".to_vec();
        junk.extend(std::iter::repeat_n(b'x', 1 << 20));
        fs::write(skills.join(REMOVED_FILE), &junk).unwrap();
        let placed = place(&skills).unwrap();
        assert!(
            placed.contains(&Placed::Removed("coding".into())),
            "{placed:?}"
        );
        fs::write(skills.join(REMOVED_FILE), "coding\n").unwrap();
        // Installing it again writes it as shipped and forgets the removal.
        assert!(restore(&skills, "coding").unwrap());
        assert!(skills.join("coding/SKILL.md").is_file());
        assert!(!skills.join(REMOVED_FILE).exists());
        assert!(!restore(&skills, "coding").unwrap());
    }

    #[test]
    fn the_shipped_hashes_are_what_the_loader_sees_after_placing() {
        let tmp = tempfile::tempdir().unwrap();
        let skills = tmp.path().join("skills");
        place(&skills).unwrap();
        let shipped = shipped();
        assert_eq!(shipped.len(), BUNDLED.len());
        for (name, hash) in &shipped {
            let loaded = silas_skill::Skill::load(&skills.join(name)).unwrap();
            assert_eq!(&loaded.content_hash, hash, "{name}");
        }
        // One changed byte is another hash: no longer "as shipped".
        fs::write(skills.join("skill-maker/SKILL.md"), b"changed").ok();
        let changed = silas_skill::snapshot::take(&skills.join("skill-maker"))
            .unwrap()
            .content_hash()
            .unwrap();
        assert_eq!(shipped[1].0, "skill-maker");
        assert_ne!(changed, shipped[1].1);
    }

    #[test]
    fn placing_writes_absent_skills_byte_for_byte_and_never_overwrites() {
        let tmp = tempfile::tempdir().unwrap();
        let skills = tmp.path().join("skills");
        fs::create_dir_all(skills.join("coding")).unwrap();
        fs::write(skills.join("coding/SKILL.md"), "mine").unwrap();
        let placed = place(&skills).unwrap();
        assert_eq!(
            placed,
            [
                Placed::Kept("coding".into()),
                Placed::Written("skill-maker".into())
            ]
        );
        assert_eq!(
            fs::read_to_string(skills.join("coding/SKILL.md")).unwrap(),
            "mine"
        );
        let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("skills/skill-maker/SKILL.md");
        assert_eq!(
            fs::read(skills.join("skill-maker/SKILL.md")).unwrap(),
            fs::read(repo).unwrap()
        );
        assert!(silas_skill::Skill::load(&skills.join("skill-maker")).is_ok());
        // No temporary folder is left; a second run keeps both.
        let names: Vec<String> = fs::read_dir(&skills)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
        assert!(
            place(&skills)
                .unwrap()
                .iter()
                .all(|p| matches!(p, Placed::Kept(_)))
        );
        assert!(report(&place(&skills).unwrap(), &skills).is_none());
    }
}
