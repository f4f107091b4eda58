//! Times as people read them, in UTC, from milliseconds since the epoch: the same on the
//! server and in the browser.

/// The civil date and time of `ms`: (year, month, day, hour, minute, second).
pub fn utc_parts(ms: i64) -> (i64, i64, i64, i64, i64, i64) {
    let secs = ms.div_euclid(1000);
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Days to a civil date (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day, rest / 3600, (rest / 60) % 60, rest % 60)
}

/// "2026-11-30".
pub fn day(ms: i64) -> String {
    let (year, month, day, ..) = utc_parts(ms);
    format!("{year:04}-{month:02}-{day:02}")
}

/// "2026-12-01 02:24".
pub fn minute(ms: i64) -> String {
    let (year, month, day, hour, minute, _) = utc_parts(ms);
    format!("{year:04}-{month:02}-{day:02} {hour:02}:{minute:02}")
}

/// "2026-12-01T02:24:05Z", as OCI annotations write times.
pub fn rfc3339(ms: i64) -> String {
    let (year, month, day, hour, minute, second) = utc_parts(ms);
    format!("{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}Z")
}

/// Milliseconds since the epoch of a time as RFC 3339 writes it ("2026-05-26T09:15:02.38+02:00",
/// "2026-05-27T10:02:11Z"), as scanners stamp their reports; None for anything else.
pub fn parse_rfc3339(text: &str) -> Option<i64> {
    let text = text.trim();
    let number = |s: &str| -> Option<i64> {
        (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())).then(|| s.parse().ok())?
    };
    let (date, time) = text.split_once(['T', 't', ' '])?;
    let mut ymd = date.splitn(3, '-');
    let (year, month, day) = (
        number(ymd.next()?)?,
        number(ymd.next()?)?,
        number(ymd.next()?)?,
    );
    // The offset: `Z`, or `±hh:mm` after the seconds.
    let (clock, offset_minutes) = if let Some(clock) = time.strip_suffix(['Z', 'z']) {
        (clock, 0)
    } else {
        let at = time.rfind(['+', '-'])?;
        let (hours, minutes) = time[at + 1..].split_once(':')?;
        let minutes = number(hours)? * 60 + number(minutes)?;
        (
            &time[..at],
            if &time[at..=at] == "-" {
                -minutes
            } else {
                minutes
            },
        )
    };
    let mut hms = clock.splitn(3, ':');
    let (hour, minute) = (number(hms.next()?)?, number(hms.next()?)?);
    let seconds = hms.next()?;
    let (whole, fraction) = seconds.split_once('.').unwrap_or((seconds, ""));
    let second = number(whole)?;
    let millis = if fraction.is_empty() {
        0
    } else {
        let digits: String = fraction.chars().chain("000".chars()).take(3).collect();
        number(fraction)?;
        number(&digits)?
    };
    let days_in_month = [
        31,
        28 + i64::from(year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)),
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    if !(1..=12).contains(&month)
        || day < 1
        || day > days_in_month[(month - 1) as usize]
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    // A civil date to days (Howard Hinnant's algorithm, the inverse of `utc_parts`).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let seconds = days * 86_400 + hour * 3600 + minute * 60 + second - offset_minutes * 60;
    Some(seconds * 1000 + millis)
}

/// A span of seconds as people say it: `45 s`, `30 min`, `1 min 30 s`, `2 h`, `1 h 30 min`.
pub fn span_words(seconds: u64) -> String {
    let (h, m, s) = (seconds / 3600, seconds % 3600 / 60, seconds % 60);
    let parts: Vec<String> = [(h, "h"), (m, "min"), (s, "s")]
        .into_iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, unit)| format!("{n} {unit}"))
        .collect();
    if parts.is_empty() {
        "0 s".into()
    } else {
        parts.join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_read_as_people_say_them() {
        assert_eq!(span_words(0), "0 s");
        assert_eq!(span_words(45), "45 s");
        assert_eq!(span_words(1800), "30 min");
        assert_eq!(span_words(90), "1 min 30 s");
        assert_eq!(span_words(7200), "2 h");
        assert_eq!(span_words(5400), "1 h 30 min");
        assert_eq!(span_words(3661), "1 h 1 min 1 s");
    }

    #[test]
    fn dates_read_in_utc() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        // 2024-02-29 23:59:59.999 UTC: a leap day, just before midnight.
        assert_eq!(rfc3339(1_709_251_199_999), "2024-02-29T23:59:59Z");
        assert_eq!(minute(1_709_251_199_999), "2024-02-29 23:59");
        assert_eq!(day(1_709_251_200_000), "2024-03-01");
        assert_eq!(day(-1), "1969-12-31");
    }

    #[test]
    fn rfc3339_times_are_read_back_with_their_offsets() {
        for ms in [0, 1_709_251_199_000, 1_780_000_000_000, -86_400_000] {
            assert_eq!(parse_rfc3339(&rfc3339(ms)), Some(ms));
        }
        assert_eq!(
            parse_rfc3339("2026-05-26T09:15:02.381517+02:00"),
            parse_rfc3339("2026-05-26T07:15:02.381Z")
        );
        assert_eq!(
            parse_rfc3339("2026-05-26T07:15:02.381Z").map(|ms| ms % 1000),
            Some(381)
        );
        assert_eq!(
            parse_rfc3339("2026-05-25T22:15:02-09:00"),
            parse_rfc3339("2026-05-26T07:15:02Z")
        );
        for bad in [
            "",
            "yesterday",
            "2026-02-30T00:00:00Z",
            "2026-05-26T25:00:00Z",
            "2026-05-26T07:15Z",
            "2026-05-26",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
    }
}
