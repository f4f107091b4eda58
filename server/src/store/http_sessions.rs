//! tower-sessions' store, in the same database as everything else.
//!
//! A row is keyed by a hash of the sign-in's id, never the id itself: whoever reads the database
//! (a backup, a copy of the file) finds nothing to sign in with.

use super::{Store, now_ms};
use sqlx::Row;
use tower_sessions::session::{Id, Record};
use tower_sessions::session_store::{self, SessionStore};

#[derive(Clone)]
pub struct HttpSessionStore {
    store: Store,
}

impl std::fmt::Debug for HttpSessionStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HttpSessionStore")
    }
}

impl HttpSessionStore {
    pub fn new(store: Store) -> Self {
        HttpSessionStore { store }
    }

    /// The row key of the sign-in whose cookie holds `id`.
    pub fn key_of(id: &str) -> String {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(
            format!("sandbox-sign-in:{id}").as_bytes(),
        ))
    }

    /// Removes expired sessions; run now and then.
    pub async fn delete_expired(&self) -> Result<u64, sqlx::Error> {
        let done = sqlx::query("DELETE FROM http_sessions WHERE expires_at < $1")
            .bind(now_ms() / 1000)
            .execute(self.store.pool_handle())
            .await?;
        Ok(done.rows_affected())
    }
}

fn backend(e: sqlx::Error) -> session_store::Error {
    session_store::Error::Backend(e.to_string())
}

#[async_trait::async_trait]
impl SessionStore for HttpSessionStore {
    async fn save(&self, record: &Record) -> session_store::Result<()> {
        let data = serde_json::to_string(&record.data)
            .map_err(|e| session_store::Error::Encode(e.to_string()))?;
        let pool = self.store.pool_handle();
        sqlx::query(
            "INSERT INTO http_sessions (id, data, expires_at) VALUES ($1, $2, $3)
             ON CONFLICT (id) DO UPDATE SET data = $2, expires_at = $3",
        )
        .bind(Self::key_of(&record.id.to_string()))
        .bind(data)
        .bind(record.expiry_date.unix_timestamp())
        .execute(pool)
        .await
        .map_err(backend)?;
        Ok(())
    }

    async fn load(&self, id: &Id) -> session_store::Result<Option<Record>> {
        let row = sqlx::query(
            "SELECT data, expires_at FROM http_sessions WHERE id = $1 AND expires_at > $2",
        )
        .bind(Self::key_of(&id.to_string()))
        .bind(now_ms() / 1000)
        .fetch_optional(self.store.pool_handle())
        .await
        .map_err(backend)?;
        let Some(row) = row else { return Ok(None) };
        let data: String = row.try_get("data").map_err(backend)?;
        let expires_at: i64 = row.try_get("expires_at").map_err(backend)?;
        Ok(Some(Record {
            id: *id,
            data: serde_json::from_str(&data)
                .map_err(|e| session_store::Error::Decode(e.to_string()))?,
            expiry_date: time::OffsetDateTime::from_unix_timestamp(expires_at)
                .map_err(|e| session_store::Error::Decode(e.to_string()))?,
        }))
    }

    async fn delete(&self, id: &Id) -> session_store::Result<()> {
        sqlx::query("DELETE FROM http_sessions WHERE id = $1")
            .bind(Self::key_of(&id.to_string()))
            .execute(self.store.pool_handle())
            .await
            .map_err(backend)?;
        Ok(())
    }
}
