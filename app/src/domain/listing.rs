//! The admin tables: which page, sorted by what, filtered how. Read from what a page or a
//! script asks (`?page=2&sort=-balance&q=ali`), checked here, and turned into SQL by the store
//! from these types only, never from the text itself.

use serde::{Deserialize, Serialize};

pub const DEFAULT_PER_PAGE: u32 = 25;
pub const MAX_PER_PAGE: u32 = 100;
/// Longer filters are refused rather than cut: a cut filter would show the wrong rows.
pub const MAX_FILTER_CHARS: usize = 100;

/// What a table is asked for, as it arrives (query string or server function).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// 1 is the first page.
    #[serde(default)]
    pub page: Option<u32>,
    #[serde(default)]
    pub per_page: Option<u32>,
    /// A column's name, `-` first for descending.
    #[serde(default)]
    pub sort: Option<String>,
    /// Text to look for (user names; for the audit log, also actions and targets).
    #[serde(default)]
    pub q: Option<String>,
    /// Sessions: `live`, `ended` or one state's name. Users: `admin`, `user` or `locked`.
    #[serde(default)]
    pub filter: Option<String>,
}

/// Why a table's query is refused; each says what the table takes instead. The doors show it
/// as a bad request (`AppError::Invalid`, in `crate::error`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ListingError {
    #[error("`page` starts at 1")]
    PageZero,
    #[error("`per_page` must be 1 to {MAX_PER_PAGE}")]
    PerPage,
    #[error("`page` is too far")]
    TooFar,
    #[error("cannot sort by `{name}`; sort by {known} (a `-` first for descending)")]
    Sort { name: String, known: String },
    #[error(
        "the search text must be at most {MAX_FILTER_CHARS} characters, without control characters"
    )]
    Search,
    /// The table's own filter (`filter`) is refused; the text names what it takes.
    #[error("{0}")]
    Filter(String),
}

/// A column a table sorts by.
pub trait SortKey: Copy + Sized {
    const DEFAULT: (Self, bool);
    fn parse(name: &str) -> Option<Self>;
    fn names() -> &'static [&'static str];
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UserSort {
    Name,
    Created,
    Balance,
}

impl SortKey for UserSort {
    const DEFAULT: (Self, bool) = (UserSort::Name, false);
    fn parse(name: &str) -> Option<Self> {
        match name {
            "name" => Some(UserSort::Name),
            "created" => Some(UserSort::Created),
            "balance" => Some(UserSort::Balance),
            _ => None,
        }
    }
    fn names() -> &'static [&'static str] {
        &["name", "created", "balance"]
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionSort {
    Created,
    User,
    State,
}

impl SortKey for SessionSort {
    const DEFAULT: (Self, bool) = (SessionSort::Created, true);
    fn parse(name: &str) -> Option<Self> {
        match name {
            "created" => Some(SessionSort::Created),
            "user" => Some(SessionSort::User),
            "state" => Some(SessionSort::State),
            _ => None,
        }
    }
    fn names() -> &'static [&'static str] {
        &["created", "user", "state"]
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuditSort {
    At,
}

impl SortKey for AuditSort {
    const DEFAULT: (Self, bool) = (AuditSort::At, true);
    fn parse(name: &str) -> Option<Self> {
        (name == "at").then_some(AuditSort::At)
    }
    fn names() -> &'static [&'static str] {
        &["at"]
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PromotionSort {
    Requested,
}

impl SortKey for PromotionSort {
    const DEFAULT: (Self, bool) = (PromotionSort::Requested, true);
    fn parse(name: &str) -> Option<Self> {
        (name == "requested").then_some(PromotionSort::Requested)
    }
    fn names() -> &'static [&'static str] {
        &["requested"]
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UsageSort {
    Cost,
    Hours,
    Name,
}

impl SortKey for UsageSort {
    const DEFAULT: (Self, bool) = (UsageSort::Cost, true);
    fn parse(name: &str) -> Option<Self> {
        match name {
            "cost" => Some(UsageSort::Cost),
            "hours" => Some(UsageSort::Hours),
            "name" => Some(UsageSort::Name),
            _ => None,
        }
    }
    fn names() -> &'static [&'static str] {
        &["cost", "hours", "name"]
    }
}

/// The days the usage table covers, up to now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UsagePeriod {
    pub days: u32,
}

impl UsagePeriod {
    pub const CHOICES: [u32; 4] = [1, 7, 30, 90];
    pub const DEFAULT: UsagePeriod = UsagePeriod { days: 30 };

    /// Where the period starts, in milliseconds since the epoch.
    pub fn since_ms(self, now_ms: i64) -> i64 {
        now_ms - i64::from(self.days) * 86_400_000
    }
}

/// Which users a table shows besides the text filter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UserFilter {
    All,
    Admins,
    Users,
    Locked,
    /// Those who asked for credits and have no answer yet.
    Asking,
    /// Deleted accounts whose storage is still kept (their deletion can be undone).
    Deleted,
}

/// Which sessions a table shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionFilter {
    All,
    /// Not ended: requested, queued, starting, ready, parked, stopping.
    Live,
    Ended,
    State(crate::domain::session::SessionState),
}

/// A checked request for one page of a table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listing<S, F> {
    pub page: u32,
    pub per_page: u32,
    pub sort: S,
    pub descending: bool,
    /// Trimmed; None when empty.
    pub search: Option<String>,
    pub filter: F,
}

impl<S, F> Listing<S, F> {
    pub fn offset(&self) -> u64 {
        u64::from(self.page - 1) * u64::from(self.per_page)
    }
}

impl<S: SortKey, F> Listing<S, F> {
    /// Checks what every table takes; `filter` reads the table's own filter.
    fn checked(
        query: &ListQuery,
        filter: impl FnOnce(&str) -> Result<F, ListingError>,
    ) -> Result<Self, ListingError> {
        let page = query.page.unwrap_or(1);
        if page == 0 {
            return Err(ListingError::PageZero);
        }
        let per_page = query.per_page.unwrap_or(DEFAULT_PER_PAGE);
        if !(1..=MAX_PER_PAGE).contains(&per_page) {
            return Err(ListingError::PerPage);
        }
        // Far past any real table; keeps the offset's arithmetic and the database's far from overflow.
        if u64::from(page) * u64::from(per_page) > 10_000_000 {
            return Err(ListingError::TooFar);
        }
        let (sort, descending) = match query.sort.as_deref().map(str::trim) {
            None | Some("") => S::DEFAULT,
            Some(text) => {
                let (name, descending) = match text.strip_prefix('-') {
                    Some(name) => (name, true),
                    None => (text, false),
                };
                let key = S::parse(name).ok_or_else(|| ListingError::Sort {
                    name: name.to_string(),
                    known: S::names().join(", "),
                })?;
                (key, descending)
            }
        };
        let search = query
            .q
            .as_deref()
            .map(str::trim)
            .filter(|q| !q.is_empty())
            .map(str::to_string);
        if search.as_deref().is_some_and(|q| {
            q.chars().count() > MAX_FILTER_CHARS || q.chars().any(char::is_control)
        }) {
            return Err(ListingError::Search);
        }
        let filter = filter(query.filter.as_deref().map_or("", str::trim))?;
        Ok(Listing {
            page,
            per_page,
            sort,
            descending,
            search,
            filter,
        })
    }
}

impl Listing<UserSort, UserFilter> {
    pub fn users(query: &ListQuery) -> Result<Self, ListingError> {
        Listing::checked(query, |filter| match filter {
            "" | "all" => Ok(UserFilter::All),
            "admin" => Ok(UserFilter::Admins),
            "user" => Ok(UserFilter::Users),
            "locked" => Ok(UserFilter::Locked),
            "asking" => Ok(UserFilter::Asking),
            "deleted" => Ok(UserFilter::Deleted),
            other => Err(ListingError::Filter(format!(
                "unknown filter `{other}`; users filter by all, admin, user, locked, asking or deleted"
            ))),
        })
    }
}

impl Listing<SessionSort, SessionFilter> {
    pub fn sessions(query: &ListQuery) -> Result<Self, ListingError> {
        use crate::domain::session::SessionState;
        Listing::checked(query, |filter| {
            match filter {
            "" | "all" => Ok(SessionFilter::All),
            "live" => Ok(SessionFilter::Live),
            "ended" => Ok(SessionFilter::Ended),
            name => SessionState::parse(name).map(SessionFilter::State).ok_or_else(|| {
                ListingError::Filter(format!(
                    "unknown filter `{name}`; sessions filter by all, live, ended or a state (requested, queued, starting, ready, parked, stopping)"
                ))
            }),
        }
        })
    }
}

impl Listing<UsageSort, UsagePeriod> {
    pub fn usage(query: &ListQuery) -> Result<Self, ListingError> {
        Listing::checked(query, |filter| {
            if filter.is_empty() {
                return Ok(UsagePeriod::DEFAULT);
            }
            filter
                .strip_suffix('d')
                .and_then(|days| days.parse().ok())
                .filter(|days| UsagePeriod::CHOICES.contains(days))
                .map(|days| UsagePeriod { days })
                .ok_or_else(|| {
                    ListingError::Filter(format!(
                        "unknown period `{filter}`; usage covers 1d, 7d, 30d or 90d"
                    ))
                })
        })
    }
}

impl Listing<PromotionSort, Option<crate::domain::promotion::PromotionState>> {
    /// Promotions filter by state (`pending`, …) or none (`all`).
    pub fn promotions(query: &ListQuery) -> Result<Self, ListingError> {
        use crate::domain::promotion::PromotionState;
        Listing::checked(query, |filter| match filter {
            "" | "all" => Ok(None),
            name => PromotionState::parse(name).map(Some).ok_or_else(|| {
                ListingError::Filter(format!(
                    "unknown filter `{name}`; promotions filter by all or a state ({})",
                    PromotionState::EVERY.map(|s| s.as_str()).join(", ")
                ))
            }),
        })
    }
}

impl Listing<AuditSort, ()> {
    pub fn audit(query: &ListQuery) -> Result<Self, ListingError> {
        Listing::checked(query, |filter| {
            if filter.is_empty() {
                Ok(())
            } else {
                Err(ListingError::Filter(
                    "the audit log filters by its search text (`q`) only".into(),
                ))
            }
        })
    }
}

/// One page of a table, and how many rows the whole table has under its filter.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Page<T> {
    pub items: Vec<T>,
    pub page: u32,
    pub per_page: u32,
    pub total: u64,
}

impl<T> Page<T> {
    pub fn pages(&self) -> u32 {
        (self.total.div_ceil(u64::from(self.per_page.max(1)))).max(1) as u32
    }
}

/// `text` for a SQL `LOWER(column) LIKE … ESCAPE '\'` that matches it anywhere, its `%` and `_`
/// taken literally, lowercased as the database's `LOWER` does: all of Unicode (PostgreSQL), or
/// ASCII only (SQLite, whose `LOWER` leaves "É" as it is).
pub fn like_pattern(text: &str, unicode_lower: bool) -> String {
    let lower = if unicode_lower {
        text.to_lowercase()
    } else {
        text.to_ascii_lowercase()
    };
    let mut out = String::with_capacity(lower.len() + 2);
    out.push('%');
    for c in lower.chars() {
        if matches!(c, '%' | '_' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('%');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::session::SessionState;

    fn query(sort: Option<&str>, filter: Option<&str>) -> ListQuery {
        ListQuery {
            sort: sort.map(str::to_string),
            filter: filter.map(str::to_string),
            ..ListQuery::default()
        }
    }

    #[test]
    fn defaults_are_the_first_page_in_each_tables_natural_order() {
        let users = Listing::users(&ListQuery::default()).unwrap();
        assert_eq!((users.page, users.per_page), (1, DEFAULT_PER_PAGE));
        assert_eq!((users.sort, users.descending), (UserSort::Name, false));
        assert_eq!(users.filter, UserFilter::All);
        assert_eq!(users.offset(), 0);
        let sessions = Listing::sessions(&ListQuery::default()).unwrap();
        assert_eq!(
            (sessions.sort, sessions.descending),
            (SessionSort::Created, true)
        );
        let audit = Listing::audit(&ListQuery::default()).unwrap();
        assert_eq!((audit.sort, audit.descending), (AuditSort::At, true));
    }

    #[test]
    fn sort_reads_a_column_and_a_minus_for_descending() {
        let users = Listing::users(&query(Some("-balance"), None)).unwrap();
        assert_eq!((users.sort, users.descending), (UserSort::Balance, true));
        let users = Listing::users(&query(Some("created"), None)).unwrap();
        assert_eq!((users.sort, users.descending), (UserSort::Created, false));
        let refused = Listing::users(&query(Some("password_hash"), None)).unwrap_err();
        assert!(matches!(refused, ListingError::Sort { .. }), "{refused:?}");
        assert!(
            refused.to_string().contains("name, created, balance"),
            "{refused}"
        );
        assert!(Listing::audit(&query(Some("actor"), None)).is_err());
    }

    #[test]
    fn pages_are_bounded_and_offsets_follow() {
        let mut q = ListQuery {
            page: Some(3),
            per_page: Some(10),
            ..ListQuery::default()
        };
        assert_eq!(Listing::users(&q).unwrap().offset(), 20);
        q.page = Some(0);
        assert!(Listing::users(&q).is_err());
        q.page = Some(1);
        q.per_page = Some(MAX_PER_PAGE + 1);
        assert!(Listing::users(&q).is_err());
        q.per_page = Some(0);
        assert!(Listing::users(&q).is_err());
        q.per_page = Some(100);
        q.page = Some(u32::MAX);
        assert!(Listing::users(&q).is_err(), "far past any table");
    }

    #[test]
    fn filters_are_named_values_and_search_text_is_trimmed_and_bounded() {
        assert_eq!(
            Listing::sessions(&query(None, Some("live")))
                .unwrap()
                .filter,
            SessionFilter::Live
        );
        assert_eq!(
            Listing::sessions(&query(None, Some("ready")))
                .unwrap()
                .filter,
            SessionFilter::State(SessionState::Ready)
        );
        assert!(Listing::sessions(&query(None, Some("running"))).is_err());
        assert_eq!(
            Listing::users(&query(None, Some("locked"))).unwrap().filter,
            UserFilter::Locked
        );
        assert_eq!(
            Listing::users(&query(None, Some("asking"))).unwrap().filter,
            UserFilter::Asking
        );
        assert_eq!(
            Listing::users(&query(None, Some("deleted")))
                .unwrap()
                .filter,
            UserFilter::Deleted
        );
        assert!(Listing::users(&query(None, Some("root"))).is_err());
        assert!(Listing::audit(&query(None, Some("x"))).is_err());
        let mut q = ListQuery {
            q: Some("  ali ".into()),
            ..ListQuery::default()
        };
        assert_eq!(Listing::users(&q).unwrap().search.as_deref(), Some("ali"));
        q.q = Some("   ".into());
        assert_eq!(Listing::users(&q).unwrap().search, None);
        q.q = Some("x".repeat(MAX_FILTER_CHARS + 1));
        assert!(Listing::users(&q).is_err());
        q.q = Some("a\u{0}b".into());
        assert!(Listing::users(&q).is_err());
    }

    #[test]
    fn usage_covers_a_chosen_number_of_days_and_sorts_by_cost_first() {
        let usage = Listing::usage(&ListQuery::default()).unwrap();
        assert_eq!(usage.filter, UsagePeriod { days: 30 });
        assert_eq!((usage.sort, usage.descending), (UsageSort::Cost, true));
        let week = Listing::usage(&query(Some("-hours"), Some("7d"))).unwrap();
        assert_eq!(week.filter.days, 7);
        assert_eq!((week.sort, week.descending), (UsageSort::Hours, true));
        assert_eq!(week.filter.since_ms(10 * 86_400_000), 3 * 86_400_000);
        for bad in ["8d", "30", "d", "-1d", "1000000000000d"] {
            let refused = Listing::usage(&query(None, Some(bad))).unwrap_err();
            assert!(
                refused.to_string().contains("1d, 7d, 30d or 90d"),
                "{bad}: {refused}"
            );
        }
    }

    #[test]
    fn like_patterns_take_wildcards_literally() {
        assert_eq!(like_pattern("Ali", true), "%ali%");
        assert_eq!(like_pattern("50%_a\\b", true), "%50\\%\\_a\\\\b%");
        assert_eq!(like_pattern("Émile", true), "%émile%");
        assert_eq!(
            like_pattern("Émile", false),
            "%Émile%",
            "as SQLite's LOWER leaves it"
        );
    }

    #[test]
    fn page_count_rounds_up_and_is_at_least_one() {
        let page = |total| Page::<()> {
            items: vec![],
            page: 1,
            per_page: 25,
            total,
        };
        assert_eq!(page(0).pages(), 1);
        assert_eq!(page(25).pages(), 1);
        assert_eq!(page(26).pages(), 2);
    }

    #[test]
    fn promotions_filter_by_state() {
        use crate::domain::promotion::PromotionState;
        let query = |filter: &str| ListQuery {
            filter: Some(filter.into()),
            ..ListQuery::default()
        };
        assert_eq!(Listing::promotions(&query("")).unwrap().filter, None);
        assert_eq!(
            Listing::promotions(&query("pending")).unwrap().filter,
            Some(PromotionState::Pending)
        );
        let err = Listing::promotions(&query("done")).unwrap_err().to_string();
        assert!(err.contains("pending, approved, pushing"), "{err}");
    }
}
