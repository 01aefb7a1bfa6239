//! Skills (spec §10): folders in the Agent Skills format — `SKILL.md`
//! (YAML front matter + markdown body) with optional `scripts/`,
//! `references/` and `assets/` — read, hashed, resolved per agent layer and
//! validated deterministically.
//!
//! * [`snapshot`] — one read of a folder: files, modes, bytes; links and
//!   special files refused; the content hash over exactly those bytes.
//! * [`manifest`] — the typed front matter and the body.
//! * [`loader`] — [`SkillLoader`]: the flat namespace under `skills_dir`.
//! * [`resolver`] — progressive disclosure per agent layer (§10.3), the
//!   routing metadata budget, inheritance along work items, and binding
//!   skill content hashes into a plan.
//! * [`validate()`] — the `validation_report` of §10.4 (typed
//!   [`Finding`]s naming file, line and rule).
//!
//! * [`install`] — the `skill_install` card, only for a report without errors.
//! * [`args`] / [`run`] — `script_args` checked into argv, and one script
//!   of an installed skill run in the sandbox from the approved bytes.
//!
//! Layer 2: over `silas-core` and `silas-sandbox`. Validation never runs a
//! skill's scripts; syntax checks hand the bytes to `sh -n` / Python's
//! `ast` on stdin (see [`validate::checker`]). Scripts run only in [`run`].

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod args;
pub mod import;
pub mod install;
pub mod loader;
pub mod manifest;
pub mod report;
pub mod resolver;
pub mod run;
pub mod snapshot;
pub mod validate;

use std::path::PathBuf;

use silas_core::{Coded, ErrorCode};

pub use loader::{Skill, SkillLoader};
pub use manifest::{Activation, Manifest};
pub use report::{Finding, Rule, Severity, ValidationReport};
pub use validate::validate;

/// Longest skill name (§10.1).
pub const MAX_NAME_LEN: usize = 64;

/// `name` rule (§10.1, Agent Skills): 1–64 of `a-z`, `0-9` and `-`, no
/// leading, trailing or doubled hyphen. Also what a folder under
/// `skills_dir` must be called to be a skill.
pub fn is_valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
        && !name.contains("--")
}

#[derive(Debug, thiserror::Error)]
pub enum SkillError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("no skill named {0:?} in the skills directory")]
    NotFound(String),
    #[error("{0:?} is not a skill name (1-64 of a-z, 0-9 and single hyphens)")]
    BadName(String),
    /// The folder cannot be loaded: the first problem, with its rule.
    #[error("skill {skill}: {file}{} [{rule}] {message}", line.map(|l| format!(":{l}")).unwrap_or_default())]
    Invalid {
        skill: String,
        file: String,
        line: Option<u32>,
        rule: Rule,
        message: String,
    },
    /// A plan names a skill whose content changed since it was bound.
    #[error("skill {name} changed since the plan was approved (hash {approved} → {current})")]
    HashMismatch {
        name: String,
        approved: String,
        current: String,
    },
}

impl Coded for SkillError {
    fn code(&self) -> ErrorCode {
        match self {
            SkillError::Io { .. } => ErrorCode::ECfgIo,
            SkillError::NotFound(_) | SkillError::BadName(_) | SkillError::Invalid { .. } => {
                ErrorCode::ECfgInvalid
            }
            // Same class as a plan whose hash no longer matches its token.
            SkillError::HashMismatch { .. } => ErrorCode::EApprovalHash,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for ok in [
            "coding",
            "skill-maker",
            "a",
            "m365-outlook",
            &"a".repeat(64),
        ] {
            assert!(is_valid_name(ok), "{ok}");
        }
        for bad in [
            "",
            "Coding",
            "-a",
            "a-",
            "a--b",
            "a_b",
            "a.b",
            "..",
            &"a".repeat(65),
        ] {
            assert!(!is_valid_name(bad), "{bad}");
        }
    }
}
