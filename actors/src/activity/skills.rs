//! Activity sentences for the skill install flow and skill use (issue #17).
//! Audit data of these events names the skill, its content hash and rules,
//! never a script's output or a credential value.

use silas_core::model::JsonObject;

use super::s;

fn short(hash: Option<&str>) -> String {
    hash.map(|h| h.chars().take(12).collect::<String>())
        .unwrap_or_else(|| "?".into())
}

/// "skill 'a'" / "skills 'a', 'b'" from a list of names under `key`.
fn names(data: &JsonObject, key: &str, one: &str) -> String {
    let list: Vec<String> = data
        .get(key)
        .and_then(serde_json::Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(serde_json::Value::as_str)
                .map(|n| format!("'{n}'"))
                .collect()
        })
        .unwrap_or_default();
    match list.len() {
        0 => format!("no {one}"),
        1 => format!("{one} {}", list[0]),
        _ => format!("{one}s {}", list.join(", ")),
    }
}

/// `(kind, sentence)` for a skill event, or `None` for another event.
pub(super) fn describe(event: &str, data: &JsonObject) -> Option<(&'static str, String)> {
    let skill = s(data, "skill").unwrap_or("a skill");
    let hash = short(s(data, "content_hash"));
    Some(match event {
        "skill_install_offered" => (
            "approval",
            format!(
                "Skill '{skill}' passed validation and waits for your install approval (hash {hash})"
            ),
        ),
        "skill_install_refused" => (
            "security",
            format!(
                "Refused to offer skill '{skill}' for install: {}",
                s(data, "reason").unwrap_or("its validation report has errors")
            ),
        ),
        "skill_install_declined" => (
            "approval",
            format!("You declined skill '{skill}' — it is not installed"),
        ),
        "skill_installed" => (
            "approval",
            format!("Installed skill '{skill}' (hash {hash}) after its dry run passed"),
        ),
        "skill_dry_run_failed" => (
            "security",
            format!(
                "Did not install skill '{skill}': the dry run of {} failed",
                s(data, "script").unwrap_or("a script")
            ),
        ),
        "skill_use_refused" => (
            "security",
            format!(
                "Refused to use skill '{skill}': {}",
                s(data, "reason").unwrap_or("it is not installed at its current content")
            ),
        ),
        "skill_script_run" => (
            "work",
            format!(
                "Ran {} of skill '{skill}' (hash {hash})",
                s(data, "script").unwrap_or("a script")
            ),
        ),
        "skill_imported" => (
            "system",
            format!(
                "Imported skill '{skill}' from another format; it waits for your install approval"
            ),
        ),
        "skill_removed" => ("system", format!("Removed skill '{skill}'")),
        "skill_broken" => (
            "security",
            format!(
                "Skill '{skill}' no longer passes validation ({}) and is not offered",
                s(data, "rule").unwrap_or("a rule")
            ),
        ),
        "skill_bound_refused" => (
            "security",
            format!(
                "Refused to use skill '{skill}': it changed since the plan using it was approved"
            ),
        ),
        "skill_egress_refused" => (
            "security",
            format!("Skill '{skill}' declares hosts it may not reach; they were left out"),
        ),
        "skill_decline_cleared" => (
            "system",
            format!("Skill '{skill}' may be offered for install again (you had declined it)"),
        ),
        // A task that writes skills: they go to the install cards, never
        // straight in.
        "skill_produced" => (
            "work",
            format!(
                "A task produced {} for your install approval",
                names(data, "staged", "skill")
            ),
        ),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_skill_event_has_a_sentence_naming_the_skill() {
        let serde_json::Value::Object(d) = json!({"skill": "count-lines", "content_hash": "0123456789abcdef", "script": "scripts/count.py",
                                               "staged": ["count-lines"]})
        else {
            unreachable!()
        };
        for (event, _) in super::super::KNOWN_EVENTS
            .iter()
            .filter(|(e, t)| e.starts_with("skill_") && *t == super::super::Treatment::Shown)
        {
            let (_, text) = describe(event, &d).unwrap_or_else(|| panic!("{event}"));
            assert!(text.contains("count-lines"), "{event}: {text}");
        }
        let item = super::super::describe(1, "t", "skill_installed", &d, &|_| None).unwrap();
        assert_eq!(item.kind, "approval");
        assert!(item.text.contains("0123456789ab"), "{}", item.text);
    }
}
