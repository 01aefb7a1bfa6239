//! Skills in a turn (§10.3, §10.5, issue #17): what the Proxy and the
//! Planner are told about installed skills, and binding the skills a plan
//! names to their content hashes before its card is made.
//!
//! * [`metadata_lines`] — `name: description` of every installed, usable
//!   (current hash = approved hash) `auto` skill, in the deterministic
//!   priority order, under `context.skill_metadata_budget_pct` of the total
//!   context; what does not fit is left out lowest priority first. The full
//!   instructions are for the executor of a work item that names the skill.
//! * [`bind`] — a parsed plan that names skills gets `skill_hashes` (each
//!   skill's installed content hash), which the plan hash — the one the owner
//!   signs — covers. A plan naming a skill that is not installed and usable
//!   gets no card.

use silas_core::config::Config;
use silas_core::model::context::TokenBudget;
use silas_core::model::work::WorkItem;
use silas_skill::loader::Catalog;
use silas_skill::resolver::{bind_plan, priority_order, routing_metadata};

use crate::skills::SkillHost;

/// The §10.3 budget from the configured context size.
pub fn budget(cfg: &Config) -> TokenBudget {
    TokenBudget {
        total: cfg.context.total_tokens,
        skill_metadata_budget_pct: cfg.context.skill_metadata_budget_pct,
        ..TokenBudget::default()
    }
}

/// The routing lines and the names the budget left out.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SkillLines {
    pub lines: Vec<String>,
    pub excluded: Vec<String>,
}

fn usable(host: &SkillHost) -> Result<Catalog, String> {
    let skills = host.usable().map_err(|e| e.to_string())?;
    Ok(Catalog {
        skills,
        broken: Vec::new(),
    })
}

/// See the module docs. A skills directory that cannot be read gives no
/// lines (the turn goes on without skills) and the reason.
pub fn metadata_lines(host: &SkillHost, budget: &TokenBudget) -> Result<SkillLines, String> {
    let catalog = usable(host)?;
    let routed = routing_metadata(&priority_order(&catalog, &[]), budget);
    Ok(SkillLines {
        lines: routed.included.iter().map(|v| v.render()).collect(),
        excluded: routed.excluded,
    })
}

/// See the module docs. `Err` says why the plan cannot be carried out.
pub fn bind(host: Option<&SkillHost>, work: &mut WorkItem) -> Result<(), String> {
    if work.skills.is_empty() {
        work.skill_hashes = None;
        return Ok(());
    }
    let Some(host) = host else {
        return Err("skills cannot be used here".into());
    };
    let catalog = usable(host)?;
    bind_plan(work, &catalog).map_err(|e| match e {
        silas_skill::SkillError::NotFound(name) => format!(
            "the plan names skill {name:?}, which is not installed (or changed since it was approved)"
        ),
        other => other.to_string(),
    })
}
