//! Storage in use is not deleted from under it: the API server's `StorageObjectInUseProtection`
//! admission plugin and the pvc- and pv-protection controllers, with the finalizers they use.
//!
//! - Every new claim gets the finalizer `kubernetes.io/pvc-protection`, every new volume
//!   `kubernetes.io/pv-protection` ([`admit`]).
//! - Deleting an object that has finalizers only marks it (`deletionTimestamp`): it stays,
//!   Terminating, until they are gone ([`mark_deleted`], used by `api.rs` for every kind); an
//!   update that leaves a marked object without finalizers removes it ([`finalized`]).
//! - [`release`]: a claim being deleted loses its finalizer once no scheduled pod names it
//!   (the controller's `podUsesPVC`: any pod with a node, whatever its phase, since the kubelet
//!   may still have it mounted); a volume once it is not `Bound` (its claim gone: `Released`,
//!   by the volume controller, `volumes::bind`).
//! - A pod naming a claim being deleted is not scheduled ("persistentvolumeclaim \"x\" is being
//!   deleted", `volumes::unbound_claim`).

use crate::api::{finish_namespace, recount_quotas};
use crate::clock;
use crate::store::{Objects, Store, items, strings, text};
use serde_json::{Value, json};

pub const CLAIM_PROTECTION: &str = "kubernetes.io/pvc-protection";
pub const VOLUME_PROTECTION: &str = "kubernetes.io/pv-protection";

/// The admission plugin: a new claim or volume gets its protection finalizer.
pub fn admit(kind: &str, object: &mut Value) {
    let finalizer = match kind {
        "PersistentVolumeClaim" => CLAIM_PROTECTION,
        "PersistentVolume" => VOLUME_PROTECTION,
        _ => return,
    };
    let mut finalizers = strings(object, "/metadata/finalizers");
    if !finalizers.iter().any(|f| f == finalizer) {
        finalizers.push(finalizer.into());
        object["metadata"]["finalizers"] = json!(finalizers);
    }
}

/// Whether deleting `object` must wait for its finalizers.
pub fn held(object: &Value) -> bool {
    !strings(object, "/metadata/finalizers").is_empty()
}

/// Marks `object` (of `resource`) deleted, once; it stays until its finalizers are gone.
pub fn mark_deleted(o: &mut Objects, resource: &str, mut object: Value) -> Value {
    if object.pointer("/metadata/deletionTimestamp").is_some() {
        return object;
    }
    object["metadata"]["deletionTimestamp"] = json!(clock::now());
    object["metadata"]["deletionGracePeriodSeconds"] = json!(0);
    o.put(resource, object)
}

/// Whether an update left `object` marked deleted and without finalizers: then it goes.
pub fn finalized(object: &Value) -> bool {
    object.pointer("/metadata/deletionTimestamp").is_some() && !held(object)
}

/// Takes `finalizer` off a marked object; removes the object when none is left.
fn finish(o: &mut Objects, resource: &str, mut object: Value, finalizer: &str) {
    let left: Vec<String> = strings(&object, "/metadata/finalizers")
        .into_iter()
        .filter(|f| f != finalizer)
        .collect();
    let namespace = text(&object, "/metadata/namespace");
    if left.is_empty() {
        o.remove(resource, &namespace, &text(&object, "/metadata/name"));
        recount_quotas(o, &namespace);
        if !namespace.is_empty() {
            finish_namespace(o, &namespace);
        }
    } else {
        object["metadata"]["finalizers"] = json!(left);
        o.put(resource, object);
    }
}

/// Whether a scheduled pod of `namespace` names claim `name`.
fn claim_used(o: &Objects, namespace: &str, name: &str) -> bool {
    o.list("pods", Some(namespace)).iter().any(|pod| {
        !text(pod, "/spec/nodeName").is_empty()
            && items(pod, "/spec/volumes")
                .any(|v| text(v, "/persistentVolumeClaim/claimName") == name)
    })
}

/// One pass of the pvc- and pv-protection controllers.
pub fn release(store: &Store) {
    store.write(|o| {
        let marked = |o: &Objects, resource: &str, finalizer: &str| -> Vec<Value> {
            o.list(resource, None)
                .into_iter()
                .filter(|v| v.pointer("/metadata/deletionTimestamp").is_some())
                .filter(|v| {
                    strings(v, "/metadata/finalizers")
                        .iter()
                        .any(|f| f == finalizer)
                })
                .collect()
        };
        for claim in marked(o, "persistentvolumeclaims", CLAIM_PROTECTION) {
            let (ns, name) = (
                text(&claim, "/metadata/namespace"),
                text(&claim, "/metadata/name"),
            );
            if !claim_used(o, &ns, &name) {
                finish(o, "persistentvolumeclaims", claim, CLAIM_PROTECTION);
            }
        }
        for volume in marked(o, "persistentvolumes", VOLUME_PROTECTION) {
            if text(&volume, "/status/phase") != "Bound" {
                finish(o, "persistentvolumes", volume, VOLUME_PROTECTION);
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{Api, Target};
    use crate::kinds;
    use crate::validate::FieldValidation;

    fn kind(resource: &str) -> &'static kinds::Kind {
        kinds::KINDS
            .iter()
            .find(|k| k.resource == resource)
            .unwrap()
    }

    fn create(api: &Api, resource: &str, ns: Option<&str>, body: Value) -> Value {
        api.create(kind(resource), ns, body, FieldValidation::Strict, None)
            .unwrap()
            .0
    }

    const CLAIM: &str = r#"{"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadOnlyMany"],
        "storageClassName": "", "volumeName": "u.data", "resources": {"requests": {"storage": "1Gi"}}}}"#;

    /// Namespace `u` with claim `data` bound to volume `u.data`, each as made; their targets.
    fn bound_pair(api: &Api) -> (Value, Value, Target, Target) {
        create(api, "namespaces", None, json!({"metadata": {"name": "u"}}));
        let pv = create(
            api,
            "persistentvolumes",
            None,
            json!({"metadata": {"name": "u.data"}, "spec": {"capacity": {"storage": "1Gi"},
                "accessModes": ["ReadOnlyMany"], "storageClassName": "",
                "claimRef": {"namespace": "u", "name": "data"},
                "nfs": {"server": "nfs", "path": "/x", "readOnly": true}}}),
        );
        let body = serde_json::from_str(CLAIM).unwrap();
        let pvc = create(api, "persistentvolumeclaims", Some("u"), body);
        crate::volumes::bind(&api.store);
        let claim = Target {
            kind: kind("persistentvolumeclaims"),
            namespace: Some("u".into()),
            name: "data".into(),
        };
        let volume = Target {
            kind: kind("persistentvolumes"),
            namespace: None,
            name: "u.data".into(),
        };
        (pv, pvc, claim, volume)
    }

    #[test]
    fn a_claim_in_use_stays_terminating_until_its_pod_goes_and_then_its_volume_goes() {
        let api = Api::default();
        let (pv, pvc, claim, volume) = bound_pair(&api);
        assert_eq!(pv["metadata"]["finalizers"], json!([VOLUME_PROTECTION]));
        assert_eq!(pvc["metadata"]["finalizers"], json!([CLAIM_PROTECTION]));
        // A scheduled pod mounts it.
        let pod = json!({"metadata": {"name": "p", "namespace": "u"}, "spec": {"nodeName": "n",
            "containers": [{"name": "c", "image": "i"}],
            "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]}});
        api.store.write(|o| o.put("pods", pod));
        let marked = api.delete(&claim, None).unwrap();
        assert!(marked["metadata"]["deletionTimestamp"].is_string());
        api.delete(&volume, None).unwrap();
        for _ in 0..3 {
            release(&api.store);
            crate::volumes::bind(&api.store);
        }
        assert!(api.get(&claim).is_ok(), "in use: Terminating");
        assert_eq!(api.get(&volume).unwrap()["status"]["phase"], "Bound");
        // A new pod on it is not scheduled.
        let later = json!({"metadata": {"name": "q", "namespace": "u"}, "spec": {
            "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]}});
        let why = api.store.read(|o| crate::volumes::unbound_claim(o, &later));
        assert_eq!(
            why.as_deref(),
            Some("persistentvolumeclaim \"data\" is being deleted")
        );
        api.store.write(|o| o.remove("pods", "u", "p"));
        release(&api.store);
        assert_eq!(api.get(&claim).unwrap_err().code, 404);
        crate::volumes::bind(&api.store);
        assert_eq!(api.get(&volume).unwrap()["status"]["phase"], "Released");
        release(&api.store);
        assert_eq!(api.get(&volume).unwrap_err().code, 404);
    }

    #[test]
    fn a_released_volume_binds_no_new_claim_of_the_same_name() {
        let api = Api::default();
        let (_, _, claim, _) = bound_pair(&api);
        api.delete(&claim, None).unwrap();
        release(&api.store);
        let body = serde_json::from_str(CLAIM).unwrap();
        create(&api, "persistentvolumeclaims", Some("u"), body);
        crate::volumes::bind(&api.store);
        assert_eq!(api.get(&claim).unwrap()["status"]["phase"], "Pending");
        let said = api.store.read(|o| o.list("events", Some("u")));
        assert_eq!(
            said[0]["message"],
            "volume \"u.data\" already bound to a different claim."
        );
    }
}
