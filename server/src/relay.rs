//! Relays an upgraded connection (WebSocket) between the browser and the editor, byte for byte.
//!
//! Sleeping on readiness costs each message a wake-up of the relay, and on a virtual machine a
//! wake-up costs tens of microseconds (BENCHMARKS.md, section 3). So after the relay passes bytes
//! from the browser to the editor, it keeps asking the editor's socket directly, past the runtime's
//! readiness, for a short window (`busy_poll`) before it sleeps again: an editor on the same
//! machine often answers within it. The browser is a network away, so nothing is awaited from it
//! that way. This is what Linux's `net.core.busy_read` does for network queues, and like it, it
//! is off unless configured (`proxy.websocket_busy_poll_us`). The window holds its serving
//! thread, and the other connections on it (yielding to the runtime between asks measured worse, BENCHMARKS.md), so it is short,
//! ends as soon as the editor answers, backs off on connections whose editor answers slower than
//! that, and a [`SpinLimit`] caps how many connections poll at once.

use std::io;
use std::os::fd::{AsFd, AsRawFd, RawFd};
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

/// Relays between the browser's stream and the editor's socket until both directions have
/// ended. `editor_pending` is what hyper read from the editor past its 101, sent first.
/// `traffic` is called whenever bytes arrive from either side. Busy polling reads the editor's
/// descriptor directly, so `editor` must be a plain socket that keeps no read buffer of its own
/// (tokio's TCP and Unix streams; not TLS or a buffered reader).
pub async fn relay<C, E>(
    client: &mut C,
    editor: &mut E,
    editor_pending: &[u8],
    busy_poll: Duration,
    limit: &SpinLimit,
    traffic: impl Fn(),
) -> io::Result<()>
where
    C: AsyncRead + AsyncWrite + Unpin,
    E: AsyncRead + AsyncWrite + AsFd + Unpin,
{
    let editor_fd = editor.as_fd().as_raw_fd();
    let (mut to_editor, mut to_client) = (Pipe::new(&[]), Pipe::new(editor_pending));
    let mut polling = Polling::new(busy_poll);
    std::future::poll_fn(|cx| {
        loop {
            let asked = to_editor.pump(cx, client, editor)?;
            let answered = to_client.pump(cx, editor, client)?;
            if to_editor.closed && to_client.closed {
                return Poll::Ready(Ok(()));
            }
            if asked + answered > 0 {
                traffic();
                if answered > 0 {
                    polling.answered();
                }
                if asked > 0 {
                    polling.asked(limit);
                }
                continue;
            }
            // Worth asking only while the question has reached the editor and its answer has
            // room to go: otherwise nothing could be taken now, whatever the editor does.
            let can_take = to_editor.is_empty() && to_client.is_empty() && !to_client.eof;
            if !can_take {
                polling.cancel();
            } else if polling.still_waiting() {
                if to_client.take_now(editor_fd)? > 0 {
                    traffic();
                    polling.answered();
                }
                continue;
            }
            return Poll::Pending;
        }
    })
    .await
}

/// Whether to busy-poll for the editor's answer, learnt per connection: a window that ran out
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

    /// Ends an open window without counting it against the editor: the relay could not have
    /// taken an answer anyway (the browser is slow to read, say).
    fn cancel(&mut self) {
        self.now = None;
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

    /// A relay between two socket pairs: the outer ends, (client, editor), talk through it.
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
        let (client, mut inner_client) = UnixStream::pair().unwrap();
        let (editor, mut inner_editor) = UnixStream::pair().unwrap();
        let seen = std::sync::Arc::new(AtomicUsize::new(0));
        let counter = seen.clone();
        let task = tokio::spawn(async move {
            relay(
                &mut inner_client,
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

    /// The relay polls while a message waits for its answer, and stops as soon as it comes.
    /// Both outer ends are driven from a thread of their own: a polling relay holds its worker,
    /// and a test task queued behind it there (tokio's LIFO slot is not stolen) would not run
    /// until the window ended.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn busy_polling_waits_for_the_editors_answer_and_ends_with_it() {
        use std::io::{Read, Write};
        static LIMIT_ONE: SpinLimit = SpinLimit::new(1);
        let (client, editor, task, _) = relayed(Duration::from_secs(30), &LIMIT_ONE, b"").await;
        let blocking = |stream: UnixStream| {
            let stream = stream.into_std().unwrap();
            stream.set_nonblocking(false).unwrap();
            stream
        };
        let (mut client, mut editor) = (blocking(client), blocking(editor));
        let ends = std::thread::spawn(move || {
            // Waits (up to 10 s, far less than the window) for the number of polling connections.
            let polling_becomes = |n: usize| {
                let deadline = Instant::now() + Duration::from_secs(10);
                while LIMIT_ONE.spinning.load(Ordering::Relaxed) != n {
                    assert!(
                        Instant::now() < deadline,
                        "polling connections never became {n}"
                    );
                    std::thread::sleep(Duration::from_millis(5));
                }
            };
            client.write_all(b"question").unwrap();
            let mut got = [0; 8];
            editor.read_exact(&mut got).unwrap();
            polling_becomes(1);
            editor.write_all(b"answer").unwrap();
            let mut back = [0; 6];
            client.read_exact(&mut back).unwrap();
            assert_eq!(&back, b"answer");
            // Well before the 30 s window would end.
            polling_becomes(0);
            // The editor speaking first starts nothing: the browser is a network away.
            editor.write_all(b"news").unwrap();
            let mut news = [0; 4];
            client.read_exact(&mut news).unwrap();
            std::thread::sleep(Duration::from_millis(50));
            assert_eq!(LIMIT_ONE.spinning.load(Ordering::Relaxed), 0);
        });
        let ended = tokio::task::spawn_blocking(move || ends.join())
            .await
            .unwrap();
        if let Err(panic) = ended {
            std::panic::resume_unwind(panic);
        }
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

    #[test]
    fn at_most_so_many_connections_spin() {
        let limit = SpinLimit::new(2);
        let permits: Vec<_> = std::iter::from_fn(|| limit.start()).take(10).collect();
        assert_eq!(permits.len(), 2);
        drop(permits);
        assert!(limit.start().is_some(), "permits come back");
    }
}
