//! Volume snapshots (`snapshot.storage.k8s.io/v1`, the external-snapshotter's CRDs, v8): the
//! schema of `VolumeSnapshot` and `VolumeSnapshotClass` as their CRDs declare it, the CRDs'
//! own validation rules, and a snapshot controller with a node-local CSI driver.
//!
//! - Schema: the types below; a field they do not have is unknown (warned, refused when strict
//!   or applied). `spec.source` is required and names exactly one of a claim or a content
//!   (the CRD's CEL rules, 422); a class needs `driver` and a `deletionPolicy` of Delete or
//!   Retain.
//! - Controller ([`reconcile`]): a new snapshot's class (named, or the one annotated as the
//!   default) and source claim are looked up as the snapshot-controller does; a missing one is
//!   not a refusal at create (the API server accepts the object) but `status.error`, in the
//!   controller's words, with `readyToUse: false`. Otherwise the claim's folder on each node
//!   that has it is copied aside (`<node root>/snapshots/<content>`) and the snapshot is ready,
//!   its `restoreSize` the claim's request, bound to a VolumeSnapshotContent made with it; a
//!   content and its copies go by the class's `deletionPolicy` once its snapshot is deleted
//!   ([`crate::snapshot_contents`]).
//! - Restore: a claim whose `dataSource` is a ready snapshot gets the copy when a kubelet first
//!   makes its folder (WaitForFirstConsumer), in [`crate::kubelet`].
//!
//! Not simulated: snapshots of a pre-provisioned content (`source.volumeSnapshotContentName`),
//! group snapshots.

use crate::clock;
use crate::kubelet::Kubelet;
use crate::store::{Store, text};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;

pub const DEFAULT_CLASS: &str = "snapshot.storage.kubernetes.io/is-default-class";

/// The snapshot: the envelope every custom resource has, with its spec and status.
pub type VolumeSnapshot = crate::kinds::Custom<Spec, Status>;

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Spec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    source: Option<Source>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    volume_snapshot_class_name: Option<String>,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Source {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    persistent_volume_claim_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    volume_snapshot_content_name: Option<String>,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    bound_volume_snapshot_content_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    creation_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ready_to_use: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    restore_size: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<SnapshotError>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    volume_group_snapshot_name: Option<String>,
}

/// A snapshot's or a content's error (the CRDs' `VolumeSnapshotError`).
#[derive(Serialize, Deserialize)]
pub(crate) struct SnapshotError {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    time: Option<String>,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumeSnapshotClass {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    api_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    kind: Option<String>,
    #[serde(default)]
    metadata: ObjectMeta,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    driver: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    deletion_policy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    parameters: Option<BTreeMap<String, String>>,
}

/// What the CRDs' schemas and CEL rules refuse (422 causes).
pub fn problems(kind: &str, object: &Value, causes: &mut Vec<String>) {
    match kind {
        "VolumeSnapshot" => match object.pointer("/spec/source") {
            None => causes.push("spec.source: Required value".into()),
            Some(source) => {
                let claim = !text(source, "/persistentVolumeClaimName").is_empty();
                let content = !text(source, "/volumeSnapshotContentName").is_empty();
                if claim == content {
                    causes.push(
                        "spec.source: Invalid value: \"object\": exactly one of volumeSnapshotContentName and persistentVolumeClaimName must be set"
                            .into(),
                    );
                }
            }
        },
        "VolumeSnapshotContent" => crate::snapshot_contents::problems(object, causes),
        "VolumeSnapshotClass" => {
            if text(object, "/driver").is_empty() {
                causes.push("driver: Required value".into());
            }
            let policy = text(object, "/deletionPolicy");
            if !matches!(policy.as_str(), "Delete" | "Retain") {
                causes.push(format!(
                    "deletionPolicy: Unsupported value: \"{policy}\": supported values: \"Delete\", \"Retain\""
                ));
            }
        }
        _ => {}
    }
}

/// A snapshot's source is fixed once made (the CRD's `self == oldSelf` rules).
pub fn update_problems(kind: &str, current: &Value, new: &Value, causes: &mut Vec<String>) {
    if kind == "VolumeSnapshotContent" {
        crate::snapshot_contents::update_problems(current, new, causes);
    }
    if kind == "VolumeSnapshot" && current.pointer("/spec/source") != new.pointer("/spec/source") {
        causes.push(
            "spec.source: Invalid value: \"object\": persistentVolumeClaimName is immutable".into(),
        );
    }
}

/// The content's name of a snapshot (`snapcontent-<uid>`), as the controller names it.
fn content_name(snapshot: &Value) -> String {
    format!("snapcontent-{}", text(snapshot, "/metadata/uid"))
}

fn copy_tree(from: &std::path::Path, to: &std::path::Path) -> Result<(), String> {
    std::fs::create_dir_all(to).map_err(|e| e.to_string())?;
    let out = std::process::Command::new("cp")
        .arg("-a")
        .arg(format!("{}/.", from.display()))
        .arg(to)
        .output()
        .map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}

/// What the controller says of a new snapshot: ready with its content (made beside it), or
/// its error.
fn take(store: &Store, nodes: &[Arc<Kubelet>], snapshot: &Value) -> (Value, Option<Value>) {
    let ns = text(snapshot, "/metadata/namespace");
    let name = text(snapshot, "/metadata/name");
    let named = text(snapshot, "/spec/volumeSnapshotClassName");
    let (class, claim) = store.read(|o| {
        let class = if named.is_empty() {
            o.list("volumesnapshotclasses", None)
                .into_iter()
                .find(|c| text(c, &format!("/metadata/annotations/{}", DEFAULT_CLASS.replace('/', "~1"))) == "true")
                .ok_or_else(|| "Failed to set default snapshot class with error cannot find default snapshot class".to_string())
        } else {
            o.get("volumesnapshotclasses", "", &named).cloned().ok_or_else(|| {
                format!(
                    "Failed to get snapshot class with error volumesnapshotclass.snapshot.storage.k8s.io \"{named}\" not found"
                )
            })
        };
        let pvc = text(snapshot, "/spec/source/persistentVolumeClaimName");
        let claim = o
            .get("persistentvolumeclaims", &ns, &pvc)
            .cloned()
            .ok_or_else(|| {
                format!(
                    "failed to get input parameters to create snapshot {name}: \"failed to retrieve PVC {pvc} from the lister: persistentvolumeclaim {pvc:?} not found\""
                )
            });
        (class, claim)
    });
    let failure = |message: String| json!({"readyToUse": false, "error": {"message": message, "time": clock::now()}});
    let (class, claim) = match (class, claim) {
        (Ok(class), Ok(claim)) => (class, claim),
        (Err(why), _) | (_, Err(why)) => return (failure(why), None),
    };
    let content = content_name(snapshot);
    let pvc = text(&claim, "/metadata/name");
    for node in nodes {
        let volume = node.volume_path(&ns, &pvc);
        if volume.is_dir()
            && let Err(why) = copy_tree(&volume, &node.snapshot_path(&content))
        {
            return (
                failure(format!("failed to take snapshot of the volume: {why}")),
                None,
            );
        }
    }
    let made = crate::snapshot_contents::made_for(snapshot, &claim, &class, &content);
    let status = json!({
        "boundVolumeSnapshotContentName": content,
        "creationTime": clock::now(),
        "readyToUse": true,
        "restoreSize": text(&claim, "/spec/resources/requests/storage"),
    });
    (status, Some(made))
}

/// One pass of the snapshot controller: new snapshots taken (or failed) with their contents,
/// deleted ones' contents and copies removed by their deletion policy.
pub fn reconcile(store: &Store, nodes: &[Arc<Kubelet>]) {
    let fresh: Vec<Value> = store.read(|o| {
        o.list("volumesnapshots", None)
            .into_iter()
            .filter(|s| s.get("status").is_none_or(Value::is_null))
            .collect()
    });
    for snapshot in fresh {
        let (status, content) = take(store, nodes, &snapshot);
        store.write(|o| {
            let ns = text(&snapshot, "/metadata/namespace");
            let name = text(&snapshot, "/metadata/name");
            // Still the same object (not deleted and made again meanwhile).
            if let Some(mut current) = o.get("volumesnapshots", &ns, &name).cloned()
                && current["metadata"]["uid"] == snapshot["metadata"]["uid"]
            {
                current["status"] = status;
                o.put("volumesnapshots", current);
                if let Some(content) = content {
                    o.put(crate::snapshot_contents::RESOURCE, content);
                }
            }
        });
    }
    crate::snapshot_contents::collect(store, nodes);
}

/// The content a claim's `dataSource` snapshot holds, once ready; why not otherwise.
pub fn source_of_claim(
    store: &Store,
    namespace: &str,
    claim: &Value,
) -> Option<Result<String, String>> {
    let source = claim.pointer("/spec/dataSource")?;
    if text(source, "/kind") != "VolumeSnapshot" {
        return None;
    }
    let name = text(source, "/name");
    Some(store.read(|o| {
        let snapshot = o.get("volumesnapshots", namespace, &name).ok_or_else(|| {
            format!("waiting for the volume to be provisioned: volumesnapshot \"{name}\" not found")
        })?;
        if snapshot.pointer("/status/readyToUse") != Some(&json!(true)) {
            return Err(format!(
                "waiting for the volume to be provisioned: snapshot {name} is not ready to use"
            ));
        }
        crate::snapshot_contents::handle_of(
            o,
            &text(snapshot, "/status/boundVolumeSnapshotContentName"),
        )
    }))
}

/// Copies a snapshot's content into a claim's new folder.
pub fn provision(from: &std::path::Path, into: &std::path::Path) -> Result<(), String> {
    if !from.is_dir() {
        return Err("the snapshot's data is not on this node".into());
    }
    copy_tree(from, into)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_names_one_source_and_a_class_its_driver_and_policy() {
        let mut causes = Vec::new();
        problems("VolumeSnapshot", &json!({"spec": {}}), &mut causes);
        assert_eq!(causes, ["spec.source: Required value"]);
        causes.clear();
        problems(
            "VolumeSnapshot",
            &json!({"spec": {"source": {"persistentVolumeClaimName": "w", "volumeSnapshotContentName": "c"}}}),
            &mut causes,
        );
        assert!(causes[0].contains("exactly one of"), "{causes:?}");
        causes.clear();
        problems(
            "VolumeSnapshot",
            &json!({"spec": {"source": {"persistentVolumeClaimName": "w"}}}),
            &mut causes,
        );
        assert!(causes.is_empty());
        problems(
            "VolumeSnapshotClass",
            &json!({"deletionPolicy": "Keep"}),
            &mut causes,
        );
        assert_eq!(causes.len(), 2, "{causes:?}");
    }

    #[test]
    fn a_snapshots_content_is_made_bound_and_deleted_by_its_class_policy() {
        for (policy, kept) in [("Delete", false), ("Retain", true)] {
            let store = Store::default();
            store.write(|o| {
                o.put("volumesnapshotclasses", json!({"metadata": {"name": "c"}, "driver": "d", "deletionPolicy": policy}));
                o.put("persistentvolumeclaims", json!({"metadata": {"name": "w", "namespace": "n", "uid": "pvc1"},
                    "spec": {"resources": {"requests": {"storage": "2Gi"}}}}));
                o.put("volumesnapshots", json!({"metadata": {"name": "s", "namespace": "n", "uid": "u1"},
                    "spec": {"source": {"persistentVolumeClaimName": "w"}, "volumeSnapshotClassName": "c"}}));
            });
            reconcile(&store, &[]);
            let (snapshot, contents) = store.read(|o| {
                (
                    o.get("volumesnapshots", "n", "s").cloned().unwrap(),
                    o.list("volumesnapshotcontents", None),
                )
            });
            assert_eq!(contents.len(), 1, "{policy}");
            let content = &contents[0];
            assert_eq!(
                snapshot["status"]["boundVolumeSnapshotContentName"],
                "snapcontent-u1"
            );
            assert_eq!(content["metadata"]["name"], "snapcontent-u1");
            assert_eq!(content["spec"]["volumeSnapshotRef"]["uid"], "u1");
            assert_eq!(content["spec"]["source"]["volumeHandle"], "pvc-pvc1");
            assert_eq!(content["spec"]["deletionPolicy"], policy);
            assert_eq!(content["status"]["restoreSize"], 2_i64 << 30);
            assert_eq!(
                store.read(|o| crate::snapshot_contents::handle_of(o, "snapcontent-u1")),
                Ok("snapcontent-u1".to_string())
            );

            store.write(|o| o.remove("volumesnapshots", "n", "s"));
            reconcile(&store, &[]);
            let left = store.read(|o| o.list("volumesnapshotcontents", None).len());
            assert_eq!(left == 1, kept, "{policy}: {left} contents left");
        }
    }
}
