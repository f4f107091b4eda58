//! `server gpu-check`: shows, on the machine the server runs on, what the pool page claims for a
//! slice. NVML finds the cards; then an editor's sandbox is made as for a session (the slice's
//! card only, its environment, HAMi-core and the pin preloaded through the sandbox's own
//! `/etc/ld.so.preload`) and a program in it asks the CUDA driver for memory: half the slice must
//! be given, and one and a half slices refused with `LD_PRELOAD` and the limit unset. The same
//! request without the sandbox's preload shows what the slice would be without it. The program
//! in the sandbox is this binary (`server gpu-probe`), which finds the driver as every CUDA
//! program does (`dlopen`), so HAMi-core's hooks see it as they would a notebook's kernel.
//! Before the sandbox, where `pool.cuda_checkpoint` runs, a process holding GPU memory is parked
//! and brought back as an editor's kernel is (`gpu_park_check`).

use super::gpu::{self, Enforcement};
use super::sandbox::{self, Sandbox, Spec};
use crate::config::Config;
use serde::{Deserialize, Serialize};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// One step of the check and what it found.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    pub name: &'static str,
    /// Passed; `None` for a step that only informs.
    pub passed: Option<bool>,
    pub detail: String,
}

/// Everything the check found, in order; it stops at the first step that fails.
#[derive(Clone, Debug, Default)]
pub struct Report {
    pub steps: Vec<Step>,
}

impl Report {
    pub fn passed(&self) -> bool {
        !self.steps.is_empty() && self.steps.iter().all(|s| s.passed != Some(false))
    }

    fn step(&mut self, name: &'static str, passed: Option<bool>, detail: String) -> bool {
        self.steps.push(Step {
            name,
            passed,
            detail,
        });
        passed != Some(false)
    }

    /// The report as people read it, one line a step and the verdict last.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for step in &self.steps {
            let mark = match step.passed {
                Some(true) => "ok  ",
                Some(false) => "FAIL",
                None => "    ",
            };
            out.push_str(&format!("{mark} {}: {}\n", step.name, step.detail));
        }
        out.push_str(if self.passed() {
            "GPU slices on this machine are held (soft: HAMi-core).\n"
        } else {
            "GPU slices on this machine are NOT held.\n"
        });
        out
    }
}

/// What one request for device memory came to, as `server gpu-probe` prints it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Probe {
    /// The card's memory as the program saw it (HAMi-core shows the slice's size).
    pub total_mib: u64,
    /// HAMi-core was loaded into the program from its path in the sandbox.
    pub preloaded: bool,
    /// The slice's memory limit as HAMi-core reads it (`getenv`), whatever the environment.
    pub limit_seen: Option<String>,
    /// HAMi-core's off switch as it reads it (the pin answers "unset" in a sandbox).
    #[serde(default)]
    pub control_switch_seen: Option<String>,
    pub outcome: Outcome,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "is", content = "detail")]
pub enum Outcome {
    Allowed,
    /// The driver said out of memory.
    Refused,
    /// Anything else (no driver, no card, another error): the check cannot conclude.
    Failed(String),
}

/// The cards NVML lists, said as the first step; None (the step failed) without any.
fn cards(config: &Config, report: &mut Report) -> Option<Vec<app::domain::pool::GpuSpec>> {
    let gpus = match gpu::detect_nvidia(config.pool.detected_slice_mib, true) {
        Ok(gpus) if !gpus.is_empty() => gpus,
        Ok(_) => {
            report.step("NVML", Some(false), "the driver lists no card".into());
            return None;
        }
        Err(e) => {
            report.step(
                "NVML",
                Some(false),
                format!("no NVIDIA driver answered ({e})"),
            );
            return None;
        }
    };
    let listed: Vec<String> = gpus
        .iter()
        .map(|g| {
            format!(
                "{} {} ({} MiB, {} in a sandbox)",
                g.model,
                g.id,
                g.memory_mib,
                g.hold.label()
            )
        })
        .collect();
    report.step(
        "NVML",
        Some(true),
        format!(
            "{} card(s) or MIG instance(s): {}",
            gpus.len(),
            listed.join(", ")
        ),
    );
    Some(gpus)
}

/// The check, for a slice of `slice_mib` on the first card NVML finds.
pub fn run(config: &Config, slice_mib: Option<u64>, exe: &Path) -> Report {
    let mut report = Report::default();
    let Some(gpus) = cards(config, &mut report) else {
        return report;
    };
    let (passed, seen) =
        super::gpu_park_check::round_trip(exe, &config.pool.cuda_checkpoint, PARKED_MIB);
    report.step(
        "a parked kernel's GPU memory set aside and back",
        passed,
        seen,
    );
    let sandbox = match Sandbox::prepare(config, &[exe]) {
        Ok(sandbox) => sandbox,
        Err(why) => {
            report.step("sandbox", Some(false), why);
            return report;
        }
    };
    report.step("sandbox", Some(true), sandbox.describe());
    if let Some(instance) = gpus.iter().find(|g| g.mig.is_some()) {
        let memory = instance.memory_mib;
        let past = memory + memory / 2;
        let env = gpu::slice_env(instance, memory, 100, &Enforcement::None);
        let launch_devices = super::SliceBinding::on(Some(instance), memory, 100);
        let tried = launch_devices_of(launch_devices)
            .and_then(|devices| probe_in_sandbox(&sandbox, &devices, &env, &[], None, exe, past));
        report.step(
            "a MIG instance, past its memory",
            Some(tried.as_ref().is_ok_and(|p| p.outcome == Outcome::Refused)),
            describe(past, memory, &tried),
        );
    }
    let Some(card) = gpus.iter().find(|g| g.mig.is_none()) else {
        report.step(
            "HAMi-core",
            None,
            "every card is split into MIG instances".into(),
        );
        return report;
    };
    let slice = slice_mib
        .unwrap_or(config.pool.detected_slice_mib)
        .clamp(256, (card.memory_mib / 2).max(256));
    let library = PathBuf::from(&config.pool.hami_core_library);
    if config.pool.hami_core_library.is_empty() {
        report.step(
            "HAMi-core",
            Some(false),
            "pool.hami_core_library is not set: a slice is a promise, not a limit".into(),
        );
        return report;
    }
    if !library.is_file() {
        report.step(
            "HAMi-core",
            Some(false),
            format!("{} is not a file", library.display()),
        );
        return report;
    }
    report.step("HAMi-core", Some(true), library.display().to_string());
    if !report.step(
        "settings pinned",
        Some(sandbox.pin.is_some()),
        match &sandbox.pin {
            Some(pin) => format!("{} preloaded first", pin.display()),
            None => format!(
                "{} is not beside this program (cargo build -p slice-pin)",
                sandbox::PIN_LIBRARY
            ),
        },
    ) {
        return report;
    }
    let enforcement = Enforcement::HamiCore(config.pool.hami_core_library.clone());
    let env = gpu::slice_env(card, slice, 100, &enforcement);
    let within = slice / 2;
    let past = slice + slice / 2;
    let devices = super::card_devices(card.device_minor.unwrap_or(0));
    let probe = |env: &[(String, String)], unset: &[&str], mib| {
        probe_in_sandbox(&sandbox, &devices, env, unset, None, exe, mib)
    };
    let tried = probe(&env, &[], within);
    if !report.step(
        "within the slice",
        Some(preloaded_and(&tried, Outcome::Allowed)),
        describe(within, slice, &tried),
    ) {
        return report;
    }
    let tried = probe(&env, &[LIMIT], past);
    report.step(
        "past the slice, LD_PRELOAD and the limit unset",
        Some(preloaded_and(&tried, Outcome::Refused)),
        describe(past, slice, &tried),
    );
    let mut switched_off = env.clone();
    switched_off.push((sandbox::CONTROL_SWITCH.into(), "true".into()));
    let tried = probe(&switched_off, &[], past);
    report.step(
        "HAMi-core's off switch set by the program",
        Some(
            preloaded_and(&tried, Outcome::Refused)
                && tried
                    .as_ref()
                    .is_ok_and(|p| p.control_switch_seen.is_none()),
        ),
        describe(past, slice, &tried),
    );
    report.step(
        "a program's own LD_PRELOAD",
        None,
        "searched before the sandbox's: a library that answers HAMi-core's getenv itself steps \
         around the slice on purpose, so a slice smaller than its card is a soft limit"
            .into(),
    );
    // Two sessions on one card at once: each given its own half, each refused past its slice.
    let (first, second) = std::thread::scope(|scope| {
        let one = scope.spawn(|| (probe(&env, &[], within), probe(&env, &[], past)));
        let two = (probe(&env, &[], within), probe(&env, &[], past));
        let lost = || Err("the probe's thread panicked".to_string());
        (one.join().unwrap_or_else(|_| (lost(), lost())), two)
    });
    let both_held = [&first, &second].iter().all(|(given, refused)| {
        preloaded_and(given, Outcome::Allowed) && preloaded_and(refused, Outcome::Refused)
    });
    report.step(
        "two sandboxes on one card",
        Some(both_held),
        format!(
            "first: {}; second: {}",
            describe(past, slice, &first.1),
            describe(past, slice, &second.1)
        ),
    );
    let tried = probe_unsandboxed(exe, &env, past);
    report.step(
        "the same without the sandbox's preload",
        None,
        describe(past, slice, &tried),
    );
    report
}

/// The device nodes of a slice, as a session's sandbox gets them.
fn launch_devices_of(slice: super::SliceBinding) -> Result<Vec<PathBuf>, String> {
    super::EditorLaunch::of_slice(slice).slice_devices()
}

/// What the parking step holds: a kernel's model, small enough for any card.
const PARKED_MIB: u64 = 1024;

/// The probe ran with HAMi-core loaded and came to `outcome`.
fn preloaded_and(tried: &Result<Probe, String>, outcome: Outcome) -> bool {
    tried
        .as_ref()
        .is_ok_and(|p| p.preloaded && p.outcome == outcome)
}

fn describe(mib: u64, slice: u64, tried: &Result<Probe, String>) -> String {
    match tried {
        Ok(Probe {
            total_mib,
            preloaded,
            limit_seen,
            control_switch_seen,
            outcome,
        }) => {
            let what = match outcome {
                Outcome::Allowed => "given".to_string(),
                Outcome::Refused => "refused (out of memory)".to_string(),
                Outcome::Failed(why) => format!("not tried: {why}"),
            };
            let loaded = if *preloaded { "loaded" } else { "not loaded" };
            let limit = limit_seen.as_deref().unwrap_or("none");
            let switch = control_switch_seen.as_deref().unwrap_or("unset");
            format!(
                "{mib} MiB of a {slice} MiB slice {what}; the card shows {total_mib} MiB; \
                 HAMi-core {loaded}, its limit read as {limit}, its off switch as {switch}"
            )
        }
        Err(why) => format!("{mib} MiB: the probe did not run ({why})"),
    }
}

/// The slice's memory limit, as [`gpu::slice_env`] names it.
const LIMIT: &str = "CUDA_DEVICE_MEMORY_LIMIT_0";

/// Runs `exe gpu-probe` (this binary) in a sandbox made as for a session given `devices`, with
/// the session's slice environment less the preload variables and `unset`: the sandbox's own
/// preload and pinned settings must hold alone. `own_preload`: a library the program brings in
/// its own `LD_PRELOAD`, as code stepping around the slice on purpose would.
pub fn probe_in_sandbox(
    sandbox: &Sandbox,
    devices: &[PathBuf],
    slice_env: &[(String, String)],
    unset: &[&str],
    own_preload: Option<&Path>,
    exe: &Path,
    mib: u64,
) -> Result<Probe, String> {
    let run_dir = sandbox::tempfile_dir()?;
    let result = (|| {
        sandbox::write_preload_files(&run_dir, sandbox.pin.is_some(), slice_env)
            .map_err(|e| format!("the preload files: {e}"))?;
        let mut command = vec![exe.as_os_str().to_os_string()];
        command.extend(probe_args(mib));
        let spec = Spec {
            system: &sandbox.system,
            tools: &sandbox.tool_dirs,
            hidden: &sandbox.hidden,
            home: &run_dir,
            home_inside: Path::new("/home/user"),
            run_dir: &run_dir,
            run_inside: Path::new("/run/editor"),
            devices,
            preload: sandbox.gpu_preload(),
            account: sandbox
                .accounts
                .as_ref()
                .map(|_| (sandbox.local.editor_uid, sandbox.local.editor_uid)),
            workdir: Path::new("/"),
            command: &command,
            datasets: &[],
        };
        let bwrap = sandbox.tools.bwrap.as_ref().ok_or("no bwrap")?;
        let env: Vec<(String, String)> = slice_env
            .iter()
            .filter(|(k, _)| !unset.contains(&k.as_str()))
            .cloned()
            .collect();
        let own: Vec<(String, String)> = own_preload
            .map(|p| ("LD_PRELOAD".to_string(), p.display().to_string()))
            .into_iter()
            .collect();
        run_probe(
            bwrap,
            &sandbox::arguments(&spec, &sandbox.tools),
            &env,
            &own,
        )
    })();
    let _ = std::fs::remove_dir_all(&run_dir);
    result
}

/// The same request outside any sandbox, with the slice's environment less the preload
/// variables: what a terminal's `env -u LD_PRELOAD` would get without the sandbox.
pub fn probe_unsandboxed(exe: &Path, env: &[(String, String)], mib: u64) -> Result<Probe, String> {
    run_probe(exe, &probe_args(mib), env, &[])
}

/// `server gpu-probe --mib N`'s arguments.
fn probe_args(mib: u64) -> Vec<OsString> {
    vec!["gpu-probe".into(), "--mib".into(), mib.to_string().into()]
}

/// Runs `program args…` with only the editors' inherited variables, `env` less the preload
/// variables and then `own` as it is, and reads the probe's answer from its last line.
fn run_probe(
    program: &Path,
    args: &[OsString],
    env: &[(String, String)],
    own: &[(String, String)],
) -> Result<Probe, String> {
    let mut command = std::process::Command::new(program);
    command
        .args(args)
        .env_clear()
        .envs(
            super::editors::INHERITED_ENV
                .iter()
                .filter_map(|k| std::env::var(k).ok().map(|v| (*k, v))),
        )
        .envs(
            env.iter()
                .filter(|(k, _)| !gpu::UNSANDBOXED_PRELOAD_ENV.contains(&k.as_str()))
                .map(|(k, v)| (k.as_str(), v.as_str())),
        )
        .envs(own.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(std::process::Stdio::null());
    // As an editor is started: the server's umask (077) would make what bwrap creates inside
    // unreadable to the editor's account.
    // SAFETY: umask between fork and exec is async-signal-safe and touches only the child.
    unsafe {
        use std::os::unix::process::CommandExt;
        command.pre_exec(|| {
            libc::umask(0o022);
            Ok(())
        });
    }
    let out = command
        .output()
        .map_err(|e| format!("{}: {e}", program.display()))?;
    parse_probe(&String::from_utf8_lossy(&out.stdout)).ok_or_else(|| {
        let err = String::from_utf8_lossy(&out.stderr);
        let last: Vec<&str> = err.lines().rev().take(3).collect();
        format!(
            "exit {}: {}",
            out.status,
            last.into_iter().rev().collect::<Vec<_>>().join(" / ")
        )
    })
}

/// The probe's answer: its last line that is one.
pub fn parse_probe(stdout: &str) -> Option<Probe> {
    stdout
        .lines()
        .rev()
        .find_map(|line| serde_json::from_str(line.trim()).ok())
}

/// `name` as HAMi-core reads it: through the process's `getenv`, whichever library answers it.
fn getenv_as_hami_core(name: &std::ffi::CStr) -> Option<String> {
    // SAFETY: getenv with a NUL-terminated name; its answer is copied at once.
    unsafe {
        let value = libc::getenv(name.as_ptr());
        (!value.is_null()).then(|| {
            std::ffi::CStr::from_ptr(value)
                .to_string_lossy()
                .into_owned()
        })
    }
}

/// `server gpu-probe`: asks the CUDA driver of card 0 for `mib` MiB, found as CUDA programs find
/// it (`dlopen`, then `dlsym`), which is where HAMi-core hooks in.
pub fn probe(mib: u64) -> Probe {
    let preloaded = std::fs::read_to_string("/proc/self/maps")
        .is_ok_and(|maps| maps.contains(sandbox::HAMI_CORE_INSIDE));
    let (total_mib, outcome) = driver_probe(mib).unwrap_or_else(|why| (0, Outcome::Failed(why)));
    Probe {
        total_mib,
        preloaded,
        limit_seen: getenv_as_hami_core(c"CUDA_DEVICE_MEMORY_LIMIT_0"),
        control_switch_seen: getenv_as_hami_core(c"CUDA_DISABLE_CONTROL"),
        outcome,
    }
}

fn driver_probe(mib: u64) -> Result<(u64, Outcome), String> {
    use super::cuda::check;
    type MemInfo = unsafe extern "C" fn(*mut usize, *mut usize) -> i32;
    type MemAlloc = unsafe extern "C" fn(*mut u64, usize) -> i32;
    const OUT_OF_MEMORY: i32 = 2;
    let driver = super::cuda::Driver::on_card_0()?;
    // SAFETY: each symbol has the signature the CUDA driver API documents for it, and is called
    // with pointers to live locals.
    unsafe {
        let mem_info: MemInfo = driver.symbol(c"cuMemGetInfo_v2")?;
        let mem_alloc: MemAlloc = driver.symbol(c"cuMemAlloc_v2")?;
        let (mut free, mut total) = (0usize, 0usize);
        check("cuMemGetInfo", mem_info(&mut free, &mut total))?;
        let mut pointer = 0u64;
        let outcome = match mem_alloc(&mut pointer, (mib as usize) << 20) {
            0 => Outcome::Allowed,
            OUT_OF_MEMORY => Outcome::Refused,
            code => Outcome::Failed(format!("cuMemAlloc failed (CUDA error {code})")),
        };
        Ok(((total >> 20) as u64, outcome))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probes_answer_is_its_last_json_line_whatever_the_libraries_print() {
        let out = "[HAMI-core Msg]: Initializing.....\n\
                   {\"total_mib\":8192,\"preloaded\":true,\"limit_seen\":\"8192m\",\"outcome\":{\"is\":\"refused\"}}\n\
                   [HAMI-core Msg]: Cleanup on exit\n";
        assert_eq!(
            parse_probe(out),
            Some(Probe {
                total_mib: 8192,
                preloaded: true,
                limit_seen: Some("8192m".into()),
                control_switch_seen: None,
                outcome: Outcome::Refused
            })
        );
        assert_eq!(parse_probe("no answer\n"), None);
        let failed = Probe {
            total_mib: 0,
            preloaded: false,
            limit_seen: None,
            control_switch_seen: None,
            outcome: Outcome::Failed("libcuda.so.1 is not installed".into()),
        };
        let line = serde_json::to_string(&failed).unwrap();
        assert_eq!(parse_probe(&line), Some(failed));
    }

    #[test]
    fn without_a_driver_the_probe_says_so_and_the_check_fails_at_nvml() {
        if libc_has_cuda() {
            return;
        }
        assert_eq!(
            probe(64).outcome,
            Outcome::Failed("libcuda.so.1 is not installed".into())
        );
        let report = run(&Config::default(), None, Path::new("/bin/true"));
        assert!(!report.passed());
        assert_eq!(report.steps.len(), 1, "{report:?}");
        assert_eq!(report.steps[0].name, "NVML");
        assert!(report.text().ends_with("NOT held.\n"), "{}", report.text());
    }

    #[test]
    fn a_report_passes_only_when_no_step_failed() {
        let mut report = Report::default();
        assert!(!report.passed(), "an empty check proves nothing");
        report.step("NVML", Some(true), "1 card".into());
        report.step("control", None, "given".into());
        assert!(report.passed());
        assert!(report.text().contains("ok   NVML: 1 card\n"));
        report.step("past the slice", Some(false), "given".into());
        assert!(!report.passed());
        assert!(report.text().contains("FAIL past the slice: given\n"));
    }

    fn libc_has_cuda() -> bool {
        // SAFETY: dlopen with a NUL-terminated name; the handle is closed at once.
        unsafe {
            let handle = libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_LAZY);
            if handle.is_null() {
                return false;
            }
            libc::dlclose(handle);
            true
        }
    }
}
