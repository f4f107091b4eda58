//! Admission as the API server runs it for the objects the product writes: a LimitRange's
//! defaults and bounds on each container (LimitRanger), then every ResourceQuota of the namespace
//! charged with the new pod or claim (ResourceQuota), each refusal in the API server's words.

use crate::quantity::{format_milli, milli};
use crate::status::Refusal;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;

fn quantities(value: Option<&Value>) -> BTreeMap<String, i128> {
    value
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), milli(v.as_str()?).ok()?)))
                .collect()
        })
        .unwrap_or_default()
}

fn containers_mut(pod: &mut Value) -> Vec<&mut Map<String, Value>> {
    pod.pointer_mut("/spec/containers")
        .and_then(Value::as_array_mut)
        .map(|c| c.iter_mut().filter_map(Value::as_object_mut).collect())
        .unwrap_or_default()
}

/// The API server's defaulting of a container's requests to its limits, then a LimitRange's
/// `default` and `defaultRequest` where the container names none.
pub fn default_resources(pod: &mut Value, limit_ranges: &[Value]) {
    let container_ranges: Vec<&Value> = limit_ranges
        .iter()
        .filter_map(|lr| lr.pointer("/spec/limits").and_then(Value::as_array))
        .flatten()
        .filter(|item| item.get("type").and_then(Value::as_str) == Some("Container"))
        .collect();
    for container in containers_mut(pod) {
        let resources = container.get("resources").cloned().unwrap_or(json!({}));
        let mut limits = resources
            .get("limits")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let mut requests = resources
            .get("requests")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        for range in &container_ranges {
            for (field, into) in [("default", &mut limits), ("defaultRequest", &mut requests)] {
                for (name, value) in range
                    .get(field)
                    .and_then(Value::as_object)
                    .into_iter()
                    .flatten()
                {
                    into.entry(name.clone()).or_insert(value.clone());
                }
            }
        }
        for (name, value) in &limits {
            requests.entry(name.clone()).or_insert(value.clone());
        }
        let mut filled = Map::new();
        if !limits.is_empty() {
            filled.insert("limits".into(), Value::Object(limits));
        }
        if !requests.is_empty() {
            filled.insert("requests".into(), Value::Object(requests));
        }
        container.insert("resources".into(), Value::Object(filled));
    }
}

/// A LimitRange's `max` and `min` per container.
pub fn check_limit_ranges(pod: &Value, name: &str, limit_ranges: &[Value]) -> Result<(), Refusal> {
    let forbidden =
        |why: String| Refusal::forbidden(format!("pods \"{name}\" is forbidden: {why}"));
    let containers = pod.pointer("/spec/containers").and_then(Value::as_array);
    for range in limit_ranges
        .iter()
        .filter_map(|lr| lr.pointer("/spec/limits").and_then(Value::as_array))
        .flatten()
        .filter(|item| item.get("type").and_then(Value::as_str) == Some("Container"))
    {
        for container in containers.into_iter().flatten() {
            let limits = quantities(container.pointer("/resources/limits"));
            let requests = quantities(container.pointer("/resources/requests"));
            for (resource, max) in quantities(range.get("max")) {
                if let Some(limit) = limits.get(&resource).filter(|l| **l > max) {
                    return Err(forbidden(format!(
                        "maximum {resource} usage per Container is {}, but limit is {}",
                        text_of(range.get("max"), &resource, max),
                        text_of(container.pointer("/resources/limits"), &resource, *limit)
                    )));
                }
            }
            for (resource, min) in quantities(range.get("min")) {
                if let Some(request) = requests.get(&resource).filter(|r| **r < min) {
                    return Err(forbidden(format!(
                        "minimum {resource} usage per Container is {}, but request is {}",
                        text_of(range.get("min"), &resource, min),
                        text_of(
                            container.pointer("/resources/requests"),
                            &resource,
                            *request
                        )
                    )));
                }
            }
        }
    }
    Ok(())
}

/// The quantity as it was written, where it was.
fn text_of(map: Option<&Value>, resource: &str, value: i128) -> String {
    map.and_then(|m| m.get(resource))
        .and_then(Value::as_str)
        .map(str::to_string)
        .unwrap_or_else(|| format_milli(value))
}

/// What an object charges against each quota key it may count under.
pub fn usage_of(kind: &str, object: &Value) -> BTreeMap<String, i128> {
    let mut usage = BTreeMap::new();
    match kind {
        "Pod" => {
            let phase = object.pointer("/status/phase").and_then(Value::as_str);
            if matches!(phase, Some("Succeeded" | "Failed")) {
                return usage;
            }
            usage.insert("pods".into(), 1000);
            for container in object
                .pointer("/spec/containers")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                for (field, prefix) in [("requests", "requests."), ("limits", "limits.")] {
                    for (resource, value) in
                        quantities(container.pointer(&format!("/resources/{field}")))
                    {
                        *usage.entry(format!("{prefix}{resource}")).or_default() += value;
                        if field == "requests" && !resource.contains('/') {
                            // `cpu` and `memory` count as their requests.
                            *usage.entry(resource).or_default() += value;
                        }
                    }
                }
            }
        }
        "PersistentVolumeClaim" => {
            usage.insert("persistentvolumeclaims".into(), 1000);
            if let Some(storage) =
                quantities(object.pointer("/spec/resources/requests")).get("storage")
            {
                usage.insert("requests.storage".into(), *storage);
            }
        }
        _ => {}
    }
    usage
}

/// Charges `object` (named `name`) against `quotas`, given what the namespace's other objects of
/// its kind already use; on success, each quota's new `status.used`.
pub fn charge(
    kind: &str,
    name: &str,
    object: &Value,
    existing: &[Value],
    quotas: &[Value],
) -> Result<Vec<(String, Value)>, Refusal> {
    let resource = if kind == "Pod" {
        "pods"
    } else {
        "persistentvolumeclaims"
    };
    let requested = usage_of(kind, object);
    let mut used: BTreeMap<String, i128> = BTreeMap::new();
    for other in existing {
        for (key, value) in usage_of(kind, other) {
            *used.entry(key).or_default() += value;
        }
    }
    let mut statuses = Vec::new();
    for quota in quotas {
        let quota_name = quota
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("");
        let hard = quantities(quota.pointer("/spec/hard"));
        if kind == "Pod" {
            let missing: Vec<String> = [
                "limits.cpu",
                "limits.memory",
                "requests.cpu",
                "requests.memory",
            ]
            .into_iter()
            .filter(|key| hard.contains_key(*key))
            .filter(|key| !requested.contains_key(*key))
            .map(|key| {
                let container = object
                    .pointer("/spec/containers/0/name")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                format!("{key} for: {container}")
            })
            .collect();
            if !missing.is_empty() {
                return Err(Refusal::forbidden(format!(
                    "{resource} \"{name}\" is forbidden: failed quota: {quota_name}: must specify {}",
                    missing.join("; ")
                )));
            }
        }
        let over: Vec<&String> = hard
            .keys()
            .filter(|key| requested.get(*key).is_some_and(|r| *r > 0))
            .filter(|key| used.get(*key).copied().unwrap_or(0) + requested[*key] > hard[*key])
            .collect();
        if !over.is_empty() {
            let list = |values: &dyn Fn(&str) -> i128| {
                over.iter()
                    .map(|k| format!("{k}={}", format_milli(values(k))))
                    .collect::<Vec<_>>()
                    .join(",")
            };
            return Err(Refusal::forbidden(format!(
                "{resource} \"{name}\" is forbidden: exceeded quota: {quota_name}, requested: {}, used: {}, limited: {}",
                list(&|k| requested[k]),
                list(&|k| used.get(k).copied().unwrap_or(0)),
                list(&|k| hard[k]),
            )));
        }
        let status_used: Map<String, Value> = hard
            .keys()
            .map(|k| {
                let total =
                    used.get(k).copied().unwrap_or(0) + requested.get(k).copied().unwrap_or(0);
                (k.clone(), Value::String(format_milli(total)))
            })
            .collect();
        statuses.push((quota_name.to_string(), Value::Object(status_used)));
    }
    Ok(statuses)
}

/// A quota's `status.used` from scratch, e.g. after a pod is gone.
pub fn recount(quota: &Value, pods: &[Value], claims: &[Value]) -> Value {
    let hard = quantities(quota.pointer("/spec/hard"));
    let mut used: BTreeMap<String, i128> = BTreeMap::new();
    for (kind, objects) in [("Pod", pods), ("PersistentVolumeClaim", claims)] {
        for object in objects {
            for (key, value) in usage_of(kind, object) {
                *used.entry(key).or_default() += value;
            }
        }
    }
    Value::Object(
        hard.keys()
            .map(|k| {
                (
                    k.clone(),
                    Value::String(format_milli(used.get(k).copied().unwrap_or(0))),
                )
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, gpumem: &str) -> Value {
        json!({"metadata": {"name": name}, "spec": {"containers": [{"name": "editor", "image": "i",
            "resources": {"limits": {"cpu": "2", "memory": "8Gi", "nvidia.com/gpu": "1", "nvidia.com/gpumem": gpumem}}}]}})
    }

    #[test]
    fn limits_default_requests_and_a_limit_range_fills_and_bounds() {
        let range = json!({"spec": {"limits": [{"type": "Container", "default": {"cpu": "1"}, "defaultRequest": {"memory": "1Gi"}, "max": {"memory": "4Gi"}}]}});
        let mut bare = json!({"spec": {"containers": [{"name": "c", "image": "i"}]}});
        default_resources(&mut bare, std::slice::from_ref(&range));
        assert_eq!(
            bare["spec"]["containers"][0]["resources"],
            json!({"limits": {"cpu": "1"}, "requests": {"cpu": "1", "memory": "1Gi"}})
        );
        let mut big = pod("p", "8192");
        default_resources(&mut big, std::slice::from_ref(&range));
        let refused = check_limit_ranges(&big, "p", &[range]).unwrap_err();
        assert_eq!(
            refused.message,
            "pods \"p\" is forbidden: maximum memory usage per Container is 4Gi, but limit is 8Gi"
        );
    }

    #[test]
    fn a_quota_charges_each_pod_and_refuses_past_its_hard_limit_in_its_words() {
        let quota = json!({"metadata": {"name": "gpu-sandbox"}, "spec": {"hard": {"pods": "2", "limits.nvidia.com/gpumem": "16384"}}});
        let mut first = pod("a", "8192");
        default_resources(&mut first, &[]);
        let statuses = charge("Pod", "a", &first, &[], std::slice::from_ref(&quota)).unwrap();
        assert_eq!(
            statuses[0].1,
            json!({"limits.nvidia.com/gpumem": "8192", "pods": "1"})
        );
        let mut second = pod("b", "12288");
        default_resources(&mut second, &[]);
        let refused = charge(
            "Pod",
            "b",
            &second,
            &[first.clone()],
            std::slice::from_ref(&quota),
        )
        .unwrap_err();
        assert_eq!(refused.code, 403);
        assert_eq!(
            refused.message,
            "pods \"b\" is forbidden: exceeded quota: gpu-sandbox, requested: limits.nvidia.com/gpumem=12288, used: limits.nvidia.com/gpumem=8192, limited: limits.nvidia.com/gpumem=16384"
        );
        // An ended pod no longer counts.
        first["status"] = json!({"phase": "Failed"});
        assert!(charge("Pod", "b", &second, &[first], &[quota]).is_ok());
    }

    #[test]
    fn a_quota_on_cpu_refuses_a_pod_that_names_none() {
        let quota = json!({"metadata": {"name": "q"}, "spec": {"hard": {"limits.cpu": "4"}}});
        let bare = json!({"spec": {"containers": [{"name": "editor", "image": "i"}]}});
        let refused = charge("Pod", "p", &bare, &[], &[quota]).unwrap_err();
        assert_eq!(
            refused.message,
            "pods \"p\" is forbidden: failed quota: q: must specify limits.cpu for: editor"
        );
    }
}
