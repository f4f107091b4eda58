//! Sign-in, one's own account, API tokens, credit asks and the admin confirmation.

use super::*;

#[server(endpoint = "whoami")]
pub async fn whoami() -> Result<Option<Viewer>, AppError> {
    backend::current_viewer().await
}

#[server(endpoint = "login")]
pub async fn login(
    name: String,
    password: String,
    next: Option<String>,
) -> Result<Viewer, AppError> {
    let viewer = backend::login(&name, &password).await?;
    // Signed in before the page's script had loaded: send the browser on as the page would.
    if backend::is_plain_form_post() {
        let next = next.filter(|n| crate::domain::paths::is_local_path(n));
        let to = if viewer.must_change_password {
            crate::domain::paths::after_password_change(next.as_deref())
        } else {
            next.unwrap_or_else(|| "/".into())
        };
        leptos_axum::redirect(&to);
    }
    Ok(viewer)
}

/// The single sign-on provider's name, when one is configured.
#[server(endpoint = "single_sign_on")]
pub async fn single_sign_on() -> Result<Option<String>, AppError> {
    Ok(backend::backend()?.single_sign_on())
}

/// The signed-in person's own new password (the current one confirms it); the only thing a
/// sign-in whose password an admin set may do.
#[server(endpoint = "change_password")]
pub async fn change_password(current: String, new: String) -> Result<(), AppError> {
    let viewer = backend::signed_in_viewer().await?;
    backend::backend()?
        .change_password(&viewer, &current, &new)
        .await
}

#[server(endpoint = "logout")]
pub async fn logout() -> Result<(), AppError> {
    backend::logout().await?;
    if backend::is_plain_form_post() {
        leptos_axum::redirect("/login");
    }
    Ok(())
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

#[server(endpoint = "load_tokens")]
pub async fn load_tokens() -> Result<TokensPage, AppError> {
    backend::tokens_page().await
}

#[server(endpoint = "make_token")]
pub async fn make_token(form: TokenForm) -> Result<NewToken, AppError> {
    backend::make_token(form).await
}

#[server(endpoint = "revoke_token")]
pub async fn revoke_token(id: String) -> Result<(), AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?.revoke_token(&viewer, &id).await
}

// ---- admin: each checks the role and the scope `admin` behind the backend ----

// JSON: a table's query may be all defaults, which a form encodes as nothing at all.

/// Asks the admins for credits; a grant answers it.
#[server(endpoint = "ask_for_credits")]
pub async fn ask_for_credits(
    amount: String,
    note: String,
) -> Result<crate::model::CreditRequest, AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?
        .ask_for_credits(&viewer, &amount, &note)
        .await
}

#[server(endpoint = "withdraw_credit_request")]
pub async fn withdraw_credit_request() -> Result<(), AppError> {
    let viewer = backend::require_viewer().await?;
    backend::backend()?.withdraw_credit_request(&viewer).await?;
    if backend::is_plain_form_post() {
        leptos_axum::redirect("/");
    }
    Ok(())
}

#[server(endpoint = "admin_access")]
pub async fn admin_access() -> Result<crate::model::AdminAccess, AppError> {
    backend::admin_access().await
}

#[server(endpoint = "confirm_admin")]
pub async fn confirm_admin(password: String) -> Result<(), AppError> {
    backend::confirm_admin(&password).await
}

// JSON: the request is a struct, and its tag may be absent.
