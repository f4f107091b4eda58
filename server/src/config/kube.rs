//! The `[kube]` table of the configuration: where user namespaces go, what they may use,
//! which images run the editors.

use super::InvalidKey;
use app::domain::launch::EditorKind;
use serde::{Deserialize, Serialize};

/// Which runtime the server uses (`runtime` in the configuration).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RuntimeKind {
    /// Processes on this machine.
    #[default]
    Local,
    /// Pods in a Kubernetes cluster with HAMi.
    Kube,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KubeConfig {
    /// Where the server runs; user namespaces admit ingress from this namespace only.
    pub server_namespace: String,
    /// User namespace = prefix + the DNS-1123 form of the user name.
    pub namespace_prefix: String,
    /// The field manager of every server-side apply.
    pub field_manager: String,
    /// PriorityClass of session pods (above the warm placeholders, so they preempt them).
    pub session_priority_class: String,
    /// StorageClass of workspace volumes; empty means the cluster's default.
    pub storage_class: String,
    /// VolumeSnapshotClass of workspace backups on the cluster (`[backups] enabled`): each
    /// backup is a VolumeSnapshot of the user's workspace claim. Empty: no backups there.
    pub snapshot_class: String,
    /// Workspace volume size, and the namespace's storage quota, for users whose quota sets no
    /// disk size of their own (`quotas.max_disk_mib` or a per-user override sizes it otherwise).
    pub workspace_size_gib: u32,
    /// HAMi shares the cluster's GPUs, holding each pod to its `gpumem` and `gpucores`: slices
    /// are shown as enforced. False for a cluster whose GPUs are shared without it.
    pub hami: bool,
    /// Pods one user may run at once (ResourceQuota `pods`).
    pub max_pods_per_user: u32,
    /// GPU memory one user may hold at once (ResourceQuota `limits.nvidia.com/gpumem`).
    pub max_gpumem_mib_per_user: u64,
    /// HAMi's monitor endpoint (`http://…:31992/metrics`, Prometheus text) or a Prometheus
    /// server (`http://prometheus:9090`, queried at `/api/v1/query`); empty: no GPU metrics.
    pub metrics_url: String,
    /// The approved image of each editor.
    pub images: KubeImages,
    /// The port every editor listens on inside its pod.
    pub editor_port: u16,
    /// Editors started ahead of a launch, each for one user whose dashboard is open and who
    /// launched in the last two weeks (their last editor and size, in their own namespace with
    /// their workspace): at most this many at once across the cluster; 0: none. Each holds a
    /// free slot until its user launches, leaves, or another launch needs the slot.
    pub warm_pods: u32,
    /// Where the cluster's shared datasets lie, by the name a dataset's `claim` gives
    /// (`config/dataset_sources.rs`: an NFS export or a CSI volume).
    pub dataset_sources: std::collections::BTreeMap<String, super::dataset_sources::DatasetSource>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KubeImages {
    pub jupyterlab: String,
    pub marimo: String,
    pub code_server: String,
}

impl KubeImages {
    pub fn of(&self, editor: EditorKind) -> &str {
        match editor {
            EditorKind::JupyterLab => &self.jupyterlab,
            EditorKind::Marimo => &self.marimo,
            EditorKind::CodeServer => &self.code_server,
        }
    }
}

impl Default for KubeImages {
    fn default() -> Self {
        KubeImages {
            jupyterlab: "quay.io/jupyter/pytorch-notebook:cuda12-pytorch-2.11.0@sha256:de7e7da7ba3e66cd2720ff9e72c93c43d24cb83478a032862acb7520fa8b2200".into(),
            marimo: "ghcr.io/marimo-team/marimo:0.23.15".into(),
            code_server: "docker.io/codercom/code-server:4.139.1@sha256:0c067c3cf09ed1830ce282387826be8feefef8a5828f462791c2df3f1007ee17".into(),
        }
    }
}

impl Default for KubeConfig {
    fn default() -> Self {
        KubeConfig {
            server_namespace: "gpu-sandbox".into(),
            namespace_prefix: "gsb-".into(),
            field_manager: "gpu-sandbox".into(),
            session_priority_class: "gpu-sandbox-session".into(),
            storage_class: String::new(),
            snapshot_class: String::new(),
            workspace_size_gib: 10,
            hami: true,
            max_pods_per_user: 4,
            max_gpumem_mib_per_user: 49152,
            metrics_url: String::new(),
            images: KubeImages::default(),
            editor_port: 8888,
            warm_pods: 0,
            dataset_sources: std::collections::BTreeMap::new(),
        }
    }
}

/// A DNS-1123 label: 1 to 63 of `[a-z0-9-]`, starting and ending with a letter or digit.
pub fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// A DNS-1123 subdomain: dot-separated labels, at most 253 characters.
pub fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns_label)
}

impl KubeConfig {
    /// Checks what serde cannot; the error names the key and why.
    pub fn validate(&self) -> Result<(), InvalidKey> {
        let bad = |key: &str, why: &str| Err(InvalidKey::new(format!("kube.{key}"), why));
        if !is_dns_label(&self.server_namespace) {
            return bad(
                "server_namespace",
                "must be a namespace name (lowercase letters, digits and '-', at most 63)",
            );
        }
        let prefix = &self.namespace_prefix;
        let prefix_ok = prefix.len() <= 20
            && prefix.starts_with(|c: char| c.is_ascii_lowercase())
            && prefix
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            // "--" marks the hash of an altered user name; a prefix must not fake one.
            && !prefix.contains("--");
        if !prefix_ok {
            return bad(
                "namespace_prefix",
                "must start with a lowercase letter, hold only lowercase letters, digits and single '-', at most 20 characters",
            );
        }
        if self.field_manager.trim().is_empty() || self.field_manager.len() > 128 {
            return bad("field_manager", "must be 1 to 128 characters");
        }
        if !self.session_priority_class.is_empty()
            && !is_dns_subdomain(&self.session_priority_class)
        {
            return bad(
                "session_priority_class",
                "must be empty or a PriorityClass name",
            );
        }
        if !self.storage_class.is_empty() && !is_dns_subdomain(&self.storage_class) {
            return bad("storage_class", "must be empty or a StorageClass name");
        }
        if !self.snapshot_class.is_empty() && !is_dns_subdomain(&self.snapshot_class) {
            return bad(
                "snapshot_class",
                "must be empty or a VolumeSnapshotClass name",
            );
        }
        if self.workspace_size_gib == 0 {
            return bad("workspace_size_gib", "must be at least 1");
        }
        if self.max_pods_per_user == 0 {
            return bad("max_pods_per_user", "must be at least 1");
        }
        if self.max_gpumem_mib_per_user == 0 {
            return bad("max_gpumem_mib_per_user", "must be at least 1");
        }
        if !self.metrics_url.is_empty()
            && (!self.metrics_url.starts_with("http://")
                || self.metrics_url.parse::<http::Uri>().is_err())
        {
            return bad(
                "metrics_url",
                "must be empty or an http:// URL (HAMi's /metrics or a Prometheus server)",
            );
        }
        for editor in EditorKind::ALL {
            let image = self.images.of(editor);
            if image.trim().is_empty() || image.chars().any(char::is_whitespace) {
                let key = format!("images.{}", editor.as_str().replace('-', "_"));
                return bad(&key, "must be an image reference");
            }
        }
        if self.editor_port == 0 {
            return bad("editor_port", "must be between 1 and 65535");
        }
        super::dataset_sources::check_all(&self.dataset_sources)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        KubeConfig::default().validate().unwrap();
    }

    #[test]
    fn a_file_chooses_kube_and_sets_its_table() {
        let dir = tempfile_dir();
        let file = dir.join("kube.toml");
        std::fs::write(
            &file,
            r#"runtime = "kube"
[kube]
namespace_prefix = "lab-"
max_pods_per_user = 2
metrics_url = "http://prometheus:9090"
images = { jupyterlab = "registry.local/jupyter:1", marimo = "registry.local/marimo:1", code_server = "registry.local/code:1" }
"#,
        )
        .unwrap();
        let config = crate::config::Config::load(Some(&file)).unwrap();
        assert_eq!(config.runtime, RuntimeKind::Kube);
        assert_eq!(config.kube.namespace_prefix, "lab-");
        assert_eq!(config.kube.max_pods_per_user, 2);
        assert_eq!(
            config.kube.images.of(EditorKind::Marimo),
            "registry.local/marimo:1"
        );
        assert_eq!(
            config.kube.editor_port, 8888,
            "unset keys keep their defaults"
        );
        std::fs::write(&file, "[kube]\nnamespace_prefix = \"Bad_\"\n").unwrap();
        let err = crate::config::Config::load(Some(&file))
            .unwrap_err()
            .to_string();
        assert!(err.contains("kube.namespace_prefix"), "{err}");
        std::fs::write(&file, "[kube]\nmax_pod = 2\n").unwrap();
        let err = crate::config::Config::load(Some(&file))
            .unwrap_err()
            .to_string();
        assert!(err.contains("max_pod"), "{err}");
        std::fs::write(&file, "runtime = \"docker\"\n").unwrap();
        assert!(crate::config::Config::load(Some(&file)).is_err());
    }

    fn tempfile_dir() -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("sandbox-kube-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn errors_name_the_key() {
        type Change = fn(&mut KubeConfig);
        let cases: Vec<(Change, &str)> = vec![
            (
                |c| c.namespace_prefix = "Gsb-".into(),
                "kube.namespace_prefix",
            ),
            (
                |c| c.namespace_prefix = "g--".into(),
                "kube.namespace_prefix",
            ),
            (
                |c| c.server_namespace = "a_b".into(),
                "kube.server_namespace",
            ),
            (|c| c.workspace_size_gib = 0, "kube.workspace_size_gib"),
            (|c| c.metrics_url = "ftp://x".into(), "kube.metrics_url"),
            (
                |c| c.images.code_server = " ".into(),
                "kube.images.code_server",
            ),
            (|c| c.editor_port = 0, "kube.editor_port"),
        ];
        for (change, key) in cases {
            let mut config = KubeConfig::default();
            change(&mut config);
            assert_eq!(config.validate().unwrap_err().0, key);
        }
    }
}
