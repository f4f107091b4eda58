//! The pages' door to sign-in, one's own account and tokens, credit asks, the admin confirmation.

use super::*;

#[async_trait::async_trait]
impl app::api::AccountsBackend for PagesBackend {
    async fn viewer(&self, request: &http::request::Parts) -> Result<Option<Viewer>, AppError> {
        Ok(self
            .0
            .accounts
            .caller(&request.headers)
            .await?
            .map(|c| c.viewer()))
    }

    async fn login(
        &self,
        request: &http::request::Parts,
        name: &str,
        password: &str,
    ) -> Result<Viewer, AppError> {
        self.0
            .accounts
            .sign_in_with_password(
                session(request)?,
                self.0.accounts.session_cookie(&request.headers),
                name,
                password,
                request
                    .extensions
                    .get::<crate::http::ClientAddr>()
                    .map(|c| c.0),
            )
            .await
    }

    async fn logout(&self, request: &http::request::Parts) -> Result<(), AppError> {
        self.0
            .accounts
            .logout(
                session(request)?,
                self.0.accounts.session_cookie(&request.headers),
            )
            .await
    }

    fn single_sign_on(&self) -> Option<String> {
        self.0.accounts.single_sign_on()
    }

    async fn tokens_page(&self, request: &http::request::Parts) -> Result<TokensPage, AppError> {
        let auth = request_auth(&self.0, request).await?;
        self.0.accounts.tokens_page(&auth).await
    }

    async fn make_token(
        &self,
        request: &http::request::Parts,
        form: app::api::TokenForm,
    ) -> Result<NewToken, AppError> {
        let auth = request_auth(&self.0, request).await?;
        self.0
            .accounts
            .make_token(
                &auth,
                &form.label,
                Some(form.scopes),
                form.days,
                form.password.as_deref(),
            )
            .await
    }

    async fn revoke_token(&self, viewer: &Viewer, id: &str) -> Result<(), AppError> {
        self.0.accounts.revoke_token(viewer, id).await
    }

    async fn change_password(
        &self,
        viewer: &Viewer,
        current: &str,
        new: &str,
    ) -> Result<(), AppError> {
        self.0.accounts.change_password(viewer, current, new).await
    }

    async fn ask_for_credits(
        &self,
        viewer: &Viewer,
        amount: &str,
        note: &str,
    ) -> Result<app::model::CreditRequest, AppError> {
        self.0.accounts.ask_for_credits(viewer, amount, note).await
    }

    async fn withdraw_credit_request(&self, viewer: &Viewer) -> Result<(), AppError> {
        self.0.accounts.withdraw_credit_request(viewer).await
    }

    async fn admin_access(
        &self,
        request: &http::request::Parts,
    ) -> Result<app::model::AdminAccess, AppError> {
        let auth = request_auth(&self.0, request).await?;
        self.0.accounts.admin_access(&auth).await
    }

    async fn confirm_admin(
        &self,
        request: &http::request::Parts,
        password: &str,
    ) -> Result<(), AppError> {
        let auth = request_auth(&self.0, request).await?;
        self.0.accounts.confirm_admin(&auth, password).await
    }
}
