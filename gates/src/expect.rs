//! The deterministic success predicates of `Expectation` (§3.3), evaluated
//! against a process result. Used by the script provider's `check_expect`;
//! written as a pure function so the verification runner (execution issue)
//! can share the exact semantics.

use std::path::PathBuf;

use regex::Regex;
use silas_core::model::work::Expectation;

/// What a check produced.
#[derive(Clone, Copy, Debug)]
pub struct Observed<'a> {
    pub exit_code: Option<i64>,
    pub output: &'a str,
    /// Directories a `file_exists` path must resolve into.
    pub allowed_dirs: &'a [PathBuf],
}

/// Evaluates the (single) predicate. Returns `(passed, reason)`. An invalid
/// expectation (none or several predicates) fails: verification never
/// passes by accident.
pub fn evaluate(e: &Expectation, o: &Observed<'_>) -> (bool, String) {
    if let Err(err) = e.validate() {
        return (false, format!("invalid expectation: {err}"));
    }
    let out = o.output.trim();
    if let Some(code) = e.exit_code {
        let pass = o.exit_code == Some(code);
        let got = match o.exit_code {
            Some(c) => format!("exit code {c}"),
            None => "no exit code (killed by a signal)".to_owned(),
        };
        return (pass, format!("{got}, expected {code}"));
    }
    if let Some(s) = &e.equals {
        return (out == s.trim(), "output equals".to_owned());
    }
    if let Some(s) = &e.contains {
        return (o.output.contains(s.as_str()), "output contains".to_owned());
    }
    if let Some(p) = &e.regex {
        return match Regex::new(p) {
            Ok(re) => (re.is_match(o.output), "output matches regex".to_owned()),
            Err(err) => (false, format!("bad regex: {err}")),
        };
    }
    if let Some(limit) = e.output_lt {
        return match out.parse::<f64>() {
            Ok(v) if v.is_finite() => (v < limit, format!("output {v} < {limit}")),
            _ => (false, "output is not numeric".to_owned()),
        };
    }
    if let Some(limit) = e.output_gt {
        return match out.parse::<f64>() {
            Ok(v) if v.is_finite() => (v > limit, format!("output {v} > {limit}")),
            _ => (false, "output is not numeric".to_owned()),
        };
    }
    if let Some(p) = &e.file_exists {
        return match crate::predicate::resolve_in_allowed(p, o.allowed_dirs) {
            Ok(real) if real.is_file() => (true, "file exists".to_owned()),
            Ok(_) => (false, "not a regular file".to_owned()),
            Err(reason) => (false, reason.to_owned()),
        };
    }
    if let Some(want) = e.not_empty {
        return (out.is_empty() != want, format!("output not_empty={want}"));
    }
    (false, "no predicate".to_owned())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn ex(v: serde_json::Value) -> Expectation {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn predicate_table() {
        use serde_json::json;
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f.txt"), "x").unwrap();
        let dirs = vec![dir.path().to_path_buf()];
        let obs = |code: Option<i64>, out: &'static str| Observed {
            exit_code: code,
            output: out,
            allowed_dirs: &[],
        };
        let cases: Vec<(Expectation, Observed<'_>, bool)> = vec![
            (ex(json!({"exit_code": 0})), obs(Some(0), ""), true),
            (ex(json!({"exit_code": 0})), obs(Some(1), ""), false),
            (ex(json!({"exit_code": 0})), obs(None, ""), false),
            (ex(json!({"equals": "ok"})), obs(Some(0), "ok\n"), true),
            (ex(json!({"equals": "ok"})), obs(Some(0), "okay"), false),
            (
                ex(json!({"contains": "PASS"})),
                obs(Some(0), "3 PASS"),
                true,
            ),
            (ex(json!({"contains": "PASS"})), obs(Some(0), "fail"), false),
            (
                ex(json!({"regex": "^\\d+ passed"})),
                obs(Some(0), "12 passed"),
                true,
            ),
            (
                ex(json!({"regex": "^\\d+ passed"})),
                obs(Some(0), "none"),
                false,
            ),
            (ex(json!({"regex": "("})), obs(Some(0), "("), false),
            (ex(json!({"output_lt": 250.0})), obs(Some(0), "249.9"), true),
            (ex(json!({"output_lt": 250.0})), obs(Some(0), "250"), false),
            (ex(json!({"output_lt": 250.0})), obs(Some(0), "fast"), false),
            (ex(json!({"output_gt": 0.5})), obs(Some(0), " 0.6 "), true),
            (ex(json!({"output_gt": 0.5})), obs(Some(0), "0.5"), false),
            (ex(json!({"not_empty": true})), obs(Some(0), "x"), true),
            (ex(json!({"not_empty": true})), obs(Some(0), "  \n"), false),
            (ex(json!({"not_empty": false})), obs(Some(0), ""), true),
            (Expectation::default(), obs(Some(0), ""), false),
            (
                Expectation::file_exists("f.txt"),
                Observed {
                    exit_code: Some(0),
                    output: "",
                    allowed_dirs: &dirs,
                },
                true,
            ),
            (
                Expectation::file_exists("missing.txt"),
                Observed {
                    exit_code: Some(0),
                    output: "",
                    allowed_dirs: &dirs,
                },
                false,
            ),
            (
                Expectation::file_exists("/etc/passwd"),
                Observed {
                    exit_code: Some(0),
                    output: "",
                    allowed_dirs: &dirs,
                },
                false,
            ),
        ];
        for (e, o, want) in cases {
            assert_eq!(evaluate(&e, &o).0, want, "{e:?} {:?}", o.output);
        }
    }
}
