//! Code under test that reaches into the test runner. The checks' own files
//! are restored from the untouched copy before they run (`protect`), but a
//! module the checks import is the executor's to change: a `calc/__init__.py`
//! that patches `_pytest` (or exits with `os._exit(0)` when imported) made
//! pytest report success over unfixed code. A change that *adds* such a
//! reach to a Python file the checks may import fails the checks instead,
//! naming the file, so a second attempt can do without it.
//!
//! This is a plain-text screen: it catches the direct forms (an import, the
//! module named in a string, the call); code that spells the name in pieces
//! passes it, and the diff on the apply card stays the owner's check.

use std::fs;
use std::path::Path;

/// What reaches into the runner, and how it is named to the owner.
const SIGNALS: [(&str, &str); 4] = [
    ("_pytest", "reaches into pytest's internals (`_pytest`)"),
    ("pytest", "loads pytest"),
    ("unittest", "loads unittest"),
    ("os._exit", "can end the test run early (`os._exit`)"),
];

/// Files larger than this are not read (source files are far smaller).
const MAX_BYTES: u64 = 2 * 1024 * 1024;

/// A Python file of the result that reaches into the test runner more than
/// the untouched copy's version of it does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reach {
    pub path: String,
    pub what: &'static str,
}

impl std::fmt::Display for Reach {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.path, self.what)
    }
}

/// How often each of [`SIGNALS`] occurs in `text`'s code lines (a line
/// that is only a comment does not count). `pytest` counts only as an
/// import or a quoted name, so a word in a docstring does not.
pub fn counts(text: &str) -> [usize; 4] {
    let mut out = [0; 4];
    for line in text.lines().map(str::trim_start) {
        if line.starts_with('#') {
            continue;
        }
        out[0] += line.matches("_pytest").count();
        out[1] += module_uses(line, "pytest");
        out[2] += module_uses(line, "unittest");
        out[3] += line.matches("os._exit").count();
    }
    out
}

/// `import m`, `from m`, `"m"` / `'m'` (importlib, `__import__`).
fn module_uses(line: &str, module: &str) -> usize {
    let import = line
        .split(';')
        .map(str::trim)
        .filter(|stmt| {
            let named = |rest: &str| {
                rest.split(|c: char| c == ',' || c == '.' || c.is_whitespace())
                    .any(|m| m == module)
            };
            stmt.strip_prefix("import ").is_some_and(named)
                || stmt
                    .strip_prefix("from ")
                    .and_then(|r| r.split_whitespace().next())
                    .is_some_and(|m| m == module || m.starts_with(&format!("{module}.")))
        })
        .count();
    import
        + line.matches(&format!("\"{module}\"")).count()
        + line.matches(&format!("'{module}'")).count()
}

/// Every Python file of `result` (a verification copy, the checks' files
/// already restored) that reaches into the test runner more than its
/// version in `base` (the untouched copy) does — new files count in full.
pub fn into_test_runner(base: &Path, result: &Path) -> Vec<Reach> {
    let read = |p: &Path| -> Option<String> {
        let meta = fs::symlink_metadata(p).ok()?;
        if !meta.is_file() || meta.len() > MAX_BYTES {
            return None;
        }
        fs::read(p)
            .ok()
            .map(|b| String::from_utf8_lossy(&b).into_owned())
    };
    let mut out = Vec::new();
    let files = crate::protect::entries(result);
    for rel in files.iter().filter(|r| r.ends_with(".py")) {
        let Some(now) = read(&result.join(rel)) else {
            continue;
        };
        let before = read(&base.join(rel)).map(|t| counts(&t)).unwrap_or([0; 4]);
        let after = counts(&now);
        // `_pytest` also matches inside `import _pytest`; one name per file.
        if let Some(i) = (0..SIGNALS.len()).find(|&i| after[i] > before[i]) {
            out.push(Reach {
                path: rel.clone(),
                what: SIGNALS[i].1,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_direct_forms_are_counted_and_prose_is_not() {
        let cheat = "import _pytest.assertion\nimport os\nos._exit(0)\n";
        assert_eq!(counts(cheat), [1, 0, 0, 1]);
        assert_eq!(counts("import pytest, sys\n"), [0, 1, 0, 0]);
        assert_eq!(counts("from pytest import approx\n"), [0, 1, 0, 0]);
        assert_eq!(counts("from unittest.mock import patch\n"), [0, 0, 1, 0]);
        assert_eq!(
            counts("m = importlib.import_module('pytest')\n"),
            [0, 1, 0, 0]
        );
        assert_eq!(counts("__import__(\"unittest\")\n"), [0, 0, 1, 0]);
        // Prose, comments and other names are not.
        for fine in [
            "# import pytest\n",
            "\"\"\"Run the tests with pytest.\"\"\"\n",
            "import pytest_cov_helper\n",
            "from mypytest import x\n",
            "x = 1\n",
        ] {
            assert_eq!(counts(fine), [0; 4], "{fine}");
        }
    }

    #[test]
    fn only_what_the_change_adds_is_named() {
        let base = tempfile::tempdir().unwrap();
        let result = tempfile::tempdir().unwrap();
        let write = |root: &Path, rel: &str, text: &str| {
            let p = root.join(rel);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(p, text).unwrap();
        };
        // The project was a pytest plugin before: that is not the change's.
        write(base.path(), "plugin.py", "import pytest\n");
        write(
            result.path(),
            "plugin.py",
            "import pytest\n\ndef extra():\n    pass\n",
        );
        write(
            base.path(),
            "calc/__init__.py",
            "def add(a, b):\n    return a - b\n",
        );
        write(
            result.path(),
            "calc/__init__.py",
            "import _pytest.runner\n_pytest.runner.x = 1\ndef add(a, b):\n    return a - b\n",
        );
        write(result.path(), "calc/quit.py", "import os\nos._exit(0)\n");
        write(result.path(), "notes.txt", "import _pytest\n");
        let found = into_test_runner(base.path(), result.path());
        let shown: Vec<String> = found.iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            vec![
                "calc/__init__.py reaches into pytest's internals (`_pytest`)",
                "calc/quit.py can end the test run early (`os._exit`)",
            ]
        );
    }
}
