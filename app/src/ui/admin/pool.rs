//! The pool tab: each GPU, its slots and who holds them, and the launches waiting for one.

use super::table::loaded;
use crate::api::{admin_pool, admin_queue};
use crate::domain::pool::format_mib;
use crate::model::{AdminGpu, AdminQueued};
use crate::ui::format::format_utc;
use crate::ui::hydration::page_resource;
use leptos::prelude::*;

#[component]
pub(super) fn PoolTab() -> impl IntoView {
    let data = page_resource(|| (), |_| admin_pool());
    let queue = page_resource(|| (), |_| admin_queue());
    view! {
        {loaded(
            data,
            "Loading the pool…",
            move |gpus| {
                if gpus.is_empty() {
                    view! { <p class="muted empty">"No GPU is configured: see [pool] in the configuration."</p> }
                        .into_any()
                } else {
                    view! {
                        <crate::ui::charts::PoolMap gpus=gpus.clone() />
                        {loaded(
                            queue,
                            "Loading the queue…",
                            |waiting| view! { <QueueCard waiting /> }.into_any(),
                        )}
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
                        <th>"In use"</th>
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
                            let in_use = match (slot.gpu_used_mib, slot.gpu_util_pct) {
                                (Some(mib), Some(pct)) => format!("{} · GPU {pct} %", format_mib(mib)),
                                (Some(mib), None) => format_mib(mib),
                                _ if slot.user_name.is_some() => "not sampled".to_string(),
                                _ => String::new(),
                            };
                            view! {
                                <tr>
                                    <td>{slot.id}</td>
                                    <td>
                                        {format!("{} · {} % cores", format_mib(slot.slice_mib), slot.cores_pct)}
                                    </td>
                                    <td>{held}</td>
                                    <td>{in_use}</td>
                                </tr>
                            }
                        })
                        .collect_view()}
                </tbody>
            </table>
        </section>
    }
}

/// The launches waiting for a slot, in line per size: what the map's full cards hold back.
#[component]
fn QueueCard(waiting: Vec<AdminQueued>) -> impl IntoView {
    view! {
        <section class="card" data-testid="admin-queue" aria-labelledby="queue-title">
            <h2 id="queue-title">{format!("Queued launches ({})", waiting.len())}</h2>
            {if waiting.is_empty() {
                view! { <p class="muted">"Nobody is waiting: every launch found a slot."</p> }.into_any()
            } else {
                view! {
                    <table class="admin-table">
                        <thead>
                            <tr>
                                <th>"Place"</th>
                                <th>"User"</th>
                                <th>"Editor"</th>
                                <th>"Size"</th>
                                <th>"Waiting since"</th>
                                <th>"Expected start"</th>
                            </tr>
                        </thead>
                        <tbody>
                            {waiting
                                .into_iter()
                                .map(|q| {
                                    let size = if q.burst {
                                        format!("whole card · {}", format_mib(q.slice_mib))
                                    } else {
                                        format_mib(q.slice_mib)
                                    };
                                    view! {
                                        <tr data-session-id=q.session_id>
                                            <td>{q.position}</td>
                                            <td>{q.user_name}</td>
                                            <td>{q.editor.label()}</td>
                                            <td>{size}</td>
                                            <td>{format!("{} UTC", format_utc(q.queued_at_ms))}</td>
                                            <td>
                                                {q
                                                    .eta_ms
                                                    .map(|at| format!("{} UTC", format_utc(at)))
                                                    .unwrap_or_else(|| "after launches not started yet".into())}
                                            </td>
                                        </tr>
                                    }
                                })
                                .collect_view()}
                        </tbody>
                    </table>
                }
                    .into_any()
            }}
        </section>
    }
}
