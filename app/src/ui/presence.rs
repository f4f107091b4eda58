//! The browser heartbeat. A visible page beats every 5 minutes; it beats sooner (within 10 s)
//! once the person types, clicks or scrolls — in our page or inside the embedded editor, which is
//! served from our own origin — so the idle countdown resets while someone works. A beat without
//! input only says a tab is open (see the idle policy).
#![cfg_attr(not(feature = "hydrate"), allow(dead_code))]

/// A visible page beats at least this often.
pub const BEAT_MS: i64 = 5 * 60_000;
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

#[cfg(feature = "hydrate")]
pub use browser::use_presence;

#[cfg(feature = "hydrate")]
mod browser {
    use super::should_beat;
    use crate::model::SessionView;
    use leptos::prelude::*;
    use std::cell::Cell;
    use std::rc::Rc;
    use wasm_bindgen::JsCast;
    use wasm_bindgen::prelude::Closure;

    const INPUTS: [&str; 4] = ["keydown", "pointerdown", "wheel", "touchstart"];

    fn listen(target: &web_sys::EventTarget, seen: &Rc<Cell<bool>>) {
        let seen = seen.clone();
        let on_input = Closure::<dyn FnMut()>::new(move || seen.set(true));
        for kind in INPUTS {
            let _ =
                target.add_event_listener_with_callback(kind, on_input.as_ref().unchecked_ref());
        }
        on_input.forget();
    }

    /// Input inside the editor's frame: same origin, so its document is ours to listen on.
    fn listen_in_frames(seen: &Rc<Cell<bool>>) {
        let Some(document) = web_sys::window().and_then(|w| w.document()) else {
            return;
        };
        let Ok(Some(frame)) = document.query_selector("iframe.editor") else {
            return;
        };
        let Ok(frame) = frame.dyn_into::<web_sys::HtmlIFrameElement>() else {
            return;
        };
        let Some(inner) = frame.content_document() else {
            return;
        };
        let Some(root) = inner.document_element() else {
            return;
        };
        if root.get_attribute("data-sandbox-presence").is_none() {
            let _ = root.set_attribute("data-sandbox-presence", "1");
            listen(&inner, seen);
        }
    }

    /// Beats for the sessions `ids()` while the page is visible; `on_beat` gets each fresh view.
    /// `urgent(now)`: one of them is inside its idle warning.
    pub fn use_presence(
        ids: impl Fn() -> Vec<String> + 'static,
        urgent: impl Fn(i64) -> bool + 'static,
        on_beat: impl Fn(SessionView) + Clone + 'static,
    ) {
        let seen = Rc::new(Cell::new(false));
        if let Some(document) = web_sys::window().and_then(|w| w.document()) {
            listen(&document, &seen);
        }
        let last_sent = Rc::new(Cell::new(crate::ui::format::now_ms()));
        let tick = move || {
            listen_in_frames(&seen);
            let visible = web_sys::window()
                .and_then(|w| w.document())
                .is_some_and(|d| d.visibility_state() == web_sys::VisibilityState::Visible);
            let now = crate::ui::format::now_ms();
            if !should_beat(now, last_sent.get(), seen.get(), visible, urgent(now)) {
                return;
            }
            let input = seen.replace(false);
            last_sent.set(now);
            for id in ids() {
                let on_beat = on_beat.clone();
                leptos::task::spawn_local(async move {
                    if let Ok(view) = crate::api::heartbeat(id, input).await {
                        on_beat(view);
                    }
                });
            }
        };
        if let Ok(handle) = set_interval_with_handle(tick, std::time::Duration::from_secs(5)) {
            on_cleanup(move || handle.clear());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn beats_every_five_minutes_and_sooner_after_input_only_when_visible() {
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
