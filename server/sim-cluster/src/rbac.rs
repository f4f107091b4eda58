//! Who may do what: the RBAC objects of the chart as `helm template` renders it (ClusterRoles,
//! Roles and their bindings), evaluated as the API server's authorizer does, and the refusal in
//! its words. `system:masters` (the harness's own account) may do anything, as on a cluster.

use crate::store::{strings, text};
use serde_json::Value;

/// What a request asks to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attributes {
    pub user: String,
    pub groups: Vec<String>,
    pub verb: String,
    pub group: String,
    /// "pods", or "pods/log" for a subresource.
    pub resource: String,
    pub namespace: Option<String>,
    pub name: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq)]
struct Rule {
    groups: Vec<String>,
    resources: Vec<String>,
    verbs: Vec<String>,
    names: Vec<String>,
}

#[derive(Clone, Debug, PartialEq)]
struct Binding {
    /// None: a ClusterRoleBinding (every namespace).
    namespace: Option<String>,
    role: (String, String),
    /// (kind, name, namespace) of each subject.
    subjects: Vec<(String, String, String)>,
}

/// The rules of a set of RBAC objects.
#[derive(Clone, Debug, Default)]
pub struct Authorizer {
    /// (kind, namespace or "", name) → rules.
    roles: Vec<((String, String, String), Vec<Rule>)>,
    bindings: Vec<Binding>,
}

impl Authorizer {
    /// From rendered objects: anything that is not RBAC is ignored.
    pub fn from_objects(objects: &[Value]) -> Self {
        let mut authorizer = Authorizer::default();
        for object in objects {
            let kind = text(object, "/kind");
            let namespace = text(object, "/metadata/namespace");
            let name = text(object, "/metadata/name");
            match kind.as_str() {
                "ClusterRole" | "Role" => {
                    let rules = object
                        .get("rules")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .map(|r| Rule {
                            groups: strings(r, "/apiGroups"),
                            resources: strings(r, "/resources"),
                            verbs: strings(r, "/verbs"),
                            names: strings(r, "/resourceNames"),
                        })
                        .collect();
                    let scope = if kind == "Role" {
                        namespace
                    } else {
                        String::new()
                    };
                    authorizer.roles.push(((kind, scope, name), rules));
                }
                "ClusterRoleBinding" | "RoleBinding" => {
                    let subjects = object
                        .get("subjects")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .map(|s| (text(s, "/kind"), text(s, "/name"), text(s, "/namespace")))
                        .collect();
                    authorizer.bindings.push(Binding {
                        namespace: (kind == "RoleBinding").then_some(namespace),
                        role: (text(object, "/roleRef/kind"), text(object, "/roleRef/name")),
                        subjects,
                    });
                }
                _ => {}
            }
        }
        authorizer
    }

    fn binds(subject: &(String, String, String), who: &Attributes) -> bool {
        let (kind, name, namespace) = subject;
        match kind.as_str() {
            "ServiceAccount" => who.user == format!("system:serviceaccount:{namespace}:{name}"),
            "User" => &who.user == name,
            "Group" => who.groups.iter().any(|g| g == name),
            _ => false,
        }
    }

    fn rules_of(&self, binding: &Binding) -> &[Rule] {
        let (kind, name) = &binding.role;
        let scope = if kind == "Role" {
            binding.namespace.clone().unwrap_or_default()
        } else {
            String::new()
        };
        self.roles
            .iter()
            .find(|((k, s, n), _)| k == kind && *s == scope && n == name)
            .map(|(_, rules)| rules.as_slice())
            .unwrap_or(&[])
    }

    pub fn allows(&self, who: &Attributes) -> bool {
        if who.groups.iter().any(|g| g == "system:masters") {
            return true;
        }
        self.bindings
            .iter()
            .filter(|b| match &b.namespace {
                None => true,
                Some(ns) => who.namespace.as_deref() == Some(ns.as_str()),
            })
            .filter(|b| b.subjects.iter().any(|s| Self::binds(s, who)))
            .flat_map(|b| self.rules_of(b))
            .any(|rule| {
                let any = |list: &[String], want: &str| list.iter().any(|x| x == "*" || x == want);
                any(&rule.groups, &who.group)
                    && any(&rule.resources, &who.resource)
                    && any(&rule.verbs, &who.verb)
                    && (rule.names.is_empty()
                        || who.name.as_ref().is_some_and(|n| rule.names.contains(n)))
            })
    }

    /// The 403's message.
    pub fn refusal(who: &Attributes) -> String {
        let (resource, sub) = who
            .resource
            .split_once('/')
            .map_or((who.resource.as_str(), None), |(r, s)| (r, Some(s)));
        let subject = match &who.name {
            Some(name) => format!("{resource} \"{name}\""),
            None => resource.to_string(),
        };
        let what = match sub {
            Some(sub) => format!("resource \"{resource}/{sub}\""),
            None => format!("resource \"{resource}\""),
        };
        let scope = match &who.namespace {
            Some(ns) => format!("in the namespace \"{ns}\""),
            None => "at the cluster scope".to_string(),
        };
        format!(
            "{subject} is forbidden: User \"{}\" cannot {} {what} in API group \"{}\" {scope}",
            who.user, who.verb, who.group
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn chart() -> Authorizer {
        Authorizer::from_objects(&[
            json!({"kind": "ClusterRole", "metadata": {"name": "runtime"}, "rules": [
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "create", "delete"]},
                {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
            ]}),
            json!({"kind": "ClusterRoleBinding", "metadata": {"name": "runtime"},
                "roleRef": {"kind": "ClusterRole", "name": "runtime"},
                "subjects": [{"kind": "ServiceAccount", "name": "gsb", "namespace": "sys"}]}),
            json!({"kind": "Role", "metadata": {"name": "own", "namespace": "sys"}, "rules": [
                {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"], "resourceNames": ["leases"]},
            ]}),
            json!({"kind": "RoleBinding", "metadata": {"name": "own", "namespace": "sys"},
                "roleRef": {"kind": "Role", "name": "own"},
                "subjects": [{"kind": "ServiceAccount", "name": "gsb", "namespace": "sys"}]}),
        ])
    }

    fn ask(verb: &str, resource: &str, namespace: Option<&str>, name: Option<&str>) -> Attributes {
        Attributes {
            user: "system:serviceaccount:sys:gsb".into(),
            groups: vec!["system:serviceaccounts".into()],
            verb: verb.into(),
            group: String::new(),
            resource: resource.into(),
            namespace: namespace.map(str::to_string),
            name: name.map(str::to_string),
        }
    }

    #[test]
    fn the_charts_rules_grant_what_they_name_and_nothing_else() {
        let rbac = chart();
        assert!(rbac.allows(&ask("create", "pods", Some("u-a"), None)));
        assert!(rbac.allows(&ask("get", "pods/log", Some("u-a"), Some("p"))));
        assert!(!rbac.allows(&ask("list", "pods", None, None)));
        assert!(!rbac.allows(&ask("create", "pods/exec", Some("u-a"), Some("p"))));
        // A Role holds in its namespace, for its names only.
        assert!(rbac.allows(&ask("get", "configmaps", Some("sys"), Some("leases"))));
        assert!(!rbac.allows(&ask("get", "configmaps", Some("sys"), Some("other"))));
        assert!(!rbac.allows(&ask("get", "configmaps", Some("u-a"), Some("leases"))));
        assert_eq!(
            Authorizer::refusal(&ask("list", "pods", None, None)),
            "pods is forbidden: User \"system:serviceaccount:sys:gsb\" cannot list resource \"pods\" in API group \"\" at the cluster scope"
        );
        let mut admin = ask("delete", "namespaces", None, Some("x"));
        admin.groups = vec!["system:masters".into()];
        assert!(rbac.allows(&admin));
    }
}
