//! Storage errors, each mapped to an `E_DB_*` taxonomy code (spec §18.1).

use silas_core::{Coded, ErrorCode};

#[derive(Clone, Debug, thiserror::Error)]
pub enum StoreError {
    #[error("store I/O failed: {0}")]
    Io(String),
    #[error("store is corrupt: {0}")]
    Corrupt(String),
    #[error("store at {path} is in use by another process (is a silas daemon running?)")]
    InUse { path: String },
    #[error(
        "store schema mismatch: the store was written by schema {stored}, this build uses schema {expected}: {detail}"
    )]
    SchemaMismatch {
        stored: String,
        expected: String,
        detail: String,
    },
    #[error("cannot decode record in table {table}: {detail}")]
    Encoding { table: &'static str, detail: String },
    #[error("{what} {id:?} not found")]
    NotFound { what: &'static str, id: String },
    #[error("invalid request: {0}")]
    Invalid(String),
}

impl Coded for StoreError {
    fn code(&self) -> ErrorCode {
        match self {
            StoreError::Io(_) | StoreError::InUse { .. } | StoreError::Invalid(_) => {
                ErrorCode::EDbIo
            }
            StoreError::Corrupt(_) => ErrorCode::EDbCorrupt,
            StoreError::SchemaMismatch { .. } => ErrorCode::EDbSchemaMismatch,
            StoreError::Encoding { .. } => ErrorCode::EDbEncoding,
            StoreError::NotFound { .. } => ErrorCode::EDbNotFound,
        }
    }
}

impl From<redb::StorageError> for StoreError {
    fn from(e: redb::StorageError) -> Self {
        match e {
            redb::StorageError::Corrupted(m) => StoreError::Corrupt(m),
            other => StoreError::Io(other.to_string()),
        }
    }
}

macro_rules! via_redb_error {
    ($($t:ty),*) => {$(
        impl From<$t> for StoreError {
            fn from(e: $t) -> Self {
                StoreError::from(redb::Error::from(e))
            }
        }
    )*};
}
via_redb_error!(
    redb::TransactionError,
    redb::TableError,
    redb::CommitError,
    redb::DatabaseError,
    redb::SetDurabilityError
);

impl From<redb::Error> for StoreError {
    fn from(e: redb::Error) -> Self {
        match e {
            redb::Error::Corrupted(m) => StoreError::Corrupt(m),
            redb::Error::DatabaseAlreadyOpen => StoreError::InUse {
                path: String::from("the data dir"),
            },
            other => StoreError::Io(other.to_string()),
        }
    }
}

pub type StoreResult<T> = Result<T, StoreError>;
