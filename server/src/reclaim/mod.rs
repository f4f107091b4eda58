//! Reclaiming idle GPUs, measured: a month of people's behaviour replayed through the real
//! service, once per idle policy, side by side (`cargo bench -p server --bench reclaim`;
//! BENCHMARKS.md section 14).
//!
//! - [`trace`]: the people (`bench/reclaim/personas.toml`) drawn into a minute-by-minute month
//!   with a seeded RNG: what a server could observe each minute, and the ground truth (someone
//!   needs the session; someone is at the screen).
//! - [`run`]: the loop. A [`crate::service::Service`] on a [`crate::util::ManualClock`], the real
//!   store (SQLite, or PostgreSQL), the real queue and dispatcher, credits and ledger; editors
//!   that start at once and never die. Each minute the people launch (into the queue when the
//!   pool is full), press Stop and Extend through the service, and their pages' heartbeats (by
//!   the page's own rule, `domain::presence`: at once after input, every two minutes while
//!   visible, none from a tab in the background or a closed laptop), the proxy's traffic marks and the sampler's busy verdict (`reaper::busy` over what the minute
//!   shows) are written as the product writes them; then the reaper passes
//!   (`Guard::reap`: the verdicts, the timer, the dispatcher). Under ours the reaper's idle
//!   rule decides, with its defaults, and a person at the screen answers its warning with the
//!   file's chance (and again with `idle.pressure_timeout_seconds`: sooner while launches
//!   wait for the size); under a peer's, our idle rule is off and the peer's rule
//!   ([`peers::Policy`]) ends sessions through the admin's stop, at the peer's own period.
//! - [`report`]: the table, the wrongful reclaims with why, the SVG bars.
//!
//! What it measures, per policy: allocated slice-minutes (ready to ended), those nobody needed
//! (idle), reclaims that cost work (the session ended by the policy in a minute its person was
//! at the screen, a job computed, or its scripts were still to call it), launches again after a
//! reclaim, the wait from Launch to a ready editor, and the credits the ledger charged, with
//! their idle share.
//!
//! Simplifications, each the same for every policy: the minute is the unit, so the reaper
//! passes once a simulated minute (the product's period is 5 s: ours may hold a reclaimed
//! session up to a minute longer than it would); a start takes no simulated time, so pre-started
//! editors are off (they shorten starts, not waits for a slot); every launch is one 8 GiB slice
//! of JupyterLab. A month of 26 people on 12 slices runs in 30-45 s a policy on SQLite (release).

pub mod peers;
pub mod report;
pub mod run;
pub mod trace;

pub use peers::Policy;
pub use run::{Outcome, simulate};
pub use trace::{Personas, Trace};
