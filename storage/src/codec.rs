//! The stored-value format: one version byte followed by the record's JSON.
//!
//! Why JSON and not bincode/postcard: bincode is unmaintained (3.0 is a
//! `compile_error!`, 2.0 carries RUSTSEC-2025-0141), and postcard cannot
//! round-trip the free-form JSON objects the model carries (`conditions`,
//! gate `config`, …) because it has no self-describing `deserialize_any`.
//! JSON is self-describing, so adding an optional field needs no migration,
//! and it is the form the spec stores (§4.13 "JSON-serialized fields"). The
//! version byte lets a record type change shape later with an explicit,
//! per-record upgrade instead of a silent misread.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{StoreError, StoreResult};

/// Current record-format version for every table.
pub const RECORD_V1: u8 = 1;

pub fn encode<T: Serialize>(table: &'static str, value: &T) -> StoreResult<Vec<u8>> {
    let mut out = vec![RECORD_V1];
    serde_json::to_writer(&mut out, value).map_err(|e| StoreError::Encoding {
        table,
        detail: e.to_string(),
    })?;
    Ok(out)
}

pub fn decode<T: DeserializeOwned>(table: &'static str, bytes: &[u8]) -> StoreResult<T> {
    match bytes.split_first() {
        Some((&RECORD_V1, json)) => {
            serde_json::from_slice(json).map_err(|e| StoreError::Encoding {
                table,
                detail: e.to_string(),
            })
        }
        Some((v, _)) => Err(StoreError::Encoding {
            table,
            detail: format!("unknown record version {v}"),
        }),
        None => Err(StoreError::Encoding {
            table,
            detail: "empty record".into(),
        }),
    }
}
