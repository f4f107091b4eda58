//! `server gpu-check`'s parking step: a process holding GPU memory is set aside with
//! `cuda-checkpoint` and brought back as a parked editor's kernel is (`runtime::local::checkpoint`),
//! and its memory must be released meanwhile and hold what it held after. The process is this
//! binary (`server gpu-probe --mib N --hold`): it fills N MiB of card 0 with a pattern, says so,
//! waits for a line on its input, then reads the memory back.

use super::gpu::NvmlSampler;
use super::local::checkpoint::{self, CudaCheckpoint};
use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What the holding probe says: first that it holds, then whether the memory was intact.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Held {
    pub held_mib: u64,
    pub intact: Option<bool>,
    pub error: Option<String>,
}

/// The step's verdict (None: not run, as no tool is here) and what it saw.
pub fn round_trip(exe: &Path, configured: &str, mib: u64) -> (Option<bool>, String) {
    let Some(tool) = CudaCheckpoint::find(configured) else {
        return (
            None,
            format!(
                "pool.cuda_checkpoint ({configured:?}) does not run here: editors holding GPU \
                 memory do not park"
            ),
        );
    };
    match try_round_trip(exe, &tool, mib) {
        Ok(seen) => (Some(true), seen),
        Err(why) => (Some(false), why),
    }
}

fn try_round_trip(exe: &Path, tool: &CudaCheckpoint, mib: u64) -> Result<String, String> {
    let nvml = NvmlSampler::open().ok_or("NVML did not open")?;
    let mut child = Command::new(exe)
        .args(["gpu-probe", "--mib", &mib.to_string(), "--hold"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("{}: {e}", exe.display()))?;
    let pid = child.id();
    // A probe stuck in the driver must not hold the check for ever.
    let (done, watching) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        if watching.recv_timeout(PROBE_TIMEOUT).is_err() {
            // SAFETY: a signal to the probe this check started and has not yet reaped.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        }
    });
    let mut lines = BufReader::new(child.stdout.take().ok_or("no output")?).lines();
    let mut next_answer = move || -> Result<Held, String> {
        lines
            .by_ref()
            .map_while(Result::ok)
            .find_map(|line| serde_json::from_str::<Held>(line.trim()).ok())
            .ok_or_else(|| "the probe ended without an answer".to_string())
    };
    let outcome = (|| {
        let held = next_answer()?;
        if let Some(error) = held.error {
            return Err(error);
        }
        let on_card = |pid| {
            nvml.memory()
                .iter()
                .filter(|p| p.pid == pid)
                .map(|p| p.bytes >> 20)
                .sum::<u64>()
        };
        let before = on_card(pid);
        if before == 0 {
            return Err(format!("NVML shows no memory of the probe (pid {pid})"));
        }
        let started = Instant::now();
        checkpoint::set_aside(tool, &[pid])?;
        let set_aside = started.elapsed();
        let during = on_card(pid);
        let started = Instant::now();
        checkpoint::bring_back(tool, &[pid])?;
        let back = started.elapsed();
        let stdin = child.stdin.as_mut().ok_or("no input")?;
        stdin.write_all(b"read\n").map_err(|e| e.to_string())?;
        let read = next_answer()?;
        let seen = format!(
            "{mib} MiB held ({before} MiB on the card), set aside in {:.2} s ({during} MiB left \
             on the card), back in {:.2} s, {}",
            set_aside.as_secs_f64(),
            back.as_secs_f64(),
            match read.intact {
                Some(true) => "intact".to_string(),
                _ => format!("NOT intact ({:?})", read.error),
            }
        );
        if during == 0 && read.intact == Some(true) {
            Ok(seen)
        } else {
            Err(seen)
        }
    })();
    let _ = child.kill();
    let _ = child.wait();
    let _ = done.send(());
    outcome
}

/// `server gpu-probe --mib N --hold`: fills N MiB of card 0, says so, waits for a line on its
/// input, then says whether the memory still holds the pattern.
pub fn hold(mib: u64) {
    let say = |held: &Held| {
        println!(
            "{}",
            serde_json::to_string(held).expect("an answer is JSON")
        );
        let _ = std::io::stdout().flush();
    };
    match driver::fill(mib) {
        Err(error) => say(&Held {
            error: Some(error),
            ..Default::default()
        }),
        Ok(memory) => {
            say(&Held {
                held_mib: mib,
                ..Default::default()
            });
            let mut line = String::new();
            let _ = std::io::stdin().read_line(&mut line);
            let (intact, error) = match memory.intact() {
                Ok(intact) => (intact, None),
                Err(error) => (false, Some(error)),
            };
            say(&Held {
                held_mib: mib,
                intact: Some(intact),
                error,
            });
        }
    }
}

/// How long the check waits for the probe at most, in all.
const PROBE_TIMEOUT: Duration = Duration::from_secs(120);

mod driver {
    //! The memory the probe holds, through the CUDA driver API (`runtime::cuda`).

    use crate::runtime::cuda::{Driver, check};

    const PATTERN: u32 = 0x5EED_CAFE;

    type MemAlloc = unsafe extern "C" fn(*mut u64, usize) -> i32;
    type MemsetD32 = unsafe extern "C" fn(u64, u32, usize) -> i32;
    type Synchronize = unsafe extern "C" fn() -> i32;
    type MemcpyDtoH = unsafe extern "C" fn(*mut libc::c_void, u64, usize) -> i32;

    /// Device memory filled with [`PATTERN`], in the context this thread made current.
    pub struct Filled {
        pointer: u64,
        words: usize,
        copy: MemcpyDtoH,
    }

    /// `mib` MiB of card 0, filled.
    pub fn fill(mib: u64) -> Result<Filled, String> {
        let driver = Driver::on_card_0()?;
        // SAFETY: each symbol has the signature the CUDA driver API documents for it, and is
        // called with pointers to live locals.
        unsafe {
            let alloc: MemAlloc = driver.symbol(c"cuMemAlloc_v2")?;
            let memset: MemsetD32 = driver.symbol(c"cuMemsetD32_v2")?;
            let sync: Synchronize = driver.symbol(c"cuCtxSynchronize")?;
            let copy: MemcpyDtoH = driver.symbol(c"cuMemcpyDtoH_v2")?;
            let bytes = (mib as usize) << 20;
            let mut pointer = 0u64;
            check("cuMemAlloc", alloc(&mut pointer, bytes))?;
            check("cuMemsetD32", memset(pointer, PATTERN, bytes / 4))?;
            check("cuCtxSynchronize", sync())?;
            Ok(Filled {
                pointer,
                words: bytes / 4,
                copy,
            })
        }
    }

    impl Filled {
        /// Whether every word still holds the pattern.
        pub fn intact(&self) -> Result<bool, String> {
            let mut host = vec![0u32; self.words];
            // SAFETY: `host` has room for `words` words, the device allocation as many.
            let code = unsafe {
                (self.copy)(
                    host.as_mut_ptr().cast(),
                    self.pointer,
                    self.words * std::mem::size_of::<u32>(),
                )
            };
            check("cuMemcpyDtoH", code)?;
            Ok(host.iter().all(|&w| w == PATTERN))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_the_tool_the_step_only_informs() {
        let exe = std::env::current_exe().unwrap();
        let (passed, seen) = round_trip(&exe, "/nonexistent/cuda-checkpoint", 16);
        assert_eq!(passed, None);
        assert!(seen.contains("do not park"), "{seen}");
    }

    #[test]
    fn the_probe_says_why_it_holds_nothing() {
        // Here, without a driver, or with one: an answer either way, never a hang.
        match driver::fill(16) {
            Err(why) => assert!(
                why.contains("libcuda") || why.contains("CUDA error"),
                "{why}"
            ),
            Ok(memory) => assert_eq!(memory.intact(), Ok(true)),
        }
    }
}
