//! `silas start`: the long-running daemon. Serves the web channel until
//! SIGINT/SIGTERM, then shuts down in the order of spec §18.2 (stop intake,
//! let in-flight requests finish within the grace period, audit, checkpoint).

mod banner;
mod drain;
mod signals;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use silas_actors::approval::{ApprovalEngine, ApprovalService};
use silas_actors::connection::{
    CONNECTIONS_NAME, ConnectionArgs, ConnectionManager, RefreshPolicy,
};
use silas_actors::gate_runner::{GateHandle, GateRunnerActor, GateRunnerArgs};
use silas_actors::housekeeper::{HOUSEKEEPER_NAME, Housekeeper, HousekeeperArgs};
use silas_actors::restart::RestartPolicy;
use silas_actors::scheduler::{
    SCHEDULER_NAME, Scheduler, SchedulerArgs, SchedulerConfigJobs, SystemClock,
};
use silas_actors::supervisor::{ChildSpec, RestartMode, RootSupervisor, SupervisorArgs};
use silas_core::ErrorCode;
use silas_core::config::Config;
use silas_keys::OwnerKey;
use silas_storage::Store;
use silas_web::{HealthState, WebSettings};
use tokio::sync::watch;

use crate::error::CliError;

pub fn start(
    cfg: Config,
    store: Store,
    owner_key: OwnerKey,
    origin: crate::control::ConfigOrigin,
) -> Result<ExitCode, CliError> {
    init_tracing();
    // Before the runtime's threads start (arenas are per thread).
    let untuned = crate::malloc::tune();
    if !untuned.is_empty() {
        tracing::warn!(?untuned, "allocator settings not applied");
    }
    crate::malloc::spawn_trimmer();
    harden_process();
    raise_open_files();
    // The actors write redb synchronously (each commit fsyncs) on worker
    // threads; with one worker per core a 2-core box can have every worker
    // inside an fsync while the Stream waits to admit a message. A few more
    // workers keep admission responsive; they are cheap when idle.
    let workers = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .max(4);
    let runtime =
        crate::error::runtime(tokio::runtime::Builder::new_multi_thread().worker_threads(workers))?;
    let owner_key = Arc::new(owner_key);
    let mut store = store;
    let mut resumes = Vec::new();
    loop {
        let ended = runtime.block_on(run(cfg.clone(), store, owner_key.clone(), origin.clone()));
        // A full disk pauses the daemon; every other end is the process's.
        let Err(e) = &ended else { return ended };
        let free = crate::disk_full::free_space(&cfg.data_dir);
        if !crate::disk_full::should_wait(e.code(), free, &resumes, std::time::Instant::now()) {
            return ended;
        }
        if runtime.block_on(crate::disk_full::wait_for_space(&cfg.data_dir))
            == crate::disk_full::Waited::Stopped
        {
            return ended;
        }
        store = runtime
            .block_on(crate::disk_full::reopen(&cfg.data_dir))
            .map_err(crate::error::coded)?;
        resumes.push(std::time::Instant::now());
        eprintln!("Free space is back: Silas starts again.");
    }
}

/// The daemon holds the owner's signing key in memory: no core dumps, and not
/// dumpable (no ptrace attach or /proc/<pid>/mem reads by same-uid
/// processes). Failures are logged, not fatal: these are defence in depth.
fn harden_process() {
    let no_core = rustix::process::Rlimit {
        current: Some(0),
        maximum: Some(0),
    };
    if let Err(e) = rustix::process::setrlimit(rustix::process::Resource::Core, no_core) {
        tracing::warn!("cannot disable core dumps: {e}");
    }
    if let Err(e) =
        rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)
    {
        tracing::warn!("cannot mark the process non-dumpable: {e}");
    }
}

/// Raises the open-file soft limit toward the hard one (every WebSocket is
/// a descriptor); `silas doctor` reports the same numbers.
fn raise_open_files() {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let now = getrlimit(Resource::Nofile);
    let soft = now.current.unwrap_or(u64::MAX);
    let target = crate::doctor::checks::open_files_target(soft, now.maximum);
    if target == soft {
        return;
    }
    let raised = Rlimit {
        current: Some(target),
        maximum: now.maximum,
    };
    match setrlimit(Resource::Nofile, raised) {
        Ok(()) => tracing::info!(from = soft, to = target, "open-file limit raised"),
        Err(e) => tracing::warn!(soft, target, "cannot raise the open-file limit: {e}"),
    }
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("SILAS_LOG")
        // warp logs every client connection error (including idle keep-alive
        // connections cancelled by a graceful shutdown) at ERROR; those are
        // per-client noise, not daemon faults. async-openai logs a whole
        // response body it cannot read (model output, never logged: our own
        // error says what was wrong). `SILAS_LOG` overrides this.
        .unwrap_or_else(|_| {
            tracing_subscriber::EnvFilter::new("info,warp::server=off,async_openai=off")
        });
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}

fn audit_event(store: &Store, event: &str, data: serde_json::Value) {
    let data = match data {
        serde_json::Value::Object(o) => o,
        _ => Default::default(),
    };
    if let Err(e) = store.audit().log(event, data) {
        tracing::error!(code = %silas_core::Coded::code(&e), "audit write failed: {e}");
    }
}

async fn run(
    cfg: Config,
    store: Store,
    owner_key: Arc<OwnerKey>,
    origin: crate::control::ConfigOrigin,
) -> Result<ExitCode, CliError> {
    let started = (silas_core::Timestamp::now(), std::time::Instant::now());
    // One key signs approvals and audit checkpoints (§4.16). The seal is
    // checked before this run appends anything, so what was found is judged
    // on the log as it was left, and recorded before the next checkpoint
    // signs it.
    let seal = silas_actors::audit_seal::OwnerSeal::new(owner_key.clone());
    crate::commands::check_audit_seal_at_start(&store, &seal);
    // The daemon's own secrets are redacted wherever secrets are, in any
    // shape (a pasted copy of the bot token in a chat, a tool's output).
    for value in cfg.secret_values(&silas_core::config::ProcessEnv) {
        silas_core::secrets::register_known(&value);
    }
    // Which model serves the agents: offline (labelled, not an LLM) when the
    // configured provider's key is unset, unless llm.offline_fallback is off.
    let model = silas_llm::choose_provider(&cfg, &silas_core::config::ProcessEnv)
        .map_err(|e| CliError::new(silas_core::Coded::code(&e), e.to_string()))?;
    println!("{}", model.startup_line(&cfg));
    // Handlers first: once the readiness line is printed, a signal must
    // always mean an orderly shutdown.
    let mut signals = signals::ShutdownSignals::install()?;
    let health = Arc::new(HealthState::default());
    let settings = WebSettings {
        host: cfg.channels.web.host.clone(),
        port: cfg.channels.web.port,
        auth_token: cfg.channels.web.auth_token.clone(),
    };
    let server = silas_web::bind(&settings, health.clone()).await?;
    // The CLI's way in while this process holds the store (a live socket
    // means another daemon serves this data dir; a stale one is replaced).
    let control = silas_web::control::bind(
        &crate::remote::socket_path(&cfg),
        Some(rustix::process::getegid().as_raw()),
    )?;
    // Issue #12: the owner always authenticates — a device credential (the
    // local CLI's is written to {data_dir}/cli.token), a paired browser's, or
    // the configured auth_token. A first pairing link is printed below.
    let owner_auth = crate::devices::owner_auth(&cfg, &store)?;
    // The link is a credential: printed on every start it landed in the
    // journal of every restart. Once a browser is paired, more devices come
    // from `silas pair`, which prints one only to whoever runs it.
    let paired = owner_auth
        .list()
        .iter()
        .filter(|d| !d.revoked && d.label != crate::devices::CLI_DEVICE_LABEL)
        .count();
    let base_url = server.base_url();
    let pairing_link = if paired == 0 {
        let code = owner_auth
            .issue_pairing_code(None)
            .map_err(|e| CliError::new(silas_core::Coded::code(&e), e.to_string()))?;
        Some(silas_web::pairing_link(&base_url, &code))
    } else {
        None
    };
    let addr = server.local_addr().ok_or_else(|| {
        CliError::new(
            ErrorCode::EChannelProtocol,
            "web listener has no local address",
        )
    })?;

    // The web channel talks to the turn runtime through the bridge; secrets
    // posted to /secrets/{ref_id} go to the encrypted secret store.
    let card_timeouts = silas_actors::cards::CardTimeouts::from_config(&cfg);
    let ks = &cfg.keystore;
    // Opened once (the data key is unwrapped here) and shared by the web
    // vault, Telegram, skills, MCP servers and connections.
    let secrets = Arc::new(
        silas_keys::secrets::SecretStore::open(
            &cfg.data_dir,
            silas_keys::KekSources::from_process_env(&ks.kek_env, &ks.kek_credential),
        )
        .map_err(|e| CliError::new(silas_core::Coded::code(&e), e.to_string()))?,
    );
    // The web channel reports which connections authenticated as the owner;
    // the ApprovalEngine mints tokens only for answers from those.
    let owner_sessions = silas_actors::approval::OwnerSessions::default();
    // Telegram (issue #14), when enabled: links in the chat point at the
    // web app where the owner's devices reach it.
    let web_url = cfg
        .channels
        .web
        .public_url
        .clone()
        .filter(|u| !u.trim().is_empty())
        .unwrap_or_else(|| base_url.clone());
    let telegram = crate::telegram_bridge::setup::build(
        &cfg,
        &store,
        &secrets,
        &owner_sessions,
        card_timeouts,
        web_url,
    )?;
    let vault = Arc::new(crate::web_bridge::SecretVault::new(
        store.clone(),
        secrets.clone(),
        card_timeouts,
    ));
    tracing::info!("{}", vault.describe());
    let bridge = crate::web_bridge::WebBridge::new(
        store.clone(),
        vault.clone(),
        card_timeouts,
        owner_sessions.clone(),
        crate::workspace_cmd::reserved_dirs(&cfg),
    );
    bridge.set_owner_reachable_elsewhere(telegram.is_some());
    if let Some(t) = &telegram {
        bridge.set_telegram_health(t.health());
    }
    let activity_feed = bridge.spawn_activity_feed();
    let server = server
        .attach(bridge.clone(), vault)
        .with_auth(owner_auth.clone())
        // Chatbot deployment (an active goal): every non-owner connection
        // gets its own scope (§5.1 isolation model, §8.1).
        .with_customer_scopes(cfg.active_goal.is_some())
        .with_customer_caps(
            cfg.limits.customer_connections_per_ip,
            cfg.limits.customer_connections_total,
        )
        .with_model(silas_web::protocol::ModelInfo {
            offline: model.is_offline(),
            description: model.startup_line(&cfg),
        });
    let (stop_tx, stop_rx) = watch::channel(false);
    let stop_rx_tasks = stop_rx.clone();
    // One memory index for the daemon: turns and `silas memory` requests
    // share it (its writer is exclusive). A missing or stale index is
    // rebuilt in the background; start-up does not wait.
    let memory = silas_actors::turn::pipeline::open_memory(&store, &cfg);
    // Skills are installed and used through one host; connection skills run
    // through the runtime (setup conversations, scheduled scripts).
    let credentials = secret_credentials(secrets.clone());
    let mcp = mcp_skills(&cfg, &store, credentials.clone())?;
    // Idle MCP servers stop by themselves; the rest at shutdown below.
    let _mcp_reaper = mcp.registry().spawn_reaper();
    let skills = Arc::new(skill_host(&cfg, &store, credentials, mcp.clone())?);
    let connection_runtime = crate::daemon_connections::build(
        &cfg,
        &store,
        skills.clone(),
        stop_rx.clone(),
        card_timeouts,
        secrets,
    )?;
    let (stop_request, mut stop_requests) = tokio::sync::mpsc::channel::<String>(1);
    let control_task = {
        let backend = crate::control::DaemonControl {
            store: store.clone(),
            cfg: Arc::new(cfg.clone()),
            origin,
            auth: owner_auth.clone(),
            health: health.clone(),
            web: bridge.clone(),
            owner_sees_cards: {
                let bridge = bridge.clone();
                Arc::new(move || bridge.owner_can_see_cards())
            },
            seal: seal.clone(),
            base_url,
            memory: memory.clone(),
            started_at: started.0,
            started: started.1,
            connections: Some(connection_runtime.clone()),
            model: model.startup_line(&cfg),
            stop: stop_request,
        };
        let mut stop = stop_rx.clone();
        control.serve(owner_auth.clone(), Arc::new(backend), async move {
            let _ = stop.wait_for(|s| *s).await;
        })
    };
    let mut server_stop = stop_rx;
    let server_task = server.serve(async move {
        let _ = server_stop.wait_for(|s| *s).await;
    });

    // The memory consolidator (§6.4): merges duplicates and prunes stale
    // memories every `memory.consolidation_interval_minutes`.
    if let Some(m) = &memory {
        let every = Duration::from_secs(u64::from(cfg.memory.consolidation_interval_minutes) * 60);
        tokio::spawn(crate::memory_cmd::consolidation_loop(
            m.clone(),
            every,
            silas_actors::cards::CardTimeouts::from_config(&cfg),
            stop_rx_tasks.clone(),
        ));
    }

    let housekeeper = HousekeeperArgs {
        store: store.clone(),
        retention_days: cfg.chronicle.retention_days,
        nonce_ttl: Duration::from_secs(u64::from(cfg.nonce_store.ttl_minutes) * 60),
        checkpoint_interval: Duration::from_secs(
            u64::from(cfg.audit.checkpoint_interval_minutes) * 60,
        ),
        signer: Arc::new(seal.clone()),
        // The Scheduler drives maintenance; without it the housekeeper
        // keeps its own minute tick.
        tick_every: (!cfg.scheduler.enabled).then(|| Duration::from_secs(60)),
    };
    let timezone =
        silas_actors::scheduler::parse_timezone(&cfg.scheduler.timezone).map_err(|e| {
            CliError::new(
                silas_core::Coded::code(&e),
                format!("scheduler.timezone: {e}"),
            )
        })?;
    let approvals = ApprovalService::new(
        store.clone(),
        owner_key,
        silas_core::approval::IssuePolicy::from_config(&cfg),
    )
    .with_owner_sessions(owner_sessions);
    let owner_public_key = approvals.owner_public_key_hex();
    // The turn runtime (issue #5): Stream → per-scope TurnProcessors. The
    // WorkExecutor takes `dispatch_rx` and publishes on `status_tx`.
    // Providers report structured-mode downgrades (issue #16) to the audit.
    let llm_events: silas_llm::negotiate::EventSink = {
        let store = store.clone();
        Arc::new(move |e: silas_llm::negotiate::LlmEvent| {
            audit_event(&store, e.name(), e.data());
        })
    };
    let (agents, breakers) = silas_llm::select::build_agents_with_board(
        &cfg,
        &silas_core::config::ProcessEnv,
        &model,
        Some(llm_events),
    )
    .map_err(|e| CliError::new(silas_core::Coded::code(&e), e.to_string()))?;
    bridge.set_breakers(breakers);
    if let Some(m) = &memory {
        bridge.set_memory(m.clone());
    }
    // Unconfigured context windows come from the servers' model listings;
    // start-up does not wait (turns before it finishes use the total).
    {
        let agents = agents.clone();
        tokio::spawn(async move { agents.discover_context_windows().await });
    }
    let (dispatch_tx, dispatch_rx) = tokio::sync::mpsc::channel(64);
    let scheduler = SchedulerArgs {
        store: store.clone(),
        timezone,
        clock: Arc::new(SystemClock),
        config_jobs: SchedulerConfigJobs::from_config(&cfg),
        dispatch: Some(dispatch_tx.clone()),
        housekeeper: Some(HOUSEKEEPER_NAME.into()),
        connections: Some(CONNECTIONS_NAME.into()),
        events: tokio::sync::broadcast::channel(64).0,
    };
    let connection_events = tokio::sync::broadcast::channel(64).0;
    let connection_failures = connection_events.subscribe();
    // §5.10.2: a connection skill's script beyond its grant asks the owner.
    let connection_gate: Arc<dyn silas_actors::connection::permission_gate::PermissionEscalator> =
        Arc::new(connection_runtime.clone());
    let connections = ConnectionArgs {
        store: store.clone(),
        scripts: Arc::new(silas_actors::connection::runtime::SkillScripts(
            connection_runtime,
        )),
        refresh: RefreshPolicy::default(),
        auto_recovery: cfg.connections.auto_recovery_enabled,
        scheduler: Some(SCHEDULER_NAME.into()),
        events: connection_events,
    };
    let (status_tx, _) = tokio::sync::broadcast::channel(256);
    let mut work_engine = work_engine(
        &cfg,
        &store,
        &approvals,
        &agents,
        status_tx.clone(),
        mcp.clone(),
        timezone.name(),
    )?;
    // Background work runs the skills its approved plan bound (issue #17).
    work_engine.skills = Some(skills.clone());
    work_engine.connections = Some(connection_gate);
    // Gates run in the supervised GateRunner actor; the pipeline and the
    // WorkExecutor reach it by name, so they follow its restarts.
    // The owner configured LLM gates the daemon cannot ask: say so at
    // start, not only in each gate's audit entry.
    if let silas_llm::judge::GateModelBinding::Unavailable(why) = &agents.gate_model
        && cfg
            .gates
            .system
            .iter()
            .any(|g| g.get("provider").and_then(|p| p.as_str()) == Some("llm"))
    {
        println!(
            "LLM gates: {why} — quality gates record llm_error, promoted gates block what they check"
        );
    }
    for (name, why) in silas_actors::turn::pipeline::script_gate_problems(&cfg) {
        println!("gate {name}: {why} — it blocks every check it makes until gates.system is fixed");
    }
    // LLM gates (§5.5.3) ask `gates.llm_defaults.model` within the same
    // model-call limits as turns and background work.
    let judge: Arc<dyn silas_actors::gate_model::QualityJudge> =
        Arc::new(silas_actors::gate_model::ModelJudge::new(
            &cfg,
            agents.gate_model.clone(),
            work_engine.config.rate_limits.clone(),
            store.clone(),
        ));
    let gate_runner = GateRunnerArgs::from_config_with_judge(Arc::new(cfg.clone()), Some(judge));
    // Folders not installed at their current hash wait for the owner's
    // approval on a card (once per hash); a broken folder is audited.
    match skills.scan_and_offer() {
        Ok(s) => tracing::info!(
            installed = s.installed.len(),
            offered = s.offered.len(),
            waiting = s.waiting.len(),
            shipped = s.shipped.len(),
            refused = s.refused.len(),
            broken = s.broken.len(),
            "skills scanned"
        ),
        Err(e) => tracing::warn!("skills directory not scanned: {e}"),
    }
    let stream = silas_actors::stream::StreamArgs {
        deps: Arc::new(silas_actors::turn::pipeline::TurnDeps {
            skills: Some(skills),
            gates: GateHandle::daemon(),
            // Every answer becomes a token only through the supervised engine.
            approval_engine: silas_actors::approval::ApprovalHandle::daemon(),
            // One set of §18.5 limiters for turns and background work, so
            // the global model-call cap covers both.
            limits: work_engine.config.rate_limits.clone(),
            ..silas_actors::turn::pipeline::TurnDeps::standard_with(
                store.clone(),
                Arc::new(cfg.clone()),
                agents,
                approvals.clone(),
                Arc::new(crate::channels::Channels {
                    web: bridge.clone(),
                    telegram: telegram.as_ref().map(|t| t.bridge.clone()),
                }),
                match &memory {
                    Some(m) => Arc::new(m.clone()),
                    None => Arc::new(silas_actors::memory::KeywordMemory::new(store.clone())),
                },
            )
        }),
        dispatch: dispatch_tx,
        status: status_tx.clone(),
        restart_policy: RestartPolicy::default(),
    };
    // Every incarnation of the WorkExecutor takes the same dispatch inbox
    // over, so the Stream's and the scheduler's senders survive its restart.
    let dispatch_rx = silas_actors::work_executor::DispatchInbox::from(dispatch_rx);
    let mut children = vec![
        // First, so it is registered before the Stream replays turns.
        GateRunnerActor::child_spec(gate_runner),
        Housekeeper::child_spec(housekeeper),
        // Before the Stream: a replayed turn may answer a card.
        ApprovalEngine::child_spec(approvals.clone()),
        silas_actors::stream::Stream::child_spec(stream),
        // Named: `silas work cancel` reaches it through the control socket.
        ChildSpec::named(
            "work_executor",
            silas_actors::work_executor::WORK_EXECUTOR_NAME,
            RestartMode::Permanent,
            move || {
                (
                    silas_actors::work_executor::WorkExecutor,
                    silas_actors::work_executor::WorkExecutorArgs {
                        engine: work_engine.clone(),
                        dispatch_rx: Some(dispatch_rx.clone()),
                        resume_scope_id: "owner".into(),
                        // Per-item restart limit; no fault hook in production.
                        supervision: Default::default(),
                    },
                )
            },
        ),
    ];
    // Restart policies (ARCHITECTURE.md): all permanent; each rebuilds
    // from redb (the GateRunner from config). The scheduler starts last so
    // the actors its startup catch-up runs talk to are already registered.
    children.push(ConnectionManager::child_spec(connections));
    if cfg.scheduler.enabled {
        children.push(Scheduler::child_spec(scheduler));
    }
    let (root, mut root_join) = ractor::Actor::spawn(
        Some("silas.root".into()),
        RootSupervisor,
        SupervisorArgs {
            children,
            policy: RestartPolicy::default(),
        },
    )
    .await
    .map_err(|e| {
        CliError::new(
            ErrorCode::ECfgIo,
            format!("cannot start the actor system: {e}"),
        )
    })?;

    // Connection failures reach the owner as cards (§5.10.4).
    tokio::spawn(silas_actors::connection::surface_failures(
        connection_failures,
        silas_actors::stream::StreamHandle::find,
        store.clone(),
        card_timeouts,
    ));

    // Polling starts once the Stream is registered (updates go to it).
    let telegram_on = telegram.is_some();
    let telegram_tasks = telegram
        .map(|t| t.spawn(stop_rx_tasks.clone()))
        .unwrap_or_default();
    audit_event(
        &store,
        "daemon.started",
        json!({"pid": std::process::id(), "web": addr.to_string(), "owner_public_key": owner_public_key}),
    );
    banner::print(&banner::Banner {
        cfg: &cfg,
        pairing_link: pairing_link.as_deref(),
        paired,
        timezone: timezone.name(),
        telegram_on,
        addr,
    });
    tracing::info!(%addr, data_dir = %cfg.data_dir.display(), "silas started");
    // Start-up's scratch memory (config, compiled patterns, store opening)
    // is free now; an idle daemon keeps only what it uses (issue #19 item 4).
    crate::malloc::trim();

    // Either a signal asks us to stop, or the supervision tree gave up
    // (restart intensity exceeded): both end in an orderly shutdown, the
    // latter with a non-zero exit code.
    let (reason, escalated) = tokio::select! {
        signal = signals.next() => (signal.to_string(), false),
        Some(by) = stop_requests.recv() => (format!("silas stop by {by}"), false),
        _ = &mut root_join => ("supervisor escalation".to_string(), true),
    };
    tracing::info!(reason, "shutting down");
    let grace = Duration::from_secs(cfg.backpressure.shutdown_grace_seconds);
    let drain::TurnDrain {
        finished: turns_drained,
        hurried,
        left_queued,
    } = drain::drain_turns(grace, &mut signals).await;
    // Hurried: what is left gets a moment, not the whole grace again.
    let grace = if hurried {
        grace.min(signals::HURRIED_GRACE)
    } else {
        grace
    };
    let _ = stop_tx.send(true);
    let drained = tokio::time::timeout(grace, server_task).await.is_ok() && turns_drained;
    // Stopped with the web server (same signal); it removes its socket.
    let _ = tokio::time::timeout(Duration::from_secs(2), control_task).await;
    activity_feed.abort();
    for t in telegram_tasks {
        let _ = tokio::time::timeout(Duration::from_secs(2), t).await;
    }
    if !escalated {
        root.stop(Some("shutdown".into()));
        let _ = tokio::time::timeout(grace, root_join).await;
        // Cut off by this stop, not crashed: the attempt is not charged
        // toward setting the message aside (it is replayed at the next start).
        match store.inbox().refund_cut_off().await {
            Ok(0) => {}
            Ok(n) => tracing::info!(
                messages = n,
                "shutdown: cut-off messages are replayed at the next start"
            ),
            Err(e) => {
                tracing::warn!(code = %silas_core::Coded::code(&e), "shutdown: cut-off attempts not refunded: {e}")
            }
        }
    }
    // No skill's MCP server outlives the daemon.
    mcp.registry().shutdown().await;
    // The memory index commits what it held back, so the next start finds
    // it whole instead of rebuilding it.
    if let Some(m) = &memory
        && let Err(e) = m.flush()
    {
        tracing::warn!(code = %silas_core::Coded::code(&e), "memory index: last commit failed: {e}");
    }

    audit_event(
        &store,
        "daemon.stopped",
        json!({"reason": reason, "drained": drained, "hurried": hurried, "escalated": escalated,
               "left_queued": left_queued}),
    );
    let checkpoint = store.audit().write_checkpoint(&seal)?;
    tracing::info!(%checkpoint, "audit checkpoint written; bye");
    if escalated {
        return Err(CliError::new(
            ErrorCode::EDbIo,
            "a supervised component kept failing (restart intensity exceeded); see the log above",
        ));
    }
    Ok(ExitCode::SUCCESS)
}

/// The skill install flow (issue #17): dry runs and skill scripts in the
/// sandbox (this binary is the launcher), credential refs resolved from the
/// encrypted secret store at spawn only.
fn skill_host(
    cfg: &Config,
    store: &Store,
    credentials: silas_actors::skills::Credentials,
    mcp: Arc<silas_actors::skills_mcp::McpSkills>,
) -> Result<silas_actors::skills::SkillHost, CliError> {
    let launcher = silas_sandbox::Launcher::current_exe()
        .map_err(|e| CliError::new(silas_core::Coded::code(&e), e.to_string()))?;
    let runner = silas_skill::run::SkillRunner::new(
        silas_sandbox::SubprocessSandbox::new(launcher),
        cfg.sandbox_work_dir(),
    );
    Ok(silas_actors::skills::SkillHost::new(store.clone(), cfg)
        .with_runner(runner)
        .with_credentials(credentials)
        .with_mcp(mcp)
        .with_shipped(crate::bundled_skills::shipped()))
}

/// Credential refs resolved from the encrypted secret store, at spawn only.
fn secret_credentials(
    secrets: Arc<silas_keys::secrets::SecretStore>,
) -> silas_actors::skills::Credentials {
    Arc::new(move |r: &str| secrets.get(r).map_err(|e| e.to_string()))
}

/// Skills' MCP servers (issue #17 item 7), shared by the install dry run
/// and the WorkExecutor: sandboxed (this binary is the launcher), each with
/// its own egress proxy limited to the skill's declared hosts.
fn mcp_skills(
    cfg: &Config,
    store: &Store,
    credentials: silas_actors::skills::Credentials,
) -> Result<Arc<silas_actors::skills_mcp::McpSkills>, CliError> {
    let launcher = silas_sandbox::Launcher::current_exe()
        .map_err(|e| CliError::new(silas_core::Coded::code(&e), e.to_string()))?;
    let registry = silas_execution::mcp_registry::McpRegistry::new(
        silas_sandbox::SubprocessSandbox::new(launcher),
        silas_execution::mcp_registry::McpRegistryConfig::new(cfg.sandbox_work_dir()),
    )
    .with_system_egress_guard();
    Ok(Arc::new(silas_actors::skills_mcp::McpSkills::new(
        store.clone(),
        cfg,
        Arc::new(registry),
        credentials,
    )))
}

/// The WorkExecutor's engine: sandboxed executors (this binary doubles as the
/// sandbox launcher), the verification runner, gates, agents and approvals.
fn work_engine(
    cfg: &Config,
    store: &Store,
    approvals: &ApprovalService,
    agents: &silas_llm::Agents,
    events: tokio::sync::broadcast::Sender<silas_actors::work::WorkStatusEvent>,
    mcp: Arc<silas_actors::skills_mcp::McpSkills>,
    schedule_zone: &str,
) -> Result<silas_actors::work_executor::WorkEngine, CliError> {
    let launcher = silas_sandbox::Launcher::current_exe()
        .map_err(|e| CliError::new(silas_core::Coded::code(&e), e.to_string()))?;
    let sandbox = silas_sandbox::SubprocessSandbox::new(launcher);
    let limits = silas_sandbox::Limits {
        memory_mb: u64::from(cfg.sandbox.default_memory_mb),
        cpu_seconds: u64::from(cfg.sandbox.default_cpu_seconds),
        ..silas_sandbox::Limits::default()
    };
    let work_base = cfg.sandbox_work_dir();
    let mut registry =
        silas_execution::executors::ExecutorRegistry::new(sandbox.clone(), work_base);
    // §9.2: `web_search` is registered only with a valid provider + key;
    // otherwise the tool is simply absent (the error never names the key).
    if cfg.web_search_enabled() {
        match silas_execution::web_search::WebSearch::from_config(cfg) {
            Ok(Some(search)) => registry = registry.with_web_search(search),
            Ok(None) => {}
            Err(e) => tracing::warn!(error = %e, "web_search not registered"),
        }
    }
    // Checks a `kill -9` cut off left their directories; nothing runs yet.
    let swept = silas_execution::verification::sweep_leftovers(&cfg.verify_dir());
    if swept > 0 {
        tracing::info!(swept, "removed check directories a stop left behind");
    }
    Ok(silas_actors::work_executor::WorkEngine {
        store: store.clone(),
        approvals: approvals.clone(),
        agents: Arc::new(agents.clone()),
        registry: Arc::new(registry),
        verifier: Arc::new(silas_execution::verification::VerificationRunner::new(
            sandbox,
            cfg.verify_dir(),
            Vec::new(),
            limits,
        )),
        gate_runner: GateHandle::daemon(),
        config: silas_actors::work_executor::WorkConfig {
            system_gates: cfg.gates.system.clone(),
            max_gate_evals: cfg.limits.max_gate_evals_per_turn,
            artifacts_dir: cfg.data_dir.join("artifacts"),
            journal_dir: cfg.data_dir.join("workspace-journal"),
            undo_window: std::time::Duration::from_secs(cfg.approval.undo_window_seconds),
            tool_limits: Default::default(),
            rate_limits: Arc::new(silas_actors::limits::RuntimeLimits::from_config(
                &cfg.limits,
            )),
            schedule_zone: schedule_zone.to_owned(),
        },
        events,
        skills: None,
        mcp: Some(mcp),
        connections: None,
    })
}
