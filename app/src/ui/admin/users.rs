//! The users tab: add, reset and delete accounts, roles, locks, credits and quotas, with what
//! was typed kept across reloads. What loses something asks first.
//!
//! Made for a hundred users and more: a row is one line (the grant at hand, every other action
//! in the row's menu), and a CSV file adds and grants to many at once (`crate::domain::bulk`):
//! checked first, every bad line named by its number, then applied whole or not at all.

use super::Tab;
use super::table::{Empty, Outcome, Pager, SearchForm, SortHeader, loaded};
use crate::api::{
    AddUser, ChangeUser, GrantCredits, ResetPassword, SetUserQuota, admin_users, bulk_users,
    change_user, decline_credit_request, delete_user, grant_credits, set_user_quota, undelete_user,
};
use crate::domain::bulk;
use crate::domain::credits;
use crate::domain::listing::{ListQuery, Page};
use crate::domain::pool::format_mib;
use crate::error::AppError;
use crate::model::{AdminUser, BulkUsers, MadePassword, NewAccount, Role, UserChange};
use crate::ui::format::{confirmed, format_utc, local_time};
use crate::ui::hydration::page_resource;
use leptos::prelude::*;
use std::collections::HashMap;

#[component]
pub(super) fn UsersTab(list: Memo<ListQuery>) -> impl IntoView {
    let add = ServerAction::<AddUser>::new();
    let reset = ServerAction::<ResetPassword>::new();
    // Each carries the words its success is told in, fixed when it was sent: the answers to
    // several rows may come back in any order.
    let change: ChangeAction = Action::new(|(said, input): &(String, ChangeUser)| {
        let (said, ChangeUser { user_id, change }) = (said.clone(), input.clone());
        async move { change_user(user_id, change).await.map(|()| said) }
    });
    let delete: ChangeAction = Action::new(|(said, input): &(String, ChangeUser)| {
        let (said, user_id) = (said.clone(), input.user_id.clone());
        async move { delete_user(user_id).await.map(|()| said) }
    });
    let decline: ChangeAction = Action::new(|(said, input): &(String, ChangeUser)| {
        let (said, user_id) = (said.clone(), input.user_id.clone());
        async move { decline_credit_request(user_id).await.map(|()| said) }
    });
    let undelete: ChangeAction = Action::new(|(said, input): &(String, ChangeUser)| {
        let (said, user_id) = (said.clone(), input.user_id.clone());
        async move { undelete_user(user_id).await.map(|()| said) }
    });
    let accounts = Accounts {
        reset,
        delete,
        decline,
        undelete,
    };
    // The last password an admin set here, from an add or a reset, whichever answered last.
    let made = RwSignal::new(None::<MadePassword>);
    Effect::new(move |_| {
        if let Some(Ok(new)) = add.value().get() {
            made.set(Some(new));
        }
    });
    Effect::new(move |_| {
        if let Some(Ok(new)) = reset.value().get() {
            made.set(Some(new));
        }
    });
    // Their answers name the user, so that a row's draft follows its own answer.
    let grant: GrantAction = Action::new(|(name, input): &(String, GrantCredits)| {
        let name = name.clone();
        let GrantCredits {
            user_id,
            amount,
            note,
        } = input.clone();
        let asked = credits::parse(&amount).unwrap_or(0);
        async move {
            let answer = grant_credits(user_id.clone(), amount, note).await;
            (
                user_id,
                answer.map(|balance| granted(&name, asked, balance)),
            )
        }
    });
    let quota: QuotaAction = Action::new(|(name, input): &(String, SetUserQuota)| {
        let name = name.clone();
        let SetUserQuota { user_id, overrides } = input.clone();
        async move {
            let answer = set_user_quota(user_id.clone(), overrides).await;
            (user_id, answer.map(|limits| quota_saved(&name, &limits)))
        }
    });
    // A file's plan is checked before it is applied: (the text checked, its plan).
    let check: BulkAction = Action::new(|csv: &String| {
        let csv = csv.clone();
        async move { (csv.clone(), bulk_users(csv, false).await) }
    });
    let apply: BulkAction = Action::new(|csv: &String| {
        let csv = csv.clone();
        async move { (csv.clone(), bulk_users(csv, true).await) }
    });
    // The passwords of the accounts the last file added, shown until the next action.
    let made_many = RwSignal::new(None::<Vec<MadePassword>>);
    Effect::new(move |_| {
        if let Some((_, Ok(done))) = apply.value().get() {
            made_many.set(Some(done.passwords));
        }
    });
    let outcome = Outcome::new();
    outcome.follow(
        move || apply.pending().get(),
        move || {
            apply
                .value()
                .get()
                .map(|(_, answer)| answer.map(|done| applied_words(&done)))
        },
    );
    outcome.owns(made_many);
    outcome.follow(
        move || add.pending().get(),
        move || {
            add.value().get().map(|answer| {
                answer.map(|made| format!("Added {}; their password is below.", made.name))
            })
        },
    );
    outcome.follow(
        move || reset.pending().get(),
        move || {
            reset.value().get().map(|answer| {
                answer.map(|made| format!("{} has a new password; it is below.", made.name))
            })
        },
    );
    outcome.follow(move || change.pending().get(), move || change.value().get());
    outcome.follow(move || delete.pending().get(), move || delete.value().get());
    outcome.follow(
        move || undelete.pending().get(),
        move || undelete.value().get(),
    );
    outcome.follow(
        move || decline.pending().get(),
        move || decline.value().get(),
    );
    outcome.follow(
        move || grant.pending().get(),
        move || grant.value().get().map(|(_, answer)| answer),
    );
    outcome.follow(
        move || quota.pending().get(),
        move || quota.value().get().map(|(_, answer)| answer),
    );
    // A password made here is shown until the next action is sent, whatever it is.
    outcome.owns(made);
    // Reloaded after what succeeded only: a refused grant keeps what was typed in its row.
    let changed = RwSignal::new(0u32);
    let drafts = Drafts::new();
    Effect::new(move |_| {
        if let Some((user_id, Ok(_))) = quota.value().get() {
            drafts.saved(Saved::Quota, &user_id);
            changed.update(|n| *n += 1);
        }
    });
    // The tab's count of open asks follows what answers them.
    let asks = use_context::<super::AsksChanged>();
    let asks_changed = move || {
        if let Some(super::AsksChanged(asks)) = asks {
            asks.update(|n| *n += 1);
        }
    };
    Effect::new(move |_| {
        let succeeded = [
            matches!(change.value().get(), Some(Ok(_))),
            matches!(add.value().get(), Some(Ok(_))),
            matches!(reset.value().get(), Some(Ok(_))),
            matches!(delete.value().get(), Some(Ok(_))),
            matches!(decline.value().get(), Some(Ok(_))),
            matches!(apply.value().get(), Some((_, Ok(_)))),
            matches!(undelete.value().get(), Some(Ok(_))),
        ];
        if succeeded.contains(&true) {
            changed.update(|n| *n += 1);
        }
        if succeeded[3] || succeeded[4] || succeeded[5] {
            asks_changed();
        }
    });
    Effect::new(move |_| {
        if let Some((user_id, Ok(_))) = grant.value().get() {
            drafts.saved(Saved::Grant, &user_id);
            changed.update(|n| *n += 1);
            asks_changed();
        }
    });
    let data = page_resource(
        move || (list.get(), changed.get()),
        |(query, _)| admin_users(query),
    );
    view! {
        <SearchForm
            tab=Tab::Users
            list
            placeholder="Name"
            filters=&[
                ("all", "everyone"),
                ("asking", "asking for credits"),
                ("admin", "admins"),
                ("user", "users"),
                ("locked", "locked"),
                ("deleted", "deleted, storage kept"),
            ]
        />
        <div class="user-forms">
            <AddUserForm add />
            <BulkForm check apply />
        </div>
        {outcome.view()}
        {move || made.get().map(|made| view! { <MadePasswordNotice made /> })}
        {move || {
            made_many
                .get()
                .filter(|made| !made.is_empty())
                .map(|made| view! { <MadePasswordsNotice made /> })
        }}
        {loaded(
            data,
            "Loading users…",
            move |page| {
                view! { <UsersTable page list change grant quota drafts accounts /> }.into_any()
            },
        )}
    }
}

/// What a grant of `asked` milli-credits to `name` came to; a negative one takes back.
fn granted(name: &str, asked: i64, balance: i64) -> String {
    let now = format!("Their balance is now {}.", credits::with_unit(balance));
    if asked < 0 {
        format!(
            "Took back {} from {name}. {now}",
            credits::with_unit(-asked)
        )
    } else {
        format!("Granted {name} {}. {now}", credits::with_unit(asked))
    }
}

/// What saving `name`'s quota came to: the limits that now apply.
fn quota_saved(name: &str, limits: &crate::domain::quota::Limits) -> String {
    format!(
        "Saved {name}'s quota: {} at a time, {} of GPU, {} min a session.",
        match limits.max_sessions {
            1 => "1 session".to_string(),
            n => format!("{n} sessions"),
        },
        format_mib(limits.max_gpu_mib),
        limits.max_minutes
    )
}

/// The actions on a listed account itself.
#[derive(Clone, Copy)]
struct Accounts {
    reset: ServerAction<ResetPassword>,
    delete: ChangeAction,
    decline: ChangeAction,
    undelete: ChangeAction,
}

/// A new local account: its name, whether an admin, and a password (or one the server makes).
#[component]
fn AddUserForm(add: ServerAction<AddUser>) -> impl IntoView {
    let name = RwSignal::new(String::new());
    let password = RwSignal::new(String::new());
    let admin = RwSignal::new(false);
    Effect::new(move |_| {
        if let Some(Ok(_)) = add.value().get() {
            name.set(String::new());
            password.set(String::new());
            admin.set(false);
        }
    });
    let submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let typed = password.get_untracked();
        add.dispatch(AddUser {
            account: NewAccount {
                name: name.get_untracked(),
                role: if admin.get_untracked() {
                    Role::Admin
                } else {
                    Role::User
                },
                password: (!typed.is_empty()).then_some(typed),
            },
        });
    };
    view! {
        <details class="add-user" data-testid="add-user">
            <summary>"Add a user"</summary>
            <form on:submit=submit>
                <label>
                    "Name"
                    <input required maxlength="64" autocomplete="off" bind:value=name />
                </label>
                <label>
                    "Password"
                    <input
                        type="text"
                        autocomplete="off"
                        placeholder="leave empty to make one"
                        bind:value=password
                    />
                </label>
                <label class="inline">
                    <input type="checkbox" bind:checked=admin />
                    "admin"
                </label>
                <button type="submit" class="primary" disabled=move || add.pending().get()>
                    "Add user"
                </button>
                <p class="muted">
                    "The password is shown once, for you to hand over; its person chooses their own at their first sign-in."
                </p>
            </form>
        </details>
    }
}

/// A file of accounts: chosen or pasted, checked (every bad line named), then applied whole.
#[component]
fn BulkForm(check: BulkAction, apply: BulkAction) -> impl IntoView {
    let text = RwSignal::new(String::new());
    let open = RwSignal::new(false);
    // A file applied empties the form; what it planned is done.
    Effect::new(move |_| {
        if let Some((_, Ok(_))) = apply.value().get() {
            text.set(String::new());
        }
    });
    let send_check = move || {
        let csv = text.get_untracked();
        if !csv.trim().is_empty() {
            check.dispatch(csv);
        }
    };
    let chosen = move |ev: leptos::ev::Event| {
        #[cfg(feature = "hydrate")]
        read_chosen_file(&ev, move |csv| {
            text.set(csv);
            send_check();
        });
        #[cfg(not(feature = "hydrate"))]
        let _ = ev;
    };
    // The plan of the text as it is now: a file edited after its check is checked again.
    let plan = move || {
        let (checked, answer) = check.value().get()?;
        (checked == text.get()).then_some(answer)
    };
    let result = move || {
        if check.pending().get() {
            return Some(
                view! { <p class="muted" role="status">"Checking the file…"</p> }.into_any(),
            );
        }
        Some(match plan()? {
            Err(error) => view! { <crate::ui::Refusal error /> }.into_any(),
            Ok(answer) if !answer.problems.is_empty() => view! {
                <div class="notice error" role="alert" data-testid="bulk-problems">
                    <p>"Nothing will be added or granted until every line is right:"</p>
                    <ul>
                        {answer
                            .problems
                            .iter()
                            .map(|p| view! { <li>{crate::ui::format::sentence(&p.to_string())}</li> })
                            .collect_view()}
                    </ul>
                </div>
            }
            .into_any(),
            Ok(answer) => {
                let csv = text.get_untracked();
                let button = apply_label(&answer);
                view! {
                    <div class="bulk-plan" data-testid="bulk-plan">
                        <p>{plan_words(&answer)}</p>
                        <ol>
                            {answer
                                .planned
                                .iter()
                                .map(|p| {
                                    view! {
                                        <li value=p.line.to_string()>
                                            {crate::ui::format::sentence(&p.words())}
                                        </li>
                                    }
                                })
                                .collect_view()}
                        </ol>
                        <button
                            type="button"
                            class="primary"
                            disabled=move || apply.pending().get()
                            on:click=move |_| {
                                apply.dispatch(csv.clone());
                            }
                        >
                            {button}
                        </button>
                    </div>
                }
                .into_any()
            }
        })
    };
    view! {
        <details
            class="bulk-users"
            data-testid="bulk-users"
            prop:open=move || open.get()
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
            <summary>"Add or grant from a CSV file"</summary>
            <form on:submit=move |ev: leptos::ev::SubmitEvent| {
                ev.prevent_default();
                send_check();
            }>
                <label>
                    "CSV file"
                    <input type="file" accept=".csv,text/csv,text/plain" on:change=chosen />
                </label>
                <label class="grow">
                    "or its lines"
                    <textarea
                        name="csv"
                        rows="4"
                        spellcheck="false"
                        placeholder="name,role,credits,note"
                        bind:value=text
                    ></textarea>
                </label>
                <button type="submit">"Check"</button>
                <p class="muted">
                    "One line a person: name, then role (user or admin; empty for user), credits and a note, each optional. A new name is added with a password made for it; a name that exists is granted the credits. Nothing is done until every line is right."
                </p>
            </form>
            {result}
        </details>
    }
}

/// Reads the file an `<input type=file>` was given, as text, and hands it to `then`.
#[cfg(feature = "hydrate")]
fn read_chosen_file(ev: &leptos::ev::Event, then: impl FnOnce(String) + 'static) {
    use js_sys::{Function, Promise, Reflect};
    use wasm_bindgen::{JsCast, JsValue, closure::Closure};
    let Some(input) = ev.target() else { return };
    let file = Reflect::get(&input, &JsValue::from_str("files"))
        .and_then(|files| Reflect::get(&files, &JsValue::from(0)));
    let Ok(file) = file else { return };
    if file.is_undefined() || file.is_null() {
        return;
    }
    let read = Reflect::get(&file, &JsValue::from_str("text"))
        .ok()
        .and_then(|text| text.dyn_into::<Function>().ok())
        .and_then(|text| text.call0(&file).ok())
        .and_then(|promise| promise.dyn_into::<Promise>().ok());
    if let Some(read) = read {
        // A closure freed once called, handed to the promise's `then`.
        let done = Closure::once_into_js(move |text: JsValue| {
            then(text.as_string().unwrap_or_default());
        });
        let on = Reflect::get(&read, &JsValue::from_str("then"))
            .ok()
            .and_then(|on| on.dyn_into::<Function>().ok());
        if let Some(on) = on {
            let _ = on.call1(&read, &done);
        }
    }
    // The same file chosen again is a change again.
    let _ = Reflect::set(&input, &JsValue::from_str("value"), &JsValue::from_str(""));
}

/// "3 lines: 2 accounts to add, 1 grant."
fn plan_words(answer: &BulkUsers) -> String {
    let (adds, grants) = counts(answer);
    let lines = match answer.planned.len() {
        1 => "1 line".to_string(),
        n => format!("{n} lines"),
    };
    let adds = match adds {
        0 => None,
        1 => Some("1 account to add".to_string()),
        n => Some(format!("{n} accounts to add")),
    };
    let grants = match grants {
        0 => None,
        1 => Some("1 grant".to_string()),
        n => Some(format!("{n} grants")),
    };
    let parts: Vec<String> = adds.into_iter().chain(grants).collect();
    format!("{lines}: {}.", parts.join(", "))
}

/// The apply button's words: "Add 2 and grant 1".
fn apply_label(answer: &BulkUsers) -> String {
    match counts(answer) {
        (0, grants) => format!("Grant {grants}"),
        (adds, 0) => format!("Add {adds}"),
        (adds, grants) => format!("Add {adds} and grant {grants}"),
    }
}

/// What applying a file came to.
fn applied_words(done: &BulkUsers) -> String {
    let (adds, grants) = counts(done);
    let added = match adds {
        0 => None,
        1 => Some("added 1 account".to_string()),
        n => Some(format!("added {n} accounts")),
    };
    let granted = match grants {
        0 => None,
        1 => Some("made 1 grant".to_string()),
        n => Some(format!("made {n} grants")),
    };
    let done_words: Vec<String> = added.into_iter().chain(granted).collect();
    let passwords = if adds > 0 {
        "; the new passwords are below, shown only now"
    } else {
        ""
    };
    crate::ui::format::sentence(&format!(
        "From the file: {}{passwords}.",
        done_words.join(" and ")
    ))
}

/// (accounts added, grants made) of a file's plan.
fn counts(answer: &BulkUsers) -> (usize, usize) {
    let adds = answer
        .planned
        .iter()
        .filter(|p| matches!(p.action, bulk::Action::Add { .. }))
        .count();
    (adds, answer.planned.len() - adds)
}

/// The passwords of the accounts a file added, shown this once.
#[component]
fn MadePasswordsNotice(made: Vec<MadePassword>) -> impl IntoView {
    view! {
        <div class="notice" role="status" data-testid="made-passwords">
            <p>"Their passwords, shown only now:"</p>
            <ul class="made-passwords">
                {made
                    .into_iter()
                    .map(|made| {
                        view! {
                            <li>
                                <span>{made.name.clone()}</span>
                                <crate::ui::copy::SecretField
                                    secret=made.password
                                    label=format!("Password of {}", made.name)
                                    test_id="made-passwords-value"
                                />
                            </li>
                        }
                    })
                    .collect_view()}
            </ul>
            <p class="muted">
                "Hand each over in person or by a private message. They choose their own at their next sign-in."
            </p>
        </div>
    }
}

/// A password an admin set, shown this once.
#[component]
fn MadePasswordNotice(made: MadePassword) -> impl IntoView {
    view! {
        <div class="notice" role="status" data-testid="made-password">
            <p>{format!("{}'s password, shown only now:", made.name)}</p>
            <crate::ui::copy::SecretField
                secret=made.password
                label=format!("Password of {}", made.name)
                test_id="made-password-value"
            />
            <p class="muted">
                "Hand it over in person or by a private message. They choose their own at their next sign-in."
            </p>
        </div>
    }
}

/// A file's text sent to be checked or applied; answers with the text it was sent.
type BulkAction = Action<String, (String, Result<BulkUsers, AppError>)>;
/// An action sent with its input and what its success will say.
type ChangeAction = Action<(String, ChangeUser), Result<String, AppError>>;
/// Sent with the user's name; answers with the user's id and what it came to.
type GrantAction = Action<(String, GrantCredits), (String, Result<String, AppError>)>;
type QuotaAction = Action<(String, SetUserQuota), (String, Result<String, AppError>)>;

/// What an admin has typed into users' rows and not saved yet. After any action succeeds the
/// table reloads and every row is drawn anew, so what was typed lives here, per user, and
/// survives that: a half-typed grant in one row outlives a grant saved in another.
#[derive(Clone, Copy)]
struct Drafts {
    rows: StoredValue<HashMap<String, Draft>>,
    /// The user whose row's menu is open: one at a time, so that no menu covers another row.
    menu: RwSignal<Option<String>>,
}

#[derive(Clone, Default)]
struct Draft {
    amount: ArcRwSignal<String>,
    note: ArcRwSignal<String>,
    quota_open: ArcRwSignal<bool>,
    quota: Option<QuotaDraft>,
}

/// The quota fields, and the figures they were filled from: fields nobody changed follow the
/// figures of the next reload (another admin may have changed them).
#[derive(Clone)]
struct QuotaDraft {
    from: [String; 4],
    fields: [ArcRwSignal<String>; 4],
}

#[derive(Clone, Copy)]
enum Saved {
    Grant,
    Quota,
}

impl Drafts {
    fn new() -> Drafts {
        Drafts {
            rows: StoredValue::new(HashMap::new()),
            menu: RwSignal::new(None),
        }
    }

    /// The row of a user whose quota overrides are `overrides`: what was typed in it, or its
    /// figures.
    fn of(&self, user_id: &str, overrides: &crate::domain::quota::Overrides) -> Draft {
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
    fn saved(&self, what: Saved, user_id: &str) {
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
fn lock_question(name: &str, live_sessions: u32) -> String {
    let sessions = match live_sessions {
        0 => String::new(),
        1 => " Their running session ends, and unsaved work in it is lost.".into(),
        n => format!(" Their {n} running sessions end, and unsaved work in them is lost."),
    };
    format!("Lock {name}? They are signed out everywhere and their tokens stop working.{sessions}")
}

/// What deleting `name` loses, asked before it is done.
fn delete_question(name: &str, live_sessions: u32) -> String {
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
fn quota_texts(overrides: &crate::domain::quota::Overrides) -> [String; 4] {
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
fn UsersTable(
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
fn DeletedRow(user: AdminUser, removed_at: i64, accounts: Accounts) -> impl IntoView {
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
fn UserRow(
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
fn QuotaEditor(user: AdminUser, quota: QuotaAction, draft: Draft) -> impl IntoView {
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
fn read_overrides(fields: [String; 4]) -> Result<crate::domain::quota::Overrides, String> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_was_typed_in_a_row_outlives_reloads_until_it_is_saved() {
        let owner = Owner::new();
        owner.with(|| {
            let drafts = Drafts::new();
            let quota_of = |draft: &Draft| {
                let quota = draft.quota.clone().expect("the quota fields");
                quota.fields.map(|f| f.get_untracked())
            };
            let mut overrides = crate::domain::quota::Overrides::default();
            let first = drafts.of("u1", &overrides);
            first.amount.set("7".into());
            first.note.set("for the course".into());
            assert_eq!(quota_of(&first), quota_texts(&overrides));
            first.quota.as_ref().unwrap().fields[0].set("3".into());

            // Another admin sets the minutes meanwhile: the reload shows them, but the typed
            // sessions stay, and so does the grant.
            overrides.max_minutes = Some(45);
            let again = drafts.of("u1", &overrides);
            assert_eq!(again.amount.get_untracked(), "7");
            assert_eq!(
                quota_of(&again),
                ["3", "", "", ""],
                "a changed form is kept whole"
            );
            let other = drafts.of("u2", &overrides);
            assert!(other.amount.get_untracked().is_empty());
            other.amount.set("5".into());

            // The grant for u1 is saved: its fields empty; the quota draft stays.
            drafts.saved(Saved::Grant, "u1");
            let after = drafts.of("u1", &overrides);
            assert_eq!(
                (after.amount.get_untracked(), after.note.get_untracked()),
                (String::new(), String::new())
            );
            assert_eq!(drafts.of("u2", &overrides).amount.get_untracked(), "5");
            assert_eq!(quota_of(&after)[0], "3");

            // Its quota is saved: the fields refill from the reloaded figures.
            overrides.max_sessions = Some(3);
            drafts.saved(Saved::Quota, "u1");
            assert_eq!(quota_of(&drafts.of("u1", &overrides)), ["3", "", "45", ""]);

            // Untouched fields follow the figures.
            overrides.max_gpu_mib = Some(8192);
            assert_eq!(quota_of(&drafts.of("u1", &overrides)), ["3", "8", "45", ""]);
        });
    }

    #[test]
    fn a_files_plan_and_its_outcome_count_adds_and_grants() {
        let planned = |action| bulk::Planned {
            line: 1,
            name: "ada".into(),
            action,
            credits: 1000,
            note: String::new(),
        };
        let add = bulk::Action::Add { admin: false };
        let mut answer = BulkUsers {
            planned: vec![planned(add), planned(add), planned(bulk::Action::Grant)],
            ..BulkUsers::default()
        };
        assert_eq!(plan_words(&answer), "3 lines: 2 accounts to add, 1 grant.");
        assert_eq!(apply_label(&answer), "Add 2 and grant 1");
        assert_eq!(
            applied_words(&answer),
            "From the file: added 2 accounts and made 1 grant; the new passwords are below, shown only now."
        );
        answer.planned.truncate(1);
        answer.planned[0].action = bulk::Action::Grant;
        assert_eq!(plan_words(&answer), "1 line: 1 grant.");
        assert_eq!(apply_label(&answer), "Grant 1");
        assert_eq!(applied_words(&answer), "From the file: made 1 grant.");
    }

    #[test]
    fn locking_and_deleting_say_what_is_lost() {
        assert!(!lock_question("ada", 0).contains("session"));
        assert!(lock_question("ada", 1).contains("Their running session ends"));
        assert!(delete_question("ada", 2).contains("Their 2 running sessions end"));
        assert!(delete_question("ada", 0).contains("grace period"));
    }

    #[test]
    fn quota_fields_read_as_overrides_and_empty_is_the_default() {
        let read = |f: [&str; 4]| read_overrides(f.map(str::to_string));
        let o = read(["3", "", " 120 ", ""]).unwrap();
        assert_eq!(
            (o.max_sessions, o.max_gpu_mib, o.max_minutes, o.max_disk_mib),
            (Some(3), None, Some(120), None)
        );
        let o = read(["", "12.5", "", "40"]).unwrap();
        assert_eq!(
            (o.max_gpu_mib, o.max_disk_mib),
            (Some(12_800), Some(40_960))
        );
        assert!(read(["-1", "", "", ""]).unwrap_err().contains("sessions"));
        assert!(read(["", "lots", "", ""]).unwrap_err().contains("GPU GB"));
        assert!(read(["", "", "", "-2"]).unwrap_err().contains("disk GB"));
        assert!(
            read(["", "", "99999999999", ""])
                .unwrap_err()
                .contains("too large")
        );
    }
}
