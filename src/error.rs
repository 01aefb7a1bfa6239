//! The binary's error: any library error, carried with its taxonomy code and
//! rendered as exactly one line.

use std::process::ExitCode;

use silas_core::{Coded, ErrorCode};

#[derive(Debug)]
pub struct CliError {
    code: ErrorCode,
    message: String,
    exit: u8,
}

impl CliError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        let exit = match code.family() {
            silas_core::error::ErrorFamily::Cfg => 2,
            _ => 1,
        };
        CliError {
            code,
            message: message.into(),
            exit,
        }
    }

    pub fn one_line(&self) -> String {
        let flat: String = self.message.replace(['\n', '\r'], " ");
        format!("error[{}]: {flat}", self.code)
    }

    /// The code and the message (to forward over the control socket).
    pub fn parts(self) -> (ErrorCode, String) {
        (self.code, self.message)
    }

    pub fn code(&self) -> ErrorCode {
        self.code
    }

    pub fn exit_code(&self) -> ExitCode {
        ExitCode::from(self.exit)
    }
}

/// Any coded library error converts, keeping its code and message.
/// A built tokio runtime, or the one-line error every command reports.
pub fn runtime(builder: &mut tokio::runtime::Builder) -> Result<tokio::runtime::Runtime, CliError> {
    builder.enable_all().build().map_err(|e| {
        CliError::new(
            silas_core::ErrorCode::ECfgIo,
            format!("cannot start the async runtime: {e}"),
        )
    })
}

pub fn coded<E: Coded + std::fmt::Display>(e: E) -> CliError {
    CliError::new(e.code(), e.to_string())
}

macro_rules! from_coded {
    ($($t:ty),*) => {$(
        impl From<$t> for CliError {
            fn from(e: $t) -> Self {
                coded(e)
            }
        }
    )*};
}
from_coded!(
    silas_core::config::ConfigError,
    silas_storage::StoreError,
    silas_keys::KeyError,
    silas_web::WebError,
    silas_web::control::ControlError,
    silas_web::control::ClientError
);
