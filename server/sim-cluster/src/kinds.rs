//! The resources the simulated API server serves: where each lives in the URL space, whether it is
//! namespaced, and how an object of it is decoded with the Kubernetes types of the version the
//! chart supports (k8s-openapi, `v1_33`), which is what refuses wrong types and finds unknown fields.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One served resource.
#[derive(Clone, Copy, Debug)]
pub struct Kind {
    /// The plural in URLs and RBAC rules, e.g. "pods".
    pub resource: &'static str,
    pub kind: &'static str,
    /// "" for the core group.
    pub group: &'static str,
    pub version: &'static str,
    pub namespaced: bool,
    /// The name must be a DNS-1123 label (63 characters) rather than a subdomain.
    pub label_name: bool,
    /// Decodes and re-encodes an object through its Kubernetes type.
    pub round_trip: fn(Value) -> Result<Value, String>,
}

impl Kind {
    /// "v1" or "networking.k8s.io/v1".
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The resource name as the API server's messages say it: "pods", or
    /// "networkpolicies.networking.k8s.io".
    pub fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.resource.to_string()
        } else {
            format!("{}.{}", self.resource, self.group)
        }
    }
}

/// A custom resource as its CRD's schema has it (k8s-openapi has types for the built-in kinds
/// only): the envelope every kind shares, with the kind's own spec and status. A missing spec
/// decodes, as the API server accepts it before the schema's 422.
#[derive(Serialize, Deserialize)]
#[serde(
    rename_all = "camelCase",
    bound(deserialize = "S: Deserialize<'de>, T: Deserialize<'de>")
)]
pub struct Custom<S, T> {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    api_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    kind: Option<String>,
    #[serde(default)]
    metadata: ObjectMeta,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    spec: Option<S>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    status: Option<T>,
}

fn through<T: serde::de::DeserializeOwned + serde::Serialize>(v: Value) -> Result<Value, String> {
    let typed: T = serde_json::from_value(v).map_err(|e| e.to_string())?;
    serde_json::to_value(typed).map_err(|e| e.to_string())
}

macro_rules! kind {
    ($resource:literal, $kind:literal, $group:literal, $version:literal, $namespaced:literal, $label:literal, $ty:ty) => {
        Kind {
            resource: $resource,
            kind: $kind,
            group: $group,
            version: $version,
            namespaced: $namespaced,
            label_name: $label,
            round_trip: through::<$ty>,
        }
    };
}

use k8s_openapi::api::core::v1 as core;

/// Every resource served.
pub const KINDS: &[Kind] = &[
    kind!(
        "namespaces",
        "Namespace",
        "",
        "v1",
        false,
        true,
        core::Namespace
    ),
    kind!("nodes", "Node", "", "v1", false, false, core::Node),
    kind!("pods", "Pod", "", "v1", true, false, core::Pod),
    kind!("services", "Service", "", "v1", true, true, core::Service),
    kind!("secrets", "Secret", "", "v1", true, false, core::Secret),
    kind!(
        "configmaps",
        "ConfigMap",
        "",
        "v1",
        true,
        false,
        core::ConfigMap
    ),
    kind!(
        "serviceaccounts",
        "ServiceAccount",
        "",
        "v1",
        true,
        false,
        core::ServiceAccount
    ),
    kind!(
        "persistentvolumeclaims",
        "PersistentVolumeClaim",
        "",
        "v1",
        true,
        false,
        core::PersistentVolumeClaim
    ),
    kind!(
        "persistentvolumes",
        "PersistentVolume",
        "",
        "v1",
        false,
        false,
        core::PersistentVolume
    ),
    kind!(
        "resourcequotas",
        "ResourceQuota",
        "",
        "v1",
        true,
        false,
        core::ResourceQuota
    ),
    kind!(
        "limitranges",
        "LimitRange",
        "",
        "v1",
        true,
        false,
        core::LimitRange
    ),
    kind!("events", "Event", "", "v1", true, false, core::Event),
    kind!(
        "networkpolicies",
        "NetworkPolicy",
        "networking.k8s.io",
        "v1",
        true,
        false,
        k8s_openapi::api::networking::v1::NetworkPolicy
    ),
    kind!(
        "volumesnapshots",
        "VolumeSnapshot",
        "snapshot.storage.k8s.io",
        "v1",
        true,
        false,
        crate::snapshots::VolumeSnapshot
    ),
    kind!(
        "volumesnapshotclasses",
        "VolumeSnapshotClass",
        "snapshot.storage.k8s.io",
        "v1",
        false,
        false,
        crate::snapshots::VolumeSnapshotClass
    ),
    kind!(
        "volumesnapshotcontents",
        "VolumeSnapshotContent",
        "snapshot.storage.k8s.io",
        "v1",
        false,
        false,
        crate::snapshot_contents::VolumeSnapshotContent
    ),
];

/// The resource served at `group`/`version`/`resource`.
pub fn find(group: &str, version: &str, resource: &str) -> Option<&'static Kind> {
    KINDS
        .iter()
        .find(|k| k.group == group && k.version == version && k.resource == resource)
}

/// The resource of a `kind` in `apiVersion` (for objects of the chart).
pub fn by_kind(api_version: &str, kind: &str) -> Option<&'static Kind> {
    KINDS
        .iter()
        .find(|k| k.kind == kind && k.api_version() == api_version)
}
