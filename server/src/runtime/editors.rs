//! What each editor needs: its command line, how the proxy proves itself to it, where it answers.
//!
//! The editors listen on a private socket (marimo, which has no socket option, on 127.0.0.1) and
//! require their secret, which only the proxy presents ([`upstream_auth`]). The secret never
//! appears on a command line (`ps` shows those to everyone): JupyterLab takes it from
//! `JUPYTER_TOKEN`, marimo from its standard input, code-server from `HASHED_PASSWORD`. Editors
//! start with an empty environment plus [`INHERITED_ENV`] (`PATH`, locale, `TZ`, `TERM`, `SHELL`),
//! so the server's own settings (a PostgreSQL URL with its password, say) never reach a user's
//! terminal.

use app::domain::launch::EditorKind;

/// How the proxy presents the session's secret to the editor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UpstreamAuth {
    /// A request header (name, value).
    Header(&'static str, String),
    /// A cookie (name, value) added to the request's cookies.
    Cookie(&'static str, String),
}

impl UpstreamAuth {
    /// A GET of `path` at the editor, with these credentials (the runtime's own probes).
    pub fn request(
        &self,
        path: &str,
    ) -> Option<http::Request<http_body_util::Empty<bytes::Bytes>>> {
        let request = match self {
            UpstreamAuth::Header(name, value) => http::Request::get(path).header(*name, value),
            UpstreamAuth::Cookie(name, value) => {
                http::Request::get(path).header("cookie", format!("{name}={value}"))
            }
        };
        request.body(http_body_util::Empty::new()).ok()
    }
}

/// How the proxy presents `secret` to this editor.
pub fn upstream_auth(editor: EditorKind, secret: &str) -> UpstreamAuth {
    match editor {
        EditorKind::JupyterLab => UpstreamAuth::Header("authorization", format!("token {secret}")),
        EditorKind::Marimo => UpstreamAuth::Header("authorization", format!("Bearer {secret}")),
        // code-server compares its session cookie to the hashed password it was given.
        EditorKind::CodeServer => UpstreamAuth::Cookie("code-server-session", secret.to_string()),
    }
}

/// code-server serves from "/" and uses relative links, so it is reached with the prefix removed;
/// the others are told their base URL.
pub fn strips_prefix(editor: EditorKind) -> bool {
    editor == EditorKind::CodeServer
}

/// The path that answers 200 once the editor is ready, as seen by the editor.
pub fn readiness_path(editor: EditorKind, base_path: &str) -> String {
    match editor {
        EditorKind::JupyterLab => format!("{base_path}api/status"),
        EditorKind::Marimo => format!("{base_path}health"),
        EditorKind::CodeServer => "/healthz".to_string(),
    }
}

/// Where an editor listens.
#[derive(Clone, Copy, Debug)]
pub enum Listen<'a> {
    Tcp {
        host: &'a str,
        port: u16,
    },
    /// A Unix socket: only the server's user may connect (mode 0600), and the hop to the editor
    /// skips TCP.
    Unix(&'a std::path::Path),
}

/// Whether the editor can listen on a Unix socket (marimo cannot).
pub fn listens_on_unix_socket(editor: EditorKind) -> bool {
    matches!(editor, EditorKind::JupyterLab | EditorKind::CodeServer)
}

/// Arguments after the program, for an editor listening at `listen` under `base_path`
/// (`/s/<id>/`); marimo reads its token from `marimo_token_file` ("-" is standard input).
/// The secret is never among them (`ps` shows arguments to everyone): see [`secret_env`] and
/// [`secret_stdin`].
pub fn arguments(
    editor: EditorKind,
    listen: Listen<'_>,
    base_path: &str,
    workspace: &str,
    marimo_token_file: &str,
) -> Vec<String> {
    let s = |v: &str| v.to_string();
    match editor {
        EditorKind::JupyterLab => [
            vec![s("--no-browser")],
            match listen {
                Listen::Tcp { host, port } => vec![
                    format!("--ip={host}"),
                    format!("--port={port}"),
                    s("--port-retries=0"),
                ],
                Listen::Unix(path) => vec![
                    format!("--ServerApp.sock={}", path.display()),
                    s("--ServerApp.sock_mode=0600"),
                ],
            },
            vec![
                format!("--ServerApp.base_url={base_path}"),
                format!("--ServerApp.root_dir={workspace}"),
                s("--ServerApp.allow_root=True"),
                s("--ServerApp.allow_remote_access=True"),
                s("--LabApp.news_url=None"),
                s("--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"),
            ],
        ]
        .concat(),
        EditorKind::Marimo => {
            let Listen::Tcp { host, port } = listen else {
                unreachable!("marimo listens on TCP only (see listens_on_unix_socket)")
            };
            vec![
                // Quiet: marimo otherwise prints its URL with the access token into its log.
                s("-q"),
                s("edit"),
                s("--headless"),
                format!("--host={host}"),
                format!("--port={port}"),
                format!("--base-url={}", base_path.trim_end_matches('/')),
                format!("--token-password-file={marimo_token_file}"),
                s("--skip-update-check"),
                s("--allow-origins=*"),
                workspace.to_string(),
            ]
        }
        EditorKind::CodeServer => [
            match listen {
                Listen::Tcp { host, port } => vec![format!("--bind-addr={host}:{port}")],
                Listen::Unix(path) => vec![
                    format!("--socket={}", path.display()),
                    s("--socket-mode=600"),
                ],
            },
            vec![
                s("--auth=password"),
                s("--disable-telemetry"),
                s("--disable-update-check"),
                s("--disable-workspace-trust"),
                s("--disable-getting-started-override"),
                workspace.to_string(),
            ],
        ]
        .concat(),
    }
}

/// What code-server starts with unless its user has said otherwise: no "Get Started"
/// walkthrough at start, and telemetry off, which also hides the telemetry notice (the
/// walkthrough's footer, shown while the level is not "off"). Its flags do neither:
/// `--disable-telemetry` only stops the sending, `--disable-getting-started-override` only
/// drops code-server's own panel from the walkthrough.
pub const CODE_SERVER_SETTINGS: [(&str, &str); 2] = [
    ("workbench.startupEditor", "none"),
    ("telemetry.telemetryLevel", "off"),
];

/// Adds to code-server's user settings (`<argv[1]>/User/settings.json`) each of the defaults
/// (argv[2], a JSON object) that the file does not set; the user's own values stay. A file that
/// is not a plain JSON object (comments, say) is left as it is.
const SEED_SETTINGS_JS: &str = r#"const fs = require("fs"), path = require("path");
const [dir, defaults] = process.argv.slice(1);
const file = path.join(dir, "User", "settings.json");
let settings = {};
try {
  const text = fs.readFileSync(file, "utf8");
  if (text.trim()) settings = JSON.parse(text);
} catch (e) {
  if (e.code !== "ENOENT") process.exit(0);
}
if (!settings || typeof settings !== "object" || Array.isArray(settings)) process.exit(0);
const missing = Object.entries(JSON.parse(defaults)).filter(([key]) => !(key in settings));
if (missing.length === 0) process.exit(0);
for (const [key, value] of missing) settings[key] = value;
fs.mkdirSync(path.dirname(file), { recursive: true });
fs.writeFileSync(file, JSON.stringify(settings, null, 4) + "\n");
"#;

/// `command` (code-server's) preceded by a seed of [`CODE_SERVER_SETTINGS`] into its user data
/// folder `data_dir` (`$XDG_DATA_HOME/code-server`, the user's, kept across sessions). The seed
/// runs as the editor's own account, inside its sandbox, so nothing is written into a
/// workspace from outside; it runs with the `node` that runs code-server (on `PATH`, or the one
/// code-server's image ships), and a seed that fails does not stop the editor.
pub fn with_settings_seed(
    data_dir: &std::path::Path,
    command: Vec<std::ffi::OsString>,
) -> Vec<std::ffi::OsString> {
    let defaults: serde_json::Map<String, serde_json::Value> = CODE_SERVER_SETTINGS
        .iter()
        .map(|(key, value)| (key.to_string(), (*value).into()))
        .collect();
    let mut wrapped: Vec<std::ffi::OsString> = vec![
        "/bin/sh".into(),
        "-c".into(),
        r#""$(command -v node || echo /usr/lib/code-server/lib/node)" -e "$1" "$2" "$3" </dev/null; shift 3; exec "$@""#.into(),
        "code-server-settings".into(),
        SEED_SETTINGS_JS.into(),
        data_dir.as_os_str().into(),
        serde_json::Value::Object(defaults).to_string().into(),
    ];
    wrapped.extend(command);
    wrapped
}

/// The environment that carries the secret, where an editor takes it from there.
pub fn secret_env(editor: EditorKind, secret: &str) -> Vec<(String, String)> {
    match editor {
        EditorKind::JupyterLab => vec![("JUPYTER_TOKEN".into(), secret.to_string())],
        EditorKind::CodeServer => vec![("HASHED_PASSWORD".into(), secret.to_string())],
        EditorKind::Marimo => Vec::new(),
    }
}

/// What to write to the editor's standard input at start (marimo reads its token there).
pub fn secret_stdin(editor: EditorKind, secret: &str) -> Option<String> {
    (editor == EditorKind::Marimo).then(|| format!("{secret}\n"))
}

/// The parts of the server's environment an editor may see; everything else (database URLs,
/// credentials) stays with the server.
pub const INHERITED_ENV: [&str; 7] = ["PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TERM", "SHELL"];

/// A fresh secret for one editor. code-server wants an argon2 hash, which its cookie then must equal.
pub fn new_secret(editor: EditorKind) -> String {
    use rand::RngCore;
    let mut bytes = [0u8; 24];
    rand::thread_rng().fill_bytes(&mut bytes);
    let token = hex::encode(bytes);
    match editor {
        EditorKind::CodeServer => code_server_hash(&token).unwrap_or(token),
        _ => token,
    }
}

/// code-server is given an argon2 hash and compares its session cookie with the hash itself; the
/// token behind it is 24 random bytes that nobody ever types. Costly parameters would protect
/// nothing here, and the default ones take about 30 ms and 19 MiB of memory per launch.
fn code_server_hash(token: &str) -> Result<String, argon2::password_hash::Error> {
    use argon2::password_hash::{PasswordHasher, SaltString};
    let params = argon2::Params::new(64, 1, 1, None)?;
    let argon2 = argon2::Argon2::new(argon2::Algorithm::Argon2id, argon2::Version::V0x13, params);
    let salt = SaltString::generate(&mut rand::rngs::OsRng);
    Ok(argon2.hash_password(token.as_bytes(), &salt)?.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the seed (with `node` from `PATH`, as code-server's own) on `data_dir`, then
    /// `touch ran`; what `User/settings.json` holds after it.
    fn seed(data_dir: &std::path::Path) -> String {
        let ran = data_dir.join("ran");
        let command = with_settings_seed(data_dir, vec!["touch".into(), ran.clone().into()]);
        let status = std::process::Command::new(&command[0])
            .args(&command[1..])
            .status()
            .unwrap();
        assert!(
            status.success() && ran.exists(),
            "the editor runs after the seed"
        );
        std::fs::read_to_string(data_dir.join("User/settings.json")).unwrap()
    }

    #[test]
    fn code_server_starts_without_walkthrough_or_telemetry_keeping_the_users_settings() {
        let dir = tempfile::tempdir().unwrap();
        // A new user: the defaults, nothing else.
        let fresh = dir.path().join("fresh");
        let settings: serde_json::Value = serde_json::from_str(&seed(&fresh)).unwrap();
        assert_eq!(
            settings,
            serde_json::json!({
                "workbench.startupEditor": "none",
                "telemetry.telemetryLevel": "off",
            })
        );
        // A user's own choices stay; only what they never set is added.
        let own = dir.path().join("own");
        std::fs::create_dir_all(own.join("User")).unwrap();
        std::fs::write(
            own.join("User/settings.json"),
            r#"{"workbench.startupEditor": "readme", "editor.fontSize": 15}"#,
        )
        .unwrap();
        let settings: serde_json::Value = serde_json::from_str(&seed(&own)).unwrap();
        assert_eq!(
            settings,
            serde_json::json!({
                "workbench.startupEditor": "readme",
                "editor.fontSize": 15,
                "telemetry.telemetryLevel": "off",
            })
        );
        // A file with comments is the user's to keep as written.
        let commented = dir.path().join("commented");
        std::fs::create_dir_all(commented.join("User")).unwrap();
        let text = "{\n  // mine\n  \"editor.fontSize\": 15,\n}\n";
        std::fs::write(commented.join("User/settings.json"), text).unwrap();
        assert_eq!(seed(&commented), text);
    }

    const TCP: Listen<'static> = Listen::Tcp {
        host: "127.0.0.1",
        port: 4000,
    };

    #[test]
    fn socket_editors_listen_on_their_socket_only_and_privately() {
        let socket = std::path::Path::new("/data/run/abc/editor.sock");
        let jupyter = arguments(
            EditorKind::JupyterLab,
            Listen::Unix(socket),
            "/s/abc/",
            "/ws",
            "-",
        );
        assert!(jupyter.contains(&"--ServerApp.sock=/data/run/abc/editor.sock".to_string()));
        assert!(jupyter.contains(&"--ServerApp.sock_mode=0600".to_string()));
        assert!(
            jupyter
                .iter()
                .all(|a| !a.starts_with("--port") && !a.starts_with("--ip"))
        );
        let code = arguments(
            EditorKind::CodeServer,
            Listen::Unix(socket),
            "/s/abc/",
            "/ws",
            "-",
        );
        assert!(code.contains(&"--socket=/data/run/abc/editor.sock".to_string()));
        assert!(code.contains(&"--socket-mode=600".to_string()));
        assert!(code.iter().all(|a| !a.starts_with("--bind-addr")));
        assert_eq!(code.last().map(String::as_str), Some("/ws"));
        assert!(!listens_on_unix_socket(EditorKind::Marimo));
    }

    #[test]
    fn jupyter_gets_its_base_url_and_token() {
        let args = arguments(EditorKind::JupyterLab, TCP, "/s/abc/", "/ws", "-");
        assert!(args.contains(&"--ServerApp.base_url=/s/abc/".to_string()));
        assert_eq!(
            secret_env(EditorKind::JupyterLab, "tok"),
            [("JUPYTER_TOKEN".to_string(), "tok".to_string())]
        );
        assert!(args.contains(&"--ip=127.0.0.1".to_string()));
        assert_eq!(
            readiness_path(EditorKind::JupyterLab, "/s/abc/"),
            "/s/abc/api/status"
        );
        assert_eq!(
            upstream_auth(EditorKind::JupyterLab, "tok"),
            UpstreamAuth::Header("authorization", "token tok".into())
        );
    }

    #[test]
    fn marimo_base_url_has_no_trailing_slash() {
        let args = arguments(EditorKind::Marimo, TCP, "/s/abc/", "/ws", "-");
        assert!(args.contains(&"--base-url=/s/abc".to_string()));
        assert_eq!(
            secret_stdin(EditorKind::Marimo, "tok").as_deref(),
            Some("tok\n")
        );
        assert!(args.contains(&"--host=127.0.0.1".to_string()));
    }

    #[test]
    fn no_secret_is_ever_an_argument() {
        for editor in EditorKind::ALL {
            let secret = new_secret(editor);
            let args = arguments(editor, TCP, "/s/abc/", "/ws", "-");
            assert!(args.iter().all(|a| !a.contains(&secret)), "{editor}");
        }
    }

    #[test]
    fn code_server_secret_is_an_argon2_hash_sent_as_its_cookie() {
        let secret = new_secret(EditorKind::CodeServer);
        assert!(
            secret.starts_with("$argon2id$v=19$m=64,t=1,p=1$"),
            "{secret}"
        );
        assert_eq!(
            secret_env(EditorKind::CodeServer, &secret)[0].0,
            "HASHED_PASSWORD"
        );
        assert!(strips_prefix(EditorKind::CodeServer));
        assert!(!strips_prefix(EditorKind::JupyterLab));
    }
}
