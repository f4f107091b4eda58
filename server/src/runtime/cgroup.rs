//! A control group per session: its memory, CPU and process limits, and the one way to end
//! everything it started, whoever its parent is (a kernel, a `setsid -f` job, a double fork).
//!
//! cgroup v2 (one tree, `cgroup.kill`) and v1 (a tree per controller, as on this project's own
//! machines), both nested under the server's own group, so the server's limits still cover its
//! editors. Written here rather than with `cgroups-rs`: a session needs six files, and on v1 the
//! server's own group sits at a different path in each controller, which `cgroups-rs` 0.3 (one
//! path for every controller) does not express.

use std::ffi::CString;
use std::path::{Path, PathBuf};

/// The folder under the server's own group that holds the sessions' groups: one per data
/// directory, so that two servers on one machine never take each other's sessions for orphans.
pub fn parent_name(data_dir: &Path) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(data_dir.as_os_str().as_encoded_bytes());
    format!("gpu-sandbox-{}", &hex::encode(digest)[..12])
}

/// What a session's processes may use together.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Limits {
    pub memory_mib: u64,
    /// CPU time per period, in thousandths of a core.
    pub cpu_millis: u64,
    pub pids: u64,
}

/// The cgroup layout of this machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    pub tree: Tree,
    /// The folder of this server's sessions under its own group ([`parent_name`]).
    pub parent: String,
}

/// Where the server's own group is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Tree {
    /// The unified tree: the server's own group's directory.
    V2(PathBuf),
    /// One directory per controller we use: memory, cpu, pids, freezer.
    V1 {
        memory: PathBuf,
        cpu: PathBuf,
        pids: PathBuf,
        freezer: PathBuf,
    },
}

impl Layout {
    /// This process's own groups, where they can take children; `None` where this process may
    /// not make groups (not root, no delegated subtree) or a controller is missing.
    pub fn detect(parent: &str) -> Option<Layout> {
        let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
        Self::from_proc(&own, Path::new("/sys/fs/cgroup"), parent).filter(Layout::writable)
    }

    /// The layout that `/proc/self/cgroup` (`own`) describes under the mount point `root`.
    pub fn from_proc(own: &str, root: &Path, parent: &str) -> Option<Layout> {
        let tree = Self::tree(own, root)?;
        Some(Layout {
            tree,
            parent: parent.to_string(),
        })
    }

    fn tree(own: &str, root: &Path) -> Option<Tree> {
        let mut v1 = std::collections::HashMap::new();
        let mut unified = None;
        for line in own.lines() {
            let mut parts = line.splitn(3, ':');
            let (Some(_), Some(controllers), Some(path)) =
                (parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            let path = path.trim_start_matches('/');
            if controllers.is_empty() {
                unified = Some(path.to_string());
            }
            for controller in controllers.split(',') {
                v1.insert(controller.to_string(), path.to_string());
            }
        }
        let v1_dir = |controller: &str| {
            let dir = root.join(controller);
            dir.join("cgroup.procs")
                .exists()
                .then(|| dir.join(v1.get(controller).map(String::as_str).unwrap_or("")))
        };
        if let (Some(memory), Some(cpu), Some(pids), Some(freezer)) = (
            v1_dir("memory"),
            v1_dir("cpu"),
            v1_dir("pids"),
            v1_dir("freezer"),
        ) {
            return Some(Tree::V1 {
                memory,
                cpu,
                pids,
                freezer,
            });
        }
        let controllers = std::fs::read_to_string(root.join("cgroup.controllers")).ok()?;
        let has = |c: &str| controllers.split_whitespace().any(|x| x == c);
        (has("memory") && has("cpu") && has("pids"))
            .then(|| Tree::V2(root.join(unified.unwrap_or_default())))
    }

    fn dirs(&self) -> Vec<&Path> {
        match &self.tree {
            Tree::V2(dir) => vec![dir],
            Tree::V1 {
                memory,
                cpu,
                pids,
                freezer,
            } => vec![memory, cpu, pids, freezer],
        }
    }

    /// Whether groups can be made here: the parent folder is made (or there) in each tree.
    fn writable(&self) -> bool {
        self.dirs().iter().all(|dir| {
            let parent = dir.join(&self.parent);
            std::fs::create_dir_all(&parent).is_ok() && {
                let probe = parent.join(format!("probe-{}", std::process::id()));
                let made = std::fs::create_dir(&probe).is_ok();
                let _ = std::fs::remove_dir(&probe);
                made
            }
        }) && self.enable_v2_controllers()
    }

    /// On v2 a group's children get only the controllers its `cgroup.subtree_control` names.
    fn enable_v2_controllers(&self) -> bool {
        let Tree::V2(dir) = &self.tree else {
            return true;
        };
        let parent = dir.join(&self.parent);
        std::fs::write(parent.join("cgroup.subtree_control"), "+memory +cpu +pids").is_ok()
    }

    /// The group of session `name` (made by [`Self::create`]).
    pub fn group(&self, name: &str) -> Group {
        Group {
            dirs: self
                .dirs()
                .into_iter()
                .map(|dir| dir.join(&self.parent).join(name))
                .collect(),
            v2: matches!(self.tree, Tree::V2(_)),
        }
    }

    /// Makes the group of session `name` with `limits`.
    pub fn create(&self, name: &str, limits: &Limits) -> std::io::Result<Group> {
        let group = self.group(name);
        for dir in &group.dirs {
            std::fs::create_dir_all(dir)?;
        }
        group.limit(limits)?;
        Ok(group)
    }

    /// Removes the parent folder, once no session's group is left in it.
    pub fn remove_parent(&self) {
        for dir in self.dirs() {
            let _ = std::fs::remove_dir(dir.join(&self.parent));
        }
    }

    /// The groups under the parent folder (sessions a previous server left).
    pub fn groups(&self) -> Vec<String> {
        let Some(first) = self.dirs().first().map(|d| d.join(&self.parent)) else {
            return Vec::new();
        };
        std::fs::read_dir(first)
            .map(|entries| {
                entries
                    .flatten()
                    .filter(|e| e.path().is_dir())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// One session's group, in each tree of the layout.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Group {
    /// v2: one directory; v1: memory, cpu, pids and freezer.
    pub dirs: Vec<PathBuf>,
    #[serde(default)]
    pub v2: bool,
}

impl Group {
    fn limit(&self, limits: &Limits) -> std::io::Result<()> {
        let memory = limits.memory_mib.saturating_mul(1024 * 1024);
        let period = 100_000u64;
        let quota = limits.cpu_millis.saturating_mul(period) / 1000;
        if self.v2 {
            let dir = &self.dirs[0];
            std::fs::write(dir.join("memory.max"), memory.to_string())?;
            // No swap: a kernel that outgrows its memory is killed, not slowed to a crawl.
            let _ = std::fs::write(dir.join("memory.swap.max"), "0");
            std::fs::write(dir.join("cpu.max"), format!("{quota} {period}"))?;
            std::fs::write(dir.join("pids.max"), limits.pids.to_string())?;
        } else {
            let [memory_dir, cpu_dir, pids_dir, _] = self.v1_dirs();
            std::fs::write(memory_dir.join("memory.limit_in_bytes"), memory.to_string())?;
            let _ = std::fs::write(
                memory_dir.join("memory.memsw.limit_in_bytes"),
                memory.to_string(),
            );
            let _ = std::fs::write(memory_dir.join("memory.swappiness"), "0");
            std::fs::write(cpu_dir.join("cpu.cfs_period_us"), period.to_string())?;
            std::fs::write(cpu_dir.join("cpu.cfs_quota_us"), quota.to_string())?;
            std::fs::write(pids_dir.join("pids.max"), limits.pids.to_string())?;
        }
        Ok(())
    }

    fn v1_dirs(&self) -> [&Path; 4] {
        let at = |i: usize| {
            self.dirs
                .get(i)
                .map(PathBuf::as_path)
                .unwrap_or(Path::new(""))
        };
        [at(0), at(1), at(2), at(3)]
    }

    /// The `cgroup.procs` files a new process writes itself into, made ready before a fork:
    /// [`join_self`] runs between fork and exec, where nothing may allocate.
    pub fn procs_files(&self) -> Vec<CString> {
        self.dirs
            .iter()
            .filter_map(|dir| {
                CString::new(
                    dir.join("cgroup.procs")
                        .into_os_string()
                        .into_encoded_bytes(),
                )
                .ok()
            })
            .collect()
    }

    /// The processes in the group now.
    pub fn pids(&self) -> Vec<i32> {
        let Some(dir) = self.dirs.first() else {
            return Vec::new();
        };
        std::fs::read_to_string(dir.join("cgroup.procs"))
            .map(|text| text.lines().filter_map(|l| l.trim().parse().ok()).collect())
            .unwrap_or_default()
    }

    /// Whether anything of the session still runs (a zombie whose parent never reaps it has
    /// left its group: a dead editor counts as dead, whoever adopted it).
    pub fn is_populated(&self) -> bool {
        !self.pids().is_empty()
    }

    /// Sends `signal` to every process of the group.
    pub fn signal(&self, signal: i32) {
        for pid in self.pids() {
            // SAFETY: kill only sends a signal, to a process of this session's own group.
            unsafe {
                libc::kill(pid, signal);
            }
        }
    }

    /// Ends every process of the group at once: none can fork its way out meanwhile.
    pub fn kill(&self) {
        if self.v2 {
            if std::fs::write(self.dirs[0].join("cgroup.kill"), "1").is_ok() {
                return;
            }
        } else if let Some(freezer) = self.dirs.get(3) {
            let state = freezer.join("freezer.state");
            let frozen = std::fs::write(&state, "FROZEN").is_ok();
            self.signal(libc::SIGKILL);
            if frozen {
                let _ = std::fs::write(&state, "THAWED");
            }
            return;
        }
        self.signal(libc::SIGKILL);
    }

    /// Freezes every process of the group: they keep their memory and open files and run no
    /// further (a fatal signal still ends them) until [`Group::thaw`]. Blocks until the kernel
    /// says they all are, or gives up after ten seconds (false): a task in an uninterruptible
    /// wait on a busy machine freezes late, not never.
    pub fn freeze(&self) -> bool {
        self.set_frozen(true)
    }

    /// Lets the group's processes run again; false if the kernel did not say so in ten seconds.
    pub fn thaw(&self) -> bool {
        self.set_frozen(false)
    }

    /// Whether the group is frozen now.
    pub fn is_frozen(&self) -> bool {
        if self.v2 {
            std::fs::read_to_string(self.dirs[0].join("cgroup.events"))
                .is_ok_and(|events| events.lines().any(|l| l.trim() == "frozen 1"))
        } else {
            self.dirs.get(3).is_some_and(|freezer| {
                std::fs::read_to_string(freezer.join("freezer.state"))
                    .is_ok_and(|state| state.trim() == "FROZEN")
            })
        }
    }

    fn set_frozen(&self, frozen: bool) -> bool {
        let written = if self.v2 {
            std::fs::write(
                self.dirs[0].join("cgroup.freeze"),
                if frozen { "1" } else { "0" },
            )
        } else {
            match self.dirs.get(3) {
                Some(freezer) => std::fs::write(
                    freezer.join("freezer.state"),
                    if frozen { "FROZEN" } else { "THAWED" },
                ),
                None => return false,
            }
        };
        if written.is_err() {
            return false;
        }
        // Freezing takes each task at its next return to user space: a moment, unless one
        // sits in an uninterruptible wait (a disk, a driver).
        for _ in 0..1000 {
            if self.is_frozen() == frozen {
                return true;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        false
    }

    /// How often the group's memory limit was hit (v1 `memory.failcnt`, v2 `oom_kill` events):
    /// more than before means the kernel refused it memory.
    pub fn oom_kills(&self) -> u64 {
        if self.v2 {
            std::fs::read_to_string(self.dirs[0].join("memory.events"))
                .ok()
                .and_then(|text| {
                    text.lines().find_map(|l| {
                        l.strip_prefix("oom_kill ")
                            .and_then(|n| n.trim().parse().ok())
                    })
                })
                .unwrap_or(0)
        } else {
            self.dirs
                .first()
                .and_then(|dir| std::fs::read_to_string(dir.join("memory.oom_control")).ok())
                .and_then(|text| {
                    text.lines().find_map(|l| {
                        l.strip_prefix("oom_kill ")
                            .and_then(|n| n.trim().parse().ok())
                    })
                })
                .unwrap_or(0)
        }
    }

    /// The memory the group's processes hold, in bytes, as `kubectl top` counts it (the working
    /// set): what is charged to it less the file cache the kernel could drop at once.
    pub fn working_set_bytes(&self) -> Option<u64> {
        let dir = self.dirs.first()?;
        let charged = if self.v2 {
            "memory.current"
        } else {
            "memory.usage_in_bytes"
        };
        let charged: u64 = std::fs::read_to_string(dir.join(charged))
            .ok()?
            .trim()
            .parse()
            .ok()?;
        let inactive = if self.v2 {
            "inactive_file "
        } else {
            "total_inactive_file "
        };
        let cache = std::fs::read_to_string(dir.join("memory.stat"))
            .ok()
            .and_then(|text| {
                text.lines()
                    .find_map(|l| l.strip_prefix(inactive)?.trim().parse::<u64>().ok())
            })
            .unwrap_or(0);
        Some(charged.saturating_sub(cache))
    }

    /// Removes the group once it is empty; a group still holding processes stays.
    pub fn remove(&self) {
        for dir in &self.dirs {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// Moves the calling process into the groups whose `cgroup.procs` files are `files`. Runs
/// between fork and exec: only `open`, `write` and `close`, nothing that allocates.
///
/// # Safety
/// Call only in a child between fork and exec (or in a single-threaded process).
pub unsafe fn join_self(files: &[CString]) -> std::io::Result<()> {
    for file in files {
        // SAFETY: the path is a valid C string that outlives the call; "0" means the writer.
        unsafe {
            let fd = libc::open(file.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            let written = libc::write(fd, c"0".as_ptr().cast(), 1);
            libc::close(fd);
            if written != 1 {
                return Err(std::io::Error::last_os_error());
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v1_groups_nest_under_the_servers_own_group_of_each_controller() {
        let root = tempfile::tempdir().unwrap();
        for controller in ["memory", "cpu", "pids", "freezer"] {
            std::fs::create_dir_all(root.path().join(controller)).unwrap();
            std::fs::write(root.path().join(controller).join("cgroup.procs"), "").unwrap();
        }
        let own =
            "9:name=systemd:/\n8:pids:/\n6:freezer:/\n4:memory:/box/abc\n1:cpu,cpuacct:/\n0::/\n";
        let layout = Layout::from_proc(own, root.path(), "gpu-sandbox").unwrap();
        let Tree::V1 { memory, cpu, .. } = &layout.tree else {
            panic!("{layout:?}")
        };
        assert_eq!(memory, &root.path().join("memory/box/abc"));
        assert_eq!(cpu, &root.path().join("cpu/"));
        let group = layout.group("s1");
        assert_eq!(
            group.dirs[0],
            root.path().join("memory/box/abc/gpu-sandbox/s1")
        );
        assert!(!group.v2);
    }

    #[test]
    fn v2_groups_nest_under_the_servers_own_group() {
        let root = tempfile::tempdir().unwrap();
        std::fs::write(
            root.path().join("cgroup.controllers"),
            "cpuset cpu io memory pids",
        )
        .unwrap();
        let layout = Layout::from_proc(
            "0::/system.slice/sandbox.service\n",
            root.path(),
            "gpu-sandbox",
        )
        .unwrap();
        assert_eq!(
            layout.tree,
            Tree::V2(root.path().join("system.slice/sandbox.service"))
        );
        let group = layout.group("s2");
        assert!(group.v2);
        assert_eq!(
            group.dirs,
            [root
                .path()
                .join("system.slice/sandbox.service/gpu-sandbox/s2")]
        );
    }

    #[test]
    fn a_machine_without_the_controllers_has_no_layout() {
        let root = tempfile::tempdir().unwrap();
        std::fs::write(root.path().join("cgroup.controllers"), "cpu io").unwrap();
        assert_eq!(
            Layout::from_proc("0::/\n", root.path(), "gpu-sandbox"),
            None
        );
    }

    #[test]
    fn limits_are_written_in_each_controllers_words() {
        let root = tempfile::tempdir().unwrap();
        std::fs::write(root.path().join("cgroup.controllers"), "cpu memory pids").unwrap();
        let layout = Layout::from_proc("0::/\n", root.path(), "gpu-sandbox").unwrap();
        let group = layout
            .create(
                "s3",
                &Limits {
                    memory_mib: 512,
                    cpu_millis: 1500,
                    pids: 256,
                },
            )
            .unwrap();
        let read = |file: &str| std::fs::read_to_string(group.dirs[0].join(file)).unwrap();
        assert_eq!(read("memory.max"), (512u64 << 20).to_string());
        assert_eq!(read("cpu.max"), "150000 100000");
        assert_eq!(read("pids.max"), "256");
    }
}
