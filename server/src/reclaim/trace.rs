//! The month of behaviour the simulator replays: people (personas, their parameters in
//! `bench/reclaim/personas.toml`) drawn into a minute-by-minute trace with a seeded RNG. Pure:
//! the same file and seed give the same trace, whatever policy then reads it.
//!
//! Each minute of a visit carries what a server could observe (typing, a visible or background
//! tab, a busy kernel, GPU or CPU work, API calls, GPU memory held) and the ground truth the
//! policies are judged by: [`NEED`] (ending the session now would cost someone work: its person
//! is at the screen, a job computes, or its scripts still call it) and [`PRESENT`] (a person at
//! the screen, who would answer a warning).

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Deserialize;

/// Keys, pointer or "I'm here": a heartbeat that saw input.
pub const INPUT: u16 = 1;
/// A visible tab: heartbeats without input, and the traffic the editor's page makes.
pub const TAB: u16 = 1 << 1;
/// A tab open in the background: the page's own polling, no heartbeats.
pub const HIDDEN: u16 = 1 << 2;
/// A Jupyter kernel executing.
pub const KERNEL: u16 = 1 << 3;
/// The GPU computing.
pub const GPU: u16 = 1 << 4;
/// The editor's processes busy on the CPU (over `idle.busy_cpu_percent`).
pub const CPU: u16 = 1 << 5;
/// Requests over an API token.
pub const API: u16 = 1 << 6;
/// Ground truth: ending the session now costs someone work.
pub const NEED: u16 = 1 << 7;
/// Ground truth: a person is at the screen.
pub const PRESENT: u16 = 1 << 8;
/// GPU memory held (a loaded model), whether or not anything computes.
pub const MEM: u16 = 1 << 9;

/// `bench/reclaim/personas.toml`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Personas {
    pub seed: u64,
    pub days: u32,
    /// Each person's starting credits.
    pub grant: i64,
    pub answers_warning: f64,
    /// A person at the screen reading in another tab answers the notification our hidden page
    /// shows with this chance in each minute it shows (some miss it, some never allowed them).
    pub answers_notification: f64,
    pub pool: Pool,
    pub persona: Vec<Persona>,
}

#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pool {
    pub cards: u32,
    pub card_mib: u64,
    pub slice_mib: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Interactive,
    OvernightTab,
    LaptopClosed,
    FineTune,
    Inference,
    MemoryHolder,
    Extender,
    Crowd,
    AfterLunch,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Interactive => "interactive",
            Kind::OvernightTab => "overnight_tab",
            Kind::LaptopClosed => "laptop_closed",
            Kind::FineTune => "fine_tune",
            Kind::Inference => "inference",
            Kind::MemoryHolder => "memory_holder",
            Kind::Extender => "extender",
            Kind::Crowd => "crowd",
            Kind::AfterLunch => "after_lunch",
        }
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Persona {
    pub kind: Kind,
    pub count: u32,
    pub chance: f64,
    #[serde(default)]
    pub weekends: bool,
    pub arrive_h: [f64; 2],
    pub work_h: [f64; 2],
    pub book_min: u32,
    pub burst_min: [u32; 2],
    pub pause_mean_min: f64,
    pub run_share: f64,
    /// The share of pauses spent at the screen in another tab (documentation, chat): our page
    /// is hidden while its person is there.
    #[serde(default)]
    pub other_tab_share: f64,
    pub sagemaker_idle_min: u32,
    /// The idle timeout they choose on ours at launch (minutes, within the admin's bounds);
    /// none: the default.
    #[serde(default)]
    pub ours_idle_min: Option<u32>,
    #[serde(default)]
    pub lunch_min: Option<[u32; 2]>,
}

/// One person's day with a session: from the minute they launch, what each minute looks like.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Visit {
    /// Minute of the month.
    pub start: u32,
    /// What each minute from `start` on looks like; past the end, [`Visit::after`].
    pub minutes: Vec<u16>,
    /// What is left behind once the person is done, if they do not press Stop.
    pub after: u16,
    /// They press Stop at the end of `minutes`.
    pub stops: bool,
    /// What they book at launch.
    pub book_min: u32,
    /// They press Extend when their time is nearly up and they are still working.
    pub extends: bool,
}

impl Visit {
    pub fn end(&self) -> u32 {
        self.start + self.minutes.len() as u32
    }

    /// What minute `m` of the month looks like for this visit's session.
    pub fn at(&self, m: u32) -> u16 {
        if m < self.start {
            0
        } else if m < self.end() {
            self.minutes[(m - self.start) as usize]
        } else if self.stops {
            0
        } else {
            self.after
        }
    }
}

#[derive(Clone, Debug)]
pub struct Person {
    pub name: String,
    pub kind: Kind,
    pub sagemaker_idle_min: u32,
    pub ours_idle_min: Option<u32>,
    /// In order, never overlapping.
    pub visits: Vec<Visit>,
}

impl Person {
    /// The visit whose time (its minutes, or what it left behind, until the next visit) holds
    /// minute `m`.
    pub fn visit_at(&self, m: u32) -> Option<&Visit> {
        let i = self.visits.partition_point(|v| v.start <= m);
        i.checked_sub(1).map(|i| &self.visits[i])
    }
}

#[derive(Clone, Debug)]
pub struct Trace {
    pub days: u32,
    pub people: Vec<Person>,
}

pub const DAY: u32 = 1440;

impl Personas {
    pub fn parse(text: &str) -> Result<Personas, String> {
        use figment::Figment;
        use figment::providers::{Format, Toml};
        Figment::from(Toml::string(text))
            .extract()
            .map_err(|e| e.to_string())
    }

    /// The file in the repository.
    pub fn repo_default() -> Personas {
        Personas::parse(include_str!("../../../bench/reclaim/personas.toml"))
            .expect("bench/reclaim/personas.toml")
    }

    /// The month these people make.
    pub fn trace(&self) -> Trace {
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
        let mut people = Vec::new();
        for persona in &self.persona {
            for i in 0..persona.count {
                let mut visits = Vec::new();
                for day in 0..self.days {
                    let weekend = day % 7 >= 5;
                    // Drawn every day, so that one persona's figures do not move another's.
                    let comes = rng.r#gen::<f64>() < persona.chance;
                    let visit = day_of(persona, day, &mut rng);
                    if comes && (!weekend || persona.weekends) {
                        visits.push(visit);
                    }
                }
                people.push(Person {
                    name: format!("{}-{}", persona.kind.name(), i + 1),
                    kind: persona.kind,
                    sagemaker_idle_min: persona.sagemaker_idle_min,
                    ours_idle_min: persona.ours_idle_min,
                    visits,
                });
            }
        }
        Trace {
            days: self.days,
            people,
        }
    }
}

fn uniform(rng: &mut ChaCha8Rng, [lo, hi]: [f64; 2]) -> f64 {
    if hi <= lo { lo } else { rng.gen_range(lo..hi) }
}

fn uniform_min(rng: &mut ChaCha8Rng, [lo, hi]: [u32; 2]) -> u32 {
    if hi <= lo { lo } else { rng.gen_range(lo..=hi) }
}

fn exponential(rng: &mut ChaCha8Rng, mean: f64) -> f64 {
    -mean * (1.0 - rng.r#gen::<f64>()).ln()
}

/// Work at the screen for `minutes`: bursts of typing (some running cells), and pauses to read
/// and think, with the tab visible or (`other_tab_share` of them) in another tab.
fn at_the_screen(p: &Persona, minutes: u32, rng: &mut ChaCha8Rng) -> Vec<u16> {
    let mut out = Vec::with_capacity(minutes as usize);
    let here = NEED | PRESENT | TAB;
    let elsewhere = NEED | PRESENT | HIDDEN;
    while (out.len() as u32) < minutes {
        for _ in 0..uniform_min(rng, p.burst_min) {
            let mut m = here | INPUT;
            if rng.r#gen::<f64>() < p.run_share {
                m |= KERNEL | GPU | CPU | MEM;
            }
            out.push(m);
        }
        let pause = exponential(rng, p.pause_mean_min).round() as u32;
        // Drawn for every pause, so that the share moves nothing else of the trace.
        let away_tab = rng.r#gen::<f64>() < p.other_tab_share;
        let pause_minute = if away_tab { elsewhere } else { here };
        out.extend(std::iter::repeat_n(pause_minute, pause as usize));
    }
    out.truncate(minutes as usize);
    // The last minute is typing: a person's day ends with something they did.
    if let Some(last) = out.last_mut() {
        *last |= INPUT;
    }
    out
}

/// One day of `p`, drawn whether or not they come.
fn day_of(p: &Persona, day: u32, rng: &mut ChaCha8Rng) -> Visit {
    let start = day * DAY + (uniform(rng, p.arrive_h) * 60.0) as u32;
    let work = (uniform(rng, p.work_h) * 60.0).round().max(1.0) as u32;
    let mut visit = Visit {
        start,
        minutes: Vec::new(),
        after: 0,
        stops: false,
        book_min: p.book_min,
        extends: false,
    };
    match p.kind {
        Kind::Interactive | Kind::Crowd => {
            visit.minutes = at_the_screen(p, work, rng);
            visit.stops = true;
        }
        Kind::Extender => {
            visit.minutes = at_the_screen(p, work, rng);
            visit.stops = true;
            visit.extends = true;
        }
        Kind::OvernightTab => {
            visit.minutes = at_the_screen(p, work, rng);
            visit.after = TAB;
        }
        Kind::LaptopClosed => {
            visit.minutes = at_the_screen(p, work, rng);
            visit.after = 0;
        }
        Kind::MemoryHolder => {
            let mut minutes = at_the_screen(p, work, rng);
            // The model is loaded early and stays in GPU memory.
            for m in minutes.iter_mut().skip(3) {
                *m |= MEM;
            }
            for m in minutes.iter_mut().take(3) {
                *m |= KERNEL | GPU | CPU | MEM;
            }
            visit.minutes = minutes;
            visit.after = MEM;
        }
        Kind::FineTune => {
            // Set up at the screen, then the job runs in a terminal with the laptop closed:
            // GPU and CPU busy, with short evaluation spells on the CPU alone.
            let mut minutes = at_the_screen(p, uniform_min(rng, p.burst_min), rng);
            let mut left = work;
            while left > 0 {
                let train = uniform_min(rng, [20, 60]).min(left);
                minutes.extend(std::iter::repeat_n(NEED | GPU | CPU | MEM, train as usize));
                left -= train;
                let eval = uniform_min(rng, [1, 5]).min(left);
                minutes.extend(std::iter::repeat_n(NEED | CPU | MEM, eval as usize));
                left -= eval;
            }
            visit.minutes = minutes;
            visit.after = 0;
        }
        Kind::Inference => {
            // Started at the screen, then scripts call it with an API token: calls come as a
            // Poisson stream; a call keeps the GPU busy its minute; the model stays loaded.
            let mut minutes = at_the_screen(p, uniform_min(rng, p.burst_min), rng);
            for m in minutes.iter_mut() {
                *m |= MEM;
            }
            let mut calls = Vec::with_capacity(work as usize);
            while (calls.len() as u32) < work {
                calls.push(NEED | MEM | API | GPU);
                let gap = exponential(rng, p.pause_mean_min).round() as usize;
                calls.extend(std::iter::repeat_n(NEED | MEM, gap));
            }
            calls.truncate(work as usize);
            if let Some(last) = calls.last_mut() {
                *last |= API | GPU;
            }
            minutes.extend(calls);
            visit.minutes = minutes;
            visit.after = MEM;
        }
        Kind::AfterLunch => {
            let mut minutes = at_the_screen(p, work, rng);
            let lunch = uniform_min(rng, p.lunch_min.unwrap_or([60, 60]));
            // The tab stays open in the background: the page polls, nobody is there.
            minutes.extend(std::iter::repeat_n(HIDDEN, lunch as usize));
            let afternoon = (uniform(rng, p.work_h) * 60.0).round().max(1.0) as u32;
            minutes.extend(at_the_screen(p, afternoon, rng));
            visit.minutes = minutes;
            visit.stops = true;
        }
    }
    // Nobody works past midnight: a day's visit ends before the next one could begin.
    let room = ((day + 1) * DAY).saturating_sub(start + 1) as usize;
    visit.minutes.truncate(room.max(1));
    visit
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_draws_the_same_month() {
        let personas = Personas::repo_default();
        let a = personas.trace();
        let b = personas.trace();
        assert_eq!(a.people.len(), b.people.len());
        for (x, y) in a.people.iter().zip(&b.people) {
            assert_eq!(x.visits, y.visits);
        }
        let other = Personas {
            seed: personas.seed + 1,
            ..personas.clone()
        }
        .trace();
        assert!(
            a.people
                .iter()
                .zip(&other.people)
                .any(|(x, y)| x.visits != y.visits)
        );
    }

    #[test]
    fn visits_of_one_person_never_overlap_and_skip_weekends() {
        let trace = Personas::repo_default().trace();
        for person in &trace.people {
            for pair in person.visits.windows(2) {
                assert!(pair[0].end() <= pair[1].start, "{}", person.name);
            }
            for v in &person.visits {
                assert!((v.start / DAY) % 7 < 5, "{} came on a weekend", person.name);
            }
        }
    }

    #[test]
    fn a_fine_tune_computes_without_anyone_at_the_screen() {
        let trace = Personas::repo_default().trace();
        let tuner = trace
            .people
            .iter()
            .find(|p| p.kind == Kind::FineTune && !p.visits.is_empty())
            .expect("a fine-tune with a visit");
        let v = &tuner.visits[0];
        let unattended = v
            .minutes
            .iter()
            .filter(|m| **m & NEED != 0 && **m & PRESENT == 0)
            .count();
        assert!(unattended >= 60, "{unattended}");
        assert!(
            v.minutes
                .iter()
                .all(|m| *m & NEED == 0 || *m & (PRESENT | GPU | CPU) != 0)
        );
        assert_eq!(v.at(v.end()), 0, "nothing is left running once it is done");
    }
}
