//! The admins' pool map, drawn on the server (the pool tab comes drawn, so the browser loads
//! no code for it): every card to scale, its slices coloured by user, pre-started or free, each
//! used slice filled to its memory in use. The geometry is pure and tested below.

use crate::domain::pool::format_mib;
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

    #[test]
    fn slices_are_drawn_to_the_cards_scale_in_order() {
        let gpu = AdminGpu {
            id: "g0".into(),
            model: "L40S".into(),
            memory_mib: 49152,
            hold: crate::domain::hold::SliceHold::Soft,
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
            hold: crate::domain::hold::SliceHold::None,
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
