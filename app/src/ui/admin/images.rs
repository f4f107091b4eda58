//! The images tab: the images users may choose at launch, added, retired or approved again.

use super::table::{Outcome, loaded};
use crate::api::{AddImage, SetImageState, admin_images};
use crate::ui::format::format_utc;
use leptos::prelude::*;

#[component]
pub(super) fn ImagesTab() -> impl IntoView {
    let add = ServerAction::<AddImage>::new();
    let change = ServerAction::<SetImageState>::new();
    let data = Resource::new(
        move || (add.version().get(), change.version().get()),
        |_| admin_images(),
    );
    let outcome = Outcome::new();
    outcome.follow(
        move || add.pending().get(),
        move || {
            add.value().get().map(|answer| {
                answer.map(|image| format!("Added {}: users may choose it at launch.", image.label))
            })
        },
    );
    outcome.follow(
        move || change.pending().get(),
        move || {
            change.value().get().map(|answer| {
                answer.map(|image| match image.state {
                    crate::domain::images::ImageState::Approved => {
                        format!("Approved {}: users may choose it at launch.", image.label)
                    }
                    crate::domain::images::ImageState::Retired => format!(
                        "Retired {}: no longer offered; sessions running it keep it.",
                        image.label
                    ),
                })
            })
        },
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
        {outcome.view()}
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
