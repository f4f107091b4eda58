//! `[idle]`: the reaper, and what counts as activity.

use super::InvalidKey;
use app::domain::idle::TimeoutChoice;
use serde::{Deserialize, Serialize};

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
    /// With no page of the session open (none has beaten for three minutes) and no script ever
    /// calling it, a session ends after this long without work instead: a closed laptop, a tab
    /// left in the background or a finished job. 0 turns it off, and one no shorter than a
    /// slice's timeout leaves that timeout alone; a chosen timeout replaces it.
    #[serde(default = "default_away_timeout")]
    pub away_timeout_seconds: u64,
    /// With no work this long, whatever its page, a session gives its GPU slice back and keeps
    /// its editor frozen, kernels and files kept, until its person types or its scripts call
    /// (where the runtime can freeze editors: locally). 0 turns it off.
    #[serde(default = "default_park_after")]
    pub park_after_seconds: u64,
    /// The shortest idle timeout a person may choose at launch, in whole minutes' seconds; an
    /// empty choice keeps the slice's `timeout_seconds`, and the bounds always include it.
    #[serde(default = "default_min_timeout")]
    pub min_timeout_seconds: u64,
    /// The longest idle timeout a person may choose: how long a forgotten session may hold its
    /// slice at most.
    #[serde(default = "default_max_timeout")]
    pub max_timeout_seconds: u64,
    /// Other bounds for some slice sizes, e.g. none to choose on whole cards.
    #[serde(default)]
    pub choice_per_slice: Vec<IdleChoiceBounds>,
}

/// Ten minutes: twice the default warning, so a chosen timeout still warns for five minutes
/// before it ends anything, and twenty samples of busy work.
pub const DEFAULT_MIN_TIMEOUT_SECONDS: u64 = 600;
/// Two hours: four times the default, room for a person who reads or meets between cells (and
/// for scripts calling every half hour, which the default ends: BENCHMARKS.md, section 14),
/// while a session left behind holds its slice two hours at most.
pub const DEFAULT_MAX_TIMEOUT_SECONDS: u64 = 7200;

/// Fifteen minutes, for sessions nobody looks at: a session left behind holds its slice five
/// minutes (it parks) and ends at 18 with the page's three to count as gone, not the 30 of the
/// timeout. Ten ended a reader's work once a month in the simulated month, fifteen none, and
/// parking makes up the idle share (BENCHMARKS.md, section 14).
pub const DEFAULT_AWAY_TIMEOUT_SECONDS: u64 = 900;

/// Five minutes with no work: the slice goes back while the session keeps everything, so a
/// pause costs a resume (at once while its card has a free slot), never work. In the simulated
/// month it left 3.1 % of slice time idle (1.3 % where editors holding GPU memory park too).
pub const DEFAULT_PARK_AFTER_SECONDS: u64 = 300;

fn default_away_timeout() -> u64 {
    DEFAULT_AWAY_TIMEOUT_SECONDS
}

fn default_park_after() -> u64 {
    DEFAULT_PARK_AFTER_SECONDS
}

fn default_min_timeout() -> u64 {
    DEFAULT_MIN_TIMEOUT_SECONDS
}

fn default_max_timeout() -> u64 {
    DEFAULT_MAX_TIMEOUT_SECONDS
}

/// The idle timeouts a person may choose for one slice size.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdleChoiceBounds {
    pub slice_mib: u64,
    pub min_timeout_seconds: u64,
    pub max_timeout_seconds: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdleOverride {
    pub slice_mib: u64,
    pub timeout_seconds: u64,
    pub warn_seconds: u64,
    /// Parking for this size instead of `idle.park_after_seconds` (0: never).
    #[serde(default)]
    pub park_after_seconds: Option<u64>,
}

/// Why a timeout and its warning cannot be used together.
const TIMEOUT_AND_WARNING: &str =
    "the timeout must be at least 1 s and the warning shorter than it";

impl IdleConfig {
    /// Checks what serde cannot; the error names the key. Whether `per_slice`'s sizes exist in
    /// the pool is [`super::Config::validate`]'s to say.
    pub fn validate(&self) -> Result<(), InvalidKey> {
        if self.timeout_seconds == 0 || self.warn_seconds >= self.timeout_seconds {
            return Err(InvalidKey::new("idle.warn_seconds", TIMEOUT_AND_WARNING));
        }
        if self.pressure_timeout_seconds != 0
            && (self.pressure_timeout_seconds < 2 * self.sample_seconds.max(30)
                || self.pressure_timeout_seconds >= self.timeout_seconds)
        {
            return Err(InvalidKey::new(
                "idle.pressure_timeout_seconds",
                "must be 0 (off), or at least two samples (60 s) and shorter than idle.timeout_seconds",
            ));
        }
        if self.away_timeout_seconds != 0 && self.away_timeout_seconds < 60 {
            return Err(InvalidKey::new(
                "idle.away_timeout_seconds",
                "must be 0 (off) or at least 60 s (one no shorter than a timeout leaves it alone)",
            ));
        }
        self.check_park("idle.park_after_seconds", self.park_after_seconds)?;
        if self.reaper_period_ms < 50 || self.sample_seconds == 0 {
            return Err(InvalidKey::new(
                "idle.reaper_period_ms",
                "must be at least 50 ms (and idle.sample_seconds at least 1)",
            ));
        }
        check_bounds(
            "idle.min_timeout_seconds",
            self.min_timeout_seconds,
            self.max_timeout_seconds,
        )?;
        for (n, b) in self.choice_per_slice.iter().enumerate() {
            check_bounds(
                &format!("idle.choice_per_slice[{n}].min_timeout_seconds"),
                b.min_timeout_seconds,
                b.max_timeout_seconds,
            )?;
        }
        for (n, o) in self.per_slice.iter().enumerate() {
            if o.timeout_seconds == 0 || o.warn_seconds >= o.timeout_seconds {
                return Err(InvalidKey::new(
                    format!("idle.per_slice[{n}].warn_seconds"),
                    TIMEOUT_AND_WARNING,
                ));
            }
            if let Some(park) = o.park_after_seconds {
                self.check_park(&format!("idle.per_slice[{n}].park_after_seconds"), park)?;
            }
        }
        Ok(())
    }

    /// A park time is off, or at least two samples (so busy work is seen first).
    fn check_park(&self, key: &str, park: u64) -> Result<(), InvalidKey> {
        if park != 0 && park < 2 * self.sample_seconds.max(30) {
            return Err(InvalidKey::new(
                key,
                "must be 0 (off) or at least two samples (60 s); one no shorter than a timeout \
                 never parks that size",
            ));
        }
        Ok(())
    }
}

/// Bounds of a chosen timeout: whole minutes, at least one, the shortest no longer than the
/// longest (the form offers minutes).
fn check_bounds(key: &str, min: u64, max: u64) -> Result<(), InvalidKey> {
    if min < 60 || min > max || !min.is_multiple_of(60) || !max.is_multiple_of(60) {
        return Err(InvalidKey::new(
            key,
            "the idle timeouts a person may choose must be whole minutes (a multiple of 60 s), \
             at least 60 s, the shortest no longer than the longest (max_timeout_seconds)",
        ));
    }
    Ok(())
}

impl IdleConfig {
    /// What a person may choose for `slice_mib`, around its timeout (`per_slice`'s or
    /// `timeout_seconds`, which the bounds always include).
    pub fn choice(&self, slice_mib: u64) -> TimeoutChoice {
        let default_seconds = self
            .per_slice
            .iter()
            .find(|o| o.slice_mib == slice_mib)
            .map_or(self.timeout_seconds, |o| o.timeout_seconds);
        let (min, max) = self
            .choice_per_slice
            .iter()
            .find(|b| b.slice_mib == slice_mib)
            .map(|b| (b.min_timeout_seconds, b.max_timeout_seconds))
            .unwrap_or((self.min_timeout_seconds, self.max_timeout_seconds));
        let default_minutes = default_seconds.div_ceil(60) as u32;
        TimeoutChoice {
            min_minutes: ((min / 60) as u32).min(default_minutes),
            max_minutes: ((max / 60) as u32).max(default_minutes),
            default_minutes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bounds_always_hold_the_default_and_a_size_may_have_its_own() {
        let mut idle = crate::config::Config::default().idle;
        assert_eq!(
            idle.choice(8192),
            TimeoutChoice {
                min_minutes: 10,
                max_minutes: 120,
                default_minutes: 30
            }
        );
        idle.per_slice.push(IdleOverride {
            slice_mib: 16384,
            timeout_seconds: 300,
            warn_seconds: 60,
            park_after_seconds: None,
        });
        assert_eq!(idle.choice(16384).min_minutes, 5);
        idle.choice_per_slice.push(IdleChoiceBounds {
            slice_mib: 49152,
            min_timeout_seconds: 1800,
            max_timeout_seconds: 1800,
        });
        assert!(!idle.choice(49152).open());
        idle.validate().unwrap();
        idle.choice_per_slice[0].max_timeout_seconds = 90;
        let err = idle.validate().unwrap_err();
        assert_eq!(err.0, "idle.choice_per_slice[0].min_timeout_seconds");
        idle.choice_per_slice.clear();
        idle.max_timeout_seconds = 300;
        assert_eq!(idle.validate().unwrap_err().0, "idle.min_timeout_seconds");
    }
}
