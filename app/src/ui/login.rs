use super::format::{hard_navigate, submitted};
use crate::api::Login;
use crate::domain::encode::{PATH, percent_encode};
use crate::domain::paths::is_local_path;
use crate::ui::hydration::page_resource;
use leptos::prelude::*;
use leptos::server_fn::ServerFn;
use leptos_router::hooks::{use_navigate, use_query_map};

#[component]
pub fn LoginPage() -> impl IntoView {
    let login = ServerAction::<Login>::new();
    let navigate = use_navigate();
    let query = use_query_map();
    Effect::new(move |_| {
        if let Some(Ok(viewer)) = login.value().get() {
            // Back to where the visitor was sent from (an editor link, say), if it is one of ours;
            // by their account page first when their password must be changed.
            let next = query
                .read_untracked()
                .get("next")
                .filter(|n| is_local_path(n));
            match (viewer.must_change_password, next) {
                (true, next) => navigate(
                    &crate::domain::paths::after_password_change(next.as_deref()),
                    Default::default(),
                ),
                (false, Some(next)) => hard_navigate(&next),
                (false, None) => navigate("/", Default::default()),
            }
        }
    });
    let error = move || {
        let message = match login.value().get() {
            Some(Err(e)) => Some(crate::ui::format::sentence(&e.to_string())),
            Some(Ok(_)) => None,
            // Back from the identity provider without a sign-in.
            None => query
                .read()
                .get("sso")
                .map(|code| sso_message(&code).to_string()),
        };
        message.map(|message| {
            view! {
                <p class="notice error" role="alert" data-testid="login-error">
                    {message}
                </p>
            }
        })
    };
    let provider = page_resource(|| (), |_| crate::api::single_sign_on());
    let sso_href = move || {
        let next = query.read().get("next").filter(|n| is_local_path(n));
        match next {
            Some(next) => format!("/auth/oidc/login?next={}", percent_encode(&next, PATH)),
            None => "/auth/oidc/login".to_string(),
        }
    };
    let sso = move || {
        provider.get().and_then(Result::ok).flatten().map(|name| {
            view! {
                // A full page load: the provider is not one of the router's pages.
                <a class="button sso" href=sso_href rel="external" data-testid="sso">
                    {format!("Sign in with {name}")}
                </a>
                <p class="muted or">"or with a local account"</p>
            }
        })
    };
    view! {
        <leptos_meta::Title text="Sign in · GPU Sandbox" />
        <main class="login">
            <div class="card">
                <h1>"GPU Sandbox"</h1>
                <p class="muted">"Sign in to launch a GPU workspace."</p>
                <Transition>{sso}</Transition>
                // A plain form where the script has not loaded yet (the server sends the browser on).
                <form
                    method="post"
                    action=Login::PATH
                    on:submit=move |ev| {
                        ev.prevent_default();
                        let next = submitted(&ev, "next");
                        login.dispatch(Login {
                            name: submitted(&ev, "name"),
                            password: submitted(&ev, "password"),
                            next: (!next.is_empty()).then_some(next),
                        });
                    }
                >
                    <input
                        type="hidden"
                        name="next"
                        value=move || query.read().get("next").unwrap_or_default()
                    />
                    <label>
                        "User name"
                        <input name="name" autocomplete="username" required autofocus />
                    </label>
                    <label>
                        "Password"
                        <input
                            type="password"
                            name="password"
                            autocomplete="current-password"
                            required
                        />
                    </label>
                    {error}
                    <button type="submit" class="primary" disabled=move || login.pending().get()>
                        {move || if login.pending().get() { "Signing in…" } else { "Sign in" }}
                    </button>
                </form>
            </div>
        </main>
    }
}

/// What the sign-in page says for each way back from the identity provider without a sign-in.
fn sso_message(code: &str) -> &'static str {
    match code {
        "refused" => "Single sign-on was cancelled or refused by the identity provider.",
        "expired" => "That sign-in took too long or was started elsewhere. Please try again.",
        "taken" => "Your single sign-on name belongs to another account here. Ask an admin.",
        "no-name" => "The identity provider did not send a usable user name. Ask an admin.",
        "unverified" => {
            "Your email address is not verified at the identity provider. Verify it there, then sign in again."
        }
        "locked" => "This account is locked.",
        "unavailable" => {
            "The identity provider cannot be reached. Try again, or use a local account."
        }
        "off" => "Single sign-on is not set up on this server.",
        _ => "Single sign-on failed. Please try again.",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_way_back_has_its_own_message() {
        let codes = [
            "refused",
            "expired",
            "taken",
            "no-name",
            "unverified",
            "locked",
            "unavailable",
            "off",
        ];
        let messages: std::collections::HashSet<_> = codes.iter().map(|c| sso_message(c)).collect();
        assert_eq!(messages.len(), codes.len());
        assert!(
            !messages.contains(sso_message("<script>")),
            "unknown codes get the generic one"
        );
    }
}
