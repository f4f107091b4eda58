//! The policies the simulator compares: ours (the real reaper, with the configuration's
//! defaults) and the peers' published defaults, each a small pure rule over what that product
//! can observe of a minute of the trace. The peers' rules are ours to write (their code is not
//! in this repository); each names its source.
//!
//! - JupyterHub's idle-culler (`--timeout=600`, `--cull-every=300`, its defaults): a server's
//!   `last_activity` is the hub's, which any proxied request moves, so an open tab's polling
//!   counts (jupyterhub#3008, idle-culler#77), as do typing and a kernel's messages; a job run
//!   from a terminal with no browser does not (jupyterhub#1498, idle-culler#10).
//! - The zero-to-jupyterhub chart (`cull.timeout: 3600`, `cull.every: 600`): the same rule.
//! - Kubeflow's notebook culler (`CULL_IDLE_TIME=1440` minutes, checked every minute): only the
//!   kernels' `execution_state` and `last_activity` count.
//! - Coder's autostop: connection-based; every minute with a connection (a tab, an IDE, an app
//!   reached over a token) bumps the deadline to an hour on (coder#12012: an open tab keeps it).
//! - SageMaker Studio's idle shutdown: kernel or terminal activity (typing) counts, open tabs
//!   do not; the user picks the timeout within bounds the admin sets (60-240 minutes here).

use super::trace::{API, CPU, GPU, HIDDEN, INPUT, KERNEL, TAB};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// The product's reaper with its configured defaults: sessions with no work parked after
    /// `idle.park_after_seconds`, their GPU given back, their kernels kept; as the local runtime
    /// does today, only those holding no GPU memory.
    Ours,
    /// Ours, with idle sessions of a size launches wait for ended after
    /// [`SOONER_SECONDS`] (`idle.pressure_timeout_seconds`).
    OursSooner,
    /// Ours with parking off (`idle.park_after_seconds = 0`): only ends give slices back.
    OursNoParking,
    /// [`Policy::Ours`] where editors holding GPU memory park too, their memory set aside (CUDA
    /// checkpoint, which needs a GPU machine to build and test).
    OursCheckpoint,
    JupyterHub,
    Z2jh,
    Kubeflow,
    Coder,
    SageMaker,
}

/// The pressure timeout [`Policy::OursSooner`] runs with.
pub const SOONER_SECONDS: u64 = 600;

/// SageMaker Studio's admin bounds on the idle timeout a user picks, in minutes.
pub const SAGEMAKER_BOUNDS: (u32, u32) = (60, 240);

impl Policy {
    pub const ALL: [Policy; 9] = [
        Policy::Ours,
        Policy::OursSooner,
        Policy::OursNoParking,
        Policy::OursCheckpoint,
        Policy::JupyterHub,
        Policy::Z2jh,
        Policy::Kubeflow,
        Policy::Coder,
        Policy::SageMaker,
    ];

    /// The product's own reaper decides (with our signals, warning and timer).
    pub fn is_ours(self) -> bool {
        matches!(
            self,
            Policy::Ours | Policy::OursSooner | Policy::OursNoParking | Policy::OursCheckpoint
        )
    }

    pub fn name(self) -> &'static str {
        match self {
            Policy::Ours => "ours",
            Policy::OursSooner => "ours, sooner while launches wait",
            Policy::OursNoParking => "ours, no parking",
            Policy::OursCheckpoint => "ours, with GPU checkpoint",
            Policy::JupyterHub => "jupyterhub-idle-culler",
            Policy::Z2jh => "z2jh",
            Policy::Kubeflow => "kubeflow",
            Policy::Coder => "coder",
            Policy::SageMaker => "sagemaker-studio",
        }
    }

    /// Whether a minute with these observations counts as activity for this policy (None for
    /// ours: the real service judges it from the signals the simulator records).
    pub fn counts(self, minute: u16) -> Option<bool> {
        let any = |flags: u16| minute & flags != 0;
        match self {
            Policy::Ours | Policy::OursSooner | Policy::OursNoParking | Policy::OursCheckpoint => {
                None
            }
            Policy::JupyterHub | Policy::Z2jh => Some(any(INPUT | TAB | HIDDEN | KERNEL | API)),
            Policy::Kubeflow => Some(any(KERNEL)),
            Policy::Coder => Some(any(INPUT | TAB | HIDDEN | API)),
            Policy::SageMaker => Some(any(INPUT | KERNEL)),
        }
    }

    /// (timeout, how often it looks), in minutes; `user_min` is what the user picked where the
    /// policy lets them (SageMaker Studio).
    pub fn timing(self, user_min: u32) -> Option<(u32, u32)> {
        match self {
            Policy::Ours | Policy::OursSooner | Policy::OursNoParking | Policy::OursCheckpoint => {
                None
            }
            Policy::JupyterHub => Some((10, 5)),
            Policy::Z2jh => Some((60, 10)),
            Policy::Kubeflow => Some((1440, 1)),
            Policy::Coder => Some((60, 1)),
            Policy::SageMaker => Some((user_min.clamp(SAGEMAKER_BOUNDS.0, SAGEMAKER_BOUNDS.1), 1)),
        }
    }

    /// Whether the policy ends a session at minute `now`: it looks only every `period` minutes
    /// (counted from the month's start), and ends a session whose last counted activity (or its
    /// start) is at least the timeout ago.
    pub fn ends(self, last_active: u32, now: u32, user_min: u32) -> bool {
        match self.timing(user_min) {
            None => false,
            Some((timeout, period)) => now.is_multiple_of(period) && now >= last_active + timeout,
        }
    }

    /// Whether the work in this minute would be visible to the product at all (used in the
    /// wrongful-reclaim reasons): CPU or GPU work outside a kernel is not, for most peers.
    pub fn sees_job(self, minute: u16) -> bool {
        match self {
            Policy::Ours | Policy::OursSooner | Policy::OursNoParking | Policy::OursCheckpoint => {
                minute & (KERNEL | GPU | CPU | API | INPUT) != 0
            }
            _ => self.counts(minute) == Some(true),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_open_tab_keeps_jupyterhub_and_coder_but_not_kubeflow_or_sagemaker() {
        assert_eq!(Policy::JupyterHub.counts(TAB), Some(true));
        assert_eq!(Policy::Coder.counts(HIDDEN), Some(true));
        assert_eq!(Policy::Kubeflow.counts(TAB), Some(false));
        assert_eq!(Policy::SageMaker.counts(TAB), Some(false));
    }

    #[test]
    fn a_job_without_a_browser_or_kernel_counts_for_no_peer() {
        for p in Policy::ALL.into_iter().filter(|p| !p.is_ours()) {
            assert_eq!(p.counts(GPU | CPU), Some(false), "{}", p.name());
        }
        assert!(Policy::Ours.sees_job(GPU | CPU));
    }

    #[test]
    fn the_culler_looks_only_every_period() {
        // Idle since minute 0; the 600 s timeout is reached at 10, a look falls on 10.
        assert!(!Policy::JupyterHub.ends(0, 9, 0));
        assert!(Policy::JupyterHub.ends(0, 10, 0));
        // Idle since 1: due at 11, seen at 15.
        assert!(!Policy::JupyterHub.ends(1, 11, 0));
        assert!(Policy::JupyterHub.ends(1, 15, 0));
    }

    #[test]
    fn sagemaker_keeps_the_users_choice_within_the_admins_bounds() {
        assert_eq!(Policy::SageMaker.timing(30), Some((60, 1)));
        assert_eq!(Policy::SageMaker.timing(120), Some((120, 1)));
        assert_eq!(Policy::SageMaker.timing(600), Some((240, 1)));
    }
}
