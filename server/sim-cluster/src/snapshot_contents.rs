//! VolumeSnapshotContent (`snapshot.storage.k8s.io/v1`, cluster-scoped): the driver's handle of
//! a snapshot taken, made and bound by the snapshot controller ([`crate::snapshots::reconcile`])
//! as the external-snapshotter's common controller and csi-snapshotter sidecar do for a snapshot
//! provisioned from a claim.
//!
//! - Schema: the types below and the CRD's CEL rules: `spec.volumeSnapshotRef` names both a
//!   snapshot and its namespace, `spec.source` exactly one of `volumeHandle` and
//!   `snapshotHandle` (immutable), `driver` is required, `deletionPolicy` Delete or Retain.
//! - Made ([`made_for`]): `snapcontent-<snapshot uid>`, its `volumeSnapshotRef` the snapshot
//!   (with its uid), `source.volumeHandle` the claim's volume, driver, class and deletion policy
//!   from the class; `status.snapshotHandle` names the node-local copy, `readyToUse`,
//!   `restoreSize` in bytes, `creationTime` in nanoseconds, as the sidecar reports them.
//! - Deleted ([`collect`]): once its snapshot is gone (deleted, or another object by its name),
//!   by its `deletionPolicy`: `Delete` removes the content and then its copy on every node;
//!   `Retain` keeps both until an admin deletes the content.
//!
//! Not simulated: pre-provisioned contents (made by hand with `source.snapshotHandle` and named
//! by a snapshot's `source.volumeSnapshotContentName`), finalizers, group snapshots.

use crate::clock;
use crate::kubelet::Kubelet;
use crate::store::{Objects, Store, text};
use k8s_openapi::api::core::v1::ObjectReference;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::sync::Arc;

pub const RESOURCE: &str = "volumesnapshotcontents";

/// The content: the envelope every custom resource has, with its spec and status.
pub type VolumeSnapshotContent = crate::kinds::Custom<Spec, Status>;

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Spec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    volume_snapshot_ref: Option<ObjectReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    deletion_policy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    driver: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    source: Option<Source>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    volume_snapshot_class_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    source_volume_mode: Option<String>,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Source {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    volume_handle: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    snapshot_handle: Option<String>,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    creation_time: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<crate::snapshots::SnapshotError>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ready_to_use: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    restore_size: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    snapshot_handle: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    volume_group_snapshot_handle: Option<String>,
}

/// What the CRD's schema and CEL rules refuse of a content (422 causes).
pub fn problems(object: &Value, causes: &mut Vec<String>) {
    let Some(spec) = object.get("spec") else {
        causes.push("spec: Required value".into());
        return;
    };
    match spec.get("volumeSnapshotRef") {
        None => causes.push("spec.volumeSnapshotRef: Required value".into()),
        Some(r) if text(r, "/name").is_empty() || text(r, "/namespace").is_empty() => causes.push(
            "spec.volumeSnapshotRef: Invalid value: \"object\": both spec.volumeSnapshotRef.name and spec.volumeSnapshotRef.namespace must be set"
                .into(),
        ),
        Some(_) => {}
    }
    if text(spec, "/driver").is_empty() {
        causes.push("spec.driver: Required value".into());
    }
    let policy = text(spec, "/deletionPolicy");
    if !matches!(policy.as_str(), "Delete" | "Retain") {
        causes.push(format!(
            "spec.deletionPolicy: Unsupported value: \"{policy}\": supported values: \"Delete\", \"Retain\""
        ));
    }
    match spec.get("source") {
        None => causes.push("spec.source: Required value".into()),
        Some(source) => {
            let volume = !text(source, "/volumeHandle").is_empty();
            let snapshot = !text(source, "/snapshotHandle").is_empty();
            if volume == snapshot {
                causes.push(
                    "spec.source: Invalid value: \"object\": exactly one of volumeHandle and snapshotHandle must be set"
                        .into(),
                );
            }
        }
    }
}

/// A content's source is fixed once made.
pub fn update_problems(current: &Value, new: &Value, causes: &mut Vec<String>) {
    if current.pointer("/spec/source") != new.pointer("/spec/source") {
        causes.push("spec.source: Invalid value: \"object\": source is immutable".into());
    }
}

/// The content the controller makes for `snapshot` of `claim` by `class`, its copy `handle`.
pub fn made_for(snapshot: &Value, claim: &Value, class: &Value, handle: &str) -> Value {
    let bytes = crate::quantity::milli(&text(claim, "/spec/resources/requests/storage"))
        .map(|m| (m / 1000) as i64)
        .unwrap_or(0);
    let nanos = i64::try_from(clock::now_seconds()).unwrap_or(0) * 1_000_000_000;
    json!({
        "apiVersion": "snapshot.storage.k8s.io/v1",
        "kind": "VolumeSnapshotContent",
        "metadata": {"name": handle, "uid": clock::uid(), "creationTimestamp": clock::now()},
        "spec": {
            "volumeSnapshotRef": {
                "apiVersion": "snapshot.storage.k8s.io/v1",
                "kind": "VolumeSnapshot",
                "name": text(snapshot, "/metadata/name"),
                "namespace": text(snapshot, "/metadata/namespace"),
                "uid": text(snapshot, "/metadata/uid"),
            },
            "source": {"volumeHandle": format!("pvc-{}", text(claim, "/metadata/uid"))},
            "driver": text(class, "/driver"),
            "deletionPolicy": text(class, "/deletionPolicy"),
            "volumeSnapshotClassName": text(class, "/metadata/name"),
            "sourceVolumeMode": "Filesystem",
        },
        "status": {
            "snapshotHandle": handle,
            "readyToUse": true,
            "restoreSize": bytes,
            "creationTime": nanos,
        },
    })
}

/// The copy a ready content holds, by its name; why not otherwise.
pub fn handle_of(o: &Objects, name: &str) -> Result<String, String> {
    let content = o.get(RESOURCE, "", name).ok_or_else(|| {
        format!(
            "waiting for the volume to be provisioned: volumesnapshotcontent \"{name}\" not found"
        )
    })?;
    if content.pointer("/status/readyToUse") != Some(&json!(true)) {
        return Err(format!(
            "waiting for the volume to be provisioned: content {name} is not ready to use"
        ));
    }
    Ok(text(content, "/status/snapshotHandle"))
}

/// Contents whose snapshot is gone go by their deletion policy; copies no content names go.
pub fn collect(store: &Store, nodes: &[Arc<Kubelet>]) {
    let handles: Vec<String> = store.write(|o| {
        for content in o.list(RESOURCE, None) {
            let r = |key: &str| text(&content, &format!("/spec/volumeSnapshotRef/{key}"));
            let bound = o
                .get("volumesnapshots", &r("namespace"), &r("name"))
                .is_some_and(|s| text(s, "/metadata/uid") == r("uid"));
            if !bound && text(&content, "/spec/deletionPolicy") == "Delete" {
                o.remove(RESOURCE, "", &text(&content, "/metadata/name"));
            }
        }
        o.list(RESOURCE, None)
            .iter()
            .map(|c| text(c, "/status/snapshotHandle"))
            .collect()
    });
    for node in nodes {
        let Ok(entries) = std::fs::read_dir(node.snapshot_path("")) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            // One pass at a time: a copy made in this pass has its content already.
            if !handles.contains(&name) {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_content_names_its_snapshot_one_source_a_driver_and_a_policy() {
        let mut causes = Vec::new();
        problems(
            &json!({"spec": {"volumeSnapshotRef": {"name": "s"}, "source": {}, "deletionPolicy": "Keep"}}),
            &mut causes,
        );
        assert_eq!(causes.len(), 4, "{causes:?}");
        assert!(
            causes[0].contains("both spec.volumeSnapshotRef.name"),
            "{causes:?}"
        );
        assert!(
            causes[3].contains("exactly one of volumeHandle"),
            "{causes:?}"
        );
        causes.clear();
        let claim = json!({"metadata": {"name": "w", "uid": "u1"}, "spec": {"resources": {"requests": {"storage": "1Gi"}}}});
        let snapshot = json!({"metadata": {"name": "s", "namespace": "n", "uid": "u2"}});
        let class = json!({"metadata": {"name": "c"}, "driver": "d", "deletionPolicy": "Retain"});
        let made = made_for(&snapshot, &claim, &class, "snapcontent-u2");
        problems(&made, &mut causes);
        assert!(causes.is_empty(), "{causes:?}");
        assert_eq!(made["status"]["restoreSize"], 1 << 30);
        assert!(
            crate::kinds::by_kind("snapshot.storage.k8s.io/v1", "VolumeSnapshotContent")
                .is_some_and(|k| !k.namespaced && (k.round_trip)(made.clone()).is_ok())
        );
        let mut moved = made.clone();
        moved["spec"]["source"] = json!({"snapshotHandle": "x"});
        update_problems(&made, &moved, &mut causes);
        assert_eq!(
            causes,
            ["spec.source: Invalid value: \"object\": source is immutable"]
        );
    }
}
