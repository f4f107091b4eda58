//! `[pool]`: the cards, their slices, their prices, and the editors kept warm.

use super::InvalidKey;
use super::credits::{amount, check_amount};
use serde::{Deserialize, Serialize};

/// The largest card: 16 TiB.
const MAX_CARD_MIB: u64 = 16 * 1024 * 1024;

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolConfig {
    /// Look for NVIDIA GPUs through NVML; the declared GPUs are used when none is found.
    pub detect_nvidia: bool,
    /// Slice size for detected GPUs, in MiB.
    pub detected_slice_mib: u64,
    /// HAMi-core's libvgpu.so; when set, slices on real GPUs are enforced through it.
    pub hami_core_library: String,
    /// NVIDIA's `cuda-checkpoint` (a path, or a name on the PATH; empty: none), with which a
    /// parked editor's GPU memory is set aside; without it, editors holding GPU memory never park.
    #[serde(default = "default_cuda_checkpoint")]
    pub cuda_checkpoint: String,
    /// Credits per slice-hour when no price below matches, per GiB of slice.
    #[serde(deserialize_with = "amount")]
    pub default_price_per_gib_hour: String,
    pub gpus: Vec<DeclaredGpu>,
    pub prices: Vec<Price>,
    /// Editors to keep pre-started per (editor, slice size), so a launch only assigns one.
    pub warm: Vec<WarmTarget>,
    /// Longest whole-card (burst) session, in minutes.
    pub burst_max_minutes: u32,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeclaredGpu {
    pub name: String,
    pub model: String,
    pub memory_mib: u64,
    pub slice_mib: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    /// GPU model this price applies to; "*" for any.
    pub model: String,
    pub slice_mib: u64,
    /// Credits per hour, e.g. "1" or "0.5".
    #[serde(deserialize_with = "amount")]
    pub per_hour: String,
}

/// Editors kept started ahead of demand.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WarmTarget {
    pub editor: String,
    pub slice_mib: u64,
    pub count: u32,
}

impl PoolConfig {
    /// Checks what serde cannot; the error names the key. Whether other sections' sizes exist
    /// in the pool is [`super::Config::validate`]'s to say.
    pub fn validate(&self) -> Result<(), InvalidKey> {
        check_amount(
            "pool.default_price_per_gib_hour",
            &self.default_price_per_gib_hour,
        )?;
        for (i, price) in self.prices.iter().enumerate() {
            check_amount(&format!("pool.prices[{i}].per_hour"), &price.per_hour)?;
        }
        for (i, target) in self.warm.iter().enumerate() {
            if app::domain::launch::EditorKind::parse(&target.editor).is_none() {
                return Err(InvalidKey::new(
                    format!("pool.warm[{i}].editor"),
                    format!(
                        "'{}' is not an editor (jupyterlab, marimo or code-server)",
                        target.editor
                    ),
                ));
            }
        }
        if self.burst_max_minutes == 0 {
            return Err(InvalidKey::new(
                "pool.burst_max_minutes",
                "must be at least 1",
            ));
        }
        if self.detected_slice_mib == 0 {
            return Err(InvalidKey::new(
                "pool.detected_slice_mib",
                "must be more than 0",
            ));
        }
        for (i, gpu) in self.gpus.iter().enumerate() {
            gpu.validate(i, &self.gpus[..i])?;
        }
        Ok(())
    }

    /// The slice sizes the pool has: the declared cards', and the detected cards' if any.
    pub fn slice_sizes(&self) -> Vec<u64> {
        self.gpus
            .iter()
            .map(|g| g.slice_mib)
            .chain(self.detect_nvidia.then_some(self.detected_slice_mib))
            .collect()
    }

    /// The sizes a session may have: a slice, or a declared card whole.
    pub fn session_sizes(&self) -> Vec<u64> {
        let whole_cards = self.gpus.iter().map(|g| g.memory_mib);
        self.slice_sizes().into_iter().chain(whole_cards).collect()
    }
}

impl DeclaredGpu {
    /// Checks the card at `pool.gpus[i]`, declared after `before`.
    fn validate(&self, i: usize, before: &[DeclaredGpu]) -> Result<(), InvalidKey> {
        if self.name.trim().is_empty() {
            return Err(InvalidKey::new(
                format!("pool.gpus[{i}].name"),
                "must not be empty",
            ));
        }
        if before.iter().any(|other| other.name == self.name) {
            return Err(InvalidKey::new(
                format!("pool.gpus[{i}].name"),
                format!("'{}' names two cards; each needs its own name", self.name),
            ));
        }
        if self.memory_mib > MAX_CARD_MIB {
            return Err(InvalidKey::new(
                format!("pool.gpus[{i}].memory_mib"),
                format!("must be at most {MAX_CARD_MIB} (16 TiB)"),
            ));
        }
        if self.slice_mib == 0 || self.slice_mib > self.memory_mib {
            return Err(InvalidKey::new(
                format!("pool.gpus[{i}].slice_mib"),
                format!("must be between 1 and memory_mib ({})", self.memory_mib),
            ));
        }
        Ok(())
    }
}

/// Sizes as the errors list them: "8192, 49152", sorted, each once.
pub(super) fn list_sizes(sizes: &[u64]) -> String {
    let mut sizes = sizes.to_vec();
    sizes.sort_unstable();
    sizes.dedup();
    sizes
        .iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Where NVIDIA's installs leave it.
pub fn default_cuda_checkpoint() -> String {
    "cuda-checkpoint".into()
}
