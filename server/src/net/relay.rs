//! Relays an upgraded connection (WebSocket) between the browser and the editor, byte for byte.
//!
//! One task per connection moves both directions (tokio's readiness, non-blocking reads and writes,
//! what a full socket would not take kept for later, a half-close passed on), so neither direction
//! can stall the other; bytes hyper had already read past the handshake, from the editor or the
//! browser, go first. It is our own rather than `tokio::io::copy_bidirectional` so that it can
//! busy-poll.
//!
//! Sleeping on readiness costs each message a wake-up of the relay, and on a virtual machine a
//! wake-up costs tens of microseconds (BENCHMARKS.md, section 3). So after the relay passes a
//! message on, it keeps asking the other side's socket directly (`recv` with `MSG_DONTWAIT`, past
//! the runtime's readiness) for a short window (`busy_poll`, `proxy.websocket_busy_poll_us`, 100 µs
//! by default, 0 turns it off) before it sleeps again: in a conversation (a kernel's request and
//! reply, a script's round trips) the answer often comes within it, and is passed on without the
//! wake-up. This is what Linux's `net.core.busy_read` does for network queues. Both sides are
//! polled: the editor after a message from the browser, and the browser after one from the editor
//! when its side is a plain socket from our own listener (a [`Side`] says whether it may be read
//! directly). While a window is open both sockets are asked, since the runtime cannot tell the
//! relay of readiness while it holds the thread: an editor's next message is not held back while
//! the relay waits for the browser's answer. Windows follow the order bytes were read.
//!
//! The price is CPU and its serving thread, which the window holds from the other connections on it
//! (yielding to the runtime between asks measured worse, BENCHMARKS.md). So a window is short, is
//! never extended by further messages, ends as soon as the answer comes or as soon as no answer
//! could be taken (the answer's way blocked, the question not yet delivered, the side ended), and
//! is opened only while answers have been coming within it: a side that lets windows run out, as a
//! browser a network away or a kernel computing for milliseconds does, is polled for one message in
//! 65 (see `Polling`). A [`SpinLimit`] caps how many connections poll at once.
//!
//! Measured (BENCHMARKS.md, section 3): on an echo, polling takes 14 to 28 µs off each round trip,
//! below nginx as a proxy, for about twice the relay's CPU (80.0 against 42.9 µs a round trip); on
//! real kernel traffic (`1+1` in JupyterLab, section 6) it changed neither the latency nor the
//! server's CPU beyond the run's noise.

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// How many connections may busy-poll at one time.
pub struct SpinLimit {
    max: usize,
    spinning: AtomicUsize,
}

impl SpinLimit {
    pub const fn new(max: usize) -> SpinLimit {
        SpinLimit {
            max,
            spinning: AtomicUsize::new(0),
        }
    }

    fn start(&self) -> Option<Spinning<'_>> {
        self.spinning
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max).then_some(n + 1)
            })
            .ok()
            .map(|_| Spinning(self))
    }
}

/// Held while a connection busy-polls.
struct Spinning<'a>(&'a SpinLimit);

impl Drop for Spinning<'_> {
    fn drop(&mut self) {
        self.0.spinning.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Reads what the socket holds now, without waiting and without the runtime's readiness.
fn recv_now(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: `buf` is valid for writes of its length; the caller borrows the socket that owns
    // `fd` for the duration of the call.
    let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// One direction: bytes read from one side and not yet written to the other.
struct Pipe {
    buf: Box<[u8]>,
    start: usize,
    end: usize,
    /// The source said it sends nothing more.
    eof: bool,
    /// ... and the destination has been told so.
    closed: bool,
}

impl Pipe {
    fn new(pending: &[u8]) -> Pipe {
        let mut buf = vec![0; (16 * 1024).max(pending.len())].into_boxed_slice();
        buf[..pending.len()].copy_from_slice(pending);
        Pipe {
            buf,
            start: 0,
            end: pending.len(),
            eof: false,
            closed: false,
        }
    }

    fn is_empty(&self) -> bool {
        self.start == self.end
    }

    /// Moves what can move now and returns how many bytes it read; what it must wait for has
    /// the task's waker.
    fn pump<R, W>(&mut self, cx: &mut Context<'_>, from: &mut R, to: &mut W) -> io::Result<usize>
    where
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin,
    {
        let mut read = 0;
        loop {
            if !self.is_empty() {
                match Pin::new(&mut *to).poll_write(cx, &self.buf[self.start..self.end]) {
                    Poll::Ready(Ok(0)) => return Err(io::ErrorKind::WriteZero.into()),
                    Poll::Ready(Ok(n)) => self.start += n,
                    Poll::Ready(Err(e)) => return Err(e),
                    Poll::Pending => return Ok(read),
                }
            } else if self.eof {
                if !self.closed {
                    match Pin::new(&mut *to).poll_shutdown(cx) {
                        Poll::Ready(done) => {
                            self.closed = true;
                            done?;
                        }
                        Poll::Pending => return Ok(read),
                    }
                }
                return Ok(read);
            } else {
                let mut out = ReadBuf::new(&mut self.buf);
                match Pin::new(&mut *from).poll_read(cx, &mut out) {
                    Poll::Ready(Ok(())) => match out.filled().len() {
                        0 => self.eof = true,
                        n => {
                            (self.start, self.end) = (0, n);
                            read += n;
                        }
                    },
                    Poll::Ready(Err(e)) => return Err(e),
                    Poll::Pending => return Ok(read),
                }
            }
        }
    }

    /// Busy polling: takes what the socket `fd` holds straight into an empty pipe; the next
    /// `pump` writes it on. Returns how many bytes it took (0 also when the source ended).
    fn take_now(&mut self, fd: RawFd) -> io::Result<usize> {
        if !self.is_empty() || self.eof {
            return Ok(0);
        }
        match recv_now(fd, &mut self.buf) {
            Ok(0) => {
                self.eof = true;
                Ok(0)
            }
            Ok(n) => {
                (self.start, self.end) = (0, n);
                Ok(n)
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ) =>
            {
                Ok(0)
            }
            Err(e) => Err(e),
        }
    }
}

/// One side of a relay: a stream, and its socket's descriptor if the relay may read that
/// directly while it busy-polls. Only a plain socket, which keeps no read buffer of its own, may
/// be read so (tokio's TCP and Unix streams; not TLS, not a buffered reader).
pub trait Side: AsyncRead + AsyncWrite + Unpin {
    fn pollable(&self) -> Option<RawFd>;
}

impl Side for tokio::net::TcpStream {
    fn pollable(&self) -> Option<RawFd> {
        Some(self.as_raw_fd())
    }
}

impl Side for tokio::net::UnixStream {
    fn pollable(&self) -> Option<RawFd> {
        Some(self.as_raw_fd())
    }
}

/// Relays between the browser's stream and the editor's until both directions have ended.
/// `client_pending` and `editor_pending` are what was read from either past the handshake, sent
/// on first. `traffic` is called whenever bytes arrive from either side.
pub async fn relay<C: Side, E: Side>(
    client: &mut C,
    client_pending: &[u8],
    editor: &mut E,
    editor_pending: &[u8],
    busy_poll: Duration,
    limit: &SpinLimit,
    traffic: impl Fn(),
) -> io::Result<()> {
    let (client_fd, editor_fd) = (client.pollable(), editor.pollable());
    let (mut to_editor, mut to_client) = (Pipe::new(client_pending), Pipe::new(editor_pending));
    let window = |fd: Option<RawFd>| fd.map_or(Duration::ZERO, |_| busy_poll);
    let mut windows = Windows {
        editor: Polling::new(window(editor_fd)),
        client: Polling::new(window(client_fd)),
    };
    std::future::poll_fn(|cx| {
        loop {
            let (from_client, from_editor) = (
                to_editor.pump(cx, client, editor)?,
                to_client.pump(cx, editor, client)?,
            );
            if to_editor.closed && to_client.closed {
                return Poll::Ready(Ok(()));
            }
            if from_client + from_editor > 0 {
                traffic();
                // In the order they were read (the browser's first): what the editor sent in the
                // same pass is taken as the answer, as in a conversation it most likely is.
                windows.passed(limit, Source::Client, from_client);
                windows.passed(limit, Source::Editor, from_editor);
                continue;
            }
            // A window is worth keeping open only while all that was passed on has been written
            // and the side waited for may still send: otherwise nothing could be taken now,
            // whatever it does.
            let quiet = to_editor.is_empty() && to_client.is_empty();
            let for_editor = windows
                .editor
                .open(quiet && !to_client.eof && editor_fd.is_some());
            let for_client = windows
                .client
                .open(quiet && !to_editor.eof && client_fd.is_some());
            if !(for_editor || for_client) {
                return Poll::Pending;
            }
            // Both sockets are asked: while the relay polls, the runtime cannot tell it that the
            // side it does not wait for sent more (an editor's next message, say), which would
            // otherwise wait for the window's end.
            let from_editor = match editor_fd {
                Some(fd) => to_client.take_now(fd)?,
                None => 0,
            };
            let from_client = match client_fd {
                Some(fd) => to_editor.take_now(fd)?,
                None => 0,
            };
            if from_client + from_editor > 0 {
                traffic();
                // In the order they were read, the editor's first.
                windows.passed(limit, Source::Editor, from_editor);
                windows.passed(limit, Source::Client, from_client);
            }
        }
    })
    .await
}

/// The relay's busy-polling windows: one waits for the editor's answer to what the browser sent,
/// the other for the browser's answer to what the editor sent.
struct Windows<'a> {
    editor: Polling<'a>,
    client: Polling<'a>,
}

/// Which side bytes came from.
#[derive(Clone, Copy)]
enum Source {
    Client,
    Editor,
}

impl<'a> Windows<'a> {
    /// `bytes` came from one side (none: nothing happens): an answer closes the window that
    /// waited for it and opens one for the other side's answer to it.
    fn passed(&mut self, limit: &'a SpinLimit, from: Source, bytes: usize) {
        if bytes == 0 {
            return;
        }
        let (answered, asked) = match from {
            Source::Client => (&mut self.client, &mut self.editor),
            Source::Editor => (&mut self.editor, &mut self.client),
        };
        answered.answered();
        asked.asked(limit);
    }
}

/// Whether to busy-poll for one side's answers, learnt per connection and side: a window that ran out
/// before the answer came was CPU spent for nothing, so the next few messages (1, 2, 4, … up
/// to 64) are passed on without polling; an answer caught in the window halves that count. So a
/// connection polls for every message while most answers come within the window, and for one
/// in 65 when most do not.
struct Polling<'a> {
    window: Duration,
    now: Option<(Instant, Spinning<'a>)>,
    skip: u32,
    backoff: u32,
}

impl<'a> Polling<'a> {
    const MAX_BACKOFF: u32 = 64;

    fn new(window: Duration) -> Polling<'a> {
        Polling {
            window,
            now: None,
            skip: 0,
            backoff: 1,
        }
    }

    fn asked(&mut self, limit: &'a SpinLimit) {
        if self.window.is_zero() {
            return;
        }
        // An open window is not extended: a stream of messages the editor does not answer
        // would otherwise keep the thread for as long as it lasts.
        if self.now.is_some() {
            return;
        }
        if self.skip > 0 {
            self.skip -= 1;
        } else {
            let until = Instant::now() + self.window;
            self.now = limit.start().map(|permit| (until, permit));
        }
    }

    /// Ends an open window without counting it against the side: the relay could not have
    /// taken an answer anyway (the answer's way blocked, say).
    fn cancel(&mut self) {
        self.now = None;
    }

    /// Whether the window is open; `can_take` false (nothing could be taken now) cancels it.
    fn open(&mut self, can_take: bool) -> bool {
        if can_take {
            self.still_waiting()
        } else {
            self.cancel();
            false
        }
    }

    fn answered(&mut self) {
        if self.now.take().is_some() {
            self.backoff = (self.backoff / 2).max(1);
        }
    }

    /// True while the window is open; when it closes unanswered, backs off.
    fn still_waiting(&mut self) -> bool {
        match &self.now {
            Some((until, _)) if Instant::now() < *until => true,
            Some(_) => {
                self.now = None;
                self.skip = self.backoff;
                self.backoff = (self.backoff * 2).min(Self::MAX_BACKOFF);
                false
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::UnixStream;

    static LIMIT: SpinLimit = SpinLimit::new(4);

    /// A relay's side for tests: a socket that the relay may busy-poll or not.
    struct TestSide {
        stream: UnixStream,
        pollable: bool,
    }

    impl Side for TestSide {
        fn pollable(&self) -> Option<RawFd> {
            self.pollable.then(|| self.stream.as_raw_fd())
        }
    }

    impl AsyncRead for TestSide {
        fn poll_read(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
        }
    }

    impl AsyncWrite for TestSide {
        fn poll_write(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
        }

        fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.get_mut().stream).poll_flush(cx)
        }

        fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
        }
    }

    /// A relay between two socket pairs: the outer ends, (client, editor), talk through it.
    /// Both sides may be busy-polled.
    async fn relayed(
        busy_poll: Duration,
        limit: &'static SpinLimit,
        editor_pending: &'static [u8],
    ) -> (
        UnixStream,
        UnixStream,
        tokio::task::JoinHandle<io::Result<()>>,
        std::sync::Arc<AtomicUsize>,
    ) {
        relayed_polling(busy_poll, limit, editor_pending, [true, true]).await
    }

    /// [`relayed`], with `pollable` saying which of (client, editor) the relay may busy-poll.
    async fn relayed_polling(
        busy_poll: Duration,
        limit: &'static SpinLimit,
        editor_pending: &'static [u8],
        [client_pollable, editor_pollable]: [bool; 2],
    ) -> (
        UnixStream,
        UnixStream,
        tokio::task::JoinHandle<io::Result<()>>,
        std::sync::Arc<AtomicUsize>,
    ) {
        let (client, inner_client) = UnixStream::pair().unwrap();
        let (editor, inner_editor) = UnixStream::pair().unwrap();
        let mut inner_client = TestSide {
            stream: inner_client,
            pollable: client_pollable,
        };
        let mut inner_editor = TestSide {
            stream: inner_editor,
            pollable: editor_pollable,
        };
        let seen = std::sync::Arc::new(AtomicUsize::new(0));
        let counter = seen.clone();
        let task = tokio::spawn(async move {
            relay(
                &mut inner_client,
                b"",
                &mut inner_editor,
                editor_pending,
                busy_poll,
                limit,
                || {
                    counter.fetch_add(1, Ordering::Relaxed);
                },
            )
            .await
        });
        (client, editor, task, seen)
    }

    #[tokio::test]
    async fn echoes_pass_both_ways_with_and_without_busy_polling() {
        static ONE: SpinLimit = SpinLimit::new(1);
        for busy_poll in [Duration::ZERO, Duration::from_micros(50)] {
            let (mut a, mut b, task, seen) = relayed(busy_poll, &ONE, b"").await;
            for i in 0..200u32 {
                let message = format!("message {i}");
                a.write_all(message.as_bytes()).await.unwrap();
                let mut got = vec![0; message.len()];
                b.read_exact(&mut got).await.unwrap();
                assert_eq!(got, message.as_bytes());
                b.write_all(&got).await.unwrap();
                let mut back = vec![0; message.len()];
                a.read_exact(&mut back).await.unwrap();
                assert_eq!(back, message.as_bytes());
            }
            drop((a, b));
            task.await.unwrap().unwrap();
            assert!(seen.load(Ordering::Relaxed) >= 2, "traffic was reported");
        }
        assert_eq!(
            ONE.spinning.load(Ordering::Relaxed),
            0,
            "its permit returned"
        );
    }

    /// Runs `conversation` on a thread of its own with the relay's outer ends, made blocking:
    /// a polling relay holds its worker, and a test task queued behind it there (tokio's LIFO
    /// slot is not stolen) would not run until the window ended.
    async fn converse(
        client: UnixStream,
        editor: UnixStream,
        conversation: impl FnOnce(std::os::unix::net::UnixStream, std::os::unix::net::UnixStream)
        + Send
        + 'static,
    ) {
        let blocking = |stream: UnixStream| {
            let stream = stream.into_std().unwrap();
            stream.set_nonblocking(false).unwrap();
            stream
        };
        let (client, editor) = (blocking(client), blocking(editor));
        let ends = std::thread::spawn(move || conversation(client, editor));
        let ended = tokio::task::spawn_blocking(move || ends.join())
            .await
            .unwrap();
        if let Err(panic) = ended {
            std::panic::resume_unwind(panic);
        }
    }

    /// Waits (up to 10 s, far less than the windows of the tests) until `n` connections poll.
    fn polling_becomes(limit: &SpinLimit, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while limit.spinning.load(Ordering::Relaxed) != n {
            assert!(
                Instant::now() < deadline,
                "polling connections never became {n}"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// One side says something, and the relay passes it on.
    fn tell(from: &mut std::os::unix::net::UnixStream, to: &mut std::os::unix::net::UnixStream) {
        use std::io::{Read, Write};
        from.write_all(b"question").unwrap();
        let mut got = [0; 8];
        to.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"question");
    }

    /// One side asks, the other answers: the relay polls the answering side from the moment
    /// the question is passed on until the answer comes.
    fn ask(
        from: &mut std::os::unix::net::UnixStream,
        to: &mut std::os::unix::net::UnixStream,
        limit: &SpinLimit,
    ) {
        use std::io::{Read, Write};
        tell(from, to);
        polling_becomes(limit, 1);
        to.write_all(b"answer").unwrap();
        let mut back = [0; 6];
        from.read_exact(&mut back).unwrap();
        assert_eq!(&back, b"answer");
    }

    /// With only one side pollable (the editor, if `editor_polled`, else the browser): a
    /// message to it from the other side makes the relay poll it until its answer comes, and a
    /// message from it starts nothing.
    /// `limit` is the test's own, since tests run at once.
    async fn only_one_side_is_polled(editor_polled: bool, limit: &'static SpinLimit) {
        let (client, editor, task, _) = relayed_polling(
            Duration::from_secs(30),
            limit,
            b"",
            [!editor_polled, editor_polled],
        )
        .await;
        converse(client, editor, move |mut client, mut editor| {
            let (polled, other) = if editor_polled {
                (&mut editor, &mut client)
            } else {
                (&mut client, &mut editor)
            };
            ask(other, polled, limit);
            // Well before the 30 s window would end.
            polling_becomes(limit, 0);
            tell(polled, other);
            std::thread::sleep(Duration::from_millis(50));
            assert_eq!(limit.spinning.load(Ordering::Relaxed), 0);
        })
        .await;
        task.await.unwrap().unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn busy_polling_waits_for_the_editors_answer_and_ends_with_it() {
        static LIMIT_ONE: SpinLimit = SpinLimit::new(1);
        only_one_side_is_polled(true, &LIMIT_ONE).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn busy_polling_waits_for_the_browsers_answer_and_ends_with_it() {
        static LIMIT_ONE: SpinLimit = SpinLimit::new(1);
        only_one_side_is_polled(false, &LIMIT_ONE).await;
    }

    /// With both sides pollable, each answer opens the window for the answer to it: the relay
    /// polls throughout a conversation, and stops when a side ends it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn busy_polling_follows_a_conversation_and_stops_at_its_end() {
        static LIMIT_ONE: SpinLimit = SpinLimit::new(1);
        let (client, editor, task, _) = relayed(Duration::from_secs(30), &LIMIT_ONE, b"").await;
        converse(client, editor, |mut client, mut editor| {
            use std::io::Read;
            for _ in 0..3 {
                ask(&mut client, &mut editor, &LIMIT_ONE);
                // The window for the browser's next message is open now.
                polling_becomes(&LIMIT_ONE, 1);
            }
            // The browser leaves: its end ends the window at once, not after 30 s.
            client.shutdown(std::net::Shutdown::Write).unwrap();
            let mut rest = Vec::new();
            editor.read_to_end(&mut rest).unwrap();
            assert!(rest.is_empty());
            polling_becomes(&LIMIT_ONE, 0);
        })
        .await;
        task.await.unwrap().unwrap();
    }

    /// While a window waits for one side, what the other side sends is not held back until the
    /// window ends: an editor's several messages in a row reach the browser as they come.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_window_holds_back_nothing_from_the_side_it_does_not_wait_for() {
        static LIMIT_ONE: SpinLimit = SpinLimit::new(1);
        let (client, editor, task, _) = relayed(Duration::from_secs(30), &LIMIT_ONE, b"").await;
        converse(client, editor, |mut client, mut editor| {
            client
                .set_read_timeout(Some(Duration::from_secs(5)))
                .unwrap();
            editor
                .set_read_timeout(Some(Duration::from_secs(5)))
                .unwrap();
            // The editor's first message opens a 30 s window for the browser's answer.
            tell(&mut editor, &mut client);
            polling_becomes(&LIMIT_ONE, 1);
            for _ in 0..3 {
                // Each comes through well within the window (a read times out after 5 s).
                tell(&mut editor, &mut client);
            }
            // And the other way round: the browser's message opens a window for the editor's
            // answer, during which the browser's next one passes too.
            ask(&mut client, &mut editor, &LIMIT_ONE);
            tell(&mut client, &mut editor);
            tell(&mut client, &mut editor);
        })
        .await;
        task.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn what_the_editor_sent_before_the_relay_goes_first() {
        let (mut client, mut editor, task, _) =
            relayed(Duration::from_micros(50), &LIMIT, b"early;").await;
        editor.write_all(b"then more").await.unwrap();
        let mut got = vec![0; "early;then more".len()];
        client.read_exact(&mut got).await.unwrap();
        assert_eq!(got, b"early;then more");
        client.write_all(b"hello").await.unwrap();
        let mut hello = [0; 5];
        editor.read_exact(&mut hello).await.unwrap();
        assert_eq!(&hello, b"hello");
        drop((client, editor));
        task.await.unwrap().unwrap();
    }

    /// Both sides send 8 MiB at once and read only afterwards: a relay that waited on one
    /// direction's write while the other filled up would hang here.
    #[tokio::test]
    async fn large_transfers_both_ways_at_once_do_not_deadlock() {
        const SIZE: usize = 8 << 20;
        let (a, b, task, _) = relayed(Duration::from_micros(50), &LIMIT, b"").await;
        let pattern = |seed: u8| (0..SIZE).map(move |i| (i as u8).wrapping_mul(31) ^ seed);
        let side = |stream: UnixStream, seed: u8, peer_seed: u8| async move {
            let (mut read, mut write) = stream.into_split();
            let sending = tokio::spawn(async move {
                let data: Vec<u8> = pattern(seed).collect();
                write.write_all(&data).await.unwrap();
                write.shutdown().await.unwrap();
                write
            });
            let mut got = Vec::new();
            read.read_to_end(&mut got).await.unwrap();
            let _write = sending.await.unwrap();
            assert_eq!(got.len(), SIZE);
            assert!(got.iter().copied().eq(pattern(peer_seed)), "bytes intact");
        };
        tokio::time::timeout(Duration::from_secs(30), async {
            tokio::join!(side(a, 1, 2), side(b, 2, 1))
        })
        .await
        .expect("no deadlock");
        task.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn one_side_closing_is_passed_on_and_the_other_direction_goes_on() {
        let (a, mut b, task, _) = relayed(Duration::ZERO, &LIMIT, b"").await;
        let (mut a_read, mut a_write) = a.into_split();
        a_write.write_all(b"last words").await.unwrap();
        a_write.shutdown().await.unwrap();
        let mut got = Vec::new();
        b.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"last words", "b sees a's end after its data");
        b.write_all(b"still here").await.unwrap();
        let mut back = vec![0; 10];
        a_read.read_exact(&mut back).await.unwrap();
        assert_eq!(&back, b"still here");
        drop(b);
        task.await.unwrap().unwrap();
    }

    /// Asks `n` times; each ask that polls is answered in time or not. Returns how many polled.
    fn asks(
        polling: &mut Polling<'_>,
        limit: &'static SpinLimit,
        n: usize,
        in_time: bool,
    ) -> usize {
        let mut polled = 0;
        for _ in 0..n {
            polling.asked(limit);
            if polling.now.is_some() {
                polled += 1;
                if in_time {
                    polling.answered();
                } else {
                    while polling.still_waiting() {}
                }
            }
        }
        polled
    }

    #[test]
    fn polling_backs_off_while_answers_come_late_and_returns_when_they_come_in_time() {
        static LIMIT_ONE: SpinLimit = SpinLimit::new(1);
        let mut polling = Polling::new(Duration::from_micros(1));
        assert_eq!(
            asks(&mut polling, &LIMIT_ONE, 10, true),
            10,
            "in time: every message"
        );
        // Late: polls at asks 1, 3, 6, 11, 20, 37, 70, then once in 65.
        let late = asks(&mut polling, &LIMIT_ONE, 1000, false);
        assert_eq!(late, 7 + (1000 - 70) / 65, "late answers: rarely");
        let back = asks(&mut polling, &LIMIT_ONE, 400, true);
        assert!(back > 300, "in time again: polls again ({back} of 400)");
        assert_eq!(asks(&mut polling, &LIMIT_ONE, 10, true), 10);
        assert_eq!(LIMIT_ONE.spinning.load(Ordering::Relaxed), 0);
        let mut off = Polling::new(Duration::ZERO);
        assert_eq!(
            asks(&mut off, &LIMIT_ONE, 10, true),
            0,
            "a zero window never polls"
        );
    }

    #[test]
    fn an_open_window_is_not_extended_and_a_cancelled_one_counts_no_miss() {
        static LIMIT_ONE: SpinLimit = SpinLimit::new(1);
        let mut polling = Polling::new(Duration::from_secs(5));
        polling.asked(&LIMIT_ONE);
        let until = polling.now.as_ref().map(|(until, _)| *until);
        std::thread::sleep(Duration::from_millis(2));
        polling.asked(&LIMIT_ONE);
        assert_eq!(polling.now.as_ref().map(|(u, _)| *u), until);
        polling.cancel();
        assert_eq!(LIMIT_ONE.spinning.load(Ordering::Relaxed), 0, "permit back");
        polling.asked(&LIMIT_ONE);
        assert!(polling.now.is_some(), "no back-off after a cancel");
    }

    /// A question and its answer read in one pass leave the window for the browser's next
    /// message open, not one for an answer already given.
    #[test]
    fn after_a_question_and_its_answer_the_window_waits_for_the_next_question() {
        static LIMIT_ONE: SpinLimit = SpinLimit::new(1);
        let mut windows = Windows {
            editor: Polling::new(Duration::from_secs(5)),
            client: Polling::new(Duration::from_secs(5)),
        };
        windows.passed(&LIMIT_ONE, Source::Client, 8);
        assert!(windows.editor.now.is_some(), "waits for the editor");
        windows.passed(&LIMIT_ONE, Source::Editor, 6);
        assert!(windows.editor.now.is_none() && windows.client.now.is_some());
        windows.passed(&LIMIT_ONE, Source::Client, 0);
        assert!(windows.client.now.is_some(), "nothing read changes nothing");
        drop(windows);
        assert_eq!(LIMIT_ONE.spinning.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn at_most_so_many_connections_spin() {
        let limit = SpinLimit::new(2);
        let permits: Vec<_> = std::iter::from_fn(|| limit.start()).take(10).collect();
        assert_eq!(permits.len(), 2);
        drop(permits);
        assert!(limit.start().is_some(), "permits come back");
    }
}
