//! The dashboard's "Your workspace" card: a download of the whole workspace, and where backups
//! are on, the snapshots with a Restore each. It only shows and posts plain forms (the server
//! answers them with a page of its own), so it is drawn by the server ([`backups_drawn`]) and
//! the browser loads no code for it.

#[cfg(feature = "ssr")]
use super::format::local_time;
#[cfg(feature = "ssr")]
use crate::model::BackupsView;
#[cfg(feature = "ssr")]
use leptos::prelude::*;

/// The card's inside as HTML: `backups` is the user's view, or why it could not be read.
#[cfg(feature = "ssr")]
pub fn backups_drawn(backups: Result<BackupsView, String>) -> String {
    Owner::new().with(|| view! { <BackupsCard backups /> }.to_html())
}

#[cfg(feature = "ssr")]
#[component]
fn BackupsCard(backups: Result<BackupsView, String>) -> impl IntoView {
    let download = view! {
        <p>
            <a href="/api/v1/workspace/export" download data-testid="export-workspace">
                "Download your workspace (.tar.gz)"
            </a>
            <span class="muted">
                " · a folder alone: /api/v1/workspace/export?path=<folder>"
            </span>
        </p>
    };
    let rest = match backups {
        Err(why) => view! { <p class="error">{why}</p> }.into_any(),
        Ok(view) if !view.enabled => view! {
            <p class="muted">"This server does not back workspaces up: keep a download of what matters."</p>
        }
        .into_any(),
        Ok(view) => view! { <Snapshots view /> }.into_any(),
    };
    view! {
        {download}
        {rest}
    }
}

#[cfg(feature = "ssr")]
#[component]
fn Snapshots(view: BackupsView) -> impl IntoView {
    let last = match &view.last {
        None => view! { <span>"none yet"</span> }.into_any(),
        Some(l) if l.ok => view! { <span>{l.attempted_at_ms.map(local_time)}</span> }.into_any(),
        Some(l) => view! {
            <span class="error">"failed " {l.attempted_at_ms.map(local_time)}</span>
        }
        .into_any(),
    };
    let rows = view
        .snapshots
        .into_iter()
        .map(|s| {
            let action = format!("/api/v1/backups/{}/restore", s.short_id);
            view! {
                <tr>
                    <td>{local_time(s.taken_at_ms)}</td>
                    <td>
                        <code>{s.short_id}</code>
                    </td>
                    <td>
                        <form method="post" action=action class="inline">
                            <input
                                name="path"
                                aria-label="File or folder to restore (empty: everything)"
                                placeholder="a file or folder; empty: all"
                            />
                            <button type="submit">"Restore"</button>
                        </form>
                    </td>
                </tr>
            }
        })
        .collect_view();
    view! {
        <p class="muted">
            "Backed up " {view.schedule} "; kept: " {view.kept}
            ". A restore goes into a new folder restored-<date> of your workspace, never over your files. Last backup: "
            {last}
        </p>
        <form method="post" action="/api/v1/backups" class="inline">
            <button type="submit">"Back up now"</button>
        </form>
        <table class="admin-table" data-testid="snapshots">
            <thead>
                <tr>
                    <th>"Taken"</th>
                    <th>"Snapshot"</th>
                    <th>"Restore"</th>
                </tr>
            </thead>
            <tbody>{rows}</tbody>
        </table>
    }
}
