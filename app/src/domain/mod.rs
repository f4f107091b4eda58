//! Pure rules of the product: no leptos, axum, sqlx or kube in here.
//!
//! The domain is compiled into the server and into the wasm bundle alike, so the
//! browser shows exactly the prices and limits the server will enforce.
//!
//! It imports std, serde and thiserror, and nothing of the crate outside `domain`: a rule
//! refuses with an error of its own (`ListingError`, `MissingScope`, or a `String` naming the
//! problem), which `crate::error` turns into what the doors show. The crate's guide (`lib.rs`)
//! says what each module holds.

pub mod accounts;
pub mod backups;
pub mod bulk;
pub mod credits;
pub mod datasets;
pub mod dates;
pub mod encode;
pub mod hold;
pub mod idle;
pub mod images;
pub mod launch;
pub mod listing;
pub mod pace;
pub mod paths;
pub mod pool;
pub mod presence;
pub mod pricing;
pub mod promotion;
pub mod quota;
pub mod reaper;
pub mod scan;
pub mod scope;
pub mod session;
pub mod usage;
