//! The session page's smaller parts: its usage, the editor's frame until the editor's page
//! loads, and launching again once it ended.

use super::*;

/// The toolbar's two clocks while the editor runs (or is parked): time left, and idle in.
#[component]
pub(super) fn Countdowns(session: RwSignal<SessionView>, now: ReadSignal<i64>) -> impl IntoView {
    let clock =
        move |at: Option<i64>, words: &'static str, class: &'static str, id: &'static str| {
            at.map(|at| {
                view! {
                    <span class=class data-testid=id>
                        {words} {move || format_countdown(at - now.get())}
                    </span>
                }
            })
        };
    view! {
        {move || {
            let at = session.with(|s| s.ends_at_ms.filter(|_| s.state.runs_editor()));
            clock(at, "Time left ", "time-left", "time-left")
        }}
        {move || {
            let at = session.with(|s| s.idle_at_ms.filter(|_| s.state.runs_editor()));
            clock(at, "Idle in ", "idle-left muted", "idle-left")
        }}
    }
}

/// A parked session's line under its toolbar: what happened and what was kept, and a way back
/// besides typing in the editor (a beat with input, as "I'm here").
#[component]
pub(super) fn ParkedBanner(
    session: RwSignal<SessionView>,
    here: ServerAction<Heartbeat>,
) -> impl IntoView {
    let id = session.with_untracked(|s| s.id.clone());
    view! {
        <div class="banner" role="status" data-testid="parked-banner">
            "Parked: with no work for a while, its GPU slice went back to the pool, and this time is not charged. Your kernels and files are kept; it resumes when you type in it."
            <button
                disabled=move || here.pending().get()
                on:click=move |_| {
                    here.dispatch(Heartbeat::input(id.clone()));
                }
            >
                "Resume"
            </button>
        </div>
    }
}

/// The session's use under its toolbar: GPU memory on its card's scale, the last hour of GPU,
/// CPU and RAM as sparklines (read again each minute), and what it has cost so far.
#[component]
pub(super) fn SessionUsage(session: RwSignal<SessionView>, now: ReadSignal<i64>) -> impl IntoView {
    let id = session.with_untracked(|s| s.id.clone());
    let minute = Memo::new(move |_| now.get() / 60_000);
    let readings = page_resource(
        move || minute.get(),
        move |_| load_session_readings(id.clone()),
    );
    let spent = move || {
        session.with(|s| {
            let at = now.get();
            let elapsed = s
                .ready_at_ms
                .map_or(0, |ready| at - ready - s.parked.until(at));
            (
                credits::settle(s.held, s.price_per_hour, elapsed).0,
                s.price_per_hour,
            )
        })
    };
    view! {
        <div class="session-usage" data-testid="session-usage">
            <Transition fallback=|| ()>
                {move || Suspend::new(async move {
                    let Ok(r) = readings.await else { return ().into_any() };
                    let at = now.get_untracked();
                    let series = |value: fn(&Reading) -> Option<f64>| {
                        r.readings.iter().map(|x| (x.at_ms, value(x))).collect::<Vec<_>>()
                    };
                    let latest = |value: fn(&Reading) -> Option<f64>| {
                        r.readings.iter().rev().find_map(value)
                    };
                    let highest = |value: fn(&Reading) -> Option<f64>| {
                        r.readings.iter().filter_map(value).fold(0.0, f64::max)
                    };
                    let gpu = |x: &Reading| x.gpu_util_pct.map(f64::from);
                    let cpu = |x: &Reading| x.cpu_milli.map(|m| f64::from(m) / 1000.0);
                    let ram = |x: &Reading| x.ram_mib.map(|m| m as f64);
                    let gpu_mib = r.readings.iter().rev().find_map(|x| x.gpu_mib);
                    let cpu_max = r.cpu_limit.unwrap_or_else(|| highest(cpu).max(1.0));
                    let ram_max = r
                        .ram_limit_mib
                        .map(|m| m as f64)
                        .unwrap_or_else(|| highest(ram).max(1.0));
                    view! {
                        {r.card_mib.map(|card_mib| view! { <SliceBar card_mib slice_mib=r.slice_mib used_mib=gpu_mib /> })}
                        <Sparkline name="GPU" testid="spark-gpu" values={series(gpu)} max=100.0 now_ms=at
                            latest={latest(gpu).map(|p| format!("{p:.0} %"))} />
                        <Sparkline name="CPU" testid="spark-cpu" values={series(cpu)} max=cpu_max now_ms=at
                            latest={latest(cpu).map(|c| format!("{c:.2} cores"))} />
                        <Sparkline name="RAM" testid="spark-ram" values={series(ram)} max=ram_max now_ms=at
                            latest={latest(ram).map(|m| format_mib(m as u64))} />
                    }
                        .into_any()
                })}
            </Transition>
            <span class="spark" data-testid="session-spent">
                {move || {
                    let (spent, per_hour) = spent();
                    format!("Spent {} · {} an hour", credits::with_unit(spent), credits::with_unit(per_hour))
                }}
            </span>
        </div>
    }
}

/// The editor in the page. Until its page has loaded, a progress line over the page's own
/// background stands where a blank (white) frame would: an editor takes seconds to draw.
#[component]
pub(super) fn EditorFrame(src: String, label: &'static str) -> impl IntoView {
    let loaded = RwSignal::new(false);
    // The frame may have loaded before this page's code ran (it is in the server's HTML).
    #[cfg(feature = "hydrate")]
    Effect::new(move |_| {
        if frame_has_loaded() {
            loaded.set(true);
        }
    });
    view! {
        <main class="editor-main">
            <h1 class="sr-only">{format!("{label} session")}</h1>
            <Show when=move || !loaded.get()>
                <div class="editor-progress" role="progressbar" aria-label=format!("Opening {label}")>
                    <span></span>
                </div>
            </Show>
            <iframe
                class="editor"
                class:loading=move || !loaded.get()
                src=src
                title=format!("{label} editor")
                data-testid="editor-frame"
                allow="clipboard-read; clipboard-write"
                on:load=move |_| loaded.set(true)
            ></iframe>
        </main>
    }
}

/// Whether the editor's frame holds a loaded page of its own (not the blank one it starts with).
#[cfg(feature = "hydrate")]
pub(super) fn frame_has_loaded() -> bool {
    use wasm_bindgen::JsCast;
    let Some(frame) = web_sys::window()
        .and_then(|w| w.document())
        .and_then(|d| d.query_selector("iframe.editor").ok().flatten())
        .and_then(|f| f.dyn_into::<web_sys::HtmlIFrameElement>().ok())
    else {
        return false;
    };
    let href = frame
        .content_window()
        .and_then(|w| w.location().href().ok());
    let complete = frame
        .content_document()
        .is_some_and(|d| d.ready_state() == "complete");
    complete && href.is_some_and(|h| h != "about:blank")
}

/// The same editor, slice and duration again, in one click from the end page.
#[component]
pub(super) fn LaunchAgain(ended: SessionView) -> impl IntoView {
    let launch = ServerAction::<Launch>::new();
    let navigate = leptos_router::hooks::use_navigate();
    Effect::new(move |_| {
        if let Some(Ok(session)) = launch.value().get() {
            navigate(&format!("/sessions/{}", session.id), Default::default());
        }
    });
    let again = move |_| {
        launch.dispatch(Launch {
            editor: ended.editor.as_str().to_string(),
            slice_mib: ended.slice_mib,
            duration_minutes: ended.duration_minutes,
            image: None,
            idle_minutes: None,
        });
    };
    view! {
        <button
            type="button"
            class="button primary"
            data-testid="launch-again"
            disabled=move || launch.pending().get()
            on:click=again
        >
            {move || if launch.pending().get() { "Launching…" } else { "Launch again" }}
        </button>
        {move || {
            launch
                .value()
                .get()
                .and_then(Result::err)
                .map(|error| view! { <crate::ui::Refusal error /> })
        }}
    }
}
