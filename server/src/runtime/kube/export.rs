//! Exporting a workspace on the cluster (`GET /api/v1/workspace/export`): the volume lives in the
//! user's namespace and the server does not mount it, so tar runs in a pod that does, through the
//! pod's exec API, and its stdout (the `.tar.gz`) streams back chunk by chunk into the service's
//! pacer. Nothing is buffered beyond kube's pipe (256 KiB): while the response waits, the exec's
//! pipe fills, the WebSocket stops being read, and tar waits on its full stdout.
//!
//! - **Where it runs**: in the user's running editor pod (its container `editor`), where the
//!   volume is mounted already. With no session running, in a short-lived reader pod
//!   ([`reader_pod`]: restricted, the JupyterLab image, the claim mounted read-only, `sleep`
//!   and nothing else) that is deleted when the download ends, however it ends; its `sleep`
//!   outlives the export's time limit by [`READER_SPARE`] only, so even one a crashed server
//!   left behind ends by itself. A session that is starting or stopping holds the claim
//!   (ReadWriteOnce) without an editor to exec into yet: that export is a 409 that says so.
//! - **What it refuses** ([`EXPORT_SCRIPT`], run as `sh -c SCRIPT sh /workspace PART`, the part
//!   an argument of its own, never shell text): the same as the one-server runtime
//!   (`runtime::archive::open`), in the same words: a part missing, a part whose folder is a
//!   link (`lies behind a link`), a folder that resolves outside the volume (`leads outside`),
//!   something neither a file nor a folder. The part itself may be a link: it is archived as
//!   one. The verdict is the script's exit code, read from the exec's final status before any
//!   byte is sent, so a refusal is a 400, never a broken download. The script runs as the
//!   editor's user in the user's own container (or a pod of theirs), so the check is for the
//!   words: it can reach nothing the user could not.
//! - **tar's end**: 0, or 1 (a file changed while read), ends the download; anything else ends
//!   it with an error, so the client sees a broken download, not a short archive.
//!
//! The server needs `pods` (create, get, delete) and `pods/exec` (create) in user namespaces:
//! the chart's ClusterRole grants both, for launches and promotion.

use super::files::{
    EXIT_LINK, EXIT_MISSING, EXIT_NO_VOLUME, EXIT_NOT_A_FILE, EXIT_NOT_FOUND, EXIT_OUTSIDE,
    exit_code,
};
use super::names::{MANAGED_BY, MANAGER, SESSION_LABEL, USER_LABEL, WORKSPACE_PVC};
use super::objects::{UserPlan, WORKSPACE_DIR, restricted_container, restricted_pod};
use super::{KubeError, KubeRuntime};
use crate::runtime::archive::{ArchiveError, Chunks};
use bytes::Bytes;
use futures_util::FutureExt;
use k8s_openapi::api::core::v1::*;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Status};
use kube::api::{Api, AttachParams, DeleteParams, ListParams, PostParams};
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::time::Instant;

/// `sh -c EXPORT_SCRIPT sh ROOT PART` (PART empty: everything): exits with one of the `EXIT_`
/// codes below before writing anything, or `exec`s tar (gzip -1) on the part, from its folder.
pub const EXPORT_SCRIPT: &str = r#"root=$(realpath -- "$1") || exit 10
[ -d "$root" ] || exit 10
dir=$root
name=.
if [ -n "$2" ]; then
  name=${2##*/}
  case "$2" in
    */*)
      parent=$root/${2%/*}
      if [ -L "$parent" ]; then exit 4; fi
      [ -d "$parent" ] || exit 3
      dir=$(realpath -- "$parent") || exit 3
      case "$dir/" in "$root"/*) ;; *) exit 5 ;; esac
      ;;
  esac
  if [ ! -L "$dir/$name" ]; then
    [ -e "$dir/$name" ] || exit 3
    [ -f "$dir/$name" ] || [ -d "$dir/$name" ] || exit 6
  fi
fi
cd -- "$dir" || exit 3
command -v tar >/dev/null 2>&1 || exit 127
command -v gzip >/dev/null 2>&1 || exit 127
set -- tar --create --file=- --use-compress-program='gzip -1' --one-file-system --warning=no-file-changed --warning=no-file-removed -- "$name"
if command -v nice >/dev/null 2>&1; then set -- nice -n 19 "$@"; fi
exec "$@""#;

/// tar's code for "a file changed as it was read": what was read is whole.
const TAR_CHANGED: i64 = 1;

/// The reader pod's name in the user's namespace (one export per user at a time).
pub const READER_POD: &str = "workspace-export";
const READER_CONTAINER: &str = "export";
const EXPORT_LABEL: &str = "gpu-sandbox/export";
/// How much longer than the export's time limit a reader pod's `sleep` lasts; a day where
/// exports have no limit.
pub const READER_SPARE: Duration = Duration::from_secs(5 * 60);
const READER_UNLIMITED: Duration = Duration::from_secs(24 * 60 * 60);
/// How long a reader pod that is neither going nor ended is waited for before an export says
/// another is under way.
const BUSY_WAIT: Duration = Duration::from_secs(10);

/// The chunk read from the exec's stdout at once.
const CHUNK: usize = 64 * 1024;
/// The most kube holds between the WebSocket and the reader.
const PIPE: usize = 256 * 1024;

/// The command line the exec runs, as the API server receives it.
pub fn export_command(part: Option<&str>) -> Vec<String> {
    [
        "sh",
        "-c",
        EXPORT_SCRIPT,
        "sh",
        WORKSPACE_DIR,
        part.unwrap_or(""),
    ]
    .map(String::from)
    .to_vec()
}

/// What the script's exit, before it wrote anything, means for the export of `part`.
pub fn refusal(status: Option<&Status>, part: Option<&str>) -> ArchiveError {
    let shown = part.unwrap_or(".");
    match status.and_then(exit_code) {
        Some(EXIT_MISSING) => ArchiveError::missing(shown),
        Some(EXIT_LINK) => ArchiveError::behind_link(shown),
        Some(EXIT_OUTSIDE) => ArchiveError::outside(shown),
        Some(EXIT_NOT_A_FILE) => ArchiveError::neither(shown),
        Some(EXIT_NO_VOLUME) => {
            ArchiveError::Unavailable(format!("the pod has no workspace at {WORKSPACE_DIR}"))
        }
        Some(EXIT_NOT_FOUND) => ArchiveError::Unavailable(
            "the editor's image lacks `realpath`, `tar` or `gzip`, which an export needs".into(),
        ),
        _ => ArchiveError::Io(std::io::Error::other(format!(
            "the export in the pod ended before it began: {}",
            status
                .and_then(|s| s.message.as_deref())
                .unwrap_or("no exit status")
        ))),
    }
}

/// A pod that mounts `plan`'s workspace claim read-only and sleeps `lifetime`, for an exec of
/// [`EXPORT_SCRIPT`] when no editor runs: restricted as the restore pod is.
pub fn reader_pod(plan: &UserPlan<'_>, lifetime: Duration) -> Pod {
    let quantity = |q: &str| Quantity(q.into());
    let resources = BTreeMap::from([
        ("cpu".to_string(), quantity("500m")),
        ("memory".to_string(), quantity("256Mi")),
    ]);
    // `sh` as PID 1 would ignore SIGTERM; the trap lets the pod go as soon as it is deleted.
    let sleep = format!(
        "trap 'exit 0' TERM; sleep {} & wait",
        lifetime.as_secs().max(1)
    );
    Pod {
        metadata: ObjectMeta {
            name: Some(READER_POD.into()),
            namespace: Some(plan.namespace.clone()),
            labels: Some(BTreeMap::from([
                (MANAGED_BY.to_string(), MANAGER.to_string()),
                (USER_LABEL.to_string(), plan.user.clone()),
                (EXPORT_LABEL.to_string(), "workspace".to_string()),
            ])),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: READER_CONTAINER.into(),
                image: Some(plan.config.images.jupyterlab.clone()),
                image_pull_policy: Some("IfNotPresent".into()),
                command: Some(vec!["sh".into(), "-c".into(), sleep]),
                working_dir: Some(WORKSPACE_DIR.into()),
                resources: Some(ResourceRequirements {
                    limits: Some(resources.clone()),
                    requests: Some(resources),
                    ..ResourceRequirements::default()
                }),
                security_context: Some(restricted_container()),
                volume_mounts: Some(vec![VolumeMount {
                    name: "workspace".into(),
                    mount_path: WORKSPACE_DIR.into(),
                    read_only: Some(true),
                    ..VolumeMount::default()
                }]),
                ..Container::default()
            }],
            service_account_name: Some(super::names::SERVICE_ACCOUNT.into()),
            automount_service_account_token: Some(false),
            enable_service_links: Some(false),
            restart_policy: Some("Never".into()),
            termination_grace_period_seconds: Some(1),
            security_context: Some(restricted_pod()),
            volumes: Some(vec![Volume {
                name: "workspace".into(),
                persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                    claim_name: WORKSPACE_PVC.into(),
                    read_only: Some(true),
                }),
                ..Volume::default()
            }]),
            ..PodSpec::default()
        }),
        ..Pod::default()
    }
}

/// Where the user's workspace can be read now, judged from their session pods.
#[derive(Debug, PartialEq, Eq)]
pub enum Reader {
    /// A running editor: exec in its `editor` container.
    Editor(String),
    /// A session pod that holds the claim without an editor to exec into (starting, stopping).
    Busy,
    /// No session holds the claim: a reader pod may mount it.
    Nobody,
}

/// Which of `pods` (the user's session pods) an export reads through.
pub fn reader_of(pods: &[Pod]) -> Reader {
    let mut busy = false;
    for pod in pods {
        let status = pod.status.as_ref();
        let phase = status.and_then(|s| s.phase.as_deref()).unwrap_or("Pending");
        if matches!(phase, "Succeeded" | "Failed") {
            continue;
        }
        let editor_runs = status
            .and_then(|s| s.container_statuses.as_ref())
            .into_iter()
            .flatten()
            .any(|c| c.name == "editor" && c.state.as_ref().is_some_and(|s| s.running.is_some()));
        match (
            &pod.metadata.name,
            pod.metadata.deletion_timestamp.is_none(),
        ) {
            (Some(name), true) if phase == "Running" && editor_runs => {
                return Reader::Editor(name.clone());
            }
            _ => busy = true,
        }
    }
    if busy { Reader::Busy } else { Reader::Nobody }
}

/// A reader pod, deleted when the export that made it ends (its download done, cut or left).
struct ReaderPod {
    api: Api<Pod>,
}

impl Drop for ReaderPod {
    fn drop(&mut self) {
        let api = self.api.clone();
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(async move {
            match api.delete(READER_POD, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(e) => tracing::warn!(error = %e, "deleting an export's reader pod"),
            }
        });
    }
}

type Exit = Pin<Box<dyn Future<Output = Option<Status>> + Send>>;

/// The exec on its way: tar's stdout and its final status.
struct Exec {
    /// Held so the exec goes on; dropping it ends the WebSocket, and the kubelet ends tar.
    _process: kube::api::AttachedProcess,
    stdout: Box<dyn AsyncRead + Send + Unpin>,
    exit: Exit,
    _reader: Option<ReaderPod>,
}

impl Exec {
    async fn read(&mut self) -> std::io::Result<Bytes> {
        let mut buffer = vec![0u8; CHUNK];
        let n = self.stdout.read(&mut buffer).await?;
        buffer.truncate(n);
        Ok(Bytes::from(buffer))
    }
}

fn failed(what: &str) -> impl Fn(kube::Error) -> ArchiveError + '_ {
    move |e| {
        let error = KubeError::from_kube(what, e);
        tracing::warn!(error = %error, "workspace export");
        ArchiveError::Unavailable(error.user_message())
    }
}

impl KubeRuntime {
    /// `part` of `user_name`'s workspace as a `.tar.gz`, read through a pod that mounts it.
    pub(super) async fn export_through_pod(
        &self,
        user_name: &str,
        part: Option<&str>,
        within: Option<Duration>,
    ) -> Result<Chunks, ArchiveError> {
        let plan = UserPlan::new(&self.config, user_name);
        let pods = self.pods(&plan.namespace);
        let sessions = pods
            .list(&ListParams::default().labels(SESSION_LABEL))
            .await
            .map_err(failed("session pods"))?;
        let (pod, container, reader) = match reader_of(&sessions.items) {
            Reader::Editor(pod) => (pod, "editor", None),
            Reader::Busy => {
                return Err(ArchiveError::NotNow(
                    "a session of yours is starting or stopping and holds your workspace: export once it runs or has ended"
                        .into(),
                ));
            }
            Reader::Nobody => {
                let lifetime = within.map_or(READER_UNLIMITED, |w| w + READER_SPARE);
                let reader = self.start_reader(&plan, lifetime).await?;
                (READER_POD.to_string(), READER_CONTAINER, Some(reader))
            }
        };
        let params = AttachParams::default()
            .container(container)
            .stdin(false)
            .stdout(true)
            .stderr(false)
            .max_stdout_buf_size(PIPE);
        let mut process = pods
            .exec(&pod, export_command(part), &params)
            .await
            .map_err(|e| match e {
                kube::Error::Api(status) if status.code == 404 => ArchiveError::NotNow(
                    "your session's editor went as the export began; try again".into(),
                ),
                e => failed("pod exec")(e),
            })?;
        let stdout = process
            .stdout()
            .ok_or_else(|| std::io::Error::other("exec without stdout"))?;
        let exit = process
            .take_status()
            .ok_or_else(|| std::io::Error::other("exec without a status"))?;
        let mut exec = Exec {
            _process: process,
            stdout: Box::new(stdout),
            exit: exit.boxed(),
            _reader: reader,
        };
        // The first bytes, or the script's refusal: decided before the response's headers go.
        let first = exec.read().await?;
        if first.is_empty() {
            let status = exec.exit.await;
            return Err(refusal(status.as_ref(), part));
        }
        Ok(Box::pin(futures_util::stream::unfold(
            (Some(first), Some(exec)),
            |(first, exec)| async move {
                if let Some(first) = first {
                    return Some((Ok(first), (None, exec)));
                }
                let mut exec = exec?;
                match exec.read().await {
                    Ok(chunk) if !chunk.is_empty() => Some((Ok(chunk), (None, Some(exec)))),
                    Ok(_) => {
                        let status = exec.exit.as_mut().await;
                        match status.as_ref().and_then(exit_code) {
                            Some(0 | TAR_CHANGED) => None,
                            _ => Some((
                                Err(std::io::Error::other(format!(
                                    "tar in the pod ended badly: {}",
                                    status
                                        .and_then(|s| s.message)
                                        .unwrap_or_else(|| "no exit status".into())
                                ))),
                                (None, None),
                            )),
                        }
                    }
                    Err(e) => Some((Err(e), (None, None))),
                }
            },
        )))
    }

    /// Creates the reader pod (taking the place of one that ended) and waits until it runs.
    async fn start_reader(
        &self,
        plan: &UserPlan<'_>,
        lifetime: Duration,
    ) -> Result<ReaderPod, ArchiveError> {
        let claims = Api::<PersistentVolumeClaim>::namespaced(self.client.clone(), &plan.namespace);
        if claims
            .get_opt(WORKSPACE_PVC)
            .await
            .map_err(failed("workspace volume"))?
            .is_none()
        {
            return Err(ArchiveError::empty());
        }
        let pods = self.pods(&plan.namespace);
        let params = PostParams {
            field_manager: Some(self.config.field_manager.clone()),
            ..PostParams::default()
        };
        let pod = reader_pod(plan, lifetime);
        let deadline = Instant::now() + self.timing.start_timeout;
        // A reader that is not going yet may be the last export's, its deletion on its way.
        let busy_until = Instant::now() + BUSY_WAIT.min(self.timing.start_timeout);
        loop {
            match pods.create(&params, &pod).await {
                Ok(_) => break,
                Err(kube::Error::Api(status)) if status.code == 409 => {}
                Err(e) => return Err(failed("export's reader pod")(e)),
            }
            match pods.get_opt(READER_POD).await.map_err(failed("pods"))? {
                // Gone since: create it again.
                None => {}
                Some(there) if there.metadata.deletion_timestamp.is_some() => {}
                Some(there)
                    if matches!(
                        there.status.as_ref().and_then(|s| s.phase.as_deref()),
                        Some("Succeeded" | "Failed")
                    ) =>
                {
                    let _ = pods.delete(READER_POD, &DeleteParams::default()).await;
                }
                // Another server's export of this user, or one a crashed server left (its
                // `sleep` ends it).
                Some(_) if Instant::now() >= busy_until => {
                    return Err(ArchiveError::NotNow(
                        "an export of your workspace is under way already; wait for it to finish"
                            .into(),
                    ));
                }
                Some(_) => {}
            }
            if Instant::now() >= deadline {
                return Err(ArchiveError::NotNow(
                    "an earlier export's reader pod is still being removed; try again in a minute"
                        .into(),
                ));
            }
            tokio::time::sleep(self.timing.poll).await;
        }
        let reader = ReaderPod { api: pods.clone() };
        loop {
            let current = pods.get_opt(READER_POD).await.map_err(failed("pods"))?;
            let Some(current) = current else {
                return Err(ArchiveError::Unavailable(
                    "the export's reader pod was deleted as it started; try again".into(),
                ));
            };
            let status = current.status.clone().unwrap_or_default();
            let running = status.phase.as_deref() == Some("Running")
                && status
                    .container_statuses
                    .iter()
                    .flatten()
                    .any(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()));
            if running {
                return Ok(reader);
            }
            if let super::pods::Progress::Failed { message: why, .. } =
                super::pods::assess(&current)
            {
                return Err(ArchiveError::Unavailable(format!(
                    "the pod that reads your workspace could not start: {why}"
                )));
            }
            if Instant::now() >= deadline {
                let waiting = match super::pods::assess(&current) {
                    super::pods::Progress::Unschedulable { message, .. } => message,
                    super::pods::Progress::Waiting(what) => what,
                    _ => "it did not run".into(),
                };
                return Err(ArchiveError::Unavailable(format!(
                    "the pod that reads your workspace did not start within {} s ({waiting}); try again later",
                    self.timing.start_timeout.as_secs()
                )));
            }
            tokio::time::sleep(self.timing.poll).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::super::files::exited;

    #[test]
    fn each_refusal_has_the_one_server_runtimes_words() {
        let says = |code: &str| refusal(Some(&exited(code)), Some("a/b")).to_string();
        assert_eq!(says("3"), ArchiveError::missing("a/b").to_string());
        assert!(says("4").contains("lies behind a link"));
        assert!(says("5").contains("leads outside your workspace"));
        assert!(says("6").contains("neither a file nor a folder"));
        assert!(matches!(
            refusal(Some(&exited("127")), None),
            ArchiveError::Unavailable(_)
        ));
        assert!(matches!(
            refusal(Some(&exited("2")), None),
            ArchiveError::Io(_)
        ));
        assert!(matches!(refusal(None, None), ArchiveError::Io(_)));
    }

    /// The script itself, by this machine's `sh`, on a folder standing for the volume: the
    /// same refusals as `archive::open` on the same tree.
    #[test]
    fn the_script_refuses_what_the_local_export_refuses() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("workspace");
        let outside = dir.path().join("secret");
        std::fs::create_dir_all(root.join("notes/deep")).unwrap();
        std::fs::create_dir_all(outside.join("sub")).unwrap();
        std::fs::write(root.join("notes/a b.txt"), "mine").unwrap();
        std::fs::write(outside.join("key"), "x").unwrap();
        std::os::unix::fs::symlink(&outside, root.join("out")).unwrap();
        let run = |part: &str| {
            let output = std::process::Command::new("sh")
                .args(["-c", EXPORT_SCRIPT, "sh"])
                .arg(&root)
                .arg(part)
                .output()
                .unwrap();
            (output.status.code().unwrap() as i64, output.stdout)
        };
        for (part, code) in [
            ("out/key", EXIT_LINK),
            ("out/sub/key", EXIT_OUTSIDE),
            ("nothing/here", EXIT_MISSING),
            ("notes/none", EXIT_MISSING),
            ("notes/a b.txt/x", EXIT_MISSING),
        ] {
            let (got, out) = run(part);
            assert_eq!((got, out.len()), (code, 0), "{part}");
            let local = crate::runtime::archive::open(&root, Some(part)).unwrap_err();
            assert_eq!(
                refusal(Some(&exited(&code.to_string())), Some(part)).to_string(),
                local.to_string(),
                "{part}"
            );
        }
        // The link itself, a file with a space, a folder and everything are archived.
        for part in ["out", "notes/a b.txt", "notes", "notes/deep", ""] {
            let (code, out) = run(part);
            assert_eq!(code, 0, "{part}");
            assert_eq!(&out[..2], [0x1f, 0x8b], "{part}: a gzip stream");
        }
    }

    #[test]
    fn the_part_is_an_argument_never_shell_text() {
        let command = export_command(Some("a b/$(x)"));
        assert_eq!(command[..4], ["sh", "-c", EXPORT_SCRIPT, "sh"]);
        assert_eq!(command[4..], [WORKSPACE_DIR, "a b/$(x)"]);
        assert_eq!(export_command(None)[5], "");
        assert!(!EXPORT_SCRIPT.contains("eval"));
    }

    fn pod(name: &str, phase: &str, editor_running: bool, deleting: bool) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": name,
                "deletionTimestamp": deleting.then_some("2026-12-05T08:30:00Z"),
            },
            "status": {
                "phase": phase,
                "containerStatuses": [{
                    "name": "editor", "image": "i", "imageID": "", "ready": editor_running,
                    "restartCount": 0,
                    "state": if editor_running { serde_json::json!({"running": {}}) }
                             else { serde_json::json!({"waiting": {"reason": "ContainerCreating"}}) },
                }],
            },
        }))
        .unwrap()
    }

    #[test]
    fn a_running_editor_is_read_through_and_a_starting_one_holds_the_claim() {
        assert_eq!(reader_of(&[]), Reader::Nobody);
        assert_eq!(
            reader_of(&[pod("s1", "Succeeded", false, false)]),
            Reader::Nobody
        );
        assert_eq!(
            reader_of(&[pod("s1", "Pending", false, false)]),
            Reader::Busy
        );
        assert_eq!(reader_of(&[pod("s1", "Running", true, true)]), Reader::Busy);
        assert_eq!(
            reader_of(&[
                pod("s1", "Pending", false, false),
                pod("s2", "Running", true, false)
            ]),
            Reader::Editor("s2".into())
        );
    }
}
