//! The pages' door: the server functions of `app::api` reach the service through
//! [`PagesBackend`], the `Backend` they get from context.

use crate::identity::auth;
use crate::service::{NewToken, Service, confirmed};
use app::domain::launch::LaunchRequest;
use app::domain::scope::Scope;
use app::error::AppError;
use app::model::*;
use std::sync::Arc;

fn by_token(request: &http::request::Parts) -> bool {
    auth::bearer_token(&request.headers).is_some()
}

/// When this browser last confirmed who it is at the identity provider.
async fn sso_confirmed_at(request: &http::request::Parts) -> Option<i64> {
    auth::sso_confirmed_at(request.extensions.get::<tower_sessions::Session>()?).await
}

/// The pages' door: server functions call these through `Arc<dyn Backend>`.
#[derive(Clone)]
pub struct PagesBackend(pub Arc<Service>);

#[async_trait::async_trait]
impl app::api::Backend for PagesBackend {
    async fn viewer(&self, request: &http::request::Parts) -> Result<Option<Viewer>, AppError> {
        Ok(self
            .0
            .auth
            .caller(&request.headers)
            .await?
            .map(|c| c.viewer()))
    }

    fn single_sign_on(&self) -> Option<String> {
        self.0.oidc.as_ref().map(|o| o.config.display_name.clone())
    }

    async fn login(
        &self,
        request: &http::request::Parts,
        name: &str,
        password: &str,
    ) -> Result<Viewer, AppError> {
        let session = request
            .extensions
            .get::<tower_sessions::Session>()
            .ok_or(AppError::Internal)?;
        let viewer = self.0.login(session, name, password).await?;
        // The id the browser came with is gone from the store; gone from the cache too.
        if let Some(cookie) = auth::session_cookie(&request.headers) {
            self.0.auth.forget_cookie(cookie);
        }
        Ok(viewer)
    }

    async fn logout(&self, request: &http::request::Parts) -> Result<(), AppError> {
        let session = request
            .extensions
            .get::<tower_sessions::Session>()
            .ok_or(AppError::Internal)?;
        self.0
            .logout(session, auth::session_cookie(&request.headers))
            .await
    }

    async fn dashboard(&self, viewer: &Viewer) -> Result<Dashboard, AppError> {
        self.0.dashboard(viewer).await
    }

    async fn tokens_page(&self, request: &http::request::Parts) -> Result<TokensPage, AppError> {
        let viewer = self
            .viewer(request)
            .await?
            .ok_or(AppError::Unauthenticated)?;
        let confirmation = self
            .0
            .confirmation(&viewer, by_token(request), sso_confirmed_at(request).await)
            .await?;
        Ok(TokensPage {
            tokens: self.0.tokens(&viewer).await?,
            viewer,
            confirmation,
        })
    }

    async fn make_token(
        &self,
        request: &http::request::Parts,
        form: app::api::TokenForm,
    ) -> Result<NewToken, AppError> {
        let viewer = self
            .viewer(request)
            .await?
            .ok_or(AppError::Unauthenticated)?;
        self.0
            .confirm_token_maker(
                &viewer,
                by_token(request),
                form.password.as_deref(),
                sso_confirmed_at(request).await,
            )
            .await?;
        // A sign-in that proved itself just now: an admin's may give the new token `admin`. A
        // token only ever grants what it has.
        let viewer = if by_token(request) {
            viewer
        } else {
            confirmed(viewer)
        };
        self.0
            .create_token(&viewer, &form.label, Some(form.scopes), form.days)
            .await
    }

    async fn revoke_token(&self, viewer: &Viewer, id: &str) -> Result<(), AppError> {
        self.0.revoke_token(viewer, id).await
    }

    async fn launch(
        &self,
        viewer: &Viewer,
        request: LaunchRequest,
    ) -> Result<SessionView, AppError> {
        self.0.launch(viewer, request).await
    }

    async fn heartbeat(
        &self,
        viewer: &Viewer,
        id: &str,
        input: bool,
    ) -> Result<SessionView, AppError> {
        self.0.heartbeat(viewer, id, input).await?;
        self.0.session(viewer, id).await
    }

    async fn extend(
        &self,
        viewer: &Viewer,
        id: &str,
        minutes: u32,
    ) -> Result<SessionView, AppError> {
        self.0.extend(viewer, id, minutes).await
    }

    async fn session(&self, viewer: &Viewer, id: &str) -> Result<SessionView, AppError> {
        self.0.session(viewer, id).await
    }

    async fn stop(&self, viewer: &Viewer, id: &str) -> Result<SessionView, AppError> {
        self.0.stop(viewer, id).await
    }

    async fn admin_users(
        &self,
        viewer: &Viewer,
        query: &app::domain::listing::ListQuery,
    ) -> Result<app::domain::listing::Page<AdminUser>, AppError> {
        self.0.admin_users(viewer, query).await
    }

    async fn admin_sessions(
        &self,
        viewer: &Viewer,
        query: &app::domain::listing::ListQuery,
    ) -> Result<app::domain::listing::Page<AdminSession>, AppError> {
        self.0.admin_sessions(viewer, query).await
    }

    async fn admin_audit(
        &self,
        viewer: &Viewer,
        query: &app::domain::listing::ListQuery,
    ) -> Result<app::domain::listing::Page<AuditLine>, AppError> {
        self.0.admin_audit(viewer, query).await
    }

    async fn admin_usage(
        &self,
        viewer: &Viewer,
        query: &app::domain::listing::ListQuery,
    ) -> Result<app::domain::listing::Page<UsageRow>, AppError> {
        self.0.admin_usage(viewer, query).await
    }

    async fn admin_access(
        &self,
        request: &http::request::Parts,
    ) -> Result<app::model::AdminAccess, AppError> {
        let viewer = self
            .viewer(request)
            .await?
            .ok_or(AppError::Unauthenticated)?;
        if viewer.role != Role::Admin {
            return Err(AppError::Forbidden("this is for admins only".into()));
        }
        let confirmation = self
            .0
            .confirmation(&viewer, by_token(request), sso_confirmed_at(request).await)
            .await?;
        Ok(app::model::AdminAccess {
            confirmed: viewer.scopes.allows(Scope::Admin),
            confirmation,
        })
    }

    async fn confirm_admin(
        &self,
        request: &http::request::Parts,
        password: &str,
    ) -> Result<(), AppError> {
        let viewer = self
            .viewer(request)
            .await?
            .ok_or(AppError::Unauthenticated)?;
        if viewer.role != Role::Admin {
            return Err(AppError::Forbidden("this is for admins only".into()));
        }
        if by_token(request) {
            return Err(AppError::Invalid(
                "a token has the scope `admin` or not: there is nothing to confirm".into(),
            ));
        }
        // An account without a password confirms at its provider, whose sign-in opens the pages.
        if let Confirmation::SingleSignOn { provider, .. } = self
            .0
            .confirmation(&viewer, false, sso_confirmed_at(request).await)
            .await?
        {
            return Err(AppError::Invalid(format!(
                "your account confirms with {provider}: sign in again there"
            )));
        }
        self.0
            .confirm_person(
                &viewer,
                false,
                Some(password),
                sso_confirmed_at(request).await,
                "use the admin pages",
            )
            .await?;
        let session = request
            .extensions
            .get::<tower_sessions::Session>()
            .ok_or(AppError::Internal)?;
        session
            .insert(auth::ADMIN_CONFIRMED_KEY, crate::util::now_ms())
            .await
            .map_err(|e| {
                tracing::error!(error = %e, "recording an admin's confirmation");
                AppError::Internal
            })?;
        // The cached sign-in was resolved without it.
        if let Some(cookie) = auth::session_cookie(&request.headers) {
            self.0.auth.forget_cookie(cookie);
        }
        Ok(())
    }

    fn admin_settings(&self, viewer: &Viewer) -> Result<Vec<SettingsSection>, AppError> {
        self.0.admin_settings(viewer)
    }

    async fn admin_pool(&self, viewer: &Viewer) -> Result<Vec<AdminGpu>, AppError> {
        self.0.admin_pool(viewer).await
    }

    async fn change_user(
        &self,
        viewer: &Viewer,
        user_id: &str,
        change: UserChange,
    ) -> Result<(), AppError> {
        self.0.change_user(viewer, user_id, &change).await
    }

    async fn grant_credits(
        &self,
        viewer: &Viewer,
        user_id: &str,
        amount: &str,
        note: &str,
    ) -> Result<i64, AppError> {
        self.0
            .grant_credits(Some(viewer), user_id, amount, note)
            .await
    }

    async fn admin_stop(&self, viewer: &Viewer, id: &str) -> Result<AdminSession, AppError> {
        self.0.admin_stop(viewer, id).await
    }

    async fn admin_open_editor(
        &self,
        viewer: &Viewer,
        id: &str,
    ) -> Result<app::model::EditorAccess, AppError> {
        self.0.admin_open_editor(viewer, id).await
    }

    async fn set_user_quota(
        &self,
        viewer: &Viewer,
        user_id: &str,
        overrides: app::domain::quota::Overrides,
    ) -> Result<app::domain::quota::Limits, AppError> {
        self.0.set_user_quota(viewer, user_id, &overrides).await
    }

    async fn promote_file(
        &self,
        viewer: &Viewer,
        session_id: &str,
        request: app::domain::promotion::PromotionRequest,
    ) -> Result<app::model::PromotionView, AppError> {
        self.0.request_promotion(viewer, session_id, &request).await
    }

    async fn promotions(&self, viewer: &Viewer) -> Result<app::model::Promotions, AppError> {
        let settings = &self.0.config.promotion;
        Ok(app::model::Promotions {
            enabled: settings.enabled(),
            needs_approval: settings.require_approval,
            items: self.0.promotions(viewer).await?,
        })
    }

    async fn admin_promotions(
        &self,
        viewer: &Viewer,
        query: &app::domain::listing::ListQuery,
    ) -> Result<app::domain::listing::Page<app::model::PromotionView>, AppError> {
        self.0.admin_promotions(viewer, query).await
    }

    async fn decide_promotion(
        &self,
        viewer: &Viewer,
        id: &str,
        decision: app::domain::promotion::Decision,
        reason: Option<String>,
    ) -> Result<app::model::PromotionView, AppError> {
        self.0
            .decide_promotion(viewer, id, decision, reason.as_deref())
            .await
    }

    async fn admin_images(&self, viewer: &Viewer) -> Result<Vec<ImageView>, AppError> {
        self.0.admin_images(viewer).await
    }

    async fn add_image(
        &self,
        viewer: &Viewer,
        image: app::domain::images::NewImage,
    ) -> Result<ImageView, AppError> {
        self.0.add_image(viewer, &image).await
    }

    async fn set_image_state(
        &self,
        viewer: &Viewer,
        id: &str,
        state: app::domain::images::ImageState,
    ) -> Result<ImageView, AppError> {
        self.0.set_image_state(viewer, id, state).await
    }
}
