//! Timestamps as the API server writes them (RFC 3339, seconds, UTC) and object uids.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// `2026-12-05T03:04:05Z` for `seconds` since the epoch.
pub fn rfc3339(seconds: u64) -> String {
    let (year, month, day, hour, minute, second) =
        app::domain::dates::utc_parts(seconds as i64 * 1000);
    format!("{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}Z")
}

pub fn now_seconds() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

pub fn now() -> String {
    rfc3339(now_seconds())
}

/// A uid in the UUID shape, unique in this process.
pub fn uid() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let t = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        (t >> 32) as u32,
        (t >> 16) as u16,
        (t & 0xfff) as u16,
        (n >> 48) & 0xfff,
        n & 0xffff_ffff_ffff
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn timestamps_are_rfc3339_in_utc() {
        assert_eq!(super::rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(super::rfc3339(1_796_439_845), "2026-12-05T03:04:05Z");
        assert_ne!(super::uid(), super::uid());
    }
}
