//! Pure builders of what a workspace backup writes on a cluster, golden-tested like
//! [`super::objects`]: the `VolumeSnapshot` of a user's workspace claim, the claim a restore
//! makes from one, and the pod that copies from it into `restored-<date>/`.
//!
//! `snapshot.storage.k8s.io/v1` is a CRD of the external-snapshotter (no k8s-openapi type), so
//! [`VolumeSnapshot`] is written here with the fields of its schema (v8) that we use and
//! read. A snapshot is named by the service's clock (`workspace-20261205-083000`), labelled as
//! ours and its user's, and carries that time (`gpu-sandbox/taken-at`, ms) for the retention.

use super::names::{MANAGED_BY, MANAGER, USER_LABEL, WORKSPACE_PVC};
use super::objects::{TMP_DIR, UserPlan, WORKSPACE_DIR, restricted_container, restricted_pod};
use k8s_openapi::api::core::v1::*;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::collections::BTreeMap;

pub const GROUP: &str = "snapshot.storage.k8s.io";
/// Our backups among the namespace's snapshots.
pub const BACKUP_LABEL: &str = "gpu-sandbox/backup";
/// The snapshot's time by the service's clock, in ms.
pub const TAKEN_AT: &str = "gpu-sandbox/taken-at";
/// Where the restore pod sees the snapshot's files.
pub const SNAPSHOT_DIR: &str = "/snapshot";
/// The restore script's exit status when the part asked for is not in the snapshot.
pub const NOT_IN_SNAPSHOT: i32 = 3;
/// The restore script's last line: `restored-into <folder>`.
pub const RESTORED_INTO: &str = "restored-into ";

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumeSnapshot {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    pub metadata: ObjectMeta,
    pub spec: VolumeSnapshotSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<VolumeSnapshotStatus>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumeSnapshotSpec {
    pub source: VolumeSnapshotSource,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_snapshot_class_name: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumeSnapshotSource {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistent_volume_claim_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_snapshot_content_name: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumeSnapshotStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bound_volume_snapshot_content_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creation_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_to_use: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore_size: Option<Quantity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<VolumeSnapshotError>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumeSnapshotError {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<String>,
}

impl kube::Resource for VolumeSnapshot {
    type DynamicType = ();
    type Scope = k8s_openapi::NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        "VolumeSnapshot".into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        GROUP.into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        "v1".into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        "volumesnapshots".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl VolumeSnapshot {
    /// The id users see: the object's uid as hex digits (`is_snapshot_id`), so a snapshot
    /// deleted and taken again under the same name is another.
    pub fn id(&self) -> Option<String> {
        let uid = self.metadata.uid.as_deref()?;
        let hex: String = uid.chars().filter(char::is_ascii_hexdigit).collect();
        Some(hex.to_ascii_lowercase()).filter(|h| app::domain::backups::is_snapshot_id(h))
    }

    /// When it was taken: our annotation, else its creation.
    pub fn taken_at_ms(&self) -> Option<i64> {
        self.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(TAKEN_AT))
            .and_then(|t| t.parse().ok())
            .or_else(|| {
                let created = self.metadata.creation_timestamp.as_ref()?;
                Some(created.0.as_millisecond())
            })
    }

    /// Ready to restore from.
    pub fn ready(&self) -> bool {
        self.status.as_ref().and_then(|s| s.ready_to_use) == Some(true)
    }

    /// The snapshot controller's or the driver's complaint, where it has one.
    pub fn error(&self) -> Option<String> {
        self.status.as_ref()?.error.as_ref()?.message.clone()
    }
}

/// `workspace-20261205-083000`: the snapshot of a backup at `at_ms`.
pub fn snapshot_name(at_ms: i64) -> String {
    let (y, mo, d, h, mi, s) = app::domain::dates::utc_parts(at_ms);
    format!("workspace-{y:04}{mo:02}{d:02}-{h:02}{mi:02}{s:02}")
}

/// The restore's claim and pod: `restore-<first 12 hex digits of the snapshot id>`.
pub fn restore_name(snapshot_id: &str) -> String {
    format!("restore-{}", &snapshot_id[..snapshot_id.len().min(12)])
}

fn labels(plan: &UserPlan<'_>) -> BTreeMap<String, String> {
    BTreeMap::from([
        (MANAGED_BY.to_string(), MANAGER.to_string()),
        (USER_LABEL.to_string(), plan.user.clone()),
        (BACKUP_LABEL.to_string(), "workspace".to_string()),
    ])
}

fn meta(plan: &UserPlan<'_>, name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        namespace: Some(plan.namespace.clone()),
        labels: Some(labels(plan)),
        ..ObjectMeta::default()
    }
}

/// The label selector of a user's backups.
pub fn backups_selector() -> String {
    format!("{MANAGED_BY}={MANAGER},{BACKUP_LABEL}=workspace")
}

/// A snapshot of the user's workspace claim at `at_ms`, of `class`.
pub fn workspace_snapshot(plan: &UserPlan<'_>, class: &str, at_ms: i64) -> VolumeSnapshot {
    VolumeSnapshot {
        api_version: format!("{GROUP}/v1"),
        kind: "VolumeSnapshot".into(),
        metadata: ObjectMeta {
            annotations: Some(BTreeMap::from([(TAKEN_AT.to_string(), at_ms.to_string())])),
            ..meta(plan, &snapshot_name(at_ms))
        },
        spec: VolumeSnapshotSpec {
            source: VolumeSnapshotSource {
                persistent_volume_claim_name: Some(WORKSPACE_PVC.into()),
                volume_snapshot_content_name: None,
            },
            volume_snapshot_class_name: Some(class.to_string()),
        },
        status: None,
    }
}

/// A new claim holding the snapshot's files (the CSI driver provisions it from the snapshot),
/// as large as the snapshot needs; ReadWriteOnce as the workspace, mounted read-only.
pub fn restored_claim(
    plan: &UserPlan<'_>,
    snapshot: &str,
    snapshot_id: &str,
    size: &str,
) -> PersistentVolumeClaim {
    let c = plan.config;
    PersistentVolumeClaim {
        metadata: meta(plan, &restore_name(snapshot_id)),
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            storage_class_name: (!c.storage_class.is_empty()).then(|| c.storage_class.clone()),
            data_source: Some(TypedLocalObjectReference {
                api_group: Some(GROUP.into()),
                kind: "VolumeSnapshot".into(),
                name: snapshot.to_string(),
            }),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([(
                    "storage".to_string(),
                    Quantity(size.to_string()),
                )])),
                ..VolumeResourceRequirements::default()
            }),
            ..PersistentVolumeClaimSpec::default()
        }),
        ..PersistentVolumeClaim::default()
    }
}

/// The restore pod's script: `$1` the part (`.` for everything), then the folder names to try
/// in order (`restored_folder`'s attempts). The first that `mkdir` can make (never one that is
/// there) gets the part with its path, copied by tar (links kept as links, times kept, owned
/// by the pod's user); exit 3 when the part is not in the snapshot.
const RESTORE_SCRIPT: &str = r#"set -eu
part="$1"; shift
cd /snapshot
[ -e "$part" ] || [ -L "$part" ] || { echo "not in the snapshot: $part" >&2; exit 3; }
into=""
for name in "$@"; do
  if mkdir "/workspace/$name" 2>/dev/null; then into="$name"; break; fi
done
[ -n "$into" ] || { echo "no free restored- folder name" >&2; exit 4; }
tar -cf - --exclude=./lost+found "$part" | tar -xf - -C "/workspace/$into" --no-same-owner
echo "restored-into $into"
"#;

/// The pod that copies `part` (None: all) of the restored claim into a new `restored-<date>`
/// folder of the workspace, as the editor's user, restricted like a session pod, no GPU. On
/// `node` where a session holds the workspace there (ReadWriteOnce: one node at a time).
pub fn restore_pod(
    plan: &UserPlan<'_>,
    snapshot_id: &str,
    part: Option<&str>,
    folders: &[String],
    node: Option<&str>,
) -> Pod {
    let c = plan.config;
    let name = restore_name(snapshot_id);
    let mut args = vec![
        RESTORE_SCRIPT.to_string(),
        "restore".to_string(),
        part.map_or_else(|| ".".to_string(), |p| format!("./{p}")),
    ];
    args.extend(folders.iter().cloned());
    let mount = |name: &str, path: &str, read_only: bool| VolumeMount {
        name: name.into(),
        mount_path: path.into(),
        read_only: read_only.then_some(true),
        ..VolumeMount::default()
    };
    let claim = |volume: &str, claim: &str, read_only: bool| Volume {
        name: volume.into(),
        persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
            claim_name: claim.into(),
            read_only: Some(read_only),
        }),
        ..Volume::default()
    };
    let quantity = |q: &str| Quantity(q.into());
    let resources = BTreeMap::from([
        ("cpu".to_string(), quantity("1")),
        ("memory".to_string(), quantity("512Mi")),
    ]);
    Pod {
        metadata: meta(plan, &name),
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "restore".into(),
                image: Some(c.images.jupyterlab.clone()),
                image_pull_policy: Some("IfNotPresent".into()),
                command: Some(vec!["sh".into(), "-c".into()]),
                args: Some(args),
                working_dir: Some(TMP_DIR.into()),
                resources: Some(ResourceRequirements {
                    limits: Some(resources.clone()),
                    requests: Some(resources),
                    ..ResourceRequirements::default()
                }),
                security_context: Some(restricted_container()),
                volume_mounts: Some(vec![
                    mount("workspace", WORKSPACE_DIR, false),
                    mount("snapshot", SNAPSHOT_DIR, true),
                    mount("tmp", TMP_DIR, false),
                ]),
                ..Container::default()
            }],
            service_account_name: Some(super::names::SERVICE_ACCOUNT.into()),
            automount_service_account_token: Some(false),
            enable_service_links: Some(false),
            restart_policy: Some("Never".into()),
            node_selector: node
                .map(|n| BTreeMap::from([("kubernetes.io/hostname".to_string(), n.to_string())])),
            security_context: Some(restricted_pod()),
            volumes: Some(vec![
                claim("workspace", WORKSPACE_PVC, false),
                claim("snapshot", &name, true),
                Volume {
                    name: "tmp".into(),
                    empty_dir: Some(EmptyDirVolumeSource::default()),
                    ..Volume::default()
                },
            ]),
            ..PodSpec::default()
        }),
        ..Pod::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::kube::KubeConfig;

    const AT: i64 = 1_796_459_400_000;

    #[test]
    fn backup_objects_match_their_goldens() {
        let config = KubeConfig::default();
        let plan = UserPlan::new(&config, "Alice");
        let id = "0123456789abcdef0123456789abcdef";
        super::super::objects::tests::golden(
            "volume_snapshot",
            workspace_snapshot(&plan, "csi-snapclass", AT),
        );
        super::super::objects::tests::golden(
            "restored_claim",
            restored_claim(&plan, &snapshot_name(AT), id, "10Gi"),
        );
        let folders = vec!["restored-2026-12-05-0830".to_string()];
        super::super::objects::tests::golden(
            "restore_pod",
            restore_pod(
                &plan,
                id,
                Some("notebooks/a b.ipynb"),
                &folders,
                Some("node-1"),
            ),
        );
    }

    #[test]
    fn a_snapshot_is_named_by_its_time_and_known_by_its_uid() {
        assert_eq!(snapshot_name(AT), "workspace-20261205-083000");
        let mut snapshot = VolumeSnapshot::default();
        assert_eq!(snapshot.id(), None);
        snapshot.metadata.uid = Some("6F9619FF-8B86-D011-B42D-00C04FC964FF".into());
        assert_eq!(
            snapshot.id().as_deref(),
            Some("6f9619ff8b86d011b42d00c04fc964ff")
        );
        snapshot.metadata.annotations = Some(BTreeMap::from([(TAKEN_AT.into(), AT.to_string())]));
        assert_eq!(snapshot.taken_at_ms(), Some(AT));
    }
}
