//! A launch's own rows, written in four statements sent together and read back by a fifth (one
//! round trip on SQLite: `batch.rs`): the session (in the state its place gives it), its steps,
//! its hold and its audit events.
//!
//! On SQLite every write transaction waits for the one before it, and each statement is a round
//! trip to the connection's thread, so a launch held the writer for as many round trips as it
//! had statements: 26 for a warm launch, whose rows were written one by one and then moved
//! along (`requested`, `starting`, `ready`, each an UPDATE, an audit row and a step numbered
//! by a `MAX(seq)` read). A burst of 50 launches queued behind each other for those.
//!
//! The session is new and only this transaction can see it, so nothing can move it meanwhile:
//! its states are computed by [`transition`] (every state written is still one the state
//! machine gave, each move audited as before), its steps are numbered from 1, and the row is
//! inserted as it ends up. The rows are the same as before, in the same order.

use super::batch::{Arg, Batch};
use super::*;

/// Where the launch's claim put it.
pub(super) enum Place<'a> {
    /// A pre-started editor on `slot_id`: ready at once.
    Warm {
        slot_id: &'a str,
        warm: &'a WarmRecord,
    },
    /// A free slot, its editor to be started.
    Slot { slot_id: &'a str },
    /// The queue for its size.
    Queued,
}

/// Writes the launch `r` placed at `place`: the session row, its hold, its steps and the audit
/// events; reads the session back in the same round trip.
pub(super) async fn insert_launch(
    w: &mut WriteTx,
    r: &Requested<'_>,
    place: &Place<'_>,
    now: i64,
) -> Result<Written> {
    let first = match place {
        Place::Queued => transition(SessionState::Requested, Event::Enqueue)?,
        _ => transition(SessionState::Requested, Event::AssignSlot)?,
    };
    let mut moves = vec![first];
    if let Place::Warm { .. } = place {
        moves.push(transition(first.to, Event::EditorReady)?);
    }
    let state = moves.last().map_or(SessionState::Requested, |t| t.to);
    let (slot_id, warm) = match place {
        Place::Warm { slot_id, warm } => (Some(*slot_id), Some(*warm)),
        Place::Slot { slot_id } => (Some(*slot_id), None),
        Place::Queued => (None, None),
    };
    let ready_at = warm.map(|_| now);
    let mut batch = Batch::default();
    batch.push(
        "INSERT INTO sessions (id, user_id, editor, slice_mib, duration_minutes, price_per_hour, state, created_at,
           last_activity_at, burst, image, slot_id, queued_at, upstream, editor_token, runtime_handle, ready_at, ends_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)",
        vec![
            r.id.into(),
            r.user_id.into(),
            r.editor.as_str().into(),
            (r.slice_mib as i64).into(),
            (r.duration_minutes as i64).into(),
            r.price_per_hour.into(),
            state.as_str().into(),
            now.into(),
            (r.burst as i64).into(),
            r.image.into(),
            slot_id.into(),
            matches!(place, Place::Queued).then_some(now).into(),
            warm.and_then(|w| w.upstream.clone()).into(),
            warm.and_then(|w| w.editor_token.clone()).into(),
            warm.and_then(|w| w.runtime_handle.clone()).into(),
            ready_at.into(),
            ready_at
                .map(|at| at + r.duration_minutes as i64 * 60_000)
                .into(),
        ],
    );
    let mut rows = 1;
    if r.hold > 0 {
        batch.push(
            "INSERT INTO credit_ledger (user_id, kind, amount, session_id, note, at) VALUES ($1, $2, $3, $4, $5, $6)",
            vec![
                r.user_id.into(),
                LedgerKind::Hold.as_str().into(),
                (-r.hold).into(),
                r.id.into(),
                "held for launch".into(),
                now.into(),
            ],
        );
        rows += 1;
    }
    let label = r.editor.label();
    let mut steps: Vec<(SessionState, String, u8)> = vec![
        (SessionState::Requested, "Launch requested".to_string(), 5),
        (
            SessionState::Requested,
            format!(
                "Credits held: {} ({} an hour)",
                app::domain::credits::format(r.hold),
                app::domain::credits::format(r.price_per_hour)
            ),
            15,
        ),
    ];
    let mut position = None;
    match place {
        Place::Warm { slot_id, .. } => {
            steps.push((
                SessionState::Starting,
                format!("Pre-started {label} on slot {slot_id} assigned"),
                60,
            ));
            steps.push((SessionState::Ready, format!("{label} is ready"), 100));
        }
        Place::Slot { slot_id } => {
            steps.push((
                SessionState::Starting,
                format!("Slot {slot_id} assigned"),
                30,
            ));
        }
        Place::Queued => {
            // Its place in line counts its own row.
            let written = std::mem::take(&mut batch).run(w).await?;
            if written != rows {
                return Err(StoreError::Conflict);
            }
            rows = 0;
            let at = super::launch::position_in(&mut w.tx, r.id).await?;
            position = Some(at);
            steps.push((
                SessionState::Queued,
                super::launch::queue_message(r.slice_mib, r.burst, at),
                20,
            ));
        }
    }
    rows += steps.len() as u64;
    let steps = push_steps(&mut batch, r.id, steps, now);
    let target = format!("session:{}", r.id);
    let mut audit = vec![(
        Some(r.user_id),
        "session.launch".to_string(),
        r.editor.as_str().to_string(),
    )];
    for Transition { from, to } in moves {
        audit.push((None, format!("session.{to}"), format!("{from} -> {to}")));
    }
    rows += audit.len() as u64;
    push_audits(&mut batch, &target, audit, now);
    // Every statement inserts its rows or fails; a count short of them is no launch.
    let (written, row) = batch
        .run_then_read(
            w,
            &format!("SELECT {SESSION_COLUMNS} {SESSION_FROM} WHERE s.id = $1"),
            vec![r.id.into()],
        )
        .await?;
    if written != rows {
        return Err(StoreError::Conflict);
    }
    let record = SessionRecord::from_row(&row.ok_or(StoreError::Conflict)?)?;
    Ok(Written {
        record,
        steps,
        position,
    })
}

/// What [`insert_launch`] wrote: the session as read back in the same round trip, its steps,
/// and for a queued launch its place in line.
pub(super) struct Written {
    pub(super) record: SessionRecord,
    pub(super) steps: Vec<Step>,
    pub(super) position: Option<u32>,
}

/// A new session's steps, numbered from 1, in one statement.
fn push_steps(
    batch: &mut Batch,
    session_id: &str,
    steps: Vec<(SessionState, String, u8)>,
    at: i64,
) -> Vec<Step> {
    let rows: Vec<String> = (0..steps.len())
        .map(|i| {
            let p = 4 * i;
            format!(
                "($1, $2, ${}, ${}, ${}, ${}, 0)",
                p + 3,
                p + 4,
                p + 5,
                p + 6
            )
        })
        .collect();
    let mut args: Vec<Arg> = vec![session_id.into(), at.into()];
    for (i, (state, message, progress)) in steps.iter().enumerate() {
        args.push((i as i64 + 1).into());
        args.push(state.as_str().into());
        args.push(message.as_str().into());
        args.push((*progress as i64).into());
    }
    batch.push(
        format!(
            "INSERT INTO session_events (session_id, at, seq, state, message, progress, failed) VALUES {}",
            rows.join(", ")
        ),
        args,
    );
    steps
        .into_iter()
        .enumerate()
        .map(|(i, (state, message, progress))| Step {
            seq: i as i64 + 1,
            at_ms: at,
            state,
            message,
            progress,
            failed: false,
        })
        .collect()
}

/// Audit events about one target, in order, in one statement: (actor, action, detail).
fn push_audits(
    batch: &mut Batch,
    target: &str,
    events: Vec<(Option<&str>, String, String)>,
    at: i64,
) {
    let rows: Vec<String> = (0..events.len())
        .map(|i| {
            let p = 3 * i;
            format!("($1, ${}, ${}, $2, ${})", p + 3, p + 4, p + 5)
        })
        .collect();
    let mut args: Vec<Arg> = vec![at.into(), target.into()];
    for (actor, action, detail) in events {
        args.push(actor.into());
        args.push(Arg::Text(Some(action)));
        args.push(Arg::Text(Some(detail)));
    }
    batch.push(
        format!(
            "INSERT INTO audit_events (at, actor_id, action, target, detail) VALUES {}",
            rows.join(", ")
        ),
        args,
    );
}
