//! The simulator's loop: a month of the trace replayed minute by minute through the real
//! service on a [`ManualClock`], for one policy.

use super::peers::Policy;
use super::trace::{self, API, CPU, GPU, INPUT, KERNEL, NEED, PRESENT, Personas, TAB, Trace};
use crate::config::{Config, DeclaredGpu};
use crate::runtime::{EditorLaunch, Running, Runtime, RuntimeError};
use crate::service::Service;
use crate::store::{SessionRecord, Store};
use crate::util::{Clock, ManualClock};
use app::domain::launch::LaunchRequest;
use app::domain::presence::{Beat, should_beat};
use app::domain::reaper;
use app::domain::scope::Scopes;
use app::domain::session::{EndReason, SessionState};
use app::model::{Role, Viewer};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

const MINUTE_MS: i64 = 60_000;

/// Editors that start at once and live until stopped: the simulator measures policies, not a
/// runtime. They park as the local runtime's do: refused while they hold GPU memory, unless
/// `checkpoints` (what CUDA checkpoint would add: their memory set aside, then restored).
struct SimRuntime {
    /// Editors (by handle) whose GPU memory is held this minute.
    holding: Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
    checkpoints: bool,
}

#[async_trait::async_trait]
impl Runtime for SimRuntime {
    fn availability(&self) -> Vec<(app::domain::launch::EditorKind, Result<(), String>)> {
        app::domain::launch::EditorKind::ALL
            .into_iter()
            .map(|e| (e, Ok(())))
            .collect()
    }
    async fn start(&self, launch: &EditorLaunch) -> Result<Running, RuntimeError> {
        Ok(Running {
            upstream: "127.0.0.1:9".into(),
            secret: "sim".into(),
            handle: launch.session_id.clone(),
        })
    }
    async fn wait_ready(
        &self,
        _: &EditorLaunch,
        _: &Running,
        _: Duration,
    ) -> Result<(), RuntimeError> {
        Ok(())
    }
    async fn stop(&self, _: &str) -> Result<(), RuntimeError> {
        Ok(())
    }
    async fn is_alive(&self, _: &str) -> bool {
        true
    }
    fn parks_editors(&self) -> bool {
        true
    }
    async fn park(&self, handle: &str) -> Result<(), RuntimeError> {
        let holds = self.holding.lock().is_ok_and(|h| h.contains(handle));
        if holds && !self.checkpoints {
            return Err(RuntimeError::Unavailable("it holds GPU memory".into()));
        }
        Ok(())
    }
    async fn resume(&self, _: &str) -> Result<(), RuntimeError> {
        Ok(())
    }
}

/// How a session ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Ended {
    /// Its person pressed Stop.
    Person,
    /// Its booked time ran out (the product's timer, the same under every policy).
    Timer,
    /// The policy under test reclaimed it.
    Reclaimed,
    /// Anything else (a failure): none is expected.
    Other,
}

/// One session of the month, as the simulator saw it (minutes of the month).
#[derive(Clone, Debug, Serialize)]
pub struct SessionOutcome {
    pub user: String,
    pub persona: &'static str,
    pub requested: u32,
    pub ready: Option<u32>,
    pub ended: Option<u32>,
    pub how: Option<Ended>,
    /// Minutes it held its slice, and those of them nobody needed.
    pub allocated_min: u32,
    pub idle_min: u32,
    /// Minutes it was parked (its slice given back, its kernels kept).
    pub parked_min: u32,
    /// The last minute a signal our reaper counts was recorded (typing, busy work, API calls).
    pub last_signal: u32,
    /// Credits charged for it (milli-credits, from the ledger).
    pub charged_milli: i64,
    pub price_per_hour: i64,
    /// What its person was told at the end, if anything.
    pub detail: Option<String>,
}

/// A reclaim that cost someone work.
#[derive(Clone, Debug, Serialize)]
pub struct Wrongful {
    pub user: String,
    pub persona: &'static str,
    /// "day 3 14:05".
    pub at: String,
    pub why: String,
}

/// What one policy did with the month.
#[derive(Clone, Debug, Serialize)]
pub struct Outcome {
    pub policy: &'static str,
    pub database: String,
    pub people: usize,
    pub days: u32,
    pub slots: u32,
    pub allocated_min: u64,
    pub used_min: u64,
    pub idle_min: u64,
    pub wrongful: Vec<Wrongful>,
    /// Reclaims in all (wrongful ones included).
    pub reclaims: u32,
    /// Launches again by a person who came back to a reclaimed session.
    pub relaunches: u32,
    /// Idle warnings shown to a person at the screen (each one they had to answer or lose the
    /// session): what a shorter timeout costs the people it keeps working. The peers warn
    /// nobody.
    pub warnings_at_screen: u32,
    /// Minutes a person sat at the screen of a running (or parked) session.
    pub present_min: u64,
    /// Times a session was parked, and resumed.
    pub parks: u32,
    pub resumes: u32,
    /// Minutes in which a person typed, or scripts called, a parked session that had not got
    /// its slice back by the minute's end: what parking cost in waiting.
    pub waited_for_gpu_min: u32,
    /// From the launch to the editor ready, minutes, per launch that started.
    pub waits_min: Vec<u32>,
    pub charged_milli: i64,
    /// The charged credits' share for minutes nobody needed.
    pub idle_charged_milli: i64,
    /// Per user: (name, the balance the ledger says, the one the simulator's minutes say).
    pub balances: Vec<(String, i64, i64)>,
    pub sessions: Vec<SessionOutcome>,
}

impl Outcome {
    pub fn idle_share(&self) -> f64 {
        self.idle_min as f64 / (self.allocated_min.max(1)) as f64
    }

    /// The `p`-th percentile of the queue waits (minutes).
    pub fn wait(&self, p: f64) -> u32 {
        let mut w = self.waits_min.clone();
        w.sort_unstable();
        if w.is_empty() {
            return 0;
        }
        let i = ((p * w.len() as f64).ceil() as usize).clamp(1, w.len()) - 1;
        w[i]
    }

    /// Warnings shown to people at the screen per hour they sat there.
    pub fn warnings_per_hour(&self) -> f64 {
        self.warnings_at_screen as f64 * 60.0 / self.present_min.max(1) as f64
    }

    pub fn ledger_balances(&self) -> bool {
        self.balances.iter().all(|(_, ledger, sim)| ledger == sim)
    }
}

/// A session the simulator follows.
struct Tracked {
    id: String,
    person: usize,
    requested: u32,
    ready: Option<u32>,
    /// The peer policy's idea of its last activity.
    last_active: u32,
    /// When its page last beat (the page's own rule, `domain::presence`).
    last_beat: i64,
    last_signal: u32,
    allocated: u32,
    idle: u32,
    parked: u32,
    /// It was parked at the last minute's end.
    was_parked: bool,
    /// Its person sees our idle warning now.
    warned: bool,
    /// Its page was in sight the minute before.
    page_visible: bool,
    ended: Option<(u32, Ended)>,
    price_per_hour: i64,
    detail: Option<String>,
}

/// "day 3 14:05" for minute `m` of the month.
pub fn when(m: u32) -> String {
    format!(
        "day {} {:02}:{:02}",
        m / trace::DAY,
        (m % trace::DAY) / 60,
        m % 60
    )
}

/// A fresh empty database: SQLite in a temporary folder, or (kind "postgres") a new database
/// on the server `DATABASE_URL` names; None where there is none.
pub async fn fresh_database(kind: &str) -> Option<String> {
    sqlx::any::install_default_drivers();
    if kind == "sqlite" {
        let dir = std::env::temp_dir().join(format!("reclaim-{}", crate::util::new_id()));
        std::fs::create_dir_all(&dir).ok()?;
        return Some(format!("sqlite://{}/sim.db?mode=rwc", dir.display()));
    }
    use sqlx::Executor;
    let admin = std::env::var("DATABASE_URL")
        .ok()
        .filter(|u| u.starts_with("postgres"))?;
    let db = format!("reclaim_{}", crate::util::new_id());
    let pool = sqlx::AnyPool::connect(&admin).await.ok()?;
    pool.execute(format!("CREATE DATABASE {db}").as_str())
        .await
        .ok()?;
    let base = admin.rsplit_once('/').map(|(b, _)| b).unwrap_or(&admin);
    Some(format!("{base}/{db}"))
}

/// The configuration the month runs under: the defaults, the persona file's pool, no
/// pre-started editors (a start costs no simulated time, so they change nothing measured here);
/// under a peer's policy our idle rule is off (the timer stays: it is the product's, the same
/// for all). `adjust` changes it further (a test's broken policy).
pub fn config_for(personas: &Personas, policy: Policy, adjust: impl FnOnce(&mut Config)) -> Config {
    let mut config = Config::default();
    config.pool.detect_nvidia = false;
    config.pool.warm.clear();
    config.pool.gpus = (0..personas.pool.cards)
        .map(|i| DeclaredGpu {
            name: format!("sim-{i}"),
            model: "Simulated".into(),
            memory_mib: personas.pool.card_mib,
            slice_mib: personas.pool.slice_mib,
        })
        .collect();
    if !policy.is_ours() {
        config.idle.timeout_seconds = 365 * 24 * 3600;
        config.idle.away_timeout_seconds = 0;
    }
    if policy == Policy::OursSooner {
        config.idle.pressure_timeout_seconds = super::peers::SOONER_SECONDS;
    }
    if !policy.is_ours() || policy == Policy::OursNoParking {
        config.idle.park_after_seconds = 0;
    }
    adjust(&mut config);
    config
}

struct Sim<'a> {
    personas: &'a Personas,
    trace: &'a Trace,
    policy: Policy,
    service: Arc<Service>,
    store: Store,
    clock: Arc<ManualClock>,
    t0: i64,
    viewers: Vec<Viewer>,
    admin: Viewer,
    tracked: Vec<Tracked>,
    /// Index in `tracked` of each person's live session.
    live: BTreeMap<usize, usize>,
    /// Visits (by start) whose session a policy reclaimed.
    reclaimed_visits: std::collections::HashSet<(usize, u32)>,
    rng: ChaCha8Rng,
    relaunches: u32,
    wrongful: Vec<Wrongful>,
    reclaims: u32,
    warnings_at_screen: u32,
    present_min: u64,
    parks: u32,
    resumes: u32,
    waited_for_gpu_min: u32,
    /// What the runtime sees of each editor's GPU memory ([`SimRuntime::holding`]).
    holding: Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
}

/// Replays `trace` under `policy` on the database at `url` (empty), and reports.
pub async fn simulate(
    personas: &Personas,
    trace: &Trace,
    policy: Policy,
    url: &str,
    adjust: impl FnOnce(&mut Config),
) -> Result<Outcome, String> {
    let config = config_for(personas, policy, adjust);
    let store = Store::connect(url).await.map_err(|e| e.to_string())?;
    store.migrate().await.map_err(|e| e.to_string())?;
    let clock = Arc::new(ManualClock::now());
    let store = store.with_clock(clock.clone());
    let gpus = config.declared_gpus();
    let holding = Arc::new(std::sync::Mutex::new(Default::default()));
    let service = Arc::new(Service::new(
        config,
        store.clone(),
        Arc::new(SimRuntime {
            holding: holding.clone(),
            checkpoints: policy == Policy::OursCheckpoint,
        }),
        gpus,
        crate::gpu::Enforcement::None,
    ));
    service.guard.sync_pool().await.map_err(|e| e.to_string())?;
    let grant = personas.grant * app::domain::credits::MILLI;
    let mut viewers = Vec::new();
    for person in &trace.people {
        let user = store
            .create_user(&person.name, None, Role::User, grant, None)
            .await
            .map_err(|e| e.to_string())?;
        viewers.push(user.viewer(Scopes::ALL));
    }
    let admin = store
        .create_user("reclaim-admin", None, Role::Admin, 0, None)
        .await
        .map_err(|e| e.to_string())?
        .viewer(Scopes::ALL);
    let mut sim = Sim {
        personas,
        trace,
        policy,
        service,
        store,
        t0: clock.now_ms(),
        clock,
        viewers,
        admin,
        tracked: Vec::new(),
        live: BTreeMap::new(),
        reclaimed_visits: Default::default(),
        rng: ChaCha8Rng::seed_from_u64(personas.seed ^ 0x5eed),
        relaunches: 0,
        wrongful: Vec::new(),
        reclaims: 0,
        warnings_at_screen: 0,
        present_min: 0,
        parks: 0,
        resumes: 0,
        waited_for_gpu_min: 0,
        holding,
    };
    let month = trace.days * trace::DAY;
    let mut m = 0;
    // Past the month's end only until its last sessions end (their timers bound them).
    while m < month || (!sim.live.is_empty() && m < month + trace::DAY) {
        sim.minute(m, m < month).await?;
        m += 1;
    }
    sim.finish(url).await
}

impl Sim<'_> {
    fn flags(&self, person: usize, m: u32) -> u16 {
        self.trace.people[person].visit_at(m).map_or(0, |v| v.at(m))
    }

    fn now(&self) -> i64 {
        self.clock.now_ms()
    }

    fn move_clock_to(&self, m: u32) {
        let target = self.t0 + i64::from(m) * MINUTE_MS;
        let by = target - self.now();
        if by > 0 {
            self.clock.advance(Duration::from_millis(by as u64));
        }
    }

    /// One minute: the people act, the signals are recorded, the policy looks, the reaper
    /// passes; then what ended is judged and the minute is counted.
    async fn minute(&mut self, m: u32, people_act: bool) -> Result<(), String> {
        let anyone_here =
            people_act && (0..self.trace.people.len()).any(|p| self.flags(p, m) & PRESENT != 0);
        if self.live.is_empty() && !anyone_here {
            return Ok(());
        }
        self.move_clock_to(m);
        let records: HashMap<String, SessionRecord> = self
            .store
            .live_sessions()
            .await
            .map_err(|e| e.to_string())?
            .into_iter()
            .map(|r| (r.id.clone(), r))
            .collect();
        if people_act {
            for person in 0..self.trace.people.len() {
                self.act(person, m, &records).await;
            }
            self.settle().await;
        }
        self.peer_looks(m).await;
        self.service.guard.reap().await;
        self.settle().await;
        self.judge_ends(m).await?;
        Ok(())
    }

    /// Waits for launches under way (started in the service's own tasks) to become ready.
    async fn settle(&self) {
        for _ in 0..10_000 {
            let starting = self.store.live_sessions().await.is_ok_and(|live| {
                live.iter()
                    .any(|r| matches!(r.state, SessionState::Starting | SessionState::Requested))
            });
            if !starting {
                return;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    async fn act(&mut self, person: usize, m: u32, records: &HashMap<String, SessionRecord>) {
        let Some(visit) = self.trace.people[person].visit_at(m) else {
            return;
        };
        let flags = visit.at(m);
        let viewer = self.viewers[person].clone();
        let Some(&t) = self.live.get(&person) else {
            if flags & PRESENT != 0 {
                self.launch(person, m, visit.book_min, visit.start).await;
            }
            return;
        };
        let id = self.tracked[t].id.clone();
        if let Ok(mut holding) = self.holding.lock() {
            if flags & trace::MEM != 0 {
                holding.insert(id.clone());
            } else {
                holding.remove(&id);
            }
        }
        if visit.stops && m == visit.end() {
            let _ = self.service.sessions.stop(&viewer, &id).await;
            self.tracked[t].ended = Some((m, Ended::Person));
            return;
        }
        let Some(record) = records.get(&id) else {
            return;
        };
        let mut parked = record.state == SessionState::Parked;
        if record.state != SessionState::Ready && !parked {
            return;
        }
        let now = self.now();
        let sessions = &self.service.sessions;
        // The page beats by its own rule: at once after input, else every two minutes while
        // visible; going into the background it says so, and beats again once back in sight; a
        // closed laptop sends nothing.
        let visible = flags & (INPUT | TAB) != 0;
        let typed = flags & INPUT != 0;
        let was_visible = std::mem::replace(&mut self.tracked[t].page_visible, visible);
        if was_visible && flags & trace::HIDDEN != 0 {
            let left = Beat {
                input: false,
                left: true,
            };
            let _ = sessions.heartbeat(&viewer, &id, left).await;
            self.tracked[t].last_beat = now;
        } else if visible && !was_visible {
            self.tracked[t].last_beat = i64::MIN / 2;
        }
        if should_beat(now, self.tracked[t].last_beat, typed, visible, false) {
            let beat = if typed { Beat::INPUT } else { Beat::HERE };
            let _ = sessions.heartbeat(&viewer, &id, beat).await;
            self.tracked[t].last_beat = now;
            // A beat with input takes a parked session's slice back, where it is free.
            parked = parked && typed && self.still_parked(&id).await;
        }
        // A parked editor is frozen: the proxy forwards nothing to it, and only a script's
        // call wakes it (`Sessions::wake_parked`, as the proxy asks).
        if flags & (INPUT | TAB | trace::HIDDEN) != 0 && !parked {
            let _ = self.store.touch_traffic(&id, now, false).await;
        }
        if flags & API != 0 {
            if parked {
                let owner = &self.viewers[person].id;
                parked = sessions.wake_parked(owner, &id, true).await == Some(false);
            } else {
                let _ = self.store.touch_traffic(&id, now, true).await;
            }
        }
        if parked && flags & (INPUT | API) != 0 {
            self.waited_for_gpu_min += 1;
        }
        // What the sampler would see, judged by its own rule.
        let cpu_floor = f64::from(self.service.config().idle.busy_cpu_percent) / 100.0;
        let sample = reaper::Sample {
            editor_busy: Some(flags & KERNEL != 0),
            gpu_active: flags & GPU != 0,
            cpu_cores: Some(if flags & CPU != 0 { 1.0 } else { 0.01 }),
        };
        if reaper::busy(&sample, cpu_floor) && !parked {
            let _ = self.store.record_sample(&id, Some(now), None).await;
        }
        if flags & (INPUT | KERNEL | GPU | CPU | API) != 0 {
            self.tracked[t].last_signal = m;
        }
        // A person at the screen sees our warning (the page reads the deadline the server
        // says) and, mostly, answers it.
        let quiet_at_screen = flags & PRESENT != 0 && flags & INPUT == 0;
        if !quiet_at_screen {
            self.tracked[t].warned = false;
        }
        if self.policy.is_ours() && quiet_at_screen {
            let policy = self.service.guard.idle_policy_now(record);
            let idle_at = policy.idle_at(&record.signals(), now);
            let page = app::domain::idle::page_idle(idle_at, policy.warn_ms, now, now);
            if page.warn && !self.tracked[t].warned {
                self.warnings_at_screen += 1;
            }
            self.tracked[t].warned = page.warn;
            // In another tab, the warning comes as a notification.
            let answers = if flags & trace::HIDDEN != 0 {
                self.personas.answers_notification
            } else {
                self.personas.answers_warning
            };
            if page.warn && self.rng.gen_bool(answers) {
                let _ = sessions.heartbeat(&viewer, &id, Beat::INPUT).await;
                self.tracked[t].last_signal = m;
                self.tracked[t].last_beat = now;
            }
        }
        // Time nearly up and still working: Extend.
        if visit.extends
            && flags & PRESENT != 0
            && let Some(ends_at) = record.ends_at
            && ends_at - now <= 10 * MINUTE_MS
            && i64::from(visit.end()) * MINUTE_MS + self.t0 > ends_at
        {
            let _ = sessions.extend(&viewer, &id, 60).await;
        }
    }

    async fn still_parked(&self, id: &str) -> bool {
        matches!(self.store.session(id).await, Ok(Some(r)) if r.state == SessionState::Parked)
    }

    async fn launch(&mut self, person: usize, m: u32, book_min: u32, visit: u32) {
        let request = LaunchRequest {
            editor: "jupyterlab".into(),
            slice_mib: self.personas.pool.slice_mib,
            duration_minutes: book_min,
            image: None,
            // A choice on ours; the peers' own choices are their rules' (SageMaker's).
            idle_minutes: self.trace.people[person]
                .ours_idle_min
                .filter(|_| self.policy.is_ours()),
        };
        let viewer = self.viewers[person].clone();
        let Ok(view) = self.service.sessions.launch(&viewer, request).await else {
            return;
        };
        if self.reclaimed_visits.contains(&(person, visit)) {
            self.relaunches += 1;
        }
        self.live.insert(person, self.tracked.len());
        self.tracked.push(Tracked {
            id: view.id,
            person,
            requested: m,
            ready: None,
            last_active: m,
            last_beat: i64::MIN / 2,
            last_signal: m,
            allocated: 0,
            idle: 0,
            parked: 0,
            was_parked: false,
            warned: false,
            page_visible: false,
            ended: None,
            price_per_hour: view.price_per_hour,
            detail: None,
        });
    }

    /// A peer's culler: every period, ends the sessions idle by its rule (through the real
    /// service's stop, as an admin).
    async fn peer_looks(&mut self, m: u32) {
        if self.policy.is_ours() {
            return;
        }
        let live: Vec<usize> = self.live.values().copied().collect();
        for t in live {
            let Some(ready) = self.tracked[t].ready else {
                continue;
            };
            let person = self.tracked[t].person;
            let flags = self.flags(person, m);
            if self.policy.counts(flags) == Some(true) {
                self.tracked[t].last_active = m;
            }
            let last = self.tracked[t].last_active.max(ready);
            let user_min = self.trace.people[person].sagemaker_idle_min;
            if self.policy.ends(last, m, user_min) {
                let id = self.tracked[t].id.clone();
                let _ = self.service.admin.admin_stop(&self.admin, &id).await;
                self.service.guard.dispatch_queue().await;
            }
        }
    }

    /// Reads back every followed session: ready ones start their minutes; ended ones are
    /// judged; the minute is counted for the rest.
    async fn judge_ends(&mut self, m: u32) -> Result<(), String> {
        let live: Vec<(usize, usize)> = self.live.iter().map(|(p, t)| (*p, *t)).collect();
        for (person, t) in live {
            let record = self
                .store
                .session(&self.tracked[t].id)
                .await
                .map_err(|e| e.to_string())?
                .ok_or("a followed session vanished")?;
            if record.state == SessionState::Ready && self.tracked[t].ready.is_none() {
                self.tracked[t].ready = Some(m);
                self.tracked[t].last_active = m;
                self.tracked[t].last_signal = self.tracked[t].last_signal.max(m);
            }
            if record.state.is_live() {
                let parked = record.state == SessionState::Parked;
                match (self.tracked[t].was_parked, parked) {
                    (false, true) => self.parks += 1,
                    (true, false) => self.resumes += 1,
                    _ => {}
                }
                self.tracked[t].was_parked = parked;
                if parked {
                    self.tracked[t].parked += 1;
                    if self.flags(person, m) & PRESENT != 0 {
                        self.present_min += 1;
                    }
                }
                if record.state == SessionState::Ready {
                    self.tracked[t].allocated += 1;
                    let flags = self.flags(person, m);
                    if flags & NEED == 0 {
                        self.tracked[t].idle += 1;
                    }
                    if flags & PRESENT != 0 {
                        self.present_min += 1;
                    }
                }
                continue;
            }
            self.live.remove(&person);
            self.tracked[t].detail = record.detail.clone();
            if self.tracked[t].ended.is_some() {
                continue;
            }
            let how = match record.end_reason {
                Some(EndReason::User) => Ended::Person,
                Some(EndReason::Timer) => Ended::Timer,
                Some(EndReason::Idle) if self.policy.is_ours() => Ended::Reclaimed,
                Some(EndReason::Admin) if !self.policy.is_ours() => Ended::Reclaimed,
                _ => Ended::Other,
            };
            self.tracked[t].ended = Some((m, how));
            if how == Ended::Reclaimed {
                self.reclaimed(t, m);
            }
        }
        Ok(())
    }

    fn reclaimed(&mut self, t: usize, m: u32) {
        self.reclaims += 1;
        let person = &self.trace.people[self.tracked[t].person];
        let Some(visit) = person.visit_at(m) else {
            return;
        };
        self.reclaimed_visits
            .insert((self.tracked[t].person, visit.start));
        let flags = visit.at(m);
        if flags & NEED == 0 {
            return;
        }
        let why = if flags & PRESENT != 0 {
            let typed = (visit.start..=m)
                .rev()
                .find(|&x| visit.at(x) & INPUT != 0)
                .map_or(0, |x| m - x);
            format!("its person was at the screen, last typed {typed} min before")
        } else if flags & (GPU | CPU) != 0 {
            "a job was computing (GPU or CPU) with no browser attached".to_string()
        } else {
            let next = (m..visit.end()).find(|&x| visit.at(x) & API != 0);
            match next {
                Some(x) => format!(
                    "its scripts called its API again {} min later (quiet for {} min)",
                    x - m,
                    m - (visit.start..m)
                        .rev()
                        .find(|&x| visit.at(x) & API != 0)
                        .unwrap_or(visit.start)
                ),
                None => "its work was not done".to_string(),
            }
        };
        self.wrongful.push(Wrongful {
            user: person.name.clone(),
            persona: person.kind.name(),
            at: when(m),
            why,
        });
    }

    async fn finish(self, url: &str) -> Result<Outcome, String> {
        let mut charged_by_session: HashMap<String, i64> = HashMap::new();
        let mut balances = Vec::new();
        let grant = self.personas.grant * app::domain::credits::MILLI;
        for (p, viewer) in self.viewers.iter().enumerate() {
            let ledger = self
                .store
                .ledger(&viewer.id)
                .await
                .map_err(|e| e.to_string())?;
            for entry in ledger.iter().filter(|e| e.kind == "charge") {
                if let Some(id) = &entry.session_id {
                    *charged_by_session.entry(id.clone()).or_default() -= entry.amount;
                }
            }
            let ledger_balance: i64 = ledger.iter().map(|e| e.amount).sum();
            // The simulator's own count: every minute it saw the session ready, at its price.
            let sim_balance = grant
                - self
                    .tracked
                    .iter()
                    .filter(|t| t.person == p)
                    .map(|t| {
                        // Parked minutes are not charged: the slice went back.
                        app::domain::credits::price_for_minutes(
                            t.price_per_hour,
                            i64::from(t.allocated),
                        )
                    })
                    .sum::<i64>();
            balances.push((viewer.name.clone(), ledger_balance, sim_balance));
        }
        let sessions: Vec<SessionOutcome> = self
            .tracked
            .iter()
            .map(|t| {
                let person = &self.trace.people[t.person];
                SessionOutcome {
                    user: person.name.clone(),
                    persona: person.kind.name(),
                    requested: t.requested,
                    ready: t.ready,
                    ended: t.ended.map(|(m, _)| m),
                    how: t.ended.map(|(_, how)| how),
                    allocated_min: t.allocated,
                    idle_min: t.idle,
                    parked_min: t.parked,
                    last_signal: t.last_signal,
                    charged_milli: charged_by_session.get(&t.id).copied().unwrap_or(0),
                    price_per_hour: t.price_per_hour,
                    detail: t.detail.clone(),
                }
            })
            .collect();
        let allocated_min: u64 = sessions.iter().map(|s| u64::from(s.allocated_min)).sum();
        let idle_min: u64 = sessions.iter().map(|s| u64::from(s.idle_min)).sum();
        let idle_charged_milli = sessions
            .iter()
            .filter(|s| s.allocated_min > 0)
            .map(|s| s.charged_milli * i64::from(s.idle_min) / i64::from(s.allocated_min))
            .sum();
        let waits_min = self
            .tracked
            .iter()
            .filter_map(|t| t.ready.map(|r| r - t.requested))
            .collect();
        let database = if url.starts_with("sqlite") {
            "sqlite"
        } else {
            "postgres"
        };
        self.store.close().await;
        Ok(Outcome {
            policy: self.policy.name(),
            database: database.into(),
            people: self.trace.people.len(),
            days: self.trace.days,
            slots: self.personas.pool.cards
                * (self.personas.pool.card_mib / self.personas.pool.slice_mib) as u32,
            allocated_min,
            used_min: allocated_min - idle_min,
            idle_min,
            wrongful: self.wrongful,
            reclaims: self.reclaims,
            relaunches: self.relaunches,
            warnings_at_screen: self.warnings_at_screen,
            present_min: self.present_min,
            parks: self.parks,
            resumes: self.resumes,
            waited_for_gpu_min: self.waited_for_gpu_min,
            waits_min,
            charged_milli: sessions.iter().map(|s| s.charged_milli).sum(),
            idle_charged_milli,
            balances,
            sessions,
        })
    }
}
