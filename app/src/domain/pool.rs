//! How GPUs split into slots, and which free slot a launch takes.

use super::hold::SliceHold;
use serde::{Deserialize, Serialize};

/// One card as configured or detected.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuSpec {
    /// Stable key: the NVIDIA UUID, or the declared name of a virtual GPU.
    pub id: String,
    pub model: String,
    pub memory_mib: u64,
    /// Each slot holds this much of the card.
    pub slice_mib: u64,
    /// What holds a session to its slice of this card.
    pub hold: SliceHold,
    /// The card's device node, `/dev/nvidia<minor>` (the driver's minor number, which need not
    /// be its NVML or CUDA index), when the card is real.
    pub device_minor: Option<u32>,
    /// Set when this "card" is a MIG instance of the card at `device_minor`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mig: Option<MigPlace>,
}

/// Where a MIG instance sits on its card: the ids its capability device nodes are listed by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigPlace {
    pub gpu_instance: u32,
    pub compute_instance: u32,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotSpec {
    pub id: String,
    pub gpu_id: String,
    pub slice_mib: u64,
    /// Share of the card's compute, for HAMi's `gpucores` and MPS's thread percentage.
    pub cores_pct: u32,
}

/// The slots a card splits into: as many whole slices as fit.
pub fn plan_slots(gpu_ordinal: usize, gpu: &GpuSpec) -> Vec<SlotSpec> {
    if gpu.slice_mib == 0 || gpu.slice_mib > gpu.memory_mib {
        return Vec::new();
    }
    let count = gpu.memory_mib / gpu.slice_mib;
    let cores_pct = ((gpu.slice_mib * 100) / gpu.memory_mib).clamp(1, 100) as u32;
    (0..count)
        .map(|index| SlotSpec {
            id: format!("g{gpu_ordinal}s{index}"),
            gpu_id: gpu.id.clone(),
            slice_mib: gpu.slice_mib,
            cores_pct,
        })
        .collect()
}

/// A slot as the allocator sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotUse {
    pub slot_id: String,
    pub gpu_id: String,
    pub slice_mib: u64,
    pub free: bool,
    /// Parked sessions that left this slot: each wants a slot of this card back (its editor's
    /// GPU is this card's).
    pub parked: u32,
}

/// Free slots of the asked size, best first.
///
/// Cards with free slots to spare beyond what their parked sessions will want back come first,
/// so that a launch takes a parked session's way back only when nothing else is free; among
/// them it packs onto the busiest card, so whole cards stay free for bursts (among the others,
/// the card its parked sessions are least short of). Ties go to the lowest slot id, so the
/// choice is deterministic.
pub fn rank_free_slots(slots: &[SlotUse], slice_mib: u64) -> Vec<&SlotUse> {
    let spare = |gpu: &str| {
        let on = slots.iter().filter(|s| s.gpu_id == gpu);
        let free = on.clone().filter(|s| s.free).count() as i64;
        free - on.map(|s| i64::from(s.parked)).sum::<i64>()
    };
    let mut candidates: Vec<&SlotUse> = slots
        .iter()
        .filter(|s| s.free && s.slice_mib == slice_mib)
        .collect();
    candidates.sort_by_key(|s| {
        let spare = spare(&s.gpu_id);
        (spare <= 0, spare.abs(), s.slot_id.clone())
    });
    candidates
}

/// "8 GB" for 8192 MiB; "512 MB" below a GiB.
pub fn format_mib(mib: u64) -> String {
    if mib >= 1024 && mib.is_multiple_of(1024) {
        format!("{} GB", mib / 1024)
    } else if mib >= 1024 {
        // Tenths of a GB in integers, rounded half to even as `{:.1}` of the float would be:
        // the browser bundle then carries no float formatting.
        let (mut tenths, rest) = ((mib * 10) / 1024, (mib * 10) % 1024);
        if rest > 512 || (rest == 512 && tenths % 2 == 1) {
            tenths += 1;
        }
        format!("{}.{} GB", tenths / 10, tenths % 10)
    } else {
        format!("{mib} MB")
    }
}

/// The sizes a launch may ask for, from the pool's cards (each card's memory and its slots'
/// sizes): every slice size some slot has, smallest first, and as bursts the whole memory of
/// each card split into more than one slot whose memory no slot has already.
pub fn offered_sizes(cards: &[(u64, Vec<u64>)]) -> (Vec<u64>, Vec<u64>) {
    let mut sizes: Vec<u64> = cards
        .iter()
        .flat_map(|(_, slots)| slots.iter().copied())
        .collect();
    sizes.sort_unstable();
    sizes.dedup();
    let mut bursts: Vec<u64> = cards
        .iter()
        .filter(|(_, slots)| slots.len() > 1)
        .map(|(memory_mib, _)| *memory_mib)
        .filter(|mib| !sizes.contains(mib))
        .collect();
    bursts.sort_unstable();
    bursts.dedup();
    (sizes, bursts)
}

/// What frees a place a queued launch may take: why its expected start is what it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Frees {
    /// An editor started ahead for the size is ready: the dispatcher's next pass hands it over.
    Warm,
    /// A running session's time ends.
    TimeEnds,
    /// A session its person left idle is reclaimed at its deadline (they have been warned).
    IdleReclaim,
}

/// When a running session frees its place: when its time ends, or sooner at its idle deadline
/// once the reaper is about to reclaim it (its person warned, or the deadline passed, by the
/// policy it is judged by now, pressure included), never before `now`; and which of the two
/// it is. A session the idle policy calls active may go on working, so only its end counts.
pub fn frees_by(
    ends_at: Option<i64>,
    idle: super::idle::Verdict,
    now: i64,
) -> Option<(i64, Frees)> {
    use super::idle::Verdict;
    let reclaim_at = match idle {
        Verdict::Warn { idle_at } | Verdict::Idle { idle_at } => Some(idle_at),
        Verdict::Active { .. } => None,
    };
    let (at, why) = match (ends_at, reclaim_at) {
        (Some(end), Some(reclaim)) if reclaim < end => (reclaim, Frees::IdleReclaim),
        (Some(end), _) => (end, Frees::TimeEnds),
        (None, Some(reclaim)) => (reclaim, Frees::IdleReclaim),
        (None, None) => return None,
    };
    Some((at.max(now), why))
}

/// [`frees_by`]'s moment alone.
pub fn frees_at(ends_at: Option<i64>, idle: super::idle::Verdict, now: i64) -> Option<i64> {
    frees_by(ends_at, idle, now).map(|(at, _)| at)
}

/// When the launch at `position` in line for a size may start: the `position`-th moment a place
/// of that size frees. `warm_ready` places free `now` (ready pre-started editors of the size,
/// which the dispatcher hands over or pushes off at its next pass); the others when each
/// running holder frees ([`frees_at`], any order; for a whole card, when its last session
/// frees). `None` when fewer places free than wait ahead of it: it waits for sessions that have
/// not started yet.
pub fn queue_eta(position: u32, now: i64, warm_ready: usize, frees_at: Vec<i64>) -> Option<i64> {
    let frees = frees_at
        .into_iter()
        .map(|at| (at, Frees::TimeEnds))
        .collect();
    queue_wait(position, now, warm_ready, frees).map(|wait| wait.at_ms)
}

/// When a queued launch should start and what frees the places counted until then.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueWait {
    pub at_ms: i64,
    /// What frees the first `position` places, each once, in [`Frees`] order: the places the
    /// launches ahead take and its own.
    pub by: Vec<Frees>,
}

/// [`queue_eta`] with the reasons: `frees` are the running holders' ([`frees_by`]).
pub fn queue_wait(
    position: u32,
    now: i64,
    warm_ready: usize,
    mut frees: Vec<(i64, Frees)>,
) -> Option<QueueWait> {
    frees.extend(std::iter::repeat_n((now, Frees::Warm), warm_ready));
    frees.sort_unstable();
    let counted = frees.get(..usize::try_from(position).ok().filter(|p| *p > 0)?)?;
    let mut by: Vec<Frees> = counted.iter().map(|(_, why)| *why).collect();
    by.sort_unstable();
    by.dedup();
    Some(QueueWait {
        at_ms: counted.last()?.0,
        by,
    })
}

/// What a queued launch waits for by its expected start, in words that follow the time:
/// "when a running session's time ends or an idle session is reclaimed (sooner if one stops)".
pub fn frees_words(by: &[Frees]) -> String {
    let parts: Vec<&str> = by
        .iter()
        .map(|why| match why {
            Frees::Warm => "an editor started ahead is handed over",
            Frees::TimeEnds => "a running session's time ends",
            Frees::IdleReclaim => "an idle session is reclaimed",
        })
        .collect();
    let said = match parts.as_slice() {
        [] => return "when a slice frees".into(),
        [one] => (*one).to_string(),
        [first @ .., last] => format!("{} or {last}", first.join(", ")),
    };
    let sooner = if by.iter().all(|why| *why == Frees::Warm) {
        ""
    } else {
        " (sooner if one stops)"
    };
    format!("when {said}{sooner}")
}

/// What a queued launch waits for and when it should start, in words (`why`: what frees its
/// place by then, [`frees_words`]).
pub fn queue_words(waits_for: Option<&str>, eta_ms: Option<i64>, why: Option<&str>) -> String {
    let what = waits_for.unwrap_or("a free slice");
    match eta_ms {
        Some(at) => format!(
            "Waiting for {what}: expected by {} UTC, {}.",
            super::dates::minute(at),
            why.unwrap_or("when a slice frees")
        ),
        None => format!(
            "Waiting for {what}: after launches that have not started yet, so no time can be given."
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queued_launch_says_what_it_waits_for_and_when() {
        let at = 1_764_640_800_000; // 2025-12-02 02:00 UTC
        let why = frees_words(&[Frees::TimeEnds]);
        assert_eq!(
            queue_words(Some("a free 4 GB slice"), Some(at), Some(&why)),
            "Waiting for a free 4 GB slice: expected by 2025-12-02 02:00 UTC, when a running session's time ends (sooner if one stops)."
        );
        assert!(queue_words(None, None, None).contains("no time can be given"));
    }

    #[test]
    fn the_wait_says_what_frees_the_places_it_counted() {
        use crate::domain::idle::Verdict;
        const MIN: i64 = 60_000;
        let now = 1_764_640_800_000; // the fixed clock: 2025-12-02 02:00 UTC
        // One session working until +20 min, one warned and idle at +4 min (its time runs to +50).
        let working = frees_by(
            Some(now + 20 * MIN),
            Verdict::Active {
                idle_at: now + 5 * MIN,
            },
            now,
        );
        let warned = frees_by(
            Some(now + 50 * MIN),
            Verdict::Warn {
                idle_at: now + 4 * MIN,
            },
            now,
        );
        assert_eq!(working, Some((now + 20 * MIN, Frees::TimeEnds)));
        assert_eq!(warned, Some((now + 4 * MIN, Frees::IdleReclaim)));
        // A warned session whose time ends first frees by its end; one past its deadline, now.
        assert_eq!(
            frees_by(
                Some(now + MIN),
                Verdict::Warn {
                    idle_at: now + 4 * MIN
                },
                now
            ),
            Some((now + MIN, Frees::TimeEnds))
        );
        assert_eq!(
            frees_by(
                Some(now + 50 * MIN),
                Verdict::Idle { idle_at: now - MIN },
                now
            ),
            Some((now, Frees::IdleReclaim))
        );
        let holders = vec![working.unwrap(), warned.unwrap()];
        // No editor started ahead: first in line waits for the idle one, second for the end too.
        let first = queue_wait(1, now, 0, holders.clone()).unwrap();
        assert_eq!(
            first,
            QueueWait {
                at_ms: now + 4 * MIN,
                by: vec![Frees::IdleReclaim]
            }
        );
        assert_eq!(
            frees_words(&first.by),
            "when an idle session is reclaimed (sooner if one stops)"
        );
        let second = queue_wait(2, now, 0, holders.clone()).unwrap();
        assert_eq!(second.at_ms, now + 20 * MIN);
        assert_eq!(
            frees_words(&second.by),
            "when a running session's time ends or an idle session is reclaimed (sooner if one stops)"
        );
        // A ready editor started ahead goes to the first in line, now.
        let warm = queue_wait(1, now, 1, holders.clone()).unwrap();
        assert_eq!(
            warm,
            QueueWait {
                at_ms: now,
                by: vec![Frees::Warm]
            }
        );
        assert_eq!(
            frees_words(&warm.by),
            "when an editor started ahead is handed over"
        );
        let third = queue_wait(3, now, 1, holders.clone()).unwrap();
        assert_eq!(third.at_ms, now + 20 * MIN);
        assert_eq!(
            frees_words(&third.by),
            "when an editor started ahead is handed over, a running session's time ends or an idle session is reclaimed (sooner if one stops)"
        );
        // More in line than places free: no time, no reasons.
        assert_eq!(queue_wait(4, now, 1, holders.clone()), None);
        assert_eq!(queue_wait(0, now, 1, holders), None);
    }

    #[test]
    fn the_nth_in_line_starts_when_the_nth_place_frees() {
        let ends = vec![300, 100, 200];
        assert_eq!(queue_eta(1, 0, 0, ends.clone()), Some(100));
        assert_eq!(queue_eta(3, 0, 0, ends.clone()), Some(300));
        assert_eq!(
            queue_eta(4, 0, 0, ends.clone()),
            None,
            "waits for one not started"
        );
        assert_eq!(queue_eta(0, 0, 0, ends), None);
        assert_eq!(queue_eta(1, 0, 0, Vec::new()), None);
    }

    #[test]
    fn a_ready_warm_editor_of_the_size_means_now() {
        let ends = vec![300, 100];
        assert_eq!(queue_eta(1, 50, 1, ends.clone()), Some(50));
        assert_eq!(
            queue_eta(2, 50, 1, ends.clone()),
            Some(100),
            "then the ends"
        );
        assert_eq!(queue_eta(2, 50, 2, Vec::new()), Some(50));
        assert_eq!(queue_eta(3, 50, 2, Vec::new()), None);
    }

    #[test]
    fn a_session_about_to_be_reclaimed_frees_at_its_idle_deadline() {
        use crate::domain::idle::Verdict;
        let now = 1_000;
        // Working: only its end counts, whatever its idle deadline would be.
        assert_eq!(
            frees_at(Some(5_000), Verdict::Active { idle_at: 2_000 }, now),
            Some(5_000)
        );
        // Warned: it frees at its deadline unless its person answers.
        assert_eq!(
            frees_at(Some(5_000), Verdict::Warn { idle_at: 2_000 }, now),
            Some(2_000)
        );
        // Past it (the reaper's next pass ends it): now, not in the past.
        assert_eq!(
            frees_at(Some(5_000), Verdict::Idle { idle_at: 400 }, now),
            Some(now)
        );
        // Its time ends before the deadline: the end.
        assert_eq!(
            frees_at(Some(1_500), Verdict::Warn { idle_at: 2_000 }, now),
            Some(1_500)
        );
        assert_eq!(
            frees_at(None, Verdict::Active { idle_at: 2_000 }, now),
            None
        );
        // Three in line, one warm editor, one idle session, one working until 5,000.
        let frees = vec![
            frees_at(Some(5_000), Verdict::Active { idle_at: 2_000 }, now).unwrap(),
            frees_at(Some(9_000), Verdict::Warn { idle_at: 3_000 }, now).unwrap(),
        ];
        assert_eq!(queue_eta(1, now, 1, frees.clone()), Some(now));
        assert_eq!(queue_eta(2, now, 1, frees.clone()), Some(3_000));
        assert_eq!(queue_eta(3, now, 1, frees), Some(5_000));
    }

    fn gpu(id: &str, memory_mib: u64, slice_mib: u64) -> GpuSpec {
        GpuSpec {
            id: id.into(),
            model: "Virtual".into(),
            memory_mib,
            slice_mib,
            hold: SliceHold::None,
            device_minor: None,
            mig: None,
        }
    }

    fn slot(id: &str, gpu: &str, slice_mib: u64, free: bool) -> SlotUse {
        SlotUse {
            slot_id: id.into(),
            gpu_id: gpu.into(),
            slice_mib,
            free,
            parked: 0,
        }
    }

    #[test]
    fn a_48_gb_card_makes_six_8_gb_slots() {
        let slots = plan_slots(0, &gpu("v0", 49152, 8192));
        assert_eq!(slots.len(), 6);
        assert_eq!(slots[0].id, "g0s0");
        assert_eq!(slots[5].id, "g0s5");
        assert!(
            slots
                .iter()
                .all(|s| s.slice_mib == 8192 && s.cores_pct == 16)
        );
    }

    #[test]
    fn a_whole_card_slice_is_one_slot_with_all_cores() {
        let slots = plan_slots(1, &gpu("v1", 24576, 24576));
        assert_eq!(slots.len(), 1);
        assert_eq!(slots[0].cores_pct, 100);
    }

    #[test]
    fn impossible_splits_make_no_slots() {
        assert!(plan_slots(0, &gpu("v0", 8192, 0)).is_empty());
        assert!(plan_slots(0, &gpu("v0", 8192, 16384)).is_empty());
    }

    #[test]
    fn ranks_only_free_slots_of_the_asked_size() {
        let slots = vec![
            slot("g0s0", "a", 8192, false),
            slot("g0s1", "a", 8192, true),
            slot("g1s0", "b", 4096, true),
        ];
        let ranked = rank_free_slots(&slots, 8192);
        assert_eq!(ranked.len(), 1);
        assert_eq!(ranked[0].slot_id, "g0s1");
        assert!(rank_free_slots(&slots, 2048).is_empty());
    }

    #[test]
    fn packs_onto_the_busiest_card() {
        let slots = vec![
            slot("g0s0", "a", 8192, true),
            slot("g0s1", "a", 8192, true),
            slot("g1s0", "b", 8192, false),
            slot("g1s1", "b", 8192, true),
        ];
        let ranked: Vec<_> = rank_free_slots(&slots, 8192)
            .into_iter()
            .map(|s| s.slot_id.as_str())
            .collect();
        assert_eq!(ranked, ["g1s1", "g0s0", "g0s1"]);
    }

    #[test]
    fn a_parked_sessions_card_is_taken_last() {
        // Card b is busier, but the one free slot there is what its parked session wants back.
        let mut slots = vec![
            slot("g0s0", "a", 8192, true),
            slot("g0s1", "a", 8192, true),
            slot("g1s0", "b", 8192, true),
            slot("g1s1", "b", 8192, false),
        ];
        slots[2].parked = 1;
        let ranked: Vec<_> = rank_free_slots(&slots, 8192)
            .into_iter()
            .map(|s| s.slot_id.as_str())
            .collect();
        assert_eq!(ranked, ["g0s0", "g0s1", "g1s0"]);
        // No card spares a slot: the one least short of its parked sessions first.
        slots[2].parked = 0;
        slots[0].parked = 2;
        slots[3].parked = 3;
        let ranked: Vec<_> = rank_free_slots(&slots, 8192)
            .into_iter()
            .map(|s| s.slot_id.as_str())
            .collect();
        assert_eq!(ranked, ["g0s0", "g0s1", "g1s0"], "a is short by 0, b by 2");
    }

    #[test]
    fn formats_memory() {
        assert_eq!(format_mib(8192), "8 GB");
        assert_eq!(format_mib(512), "512 MB");
        assert_eq!(format_mib(1536), "1.5 GB");
        assert_eq!(
            format_mib(1280),
            "1.2 GB",
            "half to even, as the float's format"
        );
        for mib in (1024u64..300_000).filter(|m| !m.is_multiple_of(1024)) {
            assert_eq!(
                format_mib(mib),
                format!("{:.1} GB", mib as f64 / 1024.0),
                "{mib} MiB"
            );
        }
    }

    #[test]
    fn slices_are_offered_by_size_and_split_cards_as_bursts() {
        let cards = [
            (49_152, vec![8_192; 6]),
            (24_576, vec![8_192, 8_192, 8_192]),
            // A card held whole is a slice already, not a burst.
            (16_384, vec![16_384]),
        ];
        let (sizes, bursts) = offered_sizes(&cards);
        assert_eq!(sizes, [8_192, 16_384]);
        assert_eq!(bursts, [24_576, 49_152]);
        assert_eq!(offered_sizes(&[]), (vec![], vec![]));
    }
}
