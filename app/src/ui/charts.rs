//! Pictures drawn as SVG on the server, so that they read before the page's script loads: small
//! components of our own rather than a chart library, since each is a handful of rectangles and
//! a library would add to every page's wasm (ARCHITECTURE.md).
//!
//! The geometry is computed by pure functions (tested below); the components only draw it.

use crate::domain::pool::format_mib;
use crate::domain::usage::{self, UsageDay};
use crate::model::{AdminGpu, AdminSlot};
use leptos::prelude::*;

/// The picture's width in its own units; it scales to the page.
const WIDTH: f64 = 1000.0;
/// Space between two slices, in the picture's units.
const GAP: f64 = 4.0;

/// What a slice of a card is doing, as the pool map colours it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum SliceUse {
    Free,
    /// A pre-started editor waits there for the next launch.
    Warm,
    /// Held by a session of `user`; `used_mib` of its memory in use when last sampled.
    Used {
        user: String,
        used_mib: Option<u64>,
    },
}

/// One slice drawn on its card's scale.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct SliceBox {
    pub slot_id: String,
    pub x: f64,
    pub width: f64,
    pub slice_mib: u64,
    pub use_: SliceUse,
    /// The share of the slice's memory in use, 0 to 1, where known.
    pub filled: f64,
    /// Which of the palette's colours the user gets (the same on every card).
    pub colour: usize,
    pub title: String,
}

/// How many user colours the style sheet defines (`.pool-map .u0` … `.u7`).
pub(crate) const PALETTE: usize = 8;

/// A user's colour: the same name always gets the same one.
pub(crate) fn colour_of(user: &str) -> usize {
    // FNV-1a: stable across builds and machines, unlike the standard hasher.
    let hash = user.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    (hash % PALETTE as u64) as usize
}

fn slice_use(slot: &AdminSlot) -> SliceUse {
    match (&slot.user_name, &slot.holder) {
        (Some(user), _) => SliceUse::Used {
            user: user.clone(),
            used_mib: slot.gpu_used_mib,
        },
        (None, Some(_)) => SliceUse::Warm,
        (None, None) => SliceUse::Free,
    }
}

/// The width of `gpu`'s bar when the largest card of the pool has `scale_mib`: all cards on
/// one scale, so that a small card looks small.
pub(crate) fn card_width(gpu: &AdminGpu, scale_mib: u64) -> f64 {
    gpu.memory_mib as f64 / scale_mib.max(1) as f64 * WIDTH
}

/// The slices of `gpu`, left to right, each as wide as its memory on the pool's scale
/// (`scale_mib`, the largest card's memory).
pub(crate) fn card_layout(gpu: &AdminGpu, scale_mib: u64) -> Vec<SliceBox> {
    let memory = scale_mib.max(1) as f64;
    let mut at = 0.0;
    gpu.slots
        .iter()
        .map(|slot| {
            let span = slot.slice_mib as f64 / memory * WIDTH;
            let use_ = slice_use(slot);
            let (filled, colour, title) = match &use_ {
                SliceUse::Used { user, used_mib } => {
                    let editor = slot.editor.map(|e| e.label()).unwrap_or("session");
                    let in_use = match used_mib {
                        Some(used) => format!(
                            "{} of {} in use",
                            format_mib(*used),
                            format_mib(slot.slice_mib)
                        ),
                        None => format!("{}, use not sampled yet", format_mib(slot.slice_mib)),
                    };
                    let busy = slot
                        .gpu_util_pct
                        .map(|pct| format!(" · GPU {pct} % busy"))
                        .unwrap_or_default();
                    (
                        used_mib.map_or(0.0, |used| {
                            (used as f64 / slot.slice_mib.max(1) as f64).clamp(0.0, 1.0)
                        }),
                        colour_of(user),
                        format!("{user} · {editor} · {in_use}{busy}"),
                    )
                }
                SliceUse::Warm => (
                    0.0,
                    0,
                    format!(
                        "pre-started {} · {}",
                        slot.editor.map(|e| e.label()).unwrap_or("editor"),
                        format_mib(slot.slice_mib)
                    ),
                ),
                SliceUse::Free => (0.0, 0, format!("free · {}", format_mib(slot.slice_mib))),
            };
            let drawn = SliceBox {
                slot_id: slot.id.clone(),
                x: at,
                width: (span - GAP).max(1.0),
                slice_mib: slot.slice_mib,
                use_,
                filled,
                colour,
                title,
            };
            at += span;
            drawn
        })
        .collect()
}

/// The pool map: every card to scale, its slices coloured by user, pre-started or free, each
/// used slice filled to the memory in use.
#[component]
pub(crate) fn PoolMap(gpus: Vec<AdminGpu>) -> impl IntoView {
    view! {
        <figure class="pool-map" data-testid="pool-map">
            {let scale = gpus.iter().map(|g| g.memory_mib).max().unwrap_or(1);
            gpus
                .into_iter()
                .map(|gpu| {
                    let boxes = card_layout(&gpu, scale);
                    let outline = card_width(&gpu, scale);
                    let label = format!("{} · {}", gpu.model, format_mib(gpu.memory_mib));
                    view! {
                        <div class="pool-card" data-gpu=gpu.id.clone()>
                            <span class="pool-card-name">{label.clone()}</span>
                            <svg
                                viewBox=format!("0 0 {WIDTH} 56")
                                role="img"
                                aria-label=format!("{label}: its slices and who holds them")
                            >
                                <rect class="card-outline" x="1" y="1" width=outline - 2.0 height="54" rx="6" />
                                {boxes.into_iter().map(|b| view! { <Slice b /> }).collect_view()}
                            </svg>
                        </div>
                    }
                })
                .collect_view()}
            <figcaption class="muted small">
                "Each bar is a card, all on one scale; each box a slice: coloured by its user (darker: memory in use), grey for a pre-started editor, outlined when free."
            </figcaption>
        </figure>
    }
}

/// A slice's name as it fits in `width` units at the map's 18-unit bold type (about 11 units a
/// letter), shortened with an ellipsis, or nothing where not even three letters fit; the full
/// name is in the slice's title.
pub(crate) fn fitted_name(name: &str, width: f64) -> Option<String> {
    let fits = ((width - 8.0) / 11.0).floor().max(0.0) as usize;
    let letters = name.chars().count();
    if letters <= fits {
        Some(name.to_string())
    } else if fits >= 4 {
        Some(name.chars().take(fits - 1).chain(['…']).collect())
    } else {
        None
    }
}

#[component]
fn Slice(b: SliceBox) -> impl IntoView {
    let (status, user, class) = match &b.use_ {
        SliceUse::Used { user, .. } => (
            "used",
            Some(user.clone()),
            format!("slice used u{}", b.colour),
        ),
        SliceUse::Warm => ("warm", None, "slice warm".to_string()),
        SliceUse::Free => ("free", None, "slice free".to_string()),
    };
    let name = user.as_deref().and_then(|user| fitted_name(user, b.width));
    let fill_height = 48.0 * b.filled;
    view! {
        <g class=class data-slot=b.slot_id data-status=status data-user=user>
            <title>{b.title}</title>
            <rect x=b.x + 2.0 y="4" width=b.width height="48" rx="4" />
            {(fill_height > 0.0)
                .then(|| {
                    view! {
                        <rect
                            class="in-use"
                            x=b.x + 2.0
                            y=52.0 - fill_height
                            width=b.width
                            height=fill_height
                            rx="4"
                        />
                    }
                })}
            {name
                .map(|name| {
                    view! {
                        <text x=b.x + 2.0 + b.width / 2.0 y="33" text-anchor="middle">
                            {name}
                        </text>
                    }
                })}
        </g>
    }
}

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
/// the server only (the dashboard's drawn parts).
#[cfg(feature = "ssr")]
#[component]
pub(crate) fn BalanceLine(points: Vec<(i64, i64)>) -> impl IntoView {
    const W: f64 = 600.0;
    const H: f64 = 120.0;
    let Some(&(_, now)) = points.last() else {
        return ().into_any();
    };
    let first = points.first().map_or(0, |p| p.0);
    let high = points.iter().map(|p| p.1).max().unwrap_or(0);
    let drawn = line_points(&points, W, H);
    let path = drawn
        .iter()
        .map(|(x, y)| format!("{x:.1},{y:.1}"))
        .collect::<Vec<_>>()
        .join(" ");
    let (end_x, end_y) = drawn.last().copied().unwrap_or((W, H));
    let label = format!(
        "Your balance since {}: now {}, at most {}",
        crate::domain::dates::day(first),
        crate::domain::credits::with_unit(now),
        crate::domain::credits::with_unit(high)
    );
    view! {
        <figure class="balance-line">
            <svg
                viewBox=format!("-4 -8 {} {}", W + 8.0, H + 16.0)
                role="img"
                aria-label=label.clone()
                data-testid="balance-line"
                data-last-balance=now.to_string()
            >
                <line class="axis" x1="0" y1=H x2=W y2=H />
                <polyline class="balance" points=path />
                <circle class="now" cx=end_x cy=end_y r="4" />
            </svg>
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

/// Credits per item (a user, a session), ranked; values in milli-credits.
#[component]
pub(crate) fn CostBars(
    items: Vec<(String, i64)>,
    testid: &'static str,
    caption: String,
) -> impl IntoView {
    const W: f64 = 600.0;
    const ROW: f64 = 20.0;
    const LABEL: f64 = 200.0;
    let rows = ranked(&items);
    let height = ROW * rows.len().max(1) as f64;
    view! {
        <figure class="cost-bars">
            <svg
                viewBox=format!("0 0 {W} {height}")
                role="img"
                aria-label=caption.clone()
                data-testid=testid
            >
                {rows
                    .into_iter()
                    .enumerate()
                    .map(|(i, (label, value, share))| {
                        let y = i as f64 * ROW;
                        let length = (W - LABEL - 90.0) * share;
                        let key = label.clone();
                        view! {
                            <g class="cost-row" data-label=key data-value=value.to_string()>
                                <text class="cost-label" x=LABEL - 8.0 y=y + 14.0 text-anchor="end">{label}</text>
                                <rect x=LABEL y=y + 3.0 width=length.max(1.0) height=ROW - 6.0 rx="3" />
                                <text x=LABEL + length + 6.0 y=y + 14.0>{crate::domain::credits::format(value)}</text>
                            </g>
                        }
                    })
                    .collect_view()}
            </svg>
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
    use crate::domain::launch::EditorKind;
    use crate::domain::session::SessionState;

    fn slot(id: &str, mib: u64, user: Option<&str>, warm: bool, used: Option<u64>) -> AdminSlot {
        AdminSlot {
            id: id.into(),
            slice_mib: mib,
            cores_pct: 25,
            holder: (user.is_some() || warm).then(|| format!("s-{id}")),
            user_name: user.map(str::to_string),
            editor: (user.is_some() || warm).then_some(EditorKind::Marimo),
            state: user.map(|_| SessionState::Ready),
            gpu_used_mib: used,
            gpu_util_pct: None,
        }
    }

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

    #[test]
    fn slices_are_drawn_to_the_cards_scale_in_order() {
        let gpu = AdminGpu {
            id: "g0".into(),
            model: "L40S".into(),
            memory_mib: 49152,
            enforced: true,
            slots: vec![
                slot("a", 8192, Some("ada"), false, Some(2048)),
                slot("b", 16384, None, true, None),
                slot("c", 24576, None, false, None),
            ],
        };
        let boxes = card_layout(&gpu, 49152);
        assert_eq!(boxes.len(), 3, "one box per slot");
        let span = |b: &SliceBox| b.width + GAP;
        assert!((span(&boxes[0]) - WIDTH / 6.0).abs() < 1e-9);
        assert!((boxes[1].x - WIDTH / 6.0).abs() < 1e-9);
        assert!((span(&boxes[2]) - WIDTH / 2.0).abs() < 1e-9);
        assert!(
            (boxes[2].x + span(&boxes[2]) - WIDTH).abs() < 1e-9,
            "the card is filled"
        );
        assert_eq!(boxes[0].filled, 0.25);
        assert_eq!(
            boxes[0].title,
            format!("ada · {} · 2 GB of 8 GB in use", EditorKind::Marimo.label())
        );
        assert_eq!(boxes[1].use_, SliceUse::Warm);
        assert_eq!(boxes[2].use_, SliceUse::Free);
        let mut busy = gpu.clone();
        busy.slots[0].gpu_util_pct = Some(45);
        assert!(
            card_layout(&busy, 49152)[0]
                .title
                .ends_with("2 GB of 8 GB in use · GPU 45 % busy"),
            "how busy it kept the card, where sampled"
        );
    }

    #[test]
    fn a_name_too_long_for_its_slice_is_shortened_or_left_to_the_title() {
        assert_eq!(fitted_name("ada", 160.0).as_deref(), Some("ada"));
        assert_eq!(fitted_name("e2e-queue", 79.0).as_deref(), Some("e2e-q…"));
        assert_eq!(fitted_name("e2e-queue", 30.0), None);
        assert_eq!(
            fitted_name("émile-ñ", 90.0).as_deref(),
            Some("émile-ñ"),
            "letters, not bytes"
        );
    }

    #[test]
    fn a_user_keeps_one_colour_and_readings_past_the_slice_fill_it() {
        assert_eq!(colour_of("ada"), colour_of("ada"));
        let colours: std::collections::BTreeSet<usize> =
            ["ada", "bob", "cy", "dee", "eve", "fay", "gus", "hal"]
                .iter()
                .map(|u| colour_of(u))
                .collect();
        assert!(
            colours.len() >= 4,
            "names spread over the palette: {colours:?}"
        );
        let gpu = AdminGpu {
            id: "g".into(),
            model: "m".into(),
            memory_mib: 8192,
            enforced: false,
            slots: vec![slot("a", 8192, Some("ada"), false, Some(9000))],
        };
        let on_a_bigger_scale = card_layout(&gpu, 16384);
        assert_eq!(on_a_bigger_scale[0].filled, 1.0);
        assert!(
            (on_a_bigger_scale[0].width + GAP - WIDTH / 2.0).abs() < 1e-9,
            "half the largest card"
        );
        assert!((card_width(&gpu, 16384) - WIDTH / 2.0).abs() < 1e-9);
    }
}
