//! The pages. Every one renders on the server and hydrates in the browser.

mod admin;
mod dashboard;
#[cfg(feature = "hydrate")]
mod live;
mod login;
mod presence;
mod promotion;
mod session;
mod tokens;

use crate::error::AppError;
use leptos::prelude::*;
use leptos_meta::{MetaTags, Stylesheet, Title, provide_meta_context};
use leptos_router::components::{Redirect, Route, Router, Routes};
use leptos_router::path;

pub fn shell(options: LeptosOptions) -> impl IntoView {
    view! {
        <!DOCTYPE html>
        <html lang="en">
            <head>
                <meta charset="utf-8" />
                <meta name="viewport" content="width=device-width, initial-scale=1" />
                <meta name="color-scheme" content="light dark" />
                <HydrationScripts options />
                <MetaTags />
            </head>
            <body>
                <App />
            </body>
        </html>
    }
}

#[component]
pub fn App() -> impl IntoView {
    provide_meta_context();
    view! {
        <Stylesheet id="leptos" href="/pkg/sandbox.css" />
        <Title text="GPU Sandbox" />
        <Router>
            <Routes fallback=|| view! { <NotFound /> }>
                <Route path=path!("/") view=dashboard::DashboardPage />
                <Route path=path!("/login") view=login::LoginPage />
                <Route path=path!("/sessions/:id") view=session::SessionPage />
                <Route path=path!("/tokens") view=tokens::TokensPage />
                <Route path=path!("/admin") view=admin::AdminPage />
            </Routes>
        </Router>
    }
}

#[component]
fn NotFound() -> impl IntoView {
    #[cfg(feature = "ssr")]
    if let Some(response) = use_context::<leptos_axum::ResponseOptions>() {
        response.set_status(http::StatusCode::NOT_FOUND);
    }
    view! {
        <main class="narrow">
            <h1>"Page not found"</h1>
            <p>
                <a href="/">"Back to your dashboard"</a>
            </p>
        </main>
    }
}

/// Shows an error; sends an anonymous visitor to the sign-in page instead.
#[component]
fn ErrorNotice(error: AppError) -> impl IntoView {
    match error {
        AppError::Unauthenticated => view! { <Redirect path="/login" /> }.into_any(),
        error => view! {
            <div class="notice error" role="alert">
                {error.to_string()}
            </div>
        }
        .into_any(),
    }
}

pub(crate) fn now_ms() -> i64 {
    #[cfg(feature = "hydrate")]
    {
        js_sys::Date::now() as i64
    }
    #[cfg(not(feature = "hydrate"))]
    {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0)
    }
}

/// "1:02:03" or "4:05"; "0:00" once passed.
pub(crate) fn format_countdown(ms: i64) -> String {
    let secs = (ms.max(0) + 999) / 1000;
    let (h, m, s) = (secs / 3600, (secs / 60) % 60, secs % 60);
    if h > 0 {
        format!("{h}:{m:02}:{s:02}")
    } else {
        format!("{m}:{s:02}")
    }
}

/// A full page load, for paths the router does not own (the editors under /s/).
pub(crate) fn hard_navigate(path: &str) {
    #[cfg(feature = "hydrate")]
    if let Some(window) = web_sys::window() {
        let _ = window.location().set_href(path);
    }
    #[cfg(not(feature = "hydrate"))]
    let _ = path;
}

/// A ticking clock for countdowns; only ticks in the browser.
pub(crate) fn use_clock() -> ReadSignal<i64> {
    let (now, set_now) = signal(now_ms());
    Effect::new(move |_| {
        if let Ok(handle) = set_interval_with_handle(
            move || set_now.set(now_ms()),
            std::time::Duration::from_secs(1),
        ) {
            on_cleanup(move || handle.clear());
        }
    });
    now
}

#[cfg(test)]
mod tests {
    use super::format_countdown;

    #[test]
    fn countdown_formats() {
        assert_eq!(format_countdown(0), "0:00");
        assert_eq!(format_countdown(-5), "0:00");
        assert_eq!(format_countdown(61_000), "1:01");
        assert_eq!(format_countdown(3_723_000), "1:02:03");
        assert_eq!(format_countdown(500), "0:01");
    }
}
