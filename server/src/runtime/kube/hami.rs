//! HAMi's admission rules, checked on our own objects before they are sent: a pod HAMi would
//! refuse or misread fails here with a reason, not later in the cluster with a vaguer one.
//!
//! The rules (from HAMi's webhook and NVIDIA device code): GPU resources are read from limits;
//! `nvidia.com/gpumem` is a whole number of MiB, `nvidia.com/gpucores` a percentage; a privileged
//! container may not have a GPU (it would see every card, unlimited); a pod with a preset node
//! bypasses HAMi's scheduler and is denied; quota on HAMi resources needs the `limits.` prefix.

use super::objects::{GPU, GPU_CORES, GPU_MEM};
use k8s_openapi::api::core::v1::{Container, Pod, ResourceQuota};

const HAMI_RESOURCES: [&str; 4] = [GPU, GPU_MEM, GPU_CORES, "nvidia.com/gpumem-percentage"];

/// Every rule `pod` breaks, in words; empty when HAMi would take it as we mean it.
pub fn pod_violations(pod: &Pod) -> Vec<String> {
    let mut problems = Vec::new();
    let Some(spec) = &pod.spec else {
        return vec!["the pod has no spec".into()];
    };
    let containers: Vec<&Container> = spec
        .init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter())
        .collect();
    let mut wants_gpu = false;
    for c in &containers {
        let resources = c.resources.as_ref();
        let limits = resources.and_then(|r| r.limits.as_ref());
        let requests = resources.and_then(|r| r.requests.as_ref());
        for key in HAMI_RESOURCES {
            let limit = limits.and_then(|l| l.get(key));
            let request = requests.and_then(|r| r.get(key));
            match (request, limit) {
                (Some(_), None) => problems.push(format!(
                    "container {}: {key} only in requests; HAMi reads limits",
                    c.name
                )),
                (Some(r), Some(l)) if r.0 != l.0 => problems.push(format!(
                    "container {}: {key} request {} differs from limit {}",
                    c.name, r.0, l.0
                )),
                _ => {}
            }
        }
        let Some(limits) = limits else { continue };
        let has = |key: &str| limits.get(key).map(|v| v.0.as_str());
        if HAMI_RESOURCES.iter().any(|k| limits.contains_key(*k)) {
            wants_gpu = true;
        }
        if let Some(count) = has(GPU)
            && whole(count).is_none_or(|n| n == 0)
        {
            problems.push(format!(
                "container {}: {GPU} must be a whole number of cards, not {count:?}",
                c.name
            ));
        }
        if let Some(mem) = has(GPU_MEM)
            && whole(mem).is_none_or(|n| n == 0)
        {
            problems.push(format!(
                "container {}: {GPU_MEM} must be a whole number of MiB, not {mem:?}",
                c.name
            ));
        }
        if let Some(cores) = has(GPU_CORES)
            && whole(cores).is_none_or(|n| n > 100)
        {
            problems.push(format!(
                "container {}: {GPU_CORES} must be a percentage 0..=100, not {cores:?}",
                c.name
            ));
        }
        if (has(GPU_MEM).is_some() || has(GPU_CORES).is_some()) && has(GPU).is_none() {
            problems.push(format!(
                "container {}: a slice ({GPU_MEM}, {GPU_CORES}) needs {GPU}",
                c.name
            ));
        }
    }
    if wants_gpu {
        for c in &containers {
            let privileged = c
                .security_context
                .as_ref()
                .and_then(|s| s.privileged)
                .unwrap_or(false);
            if privileged {
                problems.push(format!(
                    "container {} is privileged in a pod with a GPU",
                    c.name
                ));
            }
        }
        if spec.node_name.as_deref().is_some_and(|n| !n.is_empty()) {
            problems.push("the pod names its node; HAMi's scheduler must place it".into());
        }
    }
    problems
}

/// Every HAMi quota key without the `limits.` prefix HAMi needs.
pub fn quota_violations(quota: &ResourceQuota) -> Vec<String> {
    let hard = quota.spec.as_ref().and_then(|s| s.hard.as_ref());
    hard.into_iter()
        .flat_map(|h| h.keys())
        .filter(|key| key.contains("nvidia.com/") && !key.starts_with("limits.nvidia.com/"))
        .map(|key| {
            format!(
                "quota key {key} must be limits.{}",
                key.trim_start_matches("requests.")
            )
        })
        .collect()
}

/// A plain non-negative integer ("8192"), not "8Gi", "0.5" or "1e3".
fn whole(value: &str) -> Option<u64> {
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    value.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::kube::{KubeConfig, objects::UserPlan};
    use app::domain::launch::EditorKind;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    fn good_pod() -> Pod {
        let config = KubeConfig::default();
        let launch = crate::runtime::kube::objects::tests::launch(EditorKind::JupyterLab, None);
        UserPlan::new(&config, "alice").session_pod(&launch)
    }

    fn editor(pod: &mut Pod) -> &mut Container {
        &mut pod.spec.as_mut().unwrap().containers[0]
    }

    fn limits(pod: &mut Pod) -> &mut std::collections::BTreeMap<String, Quantity> {
        editor(pod)
            .resources
            .as_mut()
            .unwrap()
            .limits
            .as_mut()
            .unwrap()
    }

    #[test]
    fn our_pod_passes() {
        assert_eq!(pod_violations(&good_pod()), Vec::<String>::new());
    }

    #[test]
    fn requests_only_is_refused() {
        let mut pod = good_pod();
        let moved = std::mem::take(limits(&mut pod));
        editor(&mut pod).resources.as_mut().unwrap().requests = Some(moved);
        let problems = pod_violations(&pod);
        assert!(
            problems
                .iter()
                .any(|p| p.contains("nvidia.com/gpumem only in requests")),
            "{problems:?}"
        );
    }

    #[test]
    fn fractional_or_suffixed_memory_is_refused() {
        for bad in ["8192.5", "8Gi", "0", "-1"] {
            let mut pod = good_pod();
            limits(&mut pod).insert(GPU_MEM.into(), Quantity(bad.into()));
            let problems = pod_violations(&pod);
            assert!(
                problems.iter().any(|p| p.contains("whole number of MiB")),
                "{bad}: {problems:?}"
            );
        }
    }

    #[test]
    fn cores_must_be_a_percentage() {
        let mut pod = good_pod();
        limits(&mut pod).insert(GPU_CORES.into(), Quantity("101".into()));
        assert!(pod_violations(&pod)[0].contains("percentage"));
    }

    #[test]
    fn privileged_gpu_containers_are_refused() {
        let mut pod = good_pod();
        editor(&mut pod)
            .security_context
            .as_mut()
            .unwrap()
            .privileged = Some(true);
        assert_eq!(
            pod_violations(&pod),
            vec!["container editor is privileged in a pod with a GPU".to_string()]
        );
    }

    #[test]
    fn a_preset_node_is_refused() {
        let mut pod = good_pod();
        pod.spec.as_mut().unwrap().node_name = Some("gpu-node-1".into());
        assert!(pod_violations(&pod)[0].contains("names its node"));
    }

    #[test]
    fn a_slice_without_a_card_is_refused() {
        let mut pod = good_pod();
        limits(&mut pod).remove(GPU);
        assert!(pod_violations(&pod)[0].contains("needs nvidia.com/gpu"));
    }

    #[test]
    fn quota_keys_need_the_limits_prefix() {
        let config = KubeConfig::default();
        let mut quota = UserPlan::new(&config, "alice").resource_quota();
        assert!(quota_violations(&quota).is_empty());
        let hard = quota.spec.as_mut().unwrap().hard.as_mut().unwrap();
        hard.insert("requests.nvidia.com/gpumem".into(), Quantity("1".into()));
        hard.insert("nvidia.com/gpu".into(), Quantity("1".into()));
        assert_eq!(quota_violations(&quota).len(), 2);
    }
}
