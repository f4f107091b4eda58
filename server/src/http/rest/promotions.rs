//! `/api/v1/…/promotions…`: promoting a file to the production registry, and admins' decisions.

use super::{ApiError, ApiJson, ApiPath, ApiQuery, ApiResult, ApiUser, PathId};
use crate::http::AppState;
use app::error::AppError;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;

pub(super) async fn request_promotion(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
    PathId(id): PathId,
    ApiJson(request): ApiJson<app::domain::promotion::PromotionRequest>,
) -> ApiResult<(StatusCode, Json<app::model::PromotionView>)> {
    let view = state
        .service
        .promotions
        .request_promotion(&viewer, &id, &request)
        .await?;
    Ok((StatusCode::CREATED, Json(view)))
}

pub(super) async fn list_promotions(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
) -> ApiResult<Json<Vec<app::model::PromotionView>>> {
    Ok(Json(state.service.promotions.promotions(&viewer).await?))
}

pub(super) async fn get_promotion(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
    PathId(id): PathId,
) -> ApiResult<Json<app::model::PromotionView>> {
    Ok(Json(
        state.service.promotions.promotion(&viewer, &id).await?,
    ))
}

pub(super) async fn admin_promotions(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
    ApiQuery(query): ApiQuery,
) -> ApiResult<Json<app::domain::listing::Page<app::model::PromotionView>>> {
    Ok(Json(
        state
            .service
            .promotions
            .admin_promotions(&viewer, &query)
            .await?,
    ))
}

#[derive(serde::Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct DecisionBody {
    #[serde(default)]
    reason: Option<String>,
}

/// `POST …/promotions/{id}/approve|reject|retry`, with an optional `{"reason": …}`.
pub(super) async fn admin_decide_promotion(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
    ApiPath((id, decision)): ApiPath<(String, String)>,
    body: Result<axum::body::Bytes, axum::extract::rejection::BytesRejection>,
) -> ApiResult<Json<app::model::PromotionView>> {
    let body = body.map_err(|_| {
        ApiError(AppError::Invalid(
            "the request body could not be read".into(),
        ))
    })?;
    use app::domain::promotion::Decision;
    let decision = match decision.as_str() {
        "approve" => Decision::Approve,
        "reject" => Decision::Reject,
        "retry" => Decision::Retry,
        _ => return Err(ApiError(AppError::NotFound)),
    };
    let body: DecisionBody = if body.iter().all(u8::is_ascii_whitespace) {
        DecisionBody::default()
    } else {
        serde_json::from_slice(&body)
            .map_err(|e| AppError::Invalid(format!("malformed JSON: {e}")))
            .and_then(super::object_of)
            .map_err(|e| {
                ApiError(AppError::Invalid(format!(
                    "{e}; send nothing, or {{\"reason\": \"…\"}}"
                )))
            })?
    };
    let reason = body.reason;
    Ok(Json(
        state
            .service
            .promotions
            .decide_promotion(&viewer, &id, decision, reason.as_deref())
            .await?,
    ))
}
