//! Minimal plan parser (§7.2 `plan_parser.parse`): YAML front matter between
//! `---` lines becomes the work item's fields, the Markdown after it its
//! `body`. Validation is the core model's (`WorkItem` deserialises through
//! its validators). A full parser with the §7.2 diagnostics is later work.

use serde_json::Value;
use silas_core::model::gates::Gate;
use silas_core::model::work::WorkItem;
use silas_storage::{Store, StoreError};

use crate::turn::OWNER_SCOPE;

/// The scope a stored item belongs to: items recorded before scopes were
/// are the owner's (only the owner could create work then).
pub fn scope_of(item: &WorkItem) -> &str {
    item.scope_id.as_deref().unwrap_or(OWNER_SCOPE)
}

/// The item ids a plan must find in its own scope: `follow_up_of` (whose
/// artifacts `input_artifacts_from` selects), `parent` and `depends_on`.
pub fn referenced_ids(item: &WorkItem) -> Vec<&str> {
    item.follow_up_of
        .iter()
        .chain(item.parent.iter())
        .chain(item.depends_on.iter())
        .map(String::as_str)
        .collect()
}

/// A project's `tasks` (a project runs them) may name items created later,
/// so only the ones that already exist are checked (see [`check_references`]).
fn existing_tasks(item: &WorkItem) -> impl Iterator<Item = &str> {
    item.tasks.iter().map(String::as_str)
}

/// Pure rule: every referenced item must exist and share `item`'s scope.
/// `lookup` answers an id with the referenced item's scope (`None`: no such
/// item). Unknown and foreign references read the same to the caller, so a
/// plan cannot probe another scope's ids.
pub fn check_references(
    item: &WorkItem,
    lookup: impl Fn(&str) -> Result<Option<String>, StoreError>,
) -> Result<Result<(), String>, StoreError> {
    let own = scope_of(item);
    let foreign = |id: &str| {
        format!(
            "work item {:?} refers to {id:?}, which is not work of this conversation",
            item.id
        )
    };
    for id in referenced_ids(item) {
        match lookup(id)? {
            Some(scope) if scope == own => {}
            _ => return Ok(Err(foreign(id))),
        }
    }
    for id in existing_tasks(item) {
        if let Some(scope) = lookup(id)?
            && scope != own
        {
            return Ok(Err(foreign(id)));
        }
    }
    Ok(Ok(()))
}

/// [`check_references`] against the store; a store error refuses too.
pub fn foreign_reference(store: &Store, item: &WorkItem) -> Result<(), String> {
    let items = store.work_items();
    check_references(item, |id| {
        Ok(items.get(id)?.map(|w| scope_of(&w).to_string()))
    })
    .map_err(|e| format!("cannot check what the plan refers to: {e}"))?
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PlanParseError {
    #[error("plan has no YAML front matter")]
    NoFrontMatter,
    #[error("plan front matter is not valid YAML: {0}")]
    Yaml(String),
    #[error("plan is not a valid work item: {0}")]
    Invalid(String),
    #[error(
        "its gate {0:?} would run a command on this machine (provider: script); \
         only gates you configure yourself (gates.system) may do that"
    )]
    ScriptGate(String),
}

/// A work item id fit for terminals, logs and file names: 1–96 ASCII
/// letters, digits, `-`, `_` or `.`, not starting with `.`.
pub fn is_plain_item_id(id: &str) -> bool {
    (1..=96).contains(&id.len())
        && !id.starts_with('.')
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// Why the plan's gates cannot be shown beside the owner's, if they cannot:
/// a name that is not plain ASCII (letters, digits, `_`, `-`, `.`; 1–64),
/// one the owner's gates (`owner`) already use in any case, or one two of
/// the plan's gates share. A lookalike (a Cyrillic letter, an invisible
/// character, padding) would read on the card and in Activity as the
/// owner's own gate.
pub fn gate_name_problem(plan_gates: &[Gate], owner: &[&str]) -> Option<String> {
    let mut seen: Vec<String> = Vec::new();
    for g in plan_gates {
        let name = g.name.as_str();
        let plain = (1..=64).contains(&name.len())
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
        if !plain {
            return Some(format!(
                "its gate name {:?} is not a plain name (ASCII letters, digits, '_', '-', '.')",
                name.escape_default().to_string()
            ));
        }
        if let Some(o) = owner.iter().find(|o| o.eq_ignore_ascii_case(name)) {
            return Some(format!("its gate {name:?} is named like your gate {o:?}"));
        }
        let folded = name.to_ascii_lowercase();
        if seen.contains(&folded) {
            return Some(format!("two of its gates are named {name:?}"));
        }
        seen.push(folded);
    }
    None
}

/// Why a plan's gate could never pass, if one could not
/// ([`Gate::blocks_everything`]): it would block every call after the owner
/// approved the plan.
pub fn gate_subject_problem(plan_gates: &[Gate]) -> Option<String> {
    plan_gates
        .iter()
        .find_map(Gate::blocks_everything)
        .map(|why| format!("its {why}"))
}

/// The shortest interval a plan's `@every` may ask for: a goal runs its
/// checks in a sandbox each time.
pub const MIN_EVERY_SECONDS: u64 = 10;

/// Why a plan's `schedule` cannot be what the card shows and the scheduler
/// runs: unreadable (it was approved, then only logged as "invalid; not
/// scheduled"), a line break that makes the card show more than the
/// schedule, faster than once a minute, or never firing at all.
pub fn schedule_problem(schedule: Option<&str>, now: silas_core::Timestamp) -> Option<String> {
    use crate::scheduler::Trigger;
    let schedule = schedule?;
    if schedule.chars().any(char::is_control) {
        return Some("its schedule has a line break or control character".into());
    }
    let trigger = match Trigger::parse(schedule) {
        Ok(t) => t,
        Err(e) => return Some(format!("its schedule is not valid: {e}")),
    };
    match trigger {
        Trigger::AlwaysOn => None,
        Trigger::Every(d) if d.as_secs() < MIN_EVERY_SECONDS => Some(format!(
            "its schedule {schedule:?} runs more often than once every {MIN_EVERY_SECONDS} s"
        )),
        t => t
            .next_after(&chrono_tz::UTC, now)
            .is_none()
            .then(|| format!("its schedule {schedule:?} never fires")),
    }
}

/// Parses a plan into a work item (`approval_token` is always `None`: the
/// plan format has no token field, §5.1 step 12).
pub fn parse_plan(markdown: &str) -> Result<WorkItem, PlanParseError> {
    let text = markdown.trim_start();
    let rest = text
        .strip_prefix("---")
        .ok_or(PlanParseError::NoFrontMatter)?;
    let (front, body) = rest
        .split_once("\n---")
        .ok_or(PlanParseError::NoFrontMatter)?;
    let body = body.trim_start_matches(['-']).trim_start_matches('\n');
    let mut fields: Value =
        serde_yaml_ng::from_str(front).map_err(|e| PlanParseError::Yaml(e.to_string()))?;
    let obj = fields.as_object_mut().ok_or(PlanParseError::Invalid(
        "front matter must be a mapping".into(),
    ))?;
    obj.insert("body".into(), Value::String(body.trim().to_string()));
    obj.remove("approval_token");
    let item: WorkItem =
        silas_core::strict_json::from_value_at(fields).map_err(PlanParseError::Invalid)?;
    // A script gate runs a host command outside the sandbox; a model must
    // not be able to write one (the owner configures them in gates.system).
    if let Some(g) = item
        .gates
        .iter()
        .find(|g| g.provider == silas_core::model::gates::GateProvider::Script)
    {
        return Err(PlanParseError::ScriptGate(g.name.clone()));
    }
    Ok(item)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_schedule_the_scheduler_would_not_run_as_shown_is_named() {
        let now = silas_core::Timestamp::parse("2026-12-01T08:00:00Z").unwrap();
        for ok in [
            None,
            Some("* * * * *"),
            Some("0 14 * * *"),
            Some("@daily"),
            Some("@every 5m"),
            Some("@every 60s"),
            Some("always_on"),
            Some("0 9 1 * 1"),
        ] {
            assert_eq!(schedule_problem(ok, now), None, "{ok:?}");
        }
        for (bad, says) in [
            ("61 * * * *", "not valid"),
            ("* * * * * *", "not valid"),
            ("@reboot", "not valid"),
            ("*/0 * * * *", "not valid"),
            ("@every 0s", "not valid"),
            ("@every 1s", "more often"),
            ("@every 9s", "more often"),
            ("0 0 31 2 *", "never fires"),
            ("@at 2020-01-01T00:00:00Z", "never fires"),
            ("* * * * *\nrm -rf /", "line break"),
        ] {
            let why = schedule_problem(Some(bad), now).unwrap_or_default();
            assert!(why.contains(says), "{bad:?}: {why:?}");
        }
    }

    #[test]
    fn offline_plan_parses() {
        let v = silas_llm::offline::plan("create a file notes.txt containing hello");
        let md = v["plan_action"]["plan_markdown"].as_str().unwrap();
        let w = parse_plan(md).unwrap();
        assert!(w.id.starts_with("task-offline-"));
        assert!(w.approval_token.is_none());
        assert!(w.body.contains("shell_exec"));
        assert_eq!(w.verify.len(), 2);
    }

    #[test]
    fn plain_item_ids() {
        for ok in ["t1", "task-offline-17", "fix_login.v2", &"x".repeat(96)] {
            assert!(is_plain_item_id(ok), "{ok}");
        }
        for bad in [
            "",
            "ev\nx",
            "ev\u{202e}gnp.exe",
            "ev\u{9b}2J",
            "ev\u{2028}#9999",
            "a b",
            "../x",
            ".hidden",
            &"x".repeat(97),
        ] {
            assert!(!is_plain_item_id(bad), "{bad:?}");
        }
    }

    #[test]
    fn plan_gate_names_are_plain_and_unlike_the_owners() {
        let gate = |name: &str| -> Gate {
            serde_json::from_value(serde_json::json!({
                "name": name, "on": "after_step", "provider": "predicate",
                "check": "approval_always"}))
            .unwrap()
        };
        let owner = ["judge_gate_omega", "input_guard"];
        assert_eq!(
            gate_name_problem(&[gate("mine"), gate("other.v2")], &owner),
            None
        );
        for bad in [
            "judge_gate_omeg\u{430}",
            "judge_gate_omega\u{200b}",
            " judge_gate_omega ",
            "",
            &"x".repeat(65),
        ] {
            let p = gate_name_problem(&[gate(bad)], &owner).unwrap();
            assert!(p.contains("not a plain name"), "{bad:?}: {p}");
        }
        let p = gate_name_problem(&[gate("Judge_Gate_Omega")], &owner).unwrap();
        assert!(
            p.contains("named like your gate \"judge_gate_omega\""),
            "{p}"
        );
        let p = gate_name_problem(&[gate("dupe"), gate("DUPE")], &owner).unwrap();
        assert!(p.contains("two of its gates are named"), "{p}");
    }

    #[test]
    fn a_tool_call_predicate_must_name_its_argument() {
        let gate = |v: serde_json::Value| -> Gate { serde_json::from_value(v).unwrap() };
        let blind = gate(serde_json::json!({"name": "cap", "on": "on_tool_call",
            "type": "numeric_range", "block": {"outside": [0, 10]}}));
        let p = gate_subject_problem(std::slice::from_ref(&blind)).unwrap();
        assert!(p.contains("\"cap\"") && p.contains("extract"), "{p}");
        let ok = [
            gate(
                serde_json::json!({"name": "a", "on": "on_tool_call", "type": "numeric_range",
                "extract": "amount", "block": {"outside": [0, 10]}}),
            ),
            gate(serde_json::json!({"name": "b", "on": "on_tool_call", "type": "approval_always"})),
            gate(serde_json::json!({"name": "c", "on": "on_tool_call",
                "provider": "guardrails_ai", "check": "pii"})),
            gate(
                serde_json::json!({"name": "d", "on": "after_step", "type": "regex",
                "check": "^ok"}),
            ),
        ];
        assert_eq!(gate_subject_problem(&ok), None);
    }

    #[test]
    fn refuses_garbage() {
        assert_eq!(parse_plan("hello"), Err(PlanParseError::NoFrontMatter));
        let scripted = "---\nid: t\ntype: task\ntitle: t\ngates:\n  - {name: g, on: on_tool_call, provider: script, check_command: \"touch /tmp/x\"}\n---\nbody";
        assert_eq!(
            parse_plan(scripted),
            Err(PlanParseError::ScriptGate("g".into()))
        );
        let predicate = scripted.replace(
            "provider: script, check_command: \"touch /tmp/x\"",
            "provider: predicate, check: approval_always",
        );
        assert!(
            parse_plan(&predicate).is_ok(),
            "{:?}",
            parse_plan(&predicate)
        );
        assert!(matches!(
            parse_plan("---\n: : :\n---\nbody"),
            Err(PlanParseError::Yaml(_) | PlanParseError::Invalid(_))
        ));
        assert!(matches!(
            parse_plan("---\ntitle: x\n---\nbody"),
            Err(PlanParseError::Invalid(_))
        ));
    }

    #[test]
    fn a_bad_field_is_named_so_the_model_can_mend_it() {
        let plan = "---\nid: t\ntype: task\ntitle: t\nverify:\n  - {name: a, run: \"true\", expect: {exit_code: 0}}\n  - {name: b, run: \"true\", expect: {exit_code: zero}}\n---\nbody";
        let Err(PlanParseError::Invalid(why)) = parse_plan(plan) else {
            panic!("{:?}", parse_plan(plan));
        };
        assert!(why.starts_with("`verify[1].expect"), "{why}");
        assert!(parse_plan(&plan.replace("zero", "0")).is_ok());
    }
}

#[cfg(test)]
mod reference_tests {
    use super::*;
    use silas_core::model::work::WorkItemType;
    use std::collections::HashMap;

    fn item(scope: Option<&str>) -> WorkItem {
        let mut w = WorkItem::new("t", WorkItemType::Task, "t");
        w.scope_id = scope.map(str::to_string);
        w
    }

    fn run(w: &WorkItem, known: &[(&str, &str)]) -> Result<(), String> {
        let m: HashMap<String, String> = known
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        check_references(w, |id| Ok(m.get(id).cloned())).unwrap()
    }

    #[test]
    fn references_must_share_the_scope() {
        let known = [("mine", "ws-7"), ("owners", OWNER_SCOPE), ("other", "ws-9")];
        let mut w = item(Some("ws-7"));
        assert!(run(&w, &known).is_ok(), "no references");
        for field in 0..3 {
            for (target, ok) in [
                ("mine", true),
                ("owners", false),
                ("other", false),
                ("nope", false),
            ] {
                let mut v = w.clone();
                match field {
                    0 => v.follow_up_of = Some(target.into()),
                    1 => v.parent = Some(target.into()),
                    _ => v.depends_on = vec!["mine".into(), target.into()],
                }
                assert_eq!(run(&v, &known).is_ok(), ok, "field {field} -> {target}");
            }
        }
        // A project may list tasks it has not created yet, never another
        // scope's existing ones.
        let mut p = w.clone();
        p.tasks = vec!["not-yet".into(), "mine".into()];
        assert!(run(&p, &known).is_ok());
        p.tasks.push("owners".into());
        assert!(run(&p, &known).is_err());
        // A legacy item without a scope is the owner's.
        w.scope_id = None;
        w.follow_up_of = Some("owners".into());
        assert!(run(&w, &known).is_ok());
        w.follow_up_of = Some("mine".into());
        assert!(run(&w, &known).is_err());
    }

    #[test]
    fn a_store_error_is_not_a_pass() {
        let mut w = item(Some(OWNER_SCOPE));
        w.follow_up_of = Some("x".into());
        let r = check_references(&w, |_| Err(StoreError::Io("disk".into())));
        assert!(r.is_err());
    }
}
