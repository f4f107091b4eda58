//! How fast a download may go: a token bucket, by the caller's clock (`now_ms` passed in).
//!
//! A bucket holds up to `burst` bytes and fills at `rate` bytes a second; a chunk goes when
//! the bucket holds its size, and takes it. So from the bucket's start to any time `t`, what
//! went is at most `burst + rate × t`: the promise [`Bucket::take`] keeps and the tests check.
//! Bytes are counted in thousandths (byte·ms / s), so no rounding ever lets more through.

/// A token bucket that fills with time.
#[derive(Clone, Debug)]
pub struct Bucket {
    /// Bytes a second.
    rate: u64,
    /// The most it holds, in thousandths of a byte.
    full: u128,
    /// What it holds now, in thousandths of a byte.
    held: u128,
    /// When `held` was last brought up to date.
    at_ms: i64,
}

impl Bucket {
    /// A full bucket at `now_ms` of `rate` bytes a second and `burst` bytes (at least 1 each).
    pub fn new(rate: u64, burst: u64, now_ms: i64) -> Bucket {
        let full = u128::from(burst.max(1)) * 1000;
        Bucket {
            rate: rate.max(1),
            full,
            held: full,
            at_ms: now_ms,
        }
    }

    /// Takes `bytes` at `now_ms` (Ok), or says how many ms to wait before they are there
    /// (Err; nothing taken). A chunk larger than the burst is never there: the caller splits
    /// chunks to at most the burst. A clock that goes back adds nothing.
    pub fn take(&mut self, bytes: u64, now_ms: i64) -> Result<(), u64> {
        if now_ms > self.at_ms {
            let gained = u128::from(self.rate) * u128::from((now_ms - self.at_ms) as u64);
            self.held = (self.held + gained).min(self.full);
            self.at_ms = now_ms;
        }
        let want = u128::from(bytes) * 1000;
        if want <= self.held {
            self.held -= want;
            return Ok(());
        }
        let missing = want - self.held;
        let wait = missing.div_ceil(u128::from(self.rate));
        Err(u64::try_from(wait).unwrap_or(u64::MAX))
    }
}

/// The export's limits in words, for the Settings page and the dashboard: "at most 50 MiB/s,
/// cut after 1 h". `bytes_per_second` or `max_seconds` 0: none.
pub fn limits_words(bytes_per_second: u64, max_seconds: u64) -> String {
    let speed = match bytes_per_second {
        0 => "no speed limit".to_string(),
        b if b % (1 << 20) == 0 => format!("at most {} MiB/s", b >> 20),
        b if b % (1 << 10) == 0 => format!("at most {} KiB/s", b >> 10),
        b => format!("at most {b} bytes/s"),
    };
    let time = match max_seconds {
        0 => "no time limit".to_string(),
        s if s % 3600 == 0 => format!("cut after {} h", s / 3600),
        s if s % 60 == 0 => format!("cut after {} min", s / 60),
        s => format!("cut after {s} s"),
    };
    format!("{speed}, {time}")
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: i64 = 1_796_459_400_000;

    #[test]
    fn a_full_bucket_lets_its_burst_go_at_once_then_waits_for_the_rate() {
        let mut b = Bucket::new(1000, 500, T0);
        assert_eq!(b.take(500, T0), Ok(()));
        // 100 bytes at 1000 B/s: 100 ms away.
        assert_eq!(b.take(100, T0), Err(100));
        assert_eq!(b.take(100, T0 + 99), Err(1));
        assert_eq!(b.take(100, T0 + 100), Ok(()));
        // Idle time fills it, but never past the burst.
        assert_eq!(b.take(501, T0 + 60_000), Err(1));
        assert_eq!(b.take(500, T0 + 60_000), Ok(()));
    }

    #[test]
    fn what_goes_never_passes_burst_plus_rate_times_time() {
        // 64 KiB chunks at 256 KiB/s with a 64 KiB burst, taken as soon as allowed, the
        // clock stepping by odd amounts: at each step, sent ≤ burst + rate × elapsed.
        let (rate, burst, chunk) = (256 * 1024u64, 64 * 1024u64, 64 * 1024u64);
        let mut b = Bucket::new(rate, burst, T0);
        let mut sent = 0u64;
        let mut now = T0;
        for step in 0..10_000 {
            while b.take(chunk, now).is_ok() {
                sent += chunk;
            }
            let elapsed = (now - T0) as u64;
            assert!(
                u128::from(sent) * 1000
                    <= u128::from(burst) * 1000 + u128::from(rate) * u128::from(elapsed),
                "step {step}: {sent} bytes after {elapsed} ms"
            );
            now += 1 + (step % 7) as i64;
        }
        // And it does not hold back either: close to the rate over the whole run.
        let elapsed = (now - T0) as u64;
        assert!(
            sent + chunk >= rate * elapsed / 1000,
            "{sent} after {elapsed} ms"
        );
    }

    #[test]
    fn the_wait_it_names_is_enough_and_a_clock_going_back_adds_nothing() {
        let mut b = Bucket::new(3, 10, T0);
        assert_eq!(b.take(10, T0), Ok(()));
        let wait = b.take(7, T0).unwrap_err();
        assert_eq!(wait, 2334);
        assert!(b.take(7, T0 + wait as i64 - 1).is_err());
        assert_eq!(b.take(7, T0 + wait as i64), Ok(()));
        assert!(b.take(1, T0 - 5_000).is_err());
    }

    #[test]
    fn limits_read_as_people_say_them() {
        assert_eq!(
            limits_words(50 << 20, 3600),
            "at most 50 MiB/s, cut after 1 h"
        );
        assert_eq!(
            limits_words(256 << 10, 90),
            "at most 256 KiB/s, cut after 90 s"
        );
        assert_eq!(limits_words(0, 0), "no speed limit, no time limit");
        assert_eq!(
            limits_words(1500, 120),
            "at most 1500 bytes/s, cut after 2 min"
        );
    }
}
