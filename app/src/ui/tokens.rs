//! API tokens: the person's own, listed (never their secrets), made (the secret shown once) and
//! revoked.

use super::ErrorNotice;
use crate::api::{MakeToken, RevokeToken, TokenForm, load_tokens};
use crate::domain::scope::{Scope, Scopes};
use crate::model::{Confirmation, NewToken, TokenRecord, TokensPage};
use crate::ui::hydration::page_resource;
use leptos::prelude::*;

#[component]
pub fn TokensPage() -> impl IntoView {
    let make = ServerAction::<MakeToken>::new();
    let revoke = ServerAction::<RevokeToken>::new();
    let data = page_resource(
        move || (make.version().get(), revoke.version().get()),
        |_| load_tokens(),
    );
    // Outside the list's reloads, so that what was typed survives a refused attempt.
    let form = FormState::new();
    Effect::new(move |_| {
        if let Some(Ok(_)) = make.value().get() {
            form.label.set(String::new());
        }
    });
    // A revoke takes the secret shown with it off the page: it is shown once, and a revoked
    // one is worth nothing to copy.
    Effect::new(move |_| {
        if revoke.pending().get() {
            make.value().set(None);
        }
    });
    view! {
        <leptos_meta::Title text="API tokens · GPU Sandbox" />
        <super::SubPageBar />
        <main class="narrow tokens">
            <h1>"API tokens"</h1>
            <p class="muted">
                "A token lets a script use the API (" <code>"/api/v1/…"</code>
                ") and reach your editors as you, with the scopes you give it. Send it as "
                <code>"Authorization: Bearer …"</code> "."
            </p>
            <Transition fallback=|| view! { <p class="muted">"Loading your tokens…"</p> }>
                {move || Suspend::new(async move {
                    match data.await {
                        Ok(page) => view! { <TokensView page make revoke form /> }.into_any(),
                        Err(error) => view! { <ErrorNotice error /> }.into_any(),
                    }
                })}
            </Transition>
        </main>
    }
}

#[component]
fn TokensView(
    page: TokensPage,
    make: ServerAction<MakeToken>,
    revoke: ServerAction<RevokeToken>,
    form: FormState,
) -> impl IntoView {
    let TokensPage {
        tokens,
        confirmation,
        viewer,
    } = page;
    let is_admin = viewer.role == crate::model::Role::Admin;
    let made = move || match make.value().get() {
        Some(Ok(token)) => Some(view! { <MadeToken token /> }.into_any()),
        Some(Err(e)) => Some(view! { <crate::ui::Refusal error=e /> }.into_any()),
        None => None,
    };
    let revoke_error = move || {
        revoke.value().get().and_then(Result::err).map(|e| {
            view! { <crate::ui::Refusal error=e /> }
        })
    };
    let rows = if tokens.is_empty() {
        view! { <p class="muted">"No tokens yet. Make one above for your scripts."</p> }.into_any()
    } else {
        view! {
            <table class="token-list">
                <thead>
                    <tr>
                        <th>"Label"</th>
                        <th>"Scopes"</th>
                        <th>"Made"</th>
                        <th>"Expires"</th>
                        <th></th>
                    </tr>
                </thead>
                <tbody>
                    {tokens
                        .into_iter()
                        .map(|token| view! { <TokenRow token revoke /> })
                        .collect_view()}
                </tbody>
            </table>
        }
        .into_any()
    };
    view! {
        {made}
        <NewTokenForm make confirmation form is_admin />
        <h2>"Your tokens"</h2>
        {revoke_error}
        {rows}
    }
}

#[component]
fn MadeToken(token: NewToken) -> impl IntoView {
    view! {
        <div class="notice made-token" role="status">
            <p>
                <strong>{format!("Token “{}” made.", token.label)}</strong>
                " Copy it now: it is not shown again."
            </p>
            <crate::ui::copy::SecretField
                secret=token.token
                label="The new token".to_string()
                test_id="new-token"
            />
        </div>
    }
}

/// What the new-token form holds.
#[derive(Clone, Copy)]
struct FormState {
    label: RwSignal<String>,
    days: RwSignal<String>,
    password: RwSignal<String>,
    scopes: [RwSignal<bool>; 5],
}

impl FormState {
    fn new() -> FormState {
        FormState {
            label: RwSignal::new(String::new()),
            days: RwSignal::new(String::from("90")),
            password: RwSignal::new(String::new()),
            // Every scope but `admin`, which a token gets only when asked for.
            scopes: std::array::from_fn(|i| RwSignal::new(Scope::EVERY[i] != Scope::Admin)),
        }
    }
}

#[component]
fn NewTokenForm(
    make: ServerAction<MakeToken>,
    confirmation: Confirmation,
    form: FormState,
    is_admin: bool,
) -> impl IntoView {
    let FormState {
        label,
        days,
        password,
        scopes,
    } = form;
    let chosen: Vec<(Scope, RwSignal<bool>)> = Scope::EVERY
        .into_iter()
        .zip(scopes)
        .filter(|(scope, _)| is_admin || *scope != Scope::Admin)
        .collect();
    let picked = {
        let chosen = chosen.clone();
        move || {
            let on: Vec<Scope> = chosen
                .iter()
                .filter(|(_, on)| on.get())
                .map(|(scope, _)| *scope)
                .collect();
            Scopes::of(&on)
        }
    };
    let needs_password = confirmation == Confirmation::Password;
    let blocked = matches!(
        confirmation,
        Confirmation::SingleSignOn { fresh: false, .. }
    );
    let submit = {
        let picked = picked.clone();
        move |ev: leptos::ev::SubmitEvent| {
            ev.prevent_default();
            let request = TokenForm {
                label: label.get_untracked(),
                days: days.get_untracked().parse().ok(),
                scopes: picked(),
                password: needs_password.then(|| password.get_untracked()),
            };
            make.dispatch(MakeToken { form: request });
            password.set(String::new());
        }
    };
    let confirm = match &confirmation {
        Confirmation::SingleSignOn {
            provider,
            fresh: false,
        } => Some(
            view! {
                <p class="notice" data-testid="confirm-sso">
                    "Your account signs in with " {provider.clone()}
                    ". To make a token, confirm it is you: "
                    <a rel="external" href="/auth/oidc/login?confirm=true&next=/tokens">
                        {format!("Sign in again with {provider}")}
                    </a> "."
                </p>
            }
            .into_any(),
        ),
        Confirmation::SingleSignOn { fresh: true, .. } => Some(
            view! {
                <p class="muted">"Confirmed: you can make tokens for the next few minutes."</p>
            }
            .into_any(),
        ),
        _ => None,
    };
    let scope_boxes = chosen
        .into_iter()
        .map(|(scope, on)| {
            view! {
                <label class="check">
                    <input type="checkbox" bind:checked=on />
                    <span>
                        <code>{scope.as_str()}</code>
                        " "
                        {scope_help(scope)}
                    </span>
                </label>
            }
        })
        .collect_view();
    view! {
        <section class="card" aria-labelledby="new-token-title">
            <h2 id="new-token-title">"New token"</h2>
            {confirm}
            <form class="token-form" on:submit=submit>
                <label>
                    "Label"
                    <input
                        name="label"
                        required
                        maxlength="64"
                        placeholder="nightly job"
                        bind:value=label
                    />
                </label>
                <label>
                    "Expires"
                    <select name="days" bind:value=days>
                        <option value="7">"in 7 days"</option>
                        <option value="30">"in 30 days"</option>
                        <option value="90">"in 90 days"</option>
                        <option value="365">"in a year"</option>
                        <option value="never">"never"</option>
                    </select>
                </label>
                <fieldset>
                    <legend>"Scopes"</legend>
                    {scope_boxes}
                </fieldset>
                {needs_password
                    .then(|| {
                        view! {
                            <label>
                                "Your password"
                                <input
                                    type="password"
                                    name="password"
                                    autocomplete="current-password"
                                    required
                                    bind:value=password
                                />
                            </label>
                        }
                    })}
                <button
                    type="submit"
                    class="primary"
                    disabled=move || blocked || make.pending().get() || picked() == Scopes::NONE
                >
                    {move || if make.pending().get() { "Making…" } else { "Make token" }}
                </button>
            </form>
        </section>
    }
}

fn scope_help(scope: Scope) -> &'static str {
    match scope {
        Scope::Read => "see your sessions, quota and the pool",
        Scope::Sessions => "launch, extend and stop your sessions",
        Scope::Access => "reach your editors",
        Scope::Tokens => "make and revoke tokens",
        Scope::Admin => "administer users, credits and every session",
    }
}

#[component]
fn TokenRow(token: TokenRecord, revoke: ServerAction<RevokeToken>) -> impl IntoView {
    let id = token.id.clone();
    let label = token.label.clone();
    view! {
        <tr data-testid="token-row">
            <td>{token.label}</td>
            <td>{token.scopes.to_string()}</td>
            <td>{format_day(token.created_at)}</td>
            <td>{token.expires_at.map_or_else(|| "never".to_string(), format_day)}</td>
            <td>
                <button
                    class="link danger"
                    aria-label=format!("Revoke {label}")
                    on:click=move |_| {
                        revoke.dispatch(RevokeToken { id: id.clone() });
                    }
                >
                    "Revoke"
                </button>
            </td>
        </tr>
    }
}

/// "2026-11-30" (UTC) for a time in milliseconds.
fn format_day(ms: i64) -> String {
    crate::domain::dates::day(ms)
}

#[cfg(test)]
mod tests {
    use super::format_day;

    #[test]
    fn days_are_utc_dates() {
        assert_eq!(format_day(0), "1970-01-01");
        assert_eq!(format_day(1_764_460_800_000), "2025-11-30");
        assert_eq!(format_day(951_782_400_000), "2000-02-29");
        assert_eq!(format_day(1_767_225_599_999), "2025-12-31");
    }
}
