#![recursion_limit = "512"]
//! The server: everything that touches the world. Folders, in the order they may import each
//! other (each imports only those above it; `layout_check.rs` checks it):
//!
//! - [`util`]: the clock, ids, a fast map.
//! - [`config`]: one TOML file plus `SANDBOX_*` environment overrides, every section's type.
//! - [`net`]: transport that knows no sessions: serving threads, deadlines, the WebSocket relay,
//!   connections to editors, outbound HTTPS.
//! - [`store`]: SQLite or PostgreSQL (sqlx `Any`), migrations, the ledger, the session history.
//! - [`runtime`]: where editors run (`local` processes or `kube` pods), behind [`runtime::Runtime`];
//!   how each editor is started and asked about its activity; GPUs.
//! - [`identity`]: local accounts (argon2), sign-in cookies, bearer tokens, OpenID Connect.
//! - [`registry`]: the OCI registry client promotions push to.
//! - [`service`]: the application layer, the rules of who may do what; both doors call it.
//! - [`http`]: the doors: pages and server functions, the REST API, sign-in, the proxy, and the
//!   listener.
//! - [`reclaim`]: a month of people replayed through the service under each idle policy (a
//!   benchmark's and its tests' library).
//! - [`boot`] builds a service from a configuration; [`cli`] is the command line.
//!
//! [`run`] serves on a listener until a shutdown signal, so tests bind `127.0.0.1:0`.

pub mod boot;
pub mod cli;
pub mod config;
pub mod http;
pub mod identity;
pub mod net;
pub mod reclaim;
pub mod registry;
pub mod runtime;
pub mod service;
pub mod store;
pub mod util;

#[cfg(test)]
mod layout_check;

// The paths integration tests and benches use.
pub use boot::{anyhow_lite, build_service, open_service};
pub use http::{App, run};
pub use identity::{auth, oidc};
pub use net::upstream;
pub use runtime::{editors, gpu};
pub use service::admin;
