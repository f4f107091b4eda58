//! Typed server functions: the pages' door to the service layer.
//!
//! Each one is thin: find the backend and the viewer, call one service function.
//! The REST API in the server crate is the other door to the same functions.
//!
//! They are grouped by area, one file each (as lemmy-ui-leptos does); each names its endpoint
//! (`/api/<name>`), so that a URL never moves with its function. `Backend`, what they call (one
//! trait an area), and the helpers that find it are in `backend.rs` (ssr only).

use crate::domain::listing::{ListQuery, Page};
use crate::domain::usage::{SessionReadings, UsageDay};
use crate::error::AppError;
use crate::model::{
    AdminSession, AdminUser, AuditLine, DashboardPage, NewToken, PromotionView, Promotions,
    SessionView, TokensPage, UsageRow, UserChange, Viewer,
};
use leptos::prelude::*;

#[cfg(feature = "ssr")]
mod backend;

#[cfg(feature = "ssr")]
pub use backend::{
    AccountsBackend, AdminBackend, Backend, DatasetsBackend, ImagesBackend, PromotionsBackend,
    SessionsBackend,
};

mod accounts;
mod admin;
mod datasets;
mod images;
mod promotions;
mod sessions;

pub use accounts::*;
pub use admin::*;
pub use datasets::*;
pub use images::*;
pub use promotions::*;
pub use sessions::*;
