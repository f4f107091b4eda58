//! Promotion: a user marks a file of their workspace (a model, a notebook, a sample of data) to
//! be pushed to the production registry as an OCI artifact, with where it came from. An admin
//! approves it first where the configuration asks for that.
//!
//! The rules here are pure: what a request may name, and how a promotion's state moves.

use serde::{Deserialize, Serialize};

/// The longest workspace path a request may name (Linux's own limit).
pub const MAX_PATH_BYTES: usize = 4096;
/// The longest repository name the distribution spec promises registries accept.
pub const MAX_REPOSITORY_CHARS: usize = 255;
/// The artifact type every promotion's manifest declares.
pub const ARTIFACT_TYPE: &str = "application/vnd.gpu-sandbox.promotion.v1";

/// What a user asks for: which file, and under which name and tag it lands in the registry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PromotionRequest {
    /// Relative to the workspace, e.g. `models/resnet.safetensors`.
    pub path: String,
    /// The artifact's name under the user's part of the registry, e.g. `resnet`.
    pub name: String,
    /// e.g. `v1`; `latest` when absent.
    #[serde(default)]
    pub tag: Option<String>,
}

/// A request whose every field has been checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckedPromotion {
    /// Normal components only, joined by `/`.
    pub path: String,
    /// The full repository: the configured prefix, the user's name, the artifact's name.
    pub repository: String,
    pub tag: String,
    /// The file's media type, from its extension.
    pub media_type: &'static str,
}

impl PromotionRequest {
    /// Checks the request and places the artifact under `prefix` + `owner`, the user's own
    /// component (one per user: see `server::promotion::repository_component`), so that no
    /// user can overwrite another's artifacts.
    pub fn check(&self, prefix: &str, owner: &str) -> Result<CheckedPromotion, String> {
        let path = checked_path(&self.path)?;
        let name = self.name.trim();
        if name.is_empty() {
            return Err("name the artifact, e.g. `resnet`".into());
        }
        if !is_repository(name) {
            return Err(format!(
                "`{name}` is not a valid artifact name: use lowercase letters and digits, separated by `.`, `_`, `-` or `/`"
            ));
        }
        let repository = format!("{prefix}{owner}/{name}");
        if repository.chars().count() > MAX_REPOSITORY_CHARS {
            return Err(format!(
                "the artifact's full name `{repository}` is longer than {MAX_REPOSITORY_CHARS} characters"
            ));
        }
        let tag = match self.tag.as_deref().map(str::trim) {
            None | Some("") => "latest".to_string(),
            Some(tag) if is_tag(tag) => tag.to_string(),
            Some(tag) => {
                return Err(format!(
                    "`{tag}` is not a valid tag: up to 128 letters, digits, `_`, `.` or `-`, not starting with `.` or `-`"
                ));
            }
        };
        let media_type = media_type_of(&path);
        Ok(CheckedPromotion {
            path,
            repository,
            tag,
            media_type,
        })
    }
}

/// A workspace path: relative, with no `..`, `.` or empty parts, so that it can only name
/// something inside the workspace (links are checked where the file is opened).
pub fn checked_path(path: &str) -> Result<String, String> {
    let trimmed = path.trim();
    if trimmed.is_empty() {
        return Err("name the file to promote, relative to your workspace".into());
    }
    if trimmed.len() > MAX_PATH_BYTES {
        return Err(format!("the path is longer than {MAX_PATH_BYTES} bytes"));
    }
    if trimmed.contains('\0') {
        return Err("the path contains a NUL character".into());
    }
    let relative = trimmed.trim_start_matches("./");
    if relative.starts_with('/') {
        return Err("give the path relative to your workspace, without a leading `/`".into());
    }
    let parts: Vec<&str> = relative.split('/').filter(|p| !p.is_empty()).collect();
    if parts.is_empty() {
        return Err("name a file, not the workspace itself".into());
    }
    if parts.iter().any(|p| *p == ".." || *p == ".") {
        return Err("the path must stay inside your workspace: no `..` or `.` parts".into());
    }
    Ok(parts.join("/"))
}

/// A repository name by the distribution spec: path components of lowercase letters and
/// digits, separated within a component by `.`, `_`, `__` or dashes.
pub fn is_repository(name: &str) -> bool {
    !name.is_empty() && name.split('/').all(is_path_component)
}

pub fn is_path_component(part: &str) -> bool {
    let bytes = part.as_bytes();
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    if bytes.is_empty() || !alnum(bytes[0]) || !alnum(bytes[bytes.len() - 1]) {
        return false;
    }
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if alnum(b) {
            i += 1;
            continue;
        }
        // A separator: `.`, `_`, `__` or a run of `-`, always between alphanumerics.
        let run = bytes[i..].iter().take_while(|c| **c == b).count();
        let allowed = match b {
            b'.' => run == 1,
            b'_' => run <= 2,
            b'-' => true,
            _ => false,
        };
        if !allowed {
            return false;
        }
        i += run;
    }
    true
}

/// A tag by the distribution spec.
pub fn is_tag(tag: &str) -> bool {
    let bytes = tag.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 128
        && (bytes[0].is_ascii_alphanumeric() || bytes[0] == b'_')
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// The file's media type, as registries and tools such as ORAS show it.
pub fn media_type_of(path: &str) -> &'static str {
    let extension = path
        .rsplit_once('.')
        .map(|(_, e)| e.to_ascii_lowercase())
        .unwrap_or_default();
    match extension.as_str() {
        "ipynb" => "application/x-ipynb+json",
        "py" => "text/x-python",
        "json" => "application/json",
        "csv" => "text/csv",
        "txt" | "md" => "text/plain",
        "parquet" => "application/vnd.apache.parquet",
        "onnx" => "application/onnx",
        "safetensors" => "application/vnd.safetensors",
        "gz" | "tgz" => "application/gzip",
        "zip" => "application/zip",
        _ => "application/octet-stream",
    }
}

/// Where a promotion stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PromotionState {
    /// Waiting for an admin's decision.
    Pending,
    /// Approved (or needing no approval), waiting to be pushed.
    Approved,
    /// Being pushed now.
    Pushing,
    /// In the registry.
    Pushed,
    /// An admin said no.
    Rejected,
    /// The push failed; an admin may try again.
    Failed,
}

impl PromotionState {
    pub const EVERY: [PromotionState; 6] = [
        PromotionState::Pending,
        PromotionState::Approved,
        PromotionState::Pushing,
        PromotionState::Pushed,
        PromotionState::Rejected,
        PromotionState::Failed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            PromotionState::Pending => "pending",
            PromotionState::Approved => "approved",
            PromotionState::Pushing => "pushing",
            PromotionState::Pushed => "pushed",
            PromotionState::Rejected => "rejected",
            PromotionState::Failed => "failed",
        }
    }

    pub fn parse(text: &str) -> Option<PromotionState> {
        PromotionState::EVERY
            .into_iter()
            .find(|s| s.as_str() == text)
    }

    /// The state a new request starts in.
    pub fn initial(needs_approval: bool) -> PromotionState {
        if needs_approval {
            PromotionState::Pending
        } else {
            PromotionState::Approved
        }
    }

    /// Whether nothing more happens to it.
    pub fn is_final(self) -> bool {
        matches!(self, PromotionState::Pushed | PromotionState::Rejected)
    }

    /// The states an admin's decision moves a promotion out of; the store changes only a row
    /// still in one of them, so two admins deciding at once cannot both win.
    pub fn decidable(decision: Decision) -> &'static [PromotionState] {
        match decision {
            Decision::Approve => &[PromotionState::Pending],
            Decision::Reject => &[PromotionState::Pending, PromotionState::Failed],
            Decision::Retry => &[PromotionState::Failed],
        }
    }

    /// Where a decision leads.
    pub fn after(decision: Decision) -> PromotionState {
        match decision {
            Decision::Approve | Decision::Retry => PromotionState::Approved,
            Decision::Reject => PromotionState::Rejected,
        }
    }
}

/// What an admin decides about a promotion.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    Approve,
    Reject,
    /// Push a failed one again.
    Retry,
}

impl Decision {
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Approve => "approve",
            Decision::Reject => "reject",
            Decision::Retry => "retry",
        }
    }

    /// Why a decision cannot apply to a promotion in `state`.
    pub fn refusal(self, state: PromotionState) -> String {
        format!(
            "this promotion is {}; only {} ones can be {}",
            state.as_str(),
            PromotionState::decidable(self)
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(" or "),
            match self {
                Decision::Approve => "approved",
                Decision::Reject => "rejected",
                Decision::Retry => "retried",
            }
        )
    }
}

/// Annotations that say where an artifact came from: who, which session, which editor image,
/// and the file's checksum and name (`org.opencontainers.image.title`, which tools such as
/// ORAS use as the file name when pulling).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Provenance {
    pub user_name: String,
    pub session_id: String,
    /// The editor's image; its digest where the runtime knows one.
    pub image: String,
    pub sha256: String,
    pub path: String,
    /// RFC 3339.
    pub created: String,
    /// The admin who approved it; `None` where no approval was asked for.
    pub approved_by: Option<String>,
}

impl Provenance {
    /// The manifest's annotations, in a fixed order.
    pub fn manifest_annotations(&self) -> Vec<(&'static str, String)> {
        let mut annotations = vec![
            ("org.opencontainers.image.created", self.created.clone()),
            ("dev.gpu-sandbox.promotion.user", self.user_name.clone()),
            ("dev.gpu-sandbox.promotion.session", self.session_id.clone()),
            ("dev.gpu-sandbox.promotion.image", self.image.clone()),
            (
                "dev.gpu-sandbox.promotion.sha256",
                format!("sha256:{}", self.sha256),
            ),
            ("dev.gpu-sandbox.promotion.path", self.path.clone()),
        ];
        if let Some(admin) = &self.approved_by {
            annotations.push(("dev.gpu-sandbox.promotion.approved-by", admin.clone()));
        }
        annotations
    }

    /// The file's own annotation: its name, for tools that pull it back.
    pub fn title(&self) -> &str {
        self.path.rsplit('/').next().unwrap_or(&self.path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(path: &str, name: &str, tag: Option<&str>) -> PromotionRequest {
        PromotionRequest {
            path: path.into(),
            name: name.into(),
            tag: tag.map(Into::into),
        }
    }

    #[test]
    fn a_request_lands_under_the_users_own_name() {
        let checked = request("./models//resnet.safetensors", "vision/resnet", Some("v1"))
            .check("sandbox/", "alice.b")
            .unwrap();
        assert_eq!(checked.path, "models/resnet.safetensors");
        assert_eq!(checked.repository, "sandbox/alice.b/vision/resnet");
        assert_eq!(checked.tag, "v1");
        assert_eq!(checked.media_type, "application/vnd.safetensors");
        let untagged = request("nb.ipynb", "nb", None).check("", "bob").unwrap();
        assert_eq!(untagged.tag, "latest");
        assert_eq!(untagged.repository, "bob/nb");
        assert_eq!(untagged.media_type, "application/x-ipynb+json");
    }

    #[test]
    fn paths_cannot_leave_the_workspace() {
        for bad in [
            "",
            "  ",
            "/etc/passwd",
            "../x",
            "a/../../x",
            "a/./b",
            ".",
            "./",
            "a\0b",
        ] {
            assert!(checked_path(bad).is_err(), "{bad:?} was accepted");
        }
        assert!(checked_path(&"a".repeat(MAX_PATH_BYTES + 1)).is_err());
        assert_eq!(checked_path("data/sample.csv").unwrap(), "data/sample.csv");
        assert_eq!(checked_path("..hidden").unwrap(), "..hidden");
    }

    #[test]
    fn repository_names_follow_the_distribution_spec() {
        for good in [
            "a", "resnet", "a.b", "a_b", "a__b", "a--b", "x/y/z", "v2-large",
        ] {
            assert!(is_repository(good), "{good} was refused");
        }
        for bad in [
            "", "A", "a..b", "a___b", "-a", "a-", "a//b", "/a", "a/", "a b", "a:b",
        ] {
            assert!(!is_repository(bad), "{bad:?} was accepted");
        }
        let long = request("f", &"a".repeat(300), None).check("", "u");
        assert!(long.unwrap_err().contains("longer than 255"));
    }

    #[test]
    fn tags_follow_the_distribution_spec() {
        assert!(is_tag("v1.0-rc_2") && is_tag("_x") && is_tag(&"a".repeat(128)));
        for bad in ["", ".v", "-v", "v 1", "v/1", &"a".repeat(129)] {
            assert!(!is_tag(bad), "{bad:?} was accepted");
        }
        let err = request("f", "n", Some("-bad")).check("", "u").unwrap_err();
        assert!(err.contains("not a valid tag"), "{err}");
    }

    #[test]
    fn decisions_move_only_from_their_states() {
        assert_eq!(PromotionState::initial(true), PromotionState::Pending);
        assert_eq!(PromotionState::initial(false), PromotionState::Approved);
        assert_eq!(
            PromotionState::decidable(Decision::Approve),
            &[PromotionState::Pending]
        );
        assert!(PromotionState::decidable(Decision::Retry).contains(&PromotionState::Failed));
        assert!(!PromotionState::decidable(Decision::Reject).contains(&PromotionState::Pushed));
        assert_eq!(
            PromotionState::after(Decision::Reject),
            PromotionState::Rejected
        );
        assert_eq!(
            Decision::Approve.refusal(PromotionState::Pushed),
            "this promotion is pushed; only pending ones can be approved"
        );
        for state in PromotionState::EVERY {
            assert_eq!(PromotionState::parse(state.as_str()), Some(state));
        }
        assert!(PromotionState::Pushed.is_final() && !PromotionState::Failed.is_final());
    }

    #[test]
    fn provenance_names_who_where_and_what() {
        let provenance = Provenance {
            user_name: "alice".into(),
            session_id: "s1".into(),
            image: "jupyterlab (local)".into(),
            sha256: "ab".into(),
            path: "models/m.onnx".into(),
            created: "2026-12-01T00:00:00Z".into(),
            approved_by: Some("root".into()),
        };
        let annotations = provenance.manifest_annotations();
        assert!(annotations.contains(&("dev.gpu-sandbox.promotion.sha256", "sha256:ab".into())));
        assert!(annotations.contains(&("dev.gpu-sandbox.promotion.approved-by", "root".into())));
        assert_eq!(provenance.title(), "m.onnx");
    }
}
