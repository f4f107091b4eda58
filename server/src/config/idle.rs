//! `[idle]`: the reaper, and what counts as activity.

use super::InvalidKey;
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
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdleOverride {
    pub slice_mib: u64,
    pub timeout_seconds: u64,
    pub warn_seconds: u64,
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
        if self.reaper_period_ms < 50 || self.sample_seconds == 0 {
            return Err(InvalidKey::new(
                "idle.reaper_period_ms",
                "must be at least 50 ms (and idle.sample_seconds at least 1)",
            ));
        }
        for (n, o) in self.per_slice.iter().enumerate() {
            if o.timeout_seconds == 0 || o.warn_seconds >= o.timeout_seconds {
                return Err(InvalidKey::new(
                    format!("idle.per_slice[{n}].warn_seconds"),
                    TIMEOUT_AND_WARNING,
                ));
            }
        }
        Ok(())
    }
}
