//! The cluster's objects, as etcd holds them for the API server: one revision counter for every
//! write, each object's `resourceVersion` the revision of its last write, and a window of recent
//! changes that watches resume from; a watch from before the window is answered 410 Gone, as the
//! API server answers one from before etcd's compaction.

use serde_json::Value;
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::broadcast;

/// (resource, namespace or "", name).
pub type Key = (String, String, String);

/// One change, as a watch sends it.
#[derive(Clone, Debug, PartialEq)]
pub struct Change {
    pub revision: u64,
    /// "ADDED", "MODIFIED" or "DELETED".
    pub kind: &'static str,
    pub resource: String,
    pub namespace: String,
    pub object: Value,
}

/// How many changes a watch may resume from (etcd keeps more; a small window makes 410 Gone
/// reachable in tests).
pub const WINDOW: usize = 512;

#[derive(Default)]
pub struct Objects {
    pub objects: BTreeMap<Key, Value>,
    revision: u64,
    history: VecDeque<Change>,
    /// Changes at or before this revision are gone from the window.
    compacted: u64,
}

impl Objects {
    pub fn revision(&self) -> u64 {
        self.revision
    }

    pub fn get(&self, resource: &str, namespace: &str, name: &str) -> Option<&Value> {
        self.objects.get(&(
            resource.to_string(),
            namespace.to_string(),
            name.to_string(),
        ))
    }

    /// The objects of `resource`, in `namespace` or in all.
    pub fn list(&self, resource: &str, namespace: Option<&str>) -> Vec<Value> {
        self.objects
            .iter()
            .filter(|((r, ns, _), _)| r == resource && namespace.is_none_or(|n| n == ns))
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// Writes `object` at the next revision and returns it as stored.
    pub fn put(&mut self, resource: &str, mut object: Value) -> Value {
        self.revision += 1;
        let namespace = text(&object, "/metadata/namespace");
        let name = text(&object, "/metadata/name");
        object["metadata"]["resourceVersion"] = Value::String(self.revision.to_string());
        let key = (resource.to_string(), namespace.clone(), name);
        let kind = if self.objects.contains_key(&key) {
            "MODIFIED"
        } else {
            "ADDED"
        };
        self.objects.insert(key, object.clone());
        self.record(kind, resource, namespace, object.clone());
        object
    }

    pub fn remove(&mut self, resource: &str, namespace: &str, name: &str) -> Option<Value> {
        let key = (
            resource.to_string(),
            namespace.to_string(),
            name.to_string(),
        );
        let mut object = self.objects.remove(&key)?;
        self.revision += 1;
        object["metadata"]["resourceVersion"] = Value::String(self.revision.to_string());
        self.record("DELETED", resource, namespace.to_string(), object.clone());
        Some(object)
    }

    fn record(&mut self, kind: &'static str, resource: &str, namespace: String, object: Value) {
        self.history.push_back(Change {
            revision: self.revision,
            kind,
            resource: resource.to_string(),
            namespace,
            object,
        });
        while self.history.len() > WINDOW {
            if let Some(old) = self.history.pop_front() {
                self.compacted = old.revision;
            }
        }
    }

    /// The changes after `revision`, or None when they left the window.
    pub fn since(&self, revision: u64) -> Option<Vec<Change>> {
        (revision >= self.compacted).then(|| {
            self.history
                .iter()
                .filter(|c| c.revision > revision)
                .cloned()
                .collect()
        })
    }

    /// The oldest revision a watch may still resume from.
    pub fn compacted(&self) -> u64 {
        self.compacted
    }
}

/// The elements of the list at `pointer` (none where there is no list).
pub fn items<'v>(object: &'v Value, pointer: &str) -> impl Iterator<Item = &'v Value> {
    object
        .pointer(pointer)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

/// The strings of the list at `pointer`.
pub fn strings(object: &Value, pointer: &str) -> Vec<String> {
    items(object, pointer)
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect()
}

pub fn text(object: &Value, pointer: &str) -> String {
    object
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string()
}

/// The store and its change feed, shared by the API server, the scheduler and the kubelet.
#[derive(Clone)]
pub struct Store {
    objects: Arc<Mutex<Objects>>,
    feed: broadcast::Sender<Change>,
}

impl Default for Store {
    fn default() -> Self {
        Store {
            objects: Arc::default(),
            feed: broadcast::channel(4 * WINDOW).0,
        }
    }
}

impl Store {
    /// One transaction: reads and writes under one lock; its changes go out to watchers after.
    pub fn write<T>(&self, f: impl FnOnce(&mut Objects) -> T) -> T {
        let mut objects = self.lock();
        let before = objects.revision;
        let out = f(&mut objects);
        for change in objects.history.iter().filter(|c| c.revision > before) {
            let _ = self.feed.send(change.clone());
        }
        out
    }

    pub fn read<T>(&self, f: impl FnOnce(&Objects) -> T) -> T {
        f(&self.lock())
    }

    /// The changes after `revision` and a feed of those to come, taken under one lock so none
    /// falls between; None when `revision` left the window.
    pub fn follow(&self, revision: u64) -> Option<(Vec<Change>, broadcast::Receiver<Change>)> {
        let objects = self.lock();
        let past = objects.since(revision)?;
        Some((past, self.feed.subscribe()))
    }

    fn lock(&self) -> MutexGuard<'_, Objects> {
        self.objects.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_write_is_a_revision_and_old_revisions_leave_the_window() {
        let store = Store::default();
        let first =
            store.write(|o| o.put("pods", json!({"metadata": {"name": "a", "namespace": "n"}})));
        assert_eq!(first["metadata"]["resourceVersion"], "1");
        let (past, _) = store.follow(0).unwrap();
        assert_eq!(past.len(), 1);
        for i in 0..WINDOW + 5 {
            store.write(|o| {
                o.put(
                    "pods",
                    json!({"metadata": {"name": format!("p{i}"), "namespace": "n"}}),
                )
            });
        }
        assert!(store.follow(1).is_none(), "gone: 410");
        let now = store.read(|o| o.revision());
        assert_eq!(store.follow(now - 3).unwrap().0.len(), 3);
        let gone = store.write(|o| o.remove("pods", "n", "a")).unwrap();
        assert_eq!(gone["metadata"]["resourceVersion"], (now + 1).to_string());
    }
}
