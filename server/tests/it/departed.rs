//! Departed users: a deleted account keeps its workspace through the grace period, an admin may
//! undo the deletion meanwhile, and then the reaper backs it up a last time and removes its
//! storage (as root, its own file system too: unmounted, image deleted), after which the account
//! cannot come back.

use crate::common::TestApp;
use http::{Method, StatusCode};
use std::time::Duration;

const DAY: Duration = Duration::from_secs(24 * 3600);

#[tokio::test]
async fn a_deleted_accounts_workspace_stays_through_its_grace_period_then_goes() {
    let app = TestApp::start_clocked(None, |config| {
        config.accounts.purge_deleted_after_days = 30;
        // Backed up a last time before it goes (restic, into the data dir's repository).
        config.backups.enabled = true;
    })
    .await;
    let root = app.admin_token("root").await;
    let (bob_id, _) = app.user("bob").await;
    let data = app.service.config().data_dir.clone();
    let workspace = data.join("workspaces").join("bob");
    std::fs::create_dir_all(&workspace).unwrap();
    std::fs::write(workspace.join("notes.txt"), "keep me").unwrap();
    // As root the workspace is a file system of its own, as a launch makes it.
    // SAFETY: geteuid only reads this process's effective user id.
    let disks = (unsafe { libc::geteuid() } == 0)
        .then(|| server::runtime::disk::Disks::detect(&data, true).ok())
        .flatten();
    if let Some(disks) = &disks {
        disks.ensure(&workspace, 64, 1000).unwrap();
        assert!(data.join("disks/bob.ext4").exists());
    }
    let delete_path = format!("/api/v1/admin/users/{bob_id}");
    let delete = || app.call(Method::DELETE, &delete_path, Some(&root), None);
    let undelete = |token: String| {
        let path = format!("/api/v1/admin/users/{bob_id}/undelete");
        let app = &app;
        async move { app.call(Method::POST, &path, Some(&token), None).await }
    };
    delete().await.assert_status(StatusCode::NO_CONTENT);
    // Out of the list, but under the `deleted` filter, with when its storage goes.
    let listed = |filter: &'static str| {
        let app = &app;
        let root = root.clone();
        async move {
            let page = app
                .get(&format!("/api/v1/admin/users?filter={filter}"), Some(&root))
                .await
                .json();
            page["items"].as_array().unwrap().clone()
        }
    };
    assert!(!listed("all").await.iter().any(|u| u["name"] == "bob"));
    let deleted = listed("deleted").await;
    assert_eq!(deleted.len(), 1, "{deleted:?}");
    let goes = deleted[0]["storage_removed_at_ms"].as_i64().unwrap();
    assert!(goes > app.store.now() + 29 * DAY.as_millis() as i64);

    // Within the grace period the files stay, and the deletion can be undone.
    app.advance(29 * DAY);
    app.service.guard.reap().await;
    assert_eq!(
        std::fs::read_to_string(workspace.join("notes.txt")).unwrap(),
        "keep me"
    );
    let (_, alice) = app.user("alice").await;
    undelete(alice).await.assert_status(StatusCode::FORBIDDEN);
    undelete(root.clone())
        .await
        .assert_status(StatusCode::NO_CONTENT);
    let bob = app.store.user_by_id(&bob_id).await.unwrap().unwrap();
    assert!(!bob.deleted && !bob.locked, "back as it was");
    undelete(root.clone())
        .await
        .assert_status(StatusCode::NOT_FOUND);

    // Deleted again, and left past its grace period: the storage goes.
    delete().await.assert_status(StatusCode::NO_CONTENT);
    app.advance(30 * DAY + Duration::from_secs(60));
    app.service.guard.reap().await;
    assert!(!workspace.exists(), "the workspace is removed");
    let last = app
        .store
        .backup_record(&bob_id)
        .await
        .unwrap()
        .expect("a last backup");
    assert!(last.ok && last.files == Some(1), "{last:?}");
    assert!(!data.join("disks/bob.ext4").exists(), "and its file system");
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    assert!(
        !mounts.contains(&workspace.display().to_string()),
        "nothing of it stays mounted"
    );
    let refused = undelete(root.clone()).await;
    refused.assert_status(StatusCode::CONFLICT);
    assert!(
        refused.json()["message"]
            .as_str()
            .unwrap()
            .contains("cannot come back"),
        "{}",
        refused.json()
    );
    let audit = app.store.audit_log(50).await.unwrap();
    for action in ["user.delete", "user.undelete", "user.purge"] {
        assert!(
            audit
                .iter()
                .any(|e| e.action == action && e.target == format!("user:{bob_id}")),
            "{action} is audited"
        );
    }
}
