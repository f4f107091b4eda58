//! Credits are integer milli-credits: 1 credit = 1000. How a session's hold is settled at its
//! end ([`settlement`]) is decided here; the store writes the ledger rows it says, inside the
//! transaction that ends the session.

use super::session::EndReason;

/// Milli-credits per credit.
pub const MILLI: i64 = 1000;

/// The price of `minutes` at `per_hour` milli-credits an hour, rounded up to the milli-credit.
pub fn price_for_minutes(per_hour: i64, minutes: i64) -> i64 {
    (per_hour * minutes + 59) / 60
}

/// Minutes used, rounded up: a session that ran 61 s pays for 2 minutes.
pub fn minutes_used(elapsed_ms: i64) -> i64 {
    if elapsed_ms <= 0 {
        return 0;
    }
    (elapsed_ms + 59_999) / 60_000
}

/// What settling a hold costs and gives back: (charge, refund), never more than the hold.
pub fn settle(hold: i64, per_hour: i64, elapsed_ms: i64) -> (i64, i64) {
    let charge = price_for_minutes(per_hour, minutes_used(elapsed_ms)).min(hold);
    (charge, hold - charge)
}

/// The time a session spent parked (its GPU slice given back while it had no work), which is
/// not charged: `before_ms` of parks that ended, and the one that runs `since` then, if any.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Parked {
    pub before_ms: i64,
    pub since: Option<i64>,
}

impl Parked {
    /// Parked time up to `at`.
    pub fn until(self, at: i64) -> i64 {
        self.before_ms + self.since.map_or(0, |since| (at - since).max(0))
    }
}

/// What a session's end writes to the ledger.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settlement {
    /// The whole hold, released (a `refund` row when positive).
    pub released: i64,
    /// The minutes used, at the session's price, never more than the hold (a `charge` row).
    pub charge: i64,
    /// The charged minutes, rounded up (the charge row's note).
    pub minutes: i64,
}

/// Settles a session that ends at `now`: the whole `hold` is released, then the time from
/// `ready_at` to `charge_until` (never past `now`), less the time it was `parked`, is charged by
/// the minute at `per_hour`, unless the session never became ready or its `reason` charges no
/// time (a failed launch). `charge_until` is set when nobody watched the session to its end (a
/// server that died): its user pays until the last moment a server saw it alive.
pub fn settlement(
    hold: i64,
    per_hour: i64,
    ready_at: Option<i64>,
    charge_until: Option<i64>,
    reason: Option<EndReason>,
    parked: Parked,
    now: i64,
) -> Settlement {
    let elapsed = charged_ms(ready_at, charge_until, reason, parked, now);
    let (charge, _) = settle(hold, per_hour, elapsed);
    Settlement {
        released: hold,
        charge,
        minutes: minutes_used(elapsed),
    }
}

/// The time a session is charged for, by [`settlement`]'s rule: from `ready_at` to
/// `charge_until` (never past `now`) less the time it was `parked` by then, none if it never
/// became ready or its `reason` charges no time. For a session still running, `reason` is None
/// and `now` the moment asked about.
pub fn charged_ms(
    ready_at: Option<i64>,
    charge_until: Option<i64>,
    reason: Option<EndReason>,
    parked: Parked,
    now: i64,
) -> i64 {
    let charged = reason.is_none_or(EndReason::charges_time);
    let until = charge_until.map_or(now, |until| until.min(now));
    ready_at
        .filter(|_| charged)
        .map_or(0, |ready| (until - ready - parked.until(until)).max(0))
}

/// The minutes a session is charged for, rounded up as the charge rounds them: what its card
/// says it was in use, so that the count and the charge agree ("8 min", 8 minutes charged).
pub fn charged_minutes(
    ready_at: Option<i64>,
    charge_until: Option<i64>,
    reason: Option<EndReason>,
    parked: Parked,
    now: i64,
) -> i64 {
    minutes_used(charged_ms(ready_at, charge_until, reason, parked, now))
}

/// What a running session has cost so far: the charge [`settlement`] would write were it to
/// end at `now` (the minutes begun, parked time left out, at its price, never more than its
/// hold).
pub fn cost_so_far(
    hold: i64,
    per_hour: i64,
    ready_at: Option<i64>,
    parked: Parked,
    now: i64,
) -> i64 {
    settlement(hold, per_hour, ready_at, None, None, parked, now).charge
}

/// Minutes as a card says them: "1 min", "59 min", "2 h 05 min" (a begun minute is charged,
/// so nothing is "under a minute").
pub fn minutes_words(minutes: i64) -> String {
    let minutes = minutes.max(0);
    if minutes < 60 {
        format!("{minutes} min")
    } else {
        format!("{} h {:02} min", minutes / 60, minutes % 60)
    }
}

/// "credit" for exactly one (or minus one), else "credits".
pub fn unit(milli: i64) -> &'static str {
    if milli.abs() == MILLI {
        "credit"
    } else {
        "credits"
    }
}

/// An amount with its unit: "1 credit", "2.5 credits", "-98.5 credits".
pub fn with_unit(milli: i64) -> String {
    format!("{} {}", format(milli), unit(milli))
}

/// A price an hour with its unit: "1 credit/h", "0.5 credits/h", "2 credits/h".
pub fn per_hour(milli: i64) -> String {
    format!("{}/h", with_unit(milli))
}

/// "12.5" for 12500; always shows up to three decimals, no trailing zeros.
pub fn format(milli: i64) -> String {
    let sign = if milli < 0 { "-" } else { "" };
    let abs = milli.unsigned_abs();
    let whole = abs / 1000;
    let frac = abs % 1000;
    if frac == 0 {
        format!("{sign}{whole}")
    } else {
        let frac = format!("{frac:03}");
        format!("{sign}{whole}.{}", frac.trim_end_matches('0'))
    }
}

/// The most one grant gives or takes, or one ask asks for: a million credits, far inside the
/// ledger's integers.
pub const MAX_GRANT_MILLI: i64 = 1_000_000 * MILLI;

/// The longest note a grant or an ask keeps.
pub const MAX_NOTE_CHARS: usize = 200;

/// An admin's grant as typed: non-zero (negative takes back), at most [`MAX_GRANT_MILLI`].
pub fn checked_grant(text: &str) -> Result<i64, String> {
    let milli = parse(text)?;
    if milli == 0 {
        return Err("grant a non-zero amount".into());
    }
    if milli.unsigned_abs() > MAX_GRANT_MILLI as u64 {
        return Err(format!(
            "grant at most {} credits at a time",
            format(MAX_GRANT_MILLI)
        ));
    }
    Ok(milli)
}

/// A user's ask for credits as typed: positive, at most [`MAX_GRANT_MILLI`].
pub fn checked_ask(text: &str) -> Result<i64, String> {
    let milli = parse(text)?;
    if milli <= 0 {
        return Err("ask for a positive amount of credits".into());
    }
    if milli > MAX_GRANT_MILLI {
        return Err(format!(
            "ask for at most {} credits",
            format(MAX_GRANT_MILLI)
        ));
    }
    Ok(milli)
}

/// A grant's or an ask's note, trimmed: short and without control characters.
pub fn checked_note(note: &str) -> Result<&str, String> {
    let note = note.trim();
    if note.chars().count() > MAX_NOTE_CHARS || note.chars().any(char::is_control) {
        return Err(format!(
            "a note must be at most {MAX_NOTE_CHARS} characters, without control characters"
        ));
    }
    Ok(note)
}

const DAY_MS: i64 = 86_400_000;

/// The balance at the end of each of the last `days` UTC days, from ledger lines `(at_ms,
/// amount)` in any order; the last point is at `now_ms` and is the balance now. Lines after
/// `now_ms` are not counted. An account younger than the window starts at its first line (its
/// first grant), not with days of zero before it existed; give the balance before the window as
/// a line at its start, so that an older account's line spans the whole window.
pub fn balance_by_day(lines: &[(i64, i64)], now_ms: i64, days: u32) -> Vec<(i64, i64)> {
    let today = now_ms.div_euclid(DAY_MS) * DAY_MS;
    let balance_at = |at: i64| -> i64 {
        lines
            .iter()
            .filter(|(when, _)| *when <= at)
            .map(|(_, amount)| amount)
            .sum()
    };
    let first = lines.iter().map(|l| l.0).filter(|at| *at <= now_ms).min();
    let ends = (0..days.max(1)).rev().map(|back| {
        // The end of the day `back` days ago; today's point is now.
        if back == 0 {
            now_ms
        } else {
            today - (back as i64 - 1) * DAY_MS - 1
        }
    });
    let mut points: Vec<(i64, i64)> = ends
        .filter(|at| first.is_none_or(|first| *at >= first))
        .map(|at| (at, balance_at(at)))
        .collect();
    if let Some(first) = first
        && points.first().is_none_or(|p| p.0 > first)
        && first > today - (i64::from(days.max(1)) - 1) * DAY_MS - 1
    {
        points.insert(0, (first, balance_at(first)));
    }
    points
}

/// Parses "12", "12.5" or "0.125" credits into milli-credits.
pub fn parse(text: &str) -> Result<i64, String> {
    let text = text.trim();
    let invalid = || format!("'{text}' is not an amount of credits (e.g. 10 or 2.5)");
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (whole, frac) = digits.split_once('.').unwrap_or((digits, ""));
    if whole.is_empty() && frac.is_empty() {
        return Err(invalid());
    }
    if !whole.chars().all(|c| c.is_ascii_digit()) || !frac.chars().all(|c| c.is_ascii_digit()) {
        return Err(invalid());
    }
    if frac.len() > 3 {
        return Err(format!("'{text}' has more than three decimals"));
    }
    let whole: i64 = if whole.is_empty() {
        0
    } else {
        whole.parse().map_err(|_| invalid())?
    };
    let frac: i64 = format!("{frac:0<3}").parse().map_err(|_| invalid())?;
    let milli = whole
        .checked_mul(MILLI)
        .and_then(|w| w.checked_add(frac))
        .ok_or_else(|| format!("'{text}' is too large"))?;
    Ok(if negative { -milli } else { milli })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn price_rounds_up_to_the_milli_credit() {
        assert_eq!(price_for_minutes(1000, 60), 1000);
        assert_eq!(price_for_minutes(1000, 30), 500);
        assert_eq!(price_for_minutes(1000, 1), 17); // 16.67 rounded up
        assert_eq!(price_for_minutes(0, 600), 0);
    }

    #[test]
    fn minutes_round_up() {
        assert_eq!(minutes_used(0), 0);
        assert_eq!(minutes_used(1), 1);
        assert_eq!(minutes_used(60_000), 1);
        assert_eq!(minutes_used(60_001), 2);
    }

    #[test]
    fn settle_never_charges_more_than_the_hold() {
        assert_eq!(settle(1000, 1000, 30 * 60_000), (500, 500));
        assert_eq!(settle(1000, 1000, 90 * 60_000), (1000, 0));
        assert_eq!(settle(1000, 1000, 0), (0, 1000));
    }

    const NOW: i64 = 1_800_000_000_000;
    const MINUTE: i64 = 60_000;
    /// Never parked.
    const P: Parked = Parked {
        before_ms: 0,
        since: None,
    };

    #[test]
    fn parked_time_is_not_charged() {
        let ready = Some(NOW - 60 * MINUTE);
        // Parked 20 minutes earlier, and again for the last 10.
        let parked = Parked {
            before_ms: 20 * MINUTE,
            since: Some(NOW - 10 * MINUTE),
        };
        assert_eq!(parked.until(NOW), 30 * MINUTE);
        let s = settlement(
            10_000,
            6_000,
            ready,
            None,
            Some(EndReason::Idle),
            parked,
            NOW,
        );
        assert_eq!((s.minutes, s.charge), (30, 3_000));
        assert_eq!(
            charged_minutes(ready, None, Some(EndReason::Idle), parked, NOW),
            30
        );
        assert_eq!(cost_so_far(10_000, 6_000, ready, parked, NOW), 3_000);
        // A server that died while it was parked charges until it last saw it: the park from
        // then on is not counted twice.
        let watched = Some(NOW - 5 * MINUTE);
        let s = settlement(
            10_000,
            6_000,
            ready,
            watched,
            Some(EndReason::Crash),
            parked,
            NOW,
        );
        assert_eq!(s.minutes, 30);
        // Never more parked than it ran.
        let always = Parked {
            before_ms: 0,
            since: ready,
        };
        assert_eq!(cost_so_far(10_000, 6_000, ready, always, NOW), 0);
    }

    #[test]
    fn a_session_pays_for_the_minutes_since_it_was_ready_and_gets_the_rest_back() {
        let s = settlement(1000, 1000, Some(NOW - 30 * MINUTE - 1), None, None, P, NOW);
        assert_eq!(s.released, 1000);
        assert_eq!(s.minutes, 31, "a started minute counts");
        assert_eq!(s.charge, price_for_minutes(1000, 31));
    }

    #[test]
    fn a_launch_that_failed_or_never_became_ready_pays_nothing() {
        let ready = Some(NOW - 10 * MINUTE);
        let failed = settlement(500, 1000, ready, None, Some(EndReason::Failed), P, NOW);
        assert_eq!((failed.released, failed.charge), (500, 0));
        let never_ready = settlement(500, 1000, None, None, Some(EndReason::User), P, NOW);
        assert_eq!((never_ready.released, never_ready.charge), (500, 0));
        for reason in [
            EndReason::User,
            EndReason::Timer,
            EndReason::Idle,
            EndReason::Crash,
            EndReason::Admin,
            EndReason::Lost,
        ] {
            let s = settlement(500, 1000, ready, None, Some(reason), P, NOW);
            assert_eq!(s.charge, price_for_minutes(1000, 10), "{reason}");
        }
    }

    #[test]
    fn time_nobody_watched_is_not_charged() {
        let ready = Some(NOW - 60 * MINUTE);
        let watched_until = Some(NOW - 50 * MINUTE);
        let s = settlement(
            2000,
            1000,
            ready,
            watched_until,
            Some(EndReason::Crash),
            P,
            NOW,
        );
        assert_eq!(s.minutes, 10);
        // A mark in the future (a clock ahead on another replica) never charges past now.
        let ahead = settlement(2000, 1000, ready, Some(NOW + MINUTE), None, P, NOW);
        assert_eq!(ahead.minutes, 60);
        // Nor does a mark before the session was ready charge anything.
        let before = settlement(2000, 1000, ready, Some(NOW - 90 * MINUTE), None, P, NOW);
        assert_eq!((before.minutes, before.charge), (0, 0));
    }

    #[test]
    fn the_charge_never_exceeds_the_hold() {
        let s = settlement(100, 1000, Some(NOW - 120 * MINUTE), None, None, P, NOW);
        assert_eq!((s.released, s.charge), (100, 100));
    }

    #[test]
    fn the_balance_by_day_ends_at_the_balance_now() {
        let day = 86_400_000;
        let now = 20 * day + 3_600_000; // an hour into day 20
        let lines = [
            (now + 5, 999),           // after now: not counted
            (19 * day + 10, -2_000),  // day 19
            (5 * day, 100_000),       // long ago
            (20 * day + 60_000, 500), // today
        ];
        let points = balance_by_day(&lines, now, 3);
        assert_eq!(points.len(), 3);
        assert_eq!(points[0], (19 * day - 1, 100_000), "the end of day 18");
        assert_eq!(points[1], (20 * day - 1, 98_000), "the end of day 19");
        assert_eq!(points[2], (now, 98_500), "now");
        assert_eq!(balance_by_day(&[], now, 0), vec![(now, 0)]);
    }

    #[test]
    fn a_new_accounts_balance_starts_at_its_first_grant() {
        let day = 86_400_000;
        let now = 20 * day + 3_600_000;
        // Created yesterday at noon with 100 credits, 2 spent today.
        let created = 19 * day + day / 2;
        let lines = [(created, 100_000), (20 * day + 60_000, -2_000)];
        let points = balance_by_day(&lines, now, 30);
        assert_eq!(
            points,
            vec![(created, 100_000), (20 * day - 1, 100_000), (now, 98_000)],
            "no month of zero before the account existed"
        );
        // Created this very hour: its grant, then now.
        let fresh = [(now - 60_000, 50_000)];
        assert_eq!(
            balance_by_day(&fresh, now, 30),
            vec![(now - 60_000, 50_000), (now, 50_000)]
        );
        // An older account (its balance before the window as a line at its start) spans it all.
        let since = now - 31 * day;
        let older = [(since - 1, 7_000), (created, 1_000)];
        let points = balance_by_day(&older, now, 30);
        assert_eq!(points.len(), 30);
        assert_eq!(points[0].1, 7_000);
        assert_eq!(points[29], (now, 8_000));
    }

    #[test]
    fn the_minutes_shown_are_the_minutes_charged() {
        // A session ready for 7 min 20 s pays for 8 minutes; its card says 8 min.
        let ready = Some(NOW - 7 * MINUTE - 20_000);
        let s = settlement(10_000, 6_000, ready, None, Some(EndReason::User), P, NOW);
        let shown = charged_minutes(ready, None, Some(EndReason::User), P, NOW);
        assert_eq!((s.minutes, shown), (8, 8));
        assert_eq!(s.charge, price_for_minutes(6_000, shown));
        assert_eq!(minutes_words(shown), "8 min");
        // Time nobody watched is neither charged nor shown; a failure charges and shows none.
        let watched = Some(NOW - 3 * MINUTE);
        assert_eq!(
            charged_minutes(ready, watched, Some(EndReason::Crash), P, NOW),
            settlement(
                10_000,
                6_000,
                ready,
                watched,
                Some(EndReason::Crash),
                P,
                NOW
            )
            .minutes
        );
        assert_eq!(
            charged_minutes(ready, None, Some(EndReason::Failed), P, NOW),
            0
        );
        assert_eq!(charged_minutes(None, None, None, P, NOW), 0);
        assert_eq!(minutes_words(1), "1 min");
        assert_eq!(minutes_words(125), "2 h 05 min");
    }

    #[test]
    fn a_running_session_has_cost_what_ending_now_would_charge() {
        let ready = Some(NOW - 90 * MINUTE - 1);
        // 91 minutes begun at 1 credit an hour, under its 2-credit hold.
        assert_eq!(
            cost_so_far(2_000, 1_000, ready, P, NOW),
            price_for_minutes(1_000, 91)
        );
        assert_eq!(
            cost_so_far(2_000, 1_000, ready, P, NOW),
            settlement(2_000, 1_000, ready, None, Some(EndReason::User), P, NOW).charge
        );
        // Never more than the hold; nothing before it was ready.
        assert_eq!(cost_so_far(1_000, 1_000, ready, P, NOW), 1_000);
        assert_eq!(cost_so_far(1_000, 1_000, None, P, NOW), 0);
        assert_eq!(cost_so_far(1_000, 1_000, Some(NOW + MINUTE), P, NOW), 0);
    }

    #[test]
    fn grants_asks_and_notes_are_bounded() {
        assert_eq!(checked_grant("-2.5"), Ok(-2500));
        assert!(checked_grant("0").unwrap_err().contains("non-zero"));
        assert!(checked_grant("1000001").unwrap_err().contains("at most"));
        assert_eq!(checked_ask("20"), Ok(20_000));
        assert!(checked_ask("-1").unwrap_err().contains("positive"));
        assert!(checked_ask("0").unwrap_err().contains("positive"));
        assert!(checked_ask("lots").unwrap_err().contains("not an amount"));
        assert_eq!(checked_note("  for the course "), Ok("for the course"));
        assert!(checked_note(&"x".repeat(201)).is_err());
        assert!(checked_note("two\nlines").is_err());
    }

    #[test]
    fn format_and_parse_round_trip() {
        for (text, milli) in [
            ("0", 0),
            ("12", 12_000),
            ("12.5", 12_500),
            ("0.125", 125),
            ("-3.05", -3_050),
        ] {
            assert_eq!(parse(text).unwrap(), milli, "{text}");
            assert_eq!(format(milli), text);
        }
        assert_eq!(parse(".5").unwrap(), 500);
    }

    #[test]
    fn parse_rejects_garbage() {
        for bad in ["", "abc", "1.2345", "1e3", "--1", "1.2.3", "."] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn one_credit_is_singular() {
        assert_eq!(with_unit(1000), "1 credit");
        assert_eq!(with_unit(-1000), "-1 credit");
        assert_eq!(with_unit(1500), "1.5 credits");
        assert_eq!(with_unit(-98_500), "-98.5 credits");
        assert_eq!(with_unit(0), "0 credits");
        assert_eq!(per_hour(1000), "1 credit/h");
        assert_eq!(per_hour(500), "0.5 credits/h");
        assert_eq!(per_hour(1001), "1.001 credits/h");
        assert_eq!(per_hour(2000), "2 credits/h");
    }
}
