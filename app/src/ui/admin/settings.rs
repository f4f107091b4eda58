//! The settings tab: the configuration this server runs with, read only.

use super::table::loaded;
use crate::api::admin_settings;
use crate::ui::hydration::page_resource;
use leptos::prelude::*;

#[component]
pub(super) fn SettingsTab() -> impl IntoView {
    let data = page_resource(|| (), |_| admin_settings());
    view! {
        <p class="muted">
            "The configuration this server runs with. Change it in the configuration file (or its "
            <code>"SANDBOX_*"</code> " variables) and restart; README lists every key."
        </p>
        {loaded(
            data,
            "Loading the settings…",
            |sections| {
                sections
                    .into_iter()
                    .map(|section| {
                        view! {
                            <section class="card settings">
                                <h2>{section.title}</h2>
                                <dl>
                                    {section
                                        .entries
                                        .into_iter()
                                        .map(|(key, value)| {
                                            view! {
                                                <dt>{key}</dt>
                                                <dd>{value}</dd>
                                            }
                                        })
                                        .collect_view()}
                                </dl>
                            </section>
                        }
                    })
                    .collect_view()
                    .into_any()
            },
        )}
    }
}
