//! The API server's operations on objects, below HTTP: create, read, list, replace, apply, merge
//! and delete, each through validation and admission as a real one runs them, in one store
//! transaction so that two requests cannot both pass a quota.

use crate::admission;
use crate::apply;
use crate::clock;
use crate::kinds::{self, Kind};
use crate::selectors::{FieldSelector, LabelSelector};
use crate::status::Refusal;
use crate::store::{Objects, Store, text};
use crate::validate::{self, FieldValidation};
use serde_json::{Value, json};

/// What a write answers besides the object: the `Warning` headers.
pub type Warnings = Vec<String>;

/// Where an object lives: its resource, namespace (None for cluster-scoped) and name.
#[derive(Clone, Debug)]
pub struct Target {
    pub kind: &'static Kind,
    pub namespace: Option<String>,
    pub name: String,
}

impl Target {
    fn ns(&self) -> &str {
        self.namespace.as_deref().unwrap_or("")
    }

    fn not_found(&self) -> Refusal {
        Refusal::not_found(&self.kind.qualified(), &self.name).about(self.kind.resource, &self.name)
    }
}

/// The operations, on a store.
#[derive(Clone, Default)]
pub struct Api {
    pub store: Store,
}

/// Checks the body's apiVersion and kind against the URL's, and fills them in.
fn typed_body(kind: &Kind, mut body: Value) -> Result<Value, Refusal> {
    if !body.is_object() {
        return Err(Refusal::bad_request("the body is not a JSON object"));
    }
    let expected = kind.api_version();
    match body.get("apiVersion").and_then(Value::as_str) {
        Some(version) if version != expected => {
            return Err(Refusal::bad_request(format!(
                "the API version in the data ({version}) does not match the expected API version ({expected})"
            )));
        }
        _ => body["apiVersion"] = json!(expected),
    }
    match body.get("kind").and_then(Value::as_str) {
        Some(k) if k != kind.kind => {
            return Err(Refusal::bad_request(format!(
                "the kind in the data ({k}) does not match the expected kind ({})",
                kind.kind
            )));
        }
        _ => body["kind"] = json!(kind.kind),
    }
    if !body.get("metadata").is_some_and(Value::is_object) {
        body["metadata"] = json!({});
    }
    Ok(body)
}

/// Decodes `body` and sorts out its unknown fields by `validation`.
fn decoded(
    kind: &Kind,
    body: Value,
    validation: FieldValidation,
) -> Result<(Value, Warnings), Refusal> {
    let (object, unknown) = validate::decode(kind, body)?;
    let warnings: Warnings = unknown
        .iter()
        .map(|f| format!("unknown field \"{f}\""))
        .collect();
    match validation {
        FieldValidation::Strict if !warnings.is_empty() => Err(Refusal::bad_request(format!(
            "strict decoding error: {}",
            warnings.join(", ")
        ))),
        FieldValidation::Ignore => Ok((object, Vec::new())),
        _ => Ok((object, warnings)),
    }
}

/// The pod fields the API server fills in when a pod is created.
fn default_pod(pod: &mut Value) {
    let spec = pod["spec"].as_object_mut().expect("a pod has a spec");
    spec.entry("restartPolicy").or_insert(json!("Always"));
    spec.entry("terminationGracePeriodSeconds")
        .or_insert(json!(30));
    spec.entry("dnsPolicy").or_insert(json!("ClusterFirst"));
    spec.entry("schedulerName")
        .or_insert(json!("default-scheduler"));
    if pod.get("status").is_none_or(|s| s.get("phase").is_none()) {
        pod["status"] = json!({"phase": "Pending", "qosClass": "Burstable"});
    }
}

impl Api {
    pub fn get(&self, target: &Target) -> Result<Value, Refusal> {
        self.store
            .read(|o| {
                o.get(target.kind.resource, target.ns(), &target.name)
                    .cloned()
            })
            .ok_or_else(|| target.not_found())
    }

    /// A `…List` of what matches, at the store's revision.
    pub fn list(
        &self,
        kind: &Kind,
        namespace: Option<&str>,
        labels: &LabelSelector,
        fields: &FieldSelector,
    ) -> Value {
        let (items, revision) = self.store.read(|o| {
            let items: Vec<Value> = o
                .list(kind.resource, namespace)
                .into_iter()
                .filter(|v| labels.matches(v) && fields.matches(v))
                .collect();
            (items, o.revision())
        });
        json!({
            "apiVersion": kind.api_version(),
            "kind": format!("{}List", kind.kind),
            "metadata": {"resourceVersion": revision.to_string()},
            "items": items,
        })
    }

    /// POST: a new object.
    pub fn create(
        &self,
        kind: &'static Kind,
        namespace: Option<&str>,
        body: Value,
        validation: FieldValidation,
        manager: Option<&str>,
    ) -> Result<(Value, Warnings), Refusal> {
        let body = typed_body(kind, body)?;
        let (mut object, warnings) = decoded(kind, body, validation)?;
        if let Some(ns) = namespace {
            let sent = text(&object, "/metadata/namespace");
            if !sent.is_empty() && sent != ns {
                return Err(Refusal::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            object["metadata"]["namespace"] = json!(ns);
        }
        let mut name = text(&object, "/metadata/name");
        if name.is_empty() {
            let prefix = text(&object, "/metadata/generateName");
            if !prefix.is_empty() {
                name = format!("{prefix}{}", &clock::uid()[24..29]);
                object["metadata"]["name"] = json!(name);
            }
        }
        let target = Target {
            kind,
            namespace: namespace.map(str::to_string),
            name,
        };
        self.store.write(|o| {
            if o.get(kind.resource, target.ns(), &target.name).is_some() {
                return Err(Refusal::already_exists(&kind.qualified(), &target.name)
                    .about(kind.resource, &target.name));
            }
            if let Some(manager) = manager {
                apply::record_update(
                    None,
                    &mut object,
                    manager,
                    &kind.api_version(),
                    &clock::now(),
                );
            }
            Ok((admit(o, &target, object, None)?, warnings))
        })
    }

    /// PUT: the whole object, at the version it was read at.
    pub fn replace(
        &self,
        target: &Target,
        body: Value,
        validation: FieldValidation,
        manager: &str,
    ) -> Result<(Value, Warnings), Refusal> {
        let body = typed_body(target.kind, body)?;
        let (mut object, warnings) = decoded(target.kind, body, validation)?;
        self.store.write(|o| {
            let current = o
                .get(target.kind.resource, target.ns(), &target.name)
                .cloned()
                .ok_or_else(|| target.not_found())?;
            let sent = text(&object, "/metadata/resourceVersion");
            if !sent.is_empty() && sent != text(&current, "/metadata/resourceVersion") {
                return Err(conflict(target));
            }
            stamp_update(target, &current, &mut object, manager);
            Ok((admit(o, target, object, Some(&current))?, warnings))
        })
    }

    /// PATCH with `application/apply-patch+yaml`: server-side apply; creates what is missing.
    pub fn apply(
        &self,
        target: &Target,
        body: Value,
        manager: &str,
        force: bool,
    ) -> Result<Value, Refusal> {
        if body.get("apiVersion").is_none() || body.get("kind").is_none() {
            return Err(Refusal::bad_request(
                "apiVersion and kind must be set in an applied configuration",
            ));
        }
        let body = typed_body(target.kind, body)?;
        let (applied, unknown) = validate::decode(target.kind, body)?;
        if let Some(field) = unknown.first() {
            return Err(Refusal::bad_request(format!(
                "failed to create typed patch object ({}/{}; {}, Kind={}): .{field}: field not declared in schema",
                target.ns(),
                target.name,
                target.kind.api_version(),
                target.kind.kind
            )));
        }
        let sent_name = text(&applied, "/metadata/name");
        if sent_name != target.name {
            return Err(Refusal::bad_request(format!(
                "the name of the object ({sent_name}) does not match the name on the URL ({})",
                target.name
            )));
        }
        self.store.write(|o| {
            let current = o
                .get(target.kind.resource, target.ns(), &target.name)
                .cloned();
            let mut merged = apply::apply(
                current.as_ref(),
                &applied,
                manager,
                force,
                &target.kind.api_version(),
                &clock::now(),
            )
            .map_err(|message| Refusal::new(409, "Conflict", message))?;
            if let Some(ns) = &target.namespace {
                merged["metadata"]["namespace"] = json!(ns);
            }
            // What the typed decoding dropped as empty stays out of the stored object too.
            let (merged, _) = validate::decode(target.kind, merged)?;
            admit(o, target, merged, current.as_ref())
        })
    }

    /// PATCH with a JSON merge patch, or a strategic one (named lists merge by name).
    pub fn merge(
        &self,
        target: &Target,
        patch: &Value,
        strategic: bool,
        manager: &str,
    ) -> Result<Value, Refusal> {
        self.store.write(|o| {
            let current = o
                .get(target.kind.resource, target.ns(), &target.name)
                .cloned()
                .ok_or_else(|| target.not_found())?;
            let mut object = current.clone();
            apply::merge_patch(&mut object, patch, strategic);
            let sent = patch
                .pointer("/metadata/resourceVersion")
                .and_then(Value::as_str);
            if sent.is_some_and(|v| v != text(&current, "/metadata/resourceVersion")) {
                return Err(conflict(target));
            }
            let (mut object, _) = validate::decode(target.kind, object)?;
            stamp_update(target, &current, &mut object, manager);
            admit(o, target, object, Some(&current))
        })
    }

    /// DELETE: a pod on a node is marked and left to its kubelet to stop (graceful deletion);
    /// an object with finalizers is marked and stays until they are gone
    /// ([`crate::protection`]); anything else goes at once.
    pub fn delete(&self, target: &Target, grace_seconds: Option<i64>) -> Result<Value, Refusal> {
        self.store.write(|o| {
            let mut current = o
                .get(target.kind.resource, target.ns(), &target.name)
                .cloned()
                .ok_or_else(|| target.not_found())?;
            let on_node = !text(&current, "/spec/nodeName").is_empty();
            let ended = matches!(
                text(&current, "/status/phase").as_str(),
                "Succeeded" | "Failed"
            );
            if target.kind.kind == "Pod" && on_node && !ended && grace_seconds != Some(0) {
                if current.pointer("/metadata/deletionTimestamp").is_none() {
                    let grace = grace_seconds
                        .or_else(|| {
                            current
                                .pointer("/spec/terminationGracePeriodSeconds")
                                .and_then(Value::as_i64)
                        })
                        .unwrap_or(30);
                    current["metadata"]["deletionTimestamp"] =
                        json!(clock::rfc3339(clock::now_seconds() + grace.max(0) as u64));
                    current["metadata"]["deletionGracePeriodSeconds"] = json!(grace);
                    current = o.put(target.kind.resource, current);
                }
                return Ok(current);
            }
            if target.kind.kind == "Namespace" {
                return Ok(terminate_namespace(o, &target.name, current));
            }
            if crate::protection::held(&current) {
                return Ok(crate::protection::mark_deleted(
                    o,
                    target.kind.resource,
                    current,
                ));
            }
            let gone = o
                .remove(target.kind.resource, target.ns(), &target.name)
                .expect("read under the same lock");
            recount_quotas(o, target.ns());
            Ok(gone)
        })
    }
}

/// The fields an update changed become `manager`'s.
fn stamp_update(target: &Target, current: &Value, object: &mut Value, manager: &str) {
    apply::record_update(
        Some(current),
        object,
        manager,
        &target.kind.api_version(),
        &clock::now(),
    );
}

fn conflict(target: &Target) -> Refusal {
    Refusal::new(
        409,
        "Conflict",
        format!(
            "Operation cannot be fulfilled on {} \"{}\": the object has been modified; please apply your changes to the latest version and try again",
            target.kind.qualified(),
            target.name
        ),
    )
    .about(target.kind.resource, &target.name)
}

/// A namespace being deleted: its objects go (pods gracefully), then it does.
fn terminate_namespace(o: &mut Objects, name: &str, mut namespace: Value) -> Value {
    if namespace.pointer("/metadata/deletionTimestamp").is_none() {
        namespace["metadata"]["deletionTimestamp"] = json!(clock::now());
        namespace["status"] = json!({"phase": "Terminating"});
        namespace = o.put("namespaces", namespace);
    }
    for kind in kinds::KINDS.iter().filter(|k| k.namespaced) {
        for object in o.list(kind.resource, Some(name)) {
            let object_name = text(&object, "/metadata/name");
            if kind.kind == "Pod" && !text(&object, "/spec/nodeName").is_empty() {
                if object.pointer("/metadata/deletionTimestamp").is_none() {
                    let mut marked = object;
                    marked["metadata"]["deletionTimestamp"] = json!(clock::now());
                    o.put("pods", marked);
                }
            } else if crate::protection::held(&object) {
                crate::protection::mark_deleted(o, kind.resource, object);
            } else {
                o.remove(kind.resource, name, &object_name);
            }
        }
    }
    finish_namespace(o, name);
    namespace
}

/// Removes a terminating namespace once nothing is left in it.
pub fn finish_namespace(o: &mut Objects, name: &str) {
    let terminating = o
        .get("namespaces", "", name)
        .is_some_and(|n| n.pointer("/metadata/deletionTimestamp").is_some());
    let empty = kinds::KINDS
        .iter()
        .filter(|k| k.namespaced)
        .all(|k| o.list(k.resource, Some(name)).is_empty());
    if terminating && empty {
        o.remove("namespaces", "", name);
    }
}

/// Each quota's `status.used` of `namespace`, counted again.
pub fn recount_quotas(o: &mut Objects, namespace: &str) {
    if namespace.is_empty() {
        return;
    }
    let pods = o.list("pods", Some(namespace));
    let claims = o.list("persistentvolumeclaims", Some(namespace));
    for mut quota in o.list("resourcequotas", Some(namespace)) {
        let used = admission::recount(&quota, &pods, &claims);
        let hard = quota.pointer("/spec/hard").cloned().unwrap_or(json!({}));
        if quota.pointer("/status/used") != Some(&used) {
            quota["status"] = json!({"hard": hard, "used": used});
            o.put("resourcequotas", quota);
        }
    }
}

/// Validation (422), the namespace, metadata the server owns, admission, then the write.
fn admit(
    o: &mut Objects,
    target: &Target,
    mut object: Value,
    current: Option<&Value>,
) -> Result<Value, Refusal> {
    let kind = target.kind;
    let causes = validate::problems(kind, &target.name, &object)?;
    if !causes.is_empty() {
        return Err(Refusal::invalid(kind.kind, &target.name, &causes));
    }
    if let Some(ns) = &target.namespace {
        match o.get("namespaces", "", ns) {
            None => return Err(Refusal::not_found("namespaces", ns).about("namespaces", ns)),
            Some(n) if current.is_none() && n.pointer("/metadata/deletionTimestamp").is_some() => {
                return Err(Refusal::forbidden(format!(
                    "{} \"{}\" is forbidden: unable to create new content in namespace {ns} because it is being terminated",
                    kind.resource, target.name
                )));
            }
            Some(_) => {}
        }
    }
    let metadata = object["metadata"]
        .as_object_mut()
        .expect("typed_body made it");
    match current {
        Some(current) => {
            for owned in [
                "uid",
                "creationTimestamp",
                "generation",
                "deletionTimestamp",
            ] {
                match current["metadata"].get(owned) {
                    Some(v) => metadata.insert(owned.into(), v.clone()),
                    None => metadata.remove(owned),
                };
            }
            if kind.kind == "Pod" {
                pod_update_allowed(current, &object, &target.name)?;
                object["status"] = current["status"].clone();
            }
            if kind.kind == "PersistentVolumeClaim" {
                claim_update_allowed(current, &object, &target.name)?;
            }
            let mut causes = Vec::new();
            crate::snapshots::update_problems(kind.kind, current, &object, &mut causes);
            crate::volumes::update_problems(kind.kind, current, &object, &mut causes);
            if !causes.is_empty() {
                return Err(Refusal::invalid(kind.kind, &target.name, &causes));
            }
        }
        None => {
            metadata.insert("uid".into(), json!(clock::uid()));
            metadata.insert("creationTimestamp".into(), json!(clock::now()));
            if kind.kind == "Pod" {
                let ns = target.ns();
                default_pod(&mut object);
                let ranges = o.list("limitranges", Some(ns));
                admission::default_resources(&mut object, &ranges);
                admission::check_limit_ranges(&object, &target.name, &ranges)?;
            }
            if kind.kind == "Namespace" {
                object["status"] = json!({"phase": "Active"});
            }
            if matches!(kind.kind, "Pod" | "PersistentVolumeClaim") {
                let ns = target.ns();
                let existing = o.list(kind.resource, Some(ns));
                let quotas = o.list("resourcequotas", Some(ns));
                admission::charge(kind.kind, &target.name, &object, &existing, &quotas)?;
            }
        }
    }
    match current {
        None => crate::protection::admit(kind.kind, &mut object),
        // The last finalizer taken off an object being deleted: it goes.
        Some(_)
            if crate::protection::finalized(&object)
                && !matches!(kind.kind, "Namespace" | "Pod") =>
        {
            let gone = o
                .remove(kind.resource, target.ns(), &target.name)
                .expect("read under the same lock");
            recount_quotas(o, target.ns());
            finish_namespace(o, target.ns());
            return Ok(gone);
        }
        Some(_) => {}
    }
    let stored = o.put(kind.resource, object);
    if matches!(kind.kind, "Pod" | "PersistentVolumeClaim" | "ResourceQuota") {
        recount_quotas(o, target.ns());
    }
    Ok(stored)
}

/// A pod's spec is fixed once created, but for its containers' images.
fn pod_update_allowed(current: &Value, new: &Value, name: &str) -> Result<(), Refusal> {
    let without_images = |pod: &Value| {
        let mut spec = pod["spec"].clone();
        for container in spec["containers"].as_array_mut().into_iter().flatten() {
            container.as_object_mut().map(|c| c.remove("image"));
        }
        spec
    };
    if without_images(current) != without_images(new) {
        return Err(Refusal::invalid(
            "Pod",
            name,
            &["spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`, `spec.initContainers[*].image`, `spec.activeDeadlineSeconds`, `spec.tolerations` (only additions to existing tolerations), `spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)".into()],
        ));
    }
    Ok(())
}

/// A claim may only grow its storage request.
fn claim_update_allowed(current: &Value, new: &Value, name: &str) -> Result<(), Refusal> {
    let storage = |pvc: &Value| {
        pvc.pointer("/spec/resources/requests/storage")
            .and_then(Value::as_str)
            .and_then(|q| crate::quantity::milli(q).ok())
    };
    if let (Some(before), Some(after)) = (storage(current), storage(new))
        && after < before
    {
        return Err(Refusal::invalid(
            "PersistentVolumeClaim",
            name,
            &["spec.resources.requests.storage: Forbidden: field can not be less than status.capacity".into()],
        ));
    }
    let mut a = current["spec"].clone();
    let mut b = new["spec"].clone();
    for spec in [&mut a, &mut b] {
        if let Some(requests) = spec
            .pointer_mut("/resources/requests")
            .and_then(Value::as_object_mut)
        {
            requests.remove("storage");
        }
        // Filled in by the volume controller once bound.
        spec.as_object_mut().map(|s| s.remove("volumeName"));
    }
    if a != b {
        return Err(Refusal::invalid(
            "PersistentVolumeClaim",
            name,
            &["spec: Forbidden: spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims".into()],
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(resource: &str) -> &'static Kind {
        kinds::KINDS
            .iter()
            .find(|k| k.resource == resource)
            .unwrap()
    }

    fn target(resource: &str, ns: Option<&str>, name: &str) -> Target {
        Target {
            kind: kind(resource),
            namespace: ns.map(str::to_string),
            name: name.into(),
        }
    }

    #[test]
    fn a_namespaced_object_needs_its_namespace_and_a_name_twice_is_refused() {
        let api = Api::default();
        let pvc = json!({"metadata": {"name": "w"}, "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "10Gi"}}}});
        let refused = api
            .create(
                kind("persistentvolumeclaims"),
                Some("u-a"),
                pvc.clone(),
                FieldValidation::Warn,
                None,
            )
            .unwrap_err();
        assert_eq!(
            (refused.code, refused.message.as_str()),
            (404, "namespaces \"u-a\" not found")
        );
        api.create(
            kind("namespaces"),
            None,
            json!({"metadata": {"name": "u-a"}}),
            FieldValidation::Warn,
            None,
        )
        .unwrap();
        let (made, _) = api
            .create(
                kind("persistentvolumeclaims"),
                Some("u-a"),
                pvc.clone(),
                FieldValidation::Warn,
                None,
            )
            .unwrap();
        assert!(made["metadata"]["uid"].is_string());
        let again = api
            .create(
                kind("persistentvolumeclaims"),
                Some("u-a"),
                pvc,
                FieldValidation::Warn,
                None,
            )
            .unwrap_err();
        assert_eq!(again.code, 409);
        // Shrinking is refused, growing allowed.
        let t = target("persistentvolumeclaims", Some("u-a"), "w");
        let shrink = api
            .merge(
                &t,
                &json!({"spec": {"resources": {"requests": {"storage": "5Gi"}}}}),
                false,
                "gsb",
            )
            .unwrap_err();
        assert_eq!(shrink.code, 422);
        api.merge(
            &t,
            &json!({"spec": {"resources": {"requests": {"storage": "20Gi"}}}}),
            false,
            "gsb",
        )
        .unwrap();
    }

    #[test]
    fn unknown_fields_warn_by_default_and_are_refused_when_strict_or_applied() {
        let api = Api::default();
        let body = json!({"metadata": {"name": "u-b"}, "spec": {"colour": "red"}});
        let (_, warnings) = api
            .create(
                kind("namespaces"),
                None,
                body.clone(),
                FieldValidation::Warn,
                None,
            )
            .unwrap();
        assert_eq!(warnings, ["unknown field \"spec.colour\""]);
        let strict = api
            .create(
                kind("namespaces"),
                None,
                json!({"metadata": {"name": "u-c"}, "spec": {"colour": "red"}}),
                FieldValidation::Strict,
                None,
            )
            .unwrap_err();
        assert_eq!(
            strict.message,
            "strict decoding error: unknown field \"spec.colour\""
        );
        let applied = api.apply(&target("namespaces", None, "u-d"), json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "u-d"}, "spec": {"colour": "red"}}), "gsb", true).unwrap_err();
        assert!(
            applied
                .message
                .ends_with(".spec.colour: field not declared in schema"),
            "{}",
            applied.message
        );
    }

    #[test]
    fn a_stale_replace_conflicts_and_a_pods_spec_is_fixed() {
        let api = Api::default();
        api.create(
            kind("namespaces"),
            None,
            json!({"metadata": {"name": "u-e"}}),
            FieldValidation::Warn,
            None,
        )
        .unwrap();
        let pod = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "editor", "image": "lab:1"}]}});
        let (made, _) = api
            .create(kind("pods"), Some("u-e"), pod, FieldValidation::Warn, None)
            .unwrap();
        assert_eq!(made["status"]["phase"], "Pending");
        assert_eq!(made["spec"]["restartPolicy"], "Always");
        let t = target("pods", Some("u-e"), "p");
        let mut stale = made.clone();
        stale["metadata"]["resourceVersion"] = json!("1");
        assert_eq!(
            api.replace(&t, stale, FieldValidation::Warn, "gsb")
                .unwrap_err()
                .code,
            409
        );
        let changed = api
            .merge(
                &t,
                &json!({"spec": {"restartPolicy": "Never"}}),
                true,
                "gsb",
            )
            .unwrap_err();
        assert_eq!(changed.code, 422);
        api.merge(
            &t,
            &json!({"spec": {"containers": [{"name": "editor", "image": "lab:2"}]}}),
            true,
            "gsb",
        )
        .unwrap();
        // Not on a node: a delete removes it at once.
        api.delete(&t, None).unwrap();
        assert_eq!(api.get(&t).unwrap_err().code, 404);
    }
}
