//! Users' workspaces on this machine: where they are, how a pre-started editor takes one over
//! (`bind`), how one is removed and measured.

use super::LocalRuntime;
use crate::runtime::{EditorLaunch, RuntimeError};
use std::path::{Path, PathBuf};

impl LocalRuntime {
    pub(super) fn workspaces_dir(&self) -> PathBuf {
        self.data_dir.join("workspaces")
    }

    pub(super) fn workspace_of(&self, user_name: &str) -> PathBuf {
        super::plan::workspace_of(&self.data_dir, user_name)
    }

    /// A pre-started editor's workspace: a link that points at an empty directory until a user
    /// takes the editor over. Editors keep the path, not its target, so files appear on rebinding.
    pub(super) fn binding_of(&self, launch_id: &str) -> PathBuf {
        super::plan::binding_of(&self.data_dir, launch_id)
    }

    /// A sandboxed pre-started editor's home: a folder of its own, made a mount point that the
    /// user's workspace is mounted on when a launch takes the editor.
    pub(super) fn slot_of(&self, launch_id: &str) -> PathBuf {
        super::plan::slot_of(&self.data_dir, launch_id)
    }

    pub(super) fn unbound_workspace(&self, launch_id: &str) -> std::io::Result<PathBuf> {
        let link = self.binding_of(launch_id);
        let empty = link.with_extension("empty");
        std::fs::create_dir_all(&empty)?;
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&empty, &link)?;
        Ok(link)
    }
}

/// Copies into `to` what `from` holds and `to` lacks, directories merged, nothing overwritten;
/// links are left out. A missing `from` copies nothing.
pub(super) fn copy_missing(from: &Path, to: &Path, owner: Option<u32>) -> std::io::Result<()> {
    let own = |path: &Path| match owner {
        Some(uid) => std::os::unix::fs::lchown(path, Some(uid), Some(uid)),
        None => Ok(()),
    };
    let entries = match std::fs::read_dir(from) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        let kind = entry.file_type()?;
        let target = to.join(entry.file_name());
        if kind.is_dir() {
            match std::fs::create_dir(&target) {
                Ok(()) => own(&target)?,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e),
            }
            if target.is_dir() {
                copy_missing(&entry.path(), &target, owner)?;
            }
        } else if kind.is_file() && std::fs::symlink_metadata(&target).is_err() {
            std::fs::copy(entry.path(), &target)?;
            own(&target)?;
        }
    }
    Ok(())
}

/// The account of the user whose workspace is `workspace`, with the workspace made a file
/// system of `disk_mib` where this machine can (a folder, checked at launch, where it cannot).
pub(super) fn own_workspace(
    accounts: &crate::runtime::accounts::Accounts,
    disks: Option<&crate::runtime::disk::Disks>,
    workspaces: &Path,
    workspace: &Path,
    disk_mib: u64,
) -> std::io::Result<u32> {
    let uid = accounts.of_workspace(workspaces, workspace)?;
    let Some(disks) = disks.filter(|_| disk_mib > 0) else {
        return Ok(uid);
    };
    if let Err(e) = disks.ensure(workspace, disk_mib, uid) {
        tracing::warn!(workspace = %workspace.display(), error = %e, "the workspace stays a folder: its quota is checked at launch only");
    }
    // A file system made earlier has its own owner: the account is whoever owns it now.
    accounts.of_workspace(workspaces, workspace)
}

/// The launch's datasets that are host folders, each with its mount point made in the workspace.
pub(super) fn local_datasets(
    launch: &EditorLaunch,
    workspace: &Path,
    owner: Option<u32>,
) -> Vec<(PathBuf, String)> {
    let folders: Vec<(PathBuf, String)> = launch
        .datasets
        .iter()
        .filter_map(|d| match &d.place {
            app::domain::datasets::Place::Path(path) => Some((PathBuf::from(path), d.name.clone())),
            app::domain::datasets::Place::Claim(_) => None,
        })
        .collect();
    if folders.is_empty() {
        return folders;
    }
    let names: Vec<String> = folders.iter().map(|(_, n)| n.clone()).collect();
    let ready = dataset_mount_points(workspace, &names, owner);
    folders
        .into_iter()
        .filter(|(_, name)| ready.contains(name))
        .collect()
}

/// Makes `<workspace>/datasets/<name>` for each name, owned by `owner`, as mount points for the
/// datasets' read-only binds; never following a link the user made there (the server is root
/// here). The names whose mount point is there: a `datasets` that is not a folder leaves all out.
fn dataset_mount_points(workspace: &Path, names: &[String], owner: Option<u32>) -> Vec<String> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    let open_dir = |at: Option<i32>, name: &Path| -> std::io::Result<OwnedFd> {
        let c = std::ffi::CString::new(name.as_os_str().as_encoded_bytes())
            .map_err(std::io::Error::other)?;
        let flags = libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_RDONLY;
        // SAFETY: open(at) of a valid C string; the descriptor is owned at once.
        let fd = unsafe { libc::openat(at.unwrap_or(libc::AT_FDCWD), c.as_ptr(), flags) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: fd was just opened and is ours.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    };
    let make = |at: &OwnedFd, name: &str| -> std::io::Result<OwnedFd> {
        let c = std::ffi::CString::new(name).map_err(std::io::Error::other)?;
        // SAFETY: mkdirat in a directory we hold open, with a valid C string.
        if unsafe { libc::mkdirat(at.as_raw_fd(), c.as_ptr(), 0o755) } != 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::AlreadyExists {
                return Err(e);
            }
        }
        let dir = open_dir(Some(at.as_raw_fd()), Path::new(name))?;
        if let Some(uid) = owner {
            std::os::unix::fs::fchown(&dir, Some(uid), Some(uid))?;
        }
        Ok(dir)
    };
    let base = match open_dir(None, workspace)
        .and_then(|w| make(&w, app::domain::datasets::MOUNT_DIR))
    {
        Ok(base) => base,
        Err(e) => {
            tracing::warn!(workspace = %workspace.display(), error = %e, "no datasets: ~/datasets is not a folder");
            return Vec::new();
        }
    };
    names
        .iter()
        .filter(|name| match make(&base, name) {
            Ok(_) => true,
            Err(e) => {
                tracing::warn!(dataset = %name, error = %e, "a dataset's mount point");
                false
            }
        })
        .cloned()
        .collect()
}

/// Bytes in the files under `dir` (links not followed); a missing directory is empty.
fn directory_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            match entry.metadata() {
                Ok(meta) if meta.is_dir() => pending.push(entry.path()),
                Ok(meta) if meta.is_file() => total += meta.len(),
                _ => {}
            }
        }
    }
    total
}

/// Gives the pre-started editor of `launch_id` the workspace of `user_name` (see
/// [`crate::runtime::Runtime::bind_workspace`]).
pub(super) async fn bind(
    rt: &LocalRuntime,
    launch_id: &str,
    user_name: &str,
    disk_mib: u64,
) -> Result<(), RuntimeError> {
    let workspace = rt.workspace_of(user_name);
    tokio::fs::create_dir_all(&workspace).await?;
    if let Some(sandbox) = rt.sandbox() {
        let slot = rt.slot_of(launch_id);
        let accounts = sandbox.accounts.clone();
        let disks = sandbox.disks.as_ref().ok().cloned();
        let workspaces = rt.workspaces_dir();
        return tokio::task::spawn_blocking(move || {
            use std::os::unix::fs::MetadataExt;
            let spare = std::fs::metadata(&slot)?.uid();
            let owner = match &accounts {
                Some(accounts) => Some(own_workspace(
                    accounts,
                    disks.as_ref(),
                    &workspaces,
                    &workspace,
                    disk_mib,
                )?),
                None => None,
            };
            // What the editor made in its empty home at start (Jupyter's notebook secret,
            // say) is found under the same paths afterwards, unless the user has their own.
            copy_missing(&slot, &workspace, owner)?;
            match owner {
                // The user's files, shown to the editor's spare account as its own.
                Some(owner) => crate::runtime::idmap::mount_as(&workspace, &slot, owner, spare),
                None => crate::runtime::sandbox::mount_into(&workspace, &slot),
            }
        })
        .await
        .map_err(|e| RuntimeError::Io(std::io::Error::other(e)))?
        .map_err(RuntimeError::Io);
    }
    let link = rt.binding_of(launch_id);
    // What the editor made in its empty home at start (Jupyter's notebook secret, say) is
    // found under the same paths after the swap, unless the user has their own.
    let made = link.with_extension("empty");
    let into = workspace.clone();
    tokio::task::spawn_blocking(move || copy_missing(&made, &into, None))
        .await
        .map_err(|e| RuntimeError::Io(std::io::Error::other(e)))??;
    let staged = link.with_extension("next");
    let _ = tokio::fs::remove_file(&staged).await;
    tokio::fs::symlink(&workspace, &staged).await?;
    // rename(2) swaps the link in one step: the editor never sees it missing.
    tokio::fs::rename(&staged, &link).await?;
    let _ = tokio::fs::remove_dir_all(link.with_extension("empty")).await;
    Ok(())
}

/// Removes a user's workspace (and its file system).
pub(super) async fn remove(rt: &LocalRuntime, user_name: &str) -> Result<(), RuntimeError> {
    let workspace = rt.workspace_of(user_name);
    let disks = rt.sandbox().and_then(|s| s.disks.as_ref().ok()).cloned();
    tokio::task::spawn_blocking(move || {
        if let Some(disks) = disks {
            disks.remove(&workspace)?;
        }
        // Not following links: a link in the workspace removes the link, not its target.
        match std::fs::remove_dir_all(&workspace) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    })
    .await
    .map_err(|e| RuntimeError::Unavailable(format!("removing a workspace: {e}")))?
    .map_err(RuntimeError::Io)
}

/// The size of a user's workspace.
pub(super) async fn mib(rt: &LocalRuntime, user_name: &str) -> Option<u64> {
    let workspace = rt.workspace_of(user_name);
    tokio::task::spawn_blocking(move || directory_bytes(&workspace))
        .await
        .ok()
        .map(|bytes| bytes.div_ceil(1024 * 1024))
}
