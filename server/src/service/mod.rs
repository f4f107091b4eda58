//! The application layer: every rule about who may do what to which session lives here.
//! The pages (server functions) and the REST API are two thin doors to these functions.
//! May import every folder but `http`, `boot` and `cli`, and `app::*`.

pub mod accounts;
pub mod admin;
pub mod backups;
pub mod datasets;
mod departed;
pub mod events;
mod follow;
pub mod guard;
pub mod images;
pub mod metrics;
pub mod promotion;
pub mod reconcile;
pub mod routes;
pub mod sessions;
pub mod workers;

pub use accounts::{NewToken, confirmed};
pub use workers::Workers;

use crate::config::Config;
use crate::identity::auth::{self, Authenticator};
use crate::runtime::Runtime;
use crate::runtime::gpu::Enforcement;
use crate::runtime::kube::KubeRuntime;
use crate::store::{Store, StoreError};
use app::domain::credits;
use app::domain::pool::GpuSpec;
use app::error::AppError;
use events::EventHub;
use routes::RouteTable;
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

/// The handles every area works with: the configuration, the store, the runtime, the caches
/// and the server's own signals. Its fields belong to this module's areas only: no door reaches
/// the store, or anything else, past the rules.
pub struct Core {
    pub(in crate::service) config: Config,
    pub(in crate::service) store: Store,
    pub(in crate::service) runtime: Arc<dyn Runtime>,
    /// The same runtime when it is the kube one: the reconciler's handle, given at boot.
    pub(in crate::service) kube: Option<Arc<KubeRuntime>>,
    pub(in crate::service) auth: Authenticator,
    pub(in crate::service) events: EventHub,
    pub(in crate::service) routes: RouteTable,
    pub(in crate::service) gpus: Vec<GpuSpec>,
    /// The configured prices, parsed once.
    pub(in crate::service) prices: app::domain::pricing::PriceList,
    pub(in crate::service) enforcement: Enforcement,
    /// Flips to true when the server begins to shut down; long streams end on it.
    pub(in crate::service) shutdown: tokio::sync::watch::Sender<bool>,
    /// Connections from the proxy to the editors.
    pub(in crate::service) upstreams: Arc<crate::net::upstream::UpstreamPool>,
    /// This process among the server's replicas (the reaper's lease holder).
    pub(in crate::service) instance: String,
    /// Wakes the warm-pool keeper.
    pub(in crate::service) warm_wake: tokio::sync::Notify,
    /// Wakes the queue's dispatcher: a slot was freed here.
    pub(in crate::service) queue_wake: tokio::sync::Notify,
    /// Failed sign-ins by name.
    pub(in crate::service) sign_ins: auth::SignInThrottle,
    /// Set at shutdown: the warm-pool keeper starts nothing more and gives up waiting on starts,
    /// and the queue is not dispatched.
    pub(in crate::service) closing: tokio::sync::watch::Sender<bool>,
    /// Slice sizes launches waited for at the reaper's last pass, each with when they began to:
    /// their idle sessions end sooner (`idle.pressure_timeout_seconds`), and their pages warn
    /// by that.
    pub(in crate::service) pressed: std::sync::RwLock<Vec<(u64, i64)>>,
    /// Sign-in with the configured OpenID Connect provider.
    pub(in crate::service) oidc: Option<crate::identity::oidc::Oidc>,
    /// What Prometheus reads at `/metrics`.
    pub(in crate::service) metrics: metrics::Metrics,
    /// The production registry promotions go to, when one is configured.
    pub(in crate::service) registry: Option<Result<crate::registry::Registry, String>>,
    /// Exports under way, the backup repository and its runs.
    pub(in crate::service) backup: backups::BackupState,
    /// The runtime the service was made on, which runs the server's own work; see [`Core::spawn`].
    background: tokio::runtime::Handle,
}

impl Core {
    pub(in crate::service) fn new(
        config: Config,
        store: Store,
        runtime: Arc<dyn Runtime>,
        kube: Option<Arc<KubeRuntime>>,
        gpus: Vec<GpuSpec>,
        enforcement: Enforcement,
    ) -> Core {
        let sessions = crate::store::HttpSessionStore::new(store.clone());
        let promotion = &config.promotion;
        Core {
            registry: promotion.enabled().then(|| {
                crate::registry::Registry::new(
                    &promotion.registry,
                    &promotion.username,
                    &promotion.password,
                )
            }),
            oidc: config.oidc.clone().map(crate::identity::oidc::Oidc::new),
            auth: Authenticator::new(store.clone(), sessions, config.secure_cookies),
            prices: config.price_list(),
            config,
            store,
            runtime,
            kube,
            events: EventHub::default(),
            routes: RouteTable::default(),
            gpus,
            enforcement,
            shutdown: tokio::sync::watch::channel(false).0,
            upstreams: Arc::default(),
            instance: crate::util::new_instance_id(),
            warm_wake: tokio::sync::Notify::new(),
            queue_wake: tokio::sync::Notify::new(),
            sign_ins: auth::SignInThrottle::default(),
            closing: tokio::sync::watch::Sender::new(false),
            pressed: Default::default(),
            metrics: metrics::Metrics::new(),
            backup: backups::BackupState::default(),
            background: tokio::runtime::Handle::current(),
        }
    }

    /// Now, by the clock the store stamps rows with.
    pub(in crate::service) fn now(&self) -> i64 {
        self.store.now()
    }

    /// Runs work that outlives the request that started it (a launch, a stop, a push) on the
    /// server's main runtime, not on the serving thread the request came in on
    /// ([`crate::net::serving`]): that runtime is the one shut down with the server, which cancels
    /// such work and waits for its blocking parts (a workspace copy) before the process exits.
    pub(in crate::service) fn spawn<F>(&self, work: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.background.spawn(work)
    }
}

/// One area of the rules: a view of the [`Core`] that holds the operations of its area.
macro_rules! area {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone)]
        pub struct $name(Arc<Core>);

        impl std::ops::Deref for $name {
            type Target = Arc<Core>;
            fn deref(&self) -> &Arc<Core> {
                &self.0
            }
        }
    };
}

area!(
    /// Launching, seeing, extending and stopping one's sessions; the dashboard.
    Sessions
);
area!(
    /// Sign-in, accounts, API tokens and the confirmations they take.
    Accounts
);
area!(
    /// The server's own watch: the reaper, the queue's dispatcher, the warm pool, the sampler,
    /// the instance lease.
    Guard
);
area!(
    /// The admin pages' operations: users, credits, quotas, everyone's sessions, the pool.
    Admin
);
area!(
    /// The approved editor images.
    Images
);
area!(
    /// The shared datasets and who may use them.
    Datasets
);
area!(
    /// Promoting a file from a session to the production registry.
    Promotions
);
area!(
    /// Who reaches which editor through the proxy.
    Access
);
area!(
    /// Exports, backups and restores of users' workspaces.
    Backups
);

/// What the doors hold: the rules by area, and nothing that skips them.
/// Who asks for `/metrics`: a scraper with the configured `metrics.token`, or an admin.
pub enum MetricsCaller<'a> {
    Token(&'a str),
    Viewer(&'a app::model::Viewer),
}

pub struct Service {
    core: Arc<Core>,
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
        Self::of(Core::new(config, store, runtime, None, gpus, enforcement))
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
        Self::of(Core::new(
            config,
            store,
            runtime,
            Some(kube),
            gpus,
            enforcement,
        ))
    }

    fn of(core: Core) -> Service {
        let core = Arc::new(core);
        Service {
            sessions: Sessions(core.clone()),
            accounts: Accounts(core.clone()),
            guard: Guard(core.clone()),
            admin: Admin(core.clone()),
            images: Images(core.clone()),
            datasets: Datasets(core.clone()),
            promotions: Promotions(core.clone()),
            access: Access(core.clone()),
            backups: Backups(core.clone()),
            core,
        }
    }

    /// The configuration the server runs with.
    pub fn config(&self) -> &Config {
        &self.core.config
    }

    /// Now, by the service's clock.
    pub fn now(&self) -> i64 {
        self.core.now()
    }

    /// The database did not answer its last look: what needs it is answered 503 at once.
    pub fn database_down(&self) -> bool {
        self.core.store.database_down()
    }

    /// Told when the database stops or starts answering.
    pub fn database_watch(&self) -> tokio::sync::watch::Receiver<bool> {
        self.core.store.database_watch()
    }

    /// The store of sign-in sessions, for the doors' session layer.
    pub fn sign_in_sessions(&self) -> crate::store::HttpSessionStore {
        crate::store::HttpSessionStore::new(self.core.store.clone())
    }

    /// Whether this server can serve: its database answers, within a second, and its data
    /// directory has room to write.
    pub async fn ready(&self) -> Result<(), AppError> {
        if crate::util::free_bytes(&self.core.config.data_dir)
            .is_some_and(|free| free < MIN_FREE_BYTES)
        {
            tracing::error!(data_dir = %self.core.config.data_dir.display(), "the data directory's disk is full");
            return Err(AppError::StorageFull);
        }
        match tokio::time::timeout(READY_WITHIN, self.core.store.count_users()).await {
            Ok(answer) => answer.map(|_| ()).map_err(AppError::from),
            Err(_) => {
                tracing::warn!("the database did not answer the readiness check within a second");
                Err(AppError::DatabaseUnavailable)
            }
        }
    }

    /// Flips to true when the server begins to shut down; long streams end on it.
    /// The counters the proxy adds to as it serves.
    pub fn metrics(&self) -> &metrics::Metrics {
        &self.core.metrics
    }

    /// `/metrics` for `viewer`, or the scraper holding `metrics.token`: the OpenMetrics text.
    pub async fn metrics_text(&self, scraper: MetricsCaller<'_>) -> Result<String, AppError> {
        match scraper {
            MetricsCaller::Token(token) => {
                let configured = &self.core.config.metrics.token;
                if configured.is_empty() || !auth::same_secret(token, configured) {
                    return Err(AppError::Unauthenticated);
                }
            }
            MetricsCaller::Viewer(viewer) => admin::require_admin(viewer)?,
        }
        Ok(self.core.metrics_text().await?)
    }

    pub fn shutting_down(&self) -> tokio::sync::watch::Receiver<bool> {
        self.core.shutdown.subscribe()
    }
}
