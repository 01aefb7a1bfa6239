//! `SKILL.md`: YAML front matter between `---` lines, then the markdown body
//! (§10.1). The front matter is parsed into typed fields; problems come back
//! with the line of `SKILL.md` they are on, so the validator can name it and
//! the loader can refuse the skill with the same words.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::report::Rule;

/// Every front matter key Silas understands: the §10.1 fields plus the
/// §10.6 connection fields. Anything else is reported, never ignored: a key
/// another platform gives meaning to (`allowed-tools`, `hooks`) must not
/// look accepted when Silas does not enforce it.
pub const KNOWN_KEYS: &[&str] = &[
    "name",
    "description",
    "license",
    "requirements",
    "ui",
    "activation",
    "composes_with",
    "script_args",
    "metadata",
    "type",
    "auth_strategy",
    "initial_permissions",
    "available_permissions",
    "script_permissions",
    "mcp_server",
];

/// `activation` (§10.1): who may bring the skill into play.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Activation {
    /// The Planner may select it (its metadata is in routing).
    #[default]
    Auto,
    /// Only when the owner names it.
    Manual,
    /// Context only: instructions, never invocable scripts.
    Background,
}

/// `type:` — only connection skills (§10.6) say anything.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SkillType {
    Connection,
}

/// `auth_strategy:` of a connection skill (§10.6).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AuthStrategy {
    DeviceCode,
    BrowserRedirect,
    SecureInput,
}

/// `ui:` — metadata for the Review/Activity surfaces.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ui {
    pub display_name: Option<String>,
    /// A path inside the skill (checked like any other reference).
    pub icon: Option<String>,
    pub short_description: Option<String>,
}

/// `requirements:` — what the skill needs from its environment. `env`
/// declares every environment variable a script reads (anything else is
/// refused as undeclared); `network` the hosts it may reach;
/// `credentials` the secret-store refs the script needs, each injected at
/// spawn as the environment variable of the same name (so it also counts as
/// declared) and never shown to the model.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Requirements {
    pub packages: Vec<String>,
    pub network: Vec<String>,
    pub env: Vec<String>,
    pub credentials: Vec<String>,
}

/// The type of one script argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ArgType {
    String,
    Integer,
    Number,
    Boolean,
}

/// One argument of one script (`script_args.<script>.<arg>`), validated at
/// the sandbox boundary before the script runs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArgSchema {
    #[serde(rename = "type")]
    pub kind: ArgType,
    #[serde(default)]
    pub default: Option<Value>,
    #[serde(default)]
    pub max_length: Option<u64>,
    #[serde(default)]
    pub min: Option<f64>,
    #[serde(default)]
    pub max: Option<f64>,
    #[serde(default, rename = "enum")]
    pub choices: Option<Vec<Value>>,
    #[serde(default)]
    pub required: Option<bool>,
    #[serde(default)]
    pub description: Option<String>,
}

/// `mcp_server:` — a stdio Model Context Protocol server the skill ships
/// (beyond the spec, issue #17 item 7). `command` is a file inside the skill
/// folder (`.py` runs under `python3`, `.sh` under `sh`, anything else is
/// executed directly); `args` are passed as argv, never through a shell.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServer {
    pub command: String,
    #[serde(default)]
    pub args: Vec<String>,
}

impl McpServer {
    /// The command as a relative path inside the skill folder, or `None`
    /// when it is absolute or climbs out (`..`).
    pub fn relative_command(&self) -> Option<&std::path::Path> {
        let p = std::path::Path::new(&self.command);
        let inside = !self.command.is_empty()
            && p.components()
                .all(|c| matches!(c, std::path::Component::Normal(_)));
        inside.then_some(p)
    }
}

/// The typed front matter.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub name: String,
    pub description: String,
    #[serde(default)]
    pub license: Option<String>,
    #[serde(default)]
    pub requirements: Requirements,
    #[serde(default)]
    pub ui: Option<Ui>,
    #[serde(default)]
    pub activation: Activation,
    #[serde(default)]
    pub composes_with: Vec<String>,
    /// Script path (relative, `scripts/…`) → argument name → schema.
    #[serde(default)]
    pub script_args: BTreeMap<String, BTreeMap<String, ArgSchema>>,
    #[serde(default)]
    pub metadata: BTreeMap<String, Value>,
    #[serde(default, rename = "type")]
    pub kind: Option<SkillType>,
    #[serde(default)]
    pub auth_strategy: Option<AuthStrategy>,
    #[serde(default)]
    pub initial_permissions: Vec<String>,
    #[serde(default)]
    pub available_permissions: Vec<String>,
    /// A connection skill's script (`scripts/…`) → the service permissions
    /// it needs (§5.10.2 "declared by the skill script"): a run whose
    /// connection was not granted them pauses for the owner's escalation
    /// card first.
    #[serde(default)]
    pub script_permissions: BTreeMap<String, Vec<String>>,
    #[serde(default)]
    pub mcp_server: Option<McpServer>,
}

/// One problem with the front matter, at a line of `SKILL.md` (1-based).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ManifestProblem {
    pub line: Option<u32>,
    pub rule: Rule,
    pub message: String,
}

/// `SKILL.md` taken apart: the manifest when the front matter is usable,
/// the body, and every problem found on the way.
#[derive(Clone, Debug)]
pub struct Parsed {
    pub manifest: Option<Manifest>,
    pub body: String,
    /// The line of `SKILL.md` the body starts on.
    pub body_line: u32,
    pub problems: Vec<ManifestProblem>,
}

fn problem(line: Option<u32>, rule: Rule, message: impl Into<String>) -> ManifestProblem {
    ManifestProblem {
        line,
        rule,
        message: message.into(),
    }
}

/// The line of `SKILL.md` where top-level `key:` is written.
fn key_line(front: &[&str], key: &str) -> Option<u32> {
    front
        .iter()
        .position(|l| {
            l.strip_prefix(key)
                .is_some_and(|rest| rest.trim_start().starts_with(':'))
        })
        // +2: line 1 is the opening `---`, and lines are 1-based.
        .and_then(|i| u32::try_from(i + 2).ok())
}

/// The most front matter `SKILL.md` may hold. Real ones are a few hundred
/// bytes; the YAML parser takes several times the text in memory, so a
/// folder-sized (32 MB) front matter would cost the daemon hundreds of MB at
/// every validation.
pub const MAX_FRONT_MATTER_BYTES: usize = 64 * 1024;

/// Parse `SKILL.md`. Never fails: what cannot be read is a problem.
pub fn parse(text: &str) -> Parsed {
    let lines: Vec<&str> = text.split('\n').collect();
    let opening = lines.first().map(|l| l.trim_end_matches('\r'));
    let close = lines
        .iter()
        .skip(1)
        .position(|l| l.trim_end() == "---")
        .map(|i| i + 1);
    let (Some("---"), Some(close)) = (opening, close) else {
        return Parsed {
            manifest: None,
            body: text.to_string(),
            body_line: 1,
            problems: vec![problem(
                Some(1),
                Rule::FrontMatterMissing,
                "SKILL.md must start with a YAML front matter block between --- lines",
            )],
        };
    };
    let front: Vec<&str> = lines[1..close].to_vec();
    let body = lines[close + 1..].join("\n");
    let body_line = u32::try_from(close + 2).unwrap_or(u32::MAX);
    let mut parsed = Parsed {
        manifest: None,
        body,
        body_line,
        problems: Vec::new(),
    };
    let yaml = front.join("\n");
    if yaml.len() > MAX_FRONT_MATTER_BYTES {
        parsed.problems.push(problem(
            Some(1),
            Rule::TooLarge,
            format!(
                "the front matter is {} bytes; at most {MAX_FRONT_MATTER_BYTES} (instructions go below it)",
                yaml.len()
            ),
        ));
        return parsed;
    }
    let mapping: serde_yaml_ng::Mapping = match serde_yaml_ng::from_str(&yaml) {
        Ok(m) => m,
        Err(e) => {
            let line = e.location().and_then(|l| u32::try_from(l.line() + 1).ok());
            parsed.problems.push(problem(
                line,
                Rule::FrontMatterParse,
                format!("front matter is not a YAML mapping: {e}"),
            ));
            return parsed;
        }
    };
    let mut known = serde_yaml_ng::Mapping::new();
    for (k, v) in mapping {
        match k.as_str() {
            Some(key) if KNOWN_KEYS.contains(&key) => {
                known.insert(k, v);
            }
            Some(key) => parsed.problems.push(problem(
                key_line(&front, key),
                Rule::FrontMatterUnknownKey,
                format!("unknown front matter key `{key}` (Silas does not enforce it)"),
            )),
            None => parsed.problems.push(problem(
                None,
                Rule::FrontMatterParse,
                "front matter keys must be strings",
            )),
        }
    }
    for required in ["name", "description"] {
        if !known.contains_key(required) {
            parsed.problems.push(problem(
                Some(1),
                Rule::FrontMatterInvalid,
                format!("front matter needs `{required}`"),
            ));
        }
    }
    if parsed
        .problems
        .iter()
        .any(|p| p.rule == Rule::FrontMatterInvalid)
    {
        return parsed;
    }
    let de = serde_yaml_ng::Value::Mapping(known);
    match serde_path_to_error::deserialize::<_, Manifest>(de) {
        Ok(m) => parsed.manifest = Some(m),
        Err(e) => {
            let path = e.path().to_string();
            let top = path.split('.').next().unwrap_or_default().to_string();
            parsed.problems.push(problem(
                key_line(&front, &top).or(Some(1)),
                Rule::FrontMatterInvalid,
                format!("`{path}`: {}", e.inner()),
            ));
        }
    }
    parsed
}

/// The line of `SKILL.md` a top-level front matter key is on (for findings
/// about a key's value).
pub fn line_of_key(text: &str, key: &str) -> Option<u32> {
    let lines: Vec<&str> = text.split('\n').collect();
    let close = lines.iter().skip(1).position(|l| l.trim_end() == "---")? + 1;
    key_line(&lines[1..close], key)
}

/// The line of `SKILL.md` where `needle` first appears (a nested key such
/// as a `script_args` entry), or `None`.
pub fn line_of(text: &str, needle: &str) -> Option<u32> {
    text.split('\n')
        .position(|l| l.contains(needle))
        .and_then(|i| u32::try_from(i + 1).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_oversized_front_matter_is_refused_unparsed() {
        let padding = format!("# {}\n", "x".repeat(1000)).repeat(70);
        let text = format!("---\nname: big\ndescription: Big.\n{padding}---\nbody\n");
        let p = parse(&text);
        assert!(p.manifest.is_none());
        assert_eq!(p.problems.len(), 1, "{:?}", p.problems);
        assert_eq!(p.problems[0].rule, Rule::TooLarge);
        assert!(
            p.problems[0].message.contains("at most 65536"),
            "{:?}",
            p.problems
        );
        // A long body below a small front matter is fine.
        let text = format!("---\nname: big\ndescription: Big.\n---\n{padding}");
        assert!(parse(&text).problems.is_empty());
    }

    #[test]
    fn an_mcp_server_is_declared_inside_the_folder() {
        let text = "---\nname: notes\ndescription: Notes through an MCP server.\nmcp_server:\n  command: scripts/server.py\n  args: [\"--quiet\"]\n---\nbody\n";
        let p = parse(text);
        assert!(p.problems.is_empty(), "{:?}", p.problems);
        let server = p.manifest.unwrap().mcp_server.unwrap();
        assert_eq!(server.args, vec!["--quiet".to_string()]);
        assert_eq!(
            server.relative_command(),
            Some(std::path::Path::new("scripts/server.py"))
        );
        for outside in ["/usr/bin/python3", "../x.py", "scripts/../../x", ""] {
            let s = McpServer {
                command: outside.into(),
                args: Vec::new(),
            };
            assert_eq!(s.relative_command(), None, "{outside}");
        }
    }

    #[test]
    fn parses_the_spec_example() {
        let text = "---\nname: coding\ndescription: Coding workflows for analysis, editing, testing.\nactivation: manual\nui:\n  display_name: \"Coding\"\nscript_args:\n  scripts/run_tests.py:\n    path: {type: string, max_length: 300}\n---\n\n# Coding\n";
        let p = parse(text);
        assert!(p.problems.is_empty(), "{:?}", p.problems);
        let m = p.manifest.unwrap();
        assert_eq!(m.name, "coding");
        assert_eq!(m.activation, Activation::Manual);
        let arg = &m.script_args["scripts/run_tests.py"]["path"];
        assert_eq!(arg.kind, ArgType::String);
        assert_eq!(arg.max_length, Some(300));
        assert_eq!(p.body_line, 11);
        assert!(p.body.contains("# Coding"));
    }

    #[test]
    fn missing_front_matter_and_unknown_keys_are_named_with_lines() {
        assert_eq!(
            parse("# no front matter\n").problems[0].rule,
            Rule::FrontMatterMissing
        );
        let p = parse("---\nname: x\ndescription: d\nallowed-tools: [Bash]\n---\nbody");
        assert_eq!(p.problems.len(), 1);
        assert_eq!(p.problems[0].rule, Rule::FrontMatterUnknownKey);
        assert_eq!(p.problems[0].line, Some(4));
        let p = parse("---\nname: x\ndescription: d\nactivation: sometimes\n---\n");
        assert_eq!(p.problems[0].rule, Rule::FrontMatterInvalid);
        assert_eq!(p.problems[0].line, Some(4));
        let p = parse("---\nname: [x\n---\n");
        assert_eq!(p.problems[0].rule, Rule::FrontMatterParse);
    }
}
