//! How firmly a slice's size holds on its card, said the same way on every page, in the API and
//! in `/metrics`: hard, soft or none.

use serde::{Deserialize, Serialize};

/// What stops a session using more of its card than its slice.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum SliceHold {
    /// Nothing: the size is an agreement between colleagues.
    #[default]
    None,
    /// HAMi-core counts each allocation: held unless code deliberately steps around it (its own
    /// preload library, the driver called directly).
    Soft,
    /// The hardware: a whole card, or a MIG instance, is all the sandbox can see.
    Hard,
}

/// What is known of a card when its slices' hold is decided.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CardFacts {
    /// A card of this machine (or of the cluster's nodes), not a declared stand-in.
    pub real: bool,
    /// Each session sees only its own card's device nodes (a sandbox or a container).
    pub isolated: bool,
    /// The slice is a MIG instance of its card.
    pub mig: bool,
    /// A limiter (HAMi-core; HAMi on a cluster) holds each process to its slice.
    pub limiter: bool,
}

impl SliceHold {
    /// The hold of a `slice_mib` slice of a `memory_mib` card.
    pub fn of(card: CardFacts, slice_mib: u64, memory_mib: u64) -> Self {
        if !card.real || !card.isolated {
            // No card to hold, or every card in view: CUDA_VISIBLE_DEVICES is a variable.
            SliceHold::None
        } else if card.mig || slice_mib >= memory_mib {
            SliceHold::Hard
        } else if card.limiter {
            SliceHold::Soft
        } else {
            SliceHold::None
        }
    }

    /// A burst takes the whole of a card whose slices hold `self`: the whole card is all its
    /// sandbox sees wherever its slices are held at all.
    pub fn of_whole_card(self) -> Self {
        match self {
            SliceHold::None => SliceHold::None,
            SliceHold::Soft | SliceHold::Hard => SliceHold::Hard,
        }
    }

    /// "hard", "soft", "none": the word pages, the API and the metrics' label share.
    pub fn word(self) -> &'static str {
        match self {
            SliceHold::Hard => "hard",
            SliceHold::Soft => "soft",
            SliceHold::None => "none",
        }
    }

    /// "hard limit", "soft limit", "no limit": the chip beside a slice.
    pub fn label(self) -> &'static str {
        match self {
            SliceHold::Hard => "hard limit",
            SliceHold::Soft => "soft limit",
            SliceHold::None => "no limit",
        }
    }

    /// The word back, as stored.
    pub fn from_word(word: &str) -> Option<Self> {
        [SliceHold::Hard, SliceHold::Soft, SliceHold::None]
            .into_iter()
            .find(|hold| hold.word() == word)
    }

    /// The sentence behind the word, for titles and Settings.
    pub fn explain(self) -> &'static str {
        match self {
            SliceHold::Hard => "Hard limit: the sandbox sees only its own card or MIG instance.",
            SliceHold::Soft => {
                "Soft limit: HAMi-core holds the slice unless code deliberately steps around it."
            }
            SliceHold::None => {
                "No limit: nothing on the card stops a process using more than its slice."
            }
        }
    }

    /// The weakest of several cards' holds: what a launch of a size offered on all of them is
    /// sure to get.
    pub fn weakest(holds: impl IntoIterator<Item = SliceHold>) -> SliceHold {
        holds.into_iter().min().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REAL: CardFacts = CardFacts {
        real: true,
        isolated: true,
        mig: false,
        limiter: false,
    };

    #[test]
    fn a_slice_is_hard_only_where_the_sandbox_sees_nothing_more() {
        let limited = CardFacts {
            limiter: true,
            ..REAL
        };
        assert_eq!(SliceHold::of(limited, 8192, 49152), SliceHold::Soft);
        assert_eq!(SliceHold::of(REAL, 8192, 49152), SliceHold::None);
        assert_eq!(SliceHold::of(REAL, 49152, 49152), SliceHold::Hard);
        let mig = CardFacts { mig: true, ..REAL };
        assert_eq!(SliceHold::of(mig, 9984, 9984), SliceHold::Hard);
        // Without a sandbox, or without a card, nothing holds: not even a whole card.
        let open = CardFacts {
            isolated: false,
            ..limited
        };
        assert_eq!(SliceHold::of(open, 49152, 49152), SliceHold::None);
        let declared = CardFacts {
            real: false,
            ..limited
        };
        assert_eq!(SliceHold::of(declared, 8192, 49152), SliceHold::None);
    }

    #[test]
    fn a_size_offered_on_several_cards_promises_the_weakest_hold() {
        assert_eq!(
            SliceHold::weakest([SliceHold::Hard, SliceHold::Soft]),
            SliceHold::Soft
        );
        assert_eq!(SliceHold::weakest([]), SliceHold::None);
        assert_eq!(SliceHold::Soft.of_whole_card(), SliceHold::Hard);
        assert_eq!(SliceHold::None.of_whole_card(), SliceHold::None);
    }

    #[test]
    fn the_api_and_metrics_say_one_lowercase_word() {
        assert_eq!(serde_json::to_string(&SliceHold::Soft).unwrap(), "\"soft\"");
        for hold in [SliceHold::Hard, SliceHold::Soft, SliceHold::None] {
            assert_eq!(
                serde_json::to_string(&hold).unwrap(),
                format!("\"{}\"", hold.word())
            );
        }
    }
}
