//! Configuration: defaults, then an optional TOML file, then `SANDBOX_*` environment variables.
//!
//! Nested keys use `__` in the environment: `SANDBOX_CREDITS__INITIAL_GRANT=50`.

pub mod accounts;
pub mod backups;
pub mod credits;
pub mod dataset_sources;
pub mod editors;
pub mod history;
pub mod idle;
pub mod image_policy;
pub mod kube;
pub mod local;
pub mod metrics;
pub mod network;
pub mod oidc;
pub mod pool;
pub mod promotion;
pub mod proxy;
pub mod quotas;
pub mod sessions;
pub mod settings;

pub use credits::CreditsConfig;
pub use editors::EditorsConfig;
pub use history::HistoryConfig;
pub use idle::{IdleConfig, IdleOverride};
pub use image_policy::ImagePolicyConfig;
pub use kube::{KubeConfig, RuntimeKind};
pub use metrics::MetricsConfig;
pub use pool::{DeclaredGpu, PoolConfig, Price, WarmTarget};
pub use proxy::ProxyConfig;
pub use quotas::QuotasConfig;
pub use sessions::SessionsConfig;

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
                cuda_checkpoint: pool::default_cuda_checkpoint(),
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
                away_timeout_seconds: idle::DEFAULT_AWAY_TIMEOUT_SECONDS,
                park_after_seconds: idle::DEFAULT_PARK_AFTER_SECONDS,
                min_timeout_seconds: idle::DEFAULT_MIN_TIMEOUT_SECONDS,
                max_timeout_seconds: idle::DEFAULT_MAX_TIMEOUT_SECONDS,
                choice_per_slice: Vec::new(),
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

/// A configuration that cannot be used, naming the key.
#[derive(Debug, thiserror::Error)]
#[error("invalid configuration: {0}")]
pub struct ConfigError(pub String);

/// One key whose value cannot be used: the full key (`local.network`, `pool.gpus[1].name`) and
/// why. Each section's `validate` answers with it.
#[derive(Debug, PartialEq, thiserror::Error)]
#[error("key `{0}`: {1}")]
pub struct InvalidKey(pub String, pub String);

impl InvalidKey {
    pub fn new(key: impl Into<String>, why: impl Into<String>) -> InvalidKey {
        InvalidKey(key.into(), why.into())
    }
}

impl From<InvalidKey> for ConfigError {
    fn from(invalid: InvalidKey) -> ConfigError {
        ConfigError(invalid.to_string())
    }
}

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

    /// Checks what serde cannot: ranges, addresses, amounts, sizes the pool has. Each section
    /// checks itself; what is left here spans sections.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.check_listen()?;
        self.credits.validate()?;
        self.pool.validate()?;
        self.sessions.validate()?;
        self.proxy.validate()?;
        if let Some(oidc) = &self.oidc {
            oidc.validate()?;
        }
        self.quotas.validate()?;
        self.idle.validate()?;
        self.history.validate()?;
        self.image_policy.validate()?;
        self.check_pool_sizes()?;
        self.check_database_url()?;
        self.kube.validate()?;
        self.promotion.validate()?;
        self.backups.validate()?;
        self.local.validate()?;
        self.network.validate()?;
        Ok(())
    }

    /// `listen` is an address, and one that other machines reach is served over TLS or
    /// accepted in clear on purpose.
    fn check_listen(&self) -> Result<(), InvalidKey> {
        let Ok(listen) = self.listen.parse::<SocketAddr>() else {
            return Err(InvalidKey::new(
                "listen",
                format!("'{}' is not an address like 127.0.0.1:3000", self.listen),
            ));
        };
        if !listen.ip().is_loopback() && !self.secure_cookies && !self.insecure_http {
            return Err(InvalidKey::new(
                "secure_cookies",
                format!(
                    "listening on {listen}, which other machines reach, would send sign-in cookies over \
                     plain HTTP: put TLS in front and set secure_cookies = true, or set \
                     insecure_http = true to accept cookies in clear"
                ),
            ));
        }
        Ok(())
    }

    /// Sizes other sections name must exist in the pool, or they silently do nothing.
    fn check_pool_sizes(&self) -> Result<(), InvalidKey> {
        let slices = self.pool.slice_sizes();
        // Only the local runtime pre-starts editors: elsewhere `pool.warm` (or its default) is
        // unused and need not match the pool.
        let prestarts = self.runtime == RuntimeKind::Local;
        for (i, target) in self.pool.warm.iter().enumerate().filter(|_| prestarts) {
            if !slices.contains(&target.slice_mib) {
                return Err(InvalidKey::new(
                    format!("pool.warm[{i}].slice_mib"),
                    format!(
                        "no card in the pool has {} MiB slices (it has {})",
                        target.slice_mib,
                        pool::list_sizes(&slices)
                    ),
                ));
            }
        }
        let session_sizes = self.pool.session_sizes();
        for (n, o) in self.idle.per_slice.iter().enumerate() {
            // A detected card's memory is known only at start: any size above a slice may be one.
            let maybe_detected_card =
                self.pool.detect_nvidia && o.slice_mib > self.pool.detected_slice_mib;
            if !session_sizes.contains(&o.slice_mib) && !maybe_detected_card {
                return Err(InvalidKey::new(
                    format!("idle.per_slice[{n}].slice_mib"),
                    format!(
                        "no session in the pool has {} MiB (slices and whole cards: {})",
                        o.slice_mib,
                        pool::list_sizes(&session_sizes)
                    ),
                ));
            }
        }
        Ok(())
    }

    fn check_database_url(&self) -> Result<(), InvalidKey> {
        let url = &self.database_url;
        if !url.is_empty()
            && !url.starts_with("sqlite:")
            && !url.starts_with("postgres://")
            && !url.starts_with("postgresql://")
        {
            return Err(InvalidKey::new(
                "database_url",
                "must start with sqlite:, postgres:// or postgresql://",
            ));
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
        app::domain::credits::parse(&self.credits.initial_grant).expect("validated at load")
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
                    per_hour: app::domain::credits::parse(&p.per_hour).expect("validated at load"),
                })
                .collect(),
            default_per_gib_hour: app::domain::credits::parse(
                &self.pool.default_price_per_gib_hour,
            )
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
        let own = self
            .idle
            .per_slice
            .iter()
            .find(|o| o.slice_mib == slice_mib);
        let (timeout, warn) = own
            .map(|o| (o.timeout_seconds, o.warn_seconds))
            .unwrap_or((self.idle.timeout_seconds, self.idle.warn_seconds));
        // A size whose timeout comes first would never park: said as off.
        let park = own
            .and_then(|o| o.park_after_seconds)
            .unwrap_or(self.idle.park_after_seconds);
        let park = if park < timeout { park } else { 0 };
        app::domain::idle::Policy {
            timeout_ms: timeout as i64 * 1000,
            warn_ms: warn.min(timeout) as i64 * 1000,
            open_tab_keeps_alive: self.idle.open_tab_keeps_alive,
            away_ms: self.idle.away_timeout_seconds as i64 * 1000,
            park_ms: park as i64 * 1000,
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
        refused(
            &|c| c.idle.away_timeout_seconds = 30,
            "idle.away_timeout_seconds",
            "at least 60 s",
        );
        refused(
            &|c| c.idle.park_after_seconds = 30,
            "idle.park_after_seconds",
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
                    park_after_seconds: None,
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
                    park_after_seconds: None,
                })
            },
            "idle.per_slice[0].slice_mib",
            "no session in the pool has 4096 MiB",
        );
        refused(
            &|c| {
                c.idle.per_slice.push(IdleOverride {
                    slice_mib: 8192,
                    timeout_seconds: 600,
                    warn_seconds: 60,
                    park_after_seconds: Some(30),
                })
            },
            "idle.per_slice[0].park_after_seconds",
            "at least two samples",
        );
        // Whole cards are sessions too; and a detected card's size is known only at start.
        let mut config = Config::default();
        config.pool.detect_nvidia = false;
        config.idle.per_slice.push(IdleOverride {
            slice_mib: 49152,
            timeout_seconds: 600,
            warn_seconds: 60,
            park_after_seconds: None,
        });
        config.validate().unwrap();
        // A size may park though the rest do not, and the other way round.
        config.idle.per_slice[0].park_after_seconds = Some(120);
        config.idle.park_after_seconds = 300;
        config.validate().unwrap();
        assert_eq!(config.idle_policy(49152).park_ms, 120_000);
        assert_eq!(config.idle_policy(8192).park_ms, 300_000);
        config.idle.per_slice[0].park_after_seconds = Some(0);
        assert_eq!(config.idle_policy(49152).park_ms, 0);
        // A size that ends sooner than the others park neither parks nor makes the file wrong.
        config.idle.per_slice[0].park_after_seconds = None;
        config.idle.per_slice[0].timeout_seconds = 300;
        config.validate().unwrap();
        assert_eq!(config.idle_policy(49152).park_ms, 0);
        config.idle.per_slice[0].timeout_seconds = 301;
        assert_eq!(config.idle_policy(49152).park_ms, 300_000);
        config.idle.per_slice[0].timeout_seconds = 600;
        // So does a park time the timeout comes before, wherever it is set.
        config.idle.park_after_seconds = 1800;
        config.validate().unwrap();
        assert_eq!(config.idle_policy(8192).park_ms, 0);
        config.idle.per_slice[0].park_after_seconds = Some(600);
        config.validate().unwrap();
        assert_eq!(config.idle_policy(49152).park_ms, 0);
        config.idle.park_after_seconds = 300;
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
