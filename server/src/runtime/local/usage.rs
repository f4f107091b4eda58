//! What editors use, summed over each one's whole process tree (CPU and memory from
//! `/proc` or its cgroup, GPU from NVML).

use super::LocalRuntime;
use super::handle::Handle;
use std::collections::HashMap;
use std::time::Instant;

/// The editors' leaders by pid, from their handles.
pub(super) fn leaders_of(handles: &[String]) -> std::collections::HashMap<u32, String> {
    handles
        .iter()
        .filter_map(|raw| {
            let handle: Handle = serde_json::from_str(raw).ok()?;
            // A pid that now belongs to another process must not lend it its work.
            (handle.pid > 0 && handle.alive()).then(|| (handle.pid as u32, raw.clone()))
        })
        .collect()
}

/// Which of `pids` (an editor's processes) hold GPU memory now.
pub(super) async fn gpu_memory_pids(rt: &LocalRuntime, pids: Vec<i32>) -> Vec<u32> {
    let Some(sampler) = sampler(rt).await else {
        return Vec::new();
    };
    tokio::task::spawn_blocking(move || {
        sampler
            .memory()
            .iter()
            .filter(|p| p.bytes > 0 && pids.contains(&(p.pid as i32)))
            .map(|p| p.pid)
            .collect()
    })
    .await
    .unwrap_or_default()
}

/// The NVML sampler, opened on first use; None where there is no NVIDIA driver.
async fn sampler(rt: &LocalRuntime) -> Option<std::sync::Arc<crate::runtime::gpu::NvmlSampler>> {
    match rt.nvml.get() {
        Some(sampler) => sampler.clone(),
        None => {
            // Loading the driver can take seconds: off the async threads.
            let opened = tokio::task::spawn_blocking(|| {
                crate::runtime::gpu::NvmlSampler::open().map(std::sync::Arc::new)
            })
            .await
            .unwrap_or(None);
            rt.nvml.get_or_init(|| opened).clone()
        }
    }
}

/// Each editor's GPU use (see [`crate::runtime::Runtime::gpu_usage`]).
pub(super) async fn gpu(
    rt: &LocalRuntime,
    handles: &[String],
) -> HashMap<String, crate::runtime::GpuUsage> {
    let Some(sampler) = sampler(rt).await else {
        return Default::default();
    };
    let leaders = leaders_of(handles);
    tokio::task::spawn_blocking(move || {
        let (memory, samples) = sampler.sample();
        let parents: std::collections::HashMap<u32, u32> = crate::runtime::procfs::read_processes()
            .into_iter()
            .map(|p| (p.pid, p.ppid))
            .collect();
        let now_us = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_micros() as u64)
            .unwrap_or(0);
        crate::runtime::gpu::usage_by_editor(
            &leaders,
            |pid| parents.get(&pid).copied(),
            &memory,
            &samples,
            now_us,
        )
    })
    .await
    .unwrap_or_default()
}

/// Each editor's CPU use since the previous call, in cores.
pub(super) async fn cpu(rt: &LocalRuntime, handles: &[String]) -> HashMap<String, f64> {
    use crate::runtime::procfs;
    let leaders = leaders_of(handles);
    let ticks = tokio::task::spawn_blocking(move || {
        procfs::ticks_by_editor(&leaders, &procfs::read_processes())
    })
    .await
    .unwrap_or_default();
    let now = Instant::now();
    let per_second = procfs::ticks_per_second();
    let mut seen = rt.cpu_seen.lock().unwrap_or_else(|e| e.into_inner());
    let mut load = std::collections::HashMap::new();
    for (handle, now_ticks) in &ticks {
        if let Some((then, then_ticks)) = seen.get(handle) {
            let seconds = now.duration_since(*then).as_secs_f64();
            load.insert(
                handle.clone(),
                procfs::cores_between(*then_ticks, *now_ticks, per_second, seconds),
            );
        }
    }
    // Editors that ended are forgotten.
    *seen = ticks.into_iter().map(|(h, t)| (h, (now, t))).collect();
    load
}

/// Each editor's memory in use, in MiB.
pub(super) async fn memory(handles: &[String]) -> HashMap<String, u64> {
    use crate::runtime::procfs;
    let handles = handles.to_vec();
    tokio::task::spawn_blocking(move || {
        let mut used = std::collections::HashMap::new();
        // A sandboxed editor's cgroup knows exactly; the others are summed from /proc.
        let mut uncounted = Vec::new();
        for raw in handles {
            let group = serde_json::from_str::<Handle>(&raw)
                .ok()
                .and_then(|h| h.sandbox?.cgroup);
            match group.and_then(|g| g.working_set_bytes()) {
                Some(bytes) => {
                    used.insert(raw, bytes / (1024 * 1024));
                }
                None => uncounted.push(raw),
            }
        }
        if !uncounted.is_empty() {
            let page = procfs::page_bytes();
            let pages =
                procfs::rss_pages_by_editor(&leaders_of(&uncounted), &procfs::read_processes());
            used.extend(
                pages
                    .into_iter()
                    .map(|(handle, pages)| (handle, pages * page / (1024 * 1024))),
            );
        }
        used
    })
    .await
    .unwrap_or_default()
}
