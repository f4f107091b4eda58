//! A parked editor's GPU memory set aside with NVIDIA's `cuda-checkpoint` (`pool.cuda_checkpoint`,
//! driver 550 or later), so that an editor holding GPU memory parks too: each of its processes
//! that holds some is toggled to "checkpointed" (its device memory copied into its own host
//! memory, its GPU contexts released) while it still runs, before its control group freezes, and
//! toggled back after it thaws, on the same card, once its slot is its own again.
//!
//! The tool rather than the driver's `cuCheckpointProcess*` called from the server: the tool is
//! what NVIDIA documents and CRIU's CUDA plugin drives, and a fault in the driver stays in a
//! short-lived child. Needs a GPU to run: `server gpu-check` does a round trip where one is.

use std::path::PathBuf;
use std::process::{Command, Stdio};

/// Sets a process's GPU state aside and brings it back: NVIDIA's tool, or a test's.
pub trait Checkpointer: Send + Sync {
    /// Checkpoints a running process, or restores a checkpointed one.
    fn toggle(&self, pid: u32) -> Result<(), String>;
    /// Whether the process's GPU state is set aside now.
    fn is_checkpointed(&self, pid: u32) -> bool;
}

/// NVIDIA's `cuda-checkpoint`.
#[derive(Clone, Debug)]
pub struct CudaCheckpoint {
    binary: PathBuf,
}

impl CudaCheckpoint {
    /// The tool `configured` names (a path, or a name on the PATH; empty: off), if it runs.
    pub fn find(configured: &str) -> Option<CudaCheckpoint> {
        if configured.is_empty() {
            return None;
        }
        let answers = Command::new(configured)
            .arg("--help")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        answers.then(|| CudaCheckpoint {
            binary: configured.into(),
        })
    }

    fn run(&self, args: &[&str], pid: u32) -> Result<String, String> {
        let out = Command::new(&self.binary)
            .args(args)
            .args(["--pid", &pid.to_string()])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("{}: {e}", self.binary.display()))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
        } else {
            Err(format!(
                "{} {} for process {pid}: {}",
                self.binary.display(),
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    }
}

impl Checkpointer for CudaCheckpoint {
    fn toggle(&self, pid: u32) -> Result<(), String> {
        self.run(&["--toggle"], pid).map(drop)
    }

    fn is_checkpointed(&self, pid: u32) -> bool {
        self.run(&["--get-state"], pid)
            .is_ok_and(|state| state == "checkpointed")
    }
}

/// Sets aside the GPU state of each of `pids`, all or none: when one fails, those set aside
/// already are brought back, and the failure is the answer.
pub fn set_aside(tool: &dyn Checkpointer, pids: &[u32]) -> Result<(), String> {
    for (done, &pid) in pids.iter().enumerate() {
        if let Err(why) = tool.toggle(pid) {
            let _ = bring_back(tool, &pids[..done]);
            return Err(why);
        }
    }
    Ok(())
}

/// Brings back the GPU state of each of `pids` that is set aside (the others are left alone, so
/// it may be asked of every process of an editor); every one is tried, the first failure said.
pub fn bring_back(tool: &dyn Checkpointer, pids: &[u32]) -> Result<(), String> {
    let mut first_failure = None;
    for &pid in pids {
        if tool.is_checkpointed(pid)
            && let Err(why) = tool.toggle(pid)
        {
            first_failure.get_or_insert(why);
        }
    }
    first_failure.map_or(Ok(()), Err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;
    use std::sync::Mutex;

    /// Processes' states as the tool would keep them, with one process it cannot toggle.
    #[derive(Default)]
    struct Processes {
        checkpointed: Mutex<BTreeSet<u32>>,
        broken: Option<u32>,
    }

    impl Checkpointer for Processes {
        fn toggle(&self, pid: u32) -> Result<(), String> {
            if self.broken == Some(pid) {
                return Err(format!("process {pid}: not supported"));
            }
            let mut set = self.checkpointed.lock().unwrap();
            if !set.remove(&pid) {
                set.insert(pid);
            }
            Ok(())
        }

        fn is_checkpointed(&self, pid: u32) -> bool {
            self.checkpointed.lock().unwrap().contains(&pid)
        }
    }

    #[test]
    fn all_are_set_aside_and_only_those_come_back() {
        let processes = Processes::default();
        set_aside(&processes, &[10, 11]).unwrap();
        assert_eq!(*processes.checkpointed.lock().unwrap(), [10, 11].into());
        // Asked of every process of the editor: those never set aside stay as they are.
        bring_back(&processes, &[9, 10, 11, 12]).unwrap();
        assert!(processes.checkpointed.lock().unwrap().is_empty());
    }

    #[test]
    fn one_failure_brings_the_others_back() {
        let processes = Processes {
            broken: Some(12),
            ..Default::default()
        };
        let err = set_aside(&processes, &[10, 11, 12, 13]).unwrap_err();
        assert!(err.contains("12"), "{err}");
        assert!(
            processes.checkpointed.lock().unwrap().is_empty(),
            "none stays set aside"
        );
    }

    #[test]
    fn a_missing_tool_is_off() {
        assert!(CudaCheckpoint::find("").is_none());
        assert!(CudaCheckpoint::find("/nonexistent/cuda-checkpoint").is_none());
    }
}
