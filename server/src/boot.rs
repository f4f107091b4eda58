//! Builds a [`Service`] from a configuration: the store, the runtime, the GPUs.
//! May import any folder of the crate.

use crate::config;
use crate::runtime::{self, Runtime};
use crate::service::Service;
use crate::store;
use std::sync::Arc;
use std::time::Duration;

/// Opens the store and applies migrations: enough for the command line, which must not
/// touch the pool or the sessions of a server that may be running.
pub async fn open_service(config: config::Config) -> anyhow_lite::Result<Arc<Service>> {
    crate::util::private_dir(&config.data_dir).map_err(|e| {
        anyhow_lite::Error(format!(
            "cannot create data_dir {}: {e}",
            config.data_dir.display()
        ))
    })?;
    let store = store::Store::connect(&config.database_url())
        .await
        .map_err(anyhow_lite::wrap("database"))?;
    store
        .migrate()
        .await
        .map_err(anyhow_lite::wrap("migration"))?;
    let (gpus, enforcement) = runtime::gpu::discover(&config);
    let service = match config.runtime {
        config::RuntimeKind::Local => {
            let local = runtime::LocalRuntime::from_config(&config);
            // Without a sandbox a terminal can unset LD_PRELOAD and every card is in view:
            // nothing holds a slice, not even a whole card.
            let (gpus, enforcement) = match local.isolation() {
                Ok(_) => (gpus, enforcement),
                Err(_) => {
                    if enforcement != runtime::gpu::Enforcement::None {
                        tracing::warn!(
                            "HAMi-core is configured, but editors run unsandboxed: slices are not held"
                        );
                    }
                    let gpus = gpus
                        .into_iter()
                        .map(|g| app::domain::pool::GpuSpec {
                            hold: app::domain::hold::SliceHold::None,
                            ..g
                        })
                        .collect();
                    (gpus, runtime::gpu::Enforcement::None)
                }
            };
            Service::new(config, store, Arc::new(local), gpus, enforcement)
        }
        // In the cluster: its service account; outside: KUBECONFIG or ~/.kube/config.
        config::RuntimeKind::Kube => {
            let client = kube::Client::try_default()
                .await
                .map_err(anyhow_lite::wrap("kubernetes client"))?;
            let timing = runtime::kube::Timing {
                start_timeout: Duration::from_secs(config.sessions.ready_timeout_seconds),
                ..runtime::kube::Timing::default()
            };
            let kube = runtime::kube::KubeRuntime::new(client, config.kube.clone())
                .with_network(config.network.clone())
                .with_timing(timing);
            // The nodes' cards, not this pod's (it has none): declared, and enforced by HAMi.
            let (gpus, enforcement) = runtime::gpu::on_kube(&config);
            Service::on_kube(config, store, Arc::new(kube), gpus, enforcement)
        }
    };
    Ok(Arc::new(service))
}

/// A service ready to serve: the pool written, sessions left by a previous run recovered.
pub async fn build_service(config: config::Config) -> anyhow_lite::Result<Arc<Service>> {
    let service = open_service(config).await?;
    service
        .guard
        .sync_pool()
        .await
        .map_err(anyhow_lite::wrap("pool"))?;
    service
        .guard
        .refuse_unisolated_accounts()
        .await
        .map_err(anyhow_lite::Error)?;
    // Alive before recovering, so that no other server takes this one's launches for orphans.
    service.guard.keep_alive().await;
    service
        .guard
        .recover()
        .await
        .map_err(anyhow_lite::wrap("recovery"))?;
    Ok(service)
}

/// A plain error for start-up, where the only thing to do is to say what failed.
pub mod anyhow_lite {
    #[derive(Debug)]
    pub struct Error(pub String);
    impl std::fmt::Display for Error {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(&self.0)
        }
    }
    impl std::error::Error for Error {}
    pub type Result<T> = std::result::Result<T, Error>;
    pub fn wrap<E: std::fmt::Display>(what: &'static str) -> impl Fn(E) -> Error {
        move |e| Error(format!("{what}: {e}"))
    }
}
