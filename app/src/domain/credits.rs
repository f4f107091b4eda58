//! Credits are integer milli-credits: 1 credit = 1000.

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
}
