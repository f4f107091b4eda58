//! Shared datasets: admins register a folder of this machine (one server) or a claim (a cluster)
//! and who may use it, audited; every session of a permitted user finds it read-only at
//! `~/datasets/<name>`, as decided when its editor starts (`Datasets::launch_datasets`): a dataset
//! added while a session runs appears in the next one, and one whose folder has gone is a launch
//! step, not a failed editor. The rules (names, paths, who may use what, the steps' words) are
//! `app::domain::datasets`; this checks what only the machine can tell (the folder exists, is a
//! folder, and stays clear of the data directory) and keeps the records.

use crate::runtime::DatasetMount;
use crate::service::admin::require_admin;
use crate::store::{DatasetRecord, DatasetWrite, StoreError};
use app::domain::datasets::{
    self, DatasetChange, DatasetUse, DatasetView, NewDataset, Place, Users,
};
use app::domain::scope::Scope;
use app::error::AppError;
use app::model::Viewer;
use std::path::Path;

/// The host folder `path` (checked as written) resolved, when it exists, is a folder and stays
/// clear of the data directory; else the reason.
fn resolve_folder(path: &str, data_dir: &Path) -> Result<String, String> {
    let shown = app::domain::encode::shown(path);
    let meta = std::fs::metadata(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => format!("`{shown}` does not exist on this server"),
        std::io::ErrorKind::PermissionDenied => {
            format!("`{shown}` cannot be read by the server")
        }
        _ => format!("`{shown}` cannot be looked at on this server"),
    })?;
    if !meta.is_dir() {
        return Err(format!("`{shown}` is not a directory"));
    }
    let real = std::fs::canonicalize(path)
        .map_err(|_| format!("`{shown}` cannot be looked at on this server"))?;
    let data_dir = std::fs::canonicalize(data_dir).unwrap_or_else(|_| data_dir.to_path_buf());
    let real_text = real.to_string_lossy().into_owned();
    if let Some(why) = datasets::overlap_with_data_dir(&real_text, &data_dir.to_string_lossy()) {
        return Err(why);
    }
    Ok(real_text)
}

/// Whether a dataset's place is there now for this server's runtime: a host folder is looked
/// at (one server), a claim is the cluster's to find; one of the other runtime's kind (left
/// from before the runtime changed) is not.
fn present(place: &Place, on_cluster: bool) -> bool {
    match (place, on_cluster) {
        (Place::Path(path), false) => Path::new(path).is_dir(),
        (Place::Claim(_), true) => true,
        _ => false,
    }
}

fn view_of(record: DatasetRecord, on_cluster: bool) -> DatasetView {
    let (path, claim) = match &record.place {
        Place::Path(path) => (Some(path.clone()), None),
        Place::Claim(claim) => (None, Some(claim.clone())),
    };
    let missing = !present(&record.place, on_cluster);
    DatasetView {
        users: if record.everyone {
            Users::Everyone
        } else {
            Users::Named(record.users.into_iter().map(|(_, name)| name).collect())
        },
        id: record.id,
        name: record.name,
        description: record.description,
        path,
        claim,
        added_by: record.added_by,
        created_at_ms: record.created_at,
        missing,
    }
}

/// The shared datasets and who may use them.
#[derive(Clone)]
pub struct Datasets {
    pub(in crate::service) config: std::sync::Arc<crate::config::Config>,
    pub(in crate::service) kube: Option<std::sync::Arc<crate::runtime::kube::KubeRuntime>>,
    pub(in crate::service) lifecycle: std::sync::Arc<super::lifecycle::Lifecycle>,
    pub(in crate::service) runtime: std::sync::Arc<dyn crate::runtime::Runtime>,
    pub(in crate::service) store: crate::store::Store,
}

impl Datasets {
    pub(in crate::service) fn new(
        handles: &super::handles::Handles,
        lifecycle: std::sync::Arc<super::lifecycle::Lifecycle>,
    ) -> Datasets {
        Datasets {
            config: handles.config.clone(),
            kube: handles.kube.clone(),
            lifecycle,
            runtime: handles.runtime.clone(),
            store: handles.store.clone(),
        }
    }
}

impl Datasets {
    /// Editors run on a cluster: a dataset is a claim there, a folder here.
    fn on_cluster(&self) -> bool {
        self.kube.is_some() || self.config.runtime == crate::config::RuntimeKind::Kube
    }

    /// The datasets `user_id` may use, by name.
    pub(in crate::service) async fn datasets_of(
        &self,
        user_id: &str,
    ) -> Result<Vec<DatasetRecord>, StoreError> {
        let mut all = self.store.datasets().await?;
        all.retain(|d| {
            let ids = d.user_ids();
            datasets::Permit {
                everyone: d.everyone,
                user_ids: &ids,
            }
            .allows(user_id)
        });
        Ok(all)
    }

    /// What the editor of `session_id` (a launch of `user_id`) mounts, decided now, with a step
    /// saying so and one for each dataset whose folder is gone; kept for the session's page.
    pub(in crate::service) async fn launch_datasets(
        &self,
        session_id: &str,
        user_id: &str,
    ) -> Vec<DatasetMount> {
        let usable = match self.datasets_of(user_id).await {
            Ok(usable) => usable,
            Err(e) => {
                tracing::warn!(session = session_id, error = %e, "reading the datasets; launching without them");
                return Vec::new();
            }
        };
        if usable.is_empty() {
            return Vec::new();
        }
        if !self.runtime.mounts_datasets() {
            self.lifecycle
                .step(
                    session_id,
                    "Datasets are not mounted: editors on this server run without a sandbox",
                    40,
                )
                .await;
            return Vec::new();
        }
        if let Some(kube) = &self.kube {
            let user_name = match self.store.user_by_id(user_id).await {
                Ok(Some(user)) => user.name,
                Ok(None) => return Vec::new(),
                Err(e) => {
                    tracing::warn!(session = session_id, error = %e, "reading the user; launching without datasets");
                    return Vec::new();
                }
            };
            return self
                .attach_on_cluster(kube, session_id, &user_name, usable)
                .await;
        }
        let on_cluster = self.on_cluster();
        let looked = tokio::task::spawn_blocking(move || {
            usable
                .into_iter()
                .map(|d| {
                    let here = present(&d.place, on_cluster);
                    (d, here)
                })
                .collect::<Vec<_>>()
        })
        .await
        .unwrap_or_default();
        let plan = datasets::plan_mounts(
            &looked
                .iter()
                .map(|(d, here)| (d.name.clone(), *here))
                .collect::<Vec<_>>(),
        );
        self.record_plan(session_id, &plan).await;
        looked
            .into_iter()
            .filter(|(_, here)| *here)
            .map(|(d, _)| DatasetMount {
                name: d.name,
                place: d.place,
            })
            .collect()
    }

    /// On a cluster: each dataset's read-only volume and claim made in the user's namespace
    /// and bound (`runtime/kube/datasets.rs`); one that cannot be is a step naming it and why.
    /// A launch's dataset steps, and what it mounted, kept on the session.
    async fn record_plan(&self, session_id: &str, plan: &datasets::MountPlan) {
        for step in &plan.steps {
            self.lifecycle.step(session_id, step, 40).await;
        }
        if let Err(e) = self
            .store
            .record_session_datasets(session_id, &plan.mounted)
            .await
        {
            tracing::warn!(session = session_id, error = %e, "recording a session's datasets");
        }
    }

    async fn attach_on_cluster(
        &self,
        kube: &crate::runtime::kube::KubeRuntime,
        session_id: &str,
        user_name: &str,
        usable: Vec<DatasetRecord>,
    ) -> Vec<DatasetMount> {
        use crate::runtime::kube::datasets::Wanted;
        let wanted: Vec<Wanted> = usable
            .iter()
            .filter_map(|d| match &d.place {
                Place::Claim(source) => Some(Wanted {
                    name: d.name.clone(),
                    source: source.clone(),
                }),
                Place::Path(_) => None,
            })
            .collect();
        let mut attached = kube.attach_datasets(user_name, &wanted).await;
        for d in &usable {
            if let Place::Path(_) = d.place {
                attached.push((
                    d.name.clone(),
                    Err("it is a folder of one server, not a cluster's storage".into()),
                ));
            }
        }
        let plan = datasets::plan_attached(&attached);
        self.record_plan(session_id, &plan).await;
        usable
            .into_iter()
            .filter(|d| plan.mounted.contains(&d.name))
            .map(|d| DatasetMount {
                name: d.name,
                place: d.place,
            })
            .collect()
    }

    /// Whether `user_id` has datasets: their editor is then started for them, with the
    /// datasets, not taken pre-started (whose sandbox was made without them).
    pub(in crate::service) async fn has_datasets(&self, user_id: &str) -> bool {
        match self.store.may_use_a_dataset(user_id).await {
            Ok(some) => some,
            Err(e) => {
                tracing::warn!(user = user_id, error = %e, "reading the datasets");
                false
            }
        }
    }

    /// A dataset's fields checked, its place looked at: the write and the user names for the
    /// audit line.
    async fn checked(
        &self,
        name: &str,
        description: &str,
        path: Option<&str>,
        claim: Option<&str>,
        users: &Users,
    ) -> Result<(String, String, Place, bool, Vec<String>, String), AppError> {
        let name = datasets::check_name(name).map_err(AppError::Invalid)?;
        let description = datasets::check_description(description).map_err(AppError::Invalid)?;
        let place =
            datasets::check_place(path, claim, self.on_cluster()).map_err(AppError::Invalid)?;
        let place = match place {
            Place::Path(path) => {
                let data_dir = self.config.data_dir.clone();
                let resolved =
                    tokio::task::spawn_blocking(move || resolve_folder(&path, &data_dir))
                        .await
                        .map_err(|_| AppError::Internal)?
                        .map_err(AppError::Invalid)?;
                Place::Path(resolved)
            }
            Place::Claim(source) => {
                self.known_source(&source).map_err(AppError::Invalid)?;
                Place::Claim(source)
            }
        };
        let (everyone, user_ids, names) = match users {
            Users::Everyone => (true, Vec::new(), String::new()),
            Users::Named(given) => {
                let given = datasets::check_user_names(given).map_err(AppError::Invalid)?;
                let found = self.store.users_named(&given).await?;
                let known: Vec<String> = found.iter().map(|(_, n)| n.clone()).collect();
                datasets::unknown_users(&given, &known).map_err(AppError::Invalid)?;
                (
                    false,
                    found.into_iter().map(|(id, _)| id).collect(),
                    known.join(", "),
                )
            }
        };
        Ok((name, description, place, everyone, user_ids, names))
    }

    /// A cluster's dataset names one of the configured sources (`[kube.dataset_sources]`).
    fn known_source(&self, source: &str) -> Result<(), String> {
        let sources = &self.config.kube.dataset_sources;
        if sources.contains_key(source) {
            return Ok(());
        }
        let known: Vec<&str> = sources.keys().map(String::as_str).collect();
        Err(format!(
            "`{}` is not a dataset source of this server; an operator adds it to kube.dataset_sources (an NFS export or a CSI volume){}",
            app::domain::encode::shown(source),
            if known.is_empty() {
                "; none is configured".to_string()
            } else {
                format!("; configured: {}", known.join(", "))
            }
        ))
    }

    async fn dataset_view(&self, id: &str) -> Result<DatasetView, AppError> {
        let record = self.store.dataset(id).await?.ok_or(AppError::NotFound)?;
        let on_cluster = self.on_cluster();
        tokio::task::spawn_blocking(move || view_of(record, on_cluster))
            .await
            .map_err(|_| AppError::Internal)
    }
}

fn name_conflict(e: StoreError) -> AppError {
    match e {
        StoreError::Duplicate(_) => {
            AppError::Invalid("that name is taken by another dataset; choose another".into())
        }
        other => other.into(),
    }
}

impl Datasets {
    /// Whether a dataset is a claim (editors run on a cluster) rather than a folder here.
    pub fn takes_claims(&self) -> bool {
        self.on_cluster()
    }

    /// The datasets the caller may use, and where their sessions find them.
    pub async fn usable(&self, viewer: &Viewer) -> Result<Vec<DatasetUse>, AppError> {
        viewer.scopes.require(Scope::Read).map_err(AppError::from)?;
        Ok(self
            .datasets_of(&viewer.id)
            .await?
            .into_iter()
            .map(|d| DatasetUse {
                mounted_at: format!("~/{}", datasets::mount_point(&d.name)),
                name: d.name,
                description: d.description,
            })
            .collect())
    }

    /// Every dataset, with who may use it and whether its folder is there now.
    pub async fn admin_datasets(&self, viewer: &Viewer) -> Result<Vec<DatasetView>, AppError> {
        require_admin(viewer)?;
        let records = self.store.datasets().await?;
        let on_cluster = self.on_cluster();
        tokio::task::spawn_blocking(move || {
            records
                .into_iter()
                .map(|r| view_of(r, on_cluster))
                .collect()
        })
        .await
        .map_err(|_| AppError::Internal)
    }

    /// Registers a dataset. A 400 names what is wrong: the name taken or malformed, the folder
    /// missing, not a folder or overlapping the data directory, a user unknown.
    pub async fn add(&self, viewer: &Viewer, new: &NewDataset) -> Result<DatasetView, AppError> {
        require_admin(viewer)?;
        let (name, description, place, everyone, user_ids, names) = self
            .checked(
                &new.name,
                &new.description,
                new.path.as_deref(),
                new.claim.as_deref(),
                &new.users,
            )
            .await?;
        let write = DatasetWrite {
            name: &name,
            description: &description,
            place: &place,
            everyone,
            user_ids: &user_ids,
        };
        let id = self
            .store
            .add_dataset(&write, &names, &viewer.id)
            .await
            .map_err(name_conflict)?;
        self.dataset_view(&id).await
    }

    /// Changes a dataset: what the change gives replaces what was. Sessions running keep what
    /// they mounted; the next launch mounts what is registered then.
    pub async fn change(
        &self,
        viewer: &Viewer,
        id: &str,
        change: &DatasetChange,
    ) -> Result<DatasetView, AppError> {
        require_admin(viewer)?;
        let was = self.store.dataset(id).await?.ok_or(AppError::NotFound)?;
        // A new place replaces the old one whole (a path or a claim).
        let (path, claim) = match (&change.path, &change.claim, &was.place) {
            (None, None, Place::Path(path)) => (Some(path.clone()), None),
            (None, None, Place::Claim(claim)) => (None, Some(claim.clone())),
            (path, claim, _) => (path.clone(), claim.clone()),
        };
        let users = change.users.clone().unwrap_or_else(|| {
            if was.everyone {
                Users::Everyone
            } else {
                Users::Named(was.users.iter().map(|(_, n)| n.clone()).collect())
            }
        });
        let (name, description, place, everyone, user_ids, names) = self
            .checked(
                change.name.as_deref().unwrap_or(&was.name),
                change.description.as_deref().unwrap_or(&was.description),
                path.as_deref(),
                claim.as_deref(),
                &users,
            )
            .await?;
        let write = DatasetWrite {
            name: &name,
            description: &description,
            place: &place,
            everyone,
            user_ids: &user_ids,
        };
        if !self
            .store
            .update_dataset(id, &write, &names, &viewer.id)
            .await
            .map_err(name_conflict)?
        {
            return Err(AppError::NotFound);
        }
        self.dataset_view(id).await
    }

    /// Removes a dataset: the next launches go without it.
    pub async fn remove(&self, viewer: &Viewer, id: &str) -> Result<(), AppError> {
        require_admin(viewer)?;
        if !self.store.delete_dataset(id, &viewer.id).await? {
            return Err(AppError::NotFound);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_folder_must_exist_be_a_folder_and_stay_clear_of_the_data_directory() {
        let root = std::env::temp_dir().join(format!("datasets-{}", crate::util::new_id()));
        let data_dir = root.join("data");
        let folder = root.join("shared/imagenet");
        std::fs::create_dir_all(data_dir.join("workspaces")).unwrap();
        std::fs::create_dir_all(&folder).unwrap();
        std::fs::write(root.join("file"), "x").unwrap();
        let text = |p: &Path| p.to_string_lossy().into_owned();
        assert_eq!(
            resolve_folder(&text(&folder), &data_dir),
            Ok(text(&std::fs::canonicalize(&folder).unwrap()))
        );
        let missing = resolve_folder(&text(&root.join("gone")), &data_dir).unwrap_err();
        assert!(missing.contains("does not exist"), "{missing}");
        let file = resolve_folder(&text(&root.join("file")), &data_dir).unwrap_err();
        assert!(file.contains("is not a directory"), "{file}");
        let inside = resolve_folder(&text(&data_dir.join("workspaces")), &data_dir).unwrap_err();
        assert!(
            inside.contains("inside the server's data directory"),
            "{inside}"
        );
        let above = resolve_folder(&text(&root), &data_dir).unwrap_err();
        assert!(
            above.contains("holds the server's data directory"),
            "{above}"
        );
        // A link into the data directory is refused by where it leads.
        std::os::unix::fs::symlink(data_dir.join("workspaces"), root.join("link")).unwrap();
        let linked = resolve_folder(&text(&root.join("link")), &data_dir).unwrap_err();
        assert!(linked.contains("inside"), "{linked}");
        std::fs::remove_dir_all(&root).unwrap();
    }
    #[test]
    fn a_place_counts_only_on_its_own_runtime() {
        let here = std::env::temp_dir().to_string_lossy().into_owned();
        assert!(present(&Place::Path(here.clone()), false));
        assert!(
            !present(&Place::Path(here), true),
            "a folder is not a pod's"
        );
        assert!(!present(&Place::Path("/no/such/folder".into()), false));
        assert!(present(&Place::Claim("c".into()), true));
        assert!(
            !present(&Place::Claim("c".into()), false),
            "a claim is not a folder"
        );
    }
}
