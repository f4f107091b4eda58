//! Store tests. Every test body is written once and runs on SQLite (a fresh temp-file
//! database) and on PostgreSQL (a fresh database on the server named by `DATABASE_URL`;
//! skipped when that is unset).

use super::*;
use app::domain::credits;
use app::domain::launch::EditorKind;
use app::domain::pool::plan_slots;
use app::domain::scope::Scope;
use app::domain::session::InvalidTransition;
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::path::PathBuf;
use tower_sessions::session::{Id, Record};
use tower_sessions::session_store::SessionStore;

// ---- harness ----

/// Produces `<sqlite>` and `<postgres>` tests from one `async fn body(store: Store)`.
macro_rules! on_both {
    ($($body:ident => $sqlite:ident, $postgres:ident;)*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $sqlite() {
                $crate::store::tests::run_sqlite($body).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $postgres() {
                $crate::store::tests::run_postgres(stringify!($postgres), $body).await;
            }
        )*
    };
}

pub(super) use on_both as on_both_fns;

/// Runs the body on its own task so that a panic still lets us clean up; re-raise with `rethrow`.
async fn run_body<F, Fut>(store: Store, body: F) -> Result<(), tokio::task::JoinError>
where
    F: FnOnce(Store) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let outcome = tokio::spawn(body(store.clone())).await;
    store.close().await;
    outcome
}

fn rethrow(outcome: Result<(), tokio::task::JoinError>) {
    if let Err(e) = outcome {
        if e.is_panic() {
            std::panic::resume_unwind(e.into_panic());
        }
        panic!("test task failed: {e}");
    }
}

pub(crate) async fn run_sqlite<F, Fut>(body: F)
where
    F: FnOnce(Store) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let dir: PathBuf = std::env::temp_dir().join(format!("store-test-{}", new_id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let url = format!("sqlite://{}/x.db?mode=rwc", dir.display());
    let store = Store::connect(&url).await.expect("connect sqlite");
    assert_eq!(store.kind(), DbKind::Sqlite);
    store.migrate().await.expect("migrate sqlite");
    let outcome = run_body(store, body).await;
    let _ = std::fs::remove_dir_all(&dir);
    rethrow(outcome);
}

/// `url` with its database name replaced by `db`.
fn with_database(url: &str, db: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, format!("?{query}")),
        None => (url, String::new()),
    };
    let after_scheme = base.find("://").map(|i| i + 3).unwrap_or(0);
    let host_end = base[after_scheme..]
        .find('/')
        .map(|i| after_scheme + i)
        .unwrap_or(base.len());
    format!("{}/{db}{query}", &base[..host_end])
}

pub(crate) async fn run_postgres<F, Fut>(test: &str, body: F)
where
    F: FnOnce(Store) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    use sqlx::{Connection, Executor};
    let admin_url = match std::env::var("DATABASE_URL") {
        Ok(url) if url.starts_with("postgres") => url,
        _ => {
            eprintln!("{test}: skipped, DATABASE_URL (postgres://...) is not set");
            return;
        }
    };
    let db = format!("test_{}", new_id());
    let mut admin = sqlx::PgConnection::connect(&admin_url)
        .await
        .expect("connect to DATABASE_URL");
    admin
        .execute(format!("CREATE DATABASE {db}").as_str())
        .await
        .expect("create test database");
    let store = Store::connect(&with_database(&admin_url, &db))
        .await
        .expect("connect postgres");
    assert_eq!(store.kind(), DbKind::Postgres);
    store.migrate().await.expect("migrate postgres");
    let outcome = run_body(store, body).await;
    let _ = admin
        .execute(format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)").as_str())
        .await;
    let _ = admin.close().await;
    rethrow(outcome);
}

// ---- helpers ----

const SLICE: u64 = 8192;

pub(super) fn gpu(id: &str, memory_mib: u64, slice_mib: u64) -> GpuSpec {
    GpuSpec {
        id: id.into(),
        model: "Virtual 48G".into(),
        memory_mib,
        slice_mib,
        hold: app::domain::hold::SliceHold::None,
        device_minor: None,
        mig: None,
    }
}

/// One 48 GB card split into six 8 GB slots, g0s0..g0s5.
pub(super) async fn six_slots(store: &Store) -> Vec<String> {
    let card = gpu("v0", 49152, SLICE);
    let slots = plan_slots(0, &card);
    assert_eq!(slots.len(), 6);
    store.sync_pool(&[card], &slots).await.unwrap();
    slots.into_iter().map(|s| s.id).collect()
}

/// A one-hour launch that holds `hold` (its price per hour is the hold).
pub(super) fn launch(user_id: &str, hold: i64) -> NewSession<'_> {
    NewSession {
        user_id,
        image: None,
        editor: EditorKind::JupyterLab,
        slice_mib: SLICE,
        duration_minutes: 60,
        price_per_hour: hold,
        hold,
    }
}

pub(super) async fn user(store: &Store, name: &str, grant: i64) -> UserRecord {
    store
        .create_user(name, Some("hash"), Role::User, grant, None)
        .await
        .unwrap()
}

pub(super) async fn ledger_sum(store: &Store, user_id: &str) -> i64 {
    store
        .ledger(user_id)
        .await
        .unwrap()
        .iter()
        .map(|e| e.amount)
        .sum()
}

pub(super) async fn state_of(store: &Store, session_id: &str) -> SessionState {
    store.session(session_id).await.unwrap().unwrap().state
}

/// Moves the session's clock start back, so settling sees `elapsed_ms` of use.
pub(super) async fn backdate_ready(store: &Store, session_id: &str, elapsed_ms: i64) {
    sqlx::query("UPDATE sessions SET ready_at = $1 WHERE id = $2")
        .bind(now_ms() - elapsed_ms)
        .bind(session_id)
        .execute(store.pool_handle())
        .await
        .unwrap();
}

fn assert_seq_contiguous(steps: &[Step]) {
    let seqs: Vec<i64> = steps.iter().map(|s| s.seq).collect();
    let expected: Vec<i64> = (1..=steps.len() as i64).collect();
    assert_eq!(seqs, expected, "steps must be numbered 1..n in order");
}

// ---- users and tokens ----

async fn users_and_duplicate_names(store: Store) {
    let alice = store
        .create_user("alice", Some("hash-a"), Role::Admin, 0, None)
        .await
        .unwrap();
    assert_eq!(alice.name, "alice");
    assert_eq!(alice.role, Role::Admin);
    assert!(!alice.locked);

    let again = store
        .create_user("alice", Some("other"), Role::User, 5000, None)
        .await;
    assert!(
        matches!(again, Err(StoreError::Duplicate(_))),
        "duplicate name must be Duplicate, got {again:?}"
    );
    assert_eq!(store.count_users().await.unwrap(), 1);

    let by_name = store.user_by_name("alice").await.unwrap().unwrap();
    assert_eq!(by_name, alice);
    assert_eq!(by_name.password_hash.as_deref(), Some("hash-a"));
    let by_id = store.user_by_id(&alice.id).await.unwrap().unwrap();
    assert_eq!(by_id, alice);
    assert!(store.user_by_name("bob").await.unwrap().is_none());
    assert!(store.user_by_id("no-such-id").await.unwrap().is_none());

    // The failed duplicate wrote nothing: no grant for it.
    assert_eq!(store.credits(&alice.id).await.unwrap(), (0, 0));
    assert!(store.ledger(&alice.id).await.unwrap().is_empty());

    let bob = store
        .create_user("bob", None, Role::User, 0, Some(&alice.id))
        .await
        .unwrap();
    assert_eq!(store.count_users().await.unwrap(), 2);
    assert_eq!(
        store
            .user_by_name("bob")
            .await
            .unwrap()
            .unwrap()
            .password_hash,
        None
    );

    store.set_locked(&bob.id, true, None).await.unwrap();
    assert!(store.user_by_id(&bob.id).await.unwrap().unwrap().locked);
    store.set_locked(&bob.id, false, None).await.unwrap();
    assert!(!store.user_by_id(&bob.id).await.unwrap().unwrap().locked);
    assert!(matches!(
        store.set_locked("no-such-id", true, None).await,
        Err(StoreError::NotFound(_))
    ));

    let log = store.audit_log(10).await.unwrap();
    assert!(log.iter().any(|e| e.action == "user.create"
        && e.target == "user:bob"
        && e.actor_id.as_deref() == Some(alice.id.as_str())));
    assert!(log.iter().any(|e| e.action == "user.lock"));
    assert_eq!(log[0].action, "user.unlock", "newest first");
}

async fn oidc_accounts(store: Store) {
    let olga = store
        .create_oidc_user("olga", "https://id.example|u1", Role::User, 2_000)
        .await
        .unwrap();
    assert_eq!(olga.password_hash, None);
    assert_eq!(store.credits(&olga.id).await.unwrap(), (2_000, 0));
    let found = store
        .user_by_oidc_subject("https://id.example|u1")
        .await
        .unwrap();
    assert_eq!(found.map(|u| u.id), Some(olga.id.clone()));
    assert!(
        store
            .user_by_oidc_subject("https://id.example|u2")
            .await
            .unwrap()
            .is_none()
    );
    // One account per identity, and names stay unique across both kinds.
    let twin = store
        .create_oidc_user("olga2", "https://id.example|u1", Role::User, 0)
        .await;
    assert!(matches!(twin, Err(StoreError::Duplicate(_))), "{twin:?}");
    let local = user(&store, "local", 0).await;
    assert!(matches!(
        store
            .create_oidc_user("local", "https://id.example|u3", Role::User, 0)
            .await,
        Err(StoreError::Duplicate(_))
    ));
    // An admin links the identity to the local account instead.
    store
        .link_oidc(&local.id, "https://id.example|u3")
        .await
        .unwrap();
    let found = store
        .user_by_oidc_subject("https://id.example|u3")
        .await
        .unwrap();
    assert_eq!(found.map(|u| u.id), Some(local.id.clone()));
    let twice = store.link_oidc(&local.id, "https://id.example|u1").await;
    assert!(matches!(twice, Err(StoreError::Duplicate(_))), "{twice:?}");
    assert!(matches!(
        store.link_oidc("nobody", "https://id.example|u9").await,
        Err(StoreError::NotFound(_))
    ));
    store
        .set_role(
            &olga.id,
            Role::Admin,
            None,
            "groups from the identity provider",
        )
        .await
        .unwrap();
    assert_eq!(
        store.user_by_id(&olga.id).await.unwrap().unwrap().role,
        Role::Admin
    );
    let log = store.audit_log(10).await.unwrap();
    assert!(
        log.iter()
            .any(|e| e.action == "user.role"
                && e.detail == "admin: groups from the identity provider")
    );
    assert!(matches!(
        store.set_role("nobody", Role::Admin, None, "x").await,
        Err(StoreError::NotFound(_))
    ));
}

async fn token_lookup(store: Store) {
    let alice = user(&store, "alice", 0).await;
    let bob = user(&store, "bob", 0).await;
    let now = now_ms();
    let read_access = Scopes::of(&[Scope::Read, Scope::Access]);
    store
        .create_token(&alice.id, "hash-forever", "cli", Scopes::ALL, None)
        .await
        .unwrap();
    store
        .create_token(
            &alice.id,
            "hash-later",
            "ci",
            read_access,
            Some(now + 3_600_000),
        )
        .await
        .unwrap();
    store
        .create_token(
            &bob.id,
            "hash-expired",
            "old",
            Scopes::ALL,
            Some(now - 1_000),
        )
        .await
        .unwrap();

    let found = store.user_by_token_hash("hash-forever").await.unwrap();
    assert_eq!(
        found,
        Some(TokenOwner {
            user: alice.clone(),
            scopes: Scopes::ALL,
            expires_at: None
        })
    );
    let found = store.user_by_token_hash("hash-later").await.unwrap();
    assert_eq!(
        found.map(|o| (o.user.id, o.scopes, o.expires_at)),
        Some((alice.id.clone(), read_access, Some(now + 3_600_000))),
        "a token keeps the scopes and expiry it was made with"
    );
    let listed = store.tokens_of(&alice.id).await.unwrap();
    let mut scopes: Vec<_> = listed
        .iter()
        .map(|t| (t.label.as_str(), t.scopes))
        .collect();
    scopes.sort_by_key(|(label, _)| *label);
    assert_eq!(scopes, [("ci", read_access), ("cli", Scopes::ALL)]);
    assert!(
        store
            .user_by_token_hash("hash-expired")
            .await
            .unwrap()
            .is_none(),
        "an expired token must not authenticate"
    );
    assert!(store.user_by_token_hash("unknown").await.unwrap().is_none());

    // The same hash cannot name two tokens.
    assert!(
        store
            .create_token(&bob.id, "hash-forever", "dup", Scopes::ALL, None)
            .await
            .is_err()
    );
}

// ---- credits ----

async fn starting_grant_and_grants(store: Store) {
    let alice = user(&store, "alice", 5_000).await;
    assert_eq!(store.credits(&alice.id).await.unwrap(), (5_000, 0));
    let ledger = store.ledger(&alice.id).await.unwrap();
    assert_eq!(ledger.len(), 1);
    assert_eq!(ledger[0].kind, "grant");
    assert_eq!(ledger[0].amount, 5_000);
    assert_eq!(ledger[0].note, "starting grant");
    assert_eq!(ledger[0].session_id, None);

    assert_eq!(
        store.grant(&alice.id, 2_000, None, "top-up").await.unwrap(),
        7_000
    );
    assert_eq!(
        store.grant(&alice.id, -500, None, "fix").await.unwrap(),
        6_500
    );
    let kinds: Vec<String> = store
        .ledger(&alice.id)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect();
    assert_eq!(kinds, ["grant", "grant", "adjust"]);
    assert_eq!(store.credits(&alice.id).await.unwrap(), (6_500, 0));

    // No starting grant: no ledger row, zero balance; one user's grants are not another's.
    let bob = user(&store, "bob", 0).await;
    assert!(store.ledger(&bob.id).await.unwrap().is_empty());
    assert_eq!(store.credits(&bob.id).await.unwrap(), (0, 0));
}

// ---- sessions ----

async fn create_session_holds_credits(store: Store) {
    let alice = user(&store, "alice", 10_000).await;
    let (record, steps) = store
        .create_session(launch(&alice.id, 3_000))
        .await
        .unwrap();
    assert_eq!(record.user_id, alice.id);
    assert_eq!(record.state, SessionState::Requested);
    assert_eq!(record.editor, EditorKind::JupyterLab);
    assert_eq!(record.slice_mib, SLICE);
    assert_eq!(record.duration_minutes, 60);
    assert_eq!(record.price_per_hour, 3_000);
    assert_eq!(record.slot_id, None);
    assert_eq!(record.ready_at, None);
    assert_eq!(steps.len(), 2);
    assert_seq_contiguous(&steps);
    assert!(steps.iter().all(|s| s.state == SessionState::Requested));
    assert_eq!(store.steps(&record.id).await.unwrap(), steps);

    assert_eq!(store.credits(&alice.id).await.unwrap(), (7_000, 3_000));
    let ledger = store.ledger(&alice.id).await.unwrap();
    let hold = ledger.last().unwrap();
    assert_eq!(hold.kind, "hold");
    assert_eq!(hold.amount, -3_000);
    assert_eq!(hold.session_id.as_deref(), Some(record.id.as_str()));

    let mine = store.sessions_of(&alice.id, 10).await.unwrap();
    assert_eq!(mine.len(), 1);
    assert_eq!(mine[0].id, record.id);
    let live = store.live_sessions().await.unwrap();
    assert_eq!(live.len(), 1);
}

async fn create_session_refuses_short_balance(store: Store) {
    let alice = user(&store, "alice", 2_000).await;
    let before = store.ledger(&alice.id).await.unwrap();

    let refused = store.create_session(launch(&alice.id, 3_000)).await;
    match refused {
        Err(StoreError::InsufficientCredits { balance, needed }) => {
            assert_eq!((balance, needed), (2_000, 3_000));
        }
        other => panic!("expected InsufficientCredits, got {other:?}"),
    }
    assert!(store.sessions_of(&alice.id, 10).await.unwrap().is_empty());
    assert!(store.live_sessions().await.unwrap().is_empty());
    assert_eq!(store.ledger(&alice.id).await.unwrap(), before);
    assert_eq!(store.credits(&alice.id).await.unwrap(), (2_000, 0));

    // Exactly the balance is enough, and then nothing is left for another.
    let (first, _) = store
        .create_session(launch(&alice.id, 2_000))
        .await
        .unwrap();
    assert_eq!(store.credits(&alice.id).await.unwrap(), (0, 2_000));
    match store.create_session(launch(&alice.id, 1)).await {
        Err(StoreError::InsufficientCredits { balance, needed }) => {
            assert_eq!((balance, needed), (0, 1));
        }
        other => panic!("expected InsufficientCredits, got {other:?}"),
    }
    let mine = store.sessions_of(&alice.id, 10).await.unwrap();
    assert_eq!(mine.len(), 1);
    assert_eq!(mine[0].id, first.id);
}

async fn assign_slot_takes_a_free_slot(store: Store) {
    let slots = six_slots(&store).await;
    let pool = store.pool().await.unwrap();
    assert_eq!(pool.len(), 1);
    assert_eq!(pool[0].0.id, "v0");
    assert_eq!(pool[0].0.memory_mib, 49152);
    assert_eq!(pool[0].1.len(), 6);
    assert!(pool[0].1.iter().all(|s| s.session_id.is_none()));

    let alice = user(&store, "alice", 100_000).await;
    let (a, _) = store
        .create_session(launch(&alice.id, 1_000))
        .await
        .unwrap();
    let (b, _) = store
        .create_session(launch(&alice.id, 1_000))
        .await
        .unwrap();

    let (slot, step) = store
        .assign_slot(&a.id, &slots[..2])
        .await
        .unwrap()
        .unwrap();
    assert_eq!(slot, "g0s0");
    assert_eq!(step.state, SessionState::Starting);
    assert_eq!(step.seq, 3);
    let taken = store.slot("g0s0").await.unwrap().unwrap();
    assert_eq!(taken.session_id.as_deref(), Some(a.id.as_str()));
    let a_now = store.session(&a.id).await.unwrap().unwrap();
    assert_eq!(a_now.state, SessionState::Starting);
    assert_eq!(a_now.slot_id.as_deref(), Some("g0s0"));
    assert_eq!(a_now.gpu_id.as_deref(), Some("v0"));
    assert_eq!(a_now.gpu_model.as_deref(), Some("Virtual 48G"));
    assert_eq!(a_now.cores_pct, Some(16));

    // B cannot take A's slot; nothing about B changes.
    let b_steps = store.steps(&b.id).await.unwrap();
    assert!(
        store
            .assign_slot(&b.id, &["g0s0".to_string()])
            .await
            .unwrap()
            .is_none()
    );
    let b_now = store.session(&b.id).await.unwrap().unwrap();
    assert_eq!(b_now.state, SessionState::Requested);
    assert_eq!(b_now.slot_id, None);
    assert_eq!(store.steps(&b.id).await.unwrap(), b_steps);
    assert_eq!(holder(&store, "g0s0").await.as_deref(), Some(a.id.as_str()));

    // With more candidates B takes the next free one.
    let (slot, _) = store.assign_slot(&b.id, &slots).await.unwrap().unwrap();
    assert_eq!(slot, "g0s1");

    // A starting session cannot be assigned again.
    assert!(matches!(
        store.assign_slot(&a.id, &slots).await,
        Err(StoreError::Transition(InvalidTransition {
            from: SessionState::Starting,
            event: Event::AssignSlot
        }))
    ));
    // An unknown session is not found.
    assert!(matches!(
        store.assign_slot("no-such-session", &slots).await,
        Err(StoreError::NotFound(_))
    ));
    let used: Vec<_> = store.pool().await.unwrap()[0]
        .1
        .iter()
        .filter_map(|s| s.session_id.clone())
        .collect();
    assert_eq!(used.len(), 2);
}

async fn sync_pool_deactivates_removed_slots(store: Store) {
    let slots = six_slots(&store).await;
    let alice = user(&store, "alice", 10_000).await;
    let (a, _) = store.create_session(launch(&alice.id, 0)).await.unwrap();
    store
        .assign_slot(&a.id, &["g0s4".to_string()])
        .await
        .unwrap()
        .unwrap();

    // Re-split the card into 16 GB slices: g0s0..g0s2 stay (resized), g0s3..g0s5 go.
    let card = gpu("v0", 49152, 16384);
    let smaller = plan_slots(0, &card);
    assert_eq!(smaller.len(), 3);
    store.sync_pool(&[card], &smaller).await.unwrap();
    let pool = store.pool().await.unwrap();
    let ids: Vec<&str> = pool[0].1.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids, ["g0s0", "g0s1", "g0s2"]);
    assert!(pool[0].1.iter().all(|s| s.slice_mib == 16384));

    // The held slot is kept (inactive) with its session; removed slots cannot be taken.
    let held = store.slot("g0s4").await.unwrap().unwrap();
    assert_eq!(held.session_id.as_deref(), Some(a.id.as_str()));
    let (b, _) = store.create_session(launch(&alice.id, 0)).await.unwrap();
    assert!(
        store
            .assign_slot(&b.id, &slots[3..])
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(state_of(&store, &b.id).await, SessionState::Requested);
}

async fn ready_path_settles(store: Store) {
    let slots = six_slots(&store).await;
    let grant = 100_000;
    let alice = user(&store, "alice", grant).await;
    let per_hour = 6_000;
    let hold = credits::price_for_minutes(per_hour, 60);
    let (s, _) = store
        .create_session(NewSession {
            user_id: &alice.id,
            image: None,
            editor: EditorKind::Marimo,
            slice_mib: SLICE,
            duration_minutes: 60,
            price_per_hour: per_hour,
            hold,
        })
        .await
        .unwrap();
    store.assign_slot(&s.id, &slots).await.unwrap().unwrap();
    store
        .add_step(&s.id, "Starting the editor", 50)
        .await
        .unwrap();
    store
        .set_runtime(&s.id, "127.0.0.1:9999", "secret", "pid:42")
        .await
        .unwrap();
    let ready = store.mark_ready(&s.id, "Editor ready").await.unwrap();
    assert_eq!(ready.state, SessionState::Ready);
    assert_eq!(ready.progress, 100);

    let r = store.session(&s.id).await.unwrap().unwrap();
    assert_eq!(r.state, SessionState::Ready);
    assert_eq!(r.upstream.as_deref(), Some("127.0.0.1:9999"));
    assert_eq!(r.editor_token.as_deref(), Some("secret"));
    assert_eq!(r.runtime_handle.as_deref(), Some("pid:42"));
    let ready_at = r.ready_at.expect("ready_at set");
    assert_eq!(r.ends_at, Some(ready_at + 60 * 60_000));
    assert_eq!(r.last_activity_at, ready_at);
    assert_eq!(
        store.credits(&alice.id).await.unwrap(),
        (grant - hold, hold)
    );

    // Activity only moves forward.
    store.touch(&s.id, ready_at + 5_000).await.unwrap();
    store.touch(&s.id, ready_at + 1_000).await.unwrap();
    let r = store.session(&s.id).await.unwrap().unwrap();
    assert_eq!(r.last_activity_at, ready_at + 5_000);

    // Ten minutes and a bit of use: eleven minutes are charged.
    backdate_ready(&store, &s.id, 10 * 60_000 + 1).await;

    let (next, step) = store
        .begin_stop(&s.id, EndReason::User, None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(next, SessionState::Stopping);
    assert_eq!(step.state, SessionState::Stopping);
    assert!(!step.failed);
    // Stopping still holds the slot and the credits.
    assert_eq!(holder(&store, "g0s0").await.as_deref(), Some(s.id.as_str()));
    assert_eq!(
        store.credits(&alice.id).await.unwrap(),
        (grant - hold, hold)
    );
    // Stopping twice is harmless.
    assert!(
        store
            .begin_stop(&s.id, EndReason::Admin, None)
            .await
            .unwrap()
            .is_none()
    );

    let done = store.finish(&s.id).await.unwrap().unwrap();
    assert_eq!(done.state, SessionState::Ended);
    let r = store.session(&s.id).await.unwrap().unwrap();
    assert_eq!(r.state, SessionState::Ended);
    assert_eq!(r.end_reason, Some(EndReason::User));
    assert!(r.ended_at.is_some());
    assert_eq!(store.slot("g0s0").await.unwrap().unwrap().session_id, None);
    assert!(store.live_sessions().await.unwrap().is_empty());

    let charge = credits::price_for_minutes(per_hour, 11);
    assert_eq!(charge, 1_100);
    let ledger = store.ledger(&alice.id).await.unwrap();
    let of_session: Vec<(&str, i64)> = ledger
        .iter()
        .filter(|e| e.session_id.as_deref() == Some(s.id.as_str()))
        .map(|e| (e.kind.as_str(), e.amount))
        .collect();
    assert_eq!(
        of_session,
        [("hold", -hold), ("refund", hold), ("charge", -charge)]
    );
    assert_eq!(store.credits(&alice.id).await.unwrap(), (grant - charge, 0));
    assert_eq!(ledger_sum(&store, &alice.id).await, grant - charge);

    // Finishing again changes nothing.
    assert!(store.finish(&s.id).await.unwrap().is_none());
    assert_eq!(store.ledger(&alice.id).await.unwrap(), ledger);

    let steps = store.steps(&s.id).await.unwrap();
    assert_seq_contiguous(&steps);
    let states: Vec<SessionState> = steps.iter().map(|s| s.state).collect();
    use SessionState::*;
    assert_eq!(
        states,
        [
            Requested, Requested, Starting, Starting, Ready, Stopping, Ended
        ]
    );
    assert_eq!(steps[3].message, "Starting the editor");
    assert_eq!(steps[3].progress, 50);
    assert_eq!(steps.last().unwrap(), &done);

    // The slot can be taken again.
    let (t, _) = store
        .create_session(launch(&alice.id, 1_000))
        .await
        .unwrap();
    let (slot, _) = store.assign_slot(&t.id, &slots).await.unwrap().unwrap();
    assert_eq!(slot, "g0s0");
}

async fn charge_never_exceeds_hold(store: Store) {
    let slots = six_slots(&store).await;
    let alice = user(&store, "alice", 10_000).await;
    let (s, _) = store
        .create_session(launch(&alice.id, 3_000))
        .await
        .unwrap();
    store.assign_slot(&s.id, &slots).await.unwrap().unwrap();
    store.mark_ready(&s.id, "ready").await.unwrap();
    // Ran three hours of a one-hour session.
    backdate_ready(&store, &s.id, 3 * 60 * 60_000).await;
    store
        .begin_stop(&s.id, EndReason::Timer, None)
        .await
        .unwrap()
        .unwrap();
    store.finish(&s.id).await.unwrap().unwrap();
    assert_eq!(store.credits(&alice.id).await.unwrap(), (7_000, 0));
    assert_eq!(ledger_sum(&store, &alice.id).await, 7_000);
    let r = store.session(&s.id).await.unwrap().unwrap();
    assert_eq!(r.end_reason, Some(EndReason::Timer));
}

async fn stop_before_ready_charges_nothing(store: Store) {
    let slots = six_slots(&store).await;
    let alice = user(&store, "alice", 10_000).await;

    // Requested: ends at once, the hold comes back.
    let (a, _) = store
        .create_session(launch(&alice.id, 2_000))
        .await
        .unwrap();
    let (next, step) = store
        .begin_stop(&a.id, EndReason::Failed, Some("no image"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(next, SessionState::Ended);
    assert!(step.failed);
    assert_eq!(step.message, "no image");
    let r = store.session(&a.id).await.unwrap().unwrap();
    assert_eq!(r.state, SessionState::Ended);
    assert_eq!(r.end_reason, Some(EndReason::Failed));
    assert_eq!(r.detail.as_deref(), Some("no image"));
    assert!(r.ended_at.is_some());
    assert_eq!(store.credits(&alice.id).await.unwrap(), (10_000, 0));
    // Ended: finish and stop are no-ops.
    assert!(store.finish(&a.id).await.unwrap().is_none());
    assert!(
        store
            .begin_stop(&a.id, EndReason::User, None)
            .await
            .unwrap()
            .is_none()
    );

    // Starting: stops through stopping, frees the slot, charges nothing.
    let (b, _) = store
        .create_session(launch(&alice.id, 2_000))
        .await
        .unwrap();
    store.assign_slot(&b.id, &slots).await.unwrap().unwrap();
    let (next, _) = store
        .begin_stop(&b.id, EndReason::User, None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(next, SessionState::Stopping);
    store.finish(&b.id).await.unwrap().unwrap();
    assert!(
        store.pool().await.unwrap()[0]
            .1
            .iter()
            .all(|s| s.session_id.is_none())
    );
    assert_eq!(store.credits(&alice.id).await.unwrap(), (10_000, 0));
    let kinds: Vec<String> = store
        .ledger(&alice.id)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect();
    assert_eq!(kinds, ["grant", "hold", "refund", "hold", "refund"]);
}

async fn invalid_transitions_are_refused(store: Store) {
    let slots = six_slots(&store).await;
    let alice = user(&store, "alice", 10_000).await;
    let (s, _) = store
        .create_session(launch(&alice.id, 1_000))
        .await
        .unwrap();
    let steps_before = store.steps(&s.id).await.unwrap();

    let refused = store.mark_ready(&s.id, "too early").await;
    assert!(
        matches!(
            refused,
            Err(StoreError::Transition(InvalidTransition {
                from: SessionState::Requested,
                event: Event::EditorReady
            }))
        ),
        "got {refused:?}"
    );
    assert!(matches!(
        store.finish(&s.id).await,
        Err(StoreError::Transition(InvalidTransition {
            from: SessionState::Requested,
            event: Event::Finish
        }))
    ));
    // Nothing was written.
    let r = store.session(&s.id).await.unwrap().unwrap();
    assert_eq!(r.state, SessionState::Requested);
    assert_eq!(r.ready_at, None);
    assert_eq!(store.steps(&s.id).await.unwrap(), steps_before);

    store.assign_slot(&s.id, &slots).await.unwrap().unwrap();
    store.mark_ready(&s.id, "ready").await.unwrap();
    assert!(matches!(
        store.mark_ready(&s.id, "again").await,
        Err(StoreError::Transition(_))
    ));
    assert!(matches!(
        store.finish(&s.id).await,
        Err(StoreError::Transition(InvalidTransition {
            from: SessionState::Ready,
            event: Event::Finish
        }))
    ));
    assert_eq!(state_of(&store, &s.id).await, SessionState::Ready);

    store
        .begin_stop(&s.id, EndReason::User, None)
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(
        store.mark_ready(&s.id, "late").await,
        Err(StoreError::Transition(InvalidTransition {
            from: SessionState::Stopping,
            ..
        }))
    ));
    store.finish(&s.id).await.unwrap().unwrap();
    assert!(matches!(
        store.assign_slot(&s.id, &slots).await,
        Err(StoreError::Transition(InvalidTransition {
            from: SessionState::Ended,
            ..
        }))
    ));
    assert!(matches!(
        store.mark_ready(&s.id, "after the end").await,
        Err(StoreError::Transition(_))
    ));
    // The ended session does not hold a slot again.
    assert!(
        store.pool().await.unwrap()[0]
            .1
            .iter()
            .all(|sl| sl.session_id.is_none())
    );
    assert!(matches!(
        store.mark_ready("no-such-session", "x").await,
        Err(StoreError::NotFound(_))
    ));
}

async fn steps_in_seq_order(store: Store) {
    let alice = user(&store, "alice", 10_000).await;
    let (a, _) = store.create_session(launch(&alice.id, 100)).await.unwrap();
    let (b, _) = store.create_session(launch(&alice.id, 100)).await.unwrap();
    // More than nine steps, so a textual ordering of seq would show.
    for i in 0..12u8 {
        let step = store
            .add_step(&a.id, &format!("a step {i}"), 20 + i)
            .await
            .unwrap();
        assert_eq!(step.seq, 3 + i as i64);
        assert_eq!(step.state, SessionState::Requested);
    }
    store.add_step(&b.id, "b step", 30).await.unwrap();

    let steps = store.steps(&a.id).await.unwrap();
    assert_eq!(steps.len(), 14);
    assert_seq_contiguous(&steps);
    for (i, step) in steps[2..].iter().enumerate() {
        assert_eq!(step.message, format!("a step {i}"));
        assert_eq!(step.progress, 20 + i as u8);
        assert!(!step.failed);
    }
    assert!(steps.windows(2).all(|w| w[0].at_ms <= w[1].at_ms));

    let b_steps = store.steps(&b.id).await.unwrap();
    assert_eq!(b_steps.len(), 3);
    assert_eq!(b_steps[2].message, "b step");
    assert!(store.steps("no-such-session").await.unwrap().is_empty());
}

// ---- concurrency ----

/// 50 launches race for credits that cover exactly 7 holds: exactly 7 win.
async fn concurrent_launches_never_overdraw(store: Store) {
    const HOLD: i64 = 1_000;
    const K: i64 = 7;
    let grant = K * HOLD + HOLD / 2;
    let alice = user(&store, "alice", grant).await;
    let mut tasks = Vec::new();
    for _ in 0..50 {
        let store = store.clone();
        let user_id = alice.id.clone();
        tasks.push(tokio::spawn(async move {
            store.create_session(launch(&user_id, HOLD)).await
        }));
    }
    let mut ok = 0;
    let mut refused = 0;
    for task in tasks {
        match task.await.unwrap() {
            Ok(_) => ok += 1,
            Err(StoreError::InsufficientCredits { balance, needed }) => {
                assert_eq!(needed, HOLD);
                assert!((0..HOLD).contains(&balance), "refused at balance {balance}");
                refused += 1;
            }
            Err(e) => panic!("unexpected error: {e:?}"),
        }
    }
    assert_eq!((ok, refused), (K, 50 - K));
    assert_eq!(
        store.credits(&alice.id).await.unwrap(),
        (grant - K * HOLD, K * HOLD)
    );
    assert_eq!(ledger_sum(&store, &alice.id).await, grant - K * HOLD);
    let holds = store
        .ledger(&alice.id)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == "hold")
        .count();
    assert_eq!(holds as i64, K);
    assert_eq!(
        store.sessions_of(&alice.id, 100).await.unwrap().len() as i64,
        K
    );
}

/// 20 sessions race for 6 slots: exactly 6 win, no slot is shared.
async fn concurrent_slot_assignment(store: Store) {
    let slots = six_slots(&store).await;
    let alice = user(&store, "alice", 1_000_000).await;
    let mut sessions = Vec::new();
    for _ in 0..20 {
        let (s, _) = store.create_session(launch(&alice.id, 100)).await.unwrap();
        sessions.push(s.id);
    }
    let mut tasks = Vec::new();
    for id in &sessions {
        let store = store.clone();
        let id = id.clone();
        let candidates = slots.clone();
        tasks.push(tokio::spawn(async move {
            let got = store.assign_slot(&id, &candidates).await;
            (id, got)
        }));
    }
    let mut winners: HashMap<String, String> = HashMap::new();
    let mut losers = Vec::new();
    for task in tasks {
        let (id, got) = task.await.unwrap();
        match got {
            Ok(Some((slot, _))) => {
                assert!(winners.insert(id, slot).is_none());
            }
            Ok(None) => losers.push(id),
            Err(e) => panic!("unexpected error: {e:?}"),
        }
    }
    assert_eq!(winners.len(), 6);
    assert_eq!(losers.len(), 14);
    let distinct: HashSet<&String> = winners.values().collect();
    assert_eq!(distinct.len(), 6, "a slot was handed out twice");

    let pool = store.pool().await.unwrap();
    for slot in &pool[0].1 {
        let holder = slot.session_id.as_ref().expect("every slot is taken");
        assert_eq!(winners.get(holder), Some(&slot.id));
    }
    for (id, slot) in &winners {
        let r = store.session(id).await.unwrap().unwrap();
        assert_eq!(r.state, SessionState::Starting);
        assert_eq!(r.slot_id.as_ref(), Some(slot));
    }
    for id in &losers {
        let r = store.session(id).await.unwrap().unwrap();
        assert_eq!(r.state, SessionState::Requested);
        assert_eq!(r.slot_id, None);
        assert_eq!(store.steps(id).await.unwrap().len(), 2);
    }
}

/// Many stops and finishes of one session at once: one of each happens, the others see it
/// done (no Conflict), and the credits are settled once.
async fn concurrent_stop_and_finish_settle_once(store: Store) {
    let slots = six_slots(&store).await;
    let alice = user(&store, "alice", 10_000).await;
    let (s, _) = store
        .create_session(launch(&alice.id, 6_000))
        .await
        .unwrap();
    store.assign_slot(&s.id, &slots).await.unwrap().unwrap();
    store.mark_ready(&s.id, "ready").await.unwrap();
    // Four and a half minutes (and the time the test takes): five minutes are charged.
    backdate_ready(&store, &s.id, 4 * 60_000 + 30_000).await;

    let mut tasks = Vec::new();
    for _ in 0..10 {
        let store = store.clone();
        let id = s.id.clone();
        tasks.push(tokio::spawn(async move {
            store.begin_stop(&id, EndReason::User, None).await
        }));
    }
    let mut stopped = 0;
    for task in tasks {
        match task.await.unwrap() {
            Ok(Some((next, _))) => {
                assert_eq!(next, SessionState::Stopping);
                stopped += 1;
            }
            Ok(None) => {}
            Err(e) => panic!("unexpected error: {e:?}"),
        }
    }
    assert_eq!(stopped, 1);

    let mut tasks = Vec::new();
    for _ in 0..10 {
        let store = store.clone();
        let id = s.id.clone();
        tasks.push(tokio::spawn(async move { store.finish(&id).await }));
    }
    let mut finished = 0;
    for task in tasks {
        match task.await.unwrap() {
            Ok(Some(_)) => finished += 1,
            Ok(None) => {}
            Err(e) => panic!("unexpected error: {e:?}"),
        }
    }
    assert_eq!(finished, 1);

    let charge = credits::price_for_minutes(6_000, 5);
    let kinds: Vec<String> = store
        .ledger(&alice.id)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect();
    assert_eq!(kinds, ["grant", "hold", "refund", "charge"]);
    assert_eq!(
        store.credits(&alice.id).await.unwrap(),
        (10_000 - charge, 0)
    );
    let steps = store.steps(&s.id).await.unwrap();
    assert_seq_contiguous(&steps);
    assert_eq!(
        steps
            .iter()
            .filter(|s| s.state == SessionState::Ended)
            .count(),
        1
    );
}

/// Progress steps written at once (and a stop among them) all land, numbered 1..n.
async fn concurrent_steps_keep_seq_unique(store: Store) {
    let slots = six_slots(&store).await;
    let alice = user(&store, "alice", 10_000).await;
    let (s, _) = store
        .create_session(launch(&alice.id, 1_000))
        .await
        .unwrap();
    store.assign_slot(&s.id, &slots).await.unwrap().unwrap();

    let mut tasks = Vec::new();
    for i in 0..20u8 {
        let store = store.clone();
        let id = s.id.clone();
        tasks.push(tokio::spawn(async move {
            if i == 10 {
                store
                    .begin_stop(&id, EndReason::User, None)
                    .await
                    .map(|stop| stop.map(|(_, step)| step))
            } else {
                store.add_step(&id, &format!("step {i}"), i).await.map(Some)
            }
        }));
    }
    for task in tasks {
        let step = task.await.unwrap().expect("a step must be recorded");
        assert!(step.is_some());
    }
    let steps = store.steps(&s.id).await.unwrap();
    assert_eq!(steps.len(), 3 + 20);
    assert_seq_contiguous(&steps);
    assert_eq!(state_of(&store, &s.id).await, SessionState::Stopping);
}

/// Writes that do not go through a transaction (activity, http sessions) racing with
/// launches must not make the launches fail.
async fn side_writes_do_not_break_transactions(store: Store) {
    let alice = user(&store, "alice", 1_000_000).await;
    let (s, _) = store.create_session(launch(&alice.id, 10)).await.unwrap();
    let http = HttpSessionStore::new(store.clone());
    let mut tasks = Vec::new();
    for i in 0..40i64 {
        let store = store.clone();
        let http = http.clone();
        let user_id = alice.id.clone();
        let id = s.id.clone();
        tasks.push(tokio::spawn(async move {
            store
                .create_session(launch(&user_id, 10))
                .await
                .map_err(|e| format!("launch {i}: {e}"))?;
            store
                .touch(&id, now_ms() + i)
                .await
                .map_err(|e| format!("touch {i}: {e}"))?;
            let record = Record {
                id: Id::default(),
                data: HashMap::new(),
                expiry_date: time::OffsetDateTime::now_utc() + time::Duration::hours(1),
            };
            http.save(&record)
                .await
                .map_err(|e| format!("http save {i}: {e}"))?;
            store
                .grant(&user_id, 1, None, "tick")
                .await
                .map_err(|e| format!("grant {i}: {e}"))?;
            Ok::<(), String>(())
        }));
    }
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    assert_eq!(store.sessions_of(&alice.id, 100).await.unwrap().len(), 41);
    assert_eq!(
        store.credits(&alice.id).await.unwrap(),
        (1_000_000 - 41 * 10 + 40, 41 * 10)
    );
}

// ---- http sessions ----

fn record_expiring_in(seconds: i64) -> Record {
    let expiry = time::OffsetDateTime::from_unix_timestamp(now_ms() / 1000 + seconds).unwrap();
    let mut data = HashMap::new();
    data.insert("user_id".to_string(), serde_json::json!("u-123"));
    data.insert(
        "csrf".to_string(),
        serde_json::json!({"token": "abc", "n": 7}),
    );
    Record {
        id: Id::default(),
        data,
        expiry_date: expiry,
    }
}

async fn http_sessions_round_trip(store: Store) {
    let http = HttpSessionStore::new(store.clone());
    let mut record = record_expiring_in(3_600);
    assert!(http.load(&record.id).await.unwrap().is_none());
    http.save(&record).await.unwrap();
    assert_eq!(http.load(&record.id).await.unwrap(), Some(record.clone()));

    // Saving again updates in place.
    record
        .data
        .insert("theme".to_string(), serde_json::json!("dark"));
    record.expiry_date += time::Duration::hours(1);
    http.save(&record).await.unwrap();
    assert_eq!(http.load(&record.id).await.unwrap(), Some(record.clone()));

    // create() (the trait's default) stores a new record too.
    let mut created = record_expiring_in(60);
    http.create(&mut created).await.unwrap();
    assert_eq!(http.load(&created.id).await.unwrap(), Some(created.clone()));

    http.delete(&record.id).await.unwrap();
    assert!(http.load(&record.id).await.unwrap().is_none());
    // Deleting what is gone is fine.
    http.delete(&record.id).await.unwrap();
    assert_eq!(http.load(&created.id).await.unwrap(), Some(created));
}

async fn http_sessions_expire(store: Store) {
    let http = HttpSessionStore::new(store.clone());
    let live = record_expiring_in(3_600);
    let expired = record_expiring_in(-10);
    http.save(&live).await.unwrap();
    http.save(&expired).await.unwrap();
    assert!(
        http.load(&expired.id).await.unwrap().is_none(),
        "an expired session must not load"
    );
    assert!(http.load(&live.id).await.unwrap().is_some());

    assert_eq!(http.delete_expired().await.unwrap(), 1);
    assert_eq!(http.delete_expired().await.unwrap(), 0);
    assert!(http.load(&live.id).await.unwrap().is_some());
    let left: i64 = sqlx::query("SELECT COUNT(*) AS n FROM http_sessions")
        .fetch_one(store.pool_handle())
        .await
        .unwrap()
        .try_get("n")
        .unwrap();
    assert_eq!(left, 1);
}

on_both! {
    users_and_duplicate_names => users_and_duplicate_names_sqlite, users_and_duplicate_names_postgres;
    token_lookup => token_lookup_sqlite, token_lookup_postgres;
    oidc_accounts => oidc_accounts_sqlite, oidc_accounts_postgres;
    starting_grant_and_grants => starting_grant_and_grants_sqlite, starting_grant_and_grants_postgres;
    create_session_holds_credits => create_session_holds_credits_sqlite, create_session_holds_credits_postgres;
    create_session_refuses_short_balance => create_session_refuses_short_balance_sqlite, create_session_refuses_short_balance_postgres;
    assign_slot_takes_a_free_slot => assign_slot_takes_a_free_slot_sqlite, assign_slot_takes_a_free_slot_postgres;
    sync_pool_deactivates_removed_slots => sync_pool_deactivates_removed_slots_sqlite, sync_pool_deactivates_removed_slots_postgres;
    ready_path_settles => ready_path_settles_sqlite, ready_path_settles_postgres;
    charge_never_exceeds_hold => charge_never_exceeds_hold_sqlite, charge_never_exceeds_hold_postgres;
    stop_before_ready_charges_nothing => stop_before_ready_charges_nothing_sqlite, stop_before_ready_charges_nothing_postgres;
    invalid_transitions_are_refused => invalid_transitions_are_refused_sqlite, invalid_transitions_are_refused_postgres;
    steps_in_seq_order => steps_in_seq_order_sqlite, steps_in_seq_order_postgres;
    concurrent_launches_never_overdraw => concurrent_launches_never_overdraw_sqlite, concurrent_launches_never_overdraw_postgres;
    concurrent_slot_assignment => concurrent_slot_assignment_sqlite, concurrent_slot_assignment_postgres;
    concurrent_stop_and_finish_settle_once => concurrent_stop_and_finish_settle_once_sqlite, concurrent_stop_and_finish_settle_once_postgres;
    concurrent_steps_keep_seq_unique => concurrent_steps_keep_seq_unique_sqlite, concurrent_steps_keep_seq_unique_postgres;
    side_writes_do_not_break_transactions => side_writes_do_not_break_transactions_sqlite, side_writes_do_not_break_transactions_postgres;
    http_sessions_round_trip => http_sessions_round_trip_sqlite, http_sessions_round_trip_postgres;
    http_sessions_expire => http_sessions_expire_sqlite, http_sessions_expire_postgres;
}

#[test]
fn database_url_rewrite() {
    assert_eq!(
        with_database("postgres://u:p@127.0.0.1:5432/postgres", "test_x"),
        "postgres://u:p@127.0.0.1:5432/test_x"
    );
    assert_eq!(
        with_database("postgres://u:p@host/db?sslmode=disable", "test_x"),
        "postgres://u:p@host/test_x?sslmode=disable"
    );
    assert_eq!(
        with_database("postgres://host:5432", "test_x"),
        "postgres://host:5432/test_x"
    );
}

/// Which session holds the slot, if any.
async fn holder(store: &Store, slot: &str) -> Option<String> {
    store.slot(slot).await.unwrap().unwrap().session_id
}
