//! Reading a file of a user's workspace on the cluster, for promotion. The volume is mounted by
//! the session's editor pod only, so the file is read there, through the pod's exec API: a short
//! POSIX shell script ([`READ_SCRIPT`]) checks the file as the local runtime does (no link at the
//! last step, nothing leading outside the volume, a regular file within the size cap) and streams
//! it on stdout; the server hashes and caps what arrives ([`copy_stream`]). The verdict comes back
//! as the exit code in the exec's status.
//!
//! Why exec and not a reader pod: the volume is ReadWriteOnce and already mounted by the running
//! editor, so a second pod might not be schedulable beside it, and pod logs (the reader pod's only
//! way out) are not binary-safe. The script runs as the editor's user inside the user's own
//! container, so it can reach nothing the user could not; the path and the cap travel as separate
//! arguments, never through the shell's parser. The server needs `pods/exec` (`create`) in user
//! namespaces (the chart's ClusterRole grants it).

use super::objects::WORKSPACE_DIR;
use super::{KubeRuntime, PodHandle};
use crate::runtime::workspace_file::{Copied, CopyError, WorkspaceFile, copy_stream};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use kube::api::AttachParams;
use std::time::Duration;

/// `sh -c READ_SCRIPT sh ROOT RELATIVE MAX_BYTES`: exits with one of the `EXIT_` codes below
/// before writing anything, or `exec`s `cat` on the file.
pub const READ_SCRIPT: &str = r#"root=$(realpath -- "$1") || exit 10
f="$root/$2"
if [ -L "$f" ]; then exit 4; fi
[ -e "$f" ] || exit 3
real=$(realpath -- "$f") || exit 3
case "$real" in "$root"/*) ;; *) exit 5 ;; esac
[ -f "$real" ] || exit 6
[ -r "$real" ] || exit 7
size=$(wc -c < "$real") || exit 7
[ "$size" -le "$3" ] || exit 8
exec cat -- "$real""#;

// The exit codes of the scripts run in a pod over the workspace, shared by the export's.
pub(super) const EXIT_MISSING: i64 = 3;
pub(super) const EXIT_LINK: i64 = 4;
pub(super) const EXIT_OUTSIDE: i64 = 5;
pub(super) const EXIT_NOT_A_FILE: i64 = 6;
const EXIT_UNREADABLE: i64 = 7;
const EXIT_TOO_LARGE: i64 = 8;
pub(super) const EXIT_NO_VOLUME: i64 = 10;
/// The shell's own code for a command it cannot find.
pub(super) const EXIT_NOT_FOUND: i64 = 127;

/// A read that takes longer than this (a stalled connection) is given up.
const READ_TIMEOUT: Duration = Duration::from_secs(15 * 60);

/// The command line the exec runs, as the API server receives it.
pub fn read_command(relative: &str, max_bytes: u64) -> Vec<String> {
    vec![
        "sh".into(),
        "-c".into(),
        READ_SCRIPT.into(),
        "sh".into(),
        WORKSPACE_DIR.into(),
        relative.into(),
        max_bytes.to_string(),
    ]
}

/// The exit code an exec's final status carries; 0 for success, None when there is none.
pub(super) fn exit_code(status: &Status) -> Option<i64> {
    if status.status.as_deref() == Some("Success") {
        return Some(0);
    }
    status
        .details
        .as_ref()?
        .causes
        .as_ref()?
        .iter()
        .find(|c| c.reason.as_deref() == Some("ExitCode"))?
        .message
        .as_deref()?
        .parse()
        .ok()
}

/// What an exec's final status means for the copy: `Ok` for success.
pub fn verdict(status: Option<&Status>, file: &WorkspaceFile<'_>) -> Result<(), CopyError> {
    let Some(status) = status else {
        return Err(CopyError::Io(std::io::Error::other(
            "the editor's pod closed the stream without an exit status",
        )));
    };
    let shown = file.relative;
    Err(match exit_code(status) {
        Some(0) => return Ok(()),
        Some(EXIT_MISSING) => CopyError::missing(shown),
        Some(EXIT_LINK) => CopyError::link(shown),
        Some(EXIT_OUTSIDE) => CopyError::outside(shown),
        Some(EXIT_NOT_A_FILE) => CopyError::not_a_file(shown),
        Some(EXIT_UNREADABLE) => CopyError::unreadable(shown),
        Some(EXIT_TOO_LARGE) => CopyError::too_large(shown, file.max_bytes),
        Some(EXIT_NO_VOLUME) => CopyError::NotNow(format!(
            "the session's editor has no workspace at {WORKSPACE_DIR}"
        )),
        Some(EXIT_NOT_FOUND) => CopyError::Unavailable(
            "the session's image lacks `realpath`, `wc` or `cat`, which promotion needs to read the file"
                .into(),
        ),
        _ => CopyError::Io(std::io::Error::other(format!(
            "reading through the editor's pod: {}",
            status.message.as_deref().unwrap_or("no message")
        ))),
    })
}

impl KubeRuntime {
    /// Streams the file out of the session's editor pod into `file.into`.
    pub(super) async fn copy_through_pod(
        &self,
        file: &WorkspaceFile<'_>,
    ) -> Result<Copied, CopyError> {
        let handle = file.handle.ok_or_else(|| {
            CopyError::NotNow(
                "on the cluster a file is read through its session's editor, and this session is not running: launch one and promote from it"
                    .into(),
            )
        })?;
        let handle = PodHandle::parse(handle)
            .map_err(|e| CopyError::Io(std::io::Error::other(e.to_string())))?;
        let params = AttachParams::default()
            .container("editor")
            .stdin(false)
            .stdout(true)
            .stderr(false)
            .max_stdout_buf_size(256 * 1024);
        let read = async {
            let mut process = self
                .pods(&handle.namespace)
                .exec(
                    &handle.pod,
                    read_command(file.relative, file.max_bytes),
                    &params,
                )
                .await
                .map_err(|e| match e {
                    kube::Error::Api(status) if status.code == 404 => CopyError::NotNow(
                        "the session's editor pod is gone; launch a session and promote from it"
                            .into(),
                    ),
                    e => CopyError::Io(std::io::Error::other(format!(
                        "exec in pod {}: {e}",
                        handle.pod
                    ))),
                })?;
            let stdout = process
                .stdout()
                .ok_or_else(|| CopyError::Io(std::io::Error::other("exec without stdout")))?;
            let status = process
                .take_status()
                .ok_or_else(|| CopyError::Io(std::io::Error::other("exec without a status")))?;
            let copied = copy_stream(stdout, file).await?;
            verdict(status.await.as_ref(), file)?;
            Ok(copied)
        };
        let result = match tokio::time::timeout(READ_TIMEOUT, read).await {
            Ok(result) => result,
            Err(_) => Err(CopyError::Io(std::io::Error::other(
                "reading through the editor's pod timed out",
            ))),
        };
        if let Err(CopyError::Io(e)) = &result {
            tracing::warn!(pod = %handle.pod, error = %e, "reading a workspace file through its pod");
        }
        result
    }
}

/// An exec's final status for a command that exited with `code`, as the API server writes it.
#[cfg(test)]
pub(super) fn exited(code: &str) -> Status {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{StatusCause, StatusDetails};
    Status {
        status: Some("Failure".into()),
        reason: Some("NonZeroExitCode".into()),
        message: Some(format!(
            "command terminated with non-zero exit code: {code}"
        )),
        details: Some(StatusDetails {
            causes: Some(vec![StatusCause {
                reason: Some("ExitCode".into()),
                message: Some(code.into()),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::exited;

    fn file() -> WorkspaceFile<'static> {
        WorkspaceFile {
            user_name: "alice",
            handle: None,
            relative: "models/m.onnx",
            into: std::path::Path::new("/nonexistent"),
            max_bytes: 2 * 1024 * 1024,
        }
    }

    #[test]
    fn each_exit_code_has_its_reason() {
        let success = Status {
            status: Some("Success".into()),
            ..Default::default()
        };
        assert!(verdict(Some(&success), &file()).is_ok());
        let says = |code: &str| {
            verdict(Some(&exited(code)), &file())
                .unwrap_err()
                .to_string()
        };
        assert!(says("3").contains("no file `models/m.onnx`"));
        assert!(says("4").contains("is a link"));
        assert!(says("5").contains("outside your workspace"));
        assert!(says("6").contains("not a file"));
        assert!(says("7").contains("cannot be read"));
        assert!(says("8").contains("larger than the 2 MiB"));
        assert!(matches!(
            verdict(Some(&exited("127")), &file()),
            Err(CopyError::Unavailable(_))
        ));
        assert!(matches!(
            verdict(Some(&exited("1")), &file()),
            Err(CopyError::Io(_))
        ));
        assert!(matches!(verdict(None, &file()), Err(CopyError::Io(_))));
    }

    /// The script itself, run by this machine's `sh` on a directory standing for the volume.
    #[test]
    fn the_script_reads_only_regular_files_inside_the_volume() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("workspace");
        std::fs::create_dir_all(root.join("models")).unwrap();
        std::fs::write(root.join("models/m.onnx"), b"weights").unwrap();
        std::fs::write(dir.path().join("secret"), b"not the user's").unwrap();
        std::os::unix::fs::symlink(dir.path().join("secret"), root.join("link")).unwrap();
        std::os::unix::fs::symlink(dir.path(), root.join("out")).unwrap();
        std::os::unix::fs::symlink(root.join("models"), root.join("inner")).unwrap();
        let run = |relative: &str, max: u64| {
            let output = std::process::Command::new("sh")
                .args(["-c", READ_SCRIPT, "sh"])
                .arg(&root)
                .arg(relative)
                .arg(max.to_string())
                .output()
                .unwrap();
            (output.status.code().unwrap(), output.stdout)
        };
        assert_eq!(run("models/m.onnx", 7), (0, b"weights".to_vec()));
        // A link inside the volume, earlier in the path, is followed.
        assert_eq!(run("inner/m.onnx", 7), (0, b"weights".to_vec()));
        for (relative, code) in [
            ("models/none", EXIT_MISSING),
            ("models/m.onnx/x", EXIT_MISSING),
            ("link", EXIT_LINK),
            ("out/secret", EXIT_OUTSIDE),
            ("models", EXIT_NOT_A_FILE),
        ] {
            assert_eq!(run(relative, 100), (code as i32, vec![]), "{relative}");
        }
        assert_eq!(run("models/m.onnx", 6), (EXIT_TOO_LARGE as i32, vec![]));
    }

    #[test]
    fn the_path_and_cap_are_arguments_never_shell_text() {
        let command = read_command("a b/$(x).bin", 5);
        assert_eq!(command[..4], ["sh", "-c", READ_SCRIPT, "sh"]);
        assert_eq!(command[4..], [WORKSPACE_DIR, "a b/$(x).bin", "5"]);
        assert!(!READ_SCRIPT.contains("eval"));
    }
}
