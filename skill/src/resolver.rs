//! What each agent layer sees of a skill (§10.3 progressive disclosure),
//! the routing metadata budget, skill inheritance along work items, and
//! binding skill content hashes into a plan (§10.5 hash-binding).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use silas_core::model::context::TokenBudget;
use silas_core::model::work::WorkItem;

use crate::SkillError;
use crate::loader::{Catalog, Skill};
use crate::manifest::Activation;

/// The agent layers of the §10.3 table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AgentLayer {
    Proxy,
    Planner,
    Executor,
    Verification,
}

/// One skill as one layer sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "view", rename_all = "snake_case")]
pub enum SkillView {
    /// Proxy routing: name and description only.
    Metadata { name: String, description: String },
    /// Planner: metadata plus the full SKILL.md body.
    Planning {
        name: String,
        description: String,
        body: String,
    },
    /// Executor: the instructions and the scripts it may run.
    Execution {
        name: String,
        body: String,
        scripts: Vec<String>,
    },
}

impl SkillView {
    /// The text an agent's prompt shows for this view. A skill's own text is
    /// data the owner approved (its hash is bound), framed by its name.
    pub fn render(&self) -> String {
        match self {
            SkillView::Metadata { name, description } => {
                metadata_line(name, description).trim_end().to_string()
            }
            SkillView::Planning {
                name,
                description,
                body,
            } => format!("## Skill `{name}`\n{description}\n\n{}", body.trim()),
            SkillView::Execution {
                name,
                body,
                scripts,
            } => {
                let scripts = if scripts.is_empty() {
                    "none (instructions only)".to_string()
                } else {
                    format!(
                        "{} — run with run_skill_script {{\"skill\": \"{name}\", \"script\": …, \"args\": {{…}}}}",
                        scripts.join(", ")
                    )
                };
                format!("## Skill `{name}`\nScripts: {scripts}\n\n{}", body.trim())
            }
        }
    }
}

/// The view `layer` gets of `skill`, or `None` when it sees nothing.
/// Routing lists only `auto` skills (a `manual` one is brought in by the
/// owner naming it, a `background` one is never invoked); a `background`
/// skill's executor view has no scripts; verification sees no skill.
pub fn view(skill: &Skill, layer: AgentLayer) -> Option<SkillView> {
    let m = &skill.manifest;
    match layer {
        AgentLayer::Proxy => (m.activation == Activation::Auto).then(|| SkillView::Metadata {
            name: skill.name.clone(),
            description: m.description.clone(),
        }),
        AgentLayer::Planner => Some(SkillView::Planning {
            name: skill.name.clone(),
            description: m.description.clone(),
            body: skill.body.clone(),
        }),
        AgentLayer::Executor => Some(SkillView::Execution {
            name: skill.name.clone(),
            body: skill.body.clone(),
            scripts: if m.activation == Activation::Background {
                Vec::new()
            } else {
                skill.scripts().into_iter().map(str::to_string).collect()
            },
        }),
        AgentLayer::Verification => None,
    }
}

/// ~4 characters per token, the same heuristic as the context window.
pub fn estimate_tokens(text: &str) -> u64 {
    (text.chars().count() as u64).div_ceil(4).max(1)
}

/// The line routing renders for one skill (what the budget counts).
pub fn metadata_line(name: &str, description: &str) -> String {
    format!("- {name}: {description}\n")
}

/// The routing metadata after the budget.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoutingMetadata {
    /// Metadata views, highest priority first.
    pub included: Vec<SkillView>,
    /// Names left out, in the order they were dropped (lowest priority first).
    pub excluded: Vec<String>,
    pub budget_tokens: u64,
    pub used_tokens: u64,
}

/// The priority order routing uses: the skills `preferred` names (the work
/// item's, in its order) first, then every other by name. Deterministic:
/// the same catalog and list always give the same order.
pub fn priority_order<'a>(catalog: &'a Catalog, preferred: &[String]) -> Vec<&'a Skill> {
    let mut out: Vec<&Skill> = preferred.iter().filter_map(|n| catalog.get(n)).collect();
    out.dedup_by(|a, b| a.name == b.name);
    let mut rest: Vec<&Skill> = catalog
        .skills
        .iter()
        .filter(|s| !preferred.contains(&s.name))
        .collect();
    rest.sort_by(|a, b| a.name.cmp(&b.name));
    out.extend(rest);
    out
}

/// The Proxy's skill metadata under `skill_metadata_budget_pct` of the
/// total context (§10.3): skills without a Proxy view are not candidates;
/// while the rest exceed the budget the lowest-priority one is dropped.
pub fn routing_metadata(by_priority: &[&Skill], budget: &TokenBudget) -> RoutingMetadata {
    let budget_tokens = (budget.total as f64 * budget.skill_metadata_budget_pct).floor() as u64;
    let mut included: Vec<(SkillView, u64)> = by_priority
        .iter()
        .filter_map(|s| view(s, AgentLayer::Proxy))
        .map(|v| {
            let cost = match &v {
                SkillView::Metadata { name, description } => {
                    estimate_tokens(&metadata_line(name, description))
                }
                _ => 0,
            };
            (v, cost)
        })
        .collect();
    let mut used: u64 = included.iter().map(|(_, c)| c).sum();
    let mut excluded = Vec::new();
    while used > budget_tokens {
        let Some((v, cost)) = included.pop() else {
            break;
        };
        used -= cost;
        if let SkillView::Metadata { name, .. } = v {
            excluded.push(name);
        }
    }
    RoutingMetadata {
        included: included.into_iter().map(|(v, _)| v).collect(),
        excluded,
        budget_tokens,
        used_tokens: used,
    }
}

/// Inheritance (§10.3): a child whose plan names no skills takes its
/// parent's list and the parent's approved hashes for them; a child that
/// names its own keeps them (and is bound on its own, [`bind_plan`]).
pub fn inherit(child: &mut WorkItem, parent: &WorkItem) {
    if !child.skills.is_empty() {
        return;
    }
    child.skills = parent.skills.clone();
    child.skill_hashes = parent.skill_hashes.clone();
}

/// Bind the content hash of every skill the plan names (`None` when it
/// names none, so its plan hash is what it was before skills existed).
/// A skill that is not in the catalog refuses the plan.
pub fn bind_plan(item: &mut WorkItem, catalog: &Catalog) -> Result<(), SkillError> {
    if item.skills.is_empty() {
        item.skill_hashes = None;
        return Ok(());
    }
    let mut bound = BTreeMap::new();
    for name in &item.skills {
        let skill = catalog
            .get(name)
            .ok_or_else(|| SkillError::NotFound(name.clone()))?;
        bound.insert(name.clone(), skill.content_hash.clone());
    }
    item.skill_hashes = Some(bound);
    Ok(())
}

/// Before a skill of an approved plan is used: its current content must be
/// the content the plan bound. A named skill without a binding is refused
/// too (nothing approved its content).
pub fn check_bound(item: &WorkItem, name: &str, current: &Skill) -> Result<(), SkillError> {
    let approved = item
        .skill_hashes
        .as_ref()
        .and_then(|m| m.get(name))
        .cloned()
        .unwrap_or_else(|| "unbound".to_string());
    if approved != current.content_hash || !item.skills.iter().any(|s| s == name) {
        return Err(SkillError::HashMismatch {
            name: name.to_string(),
            approved,
            current: current.content_hash.clone(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loader::SkillLoader;
    use silas_core::model::work::WorkItemType;
    use silas_core::projections::plan_hash;
    use std::fs;
    use std::path::Path;

    fn write(root: &Path, name: &str, activation: &str, desc: &str) {
        let dir = root.join(name);
        fs::create_dir_all(dir.join("scripts")).unwrap();
        fs::write(
            dir.join("SKILL.md"),
            format!(
                "---\nname: {name}\ndescription: {desc}\nactivation: {activation}\n---\n# {name} body\n"
            ),
        )
        .unwrap();
        fs::write(dir.join("scripts/run.py"), "print('x')\n").unwrap();
    }

    fn catalog(root: &Path) -> Catalog {
        SkillLoader::new(root).scan().unwrap()
    }

    #[test]
    fn each_layer_sees_what_the_table_says() {
        let d = tempfile::tempdir().unwrap();
        write(
            d.path(),
            "auto-one",
            "auto",
            "Use when the owner asks for one.",
        );
        write(
            d.path(),
            "bg",
            "background",
            "Use when context about b helps.",
        );
        write(
            d.path(),
            "man",
            "manual",
            "Use only when the owner names it.",
        );
        let cat = catalog(d.path());
        let auto = cat.get("auto-one").unwrap();
        assert_eq!(
            view(auto, AgentLayer::Proxy),
            Some(SkillView::Metadata {
                name: "auto-one".into(),
                description: "Use when the owner asks for one.".into()
            })
        );
        match view(auto, AgentLayer::Planner).unwrap() {
            SkillView::Planning { body, .. } => assert!(body.contains("auto-one body")),
            other => panic!("{other:?}"),
        }
        match view(auto, AgentLayer::Executor).unwrap() {
            SkillView::Execution { scripts, body, .. } => {
                assert_eq!(scripts, ["scripts/run.py"]);
                assert!(body.contains("body"));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(view(auto, AgentLayer::Verification), None);
        // Not routed: manual and background; background never gets scripts.
        assert_eq!(view(cat.get("man").unwrap(), AgentLayer::Proxy), None);
        assert_eq!(view(cat.get("bg").unwrap(), AgentLayer::Proxy), None);
        match view(cat.get("bg").unwrap(), AgentLayer::Executor).unwrap() {
            SkillView::Execution { scripts, .. } => assert!(scripts.is_empty()),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_metadata_budget_drops_the_lowest_priority_first_deterministically() {
        let d = tempfile::tempdir().unwrap();
        // Each line: "- sN: " + 94 chars + "\n" = 101 chars → 26 tokens.
        let desc = format!("Use when {}.", "x".repeat(84));
        for n in ["s1", "s2", "s3", "s4"] {
            write(d.path(), n, "auto", &desc);
        }
        let cat = catalog(d.path());
        let cost = estimate_tokens(&metadata_line("s1", &desc));
        assert_eq!(cost, 26);
        // Room for two and a half lines.
        let budget = TokenBudget {
            total: 100 * (2 * cost + cost / 2),
            skill_metadata_budget_pct: 0.01,
            ..TokenBudget::default()
        };
        let preferred = vec!["s3".to_string()];
        let order = priority_order(&cat, &preferred);
        let names: Vec<&str> = order.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["s3", "s1", "s2", "s4"]);
        let r = routing_metadata(&order, &budget);
        let kept: Vec<String> = r
            .included
            .iter()
            .map(|v| match v {
                SkillView::Metadata { name, .. } => name.clone(),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(kept, ["s3", "s1"]);
        assert_eq!(r.excluded, ["s4", "s2"]);
        assert_eq!(r.used_tokens, 2 * cost);
        assert!(r.used_tokens <= r.budget_tokens);
        // The same input gives the same answer.
        assert_eq!(
            routing_metadata(&priority_order(&cat, &preferred), &budget),
            r
        );
        // The default 2% of 180k fits all four.
        let all = routing_metadata(&order, &TokenBudget::default());
        assert!(all.excluded.is_empty());
        assert_eq!(all.included.len(), 4);
    }

    #[test]
    fn plans_bind_skill_hashes_only_when_they_name_skills() {
        let d = tempfile::tempdir().unwrap();
        write(
            d.path(),
            "ops",
            "auto",
            "Use when the operations queue needs triage.",
        );
        let cat = catalog(d.path());
        let mut plain = WorkItem::new("t1", WorkItemType::Task, "no skills");
        let before = plan_hash(&plain).unwrap();
        bind_plan(&mut plain, &cat).unwrap();
        assert_eq!(plain.skill_hashes, None);
        assert_eq!(
            plan_hash(&plain).unwrap(),
            before,
            "unchanged without skills"
        );

        let mut item = WorkItem::new("t2", WorkItemType::Task, "triage");
        item.skills = vec!["ops".into()];
        bind_plan(&mut item, &cat).unwrap();
        let bound = item.skill_hashes.clone().unwrap();
        assert_eq!(bound["ops"], cat.get("ops").unwrap().content_hash);
        let h1 = plan_hash(&item).unwrap();
        check_bound(&item, "ops", cat.get("ops").unwrap()).unwrap();

        // The skill's script changes: new hash, new plan hash, refused use.
        fs::write(d.path().join("ops/scripts/run.py"), "print('y')\n").unwrap();
        let cat2 = catalog(d.path());
        let err = check_bound(&item, "ops", cat2.get("ops").unwrap()).unwrap_err();
        assert!(matches!(err, SkillError::HashMismatch { .. }));
        assert_eq!(
            silas_core::Coded::code(&err),
            silas_core::ErrorCode::EApprovalHash
        );
        let mut rebound = item.clone();
        bind_plan(&mut rebound, &cat2).unwrap();
        assert_ne!(plan_hash(&rebound).unwrap(), h1);

        // An unknown skill refuses the plan.
        item.skills.push("missing".into());
        assert!(matches!(
            bind_plan(&mut item, &cat),
            Err(SkillError::NotFound(n)) if n == "missing"
        ));
    }

    #[test]
    fn children_inherit_the_parent_skills_unless_they_name_their_own() {
        let mut goal = WorkItem::new("g", WorkItemType::Goal, "triage");
        goal.skills = vec!["ops-triage".into(), "mail".into()];
        goal.skill_hashes = Some(BTreeMap::from([
            ("ops-triage".to_string(), "a".repeat(64)),
            ("mail".to_string(), "b".repeat(64)),
        ]));
        let mut spawned = WorkItem::new("t", WorkItemType::Task, "batch");
        inherit(&mut spawned, &goal);
        assert_eq!(spawned.skills, goal.skills);
        assert_eq!(spawned.skill_hashes, goal.skill_hashes);
        let mut fix = WorkItem::new("f", WorkItemType::Task, "reconnect");
        fix.skills = vec!["ops-triage".into()];
        inherit(&mut fix, &goal);
        assert_eq!(fix.skills, ["ops-triage"]);
        assert_eq!(fix.skill_hashes, None, "bound on its own");
    }
}
