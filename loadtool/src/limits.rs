//! The bounds of a run: the tool refuses counts past these instead of
//! exhausting the machine it runs on.

use crate::BenchError;

pub const MAX_CLIENTS: usize = 20_000;
pub const MAX_TURNS_PER_CLIENT: usize = 100_000;
pub const MAX_ROUNDS: usize = 100;
pub const MAX_IN_FLIGHT: usize = 10_000;
pub const MAX_SECONDS: u64 = 3_600;
/// Churn's quiet reading after the rounds (may be 0: no such reading).
pub const MAX_SETTLE_SECONDS: u64 = 600;

/// `Err` naming the option when `value` is 0 or above `max`.
pub fn check(option: &str, value: usize, max: usize) -> Result<(), BenchError> {
    if value == 0 || value > max {
        return Err(BenchError::new(format!(
            "--{option} must be between 1 and {max} (got {value})"
        )));
    }
    Ok(())
}

/// `Err` naming the option when `value` is above `max` (0 allowed).
pub fn at_most(option: &str, value: u64, max: u64) -> Result<(), BenchError> {
    if value > max {
        return Err(BenchError::new(format!(
            "--{option} must be at most {max} (got {value})"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_and_past_the_ceiling_are_refused_by_name() {
        assert!(check("clients", 1, MAX_CLIENTS).is_ok());
        assert!(check("clients", MAX_CLIENTS, MAX_CLIENTS).is_ok());
        let e = check("clients", MAX_CLIENTS + 1, MAX_CLIENTS).unwrap_err();
        assert!(e.0.contains("--clients"), "{e}");
        assert!(check("rounds", 0, MAX_ROUNDS).is_err());
    }
}
