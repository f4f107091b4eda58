//! `server`: serve the product, or manage it from the command line ([`server::cli`]).

fn main() -> std::process::ExitCode {
    // Before anything is opened: what the server writes (the database, logs, workspaces) is
    // its own, and no process of its account (an editor, a user's terminal) may read its memory
    // or its environment, which holds the secrets given as `SANDBOX_*`.
    // SAFETY: umask and prctl(PR_SET_DUMPABLE) change only this process's own attributes.
    unsafe {
        libc::umask(0o077);
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
    }
    server::cli::main()
}
