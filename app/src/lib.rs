//! The GPU development sandbox: the pages, the typed contract with the server, and the pure
//! rules. One crate, built twice: with `ssr` by the `server` crate, with `hydrate` by the
//! `frontend` crate (the browser bundle, which only calls `hydrate()`).
//!
//! # Where things are
//!
//! ```text
//! domain/          the pure rules, the same on both sides; unit-tested with `cargo test -p app`
//!   bulk           a CSV file of accounts: each line read, checked, planned as an add or a grant
//!   credits        integer milli-credits: prices, holds, settlement, how they read and parse
//!   datasets       shared datasets: names, paths, claims, who may use them, what a launch mounts
//!   dates          times as people read them, in UTC
//!   encode         one percent-encoder and its two alphabets (UNRESERVED, PATH)
//!   idle           when a session counts as idle, and when its user is warned
//!   images         approved images: what a reference and a label may be
//!   launch         what may be launched: editors, slice sizes, durations, images
//!   listing        the admin tables' page, sort and filter, checked (ListingError)
//!   paths          is_local_path: where a browser may be sent after signing in
//!   pool           how GPUs split into slots, and which free slot a launch takes
//!   promotion      files pushed to the registry: what a request may name, how its state moves
//!   quota          per-user limits: sessions, GPU memory, minutes, disk
//!   scope          what an API token may do (MissingScope)
//!   session        the session state machine and why a session ended
//!   usage          allocated vs busy per day, a session's readings, sparkline geometry
//! model.rs         the wire types of the REST API, the server functions and the pages
//! error.rs         AppError, the safe error every door shows, and From for the domain's errors
//! api/             the pages' door to the server
//!   mod.rs         the #[server] functions and TokenForm (URLs hash `app::api`: keep them here)
//!   backend.rs     trait Backend, which the server implements, and the context helpers (ssr)
//! ui/              the Leptos pages: rendered on the server, hydrated in the browser
//!   mod.rs         shell, App (the routes), NotFound, ErrorNotice
//!   charts.rs      the pictures (SVG): pool map, balance line, usage per day, sparklines
//!   format.rs      times, countdowns and sizes as the pages write them; the clock; hard_navigate
//!   chips.rs       StateChip and PromotionChip, where a session or a promotion stands
//!   login.rs       the sign-in page: local accounts and single sign-on
//!   dashboard.rs   the dashboard: credits, the launch form, the sessions, the pool
//!   session.rs     one session: its progress, countdowns, stop and extend, the editor
//!   tokens.rs      API tokens: listed, made, revoked
//!   promotion.rs   Promote in a session's toolbar, and the dashboard's list of promotions
//!   presence.rs    the heartbeat that tells the server someone is there
//!   hydration.rs   what waits for hydration; PageJson and page_resource, the page data's reader
//!   live.rs        the browser's end of the launch progress stream (hydrate only)
//!   admin/         the admin pages
//!     mod.rs       AdminPage, Tab, admin_href, ConfirmAdmin, the tab bar
//!     table.rs     what every table shares: search form, sort headers, pager, empty, loading
//!     users.rs     users: roles, locks, credits, quotas (and the Drafts that outlive reloads)
//!     sessions.rs  every session: stop, or enter the editor (audited)
//!     pool.rs      each GPU and who holds its slots
//!     images.rs    the images users may choose at launch
//!     datasets.rs  the shared datasets and who may use them
//!     usage.rs     usage and cost per user over a period
//!     promotions.rs  promotions to approve, reject or retry
//!     audit.rs     the audit log
//!     settings.rs  the configuration the server runs with, read only
//! ```
//!
//! # Who imports whom
//!
//! Each layer imports only the layers before it, so there is no cycle between layers:
//!
//! 1. `domain` imports nothing of the crate (std, serde and thiserror only).
//! 2. `model` imports `domain`.
//! 3. `error` imports nothing of the crate but the domain's errors, for its `From` impls.
//! 4. `api` imports `domain`, `model` and `error`; never `ui`.
//! 5. `ui` imports `api`, `model`, `domain` and `error`. Inside it, what pages share is in
//!    `format` and `chips`; an admin tab imports `admin/mod.rs` and `admin/table.rs`, never
//!    another tab.
//!
//! The server crate uses `api::Backend` (ssr only), [`api::TokenForm`], the server functions'
//! types (for their `PATH`), [`domain`], [`model`], [`error`], [`App`], [`shell`],
//! [`is_local_path`] and (ssr) `dashboard_page`, which draws the dashboard's showing parts.

#![recursion_limit = "512"]

pub mod api;
pub mod domain;
pub mod error;
pub mod model;
mod ui;

pub use domain::paths::is_local_path;
pub use ui::hydration::hydration_done;
pub use ui::{App, shell};
#[cfg(feature = "ssr")]
pub use ui::{admin_pool_page, backups_drawn, dashboard_page};
