//! The validation report, one test per rule (issue #17 item 2): each bad
//! skill is refused with the named rule at the right file and line; the
//! bundled skills validate clean; validating writes nothing into the skill.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::path::{Path, PathBuf};

use silas_core::config::SkillValidationConfig;
use silas_skill::snapshot;
use silas_skill::{Rule, Severity, ValidationReport, validate};

const GOOD_FRONT: &str =
    "name: tool\ndescription: Use when the owner asks to count lines in a text file.\n";

struct Fx {
    _root: tempfile::TempDir,
    dir: PathBuf,
}

/// A skill `tool` with the given front matter extra, body and files.
fn skill(front_extra: &str, body: &str, files: &[(&str, &str)]) -> Fx {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("tool");
    fs::create_dir_all(dir.join("scripts")).unwrap();
    fs::write(
        dir.join("SKILL.md"),
        format!("---\n{GOOD_FRONT}{front_extra}---\n{body}"),
    )
    .unwrap();
    for (p, content) in files {
        let path = dir.join(p);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, content).unwrap();
    }
    Fx { _root: root, dir }
}

fn report(fx: &Fx) -> ValidationReport {
    validate(&fx.dir, &SkillValidationConfig::default()).unwrap()
}

/// The one error finding for `rule`, as (file, line).
fn only(r: &ValidationReport, rule: Rule) -> (String, Option<u32>) {
    let hits: Vec<_> = r.findings.iter().filter(|f| f.rule == rule).collect();
    assert_eq!(hits.len(), 1, "{rule}: {:#?}", r.findings);
    assert_eq!(hits[0].severity, Severity::Error);
    assert!(!r.is_valid());
    (hits[0].file.clone(), hits[0].line)
}

fn at(file: &str, line: u32) -> (String, Option<u32>) {
    (file.to_string(), Some(line))
}

#[test]
fn a_clean_skill_has_no_findings_and_its_hash() {
    let fx = skill(
        "requirements:\n  env: [WORDS_LOCALE]\nscript_args:\n  scripts/count.py:\n    path: {type: string, max_length: 300}\n    limit: {type: integer, default: 10, min: 1, max: 100}\n",
        "# Tool\nRun `scripts/count.py --path FILE`. See [notes](references/notes.md).\n",
        &[
            (
                "scripts/count.py",
                "import os, subprocess, sys\nloc = os.environ.get('WORDS_LOCALE', 'C')\nhome = os.getenv('HOME')\nsubprocess.run(['wc', '-l', sys.argv[1]], check=False)\n",
            ),
            (
                "scripts/helper.sh",
                "#!/bin/sh\nset -eu\nfile=\"$1\"\nwc -l \"$file\"\necho \"$HOME\"\n",
            ),
            ("references/notes.md", "notes\n"),
        ],
    );
    let r = report(&fx);
    assert!(r.findings.is_empty(), "{:#?}", r.findings);
    assert!(r.is_valid());
    assert_eq!(
        r.content_hash,
        snapshot::take(&fx.dir).unwrap().content_hash()
    );
}

#[test]
fn a_credential_literal_is_refused_without_echoing_it() {
    let key = format!("ghp_{}", "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3z5A");
    let fx = skill(
        "",
        "# Tool\n",
        &[(
            "scripts/call.py",
            &format!("import sys\n\nTOKEN = \"{key}\"\nprint(len(TOKEN))\n"),
        )],
    );
    let r = report(&fx);
    assert_eq!(only(&r, Rule::CredentialLiteral), at("scripts/call.py", 3));
    let text = serde_json::to_string(&r).unwrap();
    assert!(!text.contains(&key), "the report must not carry the secret");
}

#[test]
fn an_undeclared_environment_variable_is_refused_in_python_and_shell() {
    let fx = skill(
        "",
        "# Tool\n",
        &[(
            "scripts/leak.py",
            "import os\n\nsecret = os.environ['AWS_SECRET_ACCESS_KEY']\nprint(len(secret))\n",
        )],
    );
    assert_eq!(
        only(&report(&fx), Rule::UndeclaredEnv),
        at("scripts/leak.py", 3)
    );
    let fx = skill(
        "",
        "# Tool\n",
        &[(
            "scripts/leak.sh",
            "#!/bin/sh\necho ok\necho \"$GITHUB_TOKEN\"\n",
        )],
    );
    assert_eq!(
        only(&report(&fx), Rule::UndeclaredEnv),
        at("scripts/leak.sh", 3)
    );
    // A computed name cannot be declared.
    let fx = skill(
        "",
        "# Tool\n",
        &[(
            "scripts/any.py",
            "import os, sys\nprint(os.environ[sys.argv[1]])\n",
        )],
    );
    assert_eq!(
        only(&report(&fx), Rule::UndeclaredEnv),
        at("scripts/any.py", 2)
    );
}

#[test]
fn shell_interpolation_is_refused() {
    let fx = skill(
        "",
        "# Tool\n",
        &[(
            "scripts/run.py",
            "import subprocess, sys\n\nsubprocess.run(f\"grep {sys.argv[1]} log\", shell=True)\n",
        )],
    );
    assert_eq!(
        only(&report(&fx), Rule::UnsafeShellInterpolation),
        at("scripts/run.py", 3)
    );
    let fx = skill(
        "",
        "# Tool\n",
        &[("scripts/run.sh", "#!/bin/sh\nset -eu\ngrep $1 log\n")],
    );
    assert_eq!(
        only(&report(&fx), Rule::UnsafeShellInterpolation),
        at("scripts/run.sh", 3)
    );
    let fx = skill(
        "",
        "# Tool\n",
        &[("scripts/e.sh", "#!/bin/sh\neval \"$1\"\n")],
    );
    assert_eq!(
        only(&report(&fx), Rule::UnsafeShellInterpolation),
        at("scripts/e.sh", 2)
    );
}

#[test]
fn a_symlink_out_of_the_folder_is_refused_and_leaves_no_hash() {
    let fx = skill("", "# Tool\n", &[]);
    std::os::unix::fs::symlink("/etc/passwd", fx.dir.join("references")).unwrap();
    let r = report(&fx);
    let (file, line) = only(&r, Rule::Symlink);
    assert_eq!((file.as_str(), line), ("references", None));
    assert!(r.findings[0].message.contains("outside the skill"));
    assert_eq!(r.content_hash, None);
}

#[test]
fn path_traversal_and_missing_references_are_named() {
    let fx = skill(
        "ui:\n  icon: ../../etc/icon.svg\n",
        "# Tool\n\nSee [the guide](references/guide.md).\n",
        &[],
    );
    let r = report(&fx);
    assert_eq!(only(&r, Rule::PathTraversal), at("SKILL.md", 4));
    assert_eq!(only(&r, Rule::PathMissing), at("SKILL.md", 9));
}

#[test]
fn front_matter_rules_name_their_lines() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("my-skill");
    fs::create_dir(&dir).unwrap();
    fs::write(
        dir.join("SKILL.md"),
        "---\nname: Other_Name\ndescription: too short\nhooks: {pre: x}\n---\n# body\n",
    )
    .unwrap();
    let r = validate(&dir, &SkillValidationConfig::default()).unwrap();
    assert_eq!(only(&r, Rule::NameFormat), at("SKILL.md", 2));
    assert_eq!(only(&r, Rule::NameMismatch), at("SKILL.md", 2));
    assert_eq!(only(&r, Rule::DescriptionLength), at("SKILL.md", 3));
    assert_eq!(only(&r, Rule::FrontMatterUnknownKey), at("SKILL.md", 4));
    fs::write(dir.join("SKILL.md"), "# no front matter\n").unwrap();
    let r = validate(&dir, &SkillValidationConfig::default()).unwrap();
    assert_eq!(only(&r, Rule::FrontMatterMissing), at("SKILL.md", 1));
}

#[test]
fn a_process_heavy_description_is_refused() {
    let fx = skill("", "# Tool\n", &[]);
    let md = fx.dir.join("SKILL.md");
    fs::write(&md, "---\nname: tool\ndescription: First open the file, then count the lines, finally print them.\n---\n").unwrap();
    assert_eq!(
        only(&report(&fx), Rule::DescriptionProcessHeavy),
        at("SKILL.md", 3)
    );
}

#[test]
fn script_syntax_is_checked_by_the_real_parsers_without_writing_anything() {
    let fx = skill(
        "",
        "# Tool\n",
        &[
            ("scripts/bad.py", "import sys\n\ndef main(:\n    pass\n"),
            ("scripts/bad.sh", "#!/bin/sh\necho ok\nif then\n"),
            ("scripts/tool.rb", "puts 1\n"),
        ],
    );
    let before = snapshot::take(&fx.dir).unwrap().content_hash();
    let r = report(&fx);
    let syntax: Vec<(&str, Option<u32>)> = r
        .findings
        .iter()
        .filter(|f| f.rule == Rule::ScriptSyntax)
        .map(|f| (f.file.as_str(), f.line))
        .collect();
    assert_eq!(syntax.len(), 2, "{:#?}", r.findings);
    assert_eq!(syntax[0], ("scripts/bad.py", Some(3)));
    assert_eq!(syntax[1].0, "scripts/bad.sh");
    assert!(syntax[1].1.is_some_and(|l| l >= 3), "{syntax:?}");
    assert_eq!(
        only(&r, Rule::ScriptUnsupported),
        ("scripts/tool.rb".to_string(), None)
    );
    // No __pycache__, nothing new: the same hash, the same file list.
    assert_eq!(snapshot::take(&fx.dir).unwrap().content_hash(), before);
    assert!(!fx.dir.join("scripts/__pycache__").exists());
}

#[test]
fn dynamic_code_is_refused() {
    let fx = skill(
        "",
        "# Tool\n",
        &[("scripts/d.py", "import sys\nexec(sys.argv[1])\n")],
    );
    assert_eq!(only(&report(&fx), Rule::DynamicCode), at("scripts/d.py", 2));
}

#[test]
fn script_args_schemas_are_checked() {
    let fx = skill(
        "script_args:\n  scripts/c.py:\n    path: {type: string}\n    Bad-Name: {type: integer, max_length: 3}\n    n: {type: integer, default: \"ten\", min: 5, max: 1}\n    mode: {type: string, enum: [a, 2]}\n    x: {type: string, max_length: 4, pattern: \".*\"}\n  scripts/missing.py:\n    y: {type: boolean}\n",
        "# Tool\n",
        &[("scripts/c.py", "print(1)\n")],
    );
    let r = report(&fx);
    let schema: Vec<String> = r
        .findings
        .iter()
        .filter(|f| f.rule == Rule::ScriptArgsSchema || f.rule == Rule::FrontMatterInvalid)
        .map(|f| f.message.clone())
        .collect();
    // `pattern` is not a schema key: the whole front matter is refused
    // before the per-argument rules run.
    assert_eq!(schema.len(), 1, "{schema:#?}");
    assert!(schema[0].contains("pattern"), "{schema:?}");
    let md = fx.dir.join("SKILL.md");
    let text = fs::read_to_string(&md).unwrap().replace(
        "    x: {type: string, max_length: 4, pattern: \".*\"}\n",
        "",
    );
    fs::write(&md, text).unwrap();
    let r = report(&fx);
    let msgs: Vec<&str> = r
        .findings
        .iter()
        .filter(|f| f.rule == Rule::ScriptArgsSchema)
        .map(|f| f.message.as_str())
        .collect();
    for needle in [
        "`path`: a string argument needs max_length",
        "`Bad-Name`: argument names",
        "`Bad-Name`: max_length applies to strings only",
        "`n`: min 5 is greater than max 1",
        "`n`: default \"ten\" is not a integer",
        "`mode`: enum value 2 is not a string",
    ] {
        assert!(
            msgs.iter().any(|m| m.contains(needle)),
            "{needle}: {msgs:#?}"
        );
    }
    assert_eq!(only(&r, Rule::PathMissing).0, "SKILL.md");
}

#[test]
fn a_connection_skill_needs_its_fields_and_health_check() {
    let fx = skill(
        "type: connection\ninitial_permissions: [Mail.Send]\navailable_permissions: [Mail.Read]\n",
        "# Tool\n",
        &[],
    );
    let r = report(&fx);
    let n = r
        .findings
        .iter()
        .filter(|f| f.rule == Rule::ConnectionFields)
        .count();
    assert_eq!(n, 3, "{:#?}", r.findings);
}

const CONN_FRONT: &str = "type: connection\nauth_strategy: device_code\ninitial_permissions: [profile.read]\navailable_permissions: [profile.read, profile.write]\n";
const HEALTH: &str = "import sys\nprint('{\"healthy\": true}')\n";
const UPDATE: &str = "import sys\nprint('updated')\n";

/// §5.10.2: `script_permissions` must name scripts of the skill and
/// permissions it may request.
#[test]
fn script_permissions_name_real_scripts_and_requestable_permissions() {
    let files = [
        ("scripts/health_check.py", HEALTH),
        ("scripts/update.py", UPDATE),
    ];
    let good = skill(
        &format!("{CONN_FRONT}script_permissions:\n  scripts/update.py: [profile.write]\n"),
        "# Tool\nRun scripts/update.py.\n",
        &files,
    );
    let r = report(&good);
    assert!(r.is_valid(), "{:#?}", r.findings);
    assert!(r.findings.iter().all(|f| f.rule != Rule::ConnectionFields));

    // A permission the skill cannot request.
    let beyond = skill(
        &format!("{CONN_FRONT}script_permissions:\n  scripts/update.py: [admin.all]\n"),
        "# Tool\nRun scripts/update.py.\n",
        &files,
    );
    let r = report(&beyond);
    assert_eq!(only(&r, Rule::ConnectionFields), at("SKILL.md", 8));
    let f = r
        .findings
        .iter()
        .find(|f| f.rule == Rule::ConnectionFields)
        .unwrap();
    assert!(
        f.message.contains("admin.all") && f.message.contains("available_permissions"),
        "{}",
        f.message
    );
    assert_eq!(Rule::ConnectionFields.to_string(), "connection_fields");

    // A script that does not exist (and a path outside scripts/).
    for name in ["scripts/missing.py", "SKILL.md"] {
        let ghost = skill(
            &format!("{CONN_FRONT}script_permissions:\n  {name}: [profile.write]\n"),
            "# Tool\nRun scripts/update.py.\n",
            &files,
        );
        let r = report(&ghost);
        assert_eq!(
            only(&r, Rule::ConnectionFields),
            at("SKILL.md", 8),
            "{name}"
        );
        let f = r
            .findings
            .iter()
            .find(|f| f.rule == Rule::ConnectionFields)
            .unwrap();
        assert!(
            f.message.contains(name) && f.message.contains("not a script"),
            "{}",
            f.message
        );
    }

    // Outside a connection skill the field is refused too.
    let plain = skill(
        "script_permissions:\n  scripts/update.py: [profile.write]\n",
        "# Tool\nRun scripts/update.py.\n",
        &files,
    );
    only(&report(&plain), Rule::ConnectionFields);
}

#[test]
fn the_report_is_deterministic() {
    let fx = skill(
        "",
        "# Tool\n[a](assets/a.txt) [b](../b)\n",
        &[("scripts/r.sh", "#!/bin/sh\nls $1 $2\n")],
    );
    assert_eq!(report(&fx), report(&fx));
}

fn bundled() -> Vec<PathBuf> {
    let skills = Path::new(env!("CARGO_MANIFEST_DIR")).join("../skills");
    let mut dirs: Vec<PathBuf> = fs::read_dir(skills)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    dirs
}

#[test]
fn the_bundled_skills_validate_clean() {
    let dirs = bundled();
    assert!(dirs.len() >= 2, "expected coding and skill-maker");
    for d in dirs {
        let r = validate(&d, &SkillValidationConfig::default()).unwrap();
        assert!(r.findings.is_empty(), "{}: {:#?}", d.display(), r.findings);
        assert!(r.content_hash.is_some());
    }
}
