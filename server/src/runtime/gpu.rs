//! GPUs: detected through NVML where present, else the declared ones; the env that binds an editor
//! to its slice; and, locally, each editor's GPU work.
//!
//! Sampling ([`NvmlSampler`], [`usage_by_editor`]): NVML lists each card's compute processes with
//! their memory, and keeps a short history of per-process SM utilization; each sample asks only for
//! the history since the previous one, so a burst between two samples still counts. A process
//! belongs to the editor whose leader is its nearest ancestor in `/proc` (Jupyter starts kernels in
//! sessions of their own, so the process group is not enough). Without an NVIDIA driver the sampler
//! is absent and editors report no GPU use; a declared GPU is never read, so the usage page shows
//! its sessions as "not measured". On Kubernetes the readings come from HAMi's metrics instead
//! (`runtime::kube::metrics`).

use crate::config::Config;
use app::domain::hold::{CardFacts, SliceHold};
use app::domain::pool::{GpuSpec, MigPlace};
use std::collections::HashMap;

/// What a runtime can see of an editor's GPU work, for the reaper and the dashboard.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GpuUsage {
    pub memory_used_mib: u64,
    /// Compute utilization over the runtime's last sample, 0..=100.
    pub utilization_pct: u32,
    /// Seconds since the editor last ran a GPU kernel, where the runtime knows it.
    pub last_kernel_seconds_ago: Option<f64>,
}

/// How a slice's limits are held on the card.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Enforcement {
    /// Nothing stops a process using more than its slice.
    None,
    /// HAMi-core's libvgpu.so, preloaded into the editor.
    HamiCore(String),
    /// On Kubernetes: HAMi's device plugin and scheduler hold each pod to the `gpumem` and
    /// `gpucores` it asks for (HAMi-core inside the container, set up by HAMi, not by us).
    Hami,
}

impl Enforcement {
    /// For Settings: what holds a slice smaller than its card.
    pub fn describe(&self) -> String {
        match self {
            Enforcement::None => {
                "No limit: a slice smaller than its card is an agreement between colleagues".into()
            }
            Enforcement::HamiCore(_) => {
                "Soft limit: HAMi-core holds each slice unless code deliberately steps around it".into()
            }
            Enforcement::Hami => {
                "Soft limit: HAMi holds each pod to its slice unless code deliberately steps around it"
                    .into()
            }
        }
    }
}

/// The pool on Kubernetes: the declared cards (the nodes' GPUs, which this server does not
/// see), each pod in a container that sees its own card only, its slice held by HAMi where
/// `kube.hami` says HAMi shares them (the default).
pub fn on_kube(config: &Config) -> (Vec<GpuSpec>, Enforcement) {
    let facts = CardFacts {
        real: true,
        isolated: true,
        mig: false,
        limiter: config.kube.hami,
    };
    let gpus = config
        .declared_gpus()
        .into_iter()
        .map(|g| GpuSpec {
            hold: SliceHold::of(facts, g.slice_mib, g.memory_mib),
            ..g
        })
        .collect();
    let enforcement = if config.kube.hami {
        Enforcement::Hami
    } else {
        Enforcement::None
    };
    (gpus, enforcement)
}

/// The GPUs of the pool: real ones if NVML finds any, else the declared ones.
pub fn discover(config: &Config) -> (Vec<GpuSpec>, Enforcement) {
    let enforcement = if config.pool.hami_core_library.is_empty() {
        Enforcement::None
    } else {
        Enforcement::HamiCore(config.pool.hami_core_library.clone())
    };
    if config.pool.detect_nvidia {
        match detect_nvidia(
            config.pool.detected_slice_mib,
            enforcement != Enforcement::None,
        ) {
            Ok(gpus) if !gpus.is_empty() => {
                tracing::info!(count = gpus.len(), "NVIDIA GPUs detected through NVML");
                return (gpus, enforcement);
            }
            Ok(_) => tracing::info!("NVML found no GPU; using the declared pool"),
            Err(e) => tracing::info!(reason = %e, "no NVML; using the declared pool"),
        }
    }
    (config.declared_gpus(), Enforcement::None)
}

/// One card as the driver reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Card {
    pub uuid: String,
    pub name: String,
    pub memory_mib: u64,
    /// Its device node's number, `/dev/nvidia<minor>`: not necessarily its NVML index.
    pub minor: u32,
    /// The MIG instances an admin made on it (empty where MIG is off).
    pub mig: Vec<MigInstance>,
}

/// One MIG instance as NVML lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MigInstance {
    /// `MIG-…`: what `CUDA_VISIBLE_DEVICES` names it by.
    pub uuid: String,
    /// Its profile, e.g. "1g.10gb" (the end of NVML's name for it).
    pub profile: String,
    pub memory_mib: u64,
    pub place: MigPlace,
}

/// The pool's cards, in the driver's order, each sold in slices of `slice_mib`; a card an admin
/// split into MIG instances is sold as those instances instead, each a slice of its own size.
/// `limiter`: HAMi-core holds the slices of a card.
pub fn specs_of(cards: &[Card], slice_mib: u64, limiter: bool) -> Vec<GpuSpec> {
    let facts = CardFacts {
        real: true,
        isolated: true,
        mig: false,
        limiter,
    };
    cards
        .iter()
        .flat_map(|card| {
            if card.mig.is_empty() {
                let slice_mib = slice_mib.min(card.memory_mib);
                return vec![GpuSpec {
                    id: card.uuid.clone(),
                    model: card.name.clone(),
                    memory_mib: card.memory_mib,
                    slice_mib,
                    hold: SliceHold::of(facts, slice_mib, card.memory_mib),
                    device_minor: Some(card.minor),
                    mig: None,
                }];
            }
            card.mig
                .iter()
                .map(|instance| GpuSpec {
                    id: instance.uuid.clone(),
                    model: format!("{} MIG {}", card.name, instance.profile),
                    memory_mib: instance.memory_mib,
                    slice_mib: instance.memory_mib,
                    hold: SliceHold::of(
                        CardFacts { mig: true, ..facts },
                        instance.memory_mib,
                        instance.memory_mib,
                    ),
                    device_minor: Some(card.minor),
                    mig: Some(instance.place),
                })
                .collect()
        })
        .collect()
}

/// The cards NVML finds, with their MIG instances. The product only reads the MIG layout; an
/// admin makes it (`nvidia-smi mig`).
pub fn nvidia_cards() -> Result<Vec<Card>, nvml_wrapper::error::NvmlError> {
    let nvml = nvml_wrapper::Nvml::init()?;
    let count = nvml.device_count()?;
    let mut cards = Vec::new();
    for index in 0..count {
        let device = nvml.device_by_index(index)?;
        cards.push(Card {
            uuid: device.uuid()?,
            name: device.name()?,
            memory_mib: device.memory_info()?.total / (1024 * 1024),
            minor: device.minor_number()?,
            mig: super::mig::instances_of(&nvml, &device),
        });
    }
    Ok(cards)
}

pub fn detect_nvidia(
    slice_mib: u64,
    limiter: bool,
) -> Result<Vec<GpuSpec>, nvml_wrapper::error::NvmlError> {
    Ok(specs_of(&nvidia_cards()?, slice_mib, limiter))
}

/// What a sandbox does instead of these variables of [`slice_env`]: it preloads HAMi-core for
/// every program from its install path, where no variable can unset it.
pub const UNSANDBOXED_PRELOAD_ENV: [&str; 2] = ["LD_PRELOAD", "CUDA_REDIRECT"];

/// Environment that binds a process to its slice of `gpu`.
pub fn slice_env(
    gpu: &GpuSpec,
    slice_mib: u64,
    cores_pct: u32,
    enforcement: &Enforcement,
) -> Vec<(String, String)> {
    let mut env = vec![
        ("SANDBOX_GPU_MODEL".to_string(), gpu.model.clone()),
        ("SANDBOX_SLICE_MIB".to_string(), slice_mib.to_string()),
    ];
    if gpu.device_minor.is_none() {
        // A declared (virtual) GPU: hide any real card from the editor.
        env.push(("CUDA_VISIBLE_DEVICES".into(), String::new()));
        return env;
    }
    // By UUID: an index means another card to CUDA (fastest first), to NVML (PCI order) and
    // inside a sandbox that shows one card (which CUDA numbers 0); a UUID names this card to all.
    env.push(("CUDA_DEVICE_ORDER".into(), "PCI_BUS_ID".into()));
    env.push(("CUDA_VISIBLE_DEVICES".into(), gpu.id.clone()));
    // A MIG instance is held by the hardware: HAMi-core would only count twice.
    if let Enforcement::HamiCore(library) = enforcement
        && gpu.mig.is_none()
    {
        // Unsandboxed, HAMi-core is this preload; its `dlsym` hook finds its own hooks through
        // CUDA_REDIRECT (a sandbox mounts it at its install path and preloads it for every program).
        env.push(("LD_PRELOAD".into(), library.clone()));
        env.push(("CUDA_REDIRECT".into(), library.clone()));
        env.push(("CUDA_DEVICE_MEMORY_LIMIT_0".into(), format!("{slice_mib}m")));
        env.push(("CUDA_DEVICE_SM_LIMIT".into(), cores_pct.to_string()));
    }
    env
}

/// One process's memory on a card, as NVML reports it.
#[derive(Clone, Debug, PartialEq)]
pub struct ProcessMemory {
    pub pid: u32,
    pub bytes: u64,
}

/// One utilization sample of one process (NVML keeps a short history per card).
#[derive(Clone, Debug, PartialEq)]
pub struct ProcessSample {
    pub pid: u32,
    /// Microseconds since the Unix epoch.
    pub timestamp_us: u64,
    pub sm_pct: u32,
}

/// GPU use per editor. A process belongs to the editor whose leader is the process itself or
/// its nearest such ancestor: kernels run in sessions of their own, so the process group is
/// not enough. Utilization is the mean of each process's samples, summed over the editor's
/// processes; the last kernel is the newest sample that used the SMs.
pub fn usage_by_editor(
    leaders: &HashMap<u32, String>,
    parent_of: impl Fn(u32) -> Option<u32>,
    memory: &[ProcessMemory],
    samples: &[ProcessSample],
    now_us: u64,
) -> HashMap<String, GpuUsage> {
    let mut owners = crate::runtime::procfs::Owners::new(leaders, parent_of);
    let mut owner = |pid: u32| owners.of(pid);
    let mut usage = HashMap::<String, GpuUsage>::new();
    for process in memory {
        if let Some(handle) = owner(process.pid) {
            usage.entry(handle).or_default().memory_used_mib += process.bytes / (1024 * 1024);
        }
    }
    let mut per_process = HashMap::<u32, (u64, u32)>::new();
    for sample in samples {
        let Some(handle) = owner(sample.pid) else {
            continue;
        };
        let entry = per_process.entry(sample.pid).or_default();
        entry.0 += u64::from(sample.sm_pct);
        entry.1 += 1;
        let editor = usage.entry(handle).or_default();
        if sample.sm_pct > 0 {
            let ago = now_us.saturating_sub(sample.timestamp_us) as f64 / 1e6;
            editor.last_kernel_seconds_ago = Some(
                editor
                    .last_kernel_seconds_ago
                    .map_or(ago, |seen: f64| seen.min(ago)),
            );
        }
    }
    for (pid, (sum, count)) in per_process {
        if let Some(handle) = owner(pid) {
            let editor = usage.entry(handle).or_default();
            let mean = (sum / u64::from(count.max(1))) as u32;
            editor.utilization_pct = (editor.utilization_pct + mean).min(100);
        }
    }
    usage
}

/// NVML's view of the processes on every card, sampled on demand. Each sample asks only for
/// the utilization history since the previous one, so short bursts between samples count.
pub struct NvmlSampler {
    nvml: nvml_wrapper::Nvml,
    last_seen_us: std::sync::Mutex<HashMap<u32, u64>>,
}

impl NvmlSampler {
    /// None where there is no NVIDIA driver (as on a machine without a GPU).
    pub fn open() -> Option<NvmlSampler> {
        match nvml_wrapper::Nvml::init() {
            Ok(nvml) => Some(NvmlSampler {
                nvml,
                last_seen_us: Default::default(),
            }),
            Err(e) => {
                tracing::debug!(reason = %e, "no NVML: editors' GPU use is not sampled");
                None
            }
        }
    }

    /// Every compute process's memory and the utilization samples since the last call.
    pub fn sample(&self) -> (Vec<ProcessMemory>, Vec<ProcessSample>) {
        let mut memory = Vec::new();
        let mut samples = Vec::new();
        let count = self.nvml.device_count().unwrap_or(0);
        let mut last_seen = self.last_seen_us.lock().unwrap_or_else(|e| e.into_inner());
        for index in 0..count {
            let Ok(device) = self.nvml.device_by_index(index) else {
                continue;
            };
            memory.extend(memory_of(&device));
            let since = last_seen.get(&index).copied();
            // NotFound means no sample since then: nothing ran.
            for sample in device.process_utilization_stats(since).unwrap_or_default() {
                let seen = last_seen.entry(index).or_default();
                *seen = (*seen).max(sample.timestamp);
                samples.push(ProcessSample {
                    pid: sample.pid,
                    timestamp_us: sample.timestamp,
                    sm_pct: sample.sm_util,
                });
            }
        }
        (memory, samples)
    }

    /// The GPU memory each process holds now, on every card; no utilization sample is taken,
    /// so the next [`NvmlSampler::sample`] still sees them all.
    pub fn memory(&self) -> Vec<ProcessMemory> {
        let count = self.nvml.device_count().unwrap_or(0);
        (0..count)
            .filter_map(|index| self.nvml.device_by_index(index).ok())
            .flat_map(|device| memory_of(&device))
            .collect()
    }
}

fn memory_of(device: &nvml_wrapper::Device<'_>) -> Vec<ProcessMemory> {
    device
        .running_compute_processes()
        .unwrap_or_default()
        .into_iter()
        .filter_map(|process| match process.used_gpu_memory {
            nvml_wrapper::enums::device::UsedGpuMemory::Used(bytes) => Some(ProcessMemory {
                pid: process.pid,
                bytes,
            }),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(device_minor: Option<u32>) -> GpuSpec {
        GpuSpec {
            id: "GPU-1".into(),
            model: "L40S".into(),
            memory_mib: 49152,
            slice_mib: 8192,
            hold: SliceHold::None,
            device_minor,
            mig: None,
        }
    }

    fn get<'a>(env: &'a [(String, String)], key: &str) -> Option<&'a str> {
        env.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    #[test]
    fn hami_core_limits_memory_and_cores() {
        let env = slice_env(
            &gpu(Some(1)),
            8192,
            16,
            &Enforcement::HamiCore("/opt/libvgpu.so".into()),
        );
        assert_eq!(get(&env, "CUDA_VISIBLE_DEVICES"), Some("GPU-1"));
        assert_eq!(get(&env, "LD_PRELOAD"), Some("/opt/libvgpu.so"));
        assert_eq!(get(&env, "CUDA_REDIRECT"), Some("/opt/libvgpu.so"));
        assert_eq!(get(&env, "CUDA_DEVICE_MEMORY_LIMIT_0"), Some("8192m"));
        assert_eq!(get(&env, "CUDA_DEVICE_SM_LIMIT"), Some("16"));
    }

    #[test]
    fn without_enforcement_only_the_card_is_chosen() {
        let env = slice_env(&gpu(Some(0)), 8192, 16, &Enforcement::None);
        assert_eq!(get(&env, "CUDA_VISIBLE_DEVICES"), Some("GPU-1"));
        assert_eq!(get(&env, "CUDA_DEVICE_ORDER"), Some("PCI_BUS_ID"));
        assert_eq!(get(&env, "LD_PRELOAD"), None);
    }

    #[test]
    fn a_virtual_gpu_hides_real_cards() {
        let env = slice_env(&gpu(None), 8192, 16, &Enforcement::None);
        assert_eq!(get(&env, "CUDA_VISIBLE_DEVICES"), Some(""));
        assert_eq!(get(&env, "CUDA_DEVICE_ORDER"), None);
    }

    /// `n` cards whose minor numbers are not their indexes (the driver numbers nodes in probe
    /// order, NVML in PCI order): each session sees its own card's node and is bound to it by
    /// UUID, whatever its index.
    #[test]
    fn each_card_of_one_two_or_eight_is_its_own_node_and_uuid() {
        let minors: [&[u32]; 3] = [&[0], &[1, 0], &[3, 0, 7, 1, 6, 2, 5, 4]];
        for minors in minors {
            let cards: Vec<Card> = minors
                .iter()
                .enumerate()
                .map(|(index, minor)| Card {
                    uuid: format!("GPU-{index}-{minor}"),
                    name: "NVIDIA L40S".into(),
                    memory_mib: 46068,
                    minor: *minor,
                    mig: Vec::new(),
                })
                .collect();
            let specs = specs_of(&cards, 8192, true);
            assert_eq!(specs.len(), cards.len());
            for (card, spec) in cards.iter().zip(&specs) {
                let env = slice_env(spec, 8192, 16, &Enforcement::None);
                assert_eq!(get(&env, "CUDA_VISIBLE_DEVICES"), Some(card.uuid.as_str()));
                let devices = devices_of(Some(spec), &HashMap::new()).unwrap();
                assert_eq!(
                    devices,
                    [
                        format!("/dev/nvidia{}", card.minor),
                        "/dev/nvidiactl".into(),
                        "/dev/nvidia-uvm".into()
                    ],
                    "{} cards, the card at minor {}",
                    cards.len(),
                    card.minor
                );
            }
        }
    }

    /// The device nodes a session on `gpu` is given, with the driver's `mig-minors` table.
    fn devices_of(
        gpu: Option<&GpuSpec>,
        mig_minors: &HashMap<String, u32>,
    ) -> Result<Vec<String>, String> {
        let slice = crate::runtime::SliceBinding::on(gpu, 8192, 16);
        Ok(crate::runtime::EditorLaunch::of_slice(slice)
            .slice_devices_with(mig_minors)?
            .iter()
            .map(|d| d.display().to_string())
            .collect())
    }

    /// A fake NVML of two cards: one an admin split into MIG instances, one whole. Each
    /// instance is a hard slice of its own size, named by its own UUID, whose sandbox gets its
    /// card's node and its own two capability nodes only; the whole card goes on in soft slices.
    #[test]
    fn mig_instances_are_hard_slices_that_see_only_themselves() {
        let instance = |uuid: &str, profile: &str, memory_mib, gpu_instance| MigInstance {
            uuid: uuid.into(),
            profile: profile.into(),
            memory_mib,
            place: MigPlace {
                gpu_instance,
                compute_instance: 0,
            },
        };
        let cards = [
            Card {
                uuid: "GPU-a".into(),
                name: "NVIDIA A100-SXM4-80GB".into(),
                memory_mib: 81920,
                minor: 2,
                mig: vec![
                    instance("MIG-1", "3g.40gb", 40192, 1),
                    instance("MIG-2", "1g.10gb", 9728, 9),
                ],
            },
            Card {
                uuid: "GPU-b".into(),
                name: "NVIDIA A100-SXM4-80GB".into(),
                memory_mib: 81920,
                minor: 0,
                mig: Vec::new(),
            },
        ];
        let specs = specs_of(&cards, 20480, true);
        let summary: Vec<(&str, u64, u64, SliceHold)> = specs
            .iter()
            .map(|g| (g.id.as_str(), g.memory_mib, g.slice_mib, g.hold))
            .collect();
        assert_eq!(
            summary,
            [
                ("MIG-1", 40192, 40192, SliceHold::Hard),
                ("MIG-2", 9728, 9728, SliceHold::Hard),
                ("GPU-b", 81920, 20480, SliceHold::Soft),
            ]
        );
        assert_eq!(specs[1].model, "NVIDIA A100-SXM4-80GB MIG 1g.10gb");
        let table = crate::runtime::mig::parse_mig_minors(
            "gpu2/gi1/access 21\ngpu2/gi1/ci0/access 22\ngpu2/gi9/access 93\ngpu2/gi9/ci0/access 94\n",
        );
        let hami = Enforcement::HamiCore("/opt/libvgpu.so".into());
        let env = slice_env(&specs[1], 9728, 100, &hami);
        assert_eq!(get(&env, "CUDA_VISIBLE_DEVICES"), Some("MIG-2"));
        assert_eq!(get(&env, "LD_PRELOAD"), None, "the hardware holds it");
        let devices = devices_of(Some(&specs[1]), &table).unwrap();
        assert_eq!(
            devices,
            [
                "/dev/nvidia2",
                "/dev/nvidiactl",
                "/dev/nvidia-uvm",
                "/dev/nvidia-caps/nvidia-cap93",
                "/dev/nvidia-caps/nvidia-cap94"
            ]
        );
        // A layout changed under the server: a clear error, not a sandbox without its instance.
        let changed = crate::runtime::mig::parse_mig_minors("gpu2/gi1/access 21\n");
        assert!(devices_of(Some(&specs[1]), &changed).is_err());
        // The whole card keeps HAMi-core.
        let env = slice_env(&specs[2], 20480, 25, &hami);
        assert_eq!(get(&env, "LD_PRELOAD"), Some("/opt/libvgpu.so"));
    }

    fn leaders() -> HashMap<u32, String> {
        HashMap::from([(100, "lab".to_string()), (200, "mo".to_string())])
    }

    /// 100 (lab) → 110 (kernel, own session) → 111 (its child); 200 (mo) → 210; 300 is not ours.
    fn parent_of(pid: u32) -> Option<u32> {
        match pid {
            110 => Some(100),
            111 => Some(110),
            210 => Some(200),
            100 | 200 | 300 => Some(1),
            _ => None,
        }
    }

    const MIB: u64 = 1024 * 1024;

    #[test]
    fn memory_counts_for_the_editor_whose_process_tree_holds_it() {
        let memory = [
            ProcessMemory {
                pid: 111,
                bytes: 3000 * MIB,
            },
            ProcessMemory {
                pid: 110,
                bytes: 1000 * MIB,
            },
            ProcessMemory {
                pid: 210,
                bytes: 512 * MIB,
            },
            ProcessMemory {
                pid: 300,
                bytes: 9000 * MIB,
            },
        ];
        let usage = usage_by_editor(&leaders(), parent_of, &memory, &[], 0);
        assert_eq!(usage.len(), 2, "the stranger's memory is nobody's");
        assert_eq!(usage["lab"].memory_used_mib, 4000);
        assert_eq!(usage["mo"].memory_used_mib, 512);
        assert!(!usage["lab"].is_active(60.0), "memory alone is not work");
    }

    #[test]
    fn samples_make_an_editor_active_and_date_its_last_kernel() {
        let now = 1_000_000_000;
        let samples = [
            ProcessSample {
                pid: 111,
                timestamp_us: now - 20_000_000,
                sm_pct: 80,
            },
            ProcessSample {
                pid: 111,
                timestamp_us: now - 10_000_000,
                sm_pct: 40,
            },
            ProcessSample {
                pid: 110,
                timestamp_us: now - 5_000_000,
                sm_pct: 10,
            },
            ProcessSample {
                pid: 210,
                timestamp_us: now - 1_000_000,
                sm_pct: 0,
            },
            ProcessSample {
                pid: 300,
                timestamp_us: now,
                sm_pct: 100,
            },
        ];
        let usage = usage_by_editor(&leaders(), parent_of, &[], &samples, now);
        // 111 averages 60 %, 110 10 %: the editor used 70 % of its card.
        assert_eq!(usage["lab"].utilization_pct, 70);
        assert_eq!(usage["lab"].last_kernel_seconds_ago, Some(5.0));
        assert!(usage["lab"].is_active(30.0));
        assert_eq!(usage["mo"].utilization_pct, 0);
        assert_eq!(usage["mo"].last_kernel_seconds_ago, None);
        assert!(!usage["mo"].is_active(30.0), "idle samples are not work");
        assert!(!usage.contains_key("stranger"));
    }

    #[test]
    fn utilization_is_capped_and_loops_in_the_tree_end() {
        let samples = [
            ProcessSample {
                pid: 100,
                timestamp_us: 0,
                sm_pct: 90,
            },
            ProcessSample {
                pid: 110,
                timestamp_us: 0,
                sm_pct: 90,
            },
            ProcessSample {
                pid: 7,
                timestamp_us: 0,
                sm_pct: 90,
            },
        ];
        // 7's parent is itself: the walk stops instead of spinning.
        let cyclic = |pid: u32| if pid == 7 { Some(7) } else { parent_of(pid) };
        let usage = usage_by_editor(&leaders(), cyclic, &[], &samples, 0);
        assert_eq!(usage["lab"].utilization_pct, 100);
        assert_eq!(usage.len(), 1);
    }

    #[test]
    fn without_nvml_the_declared_pool_is_used() {
        let config = Config::default();
        let (gpus, enforcement) = discover(&config);
        // This machine has no NVIDIA driver; a GPU machine would list its cards instead.
        if nvml_wrapper::Nvml::init().is_err() {
            assert_eq!(gpus, config.declared_gpus());
            assert_eq!(enforcement, Enforcement::None);
        }
    }
}
