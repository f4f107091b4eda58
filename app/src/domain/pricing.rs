//! What a slice costs: a list of prices by GPU model and slice size, and a price per GiB for
//! the rest. The launch form shows these prices and the server holds them.

use super::pool::GpuSpec;

/// One configured price.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Price {
    /// The GPU model it applies to; `*` for any.
    pub model: String,
    pub slice_mib: u64,
    /// Milli-credits per hour.
    pub per_hour: i64,
}

/// Every price the pool charges.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PriceList {
    pub prices: Vec<Price>,
    /// Milli-credits per GiB of slice per hour, when no price names the model and size.
    pub default_per_gib_hour: i64,
}

impl PriceList {
    /// Milli-credits per hour for a slice of `slice_mib` on a card of `model`: the price for
    /// that model and size, else for any model (`*`) and that size, else the size's share of
    /// the default per GiB, rounded up.
    pub fn per_hour(&self, model: &str, slice_mib: u64) -> i64 {
        let listed = |wanted: &str| {
            self.prices
                .iter()
                .find(|p| p.model == wanted && p.slice_mib == slice_mib)
        };
        match listed(model).or_else(|| listed("*")) {
            Some(price) => price.per_hour,
            None => (self.default_per_gib_hour * slice_mib as i64 + 1023) / 1024,
        }
    }

    /// The price on the card `gpu_id` of `cards`; a card the pool no longer has is priced as
    /// any model.
    pub fn on_card(&self, cards: &[GpuSpec], gpu_id: &str, slice_mib: u64) -> i64 {
        match cards.iter().find(|g| g.id == gpu_id) {
            Some(gpu) => self.per_hour(&gpu.model, slice_mib),
            None => self.per_hour("*", slice_mib),
        }
    }

    /// What a launch of this size holds before it knows its card (a queued one): the price on
    /// the dearest card that has slices of this size, or is this size (a whole-card burst).
    pub fn dearest(&self, cards: &[GpuSpec], slice_mib: u64) -> i64 {
        cards
            .iter()
            .filter(|g| g.slice_mib == slice_mib || g.memory_mib == slice_mib)
            .map(|g| self.per_hour(&g.model, slice_mib))
            .max()
            .unwrap_or_else(|| self.per_hour("*", slice_mib))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn card(id: &str, model: &str, memory_mib: u64, slice_mib: u64) -> GpuSpec {
        GpuSpec {
            id: id.into(),
            model: model.into(),
            memory_mib,
            slice_mib,
            hold: crate::domain::hold::SliceHold::None,
            device_minor: None,
            mig: None,
        }
    }

    fn list() -> PriceList {
        PriceList {
            prices: vec![
                Price {
                    model: "L40S".into(),
                    slice_mib: 8192,
                    per_hour: 2000,
                },
                Price {
                    model: "*".into(),
                    slice_mib: 8192,
                    per_hour: 1500,
                },
            ],
            default_per_gib_hour: 125,
        }
    }

    #[test]
    fn the_model_price_wins_then_any_model_then_the_default_per_gib() {
        assert_eq!(list().per_hour("L40S", 8192), 2000);
        assert_eq!(list().per_hour("A30", 8192), 1500);
        assert_eq!(list().per_hour("A30", 16384), 2000, "16 GiB at 125");
        // A part of a GiB is charged as its share, rounded up to the milli-credit.
        assert_eq!(list().per_hour("A30", 1000), 123);
    }

    #[test]
    fn a_queued_launch_holds_the_dearest_cards_price() {
        let cards = [
            card("gpu-0", "A30", 24576, 8192),
            card("gpu-1", "L40S", 49152, 8192),
        ];
        assert_eq!(list().dearest(&cards, 8192), 2000);
        // The whole L40S as a burst: no price names it, so 48 GiB at the default.
        assert_eq!(list().dearest(&cards, 49152), 6000);
        // No card has that size: priced as any model.
        assert_eq!(list().dearest(&cards, 4096), 500);
    }

    #[test]
    fn a_card_the_pool_no_longer_has_is_priced_as_any_model() {
        let cards = [card("gpu-1", "L40S", 49152, 8192)];
        assert_eq!(list().on_card(&cards, "gpu-1", 8192), 2000);
        assert_eq!(list().on_card(&cards, "gone", 8192), 1500);
    }
}
