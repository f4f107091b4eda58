//! The pool tab: each GPU, its slots and who holds them.

use super::table::loaded;
use crate::api::admin_pool;
use crate::domain::pool::format_mib;
use crate::model::AdminGpu;
use crate::ui::hydration::page_resource;
use leptos::prelude::*;

#[component]
pub(super) fn PoolTab() -> impl IntoView {
    let data = page_resource(|| (), |_| admin_pool());
    view! {
        {loaded(
            data,
            "Loading the pool…",
            |gpus| {
                if gpus.is_empty() {
                    view! { <p class="muted empty">"No GPU is configured: see [pool] in the configuration."</p> }
                        .into_any()
                } else {
                    view! {
                        <crate::ui::charts::PoolMap gpus=gpus.clone() />
                        {gpus.into_iter().map(|gpu| view! { <PoolGpu gpu /> }).collect_view()}
                    }
                        .into_any()
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
