//! The sessions tab: every session, stopped or entered (audited) by an admin, with its id, how
//! long it ran and what it cost (so far, while it runs).

use super::Tab;
use super::table::{Empty, Outcome, Pager, SearchForm, SortHeader, loaded};
use crate::api::{AdminOpenEditor, AdminStop, admin_sessions};
use crate::domain::credits;
use crate::domain::listing::{ListQuery, Page};
use crate::domain::pool::format_mib;
use crate::model::AdminSession;
use crate::ui::format::local_time;
use crate::ui::hydration::page_resource;
use leptos::prelude::*;

#[component]
pub(super) fn SessionsTab(list: Memo<ListQuery>) -> impl IntoView {
    let stop = ServerAction::<AdminStop>::new();
    // Whether the last Stop was a queued launch's Cancel, for the words of its outcome.
    let cancelled = RwSignal::new(false);
    let data = page_resource(
        move || (list.get(), stop.version().get()),
        |(query, _)| admin_sessions(query),
    );
    let outcome = Outcome::new();
    outcome.follow(
        move || stop.pending().get(),
        move || {
            stop.value().get().map(|answer| {
                answer.map(|s| {
                    if cancelled.get_untracked() {
                        format!(
                            "Cancelled {}'s queued launch; the credits it held went back to them.",
                            s.user_name
                        )
                    } else {
                        format!(
                            "Stopped {}'s session; its unused credits went back to them.",
                            s.user_name
                        )
                    }
                })
            })
        },
    );
    view! {
        <SearchForm
            tab=Tab::Sessions
            list
            placeholder="User name or session id"
            filters=&[
                ("all", "all sessions"),
                ("live", "live"),
                ("ended", "ended"),
                ("requested", "requested"),
                ("queued", "queued"),
                ("starting", "starting"),
                ("ready", "ready"),
                ("stopping", "stopping"),
            ]
        />
        {outcome.view()}
        {loaded(data, "Loading sessions…", move |page| view! { <SessionsTable page list stop cancelled /> }.into_any())}
    }
}

#[component]
fn SessionsTable(
    page: Page<AdminSession>,
    list: Memo<ListQuery>,
    stop: ServerAction<AdminStop>,
    cancelled: RwSignal<bool>,
) -> impl IntoView {
    let pages = page.pages();
    if page.items.is_empty() {
        return view! { <Empty tab=Tab::Sessions list page=page.page text="No session matches." /> }
            .into_any();
    }
    view! {
        <table class="admin-table" data-testid="sessions">
            <thead>
                <tr>
                    <th>"Session"</th>
                    <SortHeader tab=Tab::Sessions list key="user" label="User" />
                    <th>"Editor"</th>
                    <th>"Slice"</th>
                    <SortHeader tab=Tab::Sessions list key="state" label="State" />
                    <SortHeader tab=Tab::Sessions list key="created" label="Started" />
                    <th>"Ends / ended"</th>
                    <th>"Ran"</th>
                    <th>"Cost"</th>
                    <th></th>
                </tr>
            </thead>
            <tbody>
                {page
                    .items
                    .into_iter()
                    .map(|session| view! { <SessionRow session stop cancelled /> })
                    .collect_view()}
            </tbody>
        </table>
        <Pager tab=Tab::Sessions list page=page.page pages total=page.total />
    }
    .into_any()
}

/// This site's own address, for commands to paste elsewhere.
fn origin() -> String {
    #[cfg(feature = "hydrate")]
    if let Some(origin) = web_sys::window().and_then(|w| w.location().origin().ok()) {
        return origin;
    }
    String::new()
}

#[component]
fn SessionRow(
    session: AdminSession,
    stop: ServerAction<AdminStop>,
    cancelled: RwSignal<bool>,
) -> impl IntoView {
    use crate::domain::session::SessionState;
    let live = session.state.is_live();
    let ready = session.state == SessionState::Ready;
    // A queued launch has no editor yet: stopping it cancels it, and is named so.
    let queued = session.state == SessionState::Queued;
    let id = session.id.clone();
    let enter_id = session.id.clone();
    let stop_question = if queued {
        format!(
            "Cancel {}'s queued launch? It leaves the line, the credits it holds go back to them, and their page says an admin stopped it.",
            session.user_name
        )
    } else {
        format!(
            "Stop {}'s session? Their editor closes and anything they have not saved is lost; unused credits go back to them, and their page says an admin stopped it.",
            session.user_name
        )
    };
    // Entering a user's editor is a choice of its own, audited. It takes an admin token, never
    // this browser: the user's editor page would run here, with this page's cookie.
    let enter = ServerAction::<AdminOpenEditor>::new();
    let entered = move || {
        enter.value().get().map(|result| match result {
            Ok(access) => {
                let command = format!(
                    "curl -H \"Authorization: Bearer $TOKEN\" {}{}api/status",
                    origin(),
                    access.url
                );
                let browser = access.entry_url.clone().map(|href| {
                    view! {
                        <p>
                            <a href=href target="_blank" rel="noopener noreferrer" data-testid="enter-link">
                                "Open their editor in a new tab"
                            </a>
                            " (the link works once, for a minute; the editor runs on the entry address, apart from this site)"
                        </p>
                    }
                });
                view! {
                    <div class="notice enter" role="status" data-testid="enter-editor">
                        <p>
                            {format!("Your admin tokens may reach {} until ", access.url)}
                            {local_time(access.expires_at_ms)}
                            "; the grant is in the audit log and the user sees it."
                        </p>
                        {browser}
                        <p class="muted small">
                            "From a script: a token with the scopes access and admin ("
                            <a href="/tokens">"make one"</a>
                            "), never this site's sign-in, with which the user's page would run. For example:"
                        </p>
                        <code class="command">{command}</code>
                    </div>
                }
                .into_any()
            }
            Err(e) => view! { <span class="error" role="alert">{crate::ui::format::sentence(&e.to_string())}</span> }.into_any(),
        })
    };
    let state = match (session.state.is_live(), session.end_reason) {
        (false, Some(reason)) => format!("ended ({})", reason.as_str()),
        _ => session.state.as_str().to_string(),
    };
    let ends = session.ended_at_ms.or(session.ends_at_ms).map(local_time);
    let (ran, cost) = time_and_cost(&session);
    // The id's start tells rows apart; the whole id is in its title and found by the search.
    let short_id: String = session.id.chars().take(8).collect();
    let slice = match &session.gpu_model {
        Some(model) => format!("{} on {model}", format_mib(session.slice_mib)),
        None => format_mib(session.slice_mib),
    };
    view! {
        <tr data-session=session.id.clone()>
            <td>
                <code title=session.id.clone() data-testid="session-id">{short_id}</code>
            </td>
            <td>{session.user_name.clone()}</td>
            <td>{session.editor.label()}</td>
            <td>{slice}</td>
            <td>
                <span class=format!("chip state-{}", session.state.as_str()) title=session.detail.clone()>
                    {state}
                </span>
            </td>
            <td>{local_time(session.created_at_ms)}</td>
            <td>{ends}</td>
            <td data-testid="session-ran">{ran}</td>
            <td data-testid="session-cost">{cost}</td>
            <td>
                {ready
                    .then(|| {
                        view! {
                            <button
                                title="Lets your admin token into this user's editor for a while; the grant is in the audit log"
                                on:click=move |_| {
                                    enter.dispatch(AdminOpenEditor { id: enter_id.clone() });
                                }
                            >
                                "Enter editor"
                            </button>
                        }
                    })}
                {entered}
                {live
                    .then(|| {
                        view! {
                            <button
                                class="danger"
                                on:click=move |_| {
                                    if crate::ui::format::confirmed(&stop_question) {
                                        cancelled.set(queued);
                                        stop.dispatch(AdminStop { id: id.clone() });
                                    }
                                }
                            >
                                {if queued { "Cancel" } else { "Stop" }}
                            </button>
                        }
                    })}
            </td>
        </tr>
    }
}

/// How long a session's editor ran (from ready to its end, or to when the server read it while
/// it runs) and what it cost: its charge once ended, what it has used of its hold so far while
/// it runs. A session whose editor was never ready ran for nothing and cost nothing.
fn time_and_cost(session: &AdminSession) -> (String, String) {
    let Some(ready) = session.ready_at_ms else {
        return ("—".into(), credits::with_unit(session.charged));
    };
    // The minutes and the cost so far by the settlement's own rule (`credits`), as the user's
    // card and the usage tab count them.
    let until = session.ended_at_ms.unwrap_or(session.as_of_ms);
    let parked = session.parked;
    let minutes = credits::charged_minutes(Some(ready), None, session.end_reason, parked, until);
    let cost = if session.state.is_live() {
        let so_far = credits::cost_so_far(
            session.held,
            session.price_per_hour,
            Some(ready),
            parked,
            until,
        );
        format!("{} so far", credits::with_unit(so_far))
    } else {
        credits::with_unit(session.charged)
    };
    (credits::minutes_words(minutes), cost)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::launch::EditorKind;
    use crate::domain::session::SessionState;

    fn session(state: SessionState) -> AdminSession {
        AdminSession {
            id: "s1".into(),
            user_id: "u".into(),
            user_name: "ada".into(),
            editor: EditorKind::JupyterLab,
            slice_mib: 8192,
            gpu_model: None,
            state,
            end_reason: None,
            detail: None,
            created_at_ms: 0,
            ends_at_ms: None,
            ended_at_ms: None,
            price_per_hour: 6_000,
            ready_at_ms: Some(60_000),
            held: 6_000,
            charged: 0,
            as_of_ms: 60_000 + 10 * 60_000 + 1,
            parked: Default::default(),
        }
    }

    #[test]
    fn a_running_session_shows_its_time_and_cost_so_far() {
        // 10 minutes and a millisecond: 11 minutes begun, at 6 credits an hour.
        assert_eq!(
            time_and_cost(&session(SessionState::Ready)),
            ("11 min".to_string(), "1.1 credits so far".to_string())
        );
        // Parked for the last 5 of them: its slice given back, those minutes are not charged.
        let mut parked = session(SessionState::Parked);
        parked.parked.since = Some(parked.as_of_ms - 5 * 60_000);
        assert_eq!(
            time_and_cost(&parked),
            ("6 min".to_string(), "0.6 credits so far".to_string())
        );
    }

    #[test]
    fn an_ended_session_shows_its_charge_and_a_queued_one_nothing() {
        let mut ended = session(SessionState::Ended);
        ended.ended_at_ms = Some(60_000 + 125 * 60_000);
        ended.charged = 6_000;
        assert_eq!(
            time_and_cost(&ended),
            ("2 h 05 min".to_string(), "6 credits".to_string())
        );
        let mut queued = session(SessionState::Queued);
        queued.ready_at_ms = None;
        assert_eq!(
            time_and_cost(&queued),
            ("—".to_string(), "0 credits".to_string())
        );
    }
}
