//! bwrap's command line for one editor, and the commands beside it (`pasta`, the relay).

use super::files::{
    HAMI_CORE_INSIDE, PIN_INSIDE, PINNED_INSIDE, group_file, passwd_file, pinned_file, preload_file,
};
use super::tools::Tools;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

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
pub(super) struct Args(pub(super) Vec<OsString>, Vec<PathBuf>);

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
    pub(super) fn files_at(&mut self, files: &[(&Path, &Path)], system: &[PathBuf]) {
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
