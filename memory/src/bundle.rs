//! The portable memory bundle (§6.5): versioned JSONL — one header line,
//! then one record per line, every field kept (taint, trust level,
//! reingestion tier, validity, links), so an export imported into a fresh
//! store gives identical records.
//!
//! Import reads and checks the whole bundle before writing anything: a bad
//! line (or a count that does not match the header) writes nothing. `merge`
//! upserts by id; `replace` swaps the whole table in one transaction.

use std::io::{BufRead, Write};

use serde::{Deserialize, Serialize};
use silas_core::Timestamp;
use silas_core::model::memory::{MemoryItem, ReingestionTier};

use crate::{Memory, MemoryError};

pub const FORMAT: &str = "silas-memory";
pub const VERSION: u32 = 1;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Header {
    pub format: String,
    pub version: u32,
    pub exported_at: Timestamp,
    pub records: usize,
    #[serde(default)]
    pub since: Option<Timestamp>,
    #[serde(default)]
    pub include_raw: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImportMode {
    /// Add the bundle's records, replacing any with the same id.
    Merge,
    /// The bundle becomes the whole memory (one transaction).
    Replace,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ImportReport {
    pub records: usize,
    /// Merge: records that replaced one with the same id.
    pub replaced: usize,
}

fn bad(line: usize, reason: impl Into<String>) -> MemoryError {
    MemoryError::Bundle {
        line,
        reason: reason.into(),
    }
}

fn io(e: std::io::Error) -> MemoryError {
    MemoryError::Io(e.to_string())
}

impl Memory {
    /// Writes the bundle: records changed at or after `since` (all when
    /// `None`), the raw conversation lane only with `include_raw`.
    pub fn export(
        &self,
        since: Option<Timestamp>,
        include_raw: bool,
        out: &mut dyn Write,
    ) -> Result<usize, MemoryError> {
        let records: Vec<MemoryItem> = self
            .all()?
            .into_iter()
            .filter(|m| include_raw || m.reingestion_tier == ReingestionTier::Active)
            .filter(|m| since.is_none_or(|s| m.updated_at >= s))
            .collect();
        let header = Header {
            format: FORMAT.into(),
            version: VERSION,
            exported_at: Timestamp::now(),
            records: records.len(),
            since,
            include_raw,
        };
        let enc = |e: serde_json::Error| MemoryError::Io(e.to_string());
        let mut head = serde_json::to_vec(&header).map_err(enc)?;
        head.push(b'\n');
        out.write_all(&head).map_err(io)?;
        for r in &records {
            let mut l = serde_json::to_vec(r).map_err(enc)?;
            l.push(b'\n');
            out.write_all(&l).map_err(io)?;
        }
        out.flush().map_err(io)?;
        Ok(records.len())
    }

    /// Reads a whole bundle, checks it, then writes it (see the module doc).
    pub fn import(
        &self,
        input: &mut dyn BufRead,
        mode: ImportMode,
    ) -> Result<ImportReport, MemoryError> {
        let mut lines = input.lines();
        let first = lines
            .next()
            .ok_or_else(|| bad(1, "empty bundle"))?
            .map_err(io)?;
        let header: Header = serde_json::from_str(&first)
            .map_err(|e| bad(1, format!("not a bundle header: {e}")))?;
        if header.format != FORMAT {
            return Err(bad(
                1,
                format!("format {:?}, expected {FORMAT:?}", header.format),
            ));
        }
        if header.version != VERSION {
            return Err(bad(
                1,
                format!(
                    "version {} is not supported (this build reads {VERSION})",
                    header.version
                ),
            ));
        }
        let mut records = Vec::with_capacity(header.records.min(1_000_000));
        let mut seen = std::collections::HashSet::new();
        for (i, l) in lines.enumerate() {
            let n = i + 2;
            let l = l.map_err(io)?;
            if l.trim().is_empty() {
                continue;
            }
            let m: MemoryItem = serde_json::from_str(&l)
                .map_err(|e| bad(n, format!("not a memory record: {e}")))?;
            if m.memory_id.is_empty() {
                return Err(bad(n, "memory_id is empty"));
            }
            if !seen.insert(m.memory_id.clone()) {
                return Err(bad(n, format!("memory {:?} appears twice", m.memory_id)));
            }
            records.push(m);
        }
        if records.len() != header.records {
            return Err(bad(
                1,
                format!(
                    "the header says {} records, the bundle has {} (truncated?)",
                    header.records,
                    records.len()
                ),
            ));
        }
        let replaced = match mode {
            ImportMode::Replace => 0,
            ImportMode::Merge => {
                let store = self.store().records::<MemoryItem>();
                let mut n = 0;
                for r in &records {
                    if store.get(&r.memory_id)?.is_some() {
                        n += 1;
                    }
                }
                n
            }
        };
        self.write_all(&records, mode == ImportMode::Replace)?;
        Ok(ImportReport {
            records: records.len(),
            replaced,
        })
    }
}
