//! Activity: traffic, heartbeats, the sampler's readings and the usage they add up to.

use super::*;
use app::domain::presence::Beat;
use app::domain::usage;

/// One reading of a session's GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GpuSample {
    pub memory_used_mib: u64,
    pub utilization_pct: u32,
}

impl Store {
    /// Proxied traffic; `api` when a script with a token made it rather than a browser.
    pub async fn touch_traffic(&self, session_id: &str, at: i64, api: bool) -> Result<()> {
        let sql = if api {
            "UPDATE sessions SET last_api_at = $1 WHERE id = $2"
        } else {
            "UPDATE sessions SET last_activity_at = $1 WHERE id = $2 AND last_activity_at < $1"
        };
        sqlx::query(sql)
            .bind(at)
            .bind(session_id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// A heartbeat from a visible page, or (`left`) from one that has just gone out of sight;
    /// `input` when the person did something since the last one.
    pub async fn heartbeat(&self, session_id: &str, at: i64, beat: Beat) -> Result<()> {
        let page = if beat.left {
            "page_left_at"
        } else {
            "last_heartbeat_at"
        };
        let input = if beat.input {
            ", last_input_at = $1"
        } else {
            ""
        };
        let sql =
            format!("UPDATE sessions SET {page} = $1{input} WHERE id = $2 AND state <> 'ended'");
        sqlx::query(&sql)
            .bind(at)
            .bind(session_id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// What the sampler saw: `busy_at` when a kernel or the GPU was working, and the GPU's
    /// reading where the runtime sees it (kept as the latest, and added to the session's sums).
    pub async fn record_sample(
        &self,
        session_id: &str,
        busy_at: Option<i64>,
        gpu: Option<GpuSample>,
    ) -> Result<()> {
        sqlx::query(
            "UPDATE sessions SET last_busy_at = COALESCE($1, last_busy_at), gpu_used_mib = $2,
             gpu_samples = gpu_samples + $3, gpu_util_sum = gpu_util_sum + $4,
             gpu_mib_sum = gpu_mib_sum + COALESCE($2, 0), gpu_util_pct = $5 WHERE id = $6",
        )
        .bind(busy_at)
        .bind(gpu.map(|g| g.memory_used_mib as i64))
        .bind(i64::from(gpu.is_some()))
        .bind(gpu.map_or(0, |g| i64::from(g.utilization_pct)))
        .bind(gpu.map(|g| i64::from(g.utilization_pct)))
        .bind(session_id)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Keeps a session's reading as its minute's row: the highest of the minute's samples.
    /// CASE rather than GREATEST/MAX, which the two databases spell apart.
    pub async fn record_reading(&self, session_id: &str, reading: &usage::Reading) -> Result<()> {
        let higher = |column: &str| {
            format!(
                "{column} = CASE WHEN session_samples.{column} IS NULL OR excluded.{column} > session_samples.{column} \
                 THEN excluded.{column} ELSE session_samples.{column} END"
            )
        };
        let sets = ["gpu_mib", "gpu_util_pct", "cpu_milli", "ram_mib", "busy"]
            .map(higher)
            .join(", ");
        sqlx::query(&format!(
            "INSERT INTO session_samples (session_id, at, gpu_mib, gpu_util_pct, cpu_milli, ram_mib, busy)
             VALUES ($1, $2, $3, $4, $5, $6, $7)
             ON CONFLICT (session_id, at) DO UPDATE SET {sets}"
        ))
        .bind(session_id)
        .bind(usage::minute_of(reading.at_ms))
        .bind(reading.gpu_mib.map(|v| v as i64))
        .bind(reading.gpu_util_pct.map(i64::from))
        .bind(reading.cpu_milli.map(i64::from))
        .bind(reading.ram_mib.map(|v| v as i64))
        .bind(i64::from(reading.busy))
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// A session's minutes from `since_ms` on, oldest first.
    pub async fn readings_since(
        &self,
        session_id: &str,
        since_ms: i64,
    ) -> Result<Vec<usage::Reading>> {
        let rows = sqlx::query(
            "SELECT at, gpu_mib, gpu_util_pct, cpu_milli, ram_mib, busy FROM session_samples
             WHERE session_id = $1 AND at >= $2 ORDER BY at",
        )
        .bind(session_id)
        .bind(since_ms)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(usage::Reading {
                    at_ms: r.try_get("at")?,
                    gpu_mib: r.try_get::<Option<i64>, _>("gpu_mib")?.map(|v| v as u64),
                    gpu_util_pct: r
                        .try_get::<Option<i64>, _>("gpu_util_pct")?
                        .map(|v| v as u32),
                    cpu_milli: r.try_get::<Option<i64>, _>("cpu_milli")?.map(|v| v as u32),
                    ram_mib: r.try_get::<Option<i64>, _>("ram_mib")?.map(|v| v as u64),
                    busy: r.try_get::<i64, _>("busy")? != 0,
                })
            })
            .collect()
    }

    /// Forgets the readings older than `before_ms` (`history.retention_days`); how many went.
    pub async fn prune_readings(&self, before_ms: i64) -> Result<u64> {
        Ok(sqlx::query("DELETE FROM session_samples WHERE at < $1")
            .bind(before_ms)
            .execute(&self.pool)
            .await?
            .rows_affected())
    }

    /// What [`usage::per_day`] counts from `since_ms` to `now_ms`, of one user or of everyone:
    /// the sessions there in the window, and per day (its start) the slice MiB summed over the
    /// minutes a session was busy.
    pub async fn usage_spans(
        &self,
        user_id: Option<&str>,
        since_ms: i64,
        now_ms: i64,
    ) -> Result<(Vec<usage::Span>, Vec<(i64, i64)>)> {
        let whose = if user_id.is_some() {
            "AND s.user_id = $3"
        } else {
            ""
        };
        let spans_sql = format!(
            "SELECT s.created_at, s.ready_at, s.ended_at, s.slice_mib, s.queued_at FROM sessions s
             WHERE s.created_at <= $1 AND (s.ended_at IS NULL OR s.ended_at >= $2) {whose}"
        );
        let mut spans = sqlx::query(&spans_sql).bind(now_ms).bind(since_ms);
        if let Some(user_id) = user_id {
            spans = spans.bind(user_id);
        }
        let spans = spans
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(|r| {
                Ok(usage::Span {
                    created_at: r.try_get("created_at")?,
                    ready_at: r.try_get("ready_at")?,
                    ended_at: r.try_get("ended_at")?,
                    slice_mib: r.try_get::<i64, _>("slice_mib")? as u64,
                    queued_at: r.try_get("queued_at")?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let busy_sql = format!(
            "SELECT r.at / {day} AS day, CAST(SUM(s.slice_mib) AS BIGINT) AS mib
             FROM session_samples r JOIN sessions s ON s.id = r.session_id
             WHERE r.busy = 1 AND r.at <= $1 AND r.at >= $2 {whose} GROUP BY r.at / {day}",
            day = usage::DAY_MS
        );
        let mut busy = sqlx::query(&busy_sql).bind(now_ms).bind(since_ms);
        if let Some(user_id) = user_id {
            busy = busy.bind(user_id);
        }
        let busy = busy
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(|r| {
                Ok((
                    r.try_get::<i64, _>("day")? * usage::DAY_MS,
                    r.try_get("mib")?,
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok((spans, busy))
    }

    // ---- extend ----
}
