//! A kubelet: for each pod bound to its node it runs the pod's container as a local process, as
//! a container runtime would: the pod's command, arguments, environment (Secrets and the
//! downward API resolved), user and group, working directory; its volumes as folders (a claim
//! is a folder per namespace and claim, kept across pods; an emptyDir one per pod); in a network
//! namespace of its own on a bridge, its address the pod IP (as a CNI gives one); in a memory
//! cgroup of the container's limit. An image stands for a program installed here: a table maps
//! an image's name to the folders that hold it (no image can be pulled on these machines).
//!
//! It reports as a kubelet does: phase, pod IP, conditions, container statuses (restarts, exit
//! codes, `OOMKilled` when the cgroup killed it, `CrashLoopBackOff` while it waits to restart),
//! readiness from the pod's HTTP probe, events; logs for `pods/log`. A pod marked for deletion is
//! sent SIGTERM, given its grace period, then SIGKILL, and removed. `drain` cordons the node and
//! deletes its pods.
//!
//! Needs root (network namespaces, cgroups, `setpriv`), bubblewrap and iproute2.

use crate::api;
use crate::clock;
use crate::http::PodStreams;
use crate::scheduler::event;
use crate::status::Refusal;
use crate::store::{Store, text};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What stands for an image here.
#[derive(Clone, Debug)]
pub struct Image {
    /// The image reference's name before its tag or digest, e.g. "quay.io/jupyter/pytorch-notebook".
    pub name: String,
    /// Folders that hold its programs: shown read-only at their own paths, the `bin` ones first
    /// on `PATH`.
    pub dirs: Vec<PathBuf>,
}

#[derive(Clone, Debug)]
pub struct Config {
    pub node: String,
    /// Volumes, logs and each pod's own folders.
    pub root: PathBuf,
    pub images: Vec<Image>,
    /// The pod network's /24, e.g. 198.18.7.0: the bridge is .1, pods .2 and up.
    pub subnet: Ipv4Addr,
    /// The bridge's name (at most 15 characters).
    pub bridge: String,
    /// Host folders a pod's filesystem shows read-only (the image's base layers).
    pub system: Vec<PathBuf>,
    /// How long the first restart waits; it doubles up to 8×.
    pub backoff: Duration,
}

/// One running container.
struct Container {
    child: tokio::process::Child,
    started: String,
}

/// What the kubelet keeps of a pod it runs.
struct PodState {
    ip: Ipv4Addr,
    netns: String,
    veth: String,
    /// Its memory group, where one could be made.
    cgroup: Option<PathBuf>,
    restarts: u32,
    container: Option<Container>,
    /// When the container may start again after an exit.
    backoff_until: Option<tokio::time::Instant>,
    ready: bool,
    log_dir: PathBuf,
    stopping: bool,
    /// OOM kills its cgroup has had: an exit after a new one is `OOMKilled`.
    ooms: u64,
}

pub struct Kubelet {
    config: Config,
    store: Store,
    /// Where pods' memory groups go; None where this machine lets none be made.
    cgroups: Option<crate::cgroup::MemoryGroups>,
    pods: Mutex<HashMap<(String, String), PodState>>,
    next_ip: AtomicU32,
}

fn run(program: &str, args: &[&str]) -> Result<(), String> {
    let out = std::process::Command::new(program)
        .args(args)
        .output()
        .map_err(|e| format!("{program}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{program} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// The image's name: the reference less its digest and tag.
fn image_name(reference: &str) -> &str {
    let without_digest = reference.split('@').next().unwrap_or(reference);
    match without_digest.rsplit_once(':') {
        Some((name, tag)) if !tag.contains('/') => name,
        _ => without_digest,
    }
}

impl Kubelet {
    /// Makes the node's bridge and registers the node; `cards` are its GPUs for the scheduler.
    pub fn start(
        config: Config,
        store: Store,
        cards: &[crate::scheduler::Card],
    ) -> Result<Arc<Self>, String> {
        let gateway = Ipv4Addr::from(u32::from(config.subnet) + 1);
        let _ = run("ip", &["link", "del", &config.bridge]);
        run("ip", &["link", "add", &config.bridge, "type", "bridge"])?;
        run(
            "ip",
            &[
                "addr",
                "add",
                &format!("{gateway}/24"),
                "dev",
                &config.bridge,
            ],
        )?;
        run("ip", &["link", "set", &config.bridge, "up"])?;
        std::fs::create_dir_all(&config.root).map_err(|e| e.to_string())?;
        let node = json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": config.node,
                "uid": clock::uid(),
                "creationTimestamp": clock::now(),
                "labels": {"kubernetes.io/hostname": config.node, "gpu": if cards.is_empty() { "false" } else { "true" }},
                "annotations": {crate::scheduler::REGISTER: crate::scheduler::register(cards)},
            },
            "spec": {"podCIDR": format!("{}/24", config.subnet)},
            "status": {
                "capacity": {"cpu": "16", "memory": "128Gi", "pods": "110", "nvidia.com/gpu": (cards.iter().map(|c| c.split).sum::<u32>()).to_string()},
                "allocatable": {"cpu": "16", "memory": "128Gi", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "lastTransitionTime": clock::now()}],
            },
        });
        store.write(|o| o.put("nodes", node));
        let cgroups = crate::cgroup::MemoryGroups::detect(&format!(
            "sim-{}-{}",
            std::process::id(),
            config.bridge
        ));
        Ok(Arc::new(Kubelet {
            config,
            store,
            cgroups,
            pods: Mutex::new(HashMap::new()),
            next_ip: AtomicU32::new(2),
        }))
    }

    /// Runs the node: follows its pods until the task is dropped.
    pub async fn run(self: Arc<Self>) {
        loop {
            crate::scheduler::schedule(&self.store);
            self.sync().await;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn mine(&self) -> Vec<Value> {
        self.store.read(|o| {
            o.list("pods", None)
                .into_iter()
                .filter(|p| text(p, "/spec/nodeName") == self.config.node)
                .collect()
        })
    }

    /// One pass over the node's pods: start, watch, probe, restart, stop.
    async fn sync(self: &Arc<Self>) {
        for pod in self.mine() {
            let key = (
                text(&pod, "/metadata/namespace"),
                text(&pod, "/metadata/name"),
            );
            if pod.pointer("/metadata/deletionTimestamp").is_some() {
                self.stop(&key, &pod).await;
                continue;
            }
            if matches!(text(&pod, "/status/phase").as_str(), "Succeeded" | "Failed") {
                continue;
            }
            let known = self
                .pods
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .contains_key(&key);
            if !known && let Err(why) = self.set_up(&key, &pod) {
                self.report_waiting(&key, "CreateContainerError", &why);
                continue;
            }
            self.tend(&key, &pod).await;
        }
        // Pods gone from the API (deleted at once) lose their process too.
        let live: Vec<(String, String)> = self
            .mine()
            .iter()
            .map(|p| (text(p, "/metadata/namespace"), text(p, "/metadata/name")))
            .collect();
        let orphans: Vec<(String, String)> = self
            .pods
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .filter(|k| !live.contains(k))
            .cloned()
            .collect();
        for key in orphans {
            self.tear_down(&key, Duration::ZERO).await;
        }
    }

    /// The pod's network namespace, address and cgroup.
    fn set_up(&self, key: &(String, String), pod: &Value) -> Result<(), String> {
        let n = self.next_ip.fetch_add(1, Ordering::Relaxed);
        if n > 254 {
            return Err("the node's pod network is full".into());
        }
        let ip = Ipv4Addr::from(u32::from(self.config.subnet) + n);
        let gateway = Ipv4Addr::from(u32::from(self.config.subnet) + 1);
        let tag = format!(
            "{}{n}",
            self.config.bridge.get(2..).unwrap_or(&self.config.bridge)
        );
        let netns = format!("sim-{tag}");
        let veth = format!("v{tag}");
        let _ = run("ip", &["netns", "del", &netns]);
        run("ip", &["netns", "add", &netns])?;
        run(
            "ip",
            &[
                "link",
                "add",
                &veth,
                "type",
                "veth",
                "peer",
                "name",
                &format!("p{tag}"),
            ],
        )?;
        run("ip", &["link", "set", &format!("p{tag}"), "netns", &netns])?;
        run(
            "ip",
            &["link", "set", &veth, "master", &self.config.bridge, "up"],
        )?;
        run(
            "ip",
            &[
                "-n",
                &netns,
                "link",
                "set",
                &format!("p{tag}"),
                "name",
                "eth0",
            ],
        )?;
        run(
            "ip",
            &[
                "-n",
                &netns,
                "addr",
                "add",
                &format!("{ip}/24"),
                "dev",
                "eth0",
            ],
        )?;
        run("ip", &["-n", &netns, "link", "set", "eth0", "up"])?;
        run("ip", &["-n", &netns, "link", "set", "lo", "up"])?;
        run(
            "ip",
            &[
                "-n",
                &netns,
                "route",
                "add",
                "default",
                "via",
                &gateway.to_string(),
            ],
        )?;
        let limit = pod
            .pointer("/spec/containers/0/resources/limits/memory")
            .and_then(Value::as_str)
            .and_then(|q| crate::quantity::milli(q).ok())
            .map(|m| (m / 1000) as u64);
        let cgroup = match &self.cgroups {
            Some(groups) => Some(
                groups
                    .create(&tag, limit)
                    .map_err(|e| format!("the pod's cgroup: {e}"))?,
            ),
            None if limit.is_some() => {
                return Err(
                    "this node cannot hold a container to its memory limit (no cgroups)".into(),
                );
            }
            None => None,
        };
        let log_dir = self
            .config
            .root
            .join("logs")
            .join(format!("{}_{}", key.0, key.1));
        std::fs::create_dir_all(&log_dir).map_err(|e| e.to_string())?;
        self.pods.lock().unwrap_or_else(|e| e.into_inner()).insert(
            key.clone(),
            PodState {
                ip,
                netns,
                veth,
                cgroup,
                restarts: 0,
                container: None,
                backoff_until: None,
                ready: false,
                log_dir,
                stopping: false,
                ooms: 0,
            },
        );
        Ok(())
    }

    /// The folder a volume is, made if missing, with a Secret's keys written as files.
    fn volume_dir(
        &self,
        key: &(String, String),
        volume: &Value,
        fs_group: Option<u32>,
    ) -> Result<PathBuf, String> {
        let name = text(volume, "/name");
        let dir = if let Some(claim) = volume
            .pointer("/persistentVolumeClaim/claimName")
            .and_then(Value::as_str)
        {
            let pvc = self
                .store
                .read(|o| o.get("persistentvolumeclaims", &key.0, claim).cloned());
            let Some(pvc) = pvc else {
                return Err(format!("persistentvolumeclaim \"{claim}\" not found"));
            };
            // An NFS export or a CSI volume: its storage's folder, never made here.
            if let Some((dir, _)) = crate::volumes::source_dir(&self.store, &pvc)? {
                return Ok(dir);
            }
            let dir = self.volume_path(&key.0, claim);
            // A claim made from a snapshot gets its data where it is first used.
            if !dir.exists()
                && let Some(content) = crate::snapshots::source_of_claim(&self.store, &key.0, &pvc)
            {
                crate::snapshots::provision(&self.snapshot_path(&content?), &dir)?;
            }
            dir
        } else if let Some(secret) = volume.pointer("/secret/secretName").and_then(Value::as_str) {
            let data = self
                .store
                .read(|o| o.get("secrets", &key.0, secret).cloned())
                .ok_or_else(|| format!("secret \"{secret}\" not found"))?;
            let dir = self
                .config
                .root
                .join("pods")
                .join(format!("{}_{}", key.0, key.1))
                .join(&name);
            std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
            // The volume's `defaultMode` (0644 unless it says otherwise), as the kubelet sets it.
            use std::os::unix::fs::PermissionsExt;
            let mode = volume
                .pointer("/secret/defaultMode")
                .and_then(Value::as_u64)
                .unwrap_or(0o644) as u32;
            let chmod = |path: &Path, mode: u32| {
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
                    .map_err(|e| e.to_string())
            };
            chmod(&dir, 0o755)?;
            for (file, value) in data
                .get("data")
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
            {
                let bytes = base64_decode(value.as_str().unwrap_or(""))
                    .ok_or("a Secret's data is not base64")?;
                std::fs::write(dir.join(file), bytes).map_err(|e| e.to_string())?;
                chmod(&dir.join(file), mode)?;
                // With an fsGroup the files are the group's, as the kubelet's ownership
                // management makes them.
                if let Some(group) = fs_group {
                    std::os::unix::fs::chown(dir.join(file), None, Some(group))
                        .map_err(|e| e.to_string())?;
                }
            }
            dir
        } else {
            self.config
                .root
                .join("pods")
                .join(format!("{}_{}", key.0, key.1))
                .join(&name)
        };
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        Ok(dir)
    }

    /// The container's environment with Secrets and the downward API resolved.
    fn environment(
        &self,
        key: &(String, String),
        pod: &Value,
        ip: Ipv4Addr,
        container: &Value,
    ) -> Result<Vec<(String, String)>, String> {
        let mut env = Vec::new();
        for item in crate::store::items(container, "/env") {
            let name = text(item, "/name");
            let value = if let Some(v) = item.get("value").and_then(Value::as_str) {
                v.to_string()
            } else if let Some(r) = item.pointer("/valueFrom/secretKeyRef") {
                let secret = text(r, "/name");
                let wanted = text(r, "/key");
                let data = self
                    .store
                    .read(|o| o.get("secrets", &key.0, &secret).cloned());
                let value = data
                    .as_ref()
                    .and_then(|s| s.pointer(&format!("/data/{wanted}")))
                    .and_then(Value::as_str)
                    .and_then(base64_decode);
                match value {
                    Some(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
                    None if data.is_none() => return Err(format!("secret \"{secret}\" not found")),
                    None => {
                        return Err(format!(
                            "couldn't find key {wanted} in Secret {}/{secret}",
                            key.0
                        ));
                    }
                }
            } else if let Some(field) = item
                .pointer("/valueFrom/fieldRef/fieldPath")
                .and_then(Value::as_str)
            {
                match field {
                    "metadata.name" => key.1.clone(),
                    "metadata.namespace" => key.0.clone(),
                    "status.podIP" => ip.to_string(),
                    "spec.nodeName" => self.config.node.clone(),
                    other => text(pod, &format!("/{}", other.replace('.', "/"))),
                }
            } else {
                String::new()
            };
            env.push((name, value));
        }
        Ok(env)
    }

    /// The bwrap command that runs the pod's first container.
    fn command(
        &self,
        key: &(String, String),
        pod: &Value,
        ip: Ipv4Addr,
        netns: &str,
    ) -> Result<std::process::Command, String> {
        self.command_running(key, pod, ip, netns, None)
    }

    /// As [`Kubelet::command`], running `argv` instead of the container's own command where
    /// given (an exec): the same user, environment, volumes and network as the container.
    fn command_running(
        &self,
        key: &(String, String),
        pod: &Value,
        ip: Ipv4Addr,
        netns: &str,
        argv: Option<Vec<String>>,
    ) -> Result<std::process::Command, String> {
        let container = pod
            .pointer("/spec/containers/0")
            .cloned()
            .ok_or("the pod has no container")?;
        let reference = text(&container, "/image");
        let image = self
            .config
            .images
            .iter()
            .find(|i| i.name == image_name(&reference))
            .ok_or_else(|| format!("Failed to pull image \"{reference}\": not found here"))?;
        let fs_group = pod
            .pointer("/spec/securityContext/fsGroup")
            .and_then(Value::as_u64);
        let mut mounts: Vec<(PathBuf, String, bool)> = Vec::new();
        for mount in crate::store::items(&container, "/volumeMounts") {
            let name = text(mount, "/name");
            let volume = pod
                .pointer("/spec/volumes")
                .and_then(Value::as_array)
                .and_then(|v| v.iter().find(|v| text(v, "/name") == name))
                .ok_or_else(|| format!("volume \"{name}\" not found"))?;
            let read_only = mount
                .get("readOnly")
                .and_then(Value::as_bool)
                .unwrap_or(false)
                || crate::volumes::forces_read_only(&self.store, &key.0, volume);
            mounts.push((
                self.volume_dir(key, volume, fs_group.map(|g| g as u32))?,
                text(mount, "/mountPath"),
                read_only,
            ));
        }
        nested_mount_points(&mounts)?;
        let mut env = self.environment(key, pod, ip, &container)?;
        let path: Vec<String> = image
            .dirs
            .iter()
            .map(|d| d.join("bin"))
            .chain(image.dirs.iter().map(|d| d.join("node_modules/.bin")))
            .filter(|d| d.is_dir())
            .map(|d| d.display().to_string())
            .chain(["/usr/local/bin".into(), "/usr/bin".into(), "/bin".into()])
            .collect();
        if !env.iter().any(|(k, _)| k == "PATH") {
            env.push(("PATH".into(), path.join(":")));
        }
        env.push(("HOSTNAME".into(), key.1.clone()));
        let uid = pod
            .pointer("/spec/containers/0/securityContext/runAsUser")
            .or_else(|| pod.pointer("/spec/securityContext/runAsUser"))
            .and_then(Value::as_u64)
            .unwrap_or(0);
        let gid = pod
            .pointer("/spec/containers/0/securityContext/runAsGroup")
            .or_else(|| pod.pointer("/spec/securityContext/runAsGroup"))
            .and_then(Value::as_u64)
            .unwrap_or(0);
        for (dir, _, read_only) in &mounts {
            if !read_only {
                // As a kubelet gives a volume to the pod's fsGroup (or its user).
                let _ = std::os::unix::fs::chown(
                    dir,
                    Some(uid as u32),
                    fs_group.map(|g| g as u32).or(Some(gid as u32)),
                );
            }
        }
        let mut args: Vec<String> =
            vec!["netns".into(), "exec".into(), netns.into(), "bwrap".into()];
        let tops: Vec<String> = mounts
            .iter()
            .filter_map(|(_, at, _)| {
                at.trim_start_matches('/')
                    .split('/')
                    .next()
                    .map(|t| format!("/{t}"))
            })
            .collect();
        for dir in &self.config.system {
            if !tops.iter().any(|t| Path::new(t) == dir.as_path()) && dir.exists() {
                args.extend([
                    "--ro-bind".into(),
                    dir.display().to_string(),
                    dir.display().to_string(),
                ]);
            }
        }
        // The parents of the image's folders and of the mounts made open, as an image's own
        // folders are (bwrap would make them with the host's modes, and /root is the host's).
        let mut parents: Vec<&Path> = image
            .dirs
            .iter()
            .map(PathBuf::as_path)
            .chain(mounts.iter().map(|(_, at, _)| Path::new(at.as_str())))
            .flat_map(|d| d.ancestors().skip(1))
            .filter(|p| p.parent().is_some())
            .filter(|p| !self.config.system.iter().any(|s| p.starts_with(s)))
            .collect();
        parents.sort_by_key(|p| (p.components().count(), p.to_path_buf()));
        parents.dedup();
        for parent in parents {
            args.extend([
                "--perms".into(),
                "0755".into(),
                "--dir".into(),
                parent.display().to_string(),
            ]);
        }
        for dir in &image.dirs {
            args.extend([
                "--ro-bind".into(),
                dir.display().to_string(),
                dir.display().to_string(),
            ]);
        }
        args.extend(
            [
                "--proc",
                "/proc",
                "--dev",
                "/dev",
                "--perms",
                "1777",
                "--tmpfs",
                "/dev/shm",
                "--unshare-pid",
                "--unshare-ipc",
                "--unshare-uts",
                "--die-with-parent",
                "--hostname",
            ]
            .map(String::from),
        );
        args.push(key.1.clone());
        if !mounts.iter().any(|(_, at, _)| at == "/tmp") {
            args.extend(["--tmpfs".into(), "/tmp".into()]);
        }
        for (dir, at, read_only) in &mounts {
            let how = if *read_only { "--ro-bind" } else { "--bind" };
            args.extend([how.into(), dir.display().to_string(), at.clone()]);
        }
        args.push("--clearenv".into());
        for (k, v) in &env {
            args.extend(["--setenv".into(), k.clone(), v.clone()]);
        }
        let workdir = text(&container, "/workingDir");
        args.extend([
            "--chdir".into(),
            if workdir.is_empty() {
                "/".into()
            } else {
                workdir
            },
        ]);
        args.extend([
            "--".into(),
            "setpriv".into(),
            "--reuid".into(),
            uid.to_string(),
            "--regid".into(),
            gid.to_string(),
            "--clear-groups".into(),
            "--inh-caps=-all".into(),
            "--bounding-set=-all".into(),
            "--no-new-privs".into(),
            "--".into(),
        ]);
        if let Some(argv) = argv {
            args.extend(argv);
        } else {
            let command = crate::store::strings(&container, "/command");
            if command.is_empty() {
                return Err(
                    "the image has no entrypoint here: the pod must name its command".into(),
                );
            }
            args.extend(command);
            args.extend(crate::store::strings(&container, "/args"));
        }
        let mut cmd = std::process::Command::new("ip");
        cmd.args(&args);
        Ok(cmd)
    }

    /// Starts, restarts and probes the pod's container, and reports.
    async fn tend(self: &Arc<Self>, key: &(String, String), pod: &Value) {
        let (exited, needs_start, ip, netns) = {
            let mut pods = self.pods.lock().unwrap_or_else(|e| e.into_inner());
            let Some(state) = pods.get_mut(key) else {
                return;
            };
            let exited = match state.container.as_mut().map(|c| c.child.try_wait()) {
                Some(Ok(Some(status))) => Some(status),
                _ => None,
            };
            let waiting = state
                .backoff_until
                .is_some_and(|t| tokio::time::Instant::now() < t);
            (
                exited,
                state.container.is_none() && !waiting && !state.stopping,
                state.ip,
                state.netns.clone(),
            )
        };
        if let Some(status) = exited {
            self.container_exited(key, pod, status);
            return;
        }
        if needs_start {
            match self.command(key, pod, ip, &netns) {
                Ok(command) => self.launch(key, pod, command),
                Err(why) => {
                    let reason = if why.starts_with("Failed to pull") {
                        "ErrImagePull"
                    } else {
                        "CreateContainerConfigError"
                    };
                    self.report_waiting(key, reason, &why);
                }
            }
            return;
        }
        self.probe(key, pod, ip).await;
    }

    fn launch(
        self: &Arc<Self>,
        key: &(String, String),
        pod: &Value,
        command: std::process::Command,
    ) {
        let mut pods = self.pods.lock().unwrap_or_else(|e| e.into_inner());
        let Some(state) = pods.get_mut(key) else {
            return;
        };
        let log = state.log_dir.join(format!("{}.log", state.restarts));
        let Ok(file) = std::fs::File::create(&log) else {
            return;
        };
        let Ok(err) = file.try_clone() else { return };
        let procs = state
            .cgroup
            .as_ref()
            .map_or_else(|| PathBuf::from("/dev/null"), |g| g.join("cgroup.procs"));
        let mut wrapped = tokio::process::Command::new("sh");
        // In the cgroup before the first instruction of the container runs; a container's usual
        // umask (what bwrap makes for the mounts is then readable to the container's user).
        wrapped
            .arg("-c")
            .arg("umask 022 && echo $$ > \"$0\" && exec \"$@\"")
            .arg(&procs)
            .arg(command.get_program())
            .args(command.get_args())
            .stdin(std::process::Stdio::null())
            .stdout(file)
            .stderr(err)
            .process_group(0)
            .kill_on_drop(true);
        match wrapped.spawn() {
            Ok(child) => {
                let started = clock::now();
                state.container = Some(Container {
                    child,
                    started: started.clone(),
                });
                state.ready = false;
                let (ip, restarts) = (state.ip, state.restarts);
                drop(pods);
                self.report(
                    key,
                    pod,
                    ip,
                    restarts,
                    json!({"running": {"startedAt": started}}),
                    None,
                    false,
                );
                self.store.write(|o| {
                    event(
                        o,
                        &key.0,
                        &key.1,
                        "Normal",
                        "Started",
                        "Started container editor",
                    )
                });
            }
            Err(e) => {
                drop(pods);
                self.report_waiting(key, "CreateContainerError", &e.to_string());
            }
        }
    }

    fn container_exited(
        &self,
        key: &(String, String),
        pod: &Value,
        status: std::process::ExitStatus,
    ) {
        use std::os::unix::process::ExitStatusExt;
        let mut pods = self.pods.lock().unwrap_or_else(|e| e.into_inner());
        let Some(state) = pods.get_mut(key) else {
            return;
        };
        let started = state
            .container
            .take()
            .map(|c| c.started)
            .unwrap_or_default();
        let kills = match (&self.cgroups, &state.cgroup) {
            (Some(groups), Some(dir)) => groups.oom_kills(dir),
            _ => 0,
        };
        let oom = kills > state.ooms;
        state.ooms = kills;
        let code = status
            .code()
            .unwrap_or_else(|| 128 + status.signal().unwrap_or(9));
        let reason = if oom {
            "OOMKilled"
        } else if code == 0 {
            "Completed"
        } else {
            "Error"
        };
        let terminated = json!({"terminated": {"exitCode": code, "reason": reason, "startedAt": started, "finishedAt": clock::now()}});
        let policy = text(pod, "/spec/restartPolicy");
        let restart = policy == "Always" || (policy == "OnFailure" && code != 0);
        let (ip, restarts) = (state.ip, state.restarts);
        if restart && !state.stopping {
            let delay = self.config.backoff * 2u32.pow(state.restarts.min(3));
            state.backoff_until = Some(tokio::time::Instant::now() + delay);
            state.restarts += 1;
            let restarts = state.restarts;
            drop(pods);
            let waiting = json!({"waiting": {"reason": "CrashLoopBackOff", "message": format!("back-off restarting failed container editor in pod {}_{}", key.1, key.0)}});
            self.report(key, pod, ip, restarts, waiting, Some(terminated), false);
            self.store.write(|o| {
                event(
                    o,
                    &key.0,
                    &key.1,
                    "Warning",
                    "BackOff",
                    "Back-off restarting failed container editor",
                )
            });
        } else {
            drop(pods);
            let phase = if code == 0 { "Succeeded" } else { "Failed" };
            self.report_phase(key, pod, ip, restarts, terminated, phase);
        }
    }

    async fn probe(&self, key: &(String, String), pod: &Value, ip: Ipv4Addr) {
        let Some(probe) = pod.pointer("/spec/containers/0/readinessProbe/httpGet") else {
            self.set_ready(key, pod, ip, true);
            return;
        };
        let port = probe.get("port").and_then(Value::as_u64).unwrap_or(80);
        let path = probe
            .get("path")
            .and_then(Value::as_str)
            .unwrap_or("/")
            .to_string();
        let ok = tokio::time::timeout(Duration::from_secs(2), http_get(ip, port as u16, &path))
            .await
            .is_ok_and(|status| status.is_some_and(|s| (200..400).contains(&s)));
        self.set_ready(key, pod, ip, ok);
    }

    fn set_ready(&self, key: &(String, String), pod: &Value, ip: Ipv4Addr, ready: bool) {
        let (changed, restarts, started) = {
            let mut pods = self.pods.lock().unwrap_or_else(|e| e.into_inner());
            let Some(state) = pods.get_mut(key) else {
                return;
            };
            let changed = state.ready != ready;
            state.ready = ready;
            (
                changed,
                state.restarts,
                state.container.as_ref().map(|c| c.started.clone()),
            )
        };
        if changed && let Some(started) = started {
            self.report(
                key,
                pod,
                ip,
                restarts,
                json!({"running": {"startedAt": started}}),
                None,
                ready,
            );
        }
    }

    /// Writes the pod's status as a kubelet does.
    #[allow(clippy::too_many_arguments)]
    fn report(
        &self,
        key: &(String, String),
        pod: &Value,
        ip: Ipv4Addr,
        restarts: u32,
        state: Value,
        last: Option<Value>,
        ready: bool,
    ) {
        let image = text(pod, "/spec/containers/0/image");
        let flag = |b: bool| if b { "True" } else { "False" };
        self.store.write(|o| {
            let Some(mut current) = o.get("pods", &key.0, &key.1).cloned() else { return };
            // A restart keeps how the container last ended, as `lastState` does.
            let last = last.clone().or_else(|| {
                current
                    .pointer("/status/containerStatuses/0/lastState")
                    .cloned()
            });
            let mut status = json!({
                "name": "editor",
                "image": image,
                "imageID": image,
                "containerID": format!("sim://{}-{}", key.1, restarts),
                "ready": ready,
                "started": state.get("running").is_some(),
                "restartCount": restarts,
                "state": state,
            });
            if let Some(last) = last {
                status["lastState"] = last;
            }
            current["status"] = json!({
                "phase": "Running",
                "hostIP": "127.0.0.1",
                "podIP": ip.to_string(),
                "podIPs": [{"ip": ip.to_string()}],
                "startTime": current.pointer("/status/startTime").cloned().unwrap_or(json!(clock::now())),
                "qosClass": "Burstable",
                "conditions": [
                    {"type": "PodScheduled", "status": "True"},
                    {"type": "Initialized", "status": "True"},
                    {"type": "ContainersReady", "status": flag(ready)},
                    {"type": "Ready", "status": flag(ready)},
                ],
                "containerStatuses": [status],
            });
            o.put("pods", current);
        });
    }

    fn report_phase(
        &self,
        key: &(String, String),
        pod: &Value,
        ip: Ipv4Addr,
        restarts: u32,
        terminated: Value,
        phase: &str,
    ) {
        self.report(key, pod, ip, restarts, terminated, None, false);
        self.store.write(|o| {
            if let Some(mut current) = o.get("pods", &key.0, &key.1).cloned() {
                current["status"]["phase"] = json!(phase);
                o.put("pods", current);
                api::recount_quotas(o, &key.0);
            }
        });
    }

    fn report_waiting(&self, key: &(String, String), reason: &str, message: &str) {
        self.store.write(|o| {
            let Some(mut current) = o.get("pods", &key.0, &key.1).cloned() else { return };
            let waiting = json!({"waiting": {"reason": reason, "message": message}});
            if current.pointer("/status/containerStatuses/0/state") == Some(&waiting) {
                return;
            }
            current["status"]["containerStatuses"] = json!([{"name": "editor", "ready": false, "restartCount": 0,
                "image": text(&current, "/spec/containers/0/image"), "imageID": "", "state": waiting}]);
            o.put("pods", current);
            event(o, &key.0, &key.1, "Warning", "Failed", &format!("Error: {message}"));
        });
    }

    /// A pod marked for deletion: SIGTERM, its grace period, SIGKILL, then gone from the API.
    async fn stop(&self, key: &(String, String), pod: &Value) {
        let grace = pod
            .pointer("/metadata/deletionGracePeriodSeconds")
            .and_then(Value::as_u64)
            .unwrap_or(30);
        {
            let mut pods = self.pods.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(state) = pods.get_mut(key) {
                if state.stopping {
                    return;
                }
                state.stopping = true;
            }
        }
        self.store.write(|o| {
            event(
                o,
                &key.0,
                &key.1,
                "Normal",
                "Killing",
                "Stopping container editor",
            )
        });
        self.tear_down(key, Duration::from_secs(grace)).await;
        self.store.write(|o| {
            o.remove("pods", &key.0, &key.1);
            api::recount_quotas(o, &key.0);
            api::finish_namespace(o, &key.0);
        });
    }

    /// Ends the container (SIGTERM, `grace`, SIGKILL) and frees the pod's network and cgroup.
    async fn tear_down(&self, key: &(String, String), grace: Duration) {
        let state = self
            .pods
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
        let Some(mut state) = state else { return };
        if let Some(mut container) = state.container.take()
            && let Some(pid) = container.child.id()
        {
            // SAFETY: a signal to the container's own process group.
            unsafe { signal(-(pid as i32), 15) };
            if tokio::time::timeout(grace, container.child.wait())
                .await
                .is_err()
            {
                // SAFETY: as above.
                unsafe { signal(-(pid as i32), 9) };
                let _ = container.child.wait().await;
            }
        }
        // Anything the container left in its cgroup goes too.
        if let (Some(groups), Some(dir)) = (&self.cgroups, &state.cgroup) {
            groups.remove(dir);
        }
        let _ = run("ip", &["link", "del", &state.veth]);
        let _ = run("ip", &["netns", "del", &state.netns]);
    }

    /// Where a snapshot's content lies on this node (its copy of the claims it had).
    pub fn snapshot_path(&self, content: &str) -> PathBuf {
        self.config.root.join("snapshots").join(content)
    }

    /// Where a claim's volume lies on this node (a folder, as a local-path provisioner makes).
    pub fn volume_path(&self, namespace: &str, claim: &str) -> PathBuf {
        self.config.root.join("volumes").join(namespace).join(claim)
    }

    /// Cordons the node and deletes its pods, as `kubectl drain` does.
    pub fn drain(&self) {
        let api = api::Api {
            store: self.store.clone(),
        };
        self.store.write(|o| {
            if let Some(mut node) = o.get("nodes", "", &self.config.node).cloned() {
                node["spec"]["unschedulable"] = json!(true);
                o.put("nodes", node);
            }
        });
        for pod in self.mine() {
            let target = api::Target {
                kind: crate::kinds::find("", "v1", "pods").expect("pods are served"),
                namespace: Some(text(&pod, "/metadata/namespace")),
                name: text(&pod, "/metadata/name"),
            };
            let _ = api.delete(&target, None);
        }
    }

    /// Stops every pod's process and removes the node's network and folders: for the end of
    /// a test.
    pub async fn shut_down(&self) {
        let keys: Vec<(String, String)> = self
            .pods
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .keys()
            .cloned()
            .collect();
        for key in keys {
            self.tear_down(&key, Duration::from_secs(2)).await;
        }
        let _ = run("ip", &["link", "del", &self.config.bridge]);
        let _ = std::fs::remove_dir_all(&self.config.root);
    }
}

unsafe extern "C" {
    /// libc's `kill(2)`.
    #[link_name = "kill"]
    pub fn signal(pid: i32, signal: i32) -> i32;
}

/// A plain HTTP/1.1 GET's status code.
async fn http_get(ip: Ipv4Addr, port: u16, path: &str) -> Option<u16> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect((ip, port)).await.ok()?;
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {ip}:{port}\r\nUser-Agent: kube-probe/1.33\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut head = [0u8; 64];
    let n = stream.read(&mut head).await.ok()?;
    let line = std::str::from_utf8(&head[..n]).ok()?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let mut buffer = 0u32;
    let mut bits = 0;
    for c in text.bytes().filter(|c| !c.is_ascii_whitespace()) {
        let value = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            b'=' => break,
            _ => return None,
        };
        buffer = (buffer << 6) | u32::from(value);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((buffer >> bits) as u8);
        }
    }
    Some(out)
}

impl Drop for Kubelet {
    /// What a test left running goes with the node: processes, cgroups, namespaces, the bridge.
    fn drop(&mut self) {
        let pods = std::mem::take(&mut *self.pods.lock().unwrap_or_else(|e| e.into_inner()));
        for (_, mut state) in pods {
            if let Some(pid) = state.container.as_ref().and_then(|c| c.child.id()) {
                // SAFETY: a signal to the container's own process group.
                unsafe { signal(-(pid as i32), 9) };
            }
            state.container = None;
            if let (Some(groups), Some(dir)) = (&self.cgroups, &state.cgroup) {
                groups.remove(dir);
            }
            let _ = run("ip", &["link", "del", &state.veth]);
            let _ = run("ip", &["netns", "del", &state.netns]);
        }
        let _ = run("ip", &["link", "del", &self.config.bridge]);
        if let Some(groups) = &self.cgroups {
            groups.remove_base();
        }
        let _ = std::fs::remove_dir_all(&self.config.root);
    }
}

impl Kubelet {
    /// Starts `argv` in the running container of `namespace/pod`, as `kubectl exec` does: the
    /// container's user, environment, volumes and network, in its memory group; stdout and
    /// stderr piped, no stdin.
    pub fn exec_in(
        &self,
        namespace: &str,
        pod: &str,
        argv: Vec<String>,
    ) -> Result<tokio::process::Child, Refusal> {
        let key = (namespace.to_string(), pod.to_string());
        let not_running = || {
            Refusal::bad_request(format!(
                "unable to upgrade connection: container not found (\"editor\") in pod \"{pod}\""
            ))
        };
        let (ip, netns, procs) = {
            let pods = self.pods.lock().unwrap_or_else(|e| e.into_inner());
            let state = pods.get(&key).ok_or_else(not_running)?;
            if state.container.is_none() || state.stopping {
                return Err(not_running());
            }
            let procs = state
                .cgroup
                .as_ref()
                .map_or_else(|| PathBuf::from("/dev/null"), |g| g.join("cgroup.procs"));
            (state.ip, state.netns.clone(), procs)
        };
        let object = self
            .store
            .read(|o| o.get("pods", namespace, pod).cloned())
            .ok_or_else(not_running)?;
        let command = self
            .command_running(&key, &object, ip, &netns, Some(argv))
            .map_err(Refusal::bad_request)?;
        tokio::process::Command::new("sh")
            .arg("-c")
            .arg("umask 022 && echo $$ > \"$0\" && exec \"$@\"")
            .arg(&procs)
            .arg(command.get_program())
            .args(command.get_args())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| Refusal::bad_request(format!("exec: {e}")))
    }
}

impl PodStreams for Kubelet {
    fn exec(
        &self,
        namespace: &str,
        pod: &str,
        argv: Vec<String>,
    ) -> Result<tokio::process::Child, Refusal> {
        self.exec_in(namespace, pod, argv)
    }

    fn logs(
        &self,
        namespace: &str,
        pod: &str,
        _container: Option<&str>,
        previous: bool,
        tail_lines: Option<usize>,
    ) -> Result<String, Refusal> {
        let pods = self.pods.lock().unwrap_or_else(|e| e.into_inner());
        let state = pods
            .get(&(namespace.to_string(), pod.to_string()))
            .ok_or_else(|| {
                Refusal::bad_request(format!(
                    "container \"editor\" in pod \"{pod}\" is waiting to start: ContainerCreating"
                ))
            })?;
        let run = if previous {
            state.restarts.checked_sub(1).ok_or_else(|| {
                Refusal::bad_request(format!(
                    "previous terminated container \"editor\" in pod \"{pod}\" not found"
                ))
            })?
        } else {
            state.restarts
        };
        let text =
            std::fs::read_to_string(state.log_dir.join(format!("{run}.log"))).unwrap_or_default();
        Ok(match tail_lines {
            Some(n) => {
                let lines: Vec<&str> = text.lines().collect();
                lines[lines.len().saturating_sub(n)..].join("\n") + "\n"
            }
            None => text,
        })
    }
}

/// A mount inside another volume (a dataset at `~/datasets/<name>` in the workspace) needs its
/// mount point in that volume: made root's and 0755 whatever this process's umask, as the
/// container runtime makes it.
fn nested_mount_points(mounts: &[(PathBuf, String, bool)]) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    for (_, at, _) in mounts {
        for (outer, outer_at, _) in mounts {
            let Some(rest) = at.strip_prefix(&format!("{}/", outer_at.trim_end_matches('/')))
            else {
                continue;
            };
            let mut dir = outer.clone();
            for part in Path::new(rest).components() {
                dir.push(part);
                if !dir.exists() {
                    std::fs::create_dir(&dir).map_err(|e| e.to_string())?;
                    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))
                        .map_err(|e| e.to_string())?;
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_images_name_drops_its_tag_and_digest() {
        assert_eq!(
            image_name("quay.io/jupyter/pytorch-notebook:cuda12@sha256:de7e"),
            "quay.io/jupyter/pytorch-notebook"
        );
        assert_eq!(image_name("localhost:5000/lab"), "localhost:5000/lab");
        assert_eq!(image_name("lab:1"), "lab");
        assert_eq!(base64_decode("aGVsbG8=").unwrap(), b"hello");
    }
}
