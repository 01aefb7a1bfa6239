//! Minimal plan parser (§7.2 `plan_parser.parse`): YAML front matter between
//! `---` lines becomes the work item's fields, the Markdown after it its
//! `body`. Validation is the core model's (`WorkItem` deserialises through
//! its validators). A full parser with the §7.2 diagnostics is later work.

use serde_json::Value;
use silas_core::model::work::WorkItem;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PlanParseError {
    #[error("plan has no YAML front matter")]
    NoFrontMatter,
    #[error("plan front matter is not valid YAML: {0}")]
    Yaml(String),
    #[error("plan is not a valid work item: {0}")]
    Invalid(String),
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
    serde_json::from_value(fields).map_err(|e| PlanParseError::Invalid(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn refuses_garbage() {
        assert_eq!(parse_plan("hello"), Err(PlanParseError::NoFrontMatter));
        assert!(matches!(
            parse_plan("---\n: : :\n---\nbody"),
            Err(PlanParseError::Yaml(_) | PlanParseError::Invalid(_))
        ));
        assert!(matches!(
            parse_plan("---\ntitle: x\n---\nbody"),
            Err(PlanParseError::Invalid(_))
        ));
    }
}
