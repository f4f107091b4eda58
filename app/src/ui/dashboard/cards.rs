//! The dashboard's cards: the header with credits, the credit history, each session's card
//! (live or past) and the pool's strip.

use super::*;

/// The newest lines of the user's credits: grants with the admin's note, holds, charges and what
/// came back. Drawn into the page's own `details`, which stays open across reloads.
#[cfg(feature = "ssr")]
#[component]
pub(super) fn CreditHistory(history: Vec<crate::model::LedgerLine>) -> impl IntoView {
    let what = |kind: &str| match kind {
        "grant" => "Granted",
        "adjust" => "Taken back",
        "hold" => "Held for a session",
        "refund" => "Hold released",
        "charge" => "Charged",
        _ => "Changed",
    };
    view! {
        <table class="ledger">
            <thead>
                <tr>
                    <th>"When"</th>
                    <th>"What"</th>
                    <th class="num">"Credits"</th>
                    <th>"Note"</th>
                </tr>
            </thead>
            <tbody>
                {history
                    .into_iter()
                    .map(|line| {
                        let sign = if line.amount > 0 { "+" } else { "" };
                        view! {
                            <tr data-kind=line.kind.clone()>
                                <td>{crate::ui::format::local_time(line.at_ms)}</td>
                                <td>{what(&line.kind)}</td>
                                <td class="num">{format!("{sign}{}", credits::format(line.amount))}</td>
                                <td>{line.note}</td>
                            </tr>
                        }
                    })
                    .collect_view()}
            </tbody>
        </table>
    }
}

#[component]
pub(super) fn Header(viewer: Viewer, credits: RwSignal<CreditsView>) -> impl IntoView {
    let balance = credits;
    view! {
        <header class="topbar">
            <a class="brand" href="/">
                "GPU Sandbox"
            </a>
            <div class="credits" data-testid="credits">
                <span class="label">"Credits"</span>
                <strong data-testid="credit-balance">
                    {move || credits::format(balance.get().balance)}
                </strong>
                {move || {
                    let held = balance.get().held;
                    (held > 0)
                        .then(|| {
                            view! { <span class="muted">{format!("{} held", credits::format(held))}</span> }
                        })
                }}
            </div>
            <div class="user">
                <a href="/account" data-testid="user-name" title="Your account">
                    {viewer.name}
                </a>
                {(viewer.role == crate::model::Role::Admin)
                    .then(|| {
                        // The link says the role; a chip beside it would say it again
                        // (the default account is named "admin" too).
                        view! {
                            <a href="/admin" title="You are an admin">
                                "Admin"
                            </a>
                        }
                    })}
                <a href="/tokens">"API tokens"</a>
                // A plain form: the server signs out and sends the browser to the sign-in page.
                <form method="post" action=Logout::PATH class="inline">
                    <button type="submit" class="link">
                        "Sign out"
                    </button>
                </form>
            </div>
        </header>
    }
}

/// A live session's card: its countdowns, its place in line, and the ways to open or stop it.
#[component]
pub(super) fn SessionCard(
    session: SessionView,
    after_stop: impl Fn() + Copy + Send + Sync + 'static,
) -> impl IntoView {
    let now = use_clock();
    let id = session.id.clone();
    let ends_at = session.ends_at_ms;
    let idle_at = session.idle_at_ms;
    let position = session.queue_position;
    let queued = session.state == SessionState::Queued;
    let href = format!("/sessions/{}", session.id);
    view! {
        <li class="card session-card" data-testid="session-card" data-session-id=session.id.clone()>
            {session_head(&session)}
            {(session.state == SessionState::Ready)
                .then(|| {
                    ends_at
                        .map(|end| {
                            view! {
                                <p class="muted">
                                    "Time left: " {move || format_countdown(end - now.get())}
                                </p>
                            }
                        })
                })}
            {idle_at
                .map(|at| {
                    view! {
                        <p class="muted" data-testid="card-idle">
                            "Idle in " {move || format_countdown(at - now.get())}
                        </p>
                    }
                })}
            {position
                .map(|p| {
                    view! {
                        <p class="muted" data-testid="queue-position">
                            {format!("In line: position {p}. It starts by itself when a slice frees.")}
                        </p>
                        <p class="muted" data-testid="queue-eta">
                            {crate::ui::format::queue_line(&session)}
                        </p>
                    }
                })}
            <div class="actions">
                <a class="button" href=href>
                    "Open"
                </a>
                <button
                    class="danger"
                    on:click=move |_| {
                        if queued || crate::ui::format::confirmed(crate::ui::session::STOP_QUESTION) {
                            let id = id.clone();
                            leptos::task::spawn_local(async move {
                                // Stopped or not (it may have ended meanwhile), the reload says.
                                let _ = crate::api::stop_session(id).await;
                                after_stop();
                            });
                        }
                    }
                >
                    {if queued { "Leave queue" } else { "Stop" }}
                </button>
            </div>
        </li>
    }
}

/// What every session card starts with: the editor, the slice and where the session stands.
pub(super) fn session_head(session: &SessionView) -> impl IntoView + use<> {
    view! {
        <div class="session-head">
            <span class=format!("icon icon-{}", session.editor.as_str()) aria-hidden="true"></span>
            <strong>{session.editor.label()}</strong>
            <span class="muted">{format_mib(session.slice_mib)}</span>
            <StateChip state=session.state />
        </div>
    }
}

/// An ended session's card, drawn on the server: how long it ran, why it ended, what it cost.
#[cfg(feature = "ssr")]
#[component]
pub(super) fn PastSessionCard(session: SessionView) -> impl IntoView {
    let reason = session.end_reason.map(|r| r.describe());
    view! {
        <li class="card session-card" data-testid="session-card" data-session-id=session.id.clone()>
            {session_head(&session)}
            <p class="muted" data-testid="session-when">
                {crate::ui::format::local_time(session.created_at_ms)}
                " · "
                {crate::ui::format::in_use(
                    session.ready_at_ms,
                    session.ended_at_ms,
                    session.cost.map(|c| c.minutes),
                )}
            </p>
            {reason.map(|r| view! { <p class="muted">{format!("Ended: {r}")}</p> })}
            {session
                .cost
                .map(|cost| {
                    view! {
                        <p class="muted" data-testid="session-cost">
                            {format!(
                                "Cost {} for {} · {} returned",
                                credits::with_unit(cost.charged),
                                credits::minutes_words(cost.minutes),
                                credits::format(cost.returned)
                            )}
                        </p>
                    }
                })}
        </li>
    }
}

/// The pool's cards, inside the page's `section.pool`.
#[cfg(feature = "ssr")]
#[component]
pub(super) fn PoolStrip(gpus: Vec<GpuView>, enforcement: String) -> impl IntoView {
    view! {
            <h2 id="pool-title">"GPU pool"</h2>
            <p class="muted">{format!("{enforcement}.")}</p>
            <div class="gpus">
                {gpus
                    .into_iter()
                    .map(|g| {
                        let used = g.slots.iter().filter(|s| s.in_use).count();
                        let total = g.slots.len();
                        view! {
                            <div class="card gpu" data-testid="gpu">
                                <div class="gpu-head">
                                    <strong>{g.model}</strong>
                                    <span class="muted">{format_mib(g.memory_mib)}</span>
                                    <HoldChip hold=g.hold />
                                </div>
                                <div class="slots" role="img" aria-label=format!("{used} of {total} slices in use")>
                                    {g
                                        .slots
                                        .into_iter()
                                        .enumerate()
                                        .map(|(i, s)| {
                                            let state = match (s.in_use, s.warm) {
                                                (true, _) => "in use".to_string(),
                                                (false, Some(editor)) => format!("{} started, ready to launch", editor.label()),
                                                (false, None) => "free".to_string(),
                                            };
                                            view! {
                                                <span
                                                    class="slot"
                                                    class:used=s.in_use
                                                    class:warm=s.warm.is_some()
                                                    title=format!(
                                                        "Slice {} of {total} · {} · {state}",
                                                        i + 1,
                                                        format_mib(s.slice_mib),
                                                    )
                                                ></span>
                                            }
                                        })
                                        .collect_view()}
                                </div>
                                <p class="muted">{format!("{} free of {}", total - used, total)}</p>
                            </div>
                        }
                    })
                    .collect_view()}
            </div>
            <p class="muted pool-legend" data-testid="pool-legend">
                <span class="slot used" aria-hidden="true"></span>
                " in use "
                <span class="slot" aria-hidden="true"></span>
                " free "
                <span class="slot warm" aria-hidden="true"></span>
                " an editor started ahead, ready to launch"
            </p>
    }
}
