//! The `server` command line, as an operator uses it.

use std::io::Write;
use std::process::{Command, Stdio};

pub(crate) fn server(
    data: &std::path::Path,
    args: &[&str],
    stdin: Option<&str>,
) -> (i32, String, String) {
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
    // A name that looks like another: "ada" with a zero-width space.
    let (code, _, err) = server(
        data.path(),
        &["user", "add", "ad\u{200b}a", "--password-stdin"],
        Some("password123\n"),
    );
    assert_ne!(code, 0);
    assert!(err.contains("invisible characters"), "{err}");

    // An operator's recovery: a new password, typed or made; the rules hold; nobody is nobody.
    let (code, out, err) = server(
        data.path(),
        &["user", "passwd", "ada", "--password-stdin"],
        Some("a-newer-password\n"),
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("ada's password is set"), "{out}");
    let (code, out, _) = server(data.path(), &["user", "passwd", "ada"], None);
    assert_eq!(code, 0);
    assert!(out.contains("ada's new password: "), "{out}");
    let (code, _, err) = server(
        data.path(),
        &["user", "passwd", "ada", "--password-stdin"],
        Some("short\n"),
    );
    assert_ne!(code, 0);
    assert!(err.contains("at least 8 characters"), "{err}");
    let (code, _, err) = server(data.path(), &["user", "passwd", "nobody"], None);
    assert_ne!(code, 0);
    assert!(err.contains("no user named nobody"), "{err}");

    let (code, out, _) = server(data.path(), &["token", "create", "--user", "ada"], None);
    assert_eq!(code, 0);
    assert!(
        out.trim().starts_with("gsb_") && out.trim().len() > 40,
        "{out}"
    );

    let (code, _, err) = server(data.path(), &["token", "create", "--user", "nobody"], None);
    assert_ne!(code, 0);
    assert!(err.contains("no user named 'nobody'"), "{err}");
    let (code, _, err) = server(
        data.path(),
        &["token", "create", "--user", "ada", "--days", "0"],
        None,
    );
    assert_ne!(code, 0, "a token that has already expired is no token");
    assert!(err.contains("1 to 365 days"), "{err}");
    let (code, _, _) = server(
        data.path(),
        &[
            "token",
            "create",
            "--user",
            "ada",
            "--days",
            "7",
            "--label",
            "backup",
            "--scopes",
            "access,sessions",
        ],
        None,
    );
    assert_eq!(code, 0);
    let (code, _, err) = server(
        data.path(),
        &["token", "create", "--user", "ada", "--scopes", "read,root"],
        None,
    );
    assert_ne!(code, 0);
    assert!(err.contains("unknown scope `root`"), "{err}");
    let (code, out, _) = server(data.path(), &["token", "list", "--user", "ada"], None);
    assert_eq!(code, 0);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert!(
        lines[0].contains("  backup  scopes read,sessions,access  created ")
            && !lines[0].contains("never"),
        "{out}"
    );
    assert!(
        lines[1].contains("  cli  scopes read,sessions,access,tokens  created ")
            && lines[1].ends_with("expires never"),
        "{out}"
    );
    assert!(!out.contains("gsb_"), "no token itself is shown: {out}");
    let backup = lines[0].split_whitespace().next().unwrap();
    let (code, out, _) = server(
        data.path(),
        &["token", "revoke", "--user", "ada", backup],
        None,
    );
    assert_eq!(code, 0);
    assert!(out.contains("revoked"), "{out}");
    let (code, _, err) = server(
        data.path(),
        &["token", "revoke", "--user", "ada", backup],
        None,
    );
    assert_ne!(code, 0);
    assert!(err.contains("ada has no token"), "{err}");

    let (code, out, _) = server(data.path(), &["credits", "grant", "ada", "2.5"], None);
    assert_eq!(code, 0);
    assert!(out.contains("ada now has 102.5 credits"), "{out}");
    let (code, out, _) = server(data.path(), &["credits", "grant", "ada", "-0.5"], None);
    assert_eq!(code, 0);
    assert!(out.contains("ada now has 102 credits"), "{out}");
    let (code, _, err) = server(data.path(), &["credits", "grant", "ada", "-1000"], None);
    assert_ne!(code, 0);
    assert!(err.contains("more than the balance (102 credits)"), "{err}");
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

/// Starts `serve` on a port of its choosing; returns it with the lines it printed up to
/// "serving on", and that port.
fn serve_until_ready(
    data: &std::path::Path,
    config: &std::path::Path,
) -> (std::process::Child, Vec<String>, u16) {
    let (mut child, lines) = start_serve(data, config);
    let Some(ready) = lines.last().filter(|l| l.contains("serving on")) else {
        let _ = child.kill();
        let status = child.wait();
        panic!("the server stopped before serving ({status:?}): {lines:?}");
    };
    let port = ready
        .rsplit(':')
        .next()
        .and_then(|p| p.trim().parse().ok())
        .unwrap_or_else(|| panic!("a port in {ready:?}"));
    (child, lines, port)
}

/// Starts `serve` and reads what it prints until it serves, exits, or a minute passes.
fn start_serve(
    data: &std::path::Path,
    config: &std::path::Path,
) -> (std::process::Child, Vec<String>) {
    let (child, lines, _) = start_serve_with(data, config, &[]);
    (child, lines)
}

/// [`start_serve`] with more environment; also the rest of what it prints, line by line.
pub(crate) fn start_serve_with(
    data: &std::path::Path,
    config: &std::path::Path,
    env: &[(&str, &str)],
) -> (
    std::process::Child,
    Vec<String>,
    std::sync::mpsc::Receiver<String>,
) {
    use std::io::BufRead;
    let mut child = Command::new(env!("CARGO_BIN_EXE_server"))
        .args(["--config", config.to_str().unwrap(), "serve"])
        .env("SANDBOX_DATA_DIR", data)
        .env("SANDBOX_LOG", "error")
        .env("SANDBOX_LISTEN", "127.0.0.1:0")
        .env_remove("SANDBOX_DATABASE_URL")
        // Bare numbers, as a shell would pass them, and over the file's values.
        .env("SANDBOX_CREDITS__INITIAL_GRANT", "50")
        .env("SANDBOX_POOL__DEFAULT_PRICE_PER_GIB_HOUR", "0.5")
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("server binary");
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    let stderr = child.stderr.take().unwrap();
    for output in [
        Box::new(stdout) as Box<dyn std::io::Read + Send>,
        Box::new(stderr),
    ] {
        let tx = tx.clone();
        std::thread::spawn(move || {
            // Read to the end even when nobody listens any more: a closed pipe would make the
            // server's next line fail.
            for line in std::io::BufReader::new(output).lines() {
                let Ok(line) = line else { break };
                let _ = tx.send(line);
            }
        });
    }
    drop(tx);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut lines = Vec::new();
    while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
        match rx.recv_timeout(left) {
            Ok(line) => {
                let ready = line.contains("serving on");
                lines.push(line);
                if ready {
                    break;
                }
            }
            // Both outputs closed: it exited.
            Err(_) => break,
        }
    }
    (child, lines, rx)
}

/// A plain HTTP/1.1 GET with a bearer token to the server `child`; the whole answer as text.
fn get_with_token(child: &mut std::process::Child, port: u16, path: &str, token: &str) -> String {
    if let Ok(Some(status)) = child.try_wait() {
        panic!("the server exited: {status}");
    }
    get_with_headers(port, path, &format!("Authorization: Bearer {token}\r\n"))
}

/// A plain HTTP/1.1 GET with headers of the caller's; the whole answer as text.
fn get_with_headers(port: u16, path: &str, headers: &str) -> String {
    use std::io::Read;
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{headers}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    answer
}

#[test]
fn json_logs_carry_each_requests_id() {
    let data = tempfile::tempdir().unwrap();
    let config = data.path().join("sandbox.toml");
    std::fs::write(&config, "[pool]\nwarm = []\n").unwrap();
    let (child, lines, rx) = start_serve_with(
        data.path(),
        &config,
        &[("SANDBOX_LOG", "info"), ("SANDBOX_LOG_FORMAT", "json")],
    );
    let port: u16 = lines
        .iter()
        .find_map(|l| l.split("serving on http://127.0.0.1:").nth(1))
        .and_then(|p| p.trim().parse().ok())
        .unwrap_or_else(|| panic!("the server serves: {lines:?}"));
    // A load balancer's id is kept; one that is not a plain token is replaced.
    let kept = get_with_headers(port, "/api/v1/nothing-here", "X-Request-Id: lb-req-42\r\n");
    assert!(kept.starts_with("HTTP/1.1 404"), "{kept}");
    assert!(
        kept.to_ascii_lowercase()
            .contains("x-request-id: lb-req-42"),
        "{kept}"
    );
    let made = get_with_headers(
        port,
        "/api/v1/nothing-either",
        "X-Request-Id: two words\r\n",
    );
    let made_id = made
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("x-request-id: ")
                .map(str::to_string)
        })
        .unwrap_or_else(|| panic!("an id is sent back: {made}"));
    assert!(
        made_id.len() == 20 && made_id.bytes().all(|b| b.is_ascii_hexdigit()),
        "{made_id}"
    );

    // Each refusal is a JSON line whose span carries the request's id.
    let mut seen = Vec::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let found = |seen: &[serde_json::Value], id: &str, path: &str| {
        seen.iter().any(|line| {
            line["span"]["request_id"] == id
                && line["span"]["path"] == path
                && line["status"] == 404
                && line["level"] == "INFO"
        })
    };
    while !(found(&seen, "lb-req-42", "/api/v1/nothing-here")
        && found(&seen, &made_id, "/api/v1/nothing-either"))
    {
        let left = deadline
            .checked_duration_since(std::time::Instant::now())
            .unwrap_or_else(|| panic!("no such log lines in {seen:?}"));
        let line = rx.recv_timeout(left).expect("more log lines");
        if line.starts_with('{') {
            let parsed: serde_json::Value = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("a log line that is not JSON ({e}): {line}"));
            seen.push(parsed);
        }
    }
    assert!(
        lines
            .iter()
            .chain(std::iter::empty())
            .all(|l| !l.contains("\u{1b}[")),
        "no colours when the output is not a terminal: {lines:?}"
    );
    terminate(child);
}

pub(crate) fn terminate(mut child: std::process::Child) {
    let pid = child.id().to_string();
    Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "a clean exit on SIGTERM: {status:?}");
}

#[test]
fn the_first_run_creates_an_admin_once_and_the_environment_beats_the_file() {
    use std::os::unix::fs::PermissionsExt;
    let data = tempfile::tempdir().unwrap();
    let config = data.path().join("sandbox.toml");
    std::fs::write(
        &config,
        "[credits]\ninitial_grant = \"7\"\n[pool]\nwarm = []\n",
    )
    .unwrap();

    let (mut child, lines, port) = serve_until_ready(data.path(), &config);
    // A token made on the command line works against the running server.
    let (code, token, err) = server(data.path(), &["token", "create", "--user", "admin"], None);
    assert_eq!(code, 0, "{err}");
    let me = get_with_token(&mut child, port, "/api/v1/me", token.trim());
    terminate(child);
    assert!(me.starts_with("HTTP/1.1 200"), "{me}");
    assert!(me.contains("\"name\":\"admin\""), "{me}");
    assert!(me.contains("\"role\":\"admin\""), "{me}");
    let announced = lines
        .iter()
        .find_map(|l| {
            l.split("created the account 'admin' with password: ")
                .nth(1)
        })
        .unwrap_or_else(|| panic!("the password is printed: {lines:?}"))
        .trim()
        .to_string();
    assert!(announced.len() >= 12, "{announced}");
    let saved = data.path().join("initial-admin-password");
    assert_eq!(std::fs::read_to_string(&saved).unwrap().trim(), announced);
    let mode = std::fs::metadata(&saved).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "only its owner may read the password");

    // The grant came from the environment (50), not the file (7).
    let (code, out, err) = server(data.path(), &["credits", "grant", "admin", "1"], None);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("admin now has 51 credits"), "{out}");

    // An account exists now: the next start creates none and prints no password.
    let (child, lines, _) = serve_until_ready(data.path(), &config);
    // A second server on the same data directory would stop the first one's editors: refused.
    let (mut second, said) = start_serve(data.path(), &config);
    let status = second.wait().unwrap();
    assert!(!status.success(), "{said:?}");
    assert!(
        said.iter()
            .any(|l| l.contains("another server is already running on the data directory")),
        "{said:?}"
    );
    terminate(child);
    assert!(lines.iter().all(|l| !l.contains("First run")), "{lines:?}");
    let (code, out, _) = server(data.path(), &["user", "add", "admin"], None);
    assert_ne!(code, 0, "{out}");
}

#[test]
fn an_account_locked_from_the_command_line_loses_access_on_the_running_server() {
    let data = tempfile::tempdir().unwrap();
    let config = data.path().join("sandbox.toml");
    std::fs::write(&config, "[pool]\nwarm = []\n").unwrap();
    let (code, _, err) = server(
        data.path(),
        &["user", "add", "ida", "--password-stdin"],
        Some("a-long-password\n"),
    );
    assert_eq!(code, 0, "{err}");
    let (_, token, _) = server(data.path(), &["token", "create", "--user", "ida"], None);
    let token = token.trim().to_string();
    let (mut child, _, port) = serve_until_ready(data.path(), &config);
    // The running server caches who a token is for a few seconds: wait for the answer.
    let mut answer_becomes = |status: &str| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            let me = get_with_token(&mut child, port, "/api/v1/me", &token);
            if me.starts_with(status) {
                return;
            }
            assert!(std::time::Instant::now() < deadline, "still: {me}");
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    };
    answer_becomes("HTTP/1.1 200");
    let (code, out, err) = server(data.path(), &["user", "lock", "ida"], None);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("ida is locked"), "{out}");
    answer_becomes("HTTP/1.1 401");
    let (code, out, _) = server(data.path(), &["user", "unlock", "ida"], None);
    assert_eq!(code, 0);
    assert!(out.contains("ida is unlocked"), "{out}");
    answer_becomes("HTTP/1.1 200");
    terminate(child);

    let (code, _, err) = server(data.path(), &["user", "lock", "nobody"], None);
    assert_ne!(code, 0);
    assert!(err.contains("no user named 'nobody'"), "{err}");
}

#[test]
fn migrate_creates_the_database_and_can_run_again() {
    let data = tempfile::tempdir().unwrap();
    let (code, _, err) = server(data.path(), &["migrate"], None);
    assert_eq!(code, 0, "{err}");
    let database = std::fs::read_dir(data.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .find(|e| e.file_name().to_string_lossy().ends_with(".db"))
        .expect("a SQLite file in the data directory");
    assert!(database.metadata().unwrap().len() > 0);
    let (code, _, err) = server(data.path(), &["migrate"], None);
    assert_eq!(code, 0, "a second run finds nothing to do: {err}");
    let (code, out, err) = server(
        data.path(),
        &["user", "add", "ada", "--password-stdin"],
        Some("a-long-password\n"),
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("created ada"), "the schema is usable: {out}");
}

/// Every directory and file the server makes in its data directory is its own alone.
fn assert_private(dir: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    let mut pending = vec![dir.to_path_buf()];
    let mut seen = 0;
    while let Some(dir) = pending.pop() {
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0, "{} is {mode:o}", dir.display());
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let meta = entry.metadata().unwrap();
            if meta.is_dir() {
                pending.push(entry.path());
            } else {
                seen += 1;
                let mode = meta.permissions().mode();
                assert_eq!(mode & 0o077, 0, "{} is {mode:o}", entry.path().display());
            }
        }
    }
    assert!(seen >= 3, "the database, its journal and the lock at least");
}

#[test]
fn the_data_directory_is_the_servers_alone() {
    use std::os::unix::fs::PermissionsExt;
    let data = tempfile::tempdir().unwrap();
    // As an operator might have made it: readable by everyone.
    std::fs::set_permissions(data.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let config = elsewhere.path().join("sandbox.toml");
    std::fs::write(&config, "[pool]\nwarm = []\n").unwrap();
    let (mut child, _, port) = serve_until_ready(data.path(), &config);
    let (code, token, err) = server(data.path(), &["token", "create", "--user", "admin"], None);
    assert_eq!(code, 0, "{err}");
    let me = get_with_token(&mut child, port, "/api/v1/me", token.trim());
    assert!(me.starts_with("HTTP/1.1 200"), "{me}");
    assert_private(data.path());
    terminate(child);
    assert_private(data.path());
}

#[test]
fn another_process_of_the_servers_account_cannot_read_its_environment() {
    // SAFETY: geteuid only reads this process's id.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: running the server as another account takes root");
        return;
    }
    let nobody = "65534";
    let data = tempfile::tempdir().unwrap();
    std::fs::write(data.path().join("sandbox.toml"), "[pool]\nwarm = []\n").unwrap();
    let chown = Command::new("chown")
        .args([
            "-R",
            &format!("{nobody}:{nobody}"),
            data.path().to_str().unwrap(),
        ])
        .status()
        .unwrap();
    assert!(chown.success());
    // The parent of a temp dir may be closed to others; the server only needs its own.
    let mut child = Command::new("setpriv")
        .args(["--reuid", nobody, "--regid", nobody, "--clear-groups", "--"])
        .arg(env!("CARGO_BIN_EXE_server"))
        .args(["migrate"])
        .env("SANDBOX_DATA_DIR", data.path())
        .env("SANDBOX_LOG", "error")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("setpriv");
    let status = child.wait().unwrap();
    if !status.success() {
        let mut err = String::new();
        std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
        eprintln!("skipped: the server cannot run as uid {nobody} here: {err}");
        return;
    }
    // A long-lived server of that account, holding a secret in its environment.
    let mut serving = Command::new("setpriv")
        .args(["--reuid", nobody, "--regid", nobody, "--clear-groups", "--"])
        .arg(env!("CARGO_BIN_EXE_server"))
        .args(["serve"])
        .env("SANDBOX_DATA_DIR", data.path())
        .env("SANDBOX_LISTEN", "127.0.0.1:0")
        .env("SANDBOX_LOG", "error")
        // Any variable will do: the whole environment is the server's secret.
        .env("GSB_TEST_SECRET", "registry-secret")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("setpriv");
    let mut line = String::new();
    let mut out = std::io::BufReader::new(serving.stdout.take().unwrap());
    while !line.contains("serving on") {
        line.clear();
        if std::io::BufRead::read_line(&mut out, &mut line).unwrap() == 0 {
            panic!("the server stopped before serving");
        }
    }
    // setpriv execs the server: the child's pid is the server's.
    let pid = serving.id();
    let read = Command::new("setpriv")
        .args(["--reuid", nobody, "--regid", nobody, "--clear-groups", "--"])
        .args(["cat", &format!("/proc/{pid}/environ")])
        .output()
        .unwrap();
    Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    let _ = serving.wait();
    assert!(
        !read.status.success()
            && !String::from_utf8_lossy(&read.stdout).contains("registry-secret"),
        "a process of the server's own account read its environment"
    );
}
