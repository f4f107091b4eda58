//! After a restart or a crash: what no session owns any more is ended and cleared away.

use super::LocalRuntime;
use super::handle::{GONE, HANDLE_FILE, Handle};
use super::plan::safe_name;
use super::stop::stop_editor;
use std::time::Duration;

/// Stops every editor whose handle no launch of `owned` names, then the sessions' groups and
/// slots no handle named (a server that died mid-start); how many editors were still running.
pub(super) async fn sweep(rt: &LocalRuntime, owned: &std::collections::HashSet<String>) -> usize {
    let mut stopped = 0;
    // No run folder yet: no handle to look at, but there may still be groups (below).
    let mut entries = tokio::fs::read_dir(rt.data_dir.join("run")).await.ok();
    while let Some(Ok(Some(entry))) = match entries.as_mut() {
        Some(entries) => Some(entries.next_entry().await),
        None => None,
    } {
        let launch_id = entry.file_name().to_string_lossy().into_owned();
        if entry.path().extension().is_some_and(|e| e == GONE) {
            // Left by a server that stopped before it had deleted them.
            let _ = tokio::fs::remove_dir_all(entry.path()).await;
            continue;
        }
        if owned.contains(&launch_id) {
            continue;
        }
        let file = entry.path().join(HANDLE_FILE);
        let Ok(raw) = tokio::fs::read_to_string(&file).await else {
            continue;
        };
        match serde_json::from_str::<Handle>(&raw) {
            // Without its start time a pid alone could name another process by now.
            Ok(handle) if handle.started.is_some() => {
                let alive = handle.alive();
                if alive {
                    tracing::warn!(launch = %launch_id, pid = handle.pid, "stopping an editor that no session owns");
                }
                // Also when its leader is gone: what is left of its group goes too.
                stop_editor(&handle).await;
                stopped += usize::from(alive);
            }
            _ => {
                let _ = tokio::fs::remove_file(&file).await;
            }
        }
    }
    // Sessions' groups and slots no handle named (a server that died mid-start).
    if let Some(sandbox) = rt.sandbox() {
        if let Some(layout) = &sandbox.cgroups {
            for name in layout.groups() {
                if owned.contains(&name) {
                    continue;
                }
                let group = layout.group(&name);
                if group.is_populated() {
                    tracing::warn!(launch = %name, "ending a sandbox that no session owns");
                    group.kill();
                    stopped += 1;
                    // A killed task leaves its group as it exits: a moment later.
                    for _ in 0..100 {
                        if !group.is_populated() {
                            break;
                        }
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
                group.remove();
            }
        }
        if let Ok(mut slots) = tokio::fs::read_dir(rt.data_dir.join("slots")).await {
            while let Ok(Some(slot)) = slots.next_entry().await {
                let name = slot.file_name().to_string_lossy().into_owned();
                if !owned.iter().any(|id| safe_name(id) == name) {
                    let path = slot.path();
                    let _ = tokio::task::spawn_blocking(move || {
                        crate::runtime::sandbox::release_slot(&path)
                    })
                    .await;
                }
            }
        }
    }
    stopped
}
