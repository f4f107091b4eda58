//! The usage tab: per user over a period, ready time, slice hours, GPU use and credits charged.

use super::Tab;
use super::table::{Empty, Pager, SearchForm, SortHeader, loaded};
use crate::api::{admin_usage, admin_usage_days};
use crate::domain::credits;
use crate::domain::listing::{ListQuery, Page};
use crate::domain::pool::format_mib;
use crate::model::UsageRow;
use crate::ui::charts::{CostBars, UsageDays};
use crate::ui::hydration::page_resource;
use leptos::prelude::*;

#[component]
pub(super) fn UsageTab(list: Memo<ListQuery>) -> impl IntoView {
    let data = page_resource(move || list.get(), admin_usage);
    let days = page_resource(move || list.get(), admin_usage_days);
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
            "see the GPU, and the credits charged in the period (a running session's so far)."
        </p>
        {loaded(
            days,
            "Loading usage per day…",
            move |days| view! { <UsageDays days testid="usage-days" /> }.into_any(),
        )}
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
    let costs: Vec<(String, i64)> = page
        .items
        .iter()
        .map(|row| (row.user_name.clone(), row.charged))
        .collect();
    view! {
        <CostBars
            items=costs
            testid="cost-per-user"
            caption="Credits charged per user in the period, most first (this page of the table).".to_string()
        />
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_time_reads_in_hours_and_minutes() {
        assert_eq!(format_hours(0), "0 min");
        assert_eq!(format_hours(7 * 60_000 + 59_999), "7 min");
        assert_eq!(format_hours(125 * 60_000), "2 h 05 min");
        assert_eq!(format_hours(-1), "0 min");
    }
}
