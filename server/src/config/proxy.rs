//! `[proxy]`: the reverse proxy to the editors, and the connections it holds.

use super::InvalidKey;
use serde::{Deserialize, Serialize};

/// Longer than this, busy polling would mostly burn CPU: answers that slow pay a wake-up anyway.
const MAX_BUSY_POLL_US: u64 = 1000;

/// The reverse proxy to the editors.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProxyConfig {
    /// After passing a WebSocket message on, how long to keep polling for the other side's
    /// answer before sleeping (microseconds; 0 turns it off). Trades CPU for latency where the
    /// answer comes within it: see `crate::net::relay`.
    pub websocket_busy_poll_us: u64,
    /// How long a client may take to send a request's head, and a kept-alive connection may
    /// sit idle, before it is closed (seconds).
    pub header_timeout_seconds: u64,
    /// How long the editor may take to answer a request (its status and headers; the body
    /// then streams as long as it lasts) before the browser gets 504 (seconds).
    pub answer_timeout_seconds: u64,
    /// How many client connections, WebSockets included, the server holds at once; 0 (the
    /// default): half the process's open-file limit, since each may also hold one to an editor.
    pub max_connections: u64,
    /// How many of those one client address may hold; 0 (the default): a quarter of them, so
    /// that one client cannot take the server from everyone else.
    pub max_connections_per_client: u64,
    /// How long a request's body may take to arrive, from its head, on our own routes (pages,
    /// server functions, the API: none takes a large body); past it the client gets 408
    /// (seconds). Uploads to an editor stream as long as they last.
    pub body_timeout_seconds: u64,
    /// How many threads serve client connections, each with a runtime of its own; 0 (the
    /// default): one per core.
    pub serving_threads: u64,
    /// How many WebSockets one session may have open at once (a JupyterLab tab opens a few).
    pub max_websockets_per_session: usize,
    /// A second origin of this server (another host name, e.g. `https://enter.gpu.example.com`)
    /// where an admin opens a user's editor in the browser ("Enter editor"). Unset: admins
    /// enter with a token only, since on our own origin the user's editor page would run with
    /// the admin's sign-in.
    pub entry_origin: Option<String>,
}

impl ProxyConfig {
    /// `entry_origin`'s `host[:port]`, lower-cased, as requests name it in `Host`.
    pub fn entry_host(&self) -> Option<String> {
        self.entry_origin
            .as_deref()
            .and_then(|origin| origin_host(origin).ok())
    }

    /// Checks what serde cannot; the error names the key.
    pub fn validate(&self) -> Result<(), InvalidKey> {
        if let Some(origin) = &self.entry_origin
            && let Err(why) = origin_host(origin)
        {
            return Err(InvalidKey::new("proxy.entry_origin", why));
        }
        if self.websocket_busy_poll_us > MAX_BUSY_POLL_US {
            return Err(InvalidKey::new(
                "proxy.websocket_busy_poll_us",
                format!("must be at most {MAX_BUSY_POLL_US} (microseconds; 0 turns it off)"),
            ));
        }
        if !(1..=100_000).contains(&self.max_websockets_per_session) {
            return Err(InvalidKey::new(
                "proxy.max_websockets_per_session",
                "must be between 1 and 100000",
            ));
        }
        if self.max_connections > 1_000_000 {
            return Err(InvalidKey::new(
                "proxy.max_connections",
                "must be at most 1000000 (0: half the open-file limit)",
            ));
        }
        if self.max_connections_per_client > 1_000_000 {
            return Err(InvalidKey::new(
                "proxy.max_connections_per_client",
                "must be at most 1000000 (0: a quarter of proxy.max_connections)",
            ));
        }
        if self.serving_threads > 1024 {
            return Err(InvalidKey::new(
                "proxy.serving_threads",
                "must be at most 1024 (0: one per core)",
            ));
        }
        for (key, value) in [
            ("proxy.header_timeout_seconds", self.header_timeout_seconds),
            ("proxy.answer_timeout_seconds", self.answer_timeout_seconds),
            ("proxy.body_timeout_seconds", self.body_timeout_seconds),
        ] {
            if !(1..=86_400).contains(&value) {
                return Err(InvalidKey::new(
                    key,
                    "must be between 1 and 86400 (seconds)",
                ));
            }
        }
        Ok(())
    }
}

/// The `host[:port]` of an origin such as `https://enter.example.com`, or why it is not one.
fn origin_host(origin: &str) -> Result<String, String> {
    let uri: http::Uri = origin
        .parse()
        .map_err(|_| format!("'{origin}' is not an origin like https://enter.example.com"))?;
    let scheme_ok = matches!(uri.scheme_str(), Some("http" | "https"));
    let path_ok = matches!(uri.path(), "" | "/") && uri.query().is_none();
    match uri.authority() {
        Some(authority) if scheme_ok && path_ok && !authority.as_str().contains('@') => {
            Ok(authority.as_str().to_ascii_lowercase())
        }
        _ => Err(format!(
            "'{origin}' is not an origin like https://enter.example.com (a scheme and a host, nothing after)"
        )),
    }
}
