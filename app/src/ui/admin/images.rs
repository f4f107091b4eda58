//! The images tab: the images users may choose at launch, added, retired or approved again.

use super::table::{Outcome, loaded};
use crate::api::{AddImage, SetImageState, admin_images};
use crate::ui::format::local_time;
use crate::ui::hydration::page_resource;
use leptos::prelude::*;

#[component]
pub(super) fn ImagesTab() -> impl IntoView {
    let add = ServerAction::<AddImage>::new();
    let change = ServerAction::<SetImageState>::new();
    let data = page_resource(
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
            "Images users may choose at launch, besides each editor's configured default. Pin images by digest (@sha256:…) so that a name cannot change under a running team."
        </p>
        <p class="muted">
            "Each added image carries its scan: post the scanner's report (Trivy's JSON or SARIF) to "
            <code>"POST /api/v1/admin/images/<id>/scans"</code>
            " with an admin token, e.g. from CI after "
            <code>"trivy image -f json"</code>
            ". The scan policy (Settings, Image scans) decides whether an image may be approved and launched."
        </p>
        {loaded(
            data,
            "Loading images…",
            move |page| {
                view! {
                    <AddImageForm runs_images=page.runs_images add editor reference label />
                    {outcome.view()}
                    <ImagesTable images=page.images change />
                }
                    .into_any()
            },
        )}
    }
}

/// The form that adds an image. The local runtime runs the editors installed on its machine,
/// so there an added image would be offered to nobody: the form says so and stays off.
#[component]
fn AddImageForm(
    runs_images: bool,
    add: ServerAction<AddImage>,
    editor: RwSignal<String>,
    reference: RwSignal<String>,
    label: RwSignal<String>,
) -> impl IntoView {
    view! {
        {(!runs_images)
            .then(|| {
                view! {
                    <p class="notice" data-testid="images-not-run">
                        "This server runs editors as processes on its own machine, from the editors installed there, not images: adding images takes effect on a Kubernetes install (runtime = \"kube\")."
                    </p>
                }
            })}
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
            <fieldset disabled=!runs_images>
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
            </fieldset>
        </form>
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
                    <th>"Scan"</th>
                    <th>"Added"</th>
                    <th></th>
                </tr>
            </thead>
            <tbody>
                {images
                    .into_iter()
                    .map(|image| {
                        let pinned = if image.pinned { "pinned" } else { "by tag: can change" };
                        let added = match (image.added_by.clone(), image.created_at_ms) {
                            (Some(by), Some(at)) => view! { {local_time(at)} {format!(" by {by}")} }.into_any(),
                            _ => "configuration".into_any(),
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
                                <td class="scan">
                                    <ScanCell scan=image.scan.clone() blocked=image.blocked.clone() default=image.id.is_none() />
                                </td>
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

/// An image's newest scan: findings by severity, what has a fix, the report's age, and the
/// policy's verdict.
#[component]
fn ScanCell(
    scan: Option<crate::model::ScanView>,
    blocked: Option<String>,
    default: bool,
) -> impl IntoView {
    use crate::domain::scan::Severity;
    if default {
        return view! { <span class="muted">"the platform's own (configuration)"</span> }
            .into_any();
    }
    let verdict = match blocked {
        Some(why) => view! {
            <p class="scan-verdict blocked" data-testid="scan-blocked">
                "Held back: "
                {why}
            </p>
        }
        .into_any(),
        None => view! { <p class="scan-verdict passes">"Passes the scan policy"</p> }.into_any(),
    };
    let Some(scan) = scan else {
        return view! {
            <span class="muted">"No report"</span>
            {verdict}
        }
        .into_any();
    };
    let summary = &scan.summary;
    let counts = Severity::ALL
        .into_iter()
        .filter(|s| summary.found.of(*s) > 0)
        .map(|s| {
            let found = summary.found.of(s);
            let fixable = summary.fixable.of(s);
            let title = format!("{fixable} of {found} {} with a fix available", s.as_str());
            view! {
                <span class=format!("chip severity-{}", s.as_str()) title=title data-severity=s.as_str()>
                    {format!("{found} {}", s.as_str())}
                </span>
                " "
            }
        })
        .collect_view();
    let clean =
        (summary.found.total() == 0).then_some(view! { <span class="chip">"no findings"</span> });
    let age_days = (crate::ui::format::now_ms() - scan.facts().scanned_at_ms).max(0) / 86_400_000;
    let age = match age_days {
        0 => "today".to_string(),
        1 => "1 day ago".to_string(),
        n => format!("{n} days ago"),
    };
    let fixable = summary.fixable.total();
    let top = summary
        .top
        .iter()
        .take(3)
        .map(|f| {
            let fix = f
                .fixed_in
                .as_ref()
                .map(|v| format!(", fixed in {v}"))
                .unwrap_or_default();
            view! { <li>{format!("{} ({}) in {}{fix}", f.id, f.severity.as_str(), if f.package.is_empty() { "?" } else { &f.package })}</li> }
        })
        .collect_view();
    view! {
        <div class="scan-counts" data-testid="scan-counts">{counts}{clean}</div>
        <p class="muted">
            {format!("{fixable} with a fix · scanned {age} (")}
            {local_time(scan.facts().scanned_at_ms)}
            {format!(
                ") by {} · posted by {}",
                summary.scanner,
                scan.posted_by.clone().unwrap_or_else(|| "a removed user".into())
            )}
        </p>
        <ul class="scan-top">{top}</ul>
        {verdict}
    }
    .into_any()
}
