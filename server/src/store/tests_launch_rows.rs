//! The rows a launch writes (`launch_rows.rs`), on SQLite and PostgreSQL alike: a warm, a cold
//! and a queued launch each leave their session in the state its place gives it, its steps
//! numbered from 1, its hold, and one audit event per move of the state machine, in order.

use super::tests::{on_both_fns, user};
use super::*;
use app::domain::pool::plan_slots;
use app::domain::quota::Limits;

const SLICE: u64 = 8192;

fn one_credit_an_hour(_: &str) -> i64 {
    1_000
}

fn plan(user_id: &str, use_warm: bool) -> LaunchPlan<'_> {
    LaunchPlan {
        user_id,
        image: None,
        editor: EditorKind::JupyterLab,
        slice_mib: SLICE,
        burst: false,
        duration_minutes: 60,
        limits: Limits {
            max_sessions: 10,
            max_gpu_mib: 1 << 20,
            max_minutes: 480,
            max_disk_mib: 10_240,
        },
        disk_mib: None,
        price_on: &one_credit_an_hour,
        queue_price: 1_000,
        use_warm,
    }
}

/// (action, actor, detail) of the session's audit events, oldest first.
async fn audit_of(store: &Store, session_id: &str) -> Vec<(String, Option<String>, String)> {
    sqlx::query("SELECT action, actor_id, detail FROM audit_events WHERE target = $1 ORDER BY id")
        .bind(format!("session:{session_id}"))
        .fetch_all(store.pool_handle())
        .await
        .unwrap()
        .iter()
        .map(|r| {
            (
                r.try_get("action").unwrap(),
                r.try_get("actor_id").unwrap(),
                r.try_get("detail").unwrap(),
            )
        })
        .collect()
}

fn moved(from: &str, to: &str) -> (String, Option<String>, String) {
    (format!("session.{to}"), None, format!("{from} -> {to}"))
}

async fn steps_of(store: &Store, session_id: &str) -> Vec<(i64, SessionState, String, u8)> {
    store
        .steps(session_id)
        .await
        .unwrap()
        .into_iter()
        .map(|s| (s.seq, s.state, s.message, s.progress))
        .collect()
}

/// The session a launch returns (read in its transaction's last round trip) is the one a later
/// read finds.
async fn assert_read_back(store: &Store, returned: &SessionRecord) {
    let stored = store.session(&returned.id).await.unwrap().unwrap();
    assert!(
        stored == *returned,
        "the launch returned its session as written"
    );
}

/// A card of `memory_mib` cut into slices of `slice_mib`, model "Virtual".
fn card(id: &str, memory_mib: u64, slice_mib: u64) -> GpuSpec {
    GpuSpec {
        id: id.into(),
        model: "Virtual".into(),
        memory_mib,
        slice_mib,
        hold: app::domain::hold::SliceHold::None,
        device_minor: None,
        mig: None,
    }
}

/// One card of two slots ("card0", "Virtual 16G"); a ready pre-started editor on one.
async fn one_card_one_warm(store: &Store) -> WarmRecord {
    let gpu = GpuSpec {
        model: "Virtual 16G".into(),
        ..card("card0", 2 * SLICE, SLICE)
    };
    let slots = plan_slots(0, &gpu);
    store.sync_pool(&[gpu], &slots).await.unwrap();
    let warm = store
        .add_warm(EditorKind::JupyterLab, SLICE, None)
        .await
        .unwrap()
        .expect("a free slot to warm");
    assert!(
        store
            .warm_ready(&warm.id, "127.0.0.1:20000", "secret", "{\"pid\":1}")
            .await
            .unwrap()
    );
    warm
}

async fn a_launch_writes_its_rows(store: Store) {
    let warm = one_card_one_warm(&store).await;
    let alice = user(&store, "alice", 10_000).await;
    let actor = Some(alice.id.clone());

    // Warm: ready at once, with the editor's address, 60 minutes from now.
    let got = store.launch(plan(&alice.id, true)).await.unwrap();
    let r = &got.record;
    assert!(matches!(got.placement, Placement::Warm(_)));
    assert_eq!(r.id, warm.id);
    assert_eq!(r.state, SessionState::Ready);
    assert_eq!(r.slot_id.as_deref(), Some(warm.slot_id.as_str()));
    assert_eq!(r.upstream.as_deref(), Some("127.0.0.1:20000"));
    assert_eq!(r.editor_token.as_deref(), Some("secret"));
    assert_eq!(r.runtime_handle.as_deref(), Some("{\"pid\":1}"));
    assert_eq!(r.ready_at, Some(r.created_at));
    assert_eq!(r.ends_at, Some(r.created_at + 60 * 60_000));
    assert_eq!(r.last_activity_at, r.created_at);
    assert_eq!(r.queued_at, None);
    assert_eq!(
        (r.gpu_id.as_deref(), r.gpu_model.as_deref()),
        (Some("card0"), Some("Virtual 16G"))
    );
    assert_read_back(&store, r).await;
    let slot = warm.slot_id.clone();
    let expected = vec![
        (
            1,
            SessionState::Requested,
            "Launch requested".to_string(),
            5,
        ),
        (
            2,
            SessionState::Requested,
            format!(
                "Credits held: {} (1 an hour)",
                app::domain::credits::format(1_000)
            ),
            15,
        ),
        (
            3,
            SessionState::Starting,
            format!("Pre-started JupyterLab on slot {slot} assigned"),
            60,
        ),
        (
            4,
            SessionState::Ready,
            "JupyterLab is ready".to_string(),
            100,
        ),
    ];
    assert_eq!(steps_of(&store, &r.id).await, expected);
    let returned: Vec<_> = got
        .steps
        .iter()
        .map(|s| (s.seq, s.state, s.message.clone(), s.progress))
        .collect();
    assert_eq!(returned, expected, "the steps published are those written");
    assert_eq!(
        audit_of(&store, &r.id).await,
        vec![
            (
                "session.launch".to_string(),
                actor.clone(),
                "jupyterlab".to_string()
            ),
            moved("requested", "starting"),
            moved("starting", "ready"),
        ]
    );
    // A later step follows on.
    assert_eq!(store.add_step(&r.id, "later", 100).await.unwrap().seq, 5);

    // Cold: the other slot, starting.
    let got = store.launch(plan(&alice.id, true)).await.unwrap();
    let r = &got.record;
    let Placement::Slot { slot_id, .. } = &got.placement else {
        panic!("the free slot: {:?}", got.placement);
    };
    assert_eq!(r.state, SessionState::Starting);
    assert_eq!(r.slot_id.as_ref(), Some(slot_id));
    assert_read_back(&store, r).await;
    assert_eq!(
        (r.upstream.as_deref(), r.ready_at, r.ends_at),
        (None, None, None)
    );
    assert_eq!(
        steps_of(&store, &r.id).await.last().unwrap(),
        &(
            3,
            SessionState::Starting,
            format!("Slot {slot_id} assigned"),
            30
        )
    );
    assert_eq!(
        audit_of(&store, &r.id).await[1..],
        [moved("requested", "starting")]
    );

    // Queued: nothing free, first in line.
    let got = store.launch(plan(&alice.id, true)).await.unwrap();
    let r = &got.record;
    assert!(matches!(got.placement, Placement::Queued { position: 1 }));
    assert_eq!(r.state, SessionState::Queued);
    assert_read_back(&store, r).await;
    assert_eq!(
        (r.slot_id.as_deref(), r.queued_at),
        (None, Some(r.created_at))
    );
    assert_eq!(
        steps_of(&store, &r.id).await.last().unwrap(),
        &(
            3,
            SessionState::Queued,
            super::launch::queue_message(SLICE, false, 1),
            20
        )
    );
    assert_eq!(
        audit_of(&store, &r.id).await[1..],
        [moved("requested", "queued")]
    );

    // Each holds its hour: 1 credit (1,000 milli-credits).
    let holds: Vec<i64> = store
        .ledger(&alice.id)
        .await
        .unwrap()
        .iter()
        .filter(|e| e.kind == "hold")
        .map(|e| e.amount)
        .collect();
    assert_eq!(holds, vec![-1_000, -1_000, -1_000]);
}

on_both_fns! {
    a_launch_writes_its_rows => a_launch_writes_its_rows_sqlite, a_launch_writes_its_rows_postgres;
}

/// A launch's catalog reads the pool's cards in one statement ([`Store::pool_cards`]): the same
/// cards and slot sizes as the whole pool's rows, a card no longer configured left out.
async fn the_catalogs_cards_are_the_pools(store: Store) {
    let old = card("card9", 4 * SLICE, SLICE);
    store
        .sync_pool(std::slice::from_ref(&old), &plan_slots(0, &old))
        .await
        .unwrap();
    // Read (and kept) before the pool changes: this server's own sync forgets them.
    assert_eq!(
        store.pool_cards().await.unwrap(),
        vec![(4 * SLICE, vec![SLICE; 4])]
    );
    let gpus = [
        card("card0", 4 * SLICE, SLICE),
        card("card1", 2 * SLICE, 2 * SLICE),
    ];
    let slots: Vec<_> = gpus
        .iter()
        .enumerate()
        .flat_map(|(i, g)| plan_slots(i, g))
        .collect();
    store.sync_pool(&gpus, &slots).await.unwrap();
    let mut whole: Vec<(u64, Vec<u64>)> = store
        .pool()
        .await
        .unwrap()
        .into_iter()
        .map(|(g, s)| (g.memory_mib, s.iter().map(|s| s.slice_mib).collect()))
        .collect();
    whole.iter_mut().for_each(|(_, s)| s.sort_unstable());
    whole.sort();
    let mut cards = store.pool_cards().await.unwrap();
    cards.sort();
    assert_eq!(
        cards,
        vec![(2 * SLICE, vec![2 * SLICE]), (4 * SLICE, vec![SLICE; 4])]
    );
    assert_eq!(cards, whole);
}

on_both_fns! {
    the_catalogs_cards_are_the_pools => the_catalogs_cards_are_the_pools_sqlite, the_catalogs_cards_are_the_pools_postgres;
}

/// Another server's start changes the pool under this one's kept cards: this one offers the new
/// sizes once `CARDS_FRESH_MS` has passed since it read them.
async fn a_pool_another_server_changed_is_read_again(store: Store) {
    let clock = std::sync::Arc::new(crate::util::ManualClock::now());
    let mine = store.with_clock(clock.clone());
    let other = Store {
        cards: Default::default(),
        ..mine.clone()
    };
    let (small, large) = (
        card("card0", 2 * SLICE, SLICE),
        card("card0", 4 * SLICE, SLICE),
    );
    other
        .sync_pool(std::slice::from_ref(&small), &plan_slots(0, &small))
        .await
        .unwrap();
    assert_eq!(
        mine.pool_cards().await.unwrap(),
        vec![(2 * SLICE, vec![SLICE; 2])]
    );
    other
        .sync_pool(std::slice::from_ref(&large), &plan_slots(0, &large))
        .await
        .unwrap();
    clock.advance(std::time::Duration::from_millis(
        super::pool::CARDS_FRESH_MS as u64 - 1,
    ));
    assert_eq!(
        mine.pool_cards().await.unwrap(),
        vec![(2 * SLICE, vec![SLICE; 2])],
        "kept until they are CARDS_FRESH_MS old"
    );
    clock.advance(std::time::Duration::from_millis(1));
    assert_eq!(
        mine.pool_cards().await.unwrap(),
        vec![(4 * SLICE, vec![SLICE; 4])]
    );
}

on_both_fns! {
    a_pool_another_server_changed_is_read_again => a_pool_another_server_changed_is_read_again_sqlite, a_pool_another_server_changed_is_read_again_postgres;
}

/// Whether a launch may take a pre-started editor asks [`Store::may_use_a_dataset`], one
/// statement: it answers as the datasets' permits do ([`datasets::Permit::allows`] on every
/// dataset), with none, with some for named users (a deleted one no longer counts) and with one
/// for everyone.
async fn may_use_a_dataset_is_the_permits(store: Store) {
    use super::datasets::DatasetWrite;
    use app::domain::datasets::{self, Place};
    let admin = user(&store, "admin", 0).await;
    let mut users = Vec::new();
    for name in ["u0", "u1", "u2", "u3"] {
        users.push(user(&store, name, 0).await.id);
    }
    let by_permits = |all: &[super::datasets::DatasetRecord], user_id: &str| {
        all.iter().any(|d| {
            let ids = d.user_ids();
            datasets::Permit {
                everyone: d.everyone,
                user_ids: &ids,
            }
            .allows(user_id)
        })
    };
    let agree = |stage: &'static str, expected: [bool; 4]| {
        let (store, users) = (store.clone(), users.clone());
        async move {
            let all = store.datasets().await.unwrap();
            for (user_id, want) in users.iter().zip(expected) {
                let got = store.may_use_a_dataset(user_id).await.unwrap();
                assert_eq!(got, by_permits(&all, user_id), "{stage}: {user_id}");
                assert_eq!(got, want, "{stage}: {user_id}");
            }
        }
    };
    agree("no datasets", [false; 4]).await;
    let place = Place::Path("/data/a".into());
    let named = [users[1].clone(), users[3].clone()];
    let write = |name, everyone, user_ids| DatasetWrite {
        name,
        description: "",
        place: &place,
        everyone,
        user_ids,
    };
    store
        .add_dataset(&write("a", false, &named), "u1, u3", &admin.id)
        .await
        .unwrap();
    agree("one for u1 and u3", [false, true, false, true]).await;
    store.delete_user(&users[3], Some(&admin.id)).await.unwrap();
    agree("u3 deleted", [false, true, false, false]).await;
    store
        .add_dataset(&write("b", true, &[]), "", &admin.id)
        .await
        .unwrap();
    agree("one for everyone", [true; 4]).await;
}

on_both_fns! {
    may_use_a_dataset_is_the_permits => may_use_a_dataset_is_the_permits_sqlite, may_use_a_dataset_is_the_permits_postgres;
}

/// A pre-started editor's sandbox was made without datasets: a user who may use one gets a slot
/// of their own (the allocator's one read says so), and the pre-started editor stays for others.
async fn a_user_with_datasets_takes_no_pre_started_editor(store: Store) {
    use super::datasets::DatasetWrite;
    use app::domain::datasets::Place;
    let warm = one_card_one_warm(&store).await;
    let admin = user(&store, "admin", 0).await;
    let alice = user(&store, "alice", 10_000).await;
    let bob = user(&store, "bob", 10_000).await;
    let place = Place::Path("/data/a".into());
    store
        .add_dataset(
            &DatasetWrite {
                name: "a",
                description: "",
                place: &place,
                everyone: false,
                user_ids: std::slice::from_ref(&alice.id),
            },
            "alice",
            &admin.id,
        )
        .await
        .unwrap();

    let got = store.launch(plan(&alice.id, true)).await.unwrap();
    let Placement::Slot { slot_id, .. } = &got.placement else {
        panic!("alice has a dataset: {:?}", got.placement);
    };
    assert_ne!(
        *slot_id, warm.slot_id,
        "the pre-started editor's slot stays"
    );
    let got = store.launch(plan(&bob.id, true)).await.unwrap();
    assert!(
        matches!(&got.placement, Placement::Warm(w) if w.id == warm.id),
        "bob has none: {:?}",
        got.placement
    );
}

on_both_fns! {
    a_user_with_datasets_takes_no_pre_started_editor => a_user_with_datasets_takes_no_pre_started_editor_sqlite, a_user_with_datasets_takes_no_pre_started_editor_postgres;
}
