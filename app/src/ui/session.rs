use super::ErrorNotice;
use super::chips::StateChip;
use super::format::{format_countdown, use_clock};
use crate::api::{ExtendSession, Heartbeat, StopSession, get_session};
use crate::domain::credits;
use crate::domain::pool::format_mib;
use crate::domain::session::SessionState;
use crate::model::{SessionView, Step};
use leptos::prelude::*;
use leptos_router::hooks::use_params_map;

/// Asked before a running session is stopped: what is lost, and what comes back.
pub(crate) const STOP_QUESTION: &str = "Stop this session? The editor closes: anything not saved to your workspace (an open notebook's unsaved cells, a running kernel's state) is lost. Unused credits come back to you.";

#[component]
pub fn SessionPage() -> impl IntoView {
    let params = use_params_map();
    let id = move || params.read().get("id").unwrap_or_default();
    let data = Resource::new(id, get_session);
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

    let here = ServerAction::<Heartbeat>::new();
    let extend = ServerAction::<ExtendSession>::new();
    Effect::new(move |_| {
        if let Some(Ok(view)) = stop.value().get() {
            session.set(view);
        }
    });
    Effect::new(move |_| {
        if let Some(Ok(view)) = here.value().get() {
            session.set(view);
        }
    });
    Effect::new(move |_| {
        if let Some(Ok(view)) = extend.value().get() {
            session.set(view);
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
            move |view| session.set(view),
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
                        if let Ok(fresh) = get_session(id).await {
                            session.set(fresh);
                        }
                    });
                }
            });
            on_cleanup(move || stream.close());
        });
    }

    let state = move || session.with(|s| s.state);
    // Only a change of readiness draws the promote menu anew: other updates (heartbeats, the
    // clock) would clear what is being typed in it.
    let ready = Memo::new(move |_| state() == SessionState::Ready);
    let progress = move || session.with(|s| s.steps.last().map(|st| st.progress).unwrap_or(0));
    let stop_id = id.clone();
    view! {
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
                        .with(|s| s.ends_at_ms.filter(|_| s.state == SessionState::Ready))
                        .map(|end| {
                            view! {
                                <span class="time-left" data-testid="time-left">
                                    "Time left " {move || format_countdown(end - now.get())}
                                </span>
                            }
                        })
                }}
                {move || {
                    session
                        .with(|s| s.idle_at_ms.filter(|_| s.state == SessionState::Ready))
                        .map(|idle_at| {
                            view! {
                                <span class="idle-left muted" data-testid="idle-left">
                                    "Idle in " {move || format_countdown(idle_at - now.get())}
                                </span>
                            }
                        })
                }}
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
                        .with(|s| s.admin_access.clone())
                        .map(|note| {
                            view! {
                                <span class="banner info" role="status" data-testid="admin-access">
                                    {format!(
                                        "{} (admin) may reach this editor until {} UTC; it is in the audit log.",
                                        note.admin,
                                        crate::domain::dates::minute(note.until_ms),
                                    )}
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
                    let (ready, warn) = session.with(|s| {
                        let t = now.get();
                        let soon = |at: Option<i64>| at.is_some_and(|at| at - t <= s.warn_ms);
                        (
                            s.state == SessionState::Ready,
                            (soon(s.idle_at_ms), soon(s.ends_at_ms)),
                        )
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
                            view! {
                                <span class="banner warn" role="status" data-testid="idle-banner">
                                    {message}
                                    <button on:click=move |_| {
                                        here.dispatch(Heartbeat { id: id.clone(), input: true });
                                    }>"I'm here"</button>
                                    <button on:click=move |_| {
                                        extend.dispatch(ExtendSession { id: extend_id.clone(), minutes: 30 });
                                    }>"Extend 30 min"</button>
                                </span>
                            }
                        })
                }}
                {move || {
                    ready
                        .get()
                        .then(|| {
                            view! {
                                <super::promotion::PromoteMenu session_id=session
                                    .with_untracked(|s| s.id.clone()) />
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
            {move || {
                stop.value()
                    .get()
                    .and_then(Result::err)
                    .or_else(|| extend.value().get().and_then(Result::err))
                    .map(|e| view! { <p class="notice error" role="alert">{e.to_string()}</p> })
            }}
            {move || {
                let s = session.get();
                match (s.state, s.url.clone()) {
                    (SessionState::Ready, Some(url)) => {
                        view! {
                            <iframe
                                class="editor"
                                src=url
                                title=format!("{} editor", s.editor.label())
                                data-testid="editor-frame"
                                allow="clipboard-read; clipboard-write"
                            ></iframe>
                        }
                            .into_any()
                    }
                    (SessionState::Ended, _) => {
                        // The ended step comes before the reason, which a fetch that follows it
                        // brings: until then the page says nothing of a reason.
                        let reason = s.end_reason.map(|r| {
                            view! { <p>{format!("It ended because {}.", r.describe())}</p> }
                        });
                        view! {
                            <main class="narrow">
                                <div class="card" data-testid="session-ended">
                                    <h2>"This session has ended"</h2>
                                    {reason}
                                    {s.detail.map(|d| view! { <pre class="detail">{d}</pre> })}
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
                                        None => view! {
                                            <p class="muted">"Unused credits were returned to your balance."</p>
                                        }
                                            .into_any(),
                                    }}
                                    <a class="button primary" href="/">"Back to your dashboard"</a>
                                </div>
                            </main>
                        }
                            .into_any()
                    }
                    _ => {
                        view! {
                            <main class="narrow">
                                <div class="card" data-testid="launch-progress">
                                    <h2>
                                        {if s.state == SessionState::Queued {
                                            "Waiting for a free GPU slice".to_string()
                                        } else {
                                            format!("Starting {}", s.editor.label())
                                        }}
                                    </h2>
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
                }
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
    fn steps_apply_once_and_carry_the_failure() {
        let mut s = SessionView {
            id: "a".into(),
            editor: EditorKind::JupyterLab,
            slice_mib: 8192,
            gpu_model: None,
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
            queue_position: None,
            idle_at_ms: None,
            warn_ms: 0,
            gpu_used_mib: None,
            steps: vec![],
            admin_access: None,
            memory_note: None,
            cost: None,
        };
        apply_step(&mut s, step(1, SessionState::Starting, false));
        apply_step(&mut s, step(1, SessionState::Starting, false));
        assert_eq!(s.steps.len(), 1);
        apply_step(&mut s, step(2, SessionState::Ended, true));
        assert_eq!(s.state, SessionState::Ended);
        assert_eq!(s.detail.as_deref(), Some("step 2"));
    }
}
