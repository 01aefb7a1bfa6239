//! Token counting (§3.5 note): a heuristic `chars / 3.5`, whose error the
//! 20% headroom absorbs. Behind a trait so a real tokenizer can replace it.

/// Counts the tokens of a text.
pub trait TokenCounter: Send + Sync {
    fn count(&self, text: &str) -> u64;
}

/// `ceil(chars / 3.5)`, at least 1.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CharsPerToken;

impl CharsPerToken {
    /// The count for a text of `chars` characters.
    pub fn for_chars(chars: u64) -> u64 {
        // chars / 3.5 == chars * 2 / 7, in integers.
        chars.saturating_mul(2).div_ceil(7).max(1)
    }
}

impl TokenCounter for CharsPerToken {
    fn count(&self, text: &str) -> u64 {
        Self::for_chars(text.chars().count() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chars_over_three_and_a_half() {
        for (text, want) in [
            ("", 1),
            ("a", 1),
            ("abcdefg", 2),
            ("abcdefgh", 3),
            ("é".repeat(35).as_str(), 10),
        ] {
            assert_eq!(CharsPerToken.count(text), want, "{text:?}");
        }
    }
}
