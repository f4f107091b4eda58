//! `[local]`: how the local runtime keeps editors apart on one machine.

use super::InvalidKey;
use serde::{Deserialize, Serialize};

/// Whether editors run in sandboxes (`local.isolation`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Isolation {
    /// A sandbox each (bubblewrap): the default. Where none can be made, the server serves one
    /// user at most.
    #[default]
    Sandbox,
    /// None: editors run as the server's own account and see what it sees; every page says so.
    None,
}

/// What an editor may reach on the network (`local.network`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Network {
    /// The outside world (package indexes, model hubs) and this server's own API; never this
    /// machine's other services.
    #[default]
    Egress,
    /// Its own loopback only.
    None,
}

/// What one session's processes may use together.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Resources {
    /// Memory of every process of the session together, in MiB; past it the kernel kills one.
    pub memory_mib: u64,
    /// CPU cores' worth of time, e.g. 2 or 0.5.
    pub cpus: f64,
    /// Processes and threads at once.
    pub pids: u64,
}

/// Resources for sessions of one slice size.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SliceResources {
    pub slice_mib: u64,
    pub memory_mib: u64,
    pub cpus: f64,
    pub pids: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LocalConfig {
    pub isolation: Isolation,
    pub network: Network,
    /// bubblewrap's program; empty: found on `PATH`.
    pub bwrap: String,
    /// As root: the first of the accounts editors run as, `editor_uids` of them (each group
    /// has its account's number): one per user, owning their workspace, and a spare one per
    /// pre-started editor until its session ends. Never real accounts of the machine.
    pub editor_uid: u32,
    pub editor_uids: u32,
    /// As root: each workspace is a file system of its own (an ext4 image on a loop device),
    /// sized by its user's disk quota, so a write past the quota fails; false, or where the
    /// machine has no loop devices: a folder, whose size is checked at launch.
    pub workspace_disks: bool,
    /// Every session's resources, unless its slice size has its own below.
    pub memory_mib: u64,
    pub cpus: f64,
    pub pids: u64,
    pub per_slice: Vec<SliceResources>,
}

impl Default for LocalConfig {
    fn default() -> Self {
        LocalConfig {
            isolation: Isolation::Sandbox,
            network: Network::Egress,
            bwrap: String::new(),
            editor_uid: 61_000,
            editor_uids: 10_000,
            workspace_disks: true,
            memory_mib: 16_384,
            cpus: 2.0,
            pids: 2_048,
            per_slice: Vec::new(),
        }
    }
}

impl LocalConfig {
    /// Checks what serde cannot; the error names the full key (`local.network`).
    pub fn validate(&self) -> Result<(), InvalidKey> {
        match self.problem() {
            Some((key, why)) => Err(InvalidKey::new(format!("local.{key}"), why)),
            None => Ok(()),
        }
    }

    /// The resources of a session of `slice_mib`.
    pub fn resources(&self, slice_mib: u64) -> Resources {
        self.per_slice
            .iter()
            .find(|r| r.slice_mib == slice_mib)
            .map(|r| Resources {
                memory_mib: r.memory_mib,
                cpus: r.cpus,
                pids: r.pids,
            })
            .unwrap_or(Resources {
                memory_mib: self.memory_mib,
                cpus: self.cpus,
                pids: self.pids,
            })
    }

    /// The first key that is wrong, and why.
    pub fn problem(&self) -> Option<(String, String)> {
        let bad = |key: String, why: &str| Some((key, why.to_string()));
        if self.editor_uid == 0 || self.editor_uid >= u32::MAX - 1 {
            return bad(
                "editor_uid".into(),
                "must be an unprivileged account, 1 to 4294967293",
            );
        }
        if self.editor_uids < 2
            || self
                .editor_uid
                .checked_add(self.editor_uids)
                .is_none_or(|end| end >= u32::MAX - 1)
        {
            return bad(
                "editor_uids".into(),
                "must be at least 2, and editor_uid + editor_uids below 4294967294",
            );
        }
        let check = |at: String, memory: u64, cpus: f64, pids: u64| {
            if memory < 64 {
                return bad(format!("{at}memory_mib"), "must be at least 64");
            }
            if !(cpus.is_finite() && (0.01..=1024.0).contains(&cpus)) {
                return bad(format!("{at}cpus"), "must be 0.01 to 1024");
            }
            if !(16..=1_000_000).contains(&pids) {
                return bad(format!("{at}pids"), "must be 16 to 1000000");
            }
            None
        };
        check(String::new(), self.memory_mib, self.cpus, self.pids).or_else(|| {
            self.per_slice
                .iter()
                .enumerate()
                .find_map(|(i, r)| check(format!("per_slice[{i}]."), r.memory_mib, r.cpus, r.pids))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slice_size_of_its_own_wins_over_the_default() {
        let config = LocalConfig {
            per_slice: vec![SliceResources {
                slice_mib: 49_152,
                memory_mib: 65_536,
                cpus: 8.0,
                pids: 4096,
            }],
            ..LocalConfig::default()
        };
        assert_eq!(config.resources(49_152).memory_mib, 65_536);
        assert_eq!(
            config.resources(8_192),
            LocalConfig::default().resources(8_192)
        );
    }

    #[test]
    fn limits_that_would_misbehave_name_their_key() {
        let with = |f: &dyn Fn(&mut LocalConfig)| {
            let mut c = LocalConfig::default();
            f(&mut c);
            c.problem().map(|(key, _)| key)
        };
        assert_eq!(with(&|_| {}), None);
        assert_eq!(with(&|c| c.editor_uid = 0), Some("editor_uid".into()));
        assert_eq!(with(&|c| c.editor_uids = 1), Some("editor_uids".into()));
        assert_eq!(
            with(&|c| c.editor_uids = u32::MAX - 61_000),
            Some("editor_uids".into())
        );
        assert_eq!(with(&|c| c.memory_mib = 1), Some("memory_mib".into()));
        assert_eq!(with(&|c| c.cpus = f64::NAN), Some("cpus".into()));
        assert_eq!(with(&|c| c.pids = 2), Some("pids".into()));
        assert_eq!(
            with(&|c| c.per_slice = vec![SliceResources {
                slice_mib: 1,
                memory_mib: 1024,
                cpus: 0.0,
                pids: 64,
            }]),
            Some("per_slice[0].cpus".into())
        );
    }
}
