//! The text of a work item's one status message (issue #14 item 6): each
//! change edits the same message instead of posting a new one.

/// One verification check as the status shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Check {
    pub name: String,
    pub passed: bool,
}

/// Plain text for a work status: an icon and word for `status` (the
/// WorkExecutor's snake_case status), the summary, and the checks.
pub fn work_status_text(status: &str, summary: &str, checks: &[Check]) -> String {
    let (icon, word) = match status {
        "running" => ("⏳", "Running"),
        "done" => ("✅", "Done"),
        "verification_failed" => ("⚠️", "Checks failed"),
        "failed" => ("❌", "Failed"),
        "stuck" => ("🛑", "Stuck"),
        "blocked" => ("⏸", "Waiting for you"),
        _ => ("•", "Update"),
    };
    let mut out = format!("{icon} {word}");
    let summary = summary.trim();
    if !summary.is_empty() {
        out.push_str(": ");
        out.push_str(summary);
    }
    if !checks.is_empty() {
        let passed = checks.iter().filter(|c| c.passed).count();
        out.push_str(&format!("\nChecks: {passed}/{} passed", checks.len()));
        for c in checks {
            out.push_str(&format!(
                "\n{} {}",
                if c.passed { "✔" } else { "✘" },
                c.name
            ));
        }
    }
    out
}

/// Whether `status` ends the work item's run (the next status, if any, is a
/// new message).
pub fn is_final(status: &str) -> bool {
    matches!(status, "done" | "failed" | "verification_failed" | "stuck")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_read_as_words_with_their_checks() {
        assert_eq!(
            work_status_text("running", "Fix the login bug", &[]),
            "⏳ Running: Fix the login bug"
        );
        let checks = [
            Check {
                name: "tests".into(),
                passed: true,
            },
            Check {
                name: "lint".into(),
                passed: false,
            },
        ];
        let t = work_status_text("verification_failed", "Fix", &checks);
        assert!(t.starts_with("⚠️ Checks failed: Fix"), "{t}");
        assert!(t.contains("Checks: 1/2 passed\n✔ tests\n✘ lint"), "{t}");
        assert_eq!(work_status_text("done", " ", &[]), "✅ Done");
        assert!(work_status_text("weird", "x", &[]).starts_with("• Update"));
    }

    #[test]
    fn only_ends_of_a_run_are_final() {
        for s in ["done", "failed", "verification_failed", "stuck"] {
            assert!(is_final(s), "{s}");
        }
        for s in ["running", "blocked", "other"] {
            assert!(!is_final(s), "{s}");
        }
    }
}
