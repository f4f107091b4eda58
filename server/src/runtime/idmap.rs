//! Idmapped mounts (Linux 5.12 and later): a view of a folder in which the files one account
//! owns on disk show as another's, and what the other writes lands as the first's. A
//! pre-started editor runs as a spare account before anyone takes it; when a user does, their
//! workspace is mounted into its home this way, so the editor works on files it sees as its own
//! while on disk they stay the user's.
//!
//! The kernel takes the mapping from a user namespace: a short-lived child (`sleep`) unshares
//! one, the mapping is written into it, and the mount keeps a reference after the child is gone.
//! The `libc` crate has the system calls; no crate of the field wraps them.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

// From linux/mount.h (the `libc` crate names the calls, not all their flags).
const OPEN_TREE_CLONE: libc::c_uint = 1;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;
const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;

/// `struct mount_attr` of linux/mount.h.
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// Mounts `source` on `target` so that files owned by `on_disk` (user and group) show as
/// `seen_as`'s, and what `seen_as` makes is stored as `on_disk`'s.
pub fn mount_as(source: &Path, target: &Path, on_disk: u32, seen_as: u32) -> std::io::Result<()> {
    let userns = mapping(on_disk, seen_as)?;
    let (source, target) = (c_path(source)?, c_path(target)?);
    let empty = CString::default();
    // SAFETY: open_tree with a valid C string path; the fd it returns is ours to own.
    let tree = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            source.as_ptr(),
            OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint | libc::AT_RECURSIVE as libc::c_uint,
        )
    };
    if tree < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a new fd from open_tree, owned by nothing else.
    let tree = unsafe { OwnedFd::from_raw_fd(tree as i32) };
    let attr = MountAttr {
        attr_set: MOUNT_ATTR_IDMAP,
        attr_clr: 0,
        propagation: 0,
        userns_fd: userns.as_raw_fd() as u64,
    };
    // SAFETY: mount_setattr on our detached tree, with a valid attr of the size given.
    if unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            empty.as_ptr(),
            libc::AT_EMPTY_PATH | libc::AT_RECURSIVE,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    } != 0
    {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: move_mount of our detached tree onto a valid C string path.
    if unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            empty.as_ptr(),
            libc::AT_FDCWD,
            target.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH,
        )
    } != 0
    {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// A user namespace in which `on_disk` is mapped to `seen_as`, held by an fd.
fn mapping(on_disk: u32, seen_as: u32) -> std::io::Result<OwnedFd> {
    use std::os::unix::process::CommandExt;
    let mut command = std::process::Command::new("sleep");
    command
        .arg("30")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // SAFETY: unshare is async-signal-safe and touches no memory of the parent.
    unsafe {
        command.pre_exec(|| {
            if libc::unshare(libc::CLONE_NEWUSER) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    // spawn returns once the child has exec'd: its namespace exists by then.
    let mut child = command.spawn()?;
    let proc = format!("/proc/{}", child.id());
    let line = format!("{on_disk} {seen_as} 1\n");
    let made = std::fs::write(format!("{proc}/uid_map"), &line)
        .and_then(|()| std::fs::write(format!("{proc}/setgroups"), "deny"))
        .and_then(|()| std::fs::write(format!("{proc}/gid_map"), &line))
        .and_then(|()| std::fs::File::open(format!("{proc}/ns/user")));
    let _ = child.kill();
    let _ = child.wait();
    Ok(OwnedFd::from(made?))
}

fn c_path(path: &Path) -> std::io::Result<CString> {
    CString::new(path.as_os_str().as_encoded_bytes()).map_err(std::io::Error::other)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn files_show_as_the_other_account_and_land_as_their_owner() {
        // SAFETY: geteuid only reads this process's effective user id.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: mounts take root");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let (source, target) = (dir.path().join("workspace"), dir.path().join("home"));
        std::fs::create_dir_all(&source).unwrap();
        std::fs::create_dir_all(&target).unwrap();
        std::fs::write(source.join("notes.txt"), "mine").unwrap();
        for path in [&source, &source.join("notes.txt")] {
            std::os::unix::fs::lchown(path, Some(3_900_000_001), Some(3_900_000_001)).unwrap();
        }
        mount_as(&source, &target, 3_900_000_001, 3_900_000_002).unwrap();
        let seen = std::fs::metadata(target.join("notes.txt")).unwrap();
        assert_eq!((seen.uid(), seen.gid()), (3_900_000_002, 3_900_000_002));
        // What the other account writes there is the owner's on disk.
        let written = std::process::Command::new("setpriv")
            .args([
                "--reuid",
                "3900000002",
                "--regid",
                "3900000002",
                "--clear-groups",
            ])
            .args(["sh", "-c", "echo new > \"$0\"/made.txt"])
            .arg(&target)
            .status()
            .unwrap();
        assert!(written.success());
        assert_eq!(
            std::fs::metadata(source.join("made.txt")).unwrap().uid(),
            3_900_000_001
        );
        let target = c_path(&target).unwrap();
        // SAFETY: umount2 of a valid C string path.
        let unmounted = unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
        assert_eq!(unmounted, 0);
    }
}
