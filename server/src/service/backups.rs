//! A user's workspace taken home and kept safe: exports, backups and restores.
//!
//! - **Export** (`GET /api/v1/workspace/export`, in `export.rs`) streams the workspace, or a
//!   folder or file of it, as a `.tar.gz` made while it is sent ([`crate::runtime::archive`]:
//!   tar at the lowest priority, killed if the client hangs up), one per user at a time, paced
//!   to `backups.export_bytes_per_second` and cut at `backups.export_max_seconds`. The path is
//!   checked by `app::domain::backups::workspace_part` (400 with the reason) and opened so that
//!   no link leads out of the workspace.
//! - **Backups** (`[backups]`, off by default) go to a restic repository
//!   ([`crate::runtime::restic`]), each workspace under its user's id, at the lowest priority,
//!   one workspace after another: on the schedule (the tick looks each pass whether the next
//!   time is due, by the service's clock) and when a user or an admin asks. After each backup
//!   the user's snapshots beyond the retention are forgotten and pruned. Each run's time and
//!   result is recorded per user (`Store::record_backup`), for the admin pages and `/metrics`.
//!   A repository is made only where none was ever opened (`backup_repositories`): one that
//!   goes missing or is damaged later fails every run with a clear message, and nothing of the
//!   workspaces is touched.
//! - **Restore** puts a file, a folder or the whole workspace of a snapshot into a new folder
//!   `restored-<date>` inside the workspace, never over a current file
//!   ([`crate::runtime::restic::restore_into`]).
//! - Runs of one user do not overlap (a second is a 409); prunes take the repository alone
//!   (a lock here; restic's own lock between servers).
//! - Who may: the owner, with `read` for exports and the list and `sessions` to back up and
//!   restore; admins for anyone (`/api/v1/admin/users/{id}/backups…`). Backups and restores are
//!   audited (`backup.run`, `backup.restore`), admins' as theirs.

mod cluster;
mod export;

pub use export::WorkspaceExport;

use crate::runtime::restic::{self, Repository, RepositoryError, Restic};
use crate::store::{BackupOutcome, BackupRecord};
use app::domain::backups as rules;
use app::domain::scope::Scope;
use app::error::AppError;
use app::model::{BackupStatus, BackupsView, RestoreDone, SnapshotView, Viewer};
use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// What the backups area keeps between requests.
#[derive(Default)]
pub struct BackupState {
    /// Users with an export under way.
    exports: Arc<Mutex<HashSet<String>>>,
    /// Users with a backup or restore under way.
    running: Arc<Mutex<HashSet<String>>>,
    /// Backups, restores and lists share the repository; a prune takes it alone.
    pub(in crate::service) repository: tokio::sync::RwLock<()>,
    /// When the next scheduled pass is due (the service's clock); None until the first tick.
    next_pass: Mutex<Option<i64>>,
    /// A scheduled pass is under way.
    passing: Arc<std::sync::atomic::AtomicBool>,
    /// Each user's last run as recorded, read at the first tick and kept as runs end: what
    /// the admins' Settings page shows without a query of its own.
    last_runs: Mutex<std::collections::BTreeMap<String, BackupStatus>>,
}

/// A user's run slot, given back when the run ends.
struct RunSlot {
    user_id: String,
    running: Arc<Mutex<HashSet<String>>>,
}

impl Drop for RunSlot {
    fn drop(&mut self) {
        self.running.lock().expect("runs").remove(&self.user_id);
    }
}

/// The account a backup operation is for.
struct Owner {
    id: String,
    name: String,
}

/// Exports, backups and restores of users' workspaces.
#[derive(Clone)]
pub struct Backups {
    pub(in crate::service) background: tokio::runtime::Handle,
    pub(in crate::service) backup: Arc<super::backups::BackupState>,
    pub(in crate::service) config: Arc<crate::config::Config>,
    pub(in crate::service) runtime: Arc<dyn crate::runtime::Runtime>,
    pub(in crate::service) store: crate::store::Store,
}

impl Backups {
    pub(in crate::service) fn new(handles: &super::handles::Handles) -> Backups {
        Backups {
            background: handles.background.clone(),
            backup: handles.backup.clone(),
            config: handles.config.clone(),
            runtime: handles.runtime.clone(),
            store: handles.store.clone(),
        }
    }
}

impl Backups {
    /// The dashboard's workspace card: the caller's backups, or why they could not be read;
    /// None where this server can neither download nor back up workspaces.
    pub async fn workspace_card(&self, viewer: &Viewer) -> Option<Result<BackupsView, String>> {
        if self.runtime.workspace_snapshots().is_none() && !self.runtime.exports_elsewhere() {
            self.runtime.workspace_dir(&viewer.name)?;
        }
        Some(self.backups(viewer).await.map_err(|e| e.to_string()))
    }

    /// The caller's snapshots and last backup.
    pub async fn backups(&self, viewer: &Viewer) -> Result<BackupsView, AppError> {
        viewer.scopes.require(Scope::Read)?;
        self.view_of(&Self::own(viewer)).await
    }

    /// Backs the caller's workspace up now.
    pub async fn back_up_now(&self, viewer: &Viewer) -> Result<BackupStatus, AppError> {
        viewer.scopes.require(Scope::Sessions)?;
        self.back_up_for(viewer, &Self::own(viewer)).await
    }

    /// Restores `path` (None: all) of the caller's snapshot `id` into `restored-<date>/`.
    pub async fn restore(
        &self,
        viewer: &Viewer,
        id: &str,
        path: Option<&str>,
    ) -> Result<RestoreDone, AppError> {
        viewer.scopes.require(Scope::Sessions)?;
        self.restore_for(viewer, &Self::own(viewer), id, path).await
    }

    /// A user's snapshots and last backup, for an admin.
    pub async fn admin_backups(
        &self,
        viewer: &Viewer,
        user_id: &str,
    ) -> Result<BackupsView, AppError> {
        let owner = self.admin_owner(viewer, user_id).await?;
        self.view_of(&owner).await
    }

    /// Backs a user's workspace up now, as an admin.
    pub async fn admin_back_up(
        &self,
        viewer: &Viewer,
        user_id: &str,
    ) -> Result<BackupStatus, AppError> {
        let owner = self.admin_owner(viewer, user_id).await?;
        self.back_up_for(viewer, &owner).await
    }

    /// Restores a user's snapshot into their workspace, as an admin.
    pub async fn admin_restore(
        &self,
        viewer: &Viewer,
        user_id: &str,
        id: &str,
        path: Option<&str>,
    ) -> Result<RestoreDone, AppError> {
        let owner = self.admin_owner(viewer, user_id).await?;
        self.restore_for(viewer, &owner, id, path).await
    }

    /// Every account's last backup, for the admin pages.
    pub async fn admin_backup_status(
        &self,
        viewer: &Viewer,
    ) -> Result<Vec<BackupStatus>, AppError> {
        super::admin::require_admin(viewer)?;
        Ok(self
            .store
            .backup_records()
            .await?
            .into_iter()
            .map(status_of)
            .collect())
    }

    fn own(viewer: &Viewer) -> Owner {
        Owner {
            id: viewer.id.clone(),
            name: viewer.name.clone(),
        }
    }

    async fn admin_owner(&self, viewer: &Viewer, user_id: &str) -> Result<Owner, AppError> {
        super::admin::require_admin(viewer)?;
        let user = self
            .store
            .user_by_id(user_id)
            .await?
            .ok_or(AppError::NotFound)?;
        Ok(Owner {
            id: user.id,
            name: user.name,
        })
    }

    /// The repository, where backups are on and restic is installed.
    fn repository(&self) -> Result<Restic, AppError> {
        let config = &self.config;
        if !config.backups.enabled {
            return Err(AppError::Unavailable(
                "backups are off on this server (an admin turns them on with [backups] enabled = true)"
                    .into(),
            ));
        }
        if !Restic::installed() {
            return Err(AppError::Unavailable(
                "backups need restic, which is not installed on this server".into(),
            ));
        }
        Ok(Restic::new(
            &config.backups.repository_in(&config.data_dir),
            &config.backups.password_file_in(&config.data_dir),
            &config.data_dir.join("cache").join("restic"),
        ))
    }

    fn workspace_of(&self, owner: &Owner) -> Result<PathBuf, AppError> {
        self.runtime.workspace_dir(&owner.name).ok_or_else(|| {
            AppError::Unavailable(
                "backups read workspaces on this machine; this server's runtime keeps them elsewhere"
                    .into(),
            )
        })
    }

    /// Opens the repository, making it (and its password file) only where none was ever used.
    async fn open(&self, repo: &Restic) -> Result<(), RepositoryError> {
        let config = &self.config;
        let place = config.backups.repository_in(&config.data_dir);
        let used = self
            .store
            .backup_repository_used(&place)
            .await
            .map_err(|e| RepositoryError::Failed(format!("the database: {e}")))?;
        let password = config.backups.password_file_in(&config.data_dir);
        if !used && config.backups.password_file.as_os_str().is_empty() && !password.exists() {
            write_new_password(&password)?;
        }
        repo.open(!used).await?;
        if !used {
            self.store
                .note_backup_repository(&place)
                .await
                .map_err(|e| RepositoryError::Failed(format!("the database: {e}")))?;
        }
        Ok(())
    }

    fn take_run_slot(&self, owner: &Owner) -> Result<RunSlot, AppError> {
        let running = self.backup.running.clone();
        if !running.lock().expect("runs").insert(owner.id.clone()) {
            return Err(AppError::Conflict(
                "a backup or restore of this workspace is under way; wait for it to finish".into(),
            ));
        }
        Ok(RunSlot {
            user_id: owner.id.clone(),
            running,
        })
    }

    async fn view_of(&self, owner: &Owner) -> Result<BackupsView, AppError> {
        if let Some(snapshots) = self.runtime.workspace_snapshots() {
            return self.cluster_view(snapshots, owner).await;
        }
        let config = &self.config.backups;
        let last = self
            .store
            .backup_record(&owner.id)
            .await?
            .filter(|r| r.attempted_at.is_some())
            .map(status_of);
        let place = config.repository_in(&self.config.data_dir);
        // No repository yet (nothing was ever backed up there): no snapshots, and no error.
        let snapshots = if config.enabled && self.store.backup_repository_used(&place).await? {
            let repo = self.repository()?;
            let _shared = self.backup.repository.read().await;
            let mut list = match repo.snapshots(&owner.id).await {
                Ok(list) => list,
                Err(e) => return Err(self.shown(e, owner, "listing snapshots")),
            };
            rules::newest_first(&mut list, |s| (s.time_ms, s.id.as_str()));
            list.into_iter()
                .map(|s| SnapshotView {
                    short_id: s.id.chars().take(8).collect(),
                    id: s.id,
                    taken_at_ms: s.time_ms,
                })
                .collect()
        } else {
            Vec::new()
        };
        Ok(BackupsView {
            enabled: config.enabled,
            schedule: config.schedule().words(),
            kept: config.retention().words(),
            last,
            snapshots,
        })
    }

    async fn back_up_for(&self, viewer: &Viewer, owner: &Owner) -> Result<BackupStatus, AppError> {
        if let Some(snapshots) = self.runtime.workspace_snapshots() {
            return self.cluster_back_up_for(snapshots, viewer, owner).await;
        }
        let repo = self.repository()?;
        let workspace = self.workspace_of(owner)?;
        if !workspace.is_dir() {
            return Err(AppError::Invalid(
                "there is nothing to back up yet: the workspace is made at the first launch".into(),
            ));
        }
        let slot = self.take_run_slot(owner)?;
        let result = self.back_up(&repo, owner, workspace).await;
        drop(slot);
        let _ = self
            .store
            .audit(
                Some(&viewer.id),
                "backup.run",
                &format!("user:{}", owner.name),
                match &result {
                    Ok(_) => "ok".into(),
                    Err(e) => format!("failed: {e}"),
                }
                .as_str(),
            )
            .await;
        match result {
            Ok(()) => Ok(self
                .store
                .backup_record(&owner.id)
                .await?
                .map(status_of)
                .ok_or(AppError::NotFound)?),
            Err(e) => Err(self.shown(e, owner, "backing up")),
        }
    }

    /// One backup of `owner`'s workspace, recorded, then the retention applied.
    async fn back_up(
        &self,
        repo: &Restic,
        owner: &Owner,
        workspace: PathBuf,
    ) -> Result<(), RepositoryError> {
        let at = self.store.now();
        let ran = async {
            self.open(repo).await?;
            let _shared = self.backup.repository.read().await;
            repo.backup(&owner.id, &workspace, at).await
        }
        .await;
        let failure = ran.as_ref().err().map(ToString::to_string);
        let recorded = match (&ran, failure.as_deref()) {
            (Ok(done), _) => BackupOutcome::Ok {
                snapshot_id: &done.snapshot_id,
                files: done.files,
                bytes: done.bytes,
            },
            (Err(_), why) => BackupOutcome::Failed(why.unwrap_or_default()),
        };
        if let Err(e) = self.store.record_backup(&owner.id, at, recorded).await {
            tracing::error!(error = %e, user = %owner.name, "recording a backup");
        }
        if let Ok(Some(record)) = self.store.backup_record(&owner.id).await {
            self.remember(status_of(record));
        }
        let done = ran?;
        tracing::info!(user = %owner.name, snapshot = %done.snapshot_id, files = done.files, bytes = done.bytes, added = done.bytes_added, "workspace backed up");
        let _alone = self.backup.repository.write().await;
        if let Err(e) = repo
            .forget(&owner.id, self.config.backups.retention())
            .await
        {
            // The snapshot is made; the prune is tried again after the next backup.
            tracing::warn!(error = %e, user = %owner.name, "applying the backup retention");
        }
        Ok(())
    }

    async fn restore_for(
        &self,
        viewer: &Viewer,
        owner: &Owner,
        id: &str,
        path: Option<&str>,
    ) -> Result<RestoreDone, AppError> {
        if let Some(snapshots) = self.runtime.workspace_snapshots() {
            return self
                .cluster_restore_for(snapshots, viewer, owner, id, path)
                .await;
        }
        if !rules::is_snapshot_id(id) {
            return Err(AppError::Invalid(
                "a snapshot id is 8 to 64 hexadecimal digits, as the list of snapshots shows it"
                    .into(),
            ));
        }
        let part = rules::workspace_part(path).map_err(AppError::Invalid)?;
        let repo = self.repository()?;
        let workspace = self.workspace_of(owner)?;
        let slot = self.take_run_slot(owner)?;
        let result = async {
            self.open(&repo).await?;
            let _shared = self.backup.repository.read().await;
            // Only the owner's own snapshots: another's id answers like a missing one.
            let snapshot = repo
                .snapshots(&owner.id)
                .await?
                .into_iter()
                .find(|s| rules::names_snapshot(id, &s.id));
            let Some(snapshot) = snapshot else {
                return Ok(None);
            };
            let folder = restic::restore_into(
                &repo,
                &workspace,
                &snapshot.id,
                part.as_deref(),
                snapshot.time_ms,
            )
            .await?;
            Ok(Some((snapshot.id, folder)))
        }
        .await;
        drop(slot);
        self.restored(viewer, owner, part, result).await
    }

    /// A restore's end as its caller is told it, the restic repository's or the cluster's
    /// snapshots' alike: the snapshot and folder it went to, audited; or why it did not.
    async fn restored(
        &self,
        viewer: &Viewer,
        owner: &Owner,
        part: Option<String>,
        result: Result<Option<(String, String)>, RepositoryError>,
    ) -> Result<RestoreDone, AppError> {
        let (snapshot_id, folder) = match result {
            Ok(Some(done)) => done,
            Ok(None) => return Err(AppError::NotFound),
            Err(RepositoryError::NotInSnapshot(part)) => {
                return Err(AppError::Invalid(format!(
                    "`{part}` is not in that snapshot"
                )));
            }
            Err(e) => return Err(self.shown(e, owner, "restoring")),
        };
        let what = part.clone().unwrap_or_else(|| "everything".into());
        let _ = self
            .store
            .audit(
                Some(&viewer.id),
                "backup.restore",
                &format!("user:{}", owner.name),
                &format!(
                    "{what} of snapshot {} into {folder}",
                    &snapshot_id[..8.min(snapshot_id.len())]
                ),
            )
            .await;
        Ok(RestoreDone {
            snapshot_id,
            folder,
            path: part,
        })
    }

    /// A repository error as the caller is told it: the repository's state in words, logged.
    fn shown(&self, error: RepositoryError, owner: &Owner, doing: &str) -> AppError {
        match error {
            RepositoryError::Io(e) => {
                tracing::error!(error = %e, user = %owner.name, "{doing}");
                AppError::Internal
            }
            RepositoryError::Locked => AppError::Conflict(error.to_string()),
            RepositoryError::NoRoom => AppError::Unavailable(error.to_string()),
            other => {
                tracing::error!(error = %other, user = %owner.name, "{doing}");
                AppError::Unavailable(format!(
                    "{doing} failed: {}",
                    match other {
                        RepositoryError::Missing(_) => "the backup repository is missing; the admins have been told (nothing of your workspace was changed)".to_string(),
                        RepositoryError::Unreadable(_) => "the backup repository cannot be read; the admins have been told (nothing of your workspace was changed)".to_string(),
                        other => format!("{other} (nothing of your workspace was changed)"),
                    }
                ))
            }
        }
    }

    /// A departed user's last backup, before their storage is removed: nothing to do where
    /// backups are off or the workspace is gone; an error keeps the storage for another try.
    pub(in crate::service) async fn last_backup(
        &self,
        user_id: &str,
        user_name: &str,
    ) -> Result<(), String> {
        if !self.config.backups.enabled {
            return Ok(());
        }
        let owner = Owner {
            id: user_id.to_string(),
            name: user_name.to_string(),
        };
        if let Some(snapshots) = self.runtime.workspace_snapshots() {
            return self.cluster_last_backup(snapshots, &owner).await;
        }
        let repo = self.repository().map_err(|e| e.to_string())?;
        let workspace = match self.workspace_of(&owner) {
            Ok(workspace) if workspace.is_dir() => workspace,
            _ => return Ok(()),
        };
        let _slot = self.take_run_slot(&owner).map_err(|e| e.to_string())?;
        self.back_up(&repo, &owner, workspace)
            .await
            .map_err(|e| e.to_string())
    }

    /// Every workspace backed up, one after another (the schedule's pass).
    pub async fn back_up_everyone(&self) {
        if let Some(snapshots) = self.runtime.workspace_snapshots() {
            return self.cluster_back_up_everyone(snapshots).await;
        }
        let Ok(repo) = self.repository() else {
            return;
        };
        let records = match self.store.backup_records().await {
            Ok(records) => records,
            Err(e) => {
                tracing::warn!(error = %e, "listing the workspaces to back up");
                return;
            }
        };
        for record in records {
            let owner = Owner {
                id: record.user_id,
                name: record.user_name,
            };
            let Ok(workspace) = self.workspace_of(&owner) else {
                return;
            };
            if !workspace.is_dir() {
                continue;
            }
            let Ok(_slot) = self.take_run_slot(&owner) else {
                continue;
            };
            if let Err(e) = self.back_up(&repo, &owner, workspace).await {
                tracing::warn!(error = %e, user = %owner.name, "a scheduled backup failed");
            }
        }
    }

    /// The schedule's look, each tick of the server's own work: starts a pass when one is due.
    pub(in crate::service) fn tick(&self) {
        let backups = &self.config.backups;
        let here = self.runtime.workspace_dir("").is_some();
        if !backups.enabled || !(here || self.runtime.workspace_snapshots().is_some()) {
            return;
        }
        let now = self.store.now();
        let schedule = backups.schedule();
        let mut next = self.backup.next_pass.lock().expect("next pass");
        match *next {
            None => {
                *next = Some(schedule.next_after(now));
                let area = self.clone();
                self.background.spawn(async move {
                    if let Ok(records) = area.store.backup_records().await {
                        for record in records.into_iter().filter(|r| r.attempted_at.is_some()) {
                            area.remember(status_of(record));
                        }
                    }
                });
            }
            Some(at) if now >= at => {
                *next = Some(schedule.next_after(now));
                let passing = self.backup.passing.clone();
                if !passing.swap(true, std::sync::atomic::Ordering::SeqCst) {
                    let area = self.clone();
                    self.background.spawn(async move {
                        area.back_up_everyone().await;
                        passing.store(false, std::sync::atomic::Ordering::SeqCst);
                    });
                }
            }
            Some(_) => {}
        }
    }
}

impl Backups {
    fn remember(&self, status: BackupStatus) {
        self.backup
            .last_runs
            .lock()
            .expect("last runs")
            .insert(status.user_name.clone(), status);
    }
}

/// The admins' Settings page's "Last backups": each user's last run, failures first; none
/// where backups are off.
pub(in crate::service) fn last_runs_section(
    config: &crate::config::Config,
    backup: &BackupState,
) -> Option<app::model::SettingsSection> {
    if !config.backups.enabled {
        return None;
    }
    let runs = backup.last_runs.lock().expect("last runs");
    let mut entries: Vec<(bool, String, String)> = runs
        .values()
        .map(|r| {
            let at = |ms: Option<i64>| {
                ms.map_or("never".into(), |ms| {
                    format!("{} UTC", app::domain::dates::minute(ms))
                })
            };
            let words = if r.ok {
                format!(
                    "backed up {} ({} files, {})",
                    at(r.attempted_at_ms),
                    r.files.unwrap_or(0),
                    app::domain::pool::format_mib(r.bytes.unwrap_or(0) / (1024 * 1024))
                )
            } else {
                format!(
                    "FAILED {}: {}; last good backup {}",
                    at(r.attempted_at_ms),
                    r.message,
                    at(r.succeeded_at_ms)
                )
            };
            (r.ok, r.user_name.clone(), words)
        })
        .collect();
    entries.sort();
    if entries.is_empty() {
        entries.push((true, "Workspaces".into(), "none backed up yet".into()));
    }
    Some(app::model::SettingsSection {
        title: "Last backups".into(),
        entries: entries.into_iter().map(|(_, k, v)| (k, v)).collect(),
    })
}

/// The record as the doors show it.
fn status_of(r: BackupRecord) -> BackupStatus {
    BackupStatus {
        user_id: r.user_id,
        user_name: r.user_name,
        attempted_at_ms: r.attempted_at,
        ok: r.ok,
        message: r.message,
        succeeded_at_ms: r.succeeded_at,
        snapshot_id: r.snapshot_id,
        files: r.files.map(|n| n as u64),
        bytes: r.bytes.map(|n| n as u64),
    }
}

/// A new random repository password, readable by this account only.
fn write_new_password(path: &std::path::Path) -> Result<(), RepositoryError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    let secret = format!(
        "{}{}{}\n",
        crate::util::new_id(),
        crate::util::new_id(),
        crate::util::new_id()
    );
    file.write_all(secret.as_bytes())?;
    file.sync_all()?;
    Ok(())
}
