//! The guardrails at run time: the reaper (timer, idle, crashed editors), the queue's dispatcher,
//! the warm pool, the activity sampler, heartbeats and extensions, recovery after a restart and the
//! instance lease. The rules themselves are pure (`app::domain::{reaper, idle, quota, credits}`);
//! this is where they meet the store and the runtime.
//!
//! The reaper ([`Guard::reap`]) runs on every background tick (`idle.reaper_period_ms`, 5 s by
//! default) on the replica that holds the `reaper` lease (three periods long). The verdict on each
//! live session is `app::domain::reaper::verdict`: a locked account's sessions end first, queued
//! ones included (`admin`, unused credits back); then, for a ready one, its time (`timer`, the
//! whole duration charged), idleness (`idle`) and, asked of the runtime only when nothing else ends
//! it, whether its editor lives (`crash`, so within one period). While launches wait for a slice
//! size, that size's sessions are judged idle after `idle.pressure_timeout_seconds` instead
//! ([`Core::idle_policy_now`], which the session page warns by too; off by default, measured in
//! BENCHMARKS.md section 14: what counts as work is unchanged). It then finishes what nothing
//! drives any more (`reaper::overdue`): a session `starting` for longer than twice the readiness
//! timeout plus a minute (a runtime may wait the timeout for a placement, then again for the
//! editor; past that its launch task met a database error, or ran on a replica that died) ends
//! `failed` with every credit back, and a stop not finished after two minutes is driven again. Last
//! it dispatches the queue, telling the rest their new place, and checks the warm pool. Every end
//! goes through `stop_session`, which is idempotent, so a second replica or a second pass does
//! nothing. A pass over 2,000 ready sessions takes 52 ms on SQLite and 17 ms on PostgreSQL
//! (BENCHMARKS.md, section 5).
//!
//! The dispatcher also runs at once when a stop here frees a slot ([`Guard::keep_queue_moving`]),
//! and not at all once shutdown has begun: slots freed by the shutdown's own stops are not handed
//! out, and the queue keeps its place for the next start.
//!
//! The warm pool ([`Guard::keep_warm_pool`]) keeps `pool.warm` editors started per (editor, slice
//! size) on free slots, refills after each launch that took one, replaces ones that die, and backs
//! off a minute after a failed start. Queued launches start cold (their id is fixed already). A
//! warm editor's handle is stored the moment its process exists, before it answers, so a shutdown
//! in the middle of a start still stops it; shutdown waits for every warm editor to stop; a new
//! server forgets the records a dead one left half-started, and stops what they name. A warm launch
//! is ready in 0.009–0.011 s at the median, against 0.72–2.47 s cold (BENCHMARKS.md, section 5).
//! On a cluster editors are started ahead per user instead (`kube.warm_pods`: a pod in the
//! namespace of a user whose dashboard is open, which only their launch takes), beside the
//! chart's placeholder pods; ARCHITECTURE.md has the design record.
//!
//! The sampler ([`Guard::sample_activity`], every `idle.sample_seconds`) asks each ready editor
//! whether it works: a Jupyter kernel busy or starting, GPU work the runtime reports, or the
//! editor's processes using `idle.busy_cpu_percent` of a core or more (`reaper::busy`); any of them
//! moves `last_busy_at`. The GPU readings are also added to the session's sums for the usage page,
//! and every reading (GPU, CPU, RAM, busy) to the session's minute (`session_samples`, the minute's
//! highest; kept `history.retention_days`) for the session page's sparklines and usage per day.
//!
//! After a restart, before serving ([`Guard::recover`]): a `ready` session whose process still
//! lives is re-adopted (the proxy finds it again); a `queued` one keeps its place in line, unless
//! the pool no longer has its size (the configuration changed), which ends it with a refund;
//! anything else ends with a refund (`crash` or `failed`), and a `ready` one whose editor died
//! while no server ran (with the machine, say) is charged only until the reaper lease last ran out
//! (`sessions.charge_until`), not for the downtime. Several servers may share one PostgreSQL
//! database, so every server keeps a lease `instance:<id>` alive (60 s, renewed every 15 s by a
//! task of its own, given up at shutdown) and marks the sessions whose launch it drives
//! (`sessions.driver`): a starting session whose driver still holds its lease is left to it, unless
//! the driver was a process of this machine that is gone (an instance is `<host>~<pid>~<random>`,
//! [`died_here`]), and one not marked yet to the overdue rule; stranded launches end together. Last, the runtime stops every editor that no live
//! session or ready pre-started editor owns (`Runtime::sweep`; on kube the reconciler deletes such
//! pods).

use super::{Core, Guard, Sessions};
use crate::runtime::editors;
use crate::runtime::{EditorLaunch, RuntimeError, SliceBinding};
use crate::store::{StoreError, WarmRecord, queue_message};
use app::domain::launch::EditorKind;
use app::domain::quota::{self, Extended, ExtensionLimits, ExtensionRefused};
use app::domain::reaper::{self, Watch};
use app::domain::scope::Scope;
use app::domain::session::{EndReason, SessionState};
use app::domain::usage;
use app::error::AppError;
use app::model::{SessionView, Viewer};
use std::sync::Arc;
use std::time::Duration;

/// Whether the server `instance` (`<host>~<pid>~<random>`) was a process of this host (`here`:
/// its name and this process's pid) that no longer runs: its pid is gone, or is this process's
/// own (a container restarted in place) while `ours` does not know it. Another host's, or an id
/// of another form, cannot be told: its lease decides.
pub fn died_here(
    instance: &str,
    here: (&str, u32),
    alive: impl Fn(u32) -> bool,
    ours: impl Fn(&str) -> bool,
) -> bool {
    let mut parts = instance.split('~');
    let (Some(host), Some(pid), Some(_), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    let Ok(pid) = pid.parse::<u32>() else {
        return false;
    };
    !here.0.is_empty()
        && host == here.0
        && if pid == here.1 {
            !ours(instance)
        } else {
            !alive(pid)
        }
}

fn pid_alive(pid: u32) -> bool {
    i32::try_from(pid).is_ok_and(crate::runtime::procfs::process_alive)
}

/// The lease that makes one replica the reaper at a time.
pub(crate) const REAPER_LEASE: &str = "reaper";
/// How long a server's instance lease lasts; it is renewed four times as often, from a task of
/// its own, so that a slow reaper pass or a busy moment does not make the others think it died.
const INSTANCE_LEASE: Duration = Duration::from_secs(60);

/// Keeps this server's instance lease for as long as it serves.
pub async fn keep_instance_lease(service: Guard) {
    let mut renew = tokio::time::interval(INSTANCE_LEASE / 4);
    renew.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        renew.tick().await;
        service.keep_alive().await;
    }
}

/// Why an idle session ended sooner than its timeout.
const PRESSED: &str = "ended sooner for being idle while launches waited for a slice of its size";

/// Waits after a failed warm start before trying that editor again.
const WARM_RETRY: Duration = Duration::from_secs(60);
/// A user whose dashboard asked nothing for this long has left: their pre-started editor goes.
/// The open dashboard asks every 15 s and is noted once a minute.
const WARM_USER_GONE: Duration = Duration::from_secs(3 * 60);
/// Only users who launched this recently get an editor ahead of their launch.
const WARM_USER_RECENT: Duration = Duration::from_secs(14 * 24 * 3600);

impl Core {
    /// Whether launches may take pre-started editors: configured, and the runtime can bind a
    /// workspace to one afterwards.
    pub(in crate::service) fn prestarts(&self) -> bool {
        !self.config.pool.warm.is_empty() && self.runtime.prestarts_editors()
    }

    /// Whether editors are started ahead for users about to launch (a cluster's pods, each in
    /// its user's namespace: [`Guard::warm_for_users`]).
    pub(in crate::service) fn warms_for_users(&self) -> bool {
        self.kube.is_some() && self.config.kube.warm_pods > 0
    }

    /// The lease that says this server lives: another server starting up leaves the launches
    /// this one drives alone while it is held.
    pub(in crate::service) fn instance_lease(instance: &str) -> String {
        format!("instance:{instance}")
    }

    /// Whether the server `instance` still lives: it holds its lease, and is not a process of
    /// this machine that is gone ([`died_here`]).
    pub(in crate::service) async fn instance_alive(
        &self,
        instance: &str,
    ) -> Result<bool, crate::store::StoreError> {
        let here = (crate::util::host_name(), std::process::id());
        if died_here(
            instance,
            (&here.0, here.1),
            pid_alive,
            crate::util::instance_of_this_process,
        ) {
            return Ok(false);
        }
        self.store.lease_held(&Core::instance_lease(instance)).await
    }

    /// Launches and stops that nothing drives any more (their task met a database error, or ran
    /// on a replica that died) would hold their slot and credits for ever: failed launches end
    /// with a refund, unfinished stops are driven again.
    pub(in crate::service) async fn finish_overdue(
        self: &Arc<Self>,
        live: &[crate::store::SessionRecord],
        now: i64,
    ) {
        let ready_timeout_ms = (self.config.sessions.ready_timeout_seconds * 1000) as i64;
        for record in live
            .iter()
            .filter(|r| matches!(r.state, SessionState::Starting | SessionState::Stopping))
        {
            let since = match self.store.steps(&record.id).await {
                Ok(steps) => steps
                    .iter()
                    .filter(|step| step.state == record.state)
                    .map(|step| step.at_ms)
                    .min()
                    .unwrap_or(record.created_at),
                Err(e) => {
                    tracing::warn!(session = %record.id, error = %e, "reaper: reading steps");
                    continue;
                }
            };
            let Some(action) = reaper::overdue(
                record.state,
                since,
                record.end_reason,
                ready_timeout_ms,
                now,
            ) else {
                continue;
            };
            // Read again: the launch may have become ready since the list was read.
            match self.store.session(&record.id).await {
                Ok(Some(now)) if now.state == record.state => {}
                _ => continue,
            }
            tracing::warn!(session = %record.id, state = %record.state, "reaper finishes an overdue session");
            match action {
                reaper::Overdue::FailLaunch => {
                    self.stop_session(&record.id, EndReason::Failed, Some(reaper::START_OVERDUE))
                        .await
                }
                reaper::Overdue::DriveStop(reason) => {
                    self.stop_session(&record.id, reason, record.detail.as_deref())
                        .await
                }
            }
        }
    }

    /// The idle policy a session of `slice_mib` is judged by now: its slice's, or, while launches
    /// waited for that size at the reaper's last pass, the shorter one (`idle.pressure_timeout_seconds`).
    /// Whole cards (bursts) are held briefly anyway and are left as they are.
    pub fn idle_policy_now(&self, slice_mib: u64, burst: bool) -> app::domain::idle::Policy {
        let policy = self.config.idle_policy(slice_mib);
        let pressed = !burst
            && self
                .pressed
                .read()
                .is_ok_and(|sizes| sizes.iter().any(|(size, _)| *size == slice_mib));
        if pressed {
            policy.pressed(self.config.idle.pressure_timeout_seconds as i64 * 1000)
        } else {
            policy
        }
    }

    /// Wakes the warm-pool keeper (after a launch took an editor).
    pub(in crate::service) fn kick_warm_pool(&self) {
        self.warm_wake.notify_one();
    }

    /// Stops editors pushed off their slots; in the background, since nobody waits for them.
    pub(in crate::service) fn stop_warm(&self, evicted: Vec<WarmRecord>) {
        for warm in evicted {
            if let Some(handle) = warm.runtime_handle {
                let runtime = self.runtime.clone();
                self.spawn(async move {
                    if let Err(e) = runtime.stop(&handle).await {
                        tracing::warn!(warm = %warm.id, error = %e, "stopping a pre-started editor");
                    }
                });
            }
        }
    }

    /// Forgets pre-started editors that died, then tops the pool up.
    pub(in crate::service) async fn check_warm_pool(self: &Arc<Self>) {
        if !self.prestarts() {
            return;
        }
        if let Ok(warm) = self.store.warm_editors().await {
            for w in warm.iter().filter(|w| w.ready) {
                if let Some(handle) = &w.runtime_handle
                    && !self.runtime.is_alive(handle).await
                    && self.store.remove_warm(&w.id).await.unwrap_or(false)
                {
                    tracing::warn!(warm = %w.id, "a pre-started editor died; replacing it");
                }
            }
        }
        self.kick_warm_pool();
    }

    /// Starts one pre-started editor and hands it to the pool; false when it failed to start.
    pub(in crate::service) async fn start_warm(&self, record: WarmRecord) -> bool {
        let slot = self.store.slot(&record.slot_id).await.ok().flatten();
        let gpu = slot
            .as_ref()
            .and_then(|s| self.gpus.iter().find(|g| g.id == s.gpu_id));
        let cores_pct = slot.as_ref().map(|s| s.cores_pct).unwrap_or(100);
        let env = gpu
            .map(|g| {
                crate::runtime::gpu::slice_env(g, record.slice_mib, cores_pct, &self.enforcement)
            })
            .unwrap_or_else(|| vec![("CUDA_VISIBLE_DEVICES".to_string(), String::new())]);
        // One started for a user is theirs from the start (their namespace and workspace).
        let user = match &record.user_id {
            Some(id) => match self.store.user_by_id(id).await {
                Ok(Some(user)) => Some(user),
                _ => {
                    let _ = self.store.remove_warm(&record.id).await;
                    return true;
                }
            },
            None => None,
        };
        let disk_mib = match &user {
            Some(user) => self.disk_quota(&user.id).await,
            None => 0,
        };
        let launch = EditorLaunch {
            session_id: record.id.clone(),
            user_name: user.as_ref().map(|u| u.name.clone()).unwrap_or_default(),
            editor: record.editor,
            base_path: format!("/s/{}/", record.id),
            env,
            slice: SliceBinding::on(gpu, record.slice_mib, cores_pct),
            prestart: user.is_none(),
            image: None,
            disk_mib,
            datasets: Vec::new(),
        };
        let timeout = Duration::from_secs(self.config.sessions.ready_timeout_seconds);
        let running = match self.runtime.start(&launch).await {
            Ok(running) => running,
            Err(e) => return self.warm_failed(&record, e).await,
        };
        // Kept at once, so that a shutdown in the middle of the start still stops it.
        match self.store.warm_started(&record.id, &running.handle).await {
            Ok(true) => {}
            // A launch pushed it off its slot already (and stops what the record named).
            Ok(false) => {
                let _ = self.runtime.stop(&running.handle).await;
                return true;
            }
            Err(e) => {
                let _ = self.runtime.stop(&running.handle).await;
                return self
                    .warm_failed(&record, RuntimeError::Handle(e.to_string()))
                    .await;
            }
        }
        let mut closing = self.closing.subscribe();
        let answered = tokio::select! {
            answered = self.runtime.wait_ready(&launch, &running, timeout) => answered,
            _ = closing.wait_for(|closing| *closing) => {
                Err(RuntimeError::Unavailable("the server is shutting down".into()))
            }
        };
        if let Err(e) = answered {
            let _ = self.runtime.stop(&running.handle).await;
            return self.warm_failed(&record, e).await;
        }
        let ready = self
            .store
            .warm_ready(
                &record.id,
                &running.upstream,
                &running.secret,
                &running.handle,
            )
            .await
            .unwrap_or(false);
        if ready {
            tracing::info!(warm = %record.id, editor = %record.editor, slot = %record.slot_id, "pre-started editor ready");
        } else {
            // A cold launch took the slot while this one started.
            let _ = self.runtime.stop(&running.handle).await;
        }
        true
    }

    /// Forgets a start that did not work out. Not a failure of the editor when the record was
    /// gone already (a launch pushed it off its slot, which stopped it) or the server is closing.
    pub(in crate::service) async fn warm_failed(
        &self,
        record: &WarmRecord,
        error: RuntimeError,
    ) -> bool {
        let removed = self.store.remove_warm(&record.id).await.unwrap_or(true);
        if !removed || *self.closing.borrow() {
            return true;
        }
        tracing::warn!(warm = %record.id, editor = %record.editor, %error, "pre-starting an editor failed");
        false
    }
}

impl Guard {
    /// Refuses what would outlive the server from now on: launches, warm starts, dispatching
    /// the queue (the first step of a shutdown).
    pub fn close(&self) {
        self.closing.send_replace(true);
    }

    /// This server among the replicas, as leases and launches name it.
    pub fn instance(&self) -> &str {
        &self.instance
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

    /// After a restart: re-adopt editors that still answer, end the rest with a refund. Queued
    /// sessions keep their place in line (they have no editor yet, so nothing of theirs was
    /// lost), unless the pool no longer has their size.
    /// At start: where editors cannot be kept apart although a sandbox is wanted, a database
    /// of several accounts is refused (they would read each other's files).
    pub async fn refuse_unisolated_accounts(&self) -> Result<(), String> {
        let wanted = self.config.runtime == crate::config::RuntimeKind::Local
            && self.config.local.isolation == crate::config::local::Isolation::Sandbox;
        if let (true, Err(why)) = (wanted, self.runtime.isolation()) {
            let accounts = self.store.count_users().await.map_err(|e| e.to_string())?;
            if accounts > 1 {
                return Err(format!(
                    "this machine cannot keep editors apart ({why}), and the database has {accounts} accounts: install bubblewrap (scripts/setup.sh), or set local.isolation = \"none\" to let them share the server's account"
                ));
            }
        }
        Ok(())
    }

    pub async fn recover(&self) -> Result<(), StoreError> {
        let mut owned = std::collections::HashSet::new();
        let mut stranded = Vec::new();
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
                        .lease_expires_at(crate::service::guard::REAPER_LEASE)
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
                    stranded.push(record.id);
                }
            }
        }
        // Each stop waits for its editor to go (a second or two): all at once, so that a server
        // that comes back to many stranded launches answers within about one.
        if !stranded.is_empty() {
            tracing::info!(
                launches = stranded.len(),
                "ending launches a server that died left"
            );
        }
        futures_util::future::join_all(stranded.iter().map(|id| {
            self.stop_session(
                id,
                EndReason::Failed,
                Some(
                    "the server restarted before the editor was ready; your credits were refunded",
                ),
            )
        }))
        .await;
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

    /// Renews this server's instance lease, until shutdown begins.
    pub async fn keep_alive(&self) {
        if *self.closing.borrow() {
            return;
        }
        let lease = Core::instance_lease(&self.instance);
        let ttl = INSTANCE_LEASE.as_millis() as i64;
        if let Err(e) = self.store.try_lease(&lease, &self.instance, ttl).await {
            tracing::warn!(error = %e, "renewing this server's lease");
        }
    }

    /// Gives the instance lease up at shutdown: the next server to start need not wait for it to
    /// run out before it ends the launches this one left.
    pub async fn release_instance(&self) {
        let lease = Core::instance_lease(&self.instance);
        if let Err(e) = self.store.release_lease(&lease, &self.instance).await {
            tracing::warn!(error = %e, "releasing this server's lease");
        }
    }

    /// Takes the reaper lease from a holder that is dead (a process of this machine that is gone,
    /// or a server whose own lease ran out): a restarted server reaps, and notices a re-adopted
    /// editor's crash, at once rather than once the dead one's lease runs out.
    async fn take_reaper_from_the_dead(&self, ttl: i64) -> bool {
        let Ok(Some(holder)) = self.store.lease_holder(REAPER_LEASE).await else {
            return false;
        };
        if holder == self.instance || !matches!(self.instance_alive(&holder).await, Ok(false)) {
            return false;
        }
        match self
            .store
            .take_lease_from(REAPER_LEASE, &holder, &self.instance, ttl)
            .await
        {
            Ok(taken) => {
                if taken {
                    tracing::info!(from = %holder, "took the reaper lease from a server that died");
                }
                taken
            }
            Err(e) => {
                tracing::warn!(error = %e, "taking the reaper lease from a server that died");
                false
            }
        }
    }

    /// One reaper pass. Only the lease holder reaps, so two replicas never both end one session;
    /// every step is idempotent anyway (ending an ended session does nothing).
    pub async fn reap(&self) {
        let ttl = (self.config.idle.reaper_period_ms * 3) as i64;
        match self
            .store
            .try_lease(REAPER_LEASE, &self.instance, ttl)
            .await
        {
            Ok(true) => {}
            Ok(false) if self.take_reaper_from_the_dead(ttl).await => {}
            Ok(false) => return,
            Err(e) => {
                tracing::warn!(error = %e, "taking the reaper lease");
                return;
            }
        }
        let live = match self.store.live_sessions().await {
            Ok(live) => live,
            Err(e) => {
                tracing::warn!(error = %e, "reaper: listing sessions");
                return;
            }
        };
        self.metrics.reaper_passed(self.now());
        // A locked account keeps nothing: its sessions end, queued ones included.
        let locked = self.store.locked_user_ids().await.unwrap_or_else(|e| {
            tracing::warn!(error = %e, "reaper: listing locked accounts");
            Default::default()
        });
        let now = self.now();
        // Sizes launches wait for: their idle sessions end sooner.
        let mut waiting: Vec<u64> = live
            .iter()
            .filter(|r| r.state == SessionState::Queued && !r.burst)
            .map(|r| r.slice_mib)
            .collect();
        waiting.sort_unstable();
        waiting.dedup();
        let pressed_since: Vec<(u64, i64)> = match self.pressed.write() {
            Ok(mut pressed) => {
                let since: Vec<(u64, i64)> = waiting
                    .iter()
                    .map(|size| {
                        let before = pressed.iter().find(|(s, _)| s == size).map(|(_, at)| *at);
                        (*size, before.unwrap_or(now))
                    })
                    .collect();
                *pressed = since.clone();
                since
            }
            Err(_) => Vec::new(),
        };
        for record in &live {
            let mut watch = Watch {
                state: record.state,
                locked: locked.contains(&record.user_id),
                ends_at: record.ends_at,
                signals: record.signals(),
                has_editor: record.runtime_handle.is_some(),
                alive: None,
            };
            let policy = self.idle_policy_now(record.slice_mib, record.burst);
            let sooner = policy != self.config.idle_policy(record.slice_mib);
            let mut judged = reaper::verdict(&watch, &policy, now);
            // Pressure that begins while a session is already quiet ends it only once its
            // person has had the warning.
            let since = pressed_since
                .iter()
                .find(|(size, _)| *size == record.slice_mib)
                .map(|(_, at)| *at);
            if let (
                true,
                Some(since),
                reaper::Verdict::End {
                    reason: EndReason::Idle,
                    ..
                },
            ) = (sooner, since, judged)
                && !app::domain::idle::warned_since(since, policy.warn_ms, now)
            {
                judged = reaper::Verdict::Keep;
            }
            if let (reaper::Verdict::AskAlive, Some(handle)) = (judged, &record.runtime_handle) {
                watch.alive = Some(self.runtime.is_alive(handle).await);
                judged = reaper::verdict(&watch, &policy, now);
            }
            if let reaper::Verdict::End {
                mut reason,
                mut detail,
            } = judged
            {
                if let (EndReason::Crash, Some(handle)) = (reason, &record.runtime_handle)
                    && self.runtime.was_lost(handle).await
                {
                    reason = EndReason::Lost;
                    detail = Some(crate::runtime::kube::reconcile::LOST_GONE);
                }
                tracing::info!(session = %record.id, %reason, locked = watch.locked, "reaper ends a session");
                // A crash report carries the editor's last lines, so its owner can tell why.
                let last_words = match (reason, &record.runtime_handle) {
                    (EndReason::Crash, Some(handle)) => self.runtime.last_words(handle).await,
                    _ => String::new(),
                };
                if reason == EndReason::Idle && sooner {
                    detail = Some(PRESSED);
                }
                let detail = detail.map(|d| crate::runtime::with_last_words(d, &last_words));
                self.stop_session(&record.id, reason, detail.as_deref())
                    .await;
            }
        }
        self.finish_overdue(&live, now).await;
        self.dispatch_queue().await;
        self.check_warm_pool().await;
        self.purge_departed().await;
    }

    /// Dispatches the queue whenever a stop here frees a slot (the reaper's pass also does, for
    /// slots freed elsewhere). Runs for the server's life.
    pub async fn keep_queue_moving(self) {
        loop {
            self.queue_wake.notified().await;
            self.dispatch_queue().await;
        }
    }

    /// Gives freed slots to the queue, oldest first, and tells the rest their new place in line.
    pub async fn dispatch_queue(&self) {
        // Shutting down: slots freed by the shutdown's own stops are not handed out, or the
        // queue's head would start an editor only to be cut short; it keeps its place instead.
        if *self.closing.borrow() {
            return;
        }
        let price_on = |gpu_id: &str, slice_mib: u64| self.price_on(gpu_id, slice_mib);
        let dispatched = match self.store.dispatch_queued(&price_on).await {
            Ok(dispatched) => dispatched,
            Err(e) => {
                tracing::warn!(error = %e, "dispatching the queue");
                return;
            }
        };
        for d in &dispatched {
            self.events.publish(&d.session_id, d.step.clone());
            self.stop_warm(d.evicted.clone());
            let Ok(Some(record)) = self.store.session(&d.session_id).await else {
                continue;
            };
            let Ok(Some(user)) = self.store.user_by_id(&record.user_id).await else {
                continue;
            };
            self.drive(&d.session_id).await;
            let service = self.clone();
            let session_id = d.session_id.clone();
            self.spawn(async move { service.run_launch(&session_id, &user.name).await });
        }
        if dispatched.is_empty() {
            return;
        }
        // Everyone still waiting moved up.
        if let Ok(queue) = self.store.queue_positions().await {
            for (id, slice_mib, burst, position) in queue {
                if let Ok(step) = self
                    .store
                    .add_step(&id, &queue_message(slice_mib, burst, position), 20)
                    .await
                {
                    self.events.publish(&id, step);
                }
            }
        }
    }

    // ---- warm pool ----

    /// Keeps `pool.warm` editors started per (editor, slice size) on free slots. Runs for the
    /// server's life; wakes on a launch that took one, and on every reaper pass.
    pub async fn keep_warm_pool(self) {
        if !self.prestarts() && !self.warms_for_users() {
            return;
        }
        // Records still starting belong to a server process that died mid-start: forget them
        // and stop whatever they had started.
        for stale in self.store.warm_editors().await.unwrap_or_default() {
            if !stale.ready && self.store.remove_warm(&stale.id).await.unwrap_or(false) {
                tracing::info!(warm = %stale.id, "forgetting a pre-started editor a previous server left half-started");
                if let Some(handle) = &stale.runtime_handle {
                    let _ = self.runtime.stop(handle).await;
                }
            }
        }
        let mut failed_at: std::collections::HashMap<(EditorKind, u64), tokio::time::Instant> =
            Default::default();
        let mut closing = self.closing.subscribe();
        loop {
            if *closing.borrow_and_update() {
                return;
            }
            let warm = self.store.warm_editors().await.unwrap_or_default();
            let mut starts = Vec::new();
            if self.warms_for_users() {
                starts.extend(self.warm_for_users(&warm).await);
            }
            for target in self.config.pool.warm.iter().filter(|_| self.prestarts()) {
                let Some(editor) = EditorKind::parse(&target.editor) else {
                    continue;
                };
                let key = (editor, target.slice_mib);
                if failed_at
                    .get(&key)
                    .is_some_and(|at| at.elapsed() < WARM_RETRY)
                {
                    continue;
                }
                let installed = self
                    .runtime
                    .availability()
                    .into_iter()
                    .any(|(e, ok)| e == editor && ok.is_ok());
                if !installed {
                    continue;
                }
                let have = warm
                    .iter()
                    .filter(|w| w.editor == editor && w.slice_mib == target.slice_mib)
                    .count() as u32;
                for _ in have..target.count {
                    match self.store.add_warm(editor, target.slice_mib, None).await {
                        Ok(Some(record)) => starts.push((key, record)),
                        Ok(None) => break,
                        Err(e) => {
                            tracing::warn!(error = %e, "reserving a warm slot");
                            break;
                        }
                    }
                }
            }
            let this = &self;
            let results = futures_util::future::join_all(
                starts
                    .into_iter()
                    .map(|(key, record)| async move { (key, this.start_warm(record).await) }),
            )
            .await;
            for (key, ok) in results {
                if !ok {
                    failed_at.insert(key, tokio::time::Instant::now());
                }
            }
            tokio::select! {
                _ = tokio::time::timeout(Duration::from_secs(30), self.warm_wake.notified()) => {}
                _ = closing.changed() => {}
            }
        }
    }

    /// Editors ahead of a launch for users about to launch, on the reaper's replica only (one
    /// keeper for the cluster): retires those whose user left (dashboard unseen for
    /// [`WARM_USER_GONE`]), was locked or launched, and reserves slots for the newest visitors
    /// up to `kube.warm_pods`; returns the reservations to start.
    async fn warm_for_users(&self, warm: &[WarmRecord]) -> Vec<((EditorKind, u64), WarmRecord)> {
        if !matches!(
            self.store.lease_holder(REAPER_LEASE).await,
            Ok(Some(holder)) if holder == self.instance
        ) {
            return Vec::new();
        }
        let now = self.now();
        let seen_since = now - WARM_USER_GONE.as_millis() as i64;
        match self.store.retire_user_warm(seen_since).await {
            Ok(retired) => self.stop_warm(retired),
            Err(e) => tracing::warn!(error = %e, "retiring pre-started editors"),
        }
        let have = warm.iter().filter(|w| w.user_id.is_some()).count();
        let room = (self.config.kube.warm_pods as usize).saturating_sub(have);
        if room == 0 {
            return Vec::new();
        }
        let launched_since = now - WARM_USER_RECENT.as_millis() as i64;
        let candidates = match self
            .store
            .warm_candidates(seen_since, launched_since, room)
            .await
        {
            Ok(candidates) => candidates,
            Err(e) => {
                tracing::warn!(error = %e, "choosing users to pre-start editors for");
                return Vec::new();
            }
        };
        let mut starts = Vec::new();
        for user in candidates {
            // Their launch starts its own editor with the datasets it decides: one pre-started
            // now would never be taken.
            if self.has_datasets(&user.user_id).await {
                continue;
            }
            match self
                .store
                .add_warm(user.editor, user.slice_mib, Some(&user.user_id))
                .await
            {
                Ok(Some(record)) => {
                    tracing::info!(user = %user.user_name, editor = %user.editor, "pre-starting an editor for a user about to launch");
                    starts.push(((user.editor, user.slice_mib), record));
                }
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!(error = %e, "reserving a slot for a pre-started editor");
                    break;
                }
            }
        }
        starts
    }

    /// Stops every pre-started editor and returns once they are gone: at shutdown, tasks
    /// spawned now would die with the process and leave the editors running.
    pub async fn stop_warm_pool(&self) {
        let mut stops = Vec::new();
        // Users' pods stay: they are the cluster's, and the next keeper retires them.
        for warm in self.store.warm_editors().await.unwrap_or_default() {
            if warm.user_id.is_none()
                && self.store.remove_warm(&warm.id).await.unwrap_or(false)
                && let Some(handle) = warm.runtime_handle
            {
                stops.push(async move {
                    if let Err(e) = self.runtime.stop(&handle).await {
                        tracing::warn!(warm = %warm.id, error = %e, "stopping a pre-started editor");
                    }
                });
            }
        }
        futures_util::future::join_all(stops).await;
    }

    // ---- activity ----

    /// Asks each ready editor (and the GPU) whether it is working; a busy kernel or GPU work
    /// counts as activity even with no browser attached.
    pub async fn sample_activity(&self) {
        let Ok(live) = self.store.live_sessions().await else {
            return;
        };
        let ready: Vec<_> = live
            .into_iter()
            .filter(|r| r.state == SessionState::Ready)
            .collect();
        let handles: Vec<String> = ready
            .iter()
            .filter_map(|r| r.runtime_handle.clone())
            .collect();
        let gpu = self.runtime.gpu_usage(&handles).await;
        let cpu = self.runtime.cpu_load(&handles).await;
        let ram = self.runtime.memory_used(&handles).await;
        let now = self.now();
        let cpu_floor = f64::from(self.config.idle.busy_cpu_percent) / 100.0;
        let within = self.config.idle.sample_seconds as f64 * 2.0;
        let probes = ready.iter().map(|record| async {
            let editor_busy = match (&record.upstream, &record.editor_token) {
                (Some(upstream), Some(token)) => {
                    crate::runtime::activity::editor_busy(
                        record.editor,
                        upstream,
                        &format!("/s/{}/", record.id),
                        &editors::upstream_auth(record.editor, token),
                    )
                    .await
                }
                _ => None,
            };
            let gpu_use = record.runtime_handle.as_ref().and_then(|h| gpu.get(h));
            let sample = reaper::Sample {
                editor_busy,
                gpu_active: gpu_use.is_some_and(|u| u.is_active(within)),
                cpu_cores: record
                    .runtime_handle
                    .as_ref()
                    .and_then(|h| cpu.get(h))
                    .copied(),
            };
            let busy_at = reaper::busy(&sample, cpu_floor).then_some(now);
            let reading = usage::Reading {
                at_ms: now,
                gpu_mib: gpu_use.map(|u| u.memory_used_mib),
                gpu_util_pct: gpu_use.map(|u| u.utilization_pct.min(100)),
                cpu_milli: sample.cpu_cores.map(|c| (c * 1000.0).round() as u32),
                ram_mib: record
                    .runtime_handle
                    .as_ref()
                    .and_then(|h| ram.get(h))
                    .copied(),
                busy: busy_at.is_some(),
            };
            if let Err(e) = self.store.record_reading(&record.id, &reading).await {
                tracing::warn!(session = %record.id, error = %e, "recording a reading");
            }
            if let Err(e) = self
                .store
                .record_sample(
                    &record.id,
                    busy_at,
                    gpu_use.map(|u| crate::store::GpuSample {
                        memory_used_mib: u.memory_used_mib,
                        utilization_pct: u.utilization_pct.min(100),
                    }),
                )
                .await
            {
                tracing::warn!(session = %record.id, error = %e, "recording a sample");
            }
        });
        futures_util::future::join_all(probes).await;
        let kept = i64::from(self.config.history.retention_days) * usage::DAY_MS;
        if let Err(e) = self.store.prune_readings(now - kept).await {
            tracing::warn!(error = %e, "forgetting old readings");
        }
    }
}

impl Sessions {
    /// A heartbeat from a visible page of the session's owner; `input` when the person did something.
    pub async fn heartbeat(&self, viewer: &Viewer, id: &str, input: bool) -> Result<(), AppError> {
        viewer.scopes.require(Scope::Sessions)?;
        let record = self.owned_record(viewer, id).await?;
        if !record.state.is_live() {
            return Err(AppError::Conflict("this session has ended".into()));
        }
        self.store.heartbeat(id, self.now(), input).await?;
        Ok(())
    }

    /// Holds credits for `minutes` more and moves the end.
    pub async fn extend(
        &self,
        viewer: &Viewer,
        id: &str,
        minutes: u32,
    ) -> Result<SessionView, AppError> {
        viewer.scopes.require(Scope::Sessions)?;
        let record = self.owned_record(viewer, id).await?;
        let user = self
            .config
            .default_limits()
            .with(&self.store.quota_overrides(&viewer.id).await?);
        let limits = ExtensionLimits {
            user_max_minutes: user.max_minutes,
            server_max_minutes: self.config.sessions.max_minutes,
            burst_max_minutes: self.config.pool.burst_max_minutes,
        };
        let session = Extended {
            running: record.state == SessionState::Ready,
            burst: record.burst,
            ends_at: record.ends_at,
            duration_minutes: record.duration_minutes,
        };
        // Checked here for the person's words, and again in the store's transaction.
        quota::extension(&limits, &session, minutes, self.now()).map_err(
            |refused| match refused {
                ExtensionRefused::Minutes { .. } => AppError::Invalid(refused.to_string()),
                ExtensionRefused::NotRunning | ExtensionRefused::TimeUp => {
                    AppError::Conflict(refused.to_string())
                }
                ExtensionRefused::TooLong { .. } => AppError::QuotaExceeded(refused.to_string()),
            },
        )?;
        let step = self.store.extend(id, minutes, &limits).await?;
        // Asking for more time is a person at the keyboard.
        self.store.heartbeat(id, self.now(), true).await?;
        self.events.publish(id, step);
        self.session(viewer, id).await
    }
}

#[cfg(test)]
mod tests {
    use super::died_here;

    #[test]
    fn a_predecessor_on_this_host_is_dead_once_its_pid_is_gone_or_ours() {
        let here = ("gpu-box", 4242);
        let alive = |pid: u32| pid == 77;
        let ours = |id: &str| id == "gpu-box~4242~live";
        let dead = |id: &str, here: (&str, u32)| died_here(id, here, alive, ours);
        assert!(dead("gpu-box~1234~ab12", here), "its pid is gone");
        assert!(dead("gpu-box~4242~ab12", here), "its pid is ours now");
        assert!(
            !dead("gpu-box~4242~live", here),
            "a server of this very process"
        );
        assert!(!dead("gpu-box~77~ab12", here), "a live replica here");
        assert!(
            !dead("other-box~1234~ab12", here),
            "another host's: its lease decides"
        );
        assert!(
            !dead("0a1b2c3d4e5f60718293", here),
            "an id from before: its lease decides"
        );
        assert!(!dead("gpu-box~x~ab12", here));
        assert!(
            !dead("gpu-box~1234~ab12", ("", 4242)),
            "no host name: nothing told"
        );
    }
}
