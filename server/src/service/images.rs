//! Approved images: the editor images a launch may name, on top of each editor's configured
//! default. Admins add and retire them (audited); the kube runtime runs them. The local runtime
//! runs the editors installed on this machine, so it offers no choice.

use crate::service::admin::require_admin;
use crate::store::StoreError;
use app::domain::images::{self, ImageState, NewImage};
use app::domain::launch::{EditorKind, ImageChoice};
use app::domain::scan::{self, FormatProbe, ReportFormat};
use app::error::AppError;
use app::model::{ImageView, Viewer};

/// The largest report a scan may post (a CUDA image's Trivy JSON, descriptions and all, runs to
/// a few MiB; SARIF repeats each rule's text).
pub const MAX_REPORT_BYTES: usize = 32 * 1024 * 1024;

/// The approved editor images.
#[derive(Clone)]
pub struct Images {
    pub(in crate::service) config: std::sync::Arc<crate::config::Config>,
    pub(in crate::service) runtime: std::sync::Arc<dyn crate::runtime::Runtime>,
    pub(in crate::service) store: crate::store::Store,
}

impl Images {
    pub(in crate::service) fn new(handles: &super::handles::Handles) -> Images {
        Images {
            config: handles.config.clone(),
            runtime: handles.runtime.clone(),
            store: handles.store.clone(),
        }
    }
}

impl Images {
    /// Whether the runtime in use runs images (the kube runtime does).
    pub fn runs_images(&self) -> bool {
        self.runtime.runs_images()
    }

    /// Every image admins added, each with its newest scan and the policy's verdict now.
    async fn scanned_images(&self) -> Result<Vec<ImageView>, StoreError> {
        let mut images = self.store.images().await?;
        let mut scans = self.store.latest_scans().await?;
        let (policy, now) = (self.config.image_policy.policy(), self.store.now());
        for image in &mut images {
            image.scan = image.id.as_ref().and_then(|id| scans.remove(id));
            image.blocked =
                scan::verdict(&policy, image.scan.as_ref().map(|s| s.facts()), now).err();
        }
        Ok(images)
    }

    /// The images admins added and have not retired.
    pub(in crate::service) async fn approved_images(&self) -> Result<Vec<ImageView>, StoreError> {
        let mut images = self.scanned_images().await?;
        images.retain(|i| i.state == ImageState::Approved);
        Ok(images)
    }

    /// The approved images a launch may name; None where the runtime runs no images.
    pub(in crate::service) async fn image_choices(
        &self,
    ) -> Result<Option<Vec<ImageChoice>>, StoreError> {
        if !self.runs_images() {
            return Ok(None);
        }
        Ok(Some(
            self.approved_images()
                .await?
                .into_iter()
                .filter_map(|i| {
                    Some(ImageChoice {
                        id: i.id?,
                        editor: i.editor,
                        reference: i.reference,
                        blocked: i.blocked,
                    })
                })
                .collect(),
        ))
    }

    /// Whether `reference` is still an approved image of `editor` (a failing database: yes,
    /// since the launch was checked when it was made).
    pub(in crate::service) async fn image_still_approved(
        &self,
        editor: EditorKind,
        reference: &str,
    ) -> bool {
        // Its state only: the scan policy was checked when the launch was made.
        match self.store.images().await {
            Ok(images) => images.iter().any(|i| {
                i.state == ImageState::Approved && i.editor == editor && i.reference == reference
            }),
            Err(e) => {
                tracing::warn!(error = %e, "checking a session's image");
                true
            }
        }
    }
}

impl Images {
    /// What the launch form offers: the approved images the scan policy lets run (none on the
    /// local runtime), without who added them or their scans.
    pub async fn launch_images(&self) -> Result<Vec<ImageView>, AppError> {
        if !self.runs_images() {
            return Ok(Vec::new());
        }
        Ok(self
            .approved_images()
            .await?
            .into_iter()
            .filter(|i| i.blocked.is_none())
            .map(|i| ImageView {
                added_by: None,
                scan: None,
                ..i
            })
            .collect())
    }

    /// Every image: each editor's configured default first, then those admins added.
    pub async fn admin_images(&self, viewer: &Viewer) -> Result<Vec<ImageView>, AppError> {
        require_admin(viewer)?;
        // The configured defaults are the kube runtime's; listed elsewhere they would read as
        // images in use that no editor runs.
        let kinds = if self.runs_images() {
            EditorKind::ALL.to_vec()
        } else {
            Vec::new()
        };
        let defaults = kinds.into_iter().map(|editor| {
            let reference = self.config.kube.images.of(editor).to_string();
            ImageView {
                id: None,
                editor,
                pinned: images::is_pinned(&reference),
                reference,
                label: "default (configuration: kube.images)".into(),
                state: ImageState::Approved,
                added_by: None,
                created_at_ms: None,
                scan: None,
                blocked: None,
            }
        });
        Ok(defaults.chain(self.scanned_images().await?).collect())
    }

    pub async fn add_image(&self, viewer: &Viewer, new: &NewImage) -> Result<ImageView, AppError> {
        require_admin(viewer)?;
        let editor = EditorKind::parse(new.editor.trim()).ok_or_else(|| {
            AppError::Invalid(format!(
                "unknown editor `{}`; images run one of: {}",
                app::domain::encode::shown(&new.editor),
                EditorKind::ALL.map(EditorKind::as_str).join(", ")
            ))
        })?;
        let reference = images::check_reference(&new.reference).map_err(AppError::Invalid)?;
        let label = images::check_label(&new.label).map_err(AppError::Invalid)?;
        if reference == self.config.kube.images.of(editor) {
            return Err(AppError::Conflict(format!(
                "`{reference}` is {}'s configured default already",
                editor.label()
            )));
        }
        let id = self
            .store
            .add_image(editor, &reference, &label, &viewer.id)
            .await?;
        self.scanned_image(&id).await
    }

    async fn scanned_image(&self, id: &str) -> Result<ImageView, AppError> {
        self.scanned_images()
            .await?
            .into_iter()
            .find(|i| i.id.as_deref() == Some(id))
            .ok_or(AppError::NotFound)
    }

    /// Keeps a scanner's report on an added image: Trivy's JSON or a SARIF 2.1.0 log, told
    /// apart by their shape. The image comes back with the policy's verdict under the report.
    pub async fn post_scan(
        &self,
        viewer: &Viewer,
        id: &str,
        report: &[u8],
    ) -> Result<ImageView, AppError> {
        require_admin(viewer)?;
        let image = self.store.image(id).await?.ok_or(AppError::NotFound)?;
        let malformed = |e: serde_json::Error| {
            AppError::Invalid(format!(
                "the report is not JSON this server reads: {}",
                app::domain::encode::shown_up_to(&e.to_string(), 200)
            ))
        };
        let probe: FormatProbe = serde_json::from_slice(report).map_err(|e| {
            if e.is_data() {
                AppError::Invalid(scan::UNKNOWN_FORMAT.into())
            } else {
                malformed(e)
            }
        })?;
        let summary = match probe.format().map_err(AppError::Invalid)? {
            ReportFormat::Trivy => {
                scan::summarize_trivy(serde_json::from_slice(report).map_err(malformed)?)
            }
            ReportFormat::Sarif => {
                scan::summarize_sarif(serde_json::from_slice(report).map_err(malformed)?)
            }
        }
        .map_err(AppError::Invalid)?;
        scan::check_artifact(&summary, &image.reference).map_err(AppError::Invalid)?;
        if summary
            .scanned_at_ms
            .is_some_and(|at| at > self.store.now() + 86_400_000)
        {
            return Err(AppError::Invalid(
                "the report says it was made more than a day from now: check the scanner's clock"
                    .into(),
            ));
        }
        self.store
            .add_scan(id, &summary, &viewer.id)
            .await?
            .ok_or(AppError::NotFound)?;
        self.scanned_image(id).await
    }

    /// Approves or retires an added image. Sessions running a retired image keep it; new
    /// launches cannot name it.
    pub async fn set_image_state(
        &self,
        viewer: &Viewer,
        id: &str,
        state: ImageState,
    ) -> Result<ImageView, AppError> {
        require_admin(viewer)?;
        if state == ImageState::Approved {
            let image = self.scanned_image(id).await?;
            if let Some(why) = image.blocked {
                return Err(AppError::Conflict(format!(
                    "{} may not be approved: {why}",
                    image.label
                )));
            }
        }
        if !self.store.set_image_state(id, state, &viewer.id).await? {
            return Err(AppError::NotFound);
        }
        self.scanned_image(id).await
    }
}
