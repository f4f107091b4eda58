//! Editors as pods in a Kubernetes cluster with HAMi on its GPU nodes (`runtime = "kube"`): one
//! namespace per user, one pod per session, GPU slices as HAMi resources. The API server is reached
//! with kube-rs, the client only (no watcher runtime, websockets or OAuth compiled in; rustls for
//! TLS).
//!
//! - [`names`]: DNS-1123 names for any user name, deterministic per user and session; an altered
//!   name ends in `--` and 10 hex digits of its SHA-256, so distinct users share a namespace only
//!   on a 40-bit hash collision.
//! - [`objects`]: pure builders of every object written (golden-tested).
//! - [`hami`]: HAMi's admission rules, checked on every pod before it is sent.
//! - [`pods`]: reading a pod's progress, failure reason and HAMi placement.
//! - [`metrics`]: GPU use per pod from HAMi's monitor or Prometheus.
//! - [`reconcile`]: keeps the database and the cluster in step (orphans, lost pods, placement).
//!
//! Writes are idempotent. The per-user objects and the token Secret are written by server-side
//! apply under our field manager with `force`, so a changed configuration (a larger quota) reaches
//! existing users on their next launch. The workspace volume and the pod are created, a 409 meaning
//! "already there": a volume cannot shrink or change class, so it is never re-applied, and a pod's
//! name is its session's. Every name is deterministic, so concurrent launches of one user converge
//! on one set of objects.
//!
//! The proxy goes straight to the pod's IP and editor port (`Running.upstream`), presenting the
//! token as it does locally; no Service is needed. The handle stored in the database is JSON,
//! `{"namespace", "pod", "secret", "node"?, "gpus"?}` ([`PodHandle`]).
//!
//! Waits: `start` applies the objects, checks the pod against HAMi's rules, creates it and waits
//! until it has an address; `wait_ready` waits for its Ready condition. A wait looks at the pod
//! once (GET), then watches that one pod (`fieldSelector=metadata.name=…`) from the version it saw,
//! so it wakes on the change itself; when a watch ends (the API server's timeout, a restart, 410
//! Gone) it looks again and watches anew, and where watching is refused it looks every second. The
//! scheduler's grace period (20 s) and the overall timeout are timers beside the watch.
//!
//! Failures are sentences: an `Unschedulable` pod fails with the scheduler's message ("0/3 nodes
//! are available: 3 Insufficient nvidia.com/gpumem") after the grace period, unless a preemption is
//! under way (a nominated node: a warm placeholder is being evicted); image pull failures,
//! container config errors, `CrashLoopBackOff` (with the last 20 lines of the previous container's
//! log), an ended pod and the timeout each say so. API refusals too: an exceeded quota keeps
//! Kubernetes' own text, 422 and 400 say what was rejected and why, a refused permission says an
//! administrator must grant it, no answer says to try later. A start that fails deletes its pod and
//! Secret itself (the service refunds and ends the session); `stop` deletes the pod and the Secret
//! (404 is fine), never the namespace or the workspace. `is_alive` is "the pod exists and has not
//! ended", and says alive when the API server does not answer, so a restart during an outage does
//! not end every session: the reconciler ends the ones really gone.
//!
//! Editors are not pre-started here: warm capacity is placeholder pods (`deploy/`) that session
//! pods preempt.
//!
//! Limits: the workspace is ReadWriteOnce, so two sessions of one user on different nodes cannot
//! both mount it unless the storage class is ReadWriteMany-capable (`kube.storage_class`). The
//! NetworkPolicy's ipBlock rules are IPv4, and whether an ipBlock matches pod IPs is up to the
//! network plugin, which must enforce NetworkPolicy; the kubelet's readiness probes come from the
//! node, which common plugins (Calico, Cilium) admit whatever the policy says.
//! `nvidia.com/use-gpuuuid` is set only when the allocator knows a real card's UUID (NVML on the
//! server); with declared GPUs HAMi picks the card, and the reconciler records which and moves the
//! slot there. The server does not mount the workspaces: promotion reads a file through the
//! session's editor pod ([`files`]); an export runs tar there, or in a reader pod ([`export`]).

pub mod backups;
pub mod dataset_drift;
pub mod datasets;
pub mod export;
pub mod files;
pub mod hami;
pub mod metrics;
pub mod names;
pub mod objects;
pub mod pods;
pub mod reconcile;
pub mod volume_snapshot;

pub use crate::config::kube::{KubeConfig, KubeImages};

use super::{EditorLaunch, GpuUsage, Running, Runtime, RuntimeError};
use app::domain::launch::EditorKind;
use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{
    LimitRange, Namespace, PersistentVolumeClaim, Pod, ResourceQuota, Secret, ServiceAccount,
};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{
    Api, DeleteParams, ListParams, LogParams, Patch, PatchParams, PostParams, WatchEvent,
    WatchParams,
};
use objects::UserPlan;
use pods::Progress;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::time::Duration;
use tokio::time::Instant;

/// What the runtime stores in the database for one session and gets back for stop/is_alive.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodHandle {
    pub namespace: String,
    pub pod: String,
    pub secret: String,
    /// Where HAMi placed it (node, card UUIDs), once the reconciler has seen it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<String>,
}

impl PodHandle {
    pub fn parse(handle: &str) -> Result<PodHandle, RuntimeError> {
        serde_json::from_str(handle).map_err(|e| RuntimeError::Handle(e.to_string()))
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a handle serializes")
    }
}

/// How often and how long the runtime waits on a pod.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    /// Between two looks at a launching pod where the API server refuses to watch it.
    pub poll: Duration,
    /// The API server's timeout for one watch of a launching pod; the wait then watches anew.
    pub watch_seconds: u32,
    /// How long `start` waits for the pod to be placed and get an address.
    pub start_timeout: Duration,
    /// How long an unschedulable pod (with no preemption under way) may stay so before the
    /// launch fails with the scheduler's reason: long enough for a placeholder to be preempted.
    pub unschedulable_grace: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            poll: Duration::from_secs(1),
            watch_seconds: 60,
            start_timeout: Duration::from_secs(120),
            unschedulable_grace: Duration::from_secs(20),
        }
    }
}

/// What a wait on one launching pod has seen so far.
struct PodWait {
    grace: Duration,
    /// Since when the scheduler has found no place, with no preemption under way.
    unschedulable_since: Option<Instant>,
    unschedulable_message: String,
    /// The latest state, for a timeout's message.
    last: String,
}

enum Look<T> {
    Done(T),
    Failed { message: String, crashed: bool },
    Waiting,
}

impl PodWait {
    fn new(grace: Duration) -> PodWait {
        PodWait {
            grace,
            unschedulable_since: None,
            unschedulable_message: String::new(),
            last: "starting".into(),
        }
    }

    fn look<T>(&mut self, pod: &Pod, done: &impl Fn(&Progress) -> Option<T>) -> Look<T> {
        let progress = pods::assess(pod);
        if let Some(value) = done(&progress) {
            return Look::Done(value);
        }
        match progress {
            Progress::Failed { message, crashed } => Look::Failed { message, crashed },
            Progress::Unschedulable {
                message,
                preempting,
            } => {
                self.last = message.clone();
                if preempting {
                    self.unschedulable_since = None;
                    return Look::Waiting;
                }
                self.unschedulable_since.get_or_insert_with(Instant::now);
                self.unschedulable_message = message;
                match self.grace_over() {
                    Some(message) => Look::Failed {
                        message,
                        crashed: false,
                    },
                    None => Look::Waiting,
                }
            }
            Progress::Waiting(why) => {
                self.unschedulable_since = None;
                self.last = why;
                Look::Waiting
            }
            Progress::Placed(_) | Progress::Ready(_) => {
                self.unschedulable_since = None;
                self.last = "starting".into();
                Look::Waiting
            }
        }
    }

    /// The scheduler's refusal, once it has lasted the grace period.
    fn grace_over(&self) -> Option<String> {
        let since = self.unschedulable_since?;
        (since.elapsed() >= self.grace).then(|| {
            format!(
                "No GPU in the cluster can take this slice right now: {}",
                self.unschedulable_message
            )
        })
    }

    /// When to stop waiting for the next event: the deadline, or the end of the grace period.
    fn wake_at(&self, deadline: Instant) -> Instant {
        match self.unschedulable_since {
            Some(since) => deadline.min(since + self.grace),
            None => deadline,
        }
    }
}

fn pod_deleted() -> RuntimeError {
    RuntimeError::Failed {
        message: "the editor's pod was deleted before it was ready".into(),
        log_tail: String::new(),
    }
}

/// The kube layer's error: an answer of the API server, or no answer.
#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    #[error("{what}: HTTP {code} {reason}: {message}")]
    Api {
        what: String,
        code: u16,
        reason: String,
        message: String,
    },
    #[error("{what}: {source}")]
    Client {
        what: String,
        #[source]
        source: kube::Error,
    },
}

impl KubeError {
    fn from_kube(what: impl Into<String>, error: kube::Error) -> KubeError {
        let what = what.into();
        match error {
            kube::Error::Api(status) => KubeError::Api {
                what,
                code: status.code,
                reason: status.reason,
                message: status.message,
            },
            source => KubeError::Client { what, source },
        }
    }

    /// What the user is told; the full error goes to the log.
    pub fn user_message(&self) -> String {
        match self {
            KubeError::Api { message, .. } if message.contains("exceeded quota") => {
                format!(
                    "Your share of the cluster is used up ({message}). Stop another session and try again."
                )
            }
            KubeError::Api { message, .. } if message.contains("admission webhook") => {
                format!("The cluster's admission control refused the editor: {message}")
            }
            KubeError::Api {
                what,
                code: 422 | 400,
                message,
                ..
            } => format!("The cluster rejected the {what}: {message}"),
            KubeError::Api {
                what, code: 403, ..
            } => format!(
                "The server is not allowed to create the {what} in the cluster; an administrator must grant it."
            ),
            KubeError::Api { code, .. } if *code < 500 => {
                "The cluster refused the editor; an administrator can find why in the server's log."
                    .into()
            }
            _ => "The cluster cannot be reached right now; try again in a few minutes.".into(),
        }
    }
}

impl From<KubeError> for RuntimeError {
    fn from(error: KubeError) -> RuntimeError {
        match &error {
            KubeError::Client { .. } => RuntimeError::Unavailable(error.user_message()),
            KubeError::Api { code, .. } if *code >= 500 => {
                RuntimeError::Unavailable(error.user_message())
            }
            KubeError::Api { .. } => RuntimeError::Failed {
                message: error.user_message(),
                log_tail: String::new(),
            },
        }
    }
}

pub struct KubeRuntime {
    client: kube::Client,
    config: KubeConfig,
    network: crate::config::network::NetworkConfig,
    timing: Timing,
    metrics: Option<metrics::MetricsClient>,
}

impl KubeRuntime {
    pub fn new(client: kube::Client, config: KubeConfig) -> KubeRuntime {
        let metrics =
            metrics::Source::from_url(&config.metrics_url).map(metrics::MetricsClient::new);
        KubeRuntime {
            client,
            config,
            network: crate::config::network::NetworkConfig::default(),
            timing: Timing::default(),
            metrics,
        }
    }

    /// User pods reach what `network` says (`[network]`) rather than the default.
    pub fn with_network(mut self, network: crate::config::network::NetworkConfig) -> KubeRuntime {
        self.network = network;
        self
    }

    pub fn with_timing(mut self, timing: Timing) -> KubeRuntime {
        self.timing = timing;
        self
    }

    pub fn config(&self) -> &KubeConfig {
        &self.config
    }

    pub fn client(&self) -> &kube::Client {
        &self.client
    }

    fn apply_params(&self) -> PatchParams {
        PatchParams::apply(&self.config.field_manager).force()
    }

    /// Server-side apply: creates or brings the object to what we own of it.
    async fn apply<K>(&self, api: &Api<K>, object: &K, what: &str) -> Result<(), KubeError>
    where
        K: kube::Resource + Clone + Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
    {
        let name = object.meta().name.clone().unwrap_or_default();
        api.patch(&name, &self.apply_params(), &Patch::Apply(object))
            .await
            .map(|_| ())
            .map_err(|e| KubeError::from_kube(what, e))
    }

    /// Creates the object; one that is there already (409) is fine: names are deterministic.
    /// True when it was created now.
    async fn create<K>(&self, api: &Api<K>, object: &K, what: &str) -> Result<bool, KubeError>
    where
        K: kube::Resource + Clone + Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
    {
        let params = PostParams {
            field_manager: Some(self.config.field_manager.clone()),
            ..PostParams::default()
        };
        match api.create(&params, object).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
            Err(e) => Err(KubeError::from_kube(what, e)),
        }
    }

    /// The user's namespace and everything in it that outlives sessions.
    pub async fn ensure_user(&self, plan: &UserPlan<'_>) -> Result<(), KubeError> {
        let ns = plan.namespace.as_str();
        let client = self.client.clone();
        self.apply(
            &Api::<Namespace>::all(client.clone()),
            &plan.namespace(),
            "namespace",
        )
        .await?;
        self.apply(
            &Api::<ServiceAccount>::namespaced(client.clone(), ns),
            &plan.service_account(),
            "service account",
        )
        .await?;
        let quota = plan.resource_quota();
        debug_assert!(hami::quota_violations(&quota).is_empty());
        self.apply(
            &Api::<ResourceQuota>::namespaced(client.clone(), ns),
            &quota,
            "resource quota",
        )
        .await?;
        self.apply(
            &Api::<LimitRange>::namespaced(client.clone(), ns),
            &plan.limit_range(),
            "limit range",
        )
        .await?;
        self.apply(
            &Api::<NetworkPolicy>::namespaced(client.clone(), ns),
            &plan.network_policy(),
            "network policy",
        )
        .await?;
        let volumes = Api::<PersistentVolumeClaim>::namespaced(client, ns);
        let created = self
            .create(&volumes, &plan.workspace_pvc(), "workspace volume")
            .await?;
        if created {
            return Ok(());
        }
        self.grow_workspace(&volumes, plan).await
    }

    /// A workspace made when the user's quota was smaller grows to it (never shrinks). Where the
    /// storage class does not allow expansion the cluster refuses, and the session starts on
    /// the volume as it is: a refusal is logged, not a failed launch.
    async fn grow_workspace(
        &self,
        volumes: &Api<PersistentVolumeClaim>,
        plan: &UserPlan<'_>,
    ) -> Result<(), KubeError> {
        let current = volumes
            .get_opt(names::WORKSPACE_PVC)
            .await
            .map_err(|e| KubeError::from_kube("workspace volume", e))?
            .and_then(|pvc| pvc.spec?.resources?.requests?.get("storage").cloned())
            .and_then(|q| objects::storage_bytes(&q.0));
        let wanted = u128::from(plan.workspace_gib) << 30;
        if current.is_none_or(|bytes| bytes >= wanted) {
            return Ok(());
        }
        let patch = serde_json::json!({
            "spec": {"resources": {"requests": {"storage": plan.workspace_size()}}}
        });
        let params = PatchParams {
            field_manager: Some(self.config.field_manager.clone()),
            ..PatchParams::default()
        };
        match volumes
            .patch(names::WORKSPACE_PVC, &params, &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {
                tracing::info!(namespace = %plan.namespace, size = %plan.workspace_size(), "workspace volume grown to the user's quota");
                Ok(())
            }
            Err(kube::Error::Api(status)) if matches!(status.code, 403 | 422) => {
                tracing::warn!(namespace = %plan.namespace, size = %plan.workspace_size(), reason = %status.message,
                    "the workspace volume cannot grow to the user's quota (does its storage class allow expansion?)");
                Ok(())
            }
            Err(e) => Err(KubeError::from_kube("workspace volume", e)),
        }
    }

    fn pods(&self, namespace: &str) -> Api<Pod> {
        Api::namespaced(self.client.clone(), namespace)
    }

    /// The pod, or None when it is gone.
    async fn get_pod(&self, handle: &PodHandle) -> Result<Option<Pod>, KubeError> {
        self.pods(&handle.namespace)
            .get_opt(&handle.pod)
            .await
            .map_err(|e| KubeError::from_kube("editor pod", e))
    }

    /// The last lines of the editor's log, for a crash report; empty when unreadable.
    async fn log_tail(&self, handle: &PodHandle) -> String {
        let params = LogParams {
            container: Some("editor".into()),
            tail_lines: Some(20),
            previous: true,
            ..LogParams::default()
        };
        self.pods(&handle.namespace)
            .logs(&handle.pod, &params)
            .await
            .unwrap_or_default()
    }

    /// Waits until `done` says the pod got there, it fails, or `timeout` passes: one look, then
    /// a watch on that one pod from the version seen. A watch may end at any time (the API
    /// server's own timeout, a restart, 410 Gone); the wait then looks again and watches anew.
    /// Where watching is refused, the looks repeat every `timing.poll`.
    async fn watch_pod<T>(
        &self,
        handle: &PodHandle,
        timeout: Duration,
        what: &str,
        done: impl Fn(&Progress) -> Option<T>,
    ) -> Result<T, RuntimeError> {
        let deadline = Instant::now() + timeout;
        let mut wait = PodWait::new(self.timing.unschedulable_grace);
        loop {
            let version = match self.get_pod(handle).await {
                Ok(Some(pod)) => match wait.look(&pod, &done) {
                    Look::Done(value) => return Ok(value),
                    Look::Failed { message, crashed } => {
                        return Err(self.failure(handle, message, crashed).await);
                    }
                    // "0": any version, where an API server gave none.
                    Look::Waiting => Some(
                        pod.metadata
                            .resource_version
                            .clone()
                            .unwrap_or_else(|| "0".into()),
                    ),
                },
                Ok(None) => return Err(pod_deleted()),
                // The API server may blink (an upgrade, a leader change): keep looking until the timeout.
                Err(e) => {
                    tracing::warn!(pod = %handle.pod, error = %e, "looking at a launching pod");
                    wait.last = "the cluster did not answer".into();
                    None
                }
            };
            // Whether a watch told anything: one that ends or fails at once (a proxy closing
            // streams, an API server refusing) must not turn the wait into a hot loop.
            let mut watched = false;
            if let Some(version) = version {
                let params = WatchParams::default()
                    .fields(&format!("metadata.name={}", handle.pod))
                    .timeout(self.timing.watch_seconds);
                match self.pods(&handle.namespace).watch(&params, &version).await {
                    Ok(events) => {
                        let mut events = std::pin::pin!(events);
                        loop {
                            let next =
                                tokio::time::timeout_at(wait.wake_at(deadline), events.next())
                                    .await;
                            let pod = match next {
                                Ok(Some(Ok(
                                    WatchEvent::Added(pod) | WatchEvent::Modified(pod),
                                ))) => pod,
                                Ok(Some(Ok(WatchEvent::Deleted(_)))) => return Err(pod_deleted()),
                                Ok(Some(Ok(WatchEvent::Bookmark(_)))) => continue,
                                Err(_) => match wait.grace_over() {
                                    Some(message) => {
                                        return Err(self.failure(handle, message, false).await);
                                    }
                                    None => break,
                                },
                                // An error event (410 Gone) or the end: look again.
                                Ok(Some(Ok(WatchEvent::Error(_)) | Err(_)) | None) => break,
                            };
                            watched = true;
                            match wait.look(&pod, &done) {
                                Look::Done(value) => return Ok(value),
                                Look::Failed { message, crashed } => {
                                    return Err(self.failure(handle, message, crashed).await);
                                }
                                Look::Waiting => {}
                            }
                        }
                    }
                    Err(e) => {
                        tracing::warn!(pod = %handle.pod, error = %e, "watching a launching pod; looking again instead");
                    }
                }
            }
            if Instant::now() >= deadline {
                return Err(RuntimeError::Failed {
                    message: format!(
                        "the editor's pod {what} within {} s (last: {})",
                        timeout.as_secs(),
                        wait.last
                    ),
                    log_tail: String::new(),
                });
            }
            if !watched {
                tokio::time::sleep(self.timing.poll.min(deadline - Instant::now())).await;
            }
        }
    }

    /// A launch failure; a crashed editor's last log lines go with it.
    async fn failure(&self, handle: &PodHandle, message: String, crashed: bool) -> RuntimeError {
        let log_tail = if crashed {
            self.log_tail(handle).await
        } else {
            String::new()
        };
        RuntimeError::Failed { message, log_tail }
    }

    /// Deletes what a session started; what is gone already is fine.
    pub(crate) async fn delete_session_objects(&self, handle: &PodHandle) -> Result<(), KubeError> {
        let params = DeleteParams::default();
        let ignore_missing = |result: Result<(), kube::Error>, what: &str| match result {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
            Err(e) => Err(KubeError::from_kube(what, e)),
        };
        let pod = ignore_missing(
            self.pods(&handle.namespace)
                .delete(&handle.pod, &params)
                .await
                .map(|_| ()),
            "editor pod",
        );
        let secret = ignore_missing(
            Api::<Secret>::namespaced(self.client.clone(), &handle.namespace)
                .delete(&handle.secret, &params)
                .await
                .map(|_| ()),
            "token secret",
        );
        pod.and(secret)
    }

    /// Our session pods in every namespace, by label.
    pub async fn list_session_pods(&self) -> Result<Vec<Pod>, KubeError> {
        let selector = format!(
            "{}={},{}",
            names::MANAGED_BY,
            names::MANAGER,
            names::SESSION_LABEL
        );
        Api::<Pod>::all(self.client.clone())
            .list(&ListParams::default().labels(&selector))
            .await
            .map(|list| list.items)
            .map_err(|e| KubeError::from_kube("session pods", e))
    }

    /// Whether the pod of `handle` exists, asked directly (the reconciler's second look).
    pub async fn pod_exists(&self, handle: &PodHandle) -> Result<bool, KubeError> {
        self.get_pod(handle).await.map(|pod| pod.is_some())
    }
}

#[async_trait::async_trait]
impl Runtime for KubeRuntime {
    /// The user's namespace goes, and with it their workspace's claim (its volume, as the
    /// storage class's reclaim policy says) and everything else of theirs. The chart's
    /// admission policy lets the server delete only namespaces it made.
    async fn remove_workspace(&self, user_name: &str) -> Result<(), RuntimeError> {
        let namespace = names::namespace_of(&self.config.namespace_prefix, user_name);
        let api = Api::<Namespace>::all(self.client.clone());
        match api.delete(&namespace, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(e) => return Err(RuntimeError::from(KubeError::from_kube("namespace", e))),
        }
        // Dataset volumes are cluster-scoped: they do not go with the namespace.
        self.remove_dataset_volumes(user_name)
            .await
            .map_err(RuntimeError::from)
    }

    async fn copy_workspace_file(
        &self,
        file: &super::workspace_file::WorkspaceFile<'_>,
    ) -> Result<super::workspace_file::Copied, super::workspace_file::CopyError> {
        self.copy_through_pod(file).await
    }

    fn exports_elsewhere(&self) -> bool {
        true
    }

    async fn export_workspace(
        &self,
        user_name: &str,
        part: Option<&str>,
        within: Option<Duration>,
    ) -> Result<super::archive::Chunks, super::archive::ArchiveError> {
        self.export_through_pod(user_name, part, within).await
    }

    fn availability(&self) -> Vec<(EditorKind, Result<(), String>)> {
        // Images are validated at load; whether the cluster can pull them shows at launch.
        EditorKind::ALL.into_iter().map(|e| (e, Ok(()))).collect()
    }

    async fn start(&self, launch: &EditorLaunch) -> Result<Running, RuntimeError> {
        let plan = UserPlan::new(&self.config, &launch.user_name)
            .with_network(&self.network)
            .with_disk_quota(launch.disk_mib);
        let log = |e: KubeError| {
            tracing::warn!(session = %launch.session_id, error = %e, "kube launch");
            RuntimeError::from(e)
        };
        self.ensure_user(&plan).await.map_err(log)?;
        let pod = plan.session_pod(launch);
        let problems = hami::pod_violations(&pod);
        if !problems.is_empty() {
            tracing::error!(session = %launch.session_id, ?problems, "pod breaks HAMi's rules");
            return Err(RuntimeError::Failed {
                message: format!(
                    "the editor's pod breaks the GPU scheduler's rules: {}",
                    problems.join("; ")
                ),
                log_tail: String::new(),
            });
        }
        // code-server's secret is an argon2 hash: tens of milliseconds, off the async threads.
        let editor = launch.editor;
        let token =
            tokio::task::spawn_blocking(move || crate::runtime::editors::new_secret(editor))
                .await
                .map_err(|e| RuntimeError::Handle(e.to_string()))?;
        let handle = PodHandle {
            namespace: plan.namespace.clone(),
            pod: names::pod_name(&launch.session_id),
            secret: names::secret_name(&launch.session_id),
            ..PodHandle::default()
        };
        let created = async {
            self.apply(
                &Api::<Secret>::namespaced(self.client.clone(), &plan.namespace),
                &plan.token_secret(launch, &token),
                "token secret",
            )
            .await?;
            self.create(&self.pods(&plan.namespace), &pod, "editor pod")
                .await
                .map(|_| ())
        }
        .await;
        let placed = match created {
            Ok(()) => {
                self.watch_pod(
                    &handle,
                    self.timing.start_timeout,
                    "was not placed",
                    |p| match p {
                        Progress::Placed(ip) | Progress::Ready(ip) => Some(ip.clone()),
                        _ => None,
                    },
                )
                .await
            }
            Err(e) => Err(log(e)),
        };
        match placed {
            Ok(ip) => {
                tracing::info!(session = %launch.session_id, namespace = %handle.namespace, pod = %handle.pod, %ip, "editor pod placed");
                Ok(Running {
                    upstream: pods::upstream(&ip, self.config.editor_port),
                    secret: token,
                    handle: handle.to_json(),
                })
            }
            Err(e) => {
                // The service never stops what failed to start: clean up here.
                if let Err(cleanup) = self.delete_session_objects(&handle).await {
                    tracing::warn!(session = %launch.session_id, error = %cleanup, "cleaning up a failed launch");
                }
                Err(e)
            }
        }
    }

    async fn wait_ready(
        &self,
        _launch: &EditorLaunch,
        running: &Running,
        timeout: Duration,
    ) -> Result<(), RuntimeError> {
        let handle = PodHandle::parse(&running.handle)?;
        self.watch_pod(&handle, timeout, "was not ready", |p| {
            matches!(p, Progress::Ready(_)).then_some(())
        })
        .await
    }

    async fn stop(&self, handle: &str) -> Result<(), RuntimeError> {
        let handle = PodHandle::parse(handle)?;
        self.delete_session_objects(&handle).await.map_err(|e| {
            tracing::warn!(pod = %handle.pod, error = %e, "deleting an editor pod");
            RuntimeError::from(e)
        })?;
        tracing::info!(namespace = %handle.namespace, pod = %handle.pod, "editor pod deleted");
        Ok(())
    }

    async fn last_words(&self, handle: &str) -> String {
        match PodHandle::parse(handle) {
            Ok(handle) => self.log_tail(&handle).await,
            Err(_) => String::new(),
        }
    }

    async fn is_alive(&self, handle: &str) -> bool {
        let Ok(handle) = PodHandle::parse(handle) else {
            return false;
        };
        match self.get_pod(&handle).await {
            // Being deleted by someone else (a drain, an eviction): going, not running.
            Ok(Some(pod)) => {
                pod.metadata.deletion_timestamp.is_none()
                    && !matches!(
                        pod.status.and_then(|s| s.phase).as_deref(),
                        Some("Failed" | "Succeeded")
                    )
            }
            Ok(None) => false,
            // Unknown is not dead: a restart while the API server blinks must not end every
            // session. The reconciler ends the ones that are really gone.
            Err(e) => {
                tracing::warn!(pod = %handle.pod, error = %e, "is the editor pod alive?");
                true
            }
        }
    }

    async fn was_lost(&self, handle: &str) -> bool {
        let Ok(handle) = PodHandle::parse(handle) else {
            return false;
        };
        // Gone or going without our asking: the cluster took it (a drained or failed node).
        match self.get_pod(&handle).await {
            Ok(Some(pod)) => pod.metadata.deletion_timestamp.is_some(),
            Ok(None) => true,
            Err(_) => false,
        }
    }

    async fn gpu_usage(&self, handles: &[String]) -> HashMap<String, GpuUsage> {
        let Some(metrics) = &self.metrics else {
            return HashMap::new();
        };
        let samples = match metrics.samples().await {
            Ok(samples) => samples,
            Err(e) => {
                tracing::warn!(error = %e, "reading GPU metrics");
                return HashMap::new();
            }
        };
        let by_pod = metrics::usage_by_pod(&samples);
        handles
            .iter()
            .filter_map(|raw| {
                let handle = PodHandle::parse(raw).ok()?;
                let usage = by_pod.get(&(handle.namespace, handle.pod))?;
                Some((raw.clone(), usage.clone()))
            })
            .collect()
    }

    fn mounts_datasets(&self) -> bool {
        true
    }

    fn workspace_snapshots(&self) -> Option<&dyn crate::runtime::snapshots::WorkspaceSnapshots> {
        (!self.config.snapshot_class.is_empty()).then_some(self as _)
    }

    fn runs_images(&self) -> bool {
        true
    }

    fn editor_image(&self, editor: EditorKind) -> String {
        self.config.images.of(editor).to_string()
    }
}
