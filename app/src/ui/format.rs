//! How the pages write times, countdowns and sizes, and the browser's clock and address bar.

use leptos::prelude::*;

pub(crate) fn now_ms() -> i64 {
    #[cfg(feature = "hydrate")]
    {
        js_sys::Date::now() as i64
    }
    #[cfg(not(feature = "hydrate"))]
    {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0)
    }
}

/// "1:02:03" or "4:05"; "0:00" once passed.
pub(crate) fn format_countdown(ms: i64) -> String {
    let secs = (ms.max(0) + 999) / 1000;
    let (h, m, s) = (secs / 3600, (secs / 60) % 60, secs % 60);
    if h > 0 {
        format!("{h}:{m:02}:{s:02}")
    } else {
        format!("{m}:{s:02}")
    }
}

/// A full page load, for paths the router does not own (the editors under /s/).
pub(crate) fn hard_navigate(path: &str) {
    #[cfg(feature = "hydrate")]
    if let Some(window) = web_sys::window() {
        let _ = window.location().set_href(path);
    }
    #[cfg(not(feature = "hydrate"))]
    let _ = path;
}

/// Asks the person `question` in the browser's own dialog; whether they said OK. Outside the
/// browser (nothing is clicked there) the answer is yes.
pub(crate) fn confirmed(question: &str) -> bool {
    #[cfg(feature = "hydrate")]
    {
        web_sys::window()
            .and_then(|window| window.confirm_with_message(question).ok())
            .unwrap_or(false)
    }
    #[cfg(not(feature = "hydrate"))]
    {
        let _ = question;
        true
    }
}

/// A ticking clock for countdowns; only ticks in the browser.
pub(crate) fn use_clock() -> ReadSignal<i64> {
    let (now, set_now) = signal(now_ms());
    Effect::new(move |_| {
        if let Ok(handle) = set_interval_with_handle(
            move || set_now.set(now_ms()),
            std::time::Duration::from_secs(1),
        ) {
            on_cleanup(move || handle.clear());
        }
    });
    now
}

/// "2026-12-01 02:24" (UTC) from milliseconds since the epoch.
pub(crate) fn format_utc(ms: i64) -> String {
    crate::domain::dates::minute(ms)
}

/// "700.0 KB" for a size in bytes.
pub(crate) fn format_bytes(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KB", "MB", "GB", "TB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut size = bytes as f64 / 1024.0;
    let mut unit = 0;
    while size >= 1024.0 && unit < UNITS.len() - 1 {
        size /= 1024.0;
        unit += 1;
    }
    format!("{size:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::{format_bytes, format_countdown, format_utc};

    #[test]
    fn countdown_formats() {
        assert_eq!(format_countdown(0), "0:00");
        assert_eq!(format_countdown(-5), "0:00");
        assert_eq!(format_countdown(61_000), "1:01");
        assert_eq!(format_countdown(3_723_000), "1:02:03");
        assert_eq!(format_countdown(500), "0:01");
    }

    #[test]
    fn dates_are_utc_minutes() {
        assert_eq!(format_utc(0), "1970-01-01 00:00");
        assert_eq!(format_utc(951_782_400_000), "2000-02-29 00:00");
        assert_eq!(format_utc(1_795_919_040_000), "2026-11-29 02:24");
    }

    #[test]
    fn sizes_read_in_binary_units() {
        assert_eq!(format_bytes(5), "5 B");
        assert_eq!(format_bytes(700_001), "683.6 KB");
        assert_eq!(format_bytes(3 * 1024 * 1024), "3.0 MB");
    }
}
