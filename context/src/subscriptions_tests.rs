use std::cell::RefCell;
use std::collections::HashMap;

use super::*;
use crate::render;
use crate::tokens::CharsPerToken;

/// Files in memory; counts reads.
#[derive(Default)]
struct Fake {
    files: RefCell<HashMap<String, String>>,
    reads: RefCell<usize>,
    memories: Vec<(String, String, TaintLevel)>,
}

impl Fake {
    fn write(&self, path: &str, text: &str) {
        self.files.borrow_mut().insert(path.into(), text.into());
    }
}

impl Materializer for Fake {
    fn read_file(&self, path: &str) -> Result<String, String> {
        *self.reads.borrow_mut() += 1;
        self.files
            .borrow()
            .get(path)
            .cloned()
            .ok_or_else(|| format!("no file {path}"))
    }
    fn memory_query(&self, _query: &str) -> Vec<(String, String, TaintLevel)> {
        self.memories.clone()
    }
}

fn render_one(
    subs: &mut Subscriptions,
    m: &Fake,
    turn: u64,
) -> (Vec<String>, Vec<SubscriptionNote>) {
    let (items, notes) = subs.materialize(m, turn, 2_000, &CharsPerToken, &BTreeSet::new());
    (
        items
            .iter()
            .map(|i| render::block(&render::header(i), &i.content))
            .collect(),
        notes,
    )
}

fn targets(subs: &Subscriptions) -> Vec<(SubscriptionType, String)> {
    subs.all()
        .iter()
        .map(|t| (t.sub.sub_type, t.sub.target.clone()))
        .collect()
}

#[test]
fn ranges_merge_and_a_whole_file_supersedes_them() {
    let mut s = Subscriptions::default();
    s.subscribe(SubscriptionType::FileLines, "a.py:10-20", 1)
        .unwrap();
    s.subscribe(SubscriptionType::FileLines, "a.py:15-30", 1)
        .unwrap();
    s.subscribe(SubscriptionType::FileLines, "a.py:31-35", 1)
        .unwrap(); // touching
    s.subscribe(SubscriptionType::FileLines, "a.py:50-60", 1)
        .unwrap();
    s.subscribe(SubscriptionType::FileLines, "b.py:1-5", 1)
        .unwrap();
    assert_eq!(
        targets(&s),
        vec![
            (SubscriptionType::FileLines, "a.py:10-35".to_owned()),
            (SubscriptionType::FileLines, "a.py:50-60".to_owned()),
            (SubscriptionType::FileLines, "b.py:1-5".to_owned()),
        ]
    );
    let whole = s.subscribe(SubscriptionType::File, "a.py", 2).unwrap();
    assert_eq!(
        targets(&s),
        vec![
            (SubscriptionType::FileLines, "b.py:1-5".to_owned()),
            (SubscriptionType::File, "a.py".to_owned()),
        ]
    );
    // A range of a subscribed file is covered by it.
    assert_eq!(
        s.subscribe(SubscriptionType::FileLines, "a.py:1-3", 3),
        Some(whole)
    );
    assert_eq!(
        s.subscribe(SubscriptionType::FileLines, "a.py:x-3", 3),
        None
    );
    assert_eq!(
        s.subscribe(SubscriptionType::FileLines, "a.py:5-3", 3),
        None
    );
}

#[test]
fn a_changed_file_shows_its_new_text_and_a_moved_range_is_flagged_stale() {
    let m = Fake::default();
    m.write("a.py", "one\ntwo\nthree\nfour\n");
    let mut s = Subscriptions::default();
    s.subscribe(SubscriptionType::File, "a.py", 1);
    s.subscribe(SubscriptionType::FileLines, "b.py:2-3", 1);
    m.write("b.py", "x\ndef f():\n    return 1\n");
    let (blocks, notes) = render_one(&mut s, &m, 1);
    assert!(notes.is_empty(), "{notes:?}");
    assert_eq!(
        blocks[0],
        "--- subscription:file | a.py | live | last_changed: turn 1 ---\none\ntwo\nthree\nfour\n--- end ---"
    );
    assert_eq!(
        blocks[1],
        "--- subscription:file_lines | b.py:2-3 | live | last_changed: turn 1 ---\ndef f():\n    return 1\n--- end ---"
    );
    // Turn 4: both files change.
    m.write("a.py", "one\nTWO\n");
    m.write("b.py", "import os\nx\ndef f():\n    return 1\n");
    let (blocks, _) = render_one(&mut s, &m, 4);
    assert!(
        blocks[0].starts_with(
            "--- subscription:file | a.py | live | last_changed: turn 4 ---\none\nTWO"
        )
    );
    assert!(
        blocks[1].starts_with(
            "--- subscription:file_lines | b.py:2-3 | [stale — file changed since turn 1] |"
        ),
        "{}",
        blocks[1]
    );
    // Restored: no longer stale.
    m.write("b.py", "x\ndef f():\n    return 1\n");
    let (blocks, _) = render_one(&mut s, &m, 5);
    assert!(blocks[1].contains("| live |"), "{}", blocks[1]);
}

#[test]
fn one_read_per_file_per_turn_and_memory_queries_always_rerun() {
    let mut m = Fake::default();
    m.write("a.py", "text");
    m.memories = vec![
        ("m1".into(), "already shown".into(), TaintLevel::Owner),
        ("m2".into(), "from a web page".into(), TaintLevel::External),
    ];
    let mut s = Subscriptions::default();
    s.subscribe(SubscriptionType::File, "a.py", 1);
    s.subscribe(SubscriptionType::FileLines, "a.py:1-1", 1); // covered by the file
    s.subscribe(SubscriptionType::MemoryQuery, "deploy notes", 1);
    let shown: BTreeSet<String> = ["m1".to_owned()].into();
    let (items, _) = s.materialize(&m, 1, 2_000, &CharsPerToken, &shown);
    let (again, _) = s.materialize(&m, 1, 2_000, &CharsPerToken, &shown);
    assert_eq!(*m.reads.borrow(), 1, "the same turn reuses the read");
    let view = |v: &[ContextItem]| -> Vec<(String, String)> {
        v.iter()
            .map(|i| (i.ctx_id.clone(), i.content.clone()))
            .collect()
    };
    assert_eq!(view(&items), view(&again));
    let q = items.iter().find(|i| i.ctx_id.ends_with("sub-2")).unwrap();
    assert_eq!(
        q.content, "from a web page",
        "deduped against the memory zone"
    );
    assert_eq!(q.taint, TaintLevel::External);
    s.materialize(&m, 2, 2_000, &CharsPerToken, &shown);
    assert_eq!(*m.reads.borrow(), 2, "a new turn reads again");
}

#[test]
fn too_large_and_unreferenced_subscriptions_are_deactivated_and_cost_nothing() {
    let m = Fake::default();
    m.write("big.log", &"x".repeat(35_000)); // 10,000 tokens
    m.write("a.py", "small");
    let mut s = Subscriptions::default();
    let big = s.subscribe(SubscriptionType::File, "big.log", 1).unwrap();
    let small = s.subscribe(SubscriptionType::File, "a.py", 1).unwrap();
    let (items, notes) = s.materialize(&m, 1, 2_000, &CharsPerToken, &BTreeSet::new());
    assert_eq!(items.len(), 1);
    assert_eq!(
        notes,
        [SubscriptionNote::TooLarge {
            sub_id: big.clone(),
            tokens: 10_000
        }]
    );
    // TTL 10: referenced at turn 6, so still active at 15, gone at 16.
    s.note_reply("I changed a.py as asked", 6);
    assert!(s.deactivate_stale(15, 10).is_empty());
    assert_eq!(
        s.deactivate_stale(16, 10),
        [SubscriptionNote::Expired {
            sub_id: small.clone()
        }]
    );
    let (items, _) = s.materialize(&m, 16, 2_000, &CharsPerToken, &BTreeSet::new());
    assert!(
        items.is_empty(),
        "deactivated subscriptions cost zero tokens"
    );
    assert!(s.all().iter().all(|t| t.sub.token_count == 0));
    assert!(s.reactivate(&small));
    let (items, _) = s.materialize(&m, 17, 2_000, &CharsPerToken, &BTreeSet::new());
    assert_eq!(items.len(), 1);
    // An unreadable file is reported and stays subscribed.
    let gone = s.subscribe(SubscriptionType::File, "gone.txt", 17).unwrap();
    let (_, notes) = s.materialize(&m, 18, 2_000, &CharsPerToken, &BTreeSet::new());
    assert!(matches!(&notes[0], SubscriptionNote::Unreadable { sub_id, .. } if *sub_id == gone));
}

/// A memory query shows its best results up to `max_subscription_tokens`
/// (cut, not deactivated), nothing when all are in the memory zone, and
/// asking the same query again keeps it alive.
#[test]
fn a_memory_query_fits_its_token_cap_and_re_asking_refreshes_it() {
    let m = Fake {
        memories: vec![
            ("m1".into(), "a".repeat(35), TaintLevel::Owner), // 10 tokens
            ("m2".into(), "b".repeat(35), TaintLevel::External),
            ("m3".into(), "c".repeat(35), TaintLevel::Owner),
        ],
        ..Fake::default()
    };
    let mut s = Subscriptions::default();
    let id = s
        .subscribe(SubscriptionType::MemoryQuery, "notes", 1)
        .unwrap();
    // 10 + 1 tokens each: two fit in 25.
    let (items, notes) = s.materialize(&m, 1, 25, &CharsPerToken, &BTreeSet::new());
    assert!(notes.is_empty());
    assert_eq!(items.len(), 1);
    assert_eq!(
        items[0].content,
        format!("{}\n{}", "a".repeat(35), "b".repeat(35))
    );
    assert_eq!(items[0].taint, TaintLevel::External);
    assert!(items[0].token_count <= 25);
    assert!(s.all()[0].sub.active, "cut, not deactivated");
    // Everything already in the memory zone: no block at all.
    let all: BTreeSet<String> = ["m1", "m2", "m3"].map(String::from).into();
    let (items, _) = s.materialize(&m, 2, 25, &CharsPerToken, &all);
    assert!(items.is_empty());
    // Asked again at turn 9: TTL 10 counts from 9.
    assert_eq!(
        s.subscribe(SubscriptionType::MemoryQuery, "notes", 9),
        Some(id)
    );
    assert!(s.deactivate_stale(18, 10).is_empty());
    assert_eq!(s.deactivate_stale(19, 10).len(), 1);
}

/// Persisted subscriptions come back after a restart with their state and
/// hashes (a range changed while down is flagged stale), and new ids do
/// not collide with restored ones.
#[test]
fn restored_subscriptions_keep_their_state_and_ids() {
    let m = Fake::default();
    m.write("a.py", "one\ntwo\nthree");
    let mut s = Subscriptions::default();
    s.subscribe(SubscriptionType::FileLines, "a.py:2-2", 1);
    let q = s
        .subscribe(SubscriptionType::MemoryQuery, "deploy", 1)
        .unwrap();
    s.deactivate(&q);
    s.materialize(&m, 1, 2_000, &CharsPerToken, &BTreeSet::new());
    let saved = s.export();
    assert_eq!(saved.len(), 2);
    // Restart; the file changed meanwhile.
    m.write("a.py", "one\nTWO\nthree");
    let mut r = Subscriptions::default();
    r.restore(saved, 40);
    assert_eq!(r.export().len(), 2);
    assert!(!r.all()[1].sub.active, "a deactivated one stays so");
    let (items, _) = render_one(&mut r, &m, 40);
    assert_eq!(items.len(), 1);
    assert!(
        items[0].contains("[stale — file changed since turn 1]"),
        "{}",
        items[0]
    );
    // TTL counts from the restore.
    assert!(r.deactivate_stale(49, 10).is_empty());
    let fresh = r.subscribe(SubscriptionType::File, "b.py", 41).unwrap();
    assert_eq!(fresh, "sub-3");
}
