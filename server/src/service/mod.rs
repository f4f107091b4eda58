//! The application layer: every rule about who may do what to which session lives here.
//! The pages (server functions) and the REST API are two thin doors to these functions.
//! May import every folder but `http`, `boot` and `cli`, and `app::*`.

pub mod accounts;
pub mod admin;
pub mod events;
pub mod guard;
pub mod images;
pub mod promotion;
pub mod reconcile;
pub mod routes;
pub mod sessions;
pub mod workers;

pub use accounts::{NewToken, confirmed};

use crate::config::Config;
use crate::identity::auth::{self, Authenticator};
use crate::runtime::Runtime;
use crate::runtime::gpu::Enforcement;
use crate::store::{Store, StoreError};
use app::domain::credits;
use app::domain::pool::GpuSpec;
use app::error::AppError;
use events::EventHub;
use routes::RouteTable;
use std::sync::Arc;

impl From<StoreError> for AppError {
    fn from(error: StoreError) -> AppError {
        match error {
            StoreError::NotFound(_) => AppError::NotFound,
            StoreError::Duplicate(what) => AppError::Conflict(format!("{what} already exists")),
            StoreError::InsufficientCredits { balance, needed } => {
                AppError::InsufficientCredits(format!(
                    "Not enough credits: this launch holds {} credits and your balance is {}.",
                    credits::format(needed),
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
            other => {
                tracing::error!(error = %other, "store");
                AppError::Internal
            }
        }
    }
}

pub struct Service {
    pub config: Config,
    pub store: Store,
    pub runtime: Arc<dyn Runtime>,
    pub auth: Authenticator,
    pub events: EventHub,
    pub routes: RouteTable,
    pub gpus: Vec<GpuSpec>,
    /// The configured prices, parsed once.
    pub prices: app::domain::pricing::PriceList,
    pub enforcement: Enforcement,
    /// Flips to true when the server begins to shut down; long streams end on it.
    pub shutdown: tokio::sync::watch::Sender<bool>,
    /// Connections from the proxy to the editors.
    pub upstreams: Arc<crate::net::upstream::UpstreamPool>,
    /// This process among the server's replicas (the reaper's lease holder).
    pub instance: String,
    /// Wakes the warm-pool keeper.
    pub warm_wake: tokio::sync::Notify,
    /// Wakes the queue's dispatcher: a slot was freed here.
    pub queue_wake: tokio::sync::Notify,
    /// Failed sign-ins by name.
    pub sign_ins: auth::SignInThrottle,
    /// Set at shutdown: the warm-pool keeper starts nothing more and gives up waiting on starts,
    /// and the queue is not dispatched.
    pub closing: tokio::sync::watch::Sender<bool>,
    /// Sign-in with the configured OpenID Connect provider.
    pub oidc: Option<crate::identity::oidc::Oidc>,
    /// The production registry promotions go to, when one is configured.
    pub registry: Option<Result<crate::registry::Registry, String>>,
    /// The runtime the service was made on, which runs the server's own work; see [`Service::spawn`].
    background: tokio::runtime::Handle,
}

impl Service {
    pub fn new(
        config: Config,
        store: Store,
        runtime: Arc<dyn Runtime>,
        gpus: Vec<GpuSpec>,
        enforcement: Enforcement,
    ) -> Service {
        let sessions = crate::store::HttpSessionStore::new(store.clone());
        let promotion = &config.promotion;
        Service {
            registry: promotion.enabled().then(|| {
                crate::registry::Registry::new(
                    &promotion.registry,
                    &promotion.username,
                    &promotion.password,
                )
            }),
            oidc: config.oidc.clone().map(crate::identity::oidc::Oidc::new),
            auth: Authenticator::new(store.clone(), sessions),
            prices: config.price_list(),
            config,
            store,
            runtime,
            events: EventHub::default(),
            routes: RouteTable::default(),
            gpus,
            enforcement,
            shutdown: tokio::sync::watch::channel(false).0,
            upstreams: Arc::default(),
            instance: crate::util::new_id(),
            warm_wake: tokio::sync::Notify::new(),
            queue_wake: tokio::sync::Notify::new(),
            sign_ins: auth::SignInThrottle::default(),
            closing: tokio::sync::watch::Sender::new(false),
            background: tokio::runtime::Handle::current(),
        }
    }

    /// Now, by the clock the store stamps rows with.
    pub fn now(&self) -> i64 {
        self.store.now()
    }

    /// Runs work that outlives the request that started it (a launch, a stop, a push) on the
    /// server's main runtime, not on the serving thread the request came in on
    /// ([`crate::net::serving`]): that runtime is the one shut down with the server, which cancels
    /// such work and waits for its blocking parts (a workspace copy) before the process exits.
    pub fn spawn<F>(&self, work: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.background.spawn(work)
    }
}
