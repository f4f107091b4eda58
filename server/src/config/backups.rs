//! `[backups]`: workspaces backed up with restic on a schedule (off by default).

use super::InvalidKey;
use app::domain::backups::{Retention, Schedule};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// `[backups]` in the configuration.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BackupsConfig {
    /// Back workspaces up on the schedule (and let users back up and restore). Off by default.
    pub enabled: bool,
    /// A restic repository: a local folder (empty: `<data_dir>/backups`), or S3-compatible
    /// storage as `s3:https://host/bucket/path`, with the server's `AWS_ACCESS_KEY_ID` and
    /// `AWS_SECRET_ACCESS_KEY` in its environment.
    pub repository: String,
    /// The file holding the repository's password; empty: `<data_dir>/backup-password`,
    /// made at the first backup. Without it the backups cannot be read: keep a copy elsewhere.
    pub password_file: PathBuf,
    /// When: `"02:30"` (daily, UTC) or `"every 6h"`.
    pub schedule: String,
    /// Snapshots kept: the newest of each of the last `keep_daily` days...
    pub keep_daily: u32,
    /// ...and of the last `keep_weekly` weeks.
    pub keep_weekly: u32,
    /// How fast one export (`GET /api/v1/workspace/export`) may go, in bytes a second; 0: no
    /// limit. Exports work whether or not backups are on.
    pub export_bytes_per_second: u64,
    /// How long one export may take, in seconds, before it is cut; 0: no limit.
    pub export_max_seconds: u64,
}

/// The smallest speed limit: one 64 KiB chunk a second.
pub const EXPORT_MIN_BYTES_PER_SECOND: u64 = 64 * 1024;
/// The shortest time limit: a minute.
pub const EXPORT_MIN_SECONDS: u64 = 60;

impl Default for BackupsConfig {
    fn default() -> Self {
        BackupsConfig {
            enabled: false,
            repository: String::new(),
            password_file: PathBuf::new(),
            schedule: "02:30".into(),
            keep_daily: 7,
            keep_weekly: 4,
            export_bytes_per_second: 50 << 20,
            export_max_seconds: 3600,
        }
    }
}

impl BackupsConfig {
    /// Checks what serde cannot; the error names the full key (`backups.schedule`).
    pub fn validate(&self) -> Result<(), InvalidKey> {
        match self.problem() {
            Some((key, why)) => Err(InvalidKey::new(format!("backups.{key}"), why)),
            None => Ok(()),
        }
    }

    pub fn retention(&self) -> Retention {
        Retention {
            keep_daily: self.keep_daily,
            keep_weekly: self.keep_weekly,
        }
    }

    /// The schedule; one that does not parse was refused at start-up.
    pub fn schedule(&self) -> Schedule {
        Schedule::parse(&self.schedule).unwrap_or(Schedule::DailyAt { minute_of_day: 150 })
    }

    /// The repository, with the default folder under `data_dir`.
    pub fn repository_in(&self, data_dir: &Path) -> String {
        if self.repository.is_empty() {
            data_dir.join("backups").display().to_string()
        } else {
            self.repository.clone()
        }
    }

    /// The password file, with the default under `data_dir`.
    pub fn password_file_in(&self, data_dir: &Path) -> PathBuf {
        if self.password_file.as_os_str().is_empty() {
            data_dir.join("backup-password")
        } else {
            self.password_file.clone()
        }
    }

    /// The first key that is wrong, and why.
    pub fn problem(&self) -> Option<(&'static str, String)> {
        if (1..EXPORT_MIN_BYTES_PER_SECOND).contains(&self.export_bytes_per_second) {
            return Some((
                "export_bytes_per_second",
                format!(
                    "must be 0 (no limit) or at least {EXPORT_MIN_BYTES_PER_SECOND} (64 KiB/s), not {}",
                    self.export_bytes_per_second
                ),
            ));
        }
        if (1..EXPORT_MIN_SECONDS).contains(&self.export_max_seconds) {
            return Some((
                "export_max_seconds",
                format!(
                    "must be 0 (no limit) or at least {EXPORT_MIN_SECONDS} seconds, not {}",
                    self.export_max_seconds
                ),
            ));
        }
        if let Err(why) = Schedule::parse(&self.schedule) {
            return Some(("schedule", why));
        }
        if let Err(why) = self.retention().check() {
            return Some(("keep_daily", why));
        }
        let repo = self.repository.as_str();
        if let Some((scheme, _)) = repo.split_once(':')
            && !repo.starts_with('/')
            && scheme != "s3"
        {
            return Some((
                "repository",
                "must be a local folder (an absolute path) or s3:https://host/bucket/path".into(),
            ));
        }
        if !repo.is_empty() && !repo.contains(':') && !repo.starts_with('/') {
            return Some((
                "repository",
                "a local folder must be an absolute path".into(),
            ));
        }
        None
    }
}

/// Whether `program` is on the PATH (or in /usr/bin).
fn installed(program: &str) -> bool {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/bin")])
        .any(|dir| dir.join(program).is_file())
}

/// The Settings page's "Backups" section: what is backed up, how, where, when and for how
/// long, or a clear line that nothing is. What runs depends on the runtime: restic into a
/// repository for one server's workspaces, VolumeSnapshots of each workspace claim on a cluster
/// (`runtime::kube::backups`; no repository, password or restic there).
pub fn settings_section(config: &super::Config) -> app::model::SettingsSection {
    let b = &config.backups;
    let cluster = config.runtime == super::RuntimeKind::Kube;
    let mut entries: Vec<(&str, String)> = if !b.enabled {
        vec![(
            "Workspaces",
            "not backed up: a deleted file is lost (turn on with [backups] enabled = true)".into(),
        )]
    } else if cluster {
        cluster_entries(config)
    } else {
        restic_entries(config)
    };
    entries.push((
        "Exports",
        if cluster {
            "none: on a cluster workspaces live in its volumes, not on this server".into()
        } else {
            format!(
                "{} (one at a time per user; [backups] export_bytes_per_second, export_max_seconds)",
                app::domain::pace::limits_words(b.export_bytes_per_second, b.export_max_seconds)
            )
        },
    ));
    app::model::SettingsSection {
        title: "Backups".into(),
        entries: entries
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
    }
}

/// One server's workspaces: restic into a repository.
fn restic_entries(config: &super::Config) -> Vec<(&'static str, String)> {
    let b = &config.backups;
    vec![
        (
            "Workspaces",
            "backed up with restic (encrypted, deduplicated)".into(),
        ),
        (
            "Repository",
            // An S3 URL names its bucket, never a key (those are in the environment).
            b.repository_in(&config.data_dir),
        ),
        (
            "Password file",
            format!(
                "{} (keep a copy elsewhere: without it no backup can be read)",
                b.password_file_in(&config.data_dir).display()
            ),
        ),
        ("When", b.schedule().words()),
        ("Kept", b.retention().words()),
        (
            "restic",
            if installed("restic") {
                "installed".into()
            } else {
                "not installed: every backup fails (apt install restic)".into()
            },
        ),
    ]
}

/// A cluster's workspaces: VolumeSnapshots of each user's workspace claim, by the cluster's
/// CSI driver; nothing of restic.
fn cluster_entries(config: &super::Config) -> Vec<(&'static str, String)> {
    let b = &config.backups;
    let class = &config.kube.snapshot_class;
    if class.is_empty() {
        return vec![(
            "Workspaces",
            "not backed up: on a cluster backups are VolumeSnapshots, and [kube] snapshot_class \
             names no VolumeSnapshotClass"
                .into(),
        )];
    }
    vec![
        (
            "Workspaces",
            format!(
                "VolumeSnapshots of each workspace claim (snapshot.storage.k8s.io/v1, class \
                 {class}), taken by the cluster's CSI driver; restic is not used on a cluster"
            ),
        ),
        (
            "Restore",
            "a claim made from the snapshot, copied by a short pod into restored-<date>/".into(),
        ),
        ("When", b.schedule().words()),
        (
            "Kept",
            format!(
                "{}; a deleted snapshot's storage goes by its class's deletionPolicy",
                b.retention().words()
            ),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrong_keys_are_named() {
        let with = |f: &dyn Fn(&mut BackupsConfig)| {
            let mut c = BackupsConfig::default();
            f(&mut c);
            c.problem().map(|(k, _)| k)
        };
        assert_eq!(with(&|_| {}), None);
        assert_eq!(with(&|c| c.schedule = "sometimes".into()), Some("schedule"));
        assert_eq!(
            with(&|c| {
                c.keep_daily = 0;
                c.keep_weekly = 0
            }),
            Some("keep_daily")
        );
        assert_eq!(
            with(&|c| c.repository = "rel/path".into()),
            Some("repository")
        );
        assert_eq!(
            with(&|c| c.repository = "sftp:host:/x".into()),
            Some("repository")
        );
        assert_eq!(
            with(&|c| c.repository = "s3:https://s3.example/b".into()),
            None
        );
        assert_eq!(with(&|c| c.repository = "/srv/backups".into()), None);
        assert_eq!(
            with(&|c| c.export_bytes_per_second = 1000),
            Some("export_bytes_per_second")
        );
        assert_eq!(with(&|c| c.export_bytes_per_second = 0), None);
        assert_eq!(
            with(&|c| c.export_max_seconds = 5),
            Some("export_max_seconds")
        );
        assert_eq!(with(&|c| c.export_max_seconds = 0), None);
    }

    fn shown(config: &super::super::Config) -> String {
        settings_section(config)
            .entries
            .iter()
            .map(|(k, v)| format!("{k}: {v}\n"))
            .collect()
    }

    #[test]
    fn the_settings_say_what_backs_workspaces_up_on_each_runtime() {
        let mut config = super::super::Config::default();
        config.backups.enabled = true;
        let local = shown(&config);
        assert!(local.contains("backed up with restic"), "{local}");
        assert!(local.contains("Repository: "), "{local}");
        assert!(local.contains("at most 50 MiB/s, cut after 1 h"), "{local}");

        config.runtime = super::super::RuntimeKind::Kube;
        config.kube.snapshot_class = "csi-rbd".into();
        let cluster = shown(&config);
        assert!(
            cluster.contains("VolumeSnapshots of each workspace claim")
                && cluster.contains("csi-rbd"),
            "{cluster}"
        );
        for restic_only in ["restic (", "Repository", "Password file", "restic: "] {
            assert!(!cluster.contains(restic_only), "{restic_only} in {cluster}");
        }
        assert!(cluster.contains("Exports: none"), "{cluster}");

        config.kube.snapshot_class = String::new();
        let unset = shown(&config);
        assert!(
            unset.contains("not backed up") && unset.contains("snapshot_class"),
            "{unset}"
        );
    }
}
