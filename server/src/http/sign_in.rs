//! The browser's round trip through the OpenID Connect provider: `/auth/oidc/login` sends it there,
//! `/auth/oidc/callback` takes it back and signs it in. The checks are `identity::oidc`'s, the
//! account `service::accounts`'.
//!
//! The login keeps a `Pending` sign-in in the browser's tower session, beside those of its other
//! tabs (the newest four kept); a browser not signed in yet gets a session that lives 10 minutes
//! unless the sign-in completes. `next` must be a local path. `confirm=true` asks the provider to
//! have the person sign in again (to make a token, or act as an admin), and a confirmed sign-in is
//! kept in the session.
//!
//! The callback takes out the `Pending` whose `state` the answer carries: an answer is good for one
//! try, and a stray link or an old answer leaves the others waiting. Failures go back to the
//! sign-in page with a short code (`/login?sso=…`: `expired`, `refused`, `taken`, `no-name`,
//! `locked`, `failed`, `unavailable`, `off`) that the page turns into a fixed message; what went
//! wrong is logged, never shown, including the identity of a sign-in refused because a local
//! account has its name, which an admin can then link (`server user link`).

use crate::http::AppState;
use crate::identity::oidc::{CALLBACK_PATH, LOGIN_PATH, OidcError, Pending};
use app::error::AppError;
use axum::Router;
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use tower_sessions::Session;

/// The pending sign-ins' key in the browser's session.
const PENDING_KEY: &str = "oidc_pending";
/// How many sign-ins one browser may have under way at once (tabs), the newest kept.
const MAX_PENDING: usize = 4;
/// How long a browser's session lives while it is away at the provider.
const PENDING_MINUTES: i64 = 10;

pub fn router() -> Router<AppState> {
    Router::new()
        .route(LOGIN_PATH, get(start))
        .route(CALLBACK_PATH, get(callback))
}

#[derive(serde::Deserialize)]
struct StartQuery {
    next: Option<String>,
    /// Ask the person to sign in again at the provider (to make a token, say).
    #[serde(default)]
    confirm: bool,
}

async fn start(
    State(state): State<AppState>,
    session: Session,
    Query(query): Query<StartQuery>,
) -> Response {
    let Some(oidc) = state.service.accounts.oidc() else {
        return back_to_sign_in("off");
    };
    let next = query.next.filter(|n| app::is_local_path(n));
    let (url, pending) = match oidc.start(next, query.confirm).await {
        Ok(started) => started,
        Err(e) => {
            tracing::error!(error = %e, "starting an OpenID Connect sign-in");
            return back_to_sign_in("unavailable");
        }
    };
    // Anyone may start a sign-in: what it keeps goes away soon unless it completes (a browser
    // that is signed in already keeps its sign-in's life).
    let signed_in = matches!(
        session.get::<String>(crate::identity::auth::USER_KEY).await,
        Ok(Some(_))
    );
    if !signed_in {
        session.set_expiry(Some(tower_sessions::Expiry::OnInactivity(
            time::Duration::minutes(PENDING_MINUTES),
        )));
    }
    // Beside those of the browser's other tabs, each found again by its state.
    let mut pendings = pendings(&session).await;
    pendings.push(pending);
    let excess = pendings.len().saturating_sub(MAX_PENDING);
    pendings.drain(..excess);
    if let Err(e) = session.insert(PENDING_KEY, &pendings).await {
        tracing::error!(error = %e, "keeping a pending sign-in");
        return back_to_sign_in("failed");
    }
    Redirect::to(&url).into_response()
}

#[derive(serde::Deserialize)]
struct CallbackQuery {
    code: Option<String>,
    state: Option<String>,
    error: Option<String>,
    error_description: Option<String>,
}

async fn callback(
    State(state): State<AppState>,
    session: Session,
    Query(query): Query<CallbackQuery>,
) -> Response {
    let Some(oidc) = state.service.accounts.oidc() else {
        return back_to_sign_in("off");
    };
    // Only the answer to one of this browser's sign-ins touches it: another (a link from
    // elsewhere, an old answer) leaves them waiting.
    let mut pendings = pendings(&session).await;
    let answered = pendings.iter().position(|p| {
        query
            .state
            .as_deref()
            .is_some_and(|state| crate::identity::oidc::Oidc::answers(p, state))
    });
    let Some(pending) = answered.map(|i| pendings.remove(i)) else {
        return back_to_sign_in("expired");
    };
    // Taken out now: an answer is good for one try.
    if let Err(e) = session.insert(PENDING_KEY, &pendings).await {
        tracing::error!(error = %e, "ending a pending sign-in");
        return back_to_sign_in("failed");
    }
    if let Some(error) = query.error {
        tracing::info!(%error, description = ?query.error_description, "the identity provider refused a sign-in");
        return back_to_sign_in("refused");
    }
    let (Some(code), Some(answer_state)) = (query.code, query.state) else {
        return back_to_sign_in("expired");
    };
    let identity = match oidc.finish(&pending, &answer_state, &code).await {
        Ok(identity) => identity,
        Err(OidcError::Stale) => return back_to_sign_in("expired"),
        Err(OidcError::Claims(why)) => {
            tracing::warn!(%why, "an OpenID Connect sign-in without a usable name");
            return back_to_sign_in("no-name");
        }
        Err(e @ OidcError::UnverifiedEmail(_)) => {
            tracing::info!(error = %e, "an OpenID Connect sign-in refused");
            return back_to_sign_in("unverified");
        }
        Err(e) => {
            tracing::error!(error = %e, "an OpenID Connect sign-in failed");
            return back_to_sign_in("failed");
        }
    };
    match state
        .service
        .accounts
        .oidc_sign_in(&session, &identity)
        .await
    {
        Ok(_) => {
            if identity.confirmed {
                state.service.accounts.keep_sso_confirmation(&session).await;
            }
            Redirect::to(pending.next.as_deref().unwrap_or("/")).into_response()
        }
        Err(AppError::Conflict(why)) => {
            tracing::warn!(%why, subject = %identity.subject, "an OpenID Connect name is taken");
            back_to_sign_in("taken")
        }
        Err(AppError::Invalid(why)) => {
            tracing::warn!(%why, subject = %identity.subject, "an OpenID Connect name is not a user name");
            back_to_sign_in("no-name")
        }
        Err(AppError::SignInFailed(_)) => back_to_sign_in("locked"),
        Err(e) => {
            tracing::error!(error = %e, "signing in an OpenID Connect identity");
            back_to_sign_in("failed")
        }
    }
}

/// The browser's sign-ins under way (none when its session holds none it can read).
async fn pendings(session: &Session) -> Vec<Pending> {
    session
        .get::<Vec<Pending>>(PENDING_KEY)
        .await
        .ok()
        .flatten()
        .unwrap_or_default()
}

fn back_to_sign_in(code: &str) -> Response {
    Redirect::to(&format!("/login?sso={code}")).into_response()
}
