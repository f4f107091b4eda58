//! WebSockets (any upgrade): admitted under the session's ceiling before the request is sent,
//! then spliced byte for byte after the editor's 101 ([`crate::net::relay`]), so frames,
//! subprotocols and extensions pass untouched; the relay ends when the credential it was opened
//! with no longer stands, when an admin's grant ends, or when the server shuts down.

use super::headers::confine_to_session;
use super::respond::json_error;
use super::{Activity, Exchange};
use crate::net::relay;
use crate::net::upstream::EditorStream;
use crate::service::Service;
use crate::service::routes::{OpenWebSocket, Route};
use app::domain::scope::Scope;
use axum::body::Body;
use axum::response::Response;
use http::{HeaderMap, StatusCode};
use hyper::upgrade::{OnUpgrade, Upgraded};
use hyper_util::rt::TokioIo;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

/// A WebSocket the browser asked for, admitted and waiting for the editor's 101.
pub(super) struct Pending {
    /// The browser's side, once the answer has gone.
    client: OnUpgrade,
    /// Its place under the session's ceiling, held while it lasts.
    websocket: OpenWebSocket,
    /// The credential it was opened with, checked again while it lasts.
    credential: Option<crate::identity::auth::Credential>,
}

/// Admits the upgrade a request with `headers` asks for under the session's ceiling, so that one
/// page or script cannot hold every connection the server has; `None` past it ([`too_many`]).
/// `client`: the browser's side of it.
pub(super) fn admit(cx: &Exchange<'_>, headers: &HeaderMap, client: OnUpgrade) -> Option<Pending> {
    let max = cx.state.service.config().proxy.max_websockets_per_session;
    let websocket = cx.route.open_websocket(max)?;
    // An upgraded connection outlives this request: it is checked again while it lasts.
    let accounts = &cx.state.service.accounts;
    let credential = match cx.client.entering {
        true => accounts.entry_credential(headers),
        false => accounts.credential(headers),
    };
    Some(Pending {
        client,
        websocket,
        credential,
    })
}

/// The answer to an upgrade past the session's ceiling.
pub(super) fn too_many(cx: &Exchange<'_>) -> Response {
    let max = cx.state.service.config().proxy.max_websockets_per_session;
    json_error(
        StatusCode::TOO_MANY_REQUESTS,
        "too_many_websockets",
        &format!(
            "this session has {max} WebSockets open already; close some (other tabs, perhaps) and try again"
        ),
    )
}

/// The editor's 101, passed on with no body; the two sides are spliced once both have switched.
pub(super) fn splice(
    cx: &Exchange<'_>,
    mut response: Response,
    pending: Option<Pending>,
) -> Response {
    // Browsers take cookies from a handshake's answer too.
    confine_to_session(response.headers_mut(), &cx.route);
    if let Some(pending) = pending {
        let upstream = hyper::upgrade::on(&mut response);
        let splice = Splice {
            route: cx.route.clone(),
            activity: cx.activity,
            busy_poll: Duration::from_micros(
                cx.state.service.config().proxy.websocket_busy_poll_us,
            ),
            service: cx.state.service.clone(),
            slot: cx.client.slot.cloned(),
            // Whose credential it is: the owner's, or an admin's who entered.
            user_id: cx.caller.user.id.clone(),
            admin_until: cx.admin_until,
        };
        tokio::spawn(splice.run(pending, upstream));
    }
    let (parts, _) = response.into_parts();
    Response::from_parts(parts, Body::empty())
}

/// What an upgraded connection's task keeps of its request.
struct Splice {
    route: Arc<Route>,
    activity: Activity,
    busy_poll: Duration,
    service: Arc<Service>,
    /// The connection's place under the cap, kept while the relay lasts.
    slot: Option<crate::http::ConnectionSlot>,
    user_id: String,
    admin_until: Option<i64>,
}

impl Splice {
    /// Relays until either side ends, the credential is revoked or the server shuts down.
    async fn run(mut self, pending: Pending, upstream: OnUpgrade) {
        let Pending {
            client,
            websocket,
            credential,
        } = pending;
        let _held = (self.slot.take(), websocket);
        let (Ok(client), Ok(upstream)) = tokio::join!(client, upstream) else {
            return;
        };
        let _counted = self.service.metrics().websocket_opened();
        let route = self.route.clone();
        let relay = relay_upgraded(client, upstream, route, self.activity, self.busy_poll);
        // The server's shutdown ends it too, so that draining does not wait for it.
        let mut shutdown = self.service.shutting_down();
        tokio::select! {
            () = relay => {}
            () = self.revoked(credential.as_ref()) => {
                tracing::info!(session = %self.route.session_id, "closed a WebSocket whose sign-in ended");
            }
            _ = shutdown.wait_for(|closing| *closing) => {}
        }
    }

    /// Returns once `credential` no longer stands for whom it was opened by, or an admin's grant
    /// ended; never without a credential.
    async fn revoked(&self, credential: Option<&crate::identity::auth::Credential>) {
        let Some(credential) = credential else {
            return std::future::pending().await;
        };
        let grant_ends = async {
            match self.admin_until {
                Some(until) => {
                    let left = (until - self.service.now()).max(0) as u64;
                    tokio::time::sleep(Duration::from_millis(left)).await;
                }
                None => std::future::pending().await,
            }
        };
        let as_admin = self.admin_until.is_some();
        tokio::select! {
            () = until_revoked(&self.service.accounts, credential, &self.user_id, as_admin) => {}
            () = grant_ends => {}
        }
    }
}

/// Connections busy-polling at once (see [`crate::net::relay`]): one per two cores, so none on a
/// single core, where a poll would stall every other task and the side it waits for.
static SPIN_LIMIT: LazyLock<relay::SpinLimit> = LazyLock::new(|| {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    relay::SpinLimit::new(cores / 2)
});

/// How often an open WebSocket's credential is checked again, for changes on other replicas
/// (those on this one are seen at once): a lock, a logout, a revoked token.
const RECHECK_CREDENTIAL: Duration = Duration::from_secs(10);

/// Returns once `credential` no longer stands for `owner_id` (whoever it was made for), or, `as_admin`,
/// no longer for an admin acting as one: checked
/// at once when this server forgets that user or that sign-in, and every [`RECHECK_CREDENTIAL`] otherwise, each
/// connection at its own phase so that they do not all ask at once. A failing database keeps the
/// connection: it is the editor's work the user would lose.
async fn until_revoked(
    auth: &crate::service::Accounts,
    credential: &crate::identity::auth::Credential,
    owner_id: &str,
    as_admin: bool,
) {
    use tokio::sync::broadcast::error::RecvError;
    let mut forgotten = auth.forgotten();
    let phase =
        Duration::from_millis(rand::random::<u64>() % RECHECK_CREDENTIAL.as_millis() as u64);
    let mut recheck =
        tokio::time::interval_at(tokio::time::Instant::now() + phase, RECHECK_CREDENTIAL);
    recheck.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut listening = true;
    loop {
        tokio::select! {
            _ = recheck.tick() => {}
            what = forgotten.recv(), if listening => match what {
                Ok(what) if credential.touched_by(&what, owner_id) => {}
                Ok(_) => continue,
                // Missed some: one of them may have been ours.
                Err(RecvError::Lagged(_)) => {}
                Err(RecvError::Closed) => {
                    listening = false;
                    continue;
                }
            },
        }
        match auth.caller_of(credential).await {
            // An admin who entered must stay one (a demotion ends it), acting as one now.
            Ok(Some(caller))
                if caller.user.id == owner_id
                    && (!as_admin
                        || (caller.user.role == app::model::Role::Admin
                            && caller.scopes().allows(Scope::Admin))) => {}
            Ok(_) => return,
            Err(e) => tracing::warn!(error = %e, "checking a WebSocket's credential again"),
        }
    }
}

/// hyper's upgraded stream may hold bytes it read ahead, so the relay never reads under it.
impl relay::Side for TokioIo<Upgraded> {
    fn pollable(&self) -> Option<std::os::fd::RawFd> {
        None
    }
}

/// Relays an upgraded connection until both sides have ended it; bytes either way count as
/// `activity`.
async fn relay_upgraded(
    client: Upgraded,
    upstream: Upgraded,
    route: Arc<Route>,
    activity: Activity,
    busy_poll: Duration,
) {
    // Always our own connection type (`upstream::upgrade`), a plain socket.
    let editor = match upstream.downcast::<TokioIo<EditorStream>>() {
        Ok(editor) => editor,
        Err(_) => {
            tracing::error!(session = %route.session_id, "an upgraded editor connection of an unknown type");
            return;
        }
    };
    let mut editor_stream = editor.io.into_inner();
    let traffic = || activity.record(&route);
    // A plain socket from our own listener; other servers (tests') keep hyper's stream.
    let relayed = match client.downcast::<TokioIo<tokio::net::TcpStream>>() {
        Ok(client) => {
            let mut tcp = client.io.into_inner();
            let (pending, editor_pending) = (&client.read_buf, &editor.read_buf);
            relay::relay(
                &mut tcp,
                pending,
                &mut editor_stream,
                editor_pending,
                busy_poll,
                &SPIN_LIMIT,
                traffic,
            )
            .await
        }
        Err(client) => {
            let mut client = TokioIo::new(client);
            relay::relay(
                &mut client,
                b"",
                &mut editor_stream,
                &editor.read_buf,
                busy_poll,
                &SPIN_LIMIT,
                traffic,
            )
            .await
        }
    };
    if let Err(e) = relayed {
        tracing::debug!(session = %route.session_id, error = %e, "upgraded connection ended");
    }
}
