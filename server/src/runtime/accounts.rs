//! As root, editors run as accounts of their own, from the range `local.editor_uid` ..
//! `+ local.editor_uids`: each user has one, picked when their workspace is first used and
//! recorded as the workspace's owner (nothing else to keep in step), and a pre-started editor
//! runs as a spare one until its session ends, seeing its user's workspace through an idmapped
//! mount (`runtime::idmap`) that shows the user's files as its own. So two users' editors never
//! share an account, and no editor owns another user's files.

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Mutex;

#[derive(Debug)]
pub struct Accounts {
    first: u32,
    count: u32,
    /// Spares handed out and not yet given back: an editor's processes take a moment to show
    /// under its account, and two starts must not pick the same one meanwhile.
    lent: Mutex<HashSet<u32>>,
}

/// Which end of the range a pick starts from: users from the bottom, spares from the top,
/// so the two rarely meet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    Bottom,
    Top,
}

/// The first account of `first .. first + count` that no workspace owns, no process runs as
/// and nobody has been lent.
pub fn pick(
    first: u32,
    count: u32,
    from: End,
    owners: &HashSet<u32>,
    running: &HashSet<u32>,
    lent: &HashSet<u32>,
) -> Option<u32> {
    let free = |uid: &u32| !owners.contains(uid) && !running.contains(uid) && !lent.contains(uid);
    let mut range = first..first.saturating_add(count);
    match from {
        End::Bottom => range.find(free),
        End::Top => range.rev().find(free),
    }
}

impl Accounts {
    pub fn new(first: u32, count: u32) -> Accounts {
        Accounts {
            first,
            count,
            lent: Mutex::new(HashSet::new()),
        }
    }

    pub fn describe(&self) -> String {
        format!(
            "each user's editors run as an account of their own (uids {} to {}), without privileges",
            self.first,
            self.first + self.count - 1
        )
    }

    fn ours(&self, uid: u32) -> bool {
        (self.first..self.first.saturating_add(self.count)).contains(&uid)
    }

    /// The account of `workspace` (a folder of `workspaces`): its owner, when that is one of
    /// ours and owns no other workspace; otherwise a free one, made owner of all of it (a new
    /// workspace, or one from before accounts were per user). The workspace is left mode 0700.
    pub fn of_workspace(&self, workspaces: &Path, workspace: &Path) -> std::io::Result<u32> {
        use std::os::unix::fs::PermissionsExt;
        // Held throughout, so that two new users' scans cannot both find the same account free.
        let lent = self.lent.lock().unwrap_or_else(|e| e.into_inner());
        let owner = std::fs::metadata(workspace)?.uid();
        let others = owners_except(workspaces, workspace);
        let uid = if self.ours(owner) && !others.contains(&owner) {
            owner
        } else {
            let uid = pick(
                self.first,
                self.count,
                End::Bottom,
                &others,
                &running_accounts(),
                &lent,
            )
            .ok_or_else(|| std::io::Error::other("every editor account is in use"))?;
            chown_tree(workspace, uid)?;
            uid
        };
        std::fs::set_permissions(workspace, std::fs::Permissions::from_mode(0o700))?;
        Ok(uid)
    }

    /// An account for a pre-started editor: no user's, not in use. Give it back with
    /// [`Accounts::give_back`] when the editor has stopped.
    pub fn lend(&self, workspaces: &Path) -> std::io::Result<u32> {
        let mut lent = self.lent.lock().unwrap_or_else(|e| e.into_inner());
        let uid = pick(
            self.first,
            self.count,
            End::Top,
            &owners_except(workspaces, Path::new("")),
            &running_accounts(),
            &lent,
        )
        .ok_or_else(|| std::io::Error::other("every editor account is in use"))?;
        lent.insert(uid);
        Ok(uid)
    }

    pub fn give_back(&self, uid: u32) {
        self.lent
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&uid);
    }
}

/// The owners of every workspace of `workspaces` but `except`.
fn owners_except(workspaces: &Path, except: &Path) -> HashSet<u32> {
    let Ok(entries) = std::fs::read_dir(workspaces) else {
        return HashSet::new();
    };
    entries
        .flatten()
        .filter(|e| e.path() != except)
        .filter_map(|e| e.metadata().ok())
        .filter(|m| m.is_dir())
        .map(|m| m.uid())
        .collect()
}

/// The real uid of every process of the machine.
fn running_accounts() -> HashSet<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return HashSet::new();
    };
    entries
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter_map(|e| std::fs::read_to_string(e.path().join("status")).ok())
        .filter_map(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|ids| ids.split_whitespace().next()?.parse().ok())
        })
        .collect()
}

/// Makes `dir` and everything in it owned by `uid` (and the group of the same number),
/// links themselves rather than what they point at.
fn chown_tree(dir: &Path, uid: u32) -> std::io::Result<()> {
    std::os::unix::fs::lchown(dir, Some(uid), Some(uid))?;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            chown_tree(&entry.path(), uid)?;
        } else {
            std::os::unix::fs::lchown(entry.path(), Some(uid), Some(uid))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(ids: &[u32]) -> HashSet<u32> {
        ids.iter().copied().collect()
    }

    #[test]
    fn users_take_the_lowest_free_account_and_spares_the_highest() {
        let none = HashSet::new();
        assert_eq!(pick(100, 10, End::Bottom, &none, &none, &none), Some(100));
        assert_eq!(pick(100, 10, End::Top, &none, &none, &none), Some(109));
    }

    #[test]
    fn an_account_owned_running_or_lent_is_not_free() {
        let (owners, running, lent) = (set(&[100]), set(&[101]), set(&[102]));
        assert_eq!(
            pick(100, 10, End::Bottom, &owners, &running, &lent),
            Some(103)
        );
        let (owners, running, lent) = (set(&[109]), set(&[108]), set(&[107]));
        assert_eq!(pick(100, 10, End::Top, &owners, &running, &lent), Some(106));
    }

    #[test]
    fn a_full_range_has_no_account_to_give() {
        let all: HashSet<u32> = (100..103).collect();
        let none = HashSet::new();
        assert_eq!(pick(100, 3, End::Bottom, &all, &none, &none), None);
        assert_eq!(pick(100, 3, End::Top, &none, &all, &none), None);
    }

    #[test]
    fn a_workspace_keeps_its_account_and_a_shared_one_gets_its_own() {
        if !is_root() {
            eprintln!("skipped: changing owners takes root");
            return;
        }
        {
            let dir = tempfile::tempdir().unwrap();
            let (a, b) = (dir.path().join("a"), dir.path().join("b"));
            std::fs::create_dir_all(a.join("notes")).unwrap();
            std::fs::write(a.join("notes/x.txt"), "x").unwrap();
            std::fs::create_dir_all(&b).unwrap();
            let accounts = Accounts::new(3_900_000_000, 50);
            let ua = accounts.of_workspace(dir.path(), &a).unwrap();
            let ub = accounts.of_workspace(dir.path(), &b).unwrap();
            assert_ne!(ua, ub);
            assert_eq!(accounts.of_workspace(dir.path(), &a).unwrap(), ua);
            assert_eq!(
                std::fs::metadata(a.join("notes/x.txt")).unwrap().uid(),
                ua,
                "the whole tree"
            );
            // Both owned by one account (as before accounts per user): b gets another.
            chown_tree(&b, ua).unwrap();
            let ub = accounts.of_workspace(dir.path(), &b).unwrap();
            assert_ne!(ub, ua);
            let spare = accounts.lend(dir.path()).unwrap();
            assert!(![ua, ub].contains(&spare));
            assert_ne!(accounts.lend(dir.path()).unwrap(), spare, "lent once");
        }
    }

    fn is_root() -> bool {
        // SAFETY: geteuid only reads this process's effective user id.
        unsafe { libc::geteuid() == 0 }
    }
}
