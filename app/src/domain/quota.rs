//! Per-user limits: how many sessions, how much GPU memory, how long, how much disk.

use super::pool::format_mib;
use serde::{Deserialize, Serialize};

/// The limits that apply to one user: the configured defaults with the user's overrides.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    pub max_sessions: u32,
    pub max_gpu_mib: u64,
    pub max_minutes: u32,
    pub max_disk_mib: u64,
}

/// An admin's per-user exceptions; `None` keeps the default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Overrides {
    pub max_sessions: Option<u32>,
    pub max_gpu_mib: Option<u64>,
    pub max_minutes: Option<u32>,
    pub max_disk_mib: Option<u64>,
}

/// A change to some of a user's overrides: `None` keeps the value there is, `Some(None)` puts
/// the configured default back. As JSON, a key left out keeps its value and `null` is the default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OverridesChange {
    #[serde(default, deserialize_with = "present")]
    pub max_sessions: Option<Option<u32>>,
    #[serde(default, deserialize_with = "present")]
    pub max_gpu_mib: Option<Option<u64>>,
    #[serde(default, deserialize_with = "present")]
    pub max_minutes: Option<Option<u32>>,
    #[serde(default, deserialize_with = "present")]
    pub max_disk_mib: Option<Option<u64>>,
}

/// A key that is there, null or not (`serde(default)` makes one left out `None`).
fn present<'de, T, D>(deserializer: D) -> Result<Option<Option<T>>, D::Error>
where
    T: Deserialize<'de>,
    D: serde::Deserializer<'de>,
{
    <Option<T> as Deserialize>::deserialize(deserializer).map(Some)
}

impl Overrides {
    /// The overrides in words, for the audit log: each limit's value, or "default".
    pub fn describe(&self) -> String {
        let or_default = |value: Option<String>| value.unwrap_or_else(|| "default".into());
        format!(
            "sessions {} · GPU memory {} · minutes per session {} · workspace {}",
            or_default(self.max_sessions.map(|n| n.to_string())),
            or_default(self.max_gpu_mib.map(format_mib)),
            or_default(self.max_minutes.map(|n| n.to_string())),
            or_default(self.max_disk_mib.map(format_mib)),
        )
    }
}

impl OverridesChange {
    pub fn applied_to(self, current: Overrides) -> Overrides {
        Overrides {
            max_sessions: self.max_sessions.unwrap_or(current.max_sessions),
            max_gpu_mib: self.max_gpu_mib.unwrap_or(current.max_gpu_mib),
            max_minutes: self.max_minutes.unwrap_or(current.max_minutes),
            max_disk_mib: self.max_disk_mib.unwrap_or(current.max_disk_mib),
        }
    }
}

impl Limits {
    pub fn with(self, o: &Overrides) -> Limits {
        Limits {
            max_sessions: o.max_sessions.unwrap_or(self.max_sessions),
            max_gpu_mib: o.max_gpu_mib.unwrap_or(self.max_gpu_mib),
            max_minutes: o.max_minutes.unwrap_or(self.max_minutes),
            max_disk_mib: o.max_disk_mib.unwrap_or(self.max_disk_mib),
        }
    }
}

/// What a user holds right now: live sessions (queued included) and their GPU memory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub sessions: u32,
    pub gpu_mib: u64,
    /// The workspace's measured size; `None` when the runtime cannot measure it.
    pub disk_mib: Option<u64>,
}

/// Whether one more session of `slice_mib` for `minutes` fits; the error names the limit and the use.
pub fn check(limits: &Limits, usage: &Usage, slice_mib: u64, minutes: u32) -> Result<(), String> {
    if minutes > limits.max_minutes {
        return Err(format!(
            "Your limit is {} minutes per session; you asked for {minutes}.",
            limits.max_minutes
        ));
    }
    if usage.sessions >= limits.max_sessions {
        return Err(format!(
            "Your limit is {} concurrent session{}, and you have {} running or queued. Stop one first.",
            limits.max_sessions,
            if limits.max_sessions == 1 { "" } else { "s" },
            usage.sessions
        ));
    }
    if usage.gpu_mib + slice_mib > limits.max_gpu_mib {
        return Err(format!(
            "Your limit is {} of GPU memory at once; you hold {} and asked for {} more.",
            format_mib(limits.max_gpu_mib),
            format_mib(usage.gpu_mib),
            format_mib(slice_mib)
        ));
    }
    if let Some(disk) = usage.disk_mib
        && disk > limits.max_disk_mib
    {
        return Err(format!(
            "Your workspace uses {} of its {} limit. Delete files to launch again.",
            format_mib(disk),
            format_mib(limits.max_disk_mib)
        ));
    }
    Ok(())
}

/// What the server offers, which a user's limits must leave room for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Offered {
    /// The smallest slice in the pool; `None` while it has none.
    pub smallest_slice_mib: Option<u64>,
    /// The shortest and longest session (`sessions.min_minutes`, `sessions.max_minutes`).
    pub min_minutes: u32,
    pub max_minutes: u32,
}

/// The smallest workspace limit an editor starts in: its settings, caches and a notebook or two.
pub const MIN_DISK_MIB: u64 = 100;

/// Why `overrides` would give their user limits nobody can launch with (or, for the minutes,
/// limits that mean nothing), naming what the server offers; each problem, joined. The way to
/// stop someone's launches is 0 sessions, which is always allowed.
pub fn unusable(overrides: &Overrides, offered: &Offered) -> Result<(), String> {
    let mut problems = Vec::new();
    if let (Some(gpu), Some(smallest)) = (overrides.max_gpu_mib, offered.smallest_slice_mib)
        && gpu < smallest
    {
        problems.push(format!(
            "GPU memory {} is less than the smallest slice, {}: no launch would fit (to stop launches, set sessions to 0)",
            format_mib(gpu),
            format_mib(smallest)
        ));
    }
    match overrides.max_minutes {
        Some(m) if m < offered.min_minutes => problems.push(format!(
            "{m} minutes is shorter than the shortest session, {} minutes",
            offered.min_minutes
        )),
        Some(m) if m > offered.max_minutes => problems.push(format!(
            "{m} minutes is longer than the longest session, {} minutes, which bounds everyone",
            offered.max_minutes
        )),
        _ => {}
    }
    if let Some(disk) = overrides.max_disk_mib
        && disk < MIN_DISK_MIB
    {
        problems.push(format!(
            "a workspace of {} is too small for an editor to start in (at least {})",
            format_mib(disk),
            format_mib(MIN_DISK_MIB)
        ));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!("Not saved: {}.", problems.join("; ")))
    }
}

/// What bounds a session's extension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExtensionLimits {
    /// The user's own limit per session ([`Limits::max_minutes`]).
    pub user_max_minutes: u32,
    /// The server's longest session (`sessions.max_minutes`): also the most one extension adds.
    pub server_max_minutes: u32,
    /// The longest whole-card session (`pool.burst_max_minutes`).
    pub burst_max_minutes: u32,
}

/// Why a session cannot be extended.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ExtensionRefused {
    #[error("extend by 1 to {max} minutes, not {asked}")]
    Minutes { asked: u32, max: u32 },
    #[error("only a running session can be extended")]
    NotRunning,
    /// Its time ran out: the reaper is ending it, and more time would only be refunded.
    #[error("this session's time is up; it is being stopped")]
    TimeUp,
    #[error(
        "A session may last at most {max_total} minutes; this one has {duration}, so it can grow by {} more.",
        max_total.saturating_sub(*duration)
    )]
    TooLong { max_total: u32, duration: u32 },
}

/// The session an extension is asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extended {
    pub running: bool,
    pub burst: bool,
    pub ends_at: Option<i64>,
    /// Its duration so far, in minutes.
    pub duration_minutes: u32,
}

/// Whether `session` may run `minutes` longer at `now`. A user's own limit may be lower than
/// the server's longest session, never higher; a burst is bounded by its own maximum too.
pub fn extension(
    limits: &ExtensionLimits,
    session: &Extended,
    minutes: u32,
    now: i64,
) -> Result<(), ExtensionRefused> {
    if minutes == 0 || minutes > limits.server_max_minutes {
        return Err(ExtensionRefused::Minutes {
            asked: minutes,
            max: limits.server_max_minutes,
        });
    }
    if !session.running {
        return Err(ExtensionRefused::NotRunning);
    }
    if session.ends_at.is_some_and(|end| end <= now) {
        return Err(ExtensionRefused::TimeUp);
    }
    let mut max_total = limits.user_max_minutes.min(limits.server_max_minutes);
    if session.burst {
        max_total = max_total.min(limits.burst_max_minutes);
    }
    if session.duration_minutes + minutes > max_total {
        return Err(ExtensionRefused::TooLong {
            max_total,
            duration: session.duration_minutes,
        });
    }
    Ok(())
}

/// A quota's GB field as typed (`8`, `12.5`, `0.25`): its MiB, 1 GB being 1024 MiB as
/// everywhere on the pages; None unless it is a plain non-negative decimal. Read by hand, in
/// integers, so the browser bundle carries no float parsing.
pub fn gb_to_mib(text: &str) -> Option<u64> {
    let text = text.trim();
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() && fraction.is_empty() || !digits(whole) || !digits(fraction) {
        return None;
    }
    let whole: u64 = if whole.is_empty() {
        0
    } else {
        whole.parse().ok()?
    };
    let fraction = &fraction[..fraction.len().min(6)];
    let scale = 10u64.pow(fraction.len() as u32);
    let parts: u64 = if fraction.is_empty() {
        0
    } else {
        fraction.parse().ok()?
    };
    whole
        .checked_mul(1024)?
        .checked_add((parts * 1024 + scale / 2) / scale)
}

/// MiB as a quota's GB field shows them: whole GB plainly, else to two decimals at most.
pub fn mib_to_gb(mib: u64) -> String {
    let hundredths = (mib * 100 + 512) / 1024;
    match hundredths % 100 {
        0 => format!("{}", hundredths / 100),
        h if h % 10 == 0 => format!("{}.{}", hundredths / 100, h / 10),
        h => format!("{}.{h:02}", hundredths / 100),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_read_as_words_in_the_audit_log() {
        let overrides = Overrides {
            max_sessions: Some(2),
            max_gpu_mib: Some(16_384),
            max_minutes: None,
            max_disk_mib: Some(512),
        };
        assert_eq!(
            overrides.describe(),
            "sessions 2 · GPU memory 16 GB · minutes per session default · workspace 512 MB"
        );
    }

    #[test]
    fn a_change_touches_only_what_it_names() {
        let current = Overrides {
            max_sessions: Some(1),
            max_gpu_mib: Some(4096),
            max_minutes: None,
            max_disk_mib: Some(100),
        };
        assert_eq!(OverridesChange::default().applied_to(current), current);
        let read = |json: &str| serde_json::from_str::<OverridesChange>(json);
        assert_eq!(
            read(r#"{"max_minutes": 45, "max_gpu_mib": null}"#).unwrap(),
            OverridesChange {
                max_minutes: Some(Some(45)),
                max_gpu_mib: Some(None),
                ..OverridesChange::default()
            },
            "left out, null, and a value are three things"
        );
        assert!(read(r#"{"max_minute": 45}"#).is_err());
        let change = OverridesChange {
            max_minutes: Some(Some(45)),
            max_gpu_mib: Some(None),
            ..OverridesChange::default()
        };
        assert_eq!(
            change.applied_to(current),
            Overrides {
                max_sessions: Some(1),
                max_gpu_mib: None,
                max_minutes: Some(45),
                max_disk_mib: Some(100),
            }
        );
    }

    const LIMITS: Limits = Limits {
        max_sessions: 2,
        max_gpu_mib: 16384,
        max_minutes: 240,
        max_disk_mib: 10240,
    };

    fn usage(sessions: u32, gpu_mib: u64, disk_mib: Option<u64>) -> Usage {
        Usage {
            sessions,
            gpu_mib,
            disk_mib,
        }
    }

    #[test]
    fn within_every_limit_passes() {
        assert_eq!(
            check(&LIMITS, &usage(1, 8192, Some(100)), 8192, 240),
            Ok(())
        );
    }

    #[test]
    fn each_limit_refuses_with_the_limit_and_the_use() {
        let e = check(&LIMITS, &usage(2, 0, None), 8192, 60).unwrap_err();
        assert!(
            e.contains("2 concurrent sessions") && e.contains("you have 2"),
            "{e}"
        );
        let e = check(&LIMITS, &usage(1, 16384, None), 8192, 60).unwrap_err();
        assert!(e.contains("16 GB") && e.contains("hold 16 GB"), "{e}");
        let e = check(&LIMITS, &usage(0, 0, None), 8192, 241).unwrap_err();
        assert!(e.contains("240 minutes") && e.contains("241"), "{e}");
        let e = check(&LIMITS, &usage(0, 0, Some(10241)), 8192, 60).unwrap_err();
        assert!(e.contains("10.0 GB") && e.contains("limit"), "{e}");
    }

    #[test]
    fn a_slice_that_would_cross_the_memory_limit_is_refused() {
        assert!(check(&LIMITS, &usage(1, 8193, None), 8192, 60).is_err());
        assert!(check(&LIMITS, &usage(1, 8192, None), 8192, 60).is_ok());
    }

    #[test]
    fn overrides_replace_only_what_they_set() {
        let limits = LIMITS.with(&Overrides {
            max_sessions: Some(5),
            ..Overrides::default()
        });
        assert_eq!(limits.max_sessions, 5);
        assert_eq!(limits.max_gpu_mib, LIMITS.max_gpu_mib);
        assert_eq!(limits.max_disk_mib, LIMITS.max_disk_mib);
    }

    const NOW: i64 = 1_800_000_000_000;

    fn limits() -> ExtensionLimits {
        ExtensionLimits {
            user_max_minutes: 240,
            server_max_minutes: 480,
            burst_max_minutes: 60,
        }
    }

    fn running(duration_minutes: u32) -> Extended {
        Extended {
            running: true,
            burst: false,
            ends_at: Some(NOW + 60_000),
            duration_minutes,
        }
    }

    #[test]
    fn a_running_session_grows_up_to_the_users_limit() {
        assert_eq!(extension(&limits(), &running(60), 180, NOW), Ok(()));
        let refused = extension(&limits(), &running(60), 181, NOW).unwrap_err();
        assert_eq!(
            refused,
            ExtensionRefused::TooLong {
                max_total: 240,
                duration: 60
            }
        );
        assert!(
            refused.to_string().contains("grow by 180 more"),
            "{refused}"
        );
    }

    #[test]
    fn the_servers_longest_session_bounds_a_generous_user_limit() {
        let generous = ExtensionLimits {
            user_max_minutes: 10_000,
            ..limits()
        };
        assert!(matches!(
            extension(&generous, &running(60), 421, NOW),
            Err(ExtensionRefused::TooLong { max_total: 480, .. })
        ));
    }

    #[test]
    fn a_burst_is_bounded_by_its_own_maximum() {
        let burst = Extended {
            burst: true,
            ..running(30)
        };
        assert_eq!(extension(&limits(), &burst, 30, NOW), Ok(()));
        assert!(matches!(
            extension(&limits(), &burst, 31, NOW),
            Err(ExtensionRefused::TooLong { max_total: 60, .. })
        ));
    }

    #[test]
    fn nothing_is_added_to_a_session_not_running_or_out_of_time() {
        let stopped = Extended {
            running: false,
            ..running(30)
        };
        assert_eq!(
            extension(&limits(), &stopped, 10, NOW),
            Err(ExtensionRefused::NotRunning)
        );
        let due = Extended {
            ends_at: Some(NOW),
            ..running(30)
        };
        assert_eq!(
            extension(&limits(), &due, 10, NOW),
            Err(ExtensionRefused::TimeUp)
        );
    }

    #[test]
    fn an_extension_asks_for_1_to_the_servers_longest_minutes() {
        for asked in [0, 481] {
            assert_eq!(
                extension(&limits(), &running(0), asked, NOW),
                Err(ExtensionRefused::Minutes { asked, max: 480 })
            );
        }
    }

    const OFFERED: Offered = Offered {
        smallest_slice_mib: Some(8192),
        min_minutes: 15,
        max_minutes: 480,
    };

    #[test]
    fn a_quota_nobody_can_launch_with_is_refused_naming_what_the_server_offers() {
        let none = Overrides::default();
        for (o, says) in [
            (
                Overrides {
                    max_gpu_mib: Some(1000),
                    ..none
                },
                "smallest slice, 8 GB",
            ),
            (
                Overrides {
                    max_minutes: Some(5),
                    ..none
                },
                "shortest session, 15 minutes",
            ),
            (
                Overrides {
                    max_minutes: Some(100_000),
                    ..none
                },
                "longest session, 480 minutes",
            ),
            (
                Overrides {
                    max_disk_mib: Some(1),
                    ..none
                },
                "at least 100 MB",
            ),
        ] {
            let refused = unusable(&o, &OFFERED).unwrap_err();
            assert!(refused.contains(says), "{refused}");
        }
        // All at once: each is named.
        let all = Overrides {
            max_sessions: Some(1),
            max_gpu_mib: Some(1000),
            max_minutes: Some(5),
            max_disk_mib: Some(1),
        };
        let refused = unusable(&all, &OFFERED).unwrap_err();
        assert_eq!(refused.matches("; ").count(), 2, "{refused}");
    }

    #[test]
    fn a_quota_at_the_bounds_or_left_at_the_defaults_is_taken() {
        for o in [
            Overrides::default(),
            Overrides {
                max_sessions: Some(0),
                max_gpu_mib: Some(8192),
                max_minutes: Some(15),
                max_disk_mib: Some(MIN_DISK_MIB),
            },
            Overrides {
                max_minutes: Some(480),
                ..Overrides::default()
            },
        ] {
            assert_eq!(unusable(&o, &OFFERED), Ok(()), "{o:?}");
        }
        // A pool without slices yet bounds no GPU limit.
        let empty = Offered {
            smallest_slice_mib: None,
            ..OFFERED
        };
        let tiny = Overrides {
            max_gpu_mib: Some(1),
            ..Overrides::default()
        };
        assert_eq!(unusable(&tiny, &empty), Ok(()));
    }

    #[test]
    fn gb_fields_read_and_show_as_mib() {
        assert_eq!(gb_to_mib("8"), Some(8192));
        assert_eq!(gb_to_mib(" 12.5 "), Some(12_800));
        assert_eq!(gb_to_mib(".5"), Some(512));
        assert_eq!(gb_to_mib("0"), Some(0));
        for bad in ["", ".", "-1", "1e3", "1,5", "8 GB", "1.2.3"] {
            assert_eq!(gb_to_mib(bad), None, "{bad}");
        }
        assert_eq!(gb_to_mib("99999999999999999999"), None);
        assert_eq!(mib_to_gb(8192), "8");
        assert_eq!(mib_to_gb(12_800), "12.5");
        assert_eq!(mib_to_gb(1000), "0.98");
        for typed in ["8", "12.5", "0.25", "40"] {
            assert_eq!(mib_to_gb(gb_to_mib(typed).unwrap()), typed);
        }
    }
}
