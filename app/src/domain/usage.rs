//! Usage over time: what sessions held (allocated) against what they used (busy), per UTC day,
//! and the per-minute readings a session's sparklines draw. Pure: the store hands in rows.

use serde::{Deserialize, Serialize};

pub const DAY_MS: i64 = 86_400_000;
pub const MINUTE_MS: i64 = 60_000;

/// A session as the usage per day counts it (times in Unix milliseconds).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Span {
    pub created_at: i64,
    /// When its editor became ready; a session that never did allocated nothing.
    pub ready_at: Option<i64>,
    /// When it ended; still running when `None`.
    pub ended_at: Option<i64>,
    pub slice_mib: u64,
    /// Set when it waited in the queue.
    pub queued_at: Option<i64>,
}

/// One UTC day of usage.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageDay {
    /// The day's start, Unix milliseconds.
    pub day_ms: i64,
    /// Slice memory held by ready editors, MiB × milliseconds.
    pub allocated_mib_ms: i64,
    /// The share of it in minutes where the reaper saw work (a busy kernel, GPU or CPU).
    pub busy_mib_ms: i64,
    /// Sessions launched that day.
    pub launches: u32,
    /// Of them, the ones that waited in the queue, and the longest wait to a ready editor.
    pub queued: u32,
    pub longest_wait_ms: i64,
}

impl UsageDay {
    /// GiB-hours: a whole 48 GB card for an hour is 48.
    pub fn allocated_gib_hours(&self) -> f64 {
        gib_hours(self.allocated_mib_ms)
    }
    pub fn busy_gib_hours(&self) -> f64 {
        gib_hours(self.busy_mib_ms)
    }
}

pub fn gib_hours(mib_ms: i64) -> f64 {
    mib_ms as f64 / 1024.0 / 3_600_000.0
}

/// The start of the UTC day holding `at_ms`.
pub fn day_of(at_ms: i64) -> i64 {
    at_ms.div_euclid(DAY_MS) * DAY_MS
}

/// The start of the minute holding `at_ms`: one reading a minute is kept.
pub fn minute_of(at_ms: i64) -> i64 {
    at_ms.div_euclid(MINUTE_MS) * MINUTE_MS
}

/// Usage per UTC day from the day holding `since_ms` to today, oldest first. `busy` is, per
/// day start, the slice MiB summed over the minutes a session was busy (one row per busy
/// minute of a session). Busy never exceeds what was allocated that day.
pub fn per_day(spans: &[Span], busy: &[(i64, i64)], since_ms: i64, now_ms: i64) -> Vec<UsageDay> {
    let first = day_of(since_ms.min(now_ms));
    let count = ((day_of(now_ms) - first) / DAY_MS + 1) as usize;
    let mut days: Vec<UsageDay> = (0..count)
        .map(|i| UsageDay {
            day_ms: first + i as i64 * DAY_MS,
            allocated_mib_ms: 0,
            busy_mib_ms: 0,
            launches: 0,
            queued: 0,
            longest_wait_ms: 0,
        })
        .collect();
    let index = |at: i64| -> Option<usize> {
        let i = (day_of(at) - first) / DAY_MS;
        (0..count as i64).contains(&i).then_some(i as usize)
    };
    for span in spans {
        if let Some(i) = index(span.created_at) {
            days[i].launches += 1;
            if let Some(queued_at) = span.queued_at {
                days[i].queued += 1;
                let waited = span.ready_at.or(span.ended_at).unwrap_or(now_ms) - queued_at;
                days[i].longest_wait_ms = days[i].longest_wait_ms.max(waited.max(0));
            }
        }
        let Some(ready) = span.ready_at else { continue };
        let mut from = ready.max(first);
        let until = span.ended_at.unwrap_or(now_ms).min(now_ms);
        while from < until {
            let day_end = day_of(from) + DAY_MS;
            let to = until.min(day_end);
            if let Some(i) = index(from) {
                days[i].allocated_mib_ms += span.slice_mib as i64 * (to - from);
            }
            from = to;
        }
    }
    for &(day, mib_minutes) in busy {
        if let Some(i) = index(day) {
            days[i].busy_mib_ms += mib_minutes * MINUTE_MS;
        }
    }
    for day in &mut days {
        day.busy_mib_ms = day.busy_mib_ms.min(day.allocated_mib_ms);
    }
    days
}

/// One minute of a session's readings (the highest of the minute's samples); `None` where the
/// runtime could not read it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Reading {
    pub at_ms: i64,
    pub gpu_mib: Option<u64>,
    pub gpu_util_pct: Option<u32>,
    /// CPU in thousandths of a core.
    pub cpu_milli: Option<u32>,
    pub ram_mib: Option<u64>,
    pub busy: bool,
}

/// The last hour of a session's readings, and the scales they are drawn on.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SessionReadings {
    pub slice_mib: u64,
    /// The memory of the card its slice is on, once it has one.
    pub card_mib: Option<u64>,
    /// The session's memory and CPU limits where the runtime sets them.
    pub ram_limit_mib: Option<u64>,
    pub cpu_limit: Option<f64>,
    pub readings: Vec<Reading>,
}

/// A sparkline's points in a `width` × `height` box over the hour ending at `now_ms`: one per
/// reading that has a value, x by its minute, y by the value against `max` (values past it are
/// drawn at the top). Gaps (no value) split nothing: the line joins the points it has.
pub fn spark_points(
    values: &[(i64, Option<f64>)],
    max: f64,
    now_ms: i64,
    width: f64,
    height: f64,
) -> Vec<(f64, f64)> {
    let start = now_ms - 60 * MINUTE_MS;
    let max = if max > 0.0 { max } else { 1.0 };
    values
        .iter()
        .filter(|(at, _)| *at >= start && *at <= now_ms)
        .filter_map(|(at, value)| {
            let value = (*value)?;
            let x = (at - start) as f64 / (60 * MINUTE_MS) as f64 * width;
            let y = height - (value / max).clamp(0.0, 1.0) * height;
            Some((x, y))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: i64 = 3_600_000;

    fn span(created: i64, ready: Option<i64>, ended: Option<i64>, mib: u64) -> Span {
        Span {
            created_at: created,
            ready_at: ready,
            ended_at: ended,
            slice_mib: mib,
            queued_at: None,
        }
    }

    #[test]
    fn a_session_over_midnight_counts_on_both_days() {
        let now = 3 * DAY_MS + 12 * H;
        let s = span(
            2 * DAY_MS - 2 * H,
            Some(2 * DAY_MS - H),
            Some(2 * DAY_MS + 2 * H),
            1024,
        );
        let days = per_day(&[s], &[], DAY_MS, now);
        assert_eq!(
            days.iter().map(|d| d.day_ms).collect::<Vec<_>>(),
            vec![DAY_MS, 2 * DAY_MS, 3 * DAY_MS]
        );
        assert_eq!(days[0].allocated_mib_ms, 1024 * H);
        assert_eq!(days[1].allocated_mib_ms, 1024 * 2 * H);
        assert_eq!(days[2].allocated_mib_ms, 0);
        assert_eq!(days[0].launches, 1);
        assert_eq!(days[0].allocated_gib_hours(), 1.0);
    }

    #[test]
    fn a_running_session_counts_up_to_now_and_the_window_cuts_the_past() {
        let now = 5 * DAY_MS + 6 * H;
        let running = span(DAY_MS, Some(DAY_MS), None, 2048);
        let days = per_day(&[running], &[], 5 * DAY_MS, now);
        assert_eq!(days.len(), 1, "only today");
        assert_eq!(days[0].allocated_mib_ms, 2048 * 6 * H);
        assert_eq!(days[0].launches, 0, "launched before the window");
        let never_ready = span(5 * DAY_MS + H, None, Some(5 * DAY_MS + 2 * H), 8192);
        let days = per_day(&[never_ready], &[], 5 * DAY_MS, now);
        assert_eq!((days[0].launches, days[0].allocated_mib_ms), (1, 0));
    }

    #[test]
    fn busy_minutes_weigh_by_slice_and_never_pass_what_was_held() {
        let now = DAY_MS + 12 * H;
        let s = span(DAY_MS, Some(DAY_MS), Some(DAY_MS + H), 4096);
        // 30 busy minutes of a 4 GiB slice, and a stray day outside the window.
        let days = per_day(
            std::slice::from_ref(&s),
            &[(DAY_MS, 4096 * 30), (0, 99)],
            DAY_MS,
            now,
        );
        assert_eq!(days[0].busy_mib_ms, 4096 * 30 * MINUTE_MS);
        assert_eq!(days[0].busy_gib_hours(), 2.0);
        let days = per_day(&[s], &[(DAY_MS, 4096 * 90)], DAY_MS, now);
        assert_eq!(days[0].busy_mib_ms, days[0].allocated_mib_ms, "clamped");
    }

    #[test]
    fn queue_waits_run_from_the_queue_to_the_editor() {
        let now = DAY_MS + 12 * H;
        let mut waited = span(DAY_MS + H, Some(DAY_MS + H + 90_000), None, 1024);
        waited.queued_at = Some(DAY_MS + H);
        let mut still = span(DAY_MS + 2 * H, None, None, 1024);
        still.queued_at = Some(DAY_MS + 11 * H);
        let days = per_day(&[waited, still], &[], DAY_MS, now);
        assert_eq!((days[0].launches, days[0].queued), (2, 2));
        assert_eq!(
            days[0].longest_wait_ms, H,
            "the one still waiting, an hour so far"
        );
    }

    #[test]
    fn sparklines_draw_the_last_hour_on_the_limits_scale() {
        let now = 10 * H;
        let values = [
            (now - 2 * H, Some(5.0)),
            (now - 60 * MINUTE_MS, Some(0.0)),
            (now - 30 * MINUTE_MS, None),
            (now - 30 * MINUTE_MS, Some(2.0)),
            (now, Some(8.0)),
        ];
        let points = spark_points(&values, 4.0, now, 60.0, 10.0);
        assert_eq!(points, vec![(0.0, 10.0), (30.0, 5.0), (60.0, 0.0)]);
        assert_eq!(
            spark_points(&[(now, Some(1.0))], 0.0, now, 60.0, 10.0),
            vec![(60.0, 0.0)]
        );
        assert_eq!(minute_of(61_500), 60_000);
        assert_eq!(day_of(-1), -DAY_MS);
    }
}
