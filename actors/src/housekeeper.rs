//! The Housekeeper: periodic maintenance of durable state. On each tick it
//! applies the chronicle retention policy (§4.14, default 90 days), prunes
//! nonce records older than the nonce TTL (§4.5), and writes
//! an audit checkpoint (§4.16) when the chain has grown and the interval has
//! passed. It keeps nothing that redb does not also have: on (re)start it
//! reads the latest checkpoint back, so a restart neither skips nor repeats
//! work. Store errors fail the actor; its supervisor restarts it.

use std::time::{Duration, Instant};

use ractor::concurrency::JoinHandle;
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use serde_json::json;
use silas_core::Timestamp;
use silas_storage::Store;

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
    pub tick_every: Duration,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HousekeepingReport {
    pub chronicle_pruned: u64,
    pub nonces_pruned: u64,
    pub checkpoint: Option<String>,
}

pub enum HousekeeperMsg {
    /// Periodic maintenance.
    Tick,
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

impl HousekeeperState {
    fn run(&mut self, force: bool) -> Result<HousekeepingReport, ActorProcessingErr> {
        let store = &self.args.store;
        let pruned = store
            .chronicle()
            .prune_older_than(Timestamp::now(), i64::from(self.args.retention_days))?;
        if pruned > 0 {
            let data = json!({"removed": pruned, "retention_days": self.args.retention_days});
            if let serde_json::Value::Object(data) = data {
                store.audit().log("chronicle.pruned", data)?;
            }
        }
        let nonce_cutoff = Timestamp::now().minus(
            chrono::Duration::from_std(self.args.nonce_ttl).unwrap_or(chrono::Duration::MAX),
        );
        let nonces_pruned = store.nonces().prune_expired(nonce_cutoff)?;
        let audit = store.audit();
        let len = audit.len()?;
        let mut checkpoint = None;
        if checkpoint_due(
            len,
            self.covered_len,
            self.last_checkpoint.elapsed(),
            self.args.checkpoint_interval,
            force,
        ) {
            checkpoint = Some(audit.write_checkpoint()?);
            self.covered_len = len;
            self.last_checkpoint = Instant::now();
        }
        Ok(HousekeepingReport {
            chronicle_pruned: pruned,
            nonces_pruned,
            checkpoint,
        })
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
        let timer = ractor::time::send_interval(args.tick_every, myself.get_cell(), || {
            HousekeeperMsg::Tick
        });
        Ok(HousekeeperState {
            args,
            covered_len,
            last_checkpoint: Instant::now(),
            timer: Some(timer),
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
