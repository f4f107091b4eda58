//! Approved images: added and retired by admins, each change audited.

use super::*;
use app::domain::images::ImageState;
use app::domain::scan::ScanSummary;
use app::model::{ImageView, ScanView};
use std::collections::HashMap;

fn from_row(r: &AnyRow) -> Result<ImageView> {
    let editor: String = r.try_get("editor")?;
    let state: String = r.try_get("state")?;
    let reference: String = r.try_get("reference")?;
    Ok(ImageView {
        id: Some(r.try_get("id")?),
        editor: EditorKind::parse(&editor).ok_or(bad("editor"))?,
        pinned: app::domain::images::is_pinned(&reference),
        reference,
        label: r.try_get("label")?,
        state: ImageState::parse(&state).ok_or(bad("image state"))?,
        added_by: r.try_get("added_by")?,
        created_at_ms: Some(r.try_get("created_at")?),
        scan: None,
        blocked: None,
    })
}

fn scan_from_row(r: &AnyRow) -> Result<(String, ScanView)> {
    let summary: String = r.try_get("summary")?;
    Ok((
        r.try_get("image_id")?,
        ScanView {
            id: r.try_get("id")?,
            summary: serde_json::from_str(&summary).map_err(|_| bad("scan summary"))?,
            posted_at_ms: r.try_get("posted_at")?,
            posted_by: r.try_get("posted_by")?,
        },
    ))
}

const COLUMNS: &str =
    "i.id, i.editor, i.reference, i.label, i.state, a.name AS added_by, i.created_at";
const FROM: &str = "FROM images i LEFT JOIN users a ON a.id = i.added_by";

impl Store {
    /// Every image, approved first, then by editor and label.
    pub async fn images(&self) -> Result<Vec<ImageView>> {
        let sql = format!(
            "SELECT {COLUMNS} {FROM} ORDER BY CASE i.state WHEN 'approved' THEN 0 ELSE 1 END, i.editor, i.label, i.id"
        );
        let rows = sqlx::query(&sql).fetch_all(&self.pool).await?;
        rows.iter().map(from_row).collect()
    }

    pub async fn image(&self, id: &str) -> Result<Option<ImageView>> {
        let sql = format!("SELECT {COLUMNS} {FROM} WHERE i.id = $1");
        let row = sqlx::query(&sql)
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(from_row).transpose()
    }

    /// Adds an approved image; [`StoreError::Duplicate`] when the editor has it already.
    pub async fn add_image(
        &self,
        editor: EditorKind,
        reference: &str,
        label: &str,
        actor_id: &str,
    ) -> Result<String> {
        let now = self.now();
        let id = new_id();
        let mut w = self.begin_write().await?;
        let taken = sqlx::query("SELECT id FROM images WHERE editor = $1 AND reference = $2")
            .bind(editor.as_str())
            .bind(reference)
            .fetch_optional(&mut *w.tx)
            .await?;
        if taken.is_some() {
            return Err(StoreError::Duplicate("that image for this editor"));
        }
        sqlx::query(
            "INSERT INTO images (id, editor, reference, label, state, added_by, created_at)
             VALUES ($1, $2, $3, $4, 'approved', $5, $6)",
        )
        .bind(&id)
        .bind(editor.as_str())
        .bind(reference)
        .bind(label)
        .bind(actor_id)
        .bind(now)
        .execute(&mut *w.tx)
        .await
        .map_err(|e| match e {
            // Another admin added it in the meantime.
            sqlx::Error::Database(d) if d.is_unique_violation() => {
                StoreError::Duplicate("that image for this editor")
            }
            other => other.into(),
        })?;
        insert_audit(
            &mut w,
            Some(actor_id),
            "image.add",
            &format!("image:{id}"),
            &format!("{} {reference} ({label})", editor.as_str()),
            now,
        )
        .await?;
        w.commit().await?;
        Ok(id)
    }

    /// Approves or retires an image; false when it does not exist.
    pub async fn set_image_state(
        &self,
        id: &str,
        state: ImageState,
        actor_id: &str,
    ) -> Result<bool> {
        let now = self.now();
        let mut w = self.begin_write().await?;
        let changed = sqlx::query("UPDATE images SET state = $1 WHERE id = $2")
            .bind(state.as_str())
            .bind(id)
            .execute(&mut *w.tx)
            .await?
            .rows_affected();
        if changed == 0 {
            return Ok(false);
        }
        let action = match state {
            ImageState::Approved => "image.approve",
            ImageState::Retired => "image.retire",
        };
        insert_audit(
            &mut w,
            Some(actor_id),
            action,
            &format!("image:{id}"),
            "",
            now,
        )
        .await?;
        w.commit().await?;
        Ok(true)
    }

    /// Keeps a scanner's report (its summary) on an image; false when the image does not exist.
    pub async fn add_scan(
        &self,
        image_id: &str,
        summary: &ScanSummary,
        actor_id: &str,
    ) -> Result<Option<String>> {
        let now = self.now();
        let id = new_id();
        let json = serde_json::to_string(summary).map_err(|_| bad("scan summary"))?;
        let mut w = self.begin_write().await?;
        let exists = sqlx::query("SELECT id FROM images WHERE id = $1")
            .bind(image_id)
            .fetch_optional(&mut *w.tx)
            .await?;
        if exists.is_none() {
            return Ok(None);
        }
        sqlx::query(
            "INSERT INTO image_scans (id, image_id, scanned_at, posted_at, posted_by, summary)
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(&id)
        .bind(image_id)
        .bind(summary.scanned_at_ms)
        .bind(now)
        .bind(actor_id)
        .bind(&json)
        .execute(&mut *w.tx)
        .await?;
        let found = &summary.found;
        insert_audit(
            &mut w,
            Some(actor_id),
            "image.scan",
            &format!("image:{image_id}"),
            &format!(
                "{} {}: {} critical, {} high, {} medium, {} low ({} critical fixable)",
                summary.format.as_str(),
                summary.scanner,
                found.critical,
                found.high,
                found.medium,
                found.low,
                summary.fixable.critical
            ),
            now,
        )
        .await?;
        w.commit().await?;
        Ok(Some(id))
    }

    /// Each image's newest report, by image id.
    pub async fn latest_scans(&self) -> Result<HashMap<String, ScanView>> {
        let rows = sqlx::query(
            "SELECT s.id, s.image_id, s.posted_at, s.summary, u.name AS posted_by
             FROM image_scans s LEFT JOIN users u ON u.id = s.posted_by
             WHERE s.posted_at = (SELECT MAX(t.posted_at) FROM image_scans t WHERE t.image_id = s.image_id)
             ORDER BY s.posted_at, s.id",
        )
        .fetch_all(&self.pool)
        .await?;
        let mut latest = HashMap::new();
        for row in &rows {
            let (image, scan) = scan_from_row(row)?;
            latest.insert(image, scan);
        }
        Ok(latest)
    }
}
