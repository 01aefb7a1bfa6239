//! What the owner's `memory forget` takes out of a scope's conversation, not
//! only its memories: the stored history a restart rehydrates from
//! (`ChronicleStore::remove_where`) and the running TurnProcessor's context
//! (`StreamMsg::ForgetHistory`). Without it a forgotten sentence stayed in
//! the next prompt and came back after every restart.

/// Which conversation entries go with a forget.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HistoryFilter {
    /// The whole conversation (a purged scope).
    All,
    /// Entries containing every one of these words (a forget by query),
    /// case-insensitively.
    Words(Vec<String>),
    /// Entries containing this text (the content of a memory forgotten by
    /// id), case-insensitively.
    Phrase(String),
}

impl HistoryFilter {
    /// The filter for a forget by query: its words, lowercased.
    pub fn words(query: &str) -> Self {
        HistoryFilter::Words(silas_memory::query_words(query))
    }

    /// The filter for a forgotten memory's text.
    pub fn phrase(text: &str) -> Self {
        HistoryFilter::Phrase(text.trim().to_lowercase())
    }

    /// Whether an entry with `content` goes.
    pub fn matches(&self, content: &str) -> bool {
        match self {
            HistoryFilter::All => true,
            // The rule the memories forgotten with the turns follow.
            HistoryFilter::Words(words) => silas_memory::mentions_all(content, words),
            HistoryFilter::Phrase(p) => {
                !p.is_empty() && content.to_lowercase().contains(p.as_str())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::HistoryFilter;

    #[test]
    fn each_kind_of_forget_picks_its_entries() {
        let turn = "[auth] owner: MEM5 my locker code is PEAR-3131";
        assert!(HistoryFilter::All.matches(turn));
        assert!(HistoryFilter::words("pear").matches(turn));
        assert!(HistoryFilter::words("Locker PEAR").matches(turn));
        assert!(!HistoryFilter::words("locker apple").matches(turn));
        assert!(!HistoryFilter::words("  ").matches(turn));
        assert!(HistoryFilter::phrase("My locker code is PEAR-3131").matches(turn));
        assert!(!HistoryFilter::phrase("my bike code").matches(turn));
        assert!(!HistoryFilter::phrase("").matches(turn));
    }
}
