//! What the areas are made from, gathered once when the service is built: the configuration,
//! the store, the runtime, the caches and the server's own signals. It has no rules and no
//! methods but its making; each area takes the handles it uses, and its fields say which.

use super::backups::BackupState;
use super::events::EventHub;
use super::metrics::Metrics;
use super::routes::RouteTable;
use crate::config::Config;
use crate::identity::auth::{Authenticator, SignInThrottle};
use crate::identity::oidc::Oidc;
use crate::net::upstream::UpstreamPool;
use crate::registry::Registry;
use crate::runtime::Runtime;
use crate::runtime::gpu::Enforcement;
use crate::runtime::kube::KubeRuntime;
use crate::store::Store;
use app::domain::pool::GpuSpec;
use app::domain::pricing::PriceList;
use std::sync::{Arc, RwLock};
use tokio::sync::{Notify, watch};

#[derive(Clone)]
pub(in crate::service) struct Handles {
    pub config: Arc<Config>,
    pub store: Store,
    pub runtime: Arc<dyn Runtime>,
    /// The same runtime when it is the kube one: the reconciler's handle, given at boot.
    pub kube: Option<Arc<KubeRuntime>>,
    pub auth: Arc<Authenticator>,
    pub events: Arc<EventHub>,
    pub routes: Arc<RouteTable>,
    pub gpus: Arc<Vec<GpuSpec>>,
    /// The configured prices, parsed once.
    pub prices: Arc<PriceList>,
    pub enforcement: Enforcement,
    /// Flips to true when the server begins to shut down; long streams end on it.
    pub shutdown: Arc<watch::Sender<bool>>,
    /// Connections from the proxy to the editors.
    pub upstreams: Arc<UpstreamPool>,
    /// This process among the server's replicas (the reaper's lease holder).
    pub instance: Arc<String>,
    /// Wakes the warm-pool keeper.
    pub warm_wake: Arc<Notify>,
    /// Wakes the queue's dispatcher: a slot was freed here.
    pub queue_wake: Arc<Notify>,
    /// Failed sign-ins by name.
    pub sign_ins: Arc<SignInThrottle>,
    /// Set at shutdown: the warm-pool keeper starts nothing more and gives up waiting on starts,
    /// and the queue is not dispatched.
    pub closing: Arc<watch::Sender<bool>>,
    /// Slice sizes launches waited for at the reaper's last pass, each with when they began to:
    /// their idle sessions end sooner (`idle.pressure_timeout_seconds`), and their pages warn
    /// by that.
    pub pressed: Arc<RwLock<Vec<(u64, i64)>>>,
    /// Sign-in with the configured OpenID Connect provider.
    pub oidc: Option<Arc<Oidc>>,
    /// What Prometheus reads at `/metrics`.
    pub metrics: Arc<Metrics>,
    /// The production registry promotions go to, when one is configured.
    pub registry: Option<Arc<Result<Registry, String>>>,
    /// Exports under way, the backup repository and its runs.
    pub backup: Arc<BackupState>,
    /// The runtime the service was made on, which runs work that outlives the request that
    /// started it (a launch, a stop, a push): that runtime is the one shut down with the
    /// server, which cancels such work and waits for its blocking parts (a workspace copy)
    /// before the process exits, not the serving thread the request came in on
    /// ([`crate::net::serving`]).
    pub background: tokio::runtime::Handle,
}

impl Handles {
    pub fn new(
        config: Config,
        store: Store,
        runtime: Arc<dyn Runtime>,
        kube: Option<Arc<KubeRuntime>>,
        gpus: Vec<GpuSpec>,
        enforcement: Enforcement,
    ) -> Handles {
        let sessions = crate::store::HttpSessionStore::new(store.clone());
        let promotion = &config.promotion;
        Handles {
            registry: promotion.enabled().then(|| {
                Arc::new(Registry::new(
                    &promotion.registry,
                    &promotion.username,
                    &promotion.password,
                ))
            }),
            oidc: config.oidc.clone().map(|c| Arc::new(Oidc::new(c))),
            auth: Arc::new(Authenticator::new(
                store.clone(),
                sessions,
                config.secure_cookies,
            )),
            prices: Arc::new(config.price_list()),
            config: Arc::new(config),
            store,
            runtime,
            kube,
            events: Arc::default(),
            routes: Arc::default(),
            gpus: Arc::new(gpus),
            enforcement,
            shutdown: Arc::new(watch::channel(false).0),
            upstreams: Arc::default(),
            instance: Arc::new(crate::util::new_instance_id()),
            warm_wake: Arc::default(),
            queue_wake: Arc::default(),
            sign_ins: Arc::default(),
            closing: Arc::new(watch::Sender::new(false)),
            pressed: Arc::default(),
            metrics: Arc::new(Metrics::new()),
            backup: Arc::default(),
            background: tokio::runtime::Handle::current(),
        }
    }
}
