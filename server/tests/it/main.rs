//! The integration tests, one binary (crates.io's `src/tests/`: one link per change instead of
//! nine): a server through a real listener, real editors, a real registry and OpenID Connect
//! provider, a scripted Kubernetes API. Shared set-up is in [`common`].
//!
//! - `accounts`: accounts an admin adds, resets and deletes; a person's own new password; the
//!   first run's admin changing the printed one.
//! - `admin`: the admin API and server functions: who may use them, bad paging and filters as 400s,
//!   grants, locks, roles, quotas, stops, usage, approved images, editor entry by a token's grant
//!   only, the audit trail.
//! - `api`: the REST API and the proxy with a stand-in editor: input, credits, owner checks,
//!   streaming, WebSocket, SSE, restarts, locks closing WebSockets, confined cookies, a hung
//!   editor's 504, sign-in throttling, stale routes, token scopes, the connection caps.
//! - `cluster`: the kube runtime against the simulated cluster (`server/sim-cluster`) over TCP:
//!   RBAC rendered from the chart, the schema, server-side apply, refusals a cluster makes.
//! - `cluster_backups`: workspace backups as VolumeSnapshots there (take, list, restore, retention).
//! - `cluster_datasets`: shared datasets there: a read-only volume and claim per user, the steps.
//! - `cluster_export`: workspace exports there: through the editor's pod or a reader pod, paced.
//! - `cli`: the command line: the first run's admin, environment over file, tokens, locks seen by a
//!   running server, `migrate`.
//! - `datasets`: shared datasets: the admin API's refusals, who lists what, and from inside real
//!   sandboxed kernels: read-only, nothing past it, unseen by others, decided at each launch.
//! - `editors`: real JupyterLab, marimo and code-server through the local runtime: a kernel over
//!   the proxied WebSocket, direct access refused, workspaces, re-adoption, shutdown cleanup, warm
//!   editors taken over.
//! - `faults`: clients that hang up in the middle of a write, a database outage, a full disk,
//!   odd requests, the connection caps.
//! - `fuzz`: every server function and REST route called with bent input (bounded; `FUZZ_SEED`).
//! - `guardrails`: the reaper (idle, busy kernels and CPU jobs, the open-tab policy, crashes,
//!   downtime), the queue, overdue launches and stops, two servers on one database, the warm pool,
//!   quotas and extensions.
//! - `idle_choice`: a person's own idle timeout within the admin's bounds, on a moved clock.
//! - `kube`: a scripted API server asserting every request, a stateful fake one through the real
//!   service and store, HAMi metrics, and a real cluster with `KUBECONFIG` and
//!   `SANDBOX_KUBE_E2E=1`.
//! - `network_edge`: from a real kernel in its sandbox, test hosts of the test's own (a private
//!   host, a metadata service, this machine's own address) refused by default and reached with
//!   the deny list emptied or a range allowed; the rules out of the kernel's reach.
//! - `observe`: `/metrics` (who may scrape, and that it follows launches, refusals and ends),
//!   JSON logs with request ids, the probes.
//! - `oidc`: single sign-on against a real `oidc-provider` (npm): the code flow, roles from groups,
//!   refusals.
//! - `promotion`: against Debian's `docker-registry` on loopback: refusals, approval, the artifact
//!   read back byte for byte, a failed push retried.
//! - `reclaim`: the reclaim simulator kept honest: a running job is never reclaimed by ours, a
//!   person who leaves is reclaimed within a timeout and a pass, the month's ledger balances.
//! - `restart`: a server process killed, stopped and started again with the sandbox on: the same
//!   kernels answer, credits untouched, an ended session swept, nothing left at a full stop.
//! - `router`: the HTTP surface in-process through the per-connection `Front` (`oneshot`): errors,
//!   redirects, cookies, server functions' statuses, cross-site refusals.
//!
//! Elsewhere: `cargo test -p app` (the domain); unit tests beside the code, among them
//! `server/src/store/tests*.rs` on SQLite and, with `DATABASE_URL`, PostgreSQL (concurrent
//! launches, races, the allocator against the domain's rule); `end2end/` (Chromium through the
//! whole product).

mod common;

mod accounts;
mod admin;
mod api;
mod backups;
mod cli;
mod cluster;
mod cluster_backups;
mod cluster_datasets;
mod cluster_export;
mod datasets;
mod departed;
mod editors;
mod faults;
mod fuzz;
mod guardrails;
mod idle_choice;
mod isolation;
mod kube;
mod network_edge;
mod observe;
mod oidc;
mod parking;
mod promotion;
mod reclaim;
mod replicas;
mod restart;
mod router;
