//! bwrap's `--info-fd`: how the server learns the sandbox's first process.

/// A pipe for bwrap's `--info-fd`: (read end, write end), both closed on exec; the child's
/// copy of the write end becomes its descriptor 3.
pub fn info_pipe() -> std::io::Result<(std::os::fd::OwnedFd, std::os::fd::OwnedFd)> {
    use std::os::fd::FromRawFd;
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two descriptors this function then owns.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just made and belong to nobody else.
    Ok(unsafe {
        (
            std::os::fd::OwnedFd::from_raw_fd(fds[0]),
            std::os::fd::OwnedFd::from_raw_fd(fds[1]),
        )
    })
}

/// The descriptor bwrap's `--info-fd` names, in the child.
pub const INFO_FD: i32 = 3;

/// The host pid of the sandbox's first process, from what bwrap wrote on its info pipe (it
/// writes once the sandbox is made; a sandbox that failed closes the pipe without a word).
pub fn read_child_pid(read: std::os::fd::OwnedFd) -> Option<i32> {
    use std::io::Read;
    let mut file = std::fs::File::from(read);
    let mut text = String::new();
    let mut buf = [0u8; 512];
    loop {
        match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                text.push_str(&String::from_utf8_lossy(&buf[..n]));
                if text.contains('}') {
                    break;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
    serde_json::from_str::<serde_json::Value>(&text)
        .ok()?
        .get("child-pid")?
        .as_i64()
        .map(|pid| pid as i32)
}
