//! The pages. Every one renders on the server and hydrates in the browser.

mod account;
mod admin;
mod backups;
mod charts;
mod chips;
mod copy;
mod credit_ask;
mod dashboard;
mod format;
pub mod hydration;
mod idle_field;
#[cfg(feature = "hydrate")]
mod live;
mod login;
#[cfg(any(feature = "ssr", test))]
mod pool_map;
mod presence;
mod promotion;
mod session;
mod tokens;

use crate::error::AppError;
#[cfg(feature = "ssr")]
pub use admin::admin_pool_page;
#[cfg(feature = "ssr")]
pub use backups::backups_drawn;
#[cfg(feature = "ssr")]
pub use dashboard::dashboard_page;
use leptos::prelude::*;
use leptos_meta::{MetaTags, Stylesheet, Title, provide_meta_context};
use leptos_router::components::{Redirect, Route, Router, Routes};
use leptos_router::{Lazy, LazyRoute, lazy_route, path};

pub fn shell(options: LeptosOptions) -> impl IntoView {
    view! {
        <!DOCTYPE html>
        <html lang="en">
            <head>
                <meta charset="utf-8" />
                <meta name="viewport" content="width=device-width, initial-scale=1" />
                <meta name="color-scheme" content="light dark" />
                <link rel="icon" href="/favicon.svg" type="image/svg+xml" />
                <HydrationScripts options />
                <script inner_html=format::LOCAL_TIMES></script>
                <MetaTags />
            </head>
            <body>
                <App />
            </body>
        </html>
    }
}

/// Each page but the sign-in page is a chunk of the browser's bundle of its own (`cargo leptos
/// build --split`), fetched when someone opens it: the sign-in page loads none of them.
macro_rules! lazy_page {
    ($($route:ident => $page:path;)*) => {
        $(
            struct $route;

            #[lazy_route]
            impl LazyRoute for $route {
                fn data() -> Self {
                    $route
                }

                fn view(_this: Self) -> AnyView {
                    view! { <$page /> }.into_any()
                }
            }
        )*
    };
}

lazy_page! {
    DashboardRoute => dashboard::DashboardPage;
    SessionRoute => session::SessionPage;
    TokensRoute => tokens::TokensPage;
    AdminRoute => admin::AdminPage;
    AccountRoute => account::AccountPage;
}

#[component]
pub fn App() -> impl IntoView {
    provide_meta_context();
    view! {
        <Stylesheet id="leptos" href="/pkg/sandbox.css" />
        <Title text="GPU Sandbox" />
        <Router>
            <Routes fallback=|| view! { <NotFound /> }>
                <Route path=path!("/") view={Lazy::<DashboardRoute>::new()} />
                <Route path=path!("/login") view=login::LoginPage />
                <Route path=path!("/sessions/:id") view={Lazy::<SessionRoute>::new()} />
                <Route path=path!("/tokens") view={Lazy::<TokensRoute>::new()} />
                <Route path=path!("/admin") view={Lazy::<AdminRoute>::new()} />
                <Route path=path!("/account") view={Lazy::<AccountRoute>::new()} />
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

/// Shows an error; sends an anonymous visitor to the sign-in page instead, and one whose password
/// an admin set to their account page, each coming back here afterwards.
/// The bar atop the pages beside the dashboard: the brand, the section's name, and the way back.
#[component]
fn SubPageBar(#[prop(optional)] section: Option<&'static str>) -> impl IntoView {
    view! {
        <header class="topbar">
            <a class="brand" href="/">
                "GPU Sandbox"
            </a>
            {section.map(|name| view! { <strong>{name}</strong> })}
            <a href="/">"Back to the dashboard"</a>
        </header>
    }
}

/// An action's refusal, in a sentence.
#[component]
fn Refusal(error: AppError) -> impl IntoView {
    view! {
        <p class="notice error" role="alert">
            {format::sentence(&error.to_string())}
        </p>
    }
}

#[component]
fn ErrorNotice(error: AppError) -> impl IntoView {
    let location = leptos_router::hooks::use_location();
    let here = move || {
        let search = location.search.get_untracked();
        let mark = if search.is_empty() || search.starts_with('?') {
            ""
        } else {
            "?"
        };
        format!("{}{mark}{search}", location.pathname.get_untracked())
    };
    match error {
        AppError::Unauthenticated => {
            let path = crate::domain::paths::sign_in_then(&here());
            view! { <Redirect path /> }.into_any()
        }
        AppError::PasswordChangeRequired => {
            let path = crate::domain::paths::after_password_change(Some(&here()));
            view! { <Redirect path /> }.into_any()
        }
        error => view! {
            <div class="notice error" role="alert">
                {crate::ui::format::sentence(&error.to_string())}
            </div>
        }
        .into_any(),
    }
}
