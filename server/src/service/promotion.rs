//! The promotion path: a user marks a file of their workspace from a running session (`POST
//! /api/v1/sessions/{id}/promotions`, or "Promote" in the session's toolbar); it is copied aside at
//! once, approved by an admin where `promotion.require_approval` asks for it (the default), then
//! pushed to the production registry as an OCI artifact with its provenance ([`crate::registry`]).
//!
//! - What is approved is what is pushed: the request copies the file to `data_dir/promotions/<id>`,
//!   hashing it on the way; the row records the SHA-256 and size, and the push uploads the copy, so
//!   editing the file afterwards changes nothing. The copy is deleted once pushed or rejected. At
//!   most 10 promotions per user may wait at once, and files are capped (`promotion.max_file_mib`),
//!   since each holds disk.
//! - Paths cannot leave the workspace: `app::domain::promotion` accepts only relative paths of
//!   normal parts, and the runtime copies the file ([`crate::runtime::workspace_file`]): on one
//!   machine opened so that no link, however swapped in, reaches the server's own files; on a
//!   cluster read through the session's running editor pod (its exec API), where a link out of
//!   the volume is refused the same way and nothing of the server is within reach anyway. Only
//!   regular files are copied; the provenance is the same either way.
//! - Names are the user's own: the repository is `<repository_prefix><user>/<name>`, with the
//!   user's name made into one path component one-to-one ([`repository_component`]). A lossy
//!   mapping would have let "Alice" write into alice's repositories. So no user can overwrite
//!   another's artifacts, and the registry account needs push rights below the prefix only. Names
//!   and tags follow the distribution spec's grammar and are checked before anything is copied.
//! - States (`pending → approved → pushing → pushed`, or `rejected`, or `failed → approved` on
//!   retry) are `app::domain::promotion`'s. Each change is one conditional `UPDATE … WHERE state IN
//!   (…)` with its audit line in the same transaction, so two admins deciding at once, or two
//!   servers claiming one push, cannot both win. A push is claimed with a time, which a running
//!   upload renews each minute; one silent for an hour (its server died) is taken over by whichever
//!   server looks next. Every server looks at start and then each minute, so approved pushes
//!   survive a restart.
//! - Who may: the session's owner (scope `sessions`) requests; the owner or an admin reads, others
//!   get 404; only admins (`require_admin`) decide. Audited: `promotion.request`, `.approve`,
//!   `.reject`, `.retry`, `.push`, `.fail`. Without a registry configured, a request is a 503
//!   naming `promotion.registry`.
//!
//! Limits: on a cluster the file is read while the session runs (its editor pod does the
//! reading; an ended session answers 409). The copies live in `data_dir/promotions`: with several
//! replicas that folder is one they all mount (the chart's `config.promotion.sharedClaim`,
//! required there), or the push fails on another with "the copy is gone" (`tests/it/replicas.rs`).
//! The limit of 10 is checked before the copy, not under a lock, so requests sent
//! at once can pass it together. A hard link in the workspace to a file the server can read
//! passes the check; on one machine editors run as the server's own account anyway
//! (`runtime::local`), so that is no new power.

use crate::registry::{Artifact, Registry};
use crate::runtime::workspace_file::{CopyError, WorkspaceFile};
use crate::store::NewPromotion;
use app::domain::dates;
use app::domain::listing::{ListQuery, Listing, Page};
use app::domain::promotion::{Decision, PromotionRequest, PromotionState, Provenance};
use app::domain::scope::Scope;
use app::error::AppError;
use app::model::{PromotionView, Viewer};
use std::path::PathBuf;
use std::sync::Arc;

/// A push silent this long is taken over by whichever server looks next (its server died).
const STALE_PUSH_MS: i64 = 60 * 60 * 1000;
/// Promotions one user may have waiting (pending, approved, pushing or failed) at once: each
/// holds a copy of its file on the server's disk.
const MAX_WAITING: usize = 10;

/// Each user's staging lock on this server; an entry goes when nobody holds or waits for it.
fn staging_lock(user_id: &str) -> StagingGuard {
    let mut locks = STAGING.lock().unwrap_or_else(|e| e.into_inner());
    let lock = locks.entry(user_id.to_string()).or_default().clone();
    StagingGuard {
        user_id: user_id.to_string(),
        lock,
    }
}

static STAGING: std::sync::LazyLock<
    std::sync::Mutex<std::collections::HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
> = std::sync::LazyLock::new(Default::default);

struct StagingGuard {
    user_id: String,
    lock: Arc<tokio::sync::Mutex<()>>,
}

impl StagingGuard {
    async fn lock(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.lock.lock().await
    }
}

impl Drop for StagingGuard {
    fn drop(&mut self) {
        let mut locks = STAGING.lock().unwrap_or_else(|e| e.into_inner());
        // Ours and the map's: nobody else holds or waits for it.
        if Arc::strong_count(&self.lock) == 2 {
            locks.remove(&self.user_id);
        }
    }
}
/// The longest reason an admin may give.
const MAX_MESSAGE_CHARS: usize = 500;

pub use crate::config::promotion::PromotionConfig;

/// Names that [`repository_component`] writes as a digest begin with this, and no name is
/// kept as it is that begins with it.
const DIGESTED: &str = "x--";

/// A user's name as one repository component, one-to-one, so that no user can write into
/// another's part of the registry: a name that is a valid component already is kept; any other
/// ("Alice", "a.b@c") becomes `x--` and 16 hex digits of its SHA-256.
pub fn repository_component(user_name: &str) -> String {
    if app::domain::promotion::is_path_component(user_name) && !user_name.starts_with(DIGESTED) {
        return user_name.to_string();
    }
    use sha2::Digest;
    let digest = sha2::Sha256::digest(user_name.as_bytes());
    let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    format!("{DIGESTED}{hex}")
}

/// Promoting a file from a session to the production registry.
#[derive(Clone)]
pub struct Promotions {
    pub(in crate::service) background: tokio::runtime::Handle,
    pub(in crate::service) config: Arc<crate::config::Config>,
    pub(in crate::service) lifecycle: Arc<super::lifecycle::Lifecycle>,
    pub(in crate::service) registry: Option<Arc<Result<crate::registry::Registry, String>>>,
    pub(in crate::service) runtime: Arc<dyn crate::runtime::Runtime>,
    pub(in crate::service) store: crate::store::Store,
}

impl Promotions {
    pub(in crate::service) fn new(
        handles: &super::handles::Handles,
        lifecycle: Arc<super::lifecycle::Lifecycle>,
    ) -> Promotions {
        Promotions {
            background: handles.background.clone(),
            config: handles.config.clone(),
            lifecycle,
            registry: handles.registry.clone(),
            runtime: handles.runtime.clone(),
            store: handles.store.clone(),
        }
    }
}

impl Promotions {
    /// Where promotions keep their copies until pushed.
    fn staged(&self, id: &str) -> PathBuf {
        self.config.data_dir.join("promotions").join(id)
    }

    fn registry(&self) -> Result<&Registry, AppError> {
        if !self.config.promotion.enabled() {
            return Err(AppError::Unavailable(
                "promotion is not set up on this server: an admin sets `promotion.registry`".into(),
            ));
        }
        match self.registry.as_deref() {
            Some(Ok(registry)) => Ok(registry),
            Some(Err(e)) => {
                tracing::error!(error = %e, "the registry client");
                Err(AppError::Internal)
            }
            None => Err(AppError::Internal),
        }
    }

    /// Marks a file of the session's workspace for promotion.
    pub async fn request_promotion(
        &self,
        viewer: &Viewer,
        session_id: &str,
        request: &PromotionRequest,
    ) -> Result<PromotionView, AppError> {
        viewer.scopes.require(Scope::Sessions)?;
        let session = self.lifecycle.owned_record(viewer, session_id).await?;
        self.registry()?;
        if session.ready_at.is_none() {
            return Err(AppError::Conflict(
                "this session's editor never started, so it made no files to promote".into(),
            ));
        }
        let settings = &self.config.promotion;
        let checked = request
            .check(
                &settings.repository_prefix,
                &repository_component(&viewer.name),
            )
            .map_err(AppError::Invalid)?;
        // One copy at a time per user on this server: requests at once do not each stage a
        // file of up to `max_file_mib` before the count refuses all but a few.
        let staging = staging_lock(&viewer.id);
        let _staging = staging.lock().await;
        let waiting = self
            .store
            .promotions_of(&viewer.id, 200)
            .await?
            .iter()
            .filter(|p| !p.state.is_final())
            .count();
        if waiting >= MAX_WAITING {
            return Err(AppError::QuotaExceeded(format!(
                "you have {waiting} promotions waiting; at most {MAX_WAITING} may wait at once"
            )));
        }
        let id = crate::util::new_id();
        let into = self.staged(&id);
        // Only a running editor is handed over: a runtime that reads through it (kube) needs
        // one, and one that reads this machine's disk ignores it.
        let handle = session
            .runtime_handle
            .as_deref()
            .filter(|_| session.state == app::domain::session::SessionState::Ready);
        let file = WorkspaceFile {
            user_name: &viewer.name,
            handle,
            relative: &checked.path,
            into: &into,
            max_bytes: settings.max_file_mib * 1024 * 1024,
        };
        let copied = match self.runtime.copy_workspace_file(&file).await {
            Ok(copied) => copied,
            Err(e) => {
                let _ = tokio::fs::remove_file(&into).await;
                return Err(match e {
                    CopyError::Refused(why) => AppError::Invalid(why),
                    CopyError::TooLarge(why) => AppError::TooLarge(why),
                    CopyError::NotNow(why) => AppError::Conflict(why),
                    CopyError::Unavailable(why) => AppError::Unavailable(why),
                    CopyError::Io(e) => {
                        tracing::error!(error = %e, "copying a file for promotion");
                        AppError::Internal
                    }
                });
            }
        };
        let state = PromotionState::initial(settings.require_approval);
        let record = NewPromotion {
            id: id.clone(),
            user_id: viewer.id.clone(),
            session_id: session.id.clone(),
            path: checked.path,
            repository: checked.repository,
            tag: checked.tag,
            media_type: checked.media_type.to_string(),
            size_bytes: copied.bytes,
            sha256: copied.sha256,
            image: session
                .image
                .clone()
                .unwrap_or_else(|| self.runtime.editor_image(session.editor)),
            state,
        };
        let disk_mib = self
            .config
            .default_limits()
            .with(&self.store.quota_overrides(&viewer.id).await?)
            .max_disk_mib;
        let limit = crate::store::WaitingLimit {
            count: MAX_WAITING as u64,
            bytes: disk_mib.saturating_mul(1024 * 1024),
        };
        if let Err(e) = self.store.insert_promotion(&record, limit).await {
            let _ = tokio::fs::remove_file(&into).await;
            return Err(e.into());
        }
        if state == PromotionState::Approved {
            self.spawn_push(id.clone());
        }
        self.promotion_view(&id).await
    }

    /// The viewer's promotions, newest first.
    pub async fn promotions(&self, viewer: &Viewer) -> Result<Vec<PromotionView>, AppError> {
        viewer.scopes.require(Scope::Read)?;
        let mut list = self.store.promotions_of(&viewer.id, 50).await?;
        for p in &mut list {
            self.add_reference(p);
        }
        Ok(list)
    }

    /// One promotion, for its owner or an admin.
    pub async fn promotion(&self, viewer: &Viewer, id: &str) -> Result<PromotionView, AppError> {
        viewer.scopes.require(Scope::Read)?;
        let view = self.promotion_view(id).await?;
        let admin = crate::service::admin::require_admin(viewer).is_ok();
        if view.user_id != viewer.id && !admin {
            return Err(AppError::NotFound);
        }
        Ok(view)
    }

    pub async fn admin_promotions(
        &self,
        viewer: &Viewer,
        query: &ListQuery,
    ) -> Result<Page<PromotionView>, AppError> {
        crate::service::admin::require_admin(viewer)?;
        let mut page = self
            .store
            .admin_promotions(&Listing::promotions(query)?)
            .await?;
        for p in &mut page.items {
            self.add_reference(p);
        }
        Ok(page)
    }

    /// An admin approves, rejects or retries a promotion.
    pub async fn decide_promotion(
        &self,
        viewer: &Viewer,
        id: &str,
        decision: Decision,
        message: Option<&str>,
    ) -> Result<PromotionView, AppError> {
        crate::service::admin::require_admin(viewer)?;
        let message = message.map(str::trim).filter(|m| !m.is_empty());
        if message.is_some_and(|m| {
            m.chars().count() > MAX_MESSAGE_CHARS || m.chars().any(char::is_control)
        }) {
            return Err(AppError::Invalid(format!(
                "the reason must be at most {MAX_MESSAGE_CHARS} characters on one line"
            )));
        }
        let current = self.promotion_view(id).await?;
        if !PromotionState::decidable(decision).contains(&current.state)
            || !self
                .store
                .decide_promotion(id, &viewer.id, decision, message)
                .await?
        {
            let now = self.promotion_view(id).await?;
            return Err(AppError::Conflict(decision.refusal(now.state)));
        }
        match decision {
            Decision::Reject => {
                let _ = tokio::fs::remove_file(self.staged(id)).await;
            }
            Decision::Approve | Decision::Retry => self.spawn_push(id.to_string()),
        }
        self.promotion_view(id).await
    }

    async fn promotion_view(&self, id: &str) -> Result<PromotionView, AppError> {
        let mut view = self.store.promotion(id).await?.ok_or(AppError::NotFound)?;
        self.add_reference(&mut view);
        Ok(view)
    }

    fn add_reference(&self, view: &mut PromotionView) {
        if let (Some(digest), Some(Ok(registry))) = (&view.digest, self.registry.as_deref()) {
            view.reference = Some(registry.reference(&view.repository, digest));
        }
    }

    fn spawn_push(&self, id: String) {
        let this = self.clone();
        self.background
            .spawn(async move { this.push_promotion(&id).await });
    }

    /// Pushes what waits: approved promotions, and pushes whose server went quiet.
    pub async fn resume_promotions(&self) {
        if !self.config.promotion.enabled() {
            return;
        }
        match self
            .store
            .pushable_promotions(self.store.now() - STALE_PUSH_MS)
            .await
        {
            Ok(ids) => {
                for id in ids {
                    self.push_promotion(&id).await;
                }
            }
            Err(e) => tracing::warn!(error = %e, "finding promotions to push"),
        }
    }

    /// Claims the promotion and pushes it; records the digest or why it failed.
    async fn push_promotion(&self, id: &str) {
        let Ok(registry) = self.registry() else {
            return;
        };
        let promotion = match self
            .store
            .claim_promotion(id, self.store.now() - STALE_PUSH_MS)
            .await
        {
            Ok(Some(p)) => p,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(error = %e, promotion = id, "claiming a promotion");
                return;
            }
        };
        let provenance = Provenance {
            user_name: promotion.user_name.clone(),
            session_id: promotion.session_id.clone(),
            image: promotion.image.clone(),
            sha256: promotion.sha256.clone(),
            path: promotion.path.clone(),
            created: dates::rfc3339(promotion.requested_at_ms),
            approved_by: promotion.decided_by.clone(),
        };
        let file = self.staged(id);
        let artifact = Artifact {
            repository: &promotion.repository,
            tag: &promotion.tag,
            file: &file,
            size: promotion.size_bytes,
            sha256: &promotion.sha256,
            media_type: &promotion.media_type,
            provenance: &provenance,
        };
        let push = registry.push(&artifact);
        tokio::pin!(push);
        // A long upload says it is alive, so that no server takes it over as abandoned.
        let mut alive = tokio::time::interval(std::time::Duration::from_secs(60));
        alive.tick().await;
        let outcome = loop {
            tokio::select! {
                outcome = &mut push => break outcome,
                _ = alive.tick() => {
                    if let Err(e) = self.store.touch_promotion(id).await {
                        tracing::warn!(error = %e, promotion = id, "marking a push alive");
                    }
                }
            }
        };
        let recorded = match &outcome {
            Ok(digest) => {
                tracing::info!(promotion = id, %digest, repository = %promotion.repository, "promoted");
                self.store.finish_promotion(id, Ok(digest)).await
            }
            Err(e) => {
                tracing::warn!(promotion = id, error = %e, "promotion push failed");
                self.store
                    .finish_promotion(id, Err(&e.user_message()))
                    .await
            }
        };
        if let Err(e) = recorded {
            tracing::error!(error = %e, promotion = id, "recording a push");
        } else if outcome.is_ok() {
            let _ = tokio::fs::remove_file(&file).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_user_name_has_a_component_of_its_own() {
        assert_eq!(repository_component("e2e-target"), "e2e-target");
        assert_eq!(repository_component("alice"), "alice");
        // Names that a lossy mapping would merge stay apart.
        let names = [
            "alice",
            "Alice",
            "ALICE",
            "a.b",
            "a_b",
            "a-b",
            "x@y",
            "x.y",
            "Ünï Côde",
            "___",
        ];
        let components: std::collections::HashSet<String> =
            names.iter().map(|n| repository_component(n)).collect();
        assert_eq!(components.len(), names.len(), "{components:?}");
        for name in names {
            assert!(
                app::domain::promotion::is_repository(&repository_component(name)),
                "{name}"
            );
        }
        // A name shaped like a digested one is digested too, so it cannot pose as another.
        let posing = repository_component("Alice");
        assert_ne!(repository_component(&posing), posing);
        assert!(repository_component("Alice").starts_with("x--"));
    }
}
