//! The admin Settings page's words: what the configuration says and what the server found at
//! start, never a secret.

use super::oidc::OidcConfig;
use super::promotion::PromotionConfig;
use super::{Config, ImagePolicyConfig};
use app::domain::credits;
use app::domain::dates::span_words;
use app::domain::launch::EditorKind;
use app::domain::pool::{GpuSpec, format_mib};
use app::model::SettingsSection;

fn section(title: &str, entries: Vec<(&str, String)>) -> SettingsSection {
    SettingsSection {
        title: title.into(),
        entries: entries
            .into_iter()
            .map(|(key, value)| (key.to_string(), value))
            .collect(),
    }
}

fn yes_no(on: bool) -> String {
    if on { "yes" } else { "no" }.into()
}

/// A configured amount of credits with its unit ("1 credit", "0.125 credits") and `then`.
fn amount(text: &str, then: &str) -> String {
    match credits::parse(text) {
        Ok(milli) => format!("{}{then}", credits::with_unit(milli)),
        Err(_) => format!("{text} credits{then}"),
    }
}

fn or_none(items: Vec<String>) -> String {
    if items.is_empty() {
        "none".into()
    } else {
        items.join("; ")
    }
}

/// The settings page's sections from the configuration and what the server found at start.
pub fn settings(
    config: &Config,
    gpus: &[app::domain::pool::GpuSpec],
    enforcement: &str,
    editors: &[(EditorKind, Result<(), String>)],
    isolation: &Result<String, String>,
) -> Vec<SettingsSection> {
    vec![
        server(config),
        editors_section(editors, isolation),
        pool(config, gpus, enforcement),
        credits_section(config),
        sessions(config),
        quota(config),
        idle(config),
        image_scans(&config.image_policy),
        single_sign_on(config.oidc.as_ref()),
        promotion(&config.promotion),
        super::backups::settings_section(config),
    ]
}

fn minutes(m: u32) -> String {
    format!("{m} min")
}

fn server(config: &Config) -> SettingsSection {
    let database = config.database_url();
    let database = if database.starts_with("sqlite:") {
        format!("SQLite ({})", config.data_dir.display())
    } else {
        "PostgreSQL (SANDBOX_DATABASE_URL)".into()
    };
    section(
        "Server",
        vec![
            ("Listening on", config.listen.clone()),
            ("Database", database),
            ("Runtime", format!("{:?}", config.runtime).to_lowercase()),
            ("Secure cookies", yes_no(config.secure_cookies)),
        ],
    )
}

fn editors_section(
    editors: &[(EditorKind, Result<(), String>)],
    isolation: &Result<String, String>,
) -> SettingsSection {
    section(
        "Editors",
        editors
            .iter()
            .map(|(kind, available)| {
                let state = match available {
                    Ok(()) => "available".to_string(),
                    Err(why) => format!("unavailable: {why}"),
                };
                (kind.label(), state)
            })
            .chain(std::iter::once((
                "Isolation",
                match isolation {
                    Ok(how) => how.clone(),
                    Err(why) => format!("none: {why}"),
                },
            )))
            .collect(),
    )
}

fn pool(config: &Config, gpus: &[GpuSpec], enforcement: &str) -> SettingsSection {
    section(
        "Pool",
        vec![
            ("Slice limits", enforcement.to_string()),
            (
                "GPUs",
                or_none(
                    gpus.iter()
                        .map(|g| {
                            format!(
                                "{} ({}, {}, slices of {}, {})",
                                g.id,
                                g.model,
                                format_mib(g.memory_mib),
                                format_mib(g.slice_mib),
                                g.hold.label()
                            )
                        })
                        .collect(),
                ),
            ),
            (
                "Pre-started editors",
                or_none(
                    config
                        .pool
                        .warm
                        .iter()
                        .map(|w| {
                            format!("{} × {} on {}", w.count, w.editor, format_mib(w.slice_mib))
                        })
                        .collect(),
                ),
            ),
            (
                "Longest whole-GPU burst",
                minutes(config.pool.burst_max_minutes),
            ),
        ],
    )
}

fn credits_section(config: &Config) -> SettingsSection {
    section(
        "Credits",
        vec![
            ("Starting grant", amount(&config.credits.initial_grant, "")),
            (
                "Default price",
                amount(&config.pool.default_price_per_gib_hour, " per GiB-hour"),
            ),
            (
                "Prices",
                or_none(
                    config
                        .pool
                        .prices
                        .iter()
                        .map(|p| {
                            format!(
                                "{} {}: {}",
                                p.model,
                                format_mib(p.slice_mib),
                                amount(&p.per_hour, " per hour")
                            )
                        })
                        .collect(),
                ),
            ),
        ],
    )
}

fn sessions(config: &Config) -> SettingsSection {
    let sessions = &config.sessions;
    section(
        "Sessions",
        vec![
            (
                "Duration",
                format!(
                    "{} to {} (default {})",
                    minutes(sessions.min_minutes),
                    minutes(sessions.max_minutes),
                    minutes(sessions.default_minutes)
                ),
            ),
            (
                "Time to get ready",
                span_words(sessions.ready_timeout_seconds),
            ),
            (
                "Stopped when the server stops",
                yes_no(sessions.stop_on_shutdown),
            ),
        ],
    )
}

fn quota(config: &Config) -> SettingsSection {
    let limits = config.default_limits();
    section(
        "Default quota",
        vec![
            ("Sessions at once", limits.max_sessions.to_string()),
            ("GPU memory", format_mib(limits.max_gpu_mib)),
            ("Longest session", minutes(limits.max_minutes)),
            ("Workspace", format_mib(limits.max_disk_mib)),
        ],
    )
}

fn idle(config: &Config) -> SettingsSection {
    let idle = &config.idle;
    section(
        "Idle",
        vec![
            ("Ends after", span_words(idle.timeout_seconds)),
            ("Warns before", span_words(idle.warn_seconds)),
            (
                "With no page open and no script calling, ends after",
                match idle.away_timeout_seconds {
                    0 => "the same time".to_string(),
                    s => span_words(s),
                },
            ),
            (
                "Gives its GPU back, kernels kept, with no work for",
                match idle.park_after_seconds {
                    0 => "never".to_string(),
                    s => span_words(s),
                },
            ),
            (
                "An open tab keeps a session",
                yes_no(idle.open_tab_keeps_alive),
            ),
            (
                "CPU that counts as work",
                format!("{} %", idle.busy_cpu_percent),
            ),
            (
                "Ends sooner while launches wait",
                match idle.pressure_timeout_seconds {
                    0 => "no".to_string(),
                    s => format!("after {}", span_words(s)),
                },
            ),
            (
                "People may choose at launch",
                format!(
                    "{} to {} without work (the timeout above if they leave it empty){}",
                    span_words(idle.min_timeout_seconds),
                    span_words(idle.max_timeout_seconds),
                    idle.choice_per_slice
                        .iter()
                        .map(|b| format!(
                            "; {}: {} to {}",
                            format_mib(b.slice_mib),
                            span_words(b.min_timeout_seconds),
                            span_words(b.max_timeout_seconds)
                        ))
                        .collect::<String>()
                ),
            ),
            (
                "By slice",
                or_none(
                    idle.per_slice
                        .iter()
                        .map(|o| {
                            format!(
                                "{}: ends after {}, warns {} before",
                                format_mib(o.slice_mib),
                                span_words(o.timeout_seconds),
                                span_words(o.warn_seconds)
                            )
                        })
                        .collect(),
                ),
            ),
            (
                "Readings kept",
                format!("{} days, one a minute", config.history.retention_days),
            ),
        ],
    )
}

fn image_scans(policy: &ImagePolicyConfig) -> SettingsSection {
    section(
        "Image scans",
        vec![
            (
                "A report is needed",
                if policy.require_scan { "yes" } else { "no" }.to_string(),
            ),
            (
                "Reports count for",
                if policy.max_age_days == 0 {
                    "any age".to_string()
                } else {
                    format!("{} days", policy.max_age_days)
                },
            ),
            (
                "Fixable findings that block",
                match policy.block_fixable_at.as_str() {
                    "none" => "none".to_string(),
                    "critical" => "critical".to_string(),
                    other => format!("{other} or worse"),
                },
            ),
        ],
    )
}

fn single_sign_on(oidc: Option<&OidcConfig>) -> SettingsSection {
    let Some(oidc) = oidc else {
        return section("Single sign-on", vec![("Provider", "none".into())]);
    };
    section(
        "Single sign-on",
        vec![
            (
                "Provider",
                format!("{} ({})", oidc.display_name, oidc.issuer),
            ),
            ("Client", oidc.client_id.clone()),
            ("Name from", oidc.username_claim.clone()),
            (
                "Admins by group",
                if oidc.admin_groups.is_empty() {
                    "off: roles are set here".into()
                } else {
                    oidc.admin_groups.join(", ")
                },
            ),
        ],
    )
}

fn promotion(promotion: &PromotionConfig) -> SettingsSection {
    if !promotion.enabled() {
        return section(
            "Promotion",
            vec![("Registry", "none: promotion is off".into())],
        );
    }
    section(
        "Promotion",
        vec![
            ("Registry", promotion.registry.clone()),
            (
                "Artifacts land at",
                format!("{}<user>/<name>:<tag>", promotion.repository_prefix),
            ),
            (
                "Pushed as",
                if promotion.username.is_empty() {
                    "anonymous".into()
                } else {
                    promotion.username.clone()
                },
            ),
            ("Approval by an admin", yes_no(promotion.require_approval)),
            ("Largest file", format_mib(promotion.max_file_mib)),
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_say_what_runs_and_never_a_secret() {
        let mut config = crate::config::Config {
            database_url: "postgres://sandbox:hunter2@db:5432/sandbox".into(),
            oidc: Some(
                serde_json::from_value(serde_json::json!({
                    "issuer": "https://id.example",
                    "client_id": "sandbox",
                    "client_secret": "very-secret",
                    "redirect_url": "https://sandbox.example/auth/oidc/callback",
                    "admin_groups": ["gpu-admins"],
                }))
                .unwrap(),
            ),
            promotion: crate::config::promotion::PromotionConfig {
                registry: "https://registry.example".into(),
                username: "pusher".into(),
                password: "registry-secret".into(),
                ..Default::default()
            },
            ..crate::config::Config::default()
        };
        config.pool.prices = vec![crate::config::Price {
            model: "Virtual".into(),
            slice_mib: 8_192,
            per_hour: "1".into(),
        }];
        let gpu = app::domain::pool::GpuSpec {
            id: "virtual-0".into(),
            model: "Virtual".into(),
            memory_mib: 49_152,
            slice_mib: 8_192,
            hold: app::domain::hold::SliceHold::None,
            device_minor: None,
            mig: None,
        };
        let editors = [
            (EditorKind::JupyterLab, Ok(())),
            (EditorKind::Marimo, Err("not installed".to_string())),
        ];
        let isolation = Ok("a sandbox per editor".to_string());
        let sections = settings(&config, &[gpu], "not enforced", &editors, &isolation);
        let json = serde_json::to_string(&sections).unwrap();
        assert!(
            !json.contains("hunter2")
                && !json.contains("very-secret")
                && !json.contains("registry-secret"),
            "{json}"
        );
        let value = |title: &str, key: &str| {
            sections
                .iter()
                .find(|s| s.title == title)
                .and_then(|s| s.entries.iter().find(|(k, _)| k == key))
                .map(|(_, v)| v.clone())
                .unwrap_or_else(|| panic!("{title} / {key} in {json}"))
        };
        assert_eq!(
            value("Server", "Database"),
            "PostgreSQL (SANDBOX_DATABASE_URL)"
        );
        assert_eq!(value("Editors", "marimo"), "unavailable: not installed");
        assert_eq!(value("Editors", "JupyterLab"), "available");
        assert_eq!(value("Editors", "Isolation"), "a sandbox per editor");
        assert_eq!(
            value("Pool", "GPUs"),
            "virtual-0 (Virtual, 48 GB, slices of 8 GB, no limit)"
        );
        assert_eq!(value("Pool", "Slice limits"), "not enforced");
        assert_eq!(value("Credits", "Starting grant"), "100 credits");
        assert_eq!(
            value("Credits", "Default price"),
            "0.125 credits per GiB-hour"
        );
        assert_eq!(
            value("Credits", "Prices"),
            "Virtual 8 GB: 1 credit per hour",
            "one credit is singular"
        );
        assert_eq!(value("Single sign-on", "Admins by group"), "gpu-admins");
        assert_eq!(value("Promotion", "Pushed as"), "pusher");
        assert_eq!(value("Promotion", "Approval by an admin"), "yes");
        assert_eq!(
            value("Default quota", "Sessions at once"),
            config.quotas.max_sessions.to_string()
        );
    }
}
