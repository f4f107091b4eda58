//! `/api/v1/sessions…`: launch, list, read, stop, heartbeat, extend, and the progress stream.

use super::{ApiJson, ApiResult, ApiUser, PathId};
use crate::http::AppState;
use crate::service::Service;
use app::domain::launch::LaunchRequest;
use app::domain::session::SessionState;
use app::model::{SessionView, Step};
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::stream::{self, Stream};
use serde::Serialize;
use std::convert::Infallible;
use std::sync::Arc;

/// A session as the API shows it: the view plus the seconds left.
#[derive(Serialize)]
pub(super) struct ApiSession {
    #[serde(flatten)]
    view: SessionView,
    time_left_seconds: Option<i64>,
}

impl ApiSession {
    /// `view` as the API shows it, its seconds left counted by the service's clock.
    fn of(state: &AppState, view: SessionView) -> Self {
        let now = state.service.now();
        let time_left_seconds = view
            .ends_at_ms
            .filter(|_| view.state.runs_editor())
            .map(|end| ((end - now) / 1000).max(0));
        ApiSession {
            view,
            time_left_seconds,
        }
    }
}

pub(super) async fn list_sessions(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
) -> ApiResult<Json<Vec<ApiSession>>> {
    let sessions = state.service.sessions.sessions(&viewer).await?;
    Ok(Json(
        sessions
            .into_iter()
            .map(|view| ApiSession::of(&state, view))
            .collect(),
    ))
}

pub(super) async fn create_session(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
    ApiJson(request): ApiJson<LaunchRequest>,
) -> ApiResult<(StatusCode, Json<ApiSession>)> {
    let view = state.service.sessions.launch(&viewer, request).await?;
    Ok((StatusCode::CREATED, Json(ApiSession::of(&state, view))))
}

pub(super) async fn get_session(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
    PathId(id): PathId,
) -> ApiResult<Json<ApiSession>> {
    Ok(Json(ApiSession::of(
        &state,
        state.service.sessions.session(&viewer, &id).await?,
    )))
}

/// The last hour of the session's readings, one a minute.
pub(super) async fn session_readings(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
    PathId(id): PathId,
) -> ApiResult<Json<app::domain::usage::SessionReadings>> {
    Ok(Json(state.service.sessions.readings(&viewer, &id).await?))
}

pub(super) async fn delete_session(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
    PathId(id): PathId,
) -> ApiResult<Json<ApiSession>> {
    Ok(Json(ApiSession::of(
        &state,
        state.service.sessions.stop(&viewer, &id).await?,
    )))
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct HeartbeatBody {
    /// The person did something (typed, clicked, scrolled) since the last heartbeat.
    #[serde(default)]
    input: bool,
    /// The page has just gone out of sight (hidden or closed): it counts as gone from now.
    #[serde(default)]
    left: bool,
}

pub(super) async fn heartbeat(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
    PathId(id): PathId,
    ApiJson(body): ApiJson<HeartbeatBody>,
) -> ApiResult<Json<ApiSession>> {
    state
        .service
        .sessions
        .heartbeat(
            &viewer,
            &id,
            app::domain::presence::Beat {
                input: body.input,
                left: body.left,
            },
        )
        .await?;
    Ok(Json(ApiSession::of(
        &state,
        state.service.sessions.session(&viewer, &id).await?,
    )))
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ExtendBody {
    minutes: u32,
}

pub(super) async fn extend(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
    PathId(id): PathId,
    ApiJson(body): ApiJson<ExtendBody>,
) -> ApiResult<Json<ApiSession>> {
    Ok(Json(ApiSession::of(
        &state,
        state
            .service
            .sessions
            .extend(&viewer, &id, body.minutes)
            .await?,
    )))
}

/// The session's steps so far, then each new one as it happens, until it ends.
pub(super) async fn session_events(
    State(state): State<AppState>,
    ApiUser(viewer): ApiUser,
    PathId(id): PathId,
) -> ApiResult<Sse<impl Stream<Item = Result<Event, Infallible>>>> {
    state.service.sessions.check_owner(&viewer, &id).await?;
    // Subscribe before reading the history, so nothing falls between the two.
    let live = state.service.sessions.follow(&id);
    let history = state.service.sessions.steps_after(&id, 0).await?;
    let ended = history.iter().any(|s| s.state == SessionState::Ended);
    let follow = Follow {
        shutdown: state.service.shutting_down(),
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
pub(super) struct Follow {
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
                if let Ok(steps) = self
                    .service
                    .sessions
                    .steps_after(&self.id, self.last_seq)
                    .await
                {
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
                match self
                    .service
                    .sessions
                    .steps_after(&self.id, self.last_seq)
                    .await
                {
                    Ok(steps) => self.pending.extend(steps),
                    Err(_) => return None,
                }
            }
        }
    }
}
