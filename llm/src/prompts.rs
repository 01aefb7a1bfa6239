//! System prompts (§7) as versioned files under `llm/prompts/`, embedded at
//! build time and rendered from the context manager's output.
//!
//! Each file starts with `<!-- version: N -->`; [`prompt_version`] reads it so
//! audit records can name the exact prompt used. Placeholders are
//! `{{name}}`; rendering is a single pass, so text substituted into a prompt
//! (user content, memory) can never introduce further placeholders.

use std::sync::Arc;

pub const CONSTITUTION: &str = include_str!("../prompts/constitution.md");
pub const PROXY: &str = include_str!("../prompts/proxy.md");
/// The proxy's follow-up when a direct route came without its reply
/// ([`crate::route`]).
pub const REPLY: &str = include_str!("../prompts/reply.md");
pub const PLANNER: &str = include_str!("../prompts/planner.md");
pub const EXECUTOR: &str = include_str!("../prompts/executor.md");
pub const SCORER: &str = include_str!("../prompts/scorer.md");

/// What the context manager hands the prompts: rendered context blocks and
/// the turn's facts. (The context manager itself is another component.)
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RenderedContext {
    /// The rendered zones (chronicle, memory, workspace), in order; shared
    /// with the context manager's cache of rendered blocks.
    pub blocks: Vec<Arc<str>>,
    pub access_level: String,
    /// Names of the tools this agent is offered.
    pub tools: Vec<String>,
    /// Skill metadata lines (`name: description`) or full SKILL.md text.
    pub skills: Vec<String>,
    /// Configured context profile names.
    pub profiles: Vec<String>,
    /// The owner's registered workspaces a plan may name, as `name (mode)`
    /// lines — names only, never paths (issue #15).
    pub workspaces: Vec<String>,
}

/// The `N` of a `<!-- version: N -->` first line.
pub fn prompt_version(template: &str) -> Option<u32> {
    template
        .lines()
        .next()?
        .trim()
        .strip_prefix("<!-- version:")?
        .strip_suffix("-->")?
        .trim()
        .parse()
        .ok()
}

/// Replaces `{{key}}` placeholders in one left-to-right pass; unknown
/// placeholders are left as they are. The version line is dropped.
pub fn render(template: &str, vars: &[(&str, &str)]) -> String {
    let fills: Vec<(&str, Fill<'_>)> = vars.iter().map(|(k, v)| (*k, Fill::Text(v))).collect();
    fill(template, &fills)
}

/// A placeholder's value: text, or blocks joined as they are written — the
/// context is most of a prompt, and joining it first would copy it twice.
enum Fill<'a> {
    Text(&'a str),
    Blocks(&'a [Arc<str>]),
}

/// Between context blocks.
const BLOCK_SEPARATOR: &str = "\n\n";

impl Fill<'_> {
    fn len(&self) -> usize {
        match self {
            Fill::Text(t) => t.len(),
            Fill::Blocks(b) => {
                b.iter().map(|b| b.len()).sum::<usize>()
                    + BLOCK_SEPARATOR.len() * b.len().saturating_sub(1)
            }
        }
    }

    fn write(&self, out: &mut String) {
        match self {
            Fill::Text(t) => out.push_str(t),
            Fill::Blocks(blocks) => {
                for (n, b) in blocks.iter().enumerate() {
                    if n > 0 {
                        out.push_str(BLOCK_SEPARATOR);
                    }
                    out.push_str(b);
                }
            }
        }
    }
}

/// [`render`] with [`Fill`] values.
fn fill(template: &str, vars: &[(&str, Fill<'_>)]) -> String {
    let body = match template.split_once('\n') {
        Some((first, rest)) if first.trim_start().starts_with("<!-- version:") => rest,
        _ => template,
    };
    // Room for every value once: the context block is most of a prompt and
    // would otherwise be copied through a chain of doubling reallocations.
    let values: usize = vars.iter().map(|(_, v)| v.len()).sum();
    let mut out = String::with_capacity(body.len() + values);
    let mut rest = body;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        match after.find("}}") {
            Some(end) => {
                let key = &after[..end];
                match vars.iter().find(|(k, _)| *k == key) {
                    Some((_, v)) => v.write(&mut out),
                    None => {
                        out.push_str("{{");
                        out.push_str(key);
                        out.push_str("}}");
                    }
                }
                rest = &after[end + 2..];
            }
            None => {
                out.push_str(&rest[start..]);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

fn list(items: &[String]) -> String {
    if items.is_empty() {
        "(none)".to_owned()
    } else {
        items.join(", ")
    }
}

fn constitution() -> String {
    render(CONSTITUTION, &[])
}

/// The Proxy's system prompt.
pub fn proxy_system(ctx: &RenderedContext) -> String {
    fill(
        PROXY,
        &[
            ("constitution", Fill::Text(&constitution())),
            ("profiles", Fill::Text(&list(&ctx.profiles))),
            ("access_level", Fill::Text(&ctx.access_level)),
            ("tools", Fill::Text(&list(&ctx.tools))),
            ("skills", Fill::Text(&list(&ctx.skills))),
            ("context", Fill::Blocks(&ctx.blocks)),
        ],
    )
}

/// The proxy's reply prompt: the same constitution and context, asked for
/// the reply alone.
pub fn reply_system(ctx: &RenderedContext) -> String {
    fill(
        REPLY,
        &[
            ("constitution", Fill::Text(&constitution())),
            ("context", Fill::Blocks(&ctx.blocks)),
        ],
    )
}

/// The Planner's system prompt.
pub fn planner_system(ctx: &RenderedContext) -> String {
    fill(
        PLANNER,
        &[
            ("constitution", Fill::Text(&constitution())),
            ("skills", Fill::Text(&ctx.skills.join("\n\n"))),
            ("workspaces", Fill::Text(&list(&ctx.workspaces))),
            ("context", Fill::Blocks(&ctx.blocks)),
        ],
    )
}

/// The Executor's system prompt: the work item's briefing plus its skills.
pub fn executor_system(briefing: &str, skills: &[String]) -> String {
    render(
        EXECUTOR,
        &[("briefing", briefing), ("skills", &skills.join("\n\n"))],
    )
}

/// The scorer prompt (§5.7).
pub fn scorer_prompt(current_goal: &str, recent_turns: &str, blocks: &str) -> String {
    render(
        SCORER,
        &[
            ("current_goal", current_goal),
            ("recent_turns", recent_turns),
            ("blocks", blocks),
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_prompt_is_versioned() {
        for (name, p, v) in [
            ("constitution", CONSTITUTION, 1),
            ("proxy", PROXY, 1),
            ("reply", REPLY, 1),
            // v2: the `workspace` plan field and the registered names.
            ("planner", PLANNER, 2),
            ("executor", EXECUTOR, 1),
            ("scorer", SCORER, 1),
        ] {
            assert_eq!(prompt_version(p), Some(v), "{name}");
        }
    }

    #[test]
    fn render_table() {
        type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a str);
        let table: &[Case] = &[
            ("a {{x}} b", &[("x", "1")], "a 1 b"),
            ("{{x}}{{x}}", &[("x", "ab")], "abab"),
            ("{{unknown}}", &[], "{{unknown}}"),
            ("open {{ only", &[], "open {{ only"),
            // Single pass: substituted text is not re-expanded.
            ("{{x}}", &[("x", "{{y}}"), ("y", "boom")], "{{y}}"),
            ("<!-- version: 3 -->\nbody {{x}}", &[("x", "v")], "body v"),
        ];
        for (tpl, vars, want) in table {
            assert_eq!(render(tpl, vars), *want, "{tpl}");
        }
    }

    /// The context blocks written in place read exactly as joined ones,
    /// and their text is not expanded either.
    #[test]
    fn blocks_fill_as_joined() {
        for blocks in [
            vec![],
            vec!["one".into()],
            vec!["a\n--- end ---".into(), "{{context}}".into(), "".into()],
        ] {
            let blocks: Vec<Arc<str>> = blocks;
            let joined = blocks.join("\n\n");
            let tpl = "<!-- version: 1 -->\n[{{context}}] {{x}}";
            assert_eq!(
                fill(
                    tpl,
                    &[("context", Fill::Blocks(&blocks)), ("x", Fill::Text("y"))]
                ),
                render(tpl, &[("context", &joined), ("x", "y")]),
            );
            assert_eq!(Fill::Blocks(&blocks).len(), joined.len());
        }
    }

    #[test]
    fn prompts_render_context() {
        let ctx = RenderedContext {
            blocks: vec!["[owner] owner: hi".into()],
            access_level: "owner".into(),
            tools: vec!["memory_search".into()],
            skills: vec!["coding: write code".into()],
            profiles: vec!["conversation".into(), "coding".into()],
            workspaces: vec!["site (writable)".into()],
        };
        let p = proxy_system(&ctx);
        assert!(p.contains("# Constitution"));
        assert!(p.contains("[owner] owner: hi"));
        assert!(p.contains("conversation, coding"));
        assert!(p.contains("Access level: owner"));
        assert!(!p.contains("{{"), "{p}");
        let p = reply_system(&ctx);
        assert!(p.contains("# Constitution") && p.contains("[owner] owner: hi"));
        assert!(p.contains("AgentResponse") && !p.contains("{{"), "{p}");
        let p = planner_system(&ctx);
        assert!(p.contains("coding: write code") && !p.contains("{{"));
        assert!(p.contains("Registered workspaces: site (writable)"), "{p}");
        assert!(p.contains("workspace:"), "the plan field is described: {p}");
        let p = executor_system("Create notes.txt", &[]);
        assert!(p.contains("Create notes.txt") && !p.contains("{{"));
        let p = scorer_prompt("goal", "turns", "b1: x");
        assert!(p.starts_with("You are a context relevance scorer"));
        assert!(p.contains("Current goal: goal"));
    }
}
