//! After a restart, before serving: the pool as configured, and every session found again,
//! adopted or ended.

use super::Guard;
use crate::store::StoreError;
use app::domain::session::{EndReason, SessionState};

impl Guard {
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
        let catalog = self.launcher.catalog(&self.store.pool().await?);
        for record in self.store.live_sessions().await? {
            let alive = match &record.runtime_handle {
                Some(handle) => self.runtime.is_alive(handle).await,
                None => false,
            };
            match record.state {
                // A parked editor lives on frozen, and resumes as before.
                SessionState::Ready | SessionState::Parked if alive => {
                    tracing::info!(session = %record.id, state = %record.state, "re-adopted an editor");
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
                        self.lifecycle
                            .stop_session(&record.id, EndReason::Failed, Some(&detail))
                            .await;
                    }
                }
                SessionState::Ready | SessionState::Parked => {
                    // It may have died with the machine, while no server ran: charged until
                    // the last time a server was watching it, not for the time we were away.
                    if let Some(watched) = self
                        .store
                        .lease_expires_at(crate::service::guard::REAPER_LEASE)
                        .await?
                    {
                        self.store.charge_until(&record.id, watched).await?;
                    }
                    self.lifecycle
                        .stop_session(
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
            self.lifecycle.stop_session(
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
}
