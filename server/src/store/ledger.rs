//! Credits: grants, asks, balances and the ledger's rows, each a signed amount of one kind.

use super::*;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LedgerKind {
    Grant,
    Hold,
    Charge,
    Refund,
    Adjust,
}

impl LedgerKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Grant => "grant",
            Self::Hold => "hold",
            Self::Charge => "charge",
            Self::Refund => "refund",
            Self::Adjust => "adjust",
        }
    }
}

impl Store {
    pub async fn grant(
        &self,
        user_id: &str,
        amount: i64,
        actor_id: Option<&str>,
        note: &str,
    ) -> Result<i64> {
        let now = self.now();
        let mut w = self.begin_write().await?;
        self.lock_user(&mut w, user_id).await?;
        // Taking credits back stops at zero: the balance is what launches spend.
        if amount < 0 {
            let balance = balance_in(&mut w, user_id).await?;
            if balance + amount < 0 {
                return Err(StoreError::InsufficientCredits {
                    balance,
                    needed: -amount,
                });
            }
        }
        let kind = if amount >= 0 {
            LedgerKind::Grant
        } else {
            LedgerKind::Adjust
        };
        insert_ledger(&mut w, user_id, kind, amount, None, note, now).await?;
        if amount > 0 {
            // A grant answers what the user asked for, whatever its amount.
            answer_credit_request(&mut w, user_id).await?;
        }
        insert_audit(
            &mut w,
            actor_id,
            "credits.grant",
            &format!("user:{user_id}"),
            &grant_detail(amount, note),
            now,
        )
        .await?;
        let balance = balance_in(&mut w, user_id).await?;
        w.commit().await?;
        Ok(balance)
    }

    /// What each of the user's sessions held and was charged (milli-credits, both positive), by
    /// session; only `session_id`'s when given.
    pub async fn session_costs(
        &self,
        user_id: &str,
        session_id: Option<&str>,
    ) -> Result<std::collections::HashMap<String, (i64, i64)>> {
        let one = if session_id.is_some() {
            " AND session_id = $2"
        } else {
            ""
        };
        let sql = format!(
            "SELECT session_id, kind, CAST(SUM(-amount) AS BIGINT) AS total FROM credit_ledger
             WHERE user_id = $1 AND session_id IS NOT NULL AND kind IN ('hold', 'charge'){one}
             GROUP BY session_id, kind"
        );
        let mut query = sqlx::query(&sql).bind(user_id);
        if let Some(session_id) = session_id {
            query = query.bind(session_id);
        }
        let rows = query.fetch_all(&self.pool).await?;
        let mut costs = std::collections::HashMap::<String, (i64, i64)>::new();
        for row in &rows {
            let id: String = row.try_get("session_id")?;
            let kind: String = row.try_get("kind")?;
            let total: i64 = row.try_get("total")?;
            let entry = costs.entry(id).or_default();
            match kind.as_str() {
                "hold" => entry.0 += total,
                _ => entry.1 += total,
            }
        }
        Ok(costs)
    }

    /// (balance, held): the ledger sum, and what live sessions hold of it.
    /// Records the user's ask for `amount` milli-credits, replacing an earlier one; audited.
    pub async fn ask_credits(&self, user_id: &str, amount: i64, note: &str) -> Result<()> {
        let now = self.now();
        let mut w = self.begin_write().await?;
        sqlx::query(
            "UPDATE users SET credit_request_amount = $1, credit_request_note = $2, credit_request_at = $3 WHERE id = $4",
        )
        .bind(amount)
        .bind(note)
        .bind(now)
        .bind(user_id)
        .execute(&mut *w.tx)
        .await?;
        insert_audit(
            &mut w,
            Some(user_id),
            "credits.ask",
            &format!("user:{user_id}"),
            &grant_detail(amount, note),
            now,
        )
        .await?;
        w.commit().await?;
        Ok(())
    }

    /// Closes the user's open ask without a grant: withdrawn by them (`actor_id` is theirs) or
    /// declined by an admin; audited as which. Whether there was one to close.
    pub async fn close_credit_request(&self, user_id: &str, actor_id: &str) -> Result<bool> {
        let now = self.now();
        let mut w = self.begin_write().await?;
        let open = sqlx::query(
            "SELECT credit_request_amount FROM users WHERE id = $1 AND credit_request_amount IS NOT NULL",
        )
        .bind(user_id)
        .fetch_optional(&mut *w.tx)
        .await?;
        let Some(open) = open else {
            return Ok(false);
        };
        let amount: i64 = open.try_get("credit_request_amount")?;
        answer_credit_request(&mut w, user_id).await?;
        let action = if actor_id == user_id {
            "credits.ask_withdrawn"
        } else {
            "credits.ask_declined"
        };
        insert_audit(
            &mut w,
            Some(actor_id),
            action,
            &format!("user:{user_id}"),
            &grant_detail(amount, ""),
            now,
        )
        .await?;
        w.commit().await?;
        Ok(true)
    }

    /// The user's open ask for credits.
    pub async fn credit_request(&self, user_id: &str) -> Result<Option<app::model::CreditRequest>> {
        let row = sqlx::query(
            "SELECT credit_request_amount, credit_request_note, credit_request_at FROM users WHERE id = $1",
        )
        .bind(user_id)
        .fetch_optional(&self.pool)
        .await?;
        match row {
            Some(row) => credit_request_of(&row),
            None => Ok(None),
        }
    }

    /// Milli-credits charged for sessions, all time, everyone.
    pub async fn charged_total(&self) -> Result<i64> {
        let row = sqlx::query(
            "SELECT CAST(COALESCE(SUM(-amount), 0) AS BIGINT) AS charged FROM credit_ledger WHERE kind = 'charge'",
        )
        .fetch_one(&self.pool)
        .await?;
        Ok(row.try_get("charged")?)
    }

    pub async fn credits(&self, user_id: &str) -> Result<(i64, i64)> {
        let row = sqlx::query(
            "SELECT CAST(COALESCE(SUM(amount), 0) AS BIGINT) AS balance FROM credit_ledger WHERE user_id = $1",
        )
        .bind(user_id)
        .fetch_one(&self.pool)
        .await?;
        let balance: i64 = row.try_get("balance")?;
        let row = sqlx::query(
            "SELECT CAST(COALESCE(SUM(-l.amount), 0) AS BIGINT) AS held FROM credit_ledger l
             JOIN sessions s ON s.id = l.session_id
             WHERE l.user_id = $1 AND l.kind = 'hold' AND s.state <> 'ended'",
        )
        .bind(user_id)
        .fetch_one(&self.pool)
        .await?;
        Ok((balance, row.try_get("held")?))
    }

    /// The user's newest `limit` ledger lines, newest first.
    pub async fn recent_ledger(&self, user_id: &str, limit: i64) -> Result<Vec<LedgerEntry>> {
        let rows = sqlx::query(
            "SELECT kind, amount, session_id, note, at FROM credit_ledger WHERE user_id = $1 ORDER BY id DESC LIMIT $2",
        )
        .bind(user_id)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(LedgerEntry::from_row).collect()
    }

    /// The user's ledger from `since_ms` on, `(at, amount)`, and the balance before it (None
    /// when nothing came before: a new account): a balance line over recent days without
    /// reading the whole history.
    pub async fn ledger_since(
        &self,
        user_id: &str,
        since_ms: i64,
    ) -> Result<(Option<i64>, Vec<(i64, i64)>)> {
        let before = sqlx::query(
            "SELECT CAST(COALESCE(SUM(amount), 0) AS BIGINT) AS balance, CAST(COUNT(*) AS BIGINT) AS lines FROM credit_ledger WHERE user_id = $1 AND at < $2",
        )
        .bind(user_id)
        .bind(since_ms)
        .fetch_one(&self.pool)
        .await?;
        let before = (before.try_get::<i64, _>("lines")? > 0)
            .then(|| before.try_get("balance"))
            .transpose()?;
        let rows = sqlx::query(
            "SELECT at, amount FROM credit_ledger WHERE user_id = $1 AND at >= $2 ORDER BY id",
        )
        .bind(user_id)
        .bind(since_ms)
        .fetch_all(&self.pool)
        .await?;
        let lines = rows
            .iter()
            .map(|r| Ok((r.try_get("at")?, r.try_get("amount")?)))
            .collect::<Result<_>>()?;
        Ok((before, lines))
    }

    pub async fn ledger(&self, user_id: &str) -> Result<Vec<LedgerEntry>> {
        let rows = sqlx::query(
            "SELECT kind, amount, session_id, note, at FROM credit_ledger WHERE user_id = $1 ORDER BY id",
        )
        .bind(user_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(LedgerEntry::from_row).collect()
    }

    // ---- pool ----
}

/// The open ask for credits in a row of `users`, if there is one.
pub(crate) fn credit_request_of(
    row: &sqlx::any::AnyRow,
) -> Result<Option<app::model::CreditRequest>> {
    let amount: Option<i64> = row.try_get("credit_request_amount")?;
    Ok(match amount {
        Some(amount) => Some(app::model::CreditRequest {
            amount,
            note: row
                .try_get::<Option<String>, _>("credit_request_note")?
                .unwrap_or_default(),
            at_ms: row
                .try_get::<Option<i64>, _>("credit_request_at")?
                .unwrap_or_default(),
        }),
        None => None,
    })
}

pub(super) async fn answer_credit_request(w: &mut WriteTx, user_id: &str) -> Result<()> {
    sqlx::query(
        "UPDATE users SET credit_request_amount = NULL, credit_request_note = NULL, credit_request_at = NULL WHERE id = $1",
    )
    .bind(user_id)
    .execute(&mut *w.tx)
    .await?;
    Ok(())
}

/// A grant's audit line: the amount as the pages write it, and its note.
pub(super) fn grant_detail(amount: i64, note: &str) -> String {
    let sign = if amount > 0 { "+" } else { "" };
    let amount = app::domain::credits::with_unit(amount);
    match note.trim() {
        "" => format!("{sign}{amount}"),
        note => format!("{sign}{amount}: {note}"),
    }
}
