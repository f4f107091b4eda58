use crate::api::Login;
use leptos::prelude::*;
use leptos_router::hooks::{use_navigate, use_query_map};

#[component]
pub fn LoginPage() -> impl IntoView {
    let login = ServerAction::<Login>::new();
    let navigate = use_navigate();
    let query = use_query_map();
    Effect::new(move |_| {
        if let Some(Ok(_)) = login.value().get() {
            // Back to where the visitor was sent from (an editor link, say), if it is one of ours.
            match query
                .read_untracked()
                .get("next")
                .filter(|n| super::is_local_path(n))
            {
                Some(next) => super::hard_navigate(&next),
                None => navigate("/", Default::default()),
            }
        }
    });
    let error = move || {
        login.value().get().and_then(Result::err).map(|e| {
            view! {
                <p class="notice error" role="alert" data-testid="login-error">
                    {e.to_string()}
                </p>
            }
        })
    };
    view! {
        <main class="login">
            <div class="card">
                <h1>"GPU Sandbox"</h1>
                <p class="muted">"Sign in to launch a GPU workspace."</p>
                <ActionForm action=login>
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
                </ActionForm>
            </div>
        </main>
    }
}
