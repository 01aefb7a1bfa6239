//! `run_skill_script` arguments (§10.1 `script_args`): validated against the
//! script's schema at the sandbox boundary and turned into argv — one
//! element per flag and per value, never a shell string, so nothing the
//! model writes is ever parsed as code.

use serde_json::{Map, Value};

use crate::loader::Skill;
use crate::manifest::{Activation, ArgSchema};
use crate::validate::value_fits;

/// Why a call cannot run.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ArgError {
    #[error("skill {skill} has no script {script:?}")]
    NoSuchScript { skill: String, script: String },
    #[error("skill {0} is a background skill: its scripts are never invoked")]
    Background(String),
    #[error("{script}: no interpreter for this kind of script (only .py and .sh run)")]
    Unsupported { script: String },
    #[error("{script}: unknown argument {arg:?} (script_args declares {declared})")]
    Unknown {
        script: String,
        arg: String,
        declared: String,
    },
    #[error("{script}: argument {arg:?} {why}")]
    Invalid {
        script: String,
        arg: String,
        why: String,
    },
    #[error("{script}: argument {arg:?} is required")]
    Missing { script: String, arg: String },
}

impl silas_core::Coded for ArgError {
    fn code(&self) -> silas_core::ErrorCode {
        // Refused before anything runs, like any other invalid declaration.
        silas_core::ErrorCode::ECfgInvalid
    }
}

/// The interpreter a script runs under (`argv[0]`), by extension.
pub fn interpreter(script: &str, python: &str) -> Option<String> {
    if script.ends_with(".py") {
        Some(python.to_string())
    } else if script.ends_with(".sh") {
        Some("/bin/sh".to_string())
    } else {
        None
    }
}

fn as_arg(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn required(s: &ArgSchema) -> bool {
    s.required.unwrap_or(false) && s.default.is_none()
}

/// The script's arguments after `argv[0]` and the script path:
/// `--name value` per declared argument, in schema (name) order, defaults
/// filled in. A script without a schema takes no arguments.
pub fn script_args(
    skill: &Skill,
    script: &str,
    args: &Map<String, Value>,
) -> Result<Vec<String>, ArgError> {
    if !skill.scripts().contains(&script) {
        return Err(ArgError::NoSuchScript {
            skill: skill.name.clone(),
            script: script.to_string(),
        });
    }
    if skill.manifest.activation == Activation::Background {
        return Err(ArgError::Background(skill.name.clone()));
    }
    let empty = Default::default();
    let schema = skill.manifest.script_args.get(script).unwrap_or(&empty);
    if let Some(unknown) = args.keys().find(|k| !schema.contains_key(*k)) {
        let declared: Vec<&str> = schema.keys().map(String::as_str).collect();
        return Err(ArgError::Unknown {
            script: script.to_string(),
            arg: unknown.clone(),
            declared: if declared.is_empty() {
                "none".into()
            } else {
                declared.join(", ")
            },
        });
    }
    let mut argv = Vec::new();
    for (name, s) in schema {
        let value = match args.get(name).or(s.default.as_ref()) {
            Some(v) => v,
            None if required(s) => {
                return Err(ArgError::Missing {
                    script: script.to_string(),
                    arg: name.clone(),
                });
            }
            None => continue,
        };
        value_fits(s, value).map_err(|why| ArgError::Invalid {
            script: script.to_string(),
            arg: name.clone(),
            why,
        })?;
        argv.push(format!("--{name}"));
        argv.push(as_arg(value));
    }
    Ok(argv)
}

/// The dry-run arguments of a script (§10.4 step 5): its schema's defaults
/// when every required argument has one, otherwise `--help`.
pub fn dry_run_args(skill: &Skill, script: &str) -> Vec<String> {
    match script_args(skill, script, &Map::new()) {
        Ok(argv) if skill.manifest.script_args.contains_key(script) => argv,
        _ => vec!["--help".to_string()],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn skill(front: &str) -> (tempfile::TempDir, Skill) {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("count-lines");
        std::fs::create_dir_all(dir.join("scripts")).unwrap();
        std::fs::write(
            dir.join("SKILL.md"),
            format!("---\nname: count-lines\ndescription: Use when the owner wants lines of a text counted.\n{front}---\n# Count\n"),
        )
        .unwrap();
        std::fs::write(dir.join("scripts/count.py"), "print(1)\n").unwrap();
        let s = Skill::load(&dir).unwrap();
        (root, s)
    }

    const SCHEMA: &str = "script_args:\n  scripts/count.py:\n    text: {type: string, max_length: 20, required: true}\n    limit: {type: integer, default: 10, max: 100}\n";

    #[test]
    fn args_become_argv_elements_checked_against_the_schema() {
        let (_r, s) = skill(SCHEMA);
        let a = json!({"text": "a; rm -rf / $(id)"});
        let argv = script_args(&s, "scripts/count.py", a.as_object().unwrap()).unwrap();
        // Shell metacharacters stay one argv element: nothing parses them.
        assert_eq!(argv, ["--limit", "10", "--text", "a; rm -rf / $(id)"]);
        let too_long = json!({"text": "x".repeat(21)});
        assert!(matches!(
            script_args(&s, "scripts/count.py", too_long.as_object().unwrap()),
            Err(ArgError::Invalid { .. })
        ));
        let wrong_type = json!({"text": "x", "limit": "ten"});
        assert!(matches!(
            script_args(&s, "scripts/count.py", wrong_type.as_object().unwrap()),
            Err(ArgError::Invalid { .. })
        ));
        let unknown = json!({"text": "x", "shell": true});
        assert!(matches!(
            script_args(&s, "scripts/count.py", unknown.as_object().unwrap()),
            Err(ArgError::Unknown { .. })
        ));
        assert!(matches!(
            script_args(&s, "scripts/count.py", &Map::new()),
            Err(ArgError::Missing { .. })
        ));
        assert!(matches!(
            script_args(&s, "../etc/passwd", &Map::new()),
            Err(ArgError::NoSuchScript { .. })
        ));
        // A required argument without a default: the dry run asks for --help.
        assert_eq!(dry_run_args(&s, "scripts/count.py"), ["--help"]);
    }

    #[test]
    fn dry_run_uses_defaults_and_background_skills_never_run() {
        let (_r, s) =
            skill("script_args:\n  scripts/count.py:\n    limit: {type: integer, default: 3}\n");
        assert_eq!(dry_run_args(&s, "scripts/count.py"), ["--limit", "3"]);
        let (_r, s) = skill("activation: background\n");
        assert!(matches!(
            script_args(&s, "scripts/count.py", &Map::new()),
            Err(ArgError::Background(_))
        ));
        assert_eq!(
            interpreter("scripts/x.sh", "python3").as_deref(),
            Some("/bin/sh")
        );
        assert_eq!(interpreter("scripts/x.rb", "python3"), None);
    }
}
