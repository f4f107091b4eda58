//! The audit tab: who did what to whom, newest first.

use super::Tab;
use super::table::{Empty, Pager, SearchForm, SortHeader, loaded};
use crate::api::admin_audit;
use crate::domain::listing::{ListQuery, Page};
use crate::model::AuditLine;
use crate::ui::format::local_time;
use crate::ui::hydration::page_resource;
use leptos::prelude::*;

#[component]
pub(super) fn AuditTab(list: Memo<ListQuery>) -> impl IntoView {
    let data = page_resource(move || list.get(), admin_audit);
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
                    <SortHeader tab=Tab::Audit list key="at" label="When" />
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
                                <td>{local_time(line.at_ms)}</td>
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
