//! What a turn runs with ([`TurnDeps`]) and how the daemon builds it: the
//! gate runner with its providers, the full-text memory. Split from
//! `pipeline.rs` along the construction seam.

use super::*;

/// Everything a turn needs (the spec's `TurnContext` dependencies).
#[derive(Clone)]
pub struct TurnDeps {
    pub store: Store,
    pub config: Arc<Config>,
    pub agents: Agents,
    /// The GateRunner actor (fails closed when it cannot answer).
    pub gates: GateHandle,
    /// Token checks that are not issuance (message classification, the
    /// owner-session lookup for card answers).
    pub approvals: ApprovalService,
    /// The ApprovalEngine actor: the only way an answer becomes a token.
    pub approval_engine: crate::approval::ApprovalHandle,
    pub memory: Arc<dyn MemoryIndex>,
    pub sink: Arc<dyn ChannelSink>,
    pub observer: Arc<dyn TurnObserver>,
    /// §18.5 model-call and memory-op limits, shared with the WorkExecutor
    /// (one `Arc` in the daemon, so the global model-call cap covers both).
    pub limits: Arc<crate::limits::RuntimeLimits>,
    /// The skill install flow (issue #17): answers `skill_install` cards.
    /// `None` refuses them (nothing is installed without the dry run).
    pub skills: Option<Arc<crate::skills::SkillHost>>,
}

/// The gate runner with the built-in providers (`guardrails_ai` → guard,
/// `predicate`, `script`, `llm`) that the GateRunner actor hosts for the
/// turn pipeline and the WorkExecutor (`crate::gate_runner`). Script gates
/// run only as the owner configured them (`gates.system`), in
/// `{data_dir}/gates`; LLM gates ask `judge` (none: they fail — open in the
/// quality lane, closed when promoted). Gates that name an unregistered
/// provider block ("No provider: …") — fail closed.
pub fn standard_gate_runner(
    config: &Config,
    judge: Option<Arc<dyn silas_gates::QualityJudge>>,
) -> GateRunner {
    let mut gates = GateRunner::new();
    let predicate = Arc::new(silas_gates::PredicateProvider::new(vec![
        config.data_dir.clone(),
    ]));
    gates.register("guardrails_ai", Arc::new(silas_gates::GuardProvider));
    gates.register("predicate", predicate.clone());
    let configured = configured_script_gates(config);
    gates.register(
        "script",
        Arc::new(silas_gates::ConfiguredScripts::new(
            silas_gates::ScriptProvider::new(gates_workdir(config), predicate),
            &configured,
        )),
    );
    let judge = judge.unwrap_or_else(|| Arc::new(crate::gate_model::NoModel));
    gates.register(
        "llm",
        Arc::new(silas_gates::LlmProvider::new(
            judge,
            std::time::Duration::from_secs(config.gates.llm_defaults.timeout_seconds),
        )),
    );
    gates
}

/// The owner's script gates, parsed. Only entries that name the script
/// provider are parsed: start-up (which builds the runner) then touches no
/// gate parsing at all on the default configuration (issue #19, idle RSS).
fn configured_script_gates(config: &Config) -> Vec<silas_core::model::gates::Gate> {
    config
        .gates
        .system
        .iter()
        .enumerate()
        .filter(|(_, d)| d.get("provider").and_then(serde_json::Value::as_str) == Some("script"))
        .filter_map(|(i, d)| silas_gates::runner::parse_gate(d, i).ok())
        .collect()
}

/// What the gate providers find wrong with `gates.system` before any check
/// ([`silas_gates::definition::config_errors`]): configuration errors.
pub fn gate_config_errors(config: &Config) -> Vec<silas_core::config::ConfigError> {
    silas_gates::definition::config_errors(&config.gates.system)
}

/// The owner's script gates that cannot run as configured, each with why
/// (`silas start` prints them: such a gate blocks everything it checks).
pub fn script_gate_problems(config: &Config) -> Vec<(String, String)> {
    let gates = configured_script_gates(config);
    if gates.is_empty() {
        return Vec::new();
    }
    let workdir = config.data_dir.join("gates");
    gates
        .into_iter()
        .filter_map(|g| {
            silas_gates::script::script_gate_problem(
                &g,
                &workdir,
                silas_gates::script::DEFAULT_PATH,
            )
            .map(|why| (g.name, why))
        })
        .collect()
}

/// The gates working directory (§5.5.4): `{data_dir}/gates`, the daemon's
/// own (0700). A script that cannot start there blocks its gate.
fn gates_workdir(config: &Config) -> std::path::PathBuf {
    let dir = config.data_dir.join("gates");
    if let Err(e) = std::fs::create_dir_all(&dir) {
        tracing::warn!("gates working directory {} not created: {e}", dir.display());
    }
    {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700));
    }
    dir
}

impl TurnDeps {
    /// The production wiring: the built-in gate providers (`guardrails_ai`,
    /// `predicate`) in a standalone GateRunner actor, keyword memory over the
    /// store, and the tracing observer. The daemon replaces `gates` and
    /// `approval_engine` with its supervised actors' handles
    /// ([`GateHandle::daemon`], [`crate::approval::ApprovalHandle::daemon`]).
    pub fn standard(
        store: Store,
        config: Arc<Config>,
        agents: Agents,
        approvals: ApprovalService,
        sink: Arc<dyn ChannelSink>,
    ) -> TurnDeps {
        let memory = standard_memory(&store, &config);
        Self::standard_with(store, config, agents, approvals, sink, memory)
    }

    /// [`Self::standard`] over a memory the caller opened (the daemon shares
    /// its one index between turns and `silas memory` requests).
    pub fn standard_with(
        store: Store,
        config: Arc<Config>,
        agents: Agents,
        approvals: ApprovalService,
        sink: Arc<dyn ChannelSink>,
        memory: Arc<dyn MemoryIndex>,
    ) -> TurnDeps {
        let gates = GateHandle::standalone(GateRunnerArgs::from_config(config.clone()));
        TurnDeps {
            limits: Arc::new(crate::limits::RuntimeLimits::from_config(&config.limits)),
            memory,
            store,
            config,
            agents,
            gates,
            approval_engine: crate::approval::ApprovalHandle::standalone(approvals.clone()),
            approvals,
            sink,
            observer: Arc::new(TraceObserver),
            skills: None,
        }
    }
}

/// The full-text memory over `store`, its index in
/// `{data_dir}/memory-index` (rebuilt in the background when missing or
/// stale); the keyword scan when the index cannot be opened, so memory
/// still works (said in the log).
pub fn standard_memory(store: &Store, config: &Config) -> Arc<dyn MemoryIndex> {
    match open_memory(store, config) {
        Some(m) => Arc::new(m),
        None => Arc::new(crate::memory::KeywordMemory::new(store.clone())),
    }
}

/// The full-text memory, or `None` (logged) when its index cannot open.
pub fn open_memory(store: &Store, config: &Config) -> Option<silas_memory::Memory> {
    let dir = config.data_dir.join(silas_memory::INDEX_DIR);
    match silas_memory::Memory::open(store.clone(), &dir) {
        Ok(m) => Some(m),
        Err(e) => {
            tracing::error!(code = %silas_core::Coded::code(&e), dir = %dir.display(),
                "memory index unavailable, using the keyword scan: {e}");
            None
        }
    }
}
