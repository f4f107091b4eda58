//! Small helpers every layer may use: the clock, ids, a fast map. Imports nothing of the crate.

/// Milliseconds since the Unix epoch, UTC.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// A random id: 20 hex characters (80 bits).
pub fn new_id() -> String {
    use rand::RngCore;
    let mut bytes = [0u8; 10];
    rand::thread_rng().fill_bytes(&mut bytes);
    hex::encode(bytes)
}

/// This machine's name, as the kernel has it (empty where it cannot be read).
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_string())
        .unwrap_or_default()
}

/// A server process's name among the replicas: `<host>~<pid>~<random>`, so that a server that
/// starts on the same machine can tell a predecessor that died (its pid is gone, or is now its
/// own) from a replica that lives, without waiting for its lease to run out.
pub fn new_instance_id() -> String {
    let id = format!("{}~{}~{}", host_name(), std::process::id(), new_id());
    INSTANCES_HERE.lock().expect("instances").insert(id.clone());
    id
}

/// The instances this process made (a test runs several servers in one process).
static INSTANCES_HERE: std::sync::LazyLock<std::sync::Mutex<std::collections::HashSet<String>>> =
    std::sync::LazyLock::new(Default::default);

/// Whether `instance` is a server of this very process.
pub fn instance_of_this_process(instance: &str) -> bool {
    INSTANCES_HERE.lock().expect("instances").contains(instance)
}

/// A fast hasher for the in-memory tables on the proxy's path (keys are not attacker-chosen
/// in a way that matters: only known credentials and session ids are stored).
pub type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// Creates `dir` (and its parents) when missing, and makes it its owner's alone (0700): the data
/// directory holds the database, logs and every workspace.
pub fn private_dir(dir: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

/// Where the time comes from: the system's clock when serving; one set by hand in tests, so
/// that expiry and the reaper are tested without waiting.
pub trait Clock: Send + Sync + 'static {
    /// Milliseconds since the Unix epoch, UTC.
    fn now_ms(&self) -> i64;
}

/// The system's clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        now_ms()
    }
}

/// A clock that stands still until moved.
#[derive(Debug)]
pub struct ManualClock(std::sync::atomic::AtomicI64);

impl ManualClock {
    /// Stopped at the system's time now.
    pub fn now() -> ManualClock {
        ManualClock(std::sync::atomic::AtomicI64::new(now_ms()))
    }

    pub fn advance(&self, by: std::time::Duration) {
        self.0.fetch_add(
            i64::try_from(by.as_millis()).unwrap_or(i64::MAX),
            std::sync::atomic::Ordering::SeqCst,
        );
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// Bytes an unprivileged writer may still use on the filesystem that holds `path` (None where
/// it cannot be told).
pub fn free_bytes(path: &std::path::Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    let mut stats = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `path` is NUL-terminated and `stats` is written whole by a successful call.
    if unsafe { libc::statvfs(path.as_ptr(), stats.as_mut_ptr()) } != 0 {
        return None;
    }
    // SAFETY: the call succeeded.
    let stats = unsafe { stats.assume_init() };
    // The fields' widths differ by target (u32 on some 32-bit ones).
    #[allow(clippy::unnecessary_cast)]
    Some(stats.f_bavail as u64 * stats.f_frsize as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_moves_only_when_told() {
        let clock = ManualClock::now();
        let start = clock.now_ms();
        std::thread::sleep(std::time::Duration::from_millis(5));
        assert_eq!(clock.now_ms(), start);
        clock.advance(std::time::Duration::from_secs(90));
        assert_eq!(clock.now_ms(), start + 90_000);
    }
}
