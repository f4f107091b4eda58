//! The service layer: every rule about who may do what to which session lives here.
//! The pages (server functions) and the REST API are two thin doors to these functions.

use crate::auth::{self, Authenticator, USER_KEY};
use crate::config::Config;
use crate::editors;
use crate::events::EventHub;
use crate::gpu::{self, Enforcement};
use crate::proxy::{Route, RouteTable};
use crate::runtime::{EditorLaunch, Runtime};
use crate::store::{
    LaunchPlan, Placement, SessionRecord, Store, StoreError, TokenRecord, UserRecord,
};
use app::domain::credits;
use app::domain::launch::{self, Catalog, EditorKind, LaunchRequest};
use app::domain::pool::{GpuSpec, format_mib};
use app::domain::scope::{Scope, Scopes};
use app::domain::session::{EndReason, SessionState};
use app::error::AppError;
use app::model::*;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

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
    pub enforcement: Enforcement,
    /// Flips to true when the server begins to shut down; long streams end on it.
    pub shutdown: tokio::sync::watch::Sender<bool>,
    /// Connections from the proxy to the editors.
    pub upstreams: Arc<crate::upstream::UpstreamPool>,
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
    pub oidc: Option<crate::oidc::Oidc>,
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
            oidc: config.oidc.clone().map(crate::oidc::Oidc::new),
            auth: Authenticator::new(store.clone(), sessions),
            config,
            store,
            runtime,
            events: EventHub::default(),
            routes: RouteTable::default(),
            gpus,
            enforcement,
            shutdown: tokio::sync::watch::channel(false).0,
            upstreams: Arc::default(),
            instance: crate::store::new_id(),
            warm_wake: tokio::sync::Notify::new(),
            queue_wake: tokio::sync::Notify::new(),
            sign_ins: auth::SignInThrottle::default(),
            closing: tokio::sync::watch::Sender::new(false),
            background: tokio::runtime::Handle::current(),
        }
    }

    /// Runs work that outlives the request that started it (a launch, a stop, a push) on the
    /// server's main runtime, not on the serving thread the request came in on
    /// ([`crate::serving`]): that runtime is the one shut down with the server, which cancels
    /// such work and waits for its blocking parts (a workspace copy) before the process exits.
    pub fn spawn<F>(&self, work: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.background.spawn(work)
    }

    /// Writes the pool to the database.
    pub async fn sync_pool(&self) -> Result<(), StoreError> {
        let slots: Vec<_> = self
            .gpus
            .iter()
            .enumerate()
            .flat_map(|(ordinal, gpu)| app::domain::pool::plan_slots(ordinal, gpu))
            .collect();
        self.store.sync_pool(&self.gpus, &slots).await
    }

    /// The first admin, on an empty database: returns the generated password to show once.
    pub async fn ensure_admin(&self) -> Result<Option<String>, StoreError> {
        if self.store.count_users().await? > 0 {
            return Ok(None);
        }
        let password = auth::random_secret(9);
        let hash =
            auth::hash_password(&password).map_err(|_| StoreError::NotFound("password hasher"))?;
        match self
            .store
            .create_user(
                "admin",
                Some(&hash),
                Role::Admin,
                self.config.initial_grant(),
                None,
            )
            .await
        {
            Ok(_) => Ok(Some(password)),
            // Another replica created it first.
            Err(StoreError::Duplicate(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    pub async fn create_user(
        &self,
        name: &str,
        password: Option<&str>,
        role: Role,
        actor: Option<&str>,
    ) -> Result<UserRecord, AppError> {
        let name = checked_user_name(name)?;
        let hash = match password {
            Some(p) if p.chars().count() < 8 => {
                return Err(AppError::Invalid(
                    "a password must have at least 8 characters".into(),
                ));
            }
            Some(p) => Some(auth::hash_password(p).map_err(|_| AppError::Internal)?),
            None => None,
        };
        Ok(self
            .store
            .create_user(
                name,
                hash.as_deref(),
                role,
                self.config.initial_grant(),
                actor,
            )
            .await?)
    }

    /// Locks or unlocks an account; a locked one loses access at once (cookies and tokens).
    pub async fn set_locked(
        &self,
        user_id: &str,
        locked: bool,
        actor_id: Option<&str>,
    ) -> Result<(), AppError> {
        self.store.set_locked(user_id, locked, actor_id).await?;
        self.auth.forget_user(user_id);
        Ok(())
    }

    fn catalog(
        &self,
        pool: &[(crate::store::GpuRecord, Vec<crate::store::SlotRecord>)],
    ) -> Catalog {
        let mut sizes: Vec<u64> = pool
            .iter()
            .flat_map(|(_, slots)| slots.iter().map(|s| s.slice_mib))
            .collect();
        sizes.sort_unstable();
        sizes.dedup();
        let mut bursts: Vec<u64> = pool
            .iter()
            .filter(|(_, slots)| slots.len() > 1)
            .map(|(gpu, _)| gpu.memory_mib)
            .filter(|mib| !sizes.contains(mib))
            .collect();
        bursts.sort_unstable();
        bursts.dedup();
        Catalog {
            editors: self.runtime.availability(),
            slice_sizes: sizes,
            burst_sizes: bursts,
            burst_max_minutes: self.config.pool.burst_max_minutes,
            min_minutes: self.config.sessions.min_minutes,
            max_minutes: self.config.sessions.max_minutes,
            images: None,
        }
    }

    /// Milli-credits per hour for `slice_mib` on the card `gpu_id`.
    pub fn price_on(&self, gpu_id: &str, slice_mib: u64) -> i64 {
        match self.gpus.iter().find(|g| g.id == gpu_id) {
            Some(gpu) => self.config.price_per_hour(&gpu.model, slice_mib),
            None => self.config.price_per_hour("*", slice_mib),
        }
    }

    /// The dearest card for this size: what a queued launch holds until it gets one.
    fn price_for_slice(&self, slice_mib: u64) -> i64 {
        self.gpus
            .iter()
            .filter(|g| g.slice_mib == slice_mib || g.memory_mib == slice_mib)
            .map(|g| self.config.price_per_hour(&g.model, slice_mib))
            .max()
            .unwrap_or_else(|| self.config.price_per_hour("*", slice_mib))
    }

    /// The user's limits, use and whether something blocks launches.
    pub async fn quota(&self, viewer: &Viewer) -> Result<QuotaView, AppError> {
        viewer.scopes.require(Scope::Read)?;
        let limits = self
            .config
            .default_limits()
            .with(&self.store.quota_overrides(&viewer.id).await?);
        let mut usage = self.store.usage(&viewer.id).await?;
        usage.disk_mib = self.runtime.workspace_mib(&viewer.name).await;
        let note = usage
            .disk_mib
            .filter(|disk| *disk > limits.max_disk_mib)
            .map(|disk| {
                format!(
                    "Your workspace uses {} of its {} limit: delete files to launch again.",
                    format_mib(disk),
                    format_mib(limits.max_disk_mib)
                )
            });
        Ok(QuotaView {
            limits,
            usage,
            note,
        })
    }

    pub async fn dashboard(&self, viewer: &Viewer) -> Result<Dashboard, AppError> {
        viewer.scopes.require(Scope::Read)?;
        let (balance, held) = self.store.credits(&viewer.id).await?;
        let pool = self.store.pool().await?;
        let catalog = self.catalog(&pool);
        let warm = self.store.warm_editors().await?;
        let queue = self.store.queue_positions().await?;
        let all_slots: Vec<_> = pool.iter().flat_map(|(_, slots)| slots.clone()).collect();
        let mut slices: Vec<SliceOption> = catalog
            .slice_sizes
            .iter()
            .map(|&slice_mib| {
                let of_size = all_slots.iter().filter(|s| s.slice_mib == slice_mib);
                let mut warm_by_editor: BTreeMap<EditorKind, u32> = BTreeMap::new();
                for w in warm.iter().filter(|w| w.ready && w.slice_mib == slice_mib) {
                    *warm_by_editor.entry(w.editor).or_default() += 1;
                }
                SliceOption {
                    slice_mib,
                    price_per_hour: self.price_for_slice(slice_mib),
                    free: of_size.clone().filter(|s| s.session_id.is_none()).count() as u32,
                    total: of_size.count() as u32,
                    burst: false,
                    max_minutes: self.config.sessions.max_minutes,
                    warm: warm_by_editor.into_iter().collect(),
                    queued: queue
                        .iter()
                        .filter(|(_, s, b, _)| *s == slice_mib && !b)
                        .count() as u32,
                }
            })
            .collect();
        for &memory_mib in &catalog.burst_sizes {
            let cards: Vec<_> = pool
                .iter()
                .filter(|(g, _)| g.memory_mib == memory_mib)
                .collect();
            slices.push(SliceOption {
                slice_mib: memory_mib,
                price_per_hour: self.price_for_slice(memory_mib),
                free: cards
                    .iter()
                    .filter(|(_, slots)| slots.iter().all(|s| s.session_id.is_none()))
                    .count() as u32,
                total: cards.len() as u32,
                burst: true,
                max_minutes: self.config.pool.burst_max_minutes,
                warm: Vec::new(),
                queued: queue
                    .iter()
                    .filter(|(_, s, b, _)| *s == memory_mib && *b)
                    .count() as u32,
            });
        }
        let sessions = self.store.sessions_of(&viewer.id, 20).await?;
        let positions: BTreeMap<&str, u32> = queue
            .iter()
            .map(|(id, _, _, p)| (id.as_str(), *p))
            .collect();
        Ok(Dashboard {
            images: self.launch_images().await?,
            viewer: viewer.clone(),
            credits: CreditsView { balance, held },
            editors: catalog
                .editors
                .into_iter()
                .map(|(kind, status)| EditorOption {
                    kind,
                    label: kind.label().to_string(),
                    unavailable: status.err(),
                })
                .collect(),
            slices,
            durations: DurationLimits {
                min_minutes: self.config.sessions.min_minutes,
                max_minutes: self.config.sessions.max_minutes,
                default_minutes: self.config.sessions.default_minutes,
            },
            gpus: pool
                .into_iter()
                .map(|(gpu, slots)| GpuView {
                    id: gpu.id,
                    model: gpu.model,
                    memory_mib: gpu.memory_mib,
                    enforced: gpu.enforced,
                    slots: slots
                        .into_iter()
                        .map(|s| SlotView {
                            warm: warm
                                .iter()
                                .find(|w| w.slot_id == s.id && w.ready && s.session_id.is_none())
                                .map(|w| w.editor),
                            id: s.id,
                            slice_mib: s.slice_mib,
                            in_use: s.session_id.is_some(),
                        })
                        .collect(),
                })
                .collect(),
            sessions: sessions
                .iter()
                .map(|s| {
                    let position = positions.get(s.id.as_str()).copied();
                    self.session_view(s, Vec::new(), position)
                })
                .collect(),
            quota: self.quota(viewer).await?,
            enforcement: self.enforcement.describe(),
        })
    }

    /// Validates, then checks the quota, holds credits and takes a warm editor, a slot or a place
    /// in the queue (one transaction); a cold slot's editor starts in the background.
    pub async fn launch(
        self: &Arc<Self>,
        viewer: &Viewer,
        request: LaunchRequest,
    ) -> Result<SessionView, AppError> {
        viewer.scopes.require(Scope::Sessions)?;
        // Shutting down: an editor started now would outlive the server's stops.
        if *self.closing.borrow() {
            return Err(AppError::Unavailable(
                "the server is restarting; launch again in a minute".into(),
            ));
        }
        let pool = self.store.pool().await?;
        let mut catalog = self.catalog(&pool);
        catalog.images = self.image_choices().await?;
        let valid = launch::validate(&request, &catalog).map_err(AppError::Invalid)?;
        // From here on the work runs in its own task: a client that disconnects mid-request
        // must not leave a session half-launched (credits held, slot taken, nothing running).
        let this = Arc::clone(self);
        let viewer = viewer.clone();
        self.spawn(async move { this.place(&viewer, valid).await })
            .await
            .map_err(|e| {
                tracing::error!(error = %e, "launch task");
                AppError::Internal
            })?
    }

    async fn place(
        self: &Arc<Self>,
        viewer: &Viewer,
        valid: launch::ValidLaunch,
    ) -> Result<SessionView, AppError> {
        let slice_mib = valid.slice_mib;
        let price_on = |gpu_id: &str| self.price_on(gpu_id, slice_mib);
        let launched = self
            .store
            .launch(LaunchPlan {
                user_id: &viewer.id,
                image: valid.image.as_deref(),
                editor: valid.editor,
                slice_mib,
                burst: valid.burst,
                duration_minutes: valid.duration_minutes,
                limits: self.config.default_limits(),
                disk_mib: self.runtime.workspace_mib(&viewer.name).await,
                price_on: &price_on,
                queue_price: self.price_for_slice(slice_mib),
                // A pre-started editor runs the default image.
                use_warm: self.prestarts() && valid.image.is_none(),
            })
            .await?;
        let id = launched.record.id.clone();
        match launched.placement {
            Placement::Warm(warm) => {
                // Bound before anyone has the address: the page opens on the user's own files.
                if let Err(e) = self.runtime.bind_workspace(&warm.id, &viewer.name).await {
                    tracing::warn!(session = %id, error = %e, "binding the workspace");
                    self.stop_session(&id, EndReason::Failed, Some(&e.user_message()))
                        .await;
                }
                for step in launched.steps {
                    self.events.publish(&id, step);
                }
                self.kick_warm_pool();
            }
            Placement::Slot { evicted, .. } => {
                for step in launched.steps {
                    self.events.publish(&id, step);
                }
                self.stop_warm(evicted);
                self.drive(&id).await;
                let service = Arc::clone(self);
                let session_id = id.clone();
                let user_name = viewer.name.clone();
                self.spawn(async move { service.run_launch(&session_id, &user_name).await });
            }
            Placement::Queued { .. } => {
                for step in launched.steps {
                    self.events.publish(&id, step);
                }
            }
        }
        self.view(&id).await
    }

    /// Marks this server as the one driving `session_id`'s launch. Until it is marked, a server
    /// that starts up leaves the launch to the reaper's overdue rule rather than end it.
    pub(crate) async fn drive(&self, session_id: &str) {
        if let Err(e) = self.store.set_driver(session_id, &self.instance).await {
            tracing::warn!(session = session_id, error = %e, "recording who drives a launch");
        }
    }

    pub(crate) async fn run_launch(&self, session_id: &str, user_name: &str) {
        let Ok(Some(record)) = self.store.session(session_id).await else {
            return;
        };
        // Retired while the launch waited in the queue: retiring is how an admin stops an
        // image, so it does not start now.
        if let Some(reference) = &record.image
            && !self.image_still_approved(record.editor, reference).await
        {
            self.end_without_editor(
                session_id,
                EndReason::Failed,
                &format!(
                    "the image {reference} was retired before this session started; launch again with another"
                ),
            )
            .await;
            return;
        }
        let gpu = record
            .gpu_id
            .as_ref()
            .and_then(|id| self.gpus.iter().find(|g| &g.id == id));
        // A burst holds the whole card; a slice its share of it.
        let (memory_mib, cores_pct) = if record.burst {
            (record.slice_mib, 100)
        } else {
            (record.slice_mib, record.cores_pct.unwrap_or(100))
        };
        let env = gpu
            .map(|g| gpu::slice_env(g, memory_mib, cores_pct, &self.enforcement))
            // A slot on a card we no longer know: hide every card rather than expose them all.
            .unwrap_or_else(|| vec![("CUDA_VISIBLE_DEVICES".to_string(), String::new())]);
        let launch = EditorLaunch {
            session_id: record.id.clone(),
            user_name: user_name.to_string(),
            editor: record.editor,
            base_path: format!("/s/{}/", record.id),
            env,
            slice: crate::runtime::SliceBinding {
                gpu_uuid: gpu.filter(|g| g.cuda_index.is_some()).map(|g| g.id.clone()),
                memory_mib,
                cores_pct,
            },
            prestart: false,
            image: record.image.clone(),
        };
        self.step(
            session_id,
            &format!("Starting {}", record.editor.label()),
            45,
        )
        .await;
        let running = match self.runtime.start(&launch).await {
            Ok(running) => running,
            Err(e) => {
                tracing::warn!(session = session_id, error = %e, "editor failed to start");
                self.end_without_editor(session_id, EndReason::Failed, &e.user_message())
                    .await;
                return;
            }
        };
        if let Err(e) = self
            .store
            .set_runtime(
                session_id,
                &running.upstream,
                &running.secret,
                &running.handle,
            )
            .await
        {
            // Stopped while it started (or the database failed): nothing may keep running.
            tracing::info!(session = session_id, error = %e, "editor started for a session that is no longer starting");
            let _ = self.runtime.stop(&running.handle).await;
            self.end_without_editor(
                session_id,
                EndReason::Failed,
                "the editor could not be recorded",
            )
            .await;
            return;
        }
        self.step(
            session_id,
            &format!("Waiting for {} to answer", record.editor.label()),
            60,
        )
        .await;
        let timeout = Duration::from_secs(self.config.sessions.ready_timeout_seconds);
        if let Err(e) = self.runtime.wait_ready(&launch, &running, timeout).await {
            tracing::warn!(session = session_id, error = %e, "editor not ready");
            self.stop_session(session_id, EndReason::Failed, Some(&e.user_message()))
                .await;
            // Whatever state the session reached meanwhile, this process is ours to end.
            let _ = self.runtime.stop(&running.handle).await;
            return;
        }
        match self
            .store
            .mark_ready(session_id, &format!("{} is ready", record.editor.label()))
            .await
        {
            Ok(step) => {
                self.events.publish(session_id, step);
            }
            // Stopped while it started: make sure nothing is left running.
            Err(e) => {
                tracing::info!(session = session_id, error = %e, "launch overtaken by a stop");
                let _ = self.runtime.stop(&running.handle).await;
            }
        }
    }

    async fn step(&self, session_id: &str, message: &str, progress: u8) {
        match self.store.add_step(session_id, message, progress).await {
            Ok(step) => self.events.publish(session_id, step),
            Err(e) => tracing::warn!(session = session_id, error = %e, "recording a step"),
        }
    }

    /// Ends a session that has no editor running (or never had one).
    async fn end_without_editor(&self, session_id: &str, reason: EndReason, detail: &str) {
        self.stop_session(session_id, reason, Some(detail)).await;
    }

    /// Takes a session to its end, whatever state it is in: stops the editor, frees the slot,
    /// settles the credits. Safe to call twice.
    pub async fn stop_session(&self, session_id: &str, reason: EndReason, detail: Option<&str>) {
        let begun = match self.store.begin_stop(session_id, reason, detail).await {
            Ok(begun) => begun,
            Err(e) => {
                tracing::warn!(session = session_id, error = %e, "beginning a stop");
                None
            }
        };
        if let Some((state, step)) = begun {
            self.events.publish(session_id, step);
            if state == SessionState::Ended {
                self.routes.remove(session_id);
                return;
            }
        }
        self.routes.remove(session_id);
        if let Ok(Some(record)) = self.store.session(session_id).await {
            if record.state != SessionState::Stopping {
                return;
            }
            if let Some(upstream) = &record.upstream {
                self.upstreams.forget(upstream);
            }
            if let Some(handle) = &record.runtime_handle
                && let Err(e) = self.runtime.stop(handle).await
            {
                tracing::warn!(session = session_id, error = %e, "stopping the editor");
            }
            match self.store.finish(session_id).await {
                Ok(Some(step)) => {
                    self.events.publish(session_id, step);
                    // Its slot is free: the head of the line need not wait for the reaper.
                    self.queue_wake.notify_one();
                }
                Ok(None) => {}
                Err(e) => tracing::warn!(session = session_id, error = %e, "finishing"),
            }
        }
        // A proxy request may have cached the route while this stop ran.
        self.routes.remove(session_id);
    }

    /// A session the viewer may see: their own. Others' look the same as missing ones.
    pub(crate) async fn owned_record(
        &self,
        viewer: &Viewer,
        id: &str,
    ) -> Result<SessionRecord, AppError> {
        match self.store.session(id).await? {
            Some(record) if record.user_id == viewer.id => Ok(record),
            _ => Err(AppError::NotFound),
        }
    }

    pub async fn session(&self, viewer: &Viewer, id: &str) -> Result<SessionView, AppError> {
        viewer.scopes.require(Scope::Read)?;
        self.owned_record(viewer, id).await?;
        self.view(id).await
    }

    pub async fn sessions(&self, viewer: &Viewer) -> Result<Vec<SessionView>, AppError> {
        viewer.scopes.require(Scope::Read)?;
        let records = self.store.sessions_of(&viewer.id, 100).await?;
        Ok(records
            .iter()
            .map(|r| self.session_view(r, Vec::new(), None))
            .collect())
    }

    pub async fn stop(
        self: &Arc<Self>,
        viewer: &Viewer,
        id: &str,
    ) -> Result<SessionView, AppError> {
        viewer.scopes.require(Scope::Sessions)?;
        let record = self.owned_record(viewer, id).await?;
        if record.state.is_live() {
            // Its own task: a client that disconnects must not leave the session half-stopped.
            let this = Arc::clone(self);
            let id = id.to_string();
            let _ = self
                .spawn(async move { this.stop_session(&id, EndReason::User, None).await })
                .await;
        }
        self.view(id).await
    }

    /// Checks the viewer owns the session (for the progress stream).
    pub async fn check_owner(&self, viewer: &Viewer, id: &str) -> Result<(), AppError> {
        viewer.scopes.require(Scope::Read)?;
        self.owned_record(viewer, id).await.map(|_| ())
    }

    /// The steps after `after`, from the database.
    pub async fn steps_after(&self, id: &str, after: i64) -> Result<Vec<Step>, AppError> {
        let steps = self.store.steps(id).await?;
        Ok(steps.into_iter().filter(|s| s.seq > after).collect())
    }

    async fn view(&self, id: &str) -> Result<SessionView, AppError> {
        let record = self.store.session(id).await?.ok_or(AppError::NotFound)?;
        let steps = self.store.steps(id).await?;
        let position = if record.state == SessionState::Queued {
            Some(self.store.queue_position(id).await?)
        } else {
            None
        };
        let mut view = self.session_view(&record, steps, position);
        if record.state.is_live() {
            view.admin_access = self
                .store
                .editor_access_now(id)
                .await?
                .map(|(admin, until_ms)| AdminAccessNote { admin, until_ms });
        }
        Ok(view)
    }

    pub fn session_view(
        &self,
        record: &SessionRecord,
        steps: Vec<Step>,
        queue_position: Option<u32>,
    ) -> SessionView {
        let url = (record.state == SessionState::Ready)
            .then(|| format!("/s/{}/{}", record.id, record.editor.landing_path()));
        let policy = self.config.idle_policy(record.slice_mib);
        SessionView {
            id: record.id.clone(),
            editor: record.editor,
            slice_mib: record.slice_mib,
            gpu_model: record.gpu_model.clone(),
            slot_id: record.slot_id.clone(),
            state: record.state,
            end_reason: record.end_reason,
            detail: record.detail.clone(),
            duration_minutes: record.duration_minutes,
            created_at_ms: record.created_at,
            ends_at_ms: record.ends_at,
            url,
            held: if record.state.is_live() {
                credits::price_for_minutes(record.price_per_hour, record.duration_minutes as i64)
            } else {
                0
            },
            price_per_hour: record.price_per_hour,
            queue_position,
            idle_at_ms: (record.state == SessionState::Ready)
                .then(|| policy.idle_at(&record.signals())),
            warn_ms: policy.warn_ms,
            gpu_used_mib: record.gpu_used_mib,
            steps,
            admin_access: None,
        }
    }

    /// The proxy's route to a ready session's editor.
    pub async fn route(&self, session_id: &str) -> Result<Option<Arc<Route>>, StoreError> {
        match self.routes.get(session_id) {
            Some(route) => Ok(Some(route)),
            // Boxed: the database's future is large, and every proxied request's own future
            // (moved whole into its box) would otherwise be as large.
            None => Box::pin(self.load_route(session_id)).await,
        }
    }

    async fn load_route(&self, session_id: &str) -> Result<Option<Arc<Route>>, StoreError> {
        let Some(record) = self.store.session(session_id).await? else {
            return Ok(None);
        };
        if record.state != SessionState::Ready {
            return Ok(None);
        }
        let (Some(upstream), Some(secret)) = (&record.upstream, &record.editor_token) else {
            return Ok(None);
        };
        let route = Arc::new(Route::new(
            record.id.clone(),
            record.user_id.clone(),
            upstream.clone(),
            editors::upstream_auth(record.editor, secret),
            editors::strips_prefix(record.editor),
            record.last_activity_at,
        ));
        self.routes.insert(route.clone());
        // A stop may have run between our read and our insert; it must not leave a route behind.
        if self.store.session(session_id).await?.map(|r| r.state) != Some(SessionState::Ready) {
            self.routes.remove(session_id);
            return Ok(None);
        }
        Ok(Some(route))
    }

    /// Forgets the routes of sessions that are no longer ready, or whose editor moved: another
    /// replica may have stopped them, and this one would go on forwarding to the old address.
    pub async fn forget_stale_routes(&self) {
        let cached = self.routes.ids();
        if cached.is_empty() {
            return;
        }
        match self.store.ready_upstreams().await {
            Ok(ready) => {
                for (id, upstream) in cached {
                    if ready.get(&id) != Some(&upstream) {
                        self.routes.remove(&id);
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "checking the proxy's routes"),
        }
    }

    /// After a restart: re-adopt editors that still answer, end the rest with a refund. Queued
    /// sessions keep their place in line (they have no editor yet, so nothing of theirs was
    /// lost), unless the pool no longer has their size.
    pub async fn recover(&self) -> Result<(), StoreError> {
        let mut owned = std::collections::HashSet::new();
        let catalog = self.catalog(&self.store.pool().await?);
        for record in self.store.live_sessions().await? {
            let alive = match &record.runtime_handle {
                Some(handle) => self.runtime.is_alive(handle).await,
                None => false,
            };
            match record.state {
                SessionState::Ready if alive => {
                    tracing::info!(session = %record.id, "re-adopted a running editor");
                    owned.insert(record.id);
                }
                SessionState::Queued => {
                    // The pool may have changed while the server was down; a size it no longer
                    // has would wait for ever.
                    let sizes = if record.burst {
                        &catalog.burst_sizes
                    } else {
                        &catalog.slice_sizes
                    };
                    if !sizes.contains(&record.slice_mib) {
                        let detail = format!(
                            "the pool no longer has {} slices; your credits were refunded",
                            app::domain::pool::format_mib(record.slice_mib)
                        );
                        self.stop_session(&record.id, EndReason::Failed, Some(&detail))
                            .await;
                    }
                }
                SessionState::Ready => {
                    // It may have died with the machine, while no server ran: charged until
                    // the last time a server was watching it, not for the time we were away.
                    if let Some(watched) = self
                        .store
                        .lease_expires_at(crate::guard::REAPER_LEASE)
                        .await?
                    {
                        self.store.charge_until(&record.id, watched).await?;
                    }
                    self.stop_session(
                        &record.id,
                        EndReason::Crash,
                        Some("the editor was gone after a server restart"),
                    )
                    .await;
                }
                _ => {
                    // Several servers may share the database: a launch another live server
                    // drives is its to finish. One nobody marked yet is left to the reaper.
                    let driver_alive = match &record.driver {
                        Some(driver) => self.instance_alive(driver).await?,
                        None => true,
                    };
                    if driver_alive {
                        tracing::info!(session = %record.id, driver = ?record.driver, "left a launch another server drives");
                        owned.insert(record.id);
                        continue;
                    }
                    self.stop_session(
                        &record.id,
                        EndReason::Failed,
                        Some("the server restarted before the editor was ready; your credits were refunded"),
                    )
                    .await;
                }
            }
        }
        // A server that died between starting an editor and recording it left that editor
        // to nobody: whatever no adopted session or ready pre-started editor owns is stopped.
        owned.extend(
            self.store
                .warm_editors()
                .await?
                .into_iter()
                .filter(|w| w.ready)
                .map(|w| w.id),
        );
        let stopped = self.runtime.sweep(&owned).await;
        if stopped > 0 {
            tracing::warn!(stopped, "stopped editors left running by a previous server");
        }
        Ok(())
    }

    /// On shutdown (when configured): stop every editor, so nothing is orphaned.
    /// Queued sessions have no editor yet: they keep their place for the next start.
    pub async fn stop_all(&self, reason: EndReason, detail: &str) {
        if let Ok(live) = self.store.live_sessions().await {
            for record in live.iter().filter(|r| r.state != SessionState::Queued) {
                self.stop_session(&record.id, reason, Some(detail)).await;
            }
        }
    }

    /// Writes proxy activity to the database, now and then rather than per request.
    pub async fn flush_activity(&self) {
        for (session_id, at, api_at) in self.routes.take_activity() {
            let written = match api_at {
                Some(api_at) => self.store.touch_traffic(&session_id, api_at, true).await,
                None => Ok(()),
            }
            .and(self.store.touch_traffic(&session_id, at, false).await);
            if let Err(e) = written {
                tracing::warn!(session = %session_id, error = %e, "recording activity");
            }
        }
    }

    /// Sign-in through a tower-sessions session: cycles its id, as after any privilege change.
    pub async fn login(
        &self,
        session: &tower_sessions::Session,
        name: &str,
        password: &str,
    ) -> Result<Viewer, AppError> {
        let failed = || {
            AppError::SignInFailed("Wrong user name or password, or the account is locked.".into())
        };
        // Names are at most 64 characters: a longer one is nobody, and is not kept whole.
        let name = name.trim();
        let name = name
            .char_indices()
            .nth(MAX_NAME_CHARS)
            .map_or(name, |(end, _)| &name[..end]);
        if let Err(wait) = self.sign_ins.attempt(name, std::time::Instant::now()) {
            return Err(AppError::RateLimited(format!(
                "Too many failed sign-ins for this name. Try again in {} seconds.",
                wait.as_secs().max(1)
            )));
        }
        let user = self.store.user_by_name(name).await?;
        let hash = user.as_ref().and_then(|u| u.password_hash.clone());
        let ok = auth::check_password(password.to_string(), hash).await;
        let user = match user {
            Some(user) if ok && !user.locked => user,
            _ => {
                let _ = self
                    .store
                    .audit(None, "login.failed", &format!("user:{name}"), "")
                    .await;
                return Err(failed());
            }
        };
        self.sign_ins.succeeded(name);
        self.begin_session(session, &user, "password").await
    }

    /// Signs in the person an OpenID Connect provider vouched for: the account linked to their
    /// identity, made at their first sign-in (when its name is free), with the role their groups
    /// give where the provider decides roles.
    pub async fn oidc_sign_in(
        &self,
        session: &tower_sessions::Session,
        identity: &crate::oidc::Identity,
    ) -> Result<Viewer, AppError> {
        let oidc = self.oidc.as_ref().ok_or(AppError::NotFound)?;
        let role = crate::oidc::role_of(identity, &oidc.config.admin_groups);
        let taken = || {
            AppError::Conflict(format!(
                "The name {} belongs to another account here. Ask an admin.",
                identity.name
            ))
        };
        let user = match self.store.user_by_oidc_subject(&identity.subject).await? {
            Some(user) => user,
            None => {
                let name = checked_user_name(&identity.name)?;
                // Never by name: a provider's user named like a local account (the first
                // admin, say) must not become it. The name's uniqueness refuses that.
                match self
                    .store
                    .create_oidc_user(
                        name,
                        &identity.subject,
                        role.unwrap_or(Role::User),
                        self.config.initial_grant(),
                    )
                    .await
                {
                    Ok(user) => user,
                    // The name is another account's, unless this person's other sign-in
                    // (two tabs, two replicas) made this one a moment ago.
                    Err(StoreError::Duplicate(_)) => self
                        .store
                        .user_by_oidc_subject(&identity.subject)
                        .await?
                        .ok_or_else(taken)?,
                    Err(e) => return Err(e.into()),
                }
            }
        };
        if user.locked {
            return Err(AppError::SignInFailed("This account is locked.".into()));
        }
        let user = match role {
            Some(role) if role != user.role => {
                self.store
                    .set_role(&user.id, role, None, "groups from the identity provider")
                    .await?;
                self.auth.forget_user(&user.id);
                UserRecord { role, ..user }
            }
            _ => user,
        };
        self.begin_session(session, &user, "oidc").await
    }

    /// Lets the single sign-on identity `subject` (`<issuer>|<sub>`) sign in to the account
    /// `user_id`, in place of any it had.
    pub async fn link_identity(&self, user_id: &str, subject: &str) -> Result<(), AppError> {
        let well_formed = subject
            .split_once('|')
            .is_some_and(|(issuer, sub)| issuer.contains("://") && !sub.is_empty());
        if !well_formed {
            return Err(AppError::Invalid(
                "an identity is `<issuer>|<subject>`, as the server's log names it".into(),
            ));
        }
        match self.store.link_oidc(user_id, subject).await {
            Err(StoreError::Duplicate(_)) => Err(AppError::Conflict(
                "another account already signs in with that identity".into(),
            )),
            done => Ok(done?),
        }
    }

    /// A new sign-in for `user` in `session`, under a new id, audited.
    async fn begin_session(
        &self,
        session: &tower_sessions::Session,
        user: &UserRecord,
        how: &str,
    ) -> Result<Viewer, AppError> {
        session.cycle_id().await.map_err(|e| {
            tracing::error!(error = %e, "cycling the session id");
            AppError::Internal
        })?;
        // A single sign-on's round trip gave the session a short life; a sign-in has the usual.
        session.set_expiry(Some(tower_sessions::Expiry::OnInactivity(
            time::Duration::days(auth::SIGN_IN_IDLE_DAYS),
        )));
        session.insert(USER_KEY, &user.id).await.map_err(|e| {
            tracing::error!(error = %e, "writing the session");
            AppError::Internal
        })?;
        session
            .insert(auth::SIGNED_IN_KEY, crate::store::now_ms())
            .await
            .map_err(|e| {
                tracing::error!(error = %e, "writing the session");
                AppError::Internal
            })?;
        // A confirmation was someone's, at some time: a new sign-in starts without one (a
        // single sign-on that confirmed writes its own afterwards).
        for key in [auth::ADMIN_CONFIRMED_KEY, auth::SSO_CONFIRMED_KEY] {
            session.remove_value(key).await.map_err(|e| {
                tracing::error!(error = %e, "writing the session");
                AppError::Internal
            })?;
        }
        self.store
            .audit(Some(&user.id), "login", &format!("user:{}", user.name), how)
            .await?;
        Ok(user.viewer(Scopes::ALL))
    }

    pub async fn logout(
        &self,
        session: &tower_sessions::Session,
        cookie: Option<&str>,
    ) -> Result<(), AppError> {
        // The record first: a lookup after this finds nobody, and one already under way sees
        // the forget below and does not cache what it found.
        session.flush().await.map_err(|e| {
            tracing::error!(error = %e, "ending the session");
            AppError::Internal
        })?;
        if let Some(cookie) = cookie {
            self.auth.forget_cookie(cookie);
        }
        Ok(())
    }

    // ---- API tokens ----

    /// A new API token for the viewer; its secret is shown this once and kept only as a hash.
    pub async fn create_token(
        &self,
        viewer: &Viewer,
        label: &str,
        scopes: Option<Scopes>,
        days: Option<u32>,
    ) -> Result<NewToken, AppError> {
        viewer.scopes.require(Scope::Tokens)?;
        // `admin` is of use to an admin only: nobody else's tokens carry it (nor their viewer).
        if viewer.role != Role::Admin && scopes.is_some_and(|s| s.allows(Scope::Admin)) {
            return Err(AppError::Forbidden(
                "only an admin can give a token the scope `admin`".into(),
            ));
        }
        // A token makes tokens of at most its own scopes; a sign-in, of any. `admin` only when
        // asked for.
        let scopes = scopes.unwrap_or(viewer.scopes.without(Scope::Admin));
        if !scopes.within(viewer.scopes) {
            return Err(AppError::Forbidden(format!(
                "a token can grant only scopes it has itself ({})",
                viewer.scopes
            )));
        }
        let label = label.trim();
        if label.is_empty() || label.chars().count() > 64 || label.chars().any(char::is_control) {
            return Err(AppError::Invalid(
                "a token's label must be 1 to 64 characters, without control characters".into(),
            ));
        }
        if days.is_some_and(|d| !(1..=MAX_TOKEN_DAYS).contains(&d)) {
            return Err(AppError::Invalid(format!(
                "a token lasts 1 to {MAX_TOKEN_DAYS} days (leave the days out for one that does not expire)"
            )));
        }
        let (token, hash) = auth::new_api_token();
        let asked = days.map(|d| crate::store::now_ms() + i64::from(d) * 86_400_000);
        // A token that expires makes none that outlives it.
        let expires_at = match (asked, viewer.token_expires_at_ms) {
            (Some(asked), Some(limit)) => Some(asked.min(limit)),
            (asked, limit) => asked.or(limit),
        };
        let id = self
            .store
            .create_token(&viewer.id, &hash, label, scopes, expires_at)
            .await?;
        Ok(NewToken {
            id,
            label: label.to_string(),
            scopes,
            token,
            expires_at,
        })
    }

    /// What a browser's sign-in must show to make a token: see [`Confirmation`].
    /// `confirmed_at` is when this browser last confirmed at the identity provider.
    pub async fn confirmation(
        &self,
        viewer: &Viewer,
        by_token: bool,
        confirmed_at: Option<i64>,
    ) -> Result<Confirmation, AppError> {
        Ok(self
            .confirmation_and_hash(viewer, by_token, confirmed_at)
            .await?
            .0)
    }

    /// The confirmation, and the account's password hash to check it against.
    async fn confirmation_and_hash(
        &self,
        viewer: &Viewer,
        by_token: bool,
        confirmed_at: Option<i64>,
    ) -> Result<(Confirmation, Option<String>), AppError> {
        if by_token {
            return Ok((Confirmation::None, None));
        }
        let user = self
            .store
            .user_by_id(&viewer.id)
            .await?
            .ok_or(AppError::Unauthenticated)?;
        let confirmation = match (&user.password_hash, &self.oidc) {
            (None, Some(oidc)) => Confirmation::SingleSignOn {
                provider: oidc.config.display_name.clone(),
                fresh: confirmed_at
                    .is_some_and(|at| crate::store::now_ms() - at < SSO_CONFIRMATION_MS),
            },
            _ => Confirmation::Password,
        };
        Ok((confirmation, user.password_hash))
    }

    /// Refuses unless the request shows what [`Self::confirmation`] asks for.
    pub async fn confirm_token_maker(
        &self,
        viewer: &Viewer,
        by_token: bool,
        password: Option<&str>,
        confirmed_at: Option<i64>,
    ) -> Result<(), AppError> {
        self.confirm_person(viewer, by_token, password, confirmed_at, "make a token")
            .await
    }

    /// Refuses unless the request shows what [`Self::confirmation`] asks for, before it may `act`.
    pub async fn confirm_person(
        &self,
        viewer: &Viewer,
        by_token: bool,
        password: Option<&str>,
        confirmed_at: Option<i64>,
        act: &str,
    ) -> Result<(), AppError> {
        let (confirmation, hash) = self
            .confirmation_and_hash(viewer, by_token, confirmed_at)
            .await?;
        match confirmation {
            Confirmation::None | Confirmation::SingleSignOn { fresh: true, .. } => Ok(()),
            Confirmation::SingleSignOn { provider, .. } => Err(AppError::Forbidden(format!(
                "confirm who you are with {provider} first (it asks you to sign in again), then {act} within {} minutes",
                SSO_CONFIRMATION_MS / 60_000
            ))),
            Confirmation::Password => {
                let Some(password) = password.filter(|p| !p.is_empty()) else {
                    return Err(AppError::Forbidden(format!(
                        "send your password (`password`) to {act} from a browser's sign-in"
                    )));
                };
                // The sign-in's limit on guesses holds here too: a script in an editor's page
                // sends the cookie, and could otherwise guess the password at full speed.
                if let Err(wait) = self
                    .sign_ins
                    .attempt(&viewer.name, std::time::Instant::now())
                {
                    return Err(AppError::RateLimited(format!(
                        "Too many wrong passwords. Try again in {} seconds.",
                        wait.as_secs().max(1)
                    )));
                }
                if auth::check_password(password.to_string(), hash).await {
                    self.sign_ins.succeeded(&viewer.name);
                    Ok(())
                } else {
                    let _ = self
                        .store
                        .audit(
                            Some(&viewer.id),
                            "confirm.failed",
                            &format!("user:{}", viewer.id),
                            act,
                        )
                        .await;
                    Err(AppError::Forbidden("That is not your password.".into()))
                }
            }
        }
    }

    /// The viewer's tokens, each with what it may do: `admin` only while the viewer is an admin.
    pub async fn tokens(&self, viewer: &Viewer) -> Result<Vec<TokenRecord>, AppError> {
        viewer.scopes.require(Scope::Tokens)?;
        let mut tokens = self.store.tokens_of(&viewer.id).await?;
        if viewer.role != Role::Admin {
            for token in &mut tokens {
                token.scopes = token.scopes.without(Scope::Admin);
            }
        }
        Ok(tokens)
    }

    /// Ends one of the viewer's tokens at once: requests with it are refused from now on, and
    /// editor connections opened with it close.
    pub async fn revoke_token(&self, viewer: &Viewer, id: &str) -> Result<(), AppError> {
        viewer.scopes.require(Scope::Tokens)?;
        if !self.store.revoke_token(&viewer.id, id).await? {
            return Err(AppError::NotFound);
        }
        self.auth.forget_user(&viewer.id);
        Ok(())
    }
}

const MAX_NAME_CHARS: usize = 64;

/// Characters that show nothing (zero-width, direction overrides): two names that look the same
/// must be the same name.
fn is_invisible(c: char) -> bool {
    matches!(c, '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2060}'..='\u{2064}' | '\u{FEFF}')
}

/// How long a confirmation at the identity provider lets a browser's sign-in make tokens.
const SSO_CONFIRMATION_MS: i64 = 5 * 60 * 1000;

/// The longest a token may last when it expires at all.
const MAX_TOKEN_DAYS: u32 = 365;

pub use app::model::NewToken;

/// A user name as given, trimmed, if it is one: 1 to 64 characters, without '/', control or
/// invisible characters.
fn checked_user_name(name: &str) -> Result<&str, AppError> {
    let name = name.trim();
    if name.is_empty()
        || name.chars().count() > MAX_NAME_CHARS
        || name
            .chars()
            .any(|c| c.is_control() || c == '/' || is_invisible(c))
    {
        return Err(AppError::Invalid(
            "a user name must be 1 to 64 characters, without '/', control or invisible characters"
                .into(),
        ));
    }
    Ok(name)
}

fn by_token(request: &http::request::Parts) -> bool {
    auth::bearer_token(&request.headers).is_some()
}

/// A viewer who just proved who they are: an admin may act as one in this request.
pub fn confirmed(viewer: Viewer) -> Viewer {
    if viewer.role == Role::Admin {
        Viewer {
            scopes: viewer.scopes.with(Scope::Admin),
            ..viewer
        }
    } else {
        viewer
    }
}

/// When this browser last confirmed who it is at the identity provider.
async fn sso_confirmed_at(request: &http::request::Parts) -> Option<i64> {
    auth::sso_confirmed_at(request.extensions.get::<tower_sessions::Session>()?).await
}

/// The pages' door: server functions call these through `Arc<dyn Backend>`.
#[derive(Clone)]
pub struct PagesBackend(pub Arc<Service>);

#[async_trait::async_trait]
impl app::api::Backend for PagesBackend {
    async fn viewer(&self, request: &http::request::Parts) -> Result<Option<Viewer>, AppError> {
        Ok(self
            .0
            .auth
            .caller(&request.headers)
            .await?
            .map(|c| c.viewer()))
    }

    fn single_sign_on(&self) -> Option<String> {
        self.0.oidc.as_ref().map(|o| o.config.display_name.clone())
    }

    async fn login(
        &self,
        request: &http::request::Parts,
        name: &str,
        password: &str,
    ) -> Result<Viewer, AppError> {
        let session = request
            .extensions
            .get::<tower_sessions::Session>()
            .ok_or(AppError::Internal)?;
        let viewer = self.0.login(session, name, password).await?;
        // The id the browser came with is gone from the store; gone from the cache too.
        if let Some(cookie) = auth::session_cookie(&request.headers) {
            self.0.auth.forget_cookie(cookie);
        }
        Ok(viewer)
    }

    async fn logout(&self, request: &http::request::Parts) -> Result<(), AppError> {
        let session = request
            .extensions
            .get::<tower_sessions::Session>()
            .ok_or(AppError::Internal)?;
        self.0
            .logout(session, auth::session_cookie(&request.headers))
            .await
    }

    async fn dashboard(&self, viewer: &Viewer) -> Result<Dashboard, AppError> {
        self.0.dashboard(viewer).await
    }

    async fn tokens_page(&self, request: &http::request::Parts) -> Result<TokensPage, AppError> {
        let viewer = self
            .viewer(request)
            .await?
            .ok_or(AppError::Unauthenticated)?;
        let confirmation = self
            .0
            .confirmation(&viewer, by_token(request), sso_confirmed_at(request).await)
            .await?;
        Ok(TokensPage {
            tokens: self.0.tokens(&viewer).await?,
            viewer,
            confirmation,
        })
    }

    async fn make_token(
        &self,
        request: &http::request::Parts,
        form: app::api::TokenForm,
    ) -> Result<NewToken, AppError> {
        let viewer = self
            .viewer(request)
            .await?
            .ok_or(AppError::Unauthenticated)?;
        self.0
            .confirm_token_maker(
                &viewer,
                by_token(request),
                form.password.as_deref(),
                sso_confirmed_at(request).await,
            )
            .await?;
        // A sign-in that proved itself just now: an admin's may give the new token `admin`. A
        // token only ever grants what it has.
        let viewer = if by_token(request) {
            viewer
        } else {
            confirmed(viewer)
        };
        self.0
            .create_token(&viewer, &form.label, Some(form.scopes), form.days)
            .await
    }

    async fn revoke_token(&self, viewer: &Viewer, id: &str) -> Result<(), AppError> {
        self.0.revoke_token(viewer, id).await
    }

    async fn launch(
        &self,
        viewer: &Viewer,
        request: LaunchRequest,
    ) -> Result<SessionView, AppError> {
        self.0.launch(viewer, request).await
    }

    async fn heartbeat(
        &self,
        viewer: &Viewer,
        id: &str,
        input: bool,
    ) -> Result<SessionView, AppError> {
        self.0.heartbeat(viewer, id, input).await?;
        self.0.session(viewer, id).await
    }

    async fn extend(
        &self,
        viewer: &Viewer,
        id: &str,
        minutes: u32,
    ) -> Result<SessionView, AppError> {
        self.0.extend(viewer, id, minutes).await
    }

    async fn session(&self, viewer: &Viewer, id: &str) -> Result<SessionView, AppError> {
        self.0.session(viewer, id).await
    }

    async fn stop(&self, viewer: &Viewer, id: &str) -> Result<SessionView, AppError> {
        self.0.stop(viewer, id).await
    }

    async fn admin_users(
        &self,
        viewer: &Viewer,
        query: &app::domain::listing::ListQuery,
    ) -> Result<app::domain::listing::Page<AdminUser>, AppError> {
        self.0.admin_users(viewer, query).await
    }

    async fn admin_sessions(
        &self,
        viewer: &Viewer,
        query: &app::domain::listing::ListQuery,
    ) -> Result<app::domain::listing::Page<AdminSession>, AppError> {
        self.0.admin_sessions(viewer, query).await
    }

    async fn admin_audit(
        &self,
        viewer: &Viewer,
        query: &app::domain::listing::ListQuery,
    ) -> Result<app::domain::listing::Page<AuditLine>, AppError> {
        self.0.admin_audit(viewer, query).await
    }

    async fn admin_usage(
        &self,
        viewer: &Viewer,
        query: &app::domain::listing::ListQuery,
    ) -> Result<app::domain::listing::Page<UsageRow>, AppError> {
        self.0.admin_usage(viewer, query).await
    }

    async fn admin_access(
        &self,
        request: &http::request::Parts,
    ) -> Result<app::model::AdminAccess, AppError> {
        let viewer = self
            .viewer(request)
            .await?
            .ok_or(AppError::Unauthenticated)?;
        if viewer.role != Role::Admin {
            return Err(AppError::Forbidden("this is for admins only".into()));
        }
        let confirmation = self
            .0
            .confirmation(&viewer, by_token(request), sso_confirmed_at(request).await)
            .await?;
        Ok(app::model::AdminAccess {
            confirmed: viewer.scopes.allows(Scope::Admin),
            confirmation,
        })
    }

    async fn confirm_admin(
        &self,
        request: &http::request::Parts,
        password: &str,
    ) -> Result<(), AppError> {
        let viewer = self
            .viewer(request)
            .await?
            .ok_or(AppError::Unauthenticated)?;
        if viewer.role != Role::Admin {
            return Err(AppError::Forbidden("this is for admins only".into()));
        }
        if by_token(request) {
            return Err(AppError::Invalid(
                "a token has the scope `admin` or not: there is nothing to confirm".into(),
            ));
        }
        // An account without a password confirms at its provider, whose sign-in opens the pages.
        if let Confirmation::SingleSignOn { provider, .. } = self
            .0
            .confirmation(&viewer, false, sso_confirmed_at(request).await)
            .await?
        {
            return Err(AppError::Invalid(format!(
                "your account confirms with {provider}: sign in again there"
            )));
        }
        self.0
            .confirm_person(
                &viewer,
                false,
                Some(password),
                sso_confirmed_at(request).await,
                "use the admin pages",
            )
            .await?;
        let session = request
            .extensions
            .get::<tower_sessions::Session>()
            .ok_or(AppError::Internal)?;
        session
            .insert(auth::ADMIN_CONFIRMED_KEY, crate::store::now_ms())
            .await
            .map_err(|e| {
                tracing::error!(error = %e, "recording an admin's confirmation");
                AppError::Internal
            })?;
        // The cached sign-in was resolved without it.
        if let Some(cookie) = auth::session_cookie(&request.headers) {
            self.0.auth.forget_cookie(cookie);
        }
        Ok(())
    }

    fn admin_settings(&self, viewer: &Viewer) -> Result<Vec<SettingsSection>, AppError> {
        self.0.admin_settings(viewer)
    }

    async fn admin_pool(&self, viewer: &Viewer) -> Result<Vec<AdminGpu>, AppError> {
        self.0.admin_pool(viewer).await
    }

    async fn change_user(
        &self,
        viewer: &Viewer,
        user_id: &str,
        change: UserChange,
    ) -> Result<(), AppError> {
        self.0.change_user(viewer, user_id, &change).await
    }

    async fn grant_credits(
        &self,
        viewer: &Viewer,
        user_id: &str,
        amount: &str,
        note: &str,
    ) -> Result<i64, AppError> {
        self.0
            .grant_credits(Some(viewer), user_id, amount, note)
            .await
    }

    async fn admin_stop(&self, viewer: &Viewer, id: &str) -> Result<AdminSession, AppError> {
        self.0.admin_stop(viewer, id).await
    }

    async fn admin_open_editor(
        &self,
        viewer: &Viewer,
        id: &str,
    ) -> Result<app::model::EditorAccess, AppError> {
        self.0.admin_open_editor(viewer, id).await
    }

    async fn set_user_quota(
        &self,
        viewer: &Viewer,
        user_id: &str,
        overrides: app::domain::quota::Overrides,
    ) -> Result<app::domain::quota::Limits, AppError> {
        self.0.set_user_quota(viewer, user_id, &overrides).await
    }

    async fn promote_file(
        &self,
        viewer: &Viewer,
        session_id: &str,
        request: app::domain::promotion::PromotionRequest,
    ) -> Result<app::model::PromotionView, AppError> {
        self.0.request_promotion(viewer, session_id, &request).await
    }

    async fn promotions(&self, viewer: &Viewer) -> Result<app::model::Promotions, AppError> {
        let settings = &self.0.config.promotion;
        Ok(app::model::Promotions {
            enabled: settings.enabled(),
            needs_approval: settings.require_approval,
            items: self.0.promotions(viewer).await?,
        })
    }

    async fn admin_promotions(
        &self,
        viewer: &Viewer,
        query: &app::domain::listing::ListQuery,
    ) -> Result<app::domain::listing::Page<app::model::PromotionView>, AppError> {
        self.0.admin_promotions(viewer, query).await
    }

    async fn decide_promotion(
        &self,
        viewer: &Viewer,
        id: &str,
        decision: app::domain::promotion::Decision,
        reason: Option<String>,
    ) -> Result<app::model::PromotionView, AppError> {
        self.0
            .decide_promotion(viewer, id, decision, reason.as_deref())
            .await
    }

    async fn admin_images(&self, viewer: &Viewer) -> Result<Vec<ImageView>, AppError> {
        self.0.admin_images(viewer).await
    }

    async fn add_image(
        &self,
        viewer: &Viewer,
        image: app::domain::images::NewImage,
    ) -> Result<ImageView, AppError> {
        self.0.add_image(viewer, &image).await
    }

    async fn set_image_state(
        &self,
        viewer: &Viewer,
        id: &str,
        state: app::domain::images::ImageState,
    ) -> Result<ImageView, AppError> {
        self.0.set_image_state(viewer, id, state).await
    }
}
