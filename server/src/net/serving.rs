//! Client connections are served by single-threaded runtimes, `proxy.serving_threads` of them (one
//! per core by default), each connection handed to the next in turn and staying on it for its whole
//! life, its WebSocket relay included; the rest of the server (background work, the accept loop)
//! runs on the main runtime.
//!
//! Under tokio's multi-thread scheduler a proxied request wakes its connection's task from the I/O
//! driver two or three times, and each wake-up may rouse another worker to steal it: a cross-thread
//! hand-off and a futex call, on a machine whose cores the client and the editor also want. A
//! connection served by one thread throughout is woken in place: a request costs 9–19 % less CPU
//! and the proxy answers about 1.26× the requests a second (BENCHMARKS.md, section 2, "One runtime
//! per core"; a thread per core that kept one shared pool of editor connections was tried first and
//! not taken). The price: work that holds a thread (a page render, busy polling) delays the other
//! connections on it. Work that a request starts and that outlives it (a launch, a stop, a
//! promotion's push) goes to the main runtime (`Handles::background` in `service`), which is shut down with
//! the server. Idle connections to editors are kept per serving thread ([`thread_index`]), since a
//! socket is watched by the driver of the runtime that opened it.
//!
//! The runtimes are made once per process and shared by every server in it (tests start many).

use std::cell::Cell;
use std::future::Future;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

struct Serving {
    runtimes: Vec<tokio::runtime::Handle>,
    next: AtomicUsize,
}

static SERVING: OnceLock<Serving> = OnceLock::new();

thread_local! {
    /// Which serving thread this is, from 1; 0 on any other thread.
    static THREAD_INDEX: Cell<usize> = const { Cell::new(0) };
}

/// The serving thread this code runs on, from 1; 0 off them. What is kept per thread (idle
/// connections to editors) is kept by this index, so that a connection is used by the runtime
/// whose driver watches its socket.
pub fn thread_index() -> usize {
    THREAD_INDEX.with(Cell::get)
}

/// How many serving threads `configured` asks for: that many, or one per core when 0.
pub fn thread_count(configured: u64) -> usize {
    match configured {
        0 => std::thread::available_parallelism().map_or(1, usize::from),
        n => usize::try_from(n).unwrap_or(usize::MAX),
    }
}

fn start(threads: usize) -> Serving {
    let runtimes = (1..=threads.max(1))
        .map(|index| {
            let (made, handle) = std::sync::mpsc::channel();
            std::thread::Builder::new()
                .name(format!("serve-{index}"))
                .spawn(move || {
                    THREAD_INDEX.with(|cell| cell.set(index));
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .expect("a serving runtime");
                    made.send(runtime.handle().clone())
                        .expect("the starter waits");
                    // Serves what is spawned onto it for as long as the process lives.
                    runtime.block_on(std::future::pending::<()>());
                })
                .expect("a serving thread");
            handle.recv().expect("the serving thread starts")
        })
        .collect();
    Serving {
        runtimes,
        next: AtomicUsize::new(0),
    }
}

impl Serving {
    fn spawn<F>(&self, connection: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let turn = self.next.fetch_add(1, Ordering::Relaxed) % self.runtimes.len();
        self.runtimes[turn].spawn(connection);
    }
}

/// Serving threads of their own, apart from the process's, for tests.
#[cfg(test)]
pub(crate) fn separate(threads: usize) -> Vec<tokio::runtime::Handle> {
    start(threads).runtimes
}

/// Runs `connection` on one of the serving threads, in turn; the first call starts `threads`
/// of them (later calls use those).
pub fn spawn<F>(threads: usize, connection: F)
where
    F: Future<Output = ()> + Send + 'static,
{
    SERVING.get_or_init(|| start(threads)).spawn(connection);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn connections_take_the_serving_threads_in_turn_and_each_knows_its_index() {
        // Threads of its own, not the process's: other tests serve connections meanwhile.
        let serving = start(2);
        assert_eq!(serving.runtimes.len(), 2);
        let (seen, mut indexes) = tokio::sync::mpsc::unbounded_channel();
        for _ in 0..4 {
            let seen = seen.clone();
            serving.spawn(async move {
                let name = std::thread::current().name().map(str::to_string);
                seen.send((thread_index(), name)).unwrap();
            });
        }
        let mut got = Vec::new();
        for _ in 0..4 {
            got.push(indexes.recv().await.unwrap());
        }
        // In turn: two each.
        got.sort();
        let want: Vec<_> = [1, 1, 2, 2]
            .into_iter()
            .map(|i| (i, Some(format!("serve-{i}"))))
            .collect();
        assert_eq!(got, want);
        assert_eq!(
            thread_index(),
            0,
            "the test's own thread serves no connection"
        );
    }

    #[test]
    fn zero_threads_means_one_per_core() {
        assert!(thread_count(0) >= 1);
        assert_eq!(thread_count(3), 3);
    }
}
