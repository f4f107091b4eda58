//! The API server's HTTP face: Kubernetes' URL layout (`/api/v1/…`, `/apis/<group>/<version>/…`),
//! bearer tokens, the RBAC check of every request, content types of the patch kinds, and watches
//! as a stream of JSON lines that resume from a resourceVersion (410 Gone once it left the window).

use crate::api::{Api, Target};
use crate::kinds::{self, Kind};
use crate::rbac::{Attributes, Authorizer};
use crate::selectors::{FieldSelector, LabelSelector};
use crate::status::Refusal;
use crate::store::{Change, text};
use crate::validate::FieldValidation;
use axum::body::{Body, Bytes};
use axum::extract::ws::{
    Message, WebSocket, WebSocketUpgrade, rejection::WebSocketUpgradeRejection,
};
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, Method, StatusCode, Uri};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// A pod's container log, and commands run in its container, where a kubelet runs it.
pub trait PodStreams: Send + Sync {
    /// Starts `argv` in the pod's running container, stdout and stderr piped.
    fn exec(
        &self,
        namespace: &str,
        pod: &str,
        argv: Vec<String>,
    ) -> Result<tokio::process::Child, Refusal>;

    fn logs(
        &self,
        namespace: &str,
        pod: &str,
        container: Option<&str>,
        previous: bool,
        tail_lines: Option<usize>,
    ) -> Result<String, Refusal>;
}

/// A caller the API server knows: its user name and groups.
#[derive(Clone, Debug)]
pub struct Identity {
    pub user: String,
    pub groups: Vec<String>,
}

/// What the HTTP face serves from.
#[derive(Clone)]
pub struct Server {
    pub api: Api,
    pub authorizer: Arc<Authorizer>,
    /// Bearer token → identity.
    pub tokens: Arc<HashMap<String, Identity>>,
    pub logs: Option<Arc<dyn PodStreams>>,
    /// Requests served, by verb and resource ("create pods"), for the figures of a launch.
    pub calls: Arc<std::sync::Mutex<std::collections::BTreeMap<String, u64>>>,
}

pub fn router(server: Server) -> axum::Router {
    axum::Router::new().fallback(handle).with_state(server)
}

/// The parts of a resource URL.
#[derive(Debug)]
struct Route {
    kind: &'static Kind,
    namespace: Option<String>,
    name: Option<String>,
    subresource: Option<String>,
}

fn route(path: &str) -> Result<Route, Refusal> {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, rest) = match segments.as_slice() {
        ["api", version, rest @ ..] => ("", *version, rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => {
            return Err(Refusal::not_found(
                "the server could not find the requested resource",
                "",
            ));
        }
    };
    let unknown = |resource: &str| {
        Refusal::new(
            404,
            "NotFound",
            format!("the server could not find the requested resource ({resource})"),
        )
    };
    let find =
        |resource: &str| kinds::find(group, version, resource).ok_or_else(|| unknown(resource));
    let namespaced =
        |resource: &str| kinds::find(group, version, resource).is_some_and(|k| k.namespaced);
    let owned = |s: &&str| s.to_string();
    Ok(match rest {
        ["namespaces", ns, resource, tail @ ..] if namespaced(resource) => Route {
            kind: find(resource)?,
            namespace: Some(ns.to_string()),
            name: tail.first().map(owned),
            subresource: tail.get(1).map(owned),
        },
        [resource, tail @ ..] if !rest.is_empty() => {
            let kind = find(resource)?;
            Route {
                kind,
                namespace: None,
                name: tail.first().map(owned),
                subresource: tail.get(1).map(owned),
            }
        }
        _ => return Err(unknown(path)),
    })
}

fn identity(server: &Server, headers: &HeaderMap) -> Result<Identity, Refusal> {
    let token = headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    token
        .and_then(|t| server.tokens.get(t).cloned())
        .ok_or_else(|| Refusal::new(401, "Unauthorized", "Unauthorized"))
}

fn verb(method: &Method, route: &Route, watch: bool) -> &'static str {
    match (method.as_str(), route.name.is_some()) {
        ("GET", _) if watch => "watch",
        ("GET", true) if route.subresource.as_deref() == Some("exec") => "create",
        ("GET", true) => "get",
        ("GET", false) => "list",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", true) => "delete",
        ("DELETE", false) => "deletecollection",
        _ => "unknown",
    }
}

async fn handle(
    State(server): State<Server>,
    method: Method,
    uri: Uri,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
    body: Bytes,
) -> Response {
    let who = match identity(&server, &headers) {
        Ok(who) => who,
        Err(refused) => return refused.into_response(),
    };
    if uri.path() == "/version" {
        return axum::Json(json!({"major": "1", "minor": "33", "gitVersion": "v1.33.0-sim"}))
            .into_response();
    }
    let route = match route(uri.path()) {
        Ok(route) => route,
        Err(refused) => return refused.into_response(),
    };
    let watch = query.get("watch").is_some_and(|w| w == "true" || w == "1");
    let resource = match &route.subresource {
        Some(sub) => format!("{}/{sub}", route.kind.resource),
        None => route.kind.resource.to_string(),
    };
    let attributes = Attributes {
        user: who.user.clone(),
        groups: who.groups.clone(),
        verb: verb(&method, &route, watch).to_string(),
        group: route.kind.group.to_string(),
        resource,
        // A namespace object is in itself, for RBAC as for the API server.
        namespace: route.namespace.clone().or_else(|| {
            (route.kind.kind == "Namespace")
                .then(|| route.name.clone())
                .flatten()
        }),
        name: route.name.clone(),
    };
    *server
        .calls
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .entry(format!("{} {}", attributes.verb, attributes.resource))
        .or_default() += 1;
    if !server.authorizer.allows(&attributes) {
        return Refusal::forbidden(Authorizer::refusal(&attributes)).into_response();
    }
    if route.subresource.as_deref() == Some("exec") && route.kind.kind == "Pod" {
        return exec(&server, &route, &uri, upgrade);
    }
    match serve(
        &server, &method, &route, &query, &headers, &body, watch, &who,
    )
    .await
    {
        Ok(response) => response,
        Err(refused) => refused.into_response(),
    }
}

/// `pods/exec` over a WebSocket of the `v4.channel.k8s.io` protocol, as the API server hands it
/// on to the kubelet: each frame's first byte is its channel (1 stdout, 2 stderr, 3 the final
/// `Status`), the exit code in the status's causes.
fn exec(
    server: &Server,
    route: &Route,
    uri: &Uri,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    let name = route.name.clone().unwrap_or_default();
    let namespace = route.namespace.clone().unwrap_or_default();
    let target = Target {
        kind: route.kind,
        namespace: route.namespace.clone(),
        name: name.clone(),
    };
    if let Err(refused) = server.api.get(&target) {
        return refused.into_response();
    }
    let argv: Vec<String> = form_urlencoded::parse(uri.query().unwrap_or("").as_bytes())
        .filter(|(key, _)| key == "command")
        .map(|(_, value)| value.into_owned())
        .collect();
    if argv.is_empty() {
        return Refusal::bad_request("you must specify at least 1 command").into_response();
    }
    let Ok(upgrade) = upgrade else {
        return Refusal::bad_request("Upgrade request required").into_response();
    };
    let Some(streams) = server.logs.clone() else {
        return Refusal::bad_request(format!(
            "unable to upgrade connection: container not found (\"editor\") in pod \"{name}\""
        ))
        .into_response();
    };
    let shown = argv.join(" ");
    match streams.exec(&namespace, &name, argv) {
        Ok(child) => upgrade
            .protocols(["v4.channel.k8s.io"])
            .on_upgrade(move |socket| pump(socket, child, shown)),
        Err(refused) => refused.into_response(),
    }
}

/// Reads what `from` has, or waits forever once it is closed.
async fn read_some(
    from: &mut Option<impl tokio::io::AsyncRead + Unpin>,
    buffer: &mut [u8],
) -> std::io::Result<usize> {
    use tokio::io::AsyncReadExt;
    match from {
        Some(from) => from.read(buffer).await,
        None => std::future::pending().await,
    }
}

/// Carries an exec's output to the caller, then its exit status.
async fn pump(mut socket: WebSocket, mut child: tokio::process::Child, shown: String) {
    let mut stdout = child.stdout.take();
    let mut stderr = child.stderr.take();
    let (mut out, mut err) = (vec![0u8; 32 * 1024], vec![0u8; 32 * 1024]);
    while stdout.is_some() || stderr.is_some() {
        let (channel, read) = tokio::select! {
            read = read_some(&mut stdout, &mut out) => (1u8, read),
            read = read_some(&mut stderr, &mut err) => (2u8, read),
        };
        let n = match read {
            Ok(n) if n > 0 => n,
            _ => {
                if channel == 1 {
                    stdout = None;
                } else {
                    stderr = None;
                }
                continue;
            }
        };
        let data = if channel == 1 { &out[..n] } else { &err[..n] };
        let mut frame = Vec::with_capacity(n + 1);
        frame.push(channel);
        frame.extend_from_slice(data);
        if socket.send(Message::Binary(frame.into())).await.is_err() {
            // The caller went: so does the command, as the kubelet ends a dropped exec.
            let _ = child.kill().await;
            return;
        }
    }
    let status = match child.wait().await.ok().and_then(|s| s.code()) {
        Some(0) => json!({"metadata": {}, "status": "Success"}),
        code => {
            let code = code.unwrap_or(137);
            json!({
                "metadata": {},
                "status": "Failure",
                "message": format!("command terminated with non-zero exit code: error executing command [{shown}], exit code {code}"),
                "reason": "NonZeroExitCode",
                "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]},
            })
        }
    };
    let mut frame = vec![3u8];
    frame.extend_from_slice(status.to_string().as_bytes());
    let _ = socket.send(Message::Binary(frame.into())).await;
    let _ = socket.send(Message::Close(None)).await;
}

fn json_body(body: &Bytes) -> Result<Value, Refusal> {
    serde_json::from_slice(body)
        .map_err(|e| Refusal::bad_request(format!("json: cannot unmarshal the body: {e}")))
}

fn created(status: StatusCode, object: Value, warnings: Vec<String>) -> Response {
    let mut response = (status, axum::Json(object)).into_response();
    for warning in warnings {
        if let Ok(value) = format!("299 - \"{}\"", warning.replace('"', "\\\"")).parse() {
            response.headers_mut().append("warning", value);
        }
    }
    response
}

#[allow(clippy::too_many_arguments)]
async fn serve(
    server: &Server,
    method: &Method,
    route: &Route,
    query: &HashMap<String, String>,
    headers: &HeaderMap,
    body: &Bytes,
    watch: bool,
    who: &Identity,
) -> Result<Response, Refusal> {
    let api = &server.api;
    let validation = FieldValidation::parse(query.get("fieldValidation").map(String::as_str))?;
    let manager = query
        .get("fieldManager")
        .cloned()
        .unwrap_or_else(|| who.user.rsplit(':').next().unwrap_or("unknown").to_string());
    let target = |name: &str| Target {
        kind: route.kind,
        namespace: route.namespace.clone(),
        name: name.to_string(),
    };
    match (method.as_str(), &route.name, route.subresource.as_deref()) {
        ("GET", None, None) => {
            let labels =
                LabelSelector::parse(query.get("labelSelector").map_or("", String::as_str))?;
            let fields = FieldSelector::parse(
                query.get("fieldSelector").map_or("", String::as_str),
                route.kind.kind,
            )?;
            if watch {
                let from = query.get("resourceVersion").and_then(|v| v.parse().ok());
                let timeout = query
                    .get("timeoutSeconds")
                    .and_then(|t| t.parse().ok())
                    .unwrap_or(1800u64);
                return Ok(watch_stream(server, route, labels, fields, from, timeout));
            }
            Ok(
                axum::Json(api.list(route.kind, route.namespace.as_deref(), &labels, &fields))
                    .into_response(),
            )
        }
        ("GET", Some(name), None) => Ok(axum::Json(api.get(&target(name))?).into_response()),
        ("GET", Some(name), Some("log")) if route.kind.kind == "Pod" => {
            let pod = api.get(&target(name))?;
            let container = query
                .get("container")
                .cloned()
                .or_else(|| Some(text(&pod, "/spec/containers/0/name")).filter(|c| !c.is_empty()));
            let logs = server.logs.as_ref().ok_or_else(|| {
                Refusal::bad_request(format!(
                    "container \"{}\" in pod \"{name}\" is waiting to start: ContainerCreating",
                    container.clone().unwrap_or_default()
                ))
            })?;
            let text = logs.logs(
                route.namespace.as_deref().unwrap_or(""),
                name,
                container.as_deref(),
                query.get("previous").is_some_and(|p| p == "true"),
                query.get("tailLines").and_then(|t| t.parse().ok()),
            )?;
            Ok((StatusCode::OK, text).into_response())
        }
        ("POST", None, None) => {
            let (object, warnings) = api.create(
                route.kind,
                route.namespace.as_deref(),
                json_body(body)?,
                validation,
                Some(&manager),
            )?;
            Ok(created(StatusCode::CREATED, object, warnings))
        }
        ("PUT", Some(name), None) => {
            let (object, warnings) =
                api.replace(&target(name), json_body(body)?, validation, &manager)?;
            Ok(created(StatusCode::OK, object, warnings))
        }
        ("PATCH", Some(name), None) => {
            let content = headers
                .get(http::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            let object = match content.split(';').next().unwrap_or("").trim() {
                "application/apply-patch+yaml" => {
                    if !query.contains_key("fieldManager") {
                        return Err(Refusal::bad_request(
                            "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
                        ));
                    }
                    let force = query.get("force").is_some_and(|f| f == "true");
                    api.apply(&target(name), json_body(body)?, &manager, force)?
                }
                "application/merge-patch+json" => {
                    api.merge(&target(name), &json_body(body)?, false, &manager)?
                }
                "application/strategic-merge-patch+json" => {
                    api.merge(&target(name), &json_body(body)?, true, &manager)?
                }
                other => {
                    return Err(Refusal::new(
                        415,
                        "UnsupportedMediaType",
                        format!(
                            "the body of the request was in an unknown format - accepted media types include: application/merge-patch+json, application/strategic-merge-patch+json, application/apply-patch+yaml (sent: {other})"
                        ),
                    ));
                }
            };
            Ok(axum::Json(object).into_response())
        }
        ("DELETE", Some(name), None) => {
            let grace = query
                .get("gracePeriodSeconds")
                .and_then(|g| g.parse().ok())
                .or_else(|| {
                    serde_json::from_slice::<Value>(body)
                        .ok()
                        .and_then(|b| b.get("gracePeriodSeconds").and_then(Value::as_i64))
                });
            Ok(axum::Json(api.delete(&target(name), grace)?).into_response())
        }
        _ => Err(Refusal::new(
            405,
            "MethodNotAllowed",
            format!(
                "the server does not allow this method on the requested resource ({method} {})",
                route.kind.resource
            ),
        )),
    }
}

/// A change as one line of a watch.
fn line(kind: &str, object: &Value) -> Bytes {
    let mut text = json!({"type": kind, "object": object}).to_string();
    text.push('\n');
    Bytes::from(text)
}

fn gone(from: u64, oldest: u64) -> Bytes {
    line(
        "ERROR",
        &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": format!("too old resource version: {from} ({oldest})"),
            "reason": "Expired", "code": 410}),
    )
}

/// A watch: what changed since `from` (or everything there is, as ADDED, when no version is
/// given), then the changes as they come, until `timeout` seconds pass.
fn watch_stream(
    server: &Server,
    route: &Route,
    labels: LabelSelector,
    fields: FieldSelector,
    from: Option<u64>,
    timeout: u64,
) -> Response {
    let resource = route.kind.resource.to_string();
    let namespace = route.namespace.clone();
    let store = server.api.store.clone();
    let wanted = move |c: &Change| {
        c.resource == resource
            && namespace.as_deref().is_none_or(|ns| ns == c.namespace)
            && labels.matches(&c.object)
            && fields.matches(&c.object)
    };
    let (first, feed, start): (Vec<Bytes>, _, u64) = match from.filter(|v| *v > 0) {
        Some(version) => match store.follow(version) {
            Some((past, feed)) => (
                past.iter()
                    .filter(|c| wanted(c))
                    .map(|c| line(c.kind, &c.object))
                    .collect(),
                Some(feed),
                past.last().map_or(version, |c| c.revision),
            ),
            None => (
                vec![gone(version, store.read(|o| o.compacted()))],
                None,
                version,
            ),
        },
        None => {
            let (mut current, now): (Vec<Bytes>, u64) = store.read(|o| {
                let lines = o
                    .objects
                    .iter()
                    .filter(|((r, ns, _), v)| {
                        wanted(&Change {
                            revision: 0,
                            kind: "ADDED",
                            resource: r.clone(),
                            namespace: ns.clone(),
                            object: (*v).clone(),
                        })
                    })
                    .map(|(_, v)| line("ADDED", v))
                    .collect();
                (lines, o.revision())
            });
            match store.follow(now) {
                Some((past, feed)) => {
                    current.extend(
                        past.iter()
                            .filter(|c| wanted(c))
                            .map(|c| line(c.kind, &c.object)),
                    );
                    let start = past.last().map_or(now, |c| c.revision);
                    (current, Some(feed), start)
                }
                None => (current, None, now),
            }
        }
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(timeout);
    let state = (first.into_iter(), feed, deadline, wanted, start);
    let stream = futures_util::stream::unfold(
        state,
        |(mut first, mut feed, deadline, wanted, mut last)| async move {
            if let Some(bytes) = first.next() {
                return Some((
                    Ok::<_, std::convert::Infallible>(bytes),
                    (first, feed, deadline, wanted, last),
                ));
            }
            let receiver = feed.as_mut()?;
            loop {
                let change = match tokio::time::timeout_at(deadline, receiver.recv()).await {
                    Err(_) => return None,
                    Ok(Ok(change)) => change,
                    // Fell behind the feed: the client must list again, as after a compaction.
                    Ok(Err(tokio::sync::broadcast::error::RecvError::Lagged(_))) => {
                        return Some((Ok(gone(last, last)), (first, None, deadline, wanted, last)));
                    }
                    Ok(Err(_)) => return None,
                };
                if change.revision <= last {
                    continue;
                }
                last = change.revision;
                if wanted(&change) {
                    let bytes = line(change.kind, &change.object);
                    return Some((Ok(bytes), (first, feed, deadline, wanted, last)));
                }
            }
        },
    );
    Response::builder()
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Body::from_stream(stream))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_the_resource_namespace_name_and_subresource() {
        let r = route("/api/v1/namespaces/u-a/pods/p/log").unwrap();
        assert_eq!(
            (
                r.kind.resource,
                r.namespace.as_deref(),
                r.name.as_deref(),
                r.subresource.as_deref()
            ),
            ("pods", Some("u-a"), Some("p"), Some("log"))
        );
        let r = route("/api/v1/namespaces/u-a").unwrap();
        assert_eq!(
            (r.kind.resource, r.namespace, r.name.as_deref()),
            ("namespaces", None, Some("u-a"))
        );
        let r = route("/apis/networking.k8s.io/v1/namespaces/u-a/networkpolicies").unwrap();
        assert_eq!(
            (r.kind.kind, r.namespace.as_deref(), r.name),
            ("NetworkPolicy", Some("u-a"), None)
        );
        assert_eq!(route("/api/v1/pods").unwrap().namespace, None);
        assert_eq!(route("/api/v1/widgets").unwrap_err().code, 404);
    }
}
