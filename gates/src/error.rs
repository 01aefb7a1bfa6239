//! Errors of the gate crate, each mapped to a §18.1 taxonomy code. Gate
//! *decisions* are never errors (a block is a `GateResult`); these are for
//! definitions that cannot be used at all.

use silas_core::error::{Coded, ErrorCode};

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum GateError {
    /// A gate definition from config or a plan does not parse.
    #[error("gate definition {index}: {message}")]
    InvalidDefinition { index: usize, message: String },
    /// Two gates in one active set share a name.
    #[error("duplicate gate name: {0}")]
    DuplicateName(String),
    /// A provider could not run the check (used for reasons/codes of blocks).
    #[error("gate provider failed: {0}")]
    Provider(String),
}

impl Coded for GateError {
    fn code(&self) -> ErrorCode {
        match self {
            GateError::InvalidDefinition { .. } | GateError::DuplicateName(_) => {
                ErrorCode::ECfgInvalid
            }
            GateError::Provider(_) => ErrorCode::EGateProvider,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes() {
        assert_eq!(
            GateError::DuplicateName("g".into()).code(),
            ErrorCode::ECfgInvalid
        );
        assert_eq!(
            GateError::Provider("x".into()).code(),
            ErrorCode::EGateProvider
        );
    }
}
