//! The Scheduler's durable state (spec §12 scheduler, §5.2.3 goal cycles,
//! §5.10.3 refresh jobs): one record per registered job, so jobs registered
//! at run time survive a restart and the time of each job's last run is
//! known when deciding what was missed while the daemon was down. The
//! meaning of `action`/`target`/`schedule` belongs to the scheduler
//! (`silas-actors`); this layer only stores them.

use redb::TableDefinition;
use serde::{Deserialize, Serialize};
use silas_core::Timestamp;

use crate::records::Keyed;
use crate::schema::SCHEDULED_JOBS;

/// One registered job.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduledJob {
    pub job_id: String,
    /// What the job does, e.g. `goal_cycle`, `heartbeat`, `nonce_prune`.
    pub action: String,
    /// What it acts on (a work item or connection id), if anything.
    #[serde(default)]
    pub target: Option<String>,
    /// When it fires, in the scheduler's trigger syntax.
    pub schedule: String,
    /// Who registered it: `goal`, `connection`, `config` or `api`.
    pub source: String,
    pub created_at: Timestamp,
    /// When it last fired; `None` if never.
    #[serde(default)]
    pub last_fired_at: Option<Timestamp>,
}

impl Keyed for ScheduledJob {
    const TABLE: TableDefinition<'static, &'static str, &'static [u8]> = SCHEDULED_JOBS;
    const NAME: &'static str = "scheduled_jobs";
    fn key(&self) -> &str {
        &self.job_id
    }
}
