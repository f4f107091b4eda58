//! The session's end coming: extending it, and a notification before it ends.

use super::*;

/// Extend at any time, by any whole number of minutes, with what it holds and the new end.
#[component]
pub(super) fn ExtendMenu(
    session: RwSignal<SessionView>,
    extend: ServerAction<ExtendSession>,
) -> impl IntoView {
    let minutes = RwSignal::new("30".to_string());
    let open = RwSignal::new(false);
    let read = move || crate::domain::launch::read_minutes(&minutes.get());
    let typed = move || read().ok().filter(|m| *m > 0);
    // The ends are times on the reader's clock (`local_time`), their UTC in their titles.
    let summary = move || {
        let (per_hour, ends_at) = session.with(|s| (s.price_per_hour, s.ends_at_ms));
        match (read(), ends_at) {
            (Ok(0), _) => "Extend by at least 1 minute.".into_any(),
            (Ok(m), Some(end)) => view! {
                {format!(
                    "Holds {} more now; ends at ",
                    credits::with_unit(credits::price_for_minutes(per_hour, m as i64)),
                )}
                {crate::ui::format::local_time(end + m as i64 * 60_000)}
                " instead of "
                {crate::ui::format::local_time(end)}
                "."
            }
            .into_any(),
            (Ok(_), None) => ().into_any(),
            (Err(why), _) => format!("{}.", why.words()).into_any(),
        }
    };
    Effect::new(move |_| {
        if let Some(Ok(_)) = extend.value().get() {
            open.set(false);
        }
    });
    let submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        if let Some(m) = typed() {
            extend.dispatch(ExtendSession {
                id: session.with_untracked(|s| s.id.clone()),
                minutes: m,
            });
        }
    };
    view! {
        <details class="extend" data-testid="extend" prop:open=move || open.get()>
            <summary on:click=move |ev| {
                ev.prevent_default();
                open.update(|o| *o = !*o);
            }>"Extend"</summary>
            <form on:submit=submit>
                <label>
                    "Minutes"
                    // Text, not a number field: a number field reads a half-typed `-` or `1e`
                    // as empty, and writing that back erased the keystroke (`1e3` became 3).
                    <input
                        type="text"
                        inputmode="numeric"
                        autocomplete="off"
                        aria-invalid=move || typed().is_none().to_string()
                        aria-describedby="extend-price"
                        bind:value=minutes
                    />
                </label>
                <p class="muted" id="extend-price" data-testid="extend-price">{summary}</p>
                <button
                    type="submit"
                    class="primary"
                    disabled=move || typed().is_none() || extend.pending().get()
                >
                    {move || if extend.pending().get() { "Extending…" } else { "Extend" }}
                </button>
            </form>
        </details>
    }
}

/// Asks, once, to notify the person; then tells them, while the page is not in front, when
/// the session enters its last minutes or its idle warning.
#[component]
pub(super) fn NotifyBeforeEnd(
    session: RwSignal<SessionView>,
    /// When the page last heard the server's idle deadline.
    read_at: RwSignal<i64>,
    now: ReadSignal<i64>,
) -> impl IntoView {
    // Read after hydration: the server cannot know, and both renders must agree.
    let asked = RwSignal::new("unsupported");
    #[cfg(feature = "hydrate")]
    {
        Effect::new(move |_| asked.set(notification_permission()));
        // The deadline last notified about: one notification per warning.
        let told = StoredValue::new(None::<i64>);
        Effect::new(move |_| {
            let t = now.get();
            let deadline = session.with_untracked(|s| {
                if !s.state.runs_editor() {
                    return None;
                }
                let soon = |at: Option<i64>| at.filter(|at| *at - t <= s.warn_ms && *at > t);
                let idle = s
                    .idle_at_ms
                    .filter(|_| page_idle(s, read_at.get_untracked(), t).is_some_and(|v| v.warn));
                soon(s.ends_at_ms)
                    .map(|at| (at, true))
                    .or_else(|| soon(idle).map(|at| (at, false)))
            });
            let Some((at, by_time)) = deadline else {
                return;
            };
            if told.get_value() == Some(at) || asked.get_untracked() != "granted" || page_in_front()
            {
                return;
            }
            told.set_value(Some(at));
            let body = if by_time {
                format!(
                    "Its time runs out in {}. Extend it from its page.",
                    crate::ui::format::format_countdown(at - t)
                )
            } else {
                format!(
                    "It looks idle and stops in {} unless you come back.",
                    crate::ui::format::format_countdown(at - t)
                )
            };
            show_notification("Your GPU session ends soon", &body);
        });
    }
    #[cfg(not(feature = "hydrate"))]
    let _ = (session, read_at, now);
    move || {
        (asked.get() == "default").then(|| {
            view! {
                <button
                    class="link"
                    data-testid="notify-me"
                    title="A browser notification before this session ends, when its page is not in front"
                    on:click=move |_| request_notifications(asked)
                >
                    "Notify me"
                </button>
            }
        })
    }
}

/// "granted", "denied", "default", or "unsupported" (no Notification API).
#[cfg(feature = "hydrate")]
pub(super) fn notification_permission() -> &'static str {
    {
        use wasm_bindgen::JsCast;
        let supported = web_sys::window()
            .and_then(|w| js_sys::Reflect::get(&w, &"Notification".into()).ok())
            .is_some_and(|n| n.dyn_ref::<js_sys::Function>().is_some());
        if !supported {
            return "unsupported";
        }
        match web_sys::Notification::permission() {
            web_sys::NotificationPermission::Granted => "granted",
            web_sys::NotificationPermission::Denied => "denied",
            _ => "default",
        }
    }
}

pub(super) fn request_notifications(asked: RwSignal<&'static str>) {
    #[cfg(feature = "hydrate")]
    if let Ok(promise) = web_sys::Notification::request_permission() {
        let answered = wasm_bindgen::prelude::Closure::once(move |_: wasm_bindgen::JsValue| {
            asked.set(notification_permission());
        });
        let _ = promise.then(&answered);
        answered.forget();
    }
    #[cfg(not(feature = "hydrate"))]
    let _ = asked;
}

#[cfg(feature = "hydrate")]
pub(super) fn page_in_front() -> bool {
    web_sys::window()
        .and_then(|w| w.document())
        .is_some_and(|d| {
            d.visibility_state() == web_sys::VisibilityState::Visible
                && d.has_focus().unwrap_or(true)
        })
}

#[cfg(feature = "hydrate")]
pub(super) fn show_notification(title: &str, body: &str) {
    let options = web_sys::NotificationOptions::new();
    options.set_body(body);
    options.set_tag("gpu-sandbox-ending");
    let _ = web_sys::Notification::new_with_options(title, &options);
}

/// Points the "New tab" link at the place the editor's frame shows now (same origin: its
/// location is ours to read), so the new tab opens there, with the toolbar.
pub(super) fn open_where_the_frame_is(ev: &leptos::ev::MouseEvent) {
    #[cfg(feature = "hydrate")]
    {
        use wasm_bindgen::JsCast;
        let Some(link) = ev
            .current_target()
            .and_then(|t| t.dyn_into::<web_sys::HtmlAnchorElement>().ok())
        else {
            return;
        };
        let frame = web_sys::window()
            .and_then(|w| w.document())
            .and_then(|d| d.query_selector("iframe.editor").ok().flatten())
            .and_then(|f| f.dyn_into::<web_sys::HtmlIFrameElement>().ok())
            .and_then(|f| f.content_window());
        let Some(location) = frame.map(|w| w.location()) else {
            return;
        };
        let (Ok(path), Ok(search)) = (location.pathname(), location.search()) else {
            return;
        };
        // `/s/<id>/<tail>` → the session page with `path=<tail>`.
        let mut parts = path.splitn(4, '/');
        let (Some(""), Some("s"), Some(id)) = (parts.next(), parts.next(), parts.next()) else {
            return;
        };
        let tail = format!("/{}{search}", parts.next().unwrap_or_default());
        link.set_href(&crate::domain::paths::session_page_for(id, &tail));
    }
    #[cfg(not(feature = "hydrate"))]
    let _ = ev;
}
