//! Copying one file out of a user's workspace (promotion), wherever the runtime keeps it: on this
//! machine ([`copy_local`]) or in a volume only the editor's pod mounts (the kube runtime reads it
//! through the pod and hands the bytes to [`copy_stream`]). Either way the copy is hashed on the
//! way and capped, so what is approved is exactly what was read.
//!
//! Imports: std, tokio, sha2; nothing of the service.

use sha2::{Digest, Sha256};
use std::io::{Read, Write};
use std::path::Path;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

/// One file to copy: `relative` (already checked by `app::domain::promotion`: normal parts only)
/// from `user_name`'s workspace to `into`, at most `max_bytes`.
#[derive(Clone, Copy, Debug)]
pub struct WorkspaceFile<'a> {
    pub user_name: &'a str,
    /// The runtime handle of the session's editor while it runs; a runtime that reads through
    /// the editor (kube) needs it.
    pub handle: Option<&'a str>,
    pub relative: &'a str,
    pub into: &'a Path,
    pub max_bytes: u64,
}

/// What was copied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Copied {
    pub bytes: u64,
    /// Hex SHA-256 of the bytes.
    pub sha256: String,
}

/// Why a file could not be copied; the messages are for the user.
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    /// The file is not one that may be promoted (missing, a link, leads outside, not a file).
    #[error("{0}")]
    Refused(String),
    #[error("{0}")]
    TooLarge(String),
    /// The file cannot be read now (the session's editor is not running).
    #[error("{0}")]
    NotNow(String),
    /// This runtime cannot read workspaces at all.
    #[error("{0}")]
    Unavailable(String),
    #[error("copying the file: {0}")]
    Io(#[from] std::io::Error),
}

impl CopyError {
    pub fn too_large(relative: &str, max_bytes: u64) -> CopyError {
        CopyError::TooLarge(format!(
            "`{relative}` is larger than the {} MiB a promotion may be",
            max_bytes / (1024 * 1024)
        ))
    }
    pub fn missing(relative: &str) -> CopyError {
        CopyError::Refused(format!("there is no file `{relative}` in your workspace"))
    }
    pub fn link(relative: &str) -> CopyError {
        CopyError::Refused(format!(
            "`{relative}` is a link; promote the file it points to"
        ))
    }
    pub fn outside(relative: &str) -> CopyError {
        CopyError::Refused(format!("`{relative}` leads outside your workspace"))
    }
    pub fn not_a_file(relative: &str) -> CopyError {
        CopyError::Refused(format!("`{relative}` is not a file"))
    }
    pub fn unreadable(relative: &str) -> CopyError {
        CopyError::Refused(format!("`{relative}` cannot be read"))
    }
}

/// Hashes and counts the bytes of a copy, refusing it past the cap (a file may grow while it is
/// read): the one rule both copies follow.
struct Tally<'a> {
    hasher: Sha256,
    bytes: u64,
    relative: &'a str,
    max_bytes: u64,
}

impl<'a> Tally<'a> {
    fn new(relative: &'a str, max_bytes: u64) -> Self {
        Tally {
            hasher: Sha256::new(),
            bytes: 0,
            relative,
            max_bytes,
        }
    }

    fn add(&mut self, chunk: &[u8]) -> Result<(), CopyError> {
        self.bytes += chunk.len() as u64;
        if self.bytes > self.max_bytes {
            return Err(CopyError::too_large(self.relative, self.max_bytes));
        }
        self.hasher.update(chunk);
        Ok(())
    }

    fn done(self) -> Copied {
        Copied {
            bytes: self.bytes,
            sha256: hex::encode(self.hasher.finalize()),
        }
    }
}

/// Copies a file of a workspace on this machine (blocking: run it off the async threads).
///
/// The file is opened without following a link at its last step (`O_NOFOLLOW`) and without
/// blocking on a FIFO (`O_NONBLOCK`); then the path the kernel actually opened, read back from
/// `/proc/self/fd`, must lie inside the canonical workspace, so a link earlier in the path, even
/// one swapped in between check and open, cannot reach the server's own files. Only regular
/// files are copied.
pub fn copy_local(
    workspace: &Path,
    relative: &str,
    into: &Path,
    max_bytes: u64,
) -> Result<Copied, CopyError> {
    use std::os::unix::fs::OpenOptionsExt;
    let shown = relative;
    let root = std::fs::canonicalize(workspace).map_err(|_| {
        CopyError::Refused("your workspace is empty: launch a session and save a file first".into())
    })?;
    let mut source = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(workspace.join(relative))
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ENOENT) | Some(libc::ENOTDIR) => CopyError::missing(shown),
            Some(libc::ELOOP) => CopyError::link(shown),
            Some(libc::EACCES) => CopyError::unreadable(shown),
            // A socket.
            Some(libc::ENXIO) => CopyError::not_a_file(shown),
            _ => CopyError::Io(e),
        })?;
    let opened = std::fs::read_link(format!("/proc/self/fd/{}", {
        use std::os::fd::AsRawFd;
        source.as_raw_fd()
    }))?;
    if !opened.starts_with(&root) {
        return Err(CopyError::outside(shown));
    }
    let metadata = source.metadata()?;
    if !metadata.is_file() {
        return Err(CopyError::not_a_file(shown));
    }
    if metadata.len() > max_bytes {
        return Err(CopyError::too_large(shown, max_bytes));
    }
    if let Some(parent) = into.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let mut out = std::fs::File::create(into)?;
    let mut tally = Tally::new(shown, max_bytes);
    let mut buffer = vec![0u8; 256 * 1024];
    loop {
        let n = source.read(&mut buffer)?;
        if n == 0 {
            break;
        }
        tally.add(&buffer[..n])?;
        out.write_all(&buffer[..n])?;
    }
    out.sync_all()?;
    Ok(tally.done())
}

/// Copies what `source` yields to `file.into`, hashing it and stopping past `file.max_bytes`:
/// for a runtime that reads the file elsewhere and streams it here.
pub async fn copy_stream(
    mut source: impl AsyncRead + Unpin,
    file: &WorkspaceFile<'_>,
) -> Result<Copied, CopyError> {
    if let Some(parent) = file.into.parent() {
        tokio::fs::create_dir_all(parent).await?;
    }
    let mut out = tokio::fs::File::create(file.into).await?;
    let mut tally = Tally::new(file.relative, file.max_bytes);
    let mut buffer = vec![0u8; 256 * 1024];
    loop {
        let n = source.read(&mut buffer).await?;
        if n == 0 {
            break;
        }
        tally.add(&buffer[..n])?;
        out.write_all(&buffer[..n]).await?;
    }
    out.sync_all().await?;
    Ok(tally.done())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn workspace() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(ws.join("models")).unwrap();
        std::fs::write(ws.join("models/m.bin"), b"hello").unwrap();
        std::fs::write(dir.path().join("secret"), b"server's own").unwrap();
        (dir, ws)
    }

    fn file<'a>(relative: &'a str, into: &'a Path, max_bytes: u64) -> WorkspaceFile<'a> {
        WorkspaceFile {
            user_name: "alice",
            handle: None,
            relative,
            into,
            max_bytes,
        }
    }

    const HELLO_SHA256: &str = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824";

    #[test]
    fn a_file_is_copied_with_its_checksum() {
        let (dir, ws) = workspace();
        let into = dir.path().join("staged/p1");
        let copied = copy_local(&ws, "models/m.bin", &into, 1024).unwrap();
        assert_eq!(copied.bytes, 5);
        assert_eq!(copied.sha256, HELLO_SHA256);
        assert_eq!(std::fs::read(&into).unwrap(), b"hello");
    }

    #[test]
    fn links_out_of_the_workspace_and_odd_files_are_refused() {
        let (dir, ws) = workspace();
        let into = dir.path().join("staged/x");
        std::os::unix::fs::symlink(dir.path().join("secret"), ws.join("link")).unwrap();
        std::os::unix::fs::symlink(dir.path(), ws.join("outside")).unwrap();
        let refused = |path: &str| match copy_local(&ws, path, &into, 1024) {
            Err(CopyError::Refused(why)) => why,
            other => panic!("{path}: {other:?}"),
        };
        assert!(refused("link").contains("is a link"));
        assert!(refused("outside/secret").contains("outside your workspace"));
        assert!(refused("models").contains("not a file"));
        assert!(refused("nope.bin").contains("no file `nope.bin`"));
        assert!(!into.exists(), "nothing was copied");
        match copy_local(&ws, "models/m.bin", &into, 4) {
            Err(CopyError::TooLarge(why)) => assert!(why.contains("larger than"), "{why}"),
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn a_stream_is_copied_with_its_checksum_and_capped() {
        let dir = tempfile::tempdir().unwrap();
        let into = dir.path().join("staged/s");
        let copied = copy_stream(&b"hello"[..], &file("m.bin", &into, 5))
            .await
            .unwrap();
        assert_eq!(copied.sha256, HELLO_SHA256);
        assert_eq!(std::fs::read(&into).unwrap(), b"hello");
        match copy_stream(&b"hello!"[..], &file("m.bin", &into, 5)).await {
            Err(CopyError::TooLarge(why)) => assert!(why.contains("`m.bin` is larger"), "{why}"),
            other => panic!("{other:?}"),
        }
    }
}
