//! PersistentVolumes (cluster-scoped) and the binding of claims to them, as the API server's
//! validation and the volume controller (`pv_controller`) do it; the storage behind an NFS or
//! CSI volume, for the kubelet.
//!
//! - Schema ([`problems`]): `spec.capacity.storage` and `spec.accessModes` required, exactly one
//!   volume source, a reclaim policy of Retain, Delete or Recycle (422 in the API server's
//!   words); the source is immutable once made ([`update_problems`]).
//! - Binding ([`bind`], run beside the snapshot controller): a claim naming a volume
//!   (`spec.volumeName`) binds to it only if the volume's `claimRef` is empty or names that
//!   claim, its class equals the claim's, its access modes hold the claim's and its capacity
//!   covers the request; then both are `Bound`. Otherwise the claim stays `Pending` with the
//!   controller's Warning event (`VolumeMismatch` "Cannot bind to requested volume …: requested
//!   PV is too small", or `FailedBinding` "… already bound to a different claim."), once; a
//!   volume not there leaves it `Pending` without an event, as the controller does. Claims
//!   without `volumeName` are the node-local provisioner's (WaitForFirstConsumer): untouched.
//! - The scheduler leaves a pod whose claim is missing or not `Bound` pending
//!   ([`unbound_claim`]), "pod has unbound immediate PersistentVolumeClaims".
//! - Storage ([`source_dir`]): a real NFS server or CSI driver is outside the cluster; here a
//!   ConfigMap `sim-storage` in `kube-system` stands for them, mapping an NFS server's name or a
//!   CSI driver's name to a host folder. An NFS `path` is that folder's subfolder of the same
//!   path, a CSI `volumeHandle` its subfolder of that name. A server or driver not in the table
//!   fails the mount as a cluster does (the server does not resolve; the driver is not
//!   registered), and so does a missing export or volume. The kubelet bind-mounts the folder,
//!   read-only where the volume's source, the pod's claim or the mount says `readOnly`.
//!
//! - A bound volume whose claim is gone (or is another claim of the same name: the `claimRef`
//!   keeps the uid) is `Released` and binds no new claim: a claim made again needs its volume
//!   made again. Deleting claims and volumes in use waits for their users ([`crate::protection`]).
//!
//! Not simulated: dynamic provisioning of claims with `volumeName` unset (the node-local folder
//! stands for it), a volume's `Failed` phase, `Recycle`.

use crate::store::{Objects, Store, strings, text};
use crate::{events, quantity};
use serde_json::{Value, json};
use std::path::{Component, Path, PathBuf};

/// Where the test harness declares the storage servers and drivers.
pub const STORAGE_NAMESPACE: &str = "kube-system";
pub const STORAGE_CONFIG: &str = "sim-storage";

const SOURCES: &[&str] = &[
    "nfs",
    "csi",
    "hostPath",
    "local",
    "iscsi",
    "fc",
    "cephfs",
    "rbd",
    "azureFile",
    "awsElasticBlockStore",
    "gcePersistentDisk",
];

/// What the API server refuses in a new PersistentVolume (422 causes).
pub fn problems(kind: &str, object: &Value, causes: &mut Vec<String>) {
    if kind != "PersistentVolume" {
        return;
    }
    let Some(spec) = object.get("spec") else {
        causes.push("spec: Required value".into());
        return;
    };
    if text(spec, "/capacity/storage").is_empty() {
        causes.push("spec.capacity: Required value".into());
    }
    let modes = strings(spec, "/accessModes");
    if modes.is_empty() {
        causes.push("spec.accessModes: Required value".into());
    }
    for mode in &modes {
        if !matches!(
            mode.as_str(),
            "ReadWriteOnce" | "ReadOnlyMany" | "ReadWriteMany" | "ReadWriteOncePod"
        ) {
            causes.push(format!(
                "spec.accessModes: Unsupported value: \"{mode}\": supported values: \"ReadOnlyMany\", \"ReadWriteMany\", \"ReadWriteOnce\", \"ReadWriteOncePod\""
            ));
        }
    }
    let sources = SOURCES
        .iter()
        .filter(|s| spec.get(**s).is_some_and(|v| !v.is_null()))
        .count();
    match sources {
        0 => causes.push("spec: Required value: must specify a volume type".into()),
        1 => {}
        _ => causes.push("spec: Forbidden: may not specify more than 1 volume type".into()),
    }
    if let Some(nfs) = spec.get("nfs") {
        if text(nfs, "/server").is_empty() {
            causes.push("spec.nfs.server: Required value".into());
        }
        let path = text(nfs, "/path");
        if path.is_empty() {
            causes.push("spec.nfs.path: Required value".into());
        } else if !path.starts_with('/') {
            causes.push(format!(
                "spec.nfs.path: Invalid value: \"{path}\": must be an absolute path"
            ));
        }
    }
    if let Some(csi) = spec.get("csi") {
        if text(csi, "/driver").is_empty() {
            causes.push("spec.csi.driver: Required value".into());
        }
        if text(csi, "/volumeHandle").is_empty() {
            causes.push("spec.csi.volumeHandle: Required value".into());
        }
    }
    let policy = text(spec, "/persistentVolumeReclaimPolicy");
    if !policy.is_empty() && !matches!(policy.as_str(), "Retain" | "Delete" | "Recycle") {
        causes.push(format!(
            "spec.persistentVolumeReclaimPolicy: Unsupported value: \"{policy}\": supported values: \"Delete\", \"Recycle\", \"Retain\""
        ));
    }
}

/// A volume's source is fixed once made.
pub fn update_problems(kind: &str, current: &Value, new: &Value, causes: &mut Vec<String>) {
    if kind != "PersistentVolume" {
        return;
    }
    let source = |v: &Value| -> Vec<Value> {
        SOURCES
            .iter()
            .map(|s| {
                v.pointer(&format!("/spec/{s}"))
                    .cloned()
                    .unwrap_or(Value::Null)
            })
            .collect()
    };
    if source(current) != source(new) {
        causes.push(
            "spec.persistentvolumesource: Forbidden: spec.persistentvolumesource is immutable after creation"
                .into(),
        );
    }
}

fn claim_event(o: &mut Objects, namespace: &str, claim: &str, reason: &str, message: &str) {
    let said = o
        .list("events", Some(namespace))
        .into_iter()
        .any(|e| text(&e, "/involvedObject/name") == claim && text(&e, "/message") == message);
    if said {
        return;
    }
    let about = events::About {
        kind: "PersistentVolumeClaim",
        namespace,
        name: claim,
    };
    let said = events::Said {
        kind: "Warning",
        reason,
        message,
        component: "persistentvolume-controller",
    };
    events::record(o, about, said);
}

/// Why `volume` cannot be bound by `claim`, in the controller's words.
fn mismatch(volume: &Value, claim: &Value) -> Option<String> {
    let class = |v: &Value, p: &str| text(v, p);
    if class(volume, "/spec/storageClassName") != class(claim, "/spec/storageClassName") {
        return Some("storageClassName does not match".into());
    }
    let offered = strings(volume, "/spec/accessModes");
    if !strings(claim, "/spec/accessModes")
        .iter()
        .all(|m| offered.contains(m))
    {
        return Some("incompatible accessMode".into());
    }
    let mode = |v: &Value| {
        let m = text(v, "/spec/volumeMode");
        if m.is_empty() { "Filesystem".into() } else { m }
    };
    if mode(volume) != mode(claim) {
        return Some("incompatible volumeMode".into());
    }
    let size = |v: &Value, p: &str| quantity::milli(&text(v, p)).unwrap_or(0);
    if size(volume, "/spec/capacity/storage") < size(claim, "/spec/resources/requests/storage") {
        return Some("requested PV is too small".into());
    }
    None
}

/// One pass of the volume controller: a bound volume whose claim is gone is `Released`; the
/// claims that name a volume are bound to it.
pub fn bind(store: &Store) {
    store.write(|o| {
        for mut volume in o.list("persistentvolumes", None) {
            let r = |key: &str| text(&volume, &format!("/spec/claimRef/{key}"));
            let held = o
                .get("persistentvolumeclaims", &r("namespace"), &r("name"))
                .is_some_and(|c| text(c, "/metadata/uid") == r("uid"));
            if text(&volume, "/status/phase") == "Bound" && !held {
                volume["status"] = json!({"phase": "Released"});
                o.put("persistentvolumes", volume);
            }
        }
        let claims: Vec<Value> = o
            .list("persistentvolumeclaims", None)
            .into_iter()
            .filter(|c| !text(c, "/spec/volumeName").is_empty())
            .filter(|c| text(c, "/status/phase") != "Bound")
            .collect();
        for mut claim in claims {
            let (ns, name) = (
                text(&claim, "/metadata/namespace"),
                text(&claim, "/metadata/name"),
            );
            let wanted = text(&claim, "/spec/volumeName");
            let Some(mut volume) = o.get("persistentvolumes", "", &wanted).cloned() else {
                if text(&claim, "/status/phase") != "Pending" {
                    claim["status"] = json!({"phase": "Pending"});
                    o.put("persistentvolumeclaims", claim);
                }
                continue;
            };
            let by_ns = text(&volume, "/spec/claimRef/namespace");
            let by_name = text(&volume, "/spec/claimRef/name");
            let by_uid = text(&volume, "/spec/claimRef/uid");
            // A volume bound once keeps its claim's uid: a new claim of the same name is
            // another claim.
            let other = (!by_name.is_empty() && (by_ns != ns || by_name != name))
                || (!by_uid.is_empty() && by_uid != text(&claim, "/metadata/uid"));
            let refused = if other {
                Some((
                    "FailedBinding",
                    format!("volume \"{wanted}\" already bound to a different claim."),
                ))
            } else {
                mismatch(&volume, &claim).map(|why| {
                    (
                        "VolumeMismatch",
                        format!("Cannot bind to requested volume \"{wanted}\": {why}"),
                    )
                })
            };
            if let Some((reason, message)) = refused {
                claim_event(o, &ns, &name, reason, &message);
                if text(&claim, "/status/phase") != "Pending" {
                    claim["status"] = json!({"phase": "Pending"});
                    o.put("persistentvolumeclaims", claim);
                }
                continue;
            }
            volume["spec"]["claimRef"] = json!({
                "kind": "PersistentVolumeClaim", "apiVersion": "v1", "namespace": ns,
                "name": name, "uid": text(&claim, "/metadata/uid"),
            });
            volume["status"] = json!({"phase": "Bound"});
            claim["status"] = json!({
                "phase": "Bound",
                "accessModes": volume["spec"]["accessModes"].clone(),
                "capacity": volume["spec"]["capacity"].clone(),
            });
            o.put("persistentvolumes", volume);
            o.put("persistentvolumeclaims", claim);
        }
    });
}

/// Why the scheduler cannot place a pod for its claims yet, if it cannot.
pub fn unbound_claim(o: &Objects, pod: &Value) -> Option<String> {
    let namespace = text(pod, "/metadata/namespace");
    for volume in crate::store::items(pod, "/spec/volumes") {
        let claim = text(volume, "/persistentVolumeClaim/claimName");
        if claim.is_empty() {
            continue;
        }
        let Some(found) = o.get("persistentvolumeclaims", &namespace, &claim) else {
            return Some(format!("persistentvolumeclaim \"{claim}\" not found"));
        };
        if found.pointer("/metadata/deletionTimestamp").is_some() {
            return Some(format!(
                "persistentvolumeclaim \"{claim}\" is being deleted"
            ));
        }
        if !text(found, "/spec/volumeName").is_empty() && text(found, "/status/phase") != "Bound" {
            return Some("pod has unbound immediate PersistentVolumeClaims".into());
        }
    }
    None
}

/// The host folder under `root` at `relative` (no `..`, no root).
fn under(root: &Path, relative: &str) -> Option<PathBuf> {
    let rel = Path::new(relative.trim_start_matches('/'));
    rel.components()
        .all(|c| matches!(c, Component::Normal(_)))
        .then(|| root.join(rel))
}

/// The folder that holds a claim's volume when it names an NFS or CSI volume (`None`: the
/// node-local folder), and whether its source is read-only; the mount's failure otherwise.
pub fn source_dir(store: &Store, claim: &Value) -> Result<Option<(PathBuf, bool)>, String> {
    let wanted = text(claim, "/spec/volumeName");
    if wanted.is_empty() {
        return Ok(None);
    }
    let (volume, table) = store.read(|o| {
        (
            o.get("persistentvolumes", "", &wanted).cloned(),
            o.get("configmaps", STORAGE_NAMESPACE, STORAGE_CONFIG)
                .and_then(|c| c.get("data").cloned())
                .unwrap_or(Value::Null),
        )
    });
    let volume = volume.ok_or_else(|| format!("persistentvolume \"{wanted}\" not found"))?;
    let served = |name: &str| table.get(name).and_then(Value::as_str).map(PathBuf::from);
    let failed = |why: String| format!("MountVolume.SetUp failed for volume \"{wanted}\" : {why}");
    // The source, the name that serves it, the folder under it, and the two ways it fails.
    let (source, host, relative, unserved, missing) = if let Some(nfs) = volume.pointer("/spec/nfs")
    {
        let (server, path) = (text(nfs, "/server"), text(nfs, "/path"));
        (
            nfs,
            server.clone(),
            path.clone(),
            format!(
                "mount failed: exit status 32: mount.nfs: Failed to resolve server {server}: Name or service not known"
            ),
            format!(
                "mount failed: exit status 32: mount.nfs: access denied by server while mounting {server}:{path}"
            ),
        )
    } else if let Some(csi) = volume.pointer("/spec/csi") {
        let (driver, handle) = (text(csi, "/driver"), text(csi, "/volumeHandle"));
        (
            csi,
            driver.clone(),
            handle.clone(),
            format!(
                "kubernetes.io/csi: mounter.SetUpAt failed to get CSI client: driver name {driver} not found in the list of registered CSI drivers"
            ),
            format!("rpc error: code = NotFound desc = volume {handle} not found"),
        )
    } else {
        return Err(failed(
            "this volume's type is not simulated (nfs and csi are)".into(),
        ));
    };
    let root = served(&host).ok_or_else(|| failed(unserved))?;
    let dir = under(&root, &relative)
        .filter(|d| d.is_dir())
        .ok_or_else(|| failed(missing))?;
    let read_only = source
        .get("readOnly")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    Ok(Some((dir, read_only)))
}

/// Whether a pod's volume is mounted read-only whatever its mount says: the pod's claim says
/// `readOnly`, or the volume it is bound to has a read-only source.
pub fn forces_read_only(store: &Store, namespace: &str, volume: &Value) -> bool {
    let flag = |v: &Value, p: &str| v.pointer(p).and_then(Value::as_bool).unwrap_or(false);
    if flag(volume, "/persistentVolumeClaim/readOnly") {
        return true;
    }
    let claim = text(volume, "/persistentVolumeClaim/claimName");
    if claim.is_empty() {
        return false;
    }
    store.read(|o| {
        let Some(found) = o.get("persistentvolumeclaims", namespace, &claim) else {
            return false;
        };
        o.get("persistentvolumes", "", &text(found, "/spec/volumeName"))
            .is_some_and(|pv| flag(pv, "/spec/nfs/readOnly") || flag(pv, "/spec/csi/readOnly"))
    })
}
