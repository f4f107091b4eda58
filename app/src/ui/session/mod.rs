use super::ErrorNotice;
use super::charts::{SliceBar, Sparkline};
use super::chips::StateChip;
use super::format::{format_countdown, use_clock};
use crate::api::{
    ExtendSession, Heartbeat, Launch, StopSession, get_session, load_session_readings,
};
use crate::domain::credits;
use crate::domain::idle;
use crate::domain::pool::format_mib;
use crate::domain::session::SessionState;
use crate::domain::usage::Reading;
use crate::model::{SessionView, Step};
use crate::ui::hydration::page_resource;
use leptos::prelude::*;
use leptos_router::hooks::use_params_map;

mod ending;
mod parts;

use ending::*;
use parts::*;

/// Asked before a running session is stopped: what is lost, and what comes back.
pub(crate) const STOP_QUESTION: &str = "Stop this session? The editor closes: anything not saved to your workspace (an open notebook's unsaved cells, a running kernel's state) is lost. Unused credits come back to you.";

#[component]
pub fn SessionPage() -> impl IntoView {
    let params = use_params_map();
    let id = move || params.read().get("id").unwrap_or_default();
    let data = page_resource(id, get_session);
    view! {
        <leptos_meta::Title text="Session · GPU Sandbox" />
        <Suspense fallback=|| view! { <p class="muted pad">"Loading the session…"</p> }>
            {move || Suspend::new(async move {
                match data.await {
                    Ok(session) => view! { <SessionLive initial=session /> }.into_any(),
                    Err(error) => {
                        view! {
                            <main class="narrow">
                                <ErrorNotice error />
                                <p>
                                    <a href="/">"Back to your dashboard"</a>
                                </p>
                            </main>
                        }
                            .into_any()
                    }
                }
            })}
        </Suspense>
    }
}

/// Shows `fresh` unless it is older than what the page shows: answers cross on the way (a
/// heartbeat sent before the end can arrive after it), and a session's steps only grow.
/// `read_at`: when the page last heard the server's idle deadline.
fn take_fresher(session: RwSignal<SessionView>, read_at: RwSignal<i64>, fresh: SessionView) {
    let last = |s: &SessionView| s.steps.last().map_or(0, |step| step.seq);
    if session.with_untracked(|current| is_fresher(last(current), last(&fresh))) {
        session.set(fresh);
        read_at.set(super::format::now_ms());
    }
}

/// The page's verdict on its copy of the idle deadline (see [`idle::page_idle`]); `None` when
/// the session is not running.
fn page_idle(session: &SessionView, read_at: i64, now: i64) -> Option<idle::PageIdle> {
    session
        .idle_at_ms
        .filter(|_| session.state.runs_editor())
        .map(|at| idle::page_idle(at, session.warn_ms, read_at, now))
}

/// Whether a view whose last step is `fresh` may replace one whose last step is `current`.
fn is_fresher(current: i64, fresh: i64) -> bool {
    fresh >= current
}

/// The session tab's title: its editor and slice, so that two session tabs tell themselves apart
/// ("JupyterLab · 8 GB — GPU Sandbox"); one not running yet or any more says so first.
pub(crate) fn tab_title(
    editor: crate::domain::launch::EditorKind,
    slice_mib: u64,
    state: SessionState,
) -> String {
    let stage = match state {
        SessionState::Requested | SessionState::Starting => "Starting · ",
        SessionState::Queued => "Queued · ",
        SessionState::Parked => "Parked · ",
        SessionState::Ended => "Ended · ",
        SessionState::Ready | SessionState::Stopping => "",
    };
    format!(
        "{stage}{} · {} — GPU Sandbox",
        editor.label(),
        format_mib(slice_mib)
    )
}

/// What the stop's own step said (its first step of stopping or ending), without the state's
/// word before it: why it ended, where the page cannot read the reason any more.
#[cfg_attr(not(feature = "hydrate"), allow(dead_code))]
fn stop_words(steps: &[Step]) -> Option<String> {
    let step = steps
        .iter()
        .find(|st| matches!(st.state, SessionState::Stopping | SessionState::Ended))?;
    let message = step.message.as_str();
    let words = ["Stopping: ", "Ended: "]
        .iter()
        .find_map(|prefix| message.strip_prefix(prefix))
        .unwrap_or(message);
    Some(words.to_string())
}

/// Folds a streamed step into the session as the page shows it.
#[cfg_attr(not(feature = "hydrate"), allow(dead_code))]
pub(super) fn apply_step(session: &mut SessionView, step: Step) {
    if session.steps.iter().any(|s| s.seq == step.seq) {
        return;
    }
    session.state = step.state;
    if step.failed {
        session.detail = Some(step.message.clone());
    }
    session.steps.push(step);
}

#[component]
fn SessionLive(initial: SessionView) -> impl IntoView {
    let id = initial.id.clone();
    let session = RwSignal::new(initial);
    let stop = ServerAction::<StopSession>::new();
    let now = use_clock();
    // The server's idle deadline moves without telling the page (a busy kernel): what the page
    // shows of it is as old as this, and read again before it warns.
    let read_at = RwSignal::new(now.get_untracked());
    // The session ended and its person can no longer ask about it: signed out with it (a lock,
    // a deleted account). The page then offers nothing to launch.
    let signed_out = RwSignal::new(false);
    let query = leptos_router::hooks::use_query_map();

    let here = ServerAction::<Heartbeat>::new();
    let extend = ServerAction::<ExtendSession>::new();
    Effect::new(move |_| {
        if let Some(Ok(view)) = stop.value().get() {
            take_fresher(session, read_at, view);
        }
    });
    Effect::new(move |_| {
        if let Some(Ok(view)) = here.value().get() {
            take_fresher(session, read_at, view);
        }
    });
    Effect::new(move |_| {
        if let Some(Ok(view)) = extend.value().get() {
            take_fresher(session, read_at, view);
        }
    });
    #[cfg(feature = "hydrate")]
    {
        let id = id.clone();
        super::presence::use_presence(
            move || {
                session
                    .with_untracked(|s| s.state.is_live())
                    .then(|| id.clone())
                    .into_iter()
                    .collect()
            },
            move |now| {
                session.with_untracked(|s| {
                    super::presence::in_idle_warning(now, s.idle_at_ms, s.warn_ms)
                })
            },
            move |view| take_fresher(session, read_at, view),
        );
    }

    #[cfg(feature = "hydrate")]
    {
        let id = id.clone();
        Effect::new(move |_| {
            if !session.with_untracked(|s| s.state.is_live()) {
                return;
            }
            let refresh_id = id.clone();
            let stream = super::live::follow(&id, move |step| {
                let settled = matches!(step.state, SessionState::Ready | SessionState::Ended);
                session.update(|s| apply_step(s, step));
                if settled {
                    // The ready and ended steps change the url, the end time and the reason.
                    let id = refresh_id.clone();
                    leptos::task::spawn_local(async move {
                        match get_session(id).await {
                            Ok(fresh) => take_fresher(session, read_at, fresh),
                            Err(
                                crate::error::AppError::Unauthenticated
                                | crate::error::AppError::Forbidden(_),
                            ) => {
                                // The reason stays unread: the stop's own step says it.
                                session.update(|s| {
                                    if s.state == SessionState::Ended && s.detail.is_none() {
                                        s.detail = stop_words(&s.steps);
                                    }
                                });
                                signed_out.set(true);
                            }
                            Err(_) => {}
                        }
                    });
                }
            });
            on_cleanup(move || stream.close());
        });
    }

    #[cfg(feature = "hydrate")]
    {
        let id = id.clone();
        let asking = StoredValue::new(false);
        Effect::new(move |_| {
            let t = now.get();
            let ask = session.with_untracked(|s| page_idle(s, read_at.get_untracked(), t));
            if !ask.is_some_and(|v| v.ask) || asking.get_value() {
                return;
            }
            asking.set_value(true);
            let id = id.clone();
            leptos::task::spawn_local(async move {
                if let Ok(fresh) = get_session(id).await {
                    take_fresher(session, read_at, fresh);
                }
                asking.set_value(false);
            });
        });
    }

    let state = move || session.with(|s| s.state);
    // Only a change of readiness draws the promote menu anew: other updates (heartbeats, the
    // clock) would clear what is being typed in it.
    let ready = Memo::new(move |_| state() == SessionState::Ready);
    let progress = move || session.with(|s| s.steps.last().map(|st| st.progress).unwrap_or(0));
    let stop_id = id.clone();
    let frame_path = Memo::new(move |_| query.read().get("path"));
    let promotion_on = page_resource(
        || (),
        |_| async {
            crate::api::my_promotions()
                .await
                .is_ok_and(|promotions| promotions.enabled)
        },
    );
    let page_state = Memo::new(move |_| {
        session.with(|s| {
            (
                s.state,
                s.url.is_some(),
                s.end_reason,
                s.cost,
                s.steps.len(),
                s.detail.clone(),
                s.queue_position,
                s.queue_eta_ms,
            )
        })
    });
    // The editor's frame depends on its address alone, so that nothing else about the session
    // (an Extend's end and step, a heartbeat's idle time, the readings) navigates it again and
    // loses the editor's state; only a different place to open does. A tab that went into the
    // editor by itself (marimo's new notebook, a link) was sent here with its place in `path`.
    let frame_src = Memo::new(move |_| {
        session.with(|s| {
            (s.state.runs_editor() && s.url.is_some()).then(|| {
                crate::domain::paths::editor_frame(
                    &s.id,
                    s.editor.landing_path(),
                    frame_path.get().as_deref(),
                )
            })
        })
    });
    let own_tab = format!("/sessions/{id}");
    let alone_href = format!("/s/{id}/?gsb-alone=%2F");
    // The head keeps this title's closure past the page (a Launch again onto the next session
    // page): read without panicking once the session is gone.
    let title = move || {
        session
            .try_with(|s| tab_title(s.editor, s.slice_mib, s.state))
            .unwrap_or_else(|| "Session · GPU Sandbox".into())
    };
    view! {
        <leptos_meta::Title text=title />
        <div class="session-page">
            <header class="toolbar">
                <a href="/" class="back" aria-label="Back to dashboard">
                    "← Dashboard"
                </a>
                <strong>
                    {move || {
                        session
                            .with(|s| format!("{} · {}", s.editor.label(), format_mib(s.slice_mib)))
                    }}
                </strong>
                {move || view! { <StateChip state=state() /> }}
                {move || {
                    session
                        .with(|s| (s.slot_id.is_some() && s.state.is_live()).then_some(s.slice_hold))
                        // Plain words: the chip and its sentence stay server-side (page weight).
                        .map(|hold| view! { <span class="muted" data-testid="slice-hold">{hold.label()}</span> })
                }}
                <Countdowns session now />
                {move || {
                    session
                        .with(|s| s.gpu_used_mib.filter(|_| s.state == SessionState::Ready).map(|used| (used, s.slice_mib)))
                        .map(|(used, slice)| {
                            view! {
                                <span class="muted" data-testid="gpu-used">
                                    {format!("GPU {} of {}", format_mib(used), format_mib(slice))}
                                </span>
                            }
                        })
                }}
                {move || {
                    session
                        .with(|s| (s.state.is_live() && !s.datasets.is_empty()).then(|| s.datasets.join(", ")))
                        .map(|names| view! { <span class="muted" data-testid="datasets">"~/datasets: " {names}</span> })
                }}
                {move || {
                    session
                        .with(|s| s.admin_access.clone())
                        .map(|note| {
                            view! {
                                <span class="banner info" role="status" data-testid="admin-access">
                                    {format!("{} (admin) may reach this editor until ", note.admin)}
                                    {super::format::local_time(note.until_ms)}
                                    "; it is in the audit log."
                                </span>
                            }
                        })
                }}
                {move || {
                    session
                        .with(|s| s.memory_note.clone())
                        .map(|note| {
                            view! {
                                <span class="banner warn" role="alert" data-testid="memory-note">
                                    {note}
                                </span>
                            }
                        })
                }}
                <span class="spacer"></span>
                {move || {
                    ready.get().then(|| view! { <ExtendMenu session extend /> })
                }}
                <NotifyBeforeEnd session read_at now />
                {move || {
                    ready
                        .get()
                        .then(|| {
                            let href = own_tab.clone();
                            view! {
                                <a
                                    class="button"
                                    href=href
                                    target="_blank"
                                    rel="noopener"
                                    data-testid="own-tab"
                                    title="The editor where it is now, in a tab of its own, with this toolbar"
                                    on:click=move |ev| open_where_the_frame_is(&ev)
                                >
                                    "New tab"
                                </a>
                                <a
                                    class="button"
                                    href=alone_href.clone()
                                    target="_blank"
                                    rel="noopener"
                                    data-testid="editor-alone"
                                    title="The editor alone in a tab of its own, its keyboard shortcuts its own; the session stays active while you work there"
                                >
                                    "Editor alone"
                                </a>
                            }
                        })
                }}
                {move || {
                    let (ready, warn) = session.with(|s| {
                        let t = now.get();
                        let idle = page_idle(s, read_at.get(), t).is_some_and(|v| v.warn);
                        let ending = s.ends_at_ms.is_some_and(|at| at - t <= s.warn_ms);
                        (s.state.runs_editor(), (idle, ending))
                    });
                    let id = session.with_untracked(|s| s.id.clone());
                    let extend_id = id.clone();
                    (ready && (warn.0 || warn.1))
                        .then(|| {
                            let message = if warn.1 {
                                "Your time is almost up."
                            } else {
                                "This session looks idle and will stop soon."
                            };
                            // Being here keeps an idle session, not one whose time is up; an
                            // Extend says what it holds.
                            let price = session.with_untracked(|s| {
                                credits::with_unit(credits::price_for_minutes(s.price_per_hour, 30))
                            });
                            let time_up = warn.1;
                            view! {
                                <span class="banner warn" role="status" data-testid="idle-banner">
                                    {message}
                                    {(!time_up)
                                        .then(|| {
                                            view! {
                                                <button on:click=move |_| {
                                                    here.dispatch(Heartbeat::input(id.clone()));
                                                }>"I'm here"</button>
                                            }
                                        })}
                                    <button
                                        title=format!("Holds {price} more now")
                                        on:click=move |_| {
                                            extend.dispatch(ExtendSession { id: extend_id.clone(), minutes: 30 });
                                        }
                                    >
                                        {format!("Extend 30 min · {price}")}
                                    </button>
                                </span>
                            }
                        })
                }}
                {move || {
                    ready
                        .get()
                        .then(|| {
                            // Only where this server promotes (a registry is configured).
                            view! {
                                <Transition fallback=|| ()>
                                    {move || Suspend::new(async move {
                                        promotion_on
                                            .await
                                            .then(|| {
                                                view! {
                                                    <super::promotion::PromoteMenu session_id=session
                                                        .with_untracked(|s| s.id.clone()) />
                                                }
                                            })
                                    })}
                                </Transition>
                            }
                        })
                }}
                {move || {
                    state()
                        .is_live()
                        .then(|| {
                            let id = stop_id.clone();
                            view! {
                                <button
                                    class="danger"
                                    disabled=move || stop.pending().get()
                                    on:click=move |_| {
                                        if state() == SessionState::Queued
                                            || crate::ui::format::confirmed(STOP_QUESTION)
                                        {
                                            stop.dispatch(StopSession { id: id.clone() });
                                        }
                                    }
                                >
                                    {move || {
                                        if stop.pending().get() {
                                            "Stopping…"
                                        } else if state() == SessionState::Queued {
                                            "Leave queue"
                                        } else {
                                            "Stop"
                                        }
                                    }}
                                </button>
                            }
                        })
                }}
            </header>
            {move || (state() == SessionState::Parked).then(|| view! { <ParkedBanner session here /> })}
            {move || ready.get().then(|| view! { <SessionUsage session now /> })}
            {move || {
                stop.value()
                    .get()
                    .and_then(Result::err)
                    .or_else(|| extend.value().get().and_then(Result::err))
                    .map(|error| view! { <crate::ui::Refusal error /> })
            }}
            {move || {
                frame_src
                    .get()
                    .map(|src| {
                        let label = session.with_untracked(|s| s.editor.label());
                        view! { <EditorFrame src label /> }
                    })
            }}
            {move || {
                if frame_src.get().is_some() {
                    return None;
                }
                // Drawn anew only when what it shows changes.
                let _shown = page_state.get();
                let s = session.get_untracked();
                Some(match s.state {
                    SessionState::Ended => {
                        // The ended step comes before the reason, which a fetch that follows it
                        // brings: until then the page says nothing of a reason. It is said once.
                        let (said, log) = crate::domain::session::end_words(
                            s.end_reason,
                            s.detail.as_deref(),
                        );
                        // Where the end's own words say the refund, it is not said again.
                        let refund_said = [&said, &log]
                            .into_iter()
                            .flatten()
                            .any(|words| words.contains("refunded"));
                        let reason = said.map(|said| {
                            view! { <p data-testid="end-reason">{said}</p> }
                        });
                        let ended = s.clone();
                        view! {
                            <main class="narrow">
                                <div class="card" data-testid="session-ended">
                                    <h1>"This session has ended"</h1>
                                    {reason}
                                    {log.map(|d| view! { <pre class="detail">{d}</pre> })}
                                    {match s.cost {
                                        Some(cost) => view! {
                                            <p data-testid="session-cost">
                                                {format!(
                                                    "Charged {} for the time it ran; {} of the {} held came back to your balance.",
                                                    credits::with_unit(cost.charged),
                                                    credits::with_unit(cost.returned),
                                                    credits::format(cost.held),
                                                )}
                                            </p>
                                        }
                                            .into_any(),
                                        None if refund_said => ().into_any(),
                                        None => view! {
                                            <p class="muted">"Unused credits were returned to your balance."</p>
                                        }
                                            .into_any(),
                                    }}
                                    // Nothing to launch for someone signed out with the end.
                                    {move || {
                                        if signed_out.get() {
                                            view! {
                                                <p class="muted" data-testid="signed-out">
                                                    "You are signed out, so nothing more can be launched from here."
                                                </p>
                                            }
                                                .into_any()
                                        } else if let Some(why) = ended.launch_refused.clone() {
                                            // Nothing offered that its person could not launch.
                                            view! {
                                                <p class="muted" data-testid="launch-refused">{why}</p>
                                                <div class="actions">
                                                    <a class="button" href="/">"Back to your dashboard"</a>
                                                </div>
                                            }
                                                .into_any()
                                        } else {
                                            view! {
                                                <div class="actions">
                                                    <LaunchAgain ended=ended.clone() />
                                                    <a class="button" href="/">"Back to your dashboard"</a>
                                                </div>
                                            }
                                                .into_any()
                                        }
                                    }}
                                </div>
                            </main>
                        }
                            .into_any()
                    }
                    _ => {
                        view! {
                            <main class="narrow">
                                <div class="card" data-testid="launch-progress">
                                    <h1>
                                        {s.state.progress_heading(s.editor.label())}
                                    </h1>
                                    {(s.state == SessionState::Queued)
                                        .then(|| {
                                            view! {
                                                <p class="muted" data-testid="queue-eta">
                                                    {crate::ui::format::queue_line(&s)}
                                                </p>
                                            }
                                        })}
                                    <div
                                        class="progress"
                                        role="progressbar"
                                        aria-valuemin="0"
                                        aria-valuemax="100"
                                        aria-valuenow=progress
                                    >
                                        <div class="bar" style=move || format!("width: {}%", progress())></div>
                                    </div>
                                    <ol class="steps">
                                        {s
                                            .steps
                                            .into_iter()
                                            .map(|st| view! { <li class:failed=st.failed>{st.message}</li> })
                                            .collect_view()}
                                    </ol>
                                </div>
                            </main>
                        }
                            .into_any()
                    }
                })
            }}
        </div>
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::launch::EditorKind;

    fn step(seq: i64, state: SessionState, failed: bool) -> Step {
        Step {
            seq,
            at_ms: seq,
            state,
            message: format!("step {seq}"),
            progress: 50,
            failed,
        }
    }

    #[test]
    fn a_signed_out_page_says_why_from_the_stops_own_step() {
        let mut stopping = step(3, SessionState::Stopping, false);
        stopping.message = crate::domain::reaper::LOCKED.into();
        let mut freed = step(4, SessionState::Ended, false);
        freed.message = "Stopped; the slot is free again".into();
        assert_eq!(
            stop_words(&[step(1, SessionState::Ready, false), stopping, freed]).as_deref(),
            Some(crate::domain::reaper::LOCKED)
        );
        let mut plain = step(2, SessionState::Stopping, false);
        plain.message = "Stopping: stopped by an administrator".into();
        assert_eq!(
            stop_words(&[plain]).as_deref(),
            Some("stopped by an administrator")
        );
        assert_eq!(stop_words(&[step(1, SessionState::Ready, false)]), None);
    }

    #[test]
    fn an_answer_sent_before_the_end_does_not_undo_it() {
        assert!(is_fresher(7, 7), "the same steps: newer countdowns");
        assert!(is_fresher(7, 8));
        assert!(
            !is_fresher(8, 7),
            "a heartbeat's answer from before the end"
        );
    }

    #[test]
    fn a_session_tab_is_titled_by_its_editor_and_slice() {
        assert_eq!(
            tab_title(EditorKind::JupyterLab, 8192, SessionState::Ready),
            "JupyterLab · 8 GB — GPU Sandbox"
        );
        assert_eq!(
            tab_title(EditorKind::JupyterLab, 8192, SessionState::Queued),
            "Queued · JupyterLab · 8 GB — GPU Sandbox"
        );
        assert_eq!(
            tab_title(EditorKind::JupyterLab, 8192, SessionState::Ended),
            "Ended · JupyterLab · 8 GB — GPU Sandbox"
        );
        assert_ne!(
            tab_title(EditorKind::Marimo, 8192, SessionState::Ready),
            tab_title(EditorKind::JupyterLab, 8192, SessionState::Ready)
        );
    }

    #[test]
    fn steps_apply_once_and_carry_the_failure() {
        let mut s = SessionView {
            id: "a".into(),
            editor: EditorKind::JupyterLab,
            slice_mib: 8192,
            gpu_model: None,
            slice_hold: Default::default(),
            slot_id: None,
            state: SessionState::Requested,
            end_reason: None,
            detail: None,
            duration_minutes: 60,
            created_at_ms: 0,
            ends_at_ms: None,
            url: None,
            held: 0,
            price_per_hour: 0,
            parked: Default::default(),
            queue_position: None,
            queue_eta_ms: None,
            waits_for: None,
            queue_why: None,
            idle_at_ms: None,
            warn_ms: 0,
            gpu_used_mib: None,
            steps: vec![],
            admin_access: None,
            memory_note: None,
            cost: None,
            ready_at_ms: None,
            ended_at_ms: None,
            launch_refused: None,
            datasets: Vec::new(),
        };
        apply_step(&mut s, step(1, SessionState::Starting, false));
        apply_step(&mut s, step(1, SessionState::Starting, false));
        assert_eq!(s.steps.len(), 1);
        apply_step(&mut s, step(2, SessionState::Ended, true));
        assert_eq!(s.state, SessionState::Ended);
        assert_eq!(s.detail.as_deref(), Some("step 2"));
    }
}
