//! The GPU development sandbox: pages, the typed contract with the server, and the pure rules.
//!
//! - [`domain`]: credits, pool allocation, launch validation and the session state machine.
//!   Pure, compiled for the server and the browser alike, unit-tested with `cargo test -p app`.
//! - [`model`] and [`error`]: what crosses the wire, for the REST API and the pages.
//! - [`api`]: the server functions, thin doors to the service layer behind [`api::Backend`].
//! - `ui`: the Leptos pages (sign in, dashboard, session).

#![recursion_limit = "512"]

pub mod api;
pub mod domain;
pub mod error;
pub mod model;
mod ui;

pub use domain::paths::is_local_path;
pub use ui::{App, shell};
