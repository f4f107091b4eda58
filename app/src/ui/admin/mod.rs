//! The admin pages: users (roles, locks, credits), every session, the pool per GPU, usage and cost,
//! promotions to approve, the audit log, the settings. Tables page, sort and filter on the server;
//! where the table is (tab, page, sort, search) lives in the address, so a reload or a shared link
//! shows the same rows.
//!
//! The address is kept by links and a plain GET search form, so the page works before its script
//! has loaded. The tables' server functions take JSON: a table asked for with every default is an
//! empty form, which the form encoding cannot tell from a missing argument. The page is for display
//! only; the server checks every request.
//!
//! `mod.rs` holds the page, its tabs and the links between them; `table.rs` the widgets every table
//! shares; each tab has a file of its own, which imports these two and never another tab.

mod audit;
mod datasets;
mod images;
mod pool;
#[cfg(feature = "ssr")]
pub use pool::admin_pool_page;
mod promotions;
mod sessions;
mod settings;
mod table;
mod usage;
mod users;

use crate::api::{ConfirmAdmin, admin_access};
use crate::domain::encode::{UNRESERVED, percent_encode};
use crate::domain::listing::ListQuery;
use crate::model::{AdminAccess, Confirmation};
use crate::ui::ErrorNotice;
use crate::ui::hydration::page_resource;
use leptos::prelude::*;
use leptos_router::hooks::use_query_map;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tab {
    Users,
    Sessions,
    Pool,
    Images,
    Datasets,
    Usage,
    Promotions,
    Audit,
    Settings,
}

impl Tab {
    const ALL: [Tab; 9] = [
        Tab::Users,
        Tab::Sessions,
        Tab::Pool,
        Tab::Images,
        Tab::Datasets,
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
            Some("datasets") => Tab::Datasets,
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
            Tab::Datasets => "datasets",
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
            Tab::Datasets => "Datasets",
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
            href.push_str(&format!("&{key}={}", percent_encode(&value, UNRESERVED)));
        }
    };
    add("q", query.q.clone());
    add("filter", query.filter.clone());
    add("sort", query.sort.clone());
    add("page", query.page.filter(|p| *p > 1).map(|p| p.to_string()));
    href
}

/// The table's CSV download with its search, filter and sort (every page), where it has one.
fn csv_href(tab: Tab, query: &ListQuery) -> Option<String> {
    let table = match tab {
        Tab::Users => "users",
        Tab::Sessions => "sessions",
        Tab::Usage => "usage",
        Tab::Audit => "audit",
        _ => return None,
    };
    let place = ListQuery {
        page: None,
        ..query.clone()
    };
    let listing = admin_href(tab, &place);
    let rest = listing
        .split_once('&')
        .map(|(_, rest)| format!("?{rest}"))
        .unwrap_or_default();
    Some(format!("/api/v1/admin/{table}.csv{rest}"))
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
    let access = page_resource(move || confirm.version().get(), |_| admin_access());
    view! {
        <leptos_meta::Title text=move || format!("{} · Admin · GPU Sandbox", tab.get().label()) />
        <crate::ui::SubPageBar section="Admin" />
        <main class="admin">
            <h1 class="sr-only">{move || format!("Admin: {}", tab.get().label())}</h1>
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
            view! { <crate::ui::Refusal error=e /> }
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

/// What changes the count of open asks for credits (a grant, a decline, a file) bumps, so the
/// Users tab's label reads it again.
#[derive(Clone, Copy)]
struct AsksChanged(RwSignal<u32>);

/// The Users tab's count of open asks for credits: " (3 asks)", nothing for none.
fn asks_label(open: u32) -> String {
    match open {
        0 => String::new(),
        1 => " (1 ask)".to_string(),
        n => format!(" ({n} asks)"),
    }
}

#[component]
fn AdminTabs(tab: Memo<Tab>, list: Memo<ListQuery>) -> impl IntoView {
    let changed = RwSignal::new(0u32);
    provide_context(AsksChanged(changed));
    let asks = page_resource(
        move || changed.get(),
        |_| crate::api::open_credit_requests(),
    );
    let tabs = move || {
        let current = tab.get();
        Tab::ALL
            .into_iter()
            .map(|t| {
                let count = (t == Tab::Users).then(|| {
                    view! {
                        <Transition fallback=|| ()>
                            {move || Suspend::new(async move {
                                asks.await.map(asks_label).unwrap_or_default()
                            })}
                        </Transition>
                    }
                });
                view! {
                    <a
                        href=admin_href(t, &ListQuery::default())
                        class="tab"
                        aria-current=(t == current).then_some("page")
                        data-testid=format!("tab-{}", t.name())
                    >
                        {t.label()}
                        {count}
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
                Tab::Users => view! { <users::UsersTab list /> }.into_any(),
                Tab::Sessions => view! { <sessions::SessionsTab list /> }.into_any(),
                Tab::Pool => view! { <pool::PoolTab /> }.into_any(),
                Tab::Images => view! { <images::ImagesTab /> }.into_any(),
                Tab::Datasets => view! { <datasets::DatasetsTab /> }.into_any(),
                Tab::Usage => view! { <usage::UsageTab list /> }.into_any(),
                Tab::Promotions => view! { <promotions::PromotionsTab list /> }.into_any(),
                Tab::Audit => view! { <audit::AuditTab list /> }.into_any(),
                Tab::Settings => view! { <settings::SettingsTab /> }.into_any(),
        }}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let q = ListQuery {
            q: Some("a&b".into()),
            page: Some(3),
            ..ListQuery::default()
        };
        assert_eq!(
            csv_href(Tab::Audit, &q).as_deref(),
            Some("/api/v1/admin/audit.csv?q=a%26b"),
            "every page, the same search"
        );
        assert_eq!(
            csv_href(Tab::Users, &ListQuery::default()).as_deref(),
            Some("/api/v1/admin/users.csv")
        );
        assert_eq!(csv_href(Tab::Pool, &q), None);
        assert_eq!(Tab::parse(Some("nonsense")), Tab::Users);
    }

    #[test]
    fn the_users_tab_counts_open_asks_in_words() {
        assert_eq!(asks_label(0), "");
        assert_eq!(asks_label(1), " (1 ask)");
        assert_eq!(asks_label(3), " (3 asks)");
    }
}
