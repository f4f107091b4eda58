//! The proxy's routes: where each ready session's editor is, cached per server and checked
//! against the database; the activity the proxy saw, written now and then.

use crate::runtime::editors::{self, UpstreamAuth};
use crate::store::StoreError;
use crate::util::{Clock, SystemClock};
use app::domain::session::SessionState;
use http::header::{HeaderName, HeaderValue};
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

/// Where a ready session's editor is, and when it was last used.
pub struct Route {
    pub session_id: String,
    pub owner_id: String,
    /// The editor's address (see [`crate::net::upstream`]).
    pub upstream: String,
    pub credential: EditorCredential,
    pub strip_prefix: bool,
    last_activity: AtomicI64,
    flushed_activity: AtomicI64,
    /// Traffic from API-token clients (scripts); the idle policy counts it even when tabs do not.
    last_api: AtomicI64,
    flushed_api: AtomicI64,
    /// WebSockets open to this editor now.
    websockets: AtomicUsize,
    /// The store's clock, which the reaper judges activity by.
    clock: Arc<dyn Clock>,
}

/// One of a session's open WebSockets, counted until it is dropped.
pub struct OpenWebSocket(Arc<Route>);

impl Drop for OpenWebSocket {
    fn drop(&mut self) {
        self.0.websockets.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Route {
    pub fn new(
        session_id: String,
        owner_id: String,
        upstream: String,
        auth: UpstreamAuth,
        strip_prefix: bool,
        last_activity: i64,
    ) -> Route {
        Route {
            session_id,
            owner_id,
            upstream,
            credential: EditorCredential::of(&auth),
            strip_prefix,
            last_activity: AtomicI64::new(last_activity),
            flushed_activity: AtomicI64::new(last_activity),
            last_api: AtomicI64::new(0),
            flushed_api: AtomicI64::new(0),
            websockets: AtomicUsize::new(0),
            clock: Arc::new(SystemClock),
        }
    }

    /// The route to `record`'s editor, when the session is ready and its editor known.
    pub fn of_ready(record: &crate::store::SessionRecord, clock: Arc<dyn Clock>) -> Option<Route> {
        if record.state != SessionState::Ready {
            return None;
        }
        let (Some(upstream), Some(secret)) = (&record.upstream, &record.editor_token) else {
            return None;
        };
        Some(
            Route::new(
                record.id.clone(),
                record.user_id.clone(),
                upstream.clone(),
                editors::upstream_auth(record.editor, secret),
                editors::strips_prefix(record.editor),
                record.last_activity_at,
            )
            .on_clock(clock),
        )
    }

    /// The same route, its activity stamped by `clock`.
    pub fn on_clock(self, clock: Arc<dyn Clock>) -> Route {
        Route { clock, ..self }
    }

    /// Counts one more WebSocket, unless `max` are open already.
    pub fn open_websocket(self: &Arc<Self>, max: usize) -> Option<OpenWebSocket> {
        self.websockets
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()
            .map(|_| OpenWebSocket(Arc::clone(self)))
    }

    pub fn touch(&self) {
        self.last_activity
            .store(self.clock.now_ms(), Ordering::Relaxed);
    }

    pub fn touch_api(&self) {
        let now = self.clock.now_ms();
        self.last_activity.store(now, Ordering::Relaxed);
        self.last_api.store(now, Ordering::Relaxed);
    }

    pub fn last_activity(&self) -> i64 {
        self.last_activity.load(Ordering::Relaxed)
    }
}

#[derive(Default)]
pub struct RouteTable {
    routes: RwLock<crate::util::FastMap<String, Arc<Route>>>,
}

impl RouteTable {
    pub fn get(&self, session_id: &str) -> Option<Arc<Route>> {
        self.routes.read().expect("routes").get(session_id).cloned()
    }

    pub fn insert(&self, route: Arc<Route>) {
        self.routes
            .write()
            .expect("routes")
            .insert(route.session_id.clone(), route);
    }

    pub fn remove(&self, session_id: &str) {
        self.routes.write().expect("routes").remove(session_id);
    }

    /// Each cached route's session and editor address.
    pub fn ids(&self) -> Vec<(String, String)> {
        let routes = self.routes.read().expect("routes");
        routes
            .values()
            .map(|r| (r.session_id.clone(), r.upstream.clone()))
            .collect()
    }

    /// Activity not yet written to the database: (session, last activity, last API activity).
    pub fn take_activity(&self) -> Vec<(String, i64, Option<i64>)> {
        let routes = self.routes.read().expect("routes");
        routes
            .values()
            .filter_map(|route| {
                let last = route.last_activity();
                let flushed = route.flushed_activity.swap(last, Ordering::Relaxed);
                let api = route.last_api.load(Ordering::Relaxed);
                let api_flushed = route.flushed_api.swap(api, Ordering::Relaxed);
                (last > flushed).then(|| {
                    (
                        route.session_id.clone(),
                        last,
                        (api > api_flushed).then_some(api),
                    )
                })
            })
            .collect()
    }
}

/// The editor's secret as a proxied request carries it, made once per route.
pub enum EditorCredential {
    Header(HeaderName, HeaderValue),
    /// The cookie's name, and `name=value`.
    Cookie(&'static str, HeaderValue),
    /// A secret no header can carry (our runtimes never make one): the editor refuses us.
    Unusable,
}

impl EditorCredential {
    pub fn of(auth: &UpstreamAuth) -> EditorCredential {
        let made = match auth {
            UpstreamAuth::Header(name, value) => HeaderName::from_bytes(name.as_bytes())
                .ok()
                .zip(HeaderValue::from_str(value).ok())
                .map(|(name, value)| EditorCredential::Header(name, value)),
            UpstreamAuth::Cookie(name, value) => HeaderValue::from_str(&format!("{name}={value}"))
                .ok()
                .map(|pair| EditorCredential::Cookie(name, pair)),
        };
        made.unwrap_or(EditorCredential::Unusable)
    }
}

/// Who reaches which editor through the proxy.
#[derive(Clone)]
pub struct Access {
    pub(in crate::service) routes: Arc<super::routes::RouteTable>,
    pub(in crate::service) store: crate::store::Store,
    pub(in crate::service) upstreams: Arc<crate::net::upstream::UpstreamPool>,
}

impl Access {
    pub(in crate::service) fn new(handles: &super::handles::Handles) -> Access {
        Access {
            routes: handles.routes.clone(),
            store: handles.store.clone(),
            upstreams: handles.upstreams.clone(),
        }
    }
}

impl Access {
    /// Writes proxy activity to the database, now and then rather than per request.
    pub(in crate::service) async fn flush_activity(&self) {
        for (session_id, at, api_at) in self.routes.take_activity() {
            let written = match api_at {
                Some(api_at) => self.store.touch_traffic(&session_id, api_at, true).await,
                None => Ok(()),
            }
            .and(self.store.touch_traffic(&session_id, at, false).await);
            if let Err(e) = written {
                tracing::warn!(session = %session_id, error = %e, "recording activity");
            }
        }
    }
}

impl Access {
    /// Forgets a session's cached route (its editor answered that it is gone).
    pub fn forget_route(&self, session_id: &str) {
        self.routes.remove(session_id);
    }

    /// The proxy's connections to the editors.
    pub fn upstreams(&self) -> &Arc<crate::net::upstream::UpstreamPool> {
        &self.upstreams
    }

    /// The proxy's route to a ready session's editor.
    pub async fn route(&self, session_id: &str) -> Result<Option<Arc<Route>>, StoreError> {
        match self.routes.get(session_id) {
            Some(route) => Ok(Some(route)),
            // Boxed: the database's future is large, and every proxied request's own future
            // (moved whole into its box) would otherwise be as large.
            None => Box::pin(self.load_route(session_id)).await,
        }
    }

    async fn load_route(&self, session_id: &str) -> Result<Option<Arc<Route>>, StoreError> {
        let Some(record) = self.store.session(session_id).await? else {
            return Ok(None);
        };
        let Some(route) = Route::of_ready(&record, self.store.clock()) else {
            return Ok(None);
        };
        let route = Arc::new(route);
        self.routes.insert(route.clone());
        // A stop may have run between our read and our insert; it must not leave a route behind.
        if self.store.session(session_id).await?.map(|r| r.state) != Some(SessionState::Ready) {
            self.routes.remove(session_id);
            return Ok(None);
        }
        Ok(Some(route))
    }

    /// Forgets the routes of sessions that are no longer ready, or whose editor moved: another
    /// replica may have stopped them, and this one would go on forwarding to the old address.
    pub async fn forget_stale_routes(&self) {
        let cached = self.routes.ids();
        if cached.is_empty() {
            return;
        }
        match self.store.ready_upstreams().await {
            Ok(ready) => {
                for (id, upstream) in cached {
                    if ready.get(&id) != Some(&upstream) {
                        self.routes.remove(&id);
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "checking the proxy's routes"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn activity_is_taken_once() {
        let table = RouteTable::default();
        let route = Arc::new(Route::new(
            "s".into(),
            "u".into(),
            "x:1".into(),
            UpstreamAuth::Header("a", "b".into()),
            false,
            0,
        ));
        table.insert(route.clone());
        route.touch();
        assert_eq!(table.take_activity().len(), 1);
        assert!(table.take_activity().is_empty());
    }
}
