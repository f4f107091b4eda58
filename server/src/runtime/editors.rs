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
