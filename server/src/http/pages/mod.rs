//! The pages' door: the server functions of `app::api` reach the service through
//! [`PagesBackend`], the `Backend` they get from context.

use crate::service::accounts::RequestAuth;
use crate::service::{NewToken, Service};
use app::domain::launch::LaunchRequest;
use app::domain::usage::{SessionReadings, UsageDay};
use app::error::AppError;
use app::model::*;
use std::sync::Arc;

mod accounts;
mod admin;
mod datasets;
mod images;
mod promotions;
mod sessions;

/// The request's credential, as the service takes it.
async fn request_auth<'a>(
    service: &Service,
    request: &'a http::request::Parts,
) -> Result<RequestAuth<'a>, AppError> {
    super::request_auth(
        service,
        &request.headers,
        request.extensions.get::<tower_sessions::Session>(),
    )
    .await
}

/// The browser's sign-in session (the session layer puts one on every page request).
fn session(request: &http::request::Parts) -> Result<&tower_sessions::Session, AppError> {
    request
        .extensions
        .get::<tower_sessions::Session>()
        .ok_or(AppError::Internal)
}

/// The pages' door: server functions call these through `Arc<dyn Backend>`, one trait an area,
/// each implemented in this folder's file of its area.
#[derive(Clone)]
pub struct PagesBackend(pub Arc<Service>);
