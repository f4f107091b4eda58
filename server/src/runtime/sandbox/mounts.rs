//! Mounts for pre-started editors' slots, and reading what is mounted where.

use std::path::{Path, PathBuf};

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

pub(super) fn unescape_mount_path(text: &str) -> String {
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
