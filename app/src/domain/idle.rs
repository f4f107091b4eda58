//! When a session counts as idle, and when the user is warned.
//!
//! The signals, each a timestamp on the session: proxied traffic (`last_activity_at`), proxied
//! traffic from API tokens (`last_api_at`), browser heartbeats from a visible page
//! (`last_heartbeat_at`), heartbeats that saw input (`last_input_at`: keys, pointer, wheel or touch
//! in our page or inside the embedded editor, which is same-origin; or "I'm here"), and busy work
//! (`last_busy_at`: a Jupyter kernel `busy` or `starting`, GPU work the runtime reports, or,
//! locally, the editor's processes using at least `idle.busy_cpu_percent` of a core between two
//! samples).
//!
//! Counted by default: input, API-token traffic, busy work, and the moment the editor became ready.
//! Not counted by default: heartbeats without input, and browser traffic, because editors make both
//! by themselves while a tab is open (JupyterLab polls its REST API; code-server's protocol sends
//! keep-alives every few seconds), which is how open tabs hold GPUs for ever under JupyterHub's
//! culler. `idle.open_tab_keeps_alive = true` counts them too. So a long job with no browser stays
//! alive while its kernel is busy or the GPU works; marimo and code-server expose no busy state
//! over HTTP, so their unattended jobs count through CPU or GPU work, or API traffic.
//!
//! A session is idle `idle.timeout_seconds` after the last signal that counts, and its user is
//! warned `idle.warn_seconds` before (both may be set per slice size, `idle.per_slice`); the
//! server's reaper then ends it. With no page open and no script calling, sooner:
//! `idle.away_timeout_seconds` after the later of that signal and the page's going (a beat's
//! interval after its last beat, or at once when it said it left sight: [`page_gone_at`];
//! [`Policy::away_ms`]): a closed laptop, a tab left in the background or a finished job is
//! nobody's work, while a person at a visible page is warned and answers. A person may choose
//! their own timeout at launch within bounds an admin set per size ([`TimeoutChoice`],
//! [`Policy::chosen`]); a chosen timeout is the whole rule.

use serde::{Deserialize, Serialize};

/// Last time each signal was seen, in epoch milliseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Signals {
    /// When the editor became ready: a session is never idle before its timeout has run once.
    pub ready_at: i64,
    /// Any proxied HTTP request or WebSocket frame (browsers produce these by themselves).
    pub traffic: Option<i64>,
    /// Proxied traffic from API-token clients: scripts, not tabs.
    pub api_traffic: Option<i64>,
    /// A browser heartbeat from a visible page.
    pub heartbeat: Option<i64>,
    /// A page said it went out of sight (hidden behind another tab or window, or closed): once
    /// later than the last beat, the page is gone from then, not a beat's interval later.
    pub page_left: Option<i64>,
    /// A heartbeat that saw keyboard, pointer or scroll input, or "I'm here".
    pub input: Option<i64>,
    /// The editor reported a busy kernel, or the GPU did work.
    pub busy: Option<i64>,
}

/// A page that has not beaten for this long is gone: closed, hidden, or its computer asleep (a
/// beat, and a minute for a late timer and the network).
pub const PAGE_GONE_MS: i64 = super::presence::BEAT_MS + 60_000;

/// When the session's page went, as far as the server knows: the moment a page said it left
/// sight, if no beat came after it (a beat in the same millisecond keeps the page: never sooner
/// on a tie); else a beat's interval after the last beat; `None` if no page ever beat or left.
pub fn page_gone_at(s: &Signals) -> Option<i64> {
    match (s.heartbeat, s.page_left) {
        (beat, Some(left)) if beat.is_none_or(|beat| left > beat) => Some(left),
        (beat, _) => beat.map(|beat| beat + PAGE_GONE_MS),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Policy {
    pub timeout_ms: i64,
    /// How long before the end the user is warned.
    pub warn_ms: i64,
    /// Whether a visible tab (heartbeats and the traffic it makes) keeps a session alive.
    pub open_tab_keeps_alive: bool,
    /// With no page open ([`PAGE_GONE_MS`] without a beat) and no script ever calling, idle this
    /// long after the later of the last signal and the page's going; 0, or no shorter than
    /// `timeout_ms`, leaves `timeout_ms` alone. Scripts are exempt because their gaps are their
    /// own: a model server called every few minutes has quiet half hours (BENCHMARKS.md, 14).
    pub away_ms: i64,
    /// With no work this long, whatever its page, a session gives its GPU back and keeps the
    /// rest (its editor frozen, kernels and files kept): [`Policy::park_at`]. 0: never.
    #[serde(default)]
    pub park_ms: i64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Active {
        idle_at: i64,
    },
    /// Idle soon: the user sees a countdown and "I'm here".
    Warn {
        idle_at: i64,
    },
    Idle {
        idle_at: i64,
    },
}

impl Policy {
    /// The last moment anything that counts happened.
    pub fn last_active(&self, s: &Signals) -> i64 {
        let mut counted = vec![Some(s.ready_at), s.api_traffic, s.input, s.busy];
        if self.open_tab_keeps_alive {
            counted.extend([s.traffic, s.heartbeat]);
        }
        counted.into_iter().flatten().max().unwrap_or(s.ready_at)
    }

    /// When the session becomes idle if nothing happens, as seen at `now`: while its page still
    /// beats, by the full timeout (the page counts down to it); once the page has gone, by the
    /// away rule too.
    pub fn idle_at(&self, s: &Signals, now: i64) -> i64 {
        let last = self.last_active(s);
        let attended = last + self.timeout_ms;
        if self.away_ms <= 0 || self.away_ms >= self.timeout_ms || s.api_traffic.is_some() {
            return attended;
        }
        let page_gone = page_gone_at(s).unwrap_or(last);
        if now < page_gone {
            return attended;
        }
        attended.min(last.max(page_gone) + self.away_ms)
    }

    /// When the session, with no work since, parks (gives its GPU back, its editor frozen): a
    /// `park_ms` after the last signal that counts; `None` when parking is off. Nothing is lost
    /// by it, so no warning comes first, and the end rules ([`Policy::idle_at`]) still apply to
    /// a parked session.
    pub fn park_at(&self, s: &Signals) -> Option<i64> {
        (self.park_ms > 0).then(|| self.last_active(s) + self.park_ms)
    }

    /// The policy while launches wait for this slice size: idle after `timeout_ms` at most, and
    /// warned within it. What counts as activity is unchanged, so a session whose kernel, GPU or
    /// CPU works (or its person types, or its scripts call) is never ended sooner. A timeout of
    /// 0, or one no shorter, leaves the policy as it is.
    pub fn pressed(self, timeout_ms: i64) -> Policy {
        if timeout_ms <= 0 || timeout_ms >= self.timeout_ms {
            return self;
        }
        Policy {
            timeout_ms,
            warn_ms: self.warn_ms.min(timeout_ms / 2),
            away_ms: self.away_ms.min(timeout_ms),
            park_ms: self.park_ms.min(timeout_ms),
            ..self
        }
    }

    /// The policy with the timeout its person chose at launch (`None`: the slice's), warned
    /// within it. [`Policy::pressed`] applies on top, so pressure shortens a longer choice to
    /// its own timeout and leaves a shorter one as it is.
    pub fn chosen(self, timeout_ms: Option<i64>) -> Policy {
        match timeout_ms {
            Some(timeout_ms) if timeout_ms > 0 => Policy {
                timeout_ms,
                warn_ms: self.warn_ms.min(timeout_ms / 2),
                away_ms: 0,
                ..self
            },
            _ => self,
        }
    }

    pub fn judge(&self, s: &Signals, now: i64) -> Verdict {
        let idle_at = self.idle_at(s, now);
        if now >= idle_at {
            Verdict::Idle { idle_at }
        } else if now >= idle_at - self.warn_ms {
            Verdict::Warn { idle_at }
        } else {
            Verdict::Active { idle_at }
        }
    }
}

/// The idle timeouts a person may choose at launch for a slice size, in minutes: bounds an
/// admin set (`idle.min_timeout_seconds`, `idle.max_timeout_seconds`, per size in
/// `idle.per_slice`) around the size's default, which an empty choice keeps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimeoutChoice {
    pub min_minutes: u32,
    pub max_minutes: u32,
    pub default_minutes: u32,
}

impl TimeoutChoice {
    /// The timeout a launch asks for, in milliseconds (`None`: the default); outside the
    /// bounds, the sentence that names them.
    pub fn choose(&self, minutes: Option<u32>) -> Result<Option<i64>, String> {
        match minutes {
            None => Ok(None),
            Some(m) if (self.min_minutes..=self.max_minutes).contains(&m) => {
                Ok(Some(i64::from(m) * 60_000))
            }
            Some(m) => Err(format!(
                "the idle timeout must be between {} and {} minutes for this size, not {m}",
                self.min_minutes, self.max_minutes
            )),
        }
    }

    /// Whether there is anything to choose.
    pub fn open(&self) -> bool {
        self.min_minutes < self.max_minutes
    }

    /// The bounds in words, as the launch form and the Settings page say them.
    pub fn words(&self) -> String {
        if self.open() {
            format!(
                "{} to {} minutes without work ({} if left empty)",
                self.min_minutes, self.max_minutes, self.default_minutes
            )
        } else {
            format!("{} minutes without work", self.default_minutes)
        }
    }
}

/// Whether pressure that began at `since` has given a session's person its warning (`warn_ms`)
/// by `now`: a session already quiet when launches begin to wait would otherwise be ended by the
/// shorter timeout at once, unwarned.
pub fn warned_since(since: i64, warn_ms: i64, now: i64) -> bool {
    now >= since + warn_ms
}

/// Whether a session parked at `parked_at` is wanted back: its person typed (or answered "I'm
/// here") or its scripts called since. A visible tab's own polling and beats are not: they would
/// wake a tab left open overnight at once.
pub fn wants_gpu_back(s: &Signals, parked_at: i64) -> bool {
    [s.input, s.api_traffic]
        .into_iter()
        .flatten()
        .any(|at| at > parked_at)
}

/// What a page may do with the idle deadline it last read from the server. The server moves
/// `idle_at` whenever a signal counts (a busy kernel, CPU or GPU work) and tells no page, so a
/// copy read before the warning began says nothing about whether the session is idle now: the
/// page asks again before it warns, and keeps asking while it warns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageIdle {
    /// Warn (banner, notification): the server said `idle_at` after the warning began.
    pub warn: bool,
    /// Read the session again now: inside the warning by the page's copy, and the copy is older
    /// than the warning or than [`PAGE_REREAD_MS`].
    pub ask: bool,
}

/// Inside its warning, a page reads the deadline again at least this often.
pub const PAGE_REREAD_MS: i64 = 10_000;

/// [`PageIdle`] for a copy of `idle_at` the page read from the server at `read_at`.
pub fn page_idle(idle_at: i64, warn_ms: i64, read_at: i64, now: i64) -> PageIdle {
    let warn_from = idle_at - warn_ms;
    let inside = now >= warn_from;
    let confirmed = read_at >= warn_from;
    PageIdle {
        warn: inside && confirmed,
        ask: inside && (!confirmed || now - read_at >= PAGE_REREAD_MS),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: i64 = 60_000;

    fn policy(open_tab_keeps_alive: bool) -> Policy {
        Policy {
            timeout_ms: 30 * MIN,
            warn_ms: 5 * MIN,
            open_tab_keeps_alive,
            away_ms: 0,
            park_ms: 0,
        }
    }

    fn away(away_ms: i64) -> Policy {
        Policy {
            away_ms,
            ..policy(false)
        }
    }

    #[test]
    fn a_fresh_session_gets_a_full_timeout() {
        let s = Signals {
            ready_at: 0,
            ..Signals::default()
        };
        assert_eq!(
            policy(false).judge(&s, 24 * MIN),
            Verdict::Active { idle_at: 30 * MIN }
        );
        assert_eq!(
            policy(false).judge(&s, 26 * MIN),
            Verdict::Warn { idle_at: 30 * MIN }
        );
        assert_eq!(
            policy(false).judge(&s, 30 * MIN),
            Verdict::Idle { idle_at: 30 * MIN }
        );
    }

    #[test]
    fn input_api_traffic_and_busy_work_reset_the_countdown() {
        for s in [
            Signals {
                input: Some(20 * MIN),
                ..Signals::default()
            },
            Signals {
                api_traffic: Some(20 * MIN),
                ..Signals::default()
            },
            Signals {
                busy: Some(20 * MIN),
                ..Signals::default()
            },
        ] {
            assert_eq!(
                policy(false).judge(&s, 44 * MIN),
                Verdict::Active { idle_at: 50 * MIN }
            );
        }
    }

    #[test]
    fn an_open_tab_alone_follows_the_policy() {
        let tab_only = Signals {
            ready_at: 0,
            traffic: Some(40 * MIN),
            heartbeat: Some(40 * MIN),
            ..Signals::default()
        };
        assert!(matches!(
            policy(false).judge(&tab_only, 31 * MIN),
            Verdict::Idle { .. }
        ));
        assert!(matches!(
            policy(true).judge(&tab_only, 31 * MIN),
            Verdict::Active { .. }
        ));
    }

    #[test]
    fn a_session_with_no_work_parks_after_its_park_time_whatever_its_page() {
        let parking = Policy {
            park_ms: 5 * MIN,
            ..policy(false)
        };
        for s in [
            Signals {
                input: Some(10 * MIN),
                heartbeat: Some(29 * MIN),
                ..Signals::default()
            },
            Signals {
                busy: Some(10 * MIN),
                page_left: Some(11 * MIN),
                ..Signals::default()
            },
        ] {
            assert_eq!(parking.park_at(&s), Some(15 * MIN));
            assert_eq!(policy(false).park_at(&s), None, "off by default");
        }
        let open_tab = Signals {
            input: Some(10 * MIN),
            traffic: Some(40 * MIN),
            heartbeat: Some(40 * MIN),
            ..Signals::default()
        };
        assert_eq!(
            Policy {
                open_tab_keeps_alive: true,
                ..parking
            }
            .park_at(&open_tab),
            Some(45 * MIN),
            "what keeps a session alive keeps it on its GPU"
        );
        assert_eq!(parking.pressed(3 * MIN).park_ms, 3 * MIN);
        assert_eq!(parking.chosen(Some(60 * MIN)).park_ms, 5 * MIN);
    }

    #[test]
    fn a_parked_session_is_wanted_back_by_typing_or_scripts_not_by_an_open_tab() {
        let parked_at = 20 * MIN;
        let by = |s: Signals| wants_gpu_back(&s, parked_at);
        assert!(by(Signals {
            input: Some(parked_at + 1),
            ..Signals::default()
        }));
        assert!(by(Signals {
            api_traffic: Some(parked_at + 1),
            ..Signals::default()
        }));
        assert!(!by(Signals {
            input: Some(parked_at),
            traffic: Some(parked_at + MIN),
            heartbeat: Some(parked_at + MIN),
            busy: Some(parked_at + MIN),
            ..Signals::default()
        }));
    }

    #[test]
    fn with_no_page_open_idleness_comes_sooner() {
        // Typed at 8, the page's last beat at 10: gone at 13, idle ten minutes later.
        let closed = Signals {
            input: Some(8 * MIN),
            heartbeat: Some(10 * MIN),
            ..Signals::default()
        };
        assert_eq!(away(10 * MIN).idle_at(&closed, 13 * MIN), 23 * MIN);
        assert_eq!(policy(false).idle_at(&closed, 13 * MIN), 38 * MIN);
        // Until then the page counts down to the full timeout.
        assert_eq!(away(10 * MIN).idle_at(&closed, 12 * MIN), 38 * MIN);
        // Never a page (launched from a script that never called it): from the start.
        assert_eq!(away(10 * MIN).idle_at(&Signals::default(), 0), 10 * MIN);
        // Busy work counts as ever: a job that ran until 50 with nobody watching.
        let job = Signals {
            busy: Some(50 * MIN),
            ..closed
        };
        assert_eq!(away(10 * MIN).idle_at(&job, 51 * MIN), 60 * MIN);
    }

    #[test]
    fn a_page_that_says_it_left_starts_the_away_rule_at_once() {
        // Typed at 8, a beat at 10, hidden at 11 (lunch): idle at 21, not at 23.
        let hidden = Signals {
            input: Some(8 * MIN),
            heartbeat: Some(10 * MIN),
            page_left: Some(11 * MIN),
            ..Signals::default()
        };
        assert_eq!(away(10 * MIN).idle_at(&hidden, 11 * MIN), 21 * MIN);
        // Seen again (a beat at 12): the page is there, and the full timeout counts.
        let back = Signals {
            heartbeat: Some(12 * MIN),
            ..hidden
        };
        assert_eq!(away(10 * MIN).idle_at(&back, 12 * MIN), 38 * MIN);
        // Another tab of the session left after this one's beat: gone until a beat says not.
        assert_eq!(page_gone_at(&hidden), Some(11 * MIN));
        assert_eq!(page_gone_at(&back), Some(12 * MIN + PAGE_GONE_MS));
        // A page that left without ever beating (hidden at once).
        let never = Signals {
            page_left: Some(MIN),
            ..Signals::default()
        };
        assert_eq!(away(10 * MIN).idle_at(&never, MIN), 11 * MIN);
        assert_eq!(page_gone_at(&Signals::default()), None);
        // A beat in the same millisecond as a leaving keeps the page.
        let tie = Signals {
            heartbeat: Some(11 * MIN),
            ..hidden
        };
        assert_eq!(page_gone_at(&tie), Some(11 * MIN + PAGE_GONE_MS));
    }

    #[test]
    fn a_page_that_beats_or_a_script_that_calls_keeps_the_full_timeout() {
        // Reading since 20 with the page visible (a beat at 40): the attended rule, warned.
        let reading = Signals {
            input: Some(20 * MIN),
            heartbeat: Some(40 * MIN),
            ..Signals::default()
        };
        assert_eq!(
            away(10 * MIN).judge(&reading, 41 * MIN),
            Verdict::Active { idle_at: 50 * MIN }
        );
        assert_eq!(
            away(10 * MIN).judge(&reading, 46 * MIN),
            Verdict::Warn { idle_at: 50 * MIN }
        );
        // A model server its scripts called at 5, no page since the start.
        let served = Signals {
            api_traffic: Some(5 * MIN),
            ..Signals::default()
        };
        assert_eq!(away(10 * MIN).idle_at(&served, 20 * MIN), 35 * MIN);
    }

    #[test]
    fn a_chosen_timeout_is_the_whole_rule_and_pressure_bounds_the_away_one() {
        let gone = Signals {
            heartbeat: Some(0),
            ..Signals::default()
        };
        let now = 4 * MIN;
        assert_eq!(away(10 * MIN).idle_at(&gone, now), 13 * MIN);
        assert_eq!(
            away(10 * MIN).chosen(Some(60 * MIN)).idle_at(&gone, now),
            60 * MIN
        );
        assert_eq!(away(10 * MIN).pressed(5 * MIN).idle_at(&gone, now), 5 * MIN);
        // No shorter than the timeout: off.
        assert_eq!(away(30 * MIN).idle_at(&gone, now), 30 * MIN);
        assert_eq!(away(0).idle_at(&gone, now), 30 * MIN);
    }

    #[test]
    fn under_pressure_idleness_comes_sooner_but_work_still_counts() {
        let pressed = policy(false).pressed(10 * MIN);
        assert_eq!((pressed.timeout_ms, pressed.warn_ms), (10 * MIN, 5 * MIN));
        let quiet = Signals::default();
        assert!(matches!(
            pressed.judge(&quiet, 10 * MIN),
            Verdict::Idle { .. }
        ));
        let busy = Signals {
            busy: Some(9 * MIN),
            ..Signals::default()
        };
        assert!(matches!(
            pressed.judge(&busy, 10 * MIN),
            Verdict::Active { .. }
        ));
        // Off, or no shorter than the timeout: unchanged.
        assert_eq!(policy(false).pressed(0), policy(false));
        assert_eq!(policy(false).pressed(40 * MIN), policy(false));
        assert_eq!(policy(false).pressed(4 * MIN).warn_ms, 2 * MIN);
        // Pressure that begins at minute 40 on a session quiet since 0: warned first.
        assert!(!warned_since(40 * MIN, 5 * MIN, 44 * MIN));
        assert!(warned_since(40 * MIN, 5 * MIN, 45 * MIN));
    }

    #[test]
    fn a_chosen_timeout_replaces_the_default_and_pressure_still_shortens_it() {
        let quiet = Signals::default();
        let longer = policy(false).chosen(Some(120 * MIN));
        assert_eq!((longer.timeout_ms, longer.warn_ms), (120 * MIN, 5 * MIN));
        // At minute 60 the default would have ended it; the choice keeps it.
        assert!(matches!(
            policy(false).judge(&quiet, 60 * MIN),
            Verdict::Idle { .. }
        ));
        assert_eq!(
            longer.judge(&quiet, 60 * MIN),
            Verdict::Active { idle_at: 120 * MIN }
        );
        // Under pressure: no longer than the pressed timeout, never shorter than it.
        assert_eq!(longer.pressed(10 * MIN).timeout_ms, 10 * MIN);
        let short = policy(false).chosen(Some(8 * MIN));
        assert_eq!((short.timeout_ms, short.warn_ms), (8 * MIN, 4 * MIN));
        assert_eq!(short.pressed(10 * MIN), short);
        // No choice: the slice's policy.
        assert_eq!(policy(false).chosen(None), policy(false));
        assert_eq!(policy(false).chosen(Some(0)), policy(false));
    }

    #[test]
    fn a_choice_outside_the_bounds_is_refused_with_them() {
        let bounds = TimeoutChoice {
            min_minutes: 10,
            max_minutes: 120,
            default_minutes: 30,
        };
        assert_eq!(bounds.choose(None), Ok(None));
        assert_eq!(bounds.choose(Some(10)), Ok(Some(10 * MIN)));
        assert_eq!(bounds.choose(Some(120)), Ok(Some(120 * MIN)));
        assert_eq!(
            bounds.choose(Some(121)),
            Err(
                "the idle timeout must be between 10 and 120 minutes for this size, not 121".into()
            )
        );
        assert!(bounds.choose(Some(9)).is_err());
        assert_eq!(
            bounds.words(),
            "10 to 120 minutes without work (30 if left empty)"
        );
        let fixed = TimeoutChoice {
            min_minutes: 30,
            max_minutes: 30,
            default_minutes: 30,
        };
        assert!(!fixed.open());
        assert_eq!(fixed.words(), "30 minutes without work");
    }

    #[test]
    fn a_long_job_without_a_browser_stays_active_while_it_runs() {
        // The sampler sees the busy kernel every half minute for hours.
        let s = Signals {
            ready_at: 0,
            busy: Some(600 * MIN),
            ..Signals::default()
        };
        assert!(matches!(
            policy(false).judge(&s, 600 * MIN + 1),
            Verdict::Active { .. }
        ));
        assert!(matches!(
            policy(false).judge(&s, 630 * MIN),
            Verdict::Idle { .. }
        ));
    }

    #[test]
    fn a_page_counts_down_on_its_copy_until_the_warning_would_begin() {
        // Read at minute 0: idle at 30, warned from 25.
        let page = |now| page_idle(30 * MIN, 5 * MIN, 0, now);
        assert_eq!(
            page(24 * MIN),
            PageIdle {
                warn: false,
                ask: false
            }
        );
        assert_eq!(
            page(25 * MIN),
            PageIdle {
                warn: false,
                ask: true
            },
            "a copy from before the warning is asked about, not warned on"
        );
    }

    #[test]
    fn a_page_warns_only_on_a_deadline_the_server_said_inside_the_warning() {
        // Read again at 25:10 and the server still says 30: warn, and ask again 10 s on.
        let read = 25 * MIN + 10_000;
        assert_eq!(
            page_idle(30 * MIN, 5 * MIN, read, read),
            PageIdle {
                warn: true,
                ask: false
            }
        );
        assert!(page_idle(30 * MIN, 5 * MIN, read, read + PAGE_REREAD_MS).ask);
        // A busy kernel moved it to 55 meanwhile: the page counts again, without a warning.
        assert_eq!(
            page_idle(55 * MIN, 5 * MIN, read, read + 1_000),
            PageIdle {
                warn: false,
                ask: false
            }
        );
    }
}
