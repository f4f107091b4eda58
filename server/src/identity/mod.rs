//! Who is asking: local accounts, sign-in cookies, bearer tokens and OpenID Connect.
//! May import: `store`, `config`, `net`, `util`, `app::{domain, model}`.

pub mod auth;
pub mod oidc;
