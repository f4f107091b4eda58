//! GPUs: detected through NVML where present, else the declared ones; and the env that
//! binds an editor to its slice.

use crate::config::Config;
use app::domain::pool::GpuSpec;

/// How a slice's limits are held on the card.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Enforcement {
    /// Nothing stops a process using more than its slice.
    None,
    /// HAMi-core's libvgpu.so, preloaded into the editor.
    HamiCore(String),
}

impl Enforcement {
    /// For the pool strip: whether a slice's size is a limit or a promise.
    pub fn describe(&self) -> String {
        match self {
            Enforcement::None => "not enforced".into(),
            Enforcement::HamiCore(_) => "enforced by HAMi-core".into(),
        }
    }
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

fn detect_nvidia(
    slice_mib: u64,
    enforced: bool,
) -> Result<Vec<GpuSpec>, nvml_wrapper::error::NvmlError> {
    let nvml = nvml_wrapper::Nvml::init()?;
    let count = nvml.device_count()?;
    let mut gpus = Vec::new();
    for index in 0..count {
        let device = nvml.device_by_index(index)?;
        let memory_mib = device.memory_info()?.total / (1024 * 1024);
        gpus.push(GpuSpec {
            id: device.uuid()?,
            model: device.name()?,
            memory_mib,
            slice_mib: slice_mib.min(memory_mib),
            enforced,
            cuda_index: Some(index),
        });
    }
    Ok(gpus)
}

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
    let Some(index) = gpu.cuda_index else {
        // A declared (virtual) GPU: hide any real card from the editor.
        env.push(("CUDA_VISIBLE_DEVICES".into(), String::new()));
        return env;
    };
    env.push(("CUDA_VISIBLE_DEVICES".into(), index.to_string()));
    if let Enforcement::HamiCore(library) = enforcement {
        env.push(("LD_PRELOAD".into(), library.clone()));
        env.push(("CUDA_DEVICE_MEMORY_LIMIT_0".into(), format!("{slice_mib}m")));
        env.push(("CUDA_DEVICE_SM_LIMIT".into(), cores_pct.to_string()));
    }
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(cuda_index: Option<u32>) -> GpuSpec {
        GpuSpec {
            id: "GPU-1".into(),
            model: "L40S".into(),
            memory_mib: 49152,
            slice_mib: 8192,
            enforced: cuda_index.is_some(),
            cuda_index,
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
        assert_eq!(get(&env, "CUDA_VISIBLE_DEVICES"), Some("1"));
        assert_eq!(get(&env, "LD_PRELOAD"), Some("/opt/libvgpu.so"));
        assert_eq!(get(&env, "CUDA_DEVICE_MEMORY_LIMIT_0"), Some("8192m"));
        assert_eq!(get(&env, "CUDA_DEVICE_SM_LIMIT"), Some("16"));
    }

    #[test]
    fn without_enforcement_only_the_card_is_chosen() {
        let env = slice_env(&gpu(Some(0)), 8192, 16, &Enforcement::None);
        assert_eq!(get(&env, "CUDA_VISIBLE_DEVICES"), Some("0"));
        assert_eq!(get(&env, "LD_PRELOAD"), None);
    }

    #[test]
    fn a_virtual_gpu_hides_real_cards() {
        let env = slice_env(&gpu(None), 8192, 16, &Enforcement::None);
        assert_eq!(get(&env, "CUDA_VISIBLE_DEVICES"), Some(""));
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
