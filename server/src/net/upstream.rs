//! HTTP/1 connections to editors, driven by the task of the request that uses them.
//!
//! An editor's address is `host:port` or, for a local editor on a Unix socket, `unix:/path`. Local
//! JupyterLab and code-server listen on a Unix socket, which skips the loopback TCP stack on the
//! hop to the editor (+5–17 % requests a second through the proxy, BENCHMARKS.md, section 2) and
//! which no other local account can connect to.
//!
//! A pooled client (hyper-util's) runs every connection in a task of its own and hands each request
//! over through a channel: two cross-task wake-ups per proxied request, which on a small machine
//! cost more than the HTTP work itself. Here the request's own task polls the connection while it
//! waits for the answer and while the answer's body streams out; an idle connection waits in the
//! pool unpolled, and its next user checks it is still open before taking it (+8 % requests a
//! second, BENCHMARKS.md, section 2). Idle connections are kept per serving thread
//! ([`crate::net::serving`]): a connection's socket is watched by the driver of the runtime that
//! opened it, so it is handed only to requests on that runtime (the sweep, from elsewhere, only
//! checks that it is still open). Past `SHARDS` serving threads, threads share a pool: still
//! correct, only slower. The sweep runs every 10 s, and an editor's idle connections are dropped
//! when it stops ([`UpstreamPool::forget`]).
//!
//! An upgrade (WebSocket) gets a connection of its own ([`upgrade`]); the runtime's readiness
//! probes and the activity sampler use [`fetch`], one connection per request.

use crate::util::FastMap;
use axum::body::Body;
use bytes::Bytes;
use futures_util::FutureExt;
use http::{Request, Response};
use http_body::{Body as _, Frame, SizeHint};
use hyper::body::Incoming;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpStream, UnixStream};

type Connection = Pin<Box<http1::Connection<TokioIo<EditorStream>, Body>>>;

/// How an editor's address names a Unix socket.
pub const UNIX_PREFIX: &str = "unix:";

/// A connection to an editor: TCP or a Unix socket.
pub enum EditorStream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl EditorStream {
    /// Connects to the editor at `address`, within five seconds.
    pub async fn connect(address: &str) -> std::io::Result<EditorStream> {
        let connecting = async {
            match address.strip_prefix(UNIX_PREFIX) {
                Some(path) => UnixStream::connect(path).await.map(EditorStream::Unix),
                None => {
                    let stream = TcpStream::connect(address).await?;
                    stream.set_nodelay(true)?;
                    Ok(EditorStream::Tcp(stream))
                }
            }
        };
        tokio::time::timeout(std::time::Duration::from_secs(5), connecting)
            .await
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out"))?
    }
}

impl crate::net::relay::Side for EditorStream {
    fn pollable(&self) -> Option<std::os::fd::RawFd> {
        match self {
            EditorStream::Tcp(s) => s.pollable(),
            EditorStream::Unix(s) => s.pollable(),
        }
    }
}

impl AsyncRead for EditorStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            EditorStream::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            EditorStream::Unix(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for EditorStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            EditorStream::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            EditorStream::Unix(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            EditorStream::Tcp(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            EditorStream::Unix(s) => Pin::new(s).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            EditorStream::Tcp(s) => s.is_write_vectored(),
            EditorStream::Unix(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            EditorStream::Tcp(s) => Pin::new(s).poll_flush(cx),
            EditorStream::Unix(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            EditorStream::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            EditorStream::Unix(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

/// On a direct connection the request line carries the path only (origin form).
fn origin_form<B>(request: &mut Request<B>) {
    if let Some(path_and_query) = request.uri().path_and_query().cloned() {
        *request.uri_mut() = http::Uri::from(path_and_query);
    }
}

/// A new HTTP/1 connection to the editor at `address`; the caller drives it.
async fn handshake<B>(
    address: &str,
) -> Result<
    (
        http1::SendRequest<B>,
        http1::Connection<TokioIo<EditorStream>, B>,
    ),
    UpstreamError,
>
where
    B: http_body::Body + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let stream = EditorStream::connect(address).await?;
    Ok(http1::handshake(TokioIo::new(stream)).await?)
}

/// One request on a connection of its own, its answer read whole (at most `limit` bytes): the
/// runtime's readiness probes and the activity sampler.
pub async fn fetch(
    address: &str,
    mut request: Request<http_body_util::Empty<Bytes>>,
    limit: usize,
) -> Result<(http::StatusCode, Bytes), UpstreamError> {
    use http_body_util::BodyExt;
    origin_form(&mut request);
    let host = match address.strip_prefix(UNIX_PREFIX) {
        Some(_) => http::HeaderValue::from_static("localhost"),
        None => http::HeaderValue::from_str(address).map_err(|_| UpstreamError::Address)?,
    };
    request
        .headers_mut()
        .entry(http::header::HOST)
        .or_insert(host);
    let (mut sender, connection) = handshake(address).await?;
    let exchange = async {
        let response = sender.send_request(request).await?;
        let status = response.status();
        let body = http_body_util::Limited::new(response.into_body(), limit)
            .collect()
            .await
            .map_err(|e| match e.downcast::<hyper::Error>() {
                Ok(e) => UpstreamError::Http(*e),
                Err(_) => UpstreamError::TooLarge,
            })?;
        Ok((status, body.to_bytes()))
    };
    // Both driven here, so a caller's timeout drops the connection with the exchange.
    let mut exchange = std::pin::pin!(exchange);
    let mut connection = std::pin::pin!(connection);
    let mut connected = true;
    loop {
        tokio::select! {
            biased;
            answer = &mut exchange => return answer,
            // An editor may close right after answering: the answer is then read to its end.
            ended = &mut connection, if connected => {
                ended?;
                connected = false;
            }
        }
    }
}

/// Sends an upgrade request (WebSocket) on a connection of its own, which stays open for the
/// upgraded stream once the editor answers 101.
pub async fn upgrade(
    address: &str,
    mut request: Request<Body>,
) -> Result<Response<Incoming>, UpstreamError> {
    origin_form(&mut request);
    let (mut sender, connection) = handshake(address).await?;
    tokio::spawn(async move {
        if let Err(e) = connection.with_upgrades().await {
            tracing::debug!(error = %e, "editor connection for an upgrade");
        }
    });
    Ok(sender.send_request(request).await?)
}

struct Upstream {
    sender: http1::SendRequest<Body>,
    connection: Connection,
}

impl Upstream {
    /// Still usable: the connection has not ended and takes a new request.
    fn usable(&mut self) -> bool {
        // One poll lets the connection notice a close and finish the previous exchange.
        self.connection.as_mut().now_or_never().is_none() && self.sender.is_ready()
    }
}

type Idle = FastMap<String, Vec<Upstream>>;

/// Idle connections per serving thread, per editor address.
pub struct UpstreamPool {
    shards: Box<[Mutex<Idle>]>,
}

impl Default for UpstreamPool {
    fn default() -> UpstreamPool {
        UpstreamPool {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
        }
    }
}

/// One per serving thread, and one for any other thread, up to this many; beyond, threads share.
const SHARDS: usize = 64;

const MAX_IDLE_PER_EDITOR: usize = 128;

#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    #[error("connecting: {0}")]
    Connect(#[from] std::io::Error),
    #[error("{0}")]
    Http(#[from] hyper::Error),
    #[error("not an editor address")]
    Address,
    #[error("the editor's answer is larger than expected")]
    TooLarge,
}

impl UpstreamPool {
    /// This thread's idle connections.
    fn idle(&self) -> std::sync::MutexGuard<'_, Idle> {
        self.shards[crate::net::serving::thread_index() % SHARDS]
            .lock()
            .expect("upstream pool")
    }

    fn checkout(&self, address: &str) -> Option<Upstream> {
        let mut idle = self.idle();
        let list = idle.get_mut(address)?;
        while let Some(mut upstream) = list.pop() {
            if upstream.usable() {
                return Some(upstream);
            }
        }
        None
    }

    /// Drops idle connections that have ended, and editors with none left. Runs now and then, so
    /// the sockets of stopped editors do not linger.
    pub fn sweep(&self) {
        for shard in &self.shards {
            let mut idle = shard.lock().expect("upstream pool");
            for list in idle.values_mut() {
                list.retain_mut(Upstream::usable);
            }
            idle.retain(|_, list| !list.is_empty());
        }
    }

    /// Forgets the idle connections to an editor that has stopped.
    pub fn forget(&self, address: &str) {
        for shard in &self.shards {
            shard.lock().expect("upstream pool").remove(address);
        }
    }

    pub fn idle_count(&self) -> usize {
        let count = |shard: &Mutex<Idle>| -> usize {
            shard
                .lock()
                .expect("upstream pool")
                .values()
                .map(Vec::len)
                .sum()
        };
        self.shards.iter().map(count).sum()
    }

    fn checkin(&self, address: &str, upstream: Upstream) {
        let mut idle = self.idle();
        // The key is made once per editor, not once per answer.
        if !idle.contains_key(address) {
            idle.insert(address.to_string(), Vec::new());
        }
        let list = idle.get_mut(address).expect("just inserted");
        if list.len() < MAX_IDLE_PER_EDITOR {
            list.push(upstream);
        }
    }

    async fn connect(address: &str) -> Result<Upstream, UpstreamError> {
        let (sender, connection) = handshake(address).await?;
        Ok(Upstream {
            sender,
            connection: Box::pin(connection),
        })
    }

    /// Sends `request` to the editor at `address`; the answer's body streams from it.
    pub async fn send(
        self: &Arc<Self>,
        address: &str,
        mut request: Request<Body>,
    ) -> Result<Response<Body>, UpstreamError> {
        origin_form(&mut request);
        let mut upstream = match self.checkout(address) {
            Some(upstream) => upstream,
            // Boxed, as rare: see `Service::route`.
            None => Box::pin(Self::connect(address)).await?,
        };
        let mut answer = std::pin::pin!(upstream.sender.send_request(request));
        // The connection is driven here, in this task, until the answer's head arrives.
        let mut reusable = true;
        let response = tokio::select! {
            biased;
            response = &mut answer => response?,
            _ = upstream.connection.as_mut() => {
                // The connection is over (an editor may close it after each answer). The answer,
                // if it came, is waiting; if not, this resolves with the reason.
                reusable = false;
                answer.await?
            }
        };
        let (parts, body) = response.into_parts();
        let body = PooledBody {
            body,
            upstream: reusable.then_some(upstream),
            pool: Arc::clone(self),
            address: address.to_string(),
        };
        Ok(Response::from_parts(parts, Body::new(body)))
    }
}

/// An answer's body that drives its connection, and gives the connection back at its end.
struct PooledBody {
    body: Incoming,
    upstream: Option<Upstream>,
    pool: Arc<UpstreamPool>,
    address: String,
}

impl http_body::Body for PooledBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        if let Some(upstream) = &mut this.upstream
            && upstream.connection.as_mut().poll(cx).is_ready()
        {
            // Ended (the editor closed it after this answer): not reusable.
            this.upstream = None;
        }
        let frame = Pin::new(&mut this.body).poll_frame(cx);
        if let Poll::Ready(None) = frame
            && let Some(upstream) = this.upstream.take()
        {
            this.pool.checkin(&this.address, upstream);
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

impl Drop for PooledBody {
    fn drop(&mut self) {
        // An empty answer may never be polled; its connection is still good. A body dropped
        // half-read (the browser went away) leaves its connection mid-answer: closed with it.
        if let Some(upstream) = self.upstream.take()
            && self.body.is_end_stream()
        {
            self.pool.checkin(&self.address, upstream);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Answers one request with `answer`, then closes; returns the request's head.
    async fn answer_once<S: AsyncRead + AsyncWrite + Unpin>(mut stream: S, answer: &str) -> String {
        let mut head = Vec::new();
        let mut buf = [0u8; 1024];
        while !head.ends_with(b"\r\n\r\n") {
            let n = stream.read(&mut buf).await.unwrap();
            assert!(n > 0, "the request ended early");
            head.extend_from_slice(&buf[..n]);
        }
        stream.write_all(answer.as_bytes()).await.unwrap();
        stream.shutdown().await.unwrap();
        String::from_utf8(head).unwrap()
    }

    fn get(path: &str) -> Request<http_body_util::Empty<Bytes>> {
        Request::get(path)
            .body(http_body_util::Empty::new())
            .unwrap()
    }

    const CLOSING: &str = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok";

    #[tokio::test]
    async fn fetches_over_a_unix_socket_from_an_editor_that_closes_after_answering() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("editor.sock");
        let listener = tokio::net::UnixListener::bind(&path).unwrap();
        let editor = tokio::spawn(async move {
            let (stream, _) = listener.accept().await.unwrap();
            answer_once(stream, CLOSING).await
        });
        let address = format!("unix:{}", path.display());
        let (status, body) = fetch(&address, get("http://ignored/s/x/api/status"), 64)
            .await
            .unwrap();
        assert_eq!((status.as_u16(), &body[..]), (200, &b"ok"[..]));
        let head = editor.await.unwrap().to_lowercase();
        assert!(
            head.starts_with("get /s/x/api/status http/1.1\r\n"),
            "{head}"
        );
        assert!(head.contains("\r\nhost: localhost\r\n"), "{head}");
    }

    #[tokio::test]
    async fn fetches_over_tcp_naming_the_editor_as_host_and_refuses_a_large_answer() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let editor = tokio::spawn(async move {
            let mut heads = Vec::new();
            for _ in 0..2 {
                let (stream, _) = listener.accept().await.unwrap();
                heads.push(answer_once(stream, CLOSING).await.to_lowercase());
            }
            heads
        });
        let (status, _) = fetch(&address, get("/health"), 64).await.unwrap();
        assert_eq!(status.as_u16(), 200);
        let too_large = fetch(&address, get("/health"), 1).await;
        assert!(
            matches!(too_large, Err(UpstreamError::TooLarge)),
            "{too_large:?}"
        );
        let heads = editor.await.unwrap();
        assert!(
            heads[0].contains(&format!("\r\nhost: {address}\r\n")),
            "{}",
            heads[0]
        );
    }

    #[tokio::test]
    async fn a_probe_given_up_on_closes_its_connection() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let hung = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 1024];
            let _ = stream.read(&mut buf).await.unwrap();
            // Never answers; the next read sees the probe's side close.
            stream.read(&mut buf).await.unwrap()
        });
        let gave_up = tokio::time::timeout(
            std::time::Duration::from_millis(200),
            fetch(&address, get("/health"), 64),
        )
        .await;
        assert!(gave_up.is_err(), "the editor never answers");
        let read = tokio::time::timeout(std::time::Duration::from_secs(5), hung)
            .await
            .expect("the connection closes with the probe")
            .unwrap();
        assert_eq!(read, 0);
    }

    #[tokio::test]
    async fn an_idle_connection_is_used_again_by_the_serving_thread_that_opened_it_only() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let (accepted, mut accepts) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            loop {
                let (mut stream, _) = listener.accept().await.unwrap();
                accepted.send(()).unwrap();
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    // Keeps the connection open: one short answer per request head.
                    while let Ok(n @ 1..) = stream.read(&mut buf).await {
                        if buf[..n].ends_with(b"\r\n\r\n") {
                            let ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
                            stream.write_all(ok).await.unwrap();
                        }
                    }
                });
            }
        });
        let pool = Arc::new(UpstreamPool::default());
        let threads = crate::net::serving::separate(2);
        let on = |thread: usize| {
            let (pool, address) = (pool.clone(), address.clone());
            threads[thread].spawn(async move {
                use http_body_util::BodyExt;
                let request = Request::get("/").body(Body::empty()).unwrap();
                let response = pool.send(&address, request).await.unwrap();
                let body = response.into_body().collect().await.unwrap().to_bytes();
                assert_eq!(&body[..], b"ok");
            })
        };
        on(0).await.unwrap();
        on(0).await.unwrap();
        assert_eq!(pool.idle_count(), 1);
        on(1).await.unwrap();
        assert_eq!(
            pool.idle_count(),
            2,
            "one idle connection per serving thread"
        );
        on(1).await.unwrap();
        on(0).await.unwrap();
        let mut opened = 0;
        while accepts.try_recv().is_ok() {
            opened += 1;
        }
        assert_eq!(opened, 2, "each thread opened one and used it again");
        pool.forget(&address);
        assert_eq!(pool.idle_count(), 0);
    }

    #[tokio::test]
    async fn a_missing_socket_is_a_connect_error() {
        let dir = tempfile::tempdir().unwrap();
        let address = format!("unix:{}", dir.path().join("gone.sock").display());
        assert!(matches!(
            fetch(&address, get("/"), 64).await,
            Err(UpstreamError::Connect(_))
        ));
    }
}
