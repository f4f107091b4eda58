//! A launch's own rows, written in four statements: the session (in the state its place gives
//! it), its steps, its hold and its audit events.
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
/// events. Returns the steps, and for a queued launch its place in line.
pub(super) async fn insert_launch(
    w: &mut WriteTx,
    r: &Requested<'_>,
    place: &Place<'_>,
    now: i64,
) -> Result<(Vec<Step>, Option<u32>)> {
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
    sqlx::query(
        "INSERT INTO sessions (id, user_id, editor, slice_mib, duration_minutes, price_per_hour, state, created_at,
           last_activity_at, burst, image, slot_id, queued_at, upstream, editor_token, runtime_handle, ready_at, ends_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)",
    )
    .bind(r.id)
    .bind(r.user_id)
    .bind(r.editor.as_str())
    .bind(r.slice_mib as i64)
    .bind(r.duration_minutes as i64)
    .bind(r.price_per_hour)
    .bind(state.as_str())
    .bind(now)
    .bind(r.burst as i64)
    .bind(r.image)
    .bind(slot_id)
    .bind(matches!(place, Place::Queued).then_some(now))
    .bind(warm.and_then(|w| w.upstream.clone()))
    .bind(warm.and_then(|w| w.editor_token.clone()))
    .bind(warm.and_then(|w| w.runtime_handle.clone()))
    .bind(ready_at)
    .bind(ready_at.map(|at| at + r.duration_minutes as i64 * 60_000))
    .execute(&mut *w.tx)
    .await?;
    if r.hold > 0 {
        insert_ledger(
            w,
            r.user_id,
            LedgerKind::Hold,
            -r.hold,
            Some(r.id),
            "held for launch",
            now,
        )
        .await?;
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
            let at = super::launch::position_in(&mut w.tx, r.id).await?;
            position = Some(at);
            steps.push((
                SessionState::Queued,
                super::launch::queue_message(r.slice_mib, r.burst, at),
                20,
            ));
        }
    }
    let steps = insert_steps(w, r.id, steps, now).await?;
    let target = format!("session:{}", r.id);
    let mut audit = vec![(
        Some(r.user_id),
        "session.launch".to_string(),
        r.editor.as_str().to_string(),
    )];
    for Transition { from, to } in moves {
        audit.push((None, format!("session.{to}"), format!("{from} -> {to}")));
    }
    insert_audits(w, &target, &audit, now).await?;
    Ok((steps, position))
}

/// A new session's steps, numbered from 1, in one statement.
async fn insert_steps(
    w: &mut WriteTx,
    session_id: &str,
    steps: Vec<(SessionState, String, u8)>,
    at: i64,
) -> Result<Vec<Step>> {
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
    let sql = format!(
        "INSERT INTO session_events (session_id, at, seq, state, message, progress, failed) VALUES {}",
        rows.join(", ")
    );
    let mut query = sqlx::query(&sql).bind(session_id).bind(at);
    for (i, (state, message, progress)) in steps.iter().enumerate() {
        query = query
            .bind(i as i64 + 1)
            .bind(state.as_str())
            .bind(message.as_str())
            .bind(*progress as i64);
    }
    query.execute(&mut *w.tx).await?;
    Ok(steps
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
        .collect())
}

/// Audit events about one target, in order, in one statement: (actor, action, detail).
async fn insert_audits(
    w: &mut WriteTx,
    target: &str,
    events: &[(Option<&str>, String, String)],
    at: i64,
) -> Result<()> {
    let rows: Vec<String> = (0..events.len())
        .map(|i| {
            let p = 3 * i;
            format!("($1, ${}, ${}, $2, ${})", p + 3, p + 4, p + 5)
        })
        .collect();
    let sql = format!(
        "INSERT INTO audit_events (at, actor_id, action, target, detail) VALUES {}",
        rows.join(", ")
    );
    let mut query = sqlx::query(&sql).bind(at).bind(target);
    for (actor, action, detail) in events {
        query = query
            .bind(*actor)
            .bind(action.as_str())
            .bind(detail.as_str());
    }
    query.execute(&mut *w.tx).await?;
    Ok(())
}
