//! The reaper's verdict: which live session ends now, why, and with what words. Pure: the facts
//! about a session in, a decision out; the service gathers the facts and acts on the decision.
//!
//! The order: a locked account keeps nothing (queued and starting sessions included); then, for
//! a running session, its time, then idleness ([`super::idle::Policy`]), then parking (its GPU
//! given back when it has had no work for a while, where the runtime can freeze it), then whether its editor
//! still lives. Liveness is asked last, and only when nothing else ends the session, since asking
//! costs a call to the runtime (a request to the cluster, on Kubernetes).

use super::idle::{self, Policy, Signals};
use super::session::{self, EndReason, SessionState};

/// What the reaper knows about one live session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Watch {
    pub state: SessionState,
    /// Its owner's account is locked.
    pub locked: bool,
    /// When its time runs out.
    pub ends_at: Option<i64>,
    pub signals: Signals,
    /// It has an editor the runtime can be asked about.
    pub has_editor: bool,
    /// What the runtime said when asked whether the editor lives; `None` until asked.
    pub alive: Option<bool>,
    /// Its runtime can freeze its editor and give its slot back (not a burst of whole cards).
    pub can_park: bool,
    /// When it was parked, if it is.
    pub parked_at: Option<i64>,
}

/// What to do with the session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Keep,
    End {
        reason: EndReason,
        /// What the person is told, when the reason's own words do not say enough.
        detail: Option<&'static str>,
    },
    /// Only the editor's liveness is left to decide: ask the runtime, set
    /// [`Watch::alive`], and judge again.
    AskAlive,
    /// No work for the policy's park time: freeze the editor and give its slot back.
    Park,
    /// Parked, and its person typed or its scripts called since: take a slot on its card again.
    Resume,
}

pub const LOCKED: &str = "the account was locked; unused credits were refunded";
pub const CRASHED: &str = "The editor stopped unexpectedly; unused credits were refunded.";
pub const START_OVERDUE: &str = "the editor did not start in time; your credits were refunded";

/// The verdict on one session at `now`, under the idle `policy` for its slice.
pub fn verdict(watch: &Watch, policy: &Policy, now: i64) -> Verdict {
    if watch.locked {
        // A stop under way finishes by itself.
        if watch.state == SessionState::Stopping {
            return Verdict::Keep;
        }
        return Verdict::End {
            reason: EndReason::Admin,
            detail: Some(LOCKED),
        };
    }
    if !matches!(watch.state, SessionState::Ready | SessionState::Parked) {
        return Verdict::Keep;
    }
    if watch.ends_at.is_some_and(|end| end <= now) {
        return Verdict::End {
            reason: EndReason::Timer,
            detail: None,
        };
    }
    if let idle::Verdict::Idle { .. } = policy.judge(&watch.signals, now) {
        return Verdict::End {
            reason: EndReason::Idle,
            detail: None,
        };
    }
    if let Some(parked_at) = watch
        .parked_at
        .filter(|_| watch.state == SessionState::Parked)
    {
        // Frozen: it cannot answer whether it lives, and does nothing until resumed.
        return match idle::wants_gpu_back(&watch.signals, parked_at) {
            true => Verdict::Resume,
            false => Verdict::Keep,
        };
    }
    if watch.can_park && policy.park_at(&watch.signals).is_some_and(|at| at <= now) {
        return Verdict::Park;
    }
    if !watch.has_editor {
        return Verdict::Keep;
    }
    match watch.alive {
        None => Verdict::AskAlive,
        Some(true) => Verdict::Keep,
        Some(false) => Verdict::End {
            reason: EndReason::Crash,
            detail: Some(CRASHED),
        },
    }
}

/// What to do with a launch or a stop that nothing drives any more (its task met a database
/// error, or ran on a replica that died), which would otherwise hold a slot and credits for ever.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Overdue {
    /// A launch that did not become ready in time: it fails, with a refund.
    FailLaunch,
    /// A stop that did not finish: drive it again, for the reason it was begun with.
    DriveStop(EndReason),
}

/// Whether a session `since` in its `state` is overdue at `now`, and what to do then.
pub fn overdue(
    state: SessionState,
    since: i64,
    end_reason: Option<EndReason>,
    ready_timeout_ms: i64,
    now: i64,
) -> Option<Overdue> {
    if !session::overdue(state, since, now, ready_timeout_ms) {
        return None;
    }
    match state {
        SessionState::Starting => Some(Overdue::FailLaunch),
        SessionState::Stopping => Some(Overdue::DriveStop(end_reason.unwrap_or(EndReason::Admin))),
        _ => None,
    }
}

/// One sample of an editor's own activity.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Sample {
    /// What the editor's activity API said of its kernels, if it answered.
    pub editor_busy: Option<bool>,
    /// The GPU ran the editor's work within the last two samples.
    pub gpu_active: bool,
    /// Cores of CPU the editor's processes used over the last sample.
    pub cpu_cores: Option<f64>,
}

/// Whether a sample counts as work (a busy kernel, GPU work, CPU at or above `cpu_floor`
/// cores; a floor of 0 turns CPU off as a signal): a long job without a browser is not idle.
pub fn busy(sample: &Sample, cpu_floor: f64) -> bool {
    let cpu_busy = cpu_floor > 0.0 && sample.cpu_cores.is_some_and(|cores| cores >= cpu_floor);
    sample.editor_busy == Some(true) || sample.gpu_active || cpu_busy
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_800_000_000_000;
    const MINUTE: i64 = 60_000;

    fn policy() -> Policy {
        Policy {
            timeout_ms: 30 * MINUTE,
            warn_ms: 5 * MINUTE,
            open_tab_keeps_alive: false,
            away_ms: 0,
            park_ms: 0,
        }
    }

    /// A session ready ten minutes ago, an hour to go, input a minute ago.
    fn running() -> Watch {
        Watch {
            state: SessionState::Ready,
            locked: false,
            ends_at: Some(NOW + 60 * MINUTE),
            signals: Signals {
                ready_at: NOW - 10 * MINUTE,
                input: Some(NOW - MINUTE),
                ..Signals::default()
            },
            has_editor: true,
            alive: None,
            can_park: true,
            parked_at: None,
        }
    }

    fn ends(reason: EndReason) -> impl Fn(Verdict) -> bool {
        move |v| matches!(v, Verdict::End { reason: r, .. } if r == reason)
    }

    #[test]
    fn a_running_session_in_use_is_kept_once_its_editor_answers() {
        assert_eq!(verdict(&running(), &policy(), NOW), Verdict::AskAlive);
        let alive = Watch {
            alive: Some(true),
            ..running()
        };
        assert_eq!(verdict(&alive, &policy(), NOW), Verdict::Keep);
    }

    #[test]
    fn a_dead_editor_ends_its_session_as_a_crash_with_a_refund_said() {
        let dead = Watch {
            alive: Some(false),
            ..running()
        };
        assert_eq!(
            verdict(&dead, &policy(), NOW),
            Verdict::End {
                reason: EndReason::Crash,
                detail: Some(CRASHED)
            }
        );
    }

    #[test]
    fn time_up_ends_it_before_idleness_or_liveness_is_looked_at() {
        let due = Watch {
            ends_at: Some(NOW),
            signals: Signals {
                ready_at: NOW - 120 * MINUTE,
                ..Signals::default()
            },
            alive: Some(false),
            ..running()
        };
        assert!(ends(EndReason::Timer)(verdict(&due, &policy(), NOW)));
    }

    #[test]
    fn idleness_ends_it_without_asking_the_runtime() {
        let quiet = Watch {
            signals: Signals {
                ready_at: NOW - 40 * MINUTE,
                input: Some(NOW - 30 * MINUTE),
                ..Signals::default()
            },
            ..running()
        };
        assert!(ends(EndReason::Idle)(verdict(&quiet, &policy(), NOW)));
        // A minute less quiet and it is only warned (kept).
        let later = Watch {
            signals: Signals {
                input: Some(NOW - 29 * MINUTE),
                ..quiet.signals
            },
            alive: Some(true),
            ..quiet
        };
        assert_eq!(verdict(&later, &policy(), NOW), Verdict::Keep);
    }

    #[test]
    fn a_quiet_session_parks_before_it_ends_and_wakes_when_wanted() {
        let parking = Policy {
            park_ms: 5 * MINUTE,
            ..policy()
        };
        let quiet = Watch {
            signals: Signals {
                ready_at: NOW - 40 * MINUTE,
                input: Some(NOW - 5 * MINUTE),
                ..Signals::default()
            },
            ..running()
        };
        assert_eq!(verdict(&quiet, &parking, NOW), Verdict::Park);
        assert_eq!(verdict(&quiet, &parking, NOW - 1), Verdict::AskAlive);
        assert_eq!(verdict(&quiet, &policy(), NOW), Verdict::AskAlive);
        let cannot = Watch {
            can_park: false,
            ..quiet
        };
        assert_eq!(verdict(&cannot, &parking, NOW), Verdict::AskAlive);
        let parked = Watch {
            state: SessionState::Parked,
            parked_at: Some(NOW - MINUTE),
            ..quiet
        };
        assert_eq!(verdict(&parked, &parking, NOW), Verdict::Keep);
        let typed = Watch {
            signals: Signals {
                input: Some(NOW),
                ..parked.signals
            },
            ..parked
        };
        assert_eq!(verdict(&typed, &parking, NOW), Verdict::Resume);
        // The end rules still hold while parked: idle at 30 minutes, the timer.
        assert!(ends(EndReason::Idle)(verdict(
            &parked,
            &parking,
            NOW + 25 * MINUTE
        )));
        let due = Watch {
            ends_at: Some(NOW),
            ..typed
        };
        assert!(ends(EndReason::Timer)(verdict(&due, &parking, NOW)));
        let locked = Watch {
            locked: true,
            ..typed
        };
        assert!(ends(EndReason::Admin)(verdict(&locked, &parking, NOW)));
    }

    #[test]
    fn a_locked_account_loses_every_session_but_one_already_stopping() {
        for state in [
            SessionState::Requested,
            SessionState::Queued,
            SessionState::Starting,
            SessionState::Ready,
        ] {
            let watch = Watch {
                state,
                locked: true,
                ..running()
            };
            assert_eq!(
                verdict(&watch, &policy(), NOW),
                Verdict::End {
                    reason: EndReason::Admin,
                    detail: Some(LOCKED)
                },
                "{state}"
            );
        }
        let stopping = Watch {
            state: SessionState::Stopping,
            locked: true,
            ..running()
        };
        assert_eq!(verdict(&stopping, &policy(), NOW), Verdict::Keep);
    }

    #[test]
    fn sessions_not_running_are_left_to_their_launch_or_stop() {
        for state in [
            SessionState::Queued,
            SessionState::Starting,
            SessionState::Stopping,
        ] {
            let watch = Watch {
                state,
                ends_at: Some(NOW - MINUTE),
                ..running()
            };
            assert_eq!(verdict(&watch, &policy(), NOW), Verdict::Keep, "{state}");
        }
    }

    #[test]
    fn a_session_without_an_editor_to_ask_about_is_kept() {
        let no_editor = Watch {
            has_editor: false,
            ..running()
        };
        assert_eq!(verdict(&no_editor, &policy(), NOW), Verdict::Keep);
    }

    #[test]
    fn an_overdue_launch_fails_and_an_overdue_stop_is_driven_again() {
        let timeout = 120_000;
        let long_ago = NOW - 10 * 60 * MINUTE;
        assert_eq!(
            overdue(SessionState::Starting, long_ago, None, timeout, NOW),
            Some(Overdue::FailLaunch)
        );
        assert_eq!(
            overdue(
                SessionState::Stopping,
                long_ago,
                Some(EndReason::Idle),
                timeout,
                NOW
            ),
            Some(Overdue::DriveStop(EndReason::Idle))
        );
        assert_eq!(
            overdue(SessionState::Stopping, long_ago, None, timeout, NOW),
            Some(Overdue::DriveStop(EndReason::Admin))
        );
        assert_eq!(
            overdue(SessionState::Starting, NOW - 1000, None, timeout, NOW),
            None
        );
        assert_eq!(
            overdue(SessionState::Ready, long_ago, None, timeout, NOW),
            None
        );
    }

    #[test]
    fn work_is_a_busy_kernel_gpu_work_or_cpu_at_the_floor() {
        let idle = Sample::default();
        assert!(!busy(&idle, 0.5));
        let kernel = Sample {
            editor_busy: Some(true),
            ..idle
        };
        assert!(busy(&kernel, 0.5));
        let gpu = Sample {
            gpu_active: true,
            ..idle
        };
        assert!(busy(&gpu, 0.5));
        let cpu = Sample {
            cpu_cores: Some(0.5),
            ..idle
        };
        assert!(busy(&cpu, 0.5));
        assert!(!busy(&cpu, 0.6));
        assert!(!busy(&cpu, 0.0), "a floor of 0 leaves CPU out");
    }
}
