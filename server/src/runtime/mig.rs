//! MIG instances: where an admin split a card (`nvidia-smi mig`), NVML lists each instance, and
//! a sandbox on one sees that instance only: its card's node plus the two capability nodes the
//! driver made for its GPU instance and compute instance, by the numbers it lists in
//! `/proc/driver/nvidia-caps/mig-minors`. The product reads the layout and never changes it.
//!
//! NVML's MIG listing is not in `nvml-wrapper`'s safe API, so the four calls go through its own
//! bindings (`nvml-wrapper-sys`), on the library `Nvml` already loaded and initialised.

use super::gpu::MigInstance;
use app::domain::pool::MigPlace;
use nvml_wrapper::{Device, Nvml};
use nvml_wrapper_sys::bindings::{
    NvmlLib, nvmlDevice_t, nvmlReturn_enum_NVML_SUCCESS as NVML_SUCCESS,
};
use std::collections::HashMap;
use std::path::PathBuf;

/// Where the driver lists the capability nodes' numbers.
pub const MIG_MINORS: &str = "/proc/driver/nvidia-caps/mig-minors";

/// `mig-minors`' lines (`gpu0/gi1/access 12`, `gpu0/gi1/ci0/access 13`) as name → number.
pub fn parse_mig_minors(text: &str) -> HashMap<String, u32> {
    text.lines()
        .filter_map(|line| {
            let (name, number) = line.trim().rsplit_once(' ')?;
            Some((name.trim().to_string(), number.trim().parse().ok()?))
        })
        .collect()
}

/// The capability nodes of the instance at `place` on the card whose minor number is
/// `card_minor` (the driver's `gpu<N>` there is the card's minor number, not its index).
pub fn capability_devices(
    table: &HashMap<String, u32>,
    card_minor: u32,
    place: MigPlace,
) -> Result<Vec<PathBuf>, String> {
    let gpu_instance = format!("gpu{card_minor}/gi{}/access", place.gpu_instance);
    let compute_instance = format!(
        "gpu{card_minor}/gi{}/ci{}/access",
        place.gpu_instance, place.compute_instance
    );
    [gpu_instance, compute_instance]
        .into_iter()
        .map(|name| {
            table
                .get(&name)
                .map(|minor| PathBuf::from(format!("/dev/nvidia-caps/nvidia-cap{minor}")))
                .ok_or_else(|| format!("{MIG_MINORS} lists no {name}: was the MIG layout changed?"))
        })
        .collect()
}

/// The MIG instances of `device`, in NVML's order; none where MIG is off or unreadable.
pub fn instances_of(nvml: &Nvml, device: &Device<'_>) -> Vec<MigInstance> {
    // SAFETY: the same library `Nvml` loaded (dlopen hands back its handle), already initialised
    // by it; the bindings only resolve symbols.
    let Ok(lib) = (unsafe { NvmlLib::new("libnvidia-ml.so.1") }) else {
        return Vec::new();
    };
    // SAFETY: a live handle of `nvml`, used while `nvml` is.
    let card = unsafe { device.handle() };
    let mut slots = 0;
    // SAFETY: a valid handle and an out-pointer to a u32.
    if unsafe { lib.nvmlDeviceGetMaxMigDeviceCount(card, &mut slots) } != NVML_SUCCESS {
        return Vec::new();
    }
    (0..slots)
        .filter_map(|index| {
            let mut handle: nvmlDevice_t = std::ptr::null_mut();
            // SAFETY: as above; an index without an instance answers NOT_FOUND.
            if unsafe { lib.nvmlDeviceGetMigDeviceHandleByIndex(card, index, &mut handle) }
                != NVML_SUCCESS
            {
                return None;
            }
            let (mut gpu_instance, mut compute_instance) = (0, 0);
            // SAFETY: a MIG handle NVML just gave, and out-pointers to u32s.
            let ids = unsafe {
                lib.nvmlDeviceGetGpuInstanceId(handle, &mut gpu_instance) == NVML_SUCCESS
                    && lib.nvmlDeviceGetComputeInstanceId(handle, &mut compute_instance)
                        == NVML_SUCCESS
            };
            if !ids {
                return None;
            }
            // SAFETY: a handle of this `nvml`, which outlives it here.
            let instance = unsafe { Device::new(handle, nvml) };
            let name = instance.name().ok()?;
            Some(MigInstance {
                uuid: instance.uuid().ok()?,
                profile: name.rsplit(' ').next().unwrap_or(&name).to_string(),
                memory_mib: instance.memory_info().ok()?.total / (1024 * 1024),
                place: MigPlace {
                    gpu_instance,
                    compute_instance,
                },
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINORS: &str = "config 1\nmonitor 2\ngpu0/gi1/access 12\ngpu0/gi1/ci0/access 13\n\
        gpu0/gi2/access 21\ngpu0/gi2/ci0/access 22\ngpu3/gi1/access 111\ngpu3/gi1/ci0/access 112\n";

    #[test]
    fn each_instance_gets_its_own_two_capability_nodes_on_its_own_card() {
        let table = parse_mig_minors(MINORS);
        let place = |gi, ci| MigPlace {
            gpu_instance: gi,
            compute_instance: ci,
        };
        assert_eq!(
            capability_devices(&table, 0, place(2, 0)).unwrap(),
            [
                PathBuf::from("/dev/nvidia-caps/nvidia-cap21"),
                PathBuf::from("/dev/nvidia-caps/nvidia-cap22")
            ]
        );
        // The card's minor number picks the line, not its index.
        assert_eq!(
            capability_devices(&table, 3, place(1, 0)).unwrap(),
            [
                PathBuf::from("/dev/nvidia-caps/nvidia-cap111"),
                PathBuf::from("/dev/nvidia-caps/nvidia-cap112")
            ]
        );
        let gone = capability_devices(&table, 0, place(5, 0)).unwrap_err();
        assert!(gone.contains("gpu0/gi5/access"), "{gone}");
    }
}
