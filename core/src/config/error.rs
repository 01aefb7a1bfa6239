//! [`ConfigError`]: every configuration failure, one line each, mapped onto
//! the `E_CFG_*` codes of the §18.1 taxonomy.

use crate::error::{Coded, ErrorCode};

/// A configuration failure. `Display` is always a single line that starts
/// with the dotted key the failure is about (relative to the `silas:` root,
/// e.g. `channels.web.port`), followed by the rule that was broken.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The configuration file (or the working directory) could not be read.
    /// Code `E_CFG_IO`.
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    /// The text is not valid YAML, or a `${VAR}` reference / environment
    /// override is malformed. `key` is `None` when the failure is not tied
    /// to one key (a YAML syntax error). Code `E_CFG_PARSE`.
    #[error("{}", keyed(key.as_deref(), message))]
    Parse {
        key: Option<String>,
        message: String,
    },
    /// A key that the schema does not know (from the file or from a
    /// `SILAS__…` environment override). Code `E_CFG_UNKNOWN_KEY`.
    #[error("{key}: {message}")]
    UnknownKey { key: String, message: String },
    /// A value of the wrong type, or a startup validation rule that failed.
    /// Code `E_CFG_INVALID`.
    #[error("{key}: {message}")]
    Invalid { key: String, message: String },
    /// A `provider:model` string handed to
    /// [`Config::resolve_model`](super::Config::resolve_model) did not
    /// resolve. Code `E_CFG_INVALID`.
    #[error("model {spec:?}: {message}")]
    Model { spec: String, message: String },
}

fn keyed(key: Option<&str>, message: &str) -> String {
    match key {
        Some(k) => format!("{k}: {message}"),
        None => message.to_owned(),
    }
}

impl ConfigError {
    pub(crate) fn invalid(key: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError::Invalid {
            key: key.into(),
            message: one_line(message.into()),
        }
    }

    pub(crate) fn unknown_key(key: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError::UnknownKey {
            key: key.into(),
            message: one_line(message.into()),
        }
    }

    pub(crate) fn parse(key: Option<String>, message: impl Into<String>) -> Self {
        ConfigError::Parse {
            key,
            message: one_line(message.into()),
        }
    }

    /// The dotted key (relative to `silas:`) the error is about, if any.
    pub fn key(&self) -> Option<&str> {
        match self {
            ConfigError::Io { .. } | ConfigError::Model { .. } => None,
            ConfigError::Parse { key, .. } => key.as_deref(),
            ConfigError::UnknownKey { key, .. } | ConfigError::Invalid { key, .. } => Some(key),
        }
    }
}

impl Coded for ConfigError {
    fn code(&self) -> ErrorCode {
        match self {
            ConfigError::Io { .. } => ErrorCode::ECfgIo,
            ConfigError::Parse { .. } => ErrorCode::ECfgParse,
            ConfigError::UnknownKey { .. } => ErrorCode::ECfgUnknownKey,
            ConfigError::Invalid { .. } | ConfigError::Model { .. } => ErrorCode::ECfgInvalid,
        }
    }
}

/// Collapses any line breaks a library error message may carry so that every
/// `ConfigError` renders as exactly one line.
pub(crate) fn one_line(s: String) -> String {
    if s.contains(['\n', '\r']) {
        s.split(['\n', '\r'])
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .collect::<Vec<_>>()
            .join(" ")
    } else {
        s
    }
}
