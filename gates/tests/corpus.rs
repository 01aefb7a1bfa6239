//! Precision and recall of the guard checks on the labelled corpora in
//! `gates/corpus/{pii,secrets,jailbreak}.jsonl` (each line `{"text", "label",
//! "note"}`), through the same `run_check` the guard gate uses with its
//! default config. Prints the figures (`cargo nextest run -p silas-gates
//! --test corpus --no-capture`) and asserts floors.
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

fn score(check: &str) -> Score {
    let path = format!("{}/corpus/{check}.jsonl", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap();
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
        let row: Value = serde_json::from_str(line).unwrap();
        let label = row["label"].as_bool().unwrap();
        let flagged = run_check(check, row["text"].as_str().unwrap(), &JsonObject::new())
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

fn check(name: &str, min_precision: f64, min_recall: f64) {
    let s = score(name);
    let n = s.tp + s.fp + s.fn_ + s.tn;
    let precision = s.tp as f64 / (s.tp + s.fp).max(1) as f64;
    let recall = s.tp as f64 / (s.tp + s.fn_).max(1) as f64;
    println!(
        "{name}: n={n} tp={} fp={} fn={} tn={} precision={precision:.3} recall={recall:.3}",
        s.tp, s.fp, s.fn_, s.tn
    );
    for e in &s.errors {
        println!("{e}");
    }
    assert!(n >= 40, "{name}: corpus has only {n} lines");
    assert!(
        s.tp + s.fn_ >= 15 && s.tn + s.fp >= 15,
        "{name}: needs a mix of labels"
    );
    assert!(
        precision >= min_precision,
        "{name} precision {precision:.3} < {min_precision}"
    );
    assert!(
        recall >= min_recall,
        "{name} recall {recall:.3} < {min_recall}"
    );
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
