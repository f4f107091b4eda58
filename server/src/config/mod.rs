//! Configuration: defaults, then an optional TOML file, then `SANDBOX_*` environment variables.
//!
//! Nested keys use `__` in the environment: `SANDBOX_CREDITS__INITIAL_GRANT=50`.

pub mod accounts;
pub mod backups;
pub mod kube;
pub mod local;
pub mod network;
pub mod oidc;
pub mod promotion;
pub mod settings;

pub use kube::{KubeConfig, RuntimeKind};

use app::domain::credits;
use app::domain::pool::GpuSpec;
use figment::Figment;
use figment::providers::{Env, Format, Serialized, Toml};
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Address the server listens on.
    pub listen: String,
    /// Where the SQLite database, editor logs and workspaces live.
    pub data_dir: PathBuf,
    /// `sqlite://…` or `postgres://…`; empty means SQLite in the data directory.
    pub database_url: String,
    /// Built pages, scripts and styles (cargo-leptos's site root).
    pub site_root: PathBuf,
    /// Cookies only over HTTPS (Secure, `__Host-` name, HSTS); turn on behind TLS.
    pub secure_cookies: bool,
    /// Accepts plain HTTP on an address other machines reach (a lab network without TLS), where
    /// sign-in cookies travel in clear; without it such a `listen` needs `secure_cookies`.
    pub insecure_http: bool,
    pub credits: CreditsConfig,
    pub sessions: SessionsConfig,
    pub editors: EditorsConfig,
    pub pool: PoolConfig,
    pub quotas: QuotasConfig,
    pub idle: IdleConfig,
    pub proxy: ProxyConfig,
    /// Where editors run: "local" processes or "kube" pods.
    pub runtime: RuntimeKind,
    /// How the local runtime keeps editors apart.
    pub local: local::LocalConfig,
    /// What editors reach on the network, on either runtime.
    pub network: network::NetworkConfig,
    pub kube: KubeConfig,
    /// Sign-in with an OpenID Connect provider, besides local accounts.
    pub oidc: Option<oidc::OidcConfig>,
    /// Pushing users' files to the production registry.
    pub promotion: promotion::PromotionConfig,
    /// Workspaces backed up with restic (off by default).
    pub backups: backups::BackupsConfig,
    /// Deleted accounts: how long their storage stays.
    pub accounts: accounts::AccountsConfig,
    /// Who may read `/metrics` besides admins.
    pub metrics: MetricsConfig,
    /// How long sessions' per-minute readings are kept.
    pub history: HistoryConfig,
    /// What an added image's scans must show before it may be approved and launched.
    pub image_policy: ImagePolicyConfig,
    /// The file this configuration was read from, if any (hidden from editors).
    #[serde(skip)]
    pub source: Option<PathBuf>,
}

/// Per-user limits; admins override them per user (`server quota set`).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuotasConfig {
    pub max_sessions: u32,
    pub max_gpu_mib: u64,
    /// Longest session a user may ask for (also capped by `sessions.max_minutes`).
    pub max_minutes: u32,
    /// Workspace size above which launches are refused.
    pub max_disk_mib: u64,
}

/// `/metrics`: admins may always read it; a scraper sends `Authorization: Bearer <token>`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsConfig {
    /// The scraper's bearer token; empty (the default): only admin credentials read it.
    pub token: String,
}

/// Sessions' readings (GPU, CPU, RAM, busy), one a minute, for the sparklines and usage per day.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HistoryConfig {
    /// Readings older than this many days are forgotten (the admin usage reaches back 90).
    pub retention_days: u32,
}

impl Default for HistoryConfig {
    fn default() -> Self {
        HistoryConfig { retention_days: 90 }
    }
}

/// The scan policy ([`app::domain::scan::ScanPolicy`]) for the images admins add; each
/// editor's configured default (`kube.images`) is the platform's own and is not held to it.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ImagePolicyConfig {
    /// An image without a posted report may not be approved or launched.
    pub require_scan: bool,
    /// A report older than this many days no longer counts (0: any age).
    pub max_age_days: u32,
    /// Findings at this severity or worse with a fix available block the image: `critical`,
    /// `high`, `medium`, `low`, `unknown`, or `none`.
    pub block_fixable_at: String,
}

impl Default for ImagePolicyConfig {
    fn default() -> Self {
        let policy = app::domain::scan::ScanPolicy::default();
        ImagePolicyConfig {
            require_scan: policy.require_scan,
            max_age_days: policy.max_age_days,
            block_fixable_at: policy
                .block_fixable_at
                .map_or("none", |s| s.as_str())
                .to_string(),
        }
    }
}

impl ImagePolicyConfig {
    /// The policy; a `block_fixable_at` that names no severity was refused at start-up.
    pub fn policy(&self) -> app::domain::scan::ScanPolicy {
        app::domain::scan::ScanPolicy {
            require_scan: self.require_scan,
            max_age_days: self.max_age_days,
            block_fixable_at: app::domain::scan::Severity::parse(&self.block_fixable_at),
        }
    }
}

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

/// The reaper and what counts as activity.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdleConfig {
    pub timeout_seconds: u64,
    /// The idle banner shows this long before the end.
    pub warn_seconds: u64,
    /// Whether a visible tab (its heartbeats and the traffic it makes by itself) keeps a session alive.
    pub open_tab_keeps_alive: bool,
    /// How often the reaper runs (timer, idle, crashed editors, the queue).
    pub reaper_period_ms: u64,
    /// How often editors and GPUs are asked whether they are busy.
    pub sample_seconds: u64,
    /// An editor whose processes use at least this much of one core between two samples is
    /// working (a job on the CPU); 0 turns the signal off.
    pub busy_cpu_percent: u32,
    /// Different timeouts for some slice sizes, e.g. shorter for whole cards.
    pub per_slice: Vec<IdleOverride>,
    /// While launches wait in the queue for a slice size, sessions of that size end after this
    /// long without work instead (and are warned within it); 0 turns it off. Busy work, typing
    /// and API calls count as always, so a session that works is never ended sooner.
    #[serde(default)]
    pub pressure_timeout_seconds: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdleOverride {
    pub slice_mib: u64,
    pub timeout_seconds: u64,
    pub warn_seconds: u64,
}

/// Editors kept started ahead of demand.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WarmTarget {
    pub editor: String,
    pub slice_mib: u64,
    pub count: u32,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreditsConfig {
    /// Credits every new account starts with, e.g. "100" or "12.5".
    #[serde(deserialize_with = "amount")]
    pub initial_grant: String,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionsConfig {
    pub min_minutes: u32,
    pub max_minutes: u32,
    pub default_minutes: u32,
    /// How long an editor may take to answer before the launch fails.
    pub ready_timeout_seconds: u64,
    /// Stop editors when the server shuts down (otherwise they are re-adopted on the next start).
    pub stop_on_shutdown: bool,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EditorsConfig {
    /// Where `scripts/setup.sh` installed the editors (venv/ and npm/).
    pub tools_dir: PathBuf,
    /// Explicit commands; empty means the one in `tools_dir`.
    pub jupyterlab: String,
    pub marimo: String,
    pub code_server: String,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolConfig {
    /// Look for NVIDIA GPUs through NVML; the declared GPUs are used when none is found.
    pub detect_nvidia: bool,
    /// Slice size for detected GPUs, in MiB.
    pub detected_slice_mib: u64,
    /// HAMi-core's libvgpu.so; when set, slices on real GPUs are enforced through it.
    pub hami_core_library: String,
    /// Credits per slice-hour when no price below matches, per GiB of slice.
    #[serde(deserialize_with = "amount")]
    pub default_price_per_gib_hour: String,
    pub gpus: Vec<DeclaredGpu>,
    pub prices: Vec<Price>,
    /// Editors to keep pre-started per (editor, slice size), so a launch only assigns one.
    pub warm: Vec<WarmTarget>,
    /// Longest whole-card (burst) session, in minutes.
    pub burst_max_minutes: u32,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeclaredGpu {
    pub name: String,
    pub model: String,
    pub memory_mib: u64,
    pub slice_mib: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    /// GPU model this price applies to; "*" for any.
    pub model: String,
    pub slice_mib: u64,
    /// Credits per hour, e.g. "1" or "0.5".
    #[serde(deserialize_with = "amount")]
    pub per_hour: String,
}

/// Amounts of credits are decimal text ("12.5"), parsed exactly later; but a number written
/// bare (`initial_grant = 50` in the file, `SANDBOX_CREDITS__INITIAL_GRANT=50` in the
/// environment) arrives as a number, and means the same.
fn amount<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    struct Amount;
    impl serde::de::Visitor<'_> for Amount {
        type Value = String;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("an amount of credits such as \"12.5\"")
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<String, E> {
            Ok(v.to_string())
        }
    }
    deserializer.deserialize_any(Amount)
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: "127.0.0.1:3000".into(),
            data_dir: PathBuf::from("data"),
            database_url: String::new(),
            site_root: PathBuf::from("target/site"),
            secure_cookies: false,
            insecure_http: false,
            credits: CreditsConfig {
                initial_grant: "100".into(),
            },
            sessions: SessionsConfig {
                min_minutes: 15,
                max_minutes: 480,
                default_minutes: 60,
                ready_timeout_seconds: 60,
                stop_on_shutdown: true,
            },
            editors: EditorsConfig {
                tools_dir: PathBuf::from(".tools"),
                jupyterlab: String::new(),
                marimo: String::new(),
                code_server: String::new(),
            },
            pool: PoolConfig {
                detect_nvidia: true,
                detected_slice_mib: 8192,
                hami_core_library: String::new(),
                default_price_per_gib_hour: "0.125".into(),
                gpus: vec![DeclaredGpu {
                    name: "virtual-0".into(),
                    model: "Virtual 48 GB".into(),
                    memory_mib: 49152,
                    slice_mib: 8192,
                }],
                prices: Vec::new(),
                warm: vec![WarmTarget {
                    editor: "jupyterlab".into(),
                    slice_mib: 8192,
                    count: 1,
                }],
                burst_max_minutes: 60,
            },
            quotas: QuotasConfig {
                max_sessions: 2,
                max_gpu_mib: 16384,
                max_minutes: 480,
                max_disk_mib: 10240,
            },
            idle: IdleConfig {
                timeout_seconds: 1800,
                warn_seconds: 300,
                open_tab_keeps_alive: false,
                reaper_period_ms: 5000,
                sample_seconds: 30,
                busy_cpu_percent: 20,
                per_slice: Vec::new(),
                pressure_timeout_seconds: 0,
            },
            proxy: ProxyConfig {
                websocket_busy_poll_us: 100,
                header_timeout_seconds: 30,
                answer_timeout_seconds: 120,
                max_connections: 0,
                max_connections_per_client: 0,
                entry_origin: None,
                body_timeout_seconds: 30,
                serving_threads: 0,
                max_websockets_per_session: 64,
            },
            runtime: RuntimeKind::Local,
            kube: KubeConfig::default(),
            oidc: None,
            promotion: promotion::PromotionConfig::default(),
            backups: backups::BackupsConfig::default(),
            accounts: accounts::AccountsConfig::default(),
            metrics: MetricsConfig::default(),
            history: HistoryConfig::default(),
            image_policy: ImagePolicyConfig::default(),
            local: local::LocalConfig::default(),
            network: network::NetworkConfig::default(),
            source: None,
        }
    }
}

/// Longer than this, busy polling would mostly burn CPU: answers that slow pay a wake-up anyway.
const MAX_BUSY_POLL_US: u64 = 1000;
/// The largest amount of credits a setting may name (a million credits), in milli-credits.
const MAX_AMOUNT_MILLI: i64 = 1_000_000_000;
/// The longest session a server may allow: 30 days.
const MAX_MINUTES: u32 = 43_200;
/// The largest card: 16 TiB.
const MAX_CARD_MIB: u64 = 16 * 1024 * 1024;

/// A configuration that cannot be used, naming the key.
#[derive(Debug, thiserror::Error)]
#[error("invalid configuration: {0}")]
pub struct ConfigError(pub String);

impl Config {
    /// Defaults, then `file` (if any), then the environment.
    pub fn load(file: Option<&Path>) -> Result<Config, ConfigError> {
        let mut figment = Figment::from(Serialized::defaults(Config::default()));
        if let Some(file) = file {
            if !file.exists() {
                return Err(ConfigError(format!(
                    "config file {} does not exist",
                    file.display()
                )));
            }
            figment = figment.merge(Toml::file(file));
        }
        figment = figment.merge(
            Env::prefixed("SANDBOX_")
                .ignore(&["log", "log_format"])
                .split("__")
                .map(|key| key.as_str().to_ascii_lowercase().into()),
        );
        let mut config: Config = figment.extract().map_err(|e| {
            let key = e.path.join(".");
            let key = if key.is_empty() {
                String::new()
            } else {
                format!("key `{key}`: ")
            };
            ConfigError(format!("{key}{}", e.kind))
        })?;
        config.validate()?;
        config.source = file.map(|f| std::fs::canonicalize(f).unwrap_or_else(|_| f.to_path_buf()));
        Ok(config)
    }

    /// Checks what serde cannot: ranges, addresses, amounts, sizes the pool has.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |key: &str, why: String| Err(ConfigError(format!("key `{key}`: {why}")));
        let Ok(listen) = self.listen.parse::<SocketAddr>() else {
            return bad(
                "listen",
                format!("'{}' is not an address like 127.0.0.1:3000", self.listen),
            );
        };
        if !listen.ip().is_loopback() && !self.secure_cookies && !self.insecure_http {
            return bad(
                "secure_cookies",
                format!(
                    "listening on {listen}, which other machines reach, would send sign-in cookies over \
                     plain HTTP: put TLS in front and set secure_cookies = true, or set \
                     insecure_http = true to accept cookies in clear"
                ),
            );
        }
        if let Some(origin) = &self.proxy.entry_origin
            && let Err(why) = origin_host(origin)
        {
            return bad("proxy.entry_origin", why);
        }
        // Amounts: none below zero (a negative price would pay users to launch), none so large
        // that price times minutes could overflow.
        let amounts = [
            (
                "credits.initial_grant".to_string(),
                &self.credits.initial_grant,
            ),
            (
                "pool.default_price_per_gib_hour".to_string(),
                &self.pool.default_price_per_gib_hour,
            ),
        ]
        .into_iter()
        .chain(
            self.pool
                .prices
                .iter()
                .enumerate()
                .map(|(i, p)| (format!("pool.prices[{i}].per_hour"), &p.per_hour)),
        );
        for (key, amount) in amounts {
            match credits::parse(amount) {
                Err(e) => return bad(&key, e),
                Ok(milli) if !(0..=MAX_AMOUNT_MILLI).contains(&milli) => {
                    return bad(
                        &key,
                        format!("must be between 0 and {}", MAX_AMOUNT_MILLI / 1000),
                    );
                }
                Ok(_) => {}
            }
        }
        let s = &self.sessions;
        if s.max_minutes > MAX_MINUTES {
            return bad(
                "sessions.max_minutes",
                format!("must be at most {MAX_MINUTES} (30 days)"),
            );
        }
        if s.min_minutes == 0 || s.min_minutes > s.max_minutes {
            return bad(
                "sessions.min_minutes",
                format!(
                    "must be at least 1 and at most sessions.max_minutes ({})",
                    s.max_minutes
                ),
            );
        }
        if s.default_minutes < s.min_minutes || s.default_minutes > s.max_minutes {
            return bad(
                "sessions.default_minutes",
                format!("must lie between {} and {}", s.min_minutes, s.max_minutes),
            );
        }
        if self.proxy.websocket_busy_poll_us > MAX_BUSY_POLL_US {
            return bad(
                "proxy.websocket_busy_poll_us",
                format!("must be at most {MAX_BUSY_POLL_US} (microseconds; 0 turns it off)"),
            );
        }
        if let Some((key, problem)) = self.oidc.as_ref().and_then(|o| o.problem()) {
            return bad(&format!("oidc.{key}"), problem);
        }
        if !(1..=100_000).contains(&self.proxy.max_websockets_per_session) {
            return bad(
                "proxy.max_websockets_per_session",
                "must be between 1 and 100000".into(),
            );
        }
        if self.proxy.max_connections > 1_000_000 {
            return bad(
                "proxy.max_connections",
                "must be at most 1000000 (0: half the open-file limit)".into(),
            );
        }
        if self.proxy.max_connections_per_client > 1_000_000 {
            return bad(
                "proxy.max_connections_per_client",
                "must be at most 1000000 (0: a quarter of proxy.max_connections)".into(),
            );
        }
        if self.proxy.serving_threads > 1024 {
            return bad(
                "proxy.serving_threads",
                "must be at most 1024 (0: one per core)".into(),
            );
        }
        for (key, value) in [
            (
                "proxy.header_timeout_seconds",
                self.proxy.header_timeout_seconds,
            ),
            (
                "proxy.answer_timeout_seconds",
                self.proxy.answer_timeout_seconds,
            ),
            (
                "proxy.body_timeout_seconds",
                self.proxy.body_timeout_seconds,
            ),
        ] {
            if !(1..=86_400).contains(&value) {
                return bad(key, "must be between 1 and 86400 (seconds)".into());
            }
        }
        if s.ready_timeout_seconds == 0 {
            return bad(
                "sessions.ready_timeout_seconds",
                "must be at least 1".into(),
            );
        }
        for (i, target) in self.pool.warm.iter().enumerate() {
            if app::domain::launch::EditorKind::parse(&target.editor).is_none() {
                return bad(
                    &format!("pool.warm[{i}].editor"),
                    format!(
                        "'{}' is not an editor (jupyterlab, marimo or code-server)",
                        target.editor
                    ),
                );
            }
        }
        if self.pool.burst_max_minutes == 0 {
            return bad("pool.burst_max_minutes", "must be at least 1".into());
        }
        let q = &self.quotas;
        if q.max_sessions == 0 || q.max_gpu_mib == 0 || q.max_minutes == 0 {
            return bad(
                "quotas",
                "max_sessions, max_gpu_mib and max_minutes must be at least 1".into(),
            );
        }
        let i = &self.idle;
        if i.timeout_seconds == 0 || i.warn_seconds >= i.timeout_seconds {
            return bad(
                "idle.warn_seconds",
                "the timeout must be at least 1 s and the warning shorter than it".into(),
            );
        }
        if i.pressure_timeout_seconds != 0
            && (i.pressure_timeout_seconds < 2 * i.sample_seconds.max(30)
                || i.pressure_timeout_seconds >= i.timeout_seconds)
        {
            return bad(
                "idle.pressure_timeout_seconds",
                "must be 0 (off), or at least two samples (60 s) and shorter than idle.timeout_seconds".into(),
            );
        }
        if i.reaper_period_ms < 50 || i.sample_seconds == 0 {
            return bad(
                "idle.reaper_period_ms",
                "must be at least 50 ms (and idle.sample_seconds at least 1)".into(),
            );
        }
        if !(1..=3650).contains(&self.history.retention_days) {
            return bad(
                "history.retention_days",
                format!(
                    "{} is not between 1 and 3650 days",
                    self.history.retention_days
                ),
            );
        }
        let fixable = self.image_policy.block_fixable_at.trim();
        if fixable != "none" && app::domain::scan::Severity::parse(fixable).is_none() {
            return bad(
                "image_policy.block_fixable_at",
                format!("`{fixable}` is not one of critical, high, medium, low, unknown or none"),
            );
        }
        if self.image_policy.max_age_days > 3650 {
            return bad(
                "image_policy.max_age_days",
                "must be at most 3650 days (0: reports of any age count)".into(),
            );
        }
        if self.pool.detected_slice_mib == 0 {
            return bad("pool.detected_slice_mib", "must be more than 0".into());
        }
        for (i, gpu) in self.pool.gpus.iter().enumerate() {
            if gpu.name.trim().is_empty() {
                return bad(&format!("pool.gpus[{i}].name"), "must not be empty".into());
            }
            if self.pool.gpus[..i]
                .iter()
                .any(|other| other.name == gpu.name)
            {
                return bad(
                    &format!("pool.gpus[{i}].name"),
                    format!("'{}' names two cards; each needs its own name", gpu.name),
                );
            }
            if gpu.memory_mib > MAX_CARD_MIB {
                return bad(
                    &format!("pool.gpus[{i}].memory_mib"),
                    format!("must be at most {MAX_CARD_MIB} (16 TiB)"),
                );
            }
            if gpu.slice_mib == 0 || gpu.slice_mib > gpu.memory_mib {
                return bad(
                    &format!("pool.gpus[{i}].slice_mib"),
                    format!("must be between 1 and memory_mib ({})", gpu.memory_mib),
                );
            }
        }
        // Sizes other entries name must exist in the pool, or they silently do nothing.
        let slices: Vec<u64> = self
            .pool
            .gpus
            .iter()
            .map(|g| g.slice_mib)
            .chain(
                self.pool
                    .detect_nvidia
                    .then_some(self.pool.detected_slice_mib),
            )
            .collect();
        let sizes = |list: &[u64]| {
            let mut list = list.to_vec();
            list.sort_unstable();
            list.dedup();
            list.iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        };
        // Only the local runtime pre-starts editors: elsewhere `pool.warm` (or its default) is
        // unused and need not match the pool.
        let prestarts = self.runtime == RuntimeKind::Local;
        for (i, target) in self.pool.warm.iter().enumerate().filter(|_| prestarts) {
            if !slices.contains(&target.slice_mib) {
                return bad(
                    &format!("pool.warm[{i}].slice_mib"),
                    format!(
                        "no card in the pool has {} MiB slices (it has {})",
                        target.slice_mib,
                        sizes(&slices)
                    ),
                );
            }
        }
        let whole_cards = self.pool.gpus.iter().map(|g| g.memory_mib);
        let session_sizes: Vec<u64> = slices.iter().copied().chain(whole_cards).collect();
        for (n, o) in self.idle.per_slice.iter().enumerate() {
            let key = |field: &str| format!("idle.per_slice[{n}].{field}");
            if o.timeout_seconds == 0 || o.warn_seconds >= o.timeout_seconds {
                return bad(
                    &key("warn_seconds"),
                    "the timeout must be at least 1 s and the warning shorter than it".into(),
                );
            }
            // A detected card's memory is known only at start: any size above a slice may be one.
            let maybe_detected_card =
                self.pool.detect_nvidia && o.slice_mib > self.pool.detected_slice_mib;
            if !session_sizes.contains(&o.slice_mib) && !maybe_detected_card {
                return bad(
                    &key("slice_mib"),
                    format!(
                        "no session in the pool has {} MiB (slices and whole cards: {})",
                        o.slice_mib,
                        sizes(&session_sizes)
                    ),
                );
            }
        }
        if !self.database_url.is_empty()
            && !self.database_url.starts_with("sqlite:")
            && !self.database_url.starts_with("postgres://")
            && !self.database_url.starts_with("postgresql://")
        {
            return bad(
                "database_url",
                "must start with sqlite:, postgres:// or postgresql://".into(),
            );
        }
        if let Err((key, why)) = self.kube.validate() {
            return bad(&key, why);
        }
        if let Some((key, why)) = self.promotion.problem() {
            return bad(&format!("promotion.{key}"), why);
        }
        if let Some((key, why)) = self.backups.problem() {
            return bad(&format!("backups.{key}"), why);
        }
        if let Some((key, why)) = self.local.problem() {
            return bad(&format!("local.{key}"), why);
        }
        if let Some((key, why)) = self.network.problem() {
            return bad(&format!("network.{key}"), why);
        }
        Ok(())
    }

    pub fn listen_addr(&self) -> SocketAddr {
        self.listen.parse().expect("validated at load")
    }

    pub fn database_url(&self) -> String {
        if self.database_url.is_empty() {
            format!(
                "sqlite://{}?mode=rwc",
                self.data_dir.join("sandbox.db").display()
            )
        } else {
            self.database_url.clone()
        }
    }

    pub fn initial_grant(&self) -> i64 {
        credits::parse(&self.credits.initial_grant).expect("validated at load")
    }

    /// The configured prices, parsed ([`app::domain::pricing`] decides with them).
    pub fn price_list(&self) -> app::domain::pricing::PriceList {
        app::domain::pricing::PriceList {
            prices: self
                .pool
                .prices
                .iter()
                .map(|p| app::domain::pricing::Price {
                    model: p.model.clone(),
                    slice_mib: p.slice_mib,
                    per_hour: credits::parse(&p.per_hour).expect("validated at load"),
                })
                .collect(),
            default_per_gib_hour: credits::parse(&self.pool.default_price_per_gib_hour)
                .expect("validated at load"),
        }
    }

    /// Milli-credits per hour for a slice of this size on this model.
    pub fn price_per_hour(&self, model: &str, slice_mib: u64) -> i64 {
        self.price_list().per_hour(model, slice_mib)
    }

    /// The limits every user has unless an admin overrides them.
    pub fn default_limits(&self) -> app::domain::quota::Limits {
        app::domain::quota::Limits {
            max_sessions: self.quotas.max_sessions,
            max_gpu_mib: self.quotas.max_gpu_mib,
            max_minutes: self.quotas.max_minutes.min(self.sessions.max_minutes),
            max_disk_mib: self.quotas.max_disk_mib,
        }
    }

    /// The idle policy for a slice size.
    pub fn idle_policy(&self, slice_mib: u64) -> app::domain::idle::Policy {
        let (timeout, warn) = self
            .idle
            .per_slice
            .iter()
            .find(|o| o.slice_mib == slice_mib)
            .map(|o| (o.timeout_seconds, o.warn_seconds))
            .unwrap_or((self.idle.timeout_seconds, self.idle.warn_seconds));
        app::domain::idle::Policy {
            timeout_ms: timeout as i64 * 1000,
            warn_ms: warn.min(timeout) as i64 * 1000,
            open_tab_keeps_alive: self.idle.open_tab_keeps_alive,
        }
    }

    /// The declared GPUs as pool specs (used when no NVIDIA GPU is detected).
    pub fn declared_gpus(&self) -> Vec<GpuSpec> {
        self.pool
            .gpus
            .iter()
            .map(|g| GpuSpec {
                id: g.name.clone(),
                model: g.model.clone(),
                memory_mib: g.memory_mib,
                slice_mib: g.slice_mib,
                hold: app::domain::hold::SliceHold::None,
                device_minor: None,
                mig: None,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_price_eight_gb_at_one_credit() {
        let config = Config::default();
        config.validate().unwrap();
        assert_eq!(config.price_per_hour("Virtual 48 GB", 8192), 1000);
        assert_eq!(config.initial_grant(), 100_000);
    }

    #[test]
    fn explicit_prices_win() {
        let mut config = Config::default();
        config.pool.prices.push(Price {
            model: "*".into(),
            slice_mib: 8192,
            per_hour: "2.5".into(),
        });
        assert_eq!(config.price_per_hour("L40S", 8192), 2500);
    }

    #[test]
    fn errors_name_the_key() {
        let mut config = Config::default();
        config.sessions.default_minutes = 1000;
        let err = config.validate().unwrap_err().to_string();
        assert!(err.contains("sessions.default_minutes"), "{err}");

        let mut config = Config::default();
        config.proxy.websocket_busy_poll_us = 5000;
        let err = config.validate().unwrap_err().to_string();
        assert!(err.contains("proxy.websocket_busy_poll_us"), "{err}");

        let mut config = Config::default();
        config.proxy.max_websockets_per_session = 0;
        let err = config.validate().unwrap_err().to_string();
        assert!(err.contains("proxy.max_websockets_per_session"), "{err}");

        let mut config = Config::default();
        config.proxy.max_connections = 2_000_000;
        let err = config.validate().unwrap_err().to_string();
        assert!(err.contains("proxy.max_connections"), "{err}");

        let mut config = Config::default();
        config.proxy.serving_threads = 5000;
        let err = config.validate().unwrap_err().to_string();
        assert!(err.contains("proxy.serving_threads"), "{err}");

        let mut config = Config::default();
        config.credits.initial_grant = "lots".into();
        let err = config.validate().unwrap_err().to_string();
        assert!(err.contains("credits.initial_grant"), "{err}");

        let config = Config {
            listen: "nowhere".into(),
            ..Config::default()
        };
        assert!(
            config
                .validate()
                .unwrap_err()
                .to_string()
                .contains("`listen`")
        );
    }

    #[test]
    fn an_entry_origin_is_a_scheme_and_a_host() {
        let with = |origin: &str| {
            let mut config = Config::default();
            config.proxy.entry_origin = Some(origin.into());
            config
        };
        let good = with("https://Enter.Example.com");
        assert!(good.validate().is_ok());
        assert_eq!(
            good.proxy.entry_host().as_deref(),
            Some("enter.example.com")
        );
        assert_eq!(
            with("http://localhost:3000/").proxy.entry_host().as_deref(),
            Some("localhost:3000")
        );
        for bad in [
            "enter.example.com",
            "ftp://x",
            "https://x/path",
            "https://u@x",
            "https://x/?a",
        ] {
            let error = with(bad).validate().unwrap_err().to_string();
            assert!(error.contains("proxy.entry_origin"), "{bad}: {error}");
        }
        assert_eq!(Config::default().proxy.entry_host(), None);
    }

    #[test]
    fn plain_http_to_other_machines_needs_secure_cookies_or_a_yes() {
        let on = |listen: &str, secure_cookies: bool, insecure_http: bool| Config {
            listen: listen.into(),
            secure_cookies,
            insecure_http,
            ..Config::default()
        };
        let err = on("0.0.0.0:3000", false, false)
            .validate()
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("`secure_cookies`") && err.contains("insecure_http"),
            "{err}"
        );
        assert!(on("192.0.2.7:3000", false, false).validate().is_err());
        assert!(on("0.0.0.0:3000", true, false).validate().is_ok());
        assert!(on("0.0.0.0:3000", false, true).validate().is_ok());
        assert!(on("127.0.0.1:3000", false, false).validate().is_ok());
        assert!(on("[::1]:3000", false, false).validate().is_ok());
    }

    /// Values serde accepts but that would make sessions free, end them at once, or mean
    /// nothing: each refused with its key.
    #[test]
    fn settings_that_would_misbehave_name_their_key() {
        let refused = |change: &dyn Fn(&mut Config), key: &str, why: &str| {
            let mut config = Config::default();
            change(&mut config);
            let err = config.validate().unwrap_err().to_string();
            assert!(err.contains(&format!("`{key}`")), "{key}: {err}");
            assert!(err.contains(why), "{key}: {err}");
        };
        refused(
            &|c| {
                c.pool.prices.push(Price {
                    model: "*".into(),
                    slice_mib: 8192,
                    per_hour: "-1".into(),
                })
            },
            "pool.prices[0].per_hour",
            "between 0 and",
        );
        refused(
            &|c| c.credits.initial_grant = "-5".into(),
            "credits.initial_grant",
            "between 0 and",
        );
        refused(
            &|c| c.pool.default_price_per_gib_hour = "99999999".into(),
            "pool.default_price_per_gib_hour",
            "between 0 and",
        );
        refused(
            &|c| c.sessions.max_minutes = 100_000,
            "sessions.max_minutes",
            "at most 43200",
        );
        refused(
            &|c| {
                let mut twin = c.pool.gpus[0].clone();
                twin.model = "other".into();
                c.pool.gpus.push(twin);
            },
            "pool.gpus[1].name",
            "names two cards",
        );
        refused(
            &|c| c.pool.warm[0].slice_mib = 16384,
            "pool.warm[0].slice_mib",
            "no card in the pool has 16384 MiB slices (it has 8192)",
        );
        refused(
            &|c| c.idle.pressure_timeout_seconds = 1800,
            "idle.pressure_timeout_seconds",
            "shorter than idle.timeout_seconds",
        );
        refused(
            &|c| c.idle.pressure_timeout_seconds = 30,
            "idle.pressure_timeout_seconds",
            "at least two samples",
        );
        // In a cluster nothing is pre-started: the default `pool.warm` does not have to fit.
        let mut config = Config {
            runtime: RuntimeKind::Kube,
            ..Config::default()
        };
        config.pool.gpus[0].slice_mib = 16384;
        config.validate().unwrap();
        refused(
            &|c| {
                c.idle.per_slice.push(IdleOverride {
                    slice_mib: 8192,
                    timeout_seconds: 0,
                    warn_seconds: 0,
                })
            },
            "idle.per_slice[0].warn_seconds",
            "at least 1 s",
        );
        refused(
            &|c| {
                c.pool.detect_nvidia = false;
                c.idle.per_slice.push(IdleOverride {
                    slice_mib: 4096,
                    timeout_seconds: 600,
                    warn_seconds: 60,
                })
            },
            "idle.per_slice[0].slice_mib",
            "no session in the pool has 4096 MiB",
        );
        // Whole cards are sessions too; and a detected card's size is known only at start.
        let mut config = Config::default();
        config.pool.detect_nvidia = false;
        config.idle.per_slice.push(IdleOverride {
            slice_mib: 49152,
            timeout_seconds: 600,
            warn_seconds: 60,
        });
        config.validate().unwrap();
        config.pool.detect_nvidia = true;
        config.idle.per_slice[0].slice_mib = 81920;
        config.validate().unwrap();
        // Free is a price.
        config.pool.default_price_per_gib_hour = "0".into();
        config.validate().unwrap();
    }

    #[test]
    fn a_file_with_a_wrong_type_names_the_key() {
        let dir = std::env::temp_dir().join(format!("sandbox-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("bad.toml");
        std::fs::write(&file, "[sessions]\nmax_minutes = \"many\"\n").unwrap();
        let err = Config::load(Some(&file)).unwrap_err().to_string();
        assert!(err.contains("sessions.max_minutes"), "{err}");
        std::fs::write(&file, "colour = \"blue\"\n").unwrap();
        let err = Config::load(Some(&file)).unwrap_err().to_string();
        assert!(err.contains("colour"), "{err}");
    }

    #[test]
    fn amounts_may_be_written_as_bare_numbers() {
        let dir = std::env::temp_dir().join(format!("sandbox-amounts-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("numbers.toml");
        std::fs::write(
            &file,
            "[credits]\ninitial_grant = 50\n[pool]\ndefault_price_per_gib_hour = 0.25\n\
             [[pool.prices]]\nmodel = \"*\"\nslice_mib = 8192\nper_hour = 3\n",
        )
        .unwrap();
        let config = Config::load(Some(&file)).unwrap();
        assert_eq!(config.credits.initial_grant, "50");
        assert_eq!(config.pool.default_price_per_gib_hour, "0.25");
        assert_eq!(config.pool.prices[0].per_hour, "3");

        std::fs::write(&file, "[credits]\ninitial_grant = true\n").unwrap();
        let err = Config::load(Some(&file)).unwrap_err().to_string();
        assert!(err.contains("credits.initial_grant"), "{err}");
        assert!(err.contains("amount of credits"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
