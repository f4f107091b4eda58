//! Runtimes run editors: `local` processes here, `kube` pods in a cluster. Also how each editor is
//! started and asked about its activity ([`editors`], [`activity`]) and the GPUs ([`gpu`]).
//! May import: `config`, `net`, `util`, `app::domain`.

pub mod accounts;
pub mod activity;
pub mod archive;
pub mod cgroup;
pub mod cuda;
pub mod disk;
pub mod editors;
pub mod egress;
pub mod gpu;
pub mod gpu_check;
pub mod gpu_park_check;
pub mod idmap;
pub mod kube;
mod local;
pub mod mig;
pub mod procfs;
pub mod restic;
pub mod sandbox;
pub mod snapshots;
pub mod workspace_file;

pub use crate::config::RuntimeKind;
pub use gpu::GpuUsage;

pub use local::{LocalRuntime, ToolPaths};

use app::domain::launch::EditorKind;
use std::time::Duration;

/// One editor to start for one session.
#[derive(Clone, Debug)]
pub struct EditorLaunch {
    pub session_id: String,
    pub user_name: String,
    pub editor: EditorKind,
    /// `/s/<id>/`: the proxy prefix the editor serves under.
    pub base_path: String,
    /// GPU binding for the slice, as environment (the local runtime's way).
    pub env: Vec<(String, String)>,
    /// The slice itself, for runtimes that ask a scheduler for it (kube: HAMi resources).
    pub slice: SliceBinding,
    /// Started ahead of demand: no user yet; [`Runtime::bind_workspace`] brings one's files later.
    pub prestart: bool,
    /// An approved image chosen at launch (kube); None: the configured image for the editor.
    pub image: Option<String>,
    /// The user's disk quota for their workspace, in MiB (0 for a pre-started editor).
    pub disk_mib: u64,
    /// The shared datasets the editor finds read-only at `~/datasets/<name>`, decided at launch.
    pub datasets: Vec<DatasetMount>,
}

/// A shared dataset an editor gets read-only (`app::domain::datasets`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DatasetMount {
    pub name: String,
    /// A host folder (local runtime) or a claim of the user's namespace (kube).
    pub place: app::domain::datasets::Place,
}

impl EditorLaunch {
    /// A launch of nobody's with only its slice: to ask what a slice's sandbox is given.
    pub fn of_slice(slice: SliceBinding) -> Self {
        EditorLaunch {
            session_id: String::new(),
            user_name: String::new(),
            editor: app::domain::launch::EditorKind::JupyterLab,
            base_path: String::new(),
            env: Vec::new(),
            slice,
            prestart: false,
            image: None,
            disk_mib: 0,
            datasets: Vec::new(),
        }
    }

    /// The device nodes of the slice's card (by its minor number) and NVIDIA's control
    /// devices, with a MIG instance's capability nodes; none for a slice without a card.
    pub fn slice_devices(&self) -> Result<Vec<std::path::PathBuf>, String> {
        let table = match self.slice.mig {
            Some(_) => std::fs::read_to_string(mig::MIG_MINORS)
                .map(|text| mig::parse_mig_minors(&text))
                .map_err(|e| format!("{}: {e}", mig::MIG_MINORS))?,
            None => Default::default(),
        };
        self.slice_devices_with(&table)
    }

    /// [`Self::slice_devices`] with the driver's `mig-minors` table already read.
    pub fn slice_devices_with(
        &self,
        mig_minors: &std::collections::HashMap<String, u32>,
    ) -> Result<Vec<std::path::PathBuf>, String> {
        let Some(minor) = self.slice.device_minor else {
            return Ok(Vec::new());
        };
        let mut devices = card_devices(minor);
        if let Some(place) = self.slice.mig {
            devices.extend(mig::capability_devices(mig_minors, minor, place)?);
        }
        Ok(devices)
    }
}

/// The device nodes a session on card `minor` needs: the card's own and the two CUDA opens for
/// every card (the control device and unified memory); no other card's, no display or
/// profiling device.
pub fn card_devices(minor: u32) -> Vec<std::path::PathBuf> {
    [
        format!("/dev/nvidia{minor}"),
        "/dev/nvidiactl".into(),
        "/dev/nvidia-uvm".into(),
    ]
    .into_iter()
    .map(std::path::PathBuf::from)
    .collect()
}

/// Which share of which card a session holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SliceBinding {
    /// NVIDIA UUID when the allocator chose a real card; `None` for declared (virtual) GPUs.
    pub gpu_uuid: Option<String>,
    /// That card's device node number (`/dev/nvidia<minor>`), on this machine.
    pub device_minor: Option<u32>,
    /// Where the slice is a MIG instance of that card: which one.
    pub mig: Option<app::domain::pool::MigPlace>,
    pub memory_mib: u64,
    /// Share of the card's compute, 1..=100.
    pub cores_pct: u32,
}

impl SliceBinding {
    /// `memory_mib` and `cores_pct` of `gpu`, the card a slot is on (`None`: not a card we know).
    pub fn on(gpu: Option<&app::domain::pool::GpuSpec>, memory_mib: u64, cores_pct: u32) -> Self {
        let real = gpu.filter(|g| g.device_minor.is_some());
        SliceBinding {
            gpu_uuid: real.map(|g| g.id.clone()),
            device_minor: real.and_then(|g| g.device_minor),
            mig: real.and_then(|g| g.mig),
            memory_mib,
            cores_pct,
        }
    }
}

impl GpuUsage {
    /// GPU work counts as activity: a kernel ran recently or the card is busy now.
    pub fn is_active(&self, within_seconds: f64) -> bool {
        self.utilization_pct > 0
            || self
                .last_kernel_seconds_ago
                .is_some_and(|ago| ago <= within_seconds)
    }
}

/// A started editor.
#[derive(Clone, Debug)]
pub struct Running {
    /// Where the proxy forwards to: `host:port`, or `unix:/path` (see [`crate::net::upstream`]).
    pub upstream: String,
    /// The secret the proxy presents to the editor.
    pub secret: String,
    /// The runtime's own record of what it started, kept in the database.
    pub handle: String,
}

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("{0}")]
    Unavailable(String),
    #[error("{message}")]
    Failed { message: String, log_tail: String },
    #[error("runtime I/O: {0}")]
    Io(#[from] std::io::Error),
    #[error("unreadable runtime handle: {0}")]
    Handle(String),
}

/// A message followed by the editor's last lines, where it left any.
pub fn with_last_words(message: &str, last_words: &str) -> String {
    match last_words.trim() {
        "" => message.to_string(),
        words => format!("{message}\n\nLast lines of the editor's log:\n{words}"),
    }
}

impl RuntimeError {
    /// What the user is told: the reason and the editor's last words.
    pub fn user_message(&self) -> String {
        match self {
            RuntimeError::Failed { message, log_tail } => with_last_words(message, log_tail),
            RuntimeError::Unavailable(message) => message.clone(),
            RuntimeError::Io(_) | RuntimeError::Handle(_) => {
                "the editor could not be started on this server".into()
            }
        }
    }
}

#[async_trait::async_trait]
pub trait Runtime: Send + Sync + 'static {
    /// Which editors this runtime can run, and why not.
    fn availability(&self) -> Vec<(EditorKind, Result<(), String>)>;
    /// Starts the editor; returns once it is spawned, not yet ready.
    async fn start(&self, launch: &EditorLaunch) -> Result<Running, RuntimeError>;
    /// Waits until the editor answers over HTTP, or fails with the reason.
    async fn wait_ready(
        &self,
        launch: &EditorLaunch,
        running: &Running,
        timeout: Duration,
    ) -> Result<(), RuntimeError>;
    /// Stops it and everything it started. Stopping what is gone already is fine.
    async fn stop(&self, handle: &str) -> Result<(), RuntimeError>;
    /// Whether it still runs.
    async fn is_alive(&self, handle: &str) -> bool;
    /// Freezes the editor so that it no longer touches its GPU, keeping its processes and
    /// memory (GPU memory copied out first, where it holds any), so that its slot can go to
    /// another session; refused where that cannot be done, and by default.
    async fn park(&self, handle: &str) -> Result<(), RuntimeError> {
        let _ = handle;
        Err(RuntimeError::Unavailable(
            "this runtime cannot park editors".into(),
        ))
    }
    /// Whether [`Runtime::park`] can ever succeed here (the reaper asks nothing of one that
    /// cannot).
    fn parks_editors(&self) -> bool {
        false
    }
    /// Thaws a parked editor on the slot it had.
    async fn resume(&self, handle: &str) -> Result<(), RuntimeError> {
        let _ = handle;
        Err(RuntimeError::Unavailable(
            "this runtime cannot park editors".into(),
        ))
    }
    /// Whether an editor that no longer runs went with its machine (a node drained or lost, its
    /// pod deleted by the cluster) rather than ending by itself: its session then ends as lost.
    async fn was_lost(&self, handle: &str) -> bool {
        let _ = handle;
        false
    }

    /// Stops editors this runtime started that none of `owned` (launch ids: live sessions and
    /// pre-started editors) accounts for, i.e. what a server that died between starting an
    /// editor and recording it left running; how many it stopped.
    async fn sweep(&self, _owned: &std::collections::HashSet<String>) -> usize {
        0
    }
    /// At a graceful stop that stopped every editor: lets go of what they used on this machine
    /// (workspace file systems), so nothing of ours stays mounted.
    async fn release_storage(&self) {}
    /// Whether editors can be started ahead of demand and given a workspace later.
    fn prestarts_editors(&self) -> bool {
        false
    }
    /// Gives a pre-started editor (`launch_id` = its session id) the user's workspace, whose
    /// quota is `disk_mib`.
    async fn bind_workspace(
        &self,
        launch_id: &str,
        user_name: &str,
        disk_mib: u64,
    ) -> Result<(), RuntimeError> {
        let _ = (launch_id, user_name, disk_mib);
        Err(RuntimeError::Unavailable(
            "this runtime does not pre-start editors".into(),
        ))
    }
    /// Removes a departed user's storage for good (their account was deleted and its grace
    /// period ran out; no editor of theirs runs): the workspace and whatever held it. Done
    /// when it returns Ok; an error leaves it to be tried again.
    async fn remove_workspace(&self, user_name: &str) -> Result<(), RuntimeError> {
        let _ = user_name;
        Ok(())
    }
    /// The size of a user's workspace in MiB, where the runtime can measure it.
    async fn workspace_mib(&self, user_name: &str) -> Option<u64> {
        let _ = user_name;
        None
    }
    /// Where a user's workspace lies on this machine, for the server to read files of it
    /// (promotion); `None` where the runtime keeps workspaces elsewhere (kube: in volumes).
    fn workspace_dir(&self, user_name: &str) -> Option<std::path::PathBuf> {
        let _ = user_name;
        None
    }
    /// Copies a file of a user's workspace aside for promotion, hashed and capped. By default
    /// from [`Runtime::workspace_dir`] on this machine; a runtime that keeps workspaces
    /// elsewhere reads through the session's editor.
    async fn copy_workspace_file(
        &self,
        file: &workspace_file::WorkspaceFile<'_>,
    ) -> Result<workspace_file::Copied, workspace_file::CopyError> {
        let workspace = self.workspace_dir(file.user_name).ok_or_else(|| {
            workspace_file::CopyError::Unavailable(
                "promotion reads workspaces on this machine; this server's runtime keeps them elsewhere"
                    .into(),
            )
        })?;
        let (relative, into, max_bytes) = (
            file.relative.to_string(),
            file.into.to_path_buf(),
            file.max_bytes,
        );
        tokio::task::spawn_blocking(move || {
            workspace_file::copy_local(&workspace, &relative, &into, max_bytes)
        })
        .await
        .unwrap_or_else(|e| Err(workspace_file::CopyError::Io(std::io::Error::other(e))))
    }
    /// Whether [`Runtime::export_workspace`] reads workspaces somewhere other than
    /// [`Runtime::workspace_dir`] (the kube runtime: in a pod that mounts the volume).
    fn exports_elsewhere(&self) -> bool {
        false
    }
    /// `part` (None: all) of a user's workspace as a `.tar.gz` made while it is read, for an
    /// export that may take up to `within` (None: no limit). By default tar runs here on
    /// [`Runtime::workspace_dir`]; the kube runtime runs it in a pod that mounts the volume.
    async fn export_workspace(
        &self,
        user_name: &str,
        part: Option<&str>,
        within: Option<Duration>,
    ) -> Result<archive::Chunks, archive::ArchiveError> {
        let _ = within;
        let workspace = self.workspace_dir(user_name).ok_or_else(|| {
            archive::ArchiveError::Unavailable(
                "exports read workspaces on this machine; this server's runtime keeps them elsewhere"
                    .into(),
            )
        })?;
        archive::export_local(workspace, part.map(str::to_string)).await
    }
    /// GPU use per editor handle, one sample for all (the reaper asks once per tick).
    /// Editors missing from the answer have no GPU use the runtime can see.
    async fn gpu_usage(&self, handles: &[String]) -> std::collections::HashMap<String, GpuUsage> {
        let _ = handles;
        std::collections::HashMap::new()
    }
    /// CPU cores each editor's processes used on average since the previous call, where the
    /// runtime can see them: a long job on the CPU with no browser attached is work too.
    /// Editors missing from the answer: unknown (the first call only sets the baseline).
    async fn cpu_load(&self, handles: &[String]) -> std::collections::HashMap<String, f64> {
        let _ = handles;
        std::collections::HashMap::new()
    }
    /// Memory (MiB) each editor's processes hold now, where the runtime can see them.
    async fn memory_used(&self, handles: &[String]) -> std::collections::HashMap<String, u64> {
        let _ = handles;
        std::collections::HashMap::new()
    }
    /// The memory (MiB) and CPU cores a session of `slice_mib` gets beside its GPU, where this
    /// runtime limits them.
    fn session_resources(&self, slice_mib: u64) -> Option<(u64, f64)> {
        let _ = slice_mib;
        None
    }
    /// How many times a process of the editor was stopped for outgrowing its session's
    /// memory, where the runtime can tell.
    async fn memory_kills(&self, handle: &str) -> Option<u64> {
        let _ = handle;
        None
    }
    /// The last lines an editor wrote before it died, for its owner's crash report; empty where
    /// the runtime cannot read them.
    async fn last_words(&self, handle: &str) -> String {
        let _ = handle;
        String::new()
    }
    /// What the editor of `handle` reaches on the network, in words, where this runtime sets it
    /// per editor (or could not, and it reaches nothing).
    fn network_of(&self, handle: &str) -> Option<String> {
        let _ = handle;
        None
    }
    /// What the isolation in force does not hold on this machine, in words for every page
    /// (editors are sandboxed, but some limit cannot be set here); None where all of it holds.
    fn isolation_gaps(&self) -> Option<String> {
        None
    }
    /// How editors are kept apart from each other and from the server, or why they are not.
    fn isolation(&self) -> Result<String, String> {
        Ok("a namespace per user, restricted pods".into())
    }
    /// Where workspaces are backed up by the runtime itself (a cluster's VolumeSnapshots)
    /// rather than read as files by restic; None where the server reads them.
    fn workspace_snapshots(&self) -> Option<&dyn snapshots::WorkspaceSnapshots> {
        None
    }
    /// Whether editors get the shared datasets (a sandbox binds them, a pod mounts them).
    fn mounts_datasets(&self) -> bool {
        false
    }
    /// Whether launches may choose among approved images (a runtime that runs images).
    fn runs_images(&self) -> bool {
        false
    }
    /// What runs `editor` when no image is chosen, as a promotion's provenance names it.
    fn editor_image(&self, editor: EditorKind) -> String {
        format!("local/{}", editor.as_str())
    }
}
