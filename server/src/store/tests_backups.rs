//! Store tests of backup records, on SQLite and PostgreSQL alike: the last run per user, the
//! last good one kept through failures, deleted accounts left out, repositories noted once.

use super::tests::{on_both_fns, user};
use super::*;

async fn the_last_run_is_kept_with_the_last_good_one(store: Store) {
    let alice = user(&store, "alice", 0).await;
    let bob = user(&store, "bob", 0).await;
    let gone = user(&store, "gone", 0).await;
    store.delete_user(&gone.id, None).await.unwrap();

    let listed = store.backup_records().await.unwrap();
    let names: Vec<&str> = listed.iter().map(|r| r.user_name.as_str()).collect();
    assert_eq!(
        names,
        vec!["alice", "bob"],
        "deleted accounts are not backed up"
    );
    assert!(listed.iter().all(|r| r.attempted_at.is_none()));

    let ok = BackupOutcome::Ok {
        snapshot_id: "4f1c2a3b",
        files: 12,
        bytes: 3 << 30,
    };
    store.record_backup(&alice.id, 1_000, ok).await.unwrap();
    store
        .record_backup(
            &alice.id,
            2_000,
            BackupOutcome::Failed("the repository is gone"),
        )
        .await
        .unwrap();
    let record = store.backup_record(&alice.id).await.unwrap().unwrap();
    assert_eq!(record.attempted_at, Some(2_000));
    assert!(!record.ok);
    assert_eq!(record.message, "the repository is gone");
    assert_eq!(record.succeeded_at, Some(1_000), "the last good one stays");
    assert_eq!(record.snapshot_id.as_deref(), Some("4f1c2a3b"));
    assert_eq!(record.bytes, Some(3 << 30), "sizes past 4 GiB fit");
    store
        .record_backup(
            &alice.id,
            3_000,
            BackupOutcome::Ok {
                snapshot_id: "5e5e5e5e",
                files: 13,
                bytes: 1,
            },
        )
        .await
        .unwrap();
    let record = store.backup_record(&alice.id).await.unwrap().unwrap();
    assert!(record.ok && record.message.is_empty());
    assert_eq!(record.succeeded_at, Some(3_000));
    let bob = store.backup_record(&bob.id).await.unwrap().unwrap();
    assert!(bob.attempted_at.is_none() && !bob.ok);

    assert!(!store.backup_repository_used("/srv/b").await.unwrap());
    store.note_backup_repository("/srv/b").await.unwrap();
    store.note_backup_repository("/srv/b").await.unwrap();
    assert!(store.backup_repository_used("/srv/b").await.unwrap());
    assert!(!store.backup_repository_used("/srv/c").await.unwrap());
}

on_both_fns! {
    the_last_run_is_kept_with_the_last_good_one => the_last_run_is_kept_with_the_last_good_one_sqlite, the_last_run_is_kept_with_the_last_good_one_postgres;
}
