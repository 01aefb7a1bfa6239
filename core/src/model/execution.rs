//! Execution models (spec §3.7): sandbox configuration, the envelope an
//! ephemeral executor receives, the result it returns, and the executor
//! agent's structured output. The envelope is deliberately minimal — no
//! history, memory or approval state ever crosses into an executor.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::JsonObject;
use super::messages::TaintLevel;

spec_enum! {
    /// A sandbox backend override (§3.7 `SandboxConfig.backend`).
    pub enum SandboxBackend {
        Subprocess => "subprocess",
        Docker => "docker",
    }
}

/// Backend-agnostic sandbox settings (§3.7).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SandboxConfig {
    /// `None` uses the global configuration.
    #[serde(default)]
    pub backend: Option<SandboxBackend>,
    #[serde(default = "default_work_dir")]
    pub work_dir: String,
    /// When false the backend must isolate the network or fail closed.
    #[serde(default)]
    pub network_access: bool,
    #[serde(default)]
    pub filesystem_read: Vec<String>,
    #[serde(default)]
    pub filesystem_write: Vec<String>,
    #[serde(default = "default_max_memory_mb")]
    pub max_memory_mb: u64,
    #[serde(default = "default_max_cpu_seconds")]
    pub max_cpu_seconds: u64,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
}

fn default_work_dir() -> String {
    "./data/sandbox/work".to_string()
}
fn default_max_memory_mb() -> u64 {
    512
}
fn default_max_cpu_seconds() -> u64 {
    60
}

impl Default for SandboxConfig {
    fn default() -> Self {
        SandboxConfig {
            backend: None,
            work_dir: default_work_dir(),
            network_access: false,
            filesystem_read: Vec::new(),
            filesystem_write: Vec::new(),
            max_memory_mb: default_max_memory_mb(),
            max_cpu_seconds: default_max_cpu_seconds(),
            env: BTreeMap::new(),
        }
    }
}

/// Everything an ephemeral executor receives (§3.7). `credential_refs` holds
/// opaque keyring references only, never secret values.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExecutionEnvelope {
    pub execution_id: String,
    pub step_index: u64,
    pub task_description: String,
    pub action: String,
    #[serde(default)]
    pub args: JsonObject,
    #[serde(default)]
    pub input_artifacts: BTreeMap<String, String>,
    #[serde(default)]
    pub credential_refs: BTreeMap<String, String>,
    #[serde(default = "default_timeout_seconds")]
    pub timeout_seconds: u64,
    #[serde(default = "default_max_output_bytes")]
    pub max_output_bytes: u64,
    #[serde(default)]
    pub sandbox_config: SandboxConfig,
}

fn default_timeout_seconds() -> u64 {
    300
}
fn default_max_output_bytes() -> u64 {
    100_000
}

/// A value in `ExecutionResult.metadata`: the spec's
/// `str | int | float | bool | list | dict` — any JSON except `null`.
/// Numbers keep serde_json's exact representation (no int→float drift).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum MetadataValue {
    Bool(bool),
    Number(serde_json::Number),
    Text(String),
    List(Vec<serde_json::Value>),
    Object(super::JsonObject),
}

/// Everything an ephemeral executor returns (§3.7). Only `return_value` and
/// `content` may reach model context; `metadata` is application-only.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExecutionResult {
    pub execution_id: String,
    pub step_index: u64,
    pub success: bool,
    #[serde(default)]
    pub return_value: String,
    #[serde(default)]
    pub content: Vec<JsonObject>,
    #[serde(default)]
    pub metadata: BTreeMap<String, MetadataValue>,
    #[serde(default)]
    pub artifacts: BTreeMap<String, String>,
    /// `external` by default: tool/network output is untrusted.
    #[serde(default)]
    pub taint: TaintLevel,
    #[serde(default)]
    pub error: Option<String>,
    #[serde(default)]
    pub duration_seconds: f64,
    #[serde(default)]
    pub tokens_used: u64,
    #[serde(default)]
    pub cost_usd: f64,
}

impl ExecutionResult {
    /// A failed execution for `envelope`: no model-facing output, `external`
    /// taint, the error text and any application-only metadata.
    pub fn failure(
        envelope: &ExecutionEnvelope,
        error: String,
        metadata: BTreeMap<String, MetadataValue>,
        duration_seconds: f64,
    ) -> ExecutionResult {
        ExecutionResult {
            execution_id: envelope.execution_id.clone(),
            step_index: envelope.step_index,
            success: false,
            return_value: String::new(),
            content: Vec::new(),
            metadata,
            artifacts: BTreeMap::new(),
            taint: TaintLevel::External,
            error: Some(error),
            duration_seconds,
            tokens_used: 0,
            cost_usd: 0.0,
        }
    }
}

/// The executor agent's structured LLM output (§3.7); runtime metrics are
/// measured by the runtime, not reported by the model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExecutorAgentOutput {
    pub summary: String,
    #[serde(default)]
    pub artifact_refs: Vec<String>,
    #[serde(default)]
    pub next_steps: Vec<String>,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::model::test_support::{assert_enum_strings, round_trip};

    #[test]
    fn enum_strings() {
        assert_enum_strings(
            SandboxBackend::ALL,
            &[
                (SandboxBackend::Subprocess, "subprocess"),
                (SandboxBackend::Docker, "docker"),
            ],
        );
    }

    #[test]
    fn sandbox_config_defaults() {
        let c: SandboxConfig = serde_json::from_value(json!({})).unwrap();
        assert_eq!(c, SandboxConfig::default());
        assert_eq!(
            serde_json::to_value(&c).unwrap(),
            json!({"backend": null, "work_dir": "./data/sandbox/work", "network_access": false,
                   "filesystem_read": [], "filesystem_write": [], "max_memory_mb": 512,
                   "max_cpu_seconds": 60, "env": {}})
        );
        let mut c = c;
        c.backend = Some(SandboxBackend::Docker);
        c.env.insert("LANG".into(), "C".into());
        assert_eq!(round_trip(&c)["backend"], "docker");
    }

    #[test]
    fn envelope_defaults_and_round_trip() {
        let e: ExecutionEnvelope = serde_json::from_value(json!({
            "execution_id": "x1", "step_index": 0, "task_description": "run tests",
            "action": "shell_exec"
        }))
        .unwrap();
        assert_eq!(e.timeout_seconds, 300);
        assert_eq!(e.max_output_bytes, 100_000);
        assert_eq!(e.sandbox_config, SandboxConfig::default());
        let mut e = e;
        e.args.insert("command".into(), json!("npm test"));
        e.credential_refs
            .insert("outlook".into(), "ref_abc123".into());
        round_trip(&e);
    }

    #[test]
    fn result_defaults_and_metadata_values() {
        let r: ExecutionResult = serde_json::from_value(json!({
            "execution_id": "x1", "step_index": 2, "success": true,
            "metadata": {"status": 200, "latency": 0.25, "cached": false, "via": "proxy",
                         "hops": ["a", "b"], "headers": {"x": "y"}, "big": 18446744073709551615u64}
        }))
        .unwrap();
        assert_eq!(r.taint, TaintLevel::External);
        assert_eq!(r.error, None);
        assert!(matches!(r.metadata["status"], MetadataValue::Number(_)));
        assert!(matches!(r.metadata["cached"], MetadataValue::Bool(false)));
        assert!(matches!(r.metadata["via"], MetadataValue::Text(_)));
        assert!(matches!(r.metadata["hops"], MetadataValue::List(_)));
        assert!(matches!(r.metadata["headers"], MetadataValue::Object(_)));
        let v = round_trip(&r);
        // Integers stay integers, and large ones stay exact.
        assert_eq!(v["metadata"]["status"], json!(200));
        assert_eq!(v["metadata"]["big"], json!(u64::MAX));
        assert!(
            serde_json::from_value::<ExecutionResult>(json!({
                "execution_id": "x", "step_index": 0, "success": true, "metadata": {"k": null}
            }))
            .is_err(),
            "null is not a metadata value"
        );
    }

    #[test]
    fn executor_agent_output_round_trip() {
        let o: ExecutorAgentOutput = serde_json::from_value(json!({"summary": "done"})).unwrap();
        assert!(o.artifact_refs.is_empty() && o.next_steps.is_empty());
        let mut o = o;
        o.next_steps.push("open a PR".into());
        round_trip(&o);
    }
}
