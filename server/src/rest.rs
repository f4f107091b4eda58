//! The REST API, `/api/v1/…`: the scripts' door to the same service functions as the pages.

use crate::AppState;
use crate::service::Service;
use app::domain::launch::LaunchRequest;
use app::domain::session::SessionState;
use app::error::AppError;
use app::model::{SessionView, Step, Viewer};
use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, FromRequestParts, Path, Request, State};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures_util::stream::{self, Stream};
use serde::Serialize;
use std::convert::Infallible;
use std::sync::Arc;

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

/// The caller, by bearer token or session cookie.
pub struct ApiUser(pub Viewer);

impl FromRequestParts<AppState> for ApiUser {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        match state.service.auth.caller(&parts.headers).await {
            Ok(Some(caller)) => Ok(ApiUser(caller.viewer())),
            Ok(None) => Err(ApiError(AppError::Unauthenticated)),
            Err(e) => Err(ApiError(e.into())),
        }
    }
}

/// JSON bodies whose every rejection is a clear `{error, message}`.
pub struct ApiJson<T>(pub T);

impl<T: serde::de::DeserializeOwned, S: Send + Sync> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match Json::<T>::from_request(req, state).await {
            Ok(Json(value)) => Ok(ApiJson(value)),
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
                rejection.body_text()
            )))),
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
        .route("/sessions", get(list_sessions).post(create_session))
        .route("/sessions/{id}", get(get_session).delete(delete_session))
        .route("/sessions/{id}/events", get(session_events))
        .route("/sessions/{id}/heartbeat", post(heartbeat))
        .route("/sessions/{id}/extend", post(extend))
        .route("/quota", get(quota))
        .route("/tokens", get(list_tokens).post(create_token))
        .route("/tokens/{id}", axum::routing::delete(revoke_token))
        .route("/pool", get(pool))
        .route("/sessions/{id}/promotions", post(request_promotion))
        .route("/promotions", get(list_promotions))
        .route("/images", get(list_images))
        .route("/promotions/{id}", get(get_promotion))
        .nest("/admin", admin_router())
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
    Router::new().nest("/api/v1", v1)
}

/// For load balancers and probes: answers when the database does.
async fn health(State(state): State<AppState>) -> ApiResult<Json<serde_json::Value>> {
    state
        .service
        .store
        .count_users()
        .await
        .map_err(AppError::from)?;
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
async fn me(State(state): State<AppState>, ApiUser(viewer): ApiUser) -> ApiResult<Json<Me>> {
    let credits = if viewer.scopes.allows(app::domain::scope::Scope::Read) {
        let (balance, held) = state
            .service
            .store
            .credits(&viewer.id)
            .await
            .map_err(AppError::from)?;
        Some(app::model::CreditsView { balance, held })
    } else {
        None
    };
    Ok(Json(Me { viewer, credits }))
}

/// A session as the API shows it: the view plus the seconds left.
#[derive(Serialize)]
struct ApiSession {
    #[serde(flatten)]
    view: SessionView,
    time_left_seconds: Option<i64>,
}

impl From<SessionView> for ApiSession {
    fn from(view: SessionView) -> Self {
        let time_left_seconds = view
            .ends_at_ms
            .filter(|_| view.state == SessionState::Ready)
            .map(|end| ((end - crate::store::now_ms()) / 1000).max(0));
        ApiSession {
            view,
            time_left_seconds,
        }
    }
}

async fn list_sessions(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
) -> ApiResult<Json<Vec<ApiSession>>> {
    let sessions = state.service.sessions(&viewer).await?;
    Ok(Json(sessions.into_iter().map(ApiSession::from).collect()))
}

async fn create_session(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
    ApiJson(request): ApiJson<LaunchRequest>,
) -> ApiResult<(StatusCode, Json<ApiSession>)> {
    let view = state.service.launch(&viewer, request).await?;
    Ok((StatusCode::CREATED, Json(view.into())))
}

async fn get_session(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
    PathId(id): PathId,
) -> ApiResult<Json<ApiSession>> {
    Ok(Json(state.service.session(&viewer, &id).await?.into()))
}

async fn delete_session(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
    PathId(id): PathId,
) -> ApiResult<Json<ApiSession>> {
    Ok(Json(state.service.stop(&viewer, &id).await?.into()))
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct HeartbeatBody {
    /// The person did something (typed, clicked, scrolled) since the last heartbeat.
    #[serde(default)]
    input: bool,
}

async fn heartbeat(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
    PathId(id): PathId,
    ApiJson(body): ApiJson<HeartbeatBody>,
) -> ApiResult<Json<ApiSession>> {
    state.service.heartbeat(&viewer, &id, body.input).await?;
    Ok(Json(state.service.session(&viewer, &id).await?.into()))
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ExtendBody {
    minutes: u32,
}

async fn extend(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
    PathId(id): PathId,
    ApiJson(body): ApiJson<ExtendBody>,
) -> ApiResult<Json<ApiSession>> {
    Ok(Json(
        state
            .service
            .extend(&viewer, &id, body.minutes)
            .await?
            .into(),
    ))
}

/// The launch choices: slice sizes with price, free slots, pre-started editors and the queue.
async fn pool(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
) -> ApiResult<Json<Vec<app::model::SliceOption>>> {
    Ok(Json(state.service.dashboard(&viewer).await?.slices))
}

async fn quota(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
) -> ApiResult<Json<app::model::QuotaView>> {
    Ok(Json(state.service.quota(&viewer).await?))
}

/// The session's steps so far, then each new one as it happens, until it ends.
async fn session_events(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
    PathId(id): PathId,
) -> ApiResult<Sse<impl Stream<Item = Result<Event, Infallible>>>> {
    state.service.check_owner(&viewer, &id).await?;
    // Subscribe before reading the history, so nothing falls between the two.
    let live = state.service.events.subscribe(&id);
    let history = state.service.steps_after(&id, 0).await?;
    let ended = history.iter().any(|s| s.state == SessionState::Ended);
    let follow = Follow {
        shutdown: state.service.shutdown.subscribe(),
        service: state.service.clone(),
        id,
        live: (!ended).then_some(live),
        pending: history.into(),
        last_seq: 0,
        done: false,
        closing: false,
    };
    Ok(Sse::new(stream::unfold(follow, Follow::next)).keep_alive(KeepAlive::default()))
}

/// One progress stream. Steps come from this process's hub as they happen, and from the
/// database every few seconds, so a session ended by another replica (or the CLI) ends the
/// stream too. It also ends when the server shuts down.
struct Follow {
    service: Arc<Service>,
    id: String,
    live: Option<tokio::sync::broadcast::Receiver<Step>>,
    pending: std::collections::VecDeque<Step>,
    last_seq: i64,
    done: bool,
    closing: bool,
    shutdown: tokio::sync::watch::Receiver<bool>,
}

impl Follow {
    async fn next(mut self) -> Option<(Result<Event, Infallible>, Follow)> {
        use tokio::sync::broadcast::error::RecvError;
        loop {
            if let Some(step) = self.pending.pop_front() {
                if step.seq <= self.last_seq {
                    continue;
                }
                self.last_seq = step.seq;
                self.done = step.state == SessionState::Ended;
                let event = Event::default()
                    .id(step.seq.to_string())
                    .data(serde_json::to_string(&step).unwrap_or_default());
                return Some((Ok(event), self));
            }
            if self.done || self.closing {
                return None;
            }
            if *self.shutdown.borrow() {
                // One last look, so the steps of the shutdown itself are shown, then the end.
                self.closing = true;
                if let Ok(steps) = self.service.steps_after(&self.id, self.last_seq).await {
                    self.pending.extend(steps);
                }
                continue;
            }
            let received = async {
                match &mut self.live {
                    Some(live) => Some(live.recv().await),
                    None => std::future::pending().await,
                }
            };
            let refresh = tokio::select! {
                received = received => match received {
                    Some(Ok(step)) => {
                        self.pending.push_back(step);
                        false
                    }
                    Some(Err(RecvError::Lagged(_))) => true,
                    Some(Err(RecvError::Closed)) | None => {
                        self.live = None;
                        true
                    }
                },
                _ = tokio::time::sleep(std::time::Duration::from_secs(3)) => true,
                _ = self.shutdown.changed() => false,
            };
            if refresh {
                match self.service.steps_after(&self.id, self.last_seq).await {
                    Ok(steps) => self.pending.extend(steps),
                    Err(_) => return None,
                }
            }
        }
    }
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenRequest {
    label: String,
    /// Days until it expires; never when left out.
    days: Option<u32>,
    /// What it may do; when left out, what the caller may.
    scopes: Option<app::domain::scope::Scopes>,
    /// The account's password, asked of a browser's sign-in (not of a token).
    password: Option<String>,
}

async fn list_tokens(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
) -> ApiResult<Json<Vec<crate::store::TokenRecord>>> {
    Ok(Json(state.service.tokens(&viewer).await?))
}

/// With a sign-in cookie, the password too: editors are served from our origin, and a script in
/// an editor's page must not be able to mint a lasting credential from the browser's cookie.
async fn create_token(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
    headers: http::HeaderMap,
    session: tower_sessions::Session,
    ApiJson(request): ApiJson<TokenRequest>,
) -> ApiResult<(StatusCode, Json<crate::service::NewToken>)> {
    let confirmed_at = crate::auth::sso_confirmed_at(&session).await;
    state
        .service
        .confirm_token_maker(
            &viewer,
            crate::auth::bearer_token(&headers).is_some(),
            request.password.as_deref(),
            confirmed_at,
        )
        .await?;
    // A sign-in that proved itself just now: an admin's may give the new token `admin`. A
    // token only ever grants what it has.
    let viewer = if crate::auth::bearer_token(&headers).is_some() {
        viewer
    } else {
        crate::service::confirmed(viewer)
    };
    let token = state
        .service
        .create_token(&viewer, &request.label, request.scopes, request.days)
        .await?;
    Ok((StatusCode::CREATED, Json(token)))
}

async fn revoke_token(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
    PathId(id): PathId,
) -> ApiResult<StatusCode> {
    state.service.revoke_token(&viewer, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

// ---- admin (role admin and the scope `admin`; see crate::admin) ----

fn admin_router() -> Router<AppState> {
    Router::new()
        .route("/users", get(admin_users))
        .route("/users/{id}", axum::routing::patch(admin_change_user))
        .route("/users/{id}/credits", post(admin_grant))
        .route(
            "/users/{id}/quota",
            axum::routing::put(admin_set_quota).patch(admin_change_quota),
        )
        .route("/sessions", get(admin_sessions))
        .route("/sessions/{id}", get(admin_session).delete(admin_stop))
        .route("/sessions/{id}/access", post(admin_open_editor))
        .route("/pool", get(admin_pool))
        .route("/audit", get(admin_audit))
        .route("/usage", get(admin_usage))
        .route("/settings", get(admin_settings))
        .route("/promotions", get(admin_promotions))
        .route("/images", get(admin_images).post(admin_add_image))
        .route("/images/{id}", axum::routing::patch(admin_set_image))
        .route("/promotions/{id}/{decision}", post(admin_decide_promotion))
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

async fn admin_users(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
    ApiQuery(query): ApiQuery,
) -> ApiResult<Json<app::domain::listing::Page<app::model::AdminUser>>> {
    Ok(Json(state.service.admin_users(&viewer, &query).await?))
}

async fn admin_change_user(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
    PathId(id): PathId,
    ApiJson(change): ApiJson<app::model::UserChange>,
) -> ApiResult<StatusCode> {
    state.service.change_user(&viewer, &id, &change).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct GrantBody {
    /// Credits as text or a number: "10", 2.5; negative takes back.
    amount: serde_json::Value,
    #[serde(default)]
    note: String,
}

#[derive(Serialize)]
struct Granted {
    /// Milli-credits.
    balance: i64,
    /// The balance in credits, as the pages write it.
    credits: String,
}

async fn admin_grant(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
    PathId(id): PathId,
    ApiJson(body): ApiJson<GrantBody>,
) -> ApiResult<Json<Granted>> {
    let amount = match &body.amount {
        serde_json::Value::String(text) => text.clone(),
        serde_json::Value::Number(number) => number.to_string(),
        _ => {
            return Err(ApiError(AppError::Invalid(
                "`amount` is a number of credits, e.g. 10 or \"2.5\"".into(),
            )));
        }
    };
    let balance = state
        .service
        .grant_credits(Some(&viewer), &id, &amount, &body.note)
        .await?;
    Ok(Json(Granted {
        balance,
        credits: app::domain::credits::format(balance),
    }))
}

async fn list_images(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
) -> ApiResult<Json<Vec<app::model::ImageView>>> {
    viewer
        .scopes
        .require(app::domain::scope::Scope::Read)
        .map_err(AppError::from)?;
    Ok(Json(state.service.launch_images().await?))
}

async fn admin_images(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
) -> ApiResult<Json<Vec<app::model::ImageView>>> {
    Ok(Json(state.service.admin_images(&viewer).await?))
}

async fn admin_add_image(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
    ApiJson(image): ApiJson<app::domain::images::NewImage>,
) -> ApiResult<(StatusCode, Json<app::model::ImageView>)> {
    let view = state.service.add_image(&viewer, &image).await?;
    Ok((StatusCode::CREATED, Json(view)))
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ImageChange {
    state: app::domain::images::ImageState,
}

async fn admin_set_image(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
    PathId(id): PathId,
    ApiJson(change): ApiJson<ImageChange>,
) -> ApiResult<Json<app::model::ImageView>> {
    Ok(Json(
        state
            .service
            .set_image_state(&viewer, &id, change.state)
            .await?,
    ))
}

async fn request_promotion(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
    PathId(id): PathId,
    ApiJson(request): ApiJson<app::domain::promotion::PromotionRequest>,
) -> ApiResult<(StatusCode, Json<app::model::PromotionView>)> {
    let view = state
        .service
        .request_promotion(&viewer, &id, &request)
        .await?;
    Ok((StatusCode::CREATED, Json(view)))
}

async fn list_promotions(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
) -> ApiResult<Json<Vec<app::model::PromotionView>>> {
    Ok(Json(state.service.promotions(&viewer).await?))
}

async fn get_promotion(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
    PathId(id): PathId,
) -> ApiResult<Json<app::model::PromotionView>> {
    Ok(Json(state.service.promotion(&viewer, &id).await?))
}

async fn admin_promotions(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
    ApiQuery(query): ApiQuery,
) -> ApiResult<Json<app::domain::listing::Page<app::model::PromotionView>>> {
    Ok(Json(state.service.admin_promotions(&viewer, &query).await?))
}

#[derive(serde::Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct DecisionBody {
    #[serde(default)]
    reason: Option<String>,
}

/// `POST …/promotions/{id}/approve|reject|retry`, with an optional `{"reason": …}`.
async fn admin_decide_promotion(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
    Path((id, decision)): Path<(String, String)>,
    body: axum::body::Bytes,
) -> ApiResult<Json<app::model::PromotionView>> {
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
        serde_json::from_slice(&body).map_err(|e| {
            ApiError(AppError::Invalid(format!(
                "malformed JSON: {e}; send nothing, or {{\"reason\": \"…\"}}"
            )))
        })?
    };
    let reason = body.reason;
    Ok(Json(
        state
            .service
            .decide_promotion(&viewer, &id, decision, reason.as_deref())
            .await?,
    ))
}

async fn admin_sessions(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
    ApiQuery(query): ApiQuery,
) -> ApiResult<Json<app::domain::listing::Page<app::model::AdminSession>>> {
    Ok(Json(state.service.admin_sessions(&viewer, &query).await?))
}

async fn admin_session(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
    PathId(id): PathId,
) -> ApiResult<Json<app::model::AdminSession>> {
    Ok(Json(state.service.admin_session(&viewer, &id).await?))
}

async fn admin_open_editor(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
    PathId(id): PathId,
) -> ApiResult<Json<app::model::EditorAccess>> {
    Ok(Json(state.service.admin_open_editor(&viewer, &id).await?))
}

async fn admin_stop(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
    PathId(id): PathId,
) -> ApiResult<Json<app::model::AdminSession>> {
    Ok(Json(state.service.admin_stop(&viewer, &id).await?))
}

async fn admin_pool(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
) -> ApiResult<Json<Vec<app::model::AdminGpu>>> {
    Ok(Json(state.service.admin_pool(&viewer).await?))
}

async fn admin_audit(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
    ApiQuery(query): ApiQuery,
) -> ApiResult<Json<app::domain::listing::Page<app::model::AuditLine>>> {
    Ok(Json(state.service.admin_audit(&viewer, &query).await?))
}

async fn admin_usage(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
    ApiQuery(query): ApiQuery,
) -> ApiResult<Json<app::domain::listing::Page<app::model::UsageRow>>> {
    Ok(Json(state.service.admin_usage(&viewer, &query).await?))
}

/// A user's quota overrides; each left out (or null) goes back to the configured default.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct QuotaBody {
    #[serde(default)]
    max_sessions: Option<u32>,
    #[serde(default)]
    max_gpu_mib: Option<u64>,
    #[serde(default)]
    max_minutes: Option<u32>,
    #[serde(default)]
    max_disk_mib: Option<u64>,
}

async fn admin_set_quota(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
    PathId(id): PathId,
    ApiJson(body): ApiJson<QuotaBody>,
) -> ApiResult<Json<app::domain::quota::Limits>> {
    let overrides = app::domain::quota::Overrides {
        max_sessions: body.max_sessions,
        max_gpu_mib: body.max_gpu_mib,
        max_minutes: body.max_minutes,
        max_disk_mib: body.max_disk_mib,
    };
    Ok(Json(
        state
            .service
            .set_user_quota(&viewer, &id, &overrides)
            .await?,
    ))
}

async fn admin_change_quota(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
    PathId(id): PathId,
    ApiJson(change): ApiJson<app::domain::quota::OverridesChange>,
) -> ApiResult<Json<app::domain::quota::Limits>> {
    Ok(Json(
        state
            .service
            .change_user_quota(&viewer, &id, change)
            .await?,
    ))
}

async fn admin_settings(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
) -> ApiResult<Json<Vec<app::model::SettingsSection>>> {
    Ok(Json(state.service.admin_settings(&viewer)?))
}
