//! The Housekeeper: maintenance of durable state — the chronicle retention
//! policy (§4.14, default 90 days), pruning nonce records older than the
//! nonce TTL (§4.5), and an audit checkpoint (§4.16) when the chain has grown
//! and the interval has passed, signed with the owner key and mirrored
//! outside the store (`silas_storage::audit_seal`). In the daemon the Scheduler decides *when*
//! (jobs `chronicle_retention`, `nonce_prune`, `audit_checkpoint`, sent as
//! [`HousekeeperMsg::Run`]), so there is one timing mechanism; a standalone
//! housekeeper can still tick on its own (`tick_every`). It keeps nothing
//! that redb does not also have: on (re)start it reads the latest checkpoint
//! back, so a restart neither skips nor repeats work. Store errors fail the
//! actor; its supervisor restarts it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ractor::concurrency::JoinHandle;
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use serde_json::json;
use silas_core::Timestamp;
use silas_storage::{CheckpointSigner, Store};

/// Whether a checkpoint should be written now (pure).
///
/// Due when the chain has entries not covered by the last checkpoint and
/// either `force` is set or `interval` has passed since the last one.
pub fn checkpoint_due(
    audit_len: u64,
    covered_len: u64,
    since_last: Duration,
    interval: Duration,
    force: bool,
) -> bool {
    audit_len > covered_len && (force || since_last >= interval)
}

#[derive(Clone)]
pub struct HousekeeperArgs {
    pub store: Store,
    pub retention_days: u32,
    /// Nonce records older than this are unreplayable by definition (§4.5).
    pub nonce_ttl: Duration,
    pub checkpoint_interval: Duration,
    /// Signs each checkpoint (the owner key, via `audit_seal::OwnerSeal`).
    pub signer: Arc<dyn CheckpointSigner>,
    /// Run all maintenance on this interval by itself; `None` when the
    /// Scheduler drives it.
    pub tick_every: Option<Duration>,
}

/// One kind of maintenance, as scheduled by the Scheduler.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HousekeepingJob {
    ChronicleRetention,
    NoncePrune,
    AuditCheckpoint,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HousekeepingReport {
    pub chronicle_pruned: u64,
    pub nonces_pruned: u64,
    pub checkpoint: Option<String>,
}

pub enum HousekeeperMsg {
    /// Periodic maintenance (all jobs).
    Tick,
    /// One job, when the Scheduler says it is due.
    Run(HousekeepingJob),
    /// Maintenance now, checkpointing whenever the chain grew; replies with what was done.
    RunNow(RpcReplyPort<HousekeepingReport>),
}

pub struct HousekeeperState {
    args: HousekeeperArgs,
    /// Number of audit entries covered by the latest checkpoint.
    covered_len: u64,
    last_checkpoint: Instant,
    timer: Option<JoinHandle<()>>,
}

pub struct Housekeeper;

/// Registered name of the daemon's housekeeper (the Scheduler finds it by it).
pub const HOUSEKEEPER_NAME: &str = "silas.housekeeper";

impl Housekeeper {
    /// The daemon's child spec: permanent, registered as [`HOUSEKEEPER_NAME`].
    pub fn child_spec(args: HousekeeperArgs) -> crate::supervisor::ChildSpec {
        crate::supervisor::ChildSpec {
            label: "housekeeper".into(),
            mode: crate::supervisor::RestartMode::Permanent,
            spawn: std::sync::Arc::new(move |parent| {
                let args = args.clone();
                Box::pin(async move {
                    let (r, _) = Actor::spawn_linked(
                        Some(HOUSEKEEPER_NAME.into()),
                        Housekeeper,
                        args,
                        parent,
                    )
                    .await?;
                    Ok(r.get_cell())
                })
            }),
        }
    }
}

impl HousekeeperState {
    fn run(&mut self, force: bool) -> Result<HousekeepingReport, ActorProcessingErr> {
        Ok(HousekeepingReport {
            chronicle_pruned: self.retention()?,
            nonces_pruned: self.prune_nonces()?,
            checkpoint: self.checkpoint(force)?,
        })
    }

    fn retention(&mut self) -> Result<u64, ActorProcessingErr> {
        let store = &self.args.store;
        let pruned = store
            .chronicle()
            .prune_older_than(Timestamp::now(), i64::from(self.args.retention_days))?;
        // The inbox keeps each delivered message and reply for
        // de-duplication; past retention their words go as the chronicle's do.
        let cutoff =
            Timestamp::now().minus(chrono::Duration::days(i64::from(self.args.retention_days)));
        let scrubbed = store.inbox().scrub_delivered_before(cutoff)?;
        if pruned > 0 || scrubbed > 0 {
            let data = json!({"removed": pruned, "inbox_scrubbed": scrubbed,
                              "retention_days": self.args.retention_days});
            if let serde_json::Value::Object(data) = data {
                store.audit().log("chronicle.pruned", data)?;
            }
        }
        Ok(pruned)
    }

    fn prune_nonces(&mut self) -> Result<u64, ActorProcessingErr> {
        let nonce_cutoff = Timestamp::now().minus(
            chrono::Duration::from_std(self.args.nonce_ttl).unwrap_or(chrono::Duration::MAX),
        );
        Ok(self.args.store.nonces().prune_expired(nonce_cutoff)?)
    }

    fn checkpoint(&mut self, force: bool) -> Result<Option<String>, ActorProcessingErr> {
        let audit = self.args.store.audit();
        let len = audit.len()?;
        let mut checkpoint = None;
        if checkpoint_due(
            len,
            self.covered_len,
            self.last_checkpoint.elapsed(),
            self.args.checkpoint_interval,
            force,
        ) {
            checkpoint = Some(audit.write_checkpoint(self.args.signer.as_ref())?);
            self.covered_len = len;
            self.last_checkpoint = Instant::now();
        }
        Ok(checkpoint)
    }
}

impl Actor for Housekeeper {
    type Msg = HousekeeperMsg;
    type State = HousekeeperState;
    type Arguments = HousekeeperArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: HousekeeperArgs,
    ) -> Result<HousekeeperState, ActorProcessingErr> {
        // Rebuild from redb: the latest checkpoint says what is covered.
        let covered_len = args
            .store
            .audit()
            .latest_checkpoint()?
            .map(|cp| cp.head_seq + 1)
            .unwrap_or(0);
        let timer = args.tick_every.map(|every| {
            ractor::time::send_interval(every, myself.get_cell(), || HousekeeperMsg::Tick)
        });
        Ok(HousekeeperState {
            args,
            covered_len,
            last_checkpoint: Instant::now(),
            timer,
        })
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        msg: HousekeeperMsg,
        state: &mut HousekeeperState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            HousekeeperMsg::Tick => {
                let report = state.run(false)?;
                if report.chronicle_pruned > 0 || report.checkpoint.is_some() {
                    tracing::info!(pruned = report.chronicle_pruned, checkpoint = ?report.checkpoint, "housekeeping");
                }
            }
            HousekeeperMsg::Run(job) => match job {
                HousekeepingJob::ChronicleRetention => {
                    let pruned = state.retention()?;
                    if pruned > 0 {
                        tracing::info!(pruned, "chronicle retention");
                    }
                }
                HousekeepingJob::NoncePrune => {
                    state.prune_nonces()?;
                }
                HousekeepingJob::AuditCheckpoint => {
                    // The Scheduler's cadence is the checkpoint interval.
                    if let Some(cp) = state.checkpoint(true)? {
                        tracing::info!(checkpoint = %cp, "audit checkpoint");
                    }
                }
            },
            HousekeeperMsg::RunNow(reply) => {
                let report = state.run(true)?;
                let _ = reply.send(report);
            }
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut HousekeeperState,
    ) -> Result<(), ActorProcessingErr> {
        if let Some(t) = state.timer.take() {
            t.abort();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoint_due_table() {
        let h = Duration::from_secs(3600);
        let cases = [
            // (len, covered, since_last, force, due)
            (10, 10, h * 2, true, false), // nothing new: never
            (0, 0, h, true, false),
            (11, 10, h, false, true),      // interval reached
            (11, 10, h / 2, false, false), // too soon
            (11, 10, Duration::ZERO, true, true),
        ];
        for (len, covered, since, force, due) in cases {
            assert_eq!(
                checkpoint_due(len, covered, since, h, force),
                due,
                "{len} {covered} {since:?} {force}"
            );
        }
    }
}
