//! Pictures drawn as SVG on the server, so that they read before the page's script loads: small
//! components of our own rather than a chart library, since each is a handful of rectangles and
//! a library would add to every page's wasm (ARCHITECTURE.md).
//!
//! The geometry is computed by pure functions (tested below); the components only draw it.

use crate::domain::pool::format_mib;
use crate::domain::usage::{self, UsageDay};
use leptos::prelude::*;

/// A line's points in a `width` × `height` box: time left to right over the points' span, the
/// value bottom to top from zero (or the lowest value, if below) to the highest.
#[cfg(any(feature = "ssr", test))]
pub(crate) fn line_points(points: &[(i64, i64)], width: f64, height: f64) -> Vec<(f64, f64)> {
    let (Some(first), Some(last)) = (points.first(), points.last()) else {
        return Vec::new();
    };
    let span = (last.0 - first.0).max(1) as f64;
    let low = points.iter().map(|p| p.1).min().unwrap_or(0).min(0) as f64;
    let high = points.iter().map(|p| p.1).max().unwrap_or(0) as f64;
    let range = (high - low).max(1.0);
    points
        .iter()
        .map(|(at, value)| {
            (
                (at - first.0) as f64 / span * width,
                height - (*value as f64 - low) / range * height,
            )
        })
        .collect()
}

/// The user's balance over the last days, as a line: what they were given and spent. Drawn on
/// the server only (the dashboard's drawn parts). The axes' labels are text beside the picture,
/// not in it, so that they keep the page's size at any width (a phone shrinks the picture).
#[cfg(feature = "ssr")]
#[component]
pub(crate) fn BalanceLine(points: Vec<(i64, i64)>) -> impl IntoView {
    use crate::domain::{credits, dates};
    const W: f64 = 600.0;
    const H: f64 = 120.0;
    let Some(&(_, now)) = points.last() else {
        return ().into_any();
    };
    let first = points.first().map_or(0, |p| p.0);
    let high = points.iter().map(|p| p.1).max().unwrap_or(0);
    let low = points.iter().map(|p| p.1).min().unwrap_or(0).min(0);
    let drawn = line_points(&points, W, H);
    let path = drawn
        .iter()
        .map(|(x, y)| format!("{x:.1},{y:.1}"))
        .collect::<Vec<_>>()
        .join(" ");
    let (end_x, end_y) = drawn.last().copied().unwrap_or((W, H));
    let label = format!(
        "Your balance since {}: now {}, at most {}",
        dates::day(first),
        credits::with_unit(now),
        credits::with_unit(high)
    );
    let since_title = format!("{} UTC", dates::minute(first));
    view! {
        <figure class="balance-line">
            <div class="plot">
                <span class="y-title" aria-hidden="true">"Credits"</span>
                <span class="y-ticks" aria-hidden="true" data-testid="balance-y-ticks">
                    <span>{credits::format(high)}</span>
                    <span>{credits::format(low)}</span>
                </span>
                <svg
                    viewBox=format!("0 0 {W} {H}")
                    overflow="visible"
                    role="img"
                    aria-label=label.clone()
                    data-testid="balance-line"
                    data-last-balance=now.to_string()
                    data-first-at=first.to_string()
                    data-points=points.len().to_string()
                >
                    <line class="grid" x1="0" y1="0" x2=W y2="0" />
                    <line class="axis" x1="0" y1="0" x2="0" y2=H />
                    <line class="axis" x1="0" y1=H x2=W y2=H />
                    <polyline class="balance" points=path />
                    <circle class="now" cx=end_x cy=end_y r="4" />
                </svg>
                <span class="x-ticks" aria-hidden="true">
                    <time datetime=dates::rfc3339(first) title=since_title>{dates::day(first)}</time>
                    <span>"now"</span>
                </span>
                <span class="x-title" aria-hidden="true">"Time (days, UTC)"</span>
            </div>
            <figcaption class="muted small">{label}</figcaption>
        </figure>
    }
    .into_any()
}

/// One day's bars: the slice memory held (allocated) and the share of it in use (busy).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct DayBar {
    pub day_ms: i64,
    pub x: f64,
    pub width: f64,
    pub allocated: f64,
    pub busy: f64,
}

/// Days left to right in a `width` × `height` box, each bar as tall as its allocation against
/// the highest day's.
pub(crate) fn day_bars(days: &[UsageDay], width: f64, height: f64) -> Vec<DayBar> {
    let slot = width / days.len().max(1) as f64;
    let highest = days
        .iter()
        .map(|d| d.allocated_mib_ms)
        .max()
        .unwrap_or(0)
        .max(1) as f64;
    days.iter()
        .enumerate()
        .map(|(i, day)| DayBar {
            day_ms: day.day_ms,
            x: i as f64 * slot + slot * 0.1,
            width: slot * 0.8,
            allocated: day.allocated_mib_ms as f64 / highest * height,
            busy: day.busy_mib_ms.min(day.allocated_mib_ms) as f64 / highest * height,
        })
        .collect()
}

/// What the days add up to, in words: held, used, and the idle share (the sprawl).
pub(crate) fn usage_summary(days: &[UsageDay]) -> String {
    let allocated: i64 = days.iter().map(|d| d.allocated_mib_ms).sum();
    let busy: i64 = days.iter().map(|d| d.busy_mib_ms).sum();
    if allocated == 0 {
        return "No GPU slice was held in this period.".into();
    }
    let idle = 100.0 * (allocated - busy) as f64 / allocated as f64;
    format!(
        "Held {:.1} GiB·h of GPU slices, busy {:.1} GiB·h: {idle:.0} % idle.",
        usage::gib_hours(allocated),
        usage::gib_hours(busy)
    )
}

/// Allocated against busy GPU slice memory per day: what was paid for and what was used.
#[component]
pub(crate) fn UsageDays(days: Vec<UsageDay>, testid: &'static str) -> impl IntoView {
    const W: f64 = 600.0;
    const H: f64 = 100.0;
    let summary = usage_summary(&days);
    let first = days.first().map(|d| crate::domain::dates::day(d.day_ms));
    let bars = day_bars(&days, W, H);
    let titles: Vec<String> = days
        .iter()
        .map(|d| {
            format!(
                "{}: held {:.2} GiB·h, busy {:.2} GiB·h, {} launches, {} queued{}",
                crate::domain::dates::day(d.day_ms),
                d.allocated_gib_hours(),
                d.busy_gib_hours(),
                d.launches,
                d.queued,
                if d.queued > 0 {
                    format!(" (longest wait {} s)", d.longest_wait_ms / 1000)
                } else {
                    String::new()
                }
            )
        })
        .collect();
    let label = format!(
        "GPU slices held and busy per day since {}. {summary}",
        first.unwrap_or_default()
    );
    view! {
        <figure class="usage-days">
            <svg
                viewBox=format!("0 -4 {W} {}", H + 8.0)
                role="img"
                aria-label=label
                data-testid=testid
                data-days=days.len().to_string()
            >
                <line class="axis" x1="0" y1=H x2=W y2=H />
                {bars
                    .into_iter()
                    .zip(titles)
                    .zip(days.iter().map(|d| (d.allocated_mib_ms, d.busy_mib_ms)))
                    .map(|((bar, title), (allocated, busy))| {
                        view! {
                            <g
                                class="day"
                                data-day=bar.day_ms.to_string()
                                data-allocated=allocated.to_string()
                                data-busy=busy.to_string()
                            >
                                <title>{title}</title>
                                <rect class="allocated" x=bar.x y=H - bar.allocated width=bar.width height=bar.allocated />
                                <rect class="busy" x=bar.x y=H - bar.busy width=bar.width height=bar.busy />
                            </g>
                        }
                    })
                    .collect_view()}
            </svg>
            <figcaption class="muted small">
                <span class="key allocated"></span>
                " held "
                <span class="key busy"></span>
                " busy (a kernel, the GPU or the CPU at work). "
                {summary}
            </figcaption>
        </figure>
    }
}

/// Bars ranked longest first, each as long as its value against the largest (0 to 1).
pub(crate) fn ranked(items: &[(String, i64)]) -> Vec<(String, i64, f64)> {
    let mut items = items.to_vec();
    items.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let largest = items.first().map_or(1, |i| i.1.max(1)) as f64;
    items
        .into_iter()
        .map(|(label, value)| {
            let share = (value.max(0) as f64 / largest).clamp(0.0, 1.0);
            (label, value, share)
        })
        .collect()
}

/// Credits per item (a user, a session), ranked; values in milli-credits. A list of rows of
/// text and bars rather than a picture, so that its words keep the page's size and wrap at a
/// phone's width instead of shrinking with a picture or being cut at its edge.
#[component]
pub(crate) fn CostBars(
    items: Vec<(String, i64)>,
    testid: &'static str,
    caption: String,
) -> impl IntoView {
    let rows = ranked(&items);
    view! {
        <figure class="cost-bars">
            <ol class="cost-list" data-testid=testid aria-label=caption.clone()>
                {rows
                    .into_iter()
                    .map(|(label, value, share)| {
                        let key = label.clone();
                        view! {
                            <li class="cost-row" data-label=key data-value=value.to_string()>
                                <span class="cost-label">{label}</span>
                                <span class="cost-track" aria-hidden="true">
                                    <span class="cost-bar" style=format!("width: {:.1}%", share * 100.0)></span>
                                </span>
                                <span class="cost-value">{crate::domain::credits::format(value)}</span>
                            </li>
                        }
                    })
                    .collect_view()}
            </ol>
            <figcaption class="muted small">{caption}</figcaption>
        </figure>
    }
}

/// A sparkline of the last hour: one reading a minute against `max`, the latest in words.
#[component]
pub(crate) fn Sparkline(
    name: &'static str,
    testid: &'static str,
    values: Vec<(i64, Option<f64>)>,
    max: f64,
    now_ms: i64,
    latest: Option<String>,
) -> impl IntoView {
    const W: f64 = 120.0;
    const H: f64 = 24.0;
    let points = usage::spark_points(&values, max, now_ms, W, H);
    let path = points
        .iter()
        .map(|(x, y)| format!("{x:.1},{y:.1}"))
        .collect::<Vec<_>>()
        .join(" ");
    let count = points.len();
    let latest = latest.unwrap_or_else(|| "not measured".into());
    let label = format!("{name} over the last hour: now {latest}");
    let title = label.clone();
    view! {
        <span class="spark" data-testid=testid data-points=count.to_string() title=title>
            <span class="spark-name">{name}</span>
            <svg viewBox=format!("0 0 {W} {H}") role="img" aria-label=label>
                <line class="axis" x1="0" y1=H x2=W y2=H />
                <polyline points=path />
            </svg>
            <span class="spark-now">{latest}</span>
        </span>
    }
}

/// The session's GPU memory on its card's scale: the card's outline, the slice, what is in use.
#[component]
pub(crate) fn SliceBar(card_mib: u64, slice_mib: u64, used_mib: Option<u64>) -> impl IntoView {
    const W: f64 = 120.0;
    const H: f64 = 14.0;
    let card = card_mib.max(slice_mib).max(1) as f64;
    let slice = slice_mib as f64 / card * W;
    let used = used_mib.map_or(0.0, |u| u.min(slice_mib) as f64 / card * W);
    let label = match used_mib {
        Some(u) => format!(
            "GPU memory: {} in use of the slice's {}, on a {} card",
            format_mib(u),
            format_mib(slice_mib),
            format_mib(card_mib)
        ),
        None => format!(
            "GPU memory: the slice's {} on a {} card, use not measured",
            format_mib(slice_mib),
            format_mib(card_mib)
        ),
    };
    let title = label.clone();
    view! {
        <span class="spark" title=title>
            <span class="spark-name">"GPU memory"</span>
            <svg
                viewBox=format!("0 0 {W} {H}")
                role="img"
                aria-label=label
                data-testid="slice-bar"
                data-slice=slice_mib.to_string()
                data-used={used_mib.map(|u| u.to_string()).unwrap_or_default()}
            >
                <rect class="card-outline" x="0.5" y="0.5" width=W - 1.0 height=H - 1.0 rx="2" />
                <rect class="slice" x="0.5" y="0.5" width=slice - 1.0 height=H - 1.0 rx="2" />
                <rect class="in-use" x="0.5" y="0.5" width=used height=H - 1.0 rx="2" />
            </svg>
            <span class="spark-now">
                {used_mib.map(format_mib).unwrap_or_else(|| "not measured".into())}
            </span>
        </span>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn day(at: i64, allocated: i64, busy: i64) -> UsageDay {
        UsageDay {
            day_ms: at,
            allocated_mib_ms: allocated,
            busy_mib_ms: busy,
            launches: 1,
            queued: 0,
            longest_wait_ms: 0,
        }
    }

    #[test]
    fn day_bars_share_the_width_and_the_highest_day_fills_the_height() {
        let days = [day(0, 100, 50), day(1, 200, 300), day(2, 0, 0)];
        let bars = day_bars(&days, 300.0, 10.0);
        assert_eq!(bars.len(), 3);
        assert_eq!((bars[0].x, bars[0].width), (10.0, 80.0));
        assert_eq!((bars[0].allocated, bars[0].busy), (5.0, 2.5));
        assert_eq!(
            (bars[1].allocated, bars[1].busy),
            (10.0, 10.0),
            "busy clamped to held"
        );
        assert_eq!(bars[2].allocated, 0.0);
        assert!(day_bars(&[], 1.0, 1.0).is_empty());
        let hour_of_a_gib = 1024 * 3_600_000;
        assert_eq!(
            usage_summary(&[day(0, 4 * hour_of_a_gib, hour_of_a_gib)]),
            "Held 4.0 GiB·h of GPU slices, busy 1.0 GiB·h: 75 % idle."
        );
        assert_eq!(usage_summary(&[]), "No GPU slice was held in this period.");
    }

    #[test]
    fn cost_bars_rank_the_dearest_first() {
        let rows = ranked(&[("b".into(), 500), ("a".into(), 2000), ("c".into(), 0)]);
        assert_eq!(
            rows,
            vec![
                ("a".to_string(), 2000, 1.0),
                ("b".to_string(), 500, 0.25),
                ("c".to_string(), 0, 0.0)
            ]
        );
    }

    #[test]
    fn a_line_spans_its_box_with_zero_at_the_bottom() {
        let points = line_points(&[(0, 0), (50, 100), (100, 50)], 200.0, 10.0);
        assert_eq!(points, vec![(0.0, 10.0), (100.0, 0.0), (200.0, 5.0)]);
        let below = line_points(&[(0, -10), (10, 10)], 10.0, 10.0);
        assert_eq!(
            below,
            vec![(0.0, 10.0), (10.0, 0.0)],
            "a negative low is the bottom"
        );
        assert!(line_points(&[], 1.0, 1.0).is_empty());
        assert_eq!(line_points(&[(5, 7)], 10.0, 10.0), vec![(0.0, 0.0)]);
    }
}
