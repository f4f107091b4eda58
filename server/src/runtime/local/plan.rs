//! An editor's start as a plan: where its files go, where it listens, its command line, its
//! environment and its limits, as plain data made by pure functions of the launch and the
//! runtime's setting. [`Places`] comes first (the start makes those folders and finds out what
//! only doing can tell: the account, a free port, the secret, the GPU's device nodes, the
//! datasets' mount points, which it hands back as [`Found`]); [`Plan::new`] then makes the rest.
//! `spawn.rs` carries a plan out; the goldens under `tests/golden/local/` show plans whole
//! (`UPDATE_GOLDEN=1` rewrites them).
//!
//! bwrap's own command line is not planned here: `runtime::sandbox::arguments` makes it from
//! [`Mounts`] at the spawn, since it looks at what the host has (which system folders, which
//! device nodes, which account files were written).

use crate::config::local::LocalConfig;
use crate::runtime::cgroup::Limits;
use crate::runtime::{EditorLaunch, RuntimeError, editors};
use app::domain::launch::EditorKind;
use serde::Serialize;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// Where a sandboxed editor's home is, inside.
pub(super) const HOME_INSIDE: &str = "/home/user";

/// Where a sandboxed editor's run directory is, inside: nothing of the data directory's path
/// shows.
pub(super) const RUN_INSIDE: &str = "/run/editor";

/// The port marimo listens on inside its own network namespace, behind its socket's relay.
pub(super) const MARIMO_PORT: u16 = 2718;

/// Where a user's own packages go (`pip install` in a terminal or a notebook), in their home.
const USER_PACKAGES: &str = ".local/lib/python-packages";

/// What the runtime is set up with, as far as a plan reads it.
#[derive(Clone, Copy, Debug)]
pub(super) struct Setting<'a> {
    /// The editor's program.
    pub program: &'a Path,
    /// The data directory, absolute.
    pub data_dir: &'a Path,
    /// None: editors run as the server's own processes.
    pub sandbox: Option<SandboxSetting<'a>>,
}

/// What a plan reads of the sandbox (`runtime::sandbox::Sandbox`).
#[derive(Clone, Copy, Debug)]
pub(super) struct SandboxSetting<'a> {
    /// As root: each editor runs as an account of its user's (a spare one when pre-started).
    pub accounts: bool,
    /// Where the server makes cgroups: the sessions' resources.
    pub cgroups: Option<&'a LocalConfig>,
    /// The relay in front of an editor that listens only on TCP (marimo).
    pub socat: Option<&'a Path>,
    /// HAMi-core is preloaded in a GPU session's sandbox.
    pub preload: bool,
}

/// The folder an editor's home is, outside.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum Home {
    /// The user's workspace, `data/workspaces/<user>`.
    Workspace(PathBuf),
    /// A pre-started editor's link to an empty folder, swapped for one to a workspace later.
    Link(PathBuf),
    /// A sandboxed pre-started editor's slot: a mount point the workspace is mounted on later.
    Slot(PathBuf),
}

impl Home {
    pub(super) fn path(&self) -> &Path {
        match self {
            Home::Workspace(path) | Home::Link(path) | Home::Slot(path) => path,
        }
    }
}

/// Where an editor listens.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum Door {
    /// Its own Unix socket: `socket` outside, `bind` the path it binds (inside its sandbox).
    Socket { socket: PathBuf, bind: PathBuf },
    /// marimo in a sandbox: its own port inside, behind a relay that listens on the socket.
    Relay {
        socket: PathBuf,
        bind: PathBuf,
        port: u16,
    },
    /// A port of 127.0.0.1 that the start finds free (a socket's path would not fit).
    Port,
}

impl Door {
    /// The socket outside, if it listens on one.
    pub(super) fn socket(&self) -> Option<&Path> {
        match self {
            Door::Socket { socket, .. } | Door::Relay { socket, .. } => Some(socket),
            Door::Port => None,
        }
    }
}

/// Which account a sandboxed editor runs as.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum Account {
    /// The server's own (or, without root, the sandbox's user namespace's).
    Server,
    /// A spare account lent to a pre-started editor until its session ends.
    Lend,
    /// The account of the user who owns the workspace, made a file system of `disk_mib`.
    Owner { disk_mib: u64 },
}

/// What a start makes before the rest is planned: from the launch and the setting alone.
#[derive(Clone, Debug, Serialize)]
pub(super) struct Places {
    pub home: Home,
    /// `data/run/<id>/`, mode 0700: the socket, runtime files, caches and the handle's copy.
    pub run_dir: PathBuf,
    /// `data/logs/<id>.log`.
    pub log: PathBuf,
    pub door: Door,
    pub account: Account,
}

/// What the start found out by doing, between [`Places`] and [`Plan`].
#[derive(Clone, Debug, Default)]
pub(super) struct Found {
    /// The account's number, in a sandbox as root.
    pub account: Option<u32>,
    /// A free port, for [`Door::Port`].
    pub port: u16,
    pub secret: String,
    /// The slice's device nodes, in a sandbox.
    pub devices: Vec<PathBuf>,
    /// The datasets whose mount points were made: host folder and name.
    pub datasets: Vec<(PathBuf, String)>,
    /// The part of the server's environment editors see ([`editors::INHERITED_ENV`]).
    pub inherited: Vec<(String, String)>,
}

/// What a sandbox is made of, besides the system and the tooling (the sandbox's own).
#[derive(Clone, Debug, Serialize)]
pub(super) struct Mounts {
    pub home_inside: PathBuf,
    pub run_inside: PathBuf,
    pub devices: Vec<PathBuf>,
    /// HAMi-core (and the pin) preloaded for every program: a GPU session's.
    pub gpu_preload: bool,
    pub account: Option<(u32, u32)>,
    pub datasets: Vec<(PathBuf, String)>,
}

/// An editor's start, whole.
#[derive(Clone, Debug, Serialize)]
pub(super) struct Plan {
    pub places: Places,
    /// What the proxy dials: `unix:<socket>` or `127.0.0.1:<port>`.
    pub upstream: String,
    /// 0 for an editor on a Unix socket.
    pub port: u16,
    /// The editor's own command line, as it runs (inside its sandbox).
    #[serde(serialize_with = "lossy")]
    pub command: Vec<OsString>,
    /// Where the editor starts: its home, or a pre-started editor's run directory (its home is
    /// mounted over, or its link swapped, later).
    pub workdir: PathBuf,
    /// The process's working directory outside: `workdir`, or in a sandbox the run directory.
    pub current_dir: PathBuf,
    /// Its whole environment, in order (a later name wins).
    pub env: Vec<(String, PathOrText)>,
    /// What the proxy shows the editor (in its environment or on its standard input).
    pub secret: String,
    /// Written to its standard input, then closed (marimo's token).
    pub stdin: Option<String>,
    pub umask: u32,
    /// The session's cgroup limits, where the server makes cgroups.
    pub limits: Option<Limits>,
    pub sandbox: Option<Mounts>,
    /// Files the sandbox reads, written into the run directory first.
    pub preload_files: bool,
    pub account_files: Option<(u32, u32)>,
    /// The spare account lent to a pre-started editor, given back when it stops.
    pub lent: Option<u32>,
}

/// An environment value: text, or a path as the system has it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub(super) enum PathOrText {
    Text(String),
    Path(PathBuf),
}

impl AsRef<std::ffi::OsStr> for PathOrText {
    fn as_ref(&self) -> &std::ffi::OsStr {
        match self {
            PathOrText::Text(text) => text.as_ref(),
            PathOrText::Path(path) => path.as_os_str(),
        }
    }
}

fn lossy<S: serde::Serializer>(words: &[OsString], out: S) -> Result<S::Ok, S::Error> {
    out.collect_seq(words.iter().map(|w| w.to_string_lossy()))
}

/// A directory name for any user name: lowercase ASCII letters, digits, '-' and '_' kept, the
/// rest hex-escaped.
pub fn safe_name(name: &str) -> String {
    let mut out = String::new();
    for c in name.chars() {
        if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
            out.push(c.to_ascii_lowercase());
            if c.is_ascii_uppercase() {
                out.push('^');
            }
        } else {
            out.push_str(&format!("~{:x}", c as u32));
        }
    }
    if out.is_empty() { "~".into() } else { out }
}

/// A user's workspace: `data/workspaces/<safe name>`.
pub(super) fn workspace_of(data_dir: &Path, user_name: &str) -> PathBuf {
    data_dir.join("workspaces").join(safe_name(user_name))
}

/// A pre-started editor's workspace: a link that points at an empty directory until a user
/// takes the editor over. Editors keep the path, not its target, so files appear on rebinding.
pub(super) fn binding_of(data_dir: &Path, launch_id: &str) -> PathBuf {
    data_dir.join("bind").join(safe_name(launch_id))
}

/// A sandboxed pre-started editor's home: a folder of its own, made a mount point that the
/// user's workspace is mounted on when a launch takes the editor.
pub(super) fn slot_of(data_dir: &Path, launch_id: &str) -> PathBuf {
    data_dir.join("slots").join(safe_name(launch_id))
}

/// Where the editor listens, if on a Unix socket. A socket's path has room for 107 bytes
/// (`sun_path` holds 108 with the final NUL); a deeper data directory gets a port instead.
/// In a sandbox every editor answers on a socket (marimo through a relay).
pub(super) fn socket_path(editor: EditorKind, run_dir: &Path, sandboxed: bool) -> Option<PathBuf> {
    let socket = run_dir.join("editor.sock");
    ((sandboxed || editors::listens_on_unix_socket(editor)) && socket.as_os_str().len() <= 107)
        .then_some(socket)
}

/// `words` as one line for `sh -c`, each single-quoted.
pub(super) fn shell_words(words: &[String]) -> String {
    words
        .iter()
        .map(|w| format!("'{}'", w.replace('\'', "'\\''")))
        .collect::<Vec<_>>()
        .join(" ")
}

impl Places {
    /// Where `launch` puts its files and listens, and which account it runs as.
    pub(super) fn new(
        launch: &EditorLaunch,
        setting: &Setting<'_>,
    ) -> Result<Places, RuntimeError> {
        let data_dir = setting.data_dir;
        let sandbox = setting.sandbox.as_ref();
        let id = &launch.session_id;
        let home = match (launch.prestart, sandbox.is_some()) {
            (true, true) => Home::Slot(slot_of(data_dir, id)),
            (true, false) => Home::Link(binding_of(data_dir, id)),
            (false, _) => Home::Workspace(workspace_of(data_dir, &launch.user_name)),
        };
        let run_dir = data_dir.join("run").join(id);
        let socket = socket_path(launch.editor, &run_dir, sandbox.is_some());
        let inside = Path::new(RUN_INSIDE).join("editor.sock");
        let door = match (socket, sandbox) {
            (None, Some(_)) => {
                return Err(RuntimeError::Unavailable(
                    "the data directory's path is too long for an editor's socket".into(),
                ));
            }
            (None, None) => Door::Port,
            // In its own network namespace marimo's port is its own: the relay's socket is the
            // way in, and no other account can bind the port first.
            (Some(socket), Some(_)) if !editors::listens_on_unix_socket(launch.editor) => {
                Door::Relay {
                    socket,
                    bind: inside,
                    port: MARIMO_PORT,
                }
            }
            (Some(socket), Some(_)) => Door::Socket {
                socket,
                bind: inside,
            },
            (Some(socket), None) => Door::Socket {
                bind: socket.clone(),
                socket,
            },
        };
        let account = match sandbox {
            Some(s) if s.accounts && launch.prestart => Account::Lend,
            Some(s) if s.accounts => Account::Owner {
                disk_mib: launch.disk_mib,
            },
            _ => Account::Server,
        };
        Ok(Places {
            home,
            log: data_dir.join("logs").join(format!("{id}.log")),
            run_dir,
            door,
            account,
        })
    }
}

impl Plan {
    /// The rest of `launch`'s start, once its places are made and `found` is known.
    pub(super) fn new(
        launch: &EditorLaunch,
        setting: &Setting<'_>,
        places: Places,
        found: Found,
    ) -> Plan {
        let sandbox = setting.sandbox.as_ref();
        let (home, run_inside) = match sandbox {
            Some(_) => (PathBuf::from(HOME_INSIDE), PathBuf::from(RUN_INSIDE)),
            None => (places.home.path().to_path_buf(), places.run_dir.clone()),
        };
        let (port, upstream, listen) = match &places.door {
            Door::Socket { socket, bind } => (
                0,
                upstream_of(socket),
                editors::Listen::Unix(bind.as_path()),
            ),
            Door::Relay { socket, port, .. } => (
                0,
                upstream_of(socket),
                editors::Listen::Tcp {
                    host: "127.0.0.1",
                    port: *port,
                },
            ),
            Door::Port => (
                found.port,
                format!("127.0.0.1:{}", found.port),
                editors::Listen::Tcp {
                    host: "127.0.0.1",
                    port: found.port,
                },
            ),
        };
        let args = editors::arguments(
            launch.editor,
            listen,
            &launch.base_path,
            &home.to_string_lossy(),
            "-",
        );
        let workdir = if launch.prestart {
            run_inside.clone()
        } else {
            home.clone()
        };
        let account = found
            .account
            .filter(|_| sandbox.is_some())
            .map(|uid| (uid, uid));
        let has_gpu = !found.devices.is_empty();
        Plan {
            upstream,
            port,
            command: command(
                launch.editor,
                setting,
                program_and(setting, args),
                &home,
                &places.door,
            ),
            current_dir: if sandbox.is_some() {
                places.run_dir.clone()
            } else {
                workdir.clone()
            },
            env: environment(
                launch,
                sandbox.is_some(),
                account.is_some(),
                &home,
                &run_inside,
                &found,
            ),
            stdin: editors::secret_stdin(launch.editor, &found.secret),
            secret: found.secret.clone(),
            // The server's own umask (077) would make the folders bwrap creates inside (`/root`
            // above a tool folder, say) unreadable to the editor's account; what the editor
            // writes stays in its home, which is its alone.
            umask: if sandbox.is_some() { 0o022 } else { 0o077 },
            limits: sandbox.and_then(|s| s.cgroups).map(|local| {
                let r = local.resources(launch.slice.memory_mib);
                Limits {
                    memory_mib: r.memory_mib,
                    cpu_millis: (r.cpus * 1000.0).round() as u64,
                    pids: r.pids,
                }
            }),
            sandbox: sandbox.map(|_| Mounts {
                home_inside: PathBuf::from(HOME_INSIDE),
                run_inside: run_inside.clone(),
                devices: found.devices.clone(),
                gpu_preload: has_gpu,
                account,
                datasets: found.datasets.clone(),
            }),
            preload_files: sandbox.is_some_and(|s| s.preload) && has_gpu,
            account_files: account,
            lent: account
                .map(|(uid, _)| uid)
                .filter(|_| places.account == Account::Lend),
            workdir,
            places,
        }
    }
}

fn upstream_of(socket: &Path) -> String {
    format!("{}{}", crate::net::upstream::UNIX_PREFIX, socket.display())
}

fn program_and(setting: &Setting<'_>, args: Vec<String>) -> Vec<OsString> {
    std::iter::once(setting.program.as_os_str().to_os_string())
        .chain(args.into_iter().map(OsString::from))
        .collect()
}

/// The editor's command line: code-server's settings seeded first; marimo in a sandbox behind
/// the relay on its socket.
fn command(
    editor: EditorKind,
    setting: &Setting<'_>,
    mut command: Vec<OsString>,
    home: &Path,
    door: &Door,
) -> Vec<OsString> {
    if editor == EditorKind::CodeServer {
        // Where code-server keeps the user's settings and extensions (its default under
        // `XDG_DATA_HOME`, set below): set up there, from inside, before it starts.
        command = editors::with_settings_seed(&data_home(home).join("code-server"), command);
    }
    if let (Door::Relay { bind, port, .. }, Some(socat)) =
        (door, setting.sandbox.and_then(|s| s.socat))
    {
        let relay: Vec<String> = crate::runtime::sandbox::relay_command(socat, bind, *port)
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let script = format!("{} </dev/null & exec \"$0\" \"$@\"", shell_words(&relay));
        let mut wrapped: Vec<OsString> = vec!["/bin/sh".into(), "-c".into(), script.into()];
        wrapped.extend(command);
        command = wrapped;
    }
    command
}

/// Where the editors keep their data (`XDG_DATA_HOME`), in the home.
fn data_home(home: &Path) -> PathBuf {
    home.join(".local/share")
}

/// The editor's environment: the harmless part of the server's, its places, the slice's GPU
/// binding and its secret; nothing else of the server's (database URLs, credentials).
fn environment(
    launch: &EditorLaunch,
    sandboxed: bool,
    has_account: bool,
    home: &Path,
    run_inside: &Path,
    found: &Found,
) -> Vec<(String, PathOrText)> {
    let text = |k: &str, v: &str| (k.to_string(), PathOrText::Text(v.to_string()));
    let path = |k: &str, v: PathBuf| (k.to_string(), PathOrText::Path(v));
    let mut env: Vec<(String, PathOrText)> =
        found.inherited.iter().map(|(k, v)| text(k, v)).collect();
    env.push(path("HOME", home.to_path_buf()));
    if has_account {
        let name = crate::runtime::sandbox::ACCOUNT_NAME;
        env.extend([text("USER", name), text("LOGNAME", name)]);
    }
    env.extend([
        path("JUPYTER_RUNTIME_DIR", run_inside.join("jupyter")),
        path("XDG_CACHE_HOME", run_inside.join("cache")),
        path("XDG_DATA_HOME", data_home(home)),
        path("XDG_CONFIG_HOME", home.join(".config")),
        // A user's `pip install` goes into their own workspace, not the editors' tooling.
        path("PIP_TARGET", home.join(USER_PACKAGES)),
        path("PYTHONPATH", home.join(USER_PACKAGES)),
        text("PYTHONUNBUFFERED", "1"),
        // Git never looks above the workspace: a data dir inside a checkout would otherwise
        // show the editor that checkout (code-server's "open the parent repository?").
        path(
            "GIT_CEILING_DIRECTORIES",
            home.parent().unwrap_or(Path::new("/")).to_path_buf(),
        ),
    ]);
    env.extend(
        launch
            .env
            .iter()
            .filter(|(k, _)| {
                !sandboxed || !crate::runtime::gpu::UNSANDBOXED_PRELOAD_ENV.contains(&k.as_str())
            })
            .map(|(k, v)| text(k, v)),
    );
    env.extend(
        editors::secret_env(launch.editor, &found.secret)
            .into_iter()
            .map(|(k, v)| (k, PathOrText::Text(v))),
    );
    env
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::{DatasetMount, SliceBinding};

    /// Compares with `tests/golden/local/<name>.json`; `UPDATE_GOLDEN=1` rewrites the file
    /// (then read the diff before committing it).
    fn golden(name: &str, value: impl Serialize) {
        let actual = serde_json::to_value(value).unwrap();
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/golden/local")
            .join(format!("{name}.json"));
        if std::env::var_os("UPDATE_GOLDEN").is_some() {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, serde_json::to_string_pretty(&actual).unwrap() + "\n").unwrap();
        }
        let expected: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
        )
        .unwrap();
        assert_eq!(
            actual,
            expected,
            "{name} differs from {}:\n{}",
            path.display(),
            serde_json::to_string_pretty(&actual).unwrap()
        );
    }

    const DATA: &str = "/var/lib/gpu-sandbox";

    fn launch(editor: EditorKind, prestart: bool) -> EditorLaunch {
        EditorLaunch {
            session_id: "0a1b2c3d4e5f60718293".into(),
            user_name: if prestart {
                String::new()
            } else {
                "Alice".into()
            },
            editor,
            base_path: "/s/0a1b2c3d4e5f60718293/".into(),
            env: vec![
                ("CUDA_VISIBLE_DEVICES".into(), "GPU-1234".into()),
                ("LD_PRELOAD".into(), "/opt/hami/libvgpu.so".into()),
            ],
            slice: SliceBinding {
                gpu_uuid: Some("GPU-1234".into()),
                device_minor: Some(0),
                mig: None,
                memory_mib: 8192,
                cores_pct: 25,
            },
            prestart,
            image: None,
            disk_mib: if prestart { 0 } else { 10_240 },
            datasets: vec![DatasetMount {
                name: "imagenet".into(),
                place: app::domain::datasets::Place::Path("/srv/data/imagenet".into()),
            }],
        }
    }

    fn sandboxed(local: &LocalConfig) -> SandboxSetting<'_> {
        SandboxSetting {
            accounts: true,
            cgroups: Some(local),
            socat: Some(Path::new("/usr/bin/socat")),
            preload: true,
        }
    }

    fn setting<'a>(
        program: &'a str,
        data_dir: &'a str,
        sandbox: Option<SandboxSetting<'a>>,
    ) -> Setting<'a> {
        Setting {
            program: Path::new(program),
            data_dir: Path::new(data_dir),
            sandbox,
        }
    }

    /// What a start would find: an account, a port where one is asked for, a fixed secret, the
    /// slice's devices and datasets in a sandbox.
    fn found(places: &Places, sandboxed: bool) -> Found {
        Found {
            account: sandboxed.then_some(61_003),
            port: if places.door == Door::Port { 40_123 } else { 0 },
            secret: "the-secret".into(),
            devices: if sandboxed {
                crate::runtime::card_devices(0)
            } else {
                Vec::new()
            },
            datasets: if sandboxed {
                vec![("/srv/data/imagenet".into(), "imagenet".into())]
            } else {
                Vec::new()
            },
            inherited: vec![("PATH".into(), "/usr/bin:/bin".into())],
        }
    }

    fn plan_of(launch: &EditorLaunch, setting: &Setting<'_>) -> Plan {
        let places = Places::new(launch, setting).unwrap();
        let found = found(&places, setting.sandbox.is_some());
        Plan::new(launch, setting, places, found)
    }

    #[test]
    fn sandboxed_plans_match_their_goldens() {
        let local = LocalConfig::default();
        let cases = [
            (
                "jupyterlab_sandboxed",
                EditorKind::JupyterLab,
                "/tools/jupyter-lab",
                false,
            ),
            (
                "marimo_sandboxed",
                EditorKind::Marimo,
                "/tools/marimo",
                false,
            ),
            (
                "code_server_sandboxed",
                EditorKind::CodeServer,
                "/tools/code-server",
                false,
            ),
            (
                "prestarted_sandboxed",
                EditorKind::JupyterLab,
                "/tools/jupyter-lab",
                true,
            ),
        ];
        for (name, editor, program, prestart) in cases {
            let setting = setting(program, DATA, Some(sandboxed(&local)));
            golden(name, plan_of(&launch(editor, prestart), &setting));
        }
    }

    #[test]
    fn plans_without_a_sandbox_match_their_goldens() {
        let cases = [
            (
                "jupyterlab_plain",
                EditorKind::JupyterLab,
                "/tools/jupyter-lab",
                false,
            ),
            ("marimo_plain", EditorKind::Marimo, "/tools/marimo", false),
            (
                "prestarted_plain",
                EditorKind::CodeServer,
                "/tools/code-server",
                true,
            ),
        ];
        for (name, editor, program, prestart) in cases {
            let setting = setting(program, DATA, None);
            golden(name, plan_of(&launch(editor, prestart), &setting));
        }
    }

    #[test]
    fn a_data_directory_too_deep_for_a_socket_gets_a_port_or_no_sandbox() {
        let deep = format!("/{}", "d".repeat(90));
        let launch = launch(EditorKind::JupyterLab, false);
        let plain = Places::new(&launch, &setting("/jl", &deep, None)).unwrap();
        assert_eq!(plain.door, Door::Port);
        let local = LocalConfig::default();
        let boxed = Places::new(&launch, &setting("/jl", &deep, Some(sandboxed(&local))));
        assert!(
            matches!(boxed, Err(RuntimeError::Unavailable(ref why)) if why.contains("too long")),
            "{boxed:?}"
        );
    }

    #[test]
    fn only_a_pre_started_sandboxed_editor_borrows_an_account_and_gives_it_back() {
        let local = LocalConfig::default();
        let boxed = setting("/jl", DATA, Some(sandboxed(&local)));
        let prestarted = plan_of(&launch(EditorKind::JupyterLab, true), &boxed);
        assert_eq!(prestarted.places.account, Account::Lend);
        assert_eq!(prestarted.lent, Some(61_003));
        let owned = plan_of(&launch(EditorKind::JupyterLab, false), &boxed);
        assert_eq!(owned.places.account, Account::Owner { disk_mib: 10_240 });
        assert_eq!(
            owned.lent, None,
            "the user's own account is never given back"
        );
    }

    #[test]
    fn a_sandbox_preloads_hami_itself_so_the_variable_stays_outside() {
        let names =
            |plan: &Plan| -> Vec<String> { plan.env.iter().map(|(k, _)| k.clone()).collect() };
        let launch = launch(EditorKind::JupyterLab, false);
        let plain = plan_of(&launch, &setting("/jl", DATA, None));
        assert!(names(&plain).contains(&"LD_PRELOAD".to_string()));
        assert!(!plain.preload_files);
        let local = LocalConfig::default();
        let boxed = plan_of(&launch, &setting("/jl", DATA, Some(sandboxed(&local))));
        assert!(!names(&boxed).contains(&"LD_PRELOAD".to_string()));
        assert!(names(&boxed).contains(&"CUDA_VISIBLE_DEVICES".to_string()));
        assert!(
            boxed.preload_files,
            "the sandbox's own ld.so.preload instead"
        );
    }
}
