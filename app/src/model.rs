//! Wire types shared by the REST API, the server functions and the pages.

use crate::domain::hold::SliceHold;
use crate::domain::launch::EditorKind;
use crate::domain::session::{EndReason, SessionState};
use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    User,
    Admin,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::User => "user",
            Self::Admin => "admin",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "user" => Some(Self::User),
            "admin" => Some(Self::Admin),
            _ => None,
        }
    }
}

/// The signed-in person.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Viewer {
    pub id: String,
    pub name: String,
    pub role: Role,
    /// What the credential of this request may do: everything for a browser's sign-in, what
    /// was granted for an API token.
    pub scopes: crate::domain::scope::Scopes,
    /// When the API token of this request expires, if it does: what it makes expires by then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_expires_at_ms: Option<i64>,
    /// A browser's sign-in with a password an admin set: nothing but choosing a new one (the
    /// account page) is allowed until then.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub must_change_password: bool,
}

impl Viewer {
    /// The viewer, when they may act: refused while their password must be changed first.
    pub fn settled(self) -> Result<Viewer, crate::error::AppError> {
        if self.must_change_password {
            Err(crate::error::AppError::PasswordChangeRequired)
        } else {
            Ok(self)
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreditsView {
    /// Milli-credits available to spend now.
    pub balance: i64,
    /// Milli-credits held by running sessions.
    pub held: i64,
    /// What the user asked an admin for and has no answer to yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<CreditRequest>,
}

/// A user's open ask for credits: one at a time, answered by a grant or declined by an admin.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreditRequest {
    /// Milli-credits.
    pub amount: i64,
    pub note: String,
    pub at_ms: i64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EditorOption {
    pub kind: EditorKind,
    pub label: String,
    /// None when it can be launched; otherwise why not.
    pub unavailable: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SliceOption {
    pub slice_mib: u64,
    /// Milli-credits per hour.
    pub price_per_hour: i64,
    pub free: u32,
    pub total: u32,
    /// A whole card (burst): queued for a free card, with a short maximum duration.
    pub burst: bool,
    /// Longest duration for this size (bursts are capped).
    pub max_minutes: u32,
    /// Pre-started editors ready for a fast launch, by editor.
    pub warm: Vec<(EditorKind, u32)>,
    /// Launches waiting for this size.
    pub queued: u32,
    /// The memory and CPU a session of this size gets beside its GPU, where they are limited
    /// (e.g. "16 GB RAM · 2 CPUs").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<String>,
    /// What holds a session of this size to it (the weakest of the cards offering it).
    #[serde(default)]
    pub hold: SliceHold,
    /// The idle timeouts a person may choose for this size.
    #[serde(default)]
    pub idle_choice: crate::domain::idle::TimeoutChoice,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotView {
    pub id: String,
    pub slice_mib: u64,
    pub in_use: bool,
    /// A pre-started editor waits here.
    pub warm: Option<EditorKind>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuView {
    pub id: String,
    pub model: String,
    pub memory_mib: u64,
    pub hold: SliceHold,
    pub slots: Vec<SlotView>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DurationLimits {
    pub min_minutes: u32,
    pub max_minutes: u32,
    pub default_minutes: u32,
}

/// One step of a session's life, as streamed to the launch progress bar.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Step {
    pub seq: i64,
    pub at_ms: i64,
    pub state: SessionState,
    pub message: String,
    /// 0..=100, for the progress bar.
    pub progress: u8,
    /// Set on a step that ends the session.
    pub failed: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionView {
    pub id: String,
    pub editor: EditorKind,
    pub slice_mib: u64,
    pub gpu_model: Option<String>,
    /// What holds the session to its slice, once it has a card.
    #[serde(default)]
    pub slice_hold: SliceHold,
    pub slot_id: Option<String>,
    pub state: SessionState,
    pub end_reason: Option<EndReason>,
    /// Why it failed or ended, in words.
    pub detail: Option<String>,
    pub duration_minutes: u32,
    pub created_at_ms: i64,
    pub ends_at_ms: Option<i64>,
    /// Where the editor opens, through our proxy; set once ready.
    pub url: Option<String>,
    /// Milli-credits held for this session.
    pub held: i64,
    /// Milli-credits per hour on the card it got.
    pub price_per_hour: i64,
    /// Its time parked, which is not charged.
    #[serde(default)]
    pub parked: crate::domain::credits::Parked,
    /// Place in line while queued (1 = next).
    pub queue_position: Option<u32>,
    /// While queued: when it should start, from the running sessions' end times (`None`: after
    /// sessions that have not started), and what it waits for, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_eta_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waits_for: Option<String>,
    /// While queued with a time: what frees its place by then, in words
    /// ([`crate::domain::pool::frees_words`]: a running session's time ending, an idle session
    /// reclaimed, an editor started ahead handed over).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_why: Option<String>,
    /// When it ends as idle if nothing happens; moves with activity.
    pub idle_at_ms: Option<i64>,
    /// How long before either end the page warns.
    pub warn_ms: i64,
    /// GPU memory the editor uses now, where the runtime can see it.
    pub gpu_used_mib: Option<u64>,
    pub steps: Vec<Step>,
    /// An admin let into this editor now (audited), so that its owner knows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin_access: Option<AdminAccessNote>,
    /// Set once a process of the session outgrew its memory and was stopped: what the user is
    /// told about it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_note: Option<String>,
    /// What it cost, once it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<SessionCost>,
    /// When its editor became ready, and when it ended: the time it was in use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_at_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at_ms: Option<i64>,
    /// Why its person could not launch it again now (`session::relaunch_refusal`): its page then
    /// offers no Launch again. Set for an ended session on its owner's own view.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launch_refused: Option<String>,
    /// The shared datasets its launch mounted (`~/datasets/<name>`), on its own page.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub datasets: Vec<String>,
}

impl SessionView {
    /// Sets when the queued session should start and what frees its place by then
    /// ([`crate::domain::pool::queue_wait`]).
    pub fn wait_for(&mut self, wait: Option<crate::domain::pool::QueueWait>) {
        self.queue_eta_ms = wait.as_ref().map(|w| w.at_ms);
        self.queue_why = wait.map(|w| crate::domain::pool::frees_words(&w.by));
    }
}

/// What an ended session held, was charged and gave back (milli-credits).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionCost {
    pub held: i64,
    pub charged: i64,
    pub returned: i64,
    /// The minutes charged, rounded up as the charge is (`credits::charged_minutes`): the
    /// count its card shows beside the charge.
    #[serde(default)]
    pub minutes: i64,
}

impl SessionCost {
    /// From the session's holds and charges, as the ledger has them (both positive), and the
    /// minutes charged.
    pub fn of(held: i64, charged: i64, minutes: i64) -> SessionCost {
        SessionCost {
            held,
            charged,
            returned: (held - charged).max(0),
            minutes,
        }
    }
}

/// A line of a user's credit history: grants with their notes, holds, charges, refunds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerLine {
    pub kind: String,
    /// Milli-credits: positive in, negative out.
    pub amount: i64,
    pub session_id: Option<String>,
    pub note: String,
    pub at_ms: i64,
}

/// Who may reach a user's editor besides them, and until when.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdminAccessNote {
    pub admin: String,
    pub until_ms: i64,
}

/// A user's limits and what they use now.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuotaView {
    pub limits: crate::domain::quota::Limits,
    pub usage: crate::domain::quota::Usage,
    /// Set when a limit blocks new launches (e.g. the workspace is over its size).
    pub note: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dashboard {
    pub viewer: Viewer,
    pub credits: CreditsView,
    pub editors: Vec<EditorOption>,
    pub slices: Vec<SliceOption>,
    pub durations: DurationLimits,
    pub gpus: Vec<GpuView>,
    pub sessions: Vec<SessionView>,
    pub quota: QuotaView,
    /// What holds a slice smaller than its card, in a sentence ("Soft limit: HAMi-core holds …").
    pub enforcement: String,
    /// Set when editors on this server are not kept apart: what every page then says.
    #[serde(default)]
    pub isolation_warning: Option<String>,
    /// Approved images a launch may name (Kubernetes only; empty on the local runtime).
    #[serde(default)]
    pub images: Vec<ImageView>,
    /// The newest lines of the user's credit history.
    #[serde(default)]
    pub history: Vec<LedgerLine>,
    /// The balance at the end of each of the last 30 days (UTC), the last one now: milli-credits.
    #[serde(default)]
    pub balance_days: Vec<(i64, i64)>,
    /// The user's last 30 days (UTC): slice memory held against the share of it in use.
    #[serde(default)]
    pub usage_days: Vec<crate::domain::usage::UsageDay>,
}

/// The dashboard as its page gets it: what the page's code reads and changes, and the parts that
/// only show (the charts, the credit history, the pool) already drawn by the server, so that the
/// browser carries no code for them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DashboardPage {
    pub viewer: Viewer,
    pub credits: CreditsView,
    pub editors: Vec<EditorOption>,
    pub slices: Vec<SliceOption>,
    pub durations: DurationLimits,
    pub sessions: Vec<SessionView>,
    pub quota: QuotaView,
    #[serde(default)]
    pub isolation_warning: Option<String>,
    #[serde(default)]
    pub images: Vec<ImageChoice>,
    /// The shared datasets a launch mounts (`~/datasets/<name>`), for the launch form's line.
    #[serde(default)]
    pub datasets: Vec<String>,
    pub drawn: DashboardDrawn,
}

/// An approved image as the launch form offers it: what the page shows and sends, no more.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageChoice {
    /// None for the editor's configured default.
    pub id: Option<String>,
    pub editor: EditorKind,
    pub label: String,
    pub reference: String,
}

/// The dashboard's parts drawn on the server: HTML rendered by the pages' own components (which
/// escape every text), never taken from anywhere else.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DashboardDrawn {
    /// Balance line, held against used per day, the last sessions' costs.
    pub spending: String,
    /// The newest lines of the credit history, as a table; empty when there are none.
    pub history: String,
    /// The pool's cards and their slices.
    pub pool: String,
    /// The last ten ended sessions' cards; empty when there are none.
    #[serde(default)]
    pub recent: String,
    /// The user's promotions and how files get pushed; empty where the server has no registry.
    #[serde(default)]
    pub promotions: String,
    /// The workspace's download and backups (`ui::backups`); empty where workspaces are not
    /// on this server.
    #[serde(default)]
    pub backups: String,
}

/// An API token as its owner may see it: never its secret, which only its hash stands for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenRecord {
    pub id: String,
    pub label: String,
    pub scopes: crate::domain::scope::Scopes,
    #[serde(rename = "created_at_ms")]
    pub created_at: i64,
    #[serde(rename = "expires_at_ms")]
    pub expires_at: Option<i64>,
}

/// A token just made: the only time its secret is shown.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewToken {
    pub id: String,
    pub label: String,
    pub scopes: crate::domain::scope::Scopes,
    pub token: String,
    #[serde(rename = "expires_at_ms")]
    pub expires_at: Option<i64>,
}

/// How a browser's sign-in proves it is the person before it makes a lasting credential: a
/// script in an editor's page (served from our origin) could otherwise make one from the cookie.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Confirmation {
    /// The account's password, sent with the request.
    Password,
    /// A sign-in at the identity provider within the last few minutes (accounts without a
    /// password); `fresh` when there was one.
    SingleSignOn { provider: String, fresh: bool },
    /// Nothing more: the request carries an API token.
    None,
}

/// The tokens page.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokensPage {
    pub viewer: Viewer,
    pub tokens: Vec<TokenRecord>,
    pub confirmation: Confirmation,
}

/// A user as the admin pages list them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdminUser {
    pub id: String,
    pub name: String,
    pub role: Role,
    pub locked: bool,
    /// Signs in through the identity provider (no password here).
    pub single_sign_on: bool,
    /// Signs in with a password an admin set (or the first run printed), to be changed first.
    #[serde(default)]
    pub must_change_password: bool,
    /// Milli-credits.
    pub balance: i64,
    /// Milli-credits held by live sessions.
    pub held: i64,
    pub live_sessions: u32,
    pub created_at_ms: i64,
    /// The account of the admin looking: its role, lock and deletion are another admin's call.
    #[serde(default)]
    pub is_you: bool,
    /// What they asked for and no admin has answered yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credit_request: Option<CreditRequest>,
    /// Deleted, its storage still kept: when its storage goes (the deletion can be undone
    /// until then). Only the `deleted` filter lists such accounts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_removed_at_ms: Option<i64>,
    /// What an admin set for this user; `None` keeps the configured default.
    pub overrides: crate::domain::quota::Overrides,
    /// The limits that apply: the defaults with the overrides.
    pub limits: crate::domain::quota::Limits,
}

/// A session of any user, for the admin pages.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdminSession {
    pub id: String,
    pub user_id: String,
    pub user_name: String,
    pub editor: EditorKind,
    pub slice_mib: u64,
    pub gpu_model: Option<String>,
    pub state: SessionState,
    pub end_reason: Option<EndReason>,
    pub detail: Option<String>,
    pub created_at_ms: i64,
    pub ends_at_ms: Option<i64>,
    pub ended_at_ms: Option<i64>,
    /// Milli-credits per hour.
    pub price_per_hour: i64,
    /// When its editor was ready: the clock of its charge starts there.
    #[serde(default)]
    pub ready_at_ms: Option<i64>,
    /// Milli-credits its holds took and its end charged (both positive).
    #[serde(default)]
    pub held: i64,
    #[serde(default)]
    pub charged: i64,
    /// Its time parked, which is not charged.
    #[serde(default)]
    pub parked: crate::domain::credits::Parked,
    /// When the server read it: a running session's time and cost so far count to here.
    #[serde(default)]
    pub as_of_ms: i64,
}

/// One line of the audit log, with names where the log keeps ids.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditLine {
    pub id: i64,
    pub at_ms: i64,
    /// Who did it; None for the system (the reaper, a sign-in, the command line).
    pub actor: Option<String>,
    pub action: String,
    pub target: String,
    /// The target user's name, when the target is a user.
    pub target_name: Option<String>,
    pub detail: String,
}

/// A slot of the pool and who holds it, for the admin pages.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdminSlot {
    pub id: String,
    pub slice_mib: u64,
    pub cores_pct: u32,
    /// The session on it, or the pre-started editor waiting there.
    pub holder: Option<String>,
    pub user_name: Option<String>,
    pub editor: Option<EditorKind>,
    pub state: Option<SessionState>,
    /// GPU memory its session used when last sampled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_used_mib: Option<u64>,
    /// How busy its session kept the card when last sampled, in percent of the card.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_util_pct: Option<u32>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdminGpu {
    pub id: String,
    pub model: String,
    pub memory_mib: u64,
    pub hold: SliceHold,
    pub slots: Vec<AdminSlot>,
}

/// A launch waiting in the queue, for the admins' pool tab: who waits, for what, since when.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdminQueued {
    pub session_id: String,
    pub user_name: String,
    pub editor: EditorKind,
    pub slice_mib: u64,
    /// A whole card.
    pub burst: bool,
    /// Its place in line for its size (1 = next).
    pub position: u32,
    pub queued_at_ms: i64,
    /// When it should start, from the running sessions' end times; None when nothing running
    /// of its size has an end.
    pub eta_ms: Option<i64>,
}

/// What an admin changes about a user; what is left out stays.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserChange {
    #[serde(default)]
    pub role: Option<Role>,
    #[serde(default)]
    pub locked: Option<bool>,
}

/// An account an admin adds. Without a password the server makes one; either way it is shown
/// once and its person chooses their own at the first sign-in.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewAccount {
    pub name: String,
    #[serde(default = "plain_user")]
    pub role: Role,
    #[serde(default)]
    pub password: Option<String>,
}

fn plain_user() -> Role {
    Role::User
}

/// A password an admin set (a new account's, or a reset), to hand to its person: shown this
/// once, kept only as a hash, changed at their first sign-in.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MadePassword {
    pub user_id: String,
    pub name: String,
    pub password: String,
}

/// What a CSV file of accounts comes to (`crate::domain::bulk`): each line's plan, or every bad
/// line; once applied, the passwords of the accounts it added, shown this once.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BulkUsers {
    pub planned: Vec<crate::domain::bulk::Planned>,
    /// Empty when the file can be applied; nothing was applied when it is not.
    pub problems: Vec<crate::domain::bulk::Problem>,
    pub applied: bool,
    pub passwords: Vec<MadePassword>,
}

/// One user's use of the GPUs over a period, for the admin pages.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageRow {
    pub user_id: String,
    pub user_name: String,
    /// Sessions started in the period.
    pub sessions: u32,
    /// Time those sessions were ready (up to now for the running ones).
    pub used_ms: i64,
    /// The same time weighted by slice size: MiB × milliseconds.
    pub slice_mib_ms: i64,
    /// Milli-credits charged in the period.
    pub charged: i64,
    /// Average GPU utilization (%) and memory in use (MiB) over the sampler's readings; None
    /// where the runtime cannot see the GPU (no NVIDIA driver, or a virtual card).
    pub gpu_utilization_pct: Option<u32>,
    pub gpu_memory_mib: Option<u64>,
}

impl UsageRow {
    /// GiB-hours of slices: a whole 48 GB card for an hour is 48.
    pub fn slice_gib_hours(&self) -> f64 {
        self.slice_mib_ms as f64 / 1024.0 / 3_600_000.0
    }
}

/// One part of the running configuration, as the admin pages show it (never a secret).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SettingsSection {
    pub title: String,
    /// (what, its value) in words.
    pub entries: Vec<(String, String)>,
}

/// Whether this browser's admin may use the admin pages now, and how they confirm otherwise.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdminAccess {
    /// Confirmed within the last few minutes (or a token with the scope `admin`).
    pub confirmed: bool,
    pub confirmation: Confirmation,
}

/// A file marked for the production registry, and where it stands.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PromotionView {
    pub id: String,
    pub user_id: String,
    pub user_name: String,
    pub session_id: String,
    /// Relative to the user's workspace.
    pub path: String,
    pub repository: String,
    pub tag: String,
    pub media_type: String,
    pub size_bytes: u64,
    /// Hex, of the file as it was copied at the request.
    pub sha256: String,
    pub image: String,
    pub state: crate::domain::promotion::PromotionState,
    pub requested_at_ms: i64,
    pub decided_by: Option<String>,
    pub decided_at_ms: Option<i64>,
    pub pushed_at_ms: Option<i64>,
    /// The manifest's digest once pushed.
    pub digest: Option<String>,
    /// Where it can be pulled from once pushed: `registry/repository@digest`.
    pub reference: Option<String>,
    /// Why it was rejected or why its push failed.
    pub message: Option<String>,
}

/// The viewer's promotions, and whether this server promotes at all.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Promotions {
    /// A registry is configured.
    pub enabled: bool,
    /// An admin approves each one before it is pushed.
    pub needs_approval: bool,
    pub items: Vec<PromotionView>,
}

/// An admin's way into a user's editor: where, and until when.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EditorAccess {
    /// `/s/<id>/`.
    pub url: String,
    pub expires_at_ms: i64,
    /// Where the admin's browser enters it, on the entry origin (`proxy.entry_origin`): a
    /// one-time link that lasts a minute. None where no entry origin is set.
    #[serde(default)]
    pub entry_url: Option<String>,
}

/// The Images tab: every image, and whether this server's runtime runs them at all.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdminImages {
    pub images: Vec<ImageView>,
    /// False on the local runtime, which runs the editors installed on its machine.
    pub runs_images: bool,
}

/// An image editors may run, for the admin page (and, approved, for the launch form).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageView {
    /// None for the configured default, which lives in the configuration, not the database.
    pub id: Option<String>,
    pub editor: EditorKind,
    pub reference: String,
    pub label: String,
    pub state: crate::domain::images::ImageState,
    /// Named by digest, so it cannot change under the same name.
    pub pinned: bool,
    pub added_by: Option<String>,
    pub created_at_ms: Option<i64>,
    /// The newest scanner report posted to it.
    pub scan: Option<ScanView>,
    /// Why the scan policy keeps it from being approved and launched; None: it passes.
    pub blocked: Option<String>,
}

/// A scanner's report on an image, as summarized when it was posted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScanView {
    pub id: String,
    #[serde(flatten)]
    pub summary: crate::domain::scan::ScanSummary,
    pub posted_at_ms: i64,
    pub posted_by: Option<String>,
}

impl ScanView {
    /// The scan's own time where the report gives one (never later than its posting), else
    /// when it was posted: what the policy's age counts from.
    pub fn facts(&self) -> crate::domain::scan::ScanFacts {
        crate::domain::scan::ScanFacts {
            fixable: self.summary.fixable,
            scanned_at_ms: self
                .summary
                .scanned_at_ms
                .map_or(self.posted_at_ms, |at| at.min(self.posted_at_ms)),
        }
    }
}

/// One snapshot of a workspace, as its owner (or an admin) sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotView {
    /// restic's full id; its first 8 digits name it too.
    pub id: String,
    pub short_id: String,
    pub taken_at_ms: i64,
}

/// How a user's last workspace backup went (the admin pages, `/metrics`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackupStatus {
    pub user_id: String,
    pub user_name: String,
    /// None: never tried.
    pub attempted_at_ms: Option<i64>,
    pub ok: bool,
    /// Why the last one failed; empty when it worked.
    pub message: String,
    pub succeeded_at_ms: Option<i64>,
    /// The snapshot it made (its short id, as restic prints it).
    pub snapshot_id: Option<String>,
    pub files: Option<u64>,
    pub bytes: Option<u64>,
}

/// A user's backups: whether they run and when, the last run, the snapshots (newest first).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackupsView {
    pub enabled: bool,
    /// "daily at 02:30 UTC".
    pub schedule: String,
    /// "the newest of each of the last 7 days and 4 weeks".
    pub kept: String,
    pub last: Option<BackupStatus>,
    pub snapshots: Vec<SnapshotView>,
}

/// What a restore made: the folder inside the workspace it went to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestoreDone {
    pub snapshot_id: String,
    /// `restored-2026-12-05-0830`, inside the workspace.
    pub folder: String,
    /// What was restored (relative to the workspace); None: all of it.
    pub path: Option<String>,
}
