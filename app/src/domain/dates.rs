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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_read_in_utc() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        // 2024-02-29 23:59:59.999 UTC: a leap day, just before midnight.
        assert_eq!(rfc3339(1_709_251_199_999), "2024-02-29T23:59:59Z");
        assert_eq!(minute(1_709_251_199_999), "2024-02-29 23:59");
        assert_eq!(day(1_709_251_200_000), "2024-03-01");
        assert_eq!(day(-1), "1969-12-31");
    }
}
