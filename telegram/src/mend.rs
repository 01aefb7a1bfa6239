//! Lone UTF-16 surrogates in a Bot API answer.
//!
//! Telegram counts text in UTF-16, and a `\ud83d` without its pair is
//! valid JSON that no Rust string can hold: serde_json refuses the whole
//! answer. For `getUpdates` that is every update of the batch, again on
//! each poll, since the offset only moves past updates that were read — one
//! chat's broken message would stop the bot for every chat. A lone surrogate
//! is replaced with U+FFFD, as a UTF-16 decoder would, and the rest is kept.

/// `body` with every lone surrogate escape replaced by `\ufffd`, or `None`
/// when it has none (then it was not why the body failed to parse).
pub fn lone_surrogates(body: &[u8]) -> Option<Vec<u8>> {
    let mut out: Option<Vec<u8>> = None;
    let mut copied = 0;
    let mut i = 0;
    // A backslash only occurs inside a JSON string, where it starts an
    // escape that takes at least the next byte too (so `\\u` is no escape).
    while i + 1 < body.len() {
        if body[i] != b'\\' {
            i += 1;
            continue;
        }
        let Some(unit) = escape_at(body, i) else {
            i += 2;
            continue;
        };
        let paired = (0xD800..0xDC00).contains(&unit)
            && escape_at(body, i + 6).is_some_and(|low| (0xDC00..0xE000).contains(&low));
        if paired {
            i += 12;
        } else if (0xD800..0xE000).contains(&unit) {
            let buf = out.get_or_insert_with(|| Vec::with_capacity(body.len()));
            buf.extend_from_slice(&body[copied..i]);
            buf.extend_from_slice(b"\\ufffd");
            i += 6;
            copied = i;
        } else {
            i += 6;
        }
    }
    let mut buf = out?;
    buf.extend_from_slice(&body[copied..]);
    Some(buf)
}

/// The code unit of a `\uXXXX` escape starting at `at`.
fn escape_at(body: &[u8], at: usize) -> Option<u32> {
    let esc = body.get(at..at + 6)?;
    if esc[0] != b'\\' || esc[1] != b'u' {
        return None;
    }
    let hex = std::str::from_utf8(&esc[2..]).ok()?;
    u32::from_str_radix(hex, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mend(s: &str) -> Option<String> {
        lone_surrogates(s.as_bytes()).map(|b| String::from_utf8(b).unwrap())
    }

    #[test]
    fn lone_surrogates_become_replacement_characters() {
        let cases = [
            (r#""a\ud83d""#, Some(r#""a\ufffd""#)),
            (r#""\ude00b""#, Some(r#""\ufffdb""#)),
            (r#""\uD83Dx\uD83D""#, Some(r#""\ufffdx\ufffd""#)),
            // A high surrogate followed by a second high one: both lone.
            (r#""\ud83d\ud83d""#, Some(r#""\ufffd\ufffd""#)),
            // A lone one right before a proper pair.
            (r#""\ud83d\ud83d\ude00""#, Some(r#""\ufffd\ud83d\ude00""#)),
        ];
        for (body, want) in cases {
            assert_eq!(mend(body).as_deref(), want, "{body}");
            let fixed = mend(body).unwrap();
            assert!(serde_json::from_str::<serde_json::Value>(body).is_err());
            assert!(serde_json::from_str::<serde_json::Value>(&fixed).is_ok());
        }
    }

    #[test]
    fn pairs_other_escapes_and_escaped_backslashes_are_left_alone() {
        for body in [
            r#""\ud83d\ude00""#,
            r#""\u00e9\n\"\\""#,
            // `\\ud83d` is a backslash and the text "ud83d".
            r#""\\ud83d""#,
            r#""plain""#,
            r#""\u12""#,
            "",
            "\\",
        ] {
            assert_eq!(mend(body), None, "{body}");
        }
    }

    #[test]
    fn a_whole_updates_batch_parses_after_mending() {
        let body = r#"{"ok":true,"result":[{"update_id":7,"message":{"message_id":1,"date":0,"chat":{"id":5,"type":"private"},"text":"hi \ud83d"}},{"update_id":8}]}"#;
        let fixed = mend(body).unwrap();
        let v: serde_json::Value = serde_json::from_str(&fixed).unwrap();
        assert_eq!(v["result"][0]["message"]["text"], "hi \u{fffd}");
        assert_eq!(v["result"][1]["update_id"], 8);
    }
}
