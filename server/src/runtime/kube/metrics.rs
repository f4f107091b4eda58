//! GPU use per session pod, from HAMi's metrics.
//!
//! Two sources, chosen by `kube.metrics_url`:
//! - HAMi's device-plugin monitor (`http://<node>:31992/metrics`, any URL whose path ends in
//!   `/metrics`): Prometheus text, parsed here.
//! - A Prometheus server (any other URL, e.g. `http://prometheus:9090`): one instant query at
//!   `/api/v1/query` for the three series, JSON.
//!
//! The series (HAMi's vGPU monitor): `hami_vgpu_memory_used_bytes`,
//! `hami_container_device_utilization_ratio` and `hami_container_last_kernel_elapsed_seconds`,
//! labelled `namespace`, `pod`, `container` (older HAMi: `vGPU_device_memory_usage_in_bytes`,
//! `Device_utilization_desc_of_container`, `Device_last_kernel_of_container`, labelled
//! `podnamespace`, `podname`, `ctrname`). Behind Prometheus the pod labels may come back as
//! `exported_namespace`/`exported_pod`, since the scrape target is HAMi's own pod.

use crate::runtime::GpuUsage;
use app::domain::encode::{UNRESERVED, percent_encode};
use std::collections::HashMap;

/// One sample: a series name, its labels, its value.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: HashMap<String, String>,
    pub value: f64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Series {
    MemoryUsed,
    Utilization,
    LastKernel,
}

fn series(name: &str) -> Option<Series> {
    match name {
        "hami_vgpu_memory_used_bytes" | "vGPU_device_memory_usage_in_bytes" => {
            Some(Series::MemoryUsed)
        }
        "hami_container_device_utilization_ratio" | "Device_utilization_desc_of_container" => {
            Some(Series::Utilization)
        }
        "hami_container_last_kernel_elapsed_seconds" | "Device_last_kernel_of_container" => {
            Some(Series::LastKernel)
        }
        _ => None,
    }
}

/// The Prometheus query for the three series (current and older names).
pub const PROMETHEUS_QUERY: &str = "{__name__=~\"hami_vgpu_memory_used_bytes|hami_container_device_utilization_ratio|hami_container_last_kernel_elapsed_seconds|vGPU_device_memory_usage_in_bytes|Device_utilization_desc_of_container|Device_last_kernel_of_container\"}";

/// Parses Prometheus text exposition; lines it cannot read are skipped (a partial answer beats none).
pub fn parse_text(text: &str) -> Vec<Sample> {
    text.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<Sample> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let name_end = line
        .find(|c: char| c == '{' || c.is_whitespace())
        .unwrap_or(line.len());
    let name = &line[..name_end];
    let mut rest = &line[name_end..];
    let mut labels = HashMap::new();
    if let Some(after) = rest.strip_prefix('{') {
        let (parsed, remaining) = parse_labels(after)?;
        labels = parsed;
        rest = remaining;
    }
    let value = rest.split_whitespace().next()?;
    let value = match value {
        "NaN" => f64::NAN,
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().ok()?,
    };
    Some(Sample {
        name: name.to_string(),
        labels,
        value,
    })
}

/// `key="value",…}` → the labels and what follows the closing brace.
fn parse_labels(mut s: &str) -> Option<(HashMap<String, String>, &str)> {
    let mut labels = HashMap::new();
    loop {
        s = s.trim_start_matches([' ', ',']);
        if let Some(rest) = s.strip_prefix('}') {
            return Some((labels, rest));
        }
        let eq = s.find('=')?;
        let key = s[..eq].trim().to_string();
        s = s[eq + 1..].trim_start().strip_prefix('"')?;
        let mut value = String::new();
        let mut chars = s.char_indices();
        let end = loop {
            match chars.next()? {
                (i, '"') => break i,
                (_, '\\') => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    other => value.push(other),
                },
                (_, c) => value.push(c),
            }
        };
        labels.insert(key, value);
        s = &s[end + 1..];
    }
}

/// Parses a Prometheus `/api/v1/query` answer (an instant vector).
pub fn parse_prometheus_json(body: &[u8]) -> Result<Vec<Sample>, String> {
    #[derive(serde::Deserialize)]
    struct Answer {
        status: String,
        #[serde(default)]
        error: Option<String>,
        #[serde(default)]
        data: Option<Data>,
    }
    #[derive(serde::Deserialize)]
    struct Data {
        result: Vec<Item>,
    }
    #[derive(serde::Deserialize)]
    struct Item {
        metric: HashMap<String, String>,
        value: (f64, String),
    }
    let answer: Answer =
        serde_json::from_slice(body).map_err(|e| format!("not a Prometheus answer: {e}"))?;
    if answer.status != "success" {
        return Err(answer.error.unwrap_or(answer.status));
    }
    Ok(answer
        .data
        .map(|d| d.result)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|mut item| {
            let name = item.metric.remove("__name__")?;
            let value = item.value.1.parse().ok()?;
            Some(Sample {
                name,
                labels: item.metric,
                value,
            })
        })
        .collect())
}

/// The pod a sample is about: (namespace, pod).
fn pod_of(labels: &HashMap<String, String>) -> Option<(String, String)> {
    let pick = |keys: &[&str]| {
        keys.iter()
            .find_map(|k| labels.get(*k).filter(|v| !v.is_empty()).cloned())
    };
    Some((
        pick(&["exported_namespace", "podnamespace", "namespace"])?,
        pick(&["exported_pod", "podname", "pod"])?,
    ))
}

/// GPU use per pod: memory summed over the pod's devices, utilization the busiest device, the
/// most recent kernel of any device.
pub fn usage_by_pod(samples: &[Sample]) -> HashMap<(String, String), GpuUsage> {
    let mut out: HashMap<(String, String), GpuUsage> = HashMap::new();
    for sample in samples {
        let Some(series) = series(&sample.name) else {
            continue;
        };
        if !sample.value.is_finite() || sample.value < 0.0 {
            continue;
        }
        let Some(pod) = pod_of(&sample.labels) else {
            continue;
        };
        let usage = out.entry(pod).or_default();
        match series {
            Series::MemoryUsed => usage.memory_used_mib += (sample.value / 1_048_576.0) as u64,
            Series::Utilization => {
                usage.utilization_pct = usage.utilization_pct.max(sample.value.min(100.0) as u32)
            }
            Series::LastKernel => {
                usage.last_kernel_seconds_ago = Some(
                    usage
                        .last_kernel_seconds_ago
                        .map_or(sample.value, |seen| seen.min(sample.value)),
                )
            }
        }
    }
    out
}

/// Where to ask, and how to read the answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// HAMi's monitor: GET the URL, Prometheus text.
    Scrape(String),
    /// A Prometheus server: GET `<base>/api/v1/query?query=…`, JSON.
    Prometheus(String),
}

impl Source {
    pub fn from_url(url: &str) -> Option<Source> {
        if url.is_empty() {
            return None;
        }
        let path = url.split(['?', '#']).next().unwrap_or(url);
        Some(if path.trim_end_matches('/').ends_with("/metrics") {
            Source::Scrape(url.to_string())
        } else {
            Source::Prometheus(url.trim_end_matches('/').to_string())
        })
    }

    /// The URL one sample is fetched from.
    pub fn request_url(&self) -> String {
        match self {
            Source::Scrape(url) => url.clone(),
            Source::Prometheus(base) => {
                format!(
                    "{base}/api/v1/query?query={}",
                    percent_encode(PROMETHEUS_QUERY, UNRESERVED)
                )
            }
        }
    }

    pub fn parse(&self, body: &[u8]) -> Result<Vec<Sample>, String> {
        match self {
            Source::Scrape(_) => Ok(parse_text(&String::from_utf8_lossy(body))),
            Source::Prometheus(_) => parse_prometheus_json(body),
        }
    }
}

/// Fetches samples over plain HTTP; a slow or failing source gives an error, never a hang.
pub struct MetricsClient {
    source: Source,
    http: hyper_util::client::legacy::Client<
        hyper_util::client::legacy::connect::HttpConnector,
        http_body_util::Empty<bytes::Bytes>,
    >,
}

/// Past this a metrics answer is not read (a node with many pods is a few hundred KiB).
const MAX_BODY: usize = 16 << 20;

impl MetricsClient {
    pub fn new(source: Source) -> MetricsClient {
        let http =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build_http();
        MetricsClient { source, http }
    }

    pub async fn samples(&self) -> Result<Vec<Sample>, String> {
        use http_body_util::BodyExt;
        let url = self.source.request_url();
        let request = http::Request::get(&url)
            .header("accept", "text/plain, application/json")
            .body(http_body_util::Empty::new())
            .map_err(|e| format!("bad metrics URL {url}: {e}"))?;
        let fetch = async {
            let response = self
                .http
                .request(request)
                .await
                .map_err(|e| format!("GET {url}: {e}"))?;
            if !response.status().is_success() {
                return Err(format!("GET {url}: HTTP {}", response.status()));
            }
            let body = http_body_util::Limited::new(response.into_body(), MAX_BODY)
                .collect()
                .await
                .map_err(|e| format!("reading {url}: {e}"))?;
            Ok(body.to_bytes())
        };
        let body = tokio::time::timeout(std::time::Duration::from_secs(5), fetch)
            .await
            .map_err(|_| format!("GET {url}: no answer within 5 s"))??;
        self.source.parse(&body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What HAMi's monitor serves for two session pods (one idle, one busy on two devices) and
    /// a pod that is not ours, with host series around them.
    pub const HAMI_SAMPLE: &str = r#"# HELP hami_host_gpu_memory_used_bytes GPU device memory usage in bytes
# TYPE hami_host_gpu_memory_used_bytes gauge
hami_host_gpu_memory_used_bytes{device_index="0",device_type="NVIDIA-NVIDIA H100 80GB HBM3",device_uuid="GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448",node="gpu-node-1"} 1.2582912e+10
# HELP hami_vgpu_memory_used_bytes vGPU device memory usage in bytes
# TYPE hami_vgpu_memory_used_bytes gauge
hami_vgpu_memory_used_bytes{container="editor",device_uuid="GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448",namespace="gsb-alice",pod="session-aaaa",vdevice_index="0"} 2.147483648e+09
hami_vgpu_memory_used_bytes{container="editor",device_uuid="GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448",namespace="gsb-bob",pod="session-bbbb",vdevice_index="0"} 1.073741824e+09
hami_vgpu_memory_used_bytes{container="editor",device_uuid="GPU-7aa1c0de-0000-1111-2222-333344445555",namespace="gsb-bob",pod="session-bbbb",vdevice_index="1"} 5.36870912e+08
hami_vgpu_memory_used_bytes{container="main",device_uuid="GPU-7aa1c0de-0000-1111-2222-333344445555",namespace="other",pod="training-0",vdevice_index="0"} 4.294967296e+09
# HELP hami_vgpu_memory_limit_bytes vGPU device memory limit in bytes
# TYPE hami_vgpu_memory_limit_bytes gauge
hami_vgpu_memory_limit_bytes{container="editor",device_uuid="GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448",namespace="gsb-alice",pod="session-aaaa",vdevice_index="0"} 8.589934592e+09
# HELP hami_container_device_utilization_ratio Container device SM utilization ratio
# TYPE hami_container_device_utilization_ratio gauge
hami_container_device_utilization_ratio{container="editor",device_uuid="GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448",namespace="gsb-alice",pod="session-aaaa",vdevice_index="0"} 0
hami_container_device_utilization_ratio{container="editor",device_uuid="GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448",namespace="gsb-bob",pod="session-bbbb",vdevice_index="0"} 37
hami_container_device_utilization_ratio{container="editor",device_uuid="GPU-7aa1c0de-0000-1111-2222-333344445555",namespace="gsb-bob",pod="session-bbbb",vdevice_index="1"} 81
# HELP hami_container_last_kernel_elapsed_seconds Seconds since last kernel execution in container
# TYPE hami_container_last_kernel_elapsed_seconds gauge
hami_container_last_kernel_elapsed_seconds{container="editor",device_uuid="GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448",namespace="gsb-alice",pod="session-aaaa",vdevice_index="0"} 1843
hami_container_last_kernel_elapsed_seconds{container="editor",device_uuid="GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448",namespace="gsb-bob",pod="session-bbbb",vdevice_index="0"} 12
hami_container_last_kernel_elapsed_seconds{container="editor",device_uuid="GPU-7aa1c0de-0000-1111-2222-333344445555",namespace="gsb-bob",pod="session-bbbb",vdevice_index="1"} 2
"#;

    fn key(ns: &str, pod: &str) -> (String, String) {
        (ns.to_string(), pod.to_string())
    }

    #[test]
    fn hami_text_becomes_usage_per_pod() {
        let samples = parse_text(HAMI_SAMPLE);
        assert_eq!(samples.len(), 12);
        let usage = usage_by_pod(&samples);
        assert_eq!(
            usage[&key("gsb-alice", "session-aaaa")],
            GpuUsage {
                memory_used_mib: 2048,
                utilization_pct: 0,
                last_kernel_seconds_ago: Some(1843.0),
            }
        );
        assert_eq!(
            usage[&key("gsb-bob", "session-bbbb")],
            GpuUsage {
                memory_used_mib: 1024 + 512,
                utilization_pct: 81,
                last_kernel_seconds_ago: Some(2.0),
            }
        );
        assert_eq!(usage[&key("other", "training-0")].memory_used_mib, 4096);
        assert_eq!(usage.len(), 3, "host series name no pod");
    }

    #[test]
    fn legacy_names_and_labels_are_read() {
        let text = r#"vGPU_device_memory_usage_in_bytes{ctrname="editor",deviceuuid="GPU-1",podname="session-cccc",podnamespace="gsb-carol",vdeviceid="0"} 3221225472
Device_utilization_desc_of_container{ctrname="editor",deviceuuid="GPU-1",podname="session-cccc",podnamespace="gsb-carol",vdeviceid="0"} 5
Device_last_kernel_of_container{ctrname="editor",deviceuuid="GPU-1",podname="session-cccc",podnamespace="gsb-carol",vdeviceid="0"} 40
"#;
        let usage = usage_by_pod(&parse_text(text));
        assert_eq!(
            usage[&key("gsb-carol", "session-cccc")],
            GpuUsage {
                memory_used_mib: 3072,
                utilization_pct: 5,
                last_kernel_seconds_ago: Some(40.0),
            }
        );
    }

    #[test]
    fn escaped_labels_and_odd_lines() {
        let samples = parse_text(
            "m{a=\"x\\\"y\\\\z\",b=\"line\\nbreak\"} 1 1700000000000\nbroken{a=\"x\" \nplain 2\nnan NaN\n",
        );
        assert_eq!(samples.len(), 3);
        assert_eq!(samples[0].labels["a"], "x\"y\\z");
        assert_eq!(samples[0].labels["b"], "line\nbreak");
        assert_eq!(samples[0].value, 1.0);
        assert_eq!(samples[1].name, "plain");
        assert!(samples[2].value.is_nan());
    }

    #[test]
    fn prometheus_answers_become_usage_per_pod() {
        let body = serde_json::json!({
            "status": "success",
            "data": {"resultType": "vector", "result": [
                {"metric": {"__name__": "hami_vgpu_memory_used_bytes", "exported_namespace": "gsb-alice",
                            "exported_pod": "session-aaaa", "namespace": "hami-system", "pod": "hami-device-plugin-x"},
                 "value": [1700000000.1, "1073741824"]},
                {"metric": {"__name__": "hami_container_device_utilization_ratio", "namespace": "gsb-alice", "pod": "session-aaaa"},
                 "value": [1700000000.1, "12"]},
            ]}
        });
        let samples = parse_prometheus_json(body.to_string().as_bytes()).unwrap();
        let usage = usage_by_pod(&samples);
        assert_eq!(usage.len(), 1, "{usage:?}");
        let alice = &usage[&key("gsb-alice", "session-aaaa")];
        assert_eq!((alice.memory_used_mib, alice.utilization_pct), (1024, 12));
        let error = serde_json::json!({"status": "error", "error": "bad query"});
        assert_eq!(
            parse_prometheus_json(error.to_string().as_bytes()).unwrap_err(),
            "bad query"
        );
    }

    #[test]
    fn the_url_picks_the_source() {
        assert_eq!(Source::from_url(""), None);
        assert_eq!(
            Source::from_url("http://10.0.0.5:31992/metrics"),
            Some(Source::Scrape("http://10.0.0.5:31992/metrics".into()))
        );
        let prometheus = Source::from_url("http://prometheus:9090/").unwrap();
        let url = prometheus.request_url();
        assert!(url.starts_with("http://prometheus:9090/api/v1/query?query=%7B__name__%3D~%22hami_vgpu_memory_used_bytes%7C"), "{url}");
    }
}
