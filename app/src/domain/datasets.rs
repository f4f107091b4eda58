//! Shared datasets: folders admins register once and every session of a permitted user finds
//! read-only at `~/datasets/<name>`. Pure rules: what a name, a description, a host path and a
//! cluster claim may be, who may use a dataset, and what a launch mounts and says.
//!
//! Where a dataset lies is one of two places, by runtime: a host folder on the one-server runtime
//! (bound read-only into the sandbox), or on a cluster a PersistentVolumeClaim (an NFS export or a
//! CSI volume reaches pods through one) mounted read-only into the pod.

use serde::{Deserialize, Serialize};

/// Names are DNS labels (a pod's volume is called after one) kept short for the launch line.
pub const MAX_NAME_CHARS: usize = 40;
pub const MAX_DESCRIPTION_CHARS: usize = 200;
/// The longest host path taken (Linux's `PATH_MAX`).
pub const MAX_PATH_CHARS: usize = 4096;
/// A claim's name is a DNS subdomain.
pub const MAX_CLAIM_CHARS: usize = 253;
/// The folder of the editor's home the datasets appear in.
pub const MOUNT_DIR: &str = "datasets";

/// Who may use a dataset: everyone, or the users named. On the wire `"everyone"` or a list of
/// user names.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "UsersWire", into = "UsersWire")]
pub enum Users {
    Everyone,
    Named(Vec<String>),
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(untagged)]
enum UsersWire {
    Word(String),
    List(Vec<String>),
}

impl TryFrom<UsersWire> for Users {
    type Error = String;

    fn try_from(wire: UsersWire) -> Result<Users, String> {
        match wire {
            UsersWire::Word(word) if word == "everyone" => Ok(Users::Everyone),
            UsersWire::Word(_) => Err("users is \"everyone\" or a list of user names".into()),
            UsersWire::List(names) => Ok(Users::Named(names)),
        }
    }
}

impl From<Users> for UsersWire {
    fn from(users: Users) -> UsersWire {
        match users {
            Users::Everyone => UsersWire::Word("everyone".into()),
            Users::Named(names) => UsersWire::List(names),
        }
    }
}

/// A dataset an admin registers: `path` on the one-server runtime, `claim` on a cluster.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewDataset {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim: Option<String>,
    pub users: Users,
}

/// A change to a dataset: what is given replaces what was.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatasetChange {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub path: Option<String>,
    #[serde(default)]
    pub claim: Option<String>,
    #[serde(default)]
    pub users: Option<Users>,
}

/// A dataset as admins see it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DatasetView {
    pub id: String,
    pub name: String,
    pub description: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim: Option<String>,
    pub users: Users,
    pub added_by: Option<String>,
    pub created_at_ms: i64,
    /// The host folder is not there now: launches go without it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub missing: bool,
}

/// The admins' datasets tab: every dataset, and which place this server takes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdminDatasets {
    pub datasets: Vec<DatasetView>,
    /// Editors run on a cluster: a dataset is a claim, not a path.
    pub on_cluster: bool,
}

/// A dataset as the users who may use it see it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DatasetUse {
    pub name: String,
    pub description: String,
    /// `~/datasets/<name>`.
    pub mounted_at: String,
}

/// Where a dataset lies.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Place {
    /// A folder of the server's machine (the one-server runtime).
    Path(String),
    /// A PersistentVolumeClaim of the user's namespace (a cluster).
    Claim(String),
}

/// A name: lowercase letters, digits and `-`, starting and ending with a letter or digit.
pub fn check_name(text: &str) -> Result<String, String> {
    let name = text.trim();
    if name.is_empty() {
        return Err("give the dataset a short name, e.g. imagenet-2012".into());
    }
    let ok = name.chars().count() <= MAX_NAME_CHARS
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    if !ok {
        return Err(format!(
            "`{}` is not a dataset name: up to {MAX_NAME_CHARS} lowercase letters, digits and `-`, starting and ending with a letter or digit",
            super::encode::shown(name)
        ));
    }
    Ok(name.to_string())
}

pub fn check_description(text: &str) -> Result<String, String> {
    let description = text.trim();
    if description.chars().count() > MAX_DESCRIPTION_CHARS
        || description.chars().any(char::is_control)
    {
        return Err(format!(
            "the description must be at most {MAX_DESCRIPTION_CHARS} characters on one line"
        ));
    }
    Ok(description.to_string())
}

/// A host folder as written: absolute, without `.` or `..`, not the root. Returned without a
/// trailing `/`. Whether it exists, is a folder, and stays clear of the data directory is the
/// server's to look ([`overlap_with_data_dir`] on the resolved paths).
pub fn check_path(text: &str) -> Result<String, String> {
    let path = text.trim();
    if path.is_empty() {
        return Err("give the dataset's folder on this server, e.g. /srv/datasets/imagenet".into());
    }
    if path.chars().count() > MAX_PATH_CHARS || path.chars().any(char::is_control) {
        return Err("the path is too long or holds control characters".into());
    }
    if !path.starts_with('/') {
        return Err(format!(
            "`{}` is not an absolute path: it starts with /",
            super::encode::shown(path)
        ));
    }
    if path.split('/').any(|part| part == "." || part == "..") {
        return Err(format!(
            "`{}` holds `.` or `..`: write the folder's own path",
            super::encode::shown(path)
        ));
    }
    let trimmed = path.trim_end_matches('/');
    if trimmed.is_empty() {
        return Err("the root folder cannot be a dataset: name the folder that holds it".into());
    }
    Ok(trimmed.to_string())
}

/// Whether `path` (resolved) and the server's data directory (resolved) overlap: a dataset
/// inside it would show the server's database and every workspace, one above it too. The reason
/// when they do.
pub fn overlap_with_data_dir(path: &str, data_dir: &str) -> Option<String> {
    let parts = |p: &str| -> Vec<String> {
        p.split('/')
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect()
    };
    let (path_parts, dir_parts) = (parts(path), parts(data_dir));
    if path_parts.starts_with(&dir_parts) {
        Some(format!(
            "`{}` lies inside the server's data directory, which holds its database and everyone's workspaces",
            super::encode::shown(path)
        ))
    } else if dir_parts.starts_with(&path_parts) {
        Some(format!(
            "`{}` holds the server's data directory, with its database and everyone's workspaces",
            super::encode::shown(path)
        ))
    } else {
        None
    }
}

/// A PersistentVolumeClaim's name (a DNS subdomain).
pub fn check_claim(text: &str) -> Result<String, String> {
    let claim = text.trim();
    let ok = !claim.is_empty()
        && claim.len() <= MAX_CLAIM_CHARS
        && claim.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        });
    if !ok {
        return Err(format!(
            "`{}` is not a claim name: a PersistentVolumeClaim's name is lowercase letters, digits, `-` and `.`",
            super::encode::shown(claim)
        ));
    }
    Ok(claim.to_string())
}

/// Where a dataset lies, from what was given: a path on the one-server runtime, a claim on a
/// cluster, never both.
pub fn check_place(
    path: Option<&str>,
    claim: Option<&str>,
    on_cluster: bool,
) -> Result<Place, String> {
    match (path, claim, on_cluster) {
        (Some(_), Some(_), _) => Err("give a path or a claim, not both".into()),
        (Some(path), None, false) => check_path(path).map(Place::Path),
        (None, Some(claim), true) => check_claim(claim).map(Place::Claim),
        (Some(_), None, true) => Err(
            "this server runs editors on a cluster: give the name of the dataset's source in the server's kube.dataset_sources (an NFS export or a CSI volume) as claim, not a path".into(),
        ),
        (None, Some(_), false) => Err(
            "this server runs editors on this machine: give the dataset's folder as path, not a claim".into(),
        ),
        (None, None, true) => Err(
            "give the name of the dataset's source in the server's kube.dataset_sources as claim"
                .into(),
        ),
        (None, None, false) => Err("give the dataset's folder on this server as path".into()),
    }
}

/// User names as given: trimmed, each once, at least one.
pub fn check_user_names(names: &[String]) -> Result<Vec<String>, String> {
    let mut out: Vec<String> = Vec::new();
    for name in names {
        let name = name.trim();
        if name.is_empty() {
            return Err("a user name in users is empty".into());
        }
        if !out.iter().any(|n| n == name) {
            out.push(name.to_string());
        }
    }
    if out.is_empty() {
        return Err("name at least one user in users, or give \"everyone\"".into());
    }
    Ok(out)
}

/// The names in `given` that are not in `known`, for the refusal that lists them.
pub fn unknown_users(given: &[String], known: &[String]) -> Result<(), String> {
    let unknown: Vec<String> = given
        .iter()
        .filter(|g| !known.contains(g))
        .map(|g| format!("`{}`", super::encode::shown(g)))
        .collect();
    if unknown.is_empty() {
        Ok(())
    } else {
        Err(format!("no such user: {}", unknown.join(", ")))
    }
}

/// Who may use a dataset, as the store keeps it: everyone, or these user ids.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Permit<'a> {
    pub everyone: bool,
    pub user_ids: &'a [String],
}

impl Permit<'_> {
    /// Whether `user_id` may use the dataset. Admins too only when permitted: a dataset is
    /// data, not administration.
    pub fn allows(&self, user_id: &str) -> bool {
        self.everyone || self.user_ids.iter().any(|u| u == user_id)
    }
}

/// Where a dataset appears in the editor's home: `datasets/<name>`.
pub fn mount_point(name: &str) -> String {
    format!("{MOUNT_DIR}/{name}")
}

/// What a launch mounts of the datasets the user may use, each with whether its place is there
/// now (a host folder that disappeared is not): the names mounted and the steps to record.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MountPlan {
    pub mounted: Vec<String>,
    pub steps: Vec<String>,
}

pub fn plan_mounts(datasets: &[(String, bool)]) -> MountPlan {
    let mut plan = MountPlan::default();
    for (name, present) in datasets {
        if *present {
            plan.mounted.push(name.clone());
        } else {
            plan.steps.push(format!(
                "Dataset {name} is missing on this server; launched without it"
            ));
        }
    }
    if !plan.mounted.is_empty() {
        plan.steps.insert(0, mounted_words(&plan.mounted));
    }
    plan
}

/// How a dataset's volume was attached on a cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attached {
    /// From the source configured now.
    Ready,
    /// Its source changed while another session of the user mounts the volume made from the
    /// previous one: a volume's source cannot change under a running pod, so this session
    /// shares the previous one and the next session gets the new.
    PreviousSource,
}

/// As [`plan_mounts`] on a cluster, where each dataset's volume was attached or not, with the
/// reason: one that is not is a step naming it, and the editor starts without it; one kept on
/// its previous source is a step saying when the new one applies.
pub fn plan_attached(datasets: &[(String, Result<Attached, String>)]) -> MountPlan {
    let mut plan = MountPlan::default();
    for (name, attached) in datasets {
        match attached {
            Ok(Attached::Ready) => plan.mounted.push(name.clone()),
            Ok(Attached::PreviousSource) => {
                plan.mounted.push(name.clone());
                plan.steps.push(format!(
                    "Dataset {name}: its source changed while another session of yours uses it; this session reads the previous source, the new one applies from your next session"
                ));
            }
            Err(why) => plan.steps.push(format!(
                "Dataset {name} could not be attached: {why}; launched without it"
            )),
        }
    }
    if !plan.mounted.is_empty() {
        plan.steps.insert(0, mounted_words(&plan.mounted));
    }
    plan
}

/// "Datasets, read-only in ~/datasets: a, b".
pub fn mounted_words(names: &[String]) -> String {
    format!("Datasets, read-only in ~/{MOUNT_DIR}: {}", names.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_short_lowercase_labels() {
        assert_eq!(check_name(" imagenet-2012 "), Ok("imagenet-2012".into()));
        for bad in ["", "ImageNet", "a_b", "-a", "a-", "a/b", "..", "a b"] {
            assert!(check_name(bad).is_err(), "{bad:?} was accepted");
        }
        assert!(check_name(&"a".repeat(41)).is_err());
        assert!(check_name(&"a".repeat(40)).is_ok());
    }

    #[test]
    fn descriptions_are_one_short_line() {
        assert_eq!(check_description(" ok "), Ok("ok".into()));
        assert_eq!(check_description(""), Ok(String::new()));
        assert!(check_description("a\nb").is_err());
        assert!(check_description(&"x".repeat(201)).is_err());
    }

    #[test]
    fn paths_are_absolute_and_plain() {
        assert_eq!(check_path("/srv/data/"), Ok("/srv/data".into()));
        assert!(check_path("srv/data").unwrap_err().contains("absolute"));
        assert!(check_path("/srv/../etc").unwrap_err().contains(".."));
        assert!(check_path("/srv/./x").is_err());
        assert!(check_path("/").unwrap_err().contains("root"));
        assert!(check_path("///").is_err());
        assert!(check_path("").is_err());
    }

    #[test]
    fn the_data_directory_is_off_limits_below_and_above() {
        let dir = "/var/lib/sandbox";
        assert!(
            overlap_with_data_dir("/var/lib/sandbox/workspaces/alice", dir)
                .unwrap()
                .contains("inside")
        );
        assert!(overlap_with_data_dir("/var/lib/sandbox", dir).is_some());
        assert!(
            overlap_with_data_dir("/var/lib", dir)
                .unwrap()
                .contains("holds")
        );
        assert!(overlap_with_data_dir("/var/lib/sandbox-data", dir).is_none());
        assert!(overlap_with_data_dir("/srv/datasets/x", dir).is_none());
    }

    #[test]
    fn claims_are_dns_subdomains() {
        assert_eq!(check_claim("imagenet-ro"), Ok("imagenet-ro".into()));
        assert_eq!(check_claim("a.b-c"), Ok("a.b-c".into()));
        for bad in ["", "Big", "a..b", "-a", "a_b", "a/b"] {
            assert!(check_claim(bad).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn a_place_fits_the_runtime() {
        assert_eq!(
            check_place(Some("/srv/x"), None, false),
            Ok(Place::Path("/srv/x".into()))
        );
        assert_eq!(
            check_place(None, Some("x"), true),
            Ok(Place::Claim("x".into()))
        );
        assert!(
            check_place(Some("/srv/x"), None, true)
                .unwrap_err()
                .contains("claim")
        );
        assert!(
            check_place(None, Some("x"), false)
                .unwrap_err()
                .contains("path")
        );
        assert!(check_place(Some("/a"), Some("b"), false).is_err());
        assert!(check_place(None, None, false).is_err());
    }

    #[test]
    fn users_are_everyone_or_named_once() {
        let everyone: Users = serde_json::from_str("\"everyone\"").unwrap();
        assert_eq!(everyone, Users::Everyone);
        let named: Users = serde_json::from_str("[\"a\",\"b\"]").unwrap();
        assert_eq!(named, Users::Named(vec!["a".into(), "b".into()]));
        assert!(serde_json::from_str::<Users>("\"all\"").is_err());
        assert_eq!(
            serde_json::to_string(&Users::Everyone).unwrap(),
            "\"everyone\""
        );
        assert_eq!(
            check_user_names(&[" a ".into(), "a".into(), "b".into()]),
            Ok(vec!["a".into(), "b".into()])
        );
        assert!(check_user_names(&[]).is_err());
        assert!(check_user_names(&[" ".into()]).is_err());
        let err = unknown_users(&["a".into(), "zed".into()], &["a".into()]).unwrap_err();
        assert!(err.contains("zed") && !err.contains("`a`"), "{err}");
    }

    #[test]
    fn only_permitted_users_use_a_dataset() {
        let ids = vec!["u1".to_string()];
        let named = Permit {
            everyone: false,
            user_ids: &ids,
        };
        assert!(named.allows("u1"));
        assert!(!named.allows("u2"));
        let all = Permit {
            everyone: true,
            user_ids: &[],
        };
        assert!(all.allows("u2"));
    }

    #[test]
    fn a_missing_dataset_is_a_step_not_a_failure() {
        let plan = plan_mounts(&[
            ("a".into(), true),
            ("gone".into(), false),
            ("b".into(), true),
        ]);
        assert_eq!(plan.mounted, vec!["a".to_string(), "b".to_string()]);
        assert_eq!(
            plan.steps,
            vec![
                "Datasets, read-only in ~/datasets: a, b".to_string(),
                "Dataset gone is missing on this server; launched without it".to_string()
            ]
        );
        assert_eq!(plan_mounts(&[]), MountPlan::default());
        let attached = plan_attached(&[
            ("a".into(), Ok(Attached::Ready)),
            ("b".into(), Err("its claim does not bind: too small".into())),
            ("c".into(), Ok(Attached::PreviousSource)),
        ]);
        assert_eq!(attached.mounted, vec!["a".to_string(), "c".to_string()]);
        assert_eq!(
            attached.steps[1],
            "Dataset b could not be attached: its claim does not bind: too small; launched without it"
        );
        assert_eq!(
            attached.steps[2],
            "Dataset c: its source changed while another session of yours uses it; this session reads the previous source, the new one applies from your next session"
        );
        assert_eq!(mount_point("a"), "datasets/a");
    }
}
