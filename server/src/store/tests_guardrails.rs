//! Store tests of the allocator and the guardrails, on SQLite and PostgreSQL alike.

use super::tests::{backdate_ready, ledger_sum, on_both_fns, six_slots, state_of, user};
use super::*;
use app::domain::pool::plan_slots;
use app::domain::quota::{Limits, Overrides, OverridesChange};
use std::collections::HashSet;

const SLICE: u64 = 8192;
pub(super) const ROOMY: Limits = Limits {
    max_sessions: 10_000,
    max_gpu_mib: u64::MAX / 4,
    max_minutes: 480,
    max_disk_mib: 10_240,
};

/// How many of one user's launches race at once in the tests of many launches: more than the
/// pool has connections, so they contend for slots and the user's lock, yet few enough that the
/// last in line gets a connection within the pool's timeout on a loaded machine (a user's
/// launches are serialized, about 20 ms each on PostgreSQL there).
const IN_FLIGHT: usize = 32;

fn one_credit_an_hour(_: &str) -> i64 {
    1_000
}

pub(super) fn plan(user_id: &str, burst: bool, limits: Limits, use_warm: bool) -> LaunchPlan<'_> {
    LaunchPlan {
        user_id,
        image: None,
        editor: EditorKind::JupyterLab,
        slice_mib: if burst { 49152 } else { SLICE },
        burst,
        duration_minutes: 60,
        limits,
        disk_mib: None,
        price_on: &one_credit_an_hour,
        queue_price: 1_000,
        use_warm,
    }
}

/// `cards` cards of 80 GB, ten 8 GB slots each.
async fn cards_of_ten(store: &Store, cards: usize) -> Vec<String> {
    let gpus: Vec<GpuSpec> = (0..cards)
        .map(|i| GpuSpec {
            id: format!("card{i}"),
            model: "Virtual 80G".into(),
            memory_mib: 81920,
            slice_mib: SLICE,
            hold: app::domain::hold::SliceHold::None,
            device_minor: None,
            mig: None,
        })
        .collect();
    let slots: Vec<SlotSpec> = gpus
        .iter()
        .enumerate()
        .flat_map(|(i, g)| plan_slots(i, g))
        .collect();
    store.sync_pool(&gpus, &slots).await.unwrap();
    slots.into_iter().map(|s| s.id).collect()
}

/// 1,000 launches race for a user whose credits cover K of them: exactly K hold, the rest are
/// refused with the balance and the price, and the ledger sums to what is left.
async fn thousand_launches_exactly_k(store: Store) {
    const K: i64 = 37;
    six_slots(&store).await;
    let grant = K * 1_000 + 999;
    let alice = user(&store, "alice", grant).await;
    let in_flight = std::sync::Arc::new(tokio::sync::Semaphore::new(IN_FLIGHT));
    let mut tasks = Vec::new();
    for _ in 0..1000 {
        let (store, in_flight) = (store.clone(), in_flight.clone());
        let user_id = alice.id.clone();
        tasks.push(tokio::spawn(async move {
            let _turn = in_flight.acquire().await.unwrap();
            store.launch(plan(&user_id, false, ROOMY, false)).await
        }));
    }
    let (mut started, mut queued, mut refused) = (0, 0, 0);
    for task in tasks {
        match task.await.unwrap() {
            Ok(l) => match l.placement {
                Placement::Slot { .. } => started += 1,
                Placement::Queued { .. } => queued += 1,
                Placement::Warm(_) => panic!("no warm editors here"),
            },
            Err(StoreError::InsufficientCredits { balance, needed }) => {
                assert_eq!(needed, 1_000);
                assert_eq!(balance, 999);
                refused += 1;
            }
            Err(e) => panic!("unexpected error: {e:?}"),
        }
    }
    assert_eq!((started, queued, refused), (6, K - 6, 1000 - K));
    assert_eq!(ledger_sum(&store, &alice.id).await, grant - K * 1_000);
    assert_eq!(store.credits(&alice.id).await.unwrap(), (999, K * 1_000));
    let positions: Vec<u32> = store
        .queue_positions()
        .await
        .unwrap()
        .into_iter()
        .map(|(_, _, _, p)| p)
        .collect();
    assert_eq!(positions, (1..=(K - 6) as u32).collect::<Vec<_>>());
}

/// 500 launches race for 50 warm slots: each warm editor and slot goes to exactly one session,
/// everyone else queues; a freed slot goes to the head of the queue.
async fn five_hundred_launches_fifty_warm(store: Store) {
    let slots = cards_of_ten(&store, 5).await;
    assert_eq!(slots.len(), 50);
    for i in 0..50 {
        let warm = store
            .add_warm(EditorKind::JupyterLab, SLICE, None)
            .await
            .unwrap()
            .expect("a free slot to warm");
        assert!(
            store
                .warm_ready(
                    &warm.id,
                    &format!("127.0.0.1:{}", 20000 + i),
                    "secret",
                    "{}"
                )
                .await
                .unwrap()
        );
    }
    assert!(
        store
            .add_warm(EditorKind::JupyterLab, SLICE, None)
            .await
            .unwrap()
            .is_none()
    );
    let alice = user(&store, "alice", 10_000_000).await;
    let in_flight = std::sync::Arc::new(tokio::sync::Semaphore::new(IN_FLIGHT));
    let mut tasks = Vec::new();
    for _ in 0..500 {
        let (store, in_flight) = (store.clone(), in_flight.clone());
        let user_id = alice.id.clone();
        tasks.push(tokio::spawn(async move {
            let _turn = in_flight.acquire().await.unwrap();
            store.launch(plan(&user_id, false, ROOMY, true)).await
        }));
    }
    let mut warm_ids = HashSet::new();
    let mut warm_slots = HashSet::new();
    let mut queued = Vec::new();
    for task in tasks {
        let launched = task.await.unwrap().expect("launch");
        match launched.placement {
            Placement::Warm(w) => {
                assert_eq!(
                    launched.record.id, w.id,
                    "the session takes the editor's id"
                );
                assert_eq!(launched.record.state, SessionState::Ready);
                assert!(warm_ids.insert(w.id));
                assert!(warm_slots.insert(w.slot_id));
            }
            Placement::Queued { .. } => queued.push(launched.record),
            Placement::Slot { .. } => panic!("every free slot was warm and taken first"),
        }
    }
    assert_eq!((warm_ids.len(), queued.len()), (50, 450));
    let held: Vec<String> =
        sqlx::query("SELECT session_id FROM slots WHERE session_id IS NOT NULL")
            .fetch_all(store.pool_handle())
            .await
            .unwrap()
            .iter()
            .map(|r| r.try_get("session_id").unwrap())
            .collect();
    assert_eq!(held.iter().collect::<HashSet<_>>().len(), 50);
    assert!(store.warm_editors().await.unwrap().is_empty());
    assert!(
        store
            .dispatch_queued(&|_, _| 1_000)
            .await
            .unwrap()
            .is_empty()
    );

    // One ends: the oldest queued launch gets its slot.
    let first_ended = warm_ids.iter().next().unwrap().clone();
    store
        .begin_stop(&first_ended, EndReason::User, None)
        .await
        .unwrap();
    store.finish(&first_ended).await.unwrap();
    let mut oldest = queued.clone();
    oldest.sort_by_key(|r| (r.queued_at, r.id.clone()));
    let dispatched = store.dispatch_queued(&|_, _| 1_000).await.unwrap();
    assert_eq!(dispatched.len(), 1);
    assert_eq!(dispatched[0].session_id, oldest[0].id);
    assert_eq!(
        state_of(&store, &oldest[0].id).await,
        SessionState::Starting
    );
    assert_eq!(store.queue_position(&oldest[1].id).await.unwrap(), 1);
}

/// Ready pre-started editors of `SLICE` on the first `n` of `slots`.
async fn warm_on(store: &Store, n: usize) -> Vec<String> {
    let mut ids = Vec::new();
    for i in 0..n {
        let warm = store
            .add_warm(EditorKind::JupyterLab, SLICE, None)
            .await
            .unwrap()
            .expect("a free slot to warm");
        let ready = store
            .warm_ready(
                &warm.id,
                &format!("127.0.0.1:{}", 21000 + i),
                "secret",
                "{}",
            )
            .await
            .unwrap();
        assert!(ready);
        ids.push(warm.id);
    }
    ids
}

/// Twelve users launch at once onto six slots, three of them warm: every slot is used (the
/// warm ones warm), exactly six wait, and nobody gets an error. On PostgreSQL the launches
/// run side by side (each locks only its own user), so a launch that locked more candidates
/// than it takes would make others queue beside free slots, or deadlock with them.
async fn many_users_at_once_fill_every_free_slot(store: Store) {
    six_slots(&store).await;
    let warm = warm_on(&store, 3).await;
    let mut users = Vec::new();
    for i in 0..12 {
        users.push(user(&store, &format!("user{i}"), 100_000).await.id);
    }
    let together = std::sync::Arc::new(tokio::sync::Barrier::new(users.len()));
    let mut tasks = Vec::new();
    for user_id in users {
        let (store, together) = (store.clone(), together.clone());
        tasks.push(tokio::spawn(async move {
            together.wait().await;
            store.launch(plan(&user_id, false, ROOMY, true)).await
        }));
    }
    let (mut warm_taken, mut cold, mut queued) = (HashSet::new(), HashSet::new(), 0);
    for task in tasks {
        match task.await.unwrap().expect("no launch fails").placement {
            Placement::Warm(w) => assert!(warm_taken.insert(w.id)),
            Placement::Slot { slot_id, .. } => assert!(cold.insert(slot_id)),
            Placement::Queued { .. } => queued += 1,
        }
    }
    assert_eq!(
        warm_taken,
        warm.into_iter().collect(),
        "every warm editor is used"
    );
    assert_eq!(
        (cold.len(), queued),
        (3, 6),
        "every other slot is used, then the line"
    );
}

/// A slot that frees while people wait goes to the head of the line, not to whoever launches
/// next: a newcomer queues behind, even with the slot free until the dispatcher's next pass.
async fn a_newcomer_waits_behind_the_line(store: Store) {
    six_slots(&store).await;
    let alice = user(&store, "alice", 100_000).await;
    let mut held = Vec::new();
    for _ in 0..6 {
        let launched = store
            .launch(plan(&alice.id, false, ROOMY, false))
            .await
            .unwrap();
        assert!(matches!(launched.placement, Placement::Slot { .. }));
        held.push(launched.record.id);
    }
    let bob = user(&store, "bob", 100_000).await;
    let waiting = store
        .launch(plan(&bob.id, false, ROOMY, false))
        .await
        .unwrap();
    assert!(matches!(
        waiting.placement,
        Placement::Queued { position: 1 }
    ));

    store
        .begin_stop(&held[0], EndReason::User, None)
        .await
        .unwrap();
    store.finish(&held[0]).await.unwrap();
    let carol = user(&store, "carol", 100_000).await;
    let newcomer = store
        .launch(plan(&carol.id, false, ROOMY, false))
        .await
        .unwrap();
    assert!(
        matches!(newcomer.placement, Placement::Queued { position: 2 }),
        "{:?}",
        newcomer.placement
    );
    // Another size has no line: it is not held up.
    let other = store
        .launch(LaunchPlan {
            burst: true,
            slice_mib: 49152,
            ..plan(&carol.id, false, ROOMY, false)
        })
        .await
        .unwrap();
    assert!(
        matches!(other.placement, Placement::Queued { position: 1 }),
        "the card is busy"
    );

    let dispatched = store.dispatch_queued(&|_, _| 1_000).await.unwrap();
    let ids: Vec<&str> = dispatched.iter().map(|d| d.session_id.as_str()).collect();
    assert_eq!(ids, [waiting.record.id.as_str()], "the head of the line");
    assert_eq!(store.queue_position(&newcomer.record.id).await.unwrap(), 1);
}

/// A queued launch holds the dearest card of its size; the card it gets may be cheaper, and
/// then the difference comes back when it is dispatched, not only when it ends.
async fn a_queued_launch_on_a_cheaper_card_holds_only_its_price(store: Store) {
    six_slots(&store).await;
    let alice = user(&store, "alice", 100_000).await;
    let mut held = Vec::new();
    for _ in 0..6 {
        held.push(
            store
                .launch(plan(&alice.id, false, ROOMY, false))
                .await
                .unwrap()
                .record
                .id,
        );
    }
    let bob = user(&store, "bob", 10_000).await;
    let dear = LaunchPlan {
        queue_price: 3_000,
        ..plan(&bob.id, false, ROOMY, false)
    };
    let queued = store.launch(dear).await.unwrap();
    assert!(matches!(queued.placement, Placement::Queued { .. }));
    assert_eq!(store.credits(&bob.id).await.unwrap(), (7_000, 3_000));

    store
        .begin_stop(&held[0], EndReason::User, None)
        .await
        .unwrap();
    store.finish(&held[0]).await.unwrap();
    let dispatched = store.dispatch_queued(&|_, _| 1_000).await.unwrap();
    assert_eq!(dispatched.len(), 1);
    assert_eq!(
        store.credits(&bob.id).await.unwrap(),
        (9_000, 1_000),
        "an hour at the card's price, the rest back"
    );
    assert_eq!(ledger_sum(&store, &bob.id).await, 9_000);

    store
        .begin_stop(&queued.record.id, EndReason::User, None)
        .await
        .unwrap();
    store.finish(&queued.record.id).await.unwrap();
    assert_eq!(
        store.credits(&bob.id).await.unwrap(),
        (10_000, 0),
        "never ready: free"
    );
}

/// Changes of different limits of one user at the same time all hold (none reads what another
/// is about to overwrite), and each is audited.
async fn concurrent_quota_changes_all_hold(store: Store) {
    let alice = user(&store, "alice", 0).await;
    for round in 1..=10u32 {
        let changes = [
            OverridesChange {
                max_sessions: Some(Some(round)),
                ..OverridesChange::default()
            },
            OverridesChange {
                max_gpu_mib: Some(Some(u64::from(round) * 1024)),
                ..OverridesChange::default()
            },
            OverridesChange {
                max_minutes: Some(Some(round * 10)),
                ..OverridesChange::default()
            },
            OverridesChange {
                max_disk_mib: Some(Some(u64::from(round))),
                ..OverridesChange::default()
            },
        ];
        let tasks: Vec<_> = changes
            .into_iter()
            .map(|change| {
                let (store, id) = (store.clone(), alice.id.clone());
                tokio::spawn(async move { store.change_quota(&id, &change, None).await })
            })
            .collect();
        for task in tasks {
            task.await.unwrap().unwrap();
        }
        assert_eq!(
            store.quota_overrides(&alice.id).await.unwrap(),
            Overrides {
                max_sessions: Some(round),
                max_gpu_mib: Some(u64::from(round) * 1024),
                max_minutes: Some(round * 10),
                max_disk_mib: Some(u64::from(round)),
            },
            "round {round}"
        );
    }
    // Null puts one back to the default; what it leaves out stays.
    let now = store
        .change_quota(
            &alice.id,
            &OverridesChange {
                max_minutes: Some(None),
                ..OverridesChange::default()
            },
            None,
        )
        .await
        .unwrap();
    assert_eq!((now.max_minutes, now.max_sessions), (None, Some(10)));
}

/// Each limit refuses with what it is and what is in use; nothing is written; overrides apply.
async fn quotas_refuse_and_overrides_apply(store: Store) {
    six_slots(&store).await;
    let alice = user(&store, "alice", 100_000).await;
    let limits = Limits {
        max_sessions: 2,
        max_gpu_mib: 16384,
        max_minutes: 120,
        max_disk_mib: 1024,
    };
    for _ in 0..2 {
        store
            .launch(plan(&alice.id, false, limits, false))
            .await
            .unwrap();
    }
    let before = ledger_sum(&store, &alice.id).await;
    match store.launch(plan(&alice.id, false, limits, false)).await {
        Err(StoreError::Quota(message)) => {
            assert!(message.contains("2 concurrent sessions"), "{message}")
        }
        other => panic!("expected a quota refusal, got {other:?}"),
    }
    assert_eq!(ledger_sum(&store, &alice.id).await, before);
    assert_eq!(store.sessions_of(&alice.id, 10).await.unwrap().len(), 2);

    store
        .set_quota(
            &alice.id,
            &Overrides {
                max_sessions: Some(5),
                ..Overrides::default()
            },
            None,
        )
        .await
        .unwrap();
    // The session limit moved; GPU memory (16 GB, two slices held) is next to refuse.
    match store.launch(plan(&alice.id, false, limits, false)).await {
        Err(StoreError::Quota(message)) => assert!(message.contains("hold 16 GB"), "{message}"),
        other => panic!("expected the memory limit, got {other:?}"),
    }
    let bob = user(&store, "bob", 100_000).await;
    let mut too_long = plan(&bob.id, false, limits, false);
    too_long.duration_minutes = 121;
    assert!(matches!(
        store.launch(too_long).await,
        Err(StoreError::Quota(_))
    ));
    let mut too_big = plan(&bob.id, false, limits, false);
    too_big.disk_mib = Some(2048);
    match store.launch(too_big).await {
        Err(StoreError::Quota(message)) => assert!(message.contains("workspace"), "{message}"),
        other => panic!("expected the disk limit, got {other:?}"),
    }
    assert!(store.sessions_of(&bob.id, 10).await.unwrap().is_empty());
}

/// A burst takes every slot of an idle card, or queues for one; the price is the card's.
async fn burst_takes_a_whole_card(store: Store) {
    let cards = [gpu_of("cheap", "A"), gpu_of("dear", "B")];
    let slots: Vec<SlotSpec> = cards
        .iter()
        .enumerate()
        .flat_map(|(i, g)| plan_slots(i, g))
        .collect();
    store.sync_pool(&cards, &slots).await.unwrap();
    let alice = user(&store, "alice", 1_000_000).await;
    let price = |gpu: &str| if gpu == "dear" { 9_000 } else { 6_000 };
    let slice = store
        .launch(LaunchPlan {
            price_on: &price,
            ..plan(&alice.id, false, ROOMY, false)
        })
        .await
        .unwrap();
    assert_eq!(slice.record.gpu_id.as_deref(), Some("cheap"));
    let burst = store
        .launch(LaunchPlan {
            price_on: &price,
            ..plan(&alice.id, true, ROOMY, false)
        })
        .await
        .unwrap();
    assert!(matches!(burst.placement, Placement::Slot { .. }));
    assert_eq!(
        burst.record.price_per_hour, 9_000,
        "the card it got sets the price"
    );
    let on_card: i64 = sqlx::query("SELECT COUNT(*) AS n FROM slots WHERE session_id = $1")
        .bind(&burst.record.id)
        .fetch_one(store.pool_handle())
        .await
        .unwrap()
        .try_get("n")
        .unwrap();
    assert_eq!(on_card, 6);
    let second = store
        .launch(LaunchPlan {
            price_on: &price,
            ..plan(&alice.id, true, ROOMY, false)
        })
        .await
        .unwrap();
    assert!(matches!(
        second.placement,
        Placement::Queued { position: 1 }
    ));
    // The first burst ends: the card goes to the queued one, at that card's price.
    store
        .begin_stop(&burst.record.id, EndReason::User, None)
        .await
        .unwrap();
    store.finish(&burst.record.id).await.unwrap();
    let dispatched = store
        .dispatch_queued(&|gpu, _| if gpu == "dear" { 9_000 } else { 6_000 })
        .await
        .unwrap();
    assert_eq!(dispatched.len(), 1);
    let got = store.session(&second.record.id).await.unwrap().unwrap();
    assert_eq!(
        (got.state, got.price_per_hour),
        (SessionState::Starting, 9_000)
    );
}

fn gpu_of(id: &str, model: &str) -> GpuSpec {
    GpuSpec {
        id: id.into(),
        model: model.into(),
        memory_mib: 49152,
        slice_mib: SLICE,
        hold: app::domain::hold::SliceHold::None,
        device_minor: None,
        mig: None,
    }
}

/// Extending holds more at the session's price, moves the end, and stops at the limit.
async fn extend_holds_more(store: Store) {
    let limits = app::domain::quota::ExtensionLimits {
        user_max_minutes: 480,
        server_max_minutes: 480,
        burst_max_minutes: 480,
    };
    six_slots(&store).await;
    let alice = user(&store, "alice", 3_000).await;
    let launched = store
        .launch(plan(&alice.id, false, ROOMY, false))
        .await
        .unwrap();
    let id = launched.record.id;
    assert!(matches!(
        store.extend(&id, 30, &limits).await,
        Err(StoreError::Conflict)
    ));
    store.mark_ready(&id, "ready").await.unwrap();
    let ends = store.session(&id).await.unwrap().unwrap().ends_at.unwrap();
    store.extend(&id, 30, &limits).await.unwrap();
    let after = store.session(&id).await.unwrap().unwrap();
    assert_eq!(after.ends_at.unwrap() - ends, 30 * 60_000);
    assert_eq!(after.duration_minutes, 90);
    assert_eq!(ledger_sum(&store, &alice.id).await, 3_000 - 1_500);
    match store.extend(&id, 400, &limits).await {
        Err(StoreError::Quota(message)) => assert!(message.contains("390 more"), "{message}"),
        other => panic!("expected the duration limit, got {other:?}"),
    }
    match store.extend(&id, 390, &limits).await {
        Err(StoreError::InsufficientCredits { balance, needed }) => {
            assert_eq!((balance, needed), (1_500, 6_500))
        }
        other => panic!("expected too few credits, got {other:?}"),
    }
    // Settling refunds both holds and charges the minutes used: 61 s is two minutes.
    backdate_ready(&store, &id, 61_000).await;
    store.begin_stop(&id, EndReason::User, None).await.unwrap();
    store.finish(&id).await.unwrap();
    assert_eq!(ledger_sum(&store, &alice.id).await, 3_000 - 34);
}

/// A minute keeps its highest reading; readings read back in order, prune by age, and the busy
/// minutes count per day, weighted by slice, for one user or everyone.
async fn readings_keep_each_minutes_highest(store: Store) {
    use app::domain::usage::{MINUTE_MS, Reading, day_of, minute_of};
    six_slots(&store).await;
    let alice = user(&store, "alice", 10_000).await;
    let bob = user(&store, "bob", 10_000).await;
    let mut ids = Vec::new();
    for who in [&alice, &bob] {
        let launched = store
            .launch(plan(&who.id, false, ROOMY, false))
            .await
            .unwrap();
        store
            .mark_ready(&launched.record.id, "ready")
            .await
            .unwrap();
        ids.push(launched.record.id);
    }
    let now = now_ms();
    let minute = minute_of(now) - 2 * MINUTE_MS;
    let reading = |at: i64, cpu: Option<u32>, ram: Option<u64>, busy: bool| Reading {
        at_ms: at,
        gpu_mib: None,
        gpu_util_pct: None,
        cpu_milli: cpu,
        ram_mib: ram,
        busy,
    };
    let alices = &ids[0];
    store
        .record_reading(
            alices,
            &reading(minute + 1_000, Some(500), Some(300), false),
        )
        .await
        .unwrap();
    store
        .record_reading(alices, &reading(minute + 20_000, Some(1_500), None, true))
        .await
        .unwrap();
    store
        .record_reading(
            alices,
            &reading(minute + 40_000, Some(200), Some(100), false),
        )
        .await
        .unwrap();
    store
        .record_reading(alices, &reading(minute + MINUTE_MS, None, Some(50), false))
        .await
        .unwrap();
    store
        .record_reading(&ids[1], &reading(minute, Some(10), Some(10), true))
        .await
        .unwrap();
    let read = store.readings_since(alices, minute).await.unwrap();
    assert_eq!(
        read,
        vec![
            reading(minute, Some(1_500), Some(300), true),
            reading(minute + MINUTE_MS, None, Some(50), false),
        ],
        "one row a minute, each the minute's highest"
    );
    assert_eq!(
        store
            .readings_since(alices, minute + 1)
            .await
            .unwrap()
            .len(),
        1
    );

    let (spans, busy) = store
        .usage_spans(Some(&alice.id), now - 86_400_000, now)
        .await
        .unwrap();
    assert_eq!(spans.len(), 1, "hers only");
    assert_eq!(spans[0].slice_mib, SLICE);
    assert_eq!(
        busy,
        vec![(day_of(minute), SLICE as i64)],
        "one busy minute of her slice"
    );
    let (spans, busy) = store
        .usage_spans(None, now - 86_400_000, now)
        .await
        .unwrap();
    assert_eq!(spans.len(), 2, "everyone's");
    assert_eq!(busy, vec![(day_of(minute), 2 * SLICE as i64)]);

    assert_eq!(
        store.prune_readings(minute + 1).await.unwrap(),
        2,
        "the oldest minute of both"
    );
    assert_eq!(store.readings_since(alices, 0).await.unwrap().len(), 1);
}

/// One reaper at a time: the lease is held until it expires, and its holder renews it.
async fn lease_has_one_holder(store: Store) {
    assert!(store.try_lease("reaper", "a", 60_000).await.unwrap());
    assert!(!store.try_lease("reaper", "b", 60_000).await.unwrap());
    assert!(store.try_lease("reaper", "a", 60_000).await.unwrap());
    assert!(store.try_lease("other", "b", 60_000).await.unwrap());
    assert!(store.try_lease("short", "a", -1).await.unwrap());
    assert!(store.try_lease("short", "b", 60_000).await.unwrap());
    // Held while unexpired; given up only by its holder.
    assert!(store.lease_held("reaper").await.unwrap());
    assert!(!store.lease_held("nobody-took-it").await.unwrap());
    store.try_lease("expired", "a", -1).await.unwrap();
    assert!(!store.lease_held("expired").await.unwrap());
    store.release_lease("reaper", "b").await.unwrap();
    assert!(
        store.lease_held("reaper").await.unwrap(),
        "b does not hold it"
    );
    store.release_lease("reaper", "a").await.unwrap();
    assert!(!store.lease_held("reaper").await.unwrap());
    assert!(store.try_lease("reaper", "b", 60_000).await.unwrap());
}

/// The reconciler's correction: a session moves to a free slot of its size on HAMi's card.
async fn a_session_moves_to_the_card_hami_chose(store: Store) {
    cards_of_ten(&store, 2).await;
    let ann = user(&store, "ann", 100_000).await;
    let launched = store
        .launch(plan(&ann.id, false, ROOMY, false))
        .await
        .unwrap();
    let id = launched.record.id.clone();
    let Placement::Slot { slot_id, .. } = launched.placement else {
        panic!("a free slot");
    };
    let ours = store.session(&id).await.unwrap().unwrap().gpu_id.unwrap();
    let other = if ours == "card0" { "card1" } else { "card0" };
    assert_eq!(
        store.move_to_gpu(&id, &ours).await.unwrap(),
        SlotMove::Already
    );
    assert_eq!(
        store.move_to_gpu(&id, "GPU-unknown").await.unwrap(),
        SlotMove::UnknownGpu
    );
    let SlotMove::Moved { from, to } = store.move_to_gpu(&id, other).await.unwrap() else {
        panic!("moved");
    };
    assert_eq!(from, slot_id);
    let record = store.session(&id).await.unwrap().unwrap();
    assert_eq!(record.gpu_id.as_deref(), Some(other));
    assert_eq!(record.slot_id.as_deref(), Some(to.as_str()));
    let held: Vec<String> = store
        .pool()
        .await
        .unwrap()
        .into_iter()
        .flat_map(|(_, slots)| slots)
        .filter(|s| s.session_id.as_deref() == Some(id.as_str()))
        .map(|s| s.id)
        .collect();
    assert_eq!(held, vec![to], "one slot, the new one");
    // With every slot taken, a card cannot take it: the mismatch is reported, nothing moves.
    for _ in 0..19 {
        let filler = store
            .launch(plan(&ann.id, false, ROOMY, false))
            .await
            .unwrap();
        assert!(matches!(filler.placement, Placement::Slot { .. }));
    }
    assert_eq!(
        store.move_to_gpu(&id, &ours).await.unwrap(),
        SlotMove::NoFreeSlot
    );
    assert_eq!(
        store.session(&id).await.unwrap().unwrap().gpu_id.as_deref(),
        Some(other)
    );
    // An ended session is not moved anywhere.
    store
        .begin_stop(&id, app::domain::session::EndReason::User, None)
        .await
        .unwrap();
    store.finish(&id).await.unwrap();
    assert_eq!(
        store.move_to_gpu(&id, &ours).await.unwrap(),
        SlotMove::Ended
    );
}

/// The database's choice of slot is the domain's rule (`rank_free_slots`: cards sparing a slot
/// beyond their parked sessions first, the busiest first, then the lowest slot id), checked at
/// every step of a long run of launches, stops and parkings.
async fn slot_choice_follows_the_domain_rule(store: Store) {
    use app::domain::pool::{SlotUse, rank_free_slots};
    cards_of_ten(&store, 3).await;
    let alice = user(&store, "alice", 1_000_000_000).await;
    let mut live: Vec<String> = Vec::new();
    // A fixed pseudo-random walk: mostly launches, some stops, so cards fill unevenly.
    let mut seed: u64 = 0x5eed;
    let mut next = move || {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        seed >> 33
    };
    // The slots parked sessions left, one entry each.
    let mut parked_from: Vec<String> = Vec::new();
    for step in 0..120 {
        let stop = !live.is_empty() && (live.len() >= 28 || next() % 3 == 0);
        if stop {
            let id = live.remove((next() as usize) % live.len());
            // Some are parked instead: their slot free, their card wanted back.
            if next() % 4 == 0 {
                store.mark_ready(&id, "ready").await.unwrap();
                store.park(&id).await.unwrap().expect("parked");
                parked_from.push(store.session(&id).await.unwrap().unwrap().slot_id.unwrap());
            } else {
                store.begin_stop(&id, EndReason::User, None).await.unwrap();
                store.finish(&id).await.unwrap();
            }
            continue;
        }
        let uses: Vec<SlotUse> = store
            .pool()
            .await
            .unwrap()
            .into_iter()
            .flat_map(|(_, slots)| slots)
            .map(|s| SlotUse {
                free: s.session_id.is_none(),
                parked: parked_from.iter().filter(|p| **p == s.id).count() as u32,
                slot_id: s.id,
                gpu_id: s.gpu_id,
                slice_mib: s.slice_mib,
            })
            .collect();
        let expected = rank_free_slots(&uses, SLICE)
            .first()
            .map(|s| s.slot_id.clone());
        let launched = store
            .launch(plan(&alice.id, false, ROOMY, false))
            .await
            .unwrap();
        assert!(matches!(launched.placement, Placement::Slot { .. }));
        assert_eq!(
            launched.record.slot_id, expected,
            "step {step}: the store and the domain rule disagree"
        );
        live.push(launched.record.id);
    }
}

on_both_fns! {
    readings_keep_each_minutes_highest => readings_keep_each_minutes_highest_sqlite, readings_keep_each_minutes_highest_postgres;
    slot_choice_follows_the_domain_rule => slot_choice_follows_the_domain_rule_sqlite, slot_choice_follows_the_domain_rule_postgres;
    a_session_moves_to_the_card_hami_chose => a_session_moves_to_the_card_hami_chose_sqlite, a_session_moves_to_the_card_hami_chose_postgres;
    thousand_launches_exactly_k => thousand_launches_exactly_k_sqlite, thousand_launches_exactly_k_postgres;
    five_hundred_launches_fifty_warm => five_hundred_launches_fifty_warm_sqlite, five_hundred_launches_fifty_warm_postgres;
    quotas_refuse_and_overrides_apply => quotas_refuse_and_overrides_apply_sqlite, quotas_refuse_and_overrides_apply_postgres;
    concurrent_quota_changes_all_hold => concurrent_quota_changes_all_hold_sqlite, concurrent_quota_changes_all_hold_postgres;
    burst_takes_a_whole_card => burst_takes_a_whole_card_sqlite, burst_takes_a_whole_card_postgres;
    extend_holds_more => extend_holds_more_sqlite, extend_holds_more_postgres;
    lease_has_one_holder => lease_has_one_holder_sqlite, lease_has_one_holder_postgres;
    many_users_at_once_fill_every_free_slot => many_users_at_once_fill_every_free_slot_sqlite, many_users_at_once_fill_every_free_slot_postgres;
    a_newcomer_waits_behind_the_line => a_newcomer_waits_behind_the_line_sqlite, a_newcomer_waits_behind_the_line_postgres;
    a_queued_launch_on_a_cheaper_card_holds_only_its_price => a_queued_launch_on_a_cheaper_card_holds_only_its_price_sqlite, a_queued_launch_on_a_cheaper_card_holds_only_its_price_postgres;
}

/// The warm-pool keeper looks before it writes: with every slot held (launches took the
/// pre-started editors) it takes no write lock, so in a burst it neither waits for the
/// launches' writes nor holds them up. Here another connection holds SQLite's write lock
/// throughout: a keeper that began a write transaction to find no slot would wait out the busy
/// timeout and fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_keeper_takes_no_write_lock_when_no_slot_is_free() {
    super::tests::run_sqlite(|store: Store| async move {
        use sqlx::{Connection, Executor};
        six_slots(&store).await;
        warm_on(&store, 6).await;
        let alice = user(&store, "alice", 10_000_000).await;
        for _ in 0..2 {
            let launched = store.launch(plan(&alice.id, false, ROOMY, true)).await;
            assert!(matches!(launched.unwrap().placement, Placement::Warm(_)));
        }
        let mut writer = sqlx::AnyConnection::connect(&store.url).await.unwrap();
        writer.execute("BEGIN IMMEDIATE").await.unwrap();
        let looked = store.add_warm(EditorKind::JupyterLab, SLICE, None).await;
        writer.execute("ROLLBACK").await.unwrap();
        assert!(matches!(looked, Ok(None)), "{looked:?}");
        // A pre-started editor died: the keeper reserves its slot again, through the write.
        let died = store.warm_editors().await.unwrap().remove(0);
        assert!(store.remove_warm(&died.id).await.unwrap());
        let slot = died.slot_id;
        let reserved = store.add_warm(EditorKind::JupyterLab, SLICE, None).await;
        assert_eq!(reserved.unwrap().map(|w| w.slot_id), Some(slot));
    })
    .await;
}
