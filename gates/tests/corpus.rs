//! Precision and recall of the guard checks on the labelled corpora in
//! `gates/corpus/{pii,secrets,jailbreak}.jsonl` (each line `{"text", "label",
//! "note"}`), through the same `run_check` the guard gate uses with its
//! default config. Prints the figures (`cargo nextest run -p silas-gates
//! --test corpus --no-capture`) and asserts floors.
//!
//! The held-out corpora in `gates/corpus/heldout/` (same format, written
//! independently of the detectors; see its README) are scored with the same
//! code and printed separately. Only their structure is asserted (the file
//! loads, every row has a text and a boolean label, both labels present): a
//! floor there would invite tuning the detectors on it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::Value;
use silas_core::model::JsonObject;
use silas_gates::guard::run_check;

struct Score {
    tp: usize,
    fp: usize,
    fn_: usize,
    tn: usize,
    errors: Vec<String>,
}

/// Scores `check` on `corpus/{dir}{check}.jsonl`; `dir` is `""` for the
/// in-sample set and `"heldout/"` for the held-out one.
fn score(dir: &str, check: &str) -> Score {
    let path = format!("{}/corpus/{dir}{check}.jsonl", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut s = Score {
        tp: 0,
        fp: 0,
        fn_: 0,
        tn: 0,
        errors: Vec::new(),
    };
    for (i, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let row: Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("{path} line {}: not JSON: {e}", i + 1));
        let label = row["label"]
            .as_bool()
            .unwrap_or_else(|| panic!("{path} line {}: no boolean label", i + 1));
        let input = row["text"]
            .as_str()
            .unwrap_or_else(|| panic!("{path} line {}: no text", i + 1));
        let flagged = run_check(check, input, &JsonObject::new())
            .unwrap()
            .is_some();
        match (label, flagged) {
            (true, true) => s.tp += 1,
            (false, false) => s.tn += 1,
            (false, true) => {
                s.fp += 1;
                s.errors
                    .push(format!("  FP line {}: {}", i + 1, row["note"]));
            }
            (true, false) => {
                s.fn_ += 1;
                s.errors
                    .push(format!("  FN line {}: {}", i + 1, row["note"]));
            }
        }
    }
    s
}

/// Scores and prints one corpus, asserting its size and label mix; returns
/// (precision, recall).
fn report(set: &str, dir: &str, name: &str, min_lines: usize) -> (f64, f64) {
    let s = score(dir, name);
    let n = s.tp + s.fp + s.fn_ + s.tn;
    let precision = s.tp as f64 / (s.tp + s.fp).max(1) as f64;
    let recall = s.tp as f64 / (s.tp + s.fn_).max(1) as f64;
    let f1 = if precision + recall > 0.0 {
        2.0 * precision * recall / (precision + recall)
    } else {
        0.0
    };
    println!(
        "{set} {name}: n={n} tp={} fp={} fn={} tn={} precision={precision:.3} recall={recall:.3} f1={f1:.3}",
        s.tp, s.fp, s.fn_, s.tn
    );
    for e in &s.errors {
        println!("{e}");
    }
    assert!(n >= min_lines, "{set} {name}: corpus has only {n} lines");
    assert!(
        s.tp + s.fn_ >= 15 && s.tn + s.fp >= 15,
        "{set} {name}: needs a mix of labels"
    );
    (precision, recall)
}

fn check(name: &str, min_precision: f64, min_recall: f64) {
    let (precision, recall) = report("in-sample", "", name, 40);
    assert!(
        precision >= min_precision,
        "{name} precision {precision:.3} < {min_precision}"
    );
    assert!(
        recall >= min_recall,
        "{name} recall {recall:.3} < {min_recall}"
    );
}

/// Held-out figures are printed, never asserted (see the module docs).
fn heldout(name: &str) {
    report("held-out", "heldout/", name, 60);
}

#[test]
fn pii_corpus() {
    check("pii", 0.9, 0.85);
}

#[test]
fn secrets_corpus() {
    check("secrets", 0.9, 0.85);
}

#[test]
fn jailbreak_corpus() {
    check("jailbreak", 0.9, 0.85);
}

#[test]
fn pii_heldout() {
    heldout("pii");
}

#[test]
fn secrets_heldout() {
    heldout("secrets");
}

#[test]
fn jailbreak_heldout() {
    heldout("jailbreak");
}
