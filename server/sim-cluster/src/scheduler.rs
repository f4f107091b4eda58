//! The scheduler, with HAMi's share of it: each pod without a node is placed on a node that has
//! room for its CPU and memory requests and, for a GPU pod, on cards with room for its
//! `nvidia.com/gpumem` and `nvidia.com/gpucores` (HAMi's rules: limits are what counts, a card
//! holds at most its split count of pods, `nvidia.com/use-gpuuuid` narrows the cards); the pod
//! then carries HAMi's annotations (`hami.io/vgpu-node`, `hami.io/vgpu-devices-allocated`) and a
//! `Scheduled` event. A pod nothing fits stays pending, `PodScheduled=False`, `Unschedulable`,
//! with the scheduler's message ("0/2 nodes are available: 2 Insufficient nvidia.com/gpumem.").
//!
//! A node's cards are its `hami.io/node-nvidia-register` annotation, as HAMi's device plugin
//! writes it: `UUID,SPLIT,MEM,CORES,TYPE,NUMA,HEALTHY` per card, `:` between cards.
//!
//! A pod's `nodeSelector` is honoured (every label must match the node's; the restore pod
//! names its node by `kubernetes.io/hostname`). What the scheduler here cannot evaluate is
//! never ignored: a pod with `spec.affinity` (node, pod or anti-affinity) or
//! `topologySpreadConstraints` stays pending, `Unschedulable`, saying so, as a real cluster
//! leaves a pod pending whose constraints no node meets. Node taints are not simulated (a
//! cordon is `spec.unschedulable`), so tolerations change nothing.

use crate::clock;
use crate::quantity::milli;
use crate::store::{Objects, Store, text};
use serde_json::{Value, json};
use std::collections::BTreeMap;

pub const REGISTER: &str = "hami.io/node-nvidia-register";
pub const HAMI_NODE: &str = "hami.io/vgpu-node";
pub const HAMI_DEVICES: &str = "hami.io/vgpu-devices-allocated";
pub const USE_UUID: &str = "nvidia.com/use-gpuuuid";
const GPU: &str = "nvidia.com/gpu";
const GPU_MEM: &str = "nvidia.com/gpumem";
const GPU_CORES: &str = "nvidia.com/gpucores";

/// One card of a node, as registered.
#[derive(Clone, Debug, PartialEq)]
pub struct Card {
    pub uuid: String,
    pub split: u32,
    pub memory_mib: u64,
    pub cores: u32,
    pub model: String,
}

/// A node's registration annotation for `cards`.
pub fn register(cards: &[Card]) -> String {
    cards
        .iter()
        .map(|c| {
            format!(
                "{},{},{},{},{},0,true:",
                c.uuid, c.split, c.memory_mib, c.cores, c.model
            )
        })
        .collect()
}

pub fn cards_of(node: &Value) -> Vec<Card> {
    let annotation = node
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(REGISTER))
        .and_then(Value::as_str)
        .unwrap_or("");
    annotation
        .split(':')
        .filter_map(|card| {
            let f: Vec<&str> = card.split(',').collect();
            (f.len() >= 5).then(|| Card {
                uuid: f[0].to_string(),
                split: f[1].parse().unwrap_or(1),
                memory_mib: f[2].parse().unwrap_or(0),
                cores: f[3].parse().unwrap_or(100),
                model: f[4].to_string(),
            })
        })
        .collect()
}

/// What a pod asks of the GPUs: cards, MiB and cores per card.
fn gpu_ask(pod: &Value) -> Option<(u32, u64, u32)> {
    let mut ask: Option<(u32, u64, u32)> = None;
    for container in pod
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let limits = container.pointer("/resources/limits");
        let get = |key: &str| {
            limits
                .and_then(|l| l.get(key))
                .and_then(Value::as_str)
                .and_then(|v| v.parse::<u64>().ok())
        };
        if let Some(count) = get(GPU) {
            ask = Some((
                count as u32,
                get(GPU_MEM).unwrap_or(0),
                get(GPU_CORES).unwrap_or(0) as u32,
            ));
        }
    }
    ask
}

/// Each card's use by the pods placed on it: (pods, MiB, cores).
fn card_use(o: &Objects) -> BTreeMap<String, (u32, u64, u32)> {
    let mut used: BTreeMap<String, (u32, u64, u32)> = BTreeMap::new();
    for pod in o.list("pods", None) {
        if matches!(text(&pod, "/status/phase").as_str(), "Succeeded" | "Failed") {
            continue;
        }
        let devices = pod
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(HAMI_DEVICES))
            .and_then(Value::as_str)
            .unwrap_or("");
        for device in devices.split([';', ':']).filter(|d| !d.is_empty()) {
            let f: Vec<&str> = device.split(',').collect();
            if f.len() >= 4 {
                let entry = used.entry(f[0].to_string()).or_default();
                entry.0 += 1;
                entry.1 += f[2].parse::<u64>().unwrap_or(0);
                entry.2 += f[3].parse::<u32>().unwrap_or(0);
            }
        }
    }
    used
}

/// The sum of `pod`'s containers' requests of `resource`, in thousandths.
fn pod_request(pod: &Value, resource: &str) -> i128 {
    crate::store::items(pod, "/spec/containers")
        .filter_map(|c| {
            c.pointer(&format!("/resources/requests/{resource}"))
                .and_then(Value::as_str)
                .and_then(|q| milli(q).ok())
        })
        .sum()
}

/// The sum of a resource's requests over the running pods on `node`.
fn requested_on(o: &Objects, node: &str, resource: &str) -> i128 {
    o.list("pods", None)
        .iter()
        .filter(|p| text(p, "/spec/nodeName") == node)
        .filter(|p| !matches!(text(p, "/status/phase").as_str(), "Succeeded" | "Failed"))
        .map(|p| pod_request(p, resource))
        .sum()
}

/// What of `pod`'s placement rules this scheduler cannot evaluate, if anything.
fn unsupported(pod: &Value) -> Option<String> {
    let set = |field: &str| {
        pod.pointer(&format!("/spec/{field}"))
            .is_some_and(|v| match v {
                Value::Null => false,
                Value::Object(o) => !o.is_empty(),
                Value::Array(a) => !a.is_empty(),
                _ => true,
            })
    };
    ["affinity", "topologySpreadConstraints"]
        .into_iter()
        .find(|field| set(field))
        .map(|field| {
            format!("node(s) were not evaluated: spec.{field} is not simulated (use nodeSelector)")
        })
}

/// Whether `node`'s labels hold every label of `pod`'s `nodeSelector`.
fn selected(node: &Value, pod: &Value) -> bool {
    let labels = node.pointer("/metadata/labels");
    pod.pointer("/spec/nodeSelector")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .all(|(key, want)| labels.and_then(|l| l.get(key)) == Some(want))
}

/// Why `node` cannot take `pod`, or the cards it would give it.
fn fit(o: &Objects, node: &Value, pod: &Value) -> Result<Vec<(Card, u64, u32)>, String> {
    if let Some(why) = unsupported(pod) {
        return Err(why);
    }
    if node.pointer("/spec/unschedulable").and_then(Value::as_bool) == Some(true) {
        return Err("node(s) were unschedulable".into());
    }
    if !selected(node, pod) {
        return Err("node(s) didn't match Pod's node affinity/selector".into());
    }
    let name = text(node, "/metadata/name");
    for resource in ["cpu", "memory"] {
        let Some(allocatable) = node
            .pointer(&format!("/status/allocatable/{resource}"))
            .and_then(Value::as_str)
            .and_then(|q| milli(q).ok())
        else {
            continue;
        };
        let wanted = pod_request(pod, resource);
        if requested_on(o, &name, resource) + wanted > allocatable {
            return Err(format!("Insufficient {resource}"));
        }
    }
    let Some((count, memory, cores)) = gpu_ask(pod) else {
        return Ok(Vec::new());
    };
    let only: Option<Vec<String>> = pod
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(USE_UUID))
        .and_then(Value::as_str)
        .map(|u| u.split(',').map(str::to_string).collect());
    let used = card_use(o);
    let mut chosen = Vec::new();
    let mut short_of = "nvidia.com/gpu";
    for card in cards_of(node) {
        if only.as_ref().is_some_and(|u| !u.contains(&card.uuid)) {
            continue;
        }
        let (pods, mib, used_cores) = used.get(&card.uuid).copied().unwrap_or_default();
        let memory = if memory == 0 { card.memory_mib } else { memory };
        if pods >= card.split {
            short_of = "nvidia.com/gpu";
        } else if mib + memory > card.memory_mib {
            short_of = "nvidia.com/gpumem";
        } else if used_cores + cores > card.cores {
            short_of = "nvidia.com/gpucores";
        } else {
            chosen.push((card, memory, cores));
            if chosen.len() == count as usize {
                return Ok(chosen);
            }
        }
    }
    Err(format!("Insufficient {short_of}"))
}

/// Places every pending pod it can; marks the rest unschedulable. One pass, in one transaction.
pub fn schedule(store: &Store) {
    store.write(|o| {
        let nodes = o.list("nodes", None);
        let pending: Vec<Value> = o
            .list("pods", None)
            .into_iter()
            .filter(|p| text(p, "/spec/nodeName").is_empty())
            .filter(|p| p.pointer("/metadata/deletionTimestamp").is_none())
            .collect();
        for pod in pending {
            let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
            // Its claims first: one missing or not bound leaves it pending on every node.
            if let Some(why) = crate::volumes::unbound_claim(o, &pod) {
                reasons.insert(why, nodes.len());
                unschedulable(o, pod, nodes.len(), &reasons);
                continue;
            }
            let mut placed = None;
            for node in &nodes {
                match fit(o, node, &pod) {
                    Ok(cards) => {
                        placed = Some((text(node, "/metadata/name"), cards));
                        break;
                    }
                    Err(why) => *reasons.entry(why).or_default() += 1,
                }
            }
            match placed {
                Some((node, cards)) => bind(o, pod, &node, &cards),
                None => unschedulable(o, pod, nodes.len(), &reasons),
            }
        }
    });
}

fn condition(kind: &str, status: &str, reason: Option<&str>, message: Option<&str>) -> Value {
    let mut c = json!({"type": kind, "status": status, "lastTransitionTime": clock::now()});
    if let Some(reason) = reason {
        c["reason"] = json!(reason);
    }
    if let Some(message) = message {
        c["message"] = json!(message);
    }
    c
}

fn bind(o: &mut Objects, mut pod: Value, node: &str, cards: &[(Card, u64, u32)]) {
    pod["spec"]["nodeName"] = json!(node);
    if !cards.is_empty() {
        let devices: String = cards
            .iter()
            .map(|(card, mib, cores)| format!("{},NVIDIA,{mib},{cores}:", card.uuid))
            .collect::<String>()
            + ";";
        let annotations = pod["metadata"]
            .as_object_mut()
            .expect("a pod has metadata")
            .entry("annotations")
            .or_insert_with(|| json!({}));
        annotations[HAMI_NODE] = json!(node);
        annotations[HAMI_DEVICES] = json!(devices);
    }
    pod["status"]["conditions"] = json!([condition("PodScheduled", "True", None, None)]);
    let namespace = text(&pod, "/metadata/namespace");
    let name = text(&pod, "/metadata/name");
    o.put("pods", pod);
    event(
        o,
        &namespace,
        &name,
        "Normal",
        "Scheduled",
        &format!("Successfully assigned {namespace}/{name} to {node}"),
    );
}

fn unschedulable(o: &mut Objects, mut pod: Value, nodes: usize, reasons: &BTreeMap<String, usize>) {
    let detail: Vec<String> = reasons
        .iter()
        .map(|(why, n)| format!("{n} {why}"))
        .collect();
    let message = format!("0/{nodes} nodes are available: {}.", detail.join(", "));
    let current = pod
        .pointer("/status/conditions/0/message")
        .and_then(Value::as_str);
    if current == Some(message.as_str()) {
        return;
    }
    pod["status"]["conditions"] = json!([condition(
        "PodScheduled",
        "False",
        Some("Unschedulable"),
        Some(&message)
    )]);
    let namespace = text(&pod, "/metadata/namespace");
    let name = text(&pod, "/metadata/name");
    o.put("pods", pod);
    event(
        o,
        &namespace,
        &name,
        "Warning",
        "FailedScheduling",
        &message,
    );
}

/// An Event about a pod, as the scheduler and the kubelet write them.
pub fn event(o: &mut Objects, namespace: &str, pod: &str, kind: &str, reason: &str, message: &str) {
    let component = if reason.ends_with("Scheduling") || reason == "Scheduled" {
        "default-scheduler"
    } else {
        "kubelet"
    };
    let about = crate::events::About {
        kind: "Pod",
        namespace,
        name: pod,
    };
    let said = crate::events::Said {
        kind,
        reason,
        message,
        component,
    };
    crate::events::record(o, about, said);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, cards: &[Card]) -> Value {
        json!({"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name},
                "annotations": {REGISTER: register(cards)}},
            "status": {"allocatable": {"cpu": "8", "memory": "64Gi"}}})
    }

    fn card(uuid: &str) -> Card {
        Card {
            uuid: uuid.into(),
            split: 10,
            memory_mib: 49152,
            cores: 100,
            model: "NVIDIA-L40S".into(),
        }
    }

    fn pod(name: &str, mib: u64) -> Value {
        json!({"metadata": {"name": name, "namespace": "u"}, "spec": {"containers": [{"name": "e", "image": "i",
            "resources": {"limits": {GPU: "1", GPU_MEM: mib.to_string(), GPU_CORES: "25"}, "requests": {"cpu": "1"}}}]}})
    }

    #[test]
    fn gpu_pods_are_placed_by_memory_and_the_rest_wait_with_the_schedulers_words() {
        let store = Store::default();
        store.write(|o| {
            o.put("nodes", node("n1", &[card("GPU-a")]));
            o.put("nodes", node("n2", &[card("GPU-b")]));
            for (i, mib) in [40960, 40960, 16384].into_iter().enumerate() {
                o.put("pods", pod(&format!("p{i}"), mib));
            }
        });
        schedule(&store);
        let placed = |name: &str| store.read(|o| o.get("pods", "u", name).cloned().unwrap());
        assert_eq!(placed("p0")["spec"]["nodeName"], "n1");
        assert_eq!(
            placed("p0")["metadata"]["annotations"][HAMI_DEVICES],
            "GPU-a,NVIDIA,40960,25:;"
        );
        assert_eq!(placed("p1")["spec"]["nodeName"], "n2");
        let waiting = placed("p2");
        assert!(waiting["spec"].get("nodeName").is_none());
        assert_eq!(
            waiting["status"]["conditions"][0]["reason"],
            "Unschedulable"
        );
        assert_eq!(
            waiting["status"]["conditions"][0]["message"],
            "0/2 nodes are available: 2 Insufficient nvidia.com/gpumem."
        );
        // A pod that ends frees its share; the next pass places the waiting one.
        store.write(|o| {
            let mut done = o.get("pods", "u", "p0").cloned().unwrap();
            done["status"]["phase"] = json!("Succeeded");
            o.put("pods", done);
        });
        schedule(&store);
        assert_eq!(placed("p2")["spec"]["nodeName"], "n1");
    }

    #[test]
    fn a_pod_asking_for_a_card_by_uuid_gets_that_card_or_waits() {
        let store = Store::default();
        let mut wants_b = pod("p", 8192);
        wants_b["metadata"]["annotations"] = json!({USE_UUID: "GPU-b"});
        store.write(|o| {
            o.put("nodes", node("n1", &[card("GPU-a")]));
            o.put("nodes", node("n2", &[card("GPU-b")]));
            o.put("pods", wants_b);
        });
        schedule(&store);
        assert_eq!(
            store.read(|o| o.get("pods", "u", "p").cloned().unwrap())["spec"]["nodeName"],
            "n2"
        );
    }

    #[test]
    fn a_node_selector_is_honoured_and_affinity_is_refused_not_ignored() {
        let store = Store::default();
        let mut on_n2 = pod("on-n2", 8192);
        on_n2["spec"]["nodeSelector"] = json!({"kubernetes.io/hostname": "n2"});
        let mut nowhere = pod("nowhere", 8192);
        nowhere["spec"]["nodeSelector"] = json!({"kubernetes.io/hostname": "n9"});
        let mut affine = pod("affine", 8192);
        affine["spec"]["affinity"] =
            json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": []}});
        store.write(|o| {
            o.put("nodes", node("n1", &[card("GPU-a")]));
            o.put("nodes", node("n2", &[card("GPU-b")]));
            for p in [on_n2, nowhere, affine] {
                o.put("pods", p);
            }
        });
        schedule(&store);
        let placed = |name: &str| store.read(|o| o.get("pods", "u", name).cloned().unwrap());
        // n1 has room too and comes first: the selector sends it to n2.
        assert_eq!(placed("on-n2")["spec"]["nodeName"], "n2");
        let waiting = placed("nowhere");
        assert!(waiting["spec"].get("nodeName").is_none());
        assert_eq!(
            waiting["status"]["conditions"][0]["message"],
            "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector."
        );
        let refused = placed("affine");
        assert!(refused["spec"].get("nodeName").is_none());
        assert_eq!(
            refused["status"]["conditions"][0]["message"],
            "0/2 nodes are available: 2 node(s) were not evaluated: spec.affinity is not simulated (use nodeSelector)."
        );
    }
}
