use crate::api::Login;
use leptos::prelude::*;
use leptos_router::hooks::use_navigate;

#[component]
pub fn LoginPage() -> impl IntoView {
    let login = ServerAction::<Login>::new();
    let navigate = use_navigate();
    Effect::new(move |_| {
        if let Some(Ok(_)) = login.value().get() {
            navigate("/", Default::default());
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
