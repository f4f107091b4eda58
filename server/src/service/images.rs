//! Approved images: the editor images a launch may name, on top of each editor's configured
//! default. Admins add and retire them (audited); the kube runtime runs them. The local runtime
//! runs the editors installed on this machine, so it offers no choice.

use super::{Core, Images};
use crate::service::admin::require_admin;
use crate::store::StoreError;
use app::domain::images::{self, ImageState, NewImage};
use app::domain::launch::{EditorKind, ImageChoice};
use app::error::AppError;
use app::model::{ImageView, Viewer};

impl Core {
    /// Whether the runtime in use runs images (the kube runtime does).
    pub(in crate::service) fn runs_images(&self) -> bool {
        self.runtime.runs_images()
    }

    /// The images admins added and have not retired.
    pub(in crate::service) async fn approved_images(&self) -> Result<Vec<ImageView>, StoreError> {
        let mut images = self.store.images().await?;
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
        match self.approved_images().await {
            Ok(images) => images
                .iter()
                .any(|i| i.editor == editor && i.reference == reference),
            Err(e) => {
                tracing::warn!(error = %e, "checking a session's image");
                true
            }
        }
    }
}

impl Images {
    /// What the launch form offers: the approved images (none on the local runtime), without
    /// who added them.
    pub async fn launch_images(&self) -> Result<Vec<ImageView>, AppError> {
        if !self.runs_images() {
            return Ok(Vec::new());
        }
        Ok(self
            .approved_images()
            .await?
            .into_iter()
            .map(|i| ImageView {
                added_by: None,
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
            }
        });
        Ok(defaults.chain(self.store.images().await?).collect())
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
        self.store.image(&id).await?.ok_or(AppError::Internal)
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
        if !self.store.set_image_state(id, state, &viewer.id).await? {
            return Err(AppError::NotFound);
        }
        self.store.image(id).await?.ok_or(AppError::NotFound)
    }
}
