//! Store tests of parking, on SQLite and PostgreSQL alike.

use super::tests::{gpu, on_both_fns, state_of, user};
use super::*;
use app::domain::pool::plan_slots;

const SLICE: u64 = 8192;

fn plan(user_id: &str) -> LaunchPlan<'_> {
    super::tests_guardrails::plan(user_id, false, super::tests_guardrails::ROOMY, true)
}

/// A pool of one slot.
async fn one_slot(store: &Store) -> String {
    let card = gpu("v0", SLICE, SLICE);
    let slots = plan_slots(0, &card);
    assert_eq!(slots.len(), 1);
    store.sync_pool(&[card], &slots).await.unwrap();
    slots[0].id.clone()
}

async fn holder_of(store: &Store, slot: &str) -> Option<String> {
    store
        .pool()
        .await
        .unwrap()
        .into_iter()
        .flat_map(|(_, slots)| slots)
        .find(|s| s.id == slot)
        .and_then(|s| s.session_id)
}

/// A parked session's slot goes to the next launch; it cannot resume while that one holds it,
/// and resumes on the same slot once it ends, with its clock and its hold as they were.
async fn a_parked_session_lends_its_slot_and_takes_it_back(store: Store) {
    let slot = one_slot(&store).await;
    let alice = user(&store, "alice", 100_000).await;
    let bob = user(&store, "bob", 100_000).await;
    let first = store.launch(plan(&alice.id)).await.unwrap();
    let a = first.record.id.clone();
    store.mark_ready(&a, "ready").await.unwrap();
    let ready = store.session(&a).await.unwrap().unwrap();
    assert!(matches!(
        store.resume(&a).await.unwrap(),
        Resumed::NotParked
    ));

    assert!(store.park(&a).await.unwrap().is_some());
    assert!(store.park(&a).await.unwrap().is_none(), "parked once");
    let parked = store.session(&a).await.unwrap().unwrap();
    assert_eq!(parked.state, SessionState::Parked);
    assert!(parked.parked_at.is_some());
    assert_eq!(
        parked.slot_id.as_deref(),
        Some(slot.as_str()),
        "kept to resume on"
    );
    assert_eq!(holder_of(&store, &slot).await, None, "the slot is free");

    let second = store.launch(plan(&bob.id)).await.unwrap();
    assert!(
        matches!(second.placement, Placement::Slot { ref slot_id, .. } if *slot_id == slot),
        "{:?}",
        second.placement
    );
    assert!(matches!(store.resume(&a).await.unwrap(), Resumed::Waiting));
    assert_eq!(state_of(&store, &a).await, SessionState::Parked);

    let b = second.record.id;
    store.begin_stop(&b, EndReason::User, None).await.unwrap();
    assert!(
        matches!(store.resume(&a).await.unwrap(), Resumed::Waiting),
        "a stopping session still holds its slot"
    );
    store.finish(&b).await.unwrap();
    assert!(matches!(
        store.resume(&a).await.unwrap(),
        Resumed::Ready { .. }
    ));
    let resumed = store.session(&a).await.unwrap().unwrap();
    assert_eq!(resumed.state, SessionState::Ready);
    assert_eq!(resumed.parked_at, None);
    assert_eq!(
        (resumed.ready_at, resumed.ends_at),
        (ready.ready_at, ready.ends_at)
    );
    assert_eq!(holder_of(&store, &slot).await.as_deref(), Some(a.as_str()));
}

/// Resuming pushes a pre-started editor off the slot (returned to be stopped); a parked session
/// ends like a running one, through stopping.
async fn resuming_pushes_a_prestarted_editor_off_and_a_parked_session_can_end(store: Store) {
    one_slot(&store).await;
    let alice = user(&store, "alice", 100_000).await;
    let a = store.launch(plan(&alice.id)).await.unwrap().record.id;
    store.mark_ready(&a, "ready").await.unwrap();
    store.park(&a).await.unwrap();
    let warm = store
        .add_warm(EditorKind::JupyterLab, SLICE, None)
        .await
        .unwrap()
        .expect("the parked session's slot is free to warm");
    match store.resume(&a).await.unwrap() {
        Resumed::Ready { evicted, .. } => {
            assert_eq!(
                evicted.iter().map(|w| &w.id).collect::<Vec<_>>(),
                [&warm.id]
            );
        }
        other => panic!("{other:?}"),
    }
    store.park(&a).await.unwrap();
    let (state, _) = store
        .begin_stop(&a, EndReason::Idle, None)
        .await
        .unwrap()
        .expect("a stop begins");
    assert_eq!(state, SessionState::Stopping);
    store.finish(&a).await.unwrap();
    assert_eq!(state_of(&store, &a).await, SessionState::Ended);
}

/// A parked session whose slot was taken resumes on another free slot of its card, never on
/// another card (its editor's device nodes are its card's), and waits while its card is full.
async fn a_parked_session_resumes_on_its_own_card_only(store: Store) {
    let cards = [gpu("v0", 2 * SLICE, SLICE), gpu("v1", 3 * SLICE, SLICE)];
    let slots: Vec<_> = cards
        .iter()
        .enumerate()
        .flat_map(|(i, card)| plan_slots(i, card))
        .collect();
    store.sync_pool(&cards, &slots).await.unwrap();
    let on = |card: &str| -> Vec<String> {
        slots
            .iter()
            .filter(|s| s.gpu_id == card)
            .map(|s| s.id.clone())
            .collect()
    };
    let (v0, v1) = (on("v0"), on("v1"));
    assert_eq!((v0.len(), v1.len()), (2, 3));
    let alice = user(&store, "alice", 100_000).await;
    let a = store.launch(plan(&alice.id)).await.unwrap().record.id;
    store.mark_ready(&a, "ready").await.unwrap();
    let left = store.session(&a).await.unwrap().unwrap().slot_id.unwrap();
    assert!(v0.contains(&left), "the busiest card first: {left}");
    store.park(&a).await.unwrap();
    let hold = |slot: String, by: &'static str| {
        let store = store.clone();
        async move {
            sqlx::query("UPDATE slots SET session_id = $1 WHERE id = $2")
                .bind(by)
                .bind(slot)
                .execute(store.pool_handle())
                .await
                .unwrap();
        }
    };
    hold(left.clone(), "someone").await;
    assert!(matches!(
        store.resume(&a).await.unwrap(),
        Resumed::Ready { .. }
    ));
    let moved = store.session(&a).await.unwrap().unwrap().slot_id.unwrap();
    assert!(v0.contains(&moved) && moved != left, "{moved}");

    store.park(&a).await.unwrap();
    hold(moved, "someone else").await;
    for slot in &v1 {
        assert!(holder_of(&store, slot).await.is_none());
    }
    assert!(matches!(store.resume(&a).await.unwrap(), Resumed::Waiting));
    assert_eq!(state_of(&store, &a).await, SessionState::Parked);
}

/// Time parked is not charged: a session ready for an hour, parked for 50 minutes of it and
/// again from its resume to its end, pays for the 10 it held its slice.
async fn parked_time_is_not_charged(store: Store) {
    one_slot(&store).await;
    let alice = user(&store, "alice", 100_000).await;
    let a = store.launch(plan(&alice.id)).await.unwrap().record.id;
    store.mark_ready(&a, "ready").await.unwrap();
    let set = |sql: &'static str, at: i64| {
        let (store, a) = (store.clone(), a.clone());
        async move {
            sqlx::query(sql)
                .bind(at)
                .bind(&a)
                .execute(store.pool_handle())
                .await
                .unwrap();
        }
    };
    let start = now_ms();
    set(
        "UPDATE sessions SET ready_at = $1 WHERE id = $2",
        start - 60 * 60_000,
    )
    .await;
    store.park(&a).await.unwrap().unwrap();
    set(
        "UPDATE sessions SET parked_at = $1 WHERE id = $2",
        start - 50 * 60_000,
    )
    .await;
    assert!(matches!(
        store.resume(&a).await.unwrap(),
        Resumed::Ready { .. }
    ));
    let resumed = store.session(&a).await.unwrap().unwrap();
    assert!(resumed.parked_ms >= 50 * 60_000, "{}", resumed.parked_ms);
    store.park(&a).await.unwrap().unwrap();
    let resumed_at = start - 50 * 60_000 + resumed.parked_ms;
    set(
        "UPDATE sessions SET parked_at = $1 WHERE id = $2",
        resumed_at,
    )
    .await;
    store.begin_stop(&a, EndReason::User, None).await.unwrap();
    store.finish(&a).await.unwrap();
    let charges: Vec<_> = store
        .ledger(&alice.id)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == "charge")
        .collect();
    assert_eq!(charges.len(), 1, "{charges:?}");
    assert_eq!(charges[0].note, "10 min used", "{charges:?}");
    let ended = store.session(&a).await.unwrap().unwrap();
    assert_eq!(ended.parked_at, None, "the last park is kept as ended");
    assert!(ended.parked_ms > resumed.parked_ms);
}

on_both_fns! {
    parked_time_is_not_charged => parked_time_is_not_charged_sqlite, parked_time_is_not_charged_postgres;
    a_parked_session_resumes_on_its_own_card_only => a_parked_session_resumes_on_its_own_card_only_sqlite, a_parked_session_resumes_on_its_own_card_only_postgres;
    a_parked_session_lends_its_slot_and_takes_it_back => a_parked_session_lends_its_slot_and_takes_it_back_sqlite, a_parked_session_lends_its_slot_and_takes_it_back_postgres;
    resuming_pushes_a_prestarted_editor_off_and_a_parked_session_can_end => resuming_pushes_a_prestarted_editor_off_and_a_parked_session_can_end_sqlite, resuming_pushes_a_prestarted_editor_off_and_a_parked_session_can_end_postgres;
}
