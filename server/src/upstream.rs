//! HTTP/1 connections to editors, driven by the task of the request that uses them.
//!
//! A pooled client (hyper-util's) runs every connection in a task of its own and hands each
//! request over through a channel: two cross-task wake-ups per proxied request, which on a small
//! machine cost more than the HTTP work itself. Here the request's own task polls the connection
//! while it waits for the answer and while the answer's body streams out; an idle connection waits
//! in the pool unpolled, and its next user checks it is still open before taking it.

use crate::auth::FastMap;
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
use tokio::net::TcpStream;

type Connection = Pin<Box<http1::Connection<TokioIo<TcpStream>, Body>>>;

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

/// Idle connections per editor address.
#[derive(Default)]
pub struct UpstreamPool {
    idle: Mutex<FastMap<String, Vec<Upstream>>>,
}

const MAX_IDLE_PER_EDITOR: usize = 128;

#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    #[error("connecting: {0}")]
    Connect(#[from] std::io::Error),
    #[error("{0}")]
    Http(#[from] hyper::Error),
}

impl UpstreamPool {
    fn checkout(&self, authority: &str) -> Option<Upstream> {
        let mut idle = self.idle.lock().expect("upstream pool");
        let list = idle.get_mut(authority)?;
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
        let mut idle = self.idle.lock().expect("upstream pool");
        for list in idle.values_mut() {
            list.retain_mut(Upstream::usable);
        }
        idle.retain(|_, list| !list.is_empty());
    }

    /// Forgets the idle connections to an editor that has stopped.
    pub fn forget(&self, authority: &str) {
        self.idle.lock().expect("upstream pool").remove(authority);
    }

    pub fn idle_count(&self) -> usize {
        self.idle
            .lock()
            .expect("upstream pool")
            .values()
            .map(Vec::len)
            .sum()
    }

    fn checkin(&self, authority: &str, upstream: Upstream) {
        let mut idle = self.idle.lock().expect("upstream pool");
        let list = idle.entry(authority.to_string()).or_default();
        if list.len() < MAX_IDLE_PER_EDITOR {
            list.push(upstream);
        }
    }

    async fn connect(authority: &str) -> Result<Upstream, UpstreamError> {
        let stream = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            TcpStream::connect(authority),
        )
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out"))??;
        stream.set_nodelay(true)?;
        let (sender, connection) = http1::handshake(TokioIo::new(stream)).await?;
        Ok(Upstream {
            sender,
            connection: Box::pin(connection),
        })
    }

    /// Sends `request` to the editor at `authority` (host:port); the answer's body streams from it.
    pub async fn send(
        self: &Arc<Self>,
        authority: &str,
        mut request: Request<Body>,
    ) -> Result<Response<Body>, UpstreamError> {
        // On a direct connection the request line carries the path only (origin form).
        if let Some(path_and_query) = request.uri().path_and_query().cloned() {
            *request.uri_mut() = http::Uri::from(path_and_query);
        }
        let mut upstream = match self.checkout(authority) {
            Some(upstream) => upstream,
            None => Self::connect(authority).await?,
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
            authority: authority.to_string(),
        };
        Ok(Response::from_parts(parts, Body::new(body)))
    }
}

/// An answer's body that drives its connection, and gives the connection back at its end.
struct PooledBody {
    body: Incoming,
    upstream: Option<Upstream>,
    pool: Arc<UpstreamPool>,
    authority: String,
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
            this.pool.checkin(&this.authority, upstream);
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
            self.pool.checkin(&self.authority, upstream);
        }
    }
}
