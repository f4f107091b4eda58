//! Store tests of promotions, on SQLite and PostgreSQL alike: one decision wins, one server
//! pushes, and a silent push is taken over.

use super::tests::{launch, on_both_fns, user};
use super::*;
use app::domain::listing::{ListQuery, Listing};
use app::domain::promotion::{Decision, PromotionState};

fn new(id: &str, user_id: &str, session_id: &str, state: PromotionState) -> NewPromotion {
    NewPromotion {
        id: id.into(),
        user_id: user_id.into(),
        session_id: session_id.into(),
        path: "models/m.onnx".into(),
        repository: format!("sandbox/u/{id}"),
        tag: "v1".into(),
        media_type: "application/onnx".into(),
        size_bytes: 5,
        sha256: "ab".repeat(32),
        image: "jupyterlab (local)".into(),
        state,
    }
}

async fn decisions_and_pushes_happen_once(store: Store) {
    let alice = user(&store, "alice", 1_000).await;
    let root = store
        .create_user("root", Some("hash"), Role::Admin, 0, None)
        .await
        .unwrap();
    let (session, _) = store.create_session(launch(&alice.id, 0)).await.unwrap();
    store
        .insert_promotion(
            &new("p1", &alice.id, &session.id, PromotionState::Pending),
            WaitingLimit::NONE,
        )
        .await
        .unwrap();
    store
        .insert_promotion(
            &new("p2", &alice.id, &session.id, PromotionState::Approved),
            WaitingLimit::NONE,
        )
        .await
        .unwrap();

    // Pending ones are not pushable; approved ones are.
    assert_eq!(store.pushable_promotions(0).await.unwrap(), vec!["p2"]);
    assert!(store.claim_promotion("p1", 0).await.unwrap().is_none());

    // Two admins decide at once: one decision lands.
    let (a, b) = tokio::join!(
        store.decide_promotion("p1", &root.id, Decision::Approve, None),
        store.decide_promotion("p1", &root.id, Decision::Reject, Some("no")),
    );
    assert!(a.unwrap() != b.unwrap(), "exactly one decision applies");
    let p1 = store.promotion("p1").await.unwrap().unwrap();
    assert!(matches!(
        p1.state,
        PromotionState::Approved | PromotionState::Rejected
    ));
    assert_eq!(p1.decided_by.as_deref(), Some("root"));
    assert!(
        !store
            .decide_promotion("p1", &root.id, Decision::Approve, None)
            .await
            .unwrap(),
        "a decided promotion is not decided again"
    );

    // Two servers claim one push: one gets it.
    let (a, b) = tokio::join!(
        store.claim_promotion("p2", 0),
        store.claim_promotion("p2", 0)
    );
    let claimed = [a.unwrap(), b.unwrap()];
    assert_eq!(claimed.iter().filter(|c| c.is_some()).count(), 1);
    assert_eq!(
        claimed.iter().flatten().next().unwrap().state,
        PromotionState::Pushing
    );
    // Until it is silent for long, nobody else may take it.
    assert!(
        store
            .pushable_promotions(0)
            .await
            .unwrap()
            .iter()
            .all(|id| id != "p2")
    );
    let later = now_ms() + 1_000;
    assert!(
        store
            .pushable_promotions(later)
            .await
            .unwrap()
            .contains(&"p2".to_string())
    );
    // A push that says it is alive is not silent.
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    let before_touch = now_ms();
    store.touch_promotion("p2").await.unwrap();
    let pushable = store.pushable_promotions(before_touch).await.unwrap();
    assert!(pushable.iter().all(|id| id != "p2"), "{pushable:?}");

    store
        .finish_promotion("p2", Err("registry said no"))
        .await
        .unwrap();
    let failed = store.promotion("p2").await.unwrap().unwrap();
    assert_eq!(failed.state, PromotionState::Failed);
    assert_eq!(failed.message.as_deref(), Some("registry said no"));
    assert_eq!(failed.decided_by, None, "it needed no approval");

    // A retry sends it back to be pushed; it then lands with its digest.
    assert!(
        store
            .decide_promotion("p2", &root.id, Decision::Retry, None)
            .await
            .unwrap()
    );
    let retried = store.claim_promotion("p2", 0).await.unwrap().unwrap();
    assert_eq!(retried.decided_by.as_deref(), Some("root"));
    store.finish_promotion("p2", Ok("sha256:cd")).await.unwrap();
    // A second outcome for the same push changes nothing.
    store.finish_promotion("p2", Err("late")).await.unwrap();
    let pushed = store.promotion("p2").await.unwrap().unwrap();
    assert_eq!(pushed.state, PromotionState::Pushed);
    assert_eq!(pushed.digest.as_deref(), Some("sha256:cd"));
    assert_eq!(pushed.message, None);

    let actions: Vec<String> = store
        .audit_log(50)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.target == "promotion:p2")
        .map(|e| e.action)
        .collect();
    assert_eq!(
        actions,
        [
            "promotion.push",
            "promotion.retry",
            "promotion.fail",
            "promotion.request"
        ]
    );
}

async fn promotions_list_per_user_and_for_admins(store: Store) {
    let alice = user(&store, "alice", 1_000).await;
    let bob = user(&store, "bob", 1_000).await;
    let (sa, _) = store.create_session(launch(&alice.id, 0)).await.unwrap();
    let (sb, _) = store.create_session(launch(&bob.id, 0)).await.unwrap();
    for (id, who, session, state) in [
        ("a1", &alice.id, &sa.id, PromotionState::Pending),
        ("a2", &alice.id, &sa.id, PromotionState::Approved),
        ("b1", &bob.id, &sb.id, PromotionState::Pending),
    ] {
        store
            .insert_promotion(&new(id, who, session, state), WaitingLimit::NONE)
            .await
            .unwrap();
    }
    let mine: Vec<String> = store
        .promotions_of(&alice.id, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|p| p.id)
        .collect();
    assert_eq!(mine.len(), 2);
    assert!(mine.iter().all(|id| id.starts_with('a')));

    let query = |q: Option<&str>, filter: Option<&str>| ListQuery {
        q: q.map(Into::into),
        filter: filter.map(Into::into),
        ..ListQuery::default()
    };
    let pending = store
        .admin_promotions(&Listing::promotions(&query(None, Some("pending"))).unwrap())
        .await
        .unwrap();
    assert_eq!(pending.total, 2);
    let bobs = store
        .admin_promotions(&Listing::promotions(&query(Some("BOB"), None)).unwrap())
        .await
        .unwrap();
    assert_eq!(bobs.total, 1);
    assert_eq!(bobs.items[0].user_name, "bob");
    assert_eq!(bobs.items[0].repository, "sandbox/u/b1");
}

on_both_fns! {
    decisions_and_pushes_happen_once => decisions_and_pushes_happen_once_sqlite, decisions_and_pushes_happen_once_postgres;
    promotions_list_per_user_and_for_admins => promotions_list_per_user_and_for_admins_sqlite, promotions_list_per_user_and_for_admins_postgres;
}
