//! What every admin table shares: the search form, sortable headers, the pager, the empty and
//! loading states, and an action's refusal.

use super::{Tab, admin_href};
use crate::domain::listing::ListQuery;
use crate::ui::ErrorNotice;
use leptos::prelude::*;

/// The search box and, where a table has one, its filter; a plain GET form, so that it works
/// before the page's script has loaded too.
#[component]
pub(super) fn SearchForm(
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
            {move || {
                super::csv_href(tab, &list.get())
                    .map(|href| {
                        view! {
                            <a class="csv" href=href download data-testid="csv-download">
                                "Download CSV"
                            </a>
                        }
                    })
            }}
        </form>
    }
}

/// A column header that sorts by `key`, and the other way when it sorts by it already.
#[component]
pub(super) fn SortHeader(
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
pub(super) fn Empty(
    tab: Tab,
    list: Memo<ListQuery>,
    page: u32,
    text: &'static str,
) -> impl IntoView {
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
pub(super) fn Pager(
    tab: Tab,
    list: Memo<ListQuery>,
    page: u32,
    pages: u32,
    total: u64,
) -> impl IntoView {
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
pub(super) fn loaded<T>(
    data: Resource<Result<T, crate::error::AppError>, crate::ui::hydration::PageJson>,
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

/// What the last action on a tab came to, in one line: its success in words or its refusal.
/// Sending an action clears it and its answer replaces it, so that an old refusal never stays
/// beside a later success. The second field counts the actions sent.
#[derive(Clone, Copy)]
pub(super) struct Outcome(RwSignal<Option<Result<String, String>>>, RwSignal<u64>);

impl Outcome {
    pub(super) fn new() -> Outcome {
        Outcome(RwSignal::new(None), RwSignal::new(0))
    }

    /// Empties `shown` whenever an action is sent: what it shows (a password made once)
    /// belongs to the action that made it, and goes with the next.
    pub(super) fn owns<T: Send + Sync + 'static>(self, shown: RwSignal<Option<T>>) {
        Effect::new(move |first: Option<()>| {
            self.1.track();
            if first.is_some() {
                shown.set(None);
            }
        });
    }

    /// Follows one action: `pending` while it is sent, `answer` its success told in words.
    pub(super) fn follow(
        self,
        pending: impl Fn() -> bool + Send + Sync + 'static,
        answer: impl Fn() -> Option<Result<String, crate::error::AppError>> + Send + Sync + 'static,
    ) {
        Effect::new(move |_| {
            if pending() {
                self.0.set(None);
                self.1.update(|n| *n += 1);
            }
        });
        Effect::new(move |_| {
            if let Some(answer) = answer() {
                self.0.set(Some(
                    answer.map_err(|e| crate::ui::format::sentence(&e.to_string())),
                ));
            }
        });
    }

    pub(super) fn view(self) -> impl IntoView {
        move || {
            self.0.get().map(|outcome| match outcome {
                Ok(said) => view! {
                    <p class="notice" role="status" data-testid="outcome">
                        {said}
                    </p>
                }
                .into_any(),
                Err(refused) => view! {
                    <p class="notice error" role="alert" data-testid="outcome">
                        {refused}
                    </p>
                }
                .into_any(),
            })
        }
    }
}
