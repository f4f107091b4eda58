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

use super::cgroup;
use crate::config::Config;
use crate::config::local::{LocalConfig, Network};
use crate::config::network::NetworkConfig;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// What this machine offers for sandboxes, found once at start.
#[derive(Clone, Debug, Default)]
pub struct Tools {
    pub bwrap: Option<PathBuf>,
    pub setpriv: Option<PathBuf>,
    pub pasta: Option<PathBuf>,
    /// nftables' front end: the network edge of each sandbox (`super::egress`).
    pub nft: Option<PathBuf>,
    pub socat: Option<PathBuf>,
    /// The server runs as root: editors get accounts of their own.
    pub root: bool,
}

impl Tools {
    pub fn find() -> Tools {
        Tools {
            bwrap: which("bwrap"),
            setpriv: which("setpriv"),
            pasta: which("pasta"),
            nft: which("nft"),
            socat: which("socat"),
            // SAFETY: geteuid only reads this process's effective user id.
            root: unsafe { libc::geteuid() } == 0,
        }
    }

    /// Why no sandbox can be made here, if none can.
    pub fn missing(&self) -> Option<String> {
        if self.bwrap.is_none() {
            return Some("bubblewrap (bwrap) is not installed".into());
        }
        if self.root && self.setpriv.is_none() {
            return Some("setpriv (util-linux) is not installed".into());
        }
        None
    }
}

/// A program on `PATH`, or in the usual system folders.
pub fn which(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/bin", "/usr/sbin", "/bin", "/sbin"].map(PathBuf::from))
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
}

/// One editor's sandbox.
#[derive(Clone, Debug)]
pub struct Spec<'a> {
    /// The folders of the system, read-only at their own paths (`/usr`, `/etc`, `/opt`).
    pub system: &'a [PathBuf],
    /// The editors' tooling (the venv, the Python it points at, the npm prefix), read-only.
    pub tools: &'a [PathBuf],
    /// Files inside those folders that the editor must not read (the server's configuration):
    /// an empty file is mounted over each.
    pub hidden: &'a [PathBuf],
    /// The folder the editor's home is mounted from (the workspace, or a pre-started editor's
    /// slot that the workspace is later mounted on).
    pub home: &'a Path,
    /// Where the home appears inside.
    pub home_inside: &'a Path,
    /// The editor's run directory, read-write.
    pub run_dir: &'a Path,
    /// Where the run directory appears inside.
    pub run_inside: &'a Path,
    /// Device nodes the editor may use (its slice's GPU and NVIDIA's control devices).
    pub devices: &'a [PathBuf],
    /// What every program in the sandbox preloads (HAMi-core), through its own
    /// `/etc/ld.so.preload`: unsetting `LD_PRELOAD` does not escape it.
    pub preload: Option<Preload<'a>>,
    /// As root: the account the editor runs as.
    pub account: Option<(u32, u32)>,
    /// Where the editor starts (its home, or its run directory for a pre-started editor,
    /// whose home is mounted over later).
    pub workdir: &'a Path,
    /// The editor's own command line.
    pub command: &'a [OsString],
    /// Shared datasets, each a host folder and its name: bound read-only at
    /// `<home_inside>/datasets/<name>`, over the home. A folder that is not there is left out.
    pub datasets: &'a [(PathBuf, String)],
}

/// What a GPU session's sandbox preloads for every program.
#[derive(Clone, Copy, Debug)]
pub struct Preload<'a> {
    /// HAMi-core's `libvgpu.so`.
    pub library: &'a Path,
    /// `libslice_pin.so` (the `slice-pin` crate): HAMi-core's settings read as the slice's,
    /// whatever a program does to its environment. Preloaded first.
    pub pin: Option<&'a Path>,
}

/// Where the sandbox's `/etc/ld.so.preload` is written (in the run directory, read-only inside).
pub fn preload_file(run_dir: &Path) -> PathBuf {
    run_dir.join("ld.so.preload")
}

/// Where the slice's pinned settings are written, for the sandbox's `/etc/gpu-slice.env`.
pub fn pinned_file(run_dir: &Path) -> PathBuf {
    run_dir.join("gpu-slice.env")
}

/// Where HAMi-core is mounted inside: its own install path. Its `dlsym` hook hands out the
/// allocation hooks it finds in the library at that path; preloaded from anywhere else it
/// loads, shows the slice's size, and limits nothing (seen on an H200).
pub const HAMI_CORE_INSIDE: &str = "/usr/local/vgpu/libvgpu.so";

/// Where the pin is mounted inside, beside HAMi-core.
pub const PIN_INSIDE: &str = "/usr/local/vgpu/libslice_pin.so";

/// The pin's file inside (`slice_pin::PINNED_FILE`).
pub const PINNED_INSIDE: &str = "/etc/gpu-slice.env";

/// HAMi-core's settings for a slice, from the slice's environment (`gpu::slice_env`), one
/// `NAME=value` a line: its limits, no card-wide fallback limit, its accounting file in the
/// sandbox's own `/tmp`, its hooks from its install path, the default utilization policy.
pub fn pinned_settings(slice_env: &[(String, String)]) -> String {
    let get = |name: &str| {
        slice_env
            .iter()
            .find(|(k, _)| k == name)
            .map_or("", |(_, v)| v.as_str())
    };
    [
        (
            "CUDA_DEVICE_MEMORY_LIMIT_0",
            get("CUDA_DEVICE_MEMORY_LIMIT_0"),
        ),
        ("CUDA_DEVICE_SM_LIMIT", get("CUDA_DEVICE_SM_LIMIT")),
        ("CUDA_DEVICE_MEMORY_LIMIT", ""),
        ("CUDA_DEVICE_MEMORY_SHARED_CACHE", "/tmp/cudevshr.cache"),
        ("CUDA_REDIRECT", HAMI_CORE_INSIDE),
        ("GPU_CORE_UTILIZATION_POLICY", "default"),
    ]
    .iter()
    .map(|(name, value)| format!("{name}={value}\n"))
    // HAMi-core's off switch: read as unset by every program of the sandbox.
    .chain(std::iter::once(format!("!{CONTROL_SWITCH}\n")))
    .collect()
}

/// The variable that turns HAMi-core's limits off in a process that sets it.
pub const CONTROL_SWITCH: &str = "CUDA_DISABLE_CONTROL";

/// Writes the sandbox's `/etc/ld.so.preload` (the pin first, where there is one) and the
/// slice's pinned settings into `run_dir`, readable by the editor's account: the dynamic
/// loader reads them as the editor, and skips a file it cannot read without a word.
pub fn write_preload_files(
    run_dir: &Path,
    pin: bool,
    slice_env: &[(String, String)],
) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mut libraries = String::new();
    if pin {
        libraries.push_str(PIN_INSIDE);
        libraries.push('\n');
    }
    libraries.push_str(HAMI_CORE_INSIDE);
    libraries.push('\n');
    for (file, text) in [
        (preload_file(run_dir), libraries),
        (pinned_file(run_dir), pinned_settings(slice_env)),
    ] {
        std::fs::write(&file, text)?;
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644))?;
    }
    Ok(())
}

/// The name of the account an editor runs as, in every sandbox (its home is `/home/user`):
/// tools that key caches by user name (`torch.compile`, `getpass.getuser()`) need one.
pub const ACCOUNT_NAME: &str = "user";

/// Where the sandbox's `/etc/passwd` is written (in the run directory, read-only inside).
pub fn passwd_file(run_dir: &Path) -> PathBuf {
    run_dir.join("passwd")
}

/// Where the sandbox's `/etc/group` is written.
pub fn group_file(run_dir: &Path) -> PathBuf {
    run_dir.join("group")
}

/// The system's account files with the editor's account added under [`ACCOUNT_NAME`] (an
/// entry of the system with that name or number gives way), home `home`, the system's bash.
pub fn account_files(
    passwd: &str,
    group: &str,
    (uid, gid): (u32, u32),
    home: &Path,
) -> (String, String) {
    let keep = |text: &str, id: u32| -> String {
        text.lines()
            .filter(|line| {
                let mut fields = line.split(':');
                let name = fields.next().unwrap_or_default();
                let number = fields.nth(1).and_then(|n| n.parse::<u32>().ok());
                name != ACCOUNT_NAME && number != Some(id)
            })
            .map(|line| format!("{line}\n"))
            .collect()
    };
    let shell = if Path::new("/bin/bash").exists() {
        "/bin/bash"
    } else {
        "/bin/sh"
    };
    (
        format!(
            "{}{ACCOUNT_NAME}:x:{uid}:{gid}:GPU Sandbox user:{}:{shell}\n",
            keep(passwd, uid),
            home.display()
        ),
        format!("{}{ACCOUNT_NAME}:x:{gid}:\n", keep(group, gid)),
    )
}

/// Writes the sandbox's `/etc/passwd` and `/etc/group` into `run_dir`, readable by the editor.
pub fn write_account_files(
    run_dir: &Path,
    account: (u32, u32),
    home: &Path,
) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let (passwd, group) = account_files(
        &std::fs::read_to_string("/etc/passwd").unwrap_or_default(),
        &std::fs::read_to_string("/etc/group").unwrap_or_default(),
        account,
        home,
    );
    for (file, text) in [(passwd_file(run_dir), passwd), (group_file(run_dir), group)] {
        std::fs::write(&file, text)?;
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644))?;
    }
    Ok(())
}

/// The `bwrap` command line (after the program) for `spec`, with the editor's command last.
pub fn arguments(spec: &Spec<'_>, tools: &Tools) -> Vec<OsString> {
    let mut args = Args::default();
    if !tools.root {
        args.push(["--unshare-user"]);
    }
    args.push([
        "--unshare-pid",
        "--unshare-net",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        // A terminal's input cannot be pushed back to the server's (TIOCSTI).
        "--new-session",
        // No `--die-with-parent`: a sandbox lives as long as its session, not as long as the
        // server process. A server that restarts (or crashes) finds it by its first process and
        // its cgroup and adopts it; one nobody owns any more is ended by the next start's sweep.
        "--hostname",
        "sandbox",
    ]);
    // First, so that nothing mounted below them later is hidden (tooling under /tmp, say): a
    // private /tmp and /dev/shm (marimo's multiprocessing needs one), open to the editor's
    // account like the host's.
    args.push(["--dev", "/dev", "--proc", "/proc"]);
    args.push([
        "--perms", "1777", "--tmpfs", "/tmp", "--perms", "1777", "--tmpfs", "/dev/shm",
    ]);
    args.push(["--tmpfs", "/run"]);
    for dir in spec.system {
        if dir.exists() {
            args.open_parents(dir, spec.system);
            args.paths("--ro-bind", dir, dir);
        }
    }
    let (preload_list, pinned) = (preload_file(spec.run_dir), pinned_file(spec.run_dir));
    let (passwd, group) = (passwd_file(spec.run_dir), group_file(spec.run_dir));
    let mut files: Vec<(&Path, &Path)> = Vec::new();
    if let Some(preload) = spec.preload {
        files.push((preload.library, Path::new(HAMI_CORE_INSIDE)));
        files.push((preload_list.as_path(), Path::new("/etc/ld.so.preload")));
        if let Some(pin) = preload.pin {
            files.push((pin, Path::new(PIN_INSIDE)));
            files.push((pinned.as_path(), Path::new(PINNED_INSIDE)));
        }
    }
    // The account's name, where its files were written (`write_account_files`).
    if spec.account.is_some() && passwd.is_file() && group.is_file() {
        files.push((passwd.as_path(), Path::new("/etc/passwd")));
        files.push((group.as_path(), Path::new("/etc/group")));
    }
    if !files.is_empty() {
        args.files_at(&files, spec.system);
    }
    for dir in spec.tools {
        if dir.exists() {
            args.open_parents(dir, spec.system);
            args.paths("--ro-bind", dir, dir);
        }
    }
    // Merged /usr: the old top-level folders are links into it.
    for (link, target) in [
        ("/bin", "usr/bin"),
        ("/sbin", "usr/sbin"),
        ("/lib", "usr/lib"),
        ("/lib64", "usr/lib64"),
    ] {
        if Path::new(link).is_symlink() {
            args.push(["--symlink", target, link]);
        } else if Path::new(link).is_dir() {
            args.push(["--ro-bind", link, link]);
        }
    }
    for file in spec.hidden {
        if file.exists() {
            args.paths("--ro-bind", Path::new("/dev/null"), file);
        }
    }
    args.open_parents(spec.run_inside, spec.system);
    args.paths("--bind", spec.run_dir, spec.run_inside);
    args.open_parents(spec.home_inside, spec.system);
    args.paths("--bind", spec.home, spec.home_inside);
    // After the home, which they sit in: the host folder itself, read-only, and nothing above it.
    for (folder, name) in spec.datasets {
        if folder.is_dir() {
            let inside = spec
                .home_inside
                .join(app::domain::datasets::mount_point(name));
            args.paths("--ro-bind", folder, &inside);
        }
    }
    for device in spec.devices {
        if device.exists() {
            args.paths("--dev-bind", device, device);
        }
    }
    args.push(["--chdir"]);
    args.0.push(spec.workdir.into());
    args.push(["--"]);
    if let (true, Some((uid, gid)), Some(setpriv)) = (tools.root, spec.account, &tools.setpriv) {
        args.0.push(setpriv.into());
        args.push(["--reuid", &uid.to_string(), "--regid", &gid.to_string()]);
        args.push([
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
            "--no-new-privs",
            "--",
        ]);
    }
    args.0.extend(spec.command.iter().cloned());
    args.0
}

/// bwrap's arguments as they are made.
#[derive(Default)]
struct Args(Vec<OsString>, Vec<PathBuf>);

impl Args {
    fn push<const N: usize>(&mut self, items: [&str; N]) {
        self.0.extend(items.map(OsString::from));
    }

    fn paths(&mut self, option: &str, from: &Path, to: &Path) {
        self.0.extend([option.into(), from.into(), to.into()]);
    }

    /// Mounts each `(file, inside)` read-only at `inside`, a path under the read-only system
    /// folders that the host may not have: bwrap cannot make a mount point in a read-only bind,
    /// so the nearest folder above it that exists is made again, once for all the files below
    /// it (a tmpfs with each of the host's entries bound back, links as links, and the folders
    /// down to each file), then made read-only. A file the host has is mounted over.
    fn files_at(&mut self, files: &[(&Path, &Path)], system: &[PathBuf]) {
        let base_of = |inside: &Path| -> Option<PathBuf> {
            if inside.exists() {
                return None;
            }
            inside
                .ancestors()
                .skip(1)
                .find(|a| a.is_dir())
                .filter(|base| {
                    system
                        .iter()
                        .any(|s| base.starts_with(s) && s != Path::new("/"))
                })
                .map(Path::to_path_buf)
        };
        let mut bases: Vec<PathBuf> = Vec::new();
        for (_, inside) in files {
            if let Some(base) = base_of(inside)
                && !bases.contains(&base)
            {
                bases.push(base);
            }
        }
        for base in &bases {
            self.push(["--perms", "0755", "--tmpfs"]);
            self.0.push(base.into());
            let mut entries: Vec<PathBuf> = std::fs::read_dir(base)
                .map(|dir| dir.flatten().map(|e| e.path()).collect())
                .unwrap_or_default();
            entries.sort();
            for entry in entries {
                if entry.is_symlink() {
                    if let Ok(target) = std::fs::read_link(&entry) {
                        self.0
                            .extend(["--symlink".into(), target.into(), entry.into()]);
                    }
                } else {
                    self.paths("--ro-bind-try", &entry, &entry);
                }
            }
            let mut made: Vec<&Path> = Vec::new();
            for (file, inside) in files {
                if base_of(inside).as_ref() != Some(base) {
                    continue;
                }
                let mut missing: Vec<&Path> = inside
                    .ancestors()
                    .skip(1)
                    .take_while(|a| a != base && !made.contains(a))
                    .collect();
                missing.reverse();
                for folder in missing {
                    made.push(folder);
                    self.push(["--perms", "0755", "--dir"]);
                    self.0.push(folder.into());
                }
                self.paths("--ro-bind", file, inside);
            }
            self.push(["--remount-ro"]);
            self.0.push(base.into());
        }
        for (file, inside) in files {
            if base_of(inside).is_none() {
                self.paths("--ro-bind", file, inside);
            }
        }
    }
    /// bwrap makes the folders above a mount point 0700, which the editor's account could not
    /// pass through: each is made open first, once.
    fn open_parents(&mut self, dest: &Path, system: &[PathBuf]) {
        let mut above: Vec<&Path> = dest
            .ancestors()
            .skip(1)
            .filter(|a| a.parent().is_some())
            .collect();
        above.reverse();
        for folder in above {
            if !self.1.iter().any(|m| m == folder) && !system.iter().any(|s| folder.starts_with(s))
            {
                self.1.push(folder.to_path_buf());
                self.0.extend([
                    "--perms".into(),
                    "0755".into(),
                    "--dir".into(),
                    folder.into(),
                ]);
            }
        }
    }
}

/// The `pasta` command line that gives the network namespace of process `pid` the outside
/// world, with the host's loopback left out, and forwards `forward` (the product's own port on
/// the host's loopback) in.
pub fn egress_arguments(pid: u32, forward: Option<u16>, root: bool) -> Vec<String> {
    let mut args = vec![
        // In the foreground: its pid is the one to end with the editor.
        "--foreground".to_string(),
        // Only its warnings reach the editor's log: the user reads its tail when a launch fails.
        "--quiet".to_string(),
        "--config-net".to_string(),
        "--no-map-gw".to_string(),
        "-t".to_string(),
        "none".to_string(),
        "-u".to_string(),
        "none".to_string(),
        "-U".to_string(),
        "none".to_string(),
        "-T".to_string(),
        forward.map_or("none".to_string(), |port| port.to_string()),
    ];
    if root {
        // pasta drops to "nobody" before it opens the namespace, which root made; it joins the
        // network namespace alone.
        args.extend([
            "--runas".to_string(),
            "0:0".to_string(),
            "--netns".to_string(),
            format!("/proc/{pid}/ns/net"),
        ]);
    } else {
        // The sandbox's own user namespace, which the server's account owns.
        args.push(pid.to_string());
    }
    args
}

/// The command that listens on `socket` inside the sandbox and forwards each connection to
/// `port` of the sandbox's own loopback, beside an editor that listens only on TCP.
pub fn relay_command(socat: &Path, socket: &Path, port: u16) -> Vec<OsString> {
    vec![
        socat.as_os_str().to_os_string(),
        format!(
            "UNIX-LISTEN:{},fork,mode=600,unlink-early",
            socket.display()
        )
        .into(),
        format!("TCP:127.0.0.1:{port}").into(),
    ]
}

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

fn c_path(path: &Path) -> std::io::Result<std::ffi::CString> {
    std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).map_err(std::io::Error::other)
}

/// Makes `slot` (a pre-started editor's home) a mount point whose later mounts reach the
/// sandboxes it is bound into: a bind onto itself, made shared.
pub fn share_slot(slot: &Path) -> std::io::Result<()> {
    let target = c_path(slot)?;
    // SAFETY: mount with valid C strings for paths and null for what MS_BIND and MS_SHARED ignore.
    unsafe {
        if libc::mount(
            target.as_ptr(),
            target.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND,
            std::ptr::null(),
        ) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
        if libc::mount(
            std::ptr::null(),
            target.as_ptr(),
            std::ptr::null(),
            libc::MS_SHARED,
            std::ptr::null(),
        ) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Mounts `workspace` over `slot`: the sandbox the slot was bound into sees it from now on.
pub fn mount_into(workspace: &Path, slot: &Path) -> std::io::Result<()> {
    let (source, target) = (c_path(workspace)?, c_path(slot)?);
    // SAFETY: mount with valid C strings; MS_BIND ignores the type and data.
    if unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND,
            std::ptr::null(),
        )
    } != 0
    {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Unmounts whatever is mounted at `slot` (the workspace, then the slot's own bind) and
/// removes the slot with what the editor made in it; a slot still mounted is left alone, so a
/// workspace can never be deleted through it.
pub fn release_slot(slot: &Path) {
    if let Ok(target) = c_path(slot) {
        while is_mount_point(slot) {
            // SAFETY: umount2 of a valid C string path; MNT_DETACH lets open files finish.
            if unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) } != 0 {
                tracing::warn!(slot = %slot.display(), error = %std::io::Error::last_os_error(), "unmounting a pre-started editor's home");
                return;
            }
        }
    }
    let _ = std::fs::remove_dir_all(slot);
}

/// Whether something is mounted at `path` (`/proc/self/mountinfo`, whose paths escape spaces
/// and the like as octal).
/// Every mount point at or below `root`, deepest first (the order to unmount them in).
pub fn mount_points_under(root: &Path) -> Vec<PathBuf> {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    let mut points: Vec<PathBuf> = info
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(|point| PathBuf::from(unescape_mount_path(point)))
        .filter(|point| point.starts_with(root))
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.as_os_str().len()));
    points
}

pub fn is_mount_point(path: &Path) -> bool {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let wanted = path.to_string_lossy();
    info.lines().any(|line| {
        line.split(' ')
            .nth(4)
            .is_some_and(|point| unescape_mount_path(point) == wanted)
    })
}

fn unescape_mount_path(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && i + 3 < bytes.len()
            && let Ok(code) = u8::from_str_radix(&text[i + 1..i + 4], 8)
        {
            out.push(code);
            i += 4;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A pipe for bwrap's `--info-fd`: (read end, write end), both closed on exec; the child's
/// copy of the write end becomes its descriptor 3.
pub fn info_pipe() -> std::io::Result<(std::os::fd::OwnedFd, std::os::fd::OwnedFd)> {
    use std::os::fd::FromRawFd;
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two descriptors this function then owns.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just made and belong to nobody else.
    Ok(unsafe {
        (
            std::os::fd::OwnedFd::from_raw_fd(fds[0]),
            std::os::fd::OwnedFd::from_raw_fd(fds[1]),
        )
    })
}

/// The descriptor bwrap's `--info-fd` names, in the child.
pub const INFO_FD: i32 = 3;

/// The host pid of the sandbox's first process, from what bwrap wrote on its info pipe (it
/// writes once the sandbox is made; a sandbox that failed closes the pipe without a word).
pub fn read_child_pid(read: std::os::fd::OwnedFd) -> Option<i32> {
    use std::io::Read;
    let mut file = std::fs::File::from(read);
    let mut text = String::new();
    let mut buf = [0u8; 512];
    loop {
        match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                text.push_str(&String::from_utf8_lossy(&buf[..n]));
                if text.contains('}') {
                    break;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
    serde_json::from_str::<serde_json::Value>(&text)
        .ok()?
        .get("child-pid")?
        .as_i64()
        .map(|pid| pid as i32)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tools(root: bool) -> Tools {
        Tools {
            bwrap: Some("/usr/bin/bwrap".into()),
            setpriv: Some("/usr/bin/setpriv".into()),
            pasta: Some("/usr/bin/pasta".into()),
            nft: Some("/usr/sbin/nft".into()),
            socat: Some("/usr/bin/socat".into()),
            root,
        }
    }

    #[test]
    fn the_editors_account_is_named_in_its_own_account_files() {
        let passwd = "root:x:0:0:root:/root:/bin/bash\nuser:x:1000:1000::/home/user:/bin/sh\nold:x:61000:61000::/x:/bin/sh\n";
        let group = "root:x:0:\nuser:x:1000:\n";
        let (passwd, group) =
            account_files(passwd, group, (61_000, 61_000), Path::new("/home/user"));
        assert!(
            passwd.starts_with("root:x:0:0:root:/root:/bin/bash\n"),
            "{passwd}"
        );
        let last = passwd.lines().last().unwrap();
        assert!(
            last.starts_with("user:x:61000:61000:GPU Sandbox user:/home/user:/bin/"),
            "{passwd}"
        );
        assert_eq!(
            passwd.matches("user:x:").count(),
            1,
            "one entry of that name: {passwd}"
        );
        assert!(
            !passwd.contains("old:"),
            "nor another of that number: {passwd}"
        );
        assert_eq!(group, "root:x:0:\nuser:x:61000:\n");
    }

    #[test]
    fn account_files_are_mounted_over_the_systems_where_written() {
        let run_dir = std::env::temp_dir().join(format!("gsb-account-{}", std::process::id()));
        std::fs::create_dir_all(&run_dir).unwrap();
        let spec_with = |account| {
            let command = [OsString::from("/bin/true")];
            let spec = Spec {
                system: &[PathBuf::from("/usr"), PathBuf::from("/etc")],
                tools: &[],
                hidden: &[],
                home: &run_dir,
                home_inside: Path::new("/home/user"),
                run_dir: &run_dir,
                run_inside: Path::new("/run/editor"),
                devices: &[],
                preload: None,
                account,
                workdir: Path::new("/"),
                command: &command,
                datasets: &[],
            };
            text(&arguments(&spec, &tools(true)))
        };
        assert!(
            !spec_with(Some((61_000, 61_000))).contains("/etc/passwd"),
            "none written yet"
        );
        write_account_files(&run_dir, (61_000, 61_000), Path::new("/home/user")).unwrap();
        let args = spec_with(Some((61_000, 61_000)));
        assert!(
            args.contains(&format!(
                "--ro-bind {} /etc/passwd",
                passwd_file(&run_dir).display()
            )),
            "{args}"
        );
        assert!(
            args.contains(&format!(
                "--ro-bind {} /etc/group",
                group_file(&run_dir).display()
            )),
            "{args}"
        );
        assert!(
            !spec_with(None).contains("/etc/passwd"),
            "without an account of its own"
        );
        let _ = std::fs::remove_dir_all(&run_dir);
    }

    fn text(args: &[OsString]) -> String {
        args.iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn datasets_are_bound_read_only_over_the_home_and_a_missing_one_is_left_out() {
        let run = tempfile::tempdir().unwrap();
        let home = tempfile::tempdir().unwrap();
        let shared = tempfile::tempdir().unwrap();
        let command = ["jupyter-lab".into()];
        let datasets = [
            (shared.path().to_path_buf(), "imagenet".to_string()),
            (shared.path().join("gone"), "gone".to_string()),
        ];
        let spec = Spec {
            system: &["/usr".into()],
            tools: &[],
            hidden: &[],
            home: home.path(),
            home_inside: Path::new("/home/user"),
            run_dir: run.path(),
            run_inside: Path::new("/run/editor"),
            devices: &[],
            preload: None,
            account: Some((200_001, 200_001)),
            workdir: Path::new("/home/user"),
            command: &command,
            datasets: &datasets,
        };
        let args = text(&arguments(&spec, &tools(true)));
        let home_bind = args
            .find(&format!("--bind {} /home/user ", home.path().display()))
            .expect("the home");
        let dataset = format!(
            "--ro-bind {} /home/user/datasets/imagenet ",
            shared.path().display()
        );
        let bound = args.find(&dataset).expect(&args);
        assert!(
            bound > home_bind,
            "after the home, or the home hides it: {args}"
        );
        assert!(!args.contains("gone"), "{args}");
        assert_eq!(
            args.matches("--bind ").count(),
            2,
            "nothing more writable: {args}"
        );
    }

    #[test]
    fn an_editor_sees_its_home_its_run_directory_and_a_read_only_system_and_nothing_else() {
        let run = tempfile::tempdir().unwrap();
        let home = tempfile::tempdir().unwrap();
        let command = ["jupyter-lab".into()];
        let spec = Spec {
            system: &["/usr".into(), "/etc".into()],
            tools: &[],
            hidden: &[],
            home: home.path(),
            home_inside: Path::new("/home/user"),
            run_dir: run.path(),
            run_inside: Path::new("/run/editor"),
            devices: &[],
            preload: None,
            account: Some((200_001, 200_001)),
            workdir: Path::new("/home/user"),
            command: &command,
            datasets: &[],
        };
        let args = text(&arguments(&spec, &tools(true)));
        assert!(
            args.contains("--unshare-pid --unshare-net --unshare-ipc"),
            "{args}"
        );
        assert!(
            args.contains("--ro-bind /usr /usr --ro-bind /etc /etc"),
            "{args}"
        );
        assert!(args.contains(&format!("--bind {} /home/user", home.path().display())));
        let run = run.path().display();
        assert!(
            args.contains(&format!("--bind {run} /run/editor")),
            "{args}"
        );
        assert!(args.contains("--perms 1777 --tmpfs /tmp"), "{args}");
        // The only writable mounts are the run directory and the home.
        assert_eq!(args.matches("--bind ").count(), 2, "{args}");
        assert!(
            args.ends_with("--reuid 200001 --regid 200001 --clear-groups --inh-caps=-all --bounding-set=-all --no-new-privs -- jupyter-lab"),
            "{args}"
        );
        assert!(
            !args.contains("--unshare-user"),
            "root makes the namespaces itself"
        );
    }

    #[test]
    fn without_root_the_sandbox_is_a_user_namespace_of_the_servers_account() {
        let command = ["marimo".into()];
        let spec = Spec {
            system: &[],
            tools: &[],
            hidden: &[],
            home: Path::new("/nonexistent/home"),
            home_inside: Path::new("/home/user"),
            run_dir: Path::new("/nonexistent/run"),
            run_inside: Path::new("/run/editor"),
            devices: &[],
            preload: None,
            account: Some((200_001, 200_001)),
            workdir: Path::new("/home/user"),
            command: &command,
            datasets: &[],
        };
        let args = text(&arguments(&spec, &tools(false)));
        assert!(args.starts_with("--unshare-user"), "{args}");
        assert!(!args.contains("setpriv"), "{args}");
        assert!(args.ends_with("-- marimo"), "{args}");
    }

    #[test]
    fn only_the_slices_card_is_visible_and_its_limiter_is_preloaded_for_every_program() {
        let devices = tempfile::tempdir().unwrap();
        let card = devices.path().join("nvidia1");
        let control = devices.path().join("nvidiactl");
        std::fs::write(&card, "").unwrap();
        std::fs::write(&control, "").unwrap();
        let command = ["jupyter-lab".into()];
        let run = Path::new("/srv/run/s1");
        let spec = Spec {
            system: &[],
            tools: &[],
            hidden: &[],
            home: Path::new("/srv/ws"),
            home_inside: Path::new("/home/user"),
            run_dir: run,
            run_inside: Path::new("/run/editor"),
            devices: &[
                card.clone(),
                control.clone(),
                devices.path().join("missing"),
            ],
            preload: Some(Preload {
                library: Path::new("/opt/hami/libvgpu.so"),
                pin: Some(Path::new("/opt/gs/libslice_pin.so")),
            }),
            account: None,
            workdir: Path::new("/home/user"),
            command: &command,
            datasets: &[],
        };
        let args = text(&arguments(&spec, &tools(true)));
        assert!(
            args.contains(&format!("--dev-bind {0} {0}", card.display())),
            "{args}"
        );
        assert!(args.contains(&format!("--dev-bind {0} {0}", control.display())));
        assert!(!args.contains("missing"), "{args}");
        assert!(
            args.contains("--ro-bind /srv/run/s1/ld.so.preload /etc/ld.so.preload"),
            "{args}"
        );
        assert!(
            args.contains("--ro-bind /opt/hami/libvgpu.so /usr/local/vgpu/libvgpu.so"),
            "{args}"
        );
        assert!(
            args.contains("--ro-bind /opt/gs/libslice_pin.so /usr/local/vgpu/libslice_pin.so"),
            "{args}"
        );
        assert!(
            args.contains("--ro-bind /srv/run/s1/gpu-slice.env /etc/gpu-slice.env"),
            "{args}"
        );
    }

    #[test]
    fn the_pinned_settings_are_the_slices_limits_and_hamis_own_places() {
        let env = crate::runtime::gpu::slice_env(
            &app::domain::pool::GpuSpec {
                id: "GPU-1".into(),
                model: "L40S".into(),
                memory_mib: 49_152,
                slice_mib: 8192,
                hold: app::domain::hold::SliceHold::None,
                device_minor: Some(1),
                mig: None,
            },
            8192,
            50,
            &crate::runtime::gpu::Enforcement::HamiCore("/opt/libvgpu.so".into()),
        );
        assert_eq!(
            pinned_settings(&env),
            "CUDA_DEVICE_MEMORY_LIMIT_0=8192m\nCUDA_DEVICE_SM_LIMIT=50\n\
             CUDA_DEVICE_MEMORY_LIMIT=\nCUDA_DEVICE_MEMORY_SHARED_CACHE=/tmp/cudevshr.cache\n\
             CUDA_REDIRECT=/usr/local/vgpu/libvgpu.so\nGPU_CORE_UTILIZATION_POLICY=default\n\
             !CUDA_DISABLE_CONTROL\n"
        );
        let run = tempfile::tempdir().unwrap();
        write_preload_files(run.path(), true, &env).unwrap();
        assert_eq!(
            std::fs::read_to_string(preload_file(run.path())).unwrap(),
            format!("{PIN_INSIDE}\n{HAMI_CORE_INSIDE}\n"),
            "the pin first, so its getenv comes first"
        );
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(pinned_file(run.path()))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o644, "the editor's account reads it");
    }

    #[test]
    fn a_file_where_the_read_only_system_has_no_mount_point_gets_its_folder_made_again() {
        let system = tempfile::tempdir().unwrap();
        let root = system.path();
        std::fs::create_dir(root.join("bin")).unwrap();
        std::fs::write(root.join("hosts"), "").unwrap();
        std::os::unix::fs::symlink("bin", root.join("sbin")).unwrap();
        let mut args = Args::default();
        let (one, two) = (
            root.join("vgpu/lib/libvgpu.so"),
            root.join("vgpu/lib/pin.so"),
        );
        let system = [root.to_path_buf()];
        args.files_at(
            &[
                (Path::new("/opt/lib.so"), &one),
                (Path::new("/opt/pin.so"), &two),
            ],
            &system,
        );
        let made = text(&args.0);
        let r = root.display();
        let expected = format!(
            "--perms 0755 --tmpfs {r} --ro-bind-try {r}/bin {r}/bin --ro-bind-try {r}/hosts {r}/hosts \
             --symlink bin {r}/sbin --perms 0755 --dir {r}/vgpu --perms 0755 --dir {r}/vgpu/lib \
             --ro-bind /opt/lib.so {r}/vgpu/lib/libvgpu.so --ro-bind /opt/pin.so {r}/vgpu/lib/pin.so \
             --remount-ro {r}"
        );
        assert_eq!(made, expected, "one folder made again for both");
        // Where the host has the file, it is mounted over; outside the system, nothing is
        // made again (bwrap then says what it cannot do).
        let mut args = Args::default();
        args.files_at(&[(Path::new("/x"), &root.join("hosts"))], &system);
        assert_eq!(text(&args.0), format!("--ro-bind /x {r}/hosts"));
        let mut args = Args::default();
        args.files_at(&[(Path::new("/x"), &root.join("new"))], &[]);
        assert_eq!(text(&args.0), format!("--ro-bind /x {r}/new"));
    }

    #[test]
    fn the_servers_configuration_is_hidden_where_the_system_would_show_it() {
        let etc = tempfile::tempdir().unwrap();
        let config = etc.path().join("sandbox.toml");
        std::fs::write(&config, "secret").unwrap();
        let command = ["x".into()];
        let spec = Spec {
            system: &[etc.path().to_path_buf()],
            tools: &[],
            hidden: std::slice::from_ref(&config),
            home: Path::new("/h"),
            home_inside: Path::new("/home/user"),
            run_dir: Path::new("/r"),
            run_inside: Path::new("/run/editor"),
            devices: &[],
            preload: None,
            account: None,
            workdir: Path::new("/home/user"),
            command: &command,
            datasets: &[],
        };
        let args = text(&arguments(&spec, &tools(false)));
        assert!(
            args.contains(&format!("--ro-bind /dev/null {}", config.display())),
            "{args}"
        );
    }

    #[test]
    fn mount_paths_read_as_the_kernel_escapes_them() {
        assert_eq!(unescape_mount_path("/srv/my\\040data"), "/srv/my data");
        assert_eq!(unescape_mount_path("/plain"), "/plain");
        assert!(is_mount_point(Path::new("/proc")));
        assert!(!is_mount_point(Path::new("/proc/self")));
    }

    #[test]
    fn egress_leaves_the_hosts_loopback_out_and_forwards_only_the_products_port() {
        let args = egress_arguments(4242, Some(3000), true).join(" ");
        assert!(args.contains("--no-map-gw"), "{args}");
        assert!(args.contains("-T 3000"), "{args}");
        assert!(args.contains("-t none -u none -U none"), "{args}");
        assert!(args.ends_with("--netns /proc/4242/ns/net"), "{args}");
        assert!(
            egress_arguments(1, None, true)
                .join(" ")
                .contains("-T none")
        );
        assert!(egress_arguments(7, None, false).join(" ").ends_with(" 7"));
    }
}
