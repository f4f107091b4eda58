//! The audit log: who did what to which, when.

use super::*;

impl Store {
    pub async fn audit(
        &self,
        actor_id: Option<&str>,
        action: &str,
        target: &str,
        detail: &str,
    ) -> Result<()> {
        let mut w = self.begin_write().await?;
        insert_audit(&mut w, actor_id, action, target, detail, self.now()).await?;
        w.commit().await?;
        Ok(())
    }

    pub async fn audit_log(&self, limit: i64) -> Result<Vec<AuditEntry>> {
        let rows = sqlx::query("SELECT at, actor_id, action, target, detail FROM audit_events ORDER BY id DESC LIMIT $1")
            .bind(limit)
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(AuditEntry::from_row).collect()
    }
}
