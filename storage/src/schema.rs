//! Table definitions and the schema version record (spec §6.1, adapted to redb).
//!
//! The store carries `schema_version` and `schema_checksum` in its `meta`
//! table. The checksum is SHA-256 over a descriptor listing every table with
//! its key/value types and record version, so a build whose table layout
//! differs from the one that wrote the file is detected even when someone
//! forgot to bump the version. Rules, adapted from §6.1's migration strategy:
//! a fresh file is stamped with this build's schema; the same version with the
//! same checksum opens; an older version opens only through a registered,
//! forward-only migration; a newer or unknown version, a checksum mismatch, or
//! a file that has tables but no schema record is refused, naming both
//! versions. Nothing is repaired implicitly.

use redb::{MultimapTableDefinition, ReadableTable, TableDefinition, WriteTransaction};
use silas_core::canonical;

use crate::codec::RECORD_V1;
use crate::error::{StoreError, StoreResult};

pub const SCHEMA_VERSION: u32 = 11;

pub(crate) const META: TableDefinition<&str, &str> = TableDefinition::new("meta");
pub(crate) const WORK_ITEMS: TableDefinition<&str, &[u8]> = TableDefinition::new("work_items");
pub(crate) const WORK_ITEMS_BY_STATUS: MultimapTableDefinition<&str, &str> =
    MultimapTableDefinition::new("work_items_by_status");
pub(crate) const WORK_ITEMS_BY_PARENT: MultimapTableDefinition<&str, &str> =
    MultimapTableDefinition::new("work_items_by_parent");
pub(crate) const WORK_ITEMS_BY_FOLLOW_UP: MultimapTableDefinition<&str, &str> =
    MultimapTableDefinition::new("work_items_by_follow_up");
/// (scope_id, created_at µs, seq) → ContextItem
pub(crate) const CHRONICLE: TableDefinition<(&str, i64, u64), &[u8]> =
    TableDefinition::new("chronicle");
/// (created_at µs, scope_id, seq) → () — time index for retention pruning.
pub(crate) const CHRONICLE_BY_TIME: TableDefinition<(i64, &str, u64), ()> =
    TableDefinition::new("chronicle_by_time");
/// "{domain}:{binding}" → recorded_at µs
pub(crate) const NONCES: TableDefinition<&str, i64> = TableDefinition::new("nonces");
pub(crate) const AUDIT: TableDefinition<u64, &[u8]> = TableDefinition::new("audit");
pub(crate) const AUDIT_CHECKPOINTS: TableDefinition<&str, &[u8]> =
    TableDefinition::new("audit_checkpoints");
pub(crate) const PERSONA_STATE: TableDefinition<&str, &[u8]> =
    TableDefinition::new("persona_state");
/// (scope_id, created_at µs, event_id) → PersonaEvent
pub(crate) const PERSONA_EVENTS: TableDefinition<(&str, i64, &str), &[u8]> =
    TableDefinition::new("persona_events");
pub(crate) const MEMORY: TableDefinition<&str, &[u8]> = TableDefinition::new("memory");
pub(crate) const CONNECTIONS: TableDefinition<&str, &[u8]> = TableDefinition::new("connections");
pub(crate) const PENDING_CARDS: TableDefinition<&str, &[u8]> =
    TableDefinition::new("pending_cards");
/// token_id → ApprovalToken: the authoritative token state (usage counters).
pub(crate) const APPROVAL_TOKENS: TableDefinition<&str, &[u8]> =
    TableDefinition::new("approval_tokens");
/// inbox_id → InboxRecord: every accepted inbound message (§5.1, issue #5).
pub(crate) const INBOX: TableDefinition<&str, &[u8]> = TableDefinition::new("inbox");
/// (scope_id, seq) → inbox_id: accepted messages not yet delivered, in order.
pub(crate) const INBOX_PENDING: TableDefinition<(&str, u64), &str> =
    TableDefinition::new("inbox_pending");
/// Monotonic counters (chronicle sequence, …).
pub(crate) const COUNTERS: TableDefinition<&str, u64> = TableDefinition::new("counters");
/// job_id → ScheduledJob: the Scheduler's registered jobs (survive restarts).
pub(crate) const SCHEDULED_JOBS: TableDefinition<&str, &[u8]> =
    TableDefinition::new("scheduled_jobs");

/// device_id → OwnerDevice: the web channel's paired owner devices (v2).
pub(crate) const OWNER_DEVICES: TableDefinition<&str, &[u8]> =
    TableDefinition::new("owner_devices");

/// update_id → UpdateRecord: received Telegram updates and their state (v3).
pub(crate) const TELEGRAM_UPDATES: TableDefinition<u64, &[u8]> =
    TableDefinition::new("telegram_updates");
/// chat_id → refused_at µs: chats that got their one refusal (v3).
pub(crate) const TELEGRAM_REFUSED_CHATS: TableDefinition<i64, i64> =
    TableDefinition::new("telegram_refused_chats");
/// A channel's idempotency key of an inbound message → its inbox id: a
/// message handed over twice (a redelivered Telegram update) is accepted once.
pub(crate) const INBOX_KEYS: TableDefinition<&str, &str> = TableDefinition::new("inbox_keys");
/// Telegram card messages: render handle → which card, chat and message.
pub(crate) const TELEGRAM_CARDS: TableDefinition<&str, &[u8]> =
    TableDefinition::new("telegram_cards");

/// name → Workspace: directories the owner registered (v6, issue #15).
pub(crate) const WORKSPACES: TableDefinition<&str, &[u8]> = TableDefinition::new("workspaces");
/// Skills the owner approved, by name → `InstalledSkill` (issue #17).
pub(crate) const INSTALLED_SKILLS: TableDefinition<&str, &[u8]> =
    TableDefinition::new("installed_skills");

/// scope_id → `ScopeSubscriptions`: context subscriptions kept across
/// restarts (v8, issue #18).
pub(crate) const CONTEXT_SUBSCRIPTIONS: TableDefinition<&str, &[u8]> =
    TableDefinition::new("context_subscriptions");

/// name → `DeclinedSkill`: install cards the owner declined, by content
/// hash, so the start-up scan does not ask again (v9, issue #17).
pub(crate) const DECLINED_SKILLS: TableDefinition<&str, &[u8]> =
    TableDefinition::new("declined_skills");

/// (scope_id, seq) → inbox_id: replies sent to a client that acknowledges
/// by id and has not acknowledged them yet, in order (v10, issue #19):
/// sent again when the scope reconnects.
pub(crate) const INBOX_UNACKED: TableDefinition<(&str, u64), &str> =
    TableDefinition::new("inbox_unacked");

/// key → `TelegramProgressMessage`: "Still working…" messages posted in
/// Telegram chats (v11): deleted when the answer comes, or at the next
/// start when the daemon died first.
pub(crate) const TELEGRAM_PROGRESS: TableDefinition<&str, &[u8]> =
    TableDefinition::new("telegram_progress");

/// Every table of this schema: (name, key type, value type, record version).
const TABLES: &[(&str, &str, &str, u8)] = &[
    ("meta", "str", "str", 0),
    ("work_items", "str", "record", RECORD_V1),
    ("work_items_by_status", "str", "multi:str", 0),
    ("work_items_by_parent", "str", "multi:str", 0),
    ("work_items_by_follow_up", "str", "multi:str", 0),
    ("chronicle", "(str,i64,u64)", "record", RECORD_V1),
    ("chronicle_by_time", "(i64,str,u64)", "unit", 0),
    ("nonces", "str", "i64", 0),
    ("approval_tokens", "str", "record", RECORD_V1),
    ("audit", "u64", "record", RECORD_V1),
    ("audit_checkpoints", "str", "record", RECORD_V1),
    ("persona_state", "str", "record", RECORD_V1),
    ("persona_events", "(str,i64,str)", "record", RECORD_V1),
    ("memory", "str", "record", RECORD_V1),
    ("connections", "str", "record", RECORD_V1),
    ("pending_cards", "str", "record", RECORD_V1),
    ("counters", "str", "u64", 0),
    ("inbox", "str", "record", RECORD_V1),
    ("inbox_pending", "(str,u64)", "str", 0),
    ("scheduled_jobs", "str", "record", RECORD_V1),
    ("owner_devices", "str", "record", RECORD_V1),
    ("telegram_updates", "u64", "record", RECORD_V1),
    ("telegram_refused_chats", "i64", "i64", 0),
    ("inbox_keys", "str", "str", 0),
    ("telegram_cards", "str", "record", RECORD_V1),
    ("workspaces", "str", "record", RECORD_V1),
    ("installed_skills", "str", "record", RECORD_V1),
    ("context_subscriptions", "str", "record", RECORD_V1),
    ("declined_skills", "str", "record", RECORD_V1),
    ("inbox_unacked", "(str,u64)", "str", 0),
    ("telegram_progress", "str", "record", RECORD_V1),
];

/// The text the checksum is computed over.
pub fn schema_descriptor() -> String {
    let mut s = format!("silas-schema-v{SCHEMA_VERSION}");
    for (name, k, v, rv) in TABLES {
        s.push_str(&format!(";{name}:{k}->{v}@{rv}"));
    }
    s
}

pub fn schema_checksum() -> String {
    canonical::sha256_hex(schema_descriptor().as_bytes())
}

/// A forward-only migration from `from` to `from + 1`.
struct Migration {
    from: u32,
    run: fn(&WriteTransaction) -> StoreResult<()>,
}

/// Registered migrations, forward only.
const MIGRATIONS: &[Migration] = &[
    Migration {
        from: 1,
        run: v1_to_v2,
    },
    Migration {
        from: 2,
        run: v2_to_v3,
    },
    Migration {
        from: 3,
        run: crate::migrate_cards::v3_to_v4,
    },
    Migration {
        from: 4,
        run: v4_to_v5,
    },
    Migration {
        from: 5,
        run: v5_to_v6,
    },
    Migration {
        from: 6,
        run: v6_to_v7,
    },
    Migration {
        from: 7,
        run: v7_to_v8,
    },
    Migration {
        from: 8,
        run: v8_to_v9,
    },
    Migration {
        from: 9,
        run: v9_to_v10,
    },
    Migration {
        from: 10,
        run: v10_to_v11,
    },
];

/// v2 adds the `owner_devices` table (issue #12); nothing else changes.
fn v1_to_v2(txn: &WriteTransaction) -> StoreResult<()> {
    txn.open_table(OWNER_DEVICES)?;
    txn.open_table(TELEGRAM_UPDATES)?;
    txn.open_table(TELEGRAM_REFUSED_CHATS)?;
    Ok(())
}

/// v3 adds the Telegram channel's update log and refused chats (issue #14).
fn v2_to_v3(txn: &WriteTransaction) -> StoreResult<()> {
    txn.open_table(TELEGRAM_UPDATES)?;
    txn.open_table(TELEGRAM_REFUSED_CHATS)?;
    Ok(())
}

/// v5 adds inbound idempotency keys and Telegram card messages (issue #14).
fn v4_to_v5(txn: &WriteTransaction) -> StoreResult<()> {
    txn.open_table(INBOX_KEYS)?;
    txn.open_table(TELEGRAM_CARDS)?;
    Ok(())
}

/// v6 adds the owner's workspace registry (issue #15).
fn v5_to_v6(txn: &WriteTransaction) -> StoreResult<()> {
    txn.open_table(WORKSPACES)?;
    Ok(())
}

/// v7 adds the installed-skill registry (issue #17).
fn v6_to_v7(txn: &WriteTransaction) -> StoreResult<()> {
    txn.open_table(INSTALLED_SKILLS)?;
    Ok(())
}

/// v8 adds the scopes' persisted context subscriptions (issue #18).
fn v7_to_v8(txn: &WriteTransaction) -> StoreResult<()> {
    txn.open_table(CONTEXT_SUBSCRIPTIONS)?;
    Ok(())
}

/// v9 adds the declined skill installs (issue #17).
fn v8_to_v9(txn: &WriteTransaction) -> StoreResult<()> {
    txn.open_table(DECLINED_SKILLS)?;
    Ok(())
}

/// v10 adds the unacknowledged replies (issue #19): replies delivered
/// before it are taken as acknowledged (nothing to resend).
fn v9_to_v10(txn: &WriteTransaction) -> StoreResult<()> {
    txn.open_table(INBOX_UNACKED)?;
    txn.open_table(TELEGRAM_PROGRESS)?;
    Ok(())
}

/// v11 adds the Telegram progress messages (an orphaned "Still working…"
/// after a crash is deleted at the next start).
fn v10_to_v11(txn: &WriteTransaction) -> StoreResult<()> {
    txn.open_table(TELEGRAM_PROGRESS)?;
    Ok(())
}

fn create_all_tables(txn: &WriteTransaction) -> StoreResult<()> {
    txn.open_table(WORK_ITEMS)?;
    txn.open_multimap_table(WORK_ITEMS_BY_STATUS)?;
    txn.open_multimap_table(WORK_ITEMS_BY_PARENT)?;
    txn.open_multimap_table(WORK_ITEMS_BY_FOLLOW_UP)?;
    txn.open_table(CHRONICLE)?;
    txn.open_table(CHRONICLE_BY_TIME)?;
    txn.open_table(NONCES)?;
    txn.open_table(APPROVAL_TOKENS)?;
    txn.open_table(AUDIT)?;
    txn.open_table(AUDIT_CHECKPOINTS)?;
    txn.open_table(PERSONA_STATE)?;
    txn.open_table(PERSONA_EVENTS)?;
    txn.open_table(MEMORY)?;
    txn.open_table(CONNECTIONS)?;
    txn.open_table(PENDING_CARDS)?;
    txn.open_table(COUNTERS)?;
    txn.open_table(INBOX)?;
    txn.open_table(INBOX_PENDING)?;
    txn.open_table(SCHEDULED_JOBS)?;
    txn.open_table(OWNER_DEVICES)?;
    txn.open_table(TELEGRAM_UPDATES)?;
    txn.open_table(TELEGRAM_REFUSED_CHATS)?;
    txn.open_table(INBOX_KEYS)?;
    txn.open_table(TELEGRAM_CARDS)?;
    txn.open_table(WORKSPACES)?;
    txn.open_table(INSTALLED_SKILLS)?;
    txn.open_table(CONTEXT_SUBSCRIPTIONS)?;
    txn.open_table(DECLINED_SKILLS)?;
    txn.open_table(INBOX_UNACKED)?;
    txn.open_table(TELEGRAM_PROGRESS)?;
    Ok(())
}

/// Check (or stamp) the schema record inside an open write transaction.
/// The caller commits only on `Ok`.
pub(crate) fn check_or_stamp(txn: &WriteTransaction) -> StoreResult<()> {
    let had_tables = txn.list_tables()?.count() > 0 || txn.list_multimap_tables()?.count() > 0;
    let (version, checksum) = {
        let meta = txn.open_table(META)?;
        let version = meta.get("schema_version")?.map(|v| v.value().to_string());
        let checksum = meta.get("schema_checksum")?.map(|v| v.value().to_string());
        (version, checksum)
    };
    let expected = format!("v{SCHEMA_VERSION}");
    match version {
        None if had_tables => Err(StoreError::SchemaMismatch {
            stored: "unknown (the file has tables but no schema record)".into(),
            expected,
            detail: "refusing to open a store this build did not write".into(),
        }),
        None => {
            let mut meta = txn.open_table(META)?;
            meta.insert("schema_version", SCHEMA_VERSION.to_string().as_str())?;
            meta.insert("schema_checksum", schema_checksum().as_str())?;
            drop(meta);
            create_all_tables(txn)
        }
        Some(v) => {
            let stored: u32 = v.parse().map_err(|_| StoreError::SchemaMismatch {
                stored: format!("{v:?}"),
                expected: expected.clone(),
                detail: "unreadable schema version".into(),
            })?;
            if stored > SCHEMA_VERSION {
                return Err(StoreError::SchemaMismatch {
                    stored: format!("v{stored}"),
                    expected,
                    detail: "the store was written by a newer Silas; upgrade this binary".into(),
                });
            }
            if stored == SCHEMA_VERSION {
                let ours = schema_checksum();
                return match checksum {
                    Some(c) if c == ours => Ok(()),
                    other => Err(StoreError::SchemaMismatch {
                        stored: format!(
                            "v{stored} (checksum {})",
                            other.unwrap_or_else(|| "missing".into())
                        ),
                        expected: format!("v{SCHEMA_VERSION} (checksum {ours})"),
                        detail: "same version, different table layout; no implicit repair".into(),
                    }),
                };
            }
            let mut at = stored;
            while at < SCHEMA_VERSION {
                let m = MIGRATIONS.iter().find(|m| m.from == at).ok_or_else(|| {
                    StoreError::SchemaMismatch {
                        stored: format!("v{stored}"),
                        expected: expected.clone(),
                        detail: format!("no migration registered from v{at} to v{}", at + 1),
                    }
                })?;
                (m.run)(txn)?;
                at += 1;
            }
            let mut meta = txn.open_table(META)?;
            meta.insert("schema_version", SCHEMA_VERSION.to_string().as_str())?;
            meta.insert("schema_checksum", schema_checksum().as_str())?;
            drop(meta);
            create_all_tables(txn)
        }
    }
}
