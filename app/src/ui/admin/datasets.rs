//! The datasets tab: shared datasets, where each lies and who may use it; added and removed
//! here (changed through `PATCH /api/v1/admin/datasets/<id>`).

use super::table::{Outcome, loaded};
use crate::api::{AddDataset, RemoveDataset, admin_datasets};
use crate::domain::datasets::{DatasetView, NewDataset, Users};
use crate::ui::format::local_time;
use crate::ui::hydration::page_resource;
use leptos::prelude::*;

#[component]
pub(super) fn DatasetsTab() -> impl IntoView {
    let add = ServerAction::<AddDataset>::new();
    let remove = ServerAction::<RemoveDataset>::new();
    let data = page_resource(
        move || (add.version().get(), remove.version().get()),
        |_| admin_datasets(),
    );
    let outcome = Outcome::new();
    outcome.follow(
        move || add.pending().get(),
        move || {
            add.value().get().map(|answer| {
                answer.map(|d| {
                    format!(
                        "Added {}: the next sessions of its users find it at ~/datasets/{}.",
                        d.name, d.name
                    )
                })
            })
        },
    );
    outcome.follow(
        move || remove.pending().get(),
        move || {
            remove.value().get().map(|answer| {
                answer.map(|()| "Removed: sessions running keep it until they end.".to_string())
            })
        },
    );
    let (name, place, users, description) = (
        RwSignal::new(String::new()),
        RwSignal::new(String::new()),
        RwSignal::new("everyone".to_string()),
        RwSignal::new(String::new()),
    );
    Effect::new(move |_| {
        if let Some(Ok(_)) = add.value().get() {
            name.set(String::new());
            place.set(String::new());
            description.set(String::new());
        }
    });
    view! {
        <p class="muted">
            "Folders every session of their users finds read-only at ~/datasets/<name>. A launch decides its datasets: one added now appears in the next sessions; one whose folder is gone is left out, and the launch says so."
        </p>
        {loaded(
            data,
            "Loading datasets…",
            move |page| {
                let on_cluster = page.on_cluster;
                // A claim on a cluster (NFS or CSI volumes come through one), else a folder here.
                let where_hint = if on_cluster { "PVC claim name" } else { "/srv/datasets/imagenet" };
                view! {
                    <form
                        class="search add-dataset"
                        on:submit=move |ev: leptos::ev::SubmitEvent| {
                            ev.prevent_default();
                            let whom = users.get_untracked();
                            let users = if whom.trim() == "everyone" {
                                Users::Everyone
                            } else {
                                Users::Named(whom.split(',').map(|n| n.trim().to_string()).collect())
                            };
                            let at = place.get_untracked();
                            let (path, claim) = if on_cluster { (None, Some(at)) } else { (Some(at), None) };
                            add.dispatch(AddDataset {
                                dataset: NewDataset {
                                    name: name.get_untracked(),
                                    description: description.get_untracked(),
                                    path,
                                    claim,
                                    users,
                                },
                            });
                        }
                    >
                        <input aria-label="Name" placeholder="imagenet" required bind:value=name />
                        <input class="reference" aria-label="Where" placeholder=where_hint required bind:value=place />
                        <input aria-label="Users" title="everyone, or user names separated by commas" bind:value=users />
                        <input aria-label="Description" placeholder="What it holds" bind:value=description />
                        <button type="submit" class="primary">"Add dataset"</button>
                    </form>
                    {outcome.view()}
                    <DatasetsTable datasets=page.datasets remove />
                }
                    .into_any()
            },
        )}
    }
}

#[component]
fn DatasetsTable(datasets: Vec<DatasetView>, remove: ServerAction<RemoveDataset>) -> impl IntoView {
    view! {
        <table class="admin-table" data-testid="datasets">
            <thead>
                <tr>
                    <th>"Name"</th>
                    <th>"Where"</th>
                    <th>"Who may use it"</th>
                    <th>"Added"</th>
                    <th></th>
                </tr>
            </thead>
            <tbody>
                {datasets
                    .into_iter()
                    .map(|d| {
                        let place = d.path.clone().or(d.claim.clone()).unwrap_or_default();
                        let whom = match &d.users {
                            Users::Everyone => "everyone".to_string(),
                            Users::Named(names) => names.join(", "),
                        };
                        let id = d.id.clone();
                        view! {
                            <tr data-dataset=d.name.clone()>
                                <td>
                                    <strong>{d.name.clone()}</strong>
                                    <br />
                                    <span class="muted">{d.description.clone()}</span>
                                </td>
                                <td>
                                    <code>{place}</code>
                                    {d.missing.then(|| view! { " " <span class="chip warn">"missing: launches go without it"</span> })}
                                </td>
                                <td>{whom}</td>
                                <td>{local_time(d.created_at_ms)} {d.added_by.map(|by| format!(" by {by}"))}</td>
                                <td>
                                    <button class="danger" on:click=move |_| { remove.dispatch(RemoveDataset { id: id.clone() }); }>
                                        "Remove"
                                    </button>
                                </td>
                            </tr>
                        }
                    })
                    .collect_view()}
            </tbody>
        </table>
    }
}
