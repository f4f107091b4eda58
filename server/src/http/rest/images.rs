//! `/api/v1/images` and `/api/v1/admin/images…`: the approved images.

use super::{ApiJson, ApiResult, ApiUser, PathId};
use crate::http::AppState;
use app::error::AppError;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;

pub(super) async fn list_images(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
) -> ApiResult<Json<Vec<app::model::ImageView>>> {
    viewer
        .scopes
        .require(app::domain::scope::Scope::Read)
        .map_err(AppError::from)?;
    Ok(Json(state.service.images.launch_images().await?))
}

pub(super) async fn admin_images(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
) -> ApiResult<Json<Vec<app::model::ImageView>>> {
    Ok(Json(state.service.images.admin_images(&viewer).await?))
}

pub(super) async fn admin_add_image(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
    ApiJson(image): ApiJson<app::domain::images::NewImage>,
) -> ApiResult<(StatusCode, Json<app::model::ImageView>)> {
    let view = state.service.images.add_image(&viewer, &image).await?;
    Ok((StatusCode::CREATED, Json(view)))
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ImageChange {
    state: app::domain::images::ImageState,
}

pub(super) async fn admin_set_image(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
    PathId(id): PathId,
    ApiJson(change): ApiJson<ImageChange>,
) -> ApiResult<Json<app::model::ImageView>> {
    Ok(Json(
        state
            .service
            .images
            .set_image_state(&viewer, &id, change.state)
            .await?,
    ))
}

/// A scanner's report on an image (Trivy JSON or SARIF), from an admin or the platform's CI
/// with an admin token; the body is the report as the scanner wrote it.
pub(super) async fn admin_post_scan(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
    PathId(id): PathId,
    report: axum::body::Bytes,
) -> ApiResult<(StatusCode, Json<app::model::ImageView>)> {
    let view = state
        .service
        .images
        .post_scan(&viewer, &id, &report)
        .await?;
    Ok((StatusCode::CREATED, Json(view)))
}
