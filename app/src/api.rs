//! Typed server functions: the pages' door to the service layer.
//!
//! Each one is thin: find the backend and the viewer, call one service function.
//! The REST API in the server crate is the other door to the same functions.

#[cfg(feature = "ssr")]
use crate::domain::launch::LaunchRequest;
use crate::domain::listing::{ListQuery, Page};
use crate::error::AppError;
use crate::model::{
    AdminGpu, AdminSession, AdminUser, AuditLine, Dashboard, NewToken, PromotionView, Promotions,
    SessionView, TokensPage, UsageRow, UserChange, Viewer,
};
use leptos::prelude::*;

#[cfg(feature = "ssr")]
pub use backend::Backend;

#[cfg(feature = "ssr")]
mod backend {
    use super::*;
    use std::sync::Arc;

    /// What the pages need from the server. Implemented by the server crate's service layer,
    /// provided to server functions as `Arc<dyn Backend>` context.
    #[async_trait::async_trait]
    pub trait Backend: Send + Sync + 'static {
        /// The viewer behind a request's session cookie or bearer token.
        async fn viewer(&self, request: &http::request::Parts) -> Result<Option<Viewer>, AppError>;
        async fn login(
            &self,
            request: &http::request::Parts,
            name: &str,
            password: &str,
        ) -> Result<Viewer, AppError>;
        async fn logout(&self, request: &http::request::Parts) -> Result<(), AppError>;
        /// The OpenID Connect provider's name for "Sign in with …", when one is configured.
        fn single_sign_on(&self) -> Option<String>;
        /// The viewer's tokens and what making one takes.
        async fn tokens_page(&self, request: &http::request::Parts)
        -> Result<TokensPage, AppError>;
        async fn make_token(
            &self,
            request: &http::request::Parts,
            form: TokenForm,
        ) -> Result<NewToken, AppError>;
        async fn revoke_token(&self, viewer: &Viewer, id: &str) -> Result<(), AppError>;
        async fn dashboard(&self, viewer: &Viewer) -> Result<Dashboard, AppError>;
        async fn launch(
            &self,
            viewer: &Viewer,
            request: LaunchRequest,
        ) -> Result<SessionView, AppError>;
        async fn session(&self, viewer: &Viewer, id: &str) -> Result<SessionView, AppError>;
        async fn stop(&self, viewer: &Viewer, id: &str) -> Result<SessionView, AppError>;
        async fn heartbeat(
            &self,
            viewer: &Viewer,
            id: &str,
            input: bool,
        ) -> Result<SessionView, AppError>;
        async fn extend(
            &self,
            viewer: &Viewer,
            id: &str,
            minutes: u32,
        ) -> Result<SessionView, AppError>;
        async fn admin_users(
            &self,
            viewer: &Viewer,
            query: &ListQuery,
        ) -> Result<Page<AdminUser>, AppError>;
        async fn admin_sessions(
            &self,
            viewer: &Viewer,
            query: &ListQuery,
        ) -> Result<Page<AdminSession>, AppError>;
        async fn admin_audit(
            &self,
            viewer: &Viewer,
            query: &ListQuery,
        ) -> Result<Page<AuditLine>, AppError>;
        async fn admin_usage(
            &self,
            viewer: &Viewer,
            query: &ListQuery,
        ) -> Result<Page<UsageRow>, AppError>;
        async fn admin_pool(&self, viewer: &Viewer) -> Result<Vec<AdminGpu>, AppError>;
        fn admin_settings(
            &self,
            viewer: &Viewer,
        ) -> Result<Vec<crate::model::SettingsSection>, AppError>;
        /// Whether the admin pages are open to this request's sign-in now.
        async fn admin_access(
            &self,
            request: &http::request::Parts,
        ) -> Result<crate::model::AdminAccess, AppError>;
        /// Opens the admin pages to this browser's sign-in for a while, with the password.
        async fn confirm_admin(
            &self,
            request: &http::request::Parts,
            password: &str,
        ) -> Result<(), AppError>;
        async fn change_user(
            &self,
            viewer: &Viewer,
            user_id: &str,
            change: UserChange,
        ) -> Result<(), AppError>;
        /// Returns the new balance in milli-credits.
        async fn grant_credits(
            &self,
            viewer: &Viewer,
            user_id: &str,
            amount: &str,
            note: &str,
        ) -> Result<i64, AppError>;
        async fn admin_stop(&self, viewer: &Viewer, id: &str) -> Result<AdminSession, AppError>;
        async fn admin_open_editor(
            &self,
            viewer: &Viewer,
            id: &str,
        ) -> Result<crate::model::EditorAccess, AppError>;
        async fn set_user_quota(
            &self,
            viewer: &Viewer,
            user_id: &str,
            overrides: crate::domain::quota::Overrides,
        ) -> Result<crate::domain::quota::Limits, AppError>;
        async fn promote_file(
            &self,
            viewer: &Viewer,
            session_id: &str,
            request: crate::domain::promotion::PromotionRequest,
        ) -> Result<PromotionView, AppError>;
        async fn promotions(&self, viewer: &Viewer) -> Result<Promotions, AppError>;
        async fn admin_images(
            &self,
            viewer: &Viewer,
        ) -> Result<Vec<crate::model::ImageView>, AppError>;
        async fn add_image(
            &self,
            viewer: &Viewer,
            image: crate::domain::images::NewImage,
        ) -> Result<crate::model::ImageView, AppError>;
        async fn set_image_state(
            &self,
            viewer: &Viewer,
            id: &str,
            state: crate::domain::images::ImageState,
        ) -> Result<crate::model::ImageView, AppError>;
        async fn admin_promotions(
            &self,
            viewer: &Viewer,
            query: &ListQuery,
        ) -> Result<Page<PromotionView>, AppError>;
        async fn decide_promotion(
            &self,
            viewer: &Viewer,
            id: &str,
            decision: crate::domain::promotion::Decision,
            reason: Option<String>,
        ) -> Result<PromotionView, AppError>;
    }

    pub(super) fn backend() -> Result<Arc<dyn Backend>, AppError> {
        use_context::<Arc<dyn Backend>>().ok_or(AppError::Internal)
    }

    fn parts() -> Result<http::request::Parts, AppError> {
        use_context::<http::request::Parts>().ok_or(AppError::Internal)
    }

    pub(super) async fn current_viewer() -> Result<Option<Viewer>, AppError> {
        backend()?.viewer(&parts()?).await
    }

    pub(super) async fn require_viewer() -> Result<Viewer, AppError> {
        current_viewer().await?.ok_or(AppError::Unauthenticated)
    }

    /// A form the browser posted itself (before the page's wasm took over), rather than a call
    /// from the page's code: the browser wants a page back, not data.
    pub(super) fn is_plain_form_post() -> bool {
        parts().is_ok_and(|parts| {
            parts
                .headers
                .get(http::header::ACCEPT)
                .and_then(|accept| accept.to_str().ok())
                .is_some_and(|accept| accept.contains("text/html"))
        })
    }

    pub(super) async fn login(name: &str, password: &str) -> Result<Viewer, AppError> {
        backend()?.login(&parts()?, name, password).await
    }

    pub(super) async fn logout() -> Result<(), AppError> {
        backend()?.logout(&parts()?).await
    }

    pub(super) async fn tokens_page() -> Result<TokensPage, AppError> {
        backend()?.tokens_page(&parts()?).await
    }

    pub(super) async fn make_token(form: TokenForm) -> Result<NewToken, AppError> {
        backend()?.make_token(&parts()?, form).await
    }

    pub(super) async fn admin_access() -> Result<crate::model::AdminAccess, AppError> {
        backend()?.admin_access(&parts()?).await
    }

    pub(super) async fn confirm_admin(password: &str) -> Result<(), AppError> {
        backend()?.confirm_admin(&parts()?, password).await
    }
}

#[server]
pub async fn whoami() -> Result<Option<Viewer>, AppError> {
    backend::current_viewer().await
}

#[server]
pub async fn login(
    name: String,
    password: String,
    next: Option<String>,
) -> Result<Viewer, AppError> {
    let viewer = backend::login(&name, &password).await?;
    // Signed in before the page's script had loaded: send the browser on as the page would.
    if backend::is_plain_form_post() {
        let to = next
            .filter(|n| crate::domain::paths::is_local_path(n))
            .unwrap_or_else(|| "/".into());
        leptos_axum::redirect(&to);
    }
    Ok(viewer)
}

/// The single sign-on provider's name, when one is configured.
#[server]
pub async fn single_sign_on() -> Result<Option<String>, AppError> {
    Ok(backend::backend()?.single_sign_on())
}

#[server]
pub async fn logout() -> Result<(), AppError> {
    backend::logout().await
}

#[server]
pub async fn load_dashboard() -> Result<Dashboard, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?.dashboard(&viewer).await
}

#[server]
pub async fn launch(
    editor: String,
    slice_mib: u64,
    duration_minutes: u32,
    #[server(default)] image: Option<String>,
) -> Result<SessionView, AppError> {
    let viewer = backend::require_viewer().await?;
    let request = LaunchRequest {
        editor,
        slice_mib,
        duration_minutes,
        image,
    };
    backend::backend()?.launch(&viewer, request).await
}

#[server]
pub async fn get_session(id: String) -> Result<SessionView, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?.session(&viewer, &id).await
}

#[server]
pub async fn stop_session(id: String) -> Result<SessionView, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?.stop(&viewer, &id).await
}

/// A visible page says the person is (`input`) or may be there; returns the session's new countdowns.
#[server]
pub async fn heartbeat(id: String, input: bool) -> Result<SessionView, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?.heartbeat(&viewer, &id, input).await
}

#[server]
pub async fn extend_session(id: String, minutes: u32) -> Result<SessionView, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?.extend(&viewer, &id, minutes).await
}

/// A new token as the tokens page asks for it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TokenForm {
    pub label: String,
    /// Days until it expires; never when left out.
    pub days: Option<u32>,
    pub scopes: crate::domain::scope::Scopes,
    /// The account's password, for accounts that have one.
    pub password: Option<String>,
}

#[server]
pub async fn load_tokens() -> Result<TokensPage, AppError> {
    backend::tokens_page().await
}

#[server]
pub async fn make_token(form: TokenForm) -> Result<NewToken, AppError> {
    backend::make_token(form).await
}

#[server]
pub async fn revoke_token(id: String) -> Result<(), AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?.revoke_token(&viewer, &id).await
}

// ---- admin: each checks the role and the scope `admin` behind the backend ----

// JSON: a table's query may be all defaults, which a form encodes as nothing at all.
#[server(input = leptos::server_fn::codec::Json)]
pub async fn admin_users(query: ListQuery) -> Result<Page<AdminUser>, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?.admin_users(&viewer, &query).await
}

// JSON: a table's query may be all defaults, which a form encodes as nothing at all.
#[server(input = leptos::server_fn::codec::Json)]
pub async fn admin_sessions(query: ListQuery) -> Result<Page<AdminSession>, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?.admin_sessions(&viewer, &query).await
}

// JSON: a table's query may be all defaults, which a form encodes as nothing at all.
#[server(input = leptos::server_fn::codec::Json)]
pub async fn admin_audit(query: ListQuery) -> Result<Page<AuditLine>, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?.admin_audit(&viewer, &query).await
}

// JSON: a table's query may be all defaults, which a form encodes as nothing at all.
#[server(input = leptos::server_fn::codec::Json)]
pub async fn admin_usage(query: ListQuery) -> Result<Page<UsageRow>, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?.admin_usage(&viewer, &query).await
}

#[server]
pub async fn admin_pool() -> Result<Vec<AdminGpu>, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?.admin_pool(&viewer).await
}

// JSON: a table's query may be all defaults, which a form encodes as nothing at all.
#[server(input = leptos::server_fn::codec::Json)]
pub async fn change_user(user_id: String, change: UserChange) -> Result<(), AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?
        .change_user(&viewer, &user_id, change)
        .await
}

#[server]
pub async fn grant_credits(user_id: String, amount: String, note: String) -> Result<i64, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?
        .grant_credits(&viewer, &user_id, &amount, &note)
        .await
}

#[server]
pub async fn admin_stop(id: String) -> Result<AdminSession, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?.admin_stop(&viewer, &id).await
}

#[server]
pub async fn admin_open_editor(id: String) -> Result<crate::model::EditorAccess, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?.admin_open_editor(&viewer, &id).await
}

#[server(input = leptos::server_fn::codec::Json)]
pub async fn set_user_quota(
    user_id: String,
    overrides: crate::domain::quota::Overrides,
) -> Result<crate::domain::quota::Limits, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?
        .set_user_quota(&viewer, &user_id, overrides)
        .await
}

#[server]
pub async fn admin_settings() -> Result<Vec<crate::model::SettingsSection>, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?.admin_settings(&viewer)
}

#[server]
pub async fn admin_access() -> Result<crate::model::AdminAccess, AppError> {
    backend::admin_access().await
}

#[server]
pub async fn confirm_admin(password: String) -> Result<(), AppError> {
    backend::confirm_admin(&password).await
}

// JSON: the request is a struct, and its tag may be absent.
#[server(input = leptos::server_fn::codec::Json)]
pub async fn promote_file(
    session_id: String,
    request: crate::domain::promotion::PromotionRequest,
) -> Result<PromotionView, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?
        .promote_file(&viewer, &session_id, request)
        .await
}

#[server]
pub async fn my_promotions() -> Result<Promotions, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?.promotions(&viewer).await
}

#[server(input = leptos::server_fn::codec::Json)]
pub async fn admin_promotions(query: ListQuery) -> Result<Page<PromotionView>, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?.admin_promotions(&viewer, &query).await
}

#[server(input = leptos::server_fn::codec::Json)]
pub async fn decide_promotion(
    id: String,
    decision: crate::domain::promotion::Decision,
    reason: Option<String>,
) -> Result<PromotionView, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?
        .decide_promotion(&viewer, &id, decision, reason)
        .await
}

#[server]
pub async fn admin_images() -> Result<Vec<crate::model::ImageView>, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?.admin_images(&viewer).await
}

#[server(input = leptos::server_fn::codec::Json)]
pub async fn add_image(
    image: crate::domain::images::NewImage,
) -> Result<crate::model::ImageView, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?.add_image(&viewer, image).await
}

#[server(input = leptos::server_fn::codec::Json)]
pub async fn set_image_state(
    id: String,
    state: crate::domain::images::ImageState,
) -> Result<crate::model::ImageView, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?
        .set_image_state(&viewer, &id, state)
        .await
}
