//! Every local editor in a sandbox of its own: Debian's bubblewrap (`bwrap`), the tool Flatpak
//! runs its applications in. Chosen over writing the namespaces ourselves (a setuid-free,
//! well-reviewed launcher that sets up mount, PID, network, IPC and UTS namespaces and a minimal
//! `/dev` in one exec) and over containers (podman cannot run here, and an OCI image per editor
//! would not be the editors `scripts/setup.sh` installs).
//!
//! What an editor sees: the system read-only (`/usr`, `/etc`, the editors' tooling, each at its
//! own path), its home (the user's workspace, or a pre-started editor's empty slot), its own run
//! directory (socket, runtime files, caches), a private `/tmp`, its own `/proc` and a minimal
//! `/dev` (plus its slice's GPU only). Never the data directory, another workspace, the server's
//! configuration, or another process. As root the editor runs as an unprivileged account of its
//! own (`setpriv`: no capabilities, `no_new_privs`); otherwise in a user namespace of the
//! server's account. Its network is a namespace of its own: loopback only, or, with egress on,
//! `pasta` (Debian's passt) gives it the outside through the server's sockets with the host's
//! loopback unmapped, so neither the database nor another editor is reachable; the product's own
//! address is forwarded in; nftables rules in its namespace refuse private ranges, metadata
//! services and this machine's own addresses (`super::egress`). An editor that listens only on
//! TCP (marimo) is reached through a Unix socket in its run directory that `socat` forwards
//! inside the sandbox, so no other account can bind its port first.

mod args;
mod files;
mod info;
mod mounts;
mod tools;

pub use args::{Preload, Spec, arguments, egress_arguments, relay_command};
pub use files::{
    ACCOUNT_NAME, CONTROL_SWITCH, HAMI_CORE_INSIDE, PIN_INSIDE, PINNED_INSIDE, account_files,
    group_file, passwd_file, pinned_file, pinned_settings, preload_file, write_account_files,
    write_preload_files,
};
pub use info::{INFO_FD, info_pipe, read_child_pid};
pub use mounts::{is_mount_point, mount_into, mount_points_under, release_slot, share_slot};
pub use tools::{Tools, which};

use super::cgroup;
use crate::config::Config;
use crate::config::local::{LocalConfig, Network};
use crate::config::network::NetworkConfig;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// Everything the local runtime needs to sandbox its editors, found and checked once at start.
#[derive(Clone, Debug)]
pub struct Sandbox {
    pub tools: Tools,
    /// System folders shown read-only.
    pub system: Vec<PathBuf>,
    /// The editors' tooling, shown read-only.
    pub tool_dirs: Vec<PathBuf>,
    /// Files that would show through those folders and must not (the configuration file).
    pub hidden: Vec<PathBuf>,
    /// Where the sessions' cgroups go; None where this server may not make them.
    pub cgroups: Option<cgroup::Layout>,
    pub network: Network,
    /// What an editor with egress reaches (`[network]`).
    pub edge: NetworkConfig,
    /// The product's own port on the host's loopback, forwarded into each sandbox.
    pub forward: Option<u16>,
    pub local: LocalConfig,
    /// As root: the accounts editors run as, one per user and a spare per pre-started editor.
    pub accounts: Option<std::sync::Arc<super::accounts::Accounts>>,
    /// As root, with loop devices: a file system per workspace, sized by its quota.
    pub disks: Result<super::disk::Disks, String>,
    /// HAMi-core, preloaded in every sandbox with a GPU.
    pub preload: Option<PathBuf>,
    /// `libslice_pin.so`, preloaded before it where found.
    pub pin: Option<PathBuf>,
}

impl Sandbox {
    /// The sandbox for editors run by `programs`, or why none can be made here.
    pub fn prepare(config: &Config, programs: &[&Path]) -> Result<Sandbox, String> {
        let data_dir =
            std::fs::canonicalize(&config.data_dir).unwrap_or_else(|_| config.data_dir.clone());
        let mut tools = Tools::find();
        if !config.local.bwrap.is_empty() {
            tools.bwrap = Some(PathBuf::from(&config.local.bwrap)).filter(|p| p.is_file());
        }
        if let Some(missing) = tools.missing() {
            return Err(missing);
        }
        let mut tool_dirs: Vec<PathBuf> = Vec::new();
        for program in programs {
            for dir in tooling_of(program) {
                if !tool_dirs.iter().any(|d| dir.starts_with(d)) {
                    tool_dirs.retain(|d| !d.starts_with(&dir));
                    tool_dirs.push(dir);
                }
            }
        }
        let preload = (!config.pool.hami_core_library.is_empty())
            .then(|| PathBuf::from(&config.pool.hami_core_library));
        let pin = preload.as_ref().and_then(|_| find_pin());
        if preload.is_some() && pin.is_none() {
            tracing::warn!(
                "{PIN_LIBRARY} is not beside the server: a program that unsets its slice's limit \
                 before any other of its session used the GPU passes HAMi-core"
            );
        }
        let listen = config.listen_addr();
        let sandbox = Sandbox {
            cgroups: if tools.root {
                cgroup::Layout::detect(&cgroup::parent_name(&data_dir))
            } else {
                None
            },
            accounts: tools.root.then(|| {
                std::sync::Arc::new(super::accounts::Accounts::new(
                    config.local.editor_uid,
                    config.local.editor_uids,
                ))
            }),
            disks: if config.local.workspace_disks {
                super::disk::Disks::detect(&data_dir, tools.root)
            } else {
                Err("local.workspace_disks is false".into())
            },
            tools,
            system: ["/usr", "/etc", "/opt/conda"]
                .into_iter()
                .map(PathBuf::from)
                .filter(|p| p.exists())
                .collect(),
            tool_dirs,
            hidden: config.source.iter().cloned().collect(),
            network: config.local.network,
            edge: config.network.clone(),
            // Listening on every address includes the host's loopback, which pasta forwards from.
            forward: (listen.ip().is_loopback() || listen.ip().is_unspecified())
                .then(|| listen.port()),
            local: config.local.clone(),
            preload,
            pin,
        };
        sandbox.check()?;
        Ok(sandbox)
    }

    /// What a GPU session's sandbox preloads, where HAMi-core is configured.
    pub fn gpu_preload(&self) -> Option<Preload<'_>> {
        self.preload.as_deref().map(|library| Preload {
            library,
            pin: self.pin.as_deref(),
        })
    }

    /// Runs a sandbox once, so a machine that cannot (no user namespaces, say) says so at start
    /// rather than at a user's first launch.
    fn check(&self) -> Result<(), String> {
        let probe = tempfile_dir()?;
        let command = [OsString::from("/bin/true")];
        let spec = Spec {
            system: &self.system,
            tools: &[],
            hidden: &[],
            home: &probe,
            home_inside: Path::new("/home/user"),
            run_dir: &probe,
            run_inside: Path::new("/run/editor"),
            devices: &[],
            preload: None,
            account: self
                .accounts
                .as_ref()
                .map(|_| (self.local.editor_uid, self.local.editor_uid)),
            workdir: Path::new("/"),
            command: &command,
            datasets: &[],
        };
        let bwrap = self.tools.bwrap.as_ref().expect("found");
        let out = std::process::Command::new(bwrap)
            .args(arguments(&spec, &self.tools))
            .stdin(std::process::Stdio::null())
            .output()
            .map_err(|e| format!("bubblewrap did not run: {e}"));
        let _ = std::fs::remove_dir_all(&probe);
        let out = out?;
        if !out.status.success() {
            return Err(format!(
                "bubblewrap cannot make a sandbox here: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(())
    }

    /// What an editor reaches on the network, in words, as far as this machine allows it.
    pub fn network_words(&self) -> String {
        match (self.network, &self.tools.pasta, &self.tools.nft) {
            (Network::Egress, Some(_), Some(_)) => self.edge.describe(),
            (Network::Egress, None, _) => "none (pasta is not installed)".to_string(),
            (Network::Egress, Some(_), None) => {
                "none (nftables is not installed: without its rules an editor would reach this \
                 machine's networks)"
                    .to_string()
            }
            (Network::None, _, _) => "none (local.network = \"none\")".to_string(),
        }
    }

    /// What the sandbox cannot hold here, in words for every page: without root there are no
    /// accounts of their own, no limits per session, no quota while writing and no pre-started
    /// editors (giving one a user's workspace is a mount); without nftables or pasta no network.
    pub fn gaps(&self) -> Option<String> {
        let mut gaps = Vec::new();
        if !self.tools.root {
            gaps.push(
                "editors run as the server's own account (it does not run as root), so there are \
                 no memory, CPU or process limits per session, the disk quota is checked at launch \
                 only, and no editor is pre-started (each launch starts one)",
            );
        } else if self.cgroups.is_none() {
            gaps.push("there are no memory, CPU or process limits per session (no cgroups here)");
        }
        if self.network == Network::Egress
            && (self.tools.pasta.is_none() || self.tools.nft.is_none())
        {
            gaps.push("editors have no network (pasta or nftables is not installed)");
        }
        (!gaps.is_empty()).then(|| {
            format!(
                "Editors are sandboxed from each other, but on this server {}.",
                gaps.join("; ")
            )
        })
    }

    /// What the sandbox is, for the admin's settings page.
    pub fn describe(&self) -> String {
        let mut parts = vec![
            "a sandbox per editor (bubblewrap: its own files, processes and network)".to_string(),
        ];
        parts.push(match &self.accounts {
            Some(accounts) => accounts.describe(),
            None => "editors run in a user namespace of the server's account".to_string(),
        });
        parts.push(match &self.disks {
            Ok(_) => "each workspace a file system of its own, sized by its user's disk quota"
                .to_string(),
            Err(why) => format!("workspace disk quotas checked at launch only ({why})"),
        });
        parts.push(match (&self.cgroups, &self.local) {
            (Some(_), local) => format!(
                "limits per session: {} MiB of memory, {} CPUs, {} processes",
                local.memory_mib, local.cpus, local.pids
            ),
            (None, _) => {
                "no memory, CPU or process limits (the server may not make cgroups)".to_string()
            }
        });
        parts.push(format!("network: {}", self.network_words()));
        if self.preload.is_some() {
            parts.push(match &self.pin {
                Some(_) => "GPU slices: HAMi-core preloaded for every program, its limits pinned"
                    .to_string(),
                None => format!(
                    "GPU slices: HAMi-core preloaded, its limits not pinned ({PIN_LIBRARY} is not \
                     beside the server: a program can unset its limit)"
                ),
            });
        }
        parts.join("; ")
    }
}

/// A fresh, empty, private folder.
pub(crate) fn tempfile_dir() -> Result<PathBuf, String> {
    let dir = std::env::temp_dir().join(format!(
        "gsb-probe-{}-{}",
        std::process::id(),
        crate::util::new_id()
    ));
    std::fs::create_dir_all(&dir).map_err(|e| format!("a folder for the sandbox check: {e}"))?;
    Ok(dir)
}

/// The pin's file name (`cargo build -p slice-pin` makes it beside the server's binary).
pub const PIN_LIBRARY: &str = "libslice_pin.so";

/// `libslice_pin.so` beside this program, or one folder up (a test binary in `deps/`).
fn find_pin() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    exe.ancestors()
        .skip(1)
        .take(2)
        .map(|dir| dir.join(PIN_LIBRARY))
        .find(|p| p.is_file())
}

/// The folders an editor's program needs: its virtualenv and the Python that made it, or its
/// npm prefix and the node that runs it, each outside the system folders.
pub fn tooling_of(program: &Path) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    let system = |p: &Path| p.starts_with("/usr") || p.starts_with("/etc");
    let venv = program
        .ancestors()
        .find(|dir| dir.join("pyvenv.cfg").is_file());
    if let Some(venv) = venv {
        dirs.push(venv.to_path_buf());
        let home = std::fs::read_to_string(venv.join("pyvenv.cfg"))
            .ok()
            .and_then(|cfg| {
                cfg.lines().find_map(|l| {
                    l.strip_prefix("home")
                        .map(|v| v.trim_start_matches([' ', '=']).trim().to_string())
                })
            })
            .map(PathBuf::from);
        if let Some(prefix) = home
            .and_then(|bin| std::fs::canonicalize(bin).ok())
            .and_then(|bin| bin.parent().map(Path::to_path_buf))
            .filter(|p| !system(p))
        {
            dirs.push(prefix);
        }
        return dirs;
    }
    let npm = program
        .ancestors()
        .find(|dir| dir.file_name().is_some_and(|n| n == "node_modules"))
        .and_then(Path::parent);
    match npm {
        Some(prefix) => dirs.push(prefix.to_path_buf()),
        None => dirs.extend(program.parent().map(Path::to_path_buf)),
    }
    if let Some(prefix) = which("node")
        .and_then(|node| std::fs::canonicalize(node).ok())
        .and_then(|node| node.parent()?.parent().map(Path::to_path_buf))
        .filter(|p| !system(p))
    {
        dirs.push(prefix);
    }
    dirs
}

#[cfg(test)]
mod tests;
