//! `labelSelector` and `fieldSelector` as lists and watches take them.

use crate::status::Refusal;
use serde_json::Value;

/// One requirement of a label selector.
#[derive(Clone, Debug, PartialEq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    Exists(String),
    Absent(String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
}

/// A parsed `labelSelector` (every requirement must hold).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LabelSelector(Vec<Requirement>);

/// Splits on commas outside parentheses.
fn terms(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(text[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(text[start..].trim());
    out.into_iter().filter(|t| !t.is_empty()).collect()
}

fn set_of(text: &str) -> Option<Vec<String>> {
    let inner = text.trim().strip_prefix('(')?.strip_suffix(')')?;
    Some(inner.split(',').map(|v| v.trim().to_string()).collect())
}

impl LabelSelector {
    pub fn parse(text: &str) -> Result<Self, Refusal> {
        let bad = || Refusal::bad_request(format!("unable to parse requirement: {text}"));
        let mut requirements = Vec::new();
        for term in terms(text) {
            let requirement = if let Some(key) = term.strip_prefix('!') {
                Requirement::Absent(key.trim().to_string())
            } else if let Some((key, value)) = term.split_once("!=") {
                Requirement::NotEquals(key.trim().into(), value.trim().into())
            } else if let Some((key, value)) = term.split_once("==") {
                Requirement::Equals(key.trim().into(), value.trim().into())
            } else if let Some((key, value)) = term.split_once('=') {
                Requirement::Equals(key.trim().into(), value.trim().into())
            } else if let Some((key, set)) = term.split_once(" notin ") {
                Requirement::NotIn(key.trim().into(), set_of(set).ok_or_else(bad)?)
            } else if let Some((key, set)) = term.split_once(" in ") {
                Requirement::In(key.trim().into(), set_of(set).ok_or_else(bad)?)
            } else if term.contains([' ', '(', ')']) {
                return Err(bad());
            } else {
                Requirement::Exists(term.to_string())
            };
            requirements.push(requirement);
        }
        Ok(LabelSelector(requirements))
    }

    pub fn matches(&self, object: &Value) -> bool {
        let labels = object
            .pointer("/metadata/labels")
            .and_then(Value::as_object);
        let get = |key: &str| labels.and_then(|l| l.get(key)).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            Requirement::Equals(k, v) => get(k) == Some(v.as_str()),
            Requirement::NotEquals(k, v) => get(k) != Some(v.as_str()),
            Requirement::Exists(k) => get(k).is_some(),
            Requirement::Absent(k) => get(k).is_none(),
            Requirement::In(k, set) => get(k).is_some_and(|v| set.iter().any(|s| s == v)),
            Requirement::NotIn(k, set) => get(k).is_none_or(|v| !set.iter().any(|s| s == v)),
        })
    }
}

/// A parsed `fieldSelector`: the fields the API server supports for the served kinds.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FieldSelector(Vec<(String, bool, String)>);

const FIELDS: &[(&str, &str)] = &[
    ("metadata.name", "/metadata/name"),
    ("metadata.namespace", "/metadata/namespace"),
    ("spec.nodeName", "/spec/nodeName"),
    ("status.phase", "/status/phase"),
    ("involvedObject.name", "/involvedObject/name"),
    ("involvedObject.kind", "/involvedObject/kind"),
    ("involvedObject.uid", "/involvedObject/uid"),
];

impl FieldSelector {
    pub fn parse(text: &str, kind: &str) -> Result<Self, Refusal> {
        let mut requirements = Vec::new();
        for term in terms(text) {
            let (field, equal, value) = if let Some((f, v)) = term.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = term.split_once("==") {
                (f, true, v)
            } else if let Some((f, v)) = term.split_once('=') {
                (f, true, v)
            } else {
                return Err(Refusal::bad_request(format!(
                    "invalid selector: '{text}'; can't understand '{term}'"
                )));
            };
            let field = field.trim();
            if !FIELDS.iter().any(|(name, _)| *name == field) {
                return Err(
                    Refusal::bad_request(format!("field label not supported: {field}"))
                        .about(kind, ""),
                );
            }
            requirements.push((field.to_string(), equal, value.trim().to_string()));
        }
        Ok(FieldSelector(requirements))
    }

    pub fn matches(&self, object: &Value) -> bool {
        self.0.iter().all(|(field, equal, value)| {
            let pointer = FIELDS
                .iter()
                .find(|(name, _)| name == field)
                .map(|(_, p)| *p)
                .unwrap_or("");
            let actual = object
                .pointer(pointer)
                .and_then(Value::as_str)
                .unwrap_or("");
            (actual == value) == *equal
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn label_selectors_take_equality_sets_and_existence() {
        let pod = json!({"metadata": {"name": "p", "labels": {"app": "editor", "tier": "gpu"}}});
        let holds = |s: &str| LabelSelector::parse(s).unwrap().matches(&pod);
        assert!(holds("app=editor,tier"));
        assert!(holds("app in (editor, web),!missing"));
        assert!(!holds("app!=editor"));
        assert!(!holds("tier notin (gpu)"));
        assert!(holds(""));
        assert!(LabelSelector::parse("app in editor").is_err());
    }

    #[test]
    fn field_selectors_take_the_supported_fields_only() {
        let pod = json!({"metadata": {"name": "p"}, "spec": {"nodeName": "n1"}});
        assert!(
            FieldSelector::parse("metadata.name=p,spec.nodeName=n1", "Pod")
                .unwrap()
                .matches(&pod)
        );
        assert!(
            !FieldSelector::parse("metadata.name!=p", "Pod")
                .unwrap()
                .matches(&pod)
        );
        let refused = FieldSelector::parse("spec.colour=red", "Pod").unwrap_err();
        assert_eq!(refused.message, "field label not supported: spec.colour");
    }
}
