//! Promotion in the pages: "Promote" in a session's toolbar sends a file of the workspace to
//! the production registry; the dashboard lists the user's promotions and where each stands.

#[cfg(feature = "ssr")]
use super::chips::PromotionChip;
use super::format::format_bytes;
#[cfg(feature = "ssr")]
use super::format::local_time;
use crate::api::PromoteFile;
use crate::domain::promotion::{PromotionRequest, PromotionState};
#[cfg(feature = "ssr")]
use crate::model::PromotionView;
use leptos::prelude::*;

/// The toolbar's menu: which file, under which name and tag. What was typed stays after a
/// refusal, so that one wrong field is all there is to fix.
#[component]
pub fn PromoteMenu(session_id: String) -> impl IntoView {
    let path = RwSignal::new(String::new());
    let name = RwSignal::new(String::new());
    let tag = RwSignal::new(String::new());
    let promote = ServerAction::<PromoteFile>::new();
    let outcome = move || {
        promote.value().get().map(|result| match result {
            Ok(p) => {
                let next = if p.state == PromotionState::Pending {
                    "it waits for an admin's approval"
                } else {
                    "it is being pushed"
                };
                view! {
                    <p class="notice ok" role="status" data-testid="promote-outcome">
                        {format!(
                            "Marked {} ({}) as {}:{}; {next}. ",
                            p.path,
                            format_bytes(p.size_bytes),
                            p.repository,
                            p.tag,
                        )}
                        <a href="/#promotions">"See your promotions"</a>
                    </p>
                }
                .into_any()
            }
            Err(e) => view! {
                <p class="notice error" role="alert" data-testid="promote-outcome">
                    {crate::ui::format::sentence(&e.to_string())}
                </p>
            }
            .into_any(),
        })
    };
    view! {
        <details class="promote">
            <summary>"Promote"</summary>
            <form
                class="promote-form"
                on:submit=move |ev: leptos::ev::SubmitEvent| {
                    ev.prevent_default();
                    let tag = tag.get_untracked();
                    promote.dispatch(PromoteFile {
                        session_id: session_id.clone(),
                        request: PromotionRequest {
                            path: path.get_untracked(),
                            name: name.get_untracked(),
                            tag: (!tag.trim().is_empty()).then_some(tag),
                        },
                    });
                }
            >
                <p class="muted">
                    "Send a file of your workspace to the production registry, with where it came from."
                </p>
                <label>
                    "File in your workspace"
                    <input
                        name="path"
                        placeholder="models/model.safetensors"
                        required
                        bind:value=path
                    />
                </label>
                <label>
                    "Name"
                    <input name="name" placeholder="my-model" required bind:value=name />
                </label>
                <label>
                    "Tag"
                    <input name="tag" placeholder="latest" bind:value=tag />
                </label>
                <button type="submit" class="primary" disabled=move || promote.pending().get()>
                    {move || if promote.pending().get() { "Copying…" } else { "Promote" }}
                </button>
                {outcome}
            </form>
        </details>
    }
}

/// The dashboard's list of the user's promotions, drawn on the server into the page's card.
#[cfg(feature = "ssr")]
#[component]
pub fn PromotionsDrawn(promotions: crate::model::Promotions) -> impl IntoView {
    let approval = if promotions.needs_approval {
        "An admin approves each file before it is pushed."
    } else {
        "Files are pushed as soon as they are marked."
    };
    view! {
        <p class="muted">{approval}</p>
        <PromotionList items=promotions.items />
    }
}

#[cfg(feature = "ssr")]
#[component]
fn PromotionList(items: Vec<PromotionView>) -> impl IntoView {
    if items.is_empty() {
        return view! {
            <p class="muted empty">
                "No promotion yet. In a running session, choose Promote in its toolbar to send a file to the registry."
            </p>
        }
        .into_any();
    }
    view! {
        <table class="admin-table" data-testid="promotions">
            <thead>
                <tr>
                    <th>"File"</th>
                    <th>"As"</th>
                    <th>"State"</th>
                    <th>"Requested"</th>
                    <th>"Result"</th>
                </tr>
            </thead>
            <tbody>
                {items
                    .into_iter()
                    .map(|p| {
                        let result = p
                            .reference
                            .clone()
                            .map(|r| view! { <code>{r}</code> }.into_any())
                            .or_else(|| p.message.clone().map(|m| view! { <span>{m}</span> }.into_any()));
                        view! {
                            <tr data-promotion=p.id.clone()>
                                <td>{format!("{} ({})", p.path, format_bytes(p.size_bytes))}</td>
                                <td>{format!("{}:{}", p.repository, p.tag)}</td>
                                <td>
                                    <PromotionChip state=p.state />
                                </td>
                                <td>{local_time(p.requested_at_ms)}</td>
                                <td>{result}</td>
                            </tr>
                        }
                    })
                    .collect_view()}
            </tbody>
        </table>
    }
    .into_any()
}
