//! Activity sentences for memory: the model's memory changes (refused or
//! applied) and the owner's own memory commands (forget, export, import,
//! consolidate, promotion cards). Audit data carries ids and counts; a
//! memory's text is never in it.

use silas_core::model::JsonObject;

use super::{count, s};

/// `(kind, sentence)` for a memory event, or `None` for another event.
pub(super) fn describe(event: &str, data: &JsonObject) -> Option<(&'static str, String)> {
    let plural = super::plural;
    Some(match event {
        "memory_op_blocked" => ("security", "Blocked a memory change".to_string()),
        "memory_op_refused" => (
            "security",
            match s(data, "reason") {
                Some("too_long") => "Refused to keep a memory the size of a page".to_string(),
                Some("not_found") => {
                    "Refused a change to a memory that is not this conversation's".to_string()
                }
                Some("not_supported") => "Did not link memories (not supported)".to_string(),
                _ => "Refused a change to a protected (constitutional) memory".to_string(),
            },
        ),
        "memory_op_applied" => ("system", {
            let from = match s(data, "taint") {
                Some("owner") => "from you",
                Some("auth") => "from a verified sender",
                _ => "from untrusted input",
            };
            let whose = match s(data, "scope_id") {
                Some("owner") | None => String::new(),
                Some(scope) => format!(" in conversation {scope}"),
            };
            match s(data, "op") {
                Some("store") => format!(
                    "Remembered a {} {from}{whose}",
                    s(data, "memory_type").unwrap_or("memory")
                ),
                Some("delete") => format!("Forgot a memory {from}{whose}"),
                _ => format!("Changed a memory {from}{whose}"),
            }
        }),
        "memory_forgotten" => {
            let turns = count(data, "turns");
            (
                "system",
                format!(
                    "Forgot {}{} at your request",
                    match count(data, "count") {
                        1 => "1 memory".to_string(),
                        count => format!("{count} memories"),
                    },
                    if turns > 0 {
                        format!(" and {}", plural(turns, "conversation turn"))
                    } else {
                        String::new()
                    }
                ),
            )
        }
        "memory_exported" => (
            "system",
            format!(
                "Exported {}",
                plural(count(data, "records"), "memory record")
            ),
        ),
        "memory_imported" => (
            "system",
            format!(
                "Imported {} ({})",
                plural(count(data, "records"), "memory record"),
                s(data, "mode").unwrap_or("merge")
            ),
        ),
        "memory_consolidated" => (
            "system",
            format!(
                "Consolidated memories: {} merged, {} pruned",
                count(data, "merged"),
                count(data, "pruned")
            ),
        ),
        "memory_promotion" => (
            "approval",
            match s(data, "outcome") {
                Some("promoted") => "You made a memory part of your profile",
                Some("declined") => "You kept a memory out of your profile",
                Some("changed") => "A memory changed before you answered; it was not promoted",
                _ => "A memory was not promoted (the card was not answered)",
            }
            .to_string(),
        ),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    #[test]
    fn the_owners_memory_commands_read_with_their_counts() {
        let Value::Object(d) = json!({"count": 3, "turns": 1, "records": 1, "mode": "replace",
                                      "merged": 2, "pruned": 0, "outcome": "declined"})
        else {
            unreachable!()
        };
        let text = |e: &str| describe(e, &d).map(|(_, t)| t).unwrap_or_default();
        assert_eq!(
            text("memory_forgotten"),
            "Forgot 3 memories and 1 conversation turn at your request"
        );
        assert_eq!(
            text("memory_imported"),
            "Imported 1 memory record (replace)"
        );
        assert_eq!(
            text("memory_consolidated"),
            "Consolidated memories: 2 merged, 0 pruned"
        );
        assert_eq!(
            text("memory_promotion"),
            "You kept a memory out of your profile"
        );
        assert_eq!(describe("memory_search", &d), None);
    }
}
