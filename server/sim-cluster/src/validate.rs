//! What the API server refuses in an object before anything else sees it: a body that is not its
//! kind's type (wrong types: 400), fields the type does not have (dropped with a warning, refused
//! under `fieldValidation=Strict` and by server-side apply), names and labels that are not DNS
//! names (422), quantities that do not parse (400) and requests above limits (422).

use crate::kinds::Kind;
use crate::quantity;
use crate::status::Refusal;
use serde_json::{Map, Value};

/// How unknown fields are treated: the API server's `fieldValidation`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldValidation {
    Ignore,
    Warn,
    Strict,
}

impl FieldValidation {
    /// The query parameter's value; the server's default is `Warn`.
    pub fn parse(value: Option<&str>) -> Result<Self, Refusal> {
        match value {
            None | Some("Warn") => Ok(FieldValidation::Warn),
            Some("Ignore") => Ok(FieldValidation::Ignore),
            Some("Strict") => Ok(FieldValidation::Strict),
            Some(other) => Err(Refusal::bad_request(format!(
                "fieldValidation parameter unsupported: {other}"
            ))),
        }
    }
}

/// The object through its type, with the paths of the fields it dropped.
pub fn decode(kind: &Kind, object: Value) -> Result<(Value, Vec<String>), Refusal> {
    let typed = (kind.round_trip)(object.clone()).map_err(|e| {
        Refusal::bad_request(format!(
            "{} in version \"{}\" cannot be handled as a {}: {e}",
            kind.kind, kind.version, kind.kind
        ))
    })?;
    let mut unknown = Vec::new();
    dropped_fields(&object, &typed, "", &mut unknown);
    Ok((typed, unknown))
}

/// Paths present (and not null) in `sent` but absent from `kept`.
fn dropped_fields(sent: &Value, kept: &Value, at: &str, out: &mut Vec<String>) {
    match (sent, kept) {
        (Value::Object(sent), Value::Object(kept)) => {
            for (key, value) in sent {
                let path = if at.is_empty() {
                    key.clone()
                } else {
                    format!("{at}.{key}")
                };
                match kept.get(key) {
                    Some(inner) => dropped_fields(value, inner, &path, out),
                    None if !value.is_null() && !is_empty_container(value) => out.push(path),
                    None => {}
                }
            }
        }
        (Value::Array(sent), Value::Array(kept)) => {
            for (index, (a, b)) in sent.iter().zip(kept).enumerate() {
                dropped_fields(a, b, &format!("{at}[{index}]"), out);
            }
        }
        _ => {}
    }
}

fn is_empty_container(value: &Value) -> bool {
    matches!(value, Value::Object(m) if m.is_empty())
        || matches!(value, Value::Array(a) if a.is_empty())
}

const LABEL_FORMAT: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric \
characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or \
'123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";

const SUBDOMAIN_FORMAT: &str = "a lowercase RFC 1123 subdomain must consist of lower case \
alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. \
'example.com', regex used for validation is \
'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";

fn is_label(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

fn is_subdomain(name: &str) -> bool {
    name.len() <= 253 && name.split('.').all(is_label)
}

/// The name's problem, in the API server's words.
pub fn name_problem(name: &str, label: bool) -> Option<String> {
    if name.is_empty() {
        return Some("name or generateName is required".into());
    }
    if label {
        if name.len() > 63 {
            return Some(format!(
                "Invalid value: \"{name}\": must be no more than 63 characters"
            ));
        }
        (!is_label(name)).then(|| format!("Invalid value: \"{name}\": {LABEL_FORMAT}"))
    } else {
        (!is_subdomain(name)).then(|| format!("Invalid value: \"{name}\": {SUBDOMAIN_FORMAT}"))
    }
}

/// A label value: at most 63 characters, alphanumerics and `-_.` inside.
fn label_value_problem(value: &str) -> Option<String> {
    let ok = value.len() <= 63
        && (value.is_empty()
            || (value
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
                && value.as_bytes()[0].is_ascii_alphanumeric()
                && value.as_bytes()[value.len() - 1].is_ascii_alphanumeric()));
    (!ok).then(|| {
        format!(
            "Invalid value: \"{value}\": a valid label must be an empty string or consist of \
             alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric \
             character, and be at most 63 characters"
        )
    })
}

/// Everything 422 would list for `object` of `kind` named `name`.
pub fn problems(kind: &Kind, name: &str, object: &Value) -> Result<Vec<String>, Refusal> {
    let mut causes = Vec::new();
    if let Some(problem) = name_problem(name, kind.label_name) {
        causes.push(format!("metadata.name: {problem}"));
    }
    if let Some(labels) = object
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
    {
        for (key, value) in labels {
            if let Some(problem) = label_value_problem(value.as_str().unwrap_or_default()) {
                causes.push(format!("metadata.labels: {problem}"));
            }
            let short = key.rsplit('/').next().unwrap_or(key);
            if short.is_empty() || label_value_problem(short).is_some() {
                causes.push(format!(
                    "metadata.labels: Invalid value: \"{key}\": name part must consist of \
                     alphanumeric characters, '-', '_' or '.'"
                ));
            }
        }
    }
    if kind.kind == "Pod" {
        pod_problems(object, &mut causes)?;
    }
    crate::snapshots::problems(kind.kind, object, &mut causes);
    crate::volumes::problems(kind.kind, object, &mut causes);
    for pointer in [
        "/spec/hard",
        "/spec/resources/requests",
        "/spec/resources/limits",
    ] {
        if let Some(map) = object.pointer(pointer).and_then(Value::as_object) {
            check_quantities(map)?;
        }
    }
    if let Some(limits) = object.pointer("/spec/limits").and_then(Value::as_array) {
        for item in limits {
            for field in ["max", "min", "default", "defaultRequest"] {
                if let Some(map) = item.get(field).and_then(Value::as_object) {
                    check_quantities(map)?;
                }
            }
        }
    }
    Ok(causes)
}

fn check_quantities(map: &Map<String, Value>) -> Result<(), Refusal> {
    for value in map.values() {
        let text = value
            .as_str()
            .map(str::to_string)
            .unwrap_or(value.to_string());
        quantity::milli(&text).map_err(Refusal::bad_request)?;
    }
    Ok(())
}

/// A pod's containers: names, quantities, requests at most their limits.
fn pod_problems(pod: &Value, causes: &mut Vec<String>) -> Result<(), Refusal> {
    let containers = pod
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if containers.is_empty() {
        causes.push("spec.containers: Required value".into());
    }
    for (index, container) in containers.iter().enumerate() {
        let at = format!("spec.containers[{index}]");
        let name = container.get("name").and_then(Value::as_str).unwrap_or("");
        if !is_label(name) {
            causes.push(format!(
                "{at}.name: Invalid value: \"{name}\": {LABEL_FORMAT}"
            ));
        }
        if container
            .get("image")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            causes.push(format!("{at}.image: Required value"));
        }
        let requests = container
            .pointer("/resources/requests")
            .and_then(Value::as_object);
        let limits = container
            .pointer("/resources/limits")
            .and_then(Value::as_object);
        for map in [requests, limits].into_iter().flatten() {
            check_quantities(map)?;
        }
        if let (Some(requests), Some(limits)) = (requests, limits) {
            for (resource, request) in requests {
                let Some(limit) = limits.get(resource) else {
                    continue;
                };
                let (Some(r), Some(l)) = (request.as_str(), limit.as_str()) else {
                    continue;
                };
                let amount = |q: &str| quantity::milli(q).map_err(Refusal::bad_request);
                if amount(r)? > amount(l)? {
                    causes.push(format!(
                        "{at}.resources.requests: Invalid value: \"{r}\": must be less than or \
                         equal to {resource} limit of {l}"
                    ));
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pods() -> &'static Kind {
        crate::kinds::find("", "v1", "pods").unwrap()
    }

    #[test]
    fn a_wrong_type_is_refused_and_an_unknown_field_found() {
        let wrong = json!({"metadata": {"name": "p"}, "spec": {"containers": "not a list"}});
        let refused = decode(pods(), wrong).unwrap_err();
        assert_eq!(refused.code, 400);
        assert!(
            refused
                .message
                .starts_with("Pod in version \"v1\" cannot be handled as a Pod")
        );
        let extra = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i", "colour": "red"}], "speed": 3}});
        let (_, unknown) = decode(pods(), extra).unwrap();
        assert_eq!(unknown, ["spec.containers[0].colour", "spec.speed"]);
    }

    #[test]
    fn names_labels_and_resources_are_checked_as_the_api_server_does() {
        let namespaces = crate::kinds::find("", "v1", "namespaces").unwrap();
        assert!(
            problems(namespaces, "Bad_Name", &json!({})).unwrap()[0].contains("RFC 1123 label")
        );
        assert!(
            problems(namespaces, "u-alice", &json!({}))
                .unwrap()
                .is_empty()
        );
        assert!(
            name_problem(&"a".repeat(64), true)
                .unwrap()
                .contains("no more than 63")
        );
        assert!(name_problem("a.b", false).is_none());
        let pod = json!({
            "metadata": {"labels": {"ok": "yes", "bad": "no way"}},
            "spec": {"containers": [{"name": "c", "image": "i", "resources": {
                "requests": {"cpu": "2"}, "limits": {"cpu": "1"}}}]}
        });
        let causes = problems(pods(), "p", &pod).unwrap();
        assert_eq!(causes.len(), 2, "{causes:?}");
        assert!(causes[1].contains("must be less than or equal to cpu limit of 1"));
        let bad_quantity = json!({"spec": {"containers": [{"name": "c", "image": "i", "resources": {"limits": {"memory": "8 GB"}}}]}});
        assert_eq!(problems(pods(), "p", &bad_quantity).unwrap_err().code, 400);
    }
}
