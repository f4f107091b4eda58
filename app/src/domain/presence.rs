//! The page's heartbeat, the rule both sides share: when a page tells the server someone is
//! there (`ui::presence` sends the beats; the reclaim simulator replays them by the same rule).

/// What one beat of a page says.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Beat {
    /// The person did something (typed, clicked, scrolled) since the last beat, or "I'm here".
    pub input: bool,
    /// The page has just gone out of sight (hidden behind another tab or window, or closed):
    /// the server takes it for gone at once ([`super::idle::page_gone_at`]).
    pub left: bool,
}

impl Beat {
    pub const HERE: Beat = Beat {
        input: false,
        left: false,
    };
    pub const INPUT: Beat = Beat {
        input: true,
        left: false,
    };
}

/// A visible page beats at least this often: the server takes a page that stopped beating for
/// gone ([`super::idle::PAGE_GONE_MS`], the idle policy's `away_ms`).
pub const BEAT_MS: i64 = 2 * 60_000;
/// After input, the next beat may go this soon: the idle countdown follows typing within seconds.
pub const INPUT_BEAT_MS: i64 = 10_000;

/// Whether to beat now. `urgent`: a session is inside its idle warning, where waiting a minute
/// to report input could let it end while someone types; input is then reported at the next
/// tick.
pub fn should_beat(
    now: i64,
    last_sent: i64,
    input_seen: bool,
    visible: bool,
    urgent: bool,
) -> bool {
    let since = now - last_sent;
    let input_due = input_seen && (urgent || since >= INPUT_BEAT_MS);
    visible && (since >= BEAT_MS || input_due)
}

/// Whether a session that ends as idle at `idle_at` (if ever) is inside its warning of `warn_ms`.
pub fn in_idle_warning(now: i64, idle_at: Option<i64>, warn_ms: i64) -> bool {
    idle_at.is_some_and(|at| at - now <= warn_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn beats_every_two_minutes_and_sooner_after_input_only_when_visible() {
        assert!(!should_beat(60_000, 0, false, true, false));
        assert!(should_beat(10_000, 0, true, true, false));
        assert!(!should_beat(9_999, 0, true, true, false));
        assert!(should_beat(BEAT_MS, 0, false, true, false));
        assert!(!should_beat(BEAT_MS * 3, 0, true, false, false));
    }

    #[test]
    fn inside_the_idle_warning_input_is_reported_at_once() {
        assert!(
            should_beat(5_000, 0, true, true, true),
            "input, urgent: now"
        );
        assert!(
            !should_beat(5_000, 0, false, true, true),
            "no input: no hurry"
        );
        assert!(!should_beat(5_000, 0, true, false, true), "hidden: never");
        assert!(in_idle_warning(1_000, Some(60_000), 60_000));
        assert!(!in_idle_warning(1_000, Some(62_000), 60_000));
        assert!(!in_idle_warning(1_000, None, 60_000));
    }
}
