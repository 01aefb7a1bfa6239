//! Tables of constant detection patterns (secrets, PII, jailbreak rules)
//! that cost nothing until a text may match them.
//!
//! Every pattern of a table is widened into a byte-level superset (see
//! [`widened`]) and the supersets are compiled together into one
//! multi-pattern automaton, the table's prefilter. A search runs it first;
//! only the patterns it flags are compiled (once) and run. Most text matches
//! none, so the exact patterns — whose Unicode classes (`\w`, `\d`, `.` and
//! Unicode `\b`, repeated up to 80 times) cost 15 ms and 3.6 MB of heap to
//! compile for the PII and jailbreak tables alone — are usually never built
//! (issue #19: the first turn after start paid for all of them).
//!
//! The answer is the exact patterns' answer: the prefilter only skips
//! patterns that cannot match. If it could not be compiled, every pattern is
//! a candidate (slower, never fewer findings).

use std::sync::OnceLock;

use regex::Regex;
use regex_automata::nfa::thompson::WhichCaptures;
use regex_automata::util::syntax;
use regex_automata::{Input, MatchKind, PatternID, PatternSet, meta};
use regex_syntax::hir::{Class, ClassBytes, ClassBytesRange, Hir, HirKind, Look, Repetition};

/// Constant patterns, each compiled on first need behind a shared prefilter.
pub struct PatternTable {
    sources: Box<[Box<str>]>,
    exact: Box<[OnceLock<Option<Regex>>]>,
    prefilter: OnceLock<Option<meta::Regex>>,
}

impl PatternTable {
    pub fn new<S: Into<Box<str>>>(sources: impl IntoIterator<Item = S>) -> Self {
        let sources: Box<[Box<str>]> = sources.into_iter().map(Into::into).collect();
        let exact = sources.iter().map(|_| OnceLock::new()).collect();
        Self {
            sources,
            exact,
            prefilter: OnceLock::new(),
        }
    }

    pub fn len(&self) -> usize {
        self.sources.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sources.is_empty()
    }

    pub fn source(&self, i: usize) -> Option<&str> {
        self.sources.get(i).map(AsRef::as_ref)
    }

    /// Pattern `i`, compiled at first use. `None` if it does not compile
    /// (the tables' tests pin that every one does).
    pub fn regex(&self, i: usize) -> Option<&Regex> {
        let source = self.sources.get(i)?;
        self.exact
            .get(i)?
            .get_or_init(|| Regex::new(source).ok())
            .as_ref()
    }

    /// Which patterns may match `text`: `may[i]` is false only where
    /// pattern `i` cannot match. Runs one pass of the widened set.
    pub fn may_match(&self, text: &str) -> Vec<bool> {
        match self.prefilter() {
            Some(set) => {
                let mut hits = PatternSet::new(set.pattern_len());
                set.which_overlapping_matches(&Input::new(text), &mut hits);
                (0..self.len())
                    .map(|i| PatternID::new(i).is_ok_and(|id| hits.contains(id)))
                    .collect()
            }
            None => vec![true; self.len()],
        }
    }

    /// The compiled patterns that may match `text`, with their index.
    pub fn candidates<'a>(&'a self, text: &str) -> impl Iterator<Item = (usize, &'a Regex)> {
        self.may_match(text)
            .into_iter()
            .enumerate()
            .filter(|(_, may)| *may)
            .filter_map(|(i, _)| Some((i, self.regex(i)?)))
    }

    /// The prefilter, compiled at first use; `None` if it does not compile.
    /// It only answers which patterns match, so it is built without
    /// capture groups, and without a literal prefilter of its own: for the
    /// jailbreak rules' dozens of keywords that was an Aho-Corasick automaton
    /// of 590 KB and 1.5 ms to build, searching no faster on chat-sized text.
    pub fn prefilter(&self) -> Option<&meta::Regex> {
        self.prefilter
            .get_or_init(|| {
                let wide: Option<Vec<String>> = self.sources.iter().map(|s| widened(s)).collect();
                meta::Builder::new()
                    .syntax(syntax::Config::new().unicode(false).utf8(false))
                    .configure(
                        meta::Config::new()
                            .match_kind(MatchKind::All)
                            .utf8_empty(false)
                            .which_captures(WhichCaptures::None)
                            .auto_prefilter(false),
                    )
                    .build_many(&wide?)
                    .ok()
            })
            .as_ref()
    }

    /// How many exact patterns have been compiled so far.
    pub fn compiled(&self) -> usize {
        self.exact.iter().filter(|e| e.get().is_some()).count()
    }
}

/// A byte-level pattern that matches wherever `source` does (on the text's
/// UTF-8 bytes), and is cheap to compile:
/// - a Unicode class keeps its ASCII part exactly; any non-ASCII character
///   it holds becomes "a byte ≥ 0x80, then continuation bytes" — so `\w`,
///   `\d` or `.` cost a few NFA states instead of a UTF-8 automaton of
///   hundreds;
/// - Unicode word boundaries are dropped (no assertion matches more);
/// - counted repetitions lose their upper bound (`{0,80}` → `*`): a bound is
///   compiled as that many optional copies;
/// - capture groups are dropped (a set reports no groups).
///
/// Compile the result with Unicode off and without requiring UTF-8 (it
/// matches bytes).
pub fn widened(source: &str) -> Option<String> {
    let hir = regex_syntax::Parser::new().parse(source).ok()?;
    Some(widen(hir).to_string())
}

fn widen(hir: Hir) -> Hir {
    match hir.into_kind() {
        HirKind::Repetition(r) => Hir::repetition(Repetition {
            max: None,
            sub: Box::new(widen(*r.sub)),
            ..r
        }),
        HirKind::Capture(c) => widen(*c.sub),
        HirKind::Concat(subs) => Hir::concat(subs.into_iter().map(widen).collect()),
        HirKind::Alternation(subs) => Hir::alternation(subs.into_iter().map(widen).collect()),
        HirKind::Empty => Hir::empty(),
        HirKind::Literal(lit) => Hir::literal(lit.0),
        HirKind::Look(look) if is_unicode_word(look) => Hir::empty(),
        HirKind::Look(look) => Hir::look(look),
        HirKind::Class(Class::Bytes(class)) => Hir::class(Class::Bytes(class)),
        HirKind::Class(Class::Unicode(class)) => {
            let mut ascii: Vec<ClassBytesRange> = class
                .ranges()
                .iter()
                .filter(|r| r.start().is_ascii())
                .map(|r| ClassBytesRange::new(r.start() as u8, r.end().min('\x7f') as u8))
                .collect();
            if class.ranges().iter().all(|r| r.end().is_ascii()) {
                return Hir::class(Class::Bytes(ClassBytes::new(ascii)));
            }
            // Any non-ASCII character: its lead byte, then its (up to
            // three) continuation bytes.
            ascii.push(ClassBytesRange::new(0x80, 0xFF));
            let continuation = Hir::class(Class::Bytes(ClassBytes::new([ClassBytesRange::new(
                0x80, 0xBF,
            )])));
            Hir::concat(vec![
                Hir::class(Class::Bytes(ClassBytes::new(ascii))),
                Hir::repetition(Repetition {
                    min: 0,
                    max: None,
                    greedy: true,
                    sub: Box::new(continuation),
                }),
            ])
        }
    }
}

fn is_unicode_word(look: Look) -> bool {
    matches!(
        look,
        Look::WordUnicode
            | Look::WordUnicodeNegate
            | Look::WordStartUnicode
            | Look::WordEndUnicode
            | Look::WordStartHalfUnicode
            | Look::WordEndHalfUnicode
    )
}

/// Test support for the tables built on this module: checks, with texts
/// generated from each pattern (bare, inside prose, and with non-ASCII
/// characters around), that its widened form matches wherever it does.
#[cfg(any(test, feature = "test-support"))]
pub mod check {
    use super::*;
    use proptest::strategy::{Strategy, ValueTree};
    use proptest::test_runner::{Config, TestRunner};

    /// `hir` without its look-arounds (`\b`, `^`), which proptest's string
    /// generator does not take; a generated string is then kept only if the
    /// real pattern matches it.
    fn without_looks(hir: &Hir) -> Hir {
        match hir.kind() {
            HirKind::Look(_) => Hir::empty(),
            HirKind::Repetition(r) => Hir::repetition(Repetition {
                sub: Box::new(without_looks(&r.sub)),
                ..r.clone()
            }),
            HirKind::Capture(c) => Hir::capture(regex_syntax::hir::Capture {
                sub: Box::new(without_looks(&c.sub)),
                ..c.clone()
            }),
            HirKind::Concat(subs) => Hir::concat(subs.iter().map(without_looks).collect()),
            HirKind::Alternation(subs) => {
                Hir::alternation(subs.iter().map(without_looks).collect())
            }
            _ => hir.clone(),
        }
    }

    /// Panics if a text the exact pattern matches is not matched by the
    /// table's prefilter. Returns how many matching texts were checked.
    pub fn prefilter_is_a_superset(table: &PatternTable, per_pattern: usize) -> usize {
        assert!(
            table.prefilter().is_some(),
            "the prefilter does not compile"
        );
        let mut runner = TestRunner::new(Config::default());
        let mut checked = 0;
        for i in 0..table.len() {
            let (Some(source), Some(exact)) = (table.source(i), table.regex(i)) else {
                panic!("pattern {i} does not compile");
            };
            let Ok(hir) = regex_syntax::Parser::new().parse(source) else {
                panic!("pattern {i} does not parse");
            };
            let Ok(strategy) = proptest::string::string_regex(&without_looks(&hir).to_string())
            else {
                panic!("no generator for pattern {i}");
            };
            for n in 0..per_pattern {
                let Ok(tree) = strategy.new_tree(&mut runner) else {
                    panic!("generation failed for pattern {i}");
                };
                let value = tree.current();
                for text in [
                    value.clone(),
                    format!("note {n}: {value} (end)"),
                    format!("é {value} 日本語"),
                    format!("Привет,{value}…"),
                ] {
                    if exact.is_match(&text) {
                        checked += 1;
                        assert!(
                            table.may_match(&text)[i],
                            "the prefilter of {source} missed {text:?}"
                        );
                    }
                }
            }
        }
        checked
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_unicode_class_keeps_its_ascii_part_and_takes_any_other_character() {
        let wide = regex::bytes::RegexBuilder::new(&widened(r"^\w+$").unwrap())
            .unicode(false)
            .build()
            .unwrap();
        for text in ["abc_09", "héllo", "日本語", "Привет"] {
            assert!(wide.is_match(text.as_bytes()), "{text}");
        }
        // The ASCII part stays exact: punctuation and spaces are not words.
        for text in ["a b", "a-b", "a.b", ""] {
            assert!(!wide.is_match(text.as_bytes()), "{text}");
        }
    }

    #[test]
    fn widening_drops_bounds_captures_and_unicode_word_boundaries_only() {
        assert_eq!(widened(r"a{2,5}").unwrap(), widened(r"a{2,}").unwrap());
        assert_eq!(widened(r"(ab)").unwrap(), widened(r"ab").unwrap());
        assert_eq!(widened(r"\bab\b").unwrap(), widened(r"ab").unwrap());
        // Other assertions stay.
        assert_ne!(widened(r"^ab$").unwrap(), widened(r"ab").unwrap());
        assert_ne!(widened(r"(?-u:\b)ab").unwrap(), widened(r"ab").unwrap());
    }

    #[test]
    fn patterns_compile_only_when_the_prefilter_flags_them() {
        let table = PatternTable::new([r"\bsecret\w+", r"\d{3}-\d{4}", r"zzz"]);
        assert_eq!(table.compiled(), 0);
        assert_eq!(table.candidates("nothing to see").count(), 0);
        assert_eq!(table.compiled(), 0);
        let hits: Vec<usize> = table
            .candidates("call 555-1234")
            .filter(|(_, re)| re.is_match("call 555-1234"))
            .map(|(i, _)| i)
            .collect();
        assert_eq!(hits, [1]);
        assert_eq!(table.compiled(), 1);
    }

    #[test]
    fn a_table_whose_prefilter_fails_offers_every_pattern() {
        // A pattern that does not parse: no prefilter, so nothing is
        // skipped (and the broken pattern itself is left out).
        let table = PatternTable::new([r"ok\d", r"(unclosed"]);
        assert!(table.prefilter().is_none());
        let found: Vec<usize> = table.candidates("no digits").map(|(i, _)| i).collect();
        assert_eq!(found, [0]);
    }

    #[test]
    fn the_widened_form_matches_wherever_the_pattern_does() {
        let table = PatternTable::new([
            r"\b(?:ignore|skip)\b(?: \w+){0,4} rules\b",
            r"(?:^|[^\w.-])(\d(?:[ -]?\d){12,18})(?:$|[^\w-])",
            r"(?i)\bbearer\s+([A-Za-z0-9_\-.~+/]{20,}=*)",
            r"caf\u{e9} .{0,20}\p{Greek}+",
        ]);
        let checked = check::prefilter_is_a_superset(&table, 64);
        assert!(checked > 4 * 64, "only {checked} generated texts matched");
    }
}
