//! A pod's memory cgroup, as a container runtime makes one: the container's memory limit, its
//! OOM kills counted, everything in it killed at the end. cgroup v2, or v1's memory controller,
//! under this process's own group (`/proc/self/cgroup`).

use std::path::{Path, PathBuf};

/// Where the pods' groups go.
#[derive(Clone, Debug)]
pub struct MemoryGroups {
    base: PathBuf,
    v2: bool,
}

impl MemoryGroups {
    /// Groups under `parent` in this process's own memory group; None where none can be made.
    pub fn detect(parent: &str) -> Option<Self> {
        let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
        let root = Path::new("/sys/fs/cgroup");
        let path_of = |wanted: &dyn Fn(&str) -> bool| {
            own.lines().find_map(|line| {
                let mut parts = line.splitn(3, ':');
                let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
                wanted(controllers).then(|| path.trim_start_matches('/').to_string())
            })
        };
        let groups = if root.join("memory/cgroup.procs").exists() {
            let own = path_of(&|c: &str| c.split(',').any(|c| c == "memory"))?;
            MemoryGroups {
                base: root.join("memory").join(own).join(parent),
                v2: false,
            }
        } else {
            let own = path_of(&|c: &str| c.is_empty())?;
            MemoryGroups {
                base: root.join(own).join(parent),
                v2: true,
            }
        };
        std::fs::create_dir_all(&groups.base).ok()?;
        if groups.v2 {
            std::fs::write(groups.base.join("cgroup.subtree_control"), "+memory").ok()?;
        }
        Some(groups)
    }

    /// A new group limited to `limit_bytes`.
    pub fn create(&self, name: &str, limit_bytes: Option<u64>) -> std::io::Result<PathBuf> {
        let dir = self.base.join(name);
        std::fs::create_dir_all(&dir)?;
        if let Some(limit) = limit_bytes {
            if self.v2 {
                std::fs::write(dir.join("memory.max"), limit.to_string())?;
                let _ = std::fs::write(dir.join("memory.swap.max"), "0");
            } else {
                std::fs::write(dir.join("memory.limit_in_bytes"), limit.to_string())?;
                let _ = std::fs::write(dir.join("memory.memsw.limit_in_bytes"), limit.to_string());
            }
        }
        Ok(dir)
    }

    /// How many times the kernel killed a process of the group for memory.
    pub fn oom_kills(&self, dir: &Path) -> u64 {
        let file = if self.v2 {
            "memory.events"
        } else {
            "memory.oom_control"
        };
        std::fs::read_to_string(dir.join(file))
            .ok()
            .and_then(|text| {
                text.lines().find_map(|l| {
                    l.strip_prefix("oom_kill ")
                        .and_then(|n| n.trim().parse().ok())
                })
            })
            .unwrap_or(0)
    }

    /// Kills what is left in the group and removes it.
    pub fn remove(&self, dir: &Path) {
        for _ in 0..50 {
            let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
            for pid in procs.lines().filter_map(|p| p.trim().parse::<i32>().ok()) {
                // SAFETY: a signal to a process of the pod's own group.
                unsafe { crate::kubelet::signal(pid, 9) };
            }
            if std::fs::remove_dir(dir).is_ok() || !dir.exists() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// Removes the parent, once empty.
    pub fn remove_base(&self) {
        let _ = std::fs::remove_dir(&self.base);
    }
}
