//! The error every door (server functions, REST API, proxy) shows to people.
//!
//! It imports nothing of the crate but the domain's own errors, each turned here into the
//! variant the doors show, so that `?` on a domain rule works wherever `AppError` is returned.

use crate::domain::listing::ListingError;
use crate::domain::scope::{GrantRefused, MissingScope};
use serde::{Deserialize, Serialize};

/// A safe, user-facing error. Internal details are logged by the server, never carried here.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(tag = "error", content = "message", rename_all = "snake_case")]
pub enum AppError {
    #[error("please sign in")]
    Unauthenticated,
    #[error("{0}")]
    SignInFailed(String),
    #[error("{0}")]
    Forbidden(String),
    /// Signed in with a password an admin set (or the first run printed): choose your own first.
    #[error("choose a new password first (your account page)")]
    PasswordChangeRequired,
    #[error("not found")]
    NotFound,
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    TooLarge(String),
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    InsufficientCredits(String),
    /// A per-user limit refuses it; the message names the limit and the use.
    #[error("{0}")]
    QuotaExceeded(String),
    #[error("{0}")]
    Unavailable(String),
    /// The database does not answer: a quick refusal rather than a hang, so that users and load
    /// balancers know to retry.
    #[error("the database is unreachable; try again in a moment")]
    DatabaseUnavailable,
    /// The server's disk is full: nothing of the request was saved.
    #[error("the server's disk is full, so nothing was saved; try again once space has been freed")]
    StorageFull,
    /// Too many attempts (failed sign-ins); the message says when to try again.
    #[error("{0}")]
    RateLimited(String),
    #[error("something went wrong on our side; it has been logged")]
    Internal,
    /// The request never reached the server or its answer was unreadable.
    #[error("could not reach the server: {0}")]
    Transport(String),
}

impl AppError {
    /// A short machine-readable code, as in the REST API's `{error, message}`.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Unauthenticated => "unauthenticated",
            Self::SignInFailed(_) => "sign_in_failed",
            Self::Forbidden(_) => "forbidden",
            Self::PasswordChangeRequired => "password_change_required",
            Self::NotFound => "not_found",
            Self::Invalid(_) => "invalid",
            Self::TooLarge(_) => "too_large",
            Self::Conflict(_) => "conflict",
            Self::InsufficientCredits(_) => "insufficient_credits",
            Self::QuotaExceeded(_) => "quota_exceeded",
            Self::Unavailable(_) => "unavailable",
            Self::DatabaseUnavailable => "database_unavailable",
            Self::StorageFull => "storage_full",
            Self::RateLimited(_) => "rate_limited",
            Self::Internal => "internal",
            Self::Transport(_) => "transport",
        }
    }

    pub fn status(&self) -> u16 {
        match self {
            Self::Unauthenticated | Self::SignInFailed(_) => 401,
            Self::Forbidden(_) | Self::PasswordChangeRequired | Self::QuotaExceeded(_) => 403,
            Self::NotFound => 404,
            Self::Invalid(_) => 400,
            Self::TooLarge(_) => 413,
            Self::Conflict(_) => 409,
            Self::InsufficientCredits(_) => 402,
            Self::Unavailable(_) | Self::DatabaseUnavailable | Self::StorageFull => 503,
            Self::RateLimited(_) => 429,
            Self::Internal | Self::Transport(_) => 500,
        }
    }
}

/// A table's query refused: a bad request, in the listing's own words.
impl From<ListingError> for AppError {
    fn from(error: ListingError) -> Self {
        AppError::Invalid(error.to_string())
    }
}

/// A token without the scope for what it asked: forbidden, naming the scope.
impl From<MissingScope> for AppError {
    fn from(error: MissingScope) -> Self {
        AppError::Forbidden(error.to_string())
    }
}

/// A token that may not be made: forbidden for what the maker may not give, invalid otherwise.
impl From<GrantRefused> for AppError {
    fn from(error: GrantRefused) -> Self {
        if error.is_forbidden() {
            AppError::Forbidden(error.to_string())
        } else {
            AppError::Invalid(error.to_string())
        }
    }
}

impl leptos::server_fn::error::FromServerFnError for AppError {
    type Encoder = leptos::server_fn::codec::JsonEncoding;

    fn from_server_fn_error(value: leptos::server_fn::error::ServerFnErrorErr) -> Self {
        use leptos::server_fn::error::ServerFnErrorErr;
        match value {
            // On the server: a call whose fields are missing or malformed is bad input.
            // The parser's words may quote the input: shown short.
            ServerFnErrorErr::Args(e) => AppError::Invalid(format!(
                "the request's fields are malformed: {}",
                crate::domain::encode::shown_up_to(&e, 200)
            )),
            ServerFnErrorErr::MissingArg(name) => {
                AppError::Invalid(format!("the request lacks the field `{name}`"))
            }
            // A body the server cannot decode (not UTF-8, not the encoding it names) is the
            // caller's; in the browser the same error means our answer was unreadable.
            #[cfg(feature = "ssr")]
            ServerFnErrorErr::Deserialization(e) if e.contains("length limit exceeded") => {
                AppError::TooLarge(
                    "the request's body is larger than the 2 MiB a call may send".into(),
                )
            }
            #[cfg(feature = "ssr")]
            ServerFnErrorErr::Deserialization(e) => AppError::Invalid(format!(
                "the request's body cannot be read: {}",
                crate::domain::encode::shown_up_to(&e, 200)
            )),
            other => AppError::Transport(other.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::AppError;
    use crate::domain::listing::{ListQuery, Listing};
    use crate::domain::scope::{Scope, Scopes};

    #[test]
    fn a_refused_table_query_is_a_bad_request_in_the_listings_words() {
        let query = ListQuery {
            sort: Some("password_hash".into()),
            ..ListQuery::default()
        };
        let refused = AppError::from(Listing::users(&query).unwrap_err());
        assert_eq!(refused.status(), 400);
        assert_eq!(
            refused,
            AppError::Invalid(
                "cannot sort by `password_hash`; sort by name, created, balance (a `-` first for descending)"
                    .into()
            )
        );
        let query = ListQuery {
            page: Some(0),
            ..ListQuery::default()
        };
        assert_eq!(
            AppError::from(Listing::audit(&query).unwrap_err()),
            AppError::Invalid("`page` starts at 1".into())
        );
    }

    #[test]
    fn missing_a_scope_is_forbidden_and_says_which() {
        let refused = AppError::from(
            Scopes::of(&[Scope::Read])
                .require(Scope::Sessions)
                .unwrap_err(),
        );
        assert_eq!(refused.status(), 403);
        assert_eq!(
            refused,
            AppError::Forbidden("this token lacks the scope `sessions` (it has: read)".into())
        );
    }
}
