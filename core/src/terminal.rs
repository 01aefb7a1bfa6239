//! Text bound for the owner's terminal. Replies, plan titles and tool
//! output come from a model that may be prompt-injected; printed raw, an
//! escape sequence in them could clear the screen and draw a fake approval
//! prompt, retitle the window, or write the clipboard (OSC 52). Every
//! control character but newline and tab, and every bidirectional override,
//! is shown as a visible stand-in instead.

use std::borrow::Cow;

/// Whether `c` may not reach a terminal as itself (also: what a new file
/// name may not hold, with newline and tab).
pub fn unsafe_char(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t')
        || matches!(
            c,
            '\u{202a}'..='\u{202e}'
                | '\u{2066}'..='\u{2069}'
                // Marks and invisible spaces: text that is there unseen
                // (joiners stay: emoji and scripts need them).
                | '\u{061c}'
                | '\u{200b}'
                | '\u{200e}'
                | '\u{200f}'
                | '\u{2060}'
                | '\u{feff}'
        )
}

/// `text` with every unsafe character shown as `\u{..}` (ESC as `\e`), or
/// the text itself when it has none.
pub fn printable(text: &str) -> Cow<'_, str> {
    if !text.chars().any(unsafe_char) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\u{1b}' => out.push_str("\\e"),
            '\r' => out.push_str("\\r"),
            c if unsafe_char(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// [`printable`] on one line: newlines and tabs become spaces too (a
/// table cell, a title).
pub fn one_line(text: &str) -> Cow<'_, str> {
    match printable(text) {
        Cow::Borrowed(t) if !t.contains(['\n', '\t']) => Cow::Borrowed(t),
        other => Cow::Owned(other.replace(['\n', '\t'], " ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_text_passes_borrowed() {
        for t in ["hello", "two\nlines\tand a tab", "ünïcode ✓", ""] {
            assert!(matches!(printable(t), Cow::Borrowed(_)), "{t:?}");
        }
    }

    #[test]
    fn escapes_and_overrides_are_shown_not_sent() {
        let fake = "\u{1b}[2J\u{1b}[HApprove? [y/N]\u{7}\u{1b}]52;c;ZXZpbA==\u{7}";
        let shown = printable(fake);
        assert!(!shown.chars().any(unsafe_char), "{shown}");
        assert!(shown.starts_with("\\e[2J\\e[H"), "{shown}");
        assert_eq!(printable("a\rb"), "a\\rb");
        assert_eq!(printable("x\u{202e}txt.exe"), "x\\u{202e}txt.exe");
        assert_eq!(printable("rm\u{200b} -rf"), "rm\\u{200b} -rf");
        assert_eq!(printable("👨\u{200d}👩"), "👨\u{200d}👩");
        // C1 controls (a one-byte CSI in some terminals) and DEL too.
        assert_eq!(printable("\u{9b}2J\u{7f}"), "\\u{9b}2J\\u{7f}");
    }

    #[test]
    fn every_char_is_either_kept_or_escaped() {
        for cp in (0u32..0x3000).chain(0xfff0..0x10000) {
            let Some(c) = char::from_u32(cp) else {
                continue;
            };
            let s = c.to_string();
            let p = printable(&s);
            if unsafe_char(c) {
                assert!(p.starts_with('\\') && p.is_ascii(), "{cp:x}: {p}");
            } else {
                assert_eq!(p, s, "{cp:x}");
            }
        }
    }

    #[test]
    fn one_line_flattens() {
        assert_eq!(one_line("a\nb\tc"), "a b c");
        assert_eq!(one_line("a\u{1b}b\nc"), "a\\eb c");
        assert!(matches!(one_line("title"), Cow::Borrowed(_)));
    }
}
