//! The pool tab: the pool map, the launches waiting for a slot, and each GPU's slots with who
//! holds them. It only shows, so it comes drawn by the server ([`admin_pool_page`]) and the
//! browser loads no code for it.

use super::table::loaded;
use crate::api::load_admin_pool;
#[cfg(feature = "ssr")]
use crate::domain::pool::format_mib;
#[cfg(feature = "ssr")]
use crate::model::{AdminGpu, AdminQueued};
#[cfg(feature = "ssr")]
use crate::ui::chips::HoldChip;
#[cfg(feature = "ssr")]
use crate::ui::format::local_time;
use crate::ui::hydration::page_resource;
use leptos::prelude::*;

#[component]
pub(super) fn PoolTab() -> impl IntoView {
    let drawn = page_resource(|| (), |_| load_admin_pool());
    // Live: drawn anew every 15 s, the last drawing shown meanwhile.
    #[cfg(feature = "hydrate")]
    if let Ok(handle) =
        set_interval_with_handle(move || drawn.refetch(), std::time::Duration::from_secs(15))
    {
        on_cleanup(move || handle.clear());
    }
    view! {
        {loaded(
            drawn,
            "Loading the pool…",
            |html| view! { <div class="pool-tab" inner_html=html></div> }.into_any(),
        )}
    }
}

/// The pool tab as HTML, drawn with the components below; every text in it is escaped.
#[cfg(feature = "ssr")]
pub fn admin_pool_page(gpus: Vec<AdminGpu>, waiting: Vec<AdminQueued>) -> String {
    let body = if gpus.is_empty() {
        view! { <p class="muted empty">"No GPU is configured: see [pool] in the configuration."</p> }
            .into_any()
    } else {
        view! {
            <crate::ui::pool_map::PoolMap gpus=gpus.clone() />
            <QueueCard waiting />
            {gpus.into_iter().map(|gpu| view! { <PoolGpu gpu /> }).collect_view()}
        }
        .into_any()
    };
    Owner::new().with(|| body.to_html())
}

#[cfg(feature = "ssr")]
#[component]
fn PoolGpu(gpu: AdminGpu) -> impl IntoView {
    let used = gpu.slots.iter().filter(|s| s.state.is_some()).count();
    let total = gpu.slots.len();
    view! {
        <section class="card" data-gpu=gpu.id.clone()>
            <h2>
                {format!("{} · {}", gpu.model, format_mib(gpu.memory_mib))}
                <HoldChip hold=gpu.hold />
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
#[cfg(feature = "ssr")]
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
                                            <td>{local_time(q.queued_at_ms)}</td>
                                            <td>
                                                {q
                                                    .eta_ms
                                                    .map(|at| local_time(at).into_any())
                                                    .unwrap_or_else(|| "after launches not started yet".into_any())}
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

#[cfg(all(test, feature = "ssr"))]
mod tests {
    use super::*;
    use crate::domain::launch::EditorKind;
    use crate::domain::session::SessionState;
    use crate::model::AdminSlot;

    #[test]
    fn the_drawn_pool_shows_the_map_the_line_and_every_slot_with_names_as_text() {
        let odd = "<img src=x onerror=alert(1)>";
        let slot = |id: &str, user: Option<&str>| AdminSlot {
            id: id.into(),
            slice_mib: 8192,
            cores_pct: 50,
            holder: user.map(|_| format!("s-{id}")),
            user_name: user.map(str::to_string),
            editor: user.map(|_| EditorKind::Marimo),
            state: user.map(|_| SessionState::Ready),
            gpu_used_mib: user.map(|_| 2048),
            gpu_util_pct: user.map(|_| 45),
        };
        let gpus = vec![AdminGpu {
            id: "g0".into(),
            model: "L40S".into(),
            memory_mib: 16384,
            hold: crate::domain::hold::SliceHold::Soft,
            slots: vec![slot("g0s0", Some(odd)), slot("g0s1", None)],
        }];
        let waiting = vec![AdminQueued {
            session_id: "q1".into(),
            user_name: "bea".into(),
            editor: EditorKind::JupyterLab,
            slice_mib: 8192,
            burst: false,
            position: 1,
            queued_at_ms: 1_764_640_800_000,
            eta_ms: None,
        }];
        let html = admin_pool_page(gpus, waiting);
        assert!(!html.contains(odd), "markup in a name stays text: {html}");
        assert!(html.contains("&lt;img src=x"), "{html}");
        assert_eq!(html.matches("<g data-slot=").count(), 2, "{html}");
        assert!(html.contains("Queued launches (1)"), "{html}");
        assert!(html.contains("after launches not started yet"), "{html}");
        assert!(html.contains("2 GB · GPU 45 %"), "{html}");
        assert!(html.contains("data-gpu=\"g0\""), "{html}");
        let nothing = admin_pool_page(Vec::new(), Vec::new());
        assert!(nothing.contains("No GPU is configured"), "{nothing}");
    }
}
