//! A workspace, or a folder or file of it, as a `.tar.gz` streamed to the client as it is made:
//! nothing of it is held in memory or written to disk beside the chunk in flight.
//!
//! Debian's GNU `tar` (piping through `gzip -1`) makes the archive, rather than the `tar` and
//! `flate2` crates on a blocking thread: no crate added to the build, and tar already does what
//! an export needs (links stored as links and never followed, special files skipped, sparse
//! files, sizes past 8 GiB, a file that changes while read is a warning, not a torn archive). It
//! runs as a child in a process group of its own at the lowest CPU and I/O priority (`nice 19`,
//! `ionice -c 3`), so an export never slows a live session; the group is killed when the
//! download ends early (the client hung up), so no tar outlives its request.
//!
//! The part to archive is opened here first, with a check that it lies inside the workspace
//! (the path the kernel opened, read back from `/proc/self/fd`, under the canonical workspace,
//! as [`super::workspace_file::copy_local`] does); tar then starts in that opened folder
//! (`fchdir` before `exec`) and archives one name there, so a link swapped in after the check
//! cannot lead it out. Where workspaces are file systems of their own (`runtime::disk`), the
//! archive is read through their mount on the workspace's folder, like any folder.

use bytes::Bytes;
use futures_util::Stream;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use tokio::io::AsyncReadExt;

/// An archive's bytes as they are made, wherever tar runs (here, or in a pod: `kube::export`).
pub type Chunks = Pin<Box<dyn Stream<Item = std::io::Result<Bytes>> + Send + 'static>>;

/// Chunks handed to the response: the largest piece of the archive in memory at once.
const CHUNK: usize = 64 * 1024;

/// Why a part cannot be exported; the messages are for the user.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    /// Nothing by that name, or it leads out of the workspace, or it is not a file or folder.
    #[error("{0}")]
    Refused(String),
    /// The workspace cannot be read now (on a cluster: a session of the user is starting).
    #[error("{0}")]
    NotNow(String),
    /// This runtime cannot read workspaces at all, or not as it is set up.
    #[error("{0}")]
    Unavailable(String),
    #[error("exporting: {0}")]
    Io(#[from] std::io::Error),
}

/// The refusals, in the same words wherever the archive is made.
impl ArchiveError {
    pub fn missing(part: &str) -> ArchiveError {
        ArchiveError::Refused(format!(
            "there is no file or folder `{part}` in your workspace"
        ))
    }
    pub fn behind_link(part: &str) -> ArchiveError {
        ArchiveError::Refused(format!(
            "`{part}` lies behind a link; export the folder it points to"
        ))
    }
    pub fn outside(part: &str) -> ArchiveError {
        ArchiveError::Refused(format!("`{part}` leads outside your workspace"))
    }
    pub fn neither(part: &str) -> ArchiveError {
        ArchiveError::Refused(format!("`{part}` is neither a file nor a folder"))
    }
    pub fn empty() -> ArchiveError {
        ArchiveError::Refused(
            "your workspace is empty: launch a session and save a file first".into(),
        )
    }
}

/// `part` of the workspace at `workspace` on this machine, archived as it is read: the
/// runtimes' default [`crate::runtime::Runtime::export_workspace`].
pub async fn export_local(
    workspace: PathBuf,
    part: Option<String>,
) -> Result<Chunks, ArchiveError> {
    let opened = tokio::task::spawn_blocking(move || open(&workspace, part.as_deref()))
        .await
        .map_err(std::io::Error::other)??;
    Ok(Box::pin(start(opened)?.into_stream()))
}

/// A part of a workspace opened for archiving: the folder tar starts in, and the one name in
/// it that it archives (`.` for the whole folder).
#[derive(Debug)]
pub struct Opened {
    folder: OwnedFd,
    member: String,
}

/// Opens `part` (relative, already checked by `app::domain::backups::workspace_part`; `None`:
/// the whole workspace) of `workspace`. Blocking: run it off the async threads.
pub fn open(workspace: &Path, part: Option<&str>) -> Result<Opened, ArchiveError> {
    let root = std::fs::canonicalize(workspace).map_err(|_| ArchiveError::empty())?;
    let Some(part) = part else {
        return Ok(Opened {
            folder: open_folder(&root, &root, ".")?,
            member: ".".into(),
        });
    };
    let (parent, name) = match part.rsplit_once('/') {
        Some((parent, name)) => (root.join(parent), name),
        None => (root.clone(), part),
    };
    let folder = open_folder(&parent, &root, part)?;
    // The member itself, not followed: a link is archived as the link it is.
    let member = std::fs::symlink_metadata(
        Path::new(&format!("/proc/self/fd/{}", folder.as_raw_fd())).join(name),
    )
    .map_err(|_| ArchiveError::missing(part))?;
    if !(member.is_dir() || member.is_file() || member.is_symlink()) {
        return Err(ArchiveError::neither(part));
    }
    Ok(Opened {
        folder,
        member: name.to_string(),
    })
}

/// `path` opened as a folder, refused unless what the kernel opened lies inside `root`.
fn open_folder(path: &Path, root: &Path, shown: &str) -> Result<OwnedFd, ArchiveError> {
    use std::os::unix::fs::OpenOptionsExt;
    let folder = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            // A link where a folder should be: ELOOP, or ENOTDIR with O_DIRECTORY.
            Some(libc::ELOOP) | Some(libc::ENOTDIR)
                if std::fs::symlink_metadata(path).is_ok_and(|m| m.is_symlink()) =>
            {
                ArchiveError::behind_link(shown)
            }
            Some(libc::ENOENT) | Some(libc::ENOTDIR) => ArchiveError::missing(shown),
            _ => ArchiveError::Io(e),
        })?;
    let opened = std::fs::read_link(format!("/proc/self/fd/{}", folder.as_raw_fd()))?;
    if !opened.starts_with(root) {
        return Err(ArchiveError::outside(shown));
    }
    Ok(folder.into())
}

/// The running archiver: its output as a stream of chunks, ending with an error if tar failed
/// (so the client sees a cut-off download, not a short archive that looks whole).
pub struct Archive {
    child: tokio::process::Child,
    stdout: tokio::process::ChildStdout,
}

impl Drop for Archive {
    fn drop(&mut self) {
        // The client left before the end: tar and its gzip go, as one group.
        if let Ok(None) = self.child.try_wait()
            && let Some(pid) = self.child.id()
        {
            // SAFETY: kill(2) on the child's own process group, which it leads.
            unsafe { libc::kill(-(pid as i32), libc::SIGKILL) };
        }
    }
}

/// Starts tar on `opened`.
pub fn start(opened: Opened) -> Result<Archive, ArchiveError> {
    let mut command = low_priority("tar");
    command
        .args([
            "--create",
            "--file=-",
            "--use-compress-program=gzip -1",
            "--one-file-system",
            "--warning=no-file-changed",
            "--warning=no-file-removed",
            "--",
            &opened.member,
        ])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .process_group(0);
    let folder = opened.folder.as_raw_fd();
    // SAFETY: fchdir is async-signal-safe; the descriptor is open until after the spawn.
    unsafe {
        command.pre_exec(move || {
            if libc::fchdir(folder) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
    let mut child = command.spawn()?;
    drop(opened);
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| std::io::Error::other("tar has no output"))?;
    Ok(Archive { child, stdout })
}

/// `program` at the lowest CPU and I/O priority where `nice` and `ionice` are installed.
pub fn low_priority(program: &str) -> tokio::process::Command {
    let mut line: Vec<String> = Vec::new();
    if super::sandbox::which("ionice").is_some() {
        line.extend(["ionice".into(), "-c".into(), "3".into()]);
    }
    if super::sandbox::which("nice").is_some() {
        line.extend(["nice".into(), "-n".into(), "19".into()]);
    }
    line.push(program.into());
    let mut command = tokio::process::Command::new(&line[0]);
    command.args(&line[1..]);
    command
}

impl Archive {
    /// The archive's bytes as they come.
    pub fn into_stream(self) -> impl Stream<Item = std::io::Result<Bytes>> + Send + 'static {
        futures_util::stream::unfold(Some(self), |state| async move {
            let mut archive = state?;
            let mut buffer = vec![0u8; CHUNK];
            match archive.stdout.read(&mut buffer).await {
                Ok(0) => match archive.child.wait().await {
                    // 1: a file changed or went while it was read; what was read is whole.
                    Ok(status) if matches!(status.code(), Some(0) | Some(1)) => None,
                    Ok(status) => Some((
                        Err(std::io::Error::other(format!("tar ended with {status}"))),
                        None,
                    )),
                    Err(e) => Some((Err(e), None)),
                },
                Ok(n) => {
                    buffer.truncate(n);
                    Some((Ok(Bytes::from(buffer)), Some(archive)))
                }
                Err(e) => Some((Err(e), None)),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_part_behind_a_link_out_of_the_workspace_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let workspace = dir.path().join("w");
        let outside = dir.path().join("secret");
        std::fs::create_dir_all(&workspace).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("key"), "x").unwrap();
        std::os::unix::fs::symlink(&outside, workspace.join("out")).unwrap();
        std::fs::create_dir_all(outside.join("sub")).unwrap();
        let refusal = open(&workspace, Some("out/key")).unwrap_err().to_string();
        assert!(refusal.contains("behind a link"), "{refusal}");
        let refusal = open(&workspace, Some("out/sub/key"))
            .unwrap_err()
            .to_string();
        assert!(refusal.contains("outside"), "{refusal}");
        // The link itself may be exported: it is archived as a link.
        assert!(open(&workspace, Some("out")).is_ok());
        let refusal = open(&workspace, Some("nothing/here"))
            .unwrap_err()
            .to_string();
        assert!(refusal.contains("no file or folder"), "{refusal}");
    }
}
