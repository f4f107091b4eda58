//! The local machine's processes, from /proc: which editor each belongs to and how much CPU each
//! editor's processes use. Pure where it can be; the reading is at the edge.
//!
//! This is how the idle reaper sees an unattended job in marimo or code-server, which expose no
//! busy state over HTTP: the CPU time of each editor's whole process tree is summed between two
//! samples, where an idle editor server uses well under 5 % of a core and a running job a whole
//! one, against `idle.busy_cpu_percent` (20 by default).

use std::collections::HashMap;

/// One process: its parent and the CPU it has used, in clock ticks (its own and that of its
/// children that ended, so short-lived subprocesses count too).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcStat {
    pub pid: u32,
    pub ppid: u32,
    pub cpu_ticks: u64,
    /// Resident memory, in pages.
    pub rss_pages: u64,
}

/// Finds the editor a process belongs to: the process itself or its nearest ancestor that leads
/// an editor. Kernels run in sessions of their own, so the process group is not enough.
pub struct Owners<'a, P> {
    leaders: &'a HashMap<u32, String>,
    parent_of: P,
    seen: HashMap<u32, Option<&'a String>>,
}

impl<'a, P: Fn(u32) -> Option<u32>> Owners<'a, P> {
    pub fn new(leaders: &'a HashMap<u32, String>, parent_of: P) -> Self {
        Owners {
            leaders,
            parent_of,
            seen: HashMap::new(),
        }
    }

    pub fn of(&mut self, pid: u32) -> Option<String> {
        if let Some(known) = self.seen.get(&pid) {
            return known.cloned();
        }
        let mut current = pid;
        let mut found = None;
        // A bounded walk: a process tree deeper than this is not one of ours.
        for _ in 0..64 {
            if let Some(handle) = self.leaders.get(&current) {
                found = Some(handle);
                break;
            }
            match (self.parent_of)(current) {
                Some(parent) if parent > 1 && parent != current => current = parent,
                _ => break,
            }
        }
        self.seen.insert(pid, found);
        found.cloned()
    }
}

/// CPU ticks per editor: the sum over the processes each one owns.
pub fn ticks_by_editor(
    leaders: &HashMap<u32, String>,
    processes: &[ProcStat],
) -> HashMap<String, u64> {
    sum_by_editor(leaders, processes, |p| p.cpu_ticks)
}

/// Resident pages per editor: the sum over its processes (pages two of them share count twice,
/// so this is an upper bound; a sandboxed editor's cgroup gives the exact figure).
pub fn rss_pages_by_editor(
    leaders: &HashMap<u32, String>,
    processes: &[ProcStat],
) -> HashMap<String, u64> {
    sum_by_editor(leaders, processes, |p| p.rss_pages)
}

fn sum_by_editor(
    leaders: &HashMap<u32, String>,
    processes: &[ProcStat],
    value: impl Fn(&ProcStat) -> u64,
) -> HashMap<String, u64> {
    let parents: HashMap<u32, u32> = processes.iter().map(|p| (p.pid, p.ppid)).collect();
    let mut owners = Owners::new(leaders, |pid| parents.get(&pid).copied());
    let mut sums = HashMap::new();
    for process in processes {
        if let Some(handle) = owners.of(process.pid) {
            *sums.entry(handle).or_default() += value(process);
        }
    }
    sums
}

/// The size of a memory page, in bytes.
pub fn page_bytes() -> u64 {
    // SAFETY: sysconf only reads a constant of the system.
    let bytes = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if bytes > 0 { bytes as u64 } else { 4096 }
}

/// Cores used on average between two readings of an editor's ticks. A process that ended takes
/// its ticks along unless its parent waited for it, so the count may drop: that reads as 0.
pub fn cores_between(before: u64, after: u64, ticks_per_second: u64, seconds: f64) -> f64 {
    if seconds <= 0.0 || ticks_per_second == 0 {
        return 0.0;
    }
    after.saturating_sub(before) as f64 / ticks_per_second as f64 / seconds
}

/// Every process now. Ones that vanish while being read are skipped.
pub fn read_processes() -> Vec<ProcStat> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            parse_stat(pid, &stat)
        })
        .collect()
}

/// `/proc/<pid>/stat`: after the command name (which may hold spaces and parentheses) come the
/// state, the parent, …, utime (14), stime (15), cutime (16), cstime (17), …, rss (24).
pub fn parse_stat(pid: u32, stat: &str) -> Option<ProcStat> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let field = |n: usize| fields.get(n)?.parse::<u64>().ok();
    Some(ProcStat {
        pid,
        ppid: field(1)? as u32,
        cpu_ticks: field(11)? + field(12)? + field(13)? + field(14)?,
        rss_pages: field(21).unwrap_or(0),
    })
}

/// Clock ticks per second of /proc's CPU times.
pub fn ticks_per_second() -> u64 {
    // SAFETY: sysconf only reads a constant of the system.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 { ticks as u64 } else { 100 }
}

/// Whether the process `pid` runs: it answers signal 0 (or exists but is another account's) and
/// has not exited waiting to be reaped ([`exited`]).
pub fn process_alive(pid: i32) -> bool {
    if pid <= 0 {
        return false;
    }
    // SAFETY: kill with signal 0 sends nothing; it only asks whether the process exists.
    let answers = unsafe { libc::kill(pid, 0) } == 0
        || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
    answers && !exited(pid)
}

/// The process has exited and waits for its parent to reap it (after a restart its parent is
/// whoever adopted it, which may never reap): dead, though its pid still answers a signal.
pub fn exited(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let state = stat[stat.rfind(')')? + 1..].trim_start().chars().next()?;
            Some(matches!(state, 'Z' | 'X'))
        })
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaders() -> HashMap<u32, String> {
        HashMap::from([(100, "lab".to_string()), (200, "mo".to_string())])
    }

    fn p(pid: u32, ppid: u32, cpu_ticks: u64) -> ProcStat {
        ProcStat {
            pid,
            ppid,
            cpu_ticks,
            rss_pages: cpu_ticks / 10,
        }
    }

    #[test]
    fn ticks_add_up_over_each_editors_tree() {
        let processes = [
            p(1, 0, 5000),
            p(100, 1, 10),
            p(110, 100, 300), // a kernel
            p(111, 110, 40),  // its child
            p(200, 1, 7),
            p(300, 1, 9000), // not an editor's
        ];
        let ticks = ticks_by_editor(&leaders(), &processes);
        assert_eq!(ticks.len(), 2);
        assert_eq!(ticks["lab"], 350);
        assert_eq!(ticks["mo"], 7);
        let pages = rss_pages_by_editor(&leaders(), &processes);
        assert_eq!((pages["lab"], pages["mo"]), (1 + 30 + 4, 0));
    }

    #[test]
    fn cores_are_ticks_over_time() {
        assert_eq!(cores_between(100, 400, 100, 3.0), 1.0);
        assert_eq!(cores_between(100, 150, 100, 2.0), 0.25);
        assert_eq!(
            cores_between(400, 100, 100, 3.0),
            0.0,
            "ticks that left with a process"
        );
        assert_eq!(cores_between(0, 100, 100, 0.0), 0.0);
    }

    #[test]
    fn a_stat_line_with_an_odd_command_name_parses() {
        let line = "4242 (my (odd) name) S 17 4242 4242 0 -1 4194560 100 0 0 0 250 30 4 6 20 0 1 0 12345 1000 10";
        let parsed = ProcStat {
            rss_pages: 10,
            ..p(4242, 17, 290)
        };
        assert_eq!(parse_stat(4242, line), Some(parsed));
        assert_eq!(parse_stat(1, "garbage"), None);
    }

    #[test]
    fn this_process_is_read_with_its_parent() {
        let me = std::process::id();
        let all = read_processes();
        let mine = all.iter().find(|s| s.pid == me).expect("this process");
        assert_eq!(Some(mine.ppid), parent_of_this());
        assert!(ticks_per_second() > 0);
    }

    fn parent_of_this() -> Option<u32> {
        Some(std::os::unix::process::parent_id())
    }
}
