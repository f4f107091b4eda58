//! A simulated Kubernetes cluster for the product's tests: an API server on loopback that the
//! product's own kube client reaches over TCP, as kwok and envtest let controllers be tested
//! without a cluster. Fidelity is the point: it refuses what a real one refuses.
//!
//! - [`kinds`]: the resources served and their Kubernetes types (k8s-openapi, v1.33).
//! - [`validate`]: wrong types (400), unknown fields (warned, or refused when strict or applied),
//!   names, labels, quantities, requests over limits (422).
//! - [`apply`]: server-side apply with field managers and conflicts; merge patches.
//! - [`admission`]: LimitRange defaults and bounds; ResourceQuota charged per pod and claim.
//! - [`rbac`]: every request authorized against the chart's rendered RBAC objects.
//! - [`store`]: revisions, a window of changes, 410 Gone before it.
//! - [`http`]: the URL layout, tokens, patch content types, watches.
//! - [`scheduler`]: placement by CPU, memory and HAMi's GPU shares; unschedulable pods.
//! - [`kubelet`]: runs a node's pods as local processes in network namespaces and cgroups.
//! - [`snapshots`]: VolumeSnapshots' schema and a snapshot controller with a node-local driver;
//!   [`snapshot_contents`]: the VolumeSnapshotContents it makes, binds and deletes.
//! - [`volumes`]: PersistentVolumes, claims bound to them, NFS and CSI storage as host folders;
//!   [`protection`]: claims and volumes in use stay Terminating until their users go.
//! - [`events`]: the Events the scheduler, the kubelet and the controllers write.
//!
//! Not simulated (ARCHITECTURE.md): image pulls, NetworkPolicy enforcement, the container
//! runtime's own isolation, the chart's ValidatingAdmissionPolicy (CEL; checked offline by
//! `deploy/tools/check.py`), list-type-aware merging of server-side apply (lists are atomic).

pub mod admission;
pub mod api;
pub mod apply;
pub mod cgroup;
pub mod clock;
pub mod events;
pub mod http;
pub mod kinds;
pub mod kubelet;
pub mod protection;
pub mod quantity;
pub mod rbac;
pub mod scheduler;
pub mod selectors;
pub mod snapshot_contents;
pub mod snapshots;
pub mod status;
pub mod store;
pub mod validate;
pub mod volumes;

use serde_json::Value;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

/// The token the harness uses: `system:masters`, as a cluster's admin kubeconfig.
pub const ADMIN_TOKEN: &str = "sim-admin";

/// How to start the simulated API server.
#[derive(Default)]
pub struct Options {
    /// Rendered objects whose RBAC (roles and bindings) authorizes requests, e.g. the chart.
    pub rbac: Vec<Value>,
    /// Service accounts given a token: (namespace, name, token).
    pub service_accounts: Vec<(String, String, String)>,
    /// Nodes, each with a kubelet that runs its pods (none: pods stay unscheduled).
    pub nodes: Vec<NodeSpec>,
}

/// A node: its kubelet and its GPUs.
pub struct NodeSpec {
    pub kubelet: kubelet::Config,
    pub cards: Vec<scheduler::Card>,
}

/// The logs and execs of whichever node runs a pod.
#[derive(Default)]
struct Nodes(std::sync::Mutex<Vec<Arc<kubelet::Kubelet>>>);

impl http::PodStreams for Nodes {
    fn exec(
        &self,
        namespace: &str,
        pod: &str,
        argv: Vec<String>,
    ) -> Result<tokio::process::Child, status::Refusal> {
        let nodes = self.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let mut last = None;
        for node in nodes {
            match node.exec_in(namespace, pod, argv.clone()) {
                Ok(child) => return Ok(child),
                Err(refused) => last = Some(refused),
            }
        }
        Err(last.unwrap_or_else(|| {
            status::Refusal::bad_request(format!(
                "unable to upgrade connection: container not found (\"editor\") in pod \"{pod}\""
            ))
        }))
    }

    fn logs(
        &self,
        namespace: &str,
        pod: &str,
        container: Option<&str>,
        previous: bool,
        tail_lines: Option<usize>,
    ) -> Result<String, status::Refusal> {
        let nodes = self.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let mut last = None;
        for node in nodes {
            match node.logs(namespace, pod, container, previous, tail_lines) {
                Ok(text) => return Ok(text),
                Err(refused) => last = Some(refused),
            }
        }
        Err(last.unwrap_or_else(|| {
            status::Refusal::bad_request(format!(
                "container \"editor\" in pod \"{pod}\" is waiting to start: ContainerCreating"
            ))
        }))
    }
}

/// A running simulated cluster.
pub struct SimCluster {
    pub addr: SocketAddr,
    pub api: api::Api,
    /// Requests served so far, by verb and resource.
    pub calls: Arc<std::sync::Mutex<std::collections::BTreeMap<String, u64>>>,
    pub kubelets: Vec<Arc<kubelet::Kubelet>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl SimCluster {
    /// Starts serving on a free loopback port.
    pub async fn start(options: Options) -> std::io::Result<Self> {
        let mut tokens = HashMap::new();
        tokens.insert(
            ADMIN_TOKEN.to_string(),
            http::Identity {
                user: "sim-admin".into(),
                groups: vec!["system:masters".into(), "system:authenticated".into()],
            },
        );
        for (namespace, name, token) in &options.service_accounts {
            tokens.insert(
                token.clone(),
                http::Identity {
                    user: format!("system:serviceaccount:{namespace}:{name}"),
                    groups: vec![
                        "system:serviceaccounts".into(),
                        format!("system:serviceaccounts:{namespace}"),
                        "system:authenticated".into(),
                    ],
                },
            );
        }
        let api = api::Api::default();
        let nodes = Arc::new(Nodes::default());
        let calls = Arc::default();
        let server = http::Server {
            api: api.clone(),
            authorizer: Arc::new(rbac::Authorizer::from_objects(&options.rbac)),
            tokens: Arc::new(tokens),
            logs: Some(nodes.clone()),
            calls: Arc::clone(&calls),
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let mut tasks = vec![tokio::spawn(async move {
            let _ = axum::serve(listener, http::router(server)).await;
        })];
        let mut kubelets = Vec::new();
        for node in options.nodes {
            let kubelet = kubelet::Kubelet::start(node.kubelet, api.store.clone(), &node.cards)
                .map_err(std::io::Error::other)?;
            tasks.push(tokio::spawn(kubelet.clone().run()));
            kubelets.push(kubelet);
        }
        *nodes.0.lock().unwrap_or_else(|e| e.into_inner()) = kubelets.clone();
        // The snapshot controller and its node-local CSI driver.
        let (store, on) = (api.store.clone(), kubelets.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let (store, on) = (store.clone(), on.clone());
                let _ = tokio::task::spawn_blocking(move || {
                    volumes::bind(&store);
                    protection::release(&store);
                    snapshots::reconcile(&store, &on)
                })
                .await;
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }));
        Ok(SimCluster {
            addr,
            api,
            calls,
            kubelets,
            tasks,
        })
    }

    /// Stops every pod and removes the nodes' networks.
    pub async fn shut_down(self) {
        for task in &self.tasks {
            task.abort();
        }
        for kubelet in &self.kubelets {
            kubelet.shut_down().await;
        }
    }

    /// Requests served so far, in all.
    pub fn call_count(&self) -> u64 {
        self.calls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .sum()
    }

    /// A kubeconfig that reaches this API server with `token`.
    pub fn kubeconfig(&self, token: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: sim\n  cluster:\n    server: http://{addr}\n\
             users:\n- name: sim\n  user:\n    token: {token}\ncontexts:\n- name: sim\n  context:\n    \
             cluster: sim\n    user: sim\ncurrent-context: sim\n",
            addr = self.addr
        )
    }
}

impl Drop for SimCluster {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}
