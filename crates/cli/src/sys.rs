//! The few Unix calls the standard library does not offer: sending a signal, the terminal's
//! foreground process group, and a signal for children when this process dies.

use std::io;

/// Sends `signal` to process `pid`.
pub fn send_signal(pid: u32, signal: i32) -> io::Result<()> {
    let pid = libc::pid_t::try_from(pid).map_err(|_| io::Error::other("pid out of range"))?;
    // SAFETY: kill(2) has no memory-safety preconditions.
    if unsafe { libc::kill(pid, signal) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Whether this process is in the foreground process group of its controlling terminal. Then a
/// SIGINT, SIGQUIT or SIGHUP it gets most likely came from the terminal, which sent it to the
/// whole group, child processes included.
pub fn in_terminal_foreground() -> bool {
    let Ok(tty) = std::fs::File::open("/dev/tty") else {
        return false; // no controlling terminal
    };
    use std::os::fd::AsRawFd;
    // SAFETY: tcgetpgrp and getpgrp only read the process state; the fd is open for the call.
    let (foreground, own) = unsafe { (libc::tcgetpgrp(tty.as_raw_fd()), libc::getpgrp()) };
    foreground == own
}

/// Makes the kernel send `signal` to the child if this process dies before it (Linux
/// `PR_SET_PDEATHSIG`), so that a server or command it started never outlives a `kill -9` of
/// latchkey. Must be set from the main thread: the signal is tied to the thread that forks.
/// Elsewhere than on Linux this does nothing.
#[cfg(not(target_os = "linux"))]
pub fn die_with_parent(_command: &mut std::process::Command, _signal: i32) {}

/// Makes the kernel send `signal` to the child if this process dies before it (Linux
/// `PR_SET_PDEATHSIG`), so that a server or command it started never outlives a `kill -9` of
/// latchkey. Must be set from the main thread: the signal is tied to the thread that forks.
#[cfg(target_os = "linux")]
pub fn die_with_parent(command: &mut std::process::Command, signal: i32) {
    use std::os::unix::process::CommandExt;
    // SAFETY: getpid is async-signal-safe.
    let parent = unsafe { libc::getpid() };
    // SAFETY: the closure runs in the child between fork and exec and calls only
    // async-signal-safe functions (prctl, getppid); it allocates nothing.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, signal as libc::c_ulong, 0, 0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The parent may have died before prctl took effect.
            if libc::getppid() != parent {
                return Err(io::Error::other("latchkey exited before the child started"));
            }
            Ok(())
        });
    }
}

/// Makes this process the "subreaper" of its descendants (Linux `PR_SET_CHILD_SUBREAPER`): a
/// grandchild whose parent exits is re-parented here rather than to init, so that
/// [`descendants`] still finds it. Linux only; elsewhere this does nothing.
pub fn become_subreaper() {
    #[cfg(target_os = "linux")]
    // SAFETY: prctl with PR_SET_CHILD_SUBREAPER only sets a flag on this process.
    unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong, 0, 0, 0);
    }
}

/// Every live process below this one (children, their children, …; zombies left out), from
/// `/proc`.
pub fn descendants() -> Vec<u32> {
    let own = std::process::id();
    let mut parents: Vec<(u32, u32)> = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // `pid (comm) state ppid …`; comm may hold spaces and parentheses.
        let Some(after) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        let mut fields = after.split_whitespace();
        let zombie = fields.next() == Some("Z");
        if let Some(ppid) = fields.next().and_then(|s| s.parse().ok()) {
            parents.push((pid, if zombie { 0 } else { ppid }));
        }
    }
    let mut found = Vec::new();
    let mut frontier = vec![own];
    while let Some(parent) = frontier.pop() {
        for &(pid, ppid) in &parents {
            if ppid == parent && pid != own && !found.contains(&pid) {
                found.push(pid);
                frontier.push(pid);
            }
        }
    }
    found
}

/// The CPU time (user + system) this process has used so far.
#[allow(dead_code)] // latchkey-bench compiles this file too, and uses it
pub fn process_cpu() -> std::time::Duration {
    // SAFETY: getrusage writes into the zeroed struct we own; all-zero is a valid rusage.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let tv = |t: libc::timeval| {
        std::time::Duration::new(t.tv_sec as u64, (t.tv_usec as u32).saturating_mul(1000))
    };
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// This process's resident memory, in bytes (`/proc/self/statm`); 0 if it cannot be read.
#[allow(dead_code)] // latchkey-bench compiles this file too, and uses it
pub fn resident_bytes() -> u64 {
    let pages = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|statm| statm.split_whitespace().nth(1)?.parse::<u64>().ok())
        .unwrap_or(0);
    // SAFETY: sysconf only reads a system setting.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    pages * u64::try_from(page).unwrap_or(4096)
}
