//! The programs a sandbox is made with, found on this machine.

use std::path::PathBuf;

/// What this machine offers for sandboxes, found once at start.
#[derive(Clone, Debug, Default)]
pub struct Tools {
    pub bwrap: Option<PathBuf>,
    pub setpriv: Option<PathBuf>,
    pub pasta: Option<PathBuf>,
    /// nftables' front end: the network edge of each sandbox (`super::egress`).
    pub nft: Option<PathBuf>,
    pub socat: Option<PathBuf>,
    /// The server runs as root: editors get accounts of their own.
    pub root: bool,
}

impl Tools {
    pub fn find() -> Tools {
        Tools {
            bwrap: which("bwrap"),
            setpriv: which("setpriv"),
            pasta: which("pasta"),
            nft: which("nft"),
            socat: which("socat"),
            // SAFETY: geteuid only reads this process's effective user id.
            root: unsafe { libc::geteuid() } == 0,
        }
    }

    /// Why no sandbox can be made here, if none can.
    pub fn missing(&self) -> Option<String> {
        if self.bwrap.is_none() {
            return Some("bubblewrap (bwrap) is not installed".into());
        }
        if self.root && self.setpriv.is_none() {
            return Some("setpriv (util-linux) is not installed".into());
        }
        None
    }
}

/// A program on `PATH`, or in the usual system folders.
pub fn which(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/bin", "/usr/sbin", "/bin", "/sbin"].map(PathBuf::from))
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
}
