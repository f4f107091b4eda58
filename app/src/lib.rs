//! The GPU development sandbox: the pages, the typed contract with the server, and the pure
//! rules. One crate, built twice: with `ssr` by the `server` crate, with `hydrate` by the
//! `frontend` crate (the browser bundle, which only calls `hydrate()`).
//!
//! # Where things are
//!
//! ```text
//! domain/          the pure rules, the same on both sides; unit-tested with `cargo test -p app`
//!   accounts       what an account's name and password must be
//!   backups        backups, restores and exports of a workspace: which part, which snapshot
//!   bulk           a CSV file of accounts: each line read, checked, planned as an add or a grant
//!   credits        integer milli-credits: prices, holds, settlement, how they read and parse
//!   datasets       shared datasets: names, paths, claims, who may use them, what a launch mounts
//!   dates          times as people read them, in UTC
//!   encode         one percent-encoder and its two alphabets (UNRESERVED, PATH)
//!   hold           how firmly a slice's size holds on its card
//!   idle           when a session counts as idle, and when its user is warned
//!   images         approved images: what a reference and a label may be
//!   launch         what may be launched: editors, slice sizes, durations, images
//!   listing        the admin tables' page, sort and filter, checked (ListingError)
//!   pace           how fast a download may go: a token bucket by the caller's clock
//!   paths          is_local_path: where a browser may be sent after signing in
//!   pool           how GPUs split into slots, and which free slot a launch takes
//!   presence       the page's heartbeat: when it tells the server someone is there
//!   pricing        what a slice costs, by GPU model and slice size
//!   promotion      files pushed to the registry: what a request may name, how its state moves
//!   quota          per-user limits: sessions, GPU memory, minutes, disk
//!   reaper         the reaper's verdict: which live session ends now, and why
//!   scan           scanned images: what a report says, and whether the policy lets it run
//!   scope          what an API token may do (MissingScope)
//!   session        the session state machine and why a session ended
//!   usage          allocated vs busy per day, a session's readings, sparkline geometry
//! model.rs         the wire types of the REST API, the server functions and the pages
//! error.rs         AppError, the safe error every door shows, and From for the domain's errors
//! api/             the pages' door: #[server] functions a file an area, each at `/api/<name>`
//!   mod.rs         the areas' files, re-exported
//!   accounts.rs    sign-in, one's own account, tokens (TokenForm), credit asks, admin confirmation
//!   admin.rs       the admin pages: users, credits, quotas, sessions, usage, the pool, settings
//!   datasets.rs    the shared datasets
//!   images.rs      the approved editor images
//!   promotions.rs  promotions to the registry
//!   sessions.rs    the dashboard and one's own sessions
//!   backend.rs     Backend, one trait an area, which the server implements; context helpers (ssr)
//! ui/              the Leptos pages: rendered on the server, hydrated in the browser
//!   mod.rs         shell, App (the routes), NotFound, ErrorNotice
//!   account.rs     the person's own account: name, role, a new password
//!   backups.rs     the dashboard's "Your workspace" card: download, backups, restore
//!   charts.rs      the pictures (SVG): balance line, usage per day, sparklines
//!   chips.rs       StateChip and PromotionChip, where a session or a promotion stands
//!   copy.rs        a secret shown once, with a Copy button
//!   credit_ask.rs  asking an admin for credits from the dashboard
//!   format.rs      times, countdowns and sizes as the pages write them; the clock; hard_navigate
//!   hydration.rs   what waits for hydration; PageJson and page_resource, the page data's reader
//!   idle_field.rs  the launch form's idle timeout, within the admin's bounds
//!   live.rs        the browser's end of the launch progress stream (hydrate only)
//!   login.rs       the sign-in page: local accounts and single sign-on
//!   pool_map.rs    the admins' pool map, drawn on the server
//!   presence.rs    the heartbeat that tells the server someone is there
//!   promotion.rs   Promote in a session's toolbar, and the dashboard's list of promotions
//!   tokens.rs      API tokens: listed, made, revoked
//!   dashboard/     the dashboard
//!     mod.rs       the page, the launch form
//!     cards.rs     the header, credit history, session cards, the pool's strip
//!   session/       one session
//!     mod.rs       the page: its progress, countdowns, the editor
//!     ending.rs    extending it, and a notification before it ends
//!     parts.rs     its usage, the editor's frame while it loads, launching again
//!   admin/         the admin pages
//!     mod.rs       AdminPage, Tab, admin_href, ConfirmAdmin, the tab bar
//!     audit.rs     the audit log
//!     datasets.rs  the shared datasets and who may use them
//!     images.rs    the images users may choose at launch
//!     pool.rs      each GPU and who holds its slots
//!     promotions.rs  promotions to approve, reject or retry
//!     sessions.rs  every session: stop, or enter the editor (audited)
//!     settings.rs  the configuration the server runs with, read only
//!     table.rs     what every table shares: search form, sort headers, pager, empty, loading
//!     usage.rs     usage and cost per user over a period
//!     users/       users: roles, locks, credits, quotas
//!       mod.rs     the tab, its table
//!       adding.rs  adding accounts, one by one or from a CSV file
//!       row.rs     a user's row, its drafts that outlive reloads, the quota editor
//! ```
//!
//! # Who imports whom
//!
//! Each folder imports only the folders before it (`domain`, `error`, `model`, `api`, `ui`), so
//! there is no cycle: the layout test's table (`APP` in the server's `layout_check.rs`) says it
//! once and checks it. The guide above is checked against the files by `guide_check.rs`.
//!
//! The server crate uses `api::Backend` (ssr only), [`api::TokenForm`], the server functions'
//! types (for their `PATH`), [`domain`], [`model`], [`error`], [`App`], [`shell`],
//! [`is_local_path`] and (ssr) `dashboard_page`, which draws the dashboard's showing parts.

#![recursion_limit = "512"]

pub mod api;
pub mod domain;
pub mod error;
#[cfg(test)]
mod guide_check;
pub mod model;
mod ui;

pub use domain::paths::is_local_path;
pub use ui::hydration::hydration_done;
pub use ui::{App, shell};
#[cfg(feature = "ssr")]
pub use ui::{admin_pool_page, backups_drawn, dashboard_page};
