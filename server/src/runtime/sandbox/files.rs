//! Files a sandbox reads from its run directory: the preload list, the slice's pinned
//! settings and the account files.

use std::path::{Path, PathBuf};

/// Where the sandbox's `/etc/ld.so.preload` is written (in the run directory, read-only inside).
pub fn preload_file(run_dir: &Path) -> PathBuf {
    run_dir.join("ld.so.preload")
}

/// Where the slice's pinned settings are written, for the sandbox's `/etc/gpu-slice.env`.
pub fn pinned_file(run_dir: &Path) -> PathBuf {
    run_dir.join("gpu-slice.env")
}

/// Where HAMi-core is mounted inside: its own install path. Its `dlsym` hook hands out the
/// allocation hooks it finds in the library at that path; preloaded from anywhere else it
/// loads, shows the slice's size, and limits nothing (seen on an H200).
pub const HAMI_CORE_INSIDE: &str = "/usr/local/vgpu/libvgpu.so";

/// Where the pin is mounted inside, beside HAMi-core.
pub const PIN_INSIDE: &str = "/usr/local/vgpu/libslice_pin.so";

/// The pin's file inside (`slice_pin::PINNED_FILE`).
pub const PINNED_INSIDE: &str = "/etc/gpu-slice.env";

/// HAMi-core's settings for a slice, from the slice's environment (`gpu::slice_env`), one
/// `NAME=value` a line: its limits, no card-wide fallback limit, its accounting file in the
/// sandbox's own `/tmp`, its hooks from its install path, the default utilization policy.
pub fn pinned_settings(slice_env: &[(String, String)]) -> String {
    let get = |name: &str| {
        slice_env
            .iter()
            .find(|(k, _)| k == name)
            .map_or("", |(_, v)| v.as_str())
    };
    [
        (
            "CUDA_DEVICE_MEMORY_LIMIT_0",
            get("CUDA_DEVICE_MEMORY_LIMIT_0"),
        ),
        ("CUDA_DEVICE_SM_LIMIT", get("CUDA_DEVICE_SM_LIMIT")),
        ("CUDA_DEVICE_MEMORY_LIMIT", ""),
        ("CUDA_DEVICE_MEMORY_SHARED_CACHE", "/tmp/cudevshr.cache"),
        ("CUDA_REDIRECT", HAMI_CORE_INSIDE),
        ("GPU_CORE_UTILIZATION_POLICY", "default"),
    ]
    .iter()
    .map(|(name, value)| format!("{name}={value}\n"))
    // HAMi-core's off switch: read as unset by every program of the sandbox.
    .chain(std::iter::once(format!("!{CONTROL_SWITCH}\n")))
    .collect()
}

/// The variable that turns HAMi-core's limits off in a process that sets it.
pub const CONTROL_SWITCH: &str = "CUDA_DISABLE_CONTROL";

/// Writes the sandbox's `/etc/ld.so.preload` (the pin first, where there is one) and the
/// slice's pinned settings into `run_dir`, readable by the editor's account: the dynamic
/// loader reads them as the editor, and skips a file it cannot read without a word.
pub fn write_preload_files(
    run_dir: &Path,
    pin: bool,
    slice_env: &[(String, String)],
) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mut libraries = String::new();
    if pin {
        libraries.push_str(PIN_INSIDE);
        libraries.push('\n');
    }
    libraries.push_str(HAMI_CORE_INSIDE);
    libraries.push('\n');
    for (file, text) in [
        (preload_file(run_dir), libraries),
        (pinned_file(run_dir), pinned_settings(slice_env)),
    ] {
        std::fs::write(&file, text)?;
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644))?;
    }
    Ok(())
}

/// The name of the account an editor runs as, in every sandbox (its home is `/home/user`):
/// tools that key caches by user name (`torch.compile`, `getpass.getuser()`) need one.
pub const ACCOUNT_NAME: &str = "user";

/// Where the sandbox's `/etc/passwd` is written (in the run directory, read-only inside).
pub fn passwd_file(run_dir: &Path) -> PathBuf {
    run_dir.join("passwd")
}

/// Where the sandbox's `/etc/group` is written.
pub fn group_file(run_dir: &Path) -> PathBuf {
    run_dir.join("group")
}

/// The system's account files with the editor's account added under [`ACCOUNT_NAME`] (an
/// entry of the system with that name or number gives way), home `home`, the system's bash.
pub fn account_files(
    passwd: &str,
    group: &str,
    (uid, gid): (u32, u32),
    home: &Path,
) -> (String, String) {
    let keep = |text: &str, id: u32| -> String {
        text.lines()
            .filter(|line| {
                let mut fields = line.split(':');
                let name = fields.next().unwrap_or_default();
                let number = fields.nth(1).and_then(|n| n.parse::<u32>().ok());
                name != ACCOUNT_NAME && number != Some(id)
            })
            .map(|line| format!("{line}\n"))
            .collect()
    };
    let shell = if Path::new("/bin/bash").exists() {
        "/bin/bash"
    } else {
        "/bin/sh"
    };
    (
        format!(
            "{}{ACCOUNT_NAME}:x:{uid}:{gid}:GPU Sandbox user:{}:{shell}\n",
            keep(passwd, uid),
            home.display()
        ),
        format!("{}{ACCOUNT_NAME}:x:{gid}:\n", keep(group, gid)),
    )
}

/// Writes the sandbox's `/etc/passwd` and `/etc/group` into `run_dir`, readable by the editor.
pub fn write_account_files(
    run_dir: &Path,
    account: (u32, u32),
    home: &Path,
) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let (passwd, group) = account_files(
        &std::fs::read_to_string("/etc/passwd").unwrap_or_default(),
        &std::fs::read_to_string("/etc/group").unwrap_or_default(),
        account,
        home,
    );
    for (file, text) in [(passwd_file(run_dir), passwd), (group_file(run_dir), group)] {
        std::fs::write(&file, text)?;
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644))?;
    }
    Ok(())
}
