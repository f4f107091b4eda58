//! Store tests of the admin tables (paging, sorting, filtering, names for ids), on SQLite and
//! PostgreSQL alike.

use super::tests::{backdate_ready, launch, on_both_fns, six_slots, user};
use super::*;
use app::domain::listing::{ListQuery, Listing, Page};
use app::model::UsageRow;

const DEFAULTS: app::domain::quota::Limits = app::domain::quota::Limits {
    max_sessions: 2,
    max_gpu_mib: 16_384,
    max_minutes: 240,
    max_disk_mib: 10_240,
};

fn query(
    q: Option<&str>,
    filter: Option<&str>,
    sort: Option<&str>,
    page: u32,
    per_page: u32,
) -> ListQuery {
    ListQuery {
        page: Some(page),
        per_page: Some(per_page),
        sort: sort.map(str::to_string),
        q: q.map(str::to_string),
        filter: filter.map(str::to_string),
    }
}

async fn users_page_sorts_filters_and_counts(store: Store) {
    let slots = six_slots(&store).await;
    // Names that a careless LIKE would mix up: '_' and '%' must match only themselves.
    let ann = user(&store, "ann", 5_000).await;
    let _bob = user(&store, "bob", 1_000).await;
    let _under = user(&store, "a_c", 3_000).await;
    let _abc = user(&store, "abc", 2_000).await;
    let root = store
        .create_user("Root", Some("hash"), Role::Admin, 0, None)
        .await
        .unwrap();
    store
        .set_locked(&_bob.id, true, Some(&root.id))
        .await
        .unwrap();
    let five = app::domain::quota::Overrides {
        max_sessions: Some(5),
        ..Default::default()
    };
    store
        .set_quota(&ann.id, &five, Some(&root.id))
        .await
        .unwrap();
    // ann holds 1 000 for a live session.
    let (s, _) = store.create_session(launch(&ann.id, 1_000)).await.unwrap();
    store.assign_slot(&s.id, &slots).await.unwrap().unwrap();

    let all = store
        .admin_users(
            &Listing::users(&query(None, None, None, 1, 2)).unwrap(),
            DEFAULTS,
        )
        .await
        .unwrap();
    assert_eq!(all.total, 5);
    assert_eq!(all.pages(), 3);
    let names: Vec<&str> = all.items.iter().map(|u| u.name.as_str()).collect();
    assert_eq!(names, ["a_c", "abc"], "by name, case aside, ascending");
    let second = store
        .admin_users(
            &Listing::users(&query(None, None, None, 2, 2)).unwrap(),
            DEFAULTS,
        )
        .await
        .unwrap();
    let names: Vec<&str> = second.items.iter().map(|u| u.name.as_str()).collect();
    assert_eq!(names, ["ann", "bob"]);

    let richest = store
        .admin_users(
            &Listing::users(&query(None, None, Some("-balance"), 1, 10)).unwrap(),
            DEFAULTS,
        )
        .await
        .unwrap();
    let first = &richest.items[0];
    assert_eq!(first.name, "ann");
    assert_eq!(
        (first.balance, first.held, first.live_sessions),
        (4_000, 1_000, 1)
    );
    assert_eq!(first.overrides.max_sessions, Some(5));
    assert_eq!(
        (first.limits.max_sessions, first.limits.max_minutes),
        (5, 240),
        "the override, and the default where none"
    );
    assert_eq!(richest.items[1].limits, DEFAULTS);
    let balances: Vec<i64> = richest.items.iter().map(|u| u.balance).collect();
    assert!(balances.windows(2).all(|w| w[0] >= w[1]), "{balances:?}");

    let literal = store
        .admin_users(
            &Listing::users(&query(Some("A_"), None, None, 1, 10)).unwrap(),
            DEFAULTS,
        )
        .await
        .unwrap();
    let names: Vec<&str> = literal.items.iter().map(|u| u.name.as_str()).collect();
    assert_eq!(
        names,
        ["a_c"],
        "'_' is no wildcard, and the search ignores case"
    );
    assert_eq!(literal.total, 1);

    let locked = store
        .admin_users(
            &Listing::users(&query(None, Some("locked"), None, 1, 10)).unwrap(),
            DEFAULTS,
        )
        .await
        .unwrap();
    assert_eq!(locked.items.len(), 1);
    assert!(locked.items[0].locked && locked.items[0].name == "bob");
    let admins = store
        .admin_users(
            &Listing::users(&query(None, Some("admin"), None, 1, 10)).unwrap(),
            DEFAULTS,
        )
        .await
        .unwrap();
    assert_eq!(
        admins
            .items
            .iter()
            .map(|u| u.name.as_str())
            .collect::<Vec<_>>(),
        ["Root"]
    );
    assert!(!admins.items[0].single_sign_on);

    let past_the_end = store
        .admin_users(
            &Listing::users(&query(None, None, None, 9, 10)).unwrap(),
            DEFAULTS,
        )
        .await
        .unwrap();
    assert!(past_the_end.items.is_empty());
    assert_eq!(past_the_end.total, 5);
}

async fn sessions_page_filters_by_state_and_user(store: Store) {
    let slots = six_slots(&store).await;
    let ann = user(&store, "ann", 10_000).await;
    let bob = user(&store, "bob", 10_000).await;
    let mut ids = Vec::new();
    for who in [&ann, &bob, &ann] {
        let (s, _) = store.create_session(launch(&who.id, 1_000)).await.unwrap();
        store.assign_slot(&s.id, &slots).await.unwrap().unwrap();
        ids.push(s.id);
    }
    store
        .begin_stop(
            &ids[0],
            app::domain::session::EndReason::Admin,
            Some("by root"),
        )
        .await
        .unwrap();
    store.finish(&ids[0]).await.unwrap();

    let all = store
        .admin_sessions(&Listing::sessions(&ListQuery::default()).unwrap())
        .await
        .unwrap();
    assert_eq!(all.total, 3);
    let newest_first: Vec<&str> = all.items.iter().map(|s| s.id.as_str()).collect();
    let mut expected: Vec<&str> = ids.iter().map(String::as_str).collect();
    expected.reverse();
    // Made in the same millisecond, they fall back on their ids; only the set is certain then.
    let mut sorted_seen = newest_first.clone();
    sorted_seen.sort_unstable();
    let mut sorted_expected = expected.clone();
    sorted_expected.sort_unstable();
    assert_eq!(sorted_seen, sorted_expected);

    let live = store
        .admin_sessions(&Listing::sessions(&query(None, Some("live"), None, 1, 25)).unwrap())
        .await
        .unwrap();
    assert_eq!(live.total, 2);
    assert!(live.items.iter().all(|s| s.state.is_live()));
    let ended = store
        .admin_sessions(&Listing::sessions(&query(None, Some("ended"), None, 1, 25)).unwrap())
        .await
        .unwrap();
    assert_eq!(ended.items.len(), 1);
    let gone = &ended.items[0];
    assert_eq!(gone.id, ids[0]);
    assert_eq!(gone.user_name, "ann");
    assert_eq!(
        gone.end_reason,
        Some(app::domain::session::EndReason::Admin)
    );
    assert!(gone.ended_at_ms.is_some());
    assert_eq!(gone.gpu_model.as_deref(), Some("Virtual 48G"));

    let bobs = store
        .admin_sessions(&Listing::sessions(&query(Some("BOB"), None, None, 1, 25)).unwrap())
        .await
        .unwrap();
    assert_eq!(
        bobs.items.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(),
        [ids[1].as_str()]
    );
    let by_id = store
        .admin_sessions(&Listing::sessions(&query(Some(&ids[2]), None, None, 1, 25)).unwrap())
        .await
        .unwrap();
    assert_eq!(by_id.items.len(), 1);
    assert_eq!(by_id.items[0].id, ids[2]);
    let by_user = store
        .admin_sessions(&Listing::sessions(&query(None, None, Some("user"), 1, 25)).unwrap())
        .await
        .unwrap();
    let users: Vec<&str> = by_user.items.iter().map(|s| s.user_name.as_str()).collect();
    assert_eq!(users, ["ann", "ann", "bob"]);

    assert_eq!(
        store
            .admin_session(&ids[1])
            .await
            .unwrap()
            .unwrap()
            .user_name,
        "bob"
    );
    assert!(store.admin_session("nope").await.unwrap().is_none());

    let pool = store.admin_pool().await.unwrap();
    assert_eq!(pool.len(), 1);
    let held: Vec<(&str, Option<&str>)> = pool[0]
        .slots
        .iter()
        .filter(|s| s.state.is_some())
        .map(|s| (s.holder.as_deref().unwrap(), s.user_name.as_deref()))
        .collect();
    assert_eq!(
        held.len(),
        2,
        "the ended session gave its slot back: {held:?}"
    );
    assert!(held.contains(&(ids[1].as_str(), Some("bob"))));
    assert!(held.contains(&(ids[2].as_str(), Some("ann"))));
}

async fn audit_page_names_users_and_searches(store: Store) {
    let root = store
        .create_user("root", Some("hash"), Role::Admin, 0, None)
        .await
        .unwrap();
    let ann = user(&store, "ann", 0).await;
    store
        .grant(&ann.id, 2_500, Some(&root.id), "granted by root")
        .await
        .unwrap();
    store
        .set_locked(&ann.id, true, Some(&root.id))
        .await
        .unwrap();
    store
        .set_role(&ann.id, Role::Admin, Some(&root.id), "by root")
        .await
        .unwrap();

    let newest = store
        .admin_audit(&Listing::audit(&query(None, None, None, 1, 2)).unwrap())
        .await
        .unwrap();
    assert!(
        newest.total >= 5,
        "two creations, a grant, a lock, a role: {}",
        newest.total
    );
    let actions: Vec<&str> = newest.items.iter().map(|l| l.action.as_str()).collect();
    assert_eq!(actions, ["user.role", "user.lock"], "newest first");
    assert_eq!(newest.items[0].actor.as_deref(), Some("root"));
    assert_eq!(newest.items[0].target_name.as_deref(), Some("ann"));

    let oldest = store
        .admin_audit(&Listing::audit(&query(None, None, Some("at"), 1, 1)).unwrap())
        .await
        .unwrap();
    assert_eq!(oldest.items[0].action, "user.create");

    let grants = store
        .admin_audit(&Listing::audit(&query(Some("credits."), None, None, 1, 25)).unwrap())
        .await
        .unwrap();
    assert_eq!(grants.total, 1);
    assert_eq!(
        grants.items[0].detail, "+2.5 credits: granted by root",
        "in credits, with its note"
    );
    // By the target's name, which the log keeps as an id.
    let about_ann = store
        .admin_audit(&Listing::audit(&query(Some("ANN"), None, None, 1, 25)).unwrap())
        .await
        .unwrap();
    assert!(about_ann.total >= 3, "{:?}", about_ann.items);
    assert!(
        about_ann
            .items
            .iter()
            .all(|l| l.target.contains(&ann.id) || l.target.contains("ann"))
    );
    let nothing = store
        .admin_audit(&Listing::audit(&query(Some("100%"), None, None, 1, 25)).unwrap())
        .await
        .unwrap();
    assert_eq!(nothing.total, 0);
}

async fn taking_credits_back_stops_at_zero(store: Store) {
    let ann = user(&store, "ann", 1_000).await;
    assert_eq!(store.grant(&ann.id, -400, None, "x").await.unwrap(), 600);
    let refused = store.grant(&ann.id, -700, None, "x").await;
    assert!(
        matches!(
            refused,
            Err(StoreError::InsufficientCredits {
                balance: 600,
                needed: 700
            })
        ),
        "{refused:?}"
    );
    assert_eq!(
        store.credits(&ann.id).await.unwrap().0,
        600,
        "nothing written"
    );
}

async fn usage_sums_each_users_sessions_in_the_period(store: Store) {
    let slots = six_slots(&store).await;
    let ann = user(&store, "ann", 10_000).await;
    let bob = user(&store, "bob", 10_000).await;
    let carl = user(&store, "carl", 10_000).await;
    // ann: ready for 30 minutes, two GPU readings and one where the GPU was not seen.
    let (s, _) = store.create_session(launch(&ann.id, 3_000)).await.unwrap();
    store.assign_slot(&s.id, &slots).await.unwrap().unwrap();
    store.mark_ready(&s.id, "ready").await.unwrap();
    backdate_ready(&store, &s.id, 30 * 60_000).await;
    for sample in [
        Some(GpuSample {
            memory_used_mib: 1_000,
            utilization_pct: 40,
        }),
        Some(GpuSample {
            memory_used_mib: 3_000,
            utilization_pct: 60,
        }),
        None,
    ] {
        store.record_sample(&s.id, None, sample).await.unwrap();
    }
    store
        .begin_stop(&s.id, app::domain::session::EndReason::User, None)
        .await
        .unwrap();
    store.finish(&s.id).await.unwrap().unwrap();
    // bob: a session that never got ready.
    store.create_session(launch(&bob.id, 1_000)).await.unwrap();
    // carl: a session from 40 days ago only.
    let (old, _) = store.create_session(launch(&carl.id, 1_000)).await.unwrap();
    let long_ago = now_ms() - 40 * 86_400_000;
    sqlx::query("UPDATE sessions SET created_at = $1, ready_at = $1, ended_at = $2, state = 'ended' WHERE id = $3")
        .bind(long_ago)
        .bind(long_ago + 3_600_000)
        .bind(&old.id)
        .execute(store.pool_handle())
        .await
        .unwrap();
    // dana: ready for a day and a half, ended an hour into the last day: that hour is the day's.
    let dana = user(&store, "dana", 10_000).await;
    let (long, _) = store.create_session(launch(&dana.id, 1_000)).await.unwrap();
    let day = 86_400_000;
    let set_up = now_ms();
    sqlx::query("UPDATE sessions SET created_at = $1, ready_at = $1, ended_at = $2, state = 'ended' WHERE id = $3")
        .bind(set_up - 2 * day)
        .bind(set_up - day + 3_600_000)
        .bind(&long.id)
        .execute(store.pool_handle())
        .await
        .unwrap();

    let now = now_ms();
    let month = store
        .admin_usage(&Listing::usage(&ListQuery::default()).unwrap(), now)
        .await
        .unwrap();
    assert_eq!(month.total, 3, "carl's session ended before the 30 days");
    let names: Vec<&str> = month.items.iter().map(|r| r.user_name.as_str()).collect();
    assert_eq!(names[0], "ann", "by credits charged, most first");
    let last_day = store
        .admin_usage(
            &Listing::usage(&query(Some("dana"), Some("1d"), None, 1, 25)).unwrap(),
            now,
        )
        .await
        .unwrap();
    let d = &last_day.items[0];
    assert!(
        (3_590_000..=3_600_000).contains(&d.used_ms),
        "the hour within the day: {}",
        d.used_ms
    );
    let month_of_dana = month.items.iter().find(|r| r.user_name == "dana").unwrap();
    assert!(
        month_of_dana.used_ms >= day + 3_600_000,
        "{}",
        month_of_dana.used_ms
    );
    let month: Page<UsageRow> = Page {
        items: month
            .items
            .into_iter()
            .filter(|r| r.user_name != "dana")
            .collect(),
        ..month
    };
    let a = &month.items[0];
    assert_eq!(a.sessions, 1);
    assert!(
        (30 * 60_000..31 * 60_000).contains(&a.used_ms),
        "{}",
        a.used_ms
    );
    assert_eq!(a.slice_mib_ms, a.used_ms * 8192);
    assert_eq!(a.gpu_utilization_pct, Some(50), "the readings' average");
    assert_eq!(a.gpu_memory_mib, Some(2_000));
    let charged: i64 = store
        .ledger(&ann.id)
        .await
        .unwrap()
        .iter()
        .filter(|e| e.kind == "charge")
        .map(|e| -e.amount)
        .sum();
    assert!(charged > 0);
    assert_eq!(a.charged, charged);
    let b = &month.items[1];
    assert_eq!((b.sessions, b.used_ms, b.charged), (1, 0, 0));
    assert_eq!(
        (b.gpu_utilization_pct, b.gpu_memory_mib),
        (None, None),
        "not measured"
    );

    let quarter = store
        .admin_usage(
            &Listing::usage(&query(None, Some("90d"), Some("name"), 1, 25)).unwrap(),
            now,
        )
        .await
        .unwrap();
    let names: Vec<&str> = quarter.items.iter().map(|r| r.user_name.as_str()).collect();
    assert_eq!(names, ["ann", "bob", "carl", "dana"]);
    let bobs = store
        .admin_usage(
            &Listing::usage(&query(Some("BO"), None, None, 1, 25)).unwrap(),
            now,
        )
        .await
        .unwrap();
    assert_eq!((bobs.total, bobs.items[0].user_name.as_str()), (1, "bob"));
    let second = store
        .admin_usage(
            &Listing::usage(&query(None, None, Some("-hours"), 2, 1)).unwrap(),
            now,
        )
        .await
        .unwrap();
    assert_eq!(second.total, 3);
    assert_eq!(
        second.items[0].user_name, "ann",
        "dana's 25 hours, ann's half hour, bob's none"
    );
}

async fn usage_counts_what_running_sessions_cost_so_far(store: Store) {
    let slots = six_slots(&store).await;
    let eve = user(&store, "eve", 10_000).await;
    // 1.234 credits an hour, held for its hour: the price and the cap both round.
    let (s, _) = store.create_session(launch(&eve.id, 1_234)).await.unwrap();
    store.assign_slot(&s.id, &slots).await.unwrap().unwrap();
    store.mark_ready(&s.id, "ready").await.unwrap();
    let now = now_ms();
    let eves = Listing::usage(&query(Some("eve"), None, None, 1, 25)).unwrap();
    // Minute edges, a minute's middle, the hold's cap, and a spread of others.
    let mut elapsed = vec![
        0,
        1,
        59_999,
        60_000,
        60_001,
        7 * 60_000 + 20_000,
        59 * 60_000 + 1,
        60 * 60_000,
        61 * 60_000,
        90 * 60_000,
    ];
    let mut x: i64 = 0x2545_f491;
    for _ in 0..10 {
        x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        elapsed.push((x >> 33).rem_euclid(70 * 60_000));
    }
    for (n, elapsed) in elapsed.into_iter().enumerate() {
        // Every other one parked for some of it, before and now (not charged), by the rule.
        let parked = app::domain::credits::Parked {
            before_ms: (n as i64 % 2) * elapsed / 3,
            since: (n % 4 == 1).then_some(now - elapsed / 4),
        };
        sqlx::query(
            "UPDATE sessions SET ready_at = $1, parked_ms = $2, parked_at = $3 WHERE id = $4",
        )
        .bind(now - elapsed)
        .bind(parked.before_ms)
        .bind(parked.since)
        .bind(&s.id)
        .execute(store.pool_handle())
        .await
        .unwrap();
        let page = store.admin_usage(&eves, now).await.unwrap();
        assert_eq!(
            page.items[0].charged,
            app::domain::credits::cost_so_far(1_234, 1_234, Some(now - elapsed), parked, now),
            "after {elapsed} ms, {parked:?}: the SQL and the rule agree"
        );
    }
    sqlx::query("UPDATE sessions SET parked_ms = 0, parked_at = NULL WHERE id = $1")
        .bind(&s.id)
        .execute(store.pool_handle())
        .await
        .unwrap();
    // Once it ends, the ledger's charge stands for it, and nothing more is counted.
    store
        .begin_stop(&s.id, app::domain::session::EndReason::User, None)
        .await
        .unwrap();
    store.finish(&s.id).await.unwrap().unwrap();
    let charged: i64 = store
        .ledger(&eve.id)
        .await
        .unwrap()
        .iter()
        .filter(|e| e.kind == "charge")
        .map(|e| -e.amount)
        .sum();
    let page = store.admin_usage(&eves, now_ms()).await.unwrap();
    assert_eq!(page.items[0].charged, charged);
}

async fn an_admin_change_keeps_an_admin_and_demotion_takes_admin_off_tokens(store: Store) {
    let root = store
        .create_user("root", Some("hash"), Role::Admin, 0, None)
        .await
        .unwrap();
    let ada = store
        .create_user("ada", Some("hash"), Role::Admin, 0, None)
        .await
        .unwrap();
    let all = app::domain::scope::Scopes::ALL;
    store
        .create_token(&ada.id, "hash-ada", "ci", all, None)
        .await
        .unwrap();
    store
        .set_role(&ada.id, Role::User, Some(&root.id), "by root")
        .await
        .unwrap();
    let scopes = store.tokens_of(&ada.id).await.unwrap()[0].scopes;
    assert_eq!(scopes, all.without(app::domain::scope::Scope::Admin));

    // root is the last admin now: no admin's change takes that away.
    for refused in [
        store
            .set_role(&root.id, Role::User, Some(&ada.id), "x")
            .await,
        store.set_locked(&root.id, true, Some(&ada.id)).await,
    ] {
        assert!(matches!(refused, Err(StoreError::LastAdmin)), "{refused:?}");
    }
    let still = store.user_by_id(&root.id).await.unwrap().unwrap();
    assert_eq!((still.role, still.locked), (Role::Admin, false));

    // Two admins demoting each other at once: one of them stays.
    store
        .set_role(&ada.id, Role::Admin, Some(&root.id), "by root")
        .await
        .unwrap();
    let (a, b) = tokio::join!(
        store.set_role(&ada.id, Role::User, Some(&root.id), "by root"),
        store.set_role(&root.id, Role::User, Some(&ada.id), "by ada"),
    );
    assert!(a.is_ok() != b.is_ok(), "exactly one: {a:?} {b:?}");
    let admins = store
        .admin_users(
            &Listing::users(&query(None, Some("admin"), None, 1, 10)).unwrap(),
            DEFAULTS,
        )
        .await
        .unwrap();
    assert_eq!(admins.total, 1);

    // The command line and the provider's groups are not an admin's change: they may.
    let last = &admins.items[0].id;
    store.set_locked(last, true, None).await.unwrap();
}

async fn editor_grants_are_per_admin_and_expire(store: Store) {
    let alice = user(&store, "alice", 1_000).await;
    let root = store
        .create_user("root", Some("hash"), Role::Admin, 0, None)
        .await
        .unwrap();
    let ada = store
        .create_user("ada", Some("hash"), Role::Admin, 0, None)
        .await
        .unwrap();
    let (s, _) = store.create_session(launch(&alice.id, 0)).await.unwrap();
    assert_eq!(
        store.editor_access_until(&s.id, &root.id).await.unwrap(),
        None
    );
    let until = now_ms() + 60_000;
    store
        .grant_editor_access(&s.id, &root.id, &alice.id, until)
        .await
        .unwrap();
    // Asked again, it is renewed rather than refused as a duplicate.
    store
        .grant_editor_access(&s.id, &root.id, &alice.id, until + 1)
        .await
        .unwrap();
    assert_eq!(
        store.editor_access_until(&s.id, &root.id).await.unwrap(),
        Some(until + 1)
    );
    assert_eq!(
        store.editor_access_until(&s.id, &ada.id).await.unwrap(),
        None
    );
    store
        .grant_editor_access(&s.id, &ada.id, &alice.id, now_ms() - 1)
        .await
        .unwrap();
    assert_eq!(
        store.editor_access_until(&s.id, &ada.id).await.unwrap(),
        None,
        "an expired grant lets nobody in"
    );
    let audited = store
        .audit_log(10)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.action == "session.access" && e.target == format!("user:{}", alice.id))
        .count();
    assert_eq!(audited, 3);

    // An entry ticket is taken once, and not after it expired.
    store
        .add_entry_ticket("t1", &root.id, &s.id, now_ms() + 60_000)
        .await
        .unwrap();
    store
        .add_entry_ticket("late", &root.id, &s.id, now_ms() - 1)
        .await
        .unwrap();
    assert_eq!(
        store.take_entry_ticket("t1").await.unwrap(),
        Some((root.id.clone(), s.id.clone()))
    );
    assert_eq!(store.take_entry_ticket("t1").await.unwrap(), None);
    assert_eq!(store.take_entry_ticket("late").await.unwrap(), None);
    assert_eq!(store.take_entry_ticket("never").await.unwrap(), None);
}

async fn a_deleted_account_is_kept_undeleted_or_purged_once(store: Store) {
    let root = store
        .create_user("root", Some("hash"), Role::Admin, 0, None)
        .await
        .unwrap();
    let bob = user(&store, "bob", 0).await;
    let _ann = user(&store, "ann", 0).await;
    assert_eq!(store.departed_users(now_ms()).await.unwrap(), Vec::new());
    store.delete_user(&bob.id, Some(&root.id)).await.unwrap();
    let listed = store.departed_users(now_ms() + 1).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(
        (listed[0].id.as_str(), listed[0].name.as_str()),
        (bob.id.as_str(), "bob")
    );
    // Not yet due before it was deleted.
    let before = listed[0].deleted_at - 1;
    assert!(store.departed_users(before).await.unwrap().is_empty());

    store.undelete_user(&bob.id, &root.id).await.unwrap();
    let back = store.user_by_id(&bob.id).await.unwrap().unwrap();
    assert!(!back.deleted && !back.locked);
    assert!(matches!(
        store.undelete_user(&bob.id, &root.id).await,
        Err(StoreError::NotFound(_))
    ));

    store.delete_user(&bob.id, Some(&root.id)).await.unwrap();
    store.mark_purged(&bob.id, "storage removed").await.unwrap();
    store.mark_purged(&bob.id, "again").await.unwrap();
    assert!(store.departed_users(now_ms() + 1).await.unwrap().is_empty());
    assert!(matches!(
        store.undelete_user(&bob.id, &root.id).await,
        Err(StoreError::Conflict)
    ));
    let audit = store.audit_log(20).await.unwrap();
    let count = |action: &str| audit.iter().filter(|e| e.action == action).count();
    assert_eq!((count("user.undelete"), count("user.purge")), (1, 1));
}

async fn images_are_added_once_retired_and_remembered_by_sessions(store: Store) {
    use app::domain::images::ImageState;
    let root = store
        .create_user("root", Some("hash"), Role::Admin, 0, None)
        .await
        .unwrap();
    let id = store
        .add_image(
            EditorKind::Marimo,
            "reg.example/marimo:1",
            "marimo 1",
            &root.id,
        )
        .await
        .unwrap();
    let again = store
        .add_image(EditorKind::Marimo, "reg.example/marimo:1", "same", &root.id)
        .await;
    assert!(matches!(again, Err(StoreError::Duplicate(_))), "{again:?}");
    // The same reference for another editor is another image.
    let other = store
        .add_image(
            EditorKind::JupyterLab,
            "reg.example/marimo:1",
            "odd",
            &root.id,
        )
        .await
        .unwrap();
    assert!(
        store
            .set_image_state(&id, ImageState::Retired, &root.id)
            .await
            .unwrap()
    );
    assert!(
        !store
            .set_image_state("nope", ImageState::Retired, &root.id)
            .await
            .unwrap()
    );
    let images = store.images().await.unwrap();
    assert_eq!(
        images
            .iter()
            .map(|i| (i.id.clone().unwrap(), i.state))
            .collect::<Vec<_>>(),
        [(other, ImageState::Approved), (id, ImageState::Retired)],
        "approved first"
    );
    assert_eq!(images[1].added_by.as_deref(), Some("root"));

    let alice = user(&store, "alice", 1_000).await;
    let (s, _) = store
        .create_session(NewSession {
            image: Some("reg.example/marimo:1"),
            ..launch(&alice.id, 0)
        })
        .await
        .unwrap();
    assert_eq!(
        store
            .session(&s.id)
            .await
            .unwrap()
            .unwrap()
            .image
            .as_deref(),
        Some("reg.example/marimo:1")
    );
}

async fn an_ask_for_credits_is_open_until_a_grant_or_a_close(store: Store) {
    let ann = user(&store, "ann", 1_000).await;
    let root = store
        .create_user("root", Some("hash"), Role::Admin, 0, None)
        .await
        .unwrap();
    assert_eq!(store.credit_request(&ann.id).await.unwrap(), None);
    store.ask_credits(&ann.id, 5_000, "first").await.unwrap();
    store.ask_credits(&ann.id, 20_000, "course").await.unwrap();
    let open = store.credit_request(&ann.id).await.unwrap().unwrap();
    assert_eq!(
        (open.amount, open.note.as_str()),
        (20_000, "course"),
        "the later ask replaces"
    );
    let asking = store
        .admin_users(
            &Listing::users(&query(None, Some("asking"), None, 1, 50)).unwrap(),
            DEFAULTS,
        )
        .await
        .unwrap();
    assert_eq!(asking.items.len(), 1);
    assert_eq!(asking.items[0].credit_request, Some(open));

    // Taking back answers nothing; a grant does.
    store
        .grant(&ann.id, -500, Some(&root.id), "oops")
        .await
        .unwrap();
    assert!(store.credit_request(&ann.id).await.unwrap().is_some());
    store
        .grant(&ann.id, 1_000, Some(&root.id), "some")
        .await
        .unwrap();
    assert_eq!(store.credit_request(&ann.id).await.unwrap(), None);

    // Closed by an admin: declined once, then nothing to close.
    store.ask_credits(&ann.id, 3_000, "").await.unwrap();
    assert!(store.close_credit_request(&ann.id, &root.id).await.unwrap());
    assert!(!store.close_credit_request(&ann.id, &root.id).await.unwrap());
    assert_eq!(store.credit_request(&ann.id).await.unwrap(), None);
    assert_eq!(
        store.credits(&ann.id).await.unwrap().0,
        1_500,
        "asks move no credits"
    );
}

async fn a_csv_file_is_written_whole_or_not_at_all(store: Store) {
    let root = store
        .create_user("root", Some("hash"), Role::Admin, 0, None)
        .await
        .unwrap();
    let ann = user(&store, "ann", 2_000).await;
    store.ask_credits(&ann.id, 5_000, "course").await.unwrap();
    assert_eq!(store.open_credit_requests().await.unwrap(), 1);
    let add = |name, line| BulkAdd {
        name,
        password_hash: "hash",
        role: Role::User,
        initial_grant: 100,
        credits: 1_000,
        note: "from a file",
        line,
    };
    let take = |credits, line| BulkGrant {
        user_id: &ann.id,
        credits,
        note: "from a file",
        line,
    };
    // A take-back past the balance (someone spent it meanwhile): nothing of the file stays.
    let refused = store
        .bulk_users(&[add("bea", 1)], &[take(-3_000, 2)], &root.id)
        .await;
    assert!(matches!(
        refused,
        Err(StoreError::InsufficientCredits { .. })
    ));
    assert!(store.user_by_name("bea").await.unwrap().is_none());
    // A name taken meanwhile: the adds before it are undone too.
    let taken = store
        .bulk_users(&[add("bea", 1), add("ann", 2)], &[], &root.id)
        .await;
    assert!(matches!(taken, Err(StoreError::Duplicate(_))), "{taken:?}");
    assert!(store.user_by_name("bea").await.unwrap().is_none());
    assert_eq!(store.credits(&ann.id).await.unwrap().0, 2_000);

    let ids = store
        .bulk_users(&[add("bea", 1), add("cy", 2)], &[take(500, 3)], &root.id)
        .await
        .unwrap();
    assert_eq!(ids.len(), 2);
    let bea = store.user_by_name("bea").await.unwrap().unwrap();
    assert_eq!(bea.id, ids[0]);
    assert!(bea.must_change_password);
    assert_eq!(store.credits(&bea.id).await.unwrap().0, 1_100);
    assert_eq!(store.credits(&ann.id).await.unwrap().0, 2_500);
    assert_eq!(
        store.open_credit_requests().await.unwrap(),
        0,
        "a grant answers the ask"
    );
    let log = store.audit_log(20).await.unwrap();
    let from_file = log
        .iter()
        .filter(|e| e.detail.contains("(CSV line "))
        .count();
    assert_eq!(from_file, 5, "two adds, their two grants, one grant");
}

async fn a_sessions_row_carries_its_holds_charges_and_ready_time(store: Store) {
    let slots = six_slots(&store).await;
    let ann = user(&store, "ann", 10_000).await;
    let (s, _) = store.create_session(launch(&ann.id, 1_000)).await.unwrap();
    store.assign_slot(&s.id, &slots).await.unwrap().unwrap();
    let row = store.admin_session(&s.id).await.unwrap().unwrap();
    assert_eq!((row.held, row.charged, row.ready_at_ms), (1_000, 0, None));
    assert!(row.as_of_ms > 0);
}

on_both_fns! {
    a_deleted_account_is_kept_undeleted_or_purged_once => a_deleted_account_is_kept_undeleted_or_purged_once_sqlite, a_deleted_account_is_kept_undeleted_or_purged_once_postgres;
    a_csv_file_is_written_whole_or_not_at_all => a_csv_file_is_written_whole_or_not_at_all_sqlite, a_csv_file_is_written_whole_or_not_at_all_postgres;
    a_sessions_row_carries_its_holds_charges_and_ready_time => a_sessions_row_carries_its_holds_charges_and_ready_time_sqlite, a_sessions_row_carries_its_holds_charges_and_ready_time_postgres;
    an_ask_for_credits_is_open_until_a_grant_or_a_close => an_ask_for_credits_is_open_until_a_grant_or_a_close_sqlite, an_ask_for_credits_is_open_until_a_grant_or_a_close_postgres;
    images_are_added_once_retired_and_remembered_by_sessions => images_are_added_once_retired_and_remembered_by_sessions_sqlite, images_are_added_once_retired_and_remembered_by_sessions_postgres;
    editor_grants_are_per_admin_and_expire => editor_grants_are_per_admin_and_expire_sqlite, editor_grants_are_per_admin_and_expire_postgres;
    an_admin_change_keeps_an_admin_and_demotion_takes_admin_off_tokens => an_admin_change_keeps_an_admin_and_demotion_takes_admin_off_tokens_sqlite, an_admin_change_keeps_an_admin_and_demotion_takes_admin_off_tokens_postgres;
    usage_sums_each_users_sessions_in_the_period => usage_sums_each_users_sessions_in_the_period_sqlite, usage_sums_each_users_sessions_in_the_period_postgres;
    usage_counts_what_running_sessions_cost_so_far => usage_counts_what_running_sessions_cost_so_far_sqlite, usage_counts_what_running_sessions_cost_so_far_postgres;
    users_page_sorts_filters_and_counts => users_page_sorts_filters_and_counts_sqlite, users_page_sorts_filters_and_counts_postgres;
    sessions_page_filters_by_state_and_user => sessions_page_filters_by_state_and_user_sqlite, sessions_page_filters_by_state_and_user_postgres;
    audit_page_names_users_and_searches => audit_page_names_users_and_searches_sqlite, audit_page_names_users_and_searches_postgres;
    taking_credits_back_stops_at_zero => taking_credits_back_stops_at_zero_sqlite, taking_credits_back_stops_at_zero_postgres;
}
