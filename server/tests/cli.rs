//! The `server` command line, as an operator uses it.

use std::io::Write;
use std::process::{Command, Stdio};

fn server(data: &std::path::Path, args: &[&str], stdin: Option<&str>) -> (i32, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_server"))
        .args(args)
        .env("SANDBOX_DATA_DIR", data)
        .env("SANDBOX_LOG", "error")
        .env_remove("SANDBOX_DATABASE_URL")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("server binary");
    if let Some(text) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
    }
    drop(child.stdin.take());
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

#[test]
fn users_tokens_and_credits_from_the_command_line() {
    let data = tempfile::tempdir().unwrap();
    let (code, out, err) = server(
        data.path(),
        &["user", "add", "ada", "--password-stdin"],
        Some("a-long-password\n"),
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("created ada (user)"), "{out}");

    let (code, out, _) = server(data.path(), &["user", "add", "root-ish", "--admin"], None);
    assert_eq!(code, 0);
    assert!(
        out.contains("(admin) with password: "),
        "a generated password is printed: {out}"
    );

    let (code, _, err) = server(
        data.path(),
        &["user", "add", "ada", "--password-stdin"],
        Some("another-password\n"),
    );
    assert_ne!(code, 0);
    assert!(err.contains("already exists"), "{err}");

    let (code, _, err) = server(
        data.path(),
        &["user", "add", "bea", "--password-stdin"],
        Some("short\n"),
    );
    assert_ne!(code, 0);
    assert!(err.contains("at least 8 characters"), "{err}");

    let (code, out, _) = server(data.path(), &["token", "create", "--user", "ada"], None);
    assert_eq!(code, 0);
    assert!(
        out.trim().starts_with("gsb_") && out.trim().len() > 40,
        "{out}"
    );

    let (code, _, err) = server(data.path(), &["token", "create", "--user", "nobody"], None);
    assert_ne!(code, 0);
    assert!(err.contains("no user named 'nobody'"), "{err}");

    let (code, out, _) = server(data.path(), &["credits", "grant", "ada", "2.5"], None);
    assert_eq!(code, 0);
    assert!(out.contains("ada now has 102.5 credits"), "{out}");
    let (code, out, _) = server(data.path(), &["credits", "grant", "ada", "-0.5"], None);
    assert_eq!(code, 0);
    assert!(out.contains("ada now has 102 credits"), "{out}");
    let (code, _, err) = server(data.path(), &["credits", "grant", "ada", "lots"], None);
    assert_ne!(code, 0);
    assert!(err.contains("'lots' is not an amount of credits"), "{err}");

    let (code, out, _) = server(
        data.path(),
        &[
            "quota",
            "set",
            "ada",
            "--max-sessions",
            "5",
            "--max-gpu-mib",
            "32768",
        ],
        None,
    );
    assert_eq!(code, 0);
    assert!(
        out.contains("ada: 5 sessions, 32768 MiB of GPU memory, 480 minutes"),
        "{out}"
    );
    let (code, _, err) = server(
        data.path(),
        &["quota", "set", "nobody", "--max-sessions", "1"],
        None,
    );
    assert_ne!(code, 0);
    assert!(err.contains("no user named 'nobody'"), "{err}");
}

#[test]
fn invalid_configuration_stops_the_server_naming_the_key() {
    let data = tempfile::tempdir().unwrap();
    let config = data.path().join("sandbox.toml");
    std::fs::write(&config, "[sessions]\nmin_minutes = 0\n").unwrap();
    let (code, _, err) = server(
        data.path(),
        &["--config", config.to_str().unwrap(), "serve"],
        None,
    );
    assert_eq!(code, 2);
    assert!(err.contains("sessions.min_minutes"), "{err}");

    let mut command = Command::new(env!("CARGO_BIN_EXE_server"));
    let out = command
        .args(["migrate"])
        .env("SANDBOX_DATA_DIR", data.path())
        .env("SANDBOX_LISTEN", "not-an-address")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("key `listen`"));
}
