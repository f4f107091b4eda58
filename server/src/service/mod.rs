//! The application layer: every rule about who may do what to which session lives here.
//! The pages (server functions) and the REST API are two thin doors to these functions.
//! May import every folder but `http`, `boot` and `cli`, and `app::*`.

pub mod accounts;
pub mod admin;
#[cfg(test)]
mod area_check;
pub mod backups;
pub mod datasets;
mod departed;
pub mod events;
mod follow;
pub mod guard;
mod handles;
pub mod images;
mod launch;
mod lifecycle;
pub mod metrics;
mod parking;
pub mod promotion;
pub mod reconcile;
pub mod routes;
pub mod sessions;
pub mod workers;

pub use accounts::{Accounts, NewToken, confirmed};
pub use admin::Admin;
pub use backups::Backups;
pub use datasets::Datasets;
pub use guard::Guard;
pub use images::Images;
pub use promotion::Promotions;
pub use routes::Access;
pub use sessions::Sessions;
pub use workers::Workers;

use crate::config::Config;
use crate::identity::auth::{self};
use crate::runtime::Runtime;
use crate::runtime::gpu::Enforcement;
use crate::runtime::kube::KubeRuntime;
use crate::store::{Store, StoreError};
use app::domain::credits;
use app::domain::pool::GpuSpec;
use app::error::AppError;
use handles::Handles;
use launch::Launcher;
use lifecycle::Lifecycle;
use std::sync::Arc;

/// How long the readiness check waits for the database.
const READY_WITHIN: std::time::Duration = std::time::Duration::from_secs(1);
/// Below it the data directory counts as full: SQLite's next page, a workspace's next save,
/// would fail.
const MIN_FREE_BYTES: u64 = 256 * 1024;

impl From<StoreError> for AppError {
    fn from(error: StoreError) -> AppError {
        match error {
            StoreError::NotFound(_) => AppError::NotFound,
            StoreError::Duplicate(what) => AppError::Conflict(format!("{what} already exists")),
            StoreError::InsufficientCredits { balance, needed } => {
                AppError::InsufficientCredits(format!(
                    "Not enough credits: this launch holds {} and your balance is {}.",
                    credits::with_unit(needed),
                    credits::format(balance)
                ))
            }
            StoreError::Quota(message) => AppError::QuotaExceeded(message),
            StoreError::LastAdmin => AppError::Conflict(
                "that would leave no admin who can sign in; make someone else an admin first"
                    .into(),
            ),
            StoreError::Transition(_) | StoreError::Conflict => AppError::Conflict(
                "the session changed meanwhile; reload to see where it is".into(),
            ),
            other if other.is_full() => {
                tracing::error!(error = %other, "the database's disk is full");
                AppError::StorageFull
            }
            other if other.is_unreachable() => {
                tracing::warn!(error = %other, "the database is unreachable");
                AppError::DatabaseUnavailable
            }
            other => {
                tracing::error!(error = %other, "store");
                AppError::Internal
            }
        }
    }
}

/// Who asks for `/metrics`: a scraper with the configured `metrics.token`, or an admin.
pub enum MetricsCaller<'a> {
    Token(&'a str),
    Viewer(&'a app::model::Viewer),
}

/// What the doors hold: the rules by area, and nothing that skips them.
pub struct Service {
    handles: Handles,
    exporter: metrics::Exporter,
    pub sessions: Sessions,
    pub accounts: Accounts,
    pub guard: Guard,
    pub admin: Admin,
    pub images: Images,
    pub datasets: Datasets,
    pub promotions: Promotions,
    pub access: Access,
    pub backups: Backups,
}

impl Service {
    /// A service on `runtime`, with the GPUs found and how their slices are held.
    pub fn new(
        config: Config,
        store: Store,
        runtime: Arc<dyn Runtime>,
        gpus: Vec<GpuSpec>,
        enforcement: Enforcement,
    ) -> Service {
        Self::of(Handles::new(
            config,
            store,
            runtime,
            None,
            gpus,
            enforcement,
        ))
    }

    /// A service on Kubernetes: its reconciler keeps the cluster and the database in step.
    pub fn on_kube(
        config: Config,
        store: Store,
        kube: Arc<KubeRuntime>,
        gpus: Vec<GpuSpec>,
        enforcement: Enforcement,
    ) -> Service {
        let runtime: Arc<dyn Runtime> = kube.clone();
        Self::of(Handles::new(
            config,
            store,
            runtime,
            Some(kube),
            gpus,
            enforcement,
        ))
    }

    fn of(handles: Handles) -> Service {
        let lifecycle = Arc::new(Lifecycle::new(&handles));
        let warm = Arc::new(guard::WarmPool::new(&handles, lifecycle.clone()));
        let images = Images::new(&handles);
        let datasets = Datasets::new(&handles, lifecycle.clone());
        let launcher = Arc::new(Launcher::new(
            &handles,
            datasets.clone(),
            images.clone(),
            lifecycle.clone(),
            warm.clone(),
        ));
        let accounts = Accounts::new(&handles);
        let access = Access::new(&handles);
        let backups = Backups::new(&handles);
        Service {
            sessions: Sessions::new(
                &handles,
                images.clone(),
                launcher.clone(),
                lifecycle.clone(),
                warm.clone(),
            ),
            admin: Admin::new(&handles, accounts.clone(), lifecycle.clone()),
            guard: Guard::new(
                &handles,
                access.clone(),
                backups.clone(),
                datasets.clone(),
                launcher,
                lifecycle.clone(),
                warm,
            ),
            promotions: Promotions::new(&handles, lifecycle),
            exporter: metrics::Exporter::new(&handles),
            accounts,
            access,
            backups,
            images,
            datasets,
            handles,
        }
    }

    /// The configuration the server runs with.
    pub fn config(&self) -> &Config {
        &self.handles.config
    }

    /// Now, by the service's clock.
    pub fn now(&self) -> i64 {
        self.handles.store.now()
    }

    /// The database did not answer its last look: what needs it is answered 503 at once.
    pub fn database_down(&self) -> bool {
        self.handles.store.database_down()
    }

    /// Told when the database stops or starts answering.
    pub fn database_watch(&self) -> tokio::sync::watch::Receiver<bool> {
        self.handles.store.database_watch()
    }

    /// The store of sign-in sessions, for the doors' session layer.
    pub fn sign_in_sessions(&self) -> crate::store::HttpSessionStore {
        crate::store::HttpSessionStore::new(self.handles.store.clone())
    }

    /// Whether this server can serve: its database answers, within a second, and its data
    /// directory has room to write.
    pub async fn ready(&self) -> Result<(), AppError> {
        if crate::util::free_bytes(&self.handles.config.data_dir)
            .is_some_and(|free| free < MIN_FREE_BYTES)
        {
            tracing::error!(data_dir = %self.handles.config.data_dir.display(), "the data directory's disk is full");
            return Err(AppError::StorageFull);
        }
        match tokio::time::timeout(READY_WITHIN, self.handles.store.count_users()).await {
            Ok(answer) => answer.map(|_| ()).map_err(AppError::from),
            Err(_) => {
                tracing::warn!("the database did not answer the readiness check within a second");
                Err(AppError::DatabaseUnavailable)
            }
        }
    }

    /// The counters the proxy adds to as it serves.
    pub fn metrics(&self) -> &metrics::Metrics {
        &self.handles.metrics
    }

    /// `/metrics` for `viewer`, or the scraper holding `metrics.token`: the OpenMetrics text.
    pub async fn metrics_text(&self, scraper: MetricsCaller<'_>) -> Result<String, AppError> {
        match scraper {
            MetricsCaller::Token(token) => {
                let configured = &self.handles.config.metrics.token;
                if configured.is_empty() || !auth::same_secret(token, configured) {
                    return Err(AppError::Unauthenticated);
                }
            }
            MetricsCaller::Viewer(viewer) => admin::require_admin(viewer)?,
        }
        Ok(self.exporter.metrics_text().await?)
    }

    /// Flips to true when the server begins to shut down; long streams end on it.
    pub fn shutting_down(&self) -> tokio::sync::watch::Receiver<bool> {
        self.handles.shutdown.subscribe()
    }
}
