//! The §3.5 headroom math against the allocable budget.

use silas_core::config::ContextConfig;
use silas_core::model::context::{ContextProfile, ContextZone};

/// One turn's budgets, in tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budgets {
    /// The window the prompt must fit: `context.total_tokens`, or less when
    /// the model's own window (less room for its answer) is smaller.
    pub total: u64,
    /// `system_actual = min(system zone tokens, system_max)`.
    pub system: u64,
    /// `max(total - system, 0)`.
    pub allocable: u64,
    pub chronicle: u64,
    pub memory: u64,
    pub workspace: u64,
}

/// Tokens kept free for the model's answer in a window of `w`.
pub fn answer_room(w: u64) -> u64 {
    (w / 8).min(4096)
}

fn share(allocable: u64, pct: f64) -> u64 {
    if !pct.is_finite() || pct <= 0.0 {
        return 0;
    }
    // floor(allocable * pct), computed so 0.45 of 100 is 45 and not 44.
    let exact = allocable as f64 * pct.min(1.0);
    (exact + 1e-6).floor() as u64
}

impl Budgets {
    /// The budgets for `profile`, a model `window` (if known) and a system
    /// zone of `system_tokens` (the system prompt and system items).
    pub fn compute(
        cfg: &ContextConfig,
        profile: &ContextProfile,
        window: Option<u64>,
        system_tokens: u64,
    ) -> Budgets {
        let total = match window {
            // The answer is generated inside the same window.
            Some(w) => cfg.total_tokens.min(w.saturating_sub(answer_room(w))),
            None => cfg.total_tokens,
        };
        let system = system_tokens.min(cfg.system_max);
        let allocable = total.saturating_sub(system);
        Budgets {
            total,
            system,
            allocable,
            chronicle: share(allocable, profile.chronicle_pct),
            memory: share(allocable, profile.memory_pct),
            workspace: share(allocable, profile.workspace_pct),
        }
    }

    /// `allocable - (chronicle + memory + workspace)`.
    pub fn headroom(&self) -> u64 {
        self.allocable
            .saturating_sub(self.chronicle + self.memory + self.workspace)
    }

    /// The budget of one zone (the system zone's is `system`).
    pub fn of(&self, zone: ContextZone) -> u64 {
        match zone {
            ContextZone::System => self.system,
            ContextZone::Chronicle => self.chronicle,
            ContextZone::Memory => self.memory,
            ContextZone::Workspace => self.workspace,
        }
    }

    /// `pct` of the window, the unit of the eviction thresholds.
    pub fn threshold(&self, pct: f64) -> u64 {
        share(self.total, pct)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> ContextConfig {
        ContextConfig::default()
    }

    #[test]
    fn headroom_math_follows_the_spec() {
        let c = cfg();
        let conv = &c.profiles["conversation"];
        // No window: 180,000 − 2,000 = 178,000 allocable.
        let b = Budgets::compute(&c, conv, None, 2_000);
        assert_eq!((b.total, b.system, b.allocable), (180_000, 2_000, 178_000));
        assert_eq!(
            (b.chronicle, b.memory, b.workspace),
            (80_100, 35_600, 26_700)
        );
        assert_eq!(b.headroom(), 35_600);
        assert!(b.headroom() as f64 >= 0.2 * b.allocable as f64 - 1.0);
        // The system zone counts at most system_max.
        let b = Budgets::compute(&c, conv, None, 50_000);
        assert_eq!((b.system, b.allocable), (8_000, 172_000));
        // A small local model: 8,192 less 1,024 for the answer.
        let b = Budgets::compute(&c, &c.profiles["coding"], Some(8_192), 2_000);
        assert_eq!((b.total, b.allocable), (7_168, 5_168));
        assert_eq!((b.chronicle, b.memory, b.workspace), (1_033, 1_033, 2_067));
        // A large window never raises the configured total.
        assert_eq!(
            Budgets::compute(&c, conv, Some(1_000_000), 0).total,
            180_000
        );
        // The answer's room is capped at 4,096.
        assert_eq!(Budgets::compute(&c, conv, Some(131_072), 0).total, 126_976);
        // A system prompt larger than the window leaves nothing.
        let b = Budgets::compute(&c, conv, Some(4_096), 6_000);
        assert_eq!((b.allocable, b.chronicle), (0, 0));
        assert_eq!(b.threshold(0.8), 2_867);
    }

    #[test]
    fn every_default_profile_leaves_twenty_percent() {
        let c = cfg();
        for p in c.profiles.values() {
            for window in [None, Some(4_096), Some(8_192), Some(32_768)] {
                let b = Budgets::compute(&c, p, window, 1_500);
                assert!(
                    b.headroom() * 5 + 5 >= b.allocable,
                    "{} {window:?}: {b:?}",
                    p.name
                );
            }
        }
    }
}
