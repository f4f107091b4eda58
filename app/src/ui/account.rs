//! The person's own account: their name and role, and a new password for a local account. A
//! sign-in whose password an admin set (or the first run printed) lands here and may do nothing
//! else until it has chosen its own.

use super::format::{hard_navigate, submitted};
use crate::api::{ChangePassword, whoami};
use crate::domain::accounts::MIN_PASSWORD_CHARS;
use crate::domain::paths::is_local_path;
use crate::ui::hydration::page_resource;
use leptos::prelude::*;
use leptos::server_fn::ServerFn;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;

#[component]
pub fn AccountPage() -> impl IntoView {
    let change = ServerAction::<ChangePassword>::new();
    let viewer = page_resource(move || change.version().get(), |_| whoami());
    let query = use_query_map();
    // The one the person chose must be typed twice; checked here, the server checks the rest.
    let (new, set_new) = signal(String::new());
    let (again, set_again) = signal(String::new());
    let mismatch = move || !again.get().is_empty() && new.get() != again.get();
    Effect::new(move |_| {
        if let Some(Ok(())) = change.value().get() {
            set_new.set(String::new());
            set_again.set(String::new());
            // Sent here before going on: go on now.
            if let Some(next) = query
                .read_untracked()
                .get("next")
                .filter(|n| is_local_path(n))
            {
                hard_navigate(&next);
            }
        }
    });
    let outcome = move || match change.value().get() {
        Some(Ok(())) => Some(
            view! {
                <p class="notice" role="status" data-testid="password-changed">
                    "Your password is changed. Use it at your next sign-in."
                </p>
            }
            .into_any(),
        ),
        Some(Err(e)) => Some(
            view! {
                <p class="notice error" role="alert" data-testid="password-error">
                    {crate::ui::format::sentence(&e.to_string())}
                </p>
            }
            .into_any(),
        ),
        None => None,
    };
    view! {
        <Title text="Your account · GPU Sandbox" />
        <super::SubPageBar />
        <main class="narrow account">
            <h1>"Your account"</h1>
            <Transition fallback=|| view! { <p class="muted">"Loading…"</p> }>
                {move || Suspend::new(async move {
                    match viewer.await {
                        Ok(Some(viewer)) => {
                            let must = viewer.must_change_password;
                            view! {
                                <p data-testid="account-name">
                                    "Signed in as " <strong>{viewer.name.clone()}</strong>
                                    {(viewer.role == crate::model::Role::Admin)
                                        .then(|| view! { " " <span class="chip">"admin"</span> })}
                                </p>
                                {must
                                    .then(|| {
                                        view! {
                                            <p class="notice warn" role="alert" data-testid="must-change">
                                                "Your password was set by an admin (or printed when the server first ran). Choose your own to go on."
                                            </p>
                                        }
                                    })}
                            }
                                .into_any()
                        }
                        Ok(None) => view! { <super::ErrorNotice error=crate::error::AppError::Unauthenticated /> }.into_any(),
                        Err(error) => view! { <super::ErrorNotice error /> }.into_any(),
                    }
                })}
            </Transition>
            <h2>"Change your password"</h2>
            <form
                method="post"
                action=ChangePassword::PATH
                class="stack"
                data-testid="password-form"
                on:submit=move |ev| {
                    ev.prevent_default();
                    change.dispatch(ChangePassword {
                        current: submitted(&ev, "current"),
                        new: submitted(&ev, "new"),
                    });
                }
            >
                <label>
                    "Current password"
                    <input type="password" name="current" autocomplete="current-password" required />
                </label>
                <label>
                    "New password"
                    <input
                        type="password"
                        name="new"
                        autocomplete="new-password"
                        required
                        minlength=MIN_PASSWORD_CHARS.to_string()
                        prop:value=new
                        on:input=move |ev| set_new.set(event_target_value(&ev))
                    />
                </label>
                <label>
                    "New password again"
                    <input
                        type="password"
                        autocomplete="new-password"
                        required
                        prop:value=again
                        on:input=move |ev| set_again.set(event_target_value(&ev))
                    />
                </label>
                <p class="muted">{format!("At least {MIN_PASSWORD_CHARS} characters.")}</p>
                {move || {
                    mismatch()
                        .then(|| {
                            view! {
                                <p class="notice error" role="alert">
                                    "The two new passwords differ."
                                </p>
                            }
                        })
                }}
                {outcome}
                <button
                    type="submit"
                    class="primary"
                    disabled=move || change.pending().get() || mismatch()
                >
                    {move || if change.pending().get() { "Changing…" } else { "Change password" }}
                </button>
            </form>
        </main>
    }
}
