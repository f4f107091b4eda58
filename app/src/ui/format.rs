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

/// A field of the form a submit event came from, as the browser would post it: what was typed
/// before the page's script loaded counts too.
pub(crate) fn submitted(ev: &leptos::ev::SubmitEvent, name: &str) -> String {
    #[cfg(feature = "hydrate")]
    {
        use wasm_bindgen::JsCast;
        ev.target()
            .and_then(|target| target.dyn_into::<web_sys::HtmlFormElement>().ok())
            .and_then(|form| web_sys::FormData::new_with_form(&form).ok())
            .and_then(|data| data.get(name).as_string())
            .unwrap_or_default()
    }
    #[cfg(not(feature = "hydrate"))]
    {
        let _ = (ev, name);
        String::new()
    }
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
    // The server's time at render, read back while hydrating: what depends on the clock (a
    // warning shown near a deadline, the readings' minute) renders alike on both sides, however
    // long the browser took to get here. The ticks then bring the browser's own time.
    let (now, set_now) = signal(leptos::server::SharedValue::new_str(now_ms).into_inner());
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

/// A time on a clock `east` minutes ahead of UTC: "2026-12-01 03:24" at UTC+1; at UTC itself
/// it says so, "2026-12-01 02:24 UTC".
pub(crate) fn zoned_minute(ms: i64, east: i32) -> String {
    if east == 0 {
        format!("{} UTC", format_utc(ms))
    } else {
        format_utc(ms + i64::from(east) * 60_000)
    }
}

/// A time as the pages write it before the browser redraws it: "2026-12-01 02:24 UTC".
pub(crate) fn utc_words(ms: i64) -> String {
    zoned_minute(ms, 0)
}

/// A time in the reader's time zone, its UTC time in the title (what a pointer's hover or a
/// long press shows). The server writes UTC, knowing no reader's zone; the page's own script
/// ([`LOCAL_TIMES`]) then writes every `time.local` in the browser's zone, whether the server
/// drew it or the hydrated code did, so that the browser's bundle carries no code for it.
pub(crate) fn local_time(ms: i64) -> impl IntoView + use<> {
    let utc = utc_words(ms);
    let title = utc.clone();
    view! {
        <time class="local" data-ms=ms title=title>
            {utc}
        </time>
    }
}

/// What a queued launch waits for and when it should start, the time on the reader's clock
/// (the words of [`crate::domain::pool::queue_words`]; what frees its place by then, its
/// `queue_why`, the server's [`crate::domain::pool::frees_words`]).
pub(crate) fn queue_line(session: &crate::model::SessionView) -> AnyView {
    let (waits_for, eta_ms) = (session.waits_for.as_deref(), session.queue_eta_ms);
    let why = session.queue_why.as_deref();
    let Some(at) = eta_ms else {
        return crate::domain::pool::queue_words(waits_for, None, None).into_any();
    };
    let what = waits_for.unwrap_or("a free slice");
    view! {
        {format!("Waiting for {what}: expected by ")}
        {local_time(at)}
        {format!(", {}.", why.unwrap_or("when a slice frees"))}
    }
    .into_any()
}

/// The script, inline in every page's head, that writes each `time.local` on the reader's clock
/// as [`zoned_minute`] would with the browser's offset at that moment ("2026-12-01 03:24", or
/// "… UTC" where the browser's zone is UTC), now and whenever the page draws one anew. It
/// changes the text node's data, never the node, so hydration finds the nodes it drew.
pub const LOCAL_TIMES: &str = "(()=>{const p=n=>String(n).padStart(2,'0'),\
w=t=>{const d=new Date(+t.dataset.ms);if(isNaN(d))return;\
const s=d.getFullYear()+'-'+p(d.getMonth()+1)+'-'+p(d.getDate())+' '+p(d.getHours())+':'+p(d.getMinutes())+(d.getTimezoneOffset()?'':' UTC'),\
n=t.firstChild;if(n&&n.nodeType===3&&n.data!==s)n.data=s},\
a=()=>document.querySelectorAll('time.local').forEach(w);\
new MutationObserver(a).observe(document,{subtree:true,childList:true,characterData:true});\
document.addEventListener('DOMContentLoaded',a)})()";

/// How long an ended session ran: "in use 13 min", or "never started" when its editor was never
/// ready; empty while it has not ended. The minutes are the ones charged (its cost's, else by
/// the same rule, `credits::charged_minutes`), so the card and the charge agree.
#[cfg(any(feature = "ssr", test))]
pub(crate) fn in_use(
    ready_at_ms: Option<i64>,
    ended_at_ms: Option<i64>,
    charged_minutes: Option<i64>,
) -> String {
    match (ready_at_ms, ended_at_ms) {
        (Some(ready), Some(ended)) => {
            // Without the server's count (a session settled before it kept one), nothing was
            // parked: parking came later.
            let minutes = charged_minutes.unwrap_or_else(|| {
                let never = crate::domain::credits::Parked::default();
                crate::domain::credits::charged_minutes(Some(ready), None, None, never, ended)
            });
            format!("in use {}", crate::domain::credits::minutes_words(minutes))
        }
        (None, _) => "never started".into(),
        (Some(_), None) => String::new(),
    }
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

/// A message as a sentence: "grant a non-zero amount" reads "Grant a non-zero amount." on a
/// page (the REST API keeps the terse form its clients expect).
pub(crate) fn sentence(message: &str) -> String {
    let message = message.trim();
    let mut chars = message.chars();
    let Some(first) = chars.next() else {
        return String::new();
    };
    let mut out: String = first.to_uppercase().chain(chars).collect();
    // A closing bracket ends a sentence only after its own full stop.
    let ended = out.ends_with(['.', '!', '?', ':']) || out.ends_with(".)");
    if !ended {
        out.push('.');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{format_bytes, format_countdown, format_utc, sentence};

    #[test]
    fn a_past_session_says_how_long_it_was_charged_for() {
        use super::in_use;
        let start = 1_795_919_040_000;
        // Ready 12 min 59 s: 13 minutes begun, 13 charged, "in use 13 min".
        assert_eq!(
            in_use(Some(start), Some(start + 12 * 60_000 + 59_000), None),
            "in use 13 min"
        );
        assert_eq!(
            in_use(Some(start), Some(start + 125 * 60_000), None),
            "in use 2 h 05 min"
        );
        assert_eq!(
            in_use(Some(start), Some(start + 30_000), None),
            "in use 1 min"
        );
        // The cost's minutes win: charged until the last moment a server watched it.
        assert_eq!(
            in_use(Some(start), Some(start + 125 * 60_000), Some(7)),
            "in use 7 min"
        );
        assert_eq!(in_use(None, Some(start + 1), None), "never started");
        assert_eq!(in_use(Some(start), None, None), "");
    }

    #[test]
    fn messages_read_as_sentences() {
        assert_eq!(
            sentence("grant a non-zero amount"),
            "Grant a non-zero amount."
        );
        assert_eq!(
            sentence("that takes back more than the balance (2 credits)"),
            "That takes back more than the balance (2 credits)."
        );
        assert_eq!(sentence("Already a sentence."), "Already a sentence.");
        assert_eq!(sentence("éclair"), "Éclair.");
        assert_eq!(sentence(""), "");
    }

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
    fn a_time_reads_on_the_readers_clock() {
        use super::{utc_words, zoned_minute};
        let at = 1_795_919_040_000; // 2026-11-29 02:24 UTC
        assert_eq!(zoned_minute(at, 0), "2026-11-29 02:24 UTC");
        assert_eq!(zoned_minute(at, 60), "2026-11-29 03:24");
        assert_eq!(zoned_minute(at, 330), "2026-11-29 07:54", "India");
        assert_eq!(zoned_minute(at, -300), "2026-11-28 21:24", "the day before");
        // What the server writes, and the title keeps.
        assert_eq!(utc_words(at), "2026-11-29 02:24 UTC");
    }

    #[test]
    fn sizes_read_in_binary_units() {
        assert_eq!(format_bytes(5), "5 B");
        assert_eq!(format_bytes(700_001), "683.6 KB");
        assert_eq!(format_bytes(3 * 1024 * 1024), "3.0 MB");
    }
}
