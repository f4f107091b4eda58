//! Statements of one write transaction sent together: on SQLite as one string of statements,
//! one round trip to the connection's thread; on PostgreSQL one after another (a prepared
//! statement there holds one statement).
//!
//! On SQLite every write transaction waits for the one before it, and each round trip inside
//! it (a hop to the connection's thread and back, two thread switches) is made while holding
//! the writer lock: in a burst of launches those hops, not the statements' own work, were most
//! of what each launch queued behind. The statements are written as usual, each with its own
//! `$1`, `$2`…; on SQLite their placeholders are numbered on through the string, since its
//! statements share one list of arguments.

use super::{DbKind, Result, WriteTx};
use futures_util::TryStreamExt;
use sqlx::Any;
use sqlx::Either;
use sqlx::any::{AnyArguments, AnyRow};
use sqlx::query::Query;

/// An argument of a statement in a [`Batch`].
pub(super) enum Arg {
    Text(Option<String>),
    Int(Option<i64>),
}

impl From<&str> for Arg {
    fn from(v: &str) -> Arg {
        Arg::Text(Some(v.to_string()))
    }
}

impl From<Option<&str>> for Arg {
    fn from(v: Option<&str>) -> Arg {
        Arg::Text(v.map(str::to_string))
    }
}

impl From<Option<String>> for Arg {
    fn from(v: Option<String>) -> Arg {
        Arg::Text(v)
    }
}

impl From<i64> for Arg {
    fn from(v: i64) -> Arg {
        Arg::Int(Some(v))
    }
}

impl From<Option<i64>> for Arg {
    fn from(v: Option<i64>) -> Arg {
        Arg::Int(v)
    }
}

impl Arg {
    fn bind<'q>(self, q: Query<'q, Any, AnyArguments<'q>>) -> Query<'q, Any, AnyArguments<'q>> {
        match self {
            Arg::Text(v) => q.bind(v),
            Arg::Int(v) => q.bind(v),
        }
    }
}

/// `sql` with `args` bound in order.
fn bound(sql: &str, args: Vec<Arg>) -> Query<'_, Any, AnyArguments<'_>> {
    args.into_iter()
        .fold(sqlx::query(sql), |q, arg| arg.bind(q))
}

/// Writes to run together, in order.
#[derive(Default)]
pub(super) struct Batch {
    statements: Vec<(String, Vec<Arg>)>,
}

impl Batch {
    /// A statement with its arguments, `$1` the first.
    pub(super) fn push(&mut self, sql: impl Into<String>, args: Vec<Arg>) {
        self.statements.push((sql.into(), args));
    }

    /// Runs the statements; returns the rows they changed, all together. The first that fails
    /// stops the rest, and its error is the batch's (the transaction then rolls back).
    pub(super) async fn run(self, w: &mut WriteTx) -> Result<u64> {
        match w.kind {
            DbKind::Sqlite => {
                let (sql, args) = self.joined();
                let query = bound(&sql, args);
                Ok(query.execute(&mut *w.tx).await?.rows_affected())
            }
            DbKind::Postgres => self.run_one_by_one(w).await,
        }
    }

    /// Runs the statements, then `read` (a SELECT) in the same round trip on SQLite: what the
    /// transaction wrote, read back without another hop. Returns the rows the statements
    /// changed and the read's first row.
    pub(super) async fn run_then_read(
        mut self,
        w: &mut WriteTx,
        read: &str,
        args: Vec<Arg>,
    ) -> Result<(u64, Option<AnyRow>)> {
        match w.kind {
            DbKind::Sqlite => {
                let writes = self.statements.len();
                self.push(read, args);
                let (sql, args) = self.joined();
                let query = bound(&sql, args);
                let mut results = sqlx::Executor::fetch_many(&mut *w.tx, query);
                let (mut changed, mut done, mut row) = (0, 0, None);
                while let Some(result) = results.try_next().await? {
                    match result {
                        // SQLite reports a SELECT's changes as the last write's: count only
                        // the writes' own.
                        Either::Left(result) if done < writes => {
                            changed += result.rows_affected();
                            done += 1;
                        }
                        Either::Left(_) => {}
                        Either::Right(found) => {
                            row.get_or_insert(found);
                        }
                    }
                }
                Ok((changed, row))
            }
            DbKind::Postgres => {
                let changed = self.run_one_by_one(w).await?;
                let query = bound(read, args);
                Ok((changed, query.fetch_optional(&mut *w.tx).await?))
            }
        }
    }

    async fn run_one_by_one(self, w: &mut WriteTx) -> Result<u64> {
        let mut changed = 0;
        for (text, args) in self.statements {
            let query = bound(&text, args);
            changed += query.execute(&mut *w.tx).await?.rows_affected();
        }
        Ok(changed)
    }

    /// The statements as one string, their placeholders numbered on, and their arguments.
    fn joined(self) -> (String, Vec<Arg>) {
        let mut sql = String::new();
        let mut args = Vec::new();
        for (text, mine) in self.statements {
            if !sql.is_empty() {
                sql.push_str(";\n");
            }
            sql.push_str(&renumbered(&text, args.len()));
            args.extend(mine);
        }
        (sql, args)
    }
}

/// `sql` with each placeholder `$n` made `$(n + by)`. The statements given to a batch hold no
/// `$` of their own outside placeholders (their text is bound, never written in).
fn renumbered(sql: &str, by: usize) -> String {
    if by == 0 {
        return sql.to_string();
    }
    let mut out = String::with_capacity(sql.len() + 16);
    let mut chars = sql.char_indices().peekable();
    while let Some((_, c)) = chars.next() {
        out.push(c);
        if c != '$' {
            continue;
        }
        let mut n = 0usize;
        let mut digits = false;
        while let Some(&(_, d)) = chars.peek() {
            let Some(v) = d.to_digit(10) else { break };
            n = n * 10 + v as usize;
            digits = true;
            chars.next();
        }
        if digits {
            out.push_str(&(n + by).to_string());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::renumbered;

    #[test]
    fn placeholders_are_numbered_on() {
        assert_eq!(
            renumbered("INSERT INTO t (a, b) VALUES ($1, $12), ($2, $1)", 5),
            "INSERT INTO t (a, b) VALUES ($6, $17), ($7, $6)"
        );
        assert_eq!(renumbered("UPDATE t SET a = $1", 0), "UPDATE t SET a = $1");
        assert_eq!(renumbered("SELECT '$' || $3", 2), "SELECT '$' || $5");
    }
}
