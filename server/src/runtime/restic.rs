//! The backup repository: trait [`Repository`], and [`Restic`], Debian's `restic` run as a child
//! process (encrypted, deduplicated, content-defined chunks: a notebook saved again adds only
//! its changed chunks).
//!
//! Each workspace is backed up from inside its folder (`restic backup .`), so a snapshot's paths
//! are the workspace's own (`/notebooks/a.ipynb`) wherever the data directory lies, and tagged
//! with its user's id (`user:<id>`): retention groups by that tag, listing filters by it. The
//! snapshot's time is the service's clock (`--time`), so the retention rules are tested with a
//! clock set by hand. Every run is at the lowest CPU and I/O priority (`nice 19`, `ionice -c 3`,
//! as [`super::archive::low_priority`]) and reads files whole (each file is read from start to
//! end while it is chunked; a notebook saved meanwhile is replaced by rename, so the file read
//! is the old one or the new one, never half of each).
//!
//! A repository is made (`restic init`) only when the caller says none was ever used at that
//! place: one that goes missing or gets damaged later is an error, never silently replaced by a
//! new empty one.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// One snapshot of a workspace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// restic's full id (64 hex digits).
    pub id: String,
    /// When it was taken, ms since the epoch.
    pub time_ms: i64,
}

/// What one backup did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackedUp {
    pub snapshot_id: String,
    pub files: u64,
    pub bytes: u64,
    /// Bytes new to the repository (after deduplication, before compression).
    pub bytes_added: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum RepositoryError {
    /// No repository where one is configured (and one was used there before, or could not be
    /// made).
    #[error("there is no backup repository at the configured place: {0}")]
    Missing(String),
    /// The repository is there but cannot be read: damaged, or its password changed.
    #[error("the backup repository cannot be read (damaged, or its password changed): {0}")]
    Unreadable(String),
    /// Another run holds the repository (a prune, another server).
    #[error("the backup repository is busy with another run; try again in a few minutes")]
    Locked,
    /// restic failed otherwise; its last words.
    #[error("restic failed: {0}")]
    Failed(String),
    /// The workspace (or the repository's disk) is full.
    #[error(
        "there is no room left for it: the workspace (for a restore) or the backup disk is full"
    )]
    NoRoom,
    /// The part to restore is not in that snapshot.
    #[error("`{0}` is not in that snapshot")]
    NotInSnapshot(String),
    #[error("backup I/O: {0}")]
    Io(#[from] std::io::Error),
}

/// Where workspaces are backed up to.
#[async_trait::async_trait]
pub trait Repository: Send + Sync + 'static {
    /// Makes the repository when none is there and `may_create`; otherwise checks it opens.
    async fn open(&self, may_create: bool) -> Result<(), RepositoryError>;
    /// Backs `workspace` up as `tag`'s, at `at_ms` (the snapshot's time).
    async fn backup(
        &self,
        tag: &str,
        workspace: &Path,
        at_ms: i64,
    ) -> Result<BackedUp, RepositoryError>;
    /// `tag`'s snapshots, in any order.
    async fn snapshots(&self, tag: &str) -> Result<Vec<Snapshot>, RepositoryError>;
    /// Restores `part` (relative; None: everything) of snapshot `id` into the empty folder
    /// `into`, with the snapshot's layout (`into/<part>`).
    async fn restore(
        &self,
        id: &str,
        part: Option<&str>,
        into: &Path,
    ) -> Result<(), RepositoryError>;
    /// Forgets `tag`'s snapshots beyond the policy and prunes the data only they held.
    async fn forget(
        &self,
        tag: &str,
        keep: app::domain::backups::Retention,
    ) -> Result<(), RepositoryError>;
}

/// Debian's restic against a local path or an S3 URL (`s3:https://host/bucket/path`, with the
/// server's `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY`).
#[derive(Clone, Debug)]
pub struct Restic {
    repository: String,
    password_file: PathBuf,
    cache_dir: PathBuf,
}

/// How long one restic run may take before it is stopped (a backup of a large workspace over a
/// slow link included).
const RUN_LIMIT: Duration = Duration::from_secs(6 * 3600);
/// The host every snapshot names, so that restic finds the previous snapshot of a workspace
/// as the parent of the next whatever this machine is called.
const HOST: &str = "gpu-sandbox";
/// Restores are made in a folder of this name inside the workspace, then moved into place;
/// never backed up.
pub const STAGING_PREFIX: &str = ".sandbox-restore-";
const STAGING_PATTERN: &str = ".sandbox-restore-*";

impl Restic {
    pub fn new(repository: &str, password_file: &Path, cache_dir: &Path) -> Restic {
        Restic {
            repository: repository.to_string(),
            password_file: password_file.to_path_buf(),
            cache_dir: cache_dir.to_path_buf(),
        }
    }

    /// Whether restic is installed.
    pub fn installed() -> bool {
        super::sandbox::which("restic").is_some()
    }

    fn command(&self, args: &[&str]) -> tokio::process::Command {
        let mut command = super::archive::low_priority("restic");
        command
            .args(args)
            .arg("--cache-dir")
            .arg(&self.cache_dir)
            .env("RESTIC_REPOSITORY", &self.repository)
            .env("RESTIC_PASSWORD_FILE", &self.password_file)
            .env_remove("RESTIC_PASSWORD")
            .env_remove("RESTIC_PASSWORD_COMMAND")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        command
    }

    /// Runs restic to its end; its standard output, or the error its words say.
    async fn run(&self, mut command: tokio::process::Command) -> Result<Vec<u8>, RepositoryError> {
        let child = command.spawn()?;
        let output = match tokio::time::timeout(RUN_LIMIT, child.wait_with_output()).await {
            Ok(output) => output?,
            Err(_) => return Err(RepositoryError::Failed("it ran for over 6 hours".into())),
        };
        if output.status.success() {
            return Ok(output.stdout);
        }
        Err(classify(&String::from_utf8_lossy(&output.stderr)))
    }

    /// Whether a local repository's place is empty or absent (S3: unknown, so `None`).
    fn local_place_is_empty(&self) -> Option<bool> {
        if self.repository.contains(':') {
            return None;
        }
        let place = Path::new(&self.repository);
        Some(match std::fs::read_dir(place) {
            Ok(mut entries) => entries.next().is_none(),
            Err(_) => true,
        })
    }
}

/// restic's error output read into what the user and the admin are told.
fn classify(stderr: &str) -> RepositoryError {
    let fatal = stderr
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .find(|l| l.starts_with("Fatal:"))
        .or_else(|| stderr.lines().rev().map(str::trim).find(|l| !l.is_empty()))
        .unwrap_or("no error message")
        .trim_start_matches("Fatal: ")
        .to_string();
    let fatal = app::domain::encode::shown_up_to(&fatal, 300);
    if stderr.contains("Is there a repository at the following location?")
        || stderr.contains("repository does not exist")
    {
        RepositoryError::Missing(fatal)
    } else if stderr.contains("no space left on device") || stderr.contains("disk quota exceeded") {
        RepositoryError::NoRoom
    } else if stderr.contains("repository is already locked") {
        RepositoryError::Locked
    } else if stderr.contains("wrong password")
        || stderr.contains("config cannot be loaded")
        || stderr.contains("ciphertext verification failed")
        || stderr.contains("unable to open config file")
        || stderr.contains("invalid data returned")
        || stderr.contains("load <key/")
        || stderr.contains("LoadKey")
    {
        RepositoryError::Unreadable(fatal)
    } else {
        RepositoryError::Failed(fatal)
    }
}

#[derive(serde::Deserialize)]
struct SnapshotJson {
    id: String,
    time: String,
}

#[derive(serde::Deserialize)]
struct SummaryJson {
    message_type: String,
    #[serde(default)]
    snapshot_id: Option<String>,
    #[serde(default)]
    total_files_processed: u64,
    #[serde(default)]
    total_bytes_processed: u64,
    #[serde(default)]
    data_added: u64,
}

#[async_trait::async_trait]
impl Repository for Restic {
    async fn open(&self, may_create: bool) -> Result<(), RepositoryError> {
        // `cat config` reads and decrypts the config: the cheapest full check of key and place.
        match self
            .run(self.command(&["cat", "config", "--no-lock"]))
            .await
        {
            Ok(_) => Ok(()),
            Err(RepositoryError::Missing(why))
                if may_create && self.local_place_is_empty() != Some(false) =>
            {
                tracing::info!(repository = %self.repository, reason = %why, "making the backup repository");
                if self.local_place_is_empty() == Some(true) {
                    std::fs::create_dir_all(&self.repository)?;
                }
                self.run(self.command(&["init", "--repository-version", "2"]))
                    .await
                    .map(|_| ())
            }
            Err(e) => Err(e),
        }
    }

    async fn backup(
        &self,
        tag: &str,
        workspace: &Path,
        at_ms: i64,
    ) -> Result<BackedUp, RepositoryError> {
        let tag = format!("user:{tag}");
        let time = app::domain::dates::rfc3339(at_ms)
            .replace('T', " ")
            .trim_end_matches('Z')
            .to_string();
        let mut command = self.command(&[
            "backup",
            "--json",
            "--host",
            HOST,
            "--tag",
            &tag,
            "--time",
            &time,
            "--one-file-system",
            "--exclude",
            STAGING_PATTERN,
            ".",
        ]);
        command.current_dir(workspace);
        let out = self.run(command).await?;
        let summary = String::from_utf8_lossy(&out)
            .lines()
            .filter_map(|line| serde_json::from_str::<SummaryJson>(line).ok())
            .find(|s| s.message_type == "summary")
            .ok_or_else(|| RepositoryError::Failed("restic said nothing of the snapshot".into()))?;
        Ok(BackedUp {
            snapshot_id: summary.snapshot_id.unwrap_or_default(),
            files: summary.total_files_processed,
            bytes: summary.total_bytes_processed,
            bytes_added: summary.data_added,
        })
    }

    async fn snapshots(&self, tag: &str) -> Result<Vec<Snapshot>, RepositoryError> {
        let tag = format!("user:{tag}");
        let out = self
            .run(self.command(&["snapshots", "--json", "--no-lock", "--tag", &tag]))
            .await?;
        let list: Vec<SnapshotJson> = serde_json::from_slice(&out)
            .map_err(|e| RepositoryError::Failed(format!("unreadable snapshot list: {e}")))?;
        Ok(list
            .into_iter()
            .map(|s| Snapshot {
                time_ms: app::domain::dates::parse_rfc3339(&s.time).unwrap_or(0),
                id: s.id,
            })
            .collect())
    }

    async fn restore(
        &self,
        id: &str,
        part: Option<&str>,
        into: &Path,
    ) -> Result<(), RepositoryError> {
        let target = into.display().to_string();
        let include = part.map(|p| app::domain::backups::include_pattern(&format!("/{p}")));
        let mut args = vec!["restore", id, "--target", target.as_str()];
        if let Some(include) = &include {
            args.extend(["--include", include.as_str()]);
        }
        self.run(self.command(&args)).await?;
        if let Some(part) = part
            && std::fs::symlink_metadata(into.join(part)).is_err()
        {
            return Err(RepositoryError::NotInSnapshot(part.to_string()));
        }
        Ok(())
    }

    async fn forget(
        &self,
        tag: &str,
        keep: app::domain::backups::Retention,
    ) -> Result<(), RepositoryError> {
        let tag = format!("user:{tag}");
        let (daily, weekly) = (keep.keep_daily.to_string(), keep.keep_weekly.to_string());
        self.run(self.command(&[
            "forget",
            "--tag",
            &tag,
            "--group-by",
            "tags",
            "--keep-daily",
            &daily,
            "--keep-weekly",
            &weekly,
            "--prune",
        ]))
        .await
        .map(|_| ())
    }
}

/// Restores `part` (None: all) of snapshot `id`, taken at `taken_ms`, into a new folder
/// `restored-<date>` inside `workspace`; its name. Never over a file that is there: restic
/// writes into a staging folder of ours inside the workspace (owned by root and closed to
/// others while it fills, so the editor cannot slip a link into it), whose contents are given
/// the workspace's owner, and which is then renamed into place with `RENAME_NOREPLACE`, trying
/// the next name while one is taken. A failed restore leaves nothing behind.
pub async fn restore_into(
    repository: &dyn Repository,
    workspace: &Path,
    id: &str,
    part: Option<&str>,
    taken_ms: i64,
) -> Result<String, RepositoryError> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    let root = std::fs::canonicalize(workspace).map_err(|_| {
        RepositoryError::Failed(
            "the workspace does not exist yet: launch a session once first".into(),
        )
    })?;
    let owner = std::fs::metadata(&root)?;
    let (uid, gid) = (owner.uid(), owner.gid());
    let staging = root.join(format!("{STAGING_PREFIX}{}", crate::util::new_id()));
    std::fs::DirBuilder::new().mode(0o700).create(&staging)?;
    let restored = repository.restore(id, part, &staging).await;
    let placed = match restored {
        Ok(()) => {
            let (staging, root) = (staging.clone(), root.clone());
            tokio::task::spawn_blocking(move || place(&staging, &root, uid, gid, taken_ms))
                .await
                .map_err(|e| RepositoryError::Io(std::io::Error::other(e)))?
        }
        Err(e) => Err(e),
    };
    if placed.is_err() {
        let _ = tokio::fs::remove_dir_all(&staging).await;
    }
    placed
}

/// Gives the staging folder's contents to the workspace's owner, then renames it into place.
fn place(
    staging: &Path,
    root: &Path,
    uid: u32,
    gid: u32,
    taken_ms: i64,
) -> Result<String, RepositoryError> {
    use std::os::unix::fs::PermissionsExt;
    chown_tree(staging, uid, gid)?;
    std::fs::set_permissions(staging, std::fs::Permissions::from_mode(0o755))?;
    for attempt in 1..=1000 {
        let name = app::domain::backups::restored_folder(taken_ms, attempt);
        match rename_no_replace(staging, &root.join(&name)) {
            Ok(()) => return Ok(name),
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(RepositoryError::Failed(
        "1000 restored folders of that snapshot are there already; remove some".into(),
    ))
}

/// Every entry under `dir` (and `dir`) to `uid:gid`, links themselves and never what they
/// point to.
fn chown_tree(dir: &Path, uid: u32, gid: u32) -> std::io::Result<()> {
    std::os::unix::fs::lchown(dir, Some(uid), Some(gid))?;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        if entry.file_type()?.is_dir() {
            chown_tree(&path, uid, gid)?;
        } else {
            std::os::unix::fs::lchown(&path, Some(uid), Some(gid))?;
        }
    }
    Ok(())
}

/// `rename(2)` that fails with `EEXIST` rather than replace what is at `to`.
fn rename_no_replace(from: &Path, to: &Path) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let (from, to) = (
        std::ffi::CString::new(from.as_os_str().as_bytes())?,
        std::ffi::CString::new(to.as_os_str().as_bytes())?,
    );
    // SAFETY: two NUL-terminated paths that live across the call.
    let done = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            from.as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    if done == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restics_words_become_clear_errors() {
        let missing = classify(
            "Fatal: unable to open config file: stat /b/config: no such file or directory\nIs there a repository at the following location?\n/b\n",
        );
        assert!(matches!(missing, RepositoryError::Missing(_)), "{missing}");
        let damaged = classify("Fatal: config cannot be loaded: ciphertext verification failed\n");
        assert!(
            matches!(damaged, RepositoryError::Unreadable(_)),
            "{damaged}"
        );
        let password = classify("Fatal: wrong password or no key found\n");
        assert!(matches!(password, RepositoryError::Unreadable(_)));
        let locked = classify(
            "unable to create lock in backend: repository is already locked exclusively by PID 7\n",
        );
        assert!(matches!(locked, RepositoryError::Locked));
        let other = classify("something\nFatal: disk on fire\n");
        assert_eq!(other.to_string(), "restic failed: disk on fire");
    }
}
