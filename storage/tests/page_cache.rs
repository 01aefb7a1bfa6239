//! The store's page cache stays small however much history the store holds
//! (issue #19 item 3): redb keeps every page written until its cache is
//! full, so its cap is what a chatbot's past visitors cost in memory.
#![allow(clippy::unwrap_used)]

use redb::{ReadableDatabase, ReadableTableMetadata, TableDefinition};
use silas_storage::Store;

const FILL: TableDefinition<u64, &[u8]> = TableDefinition::new("test_fill");

#[test]
fn the_page_cache_stays_within_four_mib_as_history_grows() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_in(dir.path()).unwrap();
    let db = store.raw_database();
    // 12 MiB of history, written in a few commits and read back, as a
    // daemon's turns write and read their records.
    let value = vec![7u8; 1024];
    for batch in 0..4u64 {
        let txn = db.begin_write().unwrap();
        {
            let mut t = txn.open_table(FILL).unwrap();
            for i in 0..3072u64 {
                t.insert(batch * 3072 + i, value.as_slice()).unwrap();
            }
        }
        txn.commit().unwrap();
    }
    let read = db.begin_read().unwrap();
    let t = read.open_table(FILL).unwrap();
    assert_eq!(t.len().unwrap(), 4 * 3072);
    for i in (0..4 * 3072u64).step_by(7) {
        assert_eq!(t.get(i).unwrap().unwrap().value().len(), 1024);
    }
    let used = db.cache_stats().used_bytes();
    assert!(used > 0, "the cache is counted");
    assert!(used <= 4 << 20, "page cache holds {used} bytes");
}
