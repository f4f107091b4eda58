//! Shared datasets: registered, changed and removed by admins, each change audited; who may use
//! each; and what each session's launch mounted.

use super::*;
use app::domain::datasets::Place;

/// A dataset as the store keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DatasetRecord {
    pub id: String,
    pub name: String,
    pub description: String,
    pub place: Place,
    /// Every user may use it; otherwise those of `users`.
    pub everyone: bool,
    /// The permitted users: (id, name), by name.
    pub users: Vec<(String, String)>,
    pub added_by: Option<String>,
    pub created_at: i64,
}

impl DatasetRecord {
    pub fn user_ids(&self) -> Vec<String> {
        self.users.iter().map(|(id, _)| id.clone()).collect()
    }
}

/// What an admin writes: every field of a dataset.
#[derive(Clone, Debug)]
pub struct DatasetWrite<'a> {
    pub name: &'a str,
    pub description: &'a str,
    pub place: &'a Place,
    pub everyone: bool,
    pub user_ids: &'a [String],
}

impl DatasetWrite<'_> {
    fn place_columns(&self) -> (Option<&str>, Option<&str>) {
        match self.place {
            Place::Path(path) => (Some(path.as_str()), None),
            Place::Claim(claim) => (None, Some(claim.as_str())),
        }
    }

    fn audit_detail(&self, names: &str) -> String {
        let place = match self.place {
            Place::Path(path) => format!("path {path}"),
            Place::Claim(claim) => format!("claim {claim}"),
        };
        let users = if self.everyone { "everyone" } else { names };
        format!("{} at {place}, for {users}", self.name)
    }
}

const NAME_TAKEN: &str = "a dataset of that name";

fn from_row(r: &AnyRow) -> Result<DatasetRecord> {
    let path: Option<String> = r.try_get("host_path")?;
    let claim: Option<String> = r.try_get("claim")?;
    let place = match (path, claim) {
        (Some(path), None) => Place::Path(path),
        (None, Some(claim)) => Place::Claim(claim),
        _ => return Err(bad("dataset place")),
    };
    let everyone: i64 = r.try_get("everyone")?;
    Ok(DatasetRecord {
        id: r.try_get("id")?,
        name: r.try_get("name")?,
        description: r.try_get("description")?,
        place,
        everyone: everyone != 0,
        users: Vec::new(),
        added_by: r.try_get("added_by")?,
        created_at: r.try_get("created_at")?,
    })
}

fn duplicate_name(e: sqlx::Error) -> StoreError {
    on_unique(e, "datasets_name_key", NAME_TAKEN)
}

async fn write_users(w: &mut WriteTx, id: &str, user_ids: &[String]) -> Result<()> {
    sqlx::query("DELETE FROM dataset_users WHERE dataset_id = $1")
        .bind(id)
        .execute(&mut *w.tx)
        .await?;
    for user_id in user_ids {
        sqlx::query("INSERT INTO dataset_users (dataset_id, user_id) VALUES ($1, $2)")
            .bind(id)
            .bind(user_id)
            .execute(&mut *w.tx)
            .await?;
    }
    Ok(())
}

async fn name_taken(w: &mut WriteTx, name: &str, other_than: &str) -> Result<bool> {
    Ok(
        sqlx::query("SELECT id FROM datasets WHERE name = $1 AND id <> $2")
            .bind(name)
            .bind(other_than)
            .fetch_optional(&mut *w.tx)
            .await?
            .is_some(),
    )
}

/// A condition: the user whose id is the SQL expression `user_id` may use a dataset (one for
/// everyone, or one naming them while they are not deleted). What
/// [`Store::may_use_a_dataset`] and the allocator ask.
pub(super) fn may_use_a_dataset(user_id: &str) -> String {
    format!(
        "EXISTS (SELECT 1 FROM datasets d WHERE d.everyone <> 0 OR EXISTS (
           SELECT 1 FROM dataset_users p JOIN users du ON du.id = p.user_id
           WHERE p.dataset_id = d.id AND p.user_id = {user_id} AND du.deleted_at IS NULL))"
    )
}

impl Store {
    /// Every dataset, by name, with the users permitted.
    pub async fn datasets(&self) -> Result<Vec<DatasetRecord>> {
        let rows = sqlx::query(
            "SELECT d.id, d.name, d.description, d.host_path, d.claim, d.everyone, a.name AS added_by, d.created_at
             FROM datasets d LEFT JOIN users a ON a.id = d.added_by ORDER BY d.name",
        )
        .fetch_all(&self.pool)
        .await?;
        let mut datasets: Vec<DatasetRecord> = rows.iter().map(from_row).collect::<Result<_>>()?;
        let permits = sqlx::query(
            "SELECT p.dataset_id, u.id, u.name FROM dataset_users p JOIN users u ON u.id = p.user_id
             WHERE u.deleted_at IS NULL ORDER BY u.name",
        )
        .fetch_all(&self.pool)
        .await?;
        for row in &permits {
            let dataset_id: String = row.try_get("dataset_id")?;
            if let Some(d) = datasets.iter_mut().find(|d| d.id == dataset_id) {
                d.users.push((row.try_get("id")?, row.try_get("name")?));
            }
        }
        Ok(datasets)
    }

    /// Whether `user_id` may use some dataset ([`app::domain::datasets::Permit::allows`] on
    /// [`Store::datasets`], in one statement): a launch asks it before taking a pre-started
    /// editor, which runs without datasets.
    pub async fn may_use_a_dataset(&self, user_id: &str) -> Result<bool> {
        let row = sqlx::query(&format!(
            "SELECT 1 AS one WHERE {}",
            may_use_a_dataset("$1")
        ))
        .bind(user_id)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.is_some())
    }

    pub async fn dataset(&self, id: &str) -> Result<Option<DatasetRecord>> {
        Ok(self.datasets().await?.into_iter().find(|d| d.id == id))
    }

    /// The users of these names that exist (not deleted): (id, name).
    pub async fn users_named(&self, names: &[String]) -> Result<Vec<(String, String)>> {
        let mut found = Vec::new();
        for name in names {
            let row =
                sqlx::query("SELECT id, name FROM users WHERE name = $1 AND deleted_at IS NULL")
                    .bind(name)
                    .fetch_optional(&self.pool)
                    .await?;
            if let Some(row) = row {
                found.push((row.try_get("id")?, row.try_get("name")?));
            }
        }
        Ok(found)
    }

    /// Registers a dataset; [`StoreError::Duplicate`] when its name is taken.
    pub async fn add_dataset(
        &self,
        new: &DatasetWrite<'_>,
        user_names: &str,
        actor_id: &str,
    ) -> Result<String> {
        let now = self.now();
        let id = new_id();
        let (path, claim) = new.place_columns();
        let mut w = self.begin_write().await?;
        if name_taken(&mut w, new.name, &id).await? {
            return Err(StoreError::Duplicate(NAME_TAKEN));
        }
        sqlx::query(
            "INSERT INTO datasets (id, name, description, host_path, claim, everyone, added_by, created_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .bind(&id)
        .bind(new.name)
        .bind(new.description)
        .bind(path)
        .bind(claim)
        .bind(new.everyone as i64)
        .bind(actor_id)
        .bind(now)
        .execute(&mut *w.tx)
        .await
        .map_err(duplicate_name)?;
        write_users(&mut w, &id, new.user_ids).await?;
        insert_audit(
            &mut w,
            Some(actor_id),
            "dataset.add",
            &format!("dataset:{id}"),
            &new.audit_detail(user_names),
            now,
        )
        .await?;
        w.commit().await?;
        Ok(id)
    }

    /// Replaces a dataset's fields; false when it does not exist.
    pub async fn update_dataset(
        &self,
        id: &str,
        change: &DatasetWrite<'_>,
        user_names: &str,
        actor_id: &str,
    ) -> Result<bool> {
        let now = self.now();
        let (path, claim) = change.place_columns();
        let mut w = self.begin_write().await?;
        let exists = sqlx::query("SELECT id FROM datasets WHERE id = $1")
            .bind(id)
            .fetch_optional(&mut *w.tx)
            .await?;
        if exists.is_none() {
            return Ok(false);
        }
        if name_taken(&mut w, change.name, id).await? {
            return Err(StoreError::Duplicate(NAME_TAKEN));
        }
        let changed = sqlx::query(
            "UPDATE datasets SET name = $1, description = $2, host_path = $3, claim = $4, everyone = $5
             WHERE id = $6",
        )
        .bind(change.name)
        .bind(change.description)
        .bind(path)
        .bind(claim)
        .bind(change.everyone as i64)
        .bind(id)
        .execute(&mut *w.tx)
        .await
        .map_err(duplicate_name)?
        .rows_affected();
        if changed == 0 {
            return Ok(false);
        }
        write_users(&mut w, id, change.user_ids).await?;
        insert_audit(
            &mut w,
            Some(actor_id),
            "dataset.change",
            &format!("dataset:{id}"),
            &change.audit_detail(user_names),
            now,
        )
        .await?;
        w.commit().await?;
        Ok(true)
    }

    /// Removes a dataset; false when it does not exist. Sessions running keep their mount until
    /// they end.
    pub async fn delete_dataset(&self, id: &str, actor_id: &str) -> Result<bool> {
        let now = self.now();
        let mut w = self.begin_write().await?;
        let name: Option<String> = sqlx::query("SELECT name FROM datasets WHERE id = $1")
            .bind(id)
            .fetch_optional(&mut *w.tx)
            .await?
            .map(|r| r.try_get("name"))
            .transpose()?;
        let Some(name) = name else {
            return Ok(false);
        };
        sqlx::query("DELETE FROM dataset_users WHERE dataset_id = $1")
            .bind(id)
            .execute(&mut *w.tx)
            .await?;
        sqlx::query("DELETE FROM datasets WHERE id = $1")
            .bind(id)
            .execute(&mut *w.tx)
            .await?;
        insert_audit(
            &mut w,
            Some(actor_id),
            "dataset.remove",
            &format!("dataset:{id}"),
            &name,
            now,
        )
        .await?;
        w.commit().await?;
        Ok(true)
    }

    /// Keeps what a session's launch mounted, for its page.
    pub async fn record_session_datasets(&self, session_id: &str, names: &[String]) -> Result<()> {
        if names.is_empty() {
            return Ok(());
        }
        let mut w = self.begin_write().await?;
        for name in names {
            sqlx::query("INSERT INTO session_datasets (session_id, name) VALUES ($1, $2)")
                .bind(session_id)
                .bind(name)
                .execute(&mut *w.tx)
                .await?;
        }
        w.commit().await?;
        Ok(())
    }

    /// The datasets a session's launch mounted, by name.
    pub async fn session_datasets(&self, session_id: &str) -> Result<Vec<String>> {
        let rows =
            sqlx::query("SELECT name FROM session_datasets WHERE session_id = $1 ORDER BY name")
                .bind(session_id)
                .fetch_all(&self.pool)
                .await?;
        rows.iter()
            .map(|r| r.try_get("name").map_err(StoreError::from))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::tests::on_both_fns as on_both;

    async fn admin(store: &Store, name: &str) -> String {
        store
            .create_user(name, None, Role::Admin, 0, None)
            .await
            .expect("user")
            .id
    }

    async fn datasets_are_kept_permitted_and_audited(store: Store) {
        let admin_id = admin(&store, "root").await;
        let alice = admin(&store, "alice").await;
        let place = Place::Path("/srv/data/a".into());
        let write = DatasetWrite {
            name: "imagenet",
            description: "images",
            place: &place,
            everyone: false,
            user_ids: std::slice::from_ref(&alice),
        };
        let id = store.add_dataset(&write, "alice", &admin_id).await.unwrap();
        let again = store.add_dataset(&write, "alice", &admin_id).await;
        assert!(matches!(again, Err(StoreError::Duplicate(_))), "{again:?}");
        let got = store.dataset(&id).await.unwrap().unwrap();
        assert_eq!(got.place, place);
        assert_eq!(got.users, vec![(alice.clone(), "alice".to_string())]);
        assert_eq!(got.added_by.as_deref(), Some("root"));
        let claim = Place::Claim("imagenet-ro".into());
        let change = DatasetWrite {
            name: "imagenet-2012",
            place: &claim,
            everyone: true,
            user_ids: &[],
            ..write
        };
        assert!(
            store
                .update_dataset(&id, &change, "", &admin_id)
                .await
                .unwrap()
        );
        let got = store.dataset(&id).await.unwrap().unwrap();
        assert_eq!((got.name.as_str(), got.everyone), ("imagenet-2012", true));
        assert!(got.users.is_empty());
        assert_eq!(got.place, claim);
        assert!(
            !store
                .update_dataset("nope", &change, "", &admin_id)
                .await
                .unwrap()
        );
        assert!(store.delete_dataset(&id, &admin_id).await.unwrap());
        assert!(!store.delete_dataset(&id, &admin_id).await.unwrap());
        assert!(store.datasets().await.unwrap().is_empty());
        let audit = store.audit_log(50).await.unwrap();
        let actions: Vec<&str> = audit
            .iter()
            .map(|a| a.action.as_str())
            .filter(|a| a.starts_with("dataset."))
            .collect();
        assert_eq!(actions.len(), 3, "{actions:?}");
        assert_eq!(
            store
                .users_named(&["alice".into(), "zed".into()])
                .await
                .unwrap(),
            vec![(alice, "alice".to_string())]
        );
    }

    on_both! {
        datasets_are_kept_permitted_and_audited => datasets_are_kept_permitted_and_audited_sqlite, datasets_are_kept_permitted_and_audited_postgres;
    }
}
