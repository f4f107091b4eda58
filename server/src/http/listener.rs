//! The accept loop: HTTP/1.1 connections (upgrades included) under a cap, TCP options, and the
//! drain at shutdown. It is our own, not `axum::serve`, so that it sets hyper's timer and header
//! timeout, the cap and the serving threads. HTTP/1.1 only: browsers never speak HTTP/2 without
//! TLS, and a TLS ingress speaks HTTP/1.1 to us.
//!
//! - A connection whose request head has not arrived within `proxy.header_timeout_seconds` (30 s by
//!   default; also the kept-alive idle time) is closed. hyper moves that deadline on every request,
//!   so it runs on [`crate::net::deadline`] rather than tokio's timer.
//! - At most `proxy.max_connections` connections at once; 0, the default, means half the open-file
//!   limit (64 to 65,536), the soft limit raised to the hard one at start, since each connection
//!   may open one to an editor too. A connection's place is an `Arc`'d semaphore permit that the
//!   WebSocket relay it may become keeps until the relay ends, so WebSockets count too (and the
//!   proxy holds one session to `proxy.max_websockets_per_session` of them).
//! - One client address holds at most `proxy.max_connections_per_client` of them (a quarter by
//!   default): a client that opens connections and trickles their bodies cannot take the cap
//!   from everyone else; past its share its new connections are closed at once.
//! - A tenth of the cap is kept for signed-in traffic: once the rest is taken (a flood from many
//!   addresses), a new connection gets a kept place only to present a request head within
//!   `RESERVED_HEADER_TIMEOUT` (5 s) whose sign-in cookie or token stands for someone (health probes
//!   too); anything else is answered 503 `busy` and closed (`http::Front`).
//! - Accepted sockets get `TCP_NODELAY` and TCP keepalive (probes after a minute idle, every 15 s,
//!   8 of them), so a client that vanished (a laptop closed on an open WebSocket) gives its place
//!   back within minutes.
//! - The loop runs on the main runtime and hands each connection, in turn, to one of
//!   `proxy.serving_threads` single-threaded runtimes ([`crate::net::serving`]), where it stays for
//!   its life.
//! - On shutdown it stops accepting, lets each connection finish its request in flight and close,
//!   and gives up on what is left after 10 s. WebSocket relays end on the service's shutdown signal
//!   (`http::proxy`).

use super::App;
use crate::net::{deadline, serving};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// Serves HTTP/1.1 (upgrades included) on `listener` until `stop` resolves, then lets open
/// requests finish, for [`DRAIN_TIMEOUT`] at most. A client that opens connections and sends
/// nothing does not keep them (`proxy.header_timeout_seconds`, also the keep-alive idle time).
/// Holds no more connections at once, WebSockets included, than `proxy.max_connections` (by
/// default half the file limit, since each may also open one to an editor).
pub(crate) async fn serve_connections(
    listener: tokio::net::TcpListener,
    app: App,
    stop: impl Future<Output = ()>,
) {
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(deadline::CoarseTimer)
        .header_read_timeout(Duration::from_secs(
            app.state.service.config().proxy.header_timeout_seconds,
        ));
    // A browser sends its whole request head at once: on a kept place, a head that trickles
    // in is a flood's.
    let mut reserved_http = http.clone();
    reserved_http.header_read_timeout(RESERVED_HEADER_TIMEOUT.min(Duration::from_secs(
        app.state.service.config().proxy.header_timeout_seconds,
    )));
    let cap = connection_cap(app.state.service.config().proxy.max_connections);
    let kept = kept_for_signed_in(cap);
    let per_client = Arc::new(PerClient::new(per_client_cap(
        app.state.service.config().proxy.max_connections_per_client,
        cap,
    )));
    let serving_threads = serving::thread_count(app.state.service.config().proxy.serving_threads);
    let open = Arc::new(tokio::sync::Semaphore::new(cap - kept));
    let reserve = Arc::new(tokio::sync::Semaphore::new(kept));
    let (draining, drain) = tokio::sync::watch::channel(false);
    let mut stop = std::pin::pin!(stop);
    loop {
        let (permit, reserved) = tokio::select! {
            biased;
            () = &mut stop => break,
            permit = open.clone().acquire_owned() => (permit.expect("the semaphore stays open"), false),
            permit = reserve.clone().acquire_owned(), if kept > 0 => {
                (permit.expect("the semaphore stays open"), true)
            }
        };
        let (tcp, peer) = tokio::select! {
            biased;
            () = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of descriptors, say: wait rather than spin; a client that gave up
                    // before we accepted is no error of ours.
                    if !matches!(
                        e.kind(),
                        std::io::ErrorKind::ConnectionAborted | std::io::ErrorKind::ConnectionReset
                    ) {
                        tracing::warn!(error = %e, "accepting a connection");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    continue;
                }
            },
        };
        // One client's share: past it, its new connections are closed at once, and its
        // place under the cap goes back.
        let Some(client) = per_client.enter(peer.ip()) else {
            drop(tcp);
            continue;
        };
        // Small writes (WebSocket frames, short responses) go out at once.
        let _ = tcp.set_nodelay(true);
        keep_alive(&tcp);
        // Off this runtime's driver, to be watched by the serving thread's.
        let Ok(tcp) = tcp.into_std() else { continue };
        let slot = super::Slot {
            _client: client,
            _permit: permit,
            reserved,
        };
        let front = app.front_holding(peer.ip(), Some(Arc::new(slot)));
        let http = if reserved {
            reserved_http.clone()
        } else {
            http.clone()
        };
        let mut drain = drain.clone();
        serving::spawn(serving_threads, async move {
            let Ok(tcp) = tokio::net::TcpStream::from_std(tcp) else {
                return;
            };
            let connection = http
                .serve_connection(hyper_util::rt::TokioIo::new(tcp), front)
                .with_upgrades();
            let mut connection = std::pin::pin!(connection);
            tokio::select! {
                _ = connection.as_mut() => return,
                _ = drain.wait_for(|draining| *draining) => {}
            }
            // Finishes the request in flight, if any, then closes.
            connection.as_mut().graceful_shutdown();
            let _ = connection.await;
        });
    }
    drop(listener);
    draining.send_replace(true);
    // Each connection gives its permit back when it closes.
    let all = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
    let drained = async {
        let _ = open.acquire_many(all(cap - kept)).await;
        let _ = reserve.acquire_many(all(kept)).await;
    };
    if tokio::time::timeout(DRAIN_TIMEOUT, drained).await.is_err() {
        tracing::warn!("requests still open after {DRAIN_TIMEOUT:?}; closing them");
    }
}

/// Connections each client address holds, under a cap of its own.
pub(crate) struct PerClient {
    cap: u32,
    open: std::sync::Mutex<crate::util::FastMap<std::net::IpAddr, u32>>,
}

/// One connection's count at its client's address, given back when dropped.
pub(crate) struct ClientPlace {
    clients: Arc<PerClient>,
    address: std::net::IpAddr,
}

impl PerClient {
    fn new(cap: usize) -> PerClient {
        PerClient {
            cap: u32::try_from(cap).unwrap_or(u32::MAX),
            open: Default::default(),
        }
    }

    fn enter(self: &Arc<Self>, address: std::net::IpAddr) -> Option<ClientPlace> {
        let mut open = self.open.lock().expect("per-client counts");
        let count = open.entry(address).or_insert(0);
        if *count >= self.cap {
            return None;
        }
        *count += 1;
        Some(ClientPlace {
            clients: self.clone(),
            address,
        })
    }
}

impl Drop for ClientPlace {
    fn drop(&mut self) {
        let mut open = self.clients.open.lock().expect("per-client counts");
        if let Some(count) = open.get_mut(&self.address) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.address);
            }
        }
    }
}

/// How long a connection on a kept place may take to send its request head.
pub(crate) const RESERVED_HEADER_TIMEOUT: Duration = Duration::from_secs(5);

/// The places kept for signed-in traffic: a tenth of the cap (none under ten).
fn kept_for_signed_in(cap: usize) -> usize {
    cap / 10
}

/// One client address's share of `cap`: `configured`, or else a quarter (at least 16).
fn per_client_cap(configured: u64, cap: usize) -> usize {
    match configured {
        0 => (cap / 4).max(16).min(cap),
        n => usize::try_from(n).unwrap_or(usize::MAX).min(cap),
    }
}

/// Has the kernel probe an idle client connection after a minute, so that one whose client
/// vanished (a laptop closed on an open WebSocket) ends within about two more and gives its
/// place under the cap back.
fn keep_alive(tcp: &tokio::net::TcpStream) {
    use std::os::fd::AsRawFd;
    let fd = tcp.as_raw_fd();
    for (level, option, value) in [
        (libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1),
        (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, 60),
        (libc::IPPROTO_TCP, libc::TCP_KEEPINTVL, 15),
        (libc::IPPROTO_TCP, libc::TCP_KEEPCNT, 8),
    ] {
        let value: libc::c_int = value;
        // SAFETY: `fd` is the open socket `tcp` owns; `value` outlives the call and its size
        // is passed with it.
        unsafe {
            libc::setsockopt(
                fd,
                level,
                option,
                (&value as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
    }
}

/// How many client connections to hold at once: `configured`, or else half the open-file
/// limit (the other half is for editors, the database and files). The limit is raised to its
/// hard limit first either way.
fn connection_cap(configured: u64) -> usize {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` is a valid rlimit for the call to fill in and to read.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return 512;
        }
        if limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: limit.rlim_max,
                rlim_max: limit.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                limit = raised;
            }
        }
    }
    if configured > 0 {
        return usize::try_from(configured).unwrap_or(usize::MAX);
    }
    usize::try_from(limit.rlim_cur / 2)
        .unwrap_or(usize::MAX)
        .clamp(64, 65_536)
}

/// How long open requests may take to finish once the server shuts down.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

#[cfg(test)]
mod tests {
    use std::os::fd::AsRawFd;

    fn option(tcp: &tokio::net::TcpStream, level: libc::c_int, name: libc::c_int) -> libc::c_int {
        let mut value: libc::c_int = -1;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: `value` and `len` are valid for the call to fill in.
        let done = unsafe {
            libc::getsockopt(
                tcp.as_raw_fd(),
                level,
                name,
                (&mut value as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        assert_eq!(done, 0);
        value
    }

    #[tokio::test]
    async fn client_connections_are_probed_when_idle() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let _client = tokio::net::TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (accepted, _) = listener.accept().await.unwrap();
        assert_eq!(option(&accepted, libc::SOL_SOCKET, libc::SO_KEEPALIVE), 0);
        super::keep_alive(&accepted);
        assert_eq!(option(&accepted, libc::SOL_SOCKET, libc::SO_KEEPALIVE), 1);
        assert_eq!(option(&accepted, libc::IPPROTO_TCP, libc::TCP_KEEPIDLE), 60);
        assert_eq!(option(&accepted, libc::IPPROTO_TCP, libc::TCP_KEEPCNT), 8);
    }
}
