//! Deadlines seconds away, one or more per request: how long a client may take to send a request's
//! head (hyper's header timeout) and how long an editor may take to answer. Through tokio's timer
//! each of them is an entry in its wheel, inserted and removed under its lock, which measured about
//! 1.7 µs a request (BENCHMARKS.md, section 2). Here a deadline is an atomic: moving it is a store
//! (the answer's deadline lives as long as its connection and is moved per request, and per chunk
//! of an upload), and one ticker thread wakes what has passed, once a second, late by up to a
//! second, which timeouts of many seconds do not mind. A deadline joins the ticker's list once, on
//! its first wait; hyper makes a new one per request head. A deadline polled compares with the
//! ticker's last reading rather than the clock. Paired against the server before it had these
//! timeouts, deadlines on tokio's timer kept 0.902 of its throughput, these 0.923 (`3f869d4`).

use futures_util::task::AtomicWaker;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// How often the ticker looks: the most a deadline fires late.
const TICK: Duration = Duration::from_secs(1);

static START: LazyLock<Instant> = LazyLock::new(Instant::now);

/// Milliseconds since this process's first deadline: what the atomics hold.
fn now_ms() -> u64 {
    START.elapsed().as_millis() as u64
}

fn ms_at(at: Instant) -> u64 {
    at.saturating_duration_since(*START).as_millis() as u64
}

/// The ticker's last reading of [`now_ms`] (0 before it first ticks). Behind by at most a tick,
/// which is a deadline's precision anyway; reading it costs no clock (a proxied request waits
/// on several deadlines, each polled more than once).
static TICKED_MS: AtomicU64 = AtomicU64::new(0);

fn coarse_now_ms() -> u64 {
    match TICKED_MS.load(Ordering::Acquire) {
        0 => now_ms(),
        ticked => ticked,
    }
}

/// One deadline: when it passes, who waits for it, and whether the ticker knows it.
#[derive(Default)]
struct Slot {
    at_ms: AtomicU64,
    waker: AtomicWaker,
    joined: AtomicBool,
}

/// The deadlines that wait, for the ticker.
static WAITING: Mutex<Vec<Weak<Slot>>> = Mutex::new(Vec::new());
static TICKER: std::sync::Once = std::sync::Once::new();

fn join_ticker(slot: &Arc<Slot>) {
    WAITING
        .lock()
        .expect("deadlines")
        .push(Arc::downgrade(slot));
    // A thread of its own rather than a task: it serves every runtime of the process (each
    // test has its own), whichever ends first.
    TICKER.call_once(|| {
        let _ = std::thread::Builder::new()
            .name("deadlines".into())
            .spawn(|| {
                loop {
                    std::thread::sleep(TICK);
                    let now = now_ms();
                    // Before the wake-ups, so that what they wake sees its deadline passed.
                    TICKED_MS.store(now, Ordering::Release);
                    let mut waiting = WAITING.lock().expect("deadlines");
                    waiting.retain(|slot| match slot.upgrade() {
                        Some(slot) => {
                            // Taken, so a deadline long passed is not woken every second.
                            if slot.at_ms.load(Ordering::Acquire) <= now
                                && let Some(waker) = slot.waker.take()
                            {
                                waker.wake();
                            }
                            true
                        }
                        None => false,
                    });
                }
            });
    });
}

/// A deadline that can be moved cheaply; as a future, it resolves once it has passed. Clones
/// are the same deadline (one waiter at a time: a connection's requests take turns).
#[derive(Clone)]
pub struct Deadline {
    slot: Arc<Slot>,
}

impl Deadline {
    pub fn at(at: Instant) -> Deadline {
        let slot = Arc::new(Slot::default());
        slot.at_ms.store(ms_at(at), Ordering::Release);
        Deadline { slot }
    }

    pub fn after(duration: Duration) -> Deadline {
        Deadline::at(Instant::now() + duration)
    }

    /// A deadline not yet set: it never passes until [`Deadline::reset`].
    pub fn unset() -> Deadline {
        let deadline = Deadline {
            slot: Arc::new(Slot::default()),
        };
        deadline.disarm();
        deadline
    }

    /// Takes the deadline away: nothing waits for it any more.
    pub fn disarm(&self) {
        self.slot.at_ms.store(u64::MAX, Ordering::Release);
    }

    /// Moves the deadline; a wait already under way sees the new one.
    pub fn reset(&self, at: Instant) {
        self.slot.at_ms.store(ms_at(at), Ordering::Release);
    }

    pub fn has_passed(&self) -> bool {
        self.slot.at_ms.load(Ordering::Acquire) <= now_ms()
    }

    /// Passed by the ticker's clock: a deadline that passed since its last tick is found at
    /// the next, as a waiting one is.
    fn has_passed_by_tick(&self) -> bool {
        self.slot.at_ms.load(Ordering::Acquire) <= coarse_now_ms()
    }
}

impl Future for Deadline {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.has_passed_by_tick() {
            return Poll::Ready(());
        }
        self.slot.waker.register(cx.waker());
        if !self.slot.joined.swap(true, Ordering::AcqRel) {
            join_ticker(&self.slot);
        }
        // Passed between the first look and the registration: the ticker may have missed it.
        if self.has_passed_by_tick() {
            return Poll::Ready(());
        }
        Poll::Pending
    }
}

impl hyper::rt::Sleep for Deadline {}

/// hyper's timer, on [`Deadline`]s.
#[derive(Clone, Copy, Debug, Default)]
pub struct CoarseTimer;

impl hyper::rt::Timer for CoarseTimer {
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn hyper::rt::Sleep>> {
        Box::pin(Deadline::after(duration))
    }

    fn sleep_until(&self, deadline: Instant) -> Pin<Box<dyn hyper::rt::Sleep>> {
        Box::pin(Deadline::at(deadline))
    }

    fn reset(&self, sleep: &mut Pin<Box<dyn hyper::rt::Sleep>>, new_deadline: Instant) {
        match sleep.as_mut().downcast_mut_pin::<Deadline>() {
            Some(deadline) => deadline.reset(new_deadline),
            None => *sleep = self.sleep_until(new_deadline),
        }
    }
}

/// Runs `work` until it finishes, or until `timeout` from now (then None), on `deadline`,
/// which is left disarmed.
pub async fn within<F: Future>(
    deadline: &Deadline,
    timeout: Duration,
    work: F,
) -> Option<F::Output> {
    let mut waiting = deadline.clone();
    waiting.reset(Instant::now() + timeout);
    let out = tokio::select! {
        biased;
        out = work => Some(out),
        () = &mut waiting => None,
    };
    waiting.disarm();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_deadline_fires_within_a_tick_of_its_time_and_moves_without_firing() {
        let start = Instant::now();
        let deadline = Deadline::after(Duration::from_millis(300));
        assert!(!deadline.has_passed());
        // Moved while waited for: the wait follows it.
        let same = deadline.clone();
        let mover = async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            same.reset(Instant::now() + Duration::from_millis(1500));
        };
        tokio::join!(mover, deadline);
        let took = start.elapsed();
        assert!(
            took >= Duration::from_millis(1600),
            "fired at {took:?}, before its moved time"
        );
        assert!(
            took < Duration::from_millis(1600) + TICK + Duration::from_millis(500),
            "{took:?}"
        );
    }

    #[tokio::test]
    async fn work_that_ends_in_time_wins_and_work_that_does_not_is_cut() {
        let deadline = Deadline::unset();
        assert!(!deadline.has_passed(), "an unset deadline never passes");
        let in_time = within(&deadline, Duration::from_secs(5), async { 7 }).await;
        assert_eq!(in_time, Some(7));
        let cut = within(
            &deadline,
            Duration::from_millis(10),
            std::future::pending::<()>(),
        )
        .await;
        assert_eq!(cut, None);
        assert!(!deadline.has_passed(), "left disarmed");
        assert!(Deadline::at(Instant::now()).has_passed());
    }

    #[test]
    fn hyper_resets_a_deadline_in_place() {
        use hyper::rt::Timer;
        let timer = CoarseTimer;
        let mut sleep = timer.sleep(Duration::from_millis(1));
        let before = sleep
            .as_mut()
            .downcast_mut_pin::<Deadline>()
            .unwrap()
            .slot
            .clone();
        timer.reset(&mut sleep, Instant::now() + Duration::from_secs(60));
        let after = sleep.as_mut().downcast_mut_pin::<Deadline>().unwrap();
        assert!(
            Arc::ptr_eq(&before, &after.slot),
            "the same deadline, moved"
        );
        assert!(!after.has_passed());
    }
}
