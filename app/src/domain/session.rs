//! The session life: requested → (queued) → starting → ready → stopping → ended(reason); a
//! ready session with no work may be parked (its GPU given back, its editor frozen, its kernels
//! kept) and resumed when its person or its scripts come back: ready ⇄ parked.

use serde::{Deserialize, Serialize};
use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionState {
    Requested,
    Queued,
    Starting,
    Ready,
    /// Its slot given back and its editor frozen, kernels and files kept: it resumes on the same
    /// card when a slot there is free (`domain::idle::Policy::park_at`).
    Parked,
    Stopping,
    Ended,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EndReason {
    User,
    Timer,
    Idle,
    Crash,
    Admin,
    Failed,
    /// The runtime lost the editor (its pod vanished) without it stopping itself.
    Lost,
}

/// What happens to a session; the state machine decides whether it may.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    Enqueue,
    AssignSlot,
    EditorReady,
    Park,
    Resume,
    Stop(EndReason),
    Finish,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("a {from} session cannot take {event:?}")]
pub struct InvalidTransition {
    pub from: SessionState,
    pub event: Event,
}

impl SessionState {
    pub const ALL: [SessionState; 7] = [
        Self::Requested,
        Self::Queued,
        Self::Starting,
        Self::Ready,
        Self::Parked,
        Self::Stopping,
        Self::Ended,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Requested => "requested",
            Self::Queued => "queued",
            Self::Starting => "starting",
            Self::Ready => "ready",
            Self::Parked => "parked",
            Self::Stopping => "stopping",
            Self::Ended => "ended",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|state| state.as_str() == s)
    }

    /// Holds (or may soon hold) a slot and an editor.
    pub fn is_live(self) -> bool {
        self != Self::Ended
    }

    /// Has an editor its page can show: running, or parked (frozen, its page kept so that
    /// typing in it brings the GPU back).
    pub fn runs_editor(self) -> bool {
        matches!(self, Self::Ready | Self::Parked)
    }

    /// The next state after `event`, or why it cannot happen.
    pub fn next(self, event: Event) -> Result<SessionState, InvalidTransition> {
        use SessionState::*;
        let next = match (self, event) {
            (Requested, Event::Enqueue) => Queued,
            (Requested | Queued, Event::AssignSlot) => Starting,
            (Starting, Event::EditorReady) => Ready,
            (Ready, Event::Park) => Parked,
            (Parked, Event::Resume) => Ready,
            // Nothing runs yet, so there is nothing to stop.
            (Requested | Queued, Event::Stop(_)) => Ended,
            // A parked editor still exists (frozen): it is stopped like a running one.
            (Starting | Ready | Parked, Event::Stop(_)) => Stopping,
            (Stopping, Event::Finish) => Ended,
            (from, event) => return Err(InvalidTransition { from, event }),
        };
        Ok(next)
    }
}

/// How long past twice the readiness timeout (a runtime may wait that long for a placement, then
/// as long again for the editor to answer) a session may stay `starting` before the reaper ends
/// it: by then the task that launched it has given up or is gone (a database error, a replica
/// that died mid-launch).
pub const STARTING_GRACE_MS: i64 = 60_000;
/// How long a stop may take (an editor's graceful stop, a pod's termination) before the reaper
/// drives it again.
pub const STOPPING_GRACE_MS: i64 = 120_000;

/// Whether a session that entered its passing state (`starting`, `stopping`) at `since_ms` has
/// been in it too long and needs the reaper.
pub fn overdue(state: SessionState, since_ms: i64, now_ms: i64, ready_timeout_ms: i64) -> bool {
    let waited = now_ms - since_ms;
    match state {
        SessionState::Starting => waited > 2 * ready_timeout_ms + STARTING_GRACE_MS,
        SessionState::Stopping => waited > STOPPING_GRACE_MS,
        _ => false,
    }
}

impl fmt::Display for SessionState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl EndReason {
    pub const ALL: [EndReason; 7] = [
        Self::User,
        Self::Timer,
        Self::Idle,
        Self::Crash,
        Self::Admin,
        Self::Failed,
        Self::Lost,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::User => "user",
            Self::Timer => "timer",
            Self::Idle => "idle",
            Self::Crash => "crash",
            Self::Admin => "admin",
            Self::Failed => "failed",
            Self::Lost => "lost",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|reason| reason.as_str() == s)
    }

    /// Whether the time since the editor was ready is charged. A launch that failed is not,
    /// even when it failed after a pre-started editor was handed over (binding the workspace).
    pub fn charges_time(self) -> bool {
        self != Self::Failed
    }

    /// Whether the end is a failure the person is shown as one (the step is marked failed).
    pub fn is_failure(self) -> bool {
        matches!(self, Self::Failed | Self::Crash | Self::Lost)
    }

    /// A sentence for the person whose session ended.
    pub fn describe(self) -> &'static str {
        match self {
            Self::User => "stopped by you",
            Self::Timer => "its time ran out",
            Self::Idle => "it was idle too long",
            Self::Crash => "the editor stopped unexpectedly",
            Self::Admin => "stopped by an administrator",
            Self::Failed => "the editor failed to start",
            Self::Lost => "the cluster lost the editor",
        }
    }

    /// Why it ended, as a sentence of its own for the end page.
    pub fn sentence(self) -> &'static str {
        match self {
            Self::User => "You stopped it.",
            Self::Timer => "Its time ran out.",
            Self::Idle => "It was idle for too long.",
            Self::Crash => "The editor stopped unexpectedly.",
            Self::Admin => "An administrator stopped it.",
            Self::Failed => "The editor failed to start.",
            Self::Lost => "The cluster lost the editor.",
        }
    }
}

/// Why a session ended, as its end page says it once: `(sentence, log)`.
///
/// An end that carries words of its own (`detail`: the admin who stopped it, a lock, a deleted
/// account) is said in those words instead of the reason's general sentence, which would only
/// say the same less well. A failure's detail is a log (an editor's last lines): shown apart,
/// and without the sentence where the log begins by saying it.
pub fn end_words(
    reason: Option<EndReason>,
    detail: Option<&str>,
) -> (Option<String>, Option<String>) {
    let detail = detail.map(str::trim).filter(|d| !d.is_empty());
    match (reason, detail) {
        (None, None) => (None, None),
        (Some(reason), None) => (Some(reason.sentence().to_string()), None),
        (Some(reason), Some(log)) if reason.is_failure() => {
            let says_it = log
                .to_lowercase()
                .starts_with(&reason.describe().to_lowercase());
            let sentence = (!says_it).then(|| reason.sentence().to_string());
            (sentence, Some(log.to_string()))
        }
        (_, Some(words)) => (Some(as_sentence(words)), None),
    }
}

/// `words` with a capital first letter and a full stop.
fn as_sentence(words: &str) -> String {
    let mut chars = words.chars();
    let mut out: String = chars
        .next()
        .map(|first| first.to_uppercase().chain(chars).collect())
        .unwrap_or_default();
    if !out.ends_with(['.', '!', '?']) {
        out.push('.');
    }
    out
}

/// Why the person whose session ended could not launch it again now, in words; `None` when they
/// could as far as their quota and balance tell (the launch itself decides the rest): a quota of
/// no sessions (how an admin stops someone's launches), or a balance (milli-credits, holds of
/// running sessions taken out) below the `hold` the same launch takes.
pub fn relaunch_refusal(max_sessions: u32, balance: i64, hold: i64) -> Option<String> {
    if max_sessions == 0 {
        return Some("Your quota allows no sessions for now; an admin can change it.".to_string());
    }
    (balance < hold).then(|| {
        format!(
            "Launching it again holds {}, and your balance is {}: ask an admin for credits.",
            super::credits::with_unit(hold),
            super::credits::with_unit(balance.max(0))
        )
    })
}

impl SessionState {
    /// The heading of the progress card for a session that has no editor to show (yet, or
    /// any longer).
    pub fn progress_heading(self, editor: &str) -> String {
        match self {
            Self::Requested => format!("Asking for a slice for {editor}"),
            Self::Queued => "Waiting for a free GPU slice".to_string(),
            Self::Starting | Self::Ready => format!("Starting {editor}"),
            Self::Parked => format!("{editor} is parked: its GPU was given back while unused"),
            Self::Stopping => format!("Stopping {editor}"),
            Self::Ended => "This session has ended".to_string(),
        }
    }
}

impl fmt::Display for EndReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use EndReason::*;

    #[test]
    fn the_same_launch_is_offered_again_only_to_who_could_make_it() {
        assert_eq!(relaunch_refusal(2, 5_000, 5_000), None);
        assert!(
            relaunch_refusal(0, 100_000, 1_000)
                .unwrap()
                .contains("quota allows no sessions")
        );
        assert_eq!(
            relaunch_refusal(1, 1_500, 2_000).as_deref(),
            Some(
                "Launching it again holds 2 credits, and your balance is 1.5 credits: ask an admin for credits."
            )
        );
    }

    #[test]
    fn an_end_is_said_once_in_its_own_words_where_it_has_some() {
        assert_eq!(end_words(None, None), (None, None));
        assert_eq!(
            end_words(Some(Timer), None),
            (Some("Its time ran out.".into()), None)
        );
        assert_eq!(
            end_words(Some(Admin), Some("stopped by the admin root")),
            (Some("Stopped by the admin root.".into()), None),
            "not also \"An administrator stopped it.\""
        );
        assert_eq!(
            end_words(Some(Admin), Some(crate::domain::reaper::LOCKED)),
            (
                Some("The account was locked; unused credits were refunded.".into()),
                None
            )
        );
        // The page could not read the reason (its person is signed out): the step's words.
        assert_eq!(
            end_words(None, Some("the account was deleted by the admin root")),
            (
                Some("The account was deleted by the admin root.".into()),
                None
            )
        );
        let crash = "The editor stopped unexpectedly; unused credits were refunded.\nKilled";
        assert_eq!(
            end_words(Some(Crash), Some(crash)),
            (None, Some(crash.into())),
            "the log says it first"
        );
        assert_eq!(
            end_words(Some(Failed), Some("port 8888 in use")),
            (
                Some("The editor failed to start.".into()),
                Some("port 8888 in use".into())
            )
        );
    }
    use SessionState::*;

    #[test]
    fn a_stopping_session_is_not_called_starting() {
        assert_eq!(
            Stopping.progress_heading("JupyterLab"),
            "Stopping JupyterLab"
        );
        assert_eq!(Starting.progress_heading("marimo"), "Starting marimo");
        assert_eq!(
            Queued.progress_heading("marimo"),
            "Waiting for a free GPU slice"
        );
        for reason in EndReason::ALL {
            let sentence = reason.sentence();
            assert!(sentence.ends_with('.') && sentence.starts_with(char::is_uppercase));
        }
    }

    #[test]
    fn happy_path_reaches_ended() {
        let s = Requested.next(Event::AssignSlot).unwrap();
        assert_eq!(s, Starting);
        let s = s.next(Event::EditorReady).unwrap();
        assert_eq!(s, Ready);
        let s = s.next(Event::Stop(User)).unwrap();
        assert_eq!(s, Stopping);
        assert_eq!(s.next(Event::Finish).unwrap(), Ended);
    }

    #[test]
    fn queued_session_starts_when_a_slot_frees() {
        let s = Requested.next(Event::Enqueue).unwrap();
        assert_eq!(s, Queued);
        assert_eq!(s.next(Event::AssignSlot).unwrap(), Starting);
    }

    #[test]
    fn leaving_the_queue_ends_without_stopping() {
        assert_eq!(Queued.next(Event::Stop(User)).unwrap(), Ended);
        assert_eq!(Requested.next(Event::Stop(Failed)).unwrap(), Ended);
    }

    #[test]
    fn a_starting_editor_can_be_stopped() {
        assert_eq!(Starting.next(Event::Stop(Failed)).unwrap(), Stopping);
    }

    #[test]
    fn ended_is_final() {
        for event in [
            Event::Enqueue,
            Event::AssignSlot,
            Event::EditorReady,
            Event::Stop(Admin),
            Event::Finish,
        ] {
            assert!(Ended.next(event).is_err(), "{event:?}");
        }
    }

    #[test]
    fn only_a_ready_session_parks_and_only_a_parked_one_resumes() {
        assert_eq!(Ready.next(Event::Park), Ok(Parked));
        assert_eq!(Parked.next(Event::Resume), Ok(Ready));
        assert_eq!(Parked.next(Event::Stop(EndReason::Idle)), Ok(Stopping));
        for state in [Requested, Queued, Starting, Parked, Stopping, Ended] {
            assert!(state.next(Event::Park).is_err(), "{state}");
        }
        for state in [Requested, Queued, Starting, Ready, Stopping, Ended] {
            assert!(state.next(Event::Resume).is_err(), "{state}");
        }
        assert!(Parked.is_live());
    }

    #[test]
    fn impossible_jumps_are_refused() {
        assert!(Requested.next(Event::EditorReady).is_err());
        assert!(Ready.next(Event::AssignSlot).is_err());
        assert!(Ready.next(Event::Finish).is_err());
        assert!(Stopping.next(Event::EditorReady).is_err());
        assert!(Queued.next(Event::Enqueue).is_err());
    }

    #[test]
    fn only_passing_states_become_overdue_and_only_after_their_grace() {
        let timeout = 180_000;
        let starting_limit = 2 * timeout + STARTING_GRACE_MS;
        assert!(!overdue(Starting, 0, starting_limit, timeout));
        assert!(overdue(Starting, 0, starting_limit + 1, timeout));
        assert!(!overdue(Stopping, 0, STOPPING_GRACE_MS, timeout));
        assert!(overdue(Stopping, 0, STOPPING_GRACE_MS + 1, timeout));
        for state in [Requested, Queued, Ready, Parked, Ended] {
            assert!(!overdue(state, 0, i64::MAX / 2, timeout), "{state}");
        }
    }

    #[test]
    fn only_failed_launches_go_uncharged() {
        for reason in EndReason::ALL {
            assert_eq!(
                reason.charges_time(),
                reason != EndReason::Failed,
                "{reason:?}"
            );
        }
    }

    #[test]
    fn failures_are_the_endings_nobody_asked_for() {
        let failures: Vec<_> = [
            EndReason::User,
            EndReason::Timer,
            EndReason::Idle,
            EndReason::Crash,
            EndReason::Admin,
            EndReason::Failed,
            EndReason::Lost,
        ]
        .into_iter()
        .filter(|r| r.is_failure())
        .collect();
        assert_eq!(
            failures,
            [EndReason::Crash, EndReason::Failed, EndReason::Lost]
        );
    }

    #[test]
    fn names_round_trip() {
        for s in SessionState::ALL {
            assert_eq!(SessionState::parse(s.as_str()), Some(s));
        }
        for r in EndReason::ALL {
            assert_eq!(EndReason::parse(r.as_str()), Some(r));
        }
        assert_eq!(SessionState::parse("running"), None);
    }
}
