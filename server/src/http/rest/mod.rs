//! The REST API, `/api/v1/…`: the scripts' door to the same service functions as the pages.

mod admin;
mod backups;
mod datasets;
mod export;
mod images;
mod promotions;
mod sessions;
mod tokens;

use crate::http::AppState;
use app::error::AppError;
use app::model::Viewer;
use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, FromRequestParts, Path, Request, State};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Serialize;

/// `{error, message}` with the status that fits.
pub struct ApiError(pub AppError);

impl From<AppError> for ApiError {
    fn from(e: AppError) -> Self {
        ApiError(e)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status =
            StatusCode::from_u16(self.0.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        (
            status,
            Json(serde_json::json!({ "error": self.0.code(), "message": self.0.to_string() })),
        )
            .into_response()
    }
}

type ApiResult<T> = Result<T, ApiError>;

/// The caller, by bearer token or session cookie, once free to act (a sign-in whose password an
/// admin set is refused until it is changed).
pub struct ApiUser(pub Viewer);

impl FromRequestParts<AppState> for ApiUser {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let ApiCaller(viewer) = ApiCaller::from_request_parts(parts, state).await?;
        Ok(ApiUser(viewer.settled()?))
    }
}

/// The caller, by bearer token or session cookie, even one who must change their password
/// first (`GET /me` tells them so).
pub struct ApiCaller(pub Viewer);

impl FromRequestParts<AppState> for ApiCaller {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        match state.service.accounts.caller(&parts.headers).await {
            Ok(Some(caller)) => Ok(ApiCaller(caller.viewer())),
            Ok(None) => Err(ApiError(AppError::Unauthenticated)),
            Err(e) => Err(ApiError(e)),
        }
    }
}

/// JSON bodies whose every rejection is a clear `{error, message}`. A body is a JSON object:
/// serde would read an array as a struct's fields by position, and `[]` as every field left out.
pub struct ApiJson<T>(pub T);

impl<T: serde::de::DeserializeOwned, S: Send + Sync> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match Json::<serde_json::Value>::from_request(req, state).await {
            Ok(Json(value)) => object_of(value).map(ApiJson).map_err(ApiError),
            Err(JsonRejection::BytesRejection(rejection))
                if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE =>
            {
                Err(ApiError(AppError::TooLarge(
                    "the request body is too large (at most 16 KiB)".into(),
                )))
            }
            Err(JsonRejection::BytesRejection(_)) => Err(ApiError(AppError::Invalid(
                "the request body could not be read".into(),
            ))),
            Err(JsonRejection::MissingJsonContentType(_)) => Err(ApiError(AppError::Invalid(
                "send JSON with Content-Type: application/json".into(),
            ))),
            Err(rejection) => Err(ApiError(AppError::Invalid(format!(
                "malformed JSON: {}",
                app::domain::encode::shown_up_to(&rejection.body_text(), 200)
            )))),
        }
    }
}

/// `value` read as a `T`, when it is a JSON object.
pub(super) fn object_of<T: serde::de::DeserializeOwned>(
    value: serde_json::Value,
) -> Result<T, AppError> {
    if !value.is_object() {
        return Err(AppError::Invalid(
            "the request body must be a JSON object ({…})".into(),
        ));
    }
    serde_json::from_value(value).map_err(|e| {
        AppError::Invalid(format!(
            "malformed JSON: {}",
            app::domain::encode::shown_up_to(&e.to_string(), 200)
        ))
    })
}

/// Path parameters; ones that do not read as `T` (bad percent-encoding, say) are a clear 400.
pub struct ApiPath<T>(pub T);

impl<T: serde::de::DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for ApiPath<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match Path::<T>::from_request_parts(parts, state).await {
            Ok(Path(value)) => Ok(ApiPath(value)),
            Err(_) => Err(ApiError(AppError::Invalid("the path is not valid".into()))),
        }
    }
}

/// An id from the path; one that is not even text is a clear 400 like any bad input.
pub struct PathId(pub String);

impl<S: Send + Sync> FromRequestParts<S> for PathId {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match Path::<String>::from_request_parts(parts, state).await {
            Ok(Path(id)) => Ok(PathId(id)),
            Err(_) => Err(ApiError(AppError::Invalid(
                "the id in the path is not valid".into(),
            ))),
        }
    }
}

pub fn router() -> Router<AppState> {
    let v1 = Router::new()
        .route("/health", get(health))
        .route("/me", get(me))
        .route(
            "/me/credit-request",
            axum::routing::put(ask_for_credits).delete(withdraw_credit_request),
        )
        .route(
            "/sessions",
            get(sessions::list_sessions).post(sessions::create_session),
        )
        .route(
            "/sessions/{id}",
            get(sessions::get_session).delete(sessions::delete_session),
        )
        .route("/sessions/{id}/events", get(sessions::session_events))
        .route("/sessions/{id}/readings", get(sessions::session_readings))
        .route("/sessions/{id}/heartbeat", post(sessions::heartbeat))
        .route("/sessions/{id}/extend", post(sessions::extend))
        .route("/quota", get(quota))
        .route(
            "/tokens",
            get(tokens::list_tokens).post(tokens::create_token),
        )
        .route("/tokens/{id}", axum::routing::delete(tokens::revoke_token))
        .route("/pool", get(pool))
        .route(
            "/sessions/{id}/promotions",
            post(promotions::request_promotion),
        )
        .route("/promotions", get(promotions::list_promotions))
        .route("/images", get(images::list_images))
        .route("/datasets", get(datasets::list_datasets))
        .route("/promotions/{id}", get(promotions::get_promotion))
        .nest(
            "/admin",
            admin::admin_router().merge(datasets::admin_routes()),
        )
        .merge(backups::routes())
        .fallback(|| async { ApiError(AppError::NotFound) })
        .method_not_allowed_fallback(|| async {
            (
                http::StatusCode::METHOD_NOT_ALLOWED,
                Json(serde_json::json!({
                    "error": "method_not_allowed",
                    "message": "this path does not take that method",
                })),
            )
        })
        .layer(axum::extract::DefaultBodyLimit::max(16 * 1024));
    Router::new()
        .nest("/api/v1", v1)
        // Kubernetes' probes: alive while the process serves (a database outage must not
        // restart every replica), ready while the database answers.
        .route("/livez", get(livez))
        .route("/metrics", get(metrics))
        .route("/readyz", get(health))
}

/// Prometheus' scrape: with the configured `metrics.token` as bearer, or an admin's credential.
async fn metrics(State(state): State<AppState>, headers: axum::http::HeaderMap) -> Response {
    use crate::service::MetricsCaller;
    let service = &state.service;
    let bearer = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let token = &service.config().metrics.token;
    let answer = match bearer {
        Some(presented)
            if !token.is_empty() && crate::identity::auth::same_secret(presented, token) =>
        {
            service.metrics_text(MetricsCaller::Token(presented)).await
        }
        _ => match service.accounts.caller(&headers).await {
            Ok(Some(caller)) => {
                let viewer = caller.viewer();
                service.metrics_text(MetricsCaller::Viewer(&viewer)).await
            }
            Ok(None) => Err(AppError::Unauthenticated),
            Err(e) => Err(e),
        },
    };
    match answer {
        Ok(text) => (
            [(
                axum::http::header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            text,
        )
            .into_response(),
        Err(e) => ApiError(e).into_response(),
    }
}

/// For liveness probes: the process serves, whatever the database does.
async fn livez() -> Json<serde_json::Value> {
    Json(serde_json::json!({ "status": "alive" }))
}

/// For load balancers and probes: answers when the database does.
async fn health(State(state): State<AppState>) -> ApiResult<Json<serde_json::Value>> {
    state.service.ready().await?;
    Ok(Json(serde_json::json!({ "status": "ok" })))
}

#[derive(Serialize)]
struct Me {
    #[serde(flatten)]
    viewer: Viewer,
    /// With the scope `read` only.
    #[serde(skip_serializing_if = "Option::is_none")]
    credits: Option<app::model::CreditsView>,
}

/// Who the caller is, for any of their tokens; their credits, for one that may read.
async fn me(State(state): State<AppState>, ApiCaller(viewer): ApiCaller) -> ApiResult<Json<Me>> {
    let credits = state.service.accounts.credits_of(&viewer).await?;
    Ok(Json(Me { viewer, credits }))
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct AskBody {
    /// Credits as text or a number: "10", 2.5.
    amount: serde_json::Value,
    /// What they are for, for the admin who decides.
    #[serde(default)]
    note: String,
}

/// Asks the admins for credits (replacing an earlier ask); a grant answers it.
async fn ask_for_credits(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
    ApiJson(body): ApiJson<AskBody>,
) -> ApiResult<Json<app::model::CreditRequest>> {
    let amount = admin::amount_text(&body.amount)?;
    Ok(Json(
        state
            .service
            .accounts
            .ask_for_credits(&viewer, &amount, &body.note)
            .await?,
    ))
}

async fn withdraw_credit_request(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
) -> ApiResult<http::StatusCode> {
    state
        .service
        .accounts
        .withdraw_credit_request(&viewer)
        .await?;
    Ok(http::StatusCode::NO_CONTENT)
}

/// The launch choices: slice sizes with price, free slots, pre-started editors and the queue.
async fn pool(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
) -> ApiResult<Json<Vec<app::model::SliceOption>>> {
    Ok(Json(
        state.service.sessions.dashboard(&viewer).await?.slices,
    ))
}

async fn quota(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
) -> ApiResult<Json<app::model::QuotaView>> {
    Ok(Json(state.service.sessions.quota(&viewer).await?))
}

/// A table's paging, sorting and filtering from the query string; anything unreadable is a
/// clear 400.
pub struct ApiQuery(pub app::domain::listing::ListQuery);

impl<S: Send + Sync> FromRequestParts<S> for ApiQuery {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match axum::extract::Query::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(query)) => Ok(ApiQuery(query)),
            Err(rejection) => Err(ApiError(AppError::Invalid(format!(
                "the query string is malformed: {}; it takes page, per_page, sort, q and filter",
                rejection.body_text()
            )))),
        }
    }
}
