//! A user's row: its actions, the drafts typed into it, the quota editor, and a deleted
//! account's row with its undo.

use super::*;

/// What an admin has typed into users' rows and not saved yet. After any action succeeds the
/// table reloads and every row is drawn anew, so what was typed lives here, per user, and
/// survives that: a half-typed grant in one row outlives a grant saved in another.
#[derive(Clone, Copy)]
pub(super) struct Drafts {
    pub(super) rows: StoredValue<HashMap<String, Draft>>,
    /// The user whose row's menu is open: one at a time, so that no menu covers another row.
    pub(super) menu: RwSignal<Option<String>>,
}

#[derive(Clone, Default)]
pub(super) struct Draft {
    pub(super) amount: ArcRwSignal<String>,
    pub(super) note: ArcRwSignal<String>,
    pub(super) quota_open: ArcRwSignal<bool>,
    pub(super) quota: Option<QuotaDraft>,
}

/// The quota fields, and the figures they were filled from: fields nobody changed follow the
/// figures of the next reload (another admin may have changed them).
#[derive(Clone)]
pub(super) struct QuotaDraft {
    pub(super) from: [String; 4],
    pub(super) fields: [ArcRwSignal<String>; 4],
}

#[derive(Clone, Copy)]
pub(super) enum Saved {
    Grant,
    Quota,
}

impl Drafts {
    pub(super) fn new() -> Drafts {
        Drafts {
            rows: StoredValue::new(HashMap::new()),
            menu: RwSignal::new(None),
        }
    }

    /// The row of a user whose quota overrides are `overrides`: what was typed in it, or its
    /// figures.
    pub(super) fn of(&self, user_id: &str, overrides: &crate::domain::quota::Overrides) -> Draft {
        let figures = quota_texts(overrides);
        self.rows
            .try_update_value(|rows| {
                let draft = rows.entry(user_id.to_string()).or_default();
                let untouched = draft.quota.as_ref().is_none_or(|quota| {
                    quota
                        .fields
                        .iter()
                        .zip(&quota.from)
                        .all(|(field, from)| field.get_untracked() == *from)
                });
                if untouched {
                    draft.quota = Some(QuotaDraft {
                        fields: figures.clone().map(ArcRwSignal::new),
                        from: figures,
                    });
                }
                draft.clone()
            })
            .unwrap_or_default()
    }

    /// What was sent for `user_id` is saved: that row's fields empty (a grant) or refill from
    /// the reloaded figures (a quota).
    pub(super) fn saved(&self, what: Saved, user_id: &str) {
        let draft = self.rows.try_update_value(|rows| {
            let draft = rows.get_mut(user_id)?;
            if let Saved::Quota = what {
                draft.quota = None;
            }
            Some(draft.clone())
        });
        // Set outside the store's lock: setting wakes what shows them.
        if let (Saved::Grant, Some(Some(draft))) = (what, draft) {
            draft.amount.set(String::new());
            draft.note.set(String::new());
        }
    }
}

/// What locking `name` loses, asked before it is done.
pub(super) fn lock_question(name: &str, live_sessions: u32) -> String {
    let sessions = match live_sessions {
        0 => String::new(),
        1 => " Their running session ends, and unsaved work in it is lost.".into(),
        n => format!(" Their {n} running sessions end, and unsaved work in them is lost."),
    };
    format!("Lock {name}? They are signed out everywhere and their tokens stop working.{sessions}")
}

/// What deleting `name` loses, asked before it is done.
pub(super) fn delete_question(name: &str, live_sessions: u32) -> String {
    let sessions = match live_sessions {
        0 => String::new(),
        1 => " Their running session ends, and unsaved work in it is lost.".into(),
        n => format!(" Their {n} running sessions end, and unsaved work in them is lost."),
    };
    format!(
        "Delete {name}? They can no longer sign in, their tokens are revoked, and they leave this list; their history stays.{sessions} Their workspace is kept for a grace period, when the filter \u{201c}deleted\u{201d} can undo this; then it is removed."
    )
}

/// A user's quota overrides as the editor shows them: empty for the configured default.
pub(super) fn quota_texts(overrides: &crate::domain::quota::Overrides) -> [String; 4] {
    let text = |value: Option<u64>| value.map(|v| v.to_string()).unwrap_or_default();
    let gb = |mib: Option<u64>| mib.map(crate::domain::quota::mib_to_gb).unwrap_or_default();
    [
        text(overrides.max_sessions.map(u64::from)),
        gb(overrides.max_gpu_mib),
        text(overrides.max_minutes.map(u64::from)),
        gb(overrides.max_disk_mib),
    ]
}

#[component]
pub(super) fn UsersTable(
    page: Page<AdminUser>,
    list: Memo<ListQuery>,
    change: ChangeAction,
    grant: GrantAction,
    quota: QuotaAction,
    drafts: Drafts,
    accounts: Accounts,
) -> impl IntoView {
    let pages = page.pages();
    if page.items.is_empty() {
        return view! { <Empty tab=Tab::Users list page=page.page text="No user matches. Clear the search to see everyone." /> }
            .into_any();
    }
    view! {
        <table class="admin-table" data-testid="users">
            <thead>
                <tr>
                    <SortHeader tab=Tab::Users list key="name" label="Name" />
                    <th>"Role"</th>
                    <SortHeader tab=Tab::Users list key="balance" label="Credits" />
                    <th>"Live sessions"</th>
                    <SortHeader tab=Tab::Users list key="created" label="Since" />
                    <th>"Actions"</th>
                </tr>
            </thead>
            <tbody>
                {page
                    .items
                    .into_iter()
                    .map(|user| match user.storage_removed_at_ms {
                        Some(removed_at) => view! { <DeletedRow user removed_at accounts /> }.into_any(),
                        None => view! { <UserRow user change grant quota drafts accounts /> }.into_any(),
                    })
                    .collect_view()}
            </tbody>
        </table>
        <Pager tab=Tab::Users list page=page.page pages total=page.total />
    }
    .into_any()
}

/// A deleted account whose storage is still kept: when it goes, and the way back.
#[component]
pub(super) fn DeletedRow(user: AdminUser, removed_at: i64, accounts: Accounts) -> impl IntoView {
    let id = user.id.clone();
    let said = format!(
        "{} is back, unlocked, with their workspace; their tokens are not.",
        user.name
    );
    let undo = move |_| {
        accounts.undelete.dispatch((
            said.clone(),
            ChangeUser {
                user_id: id.clone(),
                change: UserChange::default(),
            },
        ));
    };
    view! {
        <tr data-user=user.name.clone()>
            <td>{user.name.clone()}</td>
            <td>"deleted"</td>
            <td>{credits::with_unit(user.balance)}</td>
            <td>"0"</td>
            <td>{local_time(user.created_at_ms)}</td>
            <td>
                <span data-testid="storage-removed">"Workspace removed on " {local_time(removed_at)} " "</span>
                <button on:click=undo aria-label=format!("Undo the deletion of {}", user.name)>
                    "Undo delete"
                </button>
            </td>
        </tr>
    }
}

#[component]
pub(super) fn UserRow(
    user: AdminUser,
    change: ChangeAction,
    grant: GrantAction,
    quota: QuotaAction,
    drafts: Drafts,
    accounts: Accounts,
) -> impl IntoView {
    let draft = drafts.of(&user.id, &user.overrides);
    let amount = RwSignal::from(draft.amount.clone());
    // An open ask fills the grant in, for the admin to send or change.
    if let Some(ask) = &user.credit_request
        && amount.get_untracked().is_empty()
    {
        amount.set(credits::format(ask.amount));
    }
    let ask = user.credit_request.clone().map(|ask| {
        let id = user.id.clone();
        let said = format!("Declined {}'s ask for credits.", user.name);
        let note = if ask.note.is_empty() {
            String::new()
        } else {
            format!(": \u{201c}{}\u{201d}", ask.note)
        };
        let amount = credits::with_unit(ask.amount);
        let words = format!(
            "Asks for {amount} (since {} UTC){note}",
            format_utc(ask.at_ms)
        );
        let name = user.name.clone();
        view! {
            <span class="ask" data-testid="credit-ask" title=words>
                {format!("Asks for {amount} (since ")}
                {local_time(ask.at_ms)}
                {format!("){note}")}
                " "
                <button
                    class="link"
                    aria-label=format!("Decline the ask of {name}")
                    on:click=move |_| {
                        accounts
                            .decline
                            .dispatch((
                                said.clone(),
                                ChangeUser {
                                    user_id: id.clone(),
                                    change: UserChange::default(),
                                },
                            ));
                    }
                >
                    "Decline"
                </button>
            </span>
        }
    });
    let note = RwSignal::from(draft.note.clone());
    let id = user.id.clone();
    let role_change = {
        let id = id.clone();
        let to = if user.role == Role::Admin {
            Role::User
        } else {
            Role::Admin
        };
        let said = match to {
            Role::Admin => format!("{} is now an admin.", user.name),
            Role::User => format!(
                "{} is now a user: the admin pages are closed to them.",
                user.name
            ),
        };
        move |_| {
            change.dispatch((
                said.clone(),
                ChangeUser {
                    user_id: id.clone(),
                    change: UserChange {
                        role: Some(to),
                        locked: None,
                    },
                },
            ));
        }
    };
    let lock_change = {
        let id = id.clone();
        let locked = !user.locked;
        let question = lock_question(&user.name, user.live_sessions);
        let said = if locked {
            format!(
                "Locked {}: signed out everywhere, their tokens stopped.",
                user.name
            )
        } else {
            format!("Unlocked {}: they can sign in again.", user.name)
        };
        move |_| {
            if locked && !confirmed(&question) {
                return;
            }
            change.dispatch((
                said.clone(),
                ChangeUser {
                    user_id: id.clone(),
                    change: UserChange {
                        role: None,
                        locked: Some(locked),
                    },
                },
            ));
        }
    };
    let submit_grant = {
        let id = id.clone();
        let name = user.name.clone();
        move |ev: leptos::ev::SubmitEvent| {
            ev.prevent_default();
            grant.dispatch((
                name.clone(),
                GrantCredits {
                    user_id: id.clone(),
                    amount: amount.get_untracked(),
                    note: note.get_untracked(),
                },
            ));
        }
    };
    let reset = {
        let id = id.clone();
        let question = format!(
            "Give {} a new password? Their current one stops working; they choose their own at their next sign-in.",
            user.name
        );
        move |_| {
            if confirmed(&question) {
                accounts.reset.dispatch(ResetPassword {
                    user_id: id.clone(),
                });
            }
        }
    };
    let delete = {
        let id = id.clone();
        let question = delete_question(&user.name, user.live_sessions);
        let said = format!("Deleted {}; their history stays.", user.name);
        move |_| {
            if confirmed(&question) {
                accounts.delete.dispatch((
                    said.clone(),
                    ChangeUser {
                        user_id: id.clone(),
                        change: UserChange::default(),
                    },
                ));
            }
        }
    };
    let name = user.name.clone();
    let menu = drafts.menu;
    let menu_open = {
        let id = user.id.clone();
        move || menu.with(|open| open.as_deref() == Some(id.as_str()))
    };
    let menu_toggled = {
        let id = user.id.clone();
        move |open: bool| {
            if open {
                menu.set(Some(id.clone()));
            } else if menu.with_untracked(|o| o.as_deref() == Some(id.as_str())) {
                menu.set(None);
            }
        }
    };
    view! {
        <tr data-user=user.name.clone()>
            <td class="who">
                <span class="name">{user.name.clone()}</span>
                {user.single_sign_on.then(|| view! { <span class="chip">"single sign-on"</span> })}
                {user.is_you.then(|| view! { <span class="chip">"you"</span> })}
                {user.locked.then(|| view! { <span class="chip state-failed">"locked"</span> })}
                {user
                    .must_change_password
                    .then(|| {
                        view! {
                            <span class="chip" title="Signs in with a password an admin set">
                                "new password"
                            </span>
                        }
                    })}
                {ask}
            </td>
            <td>{user.role.as_str()}</td>
            <td data-testid="balance">
                {credits::format(user.balance)}
                {(user.held > 0)
                    .then(|| {
                        view! {
                            <span class="muted">
                                {format!(" ({} held)", credits::format(user.held))}
                            </span>
                        }
                    })}
            </td>
            <td>{user.live_sessions}</td>
            <td>{local_time(user.created_at_ms)}</td>
            <td class="row-actions">
                <form class="grant" on:submit=submit_grant>
                    <input
                        name="amount"
                        inputmode="decimal"
                        required
                        size="5"
                        placeholder="credits"
                        aria-label=format!("Credits to grant {name}")
                        bind:value=amount
                    />
                    <input
                        name="note"
                        maxlength="200"
                        placeholder="note"
                        aria-label=format!("Note for {name}")
                        bind:value=note
                    />
                    <button type="submit">"Grant"</button>
                </form>
                // Every other action in one menu, so that a row stays one line; open as the
                // admin left it across reloads, one row's at a time.
                <details
                    class="row-menu"
                    prop:open=menu_open
                    on:toggle=move |ev| {
                        #[cfg(feature = "hydrate")]
                        {
                            use wasm_bindgen::JsCast;
                            if let Some(details) = ev
                                .target()
                                .and_then(|t| t.dyn_into::<web_sys::Element>().ok())
                            {
                                menu_toggled(details.has_attribute("open"));
                            }
                        }
                        #[cfg(not(feature = "hydrate"))]
                        let _ = (ev, &menu_toggled);
                    }
                >
                    <summary aria-label=format!("More for {name}")>"More"</summary>
                    <div class="menu">
                        // Nobody takes away their own role or locks or deletes themselves:
                        // another admin does, so the pool is never left without one.
                        {(!user.is_you).then(|| view! {
                        <button
                            on:click=role_change
                            aria-label=if user.role == Role::Admin {
                                format!("Make user {name}")
                            } else {
                                format!("Make admin {name}")
                            }
                        >
                            {if user.role == Role::Admin { "Make user" } else { "Make admin" }}
                        </button>
                        <button
                            on:click=lock_change
                            aria-label=format!("{} {name}", if user.locked { "Unlock" } else { "Lock" })
                        >
                            {if user.locked { "Unlock" } else { "Lock" }}
                        </button>
                        })}
                        {(!user.single_sign_on && !user.is_you)
                            .then(|| {
                                view! {
                                    <button on:click=reset.clone() aria-label=format!("Reset password of {name}")>
                                        "Reset password"
                                    </button>
                                }
                            })}
                        {(!user.is_you).then(|| view! {
                            <button class="danger" on:click=delete aria-label=format!("Delete {name}")>
                                "Delete"
                            </button>
                        })}
                        <QuotaEditor user=user.clone() quota draft />
                    </div>
                </details>
            </td>
        </tr>
    }
}

/// A user's limits: each field holds the override, empty for the configured default.
#[component]
pub(super) fn QuotaEditor(user: AdminUser, quota: QuotaAction, draft: Draft) -> impl IntoView {
    let [sessions, gpu, minutes, disk] = match draft.quota {
        Some(quota) => quota.fields.map(RwSignal::from),
        None => quota_texts(&user.overrides).map(RwSignal::new),
    };
    let open = RwSignal::from(draft.quota_open);
    let problem = RwSignal::new(None::<String>);
    let id = user.id.clone();
    let name = user.name.clone();
    let submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        match read_overrides([
            sessions.get_untracked(),
            gpu.get_untracked(),
            minutes.get_untracked(),
            disk.get_untracked(),
        ]) {
            Ok(overrides) => {
                problem.set(None);
                quota.dispatch((
                    name.clone(),
                    SetUserQuota {
                        user_id: id.clone(),
                        overrides,
                    },
                ));
            }
            Err(e) => problem.set(Some(e)),
        }
    };
    let limits = user.limits;
    let field = move |label: &'static str, value: RwSignal<String>| {
        view! {
            <label>
                {label}
                <input inputmode="numeric" size="7" placeholder="default" bind:value=value />
            </label>
        }
    };
    let summary = format!(
        "Quota: {} sessions, {} GPU, {} min",
        limits.max_sessions,
        format_mib(limits.max_gpu_mib),
        limits.max_minutes
    );
    view! {
        // Open or closed as the admin left it, across reloads.
        <details
            class="quota"
            open=move || open.get()
            on:toggle=move |ev| {
                #[cfg(feature = "hydrate")]
                {
                    use wasm_bindgen::JsCast;
                    if let Some(details) = ev
                        .target()
                        .and_then(|t| t.dyn_into::<web_sys::Element>().ok())
                    {
                        open.set(details.has_attribute("open"));
                    }
                }
                #[cfg(not(feature = "hydrate"))]
                let _ = ev;
            }
        >
            <summary>{summary}</summary>
            <form on:submit=submit>
                {field("Sessions", sessions)}
                {field("GPU GB", gpu)}
                {field("Minutes", minutes)}
                {field("Disk GB", disk)}
                <button type="submit">"Save quota"</button>
                {move || {
                    problem
                        .get()
                        .map(|e| {
                            view! {
                                <p class="notice error" role="alert">
                                    {e}
                                </p>
                            }
                        })
                }}
            </form>
        </details>
    }
}

/// Sessions, GPU GB, minutes and disk GB as typed: empty for the default, else a whole number
/// (sessions, minutes) or a number of GB (`12.5`), kept in MiB.
pub(super) fn read_overrides(
    fields: [String; 4],
) -> Result<crate::domain::quota::Overrides, String> {
    let names = ["sessions", "GPU GB", "minutes", "disk GB"];
    let mut values = [None; 4];
    for (i, text) in fields.iter().enumerate() {
        let text = text.trim();
        if text.is_empty() {
            continue;
        }
        let in_gb = i == 1 || i == 3;
        let value = match in_gb {
            true => crate::domain::quota::gb_to_mib(text),
            false => text.parse::<u64>().ok(),
        };
        values[i] = Some(value.ok_or_else(|| match in_gb {
            true => format!(
                "{} must be a number of GB such as 8 or 12.5, or empty for the default",
                names[i]
            ),
            false => format!(
                "{} must be a whole number, or empty for the default",
                names[i]
            ),
        })?);
    }
    let small = |value: Option<u64>, name: &str| {
        value
            .map(|v| u32::try_from(v).map_err(|_| format!("{name} is too large")))
            .transpose()
    };
    Ok(crate::domain::quota::Overrides {
        max_sessions: small(values[0], "sessions")?,
        max_gpu_mib: values[1],
        max_minutes: small(values[2], "minutes")?,
        max_disk_mib: values[3],
    })
}
