//! The kube runtime against (1) a scripted API server that asserts every request it gets
//! (method, path, query, content type, body), (2) a stateful fake API server (an axum router
//! keeping objects in memory) driven through the real service and store, and (3) optionally a
//! real cluster (`KUBECONFIG` set and `SANDBOX_KUBE_E2E=1`).

use crate::common::TestApp;
use app::domain::hold::SliceHold;
use app::domain::launch::EditorKind;
use bytes::Bytes;
use http::{Method, Request, Response};
use http_body_util::{BodyExt, Full};
use serde_json::{Value, json};
use server::runtime::kube::objects::UserPlan;
use server::runtime::kube::{KubeConfig, KubeRuntime, PodHandle, Timing, names};
use server::runtime::{EditorLaunch, Runtime, SliceBinding};
use server::service::reconcile;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn fast() -> Timing {
    Timing {
        poll: Duration::from_millis(5),
        watch_seconds: 5,
        start_timeout: Duration::from_secs(5),
        unschedulable_grace: Duration::ZERO,
    }
}

fn launch_for(user: &str, session_id: &str, editor: EditorKind) -> EditorLaunch {
    EditorLaunch {
        session_id: session_id.into(),
        user_name: user.into(),
        editor,
        base_path: format!("/s/{session_id}/"),
        env: vec![],
        slice: SliceBinding {
            gpu_uuid: None,
            device_minor: None,
            mig: None,
            memory_mib: 8192,
            cores_pct: 25,
        },
        prestart: false,
        image: None,
        disk_mib: 0,
        datasets: Vec::new(),
    }
}

fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": message, "reason": reason, "code": code})
}

// ---------------------------------------------------------------------------------------------
// (1) The request contract: every call of a launch, a stop and a reconciler pass, in order.
// ---------------------------------------------------------------------------------------------

type MockHandle = tower_test::mock::Handle<Request<kube::client::Body>, Response<Full<Bytes>>>;

/// One expected request: what it must be, and what the API server answers.
struct Expect {
    method: Method,
    path: String,
    query: Vec<String>,
    content_type: Option<&'static str>,
    /// The body must equal this (JSON), when given.
    body: Option<Value>,
    answer: (u16, Value),
}

/// The scripted API server: answers `script` in order, asserting each request; returns the
/// request bodies it saw.
fn verifier(mut handle: MockHandle, script: Vec<Expect>) -> tokio::task::JoinHandle<Vec<Value>> {
    tokio::spawn(async move {
        let mut bodies = Vec::new();
        for (i, expect) in script.into_iter().enumerate() {
            let (request, send) =
                tokio::time::timeout(Duration::from_secs(5), handle.next_request())
                    .await
                    .unwrap_or_else(|_| {
                        panic!(
                            "request #{i} ({} {}) never came",
                            expect.method, expect.path
                        )
                    })
                    .expect("the client is gone");
            let what = format!("request #{i}: {} {}", request.method(), request.uri());
            assert_eq!(request.method(), expect.method, "{what}");
            assert_eq!(request.uri().path(), expect.path, "{what}");
            let query: BTreeSet<&str> = request
                .uri()
                .query()
                .unwrap_or("")
                .split('&')
                .filter(|p| !p.is_empty())
                .collect();
            assert_eq!(
                query,
                expect.query.iter().map(String::as_str).collect(),
                "{what}"
            );
            let content_type = request
                .headers()
                .get("content-type")
                .map(|v| v.to_str().unwrap().to_string());
            assert_eq!(content_type.as_deref(), expect.content_type, "{what}");
            let bytes = request.into_body().collect().await.unwrap().to_bytes();
            let body: Value = if bytes.is_empty() {
                Value::Null
            } else {
                serde_json::from_slice(&bytes)
                    .unwrap_or_else(|e| panic!("{what}: body not JSON: {e}"))
            };
            if let Some(expected) = &expect.body {
                assert_eq!(&body, expected, "{what}");
            }
            bodies.push(body);
            let (code, answer) = expect.answer;
            // A string is sent as it is: a log, or a watch's lines of events.
            let text = match answer {
                Value::String(text) => text,
                other => other.to_string(),
            };
            send.send_response(
                Response::builder()
                    .status(code)
                    .header("content-type", "application/json")
                    .body(Full::new(Bytes::from(text)))
                    .unwrap(),
            );
        }
        bodies
    })
}

fn q(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|p| p.to_string()).collect()
}

const APPLY: &[&str] = &["force=true", "fieldManager=gpu-sandbox"];
const CREATE: &[&str] = &["fieldManager=gpu-sandbox"];
const APPLY_TYPE: Option<&str> = Some("application/apply-patch+yaml");
const JSON_TYPE: Option<&str> = Some("application/json");

fn apply(path: String, body: Value) -> Expect {
    Expect {
        method: Method::PATCH,
        path,
        query: q(APPLY),
        content_type: APPLY_TYPE,
        answer: (200, body.clone()),
        body: Some(body),
    }
}

fn get(path: String, answer: (u16, Value)) -> Expect {
    Expect {
        method: Method::GET,
        path,
        query: Vec::new(),
        content_type: None,
        body: None,
        answer,
    }
}

/// A watch of one pod from `version`, answered with these events (then the stream ends).
fn watch(pods_path: String, pod: &str, version: &str, events: &[(&str, Value)]) -> Expect {
    let query = vec![
        "watch=true".to_string(),
        "timeoutSeconds=5".to_string(),
        "allowWatchBookmarks=true".to_string(),
        format!("fieldSelector=metadata.name%3D{pod}"),
        format!("resourceVersion={version}"),
    ];
    let lines: String = events
        .iter()
        .map(|(kind, object)| format!("{}\n", json!({"type": kind, "object": object})))
        .collect();
    Expect {
        method: Method::GET,
        path: pods_path,
        query,
        content_type: None,
        body: None,
        answer: (200, Value::String(lines)),
    }
}

fn with_version(mut pod: Value, version: &str) -> Value {
    pod["metadata"]["resourceVersion"] = json!(version);
    pod
}

fn delete(path: String, answer: (u16, Value)) -> Expect {
    Expect {
        method: Method::DELETE,
        path,
        query: Vec::new(),
        content_type: JSON_TYPE,
        body: None,
        answer,
    }
}

fn to_json(value: impl serde::Serialize) -> Value {
    serde_json::to_value(value).unwrap()
}

fn with_status(mut pod: Value, status: Value) -> Value {
    pod["status"] = status;
    pod
}

fn mock_runtime(config: KubeConfig) -> (KubeRuntime, MockHandle) {
    let (service, handle) =
        tower_test::mock::pair::<Request<kube::client::Body>, Response<Full<Bytes>>>();
    let client = kube::Client::new(service, "default");
    (KubeRuntime::new(client, config).with_timing(fast()), handle)
}

#[tokio::test]
async fn launch_and_stop_send_exactly_these_requests() {
    let config = KubeConfig::default();
    let (runtime, handle) = mock_runtime(config.clone());
    let launch = launch_for("alice", "0a1b2c3d4e5f60718293", EditorKind::JupyterLab);
    let plan = UserPlan::new(&config, "alice");
    let ns = "gsb-alice";
    let core = format!("/api/v1/namespaces/{ns}");
    let pod = serde_json::to_value(plan.session_pod(&launch)).unwrap();
    let pod_path = format!("{core}/pods/session-0a1b2c3d4e5f60718293");
    let secret_path = format!("{core}/secrets/session-0a1b2c3d4e5f60718293-token");
    let script = vec![
        apply(core.clone(), to_json(plan.namespace())),
        apply(
            format!("{core}/serviceaccounts/editor"),
            to_json(plan.service_account()),
        ),
        apply(
            format!("{core}/resourcequotas/sandbox-quota"),
            to_json(plan.resource_quota()),
        ),
        apply(
            format!("{core}/limitranges/sandbox-limits"),
            to_json(plan.limit_range()),
        ),
        apply(
            format!("/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies/sandbox-isolation"),
            to_json(plan.network_policy()),
        ),
        // The workspace exists from an earlier session: 409 is fine.
        Expect {
            method: Method::POST,
            path: format!("{core}/persistentvolumeclaims"),
            query: q(CREATE),
            content_type: JSON_TYPE,
            body: Some(to_json(plan.workspace_pvc())),
            answer: (
                409,
                status(
                    409,
                    "AlreadyExists",
                    "persistentvolumeclaims \"workspace\" already exists",
                ),
            ),
        },
        // Already there: read, to grow it to the user's quota were it smaller (it is not).
        get(
            format!("{core}/persistentvolumeclaims/workspace"),
            (200, to_json(plan.workspace_pvc())),
        ),
        // The token: its value is random, checked below against what the proxy gets.
        Expect {
            method: Method::PATCH,
            path: secret_path.clone(),
            query: q(APPLY),
            content_type: APPLY_TYPE,
            body: None,
            answer: (
                200,
                json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "session-0a1b2c3d4e5f60718293-token", "namespace": ns}}),
            ),
        },
        Expect {
            method: Method::POST,
            path: format!("{core}/pods"),
            query: q(CREATE),
            content_type: JSON_TYPE,
            body: Some(pod.clone()),
            answer: (201, with_status(pod.clone(), json!({"phase": "Pending"}))),
        },
        // Not placed yet: start() watches the pod from the version it saw, until it has an address.
        get(
            pod_path.clone(),
            (
                200,
                with_version(with_status(pod.clone(), json!({"phase": "Pending"})), "11"),
            ),
        ),
        watch(
            format!("{core}/pods"),
            "session-0a1b2c3d4e5f60718293",
            "11",
            &[(
                "MODIFIED",
                with_version(
                    with_status(
                        pod.clone(),
                        json!({"phase": "Pending", "podIP": "10.244.1.7",
                            "conditions": [{"type": "PodScheduled", "status": "True"}]}),
                    ),
                    "12",
                ),
            )],
        ),
        // wait_ready: not yet, then the watch sees it become ready.
        get(
            pod_path.clone(),
            (
                200,
                with_version(
                    with_status(
                        pod.clone(),
                        json!({"phase": "Running", "podIP": "10.244.1.7",
                            "conditions": [{"type": "Ready", "status": "False"}]}),
                    ),
                    "13",
                ),
            ),
        ),
        watch(
            format!("{core}/pods"),
            "session-0a1b2c3d4e5f60718293",
            "13",
            &[
                (
                    "BOOKMARK",
                    json!({"kind": "Pod", "apiVersion": "v1", "metadata": {"resourceVersion": "14"}}),
                ),
                (
                    "MODIFIED",
                    with_version(
                        with_status(
                            pod.clone(),
                            json!({"phase": "Running", "podIP": "10.244.1.7",
                                "conditions": [{"type": "Ready", "status": "True"}]}),
                        ),
                        "15",
                    ),
                ),
            ],
        ),
        // stop: the pod and its Secret; a Secret gone already is fine.
        delete(pod_path.clone(), (200, pod.clone())),
        delete(
            secret_path.clone(),
            (
                404,
                status(
                    404,
                    "NotFound",
                    "secrets \"session-0a1b2c3d4e5f60718293-token\" not found",
                ),
            ),
        ),
    ];
    let verifier = verifier(handle, script);
    let running = runtime.start(&launch).await.expect("started");
    assert_eq!(running.upstream, "10.244.1.7:8888");
    let handle: PodHandle = serde_json::from_str(&running.handle).unwrap();
    assert_eq!(
        (
            handle.namespace.as_str(),
            handle.pod.as_str(),
            handle.secret.as_str()
        ),
        (
            ns,
            "session-0a1b2c3d4e5f60718293",
            "session-0a1b2c3d4e5f60718293-token"
        )
    );
    runtime
        .wait_ready(&launch, &running, Duration::from_secs(5))
        .await
        .expect("ready");
    runtime.stop(&running.handle).await.expect("stopped");
    let bodies = verifier.await.expect("every request as expected");
    // The Secret carries exactly the token the proxy presents; the pod never does.
    let secret = &bodies[7];
    assert_eq!(secret["kind"], "Secret");
    assert_eq!(
        secret["metadata"]["labels"]["gpu-sandbox/session"],
        "0a1b2c3d4e5f60718293"
    );
    let token: k8s_openapi::ByteString =
        serde_json::from_value(secret["data"]["token"].clone()).unwrap();
    assert_eq!(String::from_utf8(token.0).unwrap(), running.secret);
    assert!(!bodies[8].to_string().contains(&running.secret));
}

#[tokio::test]
async fn a_crashing_editor_fails_with_its_log_and_is_cleaned_up_by_start() {
    let config = KubeConfig::default();
    let (runtime, handle) = mock_runtime(config.clone());
    let launch = launch_for("bob", "feedc0de", EditorKind::Marimo);
    let plan = UserPlan::new(&config, "bob");
    let core = "/api/v1/namespaces/gsb-bob".to_string();
    let pod = serde_json::to_value(plan.session_pod(&launch)).unwrap();
    let pod_path = format!("{core}/pods/session-feedc0de");
    let ok = |v: Value| (200, v);
    let mut script: Vec<Expect> = vec![
        apply(
            core.clone(),
            serde_json::to_value(plan.namespace()).unwrap(),
        ),
        apply(
            format!("{core}/serviceaccounts/editor"),
            serde_json::to_value(plan.service_account()).unwrap(),
        ),
        apply(
            format!("{core}/resourcequotas/sandbox-quota"),
            serde_json::to_value(plan.resource_quota()).unwrap(),
        ),
        apply(
            format!("{core}/limitranges/sandbox-limits"),
            serde_json::to_value(plan.limit_range()).unwrap(),
        ),
        apply(
            "/apis/networking.k8s.io/v1/namespaces/gsb-bob/networkpolicies/sandbox-isolation"
                .into(),
            serde_json::to_value(plan.network_policy()).unwrap(),
        ),
        Expect {
            method: Method::POST,
            path: format!("{core}/persistentvolumeclaims"),
            query: q(CREATE),
            content_type: JSON_TYPE,
            body: None,
            answer: ok(serde_json::to_value(plan.workspace_pvc()).unwrap()),
        },
        Expect {
            method: Method::PATCH,
            path: format!("{core}/secrets/session-feedc0de-token"),
            query: q(APPLY),
            content_type: APPLY_TYPE,
            body: None,
            answer: ok(
                json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "session-feedc0de-token"}}),
            ),
        },
        Expect {
            method: Method::POST,
            path: format!("{core}/pods"),
            query: q(CREATE),
            content_type: JSON_TYPE,
            body: Some(pod.clone()),
            answer: ok(pod.clone()),
        },
        get(
            pod_path.clone(),
            ok(with_status(
                pod.clone(),
                json!({"phase": "Running", "podIP": "10.244.2.9",
            "containerStatuses": [{"name": "editor", "image": "x", "imageID": "", "ready": false, "restartCount": 4,
              "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s restarting failed container"}}}]}),
            )),
        ),
    ];
    // The previous container's last lines, then the cleanup.
    script.push(Expect {
        method: Method::GET,
        path: format!("{pod_path}/log"),
        query: q(&["container=editor", "tailLines=20", "previous=true"]),
        content_type: None,
        body: None,
        answer: (200, json!("ModuleNotFoundError: No module named 'marimo'")),
    });
    script.push(delete(pod_path.clone(), ok(pod.clone())));
    script.push(delete(
        format!("{core}/secrets/session-feedc0de-token"),
        ok(json!({"kind": "Status", "apiVersion": "v1", "status": "Success"})),
    ));
    let verifier = verifier(handle, script);
    let error = runtime.start(&launch).await.expect_err("a crashing editor");
    verifier.await.expect("every request as expected");
    let message = error.user_message();
    assert!(
        message.contains("the editor keeps crashing (CrashLoopBackOff)"),
        "{message}"
    );
    assert!(message.contains("No module named 'marimo'"), "{message}");
}

#[tokio::test]
async fn a_reconciler_pass_deletes_orphans_and_ends_lost_sessions_with_a_refund() {
    let config = KubeConfig::default();
    let (runtime, handle) = mock_runtime(config.clone());
    // The reaper's tick would ask for the ready session's pod, a request the script does not
    // expect, whenever it came during the pass: none comes in this test's time.
    let app = TestApp::start_kube(runtime, |c| {
        c.idle.reaper_period_ms = 3_600_000;
    })
    .await;
    let store = &app.store;
    let (user_id, _) = app.user("carol").await;
    // A ready session whose pod the cluster no longer has.
    let an_hour = |_: &str| 1000;
    let record = store
        .launch(server::store::LaunchPlan {
            user_id: &user_id,
            image: None,
            editor: EditorKind::JupyterLab,
            slice_mib: 8192,
            burst: false,
            duration_minutes: 60,
            limits: app.service.config().default_limits(),
            disk_mib: None,
            price_on: &an_hour,
            queue_price: 1000,
            use_warm: false,
        })
        .await
        .expect("launched on a free slot")
        .record;
    let lost = PodHandle {
        namespace: "gsb-carol".into(),
        pod: names::pod_name(&record.id),
        secret: names::secret_name(&record.id),
        ..PodHandle::default()
    };
    store
        .set_runtime(&record.id, "10.244.3.3:8888", "tok", &lost.to_json())
        .await
        .unwrap();
    store.mark_ready(&record.id, "ready").await.unwrap();
    let (balance_before, held_before) = store.credits(&user_id).await.unwrap();
    assert_eq!(held_before, 1000);

    let orphan = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "session-deadbeef", "namespace": "gsb-dave",
        "labels": {"app.kubernetes.io/managed-by": "gpu-sandbox", "gpu-sandbox/session": "deadbeef"}},
        "status": {"phase": "Running"}});
    let pod_path = format!("/api/v1/namespaces/gsb-carol/pods/{}", lost.pod);
    let not_found = |what: &str| (404, status(404, "NotFound", &format!("{what} not found")));
    let script = vec![
        Expect {
            method: Method::GET,
            path: "/api/v1/pods".into(),
            query: q(&[
                "labelSelector=app.kubernetes.io%2Fmanaged-by%3Dgpu-sandbox%2Cgpu-sandbox%2Fsession",
            ]),
            content_type: None,
            body: None,
            answer: (
                200,
                json!({"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "7"}, "items": [orphan]}),
            ),
        },
        delete(
            "/api/v1/namespaces/gsb-dave/pods/session-deadbeef".into(),
            (200, orphan.clone()),
        ),
        delete(
            "/api/v1/namespaces/gsb-dave/secrets/session-deadbeef-token".into(),
            not_found("secret"),
        ),
        // The second look before ending a session: really gone.
        get(pod_path.clone(), not_found("pod")),
        // The service's stop path: delete what is left, then settle.
        delete(pod_path.clone(), not_found("pod")),
        delete(
            format!("/api/v1/namespaces/gsb-carol/secrets/{}", lost.secret),
            (
                200,
                json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}),
            ),
        ),
    ];
    let verifier = verifier(handle, script);
    let report = reconcile::run_once(&app.service).await.expect("a pass");
    verifier.await.expect("every request as expected");
    assert_eq!(report.deleted_pods, vec!["session-deadbeef".to_string()]);
    assert_eq!(report.lost_sessions, vec![record.id.clone()]);
    let ended = store.session(&record.id).await.unwrap().unwrap();
    assert_eq!(ended.state, app::domain::session::SessionState::Ended);
    assert_eq!(
        ended.end_reason,
        Some(app::domain::session::EndReason::Lost)
    );
    let (balance, held) = store.credits(&user_id).await.unwrap();
    assert_eq!(held, 0, "the hold is released");
    assert!(
        balance > balance_before - 1000,
        "unused time refunded: {balance} vs {balance_before}"
    );
    let ledger = store.ledger(&user_id).await.unwrap();
    assert!(
        ledger
            .iter()
            .any(|e| e.kind == "refund" && e.session_id.as_deref() == Some(record.id.as_str()))
    );
    app.stop().await;
}

// ---------------------------------------------------------------------------------------------
// (2) A stateful fake API server: objects in memory, apply/create/get/list/delete, quota.
// ---------------------------------------------------------------------------------------------

/// What the fake scheduler does with a new pod.
#[derive(Clone, Debug)]
enum Fate {
    /// Placed and ready at once.
    Ready,
    /// Placed, not ready until the test says so ([`FakeApi::make_ready`]).
    NotReady,
    /// Never placed: the scheduler's message.
    Unschedulable(String),
    /// Refused at create with this HTTP status and message.
    Refuse(u16, String),
}

#[derive(Default)]
struct Cluster {
    /// (resource, namespace, name) → object; namespace "" for cluster-scoped ones.
    objects: BTreeMap<(String, String, String), Value>,
    /// (method, resource) → count.
    calls: BTreeMap<(String, String), usize>,
    conflicts: usize,
    next_ip: u32,
    fate: Option<Fate>,
    /// Refuses to grow volumes, as a storage class without `allowVolumeExpansion` does.
    fixed_size_volumes: bool,
    version: u64,
    /// Where volumes keep their files (`<root>/<namespace>/<claim>`), for exec into pods.
    volumes: Option<std::path::PathBuf>,
    /// The query of each exec, as the API server received it.
    execs: Vec<String>,
    /// Pod changes, for watches: (namespace, name, event type, pod).
    pod_events: Option<tokio::sync::broadcast::Sender<(String, String, &'static str, Value)>>,
}

impl Cluster {
    fn pod_events(
        &mut self,
    ) -> &tokio::sync::broadcast::Sender<(String, String, &'static str, Value)> {
        self.pod_events
            .get_or_insert_with(|| tokio::sync::broadcast::channel(64).0)
    }

    /// The next resourceVersion, as the API server gives one to every write.
    fn next_version(&mut self) -> String {
        self.version += 1;
        self.version.to_string()
    }

    fn pod_changed(&mut self, ns: &str, name: &str, kind: &'static str, pod: &Value) {
        let _ = self
            .pod_events()
            .send((ns.to_string(), name.to_string(), kind, pod.clone()));
    }
}

#[derive(Clone, Default)]
struct FakeApi(Arc<Mutex<Cluster>>);

impl FakeApi {
    fn set_fate(&self, fate: Fate) {
        self.0.lock().unwrap().fate = Some(fate);
    }

    fn names(&self, resource: &str) -> Vec<(String, String)> {
        let cluster = self.0.lock().unwrap();
        cluster
            .objects
            .keys()
            .filter(|(r, _, _)| r == resource)
            .map(|(_, ns, name)| (ns.clone(), name.clone()))
            .collect()
    }

    fn remove(&self, resource: &str, ns: &str, name: &str) -> bool {
        let mut cluster = self.0.lock().unwrap();
        cluster
            .objects
            .remove(&(resource.to_string(), ns.to_string(), name.to_string()))
            .is_some()
    }

    /// Adds annotations to an object, as HAMi's scheduler does to the pods it places.
    fn annotate(&self, resource: &str, ns: &str, name: &str, annotations: Value) -> bool {
        let mut cluster = self.0.lock().unwrap();
        let key = (resource.to_string(), ns.to_string(), name.to_string());
        let Some(object) = cluster.objects.get_mut(&key) else {
            return false;
        };
        for (k, v) in annotations.as_object().unwrap() {
            object["metadata"]["annotations"][k] = v.clone();
        }
        true
    }

    /// Marks a pod ready, as the kubelet would once its probe passes.
    fn make_ready(&self, ns: &str, name: &str) -> bool {
        let mut cluster = self.0.lock().unwrap();
        let key = ("pods".to_string(), ns.to_string(), name.to_string());
        let Some(pod) = cluster.objects.get_mut(&key) else {
            return false;
        };
        pod["status"]["conditions"] = json!([{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"}]);
        let mut pod = pod.clone();
        pod["metadata"]["resourceVersion"] = json!(cluster.next_version());
        cluster.objects.insert(key, pod.clone());
        cluster.pod_changed(ns, name, "MODIFIED", &pod);
        true
    }

    /// A watch of one pod (`fieldSelector=metadata.name=…`): its state now, then its changes.
    fn watch_pod(&self, path: &str, query: &str) -> axum::response::Response {
        let ns = path
            .split('/')
            .skip_while(|p| *p != "namespaces")
            .nth(1)
            .unwrap_or_default()
            .to_string();
        let name = query
            .split('&')
            .find_map(|p| p.strip_prefix("fieldSelector=metadata.name%3D"))
            .expect("our watches select one pod by name")
            .to_string();
        let (current, events) = {
            let mut cluster = self.0.lock().unwrap();
            *cluster
                .calls
                .entry(("GET".to_string(), "pods".to_string()))
                .or_default() += 1;
            let current = cluster
                .objects
                .get(&("pods".to_string(), ns.clone(), name.clone()))
                .cloned();
            (current, cluster.pod_events().subscribe())
        };
        let line = |kind: &str, pod: &Value| -> Result<Bytes, std::io::Error> {
            Ok(Bytes::from(format!(
                "{}\n",
                json!({"type": kind, "object": pod})
            )))
        };
        let first = futures_util::stream::iter(current.map(|pod| line("ADDED", &pod)));
        let changes = futures_util::stream::unfold(events, move |mut events| {
            let (ns, name) = (ns.clone(), name.clone());
            async move {
                loop {
                    match events.recv().await {
                        Ok((n, m, kind, pod)) if n == ns && m == name => {
                            return Some((line(kind, &pod), events));
                        }
                        Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                        Err(tokio::sync::broadcast::error::RecvError::Closed) => return None,
                    }
                }
            }
        });
        Response::builder()
            .status(200)
            .header("content-type", "application/json")
            .body(axum::body::Body::from_stream(
                futures_util::StreamExt::chain(first, changes),
            ))
            .unwrap()
    }

    fn calls(&self, method: &str, resource: &str) -> usize {
        let cluster = self.0.lock().unwrap();
        cluster
            .calls
            .get(&(method.to_string(), resource.to_string()))
            .copied()
            .unwrap_or(0)
    }

    fn client(&self) -> kube::Client {
        let state = self.clone();
        let router = axum::Router::new().fallback(move |request: axum::extract::Request| {
            let state = state.clone();
            async move { state.handle(request).await }
        });
        kube::Client::new(router, "default")
    }

    /// A client that reaches the fake over TCP on loopback, as exec's WebSocket upgrade needs
    /// a real connection.
    async fn tcp_client(&self) -> kube::Client {
        let state = self.clone();
        let router = axum::Router::new().fallback(move |request: axum::extract::Request| {
            let state = state.clone();
            async move { state.handle(request).await }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, router).await });
        kube::Client::try_from(kube::Config::new(url.parse().unwrap())).unwrap()
    }

    /// Keeps volumes' files under `root`, so that execs into pods see their workspace.
    fn keep_volumes_in(&self, root: &std::path::Path) {
        self.0.lock().unwrap().volumes = Some(root.to_path_buf());
    }

    /// The directory standing for a volume (made on first use).
    fn volume_dir(&self, namespace: &str, claim: &str) -> std::path::PathBuf {
        let cluster = self.0.lock().unwrap();
        let dir = cluster
            .volumes
            .as_ref()
            .expect("keep_volumes_in first")
            .join(namespace)
            .join(claim);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn execs(&self) -> Vec<String> {
        self.0.lock().unwrap().execs.clone()
    }

    /// An exec into a pod, as the kubelet runs it: the command runs here, with each path the
    /// container mounts a claim at standing for that claim's directory, its stdout streamed on
    /// channel 1 and its exit as a `Status` on channel 3 (`v4`/`v5.channel.k8s.io`).
    async fn exec(&self, request: axum::extract::Request) -> axum::response::Response {
        use axum::extract::FromRequestParts;
        use axum::extract::ws::{Message, WebSocketUpgrade};
        let (mut parts, _) = request.into_parts();
        let path = parts.uri.path().to_string();
        let query = parts.uri.query().unwrap_or("").to_string();
        let params: Vec<(String, String)> = axum::extract::Query::try_from_uri(&parts.uri)
            .map(|q| q.0)
            .unwrap();
        let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        let ["api", "v1", "namespaces", ns, "pods", name, "exec"] = segments.as_slice() else {
            return Response::builder()
                .status(404)
                .body(axum::body::Body::empty())
                .unwrap();
        };
        let (ns, name) = (ns.to_string(), name.to_string());
        let mounts: Vec<(String, std::path::PathBuf)> = {
            let mut cluster = self.0.lock().unwrap();
            cluster.execs.push(query.clone());
            *cluster
                .calls
                .entry(("CONNECT".into(), "pods/exec".into()))
                .or_default() += 1;
            let key = ("pods".to_string(), ns.clone(), name.clone());
            let Some(pod) = cluster.objects.get(&key).cloned() else {
                let body = status(404, "NotFound", &format!("pods \"{name}\" not found"));
                return Response::builder()
                    .status(404)
                    .body(axum::body::Body::from(body.to_string()))
                    .unwrap();
            };
            let root = cluster.volumes.clone().expect("keep_volumes_in first");
            let claims: BTreeMap<String, String> = pod["spec"]["volumes"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|v| {
                    Some((
                        v["name"].as_str()?.to_string(),
                        v["persistentVolumeClaim"]["claimName"]
                            .as_str()?
                            .to_string(),
                    ))
                })
                .collect();
            pod["spec"]["containers"][0]["volumeMounts"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|m| {
                    let claim = claims.get(m["name"].as_str()?)?;
                    let dir = root.join(&ns).join(claim);
                    std::fs::create_dir_all(&dir).unwrap();
                    Some((m["mountPath"].as_str()?.to_string(), dir))
                })
                .collect()
        };
        let command: Vec<String> = params
            .iter()
            .filter(|(k, _)| k == "command")
            .map(|(_, v)| {
                mounts
                    .iter()
                    .find(|(at, _)| at == v)
                    .map(|(_, dir)| dir.display().to_string())
                    .unwrap_or_else(|| v.clone())
            })
            .collect();
        let upgrade = match WebSocketUpgrade::from_request_parts(&mut parts, &()).await {
            Ok(upgrade) => upgrade,
            Err(e) => return axum::response::IntoResponse::into_response(e),
        };
        upgrade
            .protocols(["v5.channel.k8s.io", "v4.channel.k8s.io"])
            .on_upgrade(move |mut socket| async move {
                use tokio::io::AsyncReadExt;
                let mut child = tokio::process::Command::new(&command[0])
                    .args(&command[1..])
                    .stdin(std::process::Stdio::null())
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::null())
                    .kill_on_drop(true)
                    .spawn()
                    .unwrap();
                let mut stdout = child.stdout.take().unwrap();
                let mut buffer = vec![0u8; 64 * 1024];
                loop {
                    let n = stdout.read(&mut buffer[1..]).await.unwrap();
                    if n == 0 {
                        break;
                    }
                    buffer[0] = 1;
                    let frame = Bytes::copy_from_slice(&buffer[..=n]);
                    if socket.send(Message::Binary(frame)).await.is_err() {
                        return;
                    }
                }
                let code = child.wait().await.unwrap().code().unwrap_or(-1);
                let exit = if code == 0 {
                    json!({"metadata": {}, "status": "Success"})
                } else {
                    json!({"metadata": {}, "status": "Failure",
                        "message": format!("command terminated with non-zero exit code: error executing command [{}], exit code {code}", command[0]),
                        "reason": "NonZeroExitCode",
                        "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]}})
                };
                let mut frame = vec![3u8];
                frame.extend_from_slice(exit.to_string().as_bytes());
                let _ = socket.send(Message::Binary(frame.into())).await;
                let _ = socket.send(Message::Close(None)).await;
            })
    }

    async fn handle(&self, request: axum::extract::Request) -> axum::response::Response {
        let method = request.method().clone();
        let path = request.uri().path().to_string();
        let query = request.uri().query().unwrap_or("").to_string();
        if path.ends_with("/exec") {
            return self.exec(request).await;
        }
        if method == Method::GET && query.contains("watch=true") {
            return self.watch_pod(&path, &query);
        }
        let merge = request
            .headers()
            .get("content-type")
            .is_some_and(|v| v == "application/merge-patch+json");
        let body = request.into_body().collect().await.unwrap().to_bytes();
        let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let (code, answer) = if merge {
            self.merge(&path, &query, body)
        } else {
            self.serve(&method, &path, &query, body)
        };
        let text = match &answer {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        Response::builder()
            .status(code)
            .header("content-type", "application/json")
            .body(axum::body::Body::from(text))
            .unwrap()
    }

    /// A JSON merge patch (RFC 7386), as `kubectl patch --type merge` sends; only workspace
    /// volumes are patched so, to grow them.
    fn merge(&self, path: &str, query: &str, patch: Value) -> (u16, Value) {
        fn merge_into(target: &mut Value, patch: &Value) {
            match (target, patch) {
                (Value::Object(target), Value::Object(patch)) => {
                    for (key, value) in patch {
                        if value.is_null() {
                            target.remove(key);
                        } else {
                            merge_into(target.entry(key.clone()).or_insert(Value::Null), value);
                        }
                    }
                }
                (target, patch) => *target = patch.clone(),
            }
        }
        assert!(query.contains("fieldManager=gpu-sandbox"), "{query}");
        let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        let [
            "api",
            "v1",
            "namespaces",
            ns,
            "persistentvolumeclaims",
            name,
        ] = parts.as_slice()
        else {
            panic!("a merge patch of {path}: only workspace volumes are patched so");
        };
        let mut cluster = self.0.lock().unwrap();
        *cluster
            .calls
            .entry(("MERGE".to_string(), "persistentvolumeclaims".to_string()))
            .or_default() += 1;
        if cluster.fixed_size_volumes {
            return (
                403,
                status(
                    403,
                    "Forbidden",
                    "only dynamically provisioned pvc can be resized and the storageclass that provisions the pvc must support resize",
                ),
            );
        }
        let key = (
            "persistentvolumeclaims".to_string(),
            ns.to_string(),
            name.to_string(),
        );
        match cluster.objects.get_mut(&key) {
            Some(object) => {
                merge_into(object, &patch);
                (200, object.clone())
            }
            None => (404, status(404, "NotFound", "no such volume")),
        }
    }

    fn serve(&self, method: &Method, path: &str, query: &str, body: Value) -> (u16, Value) {
        let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        // /api/v1/…  or  /apis/<group>/<version>/…
        let rest: &[&str] = match parts.as_slice() {
            ["api", "v1", rest @ ..] => rest,
            ["apis", _, _, rest @ ..] => rest,
            _ => return (404, status(404, "NotFound", "no such path")),
        };
        let (resource, ns, name, sub) = match rest {
            ["namespaces", name] => ("namespaces", "", Some(*name), None),
            ["namespaces", ns, resource] => (*resource, *ns, None, None),
            ["namespaces", ns, resource, name] => (*resource, *ns, Some(*name), None),
            ["namespaces", ns, resource, name, sub] => (*resource, *ns, Some(*name), Some(*sub)),
            [resource] => (*resource, "*", None, None),
            _ => return (404, status(404, "NotFound", "no such path")),
        };
        let mut cluster = self.0.lock().unwrap();
        *cluster
            .calls
            .entry((method.to_string(), resource.to_string()))
            .or_default() += 1;
        let key = |name: &str| (resource.to_string(), ns.to_string(), name.to_string());
        let not_found = |name: &str| {
            (
                404,
                status(404, "NotFound", &format!("{resource} \"{name}\" not found")),
            )
        };
        match (method.as_str(), name, sub) {
            ("GET", Some(name), Some("log")) => {
                let _ = name;
                (200, Value::String("log line".into()))
            }
            ("PATCH", Some(name), None) => {
                assert!(
                    query.contains("fieldManager=gpu-sandbox") && query.contains("force=true"),
                    "{query}"
                );
                let object = cluster
                    .objects
                    .entry(key(name))
                    .or_insert_with(|| json!({}));
                let status = object.get("status").cloned();
                *object = body;
                if let Some(status) = status {
                    object["status"] = status;
                }
                (200, object.clone())
            }
            ("POST", None, None) => {
                let name = body["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                if cluster.objects.contains_key(&key(&name)) {
                    cluster.conflicts += 1;
                    return (
                        409,
                        status(
                            409,
                            "AlreadyExists",
                            &format!("{resource} \"{name}\" already exists"),
                        ),
                    );
                }
                let mut object = body;
                if resource == "pods" {
                    if let Some(refusal) = quota_refusal(&cluster, ns, &name) {
                        return refusal;
                    }
                    match cluster.fate.clone().unwrap_or(Fate::Ready) {
                        Fate::Refuse(code, message) => {
                            let reason = if code == 422 { "Invalid" } else { "Forbidden" };
                            return (code, status(code, reason, &message));
                        }
                        Fate::Unschedulable(message) => {
                            object["status"] = json!({"phase": "Pending", "conditions": [
                                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}]});
                        }
                        Fate::Ready => {
                            cluster.next_ip += 1;
                            object["status"] = json!({"phase": "Running", "podIP": format!("10.244.0.{}", cluster.next_ip),
                                "conditions": [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"}]});
                        }
                        Fate::NotReady => {
                            cluster.next_ip += 1;
                            object["status"] = json!({"phase": "Running", "podIP": format!("10.244.0.{}", cluster.next_ip),
                                "conditions": [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "False"}]});
                        }
                    }
                }
                object["metadata"]["resourceVersion"] = json!(cluster.next_version());
                if resource == "pods" {
                    cluster.pod_changed(ns, &name, "ADDED", &object);
                }
                cluster.objects.insert(key(&name), object.clone());
                (201, object)
            }
            ("GET", Some(name), None) => match cluster.objects.get(&key(name)) {
                Some(object) => (200, object.clone()),
                None => not_found(name),
            },
            ("DELETE", Some(name), None) => match cluster.objects.remove(&key(name)) {
                Some(object) => {
                    if resource == "pods" {
                        cluster.pod_changed(ns, name, "DELETED", &object);
                    }
                    (200, object)
                }
                None => not_found(name),
            },
            ("GET", None, None) => {
                let selector = query
                    .split('&')
                    .find_map(|p| p.strip_prefix("labelSelector="))
                    .map(|s| {
                        s.replace("%2F", "/")
                            .replace("%3D", "=")
                            .replace("%2C", ",")
                    })
                    .unwrap_or_default();
                let items: Vec<Value> = cluster
                    .objects
                    .iter()
                    .filter(|((r, n, _), _)| r == resource && (ns == "*" || n == ns))
                    .map(|(_, o)| o.clone())
                    .filter(|o| matches_selector(o, &selector))
                    .collect();
                (
                    200,
                    json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": "1"}, "items": items}),
                )
            }
            _ => (
                405,
                status(405, "MethodNotAllowed", "not supported by the fake"),
            ),
        }
    }
}

/// The ResourceQuota's `pods` limit, as the API server's quota admission applies it.
fn quota_refusal(cluster: &Cluster, ns: &str, name: &str) -> Option<(u16, Value)> {
    let quota = cluster.objects.get(&(
        "resourcequotas".to_string(),
        ns.to_string(),
        "sandbox-quota".to_string(),
    ))?;
    let limit: usize = quota["spec"]["hard"]["pods"].as_str()?.parse().ok()?;
    let used = cluster
        .objects
        .keys()
        .filter(|(r, n, _)| r == "pods" && n == ns)
        .count();
    (used >= limit).then(|| {
        let message = format!(
            "pods \"{name}\" is forbidden: exceeded quota: sandbox-quota, requested: pods=1, used: pods={used}, limited: pods={limit}"
        );
        (403, status(403, "Forbidden", &message))
    })
}

fn matches_selector(object: &Value, selector: &str) -> bool {
    selector.split(',').filter(|t| !t.is_empty()).all(|term| {
        let labels = &object["metadata"]["labels"];
        match term.split_once('=') {
            Some((k, v)) => labels[k] == v,
            None => !labels[term].is_null(),
        }
    })
}

/// An admin named root, as the service sees them.
async fn admin_viewer(app: &TestApp) -> app::model::Viewer {
    app.service
        .accounts
        .create_user("root", Some("password123"), app::model::Role::Admin, None)
        .await
        .unwrap()
        .viewer(app::domain::scope::Scopes::ALL)
}

/// A server whose editors run as pods in the fake cluster.
async fn fake_app(max_pods_per_user: u32) -> (TestApp, FakeApi) {
    let fake = FakeApi::default();
    let kube_config = KubeConfig {
        max_pods_per_user,
        ..KubeConfig::default()
    };
    let runtime = KubeRuntime::new(fake.client(), kube_config.clone()).with_timing(fast());
    // The configuration stays `local`: the background tick must not run a reconciler pass of
    // its own while a test runs one by hand.
    let app = TestApp::start_kube(runtime, |c| c.kube = kube_config).await;
    (app, fake)
}

async fn ended_detail(app: &TestApp, token: &str, id: &str) -> Value {
    app.wait_for(token, id, |v| v["state"] == "ended").await
}

/// The workspace volume is sized by the user's disk quota and grows with it (never shrinks);
/// where the storage class cannot grow volumes the launch still starts, on the volume as it
/// is. On the cluster, slices read as enforced by HAMi.
#[tokio::test]
async fn a_workspace_is_sized_by_the_users_quota_and_grows_with_it() {
    let (app, fake) = fake_app(4).await;
    let (gus_id, gus) = app.user("gus").await;
    let set_disk = |mib: u64| {
        let app = &app;
        let gus_id = gus_id.clone();
        async move {
            let overrides = app::domain::quota::Overrides {
                max_disk_mib: Some(mib),
                ..Default::default()
            };
            app.store
                .set_quota(&gus_id, &overrides, None)
                .await
                .unwrap();
        }
    };
    let sizes = || {
        let cluster = fake.0.lock().unwrap();
        let of = |resource: &str, name: &str| {
            cluster.objects[&(
                resource.to_string(),
                "gsb-gus".to_string(),
                name.to_string(),
            )]
                .clone()
        };
        (
            of("persistentvolumeclaims", "workspace")["spec"]["resources"]["requests"]["storage"]
                .clone(),
            of("resourcequotas", "sandbox-quota")["spec"]["hard"]["requests.storage"].clone(),
        )
    };
    let session = |label: &'static str| {
        let app = &app;
        let gus = gus.clone();
        async move {
            let id = app.launch_ready(&gus, "jupyterlab").await;
            let stopped = app
                .delete(&format!("/api/v1/sessions/{id}"), Some(&gus))
                .await;
            assert!(stopped.status.is_success(), "{label}");
            ended_detail(app, &gus, &id).await;
        }
    };
    set_disk(20 * 1024).await;
    session("first").await;
    // The quota: the workspace, a restore's claim and 1 GiB for datasets' claims.
    assert_eq!(sizes(), (json!("20Gi"), json!("41Gi")), "made at the quota");
    set_disk(30 * 1024 + 1).await;
    session("grown").await;
    assert_eq!(sizes(), (json!("31Gi"), json!("63Gi")), "grown, rounded up");
    assert_eq!(fake.calls("MERGE", "persistentvolumeclaims"), 1);
    set_disk(10 * 1024).await;
    session("shrunk quota").await;
    assert_eq!(sizes().0, json!("31Gi"), "a volume never shrinks");
    assert_eq!(fake.calls("MERGE", "persistentvolumeclaims"), 1);
    fake.0.lock().unwrap().fixed_size_volumes = true;
    set_disk(40 * 1024).await;
    session("class without expansion").await;
    assert_eq!(sizes().0, json!("31Gi"), "refused by the class: as it was");
    assert_eq!(fake.calls("MERGE", "persistentvolumeclaims"), 2);

    let viewer = admin_viewer(&app).await;
    let dashboard = app.service.sessions.dashboard(&viewer).await.unwrap();
    assert!(
        dashboard
            .enforcement
            .starts_with("Soft limit: HAMi holds each pod"),
        "{}",
        dashboard.enforcement
    );
    assert!(
        dashboard.gpus.iter().all(|g| g.hold == SliceHold::Soft),
        "{:?}",
        dashboard.gpus
    );
    app.stop().await;
}

/// A cluster whose GPUs are shared without HAMi says so: its slices are promises, in the pages
/// and the API alike.
#[tokio::test]
async fn without_hami_the_clusters_slices_read_as_not_enforced() {
    let fake = FakeApi::default();
    let kube_config = KubeConfig {
        hami: false,
        ..KubeConfig::default()
    };
    let runtime = KubeRuntime::new(fake.client(), kube_config.clone()).with_timing(fast());
    let app = TestApp::start_kube(runtime, |c| c.kube = kube_config).await;
    let (_, token) = app.user("hal").await;
    let me = app.get("/api/v1/pool", Some(&token)).await;
    me.assert_status(http::StatusCode::OK);
    let sizes = me.json();
    let sizes = sizes.as_array().expect("a list of sizes");
    assert!(!sizes.is_empty());
    for size in sizes {
        assert_eq!(size["hold"], json!("none"), "{size}");
    }
    let dashboard = app
        .service
        .sessions
        .dashboard(&admin_viewer(&app).await)
        .await
        .unwrap();
    assert!(dashboard.enforcement.starts_with("No limit: "));
    assert!(dashboard.gpus.iter().all(|g| g.hold == SliceHold::None));
    app.stop().await;
}

#[tokio::test]
async fn concurrent_launches_for_several_users_share_nothing_and_all_start() {
    let (app, fake) = fake_app(4).await;
    let mut tokens = Vec::new();
    for name in ["ann", "Ben", "chloé"] {
        tokens.push(app.user(name).await.1);
    }
    let launches = tokens
        .iter()
        .flat_map(|t| [t.clone(), t.clone()])
        .map(|token| {
            let app = &app;
            async move {
                let id = app.launch_id(&token, "jupyterlab").await;
                let view = app
                    .wait_for(&token, &id, |v| {
                        v["state"] == "ready" || v["state"] == "ended"
                    })
                    .await;
                assert_eq!(view["state"], "ready", "{view}");
                id
            }
        });
    let ids = futures_util::future::join_all(launches).await;
    assert_eq!(ids.len(), 6);
    let namespaces: BTreeSet<String> = fake
        .names("namespaces")
        .into_iter()
        .map(|(_, n)| n)
        .collect();
    assert_eq!(
        namespaces,
        [
            "gsb-ann",
            &names::namespace_of("gsb-", "Ben"),
            &names::namespace_of("gsb-", "chloé")
        ]
        .into_iter()
        .map(String::from)
        .collect()
    );
    for resource in [
        "persistentvolumeclaims",
        "resourcequotas",
        "limitranges",
        "networkpolicies",
        "serviceaccounts",
    ] {
        let per_ns: Vec<String> = fake.names(resource).into_iter().map(|(ns, _)| ns).collect();
        assert_eq!(per_ns.len(), 3, "{resource}: one per user, {per_ns:?}");
    }
    let pods: BTreeSet<String> = fake.names("pods").into_iter().map(|(_, n)| n).collect();
    assert_eq!(pods, ids.iter().map(|id| names::pod_name(id)).collect());
    assert_eq!(fake.names("secrets").len(), 6);
    assert_eq!(
        fake.calls("POST", "persistentvolumeclaims"),
        6,
        "a create per launch; 409s are fine"
    );
    // Stopping one removes its pod and Secret, nothing of the user's.
    let stopped = app
        .delete(&format!("/api/v1/sessions/{}", ids[0]), Some(&tokens[0]))
        .await;
    assert!(
        stopped.status.is_success(),
        "{}",
        String::from_utf8_lossy(&stopped.body)
    );
    ended_detail(&app, &tokens[0], &ids[0]).await;
    assert_eq!(fake.names("pods").len(), 5);
    assert_eq!(fake.names("secrets").len(), 5);
    assert_eq!(fake.names("persistentvolumeclaims").len(), 3);
    assert_eq!(fake.names("namespaces").len(), 3);
    app.stop().await;
}

#[tokio::test]
async fn a_pod_that_vanishes_ends_its_session_as_lost_with_a_refund() {
    let (app, fake) = fake_app(4).await;
    let (user_id, token) = app.user("vera").await;
    let id = app.launch_ready(&token, "marimo").await;
    let (_, held) = app.store.credits(&user_id).await.unwrap();
    assert!(held > 0);
    // Nothing to do while all is well.
    let report = reconcile::run_once(&app.service).await.unwrap();
    assert_eq!(report, reconcile::Report::default());
    assert!(fake.remove("pods", "gsb-vera", &names::pod_name(&id)));
    let report = reconcile::run_once(&app.service).await.unwrap();
    assert_eq!(report.lost_sessions, vec![id.clone()]);
    let view = ended_detail(&app, &token, &id).await;
    assert_eq!(view["end_reason"], "lost", "{view}");
    assert!(
        view["detail"].as_str().unwrap().contains("refunded"),
        "{view}"
    );
    let (_, held) = app.store.credits(&user_id).await.unwrap();
    assert_eq!(held, 0);
    assert!(
        fake.names("secrets").is_empty(),
        "the stop path removed the Secret too"
    );
    // A second pass finds nothing left to do: ending is idempotent.
    let report = reconcile::run_once(&app.service).await.unwrap();
    assert_eq!(report, reconcile::Report::default());
    app.stop().await;
}

/// A launch that names an approved image runs it; the default otherwise; a retired one is refused.
#[tokio::test]
async fn a_launch_runs_the_approved_image_it_names() {
    let (app, fake) = fake_app(4).await;
    let root = app
        .service
        .accounts
        .create_user("root", Some("password123"), app::model::Role::Admin, None)
        .await
        .unwrap();
    let (admin_token, hash) = server::auth::new_api_token();
    app.store
        .create_token(
            &root.id,
            &hash,
            "test",
            app::domain::scope::Scopes::ALL,
            None,
        )
        .await
        .unwrap();
    let reference = format!(
        "registry.example.com/ml/torch-notebook:2.5@sha256:{}",
        "e".repeat(64)
    );
    let added = app
        .call(
            http::Method::POST,
            "/api/v1/admin/images",
            Some(&admin_token),
            Some(json!({"editor": "jupyterlab", "reference": reference, "label": "PyTorch 2.5"})),
        )
        .await;
    added.assert_status(http::StatusCode::CREATED);
    let image_id = added.json()["id"].as_str().unwrap().to_string();
    let listed = app
        .get("/api/v1/admin/images", Some(&admin_token))
        .await
        .json();
    let listed = listed.as_array().unwrap();
    assert_eq!(
        listed.len(),
        4,
        "the three configured defaults, then the new one"
    );
    assert!(listed[..3].iter().all(|i| i["id"].is_null()));
    let (_, token) = app.user("ivy").await;
    // Not scanned yet: the policy holds it back, and a launch naming it hears why.
    assert_eq!(
        app.get("/api/v1/images", Some(&token)).await.json(),
        json!([])
    );
    let unscanned = app
        .call(
            http::Method::POST,
            "/api/v1/sessions",
            Some(&token),
            Some(json!({"editor": "jupyterlab", "slice_mib": 8192, "duration_minutes": 30, "image": image_id})),
        )
        .await;
    unscanned.assert_status(http::StatusCode::BAD_REQUEST);
    assert!(
        unscanned.json()["message"]
            .as_str()
            .unwrap()
            .contains("may not be launched now: no scan report yet"),
        "{}",
        unscanned.json()
    );
    crate::admin::post_report(
        &app,
        &admin_token,
        &image_id,
        crate::admin::report("sarif", &reference, 1),
    )
    .await
    .assert_status(http::StatusCode::CREATED);
    let offered = app.get("/api/v1/images", Some(&token)).await.json();
    assert_eq!(offered[0]["reference"], reference.as_str());
    assert!(offered[0]["scan"].is_null(), "users do not see the scan");

    let launch = |image: Option<&str>, editor: &str| {
        let mut body = json!({"editor": editor, "slice_mib": 8192, "duration_minutes": 30});
        if let Some(id) = image {
            body["image"] = json!(id);
        }
        app.call(
            http::Method::POST,
            "/api/v1/sessions",
            Some(&token),
            Some(body),
        )
    };
    let chosen = launch(Some(&image_id), "jupyterlab").await;
    chosen.assert_status(http::StatusCode::CREATED);
    let chosen_id = chosen.json()["id"].as_str().unwrap().to_string();
    let plain = launch(None, "jupyterlab").await;
    plain.assert_status(http::StatusCode::CREATED);
    let plain_id = plain.json()["id"].as_str().unwrap().to_string();
    for id in [&chosen_id, &plain_id] {
        app.wait_for(&token, id, |v| v["state"] == "ready").await;
    }
    let image_of = |id: &str| {
        let cluster = fake.0.lock().unwrap();
        let key = (
            "pods".to_string(),
            "gsb-ivy".to_string(),
            names::pod_name(id),
        );
        cluster.objects[&key]["spec"]["containers"][0]["image"].clone()
    };
    assert_eq!(image_of(&chosen_id), json!(reference));
    assert_eq!(
        image_of(&plain_id),
        json!(KubeConfig::default().images.of(EditorKind::JupyterLab))
    );

    // Named for another editor, or retired: refused with the reason, nothing launched.
    let wrong = launch(Some(&image_id), "marimo").await;
    wrong.assert_status(http::StatusCode::BAD_REQUEST);
    assert!(
        wrong.json()["message"]
            .as_str()
            .unwrap()
            .contains("runs JupyterLab, not marimo")
    );
    app.call(
        http::Method::PATCH,
        &format!("/api/v1/admin/images/{image_id}"),
        Some(&admin_token),
        Some(json!({"state": "retired"})),
    )
    .await
    .assert_status(http::StatusCode::OK);
    let retired = launch(Some(&image_id), "jupyterlab").await;
    retired.assert_status(http::StatusCode::BAD_REQUEST);
    assert!(
        retired.json()["message"]
            .as_str()
            .unwrap()
            .contains("no approved image")
    );
    assert_eq!(
        app.get("/api/v1/images", Some(&token)).await.json(),
        json!([])
    );
    app.stop().await;
}

/// Retiring an image stops it: a launch that waited in the queue for it ends with a refund when
/// its turn comes, rather than start it.
#[tokio::test]
async fn a_queued_launch_of_an_image_retired_meanwhile_ends_with_a_refund() {
    let fake = FakeApi::default();
    let runtime = KubeRuntime::new(fake.client(), KubeConfig::default()).with_timing(fast());
    let app = TestApp::start_kube(runtime, |c| {
        c.pool.gpus = vec![server::config::DeclaredGpu {
            name: "one".into(),
            model: "Virtual 8 GB".into(),
            memory_mib: 8192,
            slice_mib: 8192,
        }];
        // What is tested here is retiring; a cluster may run without scans.
        c.image_policy.require_scan = false;
    })
    .await;
    let viewer = admin_viewer(&app).await;
    let image = app
        .service
        .images
        .add_image(
            &viewer,
            &app::domain::images::NewImage {
                editor: "jupyterlab".into(),
                reference: "registry.example.com/ml/torch:2.5".into(),
                label: "PyTorch".into(),
            },
        )
        .await
        .unwrap();
    let image_id = image.id.clone().unwrap();
    let (_, first) = app.user("first").await;
    let (_, second) = app.user("second").await;
    let holder = app.launch_ready(&first, "jupyterlab").await;
    let before = app.get("/api/v1/me", Some(&second)).await.json()["credits"].clone();
    let body = json!({"editor": "jupyterlab", "slice_mib": 8192, "duration_minutes": 30, "image": image_id});
    let queued = app
        .call(
            http::Method::POST,
            "/api/v1/sessions",
            Some(&second),
            Some(body),
        )
        .await;
    queued.assert_status(http::StatusCode::CREATED);
    let waiting = queued.json();
    assert_eq!(waiting["state"], "queued", "{waiting}");
    let id = waiting["id"].as_str().unwrap().to_string();

    app.service
        .images
        .set_image_state(&viewer, &image_id, app::domain::images::ImageState::Retired)
        .await
        .unwrap();
    app.delete(&format!("/api/v1/sessions/{holder}"), Some(&first))
        .await
        .assert_status(http::StatusCode::OK);
    let ended = ended_detail(&app, &second, &id).await;
    assert_eq!(ended["end_reason"], "failed", "{ended}");
    assert!(
        ended["detail"].as_str().unwrap().contains("was retired"),
        "{ended}"
    );
    let after = app.get("/api/v1/me", Some(&second)).await.json()["credits"].clone();
    assert_eq!(after, before, "everything it held came back");
    assert!(
        fake.names("pods")
            .iter()
            .all(|(_, name)| *name != names::pod_name(&id)),
        "no pod was made for it"
    );
    app.stop().await;
}

#[tokio::test]
async fn a_launch_watches_its_pod_and_is_ready_when_the_pod_is() {
    let (app, fake) = fake_app(4).await;
    fake.set_fate(Fate::NotReady);
    let (_, token) = app.user("wally").await;
    let id = app.launch_id(&token, "jupyterlab").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let view = app
        .get(&format!("/api/v1/sessions/{id}"), Some(&token))
        .await
        .json();
    assert_eq!(view["state"], "starting", "{view}");
    // One look and one watch each for placement and readiness; polling every 5 ms (the test's
    // `poll`) would have asked dozens of times by now.
    let asked = fake.calls("GET", "pods");
    assert!((2..=4).contains(&asked), "GETs of the pod: {asked}");
    assert!(fake.make_ready("gsb-wally", &names::pod_name(&id)));
    let view = tokio::time::timeout(
        Duration::from_secs(5),
        app.wait_for(&token, &id, |v| v["state"] == "ready"),
    )
    .await
    .expect("ready soon after the pod is");
    assert_eq!(view["state"], "ready");
    app.stop().await;
}

#[tokio::test]
async fn a_pod_hami_put_on_another_card_moves_its_slot_there() {
    let fake = FakeApi::default();
    let kube_config = KubeConfig::default();
    let runtime = KubeRuntime::new(fake.client(), kube_config.clone()).with_timing(fast());
    let app = TestApp::start_kube(runtime, |c| {
        c.kube = kube_config;
        // Declared by UUID, as HAMi names the cards.
        c.pool.gpus = ["GPU-aaaa", "GPU-bbbb"]
            .map(|name| server::config::DeclaredGpu {
                name: name.into(),
                model: "L40S".into(),
                memory_mib: 49152,
                slice_mib: 8192,
            })
            .to_vec();
    })
    .await;
    let (_, token) = app.user("hank").await;
    let id = app.launch_ready(&token, "jupyterlab").await;
    let ours = app.record(&id).await.gpu_id.unwrap();
    let hamis = if ours == "GPU-aaaa" {
        "GPU-bbbb"
    } else {
        "GPU-aaaa"
    };
    assert!(fake.annotate(
        "pods",
        "gsb-hank",
        &names::pod_name(&id),
        json!({"hami.io/vgpu-node": "gpu-node-1",
               "hami.io/vgpu-devices-allocated": format!("{hamis},NVIDIA,8192,16:;")}),
    ));
    let report = reconcile::run_once(&app.service).await.unwrap();
    assert_eq!(report.moved_slots, vec![id.clone()]);
    assert_eq!(report.placements, vec![id.clone()]);
    let record = app.record(&id).await;
    assert_eq!(record.gpu_id.as_deref(), Some(hamis));
    // The session holds one slot, on HAMi's card; the other card is whole again.
    let held: Vec<String> = app
        .store
        .pool()
        .await
        .unwrap()
        .into_iter()
        .flat_map(|(_, slots)| slots)
        .filter(|slot| slot.session_id.as_deref() == Some(id.as_str()))
        .map(|slot| slot.gpu_id)
        .collect();
    assert_eq!(held, vec![hamis.to_string()]);
    // Once in step, a pass has nothing to do.
    let report = reconcile::run_once(&app.service).await.unwrap();
    assert_eq!(report, reconcile::Report::default());
    app.stop().await;
}

#[tokio::test]
async fn an_exceeded_quota_fails_the_launch_with_the_reason_and_refunds() {
    let (app, _fake) = fake_app(1).await;
    let (user_id, token) = app.user("quinn").await;
    app.launch_ready(&token, "jupyterlab").await;
    let second = app.launch_id(&token, "jupyterlab").await;
    let view = ended_detail(&app, &token, &second).await;
    assert_eq!(view["end_reason"], "failed");
    let detail = view["detail"].as_str().unwrap();
    assert!(detail.contains("exceeded quota: sandbox-quota"), "{detail}");
    assert!(detail.contains("limited: pods=1"), "{detail}");
    let (_, held) = app.store.credits(&user_id).await.unwrap();
    let sessions = app.store.sessions_of(&user_id, 10).await.unwrap();
    let live: Vec<_> = sessions.iter().filter(|s| s.state.is_live()).collect();
    assert_eq!(live.len(), 1);
    assert_eq!(
        held,
        app::domain::credits::price_for_minutes(live[0].price_per_hour, 30),
        "only the first session still holds credits: the failed one was refunded"
    );
    app.stop().await;
}

#[tokio::test]
async fn an_unschedulable_pod_fails_with_the_schedulers_reason() {
    let (app, fake) = fake_app(4).await;
    fake.set_fate(Fate::Unschedulable(
        "0/3 nodes are available: 3 Insufficient nvidia.com/gpumem. preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod.".into(),
    ));
    let (_, token) = app.user("uma").await;
    let id = app.launch_id(&token, "code-server").await;
    let view = ended_detail(&app, &token, &id).await;
    let detail = view["detail"].as_str().unwrap();
    assert!(
        detail.contains("Insufficient nvidia.com/gpumem"),
        "{detail}"
    );
    assert!(fake.names("pods").is_empty(), "the failed pod is deleted");
    assert!(fake.names("secrets").is_empty(), "and its Secret");
    assert_eq!(
        fake.names("persistentvolumeclaims").len(),
        1,
        "the workspace stays"
    );
    app.stop().await;
}

#[tokio::test]
async fn an_invalid_pod_fails_with_a_clear_message() {
    let (app, fake) = fake_app(4).await;
    fake.set_fate(Fate::Refuse(
        422,
        "Pod \"session-x\" is invalid: spec.containers[0].resources.limits[nvidia.com/gpumem]: Invalid value: \"8192\": must be less than or equal to nvidia.com/gpumem limit".into(),
    ));
    let (_, token) = app.user("ivy").await;
    let id = app.launch_id(&token, "jupyterlab").await;
    let view = ended_detail(&app, &token, &id).await;
    let detail = view["detail"].as_str().unwrap();
    assert!(
        detail.starts_with("The cluster rejected the editor pod: Pod \"session-x\" is invalid"),
        "{detail}"
    );
    assert_eq!(view["end_reason"], "failed");
    app.stop().await;
}

#[tokio::test]
async fn starting_twice_is_harmless_409s_included() {
    let fake = FakeApi::default();
    let runtime = KubeRuntime::new(fake.client(), KubeConfig::default()).with_timing(fast());
    let launch = launch_for("dora", "abc123", EditorKind::JupyterLab);
    let first = runtime.start(&launch).await.expect("first");
    let second = runtime
        .start(&launch)
        .await
        .expect("second: the pod is there already");
    assert_eq!(first.upstream, second.upstream);
    assert_eq!(
        fake.0.lock().unwrap().conflicts,
        2,
        "workspace and pod answered 409"
    );
    assert_eq!(fake.names("pods").len(), 1);
    assert!(runtime.is_alive(&first.handle).await);
    runtime.stop(&first.handle).await.unwrap();
    runtime
        .stop(&first.handle)
        .await
        .expect("stopping what is gone is fine");
    assert!(!runtime.is_alive(&first.handle).await);
}

// ---------------------------------------------------------------------------------------------
// GPU metrics through the runtime: HAMi's monitor endpoint served on loopback.
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn gpu_usage_joins_hamis_metrics_to_session_handles() {
    let text = "hami_vgpu_memory_used_bytes{container=\"editor\",device_uuid=\"GPU-1\",namespace=\"gsb-ann\",pod=\"session-aa\",vdevice_index=\"0\"} 2147483648\n\
                hami_container_device_utilization_ratio{container=\"editor\",device_uuid=\"GPU-1\",namespace=\"gsb-ann\",pod=\"session-aa\",vdevice_index=\"0\"} 42\n\
                hami_container_last_kernel_elapsed_seconds{container=\"editor\",device_uuid=\"GPU-1\",namespace=\"gsb-ann\",pod=\"session-aa\",vdevice_index=\"0\"} 3\n";
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let metrics =
        axum::Router::new().route("/metrics", axum::routing::get(move || async move { text }));
    let server = tokio::spawn(async move { axum::serve(listener, metrics).await });
    let config = KubeConfig {
        metrics_url: format!("http://{addr}/metrics"),
        ..KubeConfig::default()
    };
    let runtime = KubeRuntime::new(FakeApi::default().client(), config);
    let handle = |pod: &str| {
        PodHandle {
            namespace: "gsb-ann".into(),
            pod: pod.into(),
            secret: format!("{pod}-token"),
            ..PodHandle::default()
        }
        .to_json()
    };
    let usage = runtime
        .gpu_usage(&[handle("session-aa"), handle("session-bb")])
        .await;
    assert_eq!(usage.len(), 1);
    let seen = &usage[&handle("session-aa")];
    assert_eq!((seen.memory_used_mib, seen.utilization_pct), (2048, 42));
    assert!(seen.is_active(60.0));
    server.abort();
}

// ---------------------------------------------------------------------------------------------
// (3) A real cluster, on request only.
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn real_cluster_launch_and_stop_when_asked_for() {
    if std::env::var_os("KUBECONFIG").is_none()
        || std::env::var("SANDBOX_KUBE_E2E").as_deref() != Ok("1")
    {
        eprintln!(
            "skipped: set KUBECONFIG and SANDBOX_KUBE_E2E=1 to run against a real cluster with HAMi"
        );
        return;
    }
    let client = kube::Client::try_default()
        .await
        .expect("a client from KUBECONFIG");
    let config = KubeConfig {
        server_namespace: std::env::var("SANDBOX_KUBE_E2E_SERVER_NAMESPACE")
            .unwrap_or_else(|_| "default".into()),
        session_priority_class: String::new(),
        ..KubeConfig::default()
    };
    let runtime = KubeRuntime::new(client.clone(), config).with_timing(Timing {
        start_timeout: Duration::from_secs(300),
        ..Timing::default()
    });
    let suffix = format!(
        "{:x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
    );
    let user = format!("e2e-{suffix}");
    let launch = launch_for(&user, &suffix, EditorKind::JupyterLab);
    let running = runtime.start(&launch).await.expect("started");
    let ready = runtime
        .wait_ready(&launch, &running, Duration::from_secs(600))
        .await;
    let alive = runtime.is_alive(&running.handle).await;
    runtime.stop(&running.handle).await.expect("stopped");
    let namespace = names::namespace_of("gsb-", &user);
    let _ = kube::Api::<k8s_openapi::api::core::v1::Namespace>::all(client)
        .delete(&namespace, &Default::default())
        .await;
    ready.expect("ready");
    assert!(alive);
}

/// A real cluster is reached over TLS: the client for an https API server must build (one
/// crypto provider, a platform verifier), which the tests above never need.
#[tokio::test]
async fn a_tls_client_for_a_real_api_server_builds() {
    let config = kube::Config::new("https://127.0.0.1:6443".parse().unwrap());
    let client = kube::Client::try_from(config).expect("a TLS client");
    let runtime = KubeRuntime::new(client, KubeConfig::default());
    assert_eq!(runtime.config().field_manager, "gpu-sandbox");
}

// ---------------------------------------------------------------------------------------------
// (4) The same session scenarios on both runtimes: real editor processes (marimo, the quickest
// to start) on the local runtime, pods in the fake cluster on the kube runtime.
// ---------------------------------------------------------------------------------------------

/// A server on `runtime`, with a reaper quick enough for a test; and how to make one of its
/// editors vanish behind its back (a killed process, a deleted pod).
struct Harness {
    app: TestApp,
    /// Given the session's runtime handle.
    vanish: Box<dyn Fn(&str) + Send + Sync>,
}

async fn harness(runtime: &str) -> Harness {
    let quick = |c: &mut server::config::Config| {
        c.idle.reaper_period_ms = 200;
    };
    match runtime {
        "local" => {
            let tools = crate::common::tools_dir();
            assert!(
                tools.join("venv/bin/marimo").exists(),
                "marimo is not installed in {}; run scripts/setup.sh",
                tools.display()
            );
            let app = TestApp::start_with(None, quick).await;
            Harness {
                app,
                vanish: Box::new(|handle| {
                    let handle = serde_json::from_str::<Value>(handle).unwrap();
                    // A sandbox lives apart from the process that made it: it vanishes with
                    // its first process (PID 1 inside), whose end ends everything in it.
                    match handle["sandbox"]["init"].as_i64() {
                        // SAFETY: a signal to the sandbox's own first process.
                        Some(init) => unsafe { libc::kill(init as i32, libc::SIGKILL) },
                        // SAFETY: killpg only sends a signal to the editor's own group.
                        None => unsafe {
                            libc::killpg(handle["pid"].as_i64().unwrap() as i32, libc::SIGKILL)
                        },
                    };
                }),
            }
        }
        _ => {
            let fake = FakeApi::default();
            let runtime =
                KubeRuntime::new(fake.client(), KubeConfig::default()).with_timing(fast());
            let app = TestApp::start_kube(runtime, quick).await;
            Harness {
                app,
                vanish: Box::new(move |handle| {
                    let handle: PodHandle = serde_json::from_str(handle).unwrap();
                    assert!(fake.remove("pods", &handle.namespace, &handle.pod));
                }),
            }
        }
    }
}

/// Launch, find it ready and alive, stop it: the editor is gone, the hold is settled to one
/// minute's charge, the ledger sums to the balance.
async fn launch_and_stop_settle_the_credits(runtime: &str) {
    let Harness { app, .. } = harness(runtime).await;
    let (user_id, token) = app.user("stella").await;
    let (before, _) = app.store.credits(&user_id).await.unwrap();
    let id = app.launch_ready(&token, "marimo").await;
    let view = app
        .get(&format!("/api/v1/sessions/{id}"), Some(&token))
        .await
        .json();
    let price_per_hour = view["price_per_hour"].as_i64().expect("a price");
    let handle = app.record(&id).await.runtime_handle.expect("a handle");
    assert!(app.runtime.is_alive(&handle).await, "{runtime}");
    let (_, held) = app.store.credits(&user_id).await.unwrap();
    assert!(held > 0, "{runtime}: credits held while it runs");

    let stopped = app
        .delete(&format!("/api/v1/sessions/{id}"), Some(&token))
        .await
        .json();
    assert_eq!(stopped["state"], "ended", "{runtime}");
    assert_eq!(stopped["end_reason"], "user", "{runtime}");
    assert!(
        !app.runtime.is_alive(&handle).await,
        "{runtime}: the editor is gone"
    );
    let (after, held) = app.store.credits(&user_id).await.unwrap();
    assert_eq!(held, 0, "{runtime}");
    let one_minute = (price_per_hour + 59) / 60;
    assert_eq!(after, before - one_minute, "{runtime}: one minute charged");
    let ledger: i64 = app
        .store
        .ledger(&user_id)
        .await
        .unwrap()
        .iter()
        .map(|e| e.amount)
        .sum();
    assert_eq!(ledger, after, "{runtime}: the ledger sums to the balance");
    app.stop().await;
}

/// Two launches at once for one user: two editors, each alive, neither the other's.
async fn concurrent_launches_get_their_own_editors(runtime: &str) {
    let Harness { app, .. } = harness(runtime).await;
    let (_, token) = app.user("connie").await;
    let (a, b) = tokio::join!(
        app.launch_ready(&token, "marimo"),
        app.launch_ready(&token, "marimo")
    );
    assert_ne!(a, b);
    let (ha, hb) = (
        app.record(&a).await.runtime_handle.unwrap(),
        app.record(&b).await.runtime_handle.unwrap(),
    );
    assert_ne!(ha, hb, "{runtime}: one editor each");
    assert!(app.runtime.is_alive(&ha).await && app.runtime.is_alive(&hb).await);
    for id in [&a, &b] {
        app.delete(&format!("/api/v1/sessions/{id}"), Some(&token))
            .await
            .assert_status(http::StatusCode::OK);
    }
    assert!(!app.runtime.is_alive(&ha).await && !app.runtime.is_alive(&hb).await);
    app.stop().await;
}

/// An editor that vanishes (a killed process, a deleted pod) ends its session within a few
/// reaper periods, with everything held refunded but the minute used: a crash locally, lost on
/// a cluster (its pod deleted by someone else, as a drain does).
async fn a_vanished_editor_ends_its_session_with_a_refund(runtime: &str) {
    let Harness { app, vanish } = harness(runtime).await;
    let (user_id, token) = app.user("vanya").await;
    let id = app.launch_ready(&token, "marimo").await;
    vanish(&app.record(&id).await.runtime_handle.unwrap());
    let view = tokio::time::timeout(Duration::from_secs(10), ended_detail(&app, &token, &id))
        .await
        .expect("ended within 10 s");
    let expected = if runtime == "kube" { "lost" } else { "crash" };
    assert_eq!(view["end_reason"], expected, "{runtime}: {view}");
    let (_, held) = app.store.credits(&user_id).await.unwrap();
    assert_eq!(held, 0, "{runtime}");
    app.stop().await;
}

macro_rules! on_both_runtimes {
    ($($scenario:ident => $local:ident, $kube:ident;)*) => {$(
        #[tokio::test]
        async fn $local() {
            $scenario("local").await;
        }
        #[tokio::test]
        async fn $kube() {
            $scenario("kube").await;
        }
    )*};
}

on_both_runtimes! {
    launch_and_stop_settle_the_credits => launch_and_stop_settle_the_credits_local, launch_and_stop_settle_the_credits_kube;
    concurrent_launches_get_their_own_editors => concurrent_launches_get_their_own_editors_local, concurrent_launches_get_their_own_editors_kube;
    a_vanished_editor_ends_its_session_with_a_refund => a_vanished_editor_ends_its_session_with_a_refund_local, a_vanished_editor_ends_its_session_with_a_refund_kube;
}

/// Promotion on the cluster: the file is read through the session's editor pod (its exec API,
/// the real read script run on the claim's directory), checked as locally, then pushed to a
/// real registry with the same provenance.
#[tokio::test]
async fn on_the_cluster_a_promoted_file_is_read_through_the_editors_pod_and_pushed() {
    use crate::promotion::{REGISTRY_PASSWORD, REGISTRY_USER, Registry, fetch, sha256_hex};
    let registry = Registry::start().await;
    let fake = FakeApi::default();
    let volumes = tempfile::tempdir().unwrap();
    fake.keep_volumes_in(volumes.path());
    let kube_config = KubeConfig::default();
    let runtime =
        KubeRuntime::new(fake.tcp_client().await, kube_config.clone()).with_timing(fast());
    let image = runtime.editor_image(EditorKind::JupyterLab);
    let url = registry.url();
    let app = TestApp::start_kube(runtime, |c| {
        c.kube = kube_config;
        c.promotion.registry = url;
        c.promotion.repository_prefix = "sandbox/".into();
        c.promotion.username = REGISTRY_USER.into();
        c.promotion.password = REGISTRY_PASSWORD.into();
        c.promotion.require_approval = true;
        c.promotion.max_file_mib = 1;
    })
    .await;
    let admin = app.admin_token("root").await;
    let (_, alice) = app.user("alice").await;
    let session = app.launch_ready(&alice, "jupyterlab").await;
    let workspace = fake.volume_dir("gsb-alice", "workspace");
    // More than one WebSocket frame of the fake's, and not a multiple of them.
    let model: Vec<u8> = (0..700_001u32).map(|i| (i % 251) as u8).collect();
    std::fs::create_dir_all(workspace.join("models")).unwrap();
    std::fs::write(workspace.join("models/m.onnx"), &model).unwrap();
    std::fs::write(workspace.join("big.bin"), vec![0u8; 1024 * 1024 + 1]).unwrap();
    std::fs::write(volumes.path().join("elsewhere"), b"not alice's").unwrap();
    std::os::unix::fs::symlink(volumes.path().join("elsewhere"), workspace.join("sneaky")).unwrap();
    std::os::unix::fs::symlink(volumes.path(), workspace.join("out")).unwrap();

    let promote = |body: Value| {
        let app = &app;
        let (alice, session) = (alice.clone(), session.clone());
        async move {
            app.call(
                Method::POST,
                &format!("/api/v1/sessions/{session}/promotions"),
                Some(&alice),
                Some(body),
            )
            .await
        }
    };
    for (path, code, says) in [
        ("sneaky", 400, "is a link"),
        ("out/elsewhere", 400, "leads outside your workspace"),
        ("models", 400, "is not a file"),
        ("models/none.onnx", 400, "no file `models/none.onnx`"),
        ("big.bin", 413, "larger than the 1 MiB"),
    ] {
        let answer = promote(json!({"path": path, "name": "x"})).await;
        assert_eq!(
            answer.status.as_u16(),
            code,
            "{path}: {}",
            String::from_utf8_lossy(&answer.body)
        );
        let message = answer.json()["message"].as_str().unwrap().to_string();
        assert!(message.contains(says), "{path}: {message}");
    }
    let staged = app.service.config().data_dir.join("promotions");
    assert!(
        !staged.exists() || std::fs::read_dir(&staged).unwrap().next().is_none(),
        "no refused request left a copy"
    );

    let created = promote(json!({"path": "models/m.onnx", "name": "vision/m", "tag": "v1"})).await;
    assert_eq!(
        created.status.as_u16(),
        201,
        "{}",
        String::from_utf8_lossy(&created.body)
    );
    let view = created.json();
    assert_eq!(view["sha256"], sha256_hex(&model));
    assert_eq!(view["size_bytes"], model.len());
    assert_eq!(
        view["image"],
        image.as_str(),
        "the pod's image is the provenance"
    );
    // Each read was one exec into alice's editor container, the path an argument of its own.
    let execs = fake.execs();
    assert_eq!(execs.len(), 6, "{execs:?}");
    let last: Vec<(String, String)> =
        axum::extract::Query::try_from_uri(&format!("/x?{}", execs[5]).parse().unwrap())
            .map(|q| q.0)
            .unwrap();
    let value = |key: &str| -> Vec<&str> {
        last.iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .collect()
    };
    assert_eq!(value("container"), ["editor"]);
    assert_eq!(value("stdout"), ["true"]);
    assert!(value("stdin").iter().all(|v| *v == "false"), "{last:?}");
    let command = value("command");
    assert_eq!(command[..2], ["sh", "-c"]);
    assert_eq!(command[4..], ["/workspace", "models/m.onnx", "1048576"]);
    assert_eq!(fake.names("pods").len(), 1);
    assert_eq!(fake.names("pods")[0].0, "gsb-alice");

    // Approved, pushed: the registry holds the bytes read through the pod.
    let id = view["id"].as_str().unwrap();
    let approved = app
        .call(
            Method::POST,
            &format!("/api/v1/admin/promotions/{id}/approve"),
            Some(&admin),
            None,
        )
        .await;
    assert_eq!(
        approved.status.as_u16(),
        200,
        "{}",
        String::from_utf8_lossy(&approved.body)
    );
    let pushed = crate::promotion::wait_for(&app, &alice, id, |v| {
        v["state"] == "pushed" || v["state"] == "failed"
    })
    .await;
    assert_eq!(pushed["state"], "pushed", "{pushed}");
    let credentials = Some((REGISTRY_USER, REGISTRY_PASSWORD));
    let oci = "application/vnd.oci.image.manifest.v1+json";
    let (status, _, body) = fetch(
        registry.addr,
        "/v2/sandbox/alice/vision/m/manifests/v1",
        credentials,
        &[oci],
    )
    .await;
    assert_eq!(status.as_u16(), 200);
    let manifest: Value = serde_json::from_slice(&body).unwrap();
    let annotations = &manifest["annotations"];
    assert_eq!(annotations["dev.gpu-sandbox.promotion.user"], "alice");
    assert_eq!(
        annotations["dev.gpu-sandbox.promotion.session"],
        session.as_str()
    );
    assert_eq!(
        annotations["dev.gpu-sandbox.promotion.image"],
        image.as_str()
    );
    let blob = format!(
        "/v2/sandbox/alice/vision/m/blobs/{}",
        manifest["layers"][0]["digest"].as_str().unwrap()
    );
    let (status, _, content) = fetch(registry.addr, &blob, credentials, &[]).await;
    assert_eq!(status.as_u16(), 200);
    assert!(content == model, "the registry holds the file as read");

    // Once the session has ended there is no pod to read through: said so, nothing kept.
    let stopped = app
        .delete(&format!("/api/v1/sessions/{session}"), Some(&alice))
        .await;
    assert!(stopped.status.is_success());
    ended_detail(&app, &alice, &session).await;
    let after = promote(json!({"path": "models/m.onnx", "name": "again"})).await;
    assert_eq!(
        after.status.as_u16(),
        409,
        "{}",
        String::from_utf8_lossy(&after.body)
    );
    assert!(
        after.json()["message"]
            .as_str()
            .unwrap()
            .contains("not running"),
        "{}",
        String::from_utf8_lossy(&after.body)
    );
    assert_eq!(fake.execs().len(), 6, "no exec without a pod");
    app.stop().await;
}
