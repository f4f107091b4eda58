//! Accounts: making, naming, locking and deleting users, their roles and passwords, and the
//! rule that keeps one admin who can sign in.

use super::*;

impl Store {
    /// Creates a user with their starting grant, audited, in one transaction.
    pub async fn create_user(
        &self,
        name: &str,
        password_hash: Option<&str>,
        role: Role,
        initial_grant: i64,
        actor_id: Option<&str>,
    ) -> Result<UserRecord> {
        self.insert_user(
            UserRow {
                name,
                password_hash,
                oidc_subject: None,
                role,
                initial_grant,
                temporary_password: false,
            },
            actor_id,
        )
        .await
    }

    /// Creates a user whose password an admin chose or the server made: they change it at
    /// their first sign-in.
    pub async fn create_user_with_temporary_password(
        &self,
        name: &str,
        password_hash: &str,
        role: Role,
        initial_grant: i64,
        actor_id: Option<&str>,
    ) -> Result<UserRecord> {
        self.insert_user(
            UserRow {
                name,
                password_hash: Some(password_hash),
                oidc_subject: None,
                role,
                initial_grant,
                temporary_password: true,
            },
            actor_id,
        )
        .await
    }

    /// Sets a local account's password, audited: `temporary` when an admin set it (changed at
    /// the next sign-in), else the person's own. A deleted account is not found.
    pub async fn set_password(
        &self,
        user_id: &str,
        password_hash: &str,
        temporary: bool,
        actor_id: Option<&str>,
    ) -> Result<()> {
        let mut w = self.begin_write().await?;
        let done = sqlx::query(
            "UPDATE users SET password_hash = $1, must_change_password = $2 WHERE id = $3 AND deleted_at IS NULL",
        )
        .bind(password_hash)
        .bind(temporary as i64)
        .bind(user_id)
        .execute(&mut *w.tx)
        .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound("user"));
        }
        let (action, detail) = if temporary {
            ("user.password_reset", "to change at the next sign-in")
        } else {
            ("user.password", "")
        };
        insert_audit(
            &mut w,
            actor_id,
            action,
            &format!("user:{user_id}"),
            detail,
            self.now(),
        )
        .await?;
        w.commit().await?;
        Ok(())
    }

    /// Deletes an account, audited: locked, unlisted, its tokens gone; its row stays for the
    /// ledger, sessions and audit lines that name it, and its name stays taken, so that a new
    /// account of that name never inherits its workspace. Never the last unlocked admin.
    pub async fn delete_user(&self, user_id: &str, actor_id: Option<&str>) -> Result<()> {
        let mut w = self.begin_write().await?;
        if actor_id.is_some() {
            self.keep_an_admin(&mut w, user_id).await?;
        }
        let done = sqlx::query(
            "UPDATE users SET locked = 1, deleted_at = $1 WHERE id = $2 AND deleted_at IS NULL",
        )
        .bind(self.now())
        .bind(user_id)
        .execute(&mut *w.tx)
        .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound("user"));
        }
        sqlx::query("DELETE FROM api_tokens WHERE user_id = $1")
            .bind(user_id)
            .execute(&mut *w.tx)
            .await?;
        insert_audit(
            &mut w,
            actor_id,
            "user.delete",
            &format!("user:{user_id}"),
            "",
            self.now(),
        )
        .await?;
        w.commit().await?;
        Ok(())
    }

    /// Creates the account of an OpenID Connect identity (`<issuer>|<subject>`), without a
    /// password, with the starting grant.
    pub async fn create_oidc_user(
        &self,
        name: &str,
        oidc_subject: &str,
        role: Role,
        initial_grant: i64,
    ) -> Result<UserRecord> {
        self.insert_user(
            UserRow {
                name,
                password_hash: None,
                oidc_subject: Some(oidc_subject),
                role,
                initial_grant,
                temporary_password: false,
            },
            None,
        )
        .await
    }

    pub async fn user_by_oidc_subject(&self, oidc_subject: &str) -> Result<Option<UserRecord>> {
        let row = sqlx::query(&format!(
            "SELECT {USER_COLUMNS} FROM users WHERE oidc_subject = $1"
        ))
        .bind(oidc_subject)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| UserRecord::from_row(&r)).transpose()
    }

    /// Links the single sign-on identity `oidc_subject` to the user, audited.
    pub async fn link_oidc(&self, user_id: &str, oidc_subject: &str) -> Result<()> {
        let mut w = self.begin_write().await?;
        let done = sqlx::query("UPDATE users SET oidc_subject = $1 WHERE id = $2")
            .bind(oidc_subject)
            .bind(user_id)
            .execute(&mut *w.tx)
            .await
            .map_err(|e| on_unique(e, "users_oidc_subject_key", "a user of this identity"))?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound("user"));
        }
        insert_audit(
            &mut w,
            None,
            "user.link",
            &format!("user:{user_id}"),
            oidc_subject,
            self.now(),
        )
        .await?;
        w.commit().await?;
        Ok(())
    }

    /// Changes a user's role, audited with `why`. An admin's change (`actor_id`) never demotes
    /// the last unlocked admin; a demoted user's tokens lose `admin`.
    pub async fn set_role(
        &self,
        user_id: &str,
        role: Role,
        actor_id: Option<&str>,
        why: &str,
    ) -> Result<()> {
        let mut w = self.begin_write().await?;
        if role == Role::User {
            if actor_id.is_some() {
                self.keep_an_admin(&mut w, user_id).await?;
            }
            self.strip_admin_scope(&mut w, user_id).await?;
        }
        let done = sqlx::query("UPDATE users SET role = $1 WHERE id = $2 AND deleted_at IS NULL")
            .bind(role.as_str())
            .bind(user_id)
            .execute(&mut *w.tx)
            .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound("user"));
        }
        insert_audit(
            &mut w,
            actor_id,
            "user.role",
            &format!("user:{user_id}"),
            &format!("{}: {why}", role.as_str()),
            self.now(),
        )
        .await?;
        w.commit().await?;
        Ok(())
    }

    async fn insert_user(&self, user: UserRow<'_>, actor_id: Option<&str>) -> Result<UserRecord> {
        let UserRow {
            name,
            password_hash,
            oidc_subject,
            role,
            initial_grant,
            temporary_password,
        } = user;
        let now = self.now();
        let id = new_id();
        let mut w = self.begin_write().await?;
        sqlx::query(
            "INSERT INTO users (id, name, password_hash, oidc_subject, role, locked, must_change_password, created_at) VALUES ($1, $2, $3, $4, $5, 0, $6, $7)",
        )
        .bind(&id)
        .bind(name)
        .bind(password_hash)
        .bind(oidc_subject)
        .bind(role.as_str())
        .bind(temporary_password as i64)
        .bind(now)
        .execute(&mut *w.tx)
        .await
        .map_err(|e| match on_unique(e, "users_name_key", "a user with this name") {
            StoreError::Db(e) => on_unique(e, "users_oidc_subject_key", "a user of this identity"),
            named => named,
        })?;
        if initial_grant != 0 {
            insert_ledger(
                &mut w,
                &id,
                LedgerKind::Grant,
                initial_grant,
                None,
                "starting grant",
                now,
            )
            .await?;
        }
        let detail = match oidc_subject {
            Some(_) => format!("{} (OpenID Connect)", role.as_str()),
            None => role.as_str().to_string(),
        };
        insert_audit(
            &mut w,
            actor_id,
            "user.create",
            &format!("user:{name}"),
            &detail,
            now,
        )
        .await?;
        w.commit().await?;
        Ok(UserRecord {
            id,
            name: name.to_string(),
            password_hash: password_hash.map(str::to_string),
            role,
            locked: false,
            must_change_password: temporary_password,
            deleted: false,
        })
    }

    pub async fn user_by_name(&self, name: &str) -> Result<Option<UserRecord>> {
        let row = sqlx::query(&format!("SELECT {USER_COLUMNS} FROM users WHERE name = $1"))
            .bind(name)
            .fetch_optional(&self.pool)
            .await?;
        row.map(|r| UserRecord::from_row(&r)).transpose()
    }

    pub async fn user_by_id(&self, id: &str) -> Result<Option<UserRecord>> {
        let row = sqlx::query(&format!("SELECT {USER_COLUMNS} FROM users WHERE id = $1"))
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        row.map(|r| UserRecord::from_row(&r)).transpose()
    }

    pub async fn count_users(&self) -> Result<i64> {
        Ok(sqlx::query("SELECT COUNT(*) AS n FROM users")
            .fetch_one(&self.pool)
            .await?
            .try_get("n")?)
    }

    /// Charges a ready (or parked) session's time only up to `at` when it is settled: nothing ran after it.
    pub async fn charge_until(&self, session_id: &str, at: i64) -> Result<()> {
        let mut w = self.begin_write().await?;
        sqlx::query(
            "UPDATE sessions SET charge_until = $1 WHERE id = $2 AND state IN ('ready', 'parked')",
        )
        .bind(at)
        .bind(session_id)
        .execute(&mut *w.tx)
        .await?;
        w.commit().await?;
        Ok(())
    }

    /// Ready sessions and their editors' addresses.
    pub async fn ready_upstreams(&self) -> Result<std::collections::HashMap<String, String>> {
        let rows = sqlx::query(
            "SELECT id, upstream FROM sessions WHERE state = 'ready' AND upstream IS NOT NULL",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| Ok((r.try_get("id")?, r.try_get("upstream")?)))
            .collect()
    }

    pub async fn locked_user_ids(&self) -> Result<std::collections::HashSet<String>> {
        let rows = sqlx::query("SELECT id FROM users WHERE locked = 1")
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(|r| Ok(r.try_get("id")?)).collect()
    }

    pub async fn set_locked(
        &self,
        user_id: &str,
        locked: bool,
        actor_id: Option<&str>,
    ) -> Result<()> {
        let mut w = self.begin_write().await?;
        if locked && actor_id.is_some() {
            self.keep_an_admin(&mut w, user_id).await?;
        }
        let done = sqlx::query("UPDATE users SET locked = $1 WHERE id = $2 AND deleted_at IS NULL")
            .bind(locked as i64)
            .bind(user_id)
            .execute(&mut *w.tx)
            .await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound("user"));
        }
        let action = if locked { "user.lock" } else { "user.unlock" };
        insert_audit(
            &mut w,
            actor_id,
            action,
            &format!("user:{user_id}"),
            "",
            self.now(),
        )
        .await?;
        w.commit().await?;
        Ok(())
    }

    /// Refuses when `user_id` is the only unlocked admin. On PostgreSQL the admins' rows stay
    /// locked until the transaction ends, so two admins demoting each other at once take turns
    /// and the second sees the first's change (SQLite's writers take turns already).
    async fn keep_an_admin(&self, w: &mut WriteTx, user_id: &str) -> Result<()> {
        let target = sqlx::query("SELECT role, locked FROM users WHERE id = $1")
            .bind(user_id)
            .fetch_optional(&mut *w.tx)
            .await?;
        let Some(target) = target else {
            return Err(StoreError::NotFound("user"));
        };
        let role: String = target.try_get("role")?;
        if role != Role::Admin.as_str() || target.try_get::<i64, _>("locked")? != 0 {
            return Ok(());
        }
        // In one order, so that guards running at once wait rather than deadlock; NO KEY, so that
        // rows referring to the admins (ledger, sessions) can still be written meanwhile.
        let lock = match w.kind {
            DbKind::Postgres => " ORDER BY id FOR NO KEY UPDATE",
            DbKind::Sqlite => "",
        };
        let admins = sqlx::query(&format!(
            "SELECT id FROM users WHERE role = 'admin' AND locked = 0{lock}"
        ))
        .fetch_all(&mut *w.tx)
        .await?;
        let ids: Vec<String> = admins
            .iter()
            .map(|r| r.try_get("id"))
            .collect::<Result<_, _>>()?;
        if ids.iter().any(|id| id == user_id) && ids.len() == 1 {
            return Err(StoreError::LastAdmin);
        }
        Ok(())
    }

    /// Takes `admin` off the user's tokens, so that a later promotion does not revive old ones.
    async fn strip_admin_scope(&self, w: &mut WriteTx, user_id: &str) -> Result<()> {
        let tokens = sqlx::query("SELECT id, scopes FROM api_tokens WHERE user_id = $1")
            .bind(user_id)
            .fetch_all(&mut *w.tx)
            .await?;
        for token in &tokens {
            let scopes = scopes_of(token)?;
            if scopes.allows(app::domain::scope::Scope::Admin) {
                let id: String = token.try_get("id")?;
                sqlx::query("UPDATE api_tokens SET scopes = $1 WHERE id = $2")
                    .bind(scopes.without(app::domain::scope::Scope::Admin).to_string())
                    .bind(id)
                    .execute(&mut *w.tx)
                    .await?;
            }
        }
        Ok(())
    }
}
