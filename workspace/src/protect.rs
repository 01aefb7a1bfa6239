//! Protected files: the ones that define the checks. Before verification they
//! are restored in the verification copy from the untouched copy, so an
//! executor that rewrites a test to `assert True` is still checked against the
//! original test.

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};

use crate::error::WorkspaceError;
use crate::fsutil;

/// The default protected set (any depth unless anchored).
pub const DEFAULT_PROTECTED: &[&str] = &[
    "**/test_*.py",
    "**/*_test.py",
    "**/tests/**",
    "**/test/**",
    "**/conftest.py",
    "**/pytest.ini",
    "**/.pytest.ini",
    "**/pytest.toml",
    "**/.pytest.toml",
    "**/pyproject.toml",
    "**/setup.cfg",
    "**/tox.ini",
    "**/ruff.toml",
    "**/.ruff.toml",
    "**/noxfile.py",
    ".github/**",
];

/// What the checks' commands run, beyond the test files. `globs` are
/// protected like the tests (restored for verification, flagged on the
/// card): a `make` run's makefiles, an `npm`/`yarn`/`pnpm` run's
/// `package.json` (its `test` script), a script the command runs by path
/// (`bash run_tests.sh`, `./check.sh`, `python3 tools/lint.py`). `modules`
/// are what `python -m NAME` imports: a *new* module of that name anywhere
/// it could shadow is removed for verification ([`crate::shadow`]), while
/// the project's own module of that name stays the work's to change.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CheckInputs {
    pub globs: Vec<String>,
    pub modules: BTreeSet<String>,
}

/// [`CheckInputs`] of the check commands (a lexical reading: an indirection
/// such as `$PY -m x` is not seen).
pub fn check_inputs<'a>(commands: impl IntoIterator<Item = &'a str>) -> CheckInputs {
    let mut globs = BTreeSet::new();
    let mut modules = BTreeSet::new();
    for command in commands {
        let words: Vec<&str> = command
            .split(|c: char| c.is_whitespace() || ";&|()`".contains(c))
            .map(|w| w.trim_matches(|c| c == '"' || c == '\''))
            .filter(|w| !w.is_empty())
            .collect();
        for (i, word) in words.iter().enumerate() {
            let program = word.rsplit('/').next().unwrap_or(word);
            if let Some(module) = python_module(program, &words[i + 1..]) {
                modules.insert(module.split('.').next().unwrap_or(module).to_owned());
            }
            if let Some(script) = script_run(word, program, &words[i + 1..]) {
                globs.insert(script.trim_start_matches("./").to_owned());
            }
            let files: &[&str] = match program {
                "make" | "gmake" => &["Makefile", "makefile", "GNUmakefile", "**/*.mk"],
                "npm" | "npx" | "yarn" | "pnpm" => &["package.json"],
                _ => &[],
            };
            globs.extend(files.iter().map(|f| (*f).to_owned()));
        }
    }
    CheckInputs {
        globs: globs.into_iter().collect(),
        modules,
    }
}

/// A relative script path the command runs: `./x.sh` as the program, or the
/// first argument of a shell or an interpreter (`bash run_tests.sh`,
/// `python3 tools/lint.py`).
fn script_run<'a>(word: &'a str, program: &str, args: &[&'a str]) -> Option<&'a str> {
    let relative = |p: &str| {
        !p.starts_with('/') && !p.starts_with('-') && !p.contains("..") && p.contains('.')
    };
    if word.starts_with("./") && relative(word) {
        return Some(word);
    }
    // The options after which code (or a module), not a script, follows.
    let code: &[&str] = match program {
        "sh" | "bash" | "dash" | "zsh" => &["-c"],
        "node" | "perl" | "ruby" => &["-e", "-E"],
        p if is_python(p) => &["-c", "-m"],
        _ => return None,
    };
    // The first non-option argument is the script.
    for arg in args {
        match *arg {
            a if code.contains(&a) => return None,
            a if a.starts_with('-') => {}
            a => return relative(a).then_some(a),
        }
    }
    None
}

/// `NAME` of `python… [options] -m NAME`, when `program` is a Python.
fn python_module<'a>(program: &str, args: &[&'a str]) -> Option<&'a str> {
    if !is_python(program) {
        return None;
    }
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match *arg {
            "-m" => return args.next().copied().filter(|m| is_module_name(m)),
            // Options taking a value; `-c` runs code, not a module.
            "-W" | "-X" | "--check-hash-based-pycs" => {
                args.next();
            }
            "-c" => return None,
            a if a.starts_with("-m") => return Some(&a[2..]).filter(|m| is_module_name(m)),
            a if a.starts_with('-') => {}
            // A script: what follows is its own arguments.
            _ => return None,
        }
    }
    None
}

/// `python`, `python3`, `python3.12`.
fn is_python(program: &str) -> bool {
    program
        .strip_prefix("python")
        .is_some_and(|v| v.chars().all(|c| c.is_ascii_digit() || c == '.'))
}

fn is_module_name(m: &str) -> bool {
    !m.is_empty()
        && m.split('.')
            .all(|p| !p.is_empty() && p.chars().all(|c| c.is_alphanumeric() || c == '_'))
}

/// A compiled set of protected-path globs (`*` never crosses `/`).
#[derive(Clone, Debug)]
pub struct Protected {
    set: GlobSet,
    /// Module names (`python -m NAME`) a new file must not shadow, on top
    /// of [`crate::shadow::SHADOWED`].
    modules: BTreeSet<String>,
}

impl Protected {
    /// Whether a new file at `rel` would shadow a module the checks import,
    /// judged against the untouched copy's layout (`base_has`: whether it
    /// holds a file), which the work cannot change: a package there is the
    /// owner's.
    pub fn shadows(&self, rel: &str, base_has: impl Fn(&str) -> bool) -> bool {
        crate::shadow::shadows(rel, &self.modules, base_has)
    }

    /// The default set, the plan's `protected` globs, what its checks run
    /// and what those protected scripts in `base` (the untouched copy)
    /// `source`: a check `sh scripts/check.sh` whose first line is
    /// `. scripts/lib.sh` passed once `lib.sh` said `exit 0`.
    pub fn for_checks_in<'a>(
        base: &Path,
        extra_globs: &[String],
        commands: impl IntoIterator<Item = &'a str>,
    ) -> Result<Self, WorkspaceError> {
        let inputs = check_inputs(commands);
        let mut globs = extra_globs.to_vec();
        globs.extend(sourced(base, &inputs.globs));
        globs.extend(inputs.globs);
        let mut p = Protected::new(&globs)?;
        p.modules = inputs.modules;
        Ok(p)
    }

    /// The default set plus the plan's `protected` globs.
    pub fn new(extra_globs: &[String]) -> Result<Self, WorkspaceError> {
        let mut builder = GlobSetBuilder::new();
        for pat in DEFAULT_PROTECTED
            .iter()
            .copied()
            .chain(extra_globs.iter().map(String::as_str))
        {
            let glob = GlobBuilder::new(pat)
                .literal_separator(true)
                .build()
                .map_err(|e| WorkspaceError::UnsafePath {
                    path: pat.to_owned(),
                    reason: format!("invalid protected glob: {e}"),
                })?;
            builder.add(glob);
        }
        let set = builder.build().map_err(|e| WorkspaceError::UnsafePath {
            path: String::new(),
            reason: format!("invalid protected globs: {e}"),
        })?;
        Ok(Protected {
            set,
            modules: BTreeSet::new(),
        })
    }

    pub fn is_protected(&self, rel_path: &str) -> bool {
        self.set.is_match(rel_path)
    }
}

/// How many sourced files are followed, and how deep: a script sourcing
/// itself or a long chain ends there.
const MAX_SOURCED: usize = 64;
const MAX_SOURCE_DEPTH: usize = 4;

/// The files that the scripts named in `scripts` (paths relative to the
/// project root, where checks run) `source` or `.`, read from `base` and
/// followed through what those source in turn. Only literal relative paths
/// count (a lexical reading, like [`check_inputs`]).
fn sourced(base: &Path, scripts: &[String]) -> Vec<String> {
    let mut found: BTreeSet<String> = BTreeSet::new();
    let mut frontier: Vec<String> = scripts.to_vec();
    for _ in 0..MAX_SOURCE_DEPTH {
        let mut next = Vec::new();
        for script in &frontier {
            if script.contains(['*', '?', '[', '{']) {
                continue;
            }
            let Some(text) = read_script(&base.join(script)) else {
                continue;
            };
            for path in sourced_paths(&text) {
                if found.len() < MAX_SOURCED && found.insert(path.clone()) {
                    next.push(path);
                }
            }
        }
        frontier = next;
    }
    found.into_iter().collect()
}

/// A script's text, when it is a regular file of reasonable size (never
/// through a link: the untouched copy holds no link out, but a script is
/// read, not trusted).
fn read_script(path: &Path) -> Option<String> {
    let meta = fs::symlink_metadata(path).ok()?;
    if !meta.is_file() || meta.len() > 1024 * 1024 {
        return None;
    }
    fs::read_to_string(path).ok()
}

/// The relative paths a shell script's lines `source` (`. lib.sh`,
/// `source ./scripts/env.sh`, after `;`/`&&` too).
fn sourced_paths(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("");
        for command in line.split([';', '&', '|']) {
            let mut words = command.split_whitespace();
            if !matches!(words.next(), Some(".") | Some("source")) {
                continue;
            }
            let Some(word) = words.next() else { continue };
            let path = word.trim_matches(|c| c == '"' || c == '\'');
            let literal = !path.is_empty()
                && !path.starts_with('/')
                && !path.contains("..")
                && !path.contains(['$', '`', '*', '?', '[', '{', '~']);
            if literal {
                out.push(path.trim_start_matches("./").to_owned());
            }
        }
    }
    out
}

/// Every entry (files and links) under `root`, `.git` excluded. No
/// `.gitignore` is honoured: an executor could use one to hide a planted
/// `conftest.py`.
pub(crate) fn entries(root: &Path) -> BTreeSet<String> {
    walkdir::WalkDir::new(root)
        .follow_links(false)
        .into_iter()
        .filter_entry(|e| !(e.depth() == 1 && e.file_name() == ".git"))
        .flatten()
        .filter(|e| !e.file_type().is_dir())
        .filter_map(|e| {
            let rel = e.path().strip_prefix(root).ok()?;
            fsutil::rel_string(rel)
        })
        .collect()
}

fn same_file(a: &Path, b: &Path) -> bool {
    let (Ok(ma), Ok(mb)) = (fs::symlink_metadata(a), fs::symlink_metadata(b)) else {
        return false;
    };
    if ma.file_type().is_symlink() || mb.file_type().is_symlink() {
        return ma.file_type().is_symlink()
            && mb.file_type().is_symlink()
            && fs::read_link(a).ok() == fs::read_link(b).ok();
    }
    if (ma.permissions().mode() & 0o777) != (mb.permissions().mode() & 0o777) {
        return false;
    }
    match (fsutil::hash_file(a), fsutil::hash_file(b)) {
        (Ok((ha, _)), Ok((hb, _))) => ha == hb,
        _ => false,
    }
}

/// Makes every protected file in `verify_copy` identical to `base_copy`:
/// edited or deleted ones restored, added ones removed. Returns the paths it
/// touched (sorted) — the diff card flags them and the verifier runs on the
/// restored tree.
pub fn restore(
    base_copy: &Path,
    verify_copy: &Path,
    protected: &Protected,
) -> Result<Vec<String>, WorkspaceError> {
    let base_all = entries(base_copy);
    let verify_all = entries(verify_copy);
    restore_walked(base_copy, verify_copy, &base_all, &verify_all, protected)
}

/// [`restore`] over trees already walked (`base_all`, `verify_all`).
fn restore_walked(
    base_copy: &Path,
    verify_copy: &Path,
    base_all: &BTreeSet<String>,
    verify_all: &BTreeSet<String>,
    protected: &Protected,
) -> Result<Vec<String>, WorkspaceError> {
    let protected_of = |all: &BTreeSet<String>| -> BTreeSet<String> {
        all.iter()
            .filter(|r| protected.is_protected(r))
            .cloned()
            .collect()
    };
    let base = protected_of(base_all);
    let verify = protected_of(verify_all);
    let mut restored = Vec::new();
    for rel in verify.difference(&base) {
        fsutil::remove_entry(&verify_copy.join(rel))
            .map_err(|e| WorkspaceError::io(format!("remove protected {rel}"), e))?;
        restored.push(rel.clone());
    }
    for rel in &base {
        let from = base_copy.join(rel);
        let to = verify_copy.join(rel);
        // A parent replaced by a symlink or file would make the write leave
        // the copy: clear it first.
        if let Err(reason) = fsutil::parents_state(verify_copy, rel) {
            tracing::info!(path = %rel, %reason, "protected file's parent replaced; cleared");
            clear_bad_parents(verify_copy, rel)?;
        } else if same_file(&from, &to) {
            continue;
        }
        copy_exact(&from, &to, verify_copy, rel)?;
        restored.push(rel.clone());
    }
    for rel in added_shadows(base_all, verify_all, protected) {
        fsutil::remove_entry(&verify_copy.join(&rel))
            .map_err(|e| WorkspaceError::io(format!("remove shadowing {rel}"), e))?;
        restored.push(rel);
    }
    restored.sort();
    restored.dedup();
    Ok(restored)
}

/// Removes from `verify_copy` the compiled Python (`__pycache__/`, `.pyc`)
/// that differs from `base_copy`'s: with an unchecked-hash `.pyc` beside
/// the untouched source, Python runs the bytecode, and a check passed while
/// the source was still wrong. Done even where the plan may edit the
/// checks' files (bytecode is never applied either). Returns the removed
/// paths.
pub fn drop_compiled(base_copy: &Path, verify_copy: &Path) -> Result<Vec<String>, WorkspaceError> {
    drop_compiled_walked(
        base_copy,
        verify_copy,
        &entries(base_copy),
        &entries(verify_copy),
    )
}

/// [`drop_compiled`] over trees already walked; an entry gone since the
/// walk ([`restore`] removed it) is skipped.
fn drop_compiled_walked(
    base_copy: &Path,
    verify_copy: &Path,
    base_all: &BTreeSet<String>,
    verify_all: &BTreeSet<String>,
) -> Result<Vec<String>, WorkspaceError> {
    let mut removed = Vec::new();
    for rel in verify_all
        .iter()
        .filter(|r| crate::shadow::is_compiled_python(r))
    {
        let path = verify_copy.join(rel);
        let unchanged = base_all.contains(rel) && same_file(&base_copy.join(rel), &path);
        if unchanged || fs::symlink_metadata(&path).is_err() {
            continue;
        }
        fsutil::remove_entry(&path)
            .map_err(|e| WorkspaceError::io(format!("remove compiled {rel}"), e))?;
        removed.push(rel.clone());
    }
    Ok(removed)
}

/// Readies a verification copy for the checks, walking each tree once:
/// [`restore`] with `protected` (`None` where the plan may edit the checks'
/// files), then [`drop_compiled`] in every case. Returns every path it
/// removed or restored, sorted.
pub fn prepare_for_checks(
    base_copy: &Path,
    verify_copy: &Path,
    protected: Option<&Protected>,
) -> Result<Vec<String>, WorkspaceError> {
    let base_all = entries(base_copy);
    let verify_all = entries(verify_copy);
    let mut touched = match protected {
        Some(p) => restore_walked(base_copy, verify_copy, &base_all, &verify_all, p)?,
        None => Vec::new(),
    };
    touched.extend(drop_compiled_walked(
        base_copy,
        verify_copy,
        &base_all,
        &verify_all,
    )?);
    touched.sort();
    touched.dedup();
    Ok(touched)
}

/// New entries of the verification copy that shadow a module the checks
/// import, and every new file of a shadowing package (`unittest/__init__.py`
/// takes its `__main__.py` along).
fn added_shadows(
    base_all: &BTreeSet<String>,
    verify_all: &BTreeSet<String>,
    protected: &Protected,
) -> Vec<String> {
    let added: Vec<&String> = verify_all.difference(base_all).collect();
    let base_has = |f: &str| base_all.contains(f);
    let mut packages = Vec::new();
    let mut out = BTreeSet::new();
    for rel in &added {
        if protected.shadows(rel, base_has) {
            if let Some(pkg) = rel
                .strip_suffix("/__init__.py")
                .or_else(|| rel.strip_suffix("/__init__.pyc"))
            {
                packages.push(format!("{pkg}/"));
            }
            out.insert((*rel).clone());
        }
    }
    out.extend(
        added
            .into_iter()
            .filter(|r| packages.iter().any(|p| r.starts_with(p.as_str())))
            .cloned(),
    );
    out.into_iter().collect()
}

fn clear_bad_parents(root: &Path, rel: &str) -> Result<(), WorkspaceError> {
    let mut cur = root.to_path_buf();
    let parts: Vec<&str> = rel.split('/').collect();
    for part in &parts[..parts.len().saturating_sub(1)] {
        cur.push(part);
        match fs::symlink_metadata(&cur) {
            Ok(m) if m.is_dir() && !m.file_type().is_symlink() => {}
            Ok(_) => {
                fs::remove_file(&cur)
                    .map_err(|e| WorkspaceError::io(format!("clear {}", cur.display()), e))?;
                return Ok(());
            }
            Err(_) => return Ok(()),
        }
    }
    Ok(())
}

fn copy_exact(from: &Path, to: &Path, root: &Path, rel: &str) -> Result<(), WorkspaceError> {
    let err = |e| WorkspaceError::io(format!("restore protected {rel}"), e);
    fsutil::ensure_parents(root, rel, 0o755).map_err(err)?;
    fsutil::remove_entry(to).map_err(err)?;
    let meta = fs::symlink_metadata(from).map_err(err)?;
    if meta.file_type().is_symlink() {
        let link = fs::read_link(from).map_err(err)?;
        return std::os::unix::fs::symlink(link, to).map_err(err);
    }
    let mut src = fsutil::open_regular(from).map_err(err)?;
    let mut dst = fsutil::create_new(to, 0o600).map_err(err)?;
    fsutil::copy_hashed(&mut src, &mut dst).map_err(err)?;
    dst.set_permissions(fs::Permissions::from_mode(
        meta.permissions().mode() & 0o777,
    ))
    .map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_check_command_runs_is_protected() {
        let inputs = check_inputs([
            "python3 -m unittest discover -s tests -t .",
            "cd src && /usr/bin/python3.12 -W ignore -mpytest.main -q",
            "python3 tools/lint.py -m notamodule",
            "python -c 'import x' -m nope",
            "make -C . test; npm test",
            "bash -e run_tests.sh && ./ci/check.sh",
            "cargo test",
        ]);
        assert_eq!(
            inputs.globs,
            [
                "**/*.mk",
                "GNUmakefile",
                "Makefile",
                "ci/check.sh",
                "makefile",
                "package.json",
                "run_tests.sh",
                "tools/lint.py",
            ]
        );
        assert_eq!(
            inputs.modules,
            ["pytest", "unittest"]
                .map(String::from)
                .into_iter()
                .collect()
        );
        let p = Protected::new(&inputs.globs).unwrap();
        for yes in ["Makefile", "package.json", "run_tests.sh", "tools/lint.py"] {
            assert!(p.is_protected(yes), "{yes}");
        }
        // Anchored at the root where checks run; the project's own modules
        // are not protected (a `python -m myapp.check` verifies the work's
        // changes to `myapp`).
        for no in ["web/package.json", "app.py", "unittest/__init__.py"] {
            assert!(!p.is_protected(no), "{no}");
        }
    }

    #[test]
    fn default_set() {
        let p = Protected::new(&["src/checks/*.rs".to_owned()]).unwrap();
        for yes in [
            "test_x.py",
            "pkg/test_y.py",
            "pkg/y_test.py",
            "tests/helpers.py",
            "a/tests/data/x.json",
            "conftest.py",
            "deep/er/conftest.py",
            "pyproject.toml",
            ".github/workflows/ci.yml",
            "ruff.toml",
            ".ruff.toml",
            "src/checks/a.rs",
        ] {
            assert!(p.is_protected(yes), "{yes}");
        }
        for no in [
            "src/app.py",
            "testing.py",
            "src/checks/deep/a.rs",
            "x/.github/y",
        ] {
            assert!(!p.is_protected(no), "{no}");
        }
    }
}
