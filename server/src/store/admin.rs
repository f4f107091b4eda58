//! The admin tables: every user, every session, the pool and who holds it, the audit log.
//! Paged, sorted and filtered here, in SQL, from the checked [`Listing`]s of the domain: what
//! a request asked for reaches the database only as bound values.

use super::*;
use app::domain::listing::{
    AuditSort, Listing, Page, SessionFilter, SessionSort, UsagePeriod, UsageSort, UserFilter,
    UserSort, like_pattern,
};
use app::domain::quota::Limits;
use app::model::{AdminGpu, AdminSession, AdminSlot, AdminUser, AuditLine, UsageRow};

/// A value a condition compares with.
enum Value {
    Text(String),
    Int(i64),
}

/// A `WHERE` clause being built: its conditions and their values, numbered from `$1`.
#[derive(Default)]
pub(super) struct Conditions {
    pub(super) clauses: Vec<String>,
    values: Vec<Value>,
}

impl Conditions {
    /// The next value's placeholder.
    pub(super) fn bind(&mut self, value: String) -> String {
        self.values.push(Value::Text(value));
        format!("${}", self.values.len())
    }

    fn bind_int(&mut self, value: i64) -> String {
        self.values.push(Value::Int(value));
        format!("${}", self.values.len())
    }

    fn sql(&self) -> String {
        if self.clauses.is_empty() {
            String::new()
        } else {
            format!("WHERE {}", self.clauses.join(" AND "))
        }
    }

    fn query<'q>(
        &'q self,
        sql: &'q str,
    ) -> sqlx::query::Query<'q, Any, sqlx::any::AnyArguments<'q>> {
        self.values
            .iter()
            .fold(sqlx::query(sql), |query, value| match value {
                Value::Text(text) => query.bind(text),
                Value::Int(n) => query.bind(*n),
            })
    }
}

const USER_COLUMNS: &str =
    "u.id, u.name, u.role, u.locked, u.created_at, u.must_change_password, u.deleted_at,
    u.credit_request_amount, u.credit_request_note, u.credit_request_at,
    q.max_sessions, q.max_gpu_mib, q.max_minutes, q.max_disk_mib,
    CASE WHEN u.oidc_subject IS NULL THEN 0 ELSE 1 END AS sso,
    (SELECT CAST(COALESCE(SUM(l.amount), 0) AS BIGINT) FROM credit_ledger l
      WHERE l.user_id = u.id) AS balance,
    (SELECT CAST(COALESCE(SUM(-l.amount), 0) AS BIGINT) FROM credit_ledger l
      JOIN sessions s ON s.id = l.session_id
      WHERE l.user_id = u.id AND l.kind = 'hold' AND s.state <> 'ended') AS held,
    (SELECT CAST(COUNT(*) AS BIGINT) FROM sessions s
      WHERE s.user_id = u.id AND s.state <> 'ended') AS live";
const ADMIN_SESSION_COLUMNS: &str = "s.id, s.user_id, u.name AS user_name, s.editor, s.slice_mib, \
    g.model AS gpu_model, s.state, s.end_reason, s.detail, s.created_at, s.ends_at, s.ended_at, s.price_per_hour, \
    s.ready_at, s.parked_ms, s.parked_at, \
    (SELECT CAST(COALESCE(SUM(-l.amount), 0) AS BIGINT) FROM credit_ledger l \
      WHERE l.session_id = s.id AND l.kind = 'hold') AS held, \
    (SELECT CAST(COALESCE(SUM(-l.amount), 0) AS BIGINT) FROM credit_ledger l \
      WHERE l.session_id = s.id AND l.kind = 'charge') AS charged";
const ADMIN_SESSIONS_FROM: &str = "FROM sessions s JOIN users u ON u.id = s.user_id \
    LEFT JOIN slots sl ON sl.id = s.slot_id LEFT JOIN gpus g ON g.id = sl.gpu_id";

/// A session's row as the admin pages show it, read at `now`.
fn admin_session_from_row(r: &AnyRow, now: i64) -> Result<AdminSession> {
    let editor: String = r.try_get("editor")?;
    let state: String = r.try_get("state")?;
    let reason: Option<String> = r.try_get("end_reason")?;
    Ok(AdminSession {
        id: r.try_get("id")?,
        user_id: r.try_get("user_id")?,
        user_name: r.try_get("user_name")?,
        editor: EditorKind::parse(&editor).ok_or(bad("editor"))?,
        slice_mib: r.try_get::<i64, _>("slice_mib")? as u64,
        gpu_model: r.try_get("gpu_model")?,
        state: SessionState::parse(&state).ok_or(bad("state"))?,
        end_reason: reason
            .map(|r| EndReason::parse(&r).ok_or(bad("end reason")))
            .transpose()?,
        detail: r.try_get("detail")?,
        created_at_ms: r.try_get("created_at")?,
        ends_at_ms: r.try_get("ends_at")?,
        ended_at_ms: r.try_get("ended_at")?,
        price_per_hour: r.try_get("price_per_hour")?,
        ready_at_ms: r.try_get("ready_at")?,
        held: r.try_get("held")?,
        charged: r.try_get("charged")?,
        parked: app::domain::credits::Parked {
            before_ms: r.try_get("parked_ms")?,
            since: r.try_get("parked_at")?,
        },
        as_of_ms: now,
    })
}

/// `ORDER BY` by `column`, then by `key` so that rows of equal `column` keep one order.
pub(super) fn ordered(column: &str, key: &str, descending: bool) -> String {
    let dir = if descending { "DESC" } else { "ASC" };
    format!("{column} {dir}, {key} {dir}")
}

impl Store {
    /// Users, each with their limits: `defaults` with their overrides.
    pub async fn admin_users(
        &self,
        listing: &Listing<UserSort, UserFilter>,
        defaults: Limits,
    ) -> Result<Page<AdminUser>> {
        let mut c = Conditions::default();
        c.clauses.push(match listing.filter {
            UserFilter::Deleted => "u.deleted_at IS NOT NULL AND u.purged_at IS NULL".into(),
            _ => "u.deleted_at IS NULL".into(),
        });
        if let Some(search) = &listing.search {
            let p = c.bind(self.pattern(search));
            c.clauses
                .push(format!("LOWER(u.name) LIKE {p} ESCAPE '\\'"));
        }
        match listing.filter {
            UserFilter::All => {}
            UserFilter::Admins => c.clauses.push("u.role = 'admin'".into()),
            UserFilter::Users => c.clauses.push("u.role = 'user'".into()),
            UserFilter::Locked => c.clauses.push("u.locked = 1".into()),
            UserFilter::Asking => c.clauses.push("u.credit_request_amount IS NOT NULL".into()),
            UserFilter::Deleted => {}
        }
        let by_name = self.by_name("u.name");
        let order = match listing.sort {
            UserSort::Name => by_name.as_str(),
            UserSort::Created => "u.created_at",
            UserSort::Balance => "balance",
        };
        let order = ordered(order, "u.id", listing.descending);
        let (rows, total) = self
            .page_of(
                &c,
                Table {
                    columns: USER_COLUMNS,
                    from: "FROM users u LEFT JOIN user_quotas q ON q.user_id = u.id",
                    group: None,
                },
                &order,
                listing,
            )
            .await?;
        let items = rows
            .iter()
            .map(|r| {
                let role: String = r.try_get("role")?;
                let overrides = super::quotas::overrides_of(r)?;
                Ok(AdminUser {
                    limits: defaults.with(&overrides),
                    overrides,
                    id: r.try_get("id")?,
                    name: r.try_get("name")?,
                    role: Role::parse(&role).ok_or(bad("role"))?,
                    locked: r.try_get::<i64, _>("locked")? != 0,
                    single_sign_on: r.try_get::<i64, _>("sso")? != 0,
                    must_change_password: r.try_get::<i64, _>("must_change_password")? != 0,
                    balance: r.try_get("balance")?,
                    held: r.try_get("held")?,
                    live_sessions: r.try_get::<i64, _>("live")? as u32,
                    created_at_ms: r.try_get("created_at")?,
                    is_you: false,
                    credit_request: super::credit_request_of(r)?,
                    // When it was deleted, until the service adds the grace period.
                    storage_removed_at_ms: r.try_get("deleted_at")?,
                })
            })
            .collect::<Result<_>>()?;
        Ok(page(items, listing, total))
    }

    pub async fn admin_sessions(
        &self,
        listing: &Listing<SessionSort, SessionFilter>,
    ) -> Result<Page<AdminSession>> {
        let mut c = Conditions::default();
        if let Some(search) = &listing.search {
            let name = c.bind(self.pattern(search));
            let id = c.bind(search.clone());
            c.clauses.push(format!(
                "(LOWER(u.name) LIKE {name} ESCAPE '\\' OR s.id = {id})"
            ));
        }
        match listing.filter {
            SessionFilter::All => {}
            SessionFilter::Live => c.clauses.push("s.state <> 'ended'".into()),
            SessionFilter::Ended => c.clauses.push("s.state = 'ended'".into()),
            SessionFilter::State(state) => {
                let p = c.bind(state.as_str().to_string());
                c.clauses.push(format!("s.state = {p}"));
            }
        }
        let by_name = self.by_name("u.name");
        let order = match listing.sort {
            SessionSort::Created => "s.created_at",
            SessionSort::User => by_name.as_str(),
            SessionSort::State => "s.state",
        };
        let order = ordered(order, "s.id", listing.descending);
        let (rows, total) = self
            .page_of(
                &c,
                Table {
                    columns: ADMIN_SESSION_COLUMNS,
                    from: ADMIN_SESSIONS_FROM,
                    group: None,
                },
                &order,
                listing,
            )
            .await?;
        let now = self.now();
        let items = rows
            .iter()
            .map(|r| admin_session_from_row(r, now))
            .collect::<Result<_>>()?;
        Ok(page(items, listing, total))
    }

    pub async fn admin_session(&self, id: &str) -> Result<Option<AdminSession>> {
        let row = sqlx::query(&format!(
            "SELECT {ADMIN_SESSION_COLUMNS} {ADMIN_SESSIONS_FROM} WHERE s.id = $1"
        ))
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref()
            .map(|r| admin_session_from_row(r, self.now()))
            .transpose()
    }

    pub async fn admin_audit(&self, listing: &Listing<AuditSort, ()>) -> Result<Page<AuditLine>> {
        let mut c = Conditions::default();
        if let Some(search) = &listing.search {
            let p = c.bind(self.pattern(search));
            c.clauses.push(format!(
                "(LOWER(e.action) LIKE {p} ESCAPE '\\' OR LOWER(e.target) LIKE {p} ESCAPE '\\'
                  OR LOWER(e.detail) LIKE {p} ESCAPE '\\' OR LOWER(a.name) LIKE {p} ESCAPE '\\'
                  OR e.target IN (SELECT 'user:' || t.id FROM users t WHERE LOWER(t.name) LIKE {p} ESCAPE '\\'))"
            ));
        }
        // The log's ids follow its writes, so they are its order in time.
        let order = if listing.descending {
            "e.id DESC"
        } else {
            "e.id ASC"
        };
        let (rows, total) = self
            .page_of(
                &c,
                Table {
                    columns: "e.id, e.at, a.name AS actor, e.action, e.target, e.detail",
                    from: "FROM audit_events e LEFT JOIN users a ON a.id = e.actor_id",
                    group: None,
                },
                order,
                listing,
            )
            .await?;
        let mut items: Vec<AuditLine> = rows
            .iter()
            .map(|r| {
                let action: String = r.try_get("action")?;
                let detail: String = r.try_get("detail")?;
                Ok(AuditLine {
                    id: r.try_get("id")?,
                    at_ms: r.try_get("at")?,
                    actor: r.try_get("actor")?,
                    detail: legacy_quota_in_words(
                        &action,
                        legacy_grant_in_credits(&action, detail),
                    ),
                    action,
                    target: r.try_get("target")?,
                    target_name: None,
                })
            })
            .collect::<Result<_>>()?;
        // Targets name users by id; the page shows their names.
        let mut ids: Vec<&str> = items
            .iter()
            .filter_map(|line| line.target.strip_prefix("user:"))
            .collect();
        ids.sort_unstable();
        ids.dedup();
        let names = self.user_names(&ids).await?;
        for line in &mut items {
            line.target_name = line
                .target
                .strip_prefix("user:")
                .and_then(|id| names.get(id).cloned());
        }
        Ok(page(items, listing, total))
    }

    /// Each user's use of the GPUs in the period: the sessions there during it, their ready time
    /// within it (weighted by slice size too), the sampler's GPU readings over those sessions,
    /// and the credits charged in it: the ledger's charges, and what the running sessions have
    /// cost so far (`credits::cost_so_far`), which the ledger charges only at their end.
    pub async fn admin_usage(
        &self,
        listing: &Listing<UsageSort, UsagePeriod>,
        now: i64,
    ) -> Result<Page<UsageRow>> {
        let mut c = Conditions::default();
        let since = c.bind_int(listing.filter.since_ms(now));
        let at = c.bind_int(now);
        // Sessions that were there at some time in the period, however long before it they began.
        c.clauses.push(format!(
            "s.created_at <= {at} AND (s.ended_at IS NULL OR s.ended_at >= {since})"
        ));
        if let Some(search) = &listing.search {
            let p = c.bind(self.pattern(search));
            c.clauses
                .push(format!("LOWER(u.name) LIKE {p} ESCAPE '\\'"));
        }
        // Ready time within the period: from the later of readiness and the period's start to
        // the end (or now). CASE rather than GREATEST/MAX, which the two databases spell apart.
        let start = format!("CASE WHEN s.ready_at > {since} THEN s.ready_at ELSE {since} END");
        let end = format!("COALESCE(s.ended_at, {at})");
        let ready = format!(
            "CASE WHEN s.ready_at IS NULL THEN 0 WHEN {end} > {start} THEN {end} - ({start}) ELSE 0 END"
        );
        let charged = running_charged_sql(&at);
        let by_name = self.by_name("u.name");
        let order = match listing.sort {
            UsageSort::Cost => "charged",
            UsageSort::Hours => "mib_ms",
            UsageSort::Name => by_name.as_str(),
        };
        let order = ordered(order, "u.id", listing.descending);
        let columns = format!(
            "u.id, u.name, CAST(COUNT(s.id) AS BIGINT) AS sessions,
             CAST(SUM({ready}) AS BIGINT) AS used_ms,
             CAST(SUM(({ready}) * s.slice_mib) AS BIGINT) AS mib_ms,
             CAST(SUM(s.gpu_samples) AS BIGINT) AS gpu_samples,
             CAST(SUM(s.gpu_util_sum) AS BIGINT) AS gpu_util_sum,
             CAST(SUM(s.gpu_mib_sum) AS BIGINT) AS gpu_mib_sum,
             (SELECT CAST(COALESCE(SUM(-l.amount), 0) AS BIGINT) FROM credit_ledger l
               WHERE l.user_id = u.id AND l.kind = 'charge' AND l.at >= {since}) + {charged} AS charged"
        );
        let (rows, total) = self
            .page_of(
                &c,
                Table {
                    columns: &columns,
                    from: "FROM users u JOIN sessions s ON s.user_id = u.id",
                    group: Some(("u.id, u.name", "u.id")),
                },
                &order,
                listing,
            )
            .await?;
        let items = rows
            .iter()
            .map(|r| {
                let samples: i64 = r.try_get("gpu_samples")?;
                let average = |sum: i64| (samples > 0).then(|| sum / samples);
                Ok(UsageRow {
                    user_id: r.try_get("id")?,
                    user_name: r.try_get("name")?,
                    sessions: r.try_get::<i64, _>("sessions")? as u32,
                    used_ms: r.try_get("used_ms")?,
                    slice_mib_ms: r.try_get("mib_ms")?,
                    charged: r.try_get("charged")?,
                    gpu_utilization_pct: average(r.try_get("gpu_util_sum")?).map(|p| p as u32),
                    gpu_memory_mib: average(r.try_get("gpu_mib_sum")?).map(|m| m as u64),
                })
            })
            .collect::<Result<_>>()?;
        Ok(page(items, listing, total))
    }

    /// The pool per GPU, each slot with the session (and user) or pre-started editor on it.
    pub async fn admin_pool(&self) -> Result<Vec<AdminGpu>> {
        let holders = sqlx::query(
            "SELECT s.id, s.editor, s.state, s.gpu_used_mib, s.gpu_util_pct, u.name FROM sessions s JOIN users u ON u.id = s.user_id
             WHERE s.slot_id IS NOT NULL AND s.state <> 'ended'",
        )
        .fetch_all(&self.pool)
        .await?;
        let mut by_session = std::collections::HashMap::new();
        for r in &holders {
            let editor: String = r.try_get("editor")?;
            let state: String = r.try_get("state")?;
            by_session.insert(
                r.try_get::<String, _>("id")?,
                (
                    r.try_get::<String, _>("name")?,
                    EditorKind::parse(&editor).ok_or(bad("editor"))?,
                    SessionState::parse(&state).ok_or(bad("state"))?,
                    r.try_get::<Option<i64>, _>("gpu_used_mib")?
                        .map(|mib| mib.max(0) as u64),
                    r.try_get::<Option<i64>, _>("gpu_util_pct")?
                        .map(|pct| pct.clamp(0, 100) as u32),
                ),
            );
        }
        let warm: std::collections::HashMap<String, EditorKind> = self
            .warm_editors()
            .await?
            .into_iter()
            .map(|w| (w.id, w.editor))
            .collect();
        Ok(self
            .pool()
            .await?
            .into_iter()
            .map(|(gpu, slots)| AdminGpu {
                id: gpu.id,
                model: gpu.model,
                memory_mib: gpu.memory_mib,
                hold: gpu.hold,
                slots: slots
                    .into_iter()
                    .map(|slot| {
                        let session = slot.session_id.as_ref().and_then(|id| by_session.get(id));
                        let warm_editor = slot.session_id.as_ref().and_then(|id| warm.get(id));
                        AdminSlot {
                            id: slot.id,
                            slice_mib: slot.slice_mib,
                            cores_pct: slot.cores_pct,
                            user_name: session.map(|(name, ..)| name.clone()),
                            editor: session
                                .map(|(_, editor, ..)| *editor)
                                .or(warm_editor.copied()),
                            state: session.map(|(_, _, state, ..)| *state),
                            gpu_used_mib: session.and_then(|(_, _, _, used, _)| *used),
                            gpu_util_pct: session.and_then(|(.., busy)| *busy),
                            holder: slot.session_id,
                        }
                    })
                    .collect(),
            })
            .collect())
    }

    /// The names of the users `ids`, by id.
    pub async fn user_names(
        &self,
        ids: &[&str],
    ) -> Result<std::collections::HashMap<String, String>> {
        if ids.is_empty() {
            return Ok(Default::default());
        }
        let placeholders: Vec<String> = (1..=ids.len()).map(|i| format!("${i}")).collect();
        let sql = format!(
            "SELECT id, name FROM users WHERE id IN ({})",
            placeholders.join(", ")
        );
        let rows = ids
            .iter()
            .fold(sqlx::query(&sql), |q, id| q.bind(*id))
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|r| Ok((r.try_get("id")?, r.try_get("name")?)))
            .collect()
    }

    pub(super) fn pattern(&self, search: &str) -> String {
        like_pattern(search, self.kind == DbKind::Postgres)
    }

    /// Names in one order on both databases: case aside, by code point (PostgreSQL's default
    /// collation would follow the server's locale, which skips punctuation).
    fn by_name(&self, column: &str) -> String {
        match self.kind {
            DbKind::Sqlite => format!("LOWER({column})"),
            DbKind::Postgres => format!("LOWER({column}) COLLATE \"C\""),
        }
    }

    /// One page of `columns` `from` under the conditions, in `order`, and how many rows there
    /// are under them in all.
    pub(super) async fn page_of<S, F>(
        &self,
        c: &Conditions,
        table: Table<'_>,
        order: &str,
        listing: &Listing<S, F>,
    ) -> Result<(Vec<AnyRow>, u64)> {
        let Table {
            columns,
            from,
            group,
        } = table;
        let n = c.values.len();
        let grouped = group.map_or(String::new(), |(by, _)| format!("GROUP BY {by}"));
        let sql = format!(
            "SELECT {columns} {from} {where_} {grouped} ORDER BY {order} LIMIT ${} OFFSET ${}",
            n + 1,
            n + 2,
            where_ = c.sql(),
        );
        let rows = c
            .query(&sql)
            .bind(i64::from(listing.per_page))
            .bind(listing.offset() as i64)
            .fetch_all(&self.pool)
            .await?;
        let counted = group.map_or("*".to_string(), |(_, key)| format!("DISTINCT {key}"));
        let count = format!(
            "SELECT CAST(COUNT({counted}) AS BIGINT) AS n {from} {}",
            c.sql()
        );
        let total = c.query(&count).fetch_one(&self.pool).await?;
        Ok((rows, total.try_get::<i64, _>("n")? as u64))
    }
}

/// What a page of a table reads: its columns, `FROM` and joins, and for a table of groups, its
/// `GROUP BY` and the key that counts them.
pub(super) struct Table<'a> {
    pub(super) columns: &'a str,
    pub(super) from: &'a str,
    pub(super) group: Option<(&'a str, &'a str)>,
}

fn page<T, S, F>(items: Vec<T>, listing: &Listing<S, F>, total: u64) -> Page<T> {
    Page {
        items,
        page: listing.page,
        per_page: listing.per_page,
        total,
    }
}

/// A new account of a CSV file (`app::domain::bulk`), its password hashed already.
pub struct BulkAdd<'a> {
    pub name: &'a str,
    pub password_hash: &'a str,
    pub role: Role,
    /// The configured starting grant, milli-credits.
    pub initial_grant: i64,
    /// The file's grant on top, milli-credits; 0 for none.
    pub credits: i64,
    /// The ledger's note for that grant.
    pub note: &'a str,
    /// Its line in the file, for the audit log.
    pub line: usize,
}

/// A grant of a CSV file to an account that exists.
pub struct BulkGrant<'a> {
    pub user_id: &'a str,
    /// Milli-credits; negative takes back, down to zero.
    pub credits: i64,
    pub note: &'a str,
    pub line: usize,
}

impl Store {
    /// Adds the accounts and makes the grants of a CSV file in one transaction, each audited as
    /// its single twin is (`user.create`, `credits.grant`), with the file's line: all of it, or
    /// nothing (a name taken meanwhile, a balance spent meanwhile). Returns the new accounts' ids
    /// in the order of `adds`.
    pub async fn bulk_users(
        &self,
        adds: &[BulkAdd<'_>],
        grants: &[BulkGrant<'_>],
        actor_id: &str,
    ) -> Result<Vec<String>> {
        let now = self.now();
        let mut w = self.begin_write().await?;
        // Locked in one order, so two files naming the same people take turns.
        let mut locked: Vec<&str> = grants.iter().map(|g| g.user_id).collect();
        locked.sort_unstable();
        for user_id in locked {
            self.lock_user(&mut w, user_id).await?;
        }
        let mut ids = Vec::with_capacity(adds.len());
        for add in adds {
            let id = new_id();
            sqlx::query(
                "INSERT INTO users (id, name, password_hash, oidc_subject, role, locked, must_change_password, created_at) VALUES ($1, $2, $3, NULL, $4, 0, 1, $5)",
            )
            .bind(&id)
            .bind(add.name)
            .bind(add.password_hash)
            .bind(add.role.as_str())
            .bind(now)
            .execute(&mut *w.tx)
            .await
            .map_err(|e| on_unique(e, "users_name_key", "a user with this name"))?;
            if add.initial_grant != 0 {
                insert_ledger(
                    &mut w,
                    &id,
                    LedgerKind::Grant,
                    add.initial_grant,
                    None,
                    "starting grant",
                    now,
                )
                .await?;
            }
            insert_audit(
                &mut w,
                Some(actor_id),
                "user.create",
                &format!("user:{}", add.name),
                &format!("{} (CSV line {})", add.role.as_str(), add.line),
                now,
            )
            .await?;
            if add.credits > 0 {
                insert_ledger(
                    &mut w,
                    &id,
                    LedgerKind::Grant,
                    add.credits,
                    None,
                    add.note,
                    now,
                )
                .await?;
                insert_audit(
                    &mut w,
                    Some(actor_id),
                    "credits.grant",
                    &format!("user:{id}"),
                    &format!(
                        "{} (CSV line {})",
                        grant_detail(add.credits, add.note),
                        add.line
                    ),
                    now,
                )
                .await?;
            }
            ids.push(id);
        }
        for grant in grants {
            if grant.credits < 0 {
                let balance = balance_in(&mut w, grant.user_id).await?;
                if balance + grant.credits < 0 {
                    return Err(StoreError::InsufficientCredits {
                        balance,
                        needed: -grant.credits,
                    });
                }
            }
            let kind = if grant.credits >= 0 {
                LedgerKind::Grant
            } else {
                LedgerKind::Adjust
            };
            insert_ledger(
                &mut w,
                grant.user_id,
                kind,
                grant.credits,
                None,
                grant.note,
                now,
            )
            .await?;
            if grant.credits > 0 {
                answer_credit_request(&mut w, grant.user_id).await?;
            }
            insert_audit(
                &mut w,
                Some(actor_id),
                "credits.grant",
                &format!("user:{}", grant.user_id),
                &format!(
                    "{} (CSV line {})",
                    grant_detail(grant.credits, grant.note),
                    grant.line
                ),
                now,
            )
            .await?;
        }
        w.commit().await?;
        Ok(ids)
    }

    /// How many people asked for credits and no admin has answered yet.
    pub async fn open_credit_requests(&self) -> Result<i64> {
        Ok(sqlx::query(
            "SELECT CAST(COUNT(*) AS BIGINT) AS n FROM users
             WHERE credit_request_amount IS NOT NULL AND deleted_at IS NULL",
        )
        .fetch_one(&self.pool)
        .await?
        .try_get("n")?)
    }
}

/// Grants audited before their lines named credits kept bare milli-credits (`-98500`): shown as
/// credits too.
fn legacy_grant_in_credits(action: &str, detail: String) -> String {
    match detail.parse::<i64>() {
        Ok(milli) if action == "credits.grant" => {
            let sign = if milli > 0 { "+" } else { "" };
            format!("{sign}{}", app::domain::credits::with_unit(milli))
        }
        _ => detail,
    }
}

/// SQL for what `u.id`'s running sessions have cost so far at `at` (a bound parameter): the twin
/// of `app::domain::credits::cost_so_far` (the minutes begun since ready, rounded up, at the
/// session's price rounded up to the milli-credit, never more than its holds), so that sorting
/// by cost counts them too. A store test keeps the two equal.
fn running_charged_sql(at: &str) -> String {
    let held = "(SELECT COALESCE(SUM(-h.amount), 0) FROM credit_ledger h \
                WHERE h.session_id = r.id AND h.kind = 'hold')";
    // Parked time is not charged: the parks that ended, and the one that runs.
    let parked = format!(
        "(r.parked_ms + CASE WHEN r.parked_at IS NOT NULL AND r.parked_at < {at} \
          THEN {at} - r.parked_at ELSE 0 END)"
    );
    let used = format!("({at} - r.ready_at - {parked})");
    let fee = format!(
        "(CASE WHEN {used} > 0 THEN (r.price_per_hour * (({used} + 59999) / 60000) + 59) / 60 ELSE 0 END)"
    );
    format!(
        "(SELECT CAST(COALESCE(SUM(CASE WHEN {fee} < {held} THEN {fee} ELSE {held} END), 0) AS BIGINT) \
          FROM sessions r WHERE r.user_id = u.id AND r.ended_at IS NULL \
          AND r.ready_at IS NOT NULL AND r.ready_at < {at})"
    )
}

/// Quota changes audited before their lines were words kept Rust's debug text (`Overrides {
/// max_sessions: Some(1), max_gpu_mib: None, .. }`): shown in words too, as
/// `Overrides::describe` writes them now.
fn legacy_quota_in_words(action: &str, detail: String) -> String {
    if action != "quota.set" || !detail.starts_with("Overrides {") {
        return detail;
    }
    let value = |key: &str| -> Option<Option<u64>> {
        let rest = &detail[detail.find(&format!("{key}: "))? + key.len() + 2..];
        if rest.starts_with("None") {
            return Some(None);
        }
        let digits = rest.strip_prefix("Some(")?.split(')').next()?;
        digits.parse().ok().map(Some)
    };
    let read = || -> Option<app::domain::quota::Overrides> {
        Some(app::domain::quota::Overrides {
            max_sessions: value("max_sessions")?.map(|n| n as u32),
            max_gpu_mib: value("max_gpu_mib")?,
            max_minutes: value("max_minutes")?.map(|n| n as u32),
            max_disk_mib: value("max_disk_mib")?,
        })
    };
    match read() {
        Some(overrides) => overrides.describe(),
        None => detail,
    }
}

#[cfg(test)]
mod audit_tests {
    #[test]
    fn a_quota_change_of_old_is_shown_in_words() {
        use super::legacy_quota_in_words as shown;
        let old = "Overrides { max_sessions: Some(1), max_gpu_mib: Some(4096), max_minutes: None, max_disk_mib: None }";
        assert_eq!(
            shown("quota.set", old.into()),
            app::domain::quota::Overrides {
                max_sessions: Some(1),
                max_gpu_mib: Some(4096),
                ..Default::default()
            }
            .describe()
        );
        assert!(!shown("quota.set", old.into()).contains("Some("));
        assert_eq!(
            shown("quota.set", "sessions 1 · GPU memory default".into()),
            "sessions 1 · GPU memory default"
        );
        assert_eq!(
            shown("user.lock", old.into()),
            old,
            "another action's detail"
        );
        let odd = "Overrides { max_sessions: lots }";
        assert_eq!(shown("quota.set", odd.into()), odd, "kept when unreadable");
    }

    #[test]
    fn a_grant_of_old_is_shown_in_credits() {
        use super::legacy_grant_in_credits as shown;
        assert_eq!(shown("credits.grant", "-98500".into()), "-98.5 credits");
        assert_eq!(shown("credits.grant", "1000".into()), "+1 credit");
        assert_eq!(
            shown("credits.grant", "+2 credits: x".into()),
            "+2 credits: x"
        );
        assert_eq!(shown("user.lock", "42".into()), "42");
    }
}
