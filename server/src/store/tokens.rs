//! API tokens: made, listed, revoked, and the owner a token's hash names.

use super::*;

impl Store {
    /// Keeps a new token's hash; returns the token's id.
    pub async fn create_token(
        &self,
        user_id: &str,
        token_hash: &str,
        label: &str,
        scopes: Scopes,
        expires_at: Option<i64>,
    ) -> Result<String> {
        let now = self.now();
        let id = new_id();
        let mut w = self.begin_write().await?;
        sqlx::query(
            "INSERT INTO api_tokens (id, user_id, token_hash, label, scopes, created_at, expires_at) VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(&id)
        .bind(user_id)
        .bind(token_hash)
        .bind(label)
        .bind(scopes.to_string())
        .bind(now)
        .bind(expires_at)
        .execute(&mut *w.tx)
        .await?;
        insert_audit(
            &mut w,
            Some(user_id),
            "token.create",
            &format!("user:{user_id}"),
            &format!("{label} ({scopes})"),
            now,
        )
        .await?;
        w.commit().await?;
        Ok(id)
    }

    /// A user's tokens, newest first (their hashes stay here).
    pub async fn tokens_of(&self, user_id: &str) -> Result<Vec<TokenRecord>> {
        let rows = sqlx::query(
            "SELECT id, label, scopes, created_at, expires_at FROM api_tokens WHERE user_id = $1 ORDER BY created_at DESC, id",
        )
        .bind(user_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(TokenRecord {
                    id: r.try_get("id")?,
                    label: r.try_get("label")?,
                    scopes: scopes_of(r)?,
                    created_at: r.try_get("created_at")?,
                    expires_at: r.try_get("expires_at")?,
                })
            })
            .collect()
    }

    /// Deletes the user's token `token_id`; false when the user has no such token.
    pub async fn revoke_token(&self, user_id: &str, token_id: &str) -> Result<bool> {
        let mut w = self.begin_write().await?;
        let done = sqlx::query("DELETE FROM api_tokens WHERE id = $1 AND user_id = $2")
            .bind(token_id)
            .bind(user_id)
            .execute(&mut *w.tx)
            .await?;
        if done.rows_affected() == 0 {
            return Ok(false);
        }
        insert_audit(
            &mut w,
            Some(user_id),
            "token.revoke",
            &format!("token:{token_id}"),
            "",
            self.now(),
        )
        .await?;
        w.commit().await?;
        Ok(true)
    }

    /// The user of an unexpired token, what the token may do and when it expires.
    pub async fn user_by_token_hash(&self, token_hash: &str) -> Result<Option<TokenOwner>> {
        let columns = USER_COLUMNS.replace("id,", "u.id,");
        let row = sqlx::query(&format!(
            "SELECT {columns}, t.scopes, t.expires_at FROM api_tokens t JOIN users u ON u.id = t.user_id
             WHERE t.token_hash = $1 AND (t.expires_at IS NULL OR t.expires_at > $2)"
        ))
        .bind(token_hash)
        .bind(self.now())
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| {
            Ok(TokenOwner {
                user: UserRecord::from_row(&r)?,
                scopes: scopes_of(&r)?,
                expires_at: r.try_get("expires_at")?,
            })
        })
        .transpose()
    }

    // ---- credits ----
}
