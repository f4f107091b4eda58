//! Backups, restores and exports of a workspace: the rules, with no I/O. Which part of a
//! workspace a request names ([`workspace_part`]), where a restore goes ([`restored_folder`]),
//! what a retention policy keeps and says ([`Retention`]), when the next scheduled backup is due
//! ([`Schedule`]), which snapshot ids are well formed and in which order a user sees them
//! ([`is_snapshot_id`], [`newest_first`]), and how a path is named to restic's include filter
//! ([`include_pattern`]).

use serde::{Deserialize, Serialize};

/// The longest workspace path a request may name.
pub const MAX_PATH_BYTES: usize = 1024;
const DAY_MS: i64 = 86_400_000;

/// The part of a workspace a request names: `None` (or empty, or `.`) is the whole workspace,
/// otherwise a relative path of normal parts, which can only name something inside it (links
/// are checked where it is opened). Leading `./` and doubled or trailing `/` are forgiven.
pub fn workspace_part(path: Option<&str>) -> Result<Option<String>, String> {
    let Some(path) = path.map(str::trim) else {
        return Ok(None);
    };
    if path.len() > MAX_PATH_BYTES {
        return Err(format!("the path is longer than {MAX_PATH_BYTES} bytes"));
    }
    if path.contains('\0') {
        return Err("the path contains a NUL character".into());
    }
    if path.starts_with('/') {
        return Err(
            "give the path relative to your workspace, without a leading `/` (e.g. `notebooks/a.ipynb`)"
                .into(),
        );
    }
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    let parts = match parts.split_first() {
        Some((&".", rest)) => rest.to_vec(),
        _ => parts,
    };
    if parts.iter().any(|p| *p == ".." || *p == ".") {
        return Err("the path must stay inside your workspace: no `..` or `.` parts".into());
    }
    Ok((!parts.is_empty()).then(|| parts.join("/")))
}

/// The folder a restore of a snapshot taken at `snapshot_ms` goes into, inside the workspace:
/// `restored-2026-12-05-0830` (the snapshot's time, UTC), or `…-2`, `…-3` for the `attempt`th
/// try when one by that name is there already. Never a name that is in use: the caller tries
/// the next attempt rather than write into it.
pub fn restored_folder(snapshot_ms: i64, attempt: u32) -> String {
    let (year, month, day, hour, minute, _) = crate::domain::dates::utc_parts(snapshot_ms);
    let base = format!("restored-{year:04}-{month:02}-{day:02}-{hour:02}{minute:02}");
    match attempt {
        0 | 1 => base,
        n => format!("{base}-{n}"),
    }
}

/// How many snapshots of each workspace are kept: the newest of each of the last `keep_daily`
/// days and of the last `keep_weekly` weeks that have one (restic's `forget --keep-daily
/// --keep-weekly`); the rest are forgotten and their data pruned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Retention {
    pub keep_daily: u32,
    pub keep_weekly: u32,
}

impl Retention {
    /// Refuses a policy that would keep nothing (every snapshot would go at the first prune).
    pub fn check(&self) -> Result<(), String> {
        if self.keep_daily == 0 && self.keep_weekly == 0 {
            return Err("keep_daily and keep_weekly are both 0: every snapshot would be deleted; keep at least one".into());
        }
        if self.keep_daily > 3650 || self.keep_weekly > 520 {
            return Err("keep at most 3650 daily and 520 weekly snapshots".into());
        }
        Ok(())
    }

    /// "the newest of each of the last 7 days and 4 weeks".
    pub fn words(&self) -> String {
        let days = plural(self.keep_daily, "day");
        let weeks = plural(self.keep_weekly, "week");
        match (self.keep_daily, self.keep_weekly) {
            (0, _) => format!("the newest of each of the last {weeks}"),
            (_, 0) => format!("the newest of each of the last {days}"),
            _ => format!("the newest of each of the last {days} and {weeks}"),
        }
    }
}

fn plural(n: u32, unit: &str) -> String {
    if n == 1 {
        format!("1 {unit}")
    } else {
        format!("{n} {unit}s")
    }
}

/// When scheduled backups run: each day at a time (UTC), or every so many hours from midnight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Schedule {
    /// `"02:30"`: daily at that minute of the day, UTC.
    DailyAt { minute_of_day: u32 },
    /// `"every 6h"`: at 00:00, 06:00, 12:00 and 18:00 UTC.
    EveryHours(u32),
}

impl Schedule {
    /// `"02:30"` or `"every 6h"` (1 to 24 hours, dividing the day or not).
    pub fn parse(text: &str) -> Result<Schedule, String> {
        let text = text.trim();
        let wrong = || {
            format!(
                "`{text}` is not a schedule: write a daily time in UTC like \"02:30\", or \"every 6h\""
            )
        };
        if let Some(hours) = text.strip_prefix("every ") {
            let hours: u32 = hours
                .trim()
                .strip_suffix('h')
                .and_then(|h| h.trim().parse().ok())
                .ok_or_else(wrong)?;
            if !(1..=24).contains(&hours) {
                return Err("a schedule runs every 1 to 24 hours".into());
            }
            return Ok(Schedule::EveryHours(hours));
        }
        let (h, m) = text.split_once(':').ok_or_else(wrong)?;
        let (h, m): (u32, u32) = (
            h.parse().map_err(|_| wrong())?,
            m.parse().map_err(|_| wrong())?,
        );
        if h > 23 || m > 59 || text.len() != 5 {
            return Err(wrong());
        }
        Ok(Schedule::DailyAt {
            minute_of_day: h * 60 + m,
        })
    }

    /// The first run strictly after `now_ms`.
    pub fn next_after(&self, now_ms: i64) -> i64 {
        let day_start = now_ms.div_euclid(DAY_MS) * DAY_MS;
        match *self {
            Schedule::DailyAt { minute_of_day } => {
                let today = day_start + i64::from(minute_of_day) * 60_000;
                if today > now_ms {
                    today
                } else {
                    today + DAY_MS
                }
            }
            Schedule::EveryHours(hours) => {
                let step = i64::from(hours) * 3_600_000;
                let mut at = day_start;
                while at <= now_ms {
                    at += step;
                }
                // A step that does not divide the day starts again at midnight.
                at.min(day_start + DAY_MS)
            }
        }
    }

    /// "daily at 02:30 UTC", "every 6 hours".
    pub fn words(&self) -> String {
        match *self {
            Schedule::DailyAt { minute_of_day } => format!(
                "daily at {:02}:{:02} UTC",
                minute_of_day / 60,
                minute_of_day % 60
            ),
            Schedule::EveryHours(1) => "every hour".into(),
            Schedule::EveryHours(n) => format!("every {n} hours"),
        }
    }
}

/// A snapshot id as restic writes it: 8 (short) to 64 lowercase hex digits. Anything else is
/// refused before it reaches a command line.
pub fn is_snapshot_id(id: &str) -> bool {
    (8..=64).contains(&id.len()) && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Whether `id` (full or short) names the snapshot whose full id is `full`.
pub fn names_snapshot(id: &str, full: &str) -> bool {
    is_snapshot_id(id) && full.starts_with(id)
}

/// A user's snapshots in the order they are shown: newest first, ties by id so the order is
/// stable.
pub fn newest_first<T>(snapshots: &mut [T], key: impl Fn(&T) -> (i64, &str)) {
    snapshots.sort_by(|a, b| {
        let (ta, ia) = key(a);
        let (tb, ib) = key(b);
        tb.cmp(&ta).then_with(|| ia.cmp(ib))
    });
}

/// Which of a workspace's snapshots (their times, ms) a retention policy forgets, as restic's
/// `forget --keep-daily --keep-weekly` decides it: newest first, a snapshot is kept by a rule
/// when it is the first seen of its day (or week, from Monday, UTC) and that rule has days (or
/// weeks) left; the rest are forgotten. The indexes into `times`, in any order. For where
/// snapshots are not restic's (VolumeSnapshots on a cluster), so both keep the same ones.
pub fn forgotten(times: &[i64], keep: Retention) -> Vec<usize> {
    let mut order: Vec<usize> = (0..times.len()).collect();
    order.sort_by(|a, b| times[*b].cmp(&times[*a]).then(a.cmp(b)));
    let day = |ms: i64| ms.div_euclid(DAY_MS);
    // 1970-01-01 was a Thursday: days + 3 counts weeks from a Monday.
    let week = |ms: i64| (ms.div_euclid(DAY_MS) + 3).div_euclid(7);
    let mut rules = [
        (keep.keep_daily, None, day as fn(i64) -> i64),
        (keep.keep_weekly, None, week),
    ];
    let mut out = Vec::new();
    for index in order {
        let mut kept = false;
        for (left, last, bucket) in &mut rules {
            let this = bucket(times[index]);
            if *left > 0 && *last != Some(this) {
                *left -= 1;
                *last = Some(this);
                kept = true;
            }
        }
        if !kept {
            out.push(index);
        }
    }
    out
}

/// `path` as a pattern of restic's include filter, which reads `*`, `?`, `[` and `\` as glob:
/// each is escaped so the pattern names that one path and nothing beside it.
pub fn include_pattern(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for c in path.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    // 2026-12-05 08:30:00 UTC.
    const AT: i64 = 1_796_459_400_000;

    #[test]
    fn retention_keeps_the_newest_of_each_day_and_week_and_forgets_the_rest() {
        let keep = |d, w| Retention {
            keep_daily: d,
            keep_weekly: w,
        };
        let hour = 3_600_000;
        // Two a day for ten days, the newest first in time order reversed.
        let times: Vec<i64> = (0..20).map(|i| AT - i * 12 * hour).collect();
        let mut gone = forgotten(&times, keep(3, 0));
        gone.sort();
        // Kept: the newest of 2026-12-05, -04 and -03 (indexes 0, 1 and 3: 08:30 and 20:30 of
        // the day before, then 20:30 two days before); all else goes.
        let kept: Vec<usize> = (0..20).filter(|i| !gone.contains(i)).collect();
        assert_eq!(kept, [0, 1, 3]);
        // Weekly adds the newest of earlier weeks (2026-12-05 is a Saturday: the week began on
        // Monday 2026-11-30; index 11 is Sunday 2026-11-29 20:30, the newest of the week before).
        let gone = forgotten(&times, keep(1, 2));
        let kept: Vec<usize> = (0..20).filter(|i| !gone.contains(i)).collect();
        assert_eq!(kept, [0, 11]);
        // Order of the input does not matter.
        let mut shuffled = times.clone();
        shuffled.reverse();
        let gone = forgotten(&shuffled, keep(3, 0));
        let mut kept: Vec<i64> = (0..20)
            .filter(|i| !gone.contains(i))
            .map(|i| shuffled[i])
            .collect();
        kept.sort();
        assert_eq!(kept, [times[3], times[1], times[0]]);
        assert!(forgotten(&[], keep(7, 4)).is_empty());
    }

    #[test]
    fn the_whole_workspace_is_named_by_nothing_an_empty_path_or_a_dot() {
        for whole in [
            None,
            Some(""),
            Some("  "),
            Some("."),
            Some("./"),
            Some(".//"),
        ] {
            assert_eq!(workspace_part(whole), Ok(None), "{whole:?}");
        }
    }

    #[test]
    fn a_part_is_relative_and_normalized() {
        assert_eq!(
            workspace_part(Some("./notebooks//a.ipynb/")),
            Ok(Some("notebooks/a.ipynb".into()))
        );
        assert_eq!(workspace_part(Some("data")), Ok(Some("data".into())));
        assert_eq!(
            workspace_part(Some("..data/x..y")),
            Ok(Some("..data/x..y".into())),
            "dots inside a name are a name"
        );
    }

    #[test]
    fn a_path_leading_out_of_the_workspace_is_refused_with_the_reason() {
        for out in [
            "..",
            "../bob",
            "a/../../etc",
            "a/./b",
            "/etc/passwd",
            "x\0y",
        ] {
            let refusal = workspace_part(Some(out)).unwrap_err();
            assert!(!refusal.is_empty(), "{out}");
        }
        assert!(
            workspace_part(Some("/etc"))
                .unwrap_err()
                .contains("relative")
        );
        assert!(workspace_part(Some(&"a/".repeat(600))).is_err());
    }

    #[test]
    fn a_restore_goes_into_a_dated_folder_and_never_one_in_use() {
        assert_eq!(restored_folder(AT, 0), "restored-2026-12-05-0830");
        assert_eq!(restored_folder(AT, 1), "restored-2026-12-05-0830");
        assert_eq!(restored_folder(AT, 2), "restored-2026-12-05-0830-2");
        assert_ne!(restored_folder(AT, 2), restored_folder(AT, 3));
    }

    #[test]
    fn retention_keeps_something_and_says_what() {
        let policy = Retention {
            keep_daily: 7,
            keep_weekly: 4,
        };
        assert_eq!(policy.check(), Ok(()));
        assert_eq!(
            policy.words(),
            "the newest of each of the last 7 days and 4 weeks"
        );
        let one_day = Retention {
            keep_daily: 1,
            keep_weekly: 0,
        };
        assert_eq!(one_day.words(), "the newest of each of the last 1 day");
        assert!(
            Retention {
                keep_daily: 0,
                keep_weekly: 0
            }
            .check()
            .unwrap_err()
            .contains("every snapshot would be deleted")
        );
    }

    #[test]
    fn a_daily_schedule_runs_next_today_or_tomorrow() {
        let at_0230 = Schedule::parse("02:30").unwrap();
        assert_eq!(at_0230.words(), "daily at 02:30 UTC");
        let day = AT - (8 * 60 + 30) * 60_000;
        assert_eq!(at_0230.next_after(AT), day + DAY_MS + 150 * 60_000);
        let at_0900 = Schedule::parse("09:00").unwrap();
        assert_eq!(at_0900.next_after(AT), day + 9 * 3_600_000);
        assert_eq!(
            at_0900.next_after(day + 9 * 3_600_000),
            day + DAY_MS + 9 * 3_600_000,
            "strictly after: a run that just began is not due again"
        );
    }

    #[test]
    fn an_hourly_schedule_counts_from_midnight() {
        let every_6h = Schedule::parse("every 6h").unwrap();
        assert_eq!(every_6h.words(), "every 6 hours");
        let day = AT - (8 * 60 + 30) * 60_000;
        assert_eq!(every_6h.next_after(AT), day + 12 * 3_600_000);
        let every_7h = Schedule::parse("every 7h").unwrap();
        assert_eq!(
            every_7h.next_after(day + 22 * 3_600_000),
            day + DAY_MS,
            "a step that does not divide the day begins again at midnight"
        );
        assert_eq!(Schedule::parse("every 1h").unwrap().words(), "every hour");
    }

    #[test]
    fn schedules_that_mean_nothing_are_refused() {
        for wrong in [
            "",
            "2:30",
            "24:00",
            "12:60",
            "every",
            "every 0h",
            "every 25h",
            "daily",
        ] {
            assert!(Schedule::parse(wrong).is_err(), "{wrong}");
        }
    }

    #[test]
    fn snapshot_ids_are_hex_of_a_sane_length() {
        assert!(is_snapshot_id("4f1c2a3b"));
        assert!(is_snapshot_id(&"a".repeat(64)));
        for wrong in [
            "4f1c2a3",
            "4F1C2A3B",
            "latest",
            "--tag=x",
            "4f1c2a3b;rm",
            "",
        ] {
            assert!(!is_snapshot_id(wrong), "{wrong}");
        }
        assert!(names_snapshot("4f1c2a3b", "4f1c2a3b99"));
        assert!(!names_snapshot("4f1c2a3c", "4f1c2a3b99"));
    }

    #[test]
    fn snapshots_are_shown_newest_first() {
        let mut list = vec![(1, "b"), (3, "a"), (1, "a")];
        newest_first(&mut list, |s| (s.0, s.1));
        assert_eq!(list, vec![(3, "a"), (1, "a"), (1, "b")]);
    }

    #[test]
    fn include_patterns_name_one_path_even_with_glob_characters() {
        assert_eq!(include_pattern("/w/a b/c.ipynb"), "/w/a b/c.ipynb");
        assert_eq!(include_pattern("/w/x[1]*?.txt"), "/w/x\\[1\\]\\*\\?.txt");
    }
}
