//! The allocator: quota-checked launches that hold credits and claim a slot (a warm editor, a
//! free slot, or a place in the queue) in one transaction; the queue and its dispatch.
//!
//! The allocator ([`Store::launch`]) is one transaction: lock the user's row (PostgreSQL; SQLite's
//! writers are serialized), apply the quota (`domain::quota::check`: sessions, GPU memory held,
//! minutes, the workspace size the runtime measured), claim a place, price it, check the balance,
//! write the session, the hold and the steps ("Launch requested", "Credits held", "Slot g0s2
//! assigned"). A refusal rolls everything back. The place is, in order:
//! - a ready pre-started editor of that kind and size: the session takes the editor's id, so the
//!   editor, started under `/s/<id>/`, needs no change, and the runtime then binds the user's
//!   workspace into it (a launch that names an image never takes one: they run the default);
//! - a free slot without a pre-started editor, on the busiest card, so whole cards stay free for
//!   bursts;
//! - a free slot whose pre-started editor is pushed off (stopped in the background);
//! - else the queue (`queued`, first come first served per slice size, `queued_at`). While anyone
//!   waits for a size, a newcomer of that size queues behind them even when a slot has just freed:
//!   the dispatcher gives it to the head of the line.
//!
//! On PostgreSQL candidates are read one at a time (`LIMIT 1 FOR UPDATE OF sl SKIP LOCKED`),
//! locking only the slot, and a slot is always locked before its pre-started editor, on every path;
//! every claim is a compare-and-set (`… WHERE session_id IS NULL`). So no slot is given twice (500
//! launches against 50 warm slots, on both databases), and launches of different users at once
//! spread over the free slots instead of queueing beside them or deadlocking (twelve users onto six
//! slots, three warm). Measured: 1,565 launches a second onto 50 warm editors and 1,698 onto 50
//! free slots on SQLite, 591 and 610 on PostgreSQL (BENCHMARKS.md, section 5).
//!
//! Prices are exact: the hold is the price of the card the claim got (`pool.prices`, by model and
//! slice size) for the whole duration. A queued launch holds the dearest card of its size; when
//! dispatched it is re-priced to the card it gets, and what it held beyond that comes back at once
//! (a positive `hold` row). Extending holds more (another `hold` row); settlement refunds every
//! hold and charges the minutes used at the session's price, so the ledger is exact.
//!
//! Bursts take a whole card (every slot of one GPU whose memory is the asked size, none held) for
//! at most `pool.burst_max_minutes`, and queue like slices.
//!

use super::batch::Batch;
use super::launch_rows::{Place, insert_launch};
use super::records::WARM_COLUMNS;
use super::*;
use app::domain::credits;
use app::domain::pool::format_mib;
use app::domain::quota::{self, Limits, Usage};

/// One launch as the service decided it; the store checks and claims.
pub struct LaunchPlan<'a> {
    pub user_id: &'a str,
    /// The chosen image's reference; None for the configured default.
    pub image: Option<&'a str>,
    pub editor: EditorKind,
    pub slice_mib: u64,
    /// A whole card: every slot of one GPU whose memory is `slice_mib`.
    pub burst: bool,
    pub duration_minutes: u32,
    /// The configured limits; the user's overrides are applied inside the transaction.
    pub limits: Limits,
    pub disk_mib: Option<u64>,
    /// Milli-credits per hour on a GPU (by id), for this slice size.
    pub price_on: &'a (dyn Fn(&str) -> i64 + Send + Sync),
    /// What a queued launch holds until it gets a card: the dearest card of that size.
    pub queue_price: i64,
    /// Take a pre-started editor when one fits and the user has no datasets (a pre-started
    /// editor runs without them).
    pub use_warm: bool,
}

/// Where a launch landed.
#[derive(Debug)]
pub enum Placement {
    /// A pre-started editor took it: the session is ready already.
    Warm(WarmRecord),
    /// A slot to start the editor on; pre-started editors pushed off it must be stopped.
    Slot {
        slot_id: String,
        evicted: Vec<WarmRecord>,
    },
    Queued {
        position: u32,
    },
}

#[derive(Debug)]
pub struct Launched {
    pub record: SessionRecord,
    pub steps: Vec<Step>,
    pub placement: Placement,
    /// The user's limits the quota was checked against (their overrides applied): the
    /// workspace quota a warm editor binds with, without reading the overrides again.
    pub limits: Limits,
}

/// A queued session that got a slot.
#[derive(Debug)]
pub struct Dispatched {
    pub session_id: String,
    pub step: Step,
    pub evicted: Vec<WarmRecord>,
}

struct Claim {
    session_id: String,
    slot_id: String,
    gpu_id: String,
    warm: Option<WarmRecord>,
    evicted: Vec<WarmRecord>,
}

pub(super) fn skip_locked(kind: DbKind, of: &str) -> String {
    match kind {
        DbKind::Sqlite => String::new(),
        DbKind::Postgres => format!(" FOR UPDATE OF {of} SKIP LOCKED"),
    }
}

impl Store {
    /// Checks the quota, claims a warm editor or a free slot (or queues), and holds the price
    /// of the card it got for the whole duration — all in one transaction.
    pub async fn launch(&self, plan: LaunchPlan<'_>) -> Result<Launched> {
        let now = self.now();
        let mut w = self.begin_write().await?;
        self.lock_user(&mut w, plan.user_id).await?;
        let before = before_claim_in(&mut w.tx, plan.user_id, plan.slice_mib, plan.burst).await?;
        let limits = plan.limits.with(&before.overrides);
        let usage = Usage {
            disk_mib: plan.disk_mib,
            ..before.usage
        };
        quota::check(&limits, &usage, plan.slice_mib, plan.duration_minutes)
            .map_err(StoreError::Quota)?;

        let fresh_id = new_id();
        // First come, first served: while anyone waits for this size, a newcomer waits behind
        // them, even for a slot freed a moment ago (the dispatcher gives it to the head).
        let claim = if before.line_waits {
            None
        } else {
            claim_in(
                &mut w,
                plan.user_id,
                &fresh_id,
                plan.editor,
                plan.slice_mib,
                plan.burst,
                // A pre-started editor's sandbox was made without the user's datasets.
                plan.use_warm && !before.has_datasets,
            )
            .await?
        };
        let per_hour = match &claim {
            Some(claim) => (plan.price_on)(&claim.gpu_id),
            None => plan.queue_price,
        };
        let hold = credits::price_for_minutes(per_hour, plan.duration_minutes as i64);
        // Read before the claim: the claim writes no credits, and the user's launches take
        // turns (the writer lock; on PostgreSQL their row's lock).
        let balance = before.balance;
        if balance < hold {
            // Dropping the transaction rolls the claim back.
            return Err(StoreError::InsufficientCredits {
                balance,
                needed: hold,
            });
        }
        let id = claim
            .as_ref()
            .map(|c| c.session_id.clone())
            .unwrap_or(fresh_id);
        let requested = Requested {
            id: &id,
            user_id: plan.user_id,
            image: plan.image,
            editor: plan.editor,
            slice_mib: plan.slice_mib,
            duration_minutes: plan.duration_minutes,
            price_per_hour: per_hour,
            hold,
            burst: plan.burst,
        };
        let place = match &claim {
            Some(Claim {
                slot_id,
                warm: Some(warm),
                ..
            }) => Place::Warm { slot_id, warm },
            Some(Claim { slot_id, .. }) => Place::Slot { slot_id },
            None => Place::Queued,
        };
        let written = insert_launch(&mut w, &requested, &place, now).await?;
        let placement = match (claim, written.position) {
            (
                Some(Claim {
                    warm: Some(warm), ..
                }),
                _,
            ) => Placement::Warm(warm),
            (Some(claim), _) => Placement::Slot {
                slot_id: claim.slot_id,
                evicted: claim.evicted,
            },
            (None, position) => Placement::Queued {
                position: position.unwrap_or(1),
            },
        };
        w.commit().await?;
        Ok(Launched {
            record: written.record,
            steps: written.steps,
            placement,
            limits,
        })
    }

    /// Gives free slots to queued sessions, oldest first within each slice size. A queued session
    /// has its own id, so it starts its editor rather than taking a pre-started one.
    pub async fn dispatch_queued(
        &self,
        price_on: &(dyn Fn(&str, u64) -> i64 + Send + Sync),
    ) -> Result<Vec<Dispatched>> {
        let classes = sqlx::query(
            "SELECT DISTINCT slice_mib, burst FROM sessions WHERE state = 'queued' ORDER BY slice_mib",
        )
        .fetch_all(&self.pool)
        .await?;
        let mut dispatched = Vec::new();
        for class in classes {
            let slice_mib = class.try_get::<i64, _>("slice_mib")? as u64;
            let burst = class.try_get::<i64, _>("burst")? != 0;
            loop {
                let now = self.now();
                let mut w = self.begin_write().await?;
                let sql = format!(
                    "SELECT s.id, s.editor FROM sessions s WHERE s.state = 'queued' AND s.slice_mib = $1 AND s.burst = $2
                     ORDER BY s.queued_at, s.id LIMIT 1{}",
                    skip_locked(w.kind, "s")
                );
                let Some(head) = sqlx::query(&sql)
                    .bind(slice_mib as i64)
                    .bind(burst as i64)
                    .fetch_optional(&mut *w.tx)
                    .await?
                else {
                    break;
                };
                let session_id: String = head.try_get("id")?;
                let editor: String = head.try_get("editor")?;
                let editor = EditorKind::parse(&editor).ok_or(StoreError::NotFound("editor"))?;
                let Some(claim) =
                    claim_in(&mut w, "", &session_id, editor, slice_mib, burst, false).await?
                else {
                    break;
                };
                set_state(
                    &mut w,
                    &session_id,
                    transition(SessionState::Queued, Event::AssignSlot)?,
                )
                .await?;
                // The hold was at the dearest card of this size; from now on the card it got counts.
                let per_hour = price_on(&claim.gpu_id, slice_mib);
                sqlx::query("UPDATE sessions SET slot_id = $1, price_per_hour = $2 WHERE id = $3")
                    .bind(&claim.slot_id)
                    .bind(per_hour)
                    .bind(&session_id)
                    .execute(&mut *w.tx)
                    .await?;
                lower_hold_in(&mut w, &session_id, per_hour, now).await?;
                let step = insert_event(
                    &mut w,
                    &session_id,
                    SessionState::Starting,
                    &format!("Your turn: slot {} assigned", claim.slot_id),
                    30,
                    false,
                    now,
                )
                .await?;
                w.commit().await?;
                dispatched.push(Dispatched {
                    session_id,
                    step,
                    evicted: claim.evicted,
                });
            }
        }
        Ok(dispatched)
    }

    /// Every queued session with its place in line (1 = next).
    pub async fn queue_positions(&self) -> Result<Vec<(String, u64, bool, u32)>> {
        let rows = sqlx::query(
            "SELECT id, slice_mib, burst FROM sessions WHERE state = 'queued' ORDER BY slice_mib, burst, queued_at, id",
        )
        .fetch_all(&self.pool)
        .await?;
        let mut out: Vec<(String, u64, bool, u32)> = Vec::with_capacity(rows.len());
        for row in rows {
            let slice = row.try_get::<i64, _>("slice_mib")? as u64;
            let burst = row.try_get::<i64, _>("burst")? != 0;
            let position = match out.last() {
                Some((_, s, b, p)) if *s == slice && *b == burst => p + 1,
                _ => 1,
            };
            out.push((row.try_get("id")?, slice, burst, position));
        }
        Ok(out)
    }

    pub async fn queue_position(&self, session_id: &str) -> Result<u32> {
        let mut conn = self.pool.acquire().await?;
        position_in(&mut conn, session_id).await
    }

    // ---- warm editors ----
}

/// The step a queued session shows: what it waits for and its place in line.
pub fn queue_message(slice_mib: u64, burst: bool, position: u32) -> String {
    let what = if burst {
        "whole GPU".to_string()
    } else {
        format!("{} slice", format_mib(slice_mib))
    };
    format!("All in use: waiting for a free {what}, position {position} in line")
}

pub(super) async fn position_in(conn: &mut sqlx::AnyConnection, session_id: &str) -> Result<u32> {
    let row = sqlx::query(
        "SELECT CAST(COUNT(*) AS BIGINT) AS ahead FROM sessions o, sessions me
         WHERE me.id = $1 AND o.state = 'queued' AND o.slice_mib = me.slice_mib AND o.burst = me.burst
         AND (o.queued_at < me.queued_at OR (o.queued_at = me.queued_at AND o.id < me.id))",
    )
    .bind(session_id)
    .fetch_one(&mut *conn)
    .await?;
    Ok(row.try_get::<i64, _>("ahead")? as u32 + 1)
}

/// What the allocator reads before it claims a place.
struct BeforeClaim {
    overrides: quota::Overrides,
    /// Live sessions and their GPU memory (the workspace's size is the runtime's).
    usage: Usage,
    balance: i64,
    /// Someone waits in the queue for this size.
    line_waits: bool,
    /// The user may use a dataset: their editor is started for them, with the datasets.
    has_datasets: bool,
}

/// The user's quota overrides, live sessions, GPU memory held and balance, whether anyone
/// waits for `slice_mib` and whether the user has datasets, in one statement: on SQLite every statement of a write transaction
/// is a round trip made while holding the writer lock, which a burst of launches queues for.
async fn before_claim_in(
    conn: &mut sqlx::AnyConnection,
    user_id: &str,
    slice_mib: u64,
    burst: bool,
) -> Result<BeforeClaim> {
    let row = sqlx::query(&format!(
        "SELECT q.max_sessions, q.max_gpu_mib, q.max_minutes, q.max_disk_mib, u.sessions, u.gpu_mib,
           (SELECT CAST(COALESCE(SUM(l.amount), 0) AS BIGINT) FROM credit_ledger l WHERE l.user_id = me.id) AS balance,
           (SELECT CAST(COUNT(*) AS BIGINT) FROM (SELECT 1 AS one FROM sessions o
              WHERE o.state = 'queued' AND o.slice_mib = $2 AND o.burst = $3 LIMIT 1) w) AS waiting,
           CAST(CASE WHEN {} THEN 1 ELSE 0 END AS BIGINT) AS datasets
         FROM users me
         LEFT JOIN user_quotas q ON q.user_id = me.id
         CROSS JOIN (SELECT CAST(COUNT(*) AS BIGINT) AS sessions, CAST(COALESCE(SUM(s.slice_mib), 0) AS BIGINT) AS gpu_mib
           FROM sessions s WHERE s.user_id = $1 AND s.state <> 'ended') u
         WHERE me.id = $1",
        super::datasets::may_use_a_dataset("me.id")
    ))
    .bind(user_id)
    .bind(slice_mib as i64)
    .bind(burst as i64)
    .fetch_optional(&mut *conn)
    .await?
    .ok_or(StoreError::NotFound("user"))?;
    Ok(BeforeClaim {
        overrides: overrides_of(&row)?,
        usage: Usage {
            sessions: row.try_get::<i64, _>("sessions")? as u32,
            gpu_mib: row.try_get::<i64, _>("gpu_mib")? as u64,
            disk_mib: None,
        },
        balance: row.try_get("balance")?,
        line_waits: row.try_get::<i64, _>("waiting")? > 0,
        has_datasets: row.try_get::<i64, _>("datasets")? > 0,
    })
}

pub(super) async fn usage_in(conn: &mut sqlx::AnyConnection, user_id: &str) -> Result<Usage> {
    let row = sqlx::query(
        "SELECT CAST(COUNT(*) AS BIGINT) AS sessions, CAST(COALESCE(SUM(slice_mib), 0) AS BIGINT) AS gpu_mib
         FROM sessions WHERE user_id = $1 AND state <> 'ended'",
    )
    .bind(user_id)
    .fetch_one(&mut *conn)
    .await?;
    Ok(Usage {
        sessions: row.try_get::<i64, _>("sessions")? as u32,
        gpu_mib: row.try_get::<i64, _>("gpu_mib")? as u64,
        disk_mib: None,
    })
}

/// Claims a place for `session_id`: a ready warm editor of the kind (whose id the session then
/// takes), else a free slot — one without a warm editor first, else one whose warm editor is
/// pushed off — or for a burst every slot of one idle card.
async fn claim_in(
    w: &mut WriteTx,
    user_id: &str,
    session_id: &str,
    editor: EditorKind,
    slice_mib: u64,
    burst: bool,
    use_warm: bool,
) -> Result<Option<Claim>> {
    let now = w.now;
    if burst {
        return claim_card_in(w, session_id, slice_mib, now).await;
    }
    // One candidate at a time, locking its slot only (and skipping slots other launches
    // hold), so concurrent launches spread over the free slots; a slot is always locked before
    // its warm editor, by every path, so no two launches wait on each other.
    if use_warm {
        let sql = format!(
            "SELECT {WARM_COLUMNS}, sl.gpu_id FROM warm_editors w JOIN slots sl ON sl.id = w.slot_id
             WHERE w.editor = $1 AND w.state = 'ready' AND sl.slice_mib = $2 AND sl.session_id IS NULL AND sl.active = 1
             AND (w.user_id IS NULL OR w.user_id = $3)
             ORDER BY w.user_id IS NULL, w.created_at LIMIT 1{}",
            skip_locked(w.kind, "sl")
        );
        for _ in 0..CLAIM_TRIES {
            let Some(row) = sqlx::query(&sql)
                .bind(editor.as_str())
                .bind(slice_mib as i64)
                .bind(user_id)
                .fetch_optional(&mut *w.tx)
                .await?
            else {
                break;
            };
            let warm = WarmRecord::from_row(&row)?;
            let gpu_id: String = row.try_get("gpu_id")?;
            if take_warm_in(w, &warm, now).await? {
                return Ok(Some(Claim {
                    session_id: warm.id.clone(),
                    slot_id: warm.slot_id.clone(),
                    gpu_id,
                    warm: Some(warm),
                    evicted: Vec::new(),
                }));
            }
        }
    }
    // `domain::pool::rank_free_slots`: a parked session's way back last, then pack onto the
    // busiest card so whole cards stay free for bursts; spare warm editors.
    let sql = format!(
        "SELECT sl.id, sl.gpu_id,
           (SELECT COUNT(*) FROM warm_editors w WHERE w.slot_id = sl.id) AS warm
         FROM slots sl WHERE sl.session_id IS NULL AND sl.active = 1 AND sl.slice_mib = $1
         ORDER BY CASE WHEN {SPARE} > 0 THEN 0 ELSE 1 END, warm, ABS({SPARE}), sl.id LIMIT 1{}",
        skip_locked(w.kind, "sl")
    );
    for _ in 0..CLAIM_TRIES {
        let Some(row) = sqlx::query(&sql)
            .bind(slice_mib as i64)
            .fetch_optional(&mut *w.tx)
            .await?
        else {
            break;
        };
        let slot_id: String = row.try_get("id")?;
        let gpu_id: String = row.try_get("gpu_id")?;
        if take_slot_in(w, session_id, &slot_id, now).await? {
            let mut evicted = evict_in(w, "w.slot_id = $1", &slot_id).await?;
            // The user's own pre-started editor of another kind goes: their namespace's pod
            // quota counts it.
            if !user_id.is_empty() {
                evicted.extend(evict_in(w, "w.user_id = $1", user_id).await?);
            }
            return Ok(Some(Claim {
                session_id: session_id.to_string(),
                slot_id,
                gpu_id,
                warm: None,
                evicted,
            }));
        }
    }
    Ok(None)
}

/// Gives back, at once, what a session holds beyond `per_hour` for its duration (a queued
/// launch held the dearest card of its size and got a cheaper one).
async fn lower_hold_in(w: &mut WriteTx, session_id: &str, per_hour: i64, now: i64) -> Result<()> {
    let row = sqlx::query(
        "SELECT s.user_id, s.duration_minutes,
           (SELECT CAST(COALESCE(SUM(-l.amount), 0) AS BIGINT) FROM credit_ledger l
            WHERE l.session_id = s.id AND l.kind = 'hold') AS held
         FROM sessions s WHERE s.id = $1",
    )
    .bind(session_id)
    .fetch_one(&mut *w.tx)
    .await?;
    let held: i64 = row.try_get("held")?;
    let minutes: i64 = row.try_get("duration_minutes")?;
    let over = held - credits::price_for_minutes(per_hour, minutes);
    if over > 0 {
        let user_id: String = row.try_get("user_id")?;
        insert_ledger(
            w,
            &user_id,
            LedgerKind::Hold,
            over,
            Some(session_id),
            "hold lowered to the price of the card it got",
            now,
        )
        .await?;
    }
    Ok(())
}

/// Takes the ready pre-started editor `warm` off its slot and the slot for the session that
/// takes the editor's id; false when either slipped away (a launch that committed meanwhile).
async fn take_warm_in(w: &mut WriteTx, warm: &WarmRecord, now: i64) -> Result<bool> {
    const GONE: &str = "DELETE FROM warm_editors WHERE id = $1 AND state = 'ready'";
    const TAKEN: &str = "UPDATE slots SET session_id = $1, updated_at = $2 WHERE id = $3 AND session_id IS NULL AND active = 1";
    if w.kind == DbKind::Sqlite {
        // Nobody else writes while this transaction does (SQLite's one writer), so both find
        // what the look found: one round trip for the two.
        let mut batch = Batch::default();
        batch.push(GONE, vec![warm.id.as_str().into()]);
        batch.push(
            TAKEN,
            vec![
                warm.id.as_str().into(),
                now.into(),
                warm.slot_id.as_str().into(),
            ],
        );
        return match batch.run(w).await? {
            2 => Ok(true),
            0 => Ok(false),
            _ => Err(StoreError::Conflict),
        };
    }
    let gone = sqlx::query(GONE).bind(&warm.id).execute(&mut *w.tx).await?;
    if gone.rows_affected() != 1 {
        return Ok(false);
    }
    take_slot_in(w, &warm.id, &warm.slot_id, now).await
}

/// The free slots of `sl`'s card less the parked sessions that will want one of them back.
const SPARE: &str = "((SELECT COUNT(*) FROM slots f WHERE f.gpu_id = sl.gpu_id AND f.session_id IS NULL AND f.active = 1)
   - (SELECT COUNT(*) FROM sessions p JOIN slots pf ON pf.id = p.slot_id WHERE p.state = 'parked' AND pf.gpu_id = sl.gpu_id))";

/// How many candidates one claim looks at before it queues: each that slips away (taken by a
/// launch that committed meanwhile) no longer matches the next look.
const CLAIM_TRIES: usize = 8;

/// Gives the free slot `slot_id` to `session_id`; false when it is no longer free.
pub(super) async fn take_slot_in(
    w: &mut WriteTx,
    session_id: &str,
    slot_id: &str,
    now: i64,
) -> Result<bool> {
    let taken = sqlx::query(
        "UPDATE slots SET session_id = $1, updated_at = $2 WHERE id = $3 AND session_id IS NULL AND active = 1",
    )
    .bind(session_id)
    .bind(now)
    .bind(slot_id)
    .execute(&mut *w.tx)
    .await?;
    Ok(taken.rows_affected() == 1)
}

/// A whole card whose memory is `memory_mib` and none of whose slots is held.
async fn claim_card_in(
    w: &mut WriteTx,
    session_id: &str,
    memory_mib: u64,
    now: i64,
) -> Result<Option<Claim>> {
    let cards = sqlx::query(
        "SELECT g.id, (SELECT COUNT(*) FROM slots sl WHERE sl.gpu_id = g.id AND sl.active = 1) AS slots
         FROM gpus g WHERE g.active = 1 AND g.memory_mib = $1
         AND NOT EXISTS (SELECT 1 FROM slots sl WHERE sl.gpu_id = g.id AND sl.active = 1 AND sl.session_id IS NOT NULL)
         ORDER BY g.ordinal",
    )
    .bind(memory_mib as i64)
    .fetch_all(&mut *w.tx)
    .await?;
    for card in cards {
        let gpu_id: String = card.try_get("id")?;
        let slots: i64 = card.try_get("slots")?;
        if slots == 0 {
            continue;
        }
        let taken = sqlx::query(
            "UPDATE slots SET session_id = $1, updated_at = $2 WHERE gpu_id = $3 AND active = 1 AND session_id IS NULL",
        )
        .bind(session_id)
        .bind(now)
        .bind(&gpu_id)
        .execute(&mut *w.tx)
        .await?;
        if taken.rows_affected() as i64 != slots {
            // A slice launch took one of its slots meanwhile: let go of the rest.
            sqlx::query("UPDATE slots SET session_id = NULL WHERE gpu_id = $1 AND session_id = $2")
                .bind(&gpu_id)
                .bind(session_id)
                .execute(&mut *w.tx)
                .await?;
            continue;
        }
        let first =
            sqlx::query("SELECT MIN(id) AS id FROM slots WHERE gpu_id = $1 AND session_id = $2")
                .bind(&gpu_id)
                .bind(session_id)
                .fetch_one(&mut *w.tx)
                .await?;
        let evicted = evict_in(w, "sl.gpu_id = $1", &gpu_id).await?;
        return Ok(Some(Claim {
            session_id: session_id.to_string(),
            slot_id: first.try_get("id")?,
            gpu_id,
            warm: None,
            evicted,
        }));
    }
    Ok(None)
}

/// Removes the warm editors matching `filter` (on `w` joined with `sl`) and returns them, to be stopped.
pub(super) async fn evict_in(
    w: &mut WriteTx,
    filter: &str,
    value: &str,
) -> Result<Vec<WarmRecord>> {
    let rows = sqlx::query(&format!(
        "SELECT {WARM_COLUMNS} FROM warm_editors w JOIN slots sl ON sl.id = w.slot_id WHERE {filter}"
    ))
    .bind(value)
    .fetch_all(&mut *w.tx)
    .await?;
    let evicted: Vec<WarmRecord> = rows
        .iter()
        .map(WarmRecord::from_row)
        .collect::<Result<_>>()?;
    for warm in &evicted {
        sqlx::query("DELETE FROM warm_editors WHERE id = $1")
            .bind(&warm.id)
            .execute(&mut *w.tx)
            .await?;
    }
    Ok(evicted)
}
