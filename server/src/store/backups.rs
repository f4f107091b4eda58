//! Workspace backups: each user's last run (when, how it went, the last that worked) and the
//! places a repository was opened at.

use super::*;

/// How a user's last backup went.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackupRecord {
    pub user_id: String,
    pub user_name: String,
    /// None: never tried.
    pub attempted_at: Option<i64>,
    pub ok: bool,
    pub message: String,
    pub succeeded_at: Option<i64>,
    pub snapshot_id: Option<String>,
    pub files: Option<i64>,
    pub bytes: Option<i64>,
}

/// One run's result, to record.
#[derive(Clone, Debug)]
pub enum BackupOutcome<'a> {
    Ok {
        snapshot_id: &'a str,
        files: u64,
        bytes: u64,
    },
    Failed(&'a str),
}

const COLUMNS: &str = "u.id AS user_id, u.name AS user_name, b.attempted_at, b.outcome, b.message,
    b.succeeded_at, b.snapshot_id, b.files, b.bytes";

fn from_row(r: &AnyRow) -> Result<BackupRecord> {
    let outcome: Option<String> = r.try_get("outcome")?;
    Ok(BackupRecord {
        user_id: r.try_get("user_id")?,
        user_name: r.try_get("user_name")?,
        attempted_at: r.try_get("attempted_at")?,
        ok: outcome.as_deref() == Some("ok"),
        message: r
            .try_get::<Option<String>, _>("message")?
            .unwrap_or_default(),
        succeeded_at: r.try_get("succeeded_at")?,
        snapshot_id: r.try_get("snapshot_id")?,
        files: r.try_get("files")?,
        bytes: r.try_get("bytes")?,
    })
}

impl Store {
    /// Records `user_id`'s backup run at `at`.
    pub async fn record_backup(
        &self,
        user_id: &str,
        at: i64,
        outcome: BackupOutcome<'_>,
    ) -> Result<()> {
        let mut w = self.begin_write().await?;
        let query = match outcome {
            BackupOutcome::Ok {
                snapshot_id,
                files,
                bytes,
            } => sqlx::query(
                "INSERT INTO workspace_backups
                    (user_id, attempted_at, outcome, message, succeeded_at, snapshot_id, files, bytes)
                 VALUES ($1, $2, 'ok', '', $2, $3, $4, $5)
                 ON CONFLICT (user_id) DO UPDATE SET attempted_at = excluded.attempted_at,
                    outcome = 'ok', message = '', succeeded_at = excluded.succeeded_at,
                    snapshot_id = excluded.snapshot_id, files = excluded.files, bytes = excluded.bytes",
            )
            .bind(user_id)
            .bind(at)
            .bind(snapshot_id)
            .bind(files as i64)
            .bind(bytes as i64),
            BackupOutcome::Failed(message) => sqlx::query(
                "INSERT INTO workspace_backups (user_id, attempted_at, outcome, message)
                 VALUES ($1, $2, 'failed', $3)
                 ON CONFLICT (user_id) DO UPDATE SET attempted_at = excluded.attempted_at,
                    outcome = 'failed', message = excluded.message",
            )
            .bind(user_id)
            .bind(at)
            .bind(message),
        };
        query.execute(&mut *w.tx).await?;
        w.commit().await?;
        Ok(())
    }

    /// Every account that is not deleted, with its last backup (or none), by name.
    pub async fn backup_records(&self) -> Result<Vec<BackupRecord>> {
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM users u LEFT JOIN workspace_backups b ON b.user_id = u.id
             WHERE u.deleted_at IS NULL ORDER BY u.name"
        ))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(from_row).collect()
    }

    /// One user's last backup.
    pub async fn backup_record(&self, user_id: &str) -> Result<Option<BackupRecord>> {
        let row = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM users u LEFT JOIN workspace_backups b ON b.user_id = u.id
             WHERE u.id = $1"
        ))
        .bind(user_id)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(from_row).transpose()
    }

    /// Whether a repository was ever opened at `place`.
    pub async fn backup_repository_used(&self, place: &str) -> Result<bool> {
        let row = sqlx::query("SELECT place FROM backup_repositories WHERE place = $1")
            .bind(place)
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.is_some())
    }

    /// Notes that a repository was opened at `place`.
    pub async fn note_backup_repository(&self, place: &str) -> Result<()> {
        let mut w = self.begin_write().await?;
        sqlx::query(
            "INSERT INTO backup_repositories (place, first_used_at) VALUES ($1, $2)
             ON CONFLICT (place) DO NOTHING",
        )
        .bind(place)
        .bind(self.now())
        .execute(&mut *w.tx)
        .await?;
        w.commit().await?;
        Ok(())
    }
}
