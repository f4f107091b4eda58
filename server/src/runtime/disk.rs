//! A workspace's disk quota, enforced while writing: as root, each workspace is a file system of
//! its own, an ext4 image (sparse: it takes on disk only what is written) on a loop device,
//! mounted on the workspace's folder and sized by its user's quota; a write past it fails with
//! "No space left on device", in that workspace only. Images are under `data/disks/`, one per
//! user; they grow (online, `resize2fs`) when the quota grows, never shrink (a quota lowered
//! below what is stored is caught by the launch check instead). Chosen over filesystem quotas
//! (the data directory's file system would need them turned on) and over XFS project quotas
//! (XFS only); e2fsprogs and util-linux are on every Debian machine.
//!
//! A folder that was a plain directory before is copied into its new file system once, and
//! stays a folder (its size then checked at launch only) if it is larger than its quota.

use std::path::{Path, PathBuf};
use std::process::Command;

const MIB: u64 = 1024 * 1024;

/// ext4 needs some room of its own; below this an image is this size.
const SMALLEST_MIB: u64 = 32;

#[derive(Clone, Debug)]
pub struct Disks {
    images: PathBuf,
}

impl Disks {
    /// Workspace file systems under `data_dir`, where this machine can make them: as root,
    /// with loop devices and the tools.
    pub fn detect(data_dir: &Path, root: bool) -> Result<Disks, String> {
        if !root {
            return Err("mounting a workspace's file system takes root".into());
        }
        if !Path::new("/dev/loop-control").exists() {
            return Err("this machine has no loop devices".into());
        }
        for tool in [
            "mkfs.ext4",
            "e2fsck",
            "resize2fs",
            "losetup",
            "mount",
            "umount",
        ] {
            if super::sandbox::which(tool).is_none() {
                return Err(format!("{tool} is not installed"));
            }
        }
        Ok(Disks {
            images: data_dir.join("disks"),
        })
    }

    fn image_of(&self, workspace: &Path) -> PathBuf {
        let name = workspace.file_name().unwrap_or_default();
        self.images.join(name).with_extension("ext4")
    }

    /// Makes `workspace` the mount point of its own file system of `quota_mib`, owned by
    /// `owner`: made, mounted or grown as needed. An error leaves the folder as it was.
    pub fn ensure(&self, workspace: &Path, quota_mib: u64, owner: u32) -> std::io::Result<()> {
        let workspace = std::fs::canonicalize(workspace)?;
        let image = self.image_of(&workspace);
        let bytes = quota_mib.max(SMALLEST_MIB) * MIB;
        if super::sandbox::is_mount_point(&workspace) {
            return grow(&image, &workspace, bytes);
        }
        std::fs::create_dir_all(&self.images)?;
        let has_files = std::fs::read_dir(&workspace)?.next().is_some();
        if image.exists() {
            if has_files {
                // Never mixed: what is in the folder would vanish under the mount.
                return Err(std::io::Error::other(
                    "the folder holds files beside its own file system",
                ));
            }
            grow_image(&image, bytes)?;
        } else {
            make(&image, bytes, owner)?;
            if has_files && let Err(e) = move_in(&image, &workspace) {
                let _ = std::fs::remove_file(&image);
                return Err(e);
            }
        }
        mount(&image, &workspace)?;
        // ext4's own folder, which would otherwise show in every home.
        let _ = std::fs::remove_dir(workspace.join("lost+found"));
        Ok(())
    }

    /// Mounts every workspace image on its folder, as after the machine restarted.
    pub fn mount_all(&self, workspaces: &Path) {
        let Ok(entries) = std::fs::read_dir(&self.images) else {
            return;
        };
        for entry in entries.flatten() {
            let image = entry.path();
            if image.extension().is_none_or(|e| e != "ext4") {
                continue;
            }
            let Some(name) = image.file_stem() else {
                continue;
            };
            let workspace = workspaces.join(name);
            let Ok(workspace) = std::fs::create_dir_all(&workspace)
                .and_then(|()| std::fs::canonicalize(&workspace))
            else {
                continue;
            };
            if super::sandbox::is_mount_point(&workspace) {
                continue;
            }
            if let Err(e) = mount(&image, &workspace) {
                tracing::warn!(image = %image.display(), error = %e, "mounting a workspace");
            }
        }
    }

    /// Unmounts every workspace's file system, once no editor runs (the server stops them all
    /// at a graceful stop): nothing is left mounted, and each loop device goes with its mount.
    /// One an editor still used would stay referenced from its sandbox: never called then.
    pub fn unmount_all(&self, workspaces: &Path) -> usize {
        let Ok(entries) = std::fs::read_dir(&self.images) else {
            return 0;
        };
        let mut unmounted = 0;
        for entry in entries.flatten() {
            let image = entry.path();
            let Some(name) = image
                .file_stem()
                .filter(|_| image.extension().is_some_and(|e| e == "ext4"))
            else {
                continue;
            };
            let Ok(workspace) = std::fs::canonicalize(workspaces.join(name)) else {
                continue;
            };
            if !super::sandbox::is_mount_point(&workspace) {
                continue;
            }
            match run(Command::new("umount").arg(&workspace)) {
                Ok(()) => unmounted += 1,
                Err(e) => {
                    tracing::warn!(workspace = %workspace.display(), error = %e, "unmounting a workspace")
                }
            }
        }
        unmounted
    }

    /// Takes a departed user's file system away: unmounted (its loop device goes with the
    /// mount) and its image deleted. Nothing to do where the workspace never had one.
    pub fn remove(&self, workspace: &Path) -> std::io::Result<()> {
        let Ok(workspace) = std::fs::canonicalize(workspace) else {
            return Ok(());
        };
        if super::sandbox::is_mount_point(&workspace) {
            run(Command::new("umount").arg(&workspace))?;
        }
        match std::fs::remove_file(self.image_of(&workspace)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// The size of the workspace's file system, in MiB, where it has one.
    pub fn size_mib(&self, workspace: &Path) -> Option<u64> {
        std::fs::metadata(self.image_of(workspace))
            .ok()
            .map(|m| m.len() / MIB)
    }
}

fn run(command: &mut Command) -> std::io::Result<()> {
    run_allowing(command, 0)
}

/// Runs `command`, which succeeds with an exit status up to `highest_ok` (e2fsck says 1 for
/// "fixed", as after ext4's `lost+found` was removed).
fn run_allowing(command: &mut Command, highest_ok: i32) -> std::io::Result<()> {
    let out = command.stdin(std::process::Stdio::null()).output()?;
    if out.status.code().is_some_and(|code| code <= highest_ok) {
        return Ok(());
    }
    Err(std::io::Error::other(format!(
        "{:?}: {}",
        command.get_program(),
        String::from_utf8_lossy(&out.stderr).trim()
    )))
}

fn make(image: &Path, bytes: u64, owner: u32) -> std::io::Result<()> {
    let file = std::fs::File::create(image)?;
    file.set_len(bytes)?;
    drop(file);
    let made = run(Command::new("mkfs.ext4")
        .args(["-q", "-F", "-m", "0", "-E"])
        .arg(format!(
            "root_owner={owner}:{owner},lazy_itable_init=1,lazy_journal_init=1"
        ))
        .arg(image));
    if made.is_err() {
        let _ = std::fs::remove_file(image);
    }
    made
}

/// Lengthens an unmounted image to `bytes` and its file system with it; on failure the image
/// keeps its length, so that its length always tells the file system's size.
fn grow_image(image: &Path, bytes: u64) -> std::io::Result<()> {
    let before = std::fs::metadata(image)?.len();
    if before >= bytes {
        return Ok(());
    }
    set_len(image, bytes)?;
    // resize2fs wants a file system checked since it was last mounted.
    let grown = run_allowing(Command::new("e2fsck").args(["-f", "-p"]).arg(image), 1)
        .and_then(|()| run(Command::new("resize2fs").arg(image)));
    if grown.is_err() {
        set_len(image, before)?;
    }
    grown
}

fn set_len(image: &Path, bytes: u64) -> std::io::Result<()> {
    std::fs::OpenOptions::new()
        .write(true)
        .open(image)?
        .set_len(bytes)
}

/// The loop device the image is attached to, if any.
fn device_of(image: &Path) -> std::io::Result<Option<String>> {
    let out = Command::new("losetup")
        .args(["-n", "-O", "NAME", "-j"])
        .arg(image)
        .output()?;
    let device = String::from_utf8_lossy(&out.stdout).trim().to_string();
    Ok((!device.is_empty()).then_some(device))
}

/// Lengthens a mounted image and its file system: online where the kernel lets this server
/// (it takes CAP_SYS_RESOURCE), else unmounted, when nothing else holds the file system (an
/// editor of the user's that runs now does: the quota then grows at a later launch).
fn grow(image: &Path, workspace: &Path, bytes: u64) -> std::io::Result<()> {
    let before = std::fs::metadata(image)?.len();
    if before >= bytes {
        return Ok(());
    }
    let Some(device) = device_of(image)? else {
        return Err(std::io::Error::other("the workspace's loop device is gone"));
    };
    set_len(image, bytes)?;
    run(Command::new("losetup").args(["-c", &device]))?;
    if run(Command::new("resize2fs").arg(&device)).is_ok() {
        return Ok(());
    }
    // Not online: back to the size the file system has, then try it unmounted.
    set_len(image, before)?;
    run(Command::new("losetup").args(["-c", &device]))?;
    if run(Command::new("umount").arg(workspace)).is_err() {
        tracing::info!(workspace = %workspace.display(), "in use: its quota grows at a later launch");
        return Ok(());
    }
    match device_of(image)? {
        // Still attached: a sandbox's copy of the mount holds it. The same device again is
        // the same file system, never a second one on the same image.
        Some(device) => run(Command::new("mount").arg(&device).arg(workspace)),
        None => {
            let grown = grow_image(image, bytes);
            mount(image, workspace)?;
            let _ = std::fs::remove_dir(workspace.join("lost+found"));
            grown
        }
    }
}

fn mount(image: &Path, at: &Path) -> std::io::Result<()> {
    // The loop device goes with the last unmount (mount's autoclear).
    run(Command::new("mount")
        .args(["-t", "ext4", "-o", "loop,nosuid,nodev"])
        .arg(image)
        .arg(at))
}

/// Copies what `workspace` holds into the image, then empties the folder. Fails, leaving the
/// folder as it was, when it does not fit.
fn move_in(image: &Path, workspace: &Path) -> std::io::Result<()> {
    let staging = image.with_extension("moving");
    std::fs::create_dir_all(&staging)?;
    mount(image, &staging)?;
    let copied = run(Command::new("cp")
        .arg("-a")
        .arg(format!("{}/.", workspace.display()))
        .arg(&staging));
    let _ = run(Command::new("umount").arg(&staging));
    let _ = std::fs::remove_dir(&staging);
    copied?;
    for entry in std::fs::read_dir(workspace)? {
        let path = entry?.path();
        if path.is_dir() && !path.is_symlink() {
            std::fs::remove_dir_all(&path)?;
        } else {
            std::fs::remove_file(&path)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_past_the_quota_fails_and_a_larger_quota_grows_the_workspace() {
        let dir = tempfile::tempdir().unwrap();
        // SAFETY: geteuid only reads this process's effective user id.
        let Ok(disks) = Disks::detect(dir.path(), unsafe { libc::geteuid() } == 0) else {
            eprintln!("skipped: no loop devices or not root");
            return;
        };
        let workspace = dir.path().join("workspaces/ada");
        std::fs::create_dir_all(&workspace).unwrap();
        std::fs::write(workspace.join("before.txt"), "kept").unwrap();
        disks.ensure(&workspace, 40, 3_900_000_003).unwrap();
        assert_eq!(
            std::fs::read_to_string(workspace.join("before.txt")).unwrap(),
            "kept",
            "what the folder held moves in"
        );
        let fill = |name: &str, mib: usize| {
            std::fs::write(workspace.join(name), vec![7u8; mib * MIB as usize])
        };
        let past = fill("big", 60).expect_err("a write past the quota fails");
        assert_eq!(past.raw_os_error(), Some(libc::ENOSPC), "{past}");
        let _ = std::fs::remove_file(workspace.join("big"));
        disks.ensure(&workspace, 120, 3_900_000_003).unwrap();
        fill("big", 60).expect("room after the quota grew");
        assert_eq!(disks.size_mib(&workspace), Some(120));
        let at = CString::new(workspace.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: umount2 of a valid C string path.
        unsafe { libc::umount2(at.as_ptr(), libc::MNT_DETACH) };
    }
    use std::ffi::CString;
}
