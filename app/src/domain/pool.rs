//! How GPUs split into slots, and which free slot a launch takes.

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
    /// Whether the slice's limits are enforced on the card (HAMi-core or MPS), not just advisory.
    pub enforced: bool,
    /// Index for CUDA_VISIBLE_DEVICES, when the card is real.
    pub cuda_index: Option<u32>,
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
}

/// Free slots of the asked size, best first.
///
/// Packs onto the busiest card so whole cards stay free for bursts; ties go to the lowest
/// slot id, so the choice is deterministic.
pub fn rank_free_slots(slots: &[SlotUse], slice_mib: u64) -> Vec<&SlotUse> {
    let free_on = |gpu: &str| slots.iter().filter(|s| s.free && s.gpu_id == gpu).count();
    let mut candidates: Vec<&SlotUse> = slots
        .iter()
        .filter(|s| s.free && s.slice_mib == slice_mib)
        .collect();
    candidates.sort_by(|a, b| {
        free_on(&a.gpu_id)
            .cmp(&free_on(&b.gpu_id))
            .then_with(|| a.slot_id.cmp(&b.slot_id))
    });
    candidates
}

/// "8 GB" for 8192 MiB; "512 MB" below a GiB.
pub fn format_mib(mib: u64) -> String {
    if mib >= 1024 && mib.is_multiple_of(1024) {
        format!("{} GB", mib / 1024)
    } else if mib >= 1024 {
        format!("{:.1} GB", mib as f64 / 1024.0)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(id: &str, memory_mib: u64, slice_mib: u64) -> GpuSpec {
        GpuSpec {
            id: id.into(),
            model: "Virtual".into(),
            memory_mib,
            slice_mib,
            enforced: false,
            cuda_index: None,
        }
    }

    fn slot(id: &str, gpu: &str, slice_mib: u64, free: bool) -> SlotUse {
        SlotUse {
            slot_id: id.into(),
            gpu_id: gpu.into(),
            slice_mib,
            free,
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
    fn formats_memory() {
        assert_eq!(format_mib(8192), "8 GB");
        assert_eq!(format_mib(512), "512 MB");
        assert_eq!(format_mib(1536), "1.5 GB");
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
