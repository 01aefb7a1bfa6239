//! Telegram's text limits (issue #14 item 6): splitting at 4,096 characters
//! and MarkdownV2 escaping.
//!
//! Telegram counts a message's length in UTF-16 code units *after entities
//! parsing* (1–4096), so plain text is split first and each piece escaped
//! afterwards: the escapes do not count. Pieces break on line boundaries; a
//! line longer than the limit is cut at its last space inside the window, or
//! at a character boundary (never inside a surrogate pair).

/// `sendMessage` / `editMessageText` text limit, in UTF-16 code units.
pub const MAX_MESSAGE_UTF16: usize = 4096;

/// Telegram's length of `s` (UTF-16 code units).
pub fn utf16_len(s: &str) -> usize {
    s.chars().map(char::len_utf16).sum()
}

/// Split `text` into pieces of at most `max` UTF-16 units, on line
/// boundaries where possible. Empty pieces are dropped (Telegram refuses
/// empty text), so blank input gives no pieces.
pub fn split_message(text: &str, max: usize) -> Vec<String> {
    let max = max.max(2);
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut cur_len = 0;
    for line in text.split_inclusive('\n') {
        let len = utf16_len(line);
        if cur_len + len <= max {
            cur.push_str(line);
            cur_len += len;
            continue;
        }
        // The newline that ends a piece is the boundary itself.
        push_piece(&mut out, &mut cur);
        let body = line.strip_suffix('\n').unwrap_or(line);
        if utf16_len(body) <= max {
            cur.push_str(line);
            cur_len = len;
            continue;
        }
        let mut rest = body;
        while utf16_len(rest) > max {
            let cut = hard_cut(rest, max);
            if !rest[..cut].trim().is_empty() {
                out.push(rest[..cut].to_string());
            }
            rest = rest[cut..].trim_start_matches(' ');
        }
        cur.push_str(rest);
        if line.ends_with('\n') {
            cur.push('\n');
        }
        cur_len = utf16_len(&cur);
    }
    push_piece(&mut out, &mut cur);
    out
}

fn push_piece(out: &mut Vec<String>, cur: &mut String) {
    let piece = std::mem::take(cur);
    let piece = piece.strip_suffix('\n').unwrap_or(&piece);
    if !piece.trim().is_empty() {
        out.push(piece.to_string());
    }
}

/// Byte index to cut `s` at so the head fits `max` UTF-16 units: the last
/// space in the window's second half, else the last char boundary that fits.
fn hard_cut(s: &str, max: usize) -> usize {
    let mut units = 0;
    let mut fit = 0;
    let mut space = None;
    for (i, c) in s.char_indices() {
        let w = c.len_utf16();
        if units + w > max {
            break;
        }
        units += w;
        fit = i + c.len_utf8();
        if c == ' ' && units > max / 2 {
            space = Some(i);
        }
    }
    match space {
        Some(i) if i > 0 => i,
        // A first char wider than max cannot happen (max >= 2).
        _ => fit.max(s.chars().next().map_or(0, char::len_utf8)),
    }
}

/// Plain text as MarkdownV2 messages that render it literally: split by
/// its visible length first, then each piece escaped.
pub fn markdown_v2_pieces(plain: &str) -> Vec<String> {
    split_message(plain, MAX_MESSAGE_UTF16)
        .iter()
        .map(|p| escape_markdown_v2(p))
        .collect()
}

/// Characters MarkdownV2 reserves outside code entities.
const MARKDOWN_V2_RESERVED: &[char] = &[
    '_', '*', '[', ']', '(', ')', '~', '`', '>', '#', '+', '-', '=', '|', '{', '}', '.', '!', '\\',
];

/// Escape text for MarkdownV2 so it renders literally.
pub fn escape_markdown_v2(text: &str) -> String {
    escape_with(text, |c| MARKDOWN_V2_RESERVED.contains(&c))
}

/// Escape the inside of a `pre` / `code` entity (only `` ` `` and `\`).
pub fn escape_markdown_v2_code(text: &str) -> String {
    escape_with(text, |c| c == '`' || c == '\\')
}

/// Escape the URL part of an inline link `[text](url)` (only `)` and `\`).
pub fn escape_markdown_v2_link_url(url: &str) -> String {
    escape_with(url, |c| c == ')' || c == '\\')
}

/// Shown instead of a character that would act unseen: a bidirectional
/// override reorders what follows it (a card's `Backup <U+202E>gpj.exe`
/// reads as `Backup exe.jpg`), a zero-width one hides text. Telegram renders
/// them, so they are replaced before the owner reads a card or a reply.
pub const UNSAFE_STAND_IN: char = '\u{fffd}';

fn escape_with(text: &str, reserved: impl Fn(char) -> bool) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 8);
    for c in text.chars() {
        if silas_core::terminal::unsafe_char(c) {
            out.push(UNSAFE_STAND_IN);
            continue;
        }
        if reserved(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_and_invisible_characters_are_shown_not_sent() {
        let title = "Backup \u{202e}gpj.exe\u{200b} now\u{1b}[2J";
        for escaped in [
            escape_markdown_v2(title),
            escape_markdown_v2_code(title),
            escape_markdown_v2_link_url(title),
        ] {
            assert!(
                !escaped.chars().any(silas_core::terminal::unsafe_char),
                "{escaped:?}"
            );
            assert_eq!(escaped.matches(UNSAFE_STAND_IN).count(), 3, "{escaped:?}");
        }
        // Newlines, tabs, emoji joiners and other scripts stay.
        let plain = "two\nlines\tand 👩\u{200d}💻 ünïcode";
        assert_eq!(escape_markdown_v2_code(plain), plain);
    }

    #[test]
    fn short_text_is_one_piece() {
        assert_eq!(split_message("hello\nworld", 4096), vec!["hello\nworld"]);
        assert!(split_message("", 4096).is_empty());
        assert!(split_message("\n\n  \n", 4096).is_empty());
    }

    #[test]
    fn splits_on_line_boundaries() {
        let line = "x".repeat(2000);
        let text = format!("{line}\n{line}\n{line}\n");
        let pieces = split_message(&text, 4096);
        assert_eq!(pieces, vec![format!("{line}\n{line}"), line.clone()]);
        // Exactly at the limit still fits.
        let exact = format!("{}\n{}", "a".repeat(2047), "b".repeat(2048));
        assert_eq!(utf16_len(&exact), 4096);
        assert_eq!(split_message(&exact, 4096), vec![exact.clone()]);
        let over = format!("{exact}c");
        assert_eq!(
            split_message(&over, 4096),
            vec!["a".repeat(2047), format!("{}c", "b".repeat(2048))]
        );
    }

    #[test]
    fn overlong_lines_are_hard_split_at_spaces_or_chars() {
        let words = "word ".repeat(2000); // 10,000 units, spaces inside
        let pieces = split_message(words.trim_end(), 4096);
        assert!(pieces.len() >= 3);
        for p in &pieces {
            assert!(utf16_len(p) <= 4096);
            assert!(!p.starts_with(' ') && p.starts_with("word"), "{p:.20}");
        }
        let solid = "z".repeat(9000);
        let pieces = split_message(&solid, 4096);
        assert_eq!(
            pieces.iter().map(|p| p.len()).collect::<Vec<_>>(),
            vec![4096, 4096, 808]
        );
        assert_eq!(pieces.concat(), solid);
    }

    #[test]
    fn length_is_utf16_and_surrogate_pairs_stay_whole() {
        // U+1F600 is 2 UTF-16 units, 4 UTF-8 bytes; é is 1 unit, 2 bytes.
        assert_eq!(utf16_len("😀é"), 3);
        let emoji = "😀".repeat(2049); // 4098 units: one too many pairs
        let pieces = split_message(&emoji, 4096);
        assert_eq!(pieces.len(), 2);
        assert_eq!(utf16_len(&pieces[0]), 4096);
        assert_eq!(pieces[1], "😀");
        // A cut that leaves only a space sends no blank message.
        assert_eq!(split_message(" 😀", 2), vec!["😀"]);
        // An odd limit never splits a pair.
        let pieces = split_message("😀😀😀", 5);
        assert_eq!(pieces, vec!["😀😀", "😀"]);
        // Bytes vs units: 3000 'é' are 6000 bytes but 3000 units: one piece.
        assert_eq!(split_message(&"é".repeat(3000), 4096).len(), 1);
    }

    #[test]
    fn every_piece_fits_and_content_is_kept() {
        let text: String = (0..500)
            .map(|i| format!("line {i} {}\n", "ß😀".repeat(i % 40)))
            .collect();
        let pieces = split_message(&text, 4096);
        assert!(pieces.len() > 1);
        for p in &pieces {
            assert!(utf16_len(p) <= 4096);
        }
        assert_eq!(pieces.join("\n") + "\n", text);
    }

    proptest::proptest! {
        /// Any text, any limit: pieces fit, none is blank, and only
        /// whitespace at the cuts is lost.
        #[test]
        fn pieces_fit_and_keep_every_visible_character(
            text in "[a é😀\n]{0,300}",
            max in 2usize..40,
        ) {
            let pieces = split_message(&text, max);
            for p in &pieces {
                proptest::prop_assert!(utf16_len(p) <= max, "{p:?}");
                proptest::prop_assert!(!p.trim().is_empty());
            }
            let visible = |s: &str| s.chars().filter(|c| !c.is_whitespace()).collect::<String>();
            proptest::prop_assert_eq!(visible(&pieces.concat()), visible(&text));
        }
    }

    #[test]
    fn markdown_v2_escapes_every_reserved_character() {
        let all = "_*[]()~`>#+-=|{}.!\\";
        let escaped = escape_markdown_v2(all);
        let expected: String = all.chars().flat_map(|c| ['\\', c]).collect();
        assert_eq!(escaped, expected);
        assert_eq!(
            escape_markdown_v2("Cost: 3.50 (approx) - ok!"),
            "Cost: 3\\.50 \\(approx\\) \\- ok\\!"
        );
        assert_eq!(escape_markdown_v2("plain text é 😀"), "plain text é 😀");
    }

    #[test]
    fn markdown_pieces_split_by_visible_length_then_escape() {
        // 4,096 dots fit one message once parsed, though escaped they are 8,192.
        let dots = ".".repeat(4096);
        let pieces = markdown_v2_pieces(&dots);
        assert_eq!(pieces, vec!["\\.".repeat(4096)]);
        let pieces = markdown_v2_pieces(&format!("{dots}\n!"));
        assert_eq!(pieces, vec!["\\.".repeat(4096), "\\!".to_string()]);
    }

    #[test]
    fn markdown_v2_code_and_url_escape_only_their_characters() {
        assert_eq!(
            escape_markdown_v2_code("a_b `c` \\d."),
            "a_b \\`c\\` \\\\d."
        );
        assert_eq!(
            escape_markdown_v2_link_url("https://x.y/a_(b)\\"),
            "https://x.y/a_(b\\)\\\\"
        );
    }
}
