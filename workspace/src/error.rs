//! The two error types and their §18.1 taxonomy codes.
//!
//! Copy/diff/restore failures fail the work item (sandbox family); an apply
//! refused because the workspace or the approved content moved underneath is a
//! hash mismatch against what the owner approved (approval family, hard deny).

use std::io;
use std::path::PathBuf;

use silas_core::{Coded, ErrorCode};

#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },
    #[error("workspace {} is not a directory", path.display())]
    NotADirectory { path: PathBuf },
    #[error("copy destination {} already exists", path.display())]
    DestinationExists { path: PathBuf },
    #[error(
        "workspace too large to copy: at least {bytes} bytes, over the limit of {limit} bytes (CopyLimits.max_bytes)"
    )]
    TooLarge { bytes: u64, limit: u64 },
    #[error(
        "workspace has too many files to copy: at least {files}, over the limit of {limit} (CopyLimits.max_files)"
    )]
    TooManyFiles { files: u64, limit: u64 },
    #[error("git failed: {message}")]
    Git { message: String },
    #[error("unsafe path {path}: {reason}")]
    UnsafePath { path: String, reason: String },
}

impl WorkspaceError {
    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> Self {
        WorkspaceError::Io {
            context: context.into(),
            source,
        }
    }
}

impl Coded for WorkspaceError {
    fn code(&self) -> ErrorCode {
        ErrorCode::ESandboxFailed
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error(
        "the workspace changed since the copy was taken; nothing was applied. Changed: {}",
        paths.join(", ")
    )]
    Conflict { paths: Vec<String> },
    #[error("{path} in the result no longer matches the approved diff; nothing was applied")]
    ContentChanged { path: String },
    #[error("refused to write {path}: {reason}")]
    UnsafePath { path: String, reason: String },
    #[error("change set is not applicable: {0}")]
    Invalid(String),
    #[error("journal {}: {reason}", path.display())]
    Journal { path: PathBuf, reason: String },
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },
    /// Only from the test-only fault hook: the process "crashed" after k renames.
    #[error("injected fault after {0} renames")]
    InjectedFault(usize),
}

impl ApplyError {
    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> Self {
        ApplyError::Io {
            context: context.into(),
            source,
        }
    }
}

impl Coded for ApplyError {
    fn code(&self) -> ErrorCode {
        match self {
            ApplyError::Conflict { .. } | ApplyError::ContentChanged { .. } => {
                ErrorCode::EApprovalHash
            }
            ApplyError::UnsafePath { .. } | ApplyError::Invalid(_) => ErrorCode::EApprovalScope,
            ApplyError::Journal { .. } => ErrorCode::EDbCorrupt,
            ApplyError::Io { .. } | ApplyError::InjectedFault(_) => ErrorCode::ESandboxFailed,
        }
    }
}
