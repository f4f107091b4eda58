//! The activity sampler: asks each ready editor whether it works.

use super::Guard;
use crate::runtime::editors;
use app::domain::reaper::{self};
use app::domain::session::SessionState;
use app::domain::usage;

impl Guard {
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
        let now = self.store.now();
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
