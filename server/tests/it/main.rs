//! The integration tests, one binary (crates.io's `src/tests/`): a server through a real
//! listener, real editors, a real registry and OpenID Connect provider, a scripted Kubernetes
//! API. Shared set-up is in [`common`].

mod common;

mod admin;
mod api;
mod cli;
mod editors;
mod faults;
mod guardrails;
mod kube;
mod oidc;
mod promotion;
mod router;
