//! [`SkillLoader`]: the flat skill namespace (§10.2) — every immediate
//! subdirectory of `skills_dir` whose name is a valid skill name is one
//! skill. Loading is strict: a folder with a link, a special file, an
//! unreadable or unknown front matter key, or a `name` that differs from
//! its directory is not a skill (it is listed as broken, with the rule).
//! Loading never runs scripts; [`crate::validate()`] does the full check.

use std::fs;
use std::path::{Path, PathBuf};

use crate::manifest::{self, Manifest};
use crate::report::Rule;
use crate::snapshot;
use crate::{SkillError, is_valid_name};

/// One file of a loaded skill (bytes are not kept).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SkillFile {
    pub path: String,
    pub mode: u32,
    pub size: u64,
}

/// A loaded skill: its manifest, body, files and content hash.
#[derive(Clone, Debug)]
pub struct Skill {
    pub name: String,
    pub dir: PathBuf,
    pub manifest: Manifest,
    pub body: String,
    pub content_hash: String,
    /// Sorted by path.
    pub files: Vec<SkillFile>,
}

impl Skill {
    /// Load one skill folder (strictly; see the module docs).
    pub fn load(dir: &Path) -> Result<Skill, SkillError> {
        let dir_name = dir
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_string();
        let invalid =
            |file: &str, line: Option<u32>, rule: Rule, message: String| SkillError::Invalid {
                skill: dir_name.clone(),
                file: file.to_string(),
                line,
                rule,
                message,
            };
        if !is_valid_name(&dir_name) {
            return Err(SkillError::BadName(dir_name));
        }
        let snap = snapshot::take(dir).map_err(|source| SkillError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        if let Some(r) = snap.refusals.first() {
            return Err(invalid(&r.path, None, r.rule, r.message.clone()));
        }
        let content_hash = snapshot::hash_files(&snap.files);
        let Some(md) = snap.file("SKILL.md") else {
            return Err(invalid(
                "SKILL.md",
                None,
                Rule::FrontMatterMissing,
                "SKILL.md is missing".into(),
            ));
        };
        let text = String::from_utf8_lossy(&md.bytes);
        let parsed = manifest::parse(&text);
        if let Some(p) = parsed.problems.first() {
            return Err(invalid("SKILL.md", p.line, p.rule, p.message.clone()));
        }
        let Some(manifest) = parsed.manifest else {
            return Err(invalid(
                "SKILL.md",
                Some(1),
                Rule::FrontMatterInvalid,
                "front matter unusable".into(),
            ));
        };
        if manifest.name != dir_name {
            return Err(invalid(
                "SKILL.md",
                manifest::line_of_key(&text, "name"),
                Rule::NameMismatch,
                format!(
                    "name {:?} must equal the directory name {dir_name:?}",
                    manifest.name
                ),
            ));
        }
        Ok(Skill {
            name: dir_name,
            dir: dir.to_path_buf(),
            manifest,
            body: parsed.body,
            content_hash,
            files: snap
                .files
                .iter()
                .map(|f| SkillFile {
                    path: f.path.clone(),
                    mode: f.mode,
                    size: f.bytes.len() as u64,
                })
                .collect(),
        })
    }

    /// The skill's scripts: files under `scripts/`, relative paths, sorted.
    pub fn scripts(&self) -> Vec<&str> {
        self.files
            .iter()
            .map(|f| f.path.as_str())
            .filter(|p| p.starts_with("scripts/"))
            .collect()
    }
}

/// Every skill under a `skills_dir`, and every folder that is not one.
#[derive(Debug, Default)]
pub struct Catalog {
    /// Sorted by name.
    pub skills: Vec<Skill>,
    /// Folder name and why it could not be loaded, sorted by name.
    pub broken: Vec<(String, SkillError)>,
}

impl Catalog {
    pub fn get(&self, name: &str) -> Option<&Skill> {
        self.skills.iter().find(|s| s.name == name)
    }
}

/// The flat skill namespace under one directory.
#[derive(Clone, Debug)]
pub struct SkillLoader {
    dir: PathBuf,
}

impl SkillLoader {
    pub fn new(skills_dir: impl Into<PathBuf>) -> Self {
        SkillLoader {
            dir: skills_dir.into(),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where skill `name` lives (the name checked, so it cannot climb out).
    pub fn path_of(&self, name: &str) -> Result<PathBuf, SkillError> {
        if !is_valid_name(name) {
            return Err(SkillError::BadName(name.to_string()));
        }
        Ok(self.dir.join(name))
    }

    /// Scan the immediate subdirectories. A missing `skills_dir` is an
    /// empty catalog; hidden entries (`.git`) and plain files are not
    /// candidates; a subdirectory that is a link is broken, not followed.
    pub fn scan(&self) -> Result<Catalog, SkillError> {
        let mut cat = Catalog::default();
        let entries = match fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(cat),
            Err(source) => {
                return Err(SkillError::Io {
                    path: self.dir.clone(),
                    source,
                });
            }
        };
        let io = |source| SkillError::Io {
            path: self.dir.clone(),
            source,
        };
        let mut names: Vec<(String, fs::FileType)> = Vec::new();
        for entry in entries {
            let entry = entry.map_err(io)?;
            let ft = entry.file_type().map_err(io)?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') || !(ft.is_dir() || ft.is_symlink()) {
                continue;
            }
            names.push((name, ft));
        }
        names.sort_by(|a, b| a.0.cmp(&b.0));
        for (name, ft) in names {
            if ft.is_symlink() {
                cat.broken.push((
                    name.clone(),
                    SkillError::Invalid {
                        skill: name,
                        file: String::new(),
                        line: None,
                        rule: Rule::Symlink,
                        message: "the skill folder is a symbolic link".into(),
                    },
                ));
                continue;
            }
            match Skill::load(&self.dir.join(&name)) {
                Ok(s) => cat.skills.push(s),
                Err(e) => cat.broken.push((name, e)),
            }
        }
        Ok(cat)
    }

    /// Load one skill by name.
    pub fn load(&self, name: &str) -> Result<Skill, SkillError> {
        let path = self.path_of(name)?;
        match fs::symlink_metadata(&path) {
            Ok(m) if m.is_dir() => Skill::load(&path),
            Ok(_) => Err(SkillError::Invalid {
                skill: name.to_string(),
                file: String::new(),
                line: None,
                rule: Rule::Symlink,
                message: "the skill folder is not a plain directory".into(),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Err(SkillError::NotFound(name.to_string()))
            }
            Err(source) => Err(SkillError::Io { path, source }),
        }
    }

    /// Delete skill `name`'s folder. Returns the content hash it had when
    /// it loaded (for the audit), `None` for a broken folder. A link in
    /// place of the folder is removed itself, never followed.
    pub fn remove(&self, name: &str) -> Result<Option<String>, SkillError> {
        let path = self.path_of(name)?;
        let meta = match fs::symlink_metadata(&path) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(SkillError::NotFound(name.to_string()));
            }
            Err(source) => return Err(SkillError::Io { path, source }),
        };
        let hash = Skill::load(&path).ok().map(|s| s.content_hash);
        let removed = if meta.is_dir() {
            fs::remove_dir_all(&path)
        } else {
            fs::remove_file(&path)
        };
        removed.map_err(|source| SkillError::Io { path, source })?;
        Ok(hash)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn write_skill(root: &Path, name: &str, front: &str) -> PathBuf {
        let dir = root.join(name);
        fs::create_dir_all(dir.join("scripts")).unwrap();
        fs::write(dir.join("SKILL.md"), format!("---\n{front}---\n# {name}\n")).unwrap();
        dir
    }

    #[test]
    fn scan_is_the_flat_namespace_sorted_with_broken_folders_named() {
        let root = tempfile::tempdir().unwrap();
        let desc = "description: Use when the owner asks about widgets and gadgets.\n";
        write_skill(root.path(), "zeta", &format!("name: zeta\n{desc}"));
        write_skill(root.path(), "alpha", &format!("name: alpha\n{desc}"));
        write_skill(root.path(), "wrong", &format!("name: other\n{desc}"));
        // Nested skills are not in the namespace; hidden folders are skipped.
        write_skill(
            &root.path().join("alpha/references"),
            "nested",
            "name: nested\n",
        );
        fs::create_dir(root.path().join(".git")).unwrap();
        fs::write(root.path().join("README.md"), "x").unwrap();
        let cat = SkillLoader::new(root.path()).scan().unwrap();
        let names: Vec<&str> = cat.skills.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["alpha", "zeta"]);
        assert_eq!(cat.broken.len(), 1);
        let (name, err) = &cat.broken[0];
        assert_eq!(name, "wrong");
        assert!(matches!(
            err,
            SkillError::Invalid {
                rule: Rule::NameMismatch,
                line: Some(2),
                ..
            }
        ));
        assert_eq!(cat.get("alpha").unwrap().content_hash.len(), 64);
        // A missing directory is an empty namespace.
        let none = SkillLoader::new(root.path().join("absent")).scan().unwrap();
        assert!(none.skills.is_empty() && none.broken.is_empty());
    }

    #[test]
    fn load_refuses_bad_names_links_and_missing_skills_and_remove_deletes() {
        let root = tempfile::tempdir().unwrap();
        let loader = SkillLoader::new(root.path());
        assert!(matches!(loader.load("../etc"), Err(SkillError::BadName(_))));
        assert!(matches!(loader.load("nope"), Err(SkillError::NotFound(_))));
        let dir = write_skill(
            root.path(),
            "tool",
            "name: tool\ndescription: Use when the owner asks for the tool.\n",
        );
        let outside = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), root.path().join("linked")).unwrap();
        assert!(matches!(
            loader.load("linked"),
            Err(SkillError::Invalid {
                rule: Rule::Symlink,
                ..
            })
        ));
        let hash = loader.load("tool").unwrap().content_hash;
        assert_eq!(loader.remove("tool").unwrap(), Some(hash));
        assert!(!dir.exists());
        // Removing the link removes the link, not what it points to.
        fs::write(outside.path().join("keep"), "k").unwrap();
        assert_eq!(loader.remove("linked").unwrap(), None);
        assert!(outside.path().join("keep").exists());
    }
}
