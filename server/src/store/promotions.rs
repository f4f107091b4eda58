//! Promotions: files on their way to the production registry. Each change of state is one
//! conditional `UPDATE` with its audit line in the same transaction, so two admins deciding,
//! or two servers pushing, cannot both win.

use super::admin::{Conditions, Table, ordered};
use super::*;
use app::domain::listing::{Listing, Page, PromotionSort};
use app::domain::promotion::{Decision, PromotionState};
use app::model::PromotionView;

/// A promotion as requested, its file already copied aside.
#[derive(Clone, Debug)]
pub struct NewPromotion {
    pub id: String,
    pub user_id: String,
    pub session_id: String,
    pub path: String,
    pub repository: String,
    pub tag: String,
    pub media_type: String,
    pub size_bytes: u64,
    pub sha256: String,
    pub image: String,
    pub state: PromotionState,
}

const COLUMNS: &str =
    "p.id, p.user_id, u.name AS user_name, p.session_id, p.path, p.repository, p.tag,
    p.media_type, p.size_bytes, p.sha256, p.image, p.state, p.requested_at,
    d.name AS decided_by, p.decided_at, p.pushed_at, p.digest, p.message";
const FROM: &str =
    "FROM promotions p JOIN users u ON u.id = p.user_id LEFT JOIN users d ON d.id = p.decided_by";

fn from_row(r: &AnyRow) -> Result<PromotionView> {
    let state: String = r.try_get("state")?;
    Ok(PromotionView {
        id: r.try_get("id")?,
        user_id: r.try_get("user_id")?,
        user_name: r.try_get("user_name")?,
        session_id: r.try_get("session_id")?,
        path: r.try_get("path")?,
        repository: r.try_get("repository")?,
        tag: r.try_get("tag")?,
        media_type: r.try_get("media_type")?,
        size_bytes: r.try_get::<i64, _>("size_bytes")? as u64,
        sha256: r.try_get("sha256")?,
        image: r.try_get("image")?,
        state: PromotionState::parse(&state).ok_or(bad("promotion state"))?,
        requested_at_ms: r.try_get("requested_at")?,
        decided_by: r.try_get("decided_by")?,
        decided_at_ms: r.try_get("decided_at")?,
        pushed_at_ms: r.try_get("pushed_at")?,
        digest: r.try_get("digest")?,
        reference: None,
        message: r.try_get("message")?,
    })
}

fn target(id: &str) -> String {
    format!("promotion:{id}")
}

/// What one user's promotions may hold at once before they are pushed or rejected: a count,
/// and the bytes of their copies, which lie on the server's own disk.
#[derive(Clone, Copy, Debug)]
pub struct WaitingLimit {
    pub count: u64,
    pub bytes: u64,
}

impl WaitingLimit {
    /// A limit nothing reaches, for tests of the states.
    pub const NONE: WaitingLimit = WaitingLimit {
        count: u64::MAX,
        bytes: u64::MAX,
    };
}

impl Store {
    /// Records a request, audited as the user's: counted against `limit` under the user's lock,
    /// so that requests at once cannot all pass a count each made before the others wrote.
    pub async fn insert_promotion(&self, p: &NewPromotion, limit: WaitingLimit) -> Result<()> {
        let now = self.now();
        let mut w = self.begin_write().await?;
        self.lock_user(&mut w, &p.user_id).await?;
        let waiting = sqlx::query(
            "SELECT COUNT(*) AS n, CAST(COALESCE(SUM(size_bytes), 0) AS BIGINT) AS bytes
             FROM promotions WHERE user_id = $1 AND state NOT IN ('pushed', 'rejected')",
        )
        .bind(&p.user_id)
        .fetch_one(&mut *w.tx)
        .await?;
        let count = waiting.try_get::<i64, _>("n")? as u64;
        let bytes = waiting.try_get::<i64, _>("bytes")? as u64;
        if count >= limit.count {
            return Err(StoreError::Quota(format!(
                "you have {count} promotions waiting; at most {} may wait at once",
                limit.count
            )));
        }
        if bytes.saturating_add(p.size_bytes) > limit.bytes {
            return Err(StoreError::Quota(format!(
                "the files waiting for promotion would take {} MiB with this one, more than your workspace's {} MiB",
                (bytes + p.size_bytes).div_ceil(1024 * 1024),
                limit.bytes / (1024 * 1024)
            )));
        }
        sqlx::query(
            "INSERT INTO promotions (id, user_id, session_id, path, repository, tag, media_type,
                size_bytes, sha256, image, state, requested_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
        )
        .bind(&p.id)
        .bind(&p.user_id)
        .bind(&p.session_id)
        .bind(&p.path)
        .bind(&p.repository)
        .bind(&p.tag)
        .bind(&p.media_type)
        .bind(p.size_bytes as i64)
        .bind(&p.sha256)
        .bind(&p.image)
        .bind(p.state.as_str())
        .bind(now)
        .execute(&mut *w.tx)
        .await?;
        insert_audit(
            &mut w,
            Some(&p.user_id),
            "promotion.request",
            &target(&p.id),
            &format!("{} as {}:{}", p.path, p.repository, p.tag),
            now,
        )
        .await?;
        w.commit().await?;
        Ok(())
    }

    pub async fn promotion(&self, id: &str) -> Result<Option<PromotionView>> {
        let sql = format!("SELECT {COLUMNS} {FROM} WHERE p.id = $1");
        let row = sqlx::query(&sql)
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(from_row).transpose()
    }

    /// The user's own, newest first.
    pub async fn promotions_of(&self, user_id: &str, limit: i64) -> Result<Vec<PromotionView>> {
        let sql = format!(
            "SELECT {COLUMNS} {FROM} WHERE p.user_id = $1 ORDER BY p.requested_at DESC, p.id DESC LIMIT $2"
        );
        let rows = sqlx::query(&sql)
            .bind(user_id)
            .bind(limit)
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(from_row).collect()
    }

    /// Everyone's, for admins: searched by user, repository, tag or path.
    pub async fn admin_promotions(
        &self,
        listing: &Listing<PromotionSort, Option<PromotionState>>,
    ) -> Result<Page<PromotionView>> {
        let mut c = Conditions::default();
        if let Some(search) = &listing.search {
            let p = c.bind(self.pattern(search));
            c.clauses.push(format!(
                "(LOWER(u.name) LIKE {p} ESCAPE '\\' OR LOWER(p.repository) LIKE {p} ESCAPE '\\'
                  OR LOWER(p.tag) LIKE {p} ESCAPE '\\' OR LOWER(p.path) LIKE {p} ESCAPE '\\')"
            ));
        }
        if let Some(state) = listing.filter {
            let p = c.bind(state.as_str().to_string());
            c.clauses.push(format!("p.state = {p}"));
        }
        let order = match listing.sort {
            PromotionSort::Requested => ordered("p.requested_at", "p.id", listing.descending),
        };
        let (rows, total) = self
            .page_of(
                &c,
                Table {
                    columns: COLUMNS,
                    from: FROM,
                    group: None,
                },
                &order,
                listing,
            )
            .await?;
        Ok(Page {
            items: rows.iter().map(from_row).collect::<Result<_>>()?,
            page: listing.page,
            per_page: listing.per_page,
            total,
        })
    }

    /// Applies an admin's decision if the promotion is still in a state it applies to;
    /// `false` when it is not (another decision came first).
    pub async fn decide_promotion(
        &self,
        id: &str,
        actor_id: &str,
        decision: Decision,
        message: Option<&str>,
    ) -> Result<bool> {
        let now = self.now();
        let from: Vec<String> = PromotionState::decidable(decision)
            .iter()
            .enumerate()
            .map(|(i, _)| format!("${}", i + 6))
            .collect();
        // A retry keeps who approved it (or, where none had to, records who let it go).
        let decided = if decision == Decision::Retry {
            "decided_by = COALESCE(decided_by, $3), decided_at = COALESCE(decided_at, $4)"
        } else {
            "decided_by = $3, decided_at = $4"
        };
        let sql = format!(
            "UPDATE promotions SET state = $1, {decided}, message = $5, claimed_at = NULL
             WHERE id = $2 AND state IN ({})",
            from.join(", ")
        );
        let mut w = self.begin_write().await?;
        let mut query = sqlx::query(&sql)
            .bind(PromotionState::after(decision).as_str())
            .bind(id)
            .bind(actor_id)
            .bind(now)
            .bind(message);
        for state in PromotionState::decidable(decision) {
            query = query.bind(state.as_str());
        }
        if query.execute(&mut *w.tx).await?.rows_affected() == 0 {
            return Ok(false);
        }
        insert_audit(
            &mut w,
            Some(actor_id),
            &format!("promotion.{}", decision.as_str()),
            &target(id),
            message.unwrap_or(""),
            now,
        )
        .await?;
        w.commit().await?;
        Ok(true)
    }

    /// Promotions waiting to be pushed: approved ones, and pushes claimed before
    /// `stale_before_ms` whose server has gone quiet.
    pub async fn pushable_promotions(&self, stale_before_ms: i64) -> Result<Vec<String>> {
        let rows = sqlx::query(
            "SELECT id FROM promotions
             WHERE state = 'approved' OR (state = 'pushing' AND claimed_at < $1)
             ORDER BY requested_at",
        )
        .bind(stale_before_ms)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| Ok(r.try_get::<String, _>("id")?))
            .collect()
    }

    /// Takes a promotion to push it; `None` when another server has it or it is not waiting.
    pub async fn claim_promotion(
        &self,
        id: &str,
        stale_before_ms: i64,
    ) -> Result<Option<PromotionView>> {
        let mut w = self.begin_write().await?;
        let claimed = sqlx::query(
            "UPDATE promotions SET state = 'pushing', claimed_at = $1
             WHERE id = $2 AND (state = 'approved' OR (state = 'pushing' AND claimed_at < $3))",
        )
        .bind(self.now())
        .bind(id)
        .bind(stale_before_ms)
        .execute(&mut *w.tx)
        .await?
        .rows_affected();
        w.commit().await?;
        if claimed == 0 {
            return Ok(None);
        }
        self.promotion(id).await
    }

    /// Marks a push as still running (see [`Store::pushable_promotions`]).
    pub async fn touch_promotion(&self, id: &str) -> Result<()> {
        let mut w = self.begin_write().await?;
        sqlx::query("UPDATE promotions SET claimed_at = $1 WHERE id = $2 AND state = 'pushing'")
            .bind(self.now())
            .bind(id)
            .execute(&mut *w.tx)
            .await?;
        w.commit().await?;
        Ok(())
    }

    /// Records the push's outcome: the manifest's digest, or why it failed.
    pub async fn finish_promotion(
        &self,
        id: &str,
        outcome: std::result::Result<&str, &str>,
    ) -> Result<()> {
        let now = self.now();
        let mut w = self.begin_write().await?;
        let (sql, value, action) = match outcome {
            Ok(digest) => (
                "UPDATE promotions SET state = 'pushed', pushed_at = $1, digest = $2, message = NULL
                 WHERE id = $3 AND state = 'pushing'",
                digest,
                "promotion.push",
            ),
            Err(message) => (
                "UPDATE promotions SET state = 'failed', claimed_at = $1, message = $2
                 WHERE id = $3 AND state = 'pushing'",
                message,
                "promotion.fail",
            ),
        };
        let changed = sqlx::query(sql)
            .bind(now)
            .bind(value)
            .bind(id)
            .execute(&mut *w.tx)
            .await?
            .rows_affected();
        if changed > 0 {
            insert_audit(&mut w, None, action, &target(id), value, now).await?;
        }
        w.commit().await?;
        Ok(())
    }
}
