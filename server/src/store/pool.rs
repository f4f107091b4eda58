//! The pool: the configured cards and their slots, kept in step with the configuration.

use super::*;

/// How long a launch's catalog trusts the cards it read ([`Store::pool_cards`]). A server
/// changes the pool only when it starts ([`Store::sync_pool`], which forgets them at once);
/// this bounds how long a replica offers the sizes another replica's start changed.
pub const CARDS_FRESH_MS: i64 = 5_000;

/// The cards a launch's catalog last read, when, and how many syncs had run before.
#[derive(Default)]
pub(super) struct CardsSeen {
    syncs: u64,
    read_at: Option<i64>,
    cards: Vec<(u64, Vec<u64>)>,
}

impl Store {
    /// Makes the slots table match the configured pool; slots no longer configured are
    /// deactivated (kept while a session still holds them).
    pub async fn sync_pool(&self, gpus: &[GpuSpec], slots: &[SlotSpec]) -> Result<()> {
        let now = self.now();
        let mut w = self.begin_write().await?;
        sqlx::query("UPDATE gpus SET active = 0")
            .execute(&mut *w.tx)
            .await?;
        sqlx::query("UPDATE slots SET active = 0")
            .execute(&mut *w.tx)
            .await?;
        for (ordinal, gpu) in gpus.iter().enumerate() {
            sqlx::query(
                "INSERT INTO gpus (id, model, memory_mib, enforced, hold, ordinal, active)
                 VALUES ($1, $2, $3, $4, $5, $6, 1)
                 ON CONFLICT (id) DO UPDATE
                 SET model = $2, memory_mib = $3, enforced = $4, hold = $5, ordinal = $6, active = 1",
            )
            .bind(&gpu.id)
            .bind(&gpu.model)
            .bind(gpu.memory_mib as i64)
            .bind((gpu.hold != SliceHold::None) as i64)
            .bind(gpu.hold.word())
            .bind(ordinal as i64)
            .execute(&mut *w.tx)
            .await?;
        }
        for slot in slots {
            sqlx::query(
                "INSERT INTO slots (id, gpu_id, slice_mib, cores_pct, session_id, active, updated_at)
                 VALUES ($1, $2, $3, $4, NULL, 1, $5)
                 ON CONFLICT (id) DO UPDATE SET gpu_id = $2, slice_mib = $3, cores_pct = $4, active = 1",
            )
            .bind(&slot.id)
            .bind(&slot.gpu_id)
            .bind(slot.slice_mib as i64)
            .bind(slot.cores_pct as i64)
            .bind(now)
            .execute(&mut *w.tx)
            .await?;
        }
        w.commit().await?;
        let mut seen = self.cards.lock().unwrap_or_else(|e| e.into_inner());
        seen.syncs += 1;
        seen.read_at = None;
        Ok(())
    }

    pub async fn pool(&self) -> Result<Vec<(GpuRecord, Vec<SlotRecord>)>> {
        let gpus = sqlx::query(
            "SELECT id, model, memory_mib, hold FROM gpus WHERE active = 1 ORDER BY ordinal",
        )
        .fetch_all(&self.pool)
        .await?;
        let slots = sqlx::query(&format!(
            "SELECT {SLOT_COLUMNS} FROM slots WHERE active = 1 ORDER BY id"
        ))
        .fetch_all(&self.pool)
        .await?;
        let slots: Vec<SlotRecord> = slots
            .iter()
            .map(SlotRecord::from_row)
            .collect::<Result<_>>()?;
        gpus.iter()
            .map(|g| {
                let gpu = GpuRecord::from_row(g)?;
                let mine = slots
                    .iter()
                    .filter(|s| s.gpu_id == gpu.id)
                    .cloned()
                    .collect();
                Ok((gpu, mine))
            })
            .collect()
    }

    /// Each active card's memory and its active slots' sizes: what a launch's catalog needs (the
    /// sizes offered). Read in one statement of a few rows, and kept for `CARDS_FRESH_MS`: in a
    /// burst of launches every one asked, and the pool changes only when a server starts.
    pub async fn pool_cards(&self) -> Result<Vec<(u64, Vec<u64>)>> {
        let now = self.now();
        let syncs = {
            let seen = self.cards.lock().unwrap_or_else(|e| e.into_inner());
            match seen.read_at {
                Some(at) if (at..at + CARDS_FRESH_MS).contains(&now) => {
                    return Ok(seen.cards.clone());
                }
                _ => seen.syncs,
            }
        };
        let cards = self.read_pool_cards().await?;
        let mut seen = self.cards.lock().unwrap_or_else(|e| e.into_inner());
        // A sync that ran meanwhile may have changed what was read.
        if seen.syncs == syncs {
            seen.read_at = Some(now);
            seen.cards = cards.clone();
        }
        Ok(cards)
    }

    async fn read_pool_cards(&self) -> Result<Vec<(u64, Vec<u64>)>> {
        let rows = sqlx::query(
            "SELECT g.id, g.memory_mib, s.slice_mib, COUNT(*) AS n
             FROM gpus g JOIN slots s ON s.gpu_id = g.id
             WHERE g.active = 1 AND s.active = 1
             GROUP BY g.id, g.memory_mib, s.slice_mib ORDER BY g.id, s.slice_mib",
        )
        .fetch_all(&self.pool)
        .await?;
        let mut cards: Vec<(String, u64, Vec<u64>)> = Vec::new();
        for row in rows {
            let id: String = row.try_get("id")?;
            let memory_mib = row.try_get::<i64, _>("memory_mib")? as u64;
            let slice_mib = row.try_get::<i64, _>("slice_mib")? as u64;
            let n = row.try_get::<i64, _>("n")? as usize;
            match cards.last_mut() {
                Some((last, _, sizes)) if *last == id => {
                    sizes.extend(std::iter::repeat_n(slice_mib, n))
                }
                _ => cards.push((id, memory_mib, vec![slice_mib; n])),
            }
        }
        Ok(cards
            .into_iter()
            .map(|(_, mib, sizes)| (mib, sizes))
            .collect())
    }

    pub async fn slot(&self, id: &str) -> Result<Option<SlotRecord>> {
        let row = sqlx::query(&format!("SELECT {SLOT_COLUMNS} FROM slots WHERE id = $1"))
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        row.map(|r| SlotRecord::from_row(&r)).transpose()
    }

    // ---- sessions ----
}
