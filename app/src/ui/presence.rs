//! The browser heartbeat. A visible page beats every 2 minutes; it beats sooner (within 10 s)
//! once the person types, clicks or scrolls — in our page or inside the embedded editor, which is
//! served from our own origin — so the idle countdown resets while someone works. A beat without
//! input only says a tab is open (see the idle policy). A page that goes out of sight says so at
//! once.
#![cfg_attr(not(feature = "hydrate"), allow(dead_code, unused_imports))]

pub use crate::domain::presence::{in_idle_warning, should_beat};

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

    fn page_visible() -> bool {
        web_sys::window()
            .and_then(|w| w.document())
            .is_some_and(|d| d.visibility_state() == web_sys::VisibilityState::Visible)
    }

    /// Beats for the sessions `ids()` while the page is visible; `on_beat` gets each fresh view.
    /// `urgent(now)`: one of them is inside its idle warning. Going out of sight (another tab or
    /// window in front) is said at once, so that the away rule starts then; a closing tab's word
    /// may not get out before it goes, and the overdue beat says it instead. Back in sight, the
    /// page beats at its next tick.
    pub fn use_presence(
        ids: impl Fn() -> Vec<String> + 'static,
        urgent: impl Fn(i64) -> bool + 'static,
        on_beat: impl Fn(SessionView) + Clone + 'static,
    ) {
        let seen = Rc::new(Cell::new(false));
        if let Some(document) = web_sys::window().and_then(|w| w.document()) {
            listen(&document, &seen);
        }
        let ids = Rc::new(ids);
        let send = Rc::new(move |input: bool, left: bool| {
            for id in ids() {
                let on_beat = on_beat.clone();
                leptos::task::spawn_local(async move {
                    if let Ok(view) = crate::api::heartbeat(id, input, left).await {
                        on_beat(view);
                    }
                });
            }
        });
        // Due at the first tick: until a page beats, the server takes it for gone (the away rule).
        let last_sent = Rc::new(Cell::new(i64::MIN / 2));
        let tick = {
            let (seen, last_sent, send) = (seen.clone(), last_sent.clone(), send.clone());
            move || {
                listen_in_frames(&seen);
                let now = crate::ui::format::now_ms();
                if !should_beat(
                    now,
                    last_sent.get(),
                    seen.get(),
                    page_visible(),
                    urgent(now),
                ) {
                    return;
                }
                last_sent.set(now);
                send(seen.replace(false), false);
            }
        };
        let seen_again = last_sent.clone();
        let on_sight = move |_| {
            if page_visible() {
                // Due at the next tick: the server took the page for gone.
                seen_again.set(i64::MIN / 2);
            } else {
                seen_again.set(crate::ui::format::now_ms());
                send(seen.replace(false), true);
            }
        };
        // `visibilitychange` bubbles from the document to the window.
        let sight = window_event_listener_untyped("visibilitychange", on_sight);
        on_cleanup(move || sight.remove());
        if let Ok(handle) = set_interval_with_handle(tick, std::time::Duration::from_secs(5)) {
            on_cleanup(move || handle.clear());
        }
    }
}
