//! `/api/v1/datasets` and `/api/v1/admin/datasets…`: the shared datasets.

use super::{ApiJson, ApiResult, ApiUser, PathId};
use crate::http::AppState;
use app::domain::datasets::{DatasetChange, DatasetUse, DatasetView, NewDataset};
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};

/// The admins' routes, nested under `/admin`.
pub(super) fn admin_routes() -> Router<AppState> {
    Router::new()
        .route("/datasets", get(admin_datasets).post(admin_add_dataset))
        .route(
            "/datasets/{id}",
            axum::routing::patch(admin_change_dataset).delete(admin_remove_dataset),
        )
}

/// The datasets the caller may use, and where their sessions find them.
pub(super) async fn list_datasets(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
) -> ApiResult<Json<Vec<DatasetUse>>> {
    Ok(Json(state.service.datasets.usable(&viewer).await?))
}

async fn admin_datasets(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
) -> ApiResult<Json<Vec<DatasetView>>> {
    Ok(Json(state.service.datasets.admin_datasets(&viewer).await?))
}

async fn admin_add_dataset(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
    ApiJson(new): ApiJson<NewDataset>,
) -> ApiResult<(StatusCode, Json<DatasetView>)> {
    let view = state.service.datasets.add(&viewer, &new).await?;
    Ok((StatusCode::CREATED, Json(view)))
}

async fn admin_change_dataset(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
    PathId(id): PathId,
    ApiJson(change): ApiJson<DatasetChange>,
) -> ApiResult<Json<DatasetView>> {
    Ok(Json(
        state.service.datasets.change(&viewer, &id, &change).await?,
    ))
}

async fn admin_remove_dataset(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
    PathId(id): PathId,
) -> ApiResult<StatusCode> {
    state.service.datasets.remove(&viewer, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}
