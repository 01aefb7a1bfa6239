//! Automatic permission escalation end to end (issue #17, §5.10.2 "Gate
//! integration"): an approved task's executor (scripted FakeLlm) calls
//! `run_skill_script` on an installed connection skill whose script declares
//! `notes.write` while the connection holds only `notes.read`. The
//! `connection_permission` gate asks the owner through a real Stream with a
//! `permission_escalation` card; the connection layer is the daemon's real
//! `ConnectionRuntime` (the re-authorisation runs the skill's `setup.py` in
//! the sandbox and registers the grown grant with a ConnectionManager).
//!
//! * Deny — the tool result is the `E_GATE_BLOCKED` error; the script never ran.
//! * Just this once — it runs once through a consumed single-use
//!   `connection_act` token (a replay is refused); the grant is unchanged
//!   and the next call asks again.
//! * Approve — it runs, the grant now includes `notes.write`, and the next
//!   call runs without a card.
//!
//! And from the client side: another scope, a connection that is not the
//! owner's and a forged card id cannot answer; a replayed answer is refused.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Fx, Turns, audit_data, item, output};
use ractor::Actor;
use serde_json::{Value, json};
use silas_actors::approval::{AnswerOrigin, ApprovalHandle};
use silas_actors::cards::{CardKind, CardRejection, CardResponse, CardTimeouts};
use silas_actors::channel::{MemorySink, Outbound};
use silas_actors::connection::permission_gate::PermissionEscalator;
use silas_actors::connection::runtime::{
    ConnectionRuntime, ConnectionRuntimeArgs, ConnectionSecrets,
};
use silas_actors::connection::{
    ConnectionArgs, ConnectionManager, ConnectionScripts, RefreshPolicy, RefreshResult,
    ScriptError, ScriptFuture,
};
use silas_actors::skills::{InstallOutcome, SkillHost};
use silas_actors::stream::StreamHandle;
use silas_core::approval::Subject;
use silas_core::cards::CardPayload;
use silas_core::config::Config;
use silas_core::model::approval::ConnectionPermissionApproval;
use silas_core::model::connections::{
    AuthStrategy, Connection, ConnectionStatus, HealthCheckResult,
};
use silas_core::model::skills::SkillSource;
use silas_core::model::work::{WorkItem, WorkItemStatus};
use silas_core::{Coded, ErrorCode, Timestamp};
use silas_execution::connection_setup::SecretSink;
use silas_sandbox::SubprocessSandbox;
use silas_skill::run::SkillRunner;
use silas_storage::PendingCard;
use silas_testkit::Reply;
use zeroize::Zeroizing;

const SKILL: &str = "notes-conn";
const CONN: &str = "conn-notes-conn";

const FRONT: &str = "---\nname: notes-conn\ndescription: Use when the owner wants a line added to their hosted notes.\ntype: connection\nauth_strategy: secure_input\ninitial_permissions: [notes.read]\navailable_permissions: [notes.read, notes.write]\nscript_permissions:\n  scripts/append.py: [notes.write]\nscript_args:\n  scripts/append.py:\n    text: {type: string, max_length: 200}\n---\n# Notes\n\nRun scripts/append.py with the text to add.\n";
const APPEND: &str = "import sys\nargs = sys.argv[1:]\nif args == ['--help'] or not args:\n    print('usage: append.py --text TEXT')\n    sys.exit(0)\nprint('appended:', args[args.index('--text') + 1])\n";
const HEALTH: &str = "import json\nprint(json.dumps({'healthy': True, 'latency_ms': 1}))\n";
// The re-authorisation: the provider grants the incremental scopes.
const SETUP: &str = "import json, sys\nif sys.argv[1:] == ['--help']:\n    print('usage: setup.py')\n    sys.exit(0)\nprint(json.dumps({'type': 'done'}), flush=True)\n";

/// The secret store, in memory (no secret is used by this skill).
#[derive(Default)]
struct MemSecrets(Mutex<HashMap<String, Vec<u8>>>);

impl SecretSink for MemSecrets {
    fn put(&self, r: &str, v: &[u8]) -> Result<(), String> {
        self.0.lock().unwrap().insert(r.into(), v.to_vec());
        Ok(())
    }
    fn remove(&self, r: &str) {
        self.0.lock().unwrap().remove(r);
    }
}

impl ConnectionSecrets for MemSecrets {
    fn get(&self, r: &str) -> Result<Zeroizing<Vec<u8>>, String> {
        self.0
            .lock()
            .unwrap()
            .get(r)
            .cloned()
            .map(Zeroizing::new)
            .ok_or_else(|| "absent".into())
    }
}

/// The ConnectionManager's health scripts (not exercised here).
struct Healthy;

impl ConnectionScripts for Healthy {
    fn health_check(&self, _: &Connection) -> ScriptFuture<Result<HealthCheckResult, ScriptError>> {
        Box::pin(async { Err(ScriptError::Unavailable("not in this test".into())) })
    }
    fn refresh_token(&self, _: &Connection) -> ScriptFuture<Result<RefreshResult, ScriptError>> {
        Box::pin(async { Err(ScriptError::Unavailable("not in this test".into())) })
    }
    fn recover(&self, _: &Connection) -> ScriptFuture<Result<(), ScriptError>> {
        Box::pin(async { Err(ScriptError::Unavailable("not in this test".into())) })
    }
}

struct Rig {
    f: Fx,
    turns: Turns,
    sink: MemorySink,
    host: Arc<SkillHost>,
    rt: Arc<ConnectionRuntime>,
    _stop: tokio::sync::watch::Sender<bool>,
}

fn connection() -> Connection {
    Connection {
        connection_id: CONN.into(),
        name: "Hosted notes".into(),
        domain: "personal".into(),
        skill_name: SKILL.into(),
        auth_strategy: AuthStrategy::SecureInput,
        permissions: vec![],
        permissions_granted: vec!["notes.read".into()],
        permissions_available: vec!["notes.read".into(), "notes.write".into()],
        initial_permissions: vec!["notes.read".into()],
        status: ConnectionStatus::Active,
        health_check: "*/30 * * * *".into(),
        token_expires_at: None,
        refresh_token_expires_at: None,
        last_health_check: None,
        last_refresh: None,
        settings: Default::default(),
    }
}

/// The skill installed through its card, its connection active with
/// `notes.read`, a running Stream, a ConnectionManager and the runtime the
/// daemon wires as the WorkEngine's escalator.
async fn rig(manager: &str) -> Rig {
    let mut f = Fx::new().await;
    let dir = f.path("skills").join(SKILL);
    std::fs::create_dir_all(dir.join("scripts")).unwrap();
    std::fs::write(dir.join("SKILL.md"), FRONT).unwrap();
    std::fs::write(dir.join("scripts/append.py"), APPEND).unwrap();
    std::fs::write(dir.join("scripts/health_check.py"), HEALTH).unwrap();
    std::fs::write(dir.join("scripts/setup.py"), SETUP).unwrap();
    let cfg = Config {
        skills_dir: f.path("skills"),
        ..Config::default()
    };
    let runner = SkillRunner::new(SubprocessSandbox::new(common::launcher()), f.path("work"));
    let host = SkillHost::new(f.store.clone(), &cfg).with_runner(runner);
    let card = host.offer(SKILL, SkillSource::Discovered, vec![]).unwrap();
    let out = host
        .decide(
            &ApprovalHandle::standalone(f.svc.clone()),
            &card,
            common::approved(),
            &common::owner_origin(&f.svc),
        )
        .await
        .unwrap();
    assert!(matches!(out, InstallOutcome::Installed { .. }), "{out:?}");
    let host = Arc::new(host);
    f.store.records::<Connection>().put(&connection()).unwrap();

    let sink = MemorySink::new();
    let deps = silas_actors::turn::pipeline::TurnDeps::standard(
        f.store.clone(),
        f.cfg.clone(),
        common::agents(&f.fake),
        f.svc.clone(),
        Arc::new(sink.clone()),
    );
    let turns = common::spawn_stream(deps, common::fast_restarts()).await;
    Actor::spawn(
        Some(manager.into()),
        ConnectionManager,
        ConnectionArgs {
            store: f.store.clone(),
            scripts: Arc::new(Healthy),
            refresh: RefreshPolicy::default(),
            auto_recovery: false,
            scheduler: None,
            events: tokio::sync::broadcast::channel(16).0,
        },
    )
    .await
    .unwrap();
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let stream = turns.stream.clone();
    let rt = ConnectionRuntime::new(ConnectionRuntimeArgs {
        store: f.store.clone(),
        skills: host.clone(),
        sandbox: SubprocessSandbox::new(common::launcher()),
        work_base: f.path("work"),
        secrets: Arc::new(MemSecrets::default()),
        egress: None,
        timeouts: CardTimeouts::from_config(&f.cfg),
        setup_timeout: Duration::from_secs(60),
        stop: stop_rx,
        stream: Arc::new(move || Some(stream.clone())),
        manager: manager.into(),
    });
    f.engine.skills = Some(host.clone());
    f.engine.connections = Some(Arc::new(rt.clone()) as Arc<dyn PermissionEscalator>);
    Rig {
        f,
        turns,
        sink,
        host,
        rt,
        _stop: stop,
    }
}

impl Rig {
    /// An approved task bound to the connection skill.
    fn task(&self, id: &str) -> WorkItem {
        let mut t = item(json!({
            "id": id, "type": "task", "title": "Add a note", "body": "Add 'buy milk' to my notes.",
            "skills": [SKILL],
        }));
        silas_actors::turn::skill_context::bind(Some(&*self.host), &mut t).unwrap();
        self.f.approve(&mut t);
        t
    }

    fn granted(&self) -> Vec<String> {
        self.f
            .store
            .records::<Connection>()
            .get(CONN)
            .unwrap()
            .unwrap()
            .permissions_granted
    }

    fn runs(&self) -> usize {
        audit_data(&self.f.store, "skill_script_run").len()
    }

    fn escalation_cards(&self) -> Vec<PendingCard> {
        escalation_cards(&self.sink)
    }

    /// Runs task `id` whose executor calls `append.py` with `text`; the
    /// next escalation card (if one comes) is answered `verdict` by the
    /// owner. Returns the item's status, the card answered and the tool
    /// result.
    async fn run(
        &self,
        id: &str,
        text: &str,
        verdict: &str,
    ) -> (WorkItemStatus, Option<PendingCard>, String) {
        self.task(id);
        let before = self.escalation_cards().len();
        self.f.fake.push(Reply::tool_call(
            "run_skill_script",
            &json!({"skill": SKILL, "script": "scripts/append.py", "args": {"text": text}}),
        ));
        self.f.fake.push(output("done"));
        let answerer = tokio::spawn(answer_next(
            self.turns.stream.clone(),
            self.sink.clone(),
            before,
            verdict.to_string(),
            owner(),
        ));
        let r = self.f.engine.run_task(id, "owner").await.unwrap();
        let card = if self.escalation_cards().len() > before {
            answerer.await.unwrap()
        } else {
            answerer.abort();
            None
        };
        (r.status, card, last_tool_result(&self.f))
    }
}

/// The tool result the model saw last (this run's).
fn last_tool_result(f: &Fx) -> String {
    let reqs = f.fake.requests();
    let last = reqs.last().expect("the model was asked");
    last.body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .rfind(|m| m["role"] == "tool")
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_string()
}

fn owner() -> AnswerOrigin {
    AnswerOrigin::new("test", "owner-device")
}

fn escalation_cards(sink: &MemorySink) -> Vec<PendingCard> {
    sink.sent()
        .into_iter()
        .filter_map(|o| match o {
            Outbound::Card { card }
                if matches!(card.card, CardPayload::PermissionEscalation(_)) =>
            {
                Some(card)
            }
            _ => None,
        })
        .collect()
}

/// Waits for escalation card number `index` and answers it `verdict`.
async fn answer_next(
    stream: StreamHandle,
    sink: MemorySink,
    index: usize,
    verdict: String,
    origin: AnswerOrigin,
) -> Option<PendingCard> {
    let card = wait_card(&sink, index).await?;
    stream
        .answer_card(
            "owner",
            &card.request_id,
            CardKind::PermissionEscalation,
            CardResponse::Verdict { verdict },
            origin,
        )
        .await
        .unwrap();
    Some(card)
}

async fn wait_card(sink: &MemorySink, index: usize) -> Option<PendingCard> {
    for _ in 0..600 {
        if let Some(c) = escalation_cards(sink).get(index) {
            return Some(c.clone());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_script_beyond_the_grant_waits_for_the_owner_and_the_answer_decides() {
    let rig = rig("test.escalation.decides").await;

    // (a) Deny: the clear error, the script never ran.
    let (status, card, result) = rig.run("t-deny", "buy milk", "deny").await;
    // Its only call was denied: nothing ran, so the task is not done.
    assert_eq!(status, WorkItemStatus::Failed);
    let card = card.expect("the escalation card reached the owner");
    let CardPayload::PermissionEscalation(c) = &card.card else {
        panic!()
    };
    assert_eq!(c.connection_name, "Hosted notes");
    assert_eq!(c.current_permissions, ["notes.read"]);
    assert_eq!(c.requested_permissions, ["notes.write"]);
    assert_eq!(
        c.risk_level,
        Some(silas_core::risk::RiskLevel::Medium),
        "read → write on the same resource"
    );
    assert!(
        result.starts_with("E_GATE_BLOCKED: connection_permission:")
            && result.contains("did not run"),
        "{result}"
    );
    assert_eq!(rig.runs(), 0, "the script never ran");
    assert_eq!(rig.granted(), ["notes.read"]);

    // (b) Just this once: runs once through a consumed single-use token.
    let (_, card, result) = rig.run("t-once", "buy eggs", "just_this_once").await;
    assert!(card.is_some(), "asked again");
    assert!(result.contains("appended: buy eggs"), "{result}");
    assert_eq!(rig.runs(), 1);
    assert_eq!(rig.granted(), ["notes.read"], "the record is unchanged");
    let run = audit_data(&rig.f.store, "tool_executed")
        .into_iter()
        .find(|d| d["work_item_id"] == json!("t-once") && d["tool_name"] == "run_skill_script")
        .unwrap();
    assert_eq!(run["permissions_once"], json!(["notes.write"]));
    let token_id = run["permissions_once_token"].as_str().unwrap();
    let token = rig.f.store.approvals().get(token_id).unwrap().unwrap();
    assert_eq!(token.scope.as_str(), "connection_act");
    assert_eq!((token.executions_used, token.max_executions), (1, 1));
    assert_eq!(token.work_item_id, "t-once");
    // The token replayed for the very call it was minted for: refused.
    let grant = ConnectionPermissionApproval {
        connection_id: CONN.into(),
        permissions: vec!["notes.write".into()],
        work_item_id: "t-once".into(),
        execution_id: run["execution_id"].as_str().unwrap().into(),
        skill: SKILL.into(),
        script: "scripts/append.py".into(),
        arguments: json!({"text": "buy eggs"}),
    };
    let replay = rig
        .f
        .svc
        .verify_subject(
            &token,
            Subject::ConnectionPermission(&grant),
            Timestamp::now(),
        )
        .unwrap_err();
    assert_eq!(replay.code(), ErrorCode::EApprovalExhausted, "{replay}");
    // The next call needs a new card (denied here: nothing more runs).
    let (_, card, result) = rig.run("t-once-2", "buy bread", "deny").await;
    assert!(card.is_some(), "a second call asks again");
    assert!(result.contains("E_GATE_BLOCKED"), "{result}");
    assert_eq!(rig.runs(), 1);

    // (c) Approve: re-authorised, runs, the grant grows; the next call runs
    // without a card.
    let (_, card, result) = rig.run("t-approve", "call mum", "approve").await;
    assert!(card.is_some());
    assert!(result.contains("appended: call mum"), "{result}");
    assert_eq!(rig.granted(), ["notes.read", "notes.write"]);
    assert_eq!(rig.runs(), 2);
    let cards = rig.escalation_cards().len();
    let (_, card, result) = rig.run("t-after", "water plants", "deny").await;
    assert!(card.is_none(), "no card once granted");
    assert_eq!(rig.escalation_cards().len(), cards);
    assert!(result.contains("appended: water plants"), "{result}");
    assert_eq!(rig.runs(), 3);
    // Every decision audited; the approve logged a connection_manage token.
    let decisions: Vec<Value> = audit_data(&rig.f.store, "connection.permission_escalation")
        .into_iter()
        .map(|d| d["decision"].clone())
        .collect();
    assert_eq!(
        decisions,
        [
            json!("deny"),
            json!("just_this_once"),
            json!("deny"),
            json!("approve")
        ]
    );
    let issued: Vec<Value> = audit_data(&rig.f.store, "approval.issued")
        .into_iter()
        .map(|d| d["scope"].clone())
        .collect();
    assert!(issued.contains(&json!("connection_manage")), "{issued:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_owner_answers_an_escalation_card_once() {
    let rig = rig("test.escalation.clients").await;
    rig.task("t-attack");
    rig.f.fake.push(Reply::tool_call(
        "run_skill_script",
        &json!({"skill": SKILL, "script": "scripts/append.py", "args": {"text": "x"}}),
    ));
    rig.f.fake.push(output("done"));
    let stream = rig.turns.stream.clone();
    let sink = rig.sink.clone();
    let attacker = tokio::spawn(async move {
        let card = wait_card(&sink, 0).await.expect("card shown");
        let id = card.request_id.clone();
        let approve = || CardResponse::Verdict {
            verdict: "approve".into(),
        };
        let mut refused = Vec::new();
        // A customer's scope, the owner's scope from a connection that never
        // authenticated as the owner, and a forged card id.
        for (scope, rid, origin) in [
            (
                "ws-customer",
                id.clone(),
                AnswerOrigin::new("web", "customer-1"),
            ),
            (
                "owner",
                id.clone(),
                AnswerOrigin::new("web", "unauthenticated-7"),
            ),
            ("owner", format!("{id}-forged"), owner()),
        ] {
            refused.push(
                stream
                    .answer_card(
                        scope,
                        &rid,
                        CardKind::PermissionEscalation,
                        approve(),
                        origin,
                    )
                    .await,
            );
        }
        // The owner denies; then the answer frame replayed (even as approve).
        let first = stream
            .answer_card(
                "owner",
                &id,
                CardKind::PermissionEscalation,
                CardResponse::Verdict {
                    verdict: "deny".into(),
                },
                owner(),
            )
            .await;
        let replay = stream
            .answer_card(
                "owner",
                &id,
                CardKind::PermissionEscalation,
                approve(),
                owner(),
            )
            .await;
        // The customer cannot tell an answered card from one that never was.
        let probe = stream
            .answer_card(
                "ws-customer",
                &id,
                CardKind::PermissionEscalation,
                approve(),
                AnswerOrigin::new("web", "customer-1"),
            )
            .await;
        refused.push(probe);
        (id, refused, first, replay)
    });
    let r = rig.f.engine.run_task("t-attack", "owner").await.unwrap();
    // The owner denied its only call: nothing ran.
    assert_eq!(r.status, WorkItemStatus::Failed, "{r:?}");
    assert!(r.summary.contains("nothing ran"), "{}", r.summary);
    let (id, refused, first, replay) = attacker.await.unwrap();
    assert_eq!(
        refused[0],
        Err(CardRejection::Unknown(id.clone())),
        "another scope"
    );
    assert_eq!(
        refused[1],
        Err(CardRejection::Unknown(id.clone())),
        "not the owner's connection"
    );
    assert_eq!(
        refused[2],
        Err(CardRejection::Unknown(format!("{id}-forged"))),
        "forged id"
    );
    assert_eq!(
        refused[3],
        Err(CardRejection::Unknown(id.clone())),
        "another scope, after the answer"
    );
    assert!(first.is_ok(), "{first:?}");
    assert!(
        matches!(replay, Err(CardRejection::AlreadyAnswered(_))),
        "{replay:?}"
    );
    // Nothing ran, nothing was granted, no token minted for a connection.
    assert_eq!(rig.runs(), 0);
    assert_eq!(rig.granted(), ["notes.read"]);
    let result = last_tool_result(&rig.f);
    assert!(result.contains("E_GATE_BLOCKED"), "{result}");
    let refusals = audit_data(&rig.f.store, "card_answer_refused");
    let reasons: Vec<&Value> = refusals.iter().map(|d| &d["reason"]).collect();
    assert!(reasons.contains(&&json!("not_owner")), "{reasons:?}");
    assert!(reasons.contains(&&json!("other_scope")), "{reasons:?}");
    assert!(
        !audit_data(&rig.f.store, "approval.issued")
            .iter()
            .any(|d| d["scope"] == "connection_act" || d["scope"] == "connection_manage")
    );
}

/// A first setup whose script says `done` without handing over a credential
/// does not make the connection active (every call would then fail with no
/// token): it goes back to `proposed`, audited as `no_credential`, and the
/// owner is told. (With the token handed over it completes:
/// `connections::a_device_code_connection_…`, `e2e_escalation`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_setup_without_a_credential_is_not_active() {
    let rig = rig("conn-manager-no-credential").await;
    rig.f.store.records::<Connection>().delete(CONN).unwrap();
    let status = |rig: &Rig| {
        rig.f
            .store
            .records::<Connection>()
            .get(CONN)
            .unwrap()
            .map(|c| c.status)
    };
    let setup_ended = |rig: &Rig, event: &str| {
        rig.f
            .store
            .audit()
            .tail(1000)
            .unwrap()
            .into_iter()
            .filter(|e| e.event == event)
            .count()
    };
    let id = rig.rt.start_setup(SKILL, Default::default()).await.unwrap();
    assert_eq!(id, CONN);
    for _ in 0..200 {
        if setup_ended(&rig, "connection.setup_failed")
            + setup_ended(&rig, "connection.setup_completed")
            > 0
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let failed: Vec<_> = rig
        .f
        .store
        .audit()
        .tail(1000)
        .unwrap()
        .into_iter()
        .filter(|e| e.event == "connection.setup_failed")
        .collect();
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(
        failed[0].data["reason"], "no_credential",
        "{:?}",
        failed[0].data
    );
    assert_eq!(status(&rig), Some(ConnectionStatus::Proposed));
    let told = || {
        rig.sink.sent().iter().any(|o| {
            matches!(o, silas_actors::channel::Outbound::OwnerNotice { text, .. }
                if text.contains("without handing over a credential"))
        })
    };
    for _ in 0..100 {
        if told() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(told(), "{:?}", rig.sink.sent());
}
