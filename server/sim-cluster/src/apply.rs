//! Server-side apply with field managers: each manager owns the fields it last applied (or changed
//! by an update), recorded in `metadata.managedFields` as `FieldsV1`; applying a value another
//! manager owns is a conflict (409) unless forced, which moves the field to the applier; a field an
//! applier owned and no longer sends is removed when nobody else owns it.
//!
//! Simplified where the product does not reach: lists are atomic (owned and replaced whole, as
//! `x-kubernetes-list-type: atomic` lists are), rather than merged by key.

use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, BTreeSet};

/// A field's path from the object's root, e.g. `["spec", "hard", "pods"]`.
pub type Path = Vec<String>;

/// The fields a value sets: its leaves (scalars, lists, empty maps), less what no manager owns
/// (identity, `status`).
pub fn leaves(object: &Value) -> BTreeSet<Path> {
    let mut out = BTreeSet::new();
    if let Value::Object(map) = object {
        for (key, value) in map {
            match key.as_str() {
                "apiVersion" | "kind" | "status" => {}
                "metadata" => {
                    for owned in ["labels", "annotations"] {
                        if let Some(inner) = value.get(owned) {
                            walk(inner, &mut vec!["metadata".into(), owned.into()], &mut out);
                        }
                    }
                }
                _ => walk(value, &mut vec![key.clone()], &mut out),
            }
        }
    }
    out
}

fn walk(value: &Value, at: &mut Path, out: &mut BTreeSet<Path>) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            for (key, inner) in map {
                at.push(key.clone());
                walk(inner, at, out);
                at.pop();
            }
        }
        _ => {
            out.insert(at.clone());
        }
    }
}

fn get<'v>(value: &'v Value, path: &[String]) -> Option<&'v Value> {
    path.iter().try_fold(value, |v, key| v.get(key))
}

fn remove(value: &mut Value, path: &[String]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut at = value;
    for key in parents {
        match at.get_mut(key) {
            Some(inner) => at = inner,
            None => return,
        }
    }
    if let Value::Object(map) = at {
        map.remove(last);
    }
}

/// Maps merge key by key; anything else replaces.
fn merge(into: &mut Value, from: &Value) {
    match (into, from) {
        (Value::Object(into), Value::Object(from)) => {
            for (key, value) in from {
                match into.get_mut(key) {
                    Some(existing) if existing.is_object() && value.is_object() => {
                        merge(existing, value)
                    }
                    _ => {
                        into.insert(key.clone(), value.clone());
                    }
                }
            }
        }
        (into, from) => *into = from.clone(),
    }
}

/// `FieldsV1`: `{"f:spec": {"f:hard": {"f:pods": {}}}}`.
pub fn to_fields_v1(paths: &BTreeSet<Path>) -> Value {
    let mut root = Map::new();
    for path in paths {
        let mut at = &mut root;
        for key in path {
            at = at
                .entry(format!("f:{key}"))
                .or_insert_with(|| Value::Object(Map::new()))
                .as_object_mut()
                .expect("built as objects");
        }
    }
    Value::Object(root)
}

pub fn from_fields_v1(fields: &Value) -> BTreeSet<Path> {
    fn visit(value: &Value, at: &mut Path, out: &mut BTreeSet<Path>) {
        match value.as_object() {
            Some(map) if !map.is_empty() => {
                for (key, inner) in map {
                    let Some(name) = key.strip_prefix("f:") else {
                        continue;
                    };
                    at.push(name.to_string());
                    visit(inner, at, out);
                    at.pop();
                }
            }
            _ => {
                if !at.is_empty() {
                    out.insert(at.clone());
                }
            }
        }
    }
    let mut out = BTreeSet::new();
    visit(fields, &mut Vec::new(), &mut out);
    out
}

/// Who owns what: manager → (operation, fields).
type Owners = BTreeMap<String, (String, BTreeSet<Path>)>;

fn owners_of(object: &Value) -> Owners {
    object
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .map(|entries| {
            entries
                .iter()
                .filter_map(|e| {
                    Some((
                        e.get("manager")?.as_str()?.to_string(),
                        (
                            e.get("operation")?.as_str()?.to_string(),
                            from_fields_v1(e.get("fieldsV1")?),
                        ),
                    ))
                })
                .collect()
        })
        .unwrap_or_default()
}

fn write_owners(object: &mut Value, owners: &Owners, api_version: &str, time: &str) {
    let entries: Vec<Value> = owners
        .iter()
        .filter(|(_, (_, fields))| !fields.is_empty())
        .map(|(manager, (operation, fields))| {
            json!({
                "manager": manager,
                "operation": operation,
                "apiVersion": api_version,
                "time": time,
                "fieldsType": "FieldsV1",
                "fieldsV1": to_fields_v1(fields),
            })
        })
        .collect();
    if !object.get("metadata").is_some_and(Value::is_object) {
        object["metadata"] = json!({});
    }
    object["metadata"]["managedFields"] = Value::Array(entries);
}

fn dotted(path: &Path) -> String {
    path.iter().map(|k| format!(".{k}")).collect()
}

/// Applies `applied` for `manager` onto `current` (None: the object is new). Conflicts are the
/// 409's message.
pub fn apply(
    current: Option<&Value>,
    applied: &Value,
    manager: &str,
    force: bool,
    api_version: &str,
    time: &str,
) -> Result<Value, String> {
    let mut owners = current.map(owners_of).unwrap_or_default();
    let mine = leaves(applied);
    let mut conflicts: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (other, (_, fields)) in owners.iter().filter(|(m, _)| m.as_str() != manager) {
        for path in mine.intersection(fields) {
            let differs = current.and_then(|c| get(c, path)) != get(applied, path);
            if differs {
                conflicts
                    .entry(other.clone())
                    .or_default()
                    .push(dotted(path));
            }
        }
    }
    if !conflicts.is_empty() && !force {
        let count: usize = conflicts.values().map(Vec::len).sum();
        let plural = if count == 1 { "conflict" } else { "conflicts" };
        let lines: Vec<String> = conflicts
            .iter()
            .flat_map(|(who, paths)| {
                paths
                    .iter()
                    .map(move |p| format!("conflict with \"{who}\" using {api_version}: {p}"))
            })
            .collect();
        return Err(format!(
            "Apply failed with {count} {plural}: {}",
            lines.join("\n")
        ));
    }
    let mut result = current.cloned().unwrap_or_else(|| json!({}));
    let before = owners
        .get(manager)
        .map(|(_, f)| f.clone())
        .unwrap_or_default();
    for path in before.difference(&mine) {
        let owned_elsewhere = owners
            .iter()
            .any(|(m, (_, f))| m != manager && f.contains(path));
        if !owned_elsewhere {
            remove(&mut result, path);
        }
    }
    merge(&mut result, applied);
    for (other, (_, fields)) in owners.iter_mut().filter(|(m, _)| m.as_str() != manager) {
        if force || conflicts.contains_key(other) {
            fields.retain(|p| !mine.contains(p));
        }
        // Equal values are shared ownership: both keep them.
    }
    owners.insert(manager.to_string(), ("Apply".into(), mine));
    write_owners(&mut result, &owners, api_version, time);
    Ok(result)
}

/// After an update or a merge patch by `manager`: the fields it changed become its own.
pub fn record_update(
    before: Option<&Value>,
    after: &mut Value,
    manager: &str,
    api_version: &str,
    time: &str,
) {
    let mut owners = before.map(owners_of).unwrap_or_default();
    let changed: BTreeSet<Path> = leaves(after)
        .into_iter()
        .filter(|p| before.and_then(|b| get(b, p)) != get(after, p))
        .collect();
    let gone: BTreeSet<Path> = before
        .map(leaves)
        .unwrap_or_default()
        .into_iter()
        .filter(|p| get(after, p).is_none())
        .collect();
    for (_, fields) in owners.values_mut() {
        fields.retain(|p| !changed.contains(p) && !gone.contains(p));
    }
    if !changed.is_empty() {
        let entry = owners
            .entry(manager.to_string())
            .or_insert_with(|| ("Update".into(), BTreeSet::new()));
        entry.1.extend(changed);
    }
    write_owners(after, &owners, api_version, time);
}

/// RFC 7386 JSON merge patch; `strategic`: as a strategic merge patch, lists of named objects
/// (containers, env, volumes, ports) merge element by element by name, as their patch strategy
/// says, rather than being replaced.
pub fn merge_patch(target: &mut Value, patch: &Value, strategic: bool) {
    match patch {
        Value::Object(patch) => {
            if !target.is_object() {
                *target = json!({});
            }
            let map = target.as_object_mut().expect("made an object");
            for (key, value) in patch {
                if value.is_null() {
                    map.remove(key);
                } else {
                    merge_patch(
                        map.entry(key.clone()).or_insert(Value::Null),
                        value,
                        strategic,
                    );
                }
            }
        }
        Value::Array(items)
            if strategic
                && is_named_list(items)
                && target.as_array().is_some_and(|t| is_named_list(t)) =>
        {
            let list = target.as_array_mut().expect("checked");
            for item in items {
                let name = item.get("name");
                match list.iter_mut().find(|t| t.get("name") == name) {
                    Some(existing) => merge_patch(existing, item, true),
                    None => list.push(item.clone()),
                }
            }
        }
        _ => *target = patch.clone(),
    }
}

fn is_named_list(items: &[Value]) -> bool {
    !items.is_empty()
        && items
            .iter()
            .all(|i| i.get("name").is_some_and(Value::is_string))
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: &str = "2026-01-01T00:00:00Z";

    #[test]
    fn an_applier_owns_what_it_sent_and_loses_what_it_stops_sending() {
        let first = apply(None, &json!({"metadata": {"name": "q", "labels": {"a": "1"}}, "spec": {"hard": {"pods": "2", "cpu": "4"}}}), "gsb", false, "v1", T).unwrap();
        let second = apply(
            Some(&first),
            &json!({"metadata": {"name": "q"}, "spec": {"hard": {"pods": "3"}}}),
            "gsb",
            false,
            "v1",
            T,
        )
        .unwrap();
        assert_eq!(second["spec"]["hard"], json!({"pods": "3"}));
        assert!(
            second["metadata"]
                .get("labels")
                .is_none_or(|l| l.get("a").is_none())
        );
        let owned = from_fields_v1(&second["metadata"]["managedFields"][0]["fieldsV1"]);
        assert_eq!(
            owned,
            BTreeSet::from([vec!["spec".to_string(), "hard".into(), "pods".into()]])
        );
    }

    #[test]
    fn another_managers_field_conflicts_unless_forced_or_equal() {
        let theirs = apply(
            None,
            &json!({"spec": {"hard": {"pods": "2"}}}),
            "admin",
            false,
            "v1",
            T,
        )
        .unwrap();
        let refused = apply(
            Some(&theirs),
            &json!({"spec": {"hard": {"pods": "5"}}}),
            "gsb",
            false,
            "v1",
            T,
        )
        .unwrap_err();
        assert_eq!(
            refused,
            "Apply failed with 1 conflict: conflict with \"admin\" using v1: .spec.hard.pods"
        );
        // The same value is shared, not a conflict.
        assert!(
            apply(
                Some(&theirs),
                &json!({"spec": {"hard": {"pods": "2"}}}),
                "gsb",
                false,
                "v1",
                T
            )
            .is_ok()
        );
        let forced = apply(
            Some(&theirs),
            &json!({"spec": {"hard": {"pods": "5"}}}),
            "gsb",
            true,
            "v1",
            T,
        )
        .unwrap();
        assert_eq!(forced["spec"]["hard"]["pods"], "5");
        let managers: Vec<&str> = forced["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["manager"].as_str().unwrap())
            .collect();
        assert_eq!(managers, ["gsb"], "the field moved to the applier");
    }

    #[test]
    fn a_merge_patch_replaces_removes_and_its_manager_owns_the_change() {
        let mut pvc = json!({"spec": {"resources": {"requests": {"storage": "10Gi"}}, "accessModes": ["ReadWriteOnce"]}});
        let before = pvc.clone();
        merge_patch(
            &mut pvc,
            &json!({"spec": {"resources": {"requests": {"storage": "20Gi"}}, "accessModes": null}}),
            false,
        );
        assert_eq!(
            pvc,
            json!({"spec": {"resources": {"requests": {"storage": "20Gi"}}}})
        );
        pvc["metadata"] = json!({});
        record_update(Some(&before), &mut pvc, "gsb", "v1", T);
        assert_eq!(pvc["metadata"]["managedFields"][0]["operation"], "Update");
        // Strategic: a container named in the patch is merged with its namesake, not replaced.
        let mut pod = json!({"spec": {"containers": [{"name": "editor", "image": "lab:1", "args": ["a"]}, {"name": "side", "image": "s"}]}});
        merge_patch(
            &mut pod,
            &json!({"spec": {"containers": [{"name": "editor", "image": "lab:2"}]}}),
            true,
        );
        assert_eq!(
            pod["spec"]["containers"],
            json!([{"name": "editor", "image": "lab:2", "args": ["a"]}, {"name": "side", "image": "s"}])
        );
    }
}
