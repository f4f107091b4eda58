//! Pure builders of every object the kube runtime writes: no client, no I/O, each golden-tested
//! against `server/tests/golden/kube/`.
//!
//! Per user, created on the first launch and kept across sessions, in the namespace
//! `<namespace_prefix><user label>`:
//! - the Namespace, labelled `app.kubernetes.io/managed-by: gpu-sandbox` and `gpu-sandbox/user`,
//!   with the restricted Pod Security Standard enforced;
//! - a ServiceAccount `editor` with `automountServiceAccountToken: false` and no permissions;
//! - a ResourceQuota on `pods`, `requests.storage`, `persistentvolumeclaims` and
//!   `limits.nvidia.com/gpumem`;
//! - a LimitRange: CPU and memory defaults and ceilings;
//! - a NetworkPolicy: ingress only from `server_namespace` to the editor port; egress only to DNS
//!   in kube-system, to public addresses (`0.0.0.0/0` and `::/0` but `network.egress_deny`: by
//!   default the private, link-local/metadata and CGNAT ranges and Azure's WireServer) and to
//!   `network.egress_allow`, so no other user's pods, no nodes, no cloud metadata service;
//! - the workspace volume (PVC).
//!
//! Per session: a Secret `session-<id>-token` with the editor's token, and the pod `session-<id>`:
//! the launch's approved image or the editor's configured one, running the editor program itself on
//! `0.0.0.0:<editor_port>` under the session's base path; HAMi resources in limits only
//! (`nvidia.com/gpu: 1`, `nvidia.com/gpumem: <MiB>`, `nvidia.com/gpucores: <%>`), and
//! `nvidia.com/use-gpuuuid` when the allocator chose a card; the session PriorityClass
//! (`kube.session_priority_class`); non-root (1000:100, fsGroup 100), no privilege escalation, all
//! capabilities dropped, RuntimeDefault seccomp, a read-only root filesystem with HOME on the
//! workspace volume (`/workspace`) and `/tmp` an emptyDir; a readiness probe on a path each editor
//! answers without its token (Jupyter's `<base>api`, marimo's `<base>health`, code-server's
//! `/healthz`). The token reaches the editor from the Secret only (`JUPYTER_TOKEN` /
//! `HASHED_PASSWORD` by `secretKeyRef`, marimo's token file as a mounted Secret volume), never in
//! the pod spec or the arguments.

use super::names::{self, *};
use crate::config::kube::KubeConfig;
use crate::config::network::NetworkConfig;
use crate::runtime::EditorLaunch;
use app::domain::launch::EditorKind;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::*;
use k8s_openapi::api::networking::v1::*;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use std::collections::BTreeMap;

/// HAMi's extended resources (its device plugin registers these names).
pub const GPU: &str = "nvidia.com/gpu";
pub const GPU_MEM: &str = "nvidia.com/gpumem";
pub const GPU_CORES: &str = "nvidia.com/gpucores";
/// Pins the pod to one card: HAMi's scheduler only considers the GPU with this UUID.
pub const USE_GPU_UUID: &str = "nvidia.com/use-gpuuuid";

/// Where the workspace volume, scratch space and the token file are mounted in the pod.
pub const WORKSPACE_DIR: &str = "/workspace";
pub const TMP_DIR: &str = "/tmp";
pub const TOKEN_DIR: &str = "/run/secrets/gpu-sandbox";
/// The key of the token in the session's Secret.
pub const TOKEN_KEY: &str = "token";

/// The editor runs as this user and group; the volume is group-writable through fsGroup.
/// 1000/100 is the Jupyter images' own user (jovyan, group users); the others do not care.
const RUN_AS_USER: i64 = 1000;
const RUN_AS_GROUP: i64 = 100;

/// Containers that name no CPU or memory get these (LimitRange defaults); the GPU slice is what
/// is sold, CPU and memory just must not starve a node.
const DEFAULT_CPU: &str = "2";
const DEFAULT_MEMORY: &str = "8Gi";
const DEFAULT_REQUEST_CPU: &str = "250m";
const DEFAULT_REQUEST_MEMORY: &str = "1Gi";
const MAX_CPU: &str = "8";
const MAX_MEMORY: &str = "32Gi";
/// Scratch space (/tmp, caches): node disk, bounded.
const TMP_SIZE: &str = "4Gi";

/// Claims a user's namespace may hold beside the workspace: one a restore makes from a snapshot
/// while it copies, and a read-only claim for each dataset the user may use (each requests
/// [`DATASET_CLAIM_SIZE`], so all of them fit in the 1 GiB the storage quota adds).
pub const RESTORE_CLAIMS: u32 = 1;
pub const MAX_DATASET_CLAIMS: u32 = 32;
pub const DATASET_CLAIM_SIZE: &str = "1Mi";

/// What the per-user builders need to know about one user.
#[derive(Clone, Debug)]
pub struct UserPlan<'a> {
    pub config: &'a KubeConfig,
    /// What the user's pods may reach (`[network]`).
    pub network: &'a NetworkConfig,
    /// The namespace name.
    pub namespace: String,
    /// The user's label value.
    pub user: String,
    /// The workspace volume's size (and the namespace's storage quota), in GiB.
    pub workspace_gib: u64,
}

impl<'a> UserPlan<'a> {
    pub fn new(config: &'a KubeConfig, user_name: &str) -> UserPlan<'a> {
        static DEFAULT_NETWORK: std::sync::LazyLock<NetworkConfig> =
            std::sync::LazyLock::new(NetworkConfig::default);
        UserPlan {
            config,
            network: &DEFAULT_NETWORK,
            namespace: names::namespace_of(&config.namespace_prefix, user_name),
            user: names::user_label(&config.namespace_prefix, user_name),
            workspace_gib: config.workspace_size_gib.into(),
        }
    }

    /// The user's pods reach what `network` says rather than the default.
    pub fn with_network(mut self, network: &'a NetworkConfig) -> UserPlan<'a> {
        self.network = network;
        self
    }

    /// The workspace sized by the user's disk quota (MiB, rounded up to whole GiB); 0 (no
    /// user yet, or no quota known): `kube.workspace_size_gib`.
    pub fn with_disk_quota(mut self, disk_mib: u64) -> UserPlan<'a> {
        if disk_mib > 0 {
            self.workspace_gib = disk_mib.div_ceil(1024);
        }
        self
    }

    /// The workspace size as Kubernetes writes it.
    pub fn workspace_size(&self) -> String {
        format!("{}Gi", self.workspace_gib)
    }

    fn labels(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            (MANAGED_BY.to_string(), MANAGER.to_string()),
            (USER_LABEL.to_string(), self.user.clone()),
        ])
    }

    fn meta(&self, name: &str) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(self.namespace.clone()),
            labels: Some(self.labels()),
            ..ObjectMeta::default()
        }
    }

    /// The user's namespace, with the restricted Pod Security Standard enforced on it.
    pub fn namespace(&self) -> Namespace {
        let mut labels = self.labels();
        for mode in ["enforce", "audit", "warn"] {
            labels.insert(
                format!("pod-security.kubernetes.io/{mode}"),
                "restricted".into(),
            );
            labels.insert(
                format!("pod-security.kubernetes.io/{mode}-version"),
                "latest".into(),
            );
        }
        Namespace {
            metadata: ObjectMeta {
                name: Some(self.namespace.clone()),
                labels: Some(labels),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        }
    }

    /// The identity of session pods: no API token mounted, no permissions granted.
    pub fn service_account(&self) -> ServiceAccount {
        ServiceAccount {
            metadata: self.meta(SERVICE_ACCOUNT),
            automount_service_account_token: Some(false),
            ..ServiceAccount::default()
        }
    }

    /// What the user may hold at once. HAMi reads GPU quota only under the `limits.` prefix
    /// (Kubernetes itself does not enforce quota on extended-resource limits; HAMi's scheduler does).
    /// Storage: the workspace, a restore's claim as large, and 1 GiB for the dataset claims.
    pub fn resource_quota(&self) -> ResourceQuota {
        let c = self.config;
        let claims = 1 + RESTORE_CLAIMS + MAX_DATASET_CLAIMS;
        let storage = format!("{}Gi", self.workspace_gib * 2 + 1);
        let hard = BTreeMap::from([
            ("pods".to_string(), q(c.max_pods_per_user.to_string())),
            ("requests.storage".to_string(), q(storage)),
            (
                format!("limits.{GPU_MEM}"),
                q(c.max_gpumem_mib_per_user.to_string()),
            ),
            ("persistentvolumeclaims".to_string(), q(claims.to_string())),
        ]);
        ResourceQuota {
            metadata: self.meta(QUOTA),
            spec: Some(ResourceQuotaSpec {
                hard: Some(hard),
                ..ResourceQuotaSpec::default()
            }),
            ..ResourceQuota::default()
        }
    }

    /// CPU and memory for containers that name none, and a ceiling for those that do.
    pub fn limit_range(&self) -> LimitRange {
        let list = |cpu: &str, memory: &str| {
            BTreeMap::from([
                ("cpu".to_string(), q(cpu.to_string())),
                ("memory".to_string(), q(memory.to_string())),
            ])
        };
        LimitRange {
            metadata: self.meta(LIMIT_RANGE),
            spec: Some(LimitRangeSpec {
                limits: vec![LimitRangeItem {
                    type_: "Container".into(),
                    default: Some(list(DEFAULT_CPU, DEFAULT_MEMORY)),
                    default_request: Some(list(DEFAULT_REQUEST_CPU, DEFAULT_REQUEST_MEMORY)),
                    max: Some(list(MAX_CPU, MAX_MEMORY)),
                    ..LimitRangeItem::default()
                }],
            }),
        }
    }

    /// Ingress only from the server's namespace to the editor port; egress only to DNS in
    /// kube-system and to public addresses (no other namespace, node or metadata service).
    pub fn network_policy(&self) -> NetworkPolicy {
        let namespace_named = |name: &str| LabelSelector {
            match_labels: Some(BTreeMap::from([(
                "kubernetes.io/metadata.name".to_string(),
                name.to_string(),
            )])),
            ..LabelSelector::default()
        };
        let port = |protocol: &str, number: i32| NetworkPolicyPort {
            protocol: Some(protocol.into()),
            port: Some(IntOrString::Int(number)),
            ..NetworkPolicyPort::default()
        };
        NetworkPolicy {
            metadata: self.meta(NETWORK_POLICY),
            spec: Some(NetworkPolicySpec {
                pod_selector: Some(LabelSelector::default()),
                policy_types: Some(vec!["Ingress".into(), "Egress".into()]),
                ingress: Some(vec![NetworkPolicyIngressRule {
                    from: Some(vec![NetworkPolicyPeer {
                        namespace_selector: Some(namespace_named(&self.config.server_namespace)),
                        ..NetworkPolicyPeer::default()
                    }]),
                    ports: Some(vec![port("TCP", self.config.editor_port.into())]),
                }]),
                egress: Some(vec![
                    NetworkPolicyEgressRule {
                        to: Some(vec![NetworkPolicyPeer {
                            namespace_selector: Some(namespace_named("kube-system")),
                            ..NetworkPolicyPeer::default()
                        }]),
                        ports: Some(vec![port("UDP", 53), port("TCP", 53)]),
                    },
                    NetworkPolicyEgressRule {
                        to: Some(self.egress_peers()),
                        ports: None,
                    },
                ]),
            }),
        }
    }

    /// The world of each family less the denied ranges of that family, then each allowed range
    /// (peers of one rule add up, so an allowed range is reached even inside a denied one).
    fn egress_peers(&self) -> Vec<NetworkPolicyPeer> {
        // IPv4-mapped IPv6 is IPv4 to a pod's stack, and no `except` of `::/0` to the API server.
        let mapped: ipnet::IpNet = "::ffff:0:0/96".parse().expect("a range");
        let deny: Vec<ipnet::IpNet> = self
            .network
            .deny()
            .into_iter()
            .filter(|net| !mapped.contains(net))
            .collect();
        let block = |world: &str, v4: bool| {
            let except: Vec<String> = deny
                .iter()
                .filter(|net| matches!(net, ipnet::IpNet::V4(_)) == v4)
                .map(ToString::to_string)
                .collect();
            NetworkPolicyPeer {
                ip_block: Some(IPBlock {
                    cidr: world.into(),
                    except: (!except.is_empty()).then_some(except),
                }),
                ..NetworkPolicyPeer::default()
            }
        };
        let allowed = self
            .network
            .allow()
            .into_iter()
            .map(|net| NetworkPolicyPeer {
                ip_block: Some(IPBlock {
                    cidr: net.to_string(),
                    except: None,
                }),
                ..NetworkPolicyPeer::default()
            });
        [block("0.0.0.0/0", true), block("::/0", false)]
            .into_iter()
            .chain(allowed)
            .collect()
    }

    /// The user's workspace, kept across sessions. Created once and never re-applied: a volume's
    /// size cannot shrink and its class cannot change, so a later configuration change must not
    /// fail every launch. It grows with the user's quota ([`super::KubeRuntime::ensure_user`]).
    pub fn workspace_pvc(&self) -> PersistentVolumeClaim {
        let c = self.config;
        PersistentVolumeClaim {
            metadata: self.meta(WORKSPACE_PVC),
            spec: Some(PersistentVolumeClaimSpec {
                access_modes: Some(vec!["ReadWriteOnce".into()]),
                storage_class_name: (!c.storage_class.is_empty()).then(|| c.storage_class.clone()),
                resources: Some(VolumeResourceRequirements {
                    requests: Some(BTreeMap::from([(
                        "storage".to_string(),
                        q(self.workspace_size()),
                    )])),
                    ..VolumeResourceRequirements::default()
                }),
                ..PersistentVolumeClaimSpec::default()
            }),
            ..PersistentVolumeClaim::default()
        }
    }

    fn session_labels(&self, launch: &EditorLaunch) -> BTreeMap<String, String> {
        let mut labels = self.labels();
        labels.insert(SESSION_LABEL.into(), launch.session_id.clone());
        labels.insert(EDITOR_LABEL.into(), launch.editor.as_str().into());
        labels
    }

    /// The session's Secret: the token the proxy presents, read by the editor from here only.
    pub fn token_secret(&self, launch: &EditorLaunch, token: &str) -> Secret {
        Secret {
            metadata: ObjectMeta {
                labels: Some(self.session_labels(launch)),
                ..self.meta(&names::secret_name(&launch.session_id))
            },
            type_: Some("Opaque".into()),
            data: Some(BTreeMap::from([(
                TOKEN_KEY.to_string(),
                ByteString(token.as_bytes().to_vec()),
            )])),
            ..Secret::default()
        }
    }

    /// The session's pod: the approved image, the HAMi slice in limits, restricted security,
    /// the workspace mounted, ready when the editor answers under its base path.
    pub fn session_pod(&self, launch: &EditorLaunch) -> Pod {
        let c = self.config;
        let editor = launch.editor;
        let secret = names::secret_name(&launch.session_id);
        let mut env = vec![
            env_value("HOME", WORKSPACE_DIR),
            env_value("XDG_CACHE_HOME", &format!("{TMP_DIR}/cache")),
            env_value("JUPYTER_RUNTIME_DIR", &format!("{TMP_DIR}/jupyter-runtime")),
            env_value("PYTHONUNBUFFERED", "1"),
        ];
        // Only the variable's name and the Secret's are in the spec, never the token.
        if let Some(variable) = token_variable(editor) {
            env.push(EnvVar {
                name: variable.into(),
                value_from: Some(EnvVarSource {
                    secret_key_ref: Some(SecretKeySelector {
                        name: secret.clone(),
                        key: TOKEN_KEY.into(),
                        optional: Some(false),
                    }),
                    ..EnvVarSource::default()
                }),
                ..EnvVar::default()
            });
        }
        let limits = BTreeMap::from([
            (GPU.to_string(), q("1".into())),
            (GPU_MEM.to_string(), q(launch.slice.memory_mib.to_string())),
            (
                GPU_CORES.to_string(),
                q(launch.slice.cores_pct.min(100).to_string()),
            ),
        ]);
        let mut mounts = vec![
            mount("workspace", WORKSPACE_DIR, false),
            mount("tmp", TMP_DIR, false),
        ];
        let mut volumes = vec![
            Volume {
                name: "workspace".into(),
                persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                    claim_name: WORKSPACE_PVC.into(),
                    read_only: Some(false),
                }),
                ..Volume::default()
            },
            Volume {
                name: "tmp".into(),
                empty_dir: Some(EmptyDirVolumeSource {
                    size_limit: Some(q(TMP_SIZE.into())),
                    ..EmptyDirVolumeSource::default()
                }),
                ..Volume::default()
            },
        ];
        // Shared datasets: each a claim of the user's namespace (`datasets.rs`), read-only in the
        // volume and in the mount, at `~/datasets/<name>` (HOME is the workspace).
        for dataset in &launch.datasets {
            let app::domain::datasets::Place::Claim(_) = &dataset.place else {
                continue;
            };
            let volume = format!("dataset-{}", dataset.name);
            mounts.push(mount(
                &volume,
                &format!(
                    "{WORKSPACE_DIR}/{}",
                    app::domain::datasets::mount_point(&dataset.name)
                ),
                true,
            ));
            volumes.push(Volume {
                name: volume,
                persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                    claim_name: super::datasets::claim_name(&dataset.name),
                    read_only: Some(true),
                }),
                ..Volume::default()
            });
        }
        if token_variable(editor).is_none() {
            // marimo reads its token from a file: the Secret, mounted read-only.
            mounts.push(mount("token", TOKEN_DIR, true));
            volumes.push(Volume {
                name: "token".into(),
                secret: Some(SecretVolumeSource {
                    secret_name: Some(secret.clone()),
                    default_mode: Some(0o440),
                    ..SecretVolumeSource::default()
                }),
                ..Volume::default()
            });
        }
        let annotations = launch
            .slice
            .gpu_uuid
            .as_ref()
            .map(|uuid| BTreeMap::from([(USE_GPU_UUID.to_string(), uuid.clone())]));
        let arguments = crate::runtime::editors::arguments(
            editor,
            crate::runtime::editors::Listen::Tcp {
                host: "0.0.0.0",
                port: c.editor_port,
            },
            &launch.base_path,
            WORKSPACE_DIR,
            &format!("{TOKEN_DIR}/{TOKEN_KEY}"),
        );
        let (command, args) = match editor {
            // Started set up, as on one server: its settings seeded into the user's data folder
            // on the volume (HOME is the workspace), the user's own values kept.
            EditorKind::CodeServer => {
                let mut argv: Vec<std::ffi::OsString> = vec![program(editor).into()];
                argv.extend(arguments.into_iter().map(Into::into));
                let seeded = crate::runtime::editors::with_settings_seed(
                    std::path::Path::new(&format!("{WORKSPACE_DIR}/.local/share/code-server")),
                    argv,
                );
                let command = seeded
                    .into_iter()
                    .map(|a| a.to_string_lossy().into_owned())
                    .collect();
                (command, None)
            }
            _ => (vec![program(editor).to_string()], Some(arguments)),
        };
        let container = Container {
            name: "editor".into(),
            image: Some(
                launch
                    .image
                    .clone()
                    .unwrap_or_else(|| c.images.of(editor).to_string()),
            ),
            image_pull_policy: Some("IfNotPresent".into()),
            command: Some(command),
            args,
            working_dir: Some(WORKSPACE_DIR.into()),
            env: Some(env),
            ports: Some(vec![ContainerPort {
                name: Some("http".into()),
                container_port: c.editor_port.into(),
                protocol: Some("TCP".into()),
                ..ContainerPort::default()
            }]),
            resources: Some(ResourceRequirements {
                limits: Some(limits),
                ..ResourceRequirements::default()
            }),
            readiness_probe: Some(Probe {
                http_get: Some(HTTPGetAction {
                    path: Some(probe_path(editor, &launch.base_path)),
                    port: IntOrString::Int(c.editor_port.into()),
                    scheme: Some("HTTP".into()),
                    ..HTTPGetAction::default()
                }),
                period_seconds: Some(2),
                timeout_seconds: Some(2),
                failure_threshold: Some(3),
                ..Probe::default()
            }),
            security_context: Some(restricted_container()),
            volume_mounts: Some(mounts),
            ..Container::default()
        };
        Pod {
            metadata: ObjectMeta {
                labels: Some(self.session_labels(launch)),
                annotations,
                ..self.meta(&names::pod_name(&launch.session_id))
            },
            spec: Some(PodSpec {
                containers: vec![container],
                service_account_name: Some(SERVICE_ACCOUNT.into()),
                automount_service_account_token: Some(false),
                enable_service_links: Some(false),
                priority_class_name: (!c.session_priority_class.is_empty())
                    .then(|| c.session_priority_class.clone()),
                restart_policy: Some("Always".into()),
                termination_grace_period_seconds: Some(10),
                security_context: Some(restricted_pod()),
                volumes: Some(volumes),
                ..PodSpec::default()
            }),
            ..Pod::default()
        }
    }
}

fn q(value: String) -> Quantity {
    Quantity(value)
}

/// Bytes of a storage quantity as volumes are sized ("10Gi", "500M", "1Ti", "1073741824");
/// None for forms a volume size does not take (millis, exponents).
pub fn storage_bytes(quantity: &str) -> Option<u128> {
    let text = quantity.trim();
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    let number: u128 = text[..digits].parse().ok()?;
    let unit: u128 = match &text[digits..] {
        "" => 1,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "Ti" => 1 << 40,
        "Pi" => 1 << 50,
        "k" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        "T" => 1_000_000_000_000,
        "P" => 1_000_000_000_000_000,
        _ => return None,
    };
    number.checked_mul(unit)
}

fn env_value(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value.into()),
        ..EnvVar::default()
    }
}

fn mount(name: &str, path: &str, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: name.into(),
        mount_path: path.into(),
        read_only: read_only.then_some(true),
        ..VolumeMount::default()
    }
}

/// The program each approved image runs: the editor itself, not the image's entrypoint (which
/// may want root to fix permissions).
pub fn program(editor: EditorKind) -> &'static str {
    match editor {
        EditorKind::JupyterLab => "jupyter-lab",
        EditorKind::Marimo => "marimo",
        EditorKind::CodeServer => "code-server",
    }
}

/// The environment variable that carries the token (from the Secret); marimo takes a file.
/// The same names as [`crate::runtime::editors::secret_env`] (a test keeps them in step).
pub fn token_variable(editor: EditorKind) -> Option<&'static str> {
    match editor {
        EditorKind::JupyterLab => Some("JUPYTER_TOKEN"),
        EditorKind::CodeServer => Some("HASHED_PASSWORD"),
        EditorKind::Marimo => None,
    }
}

/// The kubelet's readiness check: a path that answers without the token (the probe cannot
/// carry it without putting it in the pod spec). Jupyter's `/api` (its version) is public;
/// `api/status`, which the local runtime polls with the token, is not.
pub fn probe_path(editor: EditorKind, base_path: &str) -> String {
    match editor {
        EditorKind::JupyterLab => format!("{base_path}api"),
        other => crate::runtime::editors::readiness_path(other, base_path),
    }
}

/// What the chart's restricted Pod Security level asks of every container the server makes: no
/// privilege, no capability, a read-only root.
pub(super) fn restricted_container() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        privileged: Some(false),
        read_only_root_filesystem: Some(true),
        run_as_non_root: Some(true),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".into()]),
            ..Capabilities::default()
        }),
        ..SecurityContext::default()
    }
}

/// The pod's side of the restricted level: the editor's user and group (owning the workspace
/// through fsGroup) and the runtime's default seccomp profile.
pub(super) fn restricted_pod() -> PodSecurityContext {
    PodSecurityContext {
        run_as_non_root: Some(true),
        run_as_user: Some(RUN_AS_USER),
        run_as_group: Some(RUN_AS_GROUP),
        fs_group: Some(RUN_AS_GROUP),
        seccomp_profile: Some(SeccompProfile {
            type_: "RuntimeDefault".into(),
            ..SeccompProfile::default()
        }),
        ..PodSecurityContext::default()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::runtime::SliceBinding;

    /// Compares with `tests/golden/kube/<name>.json`; `UPDATE_GOLDEN=1` rewrites the file
    /// (then read the diff before committing it).
    pub(crate) fn golden(name: &str, value: impl serde::Serialize) {
        let actual = serde_json::to_value(value).unwrap();
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/golden/kube")
            .join(format!("{name}.json"));
        if std::env::var_os("UPDATE_GOLDEN").is_some() {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, serde_json::to_string_pretty(&actual).unwrap() + "\n").unwrap();
        }
        let expected: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
        )
        .unwrap();
        assert_eq!(
            actual,
            expected,
            "{name} differs from {}:\n{}",
            path.display(),
            serde_json::to_string_pretty(&actual).unwrap()
        );
    }

    pub(crate) fn launch(editor: EditorKind, gpu_uuid: Option<&str>) -> EditorLaunch {
        EditorLaunch {
            session_id: "0a1b2c3d4e5f60718293".into(),
            user_name: "Alice".into(),
            editor,
            base_path: "/s/0a1b2c3d4e5f60718293/".into(),
            env: vec![],
            slice: SliceBinding {
                gpu_uuid: gpu_uuid.map(String::from),
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

    #[test]
    fn per_user_objects_match_their_goldens() {
        let config = KubeConfig {
            storage_class: "fast-ssd".into(),
            ..KubeConfig::default()
        };
        let plan = UserPlan::new(&config, "Alice");
        assert_eq!(plan.namespace, names::namespace_of("gsb-", "Alice"));
        golden("namespace", plan.namespace());
        golden("service_account", plan.service_account());
        golden("resource_quota", plan.resource_quota());
        golden("limit_range", plan.limit_range());
        golden("network_policy", plan.network_policy());
        golden("workspace_pvc", plan.workspace_pvc());
        assert!(super::super::hami::quota_violations(&plan.resource_quota()).is_empty());
    }

    #[test]
    fn egress_is_denied_to_the_configured_ranges_per_family_and_allowed_ranges_are_added() {
        let peers = |network: &NetworkConfig| {
            let config = KubeConfig::default();
            let policy = serde_json::to_value(
                UserPlan::new(&config, "bob")
                    .with_network(network)
                    .network_policy(),
            )
            .unwrap();
            policy["spec"]["egress"][1]["to"].clone()
        };
        let defaults = peers(&NetworkConfig::default());
        let v4 = defaults[0]["ipBlock"]["except"].as_array().unwrap();
        let v6 = defaults[1]["ipBlock"]["except"].as_array().unwrap();
        assert_eq!(defaults[0]["ipBlock"]["cidr"], "0.0.0.0/0");
        assert_eq!(defaults[1]["ipBlock"]["cidr"], "::/0");
        for denied in ["168.63.129.16/32", "169.254.0.0/16", "10.0.0.0/8"] {
            assert!(v4.contains(&denied.into()), "{defaults}");
        }
        assert!(v6.contains(&"fc00::/7".into()), "{defaults}");
        assert!(!v6.iter().any(|r| r.as_str().unwrap().contains('.')));
        let network = NetworkConfig {
            egress_deny: vec!["203.0.113.0/24".into(), "198.51.100.7/32".into()],
            egress_allow: vec!["10.9.0.0/16".into()],
        };
        assert_eq!(
            peers(&network),
            serde_json::json!([
                {"ipBlock": {"cidr": "0.0.0.0/0", "except": ["203.0.113.0/24", "198.51.100.7/32"]}},
                {"ipBlock": {"cidr": "::/0"}},
                {"ipBlock": {"cidr": "10.9.0.0/16"}},
            ])
        );
    }

    #[test]
    fn the_default_storage_class_is_left_to_the_cluster() {
        let config = KubeConfig::default();
        let pvc = serde_json::to_value(UserPlan::new(&config, "bob").workspace_pvc()).unwrap();
        assert!(pvc["spec"].get("storageClassName").is_none(), "{pvc}");
    }

    #[test]
    fn session_objects_match_their_goldens() {
        let config = KubeConfig::default();
        let plan = UserPlan::new(&config, "Alice");
        let jupyter = launch(
            EditorKind::JupyterLab,
            Some("GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448"),
        );
        golden("token_secret", plan.token_secret(&jupyter, "s3cret"));
        golden("pod_jupyterlab", plan.session_pod(&jupyter));
        golden(
            "pod_marimo",
            plan.session_pod(&launch(EditorKind::Marimo, None)),
        );
        golden(
            "pod_code_server",
            plan.session_pod(&launch(EditorKind::CodeServer, None)),
        );
        let mut with_datasets = launch(EditorKind::JupyterLab, None);
        with_datasets.datasets = vec![
            crate::runtime::DatasetMount {
                name: "imagenet".into(),
                place: app::domain::datasets::Place::Claim("imagenet-ro".into()),
            },
            // A host folder is the local runtime's: no volume here.
            crate::runtime::DatasetMount {
                name: "local".into(),
                place: app::domain::datasets::Place::Path("/srv/local".into()),
            },
        ];
        golden("pod_with_dataset", plan.session_pod(&with_datasets));
    }

    #[test]
    fn every_pod_passes_hamis_rules_and_never_carries_the_token() {
        let config = KubeConfig::default();
        for user in ["alice", "Ünïcødé", "x".repeat(100).as_str()] {
            let plan = UserPlan::new(&config, user);
            for editor in EditorKind::ALL {
                for uuid in [None, Some("GPU-1")] {
                    let launch = launch(editor, uuid);
                    let pod = plan.session_pod(&launch);
                    assert_eq!(
                        super::super::hami::pod_violations(&pod),
                        Vec::<String>::new()
                    );
                    let text = serde_json::to_string(&pod).unwrap();
                    let secret = plan.token_secret(&launch, "tok-9f8e7d");
                    assert!(!text.contains("tok-9f8e7d"));
                    assert!(
                        serde_json::to_string(&secret)
                            .unwrap()
                            .contains(&base64_of("tok-9f8e7d"))
                    );
                    assert_eq!(
                        pod.metadata
                            .annotations
                            .as_ref()
                            .and_then(|a| a.get(USE_GPU_UUID))
                            .map(String::as_str),
                        uuid
                    );
                }
            }
        }
    }

    fn base64_of(s: &str) -> String {
        serde_json::to_value(ByteString(s.as_bytes().to_vec()))
            .unwrap()
            .as_str()
            .unwrap()
            .to_string()
    }

    #[test]
    fn token_variables_follow_the_local_runtime() {
        for editor in EditorKind::ALL {
            let local: Vec<String> = crate::runtime::editors::secret_env(editor, "x")
                .into_iter()
                .map(|(name, _)| name)
                .collect();
            assert_eq!(
                token_variable(editor)
                    .map(String::from)
                    .into_iter()
                    .collect::<Vec<_>>(),
                local
            );
        }
    }

    /// deploy/editors/<editor>.Containerfile, as `scripts/editor-images-test.sh` builds it.
    fn containerfile(editor: EditorKind) -> &'static str {
        match editor {
            EditorKind::JupyterLab => {
                include_str!("../../../../deploy/editors/jupyterlab.Containerfile")
            }
            EditorKind::Marimo => include_str!("../../../../deploy/editors/marimo.Containerfile"),
            EditorKind::CodeServer => {
                include_str!("../../../../deploy/editors/code-server.Containerfile")
            }
        }
    }

    /// A `KEY="value"` (or `KEY=value`) of the file's `ARG` or `LABEL` lines.
    fn declared(file: &str, key: &str) -> Option<String> {
        file.lines()
            .map(|l| {
                l.trim()
                    .trim_start_matches("ARG ")
                    .trim_start_matches("LABEL ")
            })
            .filter_map(|l| l.strip_prefix(&format!("{key}=")))
            .map(|v| {
                v.trim_end_matches('\\')
                    .trim()
                    .trim_matches('"')
                    .to_string()
            })
            .next()
    }

    /// The editor Containerfiles state the pods' contract, and their bases are the server's
    /// defaults and the chart's: one pin in three places, kept equal here.
    #[test]
    fn the_editor_containerfiles_match_the_pods_and_the_defaults() {
        let values = include_str!("../../../../deploy/chart/values.yaml");
        let chart_image = |key: &str| {
            values
                .lines()
                .skip_while(|l| !l.starts_with("editorImages:"))
                .find_map(|l| l.trim().strip_prefix(&format!("{key}: ")))
                .map(str::to_string)
        };
        let defaults = crate::config::kube::KubeImages::default();
        for editor in EditorKind::ALL {
            let file = containerfile(editor);
            let at = |key: &str| declared(file, key).unwrap_or_else(|| panic!("{editor:?}: {key}"));
            let base = at("BASE");
            assert_eq!(
                defaults.of(editor),
                base,
                "{editor:?}: the server's default"
            );
            let chart_key = match editor {
                EditorKind::CodeServer => "codeServer",
                other => other.as_str(),
            };
            assert_eq!(
                chart_image(chart_key).as_deref(),
                Some(base.as_str()),
                "{editor:?}: the chart's"
            );
            let tag = base
                .split('@')
                .next()
                .unwrap()
                .rsplit_once(':')
                .map(|(_, t)| t);
            assert!(
                tag.is_some_and(|t| t != "latest" && t.contains('.')),
                "{editor:?}: a version tag"
            );
            assert_eq!(at("dev.gpu-sandbox.editor"), editor.as_str());
            assert_eq!(
                at("dev.gpu-sandbox.user"),
                format!("{RUN_AS_USER}:{RUN_AS_GROUP}")
            );
            assert_eq!(at("dev.gpu-sandbox.workspace"), WORKSPACE_DIR);
            assert_eq!(
                at("dev.gpu-sandbox.readiness-path"),
                probe_path(editor, "{base}")
            );
            assert!(
                file.contains(&format!("\nUSER {RUN_AS_USER}:{RUN_AS_GROUP}\n")),
                "{editor:?}"
            );
            assert!(
                file.contains(&format!("\nWORKDIR {WORKSPACE_DIR}\n")),
                "{editor:?}"
            );
            assert!(
                file.contains(&format!("`{}` on PATH", program(editor))),
                "{editor:?}"
            );
        }
        // JupyterLab is the CUDA build; it and code-server are pinned by digest. marimo's
        // digest could not be resolved offline (scripts/pin-editor-images.sh does it).
        assert!(defaults.jupyterlab.contains(":cuda12-"));
        assert!(
            defaults.jupyterlab.contains("@sha256:") && defaults.code_server.contains("@sha256:")
        );
    }
}
