//! The bundled skills stay valid: every directory under `skills/` passes the
//! skill-maker's own validator (the rules installation applies, §10.1), and
//! the validator rejects a malformed skill.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;

fn validate(dir: &Path) -> std::process::Output {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    Command::new("python3")
        .arg(root.join("skills/skill-maker/scripts/validate_skill.py"))
        .arg("--path")
        .arg(dir)
        .output()
        .unwrap()
}

#[test]
fn bundled_skills_are_valid() {
    let skills = Path::new(env!("CARGO_MANIFEST_DIR")).join("skills");
    let mut checked = 0;
    for entry in std::fs::read_dir(&skills).unwrap() {
        let dir = entry.unwrap().path();
        if dir.is_dir() {
            let out = validate(&dir);
            assert!(
                out.status.success(),
                "{}: {}",
                dir.display(),
                String::from_utf8_lossy(&out.stdout)
            );
            checked += 1;
        }
    }
    assert!(checked >= 2, "expected the coding and skill-maker skills");
}

#[test]
fn the_validator_rejects_a_malformed_skill() {
    let dir = tempfile::tempdir().unwrap();
    let skill = dir.path().join("my-skill");
    std::fs::create_dir(&skill).unwrap();
    std::fs::write(skill.join("SKILL.md"), "---\nname: Other_Name\ndescription: too short\nscript_args:\n  scripts/missing.py:\n    x: {type: string}\n---\n# body\n").unwrap();
    let out = validate(&skill);
    assert!(!out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for problem in [
        "lowercase",
        "directory name",
        "24 to 1024",
        "scripts/missing.py",
    ] {
        assert!(text.contains(problem), "{problem} not reported: {text}");
    }
}
