//! Events, as the cluster's components write them about an object: the scheduler and the
//! kubelet about pods, the volume controller about claims. One shape for all (`core/v1`
//! Event), named `<object>.<8 hex>` as the API server's event recorder names them.

use crate::clock;
use crate::store::Objects;
use serde_json::json;

/// The object an event is about.
#[derive(Clone, Copy, Debug)]
pub struct About<'a> {
    pub kind: &'a str,
    pub namespace: &'a str,
    pub name: &'a str,
}

/// What an event says: its type ("Normal" or "Warning"), reason, message, and the component
/// that says it.
#[derive(Clone, Copy, Debug)]
pub struct Said<'a> {
    pub kind: &'a str,
    pub reason: &'a str,
    pub message: &'a str,
    pub component: &'a str,
}

/// Writes one event.
pub fn record(o: &mut Objects, about: About<'_>, said: Said<'_>) {
    let uid = clock::uid();
    let now = clock::now();
    o.put(
        "events",
        json!({
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": format!("{}.{}", about.name, &uid[..8]), "namespace": about.namespace, "uid": uid, "creationTimestamp": now},
            "involvedObject": {"kind": about.kind, "namespace": about.namespace, "name": about.name, "apiVersion": "v1"},
            "type": said.kind,
            "reason": said.reason,
            "message": said.message,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
            "source": {"component": said.component},
        }),
    );
}
