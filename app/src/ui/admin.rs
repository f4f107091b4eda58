//! The admin pages: users (roles, locks, credits), every session, the pool per GPU, usage and
//! cost, promotions to approve, the audit log, the settings. Tables page, sort and filter on the
//! server; where the table is (tab, page, sort, search) lives in the address, so a reload or a
//! shared link shows the same rows.

use super::ErrorNotice;
use super::chips::PromotionChip;
use super::format::{format_bytes, format_utc};
use crate::api::{
    AddImage, AdminOpenEditor, AdminStop, ChangeUser, ConfirmAdmin, DecidePromotion, GrantCredits,
    SetImageState, SetUserQuota, admin_access, admin_audit, admin_images, admin_pool,
    admin_promotions, admin_sessions, admin_settings, admin_usage, admin_users, grant_credits,
    set_user_quota,
};
use crate::domain::credits;
use crate::domain::listing::{ListQuery, Page};
use crate::domain::pool::format_mib;
use crate::domain::promotion::{Decision, PromotionState};
use crate::model::{
    AdminAccess, AdminGpu, AdminSession, AdminUser, AuditLine, Confirmation, Role, UsageRow,
    UserChange,
};
use leptos::prelude::*;
use leptos_router::hooks::use_query_map;
use std::collections::HashMap;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tab {
    Users,
    Sessions,
    Pool,
    Images,
    Usage,
    Promotions,
    Audit,
    Settings,
}

impl Tab {
    const ALL: [Tab; 8] = [
        Tab::Users,
        Tab::Sessions,
        Tab::Pool,
        Tab::Images,
        Tab::Usage,
        Tab::Promotions,
        Tab::Audit,
        Tab::Settings,
    ];

    fn parse(name: Option<&str>) -> Tab {
        match name {
            Some("sessions") => Tab::Sessions,
            Some("pool") => Tab::Pool,
            Some("images") => Tab::Images,
            Some("usage") => Tab::Usage,
            Some("promotions") => Tab::Promotions,
            Some("audit") => Tab::Audit,
            Some("settings") => Tab::Settings,
            _ => Tab::Users,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Tab::Users => "users",
            Tab::Sessions => "sessions",
            Tab::Pool => "pool",
            Tab::Images => "images",
            Tab::Usage => "usage",
            Tab::Promotions => "promotions",
            Tab::Audit => "audit",
            Tab::Settings => "settings",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Tab::Users => "Users",
            Tab::Sessions => "Sessions",
            Tab::Pool => "Pool",
            Tab::Images => "Images",
            Tab::Usage => "Usage and cost",
            Tab::Promotions => "Promotions",
            Tab::Audit => "Audit log",
            Tab::Settings => "Settings",
        }
    }
}

/// `/admin?tab=…` with the table's place; what is unset is left out.
fn admin_href(tab: Tab, query: &ListQuery) -> String {
    let mut href = format!("/admin?tab={}", tab.name());
    let mut add = |key: &str, value: Option<String>| {
        if let Some(value) = value.filter(|v| !v.is_empty()) {
            href.push_str(&format!("&{key}={}", encode(&value)));
        }
    };
    add("q", query.q.clone());
    add("filter", query.filter.clone());
    add("sort", query.sort.clone());
    add("page", query.page.filter(|p| *p > 1).map(|p| p.to_string()));
    href
}

/// A query string value, percent-encoded.
fn encode(text: &str) -> String {
    let mut out = String::new();
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[component]
pub fn AdminPage() -> impl IntoView {
    let query = use_query_map();
    let tab = Memo::new(move |_| Tab::parse(query.read().get_str("tab")));
    let list = Memo::new(move |_| {
        let q = query.read();
        ListQuery {
            page: q.get_str("page").and_then(|p| p.parse().ok()),
            per_page: None,
            sort: q.get("sort"),
            q: q.get("q"),
            filter: q.get("filter"),
        }
    });
    let confirm = ServerAction::<ConfirmAdmin>::new();
    let access = Resource::new(move || confirm.version().get(), |_| admin_access());
    view! {
        <header class="topbar">
            <a class="brand" href="/">
                "GPU Sandbox"
            </a>
            <strong>"Admin"</strong>
            <a href="/">"Back to the dashboard"</a>
        </header>
        <main class="admin">
            <Transition fallback=|| view! { <p class="muted">"Loading…"</p> }>
                {move || Suspend::new(async move {
                    match access.await {
                        Ok(AdminAccess { confirmed: true, .. }) => {
                            view! { <AdminTabs tab list /> }.into_any()
                        }
                        Ok(AdminAccess { confirmation, .. }) => {
                            view! { <ConfirmAdmin confirmation confirm /> }.into_any()
                        }
                        Err(error) => view! { <ErrorNotice error /> }.into_any(),
                    }
                })}
            </Transition>
        </main>
    }
}

/// Asks an admin to prove they are at the keyboard before the admin pages open: editors are
/// served from this site, so a script in an editor's page could otherwise act with the cookie.
#[component]
fn ConfirmAdmin(confirmation: Confirmation, confirm: ServerAction<ConfirmAdmin>) -> impl IntoView {
    let password = RwSignal::new(String::new());
    let refused = move || {
        confirm.value().get().and_then(Result::err).map(|e| {
            view! {
                <p class="notice error" role="alert">
                    {e.to_string()}
                </p>
            }
        })
    };
    let body = match confirmation {
        Confirmation::SingleSignOn { provider, .. } => view! {
            <p>
                "Confirm it is you with " {provider.clone()} ": "
                <a rel="external" href="/auth/oidc/login?confirm=true&next=/admin">
                    {format!("Sign in again with {provider}")}
                </a>
            </p>
        }
        .into_any(),
        _ => view! {
            <form
                class="confirm"
                on:submit=move |ev: leptos::ev::SubmitEvent| {
                    ev.prevent_default();
                    confirm.dispatch(ConfirmAdmin { password: password.get_untracked() });
                    password.set(String::new());
                }
            >
                <label>
                    "Your password"
                    <input
                        type="password"
                        name="password"
                        autocomplete="current-password"
                        required
                        bind:value=password
                    />
                </label>
                <button type="submit" class="primary">
                    "Confirm"
                </button>
            </form>
        }
        .into_any(),
    };
    view! {
        <section class="card narrow" aria-labelledby="confirm-title">
            <h1 id="confirm-title">"Confirm it is you"</h1>
            <p class="muted">
                {format!(
                    "The admin pages stay open for {} minutes after you confirm.",
                    crate::domain::scope::ADMIN_CONFIRMATION_MINUTES,
                )}
            </p>
            {refused}
            {body}
        </section>
    }
}

#[component]
fn AdminTabs(tab: Memo<Tab>, list: Memo<ListQuery>) -> impl IntoView {
    let tabs = move || {
        let current = tab.get();
        Tab::ALL
            .into_iter()
            .map(|t| {
                view! {
                    <a
                        href=admin_href(t, &ListQuery::default())
                        class="tab"
                        aria-current=(t == current).then_some("page")
                    >
                        {t.label()}
                    </a>
                }
            })
            .collect_view()
    };
    view! {
        <nav class="tabs" aria-label="Admin sections">
            {tabs}
        </nav>
        {move || match tab.get() {
                Tab::Users => view! { <UsersTab list /> }.into_any(),
                Tab::Sessions => view! { <SessionsTab list /> }.into_any(),
                Tab::Pool => view! { <PoolTab /> }.into_any(),
                Tab::Images => view! { <ImagesTab /> }.into_any(),
                Tab::Usage => view! { <UsageTab list /> }.into_any(),
                Tab::Promotions => view! { <PromotionsTab list /> }.into_any(),
                Tab::Audit => view! { <AuditTab list /> }.into_any(),
                Tab::Settings => view! { <SettingsTab /> }.into_any(),
        }}
    }
}

/// The search box and, where a table has one, its filter; a plain GET form, so that it works
/// before the page's script has loaded too.
#[component]
fn SearchForm(
    tab: Tab,
    list: Memo<ListQuery>,
    placeholder: &'static str,
    filters: &'static [(&'static str, &'static str)],
) -> impl IntoView {
    // Follows the address, which back and forward change without drawing the form anew.
    let filter_select = (!filters.is_empty()).then(|| {
        view! {
            <label>
                "Show "
                <select name="filter">
                    {filters
                        .iter()
                        .map(|(value, label)| {
                            let value = *value;
                            view! {
                                <option
                                    value=value
                                    selected=move || list.get().filter.unwrap_or_default() == value
                                    prop:selected=move || {
                                        list.get().filter.unwrap_or_default() == value
                                    }
                                >
                                    {*label}
                                </option>
                            }
                        })
                        .collect_view()}
                </select>
            </label>
        }
    });
    view! {
        <form class="search" method="get" action="/admin">
            <input type="hidden" name="tab" value=tab.name() />
            <input
                type="hidden"
                name="sort"
                value=move || list.get().sort.unwrap_or_default()
                disabled=move || list.get().sort.is_none()
            />
            <input
                type="search"
                name="q"
                placeholder=placeholder
                aria-label="Search"
                maxlength="100"
                value=move || list.get().q.unwrap_or_default()
                prop:value=move || list.get().q.unwrap_or_default()
            />
            {filter_select}
            <button type="submit">"Search"</button>
        </form>
    }
}

/// A column header that sorts by `key`, and the other way when it sorts by it already.
#[component]
fn SortHeader(
    tab: Tab,
    list: Memo<ListQuery>,
    key: &'static str,
    label: &'static str,
) -> impl IntoView {
    let href = move || {
        let mut q = list.get();
        let now = q.sort.clone().unwrap_or_default();
        q.sort = Some(if now == key {
            format!("-{key}")
        } else {
            key.to_string()
        });
        q.page = None;
        admin_href(tab, &q)
    };
    let mark = move || {
        let now = list.get().sort.unwrap_or_default();
        if now == key {
            " ▲"
        } else if now == format!("-{key}") {
            " ▼"
        } else {
            ""
        }
    };
    let order = move || {
        let now = list.get().sort.unwrap_or_default();
        if now == key {
            Some("ascending")
        } else if now == format!("-{key}") {
            Some("descending")
        } else {
            None
        }
    };
    view! {
        <th aria-sort=order>
            <a href=href>{label}{mark}</a>
        </th>
    }
}

/// A table with no rows here; past its last page, a way back to the first.
#[component]
fn Empty(tab: Tab, list: Memo<ListQuery>, page: u32, text: &'static str) -> impl IntoView {
    let first = (page > 1).then(|| {
        let mut q = list.get_untracked();
        q.page = None;
        view! { <a href=admin_href(tab, &q)>"Back to the first page"</a> }
    });
    view! {
        <p class="muted empty">{text} " " {first}</p>
    }
}

/// "Page 2 of 5 (103)" with links to the pages around it.
#[component]
fn Pager(tab: Tab, list: Memo<ListQuery>, page: u32, pages: u32, total: u64) -> impl IntoView {
    let link = move |to: u32, label: &'static str| {
        let mut q = list.get_untracked();
        q.page = Some(to);
        view! { <a href=admin_href(tab, &q)>{label}</a> }
    };
    view! {
        <nav class="pager" aria-label="Pages">
            {(page > 1).then(|| link(page - 1, "← Previous"))}
            <span class="muted" data-testid="pager">
                {format!("Page {page} of {pages} ({total})")}
            </span>
            {(page < pages).then(|| link(page + 1, "Next →"))}
        </nav>
    }
}

/// `data` drawn by `show` once it has loaded (the last rows stay while the next load), or its
/// error.
fn loaded<T>(
    data: Resource<Result<T, crate::error::AppError>>,
    waiting: &'static str,
    show: impl Fn(T) -> AnyView + Copy + Send + Sync + 'static,
) -> impl IntoView
where
    T: Clone + Send + Sync + serde::Serialize + serde::de::DeserializeOwned + 'static,
{
    view! {
        <Transition fallback=move || view! { <p class="muted">{waiting}</p> }>
            {move || Suspend::new(async move {
                match data.await {
                    Ok(value) => show(value),
                    Err(error) => view! { <ErrorNotice error /> }.into_any(),
                }
            })}
        </Transition>
    }
}

/// An action's refusal, shown until the next attempt.
fn action_error<T>(
    value: impl Fn() -> Option<Result<T, crate::error::AppError>>,
) -> impl Fn() -> Option<AnyView> {
    move || {
        value().and_then(Result::err).map(|e| {
            view! {
                <p class="notice error" role="alert">
                    {e.to_string()}
                </p>
            }
            .into_any()
        })
    }
}

#[component]
fn UsersTab(list: Memo<ListQuery>) -> impl IntoView {
    let change = ServerAction::<ChangeUser>::new();
    // Their answers name the user, so that a row's draft follows its own answer, whichever
    // order the answers to several rows come back in.
    let grant: GrantAction = Action::new(|input: &GrantCredits| {
        let GrantCredits {
            user_id,
            amount,
            note,
        } = input.clone();
        async move { (user_id.clone(), grant_credits(user_id, amount, note).await) }
    });
    let quota: QuotaAction = Action::new(|input: &SetUserQuota| {
        let SetUserQuota { user_id, overrides } = input.clone();
        async move { (user_id.clone(), set_user_quota(user_id, overrides).await) }
    });
    // Reloaded after what succeeded only: a refused grant keeps what was typed in its row.
    let changed = RwSignal::new(0u32);
    let drafts = Drafts::new();
    Effect::new(move |_| {
        if let Some((user_id, Ok(_))) = quota.value().get() {
            drafts.saved(Saved::Quota, &user_id);
            changed.update(|n| *n += 1);
        }
    });
    Effect::new(move |_| {
        if let Some(Ok(_)) = change.value().get() {
            changed.update(|n| *n += 1);
        }
    });
    Effect::new(move |_| {
        if let Some((user_id, Ok(_))) = grant.value().get() {
            drafts.saved(Saved::Grant, &user_id);
            changed.update(|n| *n += 1);
        }
    });
    let data = Resource::new(
        move || (list.get(), changed.get()),
        |(query, _)| admin_users(query),
    );
    let granted = move || {
        grant.value().get().and_then(|(_, answer)| answer.ok()).map(|balance| {
            view! {
                <p class="notice" role="status">
                    {format!("Granted. The balance is now {} credits.", credits::format(balance))}
                </p>
            }
        })
    };
    view! {
        <SearchForm
            tab=Tab::Users
            list
            placeholder="Name"
            filters=&[("all", "everyone"), ("admin", "admins"), ("user", "users"), ("locked", "locked")]
        />
        {action_error(move || change.value().get())}
        {action_error(move || grant.value().get().map(|(_, answer)| answer))}
        {action_error(move || quota.value().get().map(|(_, answer)| answer))}
        {granted}
        {loaded(
            data,
            "Loading users…",
            move |page| view! { <UsersTable page list change grant quota drafts /> }.into_any(),
        )}
    }
}

type GrantAction = Action<GrantCredits, (String, Result<i64, crate::error::AppError>)>;
type QuotaAction = Action<
    SetUserQuota,
    (
        String,
        Result<crate::domain::quota::Limits, crate::error::AppError>,
    ),
>;

/// What an admin has typed into users' rows and not saved yet. After any action succeeds the
/// table reloads and every row is drawn anew, so what was typed lives here, per user, and
/// survives that: a half-typed grant in one row outlives a grant saved in another.
#[derive(Clone, Copy)]
struct Drafts {
    rows: StoredValue<HashMap<String, Draft>>,
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

/// A user's quota overrides as the editor shows them: empty for the configured default.
fn quota_texts(overrides: &crate::domain::quota::Overrides) -> [String; 4] {
    let text = |value: Option<u64>| value.map(|v| v.to_string()).unwrap_or_default();
    [
        text(overrides.max_sessions.map(u64::from)),
        text(overrides.max_gpu_mib),
        text(overrides.max_minutes.map(u64::from)),
        text(overrides.max_disk_mib),
    ]
}

#[component]
fn UsersTable(
    page: Page<AdminUser>,
    list: Memo<ListQuery>,
    change: ServerAction<ChangeUser>,
    grant: GrantAction,
    quota: QuotaAction,
    drafts: Drafts,
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
                    .map(|user| view! { <UserRow user change grant quota drafts /> })
                    .collect_view()}
            </tbody>
        </table>
        <Pager tab=Tab::Users list page=page.page pages total=page.total />
    }
    .into_any()
}

#[component]
fn UserRow(
    user: AdminUser,
    change: ServerAction<ChangeUser>,
    grant: GrantAction,
    quota: QuotaAction,
    drafts: Drafts,
) -> impl IntoView {
    let draft = drafts.of(&user.id, &user.overrides);
    let amount = RwSignal::from(draft.amount.clone());
    let note = RwSignal::from(draft.note.clone());
    let id = user.id.clone();
    let role_change = {
        let id = id.clone();
        let to = if user.role == Role::Admin {
            Role::User
        } else {
            Role::Admin
        };
        move |_| {
            change.dispatch(ChangeUser {
                user_id: id.clone(),
                change: UserChange {
                    role: Some(to),
                    locked: None,
                },
            });
        }
    };
    let lock_change = {
        let id = id.clone();
        let locked = !user.locked;
        move |_| {
            change.dispatch(ChangeUser {
                user_id: id.clone(),
                change: UserChange {
                    role: None,
                    locked: Some(locked),
                },
            });
        }
    };
    let submit_grant = {
        let id = id.clone();
        move |ev: leptos::ev::SubmitEvent| {
            ev.prevent_default();
            grant.dispatch(GrantCredits {
                user_id: id.clone(),
                amount: amount.get_untracked(),
                note: note.get_untracked(),
            });
        }
    };
    let name = user.name.clone();
    view! {
        <tr data-user=user.name.clone()>
            <td>
                {user.name.clone()}
                {user.single_sign_on.then(|| view! { <span class="chip">"single sign-on"</span> })}
                {user.locked.then(|| view! { <span class="chip state-failed">"locked"</span> })}
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
            <td>{format_utc(user.created_at_ms)}</td>
            <td class="row-actions">
                <button
                    on:click=role_change
                    aria-label=if user.role == Role::Admin {
                        format!("Make {name} a user")
                    } else {
                        format!("Make {name} an admin")
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
                <form class="grant" on:submit=submit_grant>
                    <input
                        name="amount"
                        inputmode="decimal"
                        required
                        size="6"
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
                <QuotaEditor user=user.clone() quota draft />
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
                quota.dispatch(SetUserQuota {
                    user_id: id.clone(),
                    overrides,
                });
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
                {field("GPU MiB", gpu)}
                {field("Minutes", minutes)}
                {field("Disk MiB", disk)}
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

/// Sessions, GPU MiB, minutes and disk MiB as typed: empty for the default, else a whole number.
fn read_overrides(fields: [String; 4]) -> Result<crate::domain::quota::Overrides, String> {
    let names = ["sessions", "GPU MiB", "minutes", "disk MiB"];
    let mut values = [None; 4];
    for (i, text) in fields.iter().enumerate() {
        let text = text.trim();
        if !text.is_empty() {
            values[i] = Some(text.parse::<u64>().map_err(|_| {
                format!(
                    "{} must be a whole number, or empty for the default",
                    names[i]
                )
            })?);
        }
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

#[component]
fn SessionsTab(list: Memo<ListQuery>) -> impl IntoView {
    let stop = ServerAction::<AdminStop>::new();
    let data = Resource::new(
        move || (list.get(), stop.version().get()),
        |(query, _)| admin_sessions(query),
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
        {action_error(move || stop.value().get())}
        {loaded(data, "Loading sessions…", move |page| view! { <SessionsTable page list stop /> }.into_any())}
    }
}

#[component]
fn SessionsTable(
    page: Page<AdminSession>,
    list: Memo<ListQuery>,
    stop: ServerAction<AdminStop>,
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
                    <SortHeader tab=Tab::Sessions list key="user" label="User" />
                    <th>"Editor"</th>
                    <th>"Slice"</th>
                    <SortHeader tab=Tab::Sessions list key="state" label="State" />
                    <SortHeader tab=Tab::Sessions list key="created" label="Started" />
                    <th>"Ends / ended"</th>
                    <th></th>
                </tr>
            </thead>
            <tbody>
                {page
                    .items
                    .into_iter()
                    .map(|session| view! { <SessionRow session stop /> })
                    .collect_view()}
            </tbody>
        </table>
        <Pager tab=Tab::Sessions list page=page.page pages total=page.total />
    }
    .into_any()
}

#[component]
fn SessionRow(session: AdminSession, stop: ServerAction<AdminStop>) -> impl IntoView {
    let live = session.state.is_live();
    let ready = session.state == crate::domain::session::SessionState::Ready;
    let id = session.id.clone();
    let enter_id = session.id.clone();
    // Entering a user's editor is a choice of its own, audited. It takes an admin token, never
    // this browser: the user's editor page would run here, with this page's cookie.
    let enter = ServerAction::<AdminOpenEditor>::new();
    let entered = move || {
        enter.value().get().map(|result| match result {
            Ok(access) => view! {
                <p class="muted small" data-testid="enter-editor">
                    {format!(
                        "Granted until {}: reach {} with an admin token (scopes access and admin), e.g. curl -H \"Authorization: Bearer $TOKEN\" …{}api/status. Not from this browser: the user's page would run with your sign-in.",
                        format_utc(access.expires_at_ms),
                        access.url,
                        access.url,
                    )}
                </p>
            }
            .into_any(),
            Err(e) => view! { <span class="error" role="alert">{e.to_string()}</span> }.into_any(),
        })
    };
    let state = match (session.state.is_live(), session.end_reason) {
        (false, Some(reason)) => format!("ended ({})", reason.as_str()),
        _ => session.state.as_str().to_string(),
    };
    let ends = session
        .ended_at_ms
        .or(session.ends_at_ms)
        .map(format_utc)
        .unwrap_or_default();
    let slice = match &session.gpu_model {
        Some(model) => format!("{} on {model}", format_mib(session.slice_mib)),
        None => format_mib(session.slice_mib),
    };
    view! {
        <tr data-session=session.id.clone()>
            <td>{session.user_name.clone()}</td>
            <td>{session.editor.label()}</td>
            <td>{slice}</td>
            <td>
                <span class=format!("chip state-{}", session.state.as_str()) title=session.detail.clone()>
                    {state}
                </span>
            </td>
            <td>{format_utc(session.created_at_ms)}</td>
            <td>{ends}</td>
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
                                    stop.dispatch(AdminStop { id: id.clone() });
                                }
                            >
                                "Stop"
                            </button>
                        }
                    })}
            </td>
        </tr>
    }
}

#[component]
fn PromotionsTab(list: Memo<ListQuery>) -> impl IntoView {
    let decide = ServerAction::<DecidePromotion>::new();
    let data = Resource::new(
        move || (list.get(), decide.version().get()),
        |(query, _)| admin_promotions(query),
    );
    view! {
        <SearchForm
            tab=Tab::Promotions
            list
            placeholder="User, artifact, tag or file"
            filters=&[
                ("all", "all promotions"),
                ("pending", "waiting for approval"),
                ("approved", "approved"),
                ("pushing", "pushing"),
                ("pushed", "pushed"),
                ("rejected", "rejected"),
                ("failed", "failed"),
            ]
        />
        {action_error(move || decide.value().get())}
        {loaded(
            data,
            "Loading promotions…",
            move |page| view! { <PromotionsTable page list decide /> }.into_any(),
        )}
    }
}

#[component]
fn PromotionsTable(
    page: Page<crate::model::PromotionView>,
    list: Memo<ListQuery>,
    decide: ServerAction<DecidePromotion>,
) -> impl IntoView {
    let pages = page.pages();
    if page.items.is_empty() {
        return view! { <Empty tab=Tab::Promotions list page=page.page text="No promotion matches." /> }
            .into_any();
    }
    view! {
        <table class="admin-table" data-testid="admin-promotions">
            <thead>
                <tr>
                    <th>"User"</th>
                    <th>"File"</th>
                    <th>"As"</th>
                    <SortHeader tab=Tab::Promotions list key="requested" label="Requested" />
                    <th>"State"</th>
                    <th></th>
                </tr>
            </thead>
            <tbody>
                {page
                    .items
                    .into_iter()
                    .map(|promotion| view! { <PromotionRow promotion decide /> })
                    .collect_view()}
            </tbody>
        </table>
        <Pager tab=Tab::Promotions list page=page.page pages total=page.total />
    }
    .into_any()
}

#[component]
fn PromotionRow(
    promotion: crate::model::PromotionView,
    decide: ServerAction<DecidePromotion>,
) -> impl IntoView {
    let reason = RwSignal::new(String::new());
    let id = promotion.id.clone();
    let button = move |decision: Decision, label: &'static str, class: &'static str| {
        let id = id.clone();
        view! {
            <button
                class=class
                on:click=move |_| {
                    let text = reason.get_untracked();
                    decide.dispatch(DecidePromotion {
                        id: id.clone(),
                        decision,
                        reason: (!text.trim().is_empty()).then_some(text),
                    });
                }
            >
                {label}
            </button>
        }
    };
    let state = promotion.state;
    // Pending ones are approved, failed ones retried; either may be rejected.
    let first = match state {
        PromotionState::Pending => Some((Decision::Approve, "Approve")),
        PromotionState::Failed => Some((Decision::Retry, "Retry")),
        _ => None,
    };
    let actions = first.map(|(decision, label)| {
        view! {
            <div class="decide">
                {button(decision, label, "primary")}
                <input
                    aria-label="Reason to reject"
                    placeholder="Reason (optional)"
                    maxlength="500"
                    bind:value=reason
                />
                {button(Decision::Reject, "Reject", "danger")}
            </div>
        }
    });
    let detail = promotion
        .reference
        .clone()
        .or_else(|| promotion.message.clone())
        .unwrap_or_default();
    let provenance = format!(
        "session {} · {} · sha256 {}",
        promotion.session_id, promotion.image, promotion.sha256
    );
    view! {
        <tr data-promotion=promotion.id.clone()>
            <td>{promotion.user_name.clone()}</td>
            <td title=provenance>
                {format!(
                    "{} ({})",
                    promotion.path,
                    format_bytes(promotion.size_bytes),
                )}
            </td>
            <td>{format!("{}:{}", promotion.repository, promotion.tag)}</td>
            <td>{format_utc(promotion.requested_at_ms)}</td>
            <td>
                <PromotionChip state />
                <div class="muted small">{detail}</div>
                {promotion
                    .decided_by
                    .clone()
                    .map(|admin| view! { <div class="muted small">{format!("by {admin}")}</div> })}
            </td>
            <td>{actions}</td>
        </tr>
    }
}

#[component]
fn ImagesTab() -> impl IntoView {
    let add = ServerAction::<AddImage>::new();
    let change = ServerAction::<SetImageState>::new();
    let data = Resource::new(
        move || (add.version().get(), change.version().get()),
        |_| admin_images(),
    );
    let editor = RwSignal::new("jupyterlab".to_string());
    let reference = RwSignal::new(String::new());
    let label = RwSignal::new(String::new());
    // Added: the form empties for the next one; refused, what was typed stays.
    Effect::new(move |_| {
        if let Some(Ok(_)) = add.value().get() {
            reference.set(String::new());
            label.set(String::new());
        }
    });
    view! {
        <p class="muted">
            "Images users may choose at launch, besides each editor's configured default. The Kubernetes runtime runs them; the local runtime runs the editors installed on its machine. Pin images by digest (@sha256:…) so that a name cannot change under a running team."
        </p>
        <form
            class="search add-image"
            on:submit=move |ev: leptos::ev::SubmitEvent| {
                ev.prevent_default();
                add.dispatch(AddImage {
                    image: crate::domain::images::NewImage {
                        editor: editor.get_untracked(),
                        reference: reference.get_untracked(),
                        label: label.get_untracked(),
                    },
                });
            }
        >
            <label>
                "Editor "
                <select on:change=move |ev| editor.set(event_target_value(&ev))>
                    {crate::domain::launch::EditorKind::ALL
                        .into_iter()
                        .map(|kind| {
                            view! {
                                <option
                                    value=kind.as_str()
                                    selected=move || editor.get() == kind.as_str()
                                >
                                    {kind.label()}
                                </option>
                            }
                        })
                        .collect_view()}
                </select>
            </label>
            <input
                class="reference"
                aria-label="Image reference"
                placeholder="registry.example.com/team/image:tag@sha256:…"
                required
                bind:value=reference
            />
            <input aria-label="Label" placeholder="PyTorch 2.5, CUDA 12.4" required bind:value=label />
            <button type="submit" class="primary">
                "Add image"
            </button>
        </form>
        {action_error(move || add.value().get())}
        {action_error(move || change.value().get())}
        {loaded(
            data,
            "Loading images…",
            move |images| view! { <ImagesTable images change /> }.into_any(),
        )}
    }
}

#[component]
fn ImagesTable(
    images: Vec<crate::model::ImageView>,
    change: ServerAction<SetImageState>,
) -> impl IntoView {
    use crate::domain::images::ImageState;
    view! {
        <table class="admin-table" data-testid="images">
            <thead>
                <tr>
                    <th>"Editor"</th>
                    <th>"Label"</th>
                    <th>"Reference"</th>
                    <th>"State"</th>
                    <th>"Added"</th>
                    <th></th>
                </tr>
            </thead>
            <tbody>
                {images
                    .into_iter()
                    .map(|image| {
                        let pinned = if image.pinned { "pinned" } else { "by tag: can change" };
                        let added = match (&image.added_by, image.created_at_ms) {
                            (Some(by), Some(at)) => format!("{} by {by}", format_utc(at)),
                            _ => "configuration".to_string(),
                        };
                        let action = image
                            .id
                            .clone()
                            .map(|id| {
                                let (to, label, class) = match image.state {
                                    ImageState::Approved => (ImageState::Retired, "Retire", "danger"),
                                    ImageState::Retired => (ImageState::Approved, "Approve", "primary"),
                                };
                                view! {
                                    <button
                                        class=class
                                        on:click=move |_| {
                                            change.dispatch(SetImageState { id: id.clone(), state: to });
                                        }
                                    >
                                        {label}
                                    </button>
                                }
                            });
                        view! {
                            <tr data-image=image.reference.clone()>
                                <td>{image.editor.label()}</td>
                                <td>{image.label.clone()}</td>
                                <td>
                                    <code>{image.reference.clone()}</code>
                                    " "
                                    <span class="chip">{pinned}</span>
                                </td>
                                <td>{image.state.as_str()}</td>
                                <td>{added}</td>
                                <td>{action}</td>
                            </tr>
                        }
                    })
                    .collect_view()}
            </tbody>
        </table>
    }
}

#[component]
fn PoolTab() -> impl IntoView {
    let data = Resource::new(|| (), |_| admin_pool());
    view! {
        {loaded(
            data,
            "Loading the pool…",
            |gpus| {
                if gpus.is_empty() {
                    view! { <p class="muted empty">"No GPU is configured: see [pool] in the configuration."</p> }
                        .into_any()
                } else {
                    gpus.into_iter().map(|gpu| view! { <PoolGpu gpu /> }).collect_view().into_any()
                }
            },
        )}
    }
}

#[component]
fn PoolGpu(gpu: AdminGpu) -> impl IntoView {
    let used = gpu.slots.iter().filter(|s| s.state.is_some()).count();
    let total = gpu.slots.len();
    view! {
        <section class="card" data-gpu=gpu.id.clone()>
            <h2>
                {format!("{} · {}", gpu.model, format_mib(gpu.memory_mib))}
                <span class="chip">{if gpu.enforced { "enforced" } else { "not enforced" }}</span>
            </h2>
            <p class="muted">{format!("{used} of {total} slots in use · {}", gpu.id)}</p>
            <table class="admin-table">
                <thead>
                    <tr>
                        <th>"Slot"</th>
                        <th>"Slice"</th>
                        <th>"Held by"</th>
                    </tr>
                </thead>
                <tbody>
                    {gpu
                        .slots
                        .into_iter()
                        .map(|slot| {
                            let held = match (&slot.user_name, slot.editor, slot.state) {
                                (Some(user), Some(editor), Some(state)) => {
                                    format!("{user} · {} · {}", editor.label(), state.as_str())
                                }
                                (None, Some(editor), None) => {
                                    format!("pre-started {}", editor.label())
                                }
                                _ if slot.holder.is_some() => "reserved".to_string(),
                                _ => "free".to_string(),
                            };
                            view! {
                                <tr>
                                    <td>{slot.id}</td>
                                    <td>
                                        {format!("{} · {} % cores", format_mib(slot.slice_mib), slot.cores_pct)}
                                    </td>
                                    <td>{held}</td>
                                </tr>
                            }
                        })
                        .collect_view()}
                </tbody>
            </table>
        </section>
    }
}

#[component]
fn UsageTab(list: Memo<ListQuery>) -> impl IntoView {
    let data = Resource::new(move || list.get(), admin_usage);
    view! {
        <SearchForm
            tab=Tab::Usage
            list
            placeholder="User name"
            filters=&[
                ("30d", "the last 30 days"),
                ("7d", "the last 7 days"),
                ("1d", "the last day"),
                ("90d", "the last 90 days"),
            ]
        />
        <p class="muted">
            "The sessions there during the period: their ready time within it, the same weighted "
            "by slice size, the GPU's average utilization and memory in use where the runtime can "
            "see the GPU, and the credits charged in the period."
        </p>
        {loaded(data, "Loading usage…", move |page| view! { <UsageTable page list /> }.into_any())}
    }
}

#[component]
fn UsageTable(page: Page<UsageRow>, list: Memo<ListQuery>) -> impl IntoView {
    let pages = page.pages();
    if page.items.is_empty() {
        return view! { <Empty tab=Tab::Usage list page=page.page text="Nobody used a GPU in this period." /> }
            .into_any();
    }
    let not_measured = || view! { <span class="muted">"not measured"</span> }.into_any();
    view! {
        <table class="admin-table" data-testid="usage">
            <thead>
                <tr>
                    <SortHeader tab=Tab::Usage list key="name" label="User" />
                    <th>"Sessions"</th>
                    <th>"Ready"</th>
                    <SortHeader tab=Tab::Usage list key="hours" label="Slice GiB·h" />
                    <th>"GPU utilization"</th>
                    <th>"GPU memory"</th>
                    <SortHeader tab=Tab::Usage list key="cost" label="Credits charged" />
                </tr>
            </thead>
            <tbody>
                {page
                    .items
                    .into_iter()
                    .map(|row| {
                        view! {
                            <tr data-user=row.user_name.clone()>
                                <td>{row.user_name.clone()}</td>
                                <td>{row.sessions}</td>
                                <td>{format_hours(row.used_ms)}</td>
                                <td>{format!("{:.1}", row.slice_gib_hours())}</td>
                                <td>
                                    {row
                                        .gpu_utilization_pct
                                        .map(|p| view! { {format!("{p} %")} }.into_any())
                                        .unwrap_or_else(not_measured)}
                                </td>
                                <td>
                                    {row
                                        .gpu_memory_mib
                                        .map(|m| view! { {format_mib(m)} }.into_any())
                                        .unwrap_or_else(not_measured)}
                                </td>
                                <td data-testid="charged">{credits::format(row.charged)}</td>
                            </tr>
                        }
                    })
                    .collect_view()}
            </tbody>
        </table>
        <Pager tab=Tab::Usage list page=page.page pages total=page.total />
    }
    .into_any()
}

/// "2 h 05 min", "7 min", "0 min".
fn format_hours(ms: i64) -> String {
    let minutes = ms.max(0) / 60_000;
    match (minutes / 60, minutes % 60) {
        (0, m) => format!("{m} min"),
        (h, m) => format!("{h} h {m:02} min"),
    }
}

#[component]
fn SettingsTab() -> impl IntoView {
    let data = Resource::new(|| (), |_| admin_settings());
    view! {
        <p class="muted">
            "The configuration this server runs with. Change it in the configuration file (or its "
            <code>"SANDBOX_*"</code> " variables) and restart; README lists every key."
        </p>
        {loaded(
            data,
            "Loading the settings…",
            |sections| {
                sections
                    .into_iter()
                    .map(|section| {
                        view! {
                            <section class="card settings">
                                <h2>{section.title}</h2>
                                <dl>
                                    {section
                                        .entries
                                        .into_iter()
                                        .map(|(key, value)| {
                                            view! {
                                                <dt>{key}</dt>
                                                <dd>{value}</dd>
                                            }
                                        })
                                        .collect_view()}
                                </dl>
                            </section>
                        }
                    })
                    .collect_view()
                    .into_any()
            },
        )}
    }
}

#[component]
fn AuditTab(list: Memo<ListQuery>) -> impl IntoView {
    let data = Resource::new(move || list.get(), admin_audit);
    view! {
        <SearchForm tab=Tab::Audit list placeholder="Action, user or detail" filters=&[] />
        {loaded(data, "Loading the audit log…", move |page| view! { <AuditTable page list /> }.into_any())}
    }
}

#[component]
fn AuditTable(page: Page<AuditLine>, list: Memo<ListQuery>) -> impl IntoView {
    let pages = page.pages();
    if page.items.is_empty() {
        return view! { <Empty tab=Tab::Audit list page=page.page text="Nothing in the log matches." /> }
            .into_any();
    }
    view! {
        <table class="admin-table" data-testid="audit">
            <thead>
                <tr>
                    <SortHeader tab=Tab::Audit list key="at" label="When (UTC)" />
                    <th>"Who"</th>
                    <th>"Action"</th>
                    <th>"Target"</th>
                    <th>"Detail"</th>
                </tr>
            </thead>
            <tbody>
                {page
                    .items
                    .into_iter()
                    .map(|line| {
                        let target = match &line.target_name {
                            Some(name) => format!("user {name}"),
                            None => line.target.clone(),
                        };
                        view! {
                            <tr>
                                <td>{format_utc(line.at_ms)}</td>
                                <td>{line.actor.unwrap_or_else(|| "system".into())}</td>
                                <td>
                                    <code>{line.action}</code>
                                </td>
                                <td>{target}</td>
                                <td>{line.detail}</td>
                            </tr>
                        }
                    })
                    .collect_view()}
            </tbody>
        </table>
        <Pager tab=Tab::Audit list page=page.page pages total=page.total />
    }
    .into_any()
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
            assert_eq!(
                quota_of(&drafts.of("u1", &overrides)),
                ["3", "8192", "45", ""]
            );
        });
    }

    #[test]
    fn quota_fields_read_as_overrides_and_empty_is_the_default() {
        let read = |f: [&str; 4]| read_overrides(f.map(str::to_string));
        let o = read(["3", "", " 120 ", ""]).unwrap();
        assert_eq!(
            (o.max_sessions, o.max_gpu_mib, o.max_minutes, o.max_disk_mib),
            (Some(3), None, Some(120), None)
        );
        assert!(read(["-1", "", "", ""]).unwrap_err().contains("sessions"));
        assert!(read(["", "lots", "", ""]).unwrap_err().contains("GPU MiB"));
        assert!(
            read(["", "", "99999999999", ""])
                .unwrap_err()
                .contains("too large")
        );
    }

    #[test]
    fn ready_time_reads_in_hours_and_minutes() {
        assert_eq!(format_hours(0), "0 min");
        assert_eq!(format_hours(7 * 60_000 + 59_999), "7 min");
        assert_eq!(format_hours(125 * 60_000), "2 h 05 min");
        assert_eq!(format_hours(-1), "0 min");
    }

    #[test]
    fn links_keep_the_tables_place_and_encode_it() {
        let query = ListQuery {
            q: Some("a&b c".into()),
            sort: Some("-balance".into()),
            page: Some(2),
            ..ListQuery::default()
        };
        assert_eq!(
            admin_href(Tab::Users, &query),
            "/admin?tab=users&q=a%26b%20c&sort=-balance&page=2"
        );
        assert_eq!(
            admin_href(Tab::Audit, &ListQuery::default()),
            "/admin?tab=audit"
        );
        assert_eq!(Tab::parse(Some("pool")), Tab::Pool);
        assert_eq!(Tab::parse(Some("nonsense")), Tab::Users);
    }
}
