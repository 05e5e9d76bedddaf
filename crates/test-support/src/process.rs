//! Starting, signalling and reaping child processes.

use std::io;
use std::process::{Child, Command, ExitStatus};
use std::sync::mpsc;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

struct SpawnRequest {
    command: Command,
    reply: mpsc::Sender<io::Result<Child>>,
}

/// The channel to the thread that forks every long-lived child.
///
/// `PR_SET_PDEATHSIG` fires when the *thread* that forked the child exits, not the process.
/// Test harnesses run each test on its own short-lived thread, and a server may outlive that
/// thread (e.g. kept in a `static`), so all children are forked from one thread that lives
/// as long as the process: they are then killed exactly when the test process dies.
static SPAWNER: OnceLock<mpsc::Sender<SpawnRequest>> = OnceLock::new();

fn spawner() -> &'static mpsc::Sender<SpawnRequest> {
    SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        std::thread::Builder::new()
            .name("latchkey-test-support-spawner".into())
            .spawn(move || {
                for mut request in rx {
                    let child = request.command.spawn();
                    // The requester may have gone away; then the child is dropped here
                    // (not killed), which cannot happen in practice because the requester
                    // blocks on the reply.
                    let _ = request.reply.send(child);
                }
            })
            .expect("spawn the process-spawner thread");
        tx
    })
}

/// Starts `command` so that the kernel kills it with SIGKILL when the test process dies.
pub(crate) fn spawn_child(mut command: Command) -> io::Result<Child> {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::process::CommandExt;
        // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
        unsafe {
            command.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    let (reply, answer) = mpsc::channel();
    spawner()
        .send(SpawnRequest { command, reply })
        .map_err(|_| io::Error::other("process-spawner thread is gone"))?;
    answer
        .recv()
        .map_err(|_| io::Error::other("process-spawner thread did not answer"))?
}

/// Sends `signal` to `pid`; returns whether the call succeeded.
pub(crate) fn send_signal(pid: u32, signal: libc::c_int) -> bool {
    if pid == 0 {
        return false;
    }
    // SAFETY: kill(2) has no memory-safety preconditions.
    unsafe { libc::kill(pid as libc::pid_t, signal) == 0 }
}

/// The state letter of `/proc/PID/stat` (`R`, `S`, `T`, `Z`, ...), if readable.
pub(crate) fn proc_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may contain spaces: the state follows the
    // last closing parenthesis.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().next()?.chars().next()
}

/// Waits up to `timeout` for `child` to exit; returns its status if it did.
pub(crate) fn wait_timeout(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) => {}
            Err(_) => return None,
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// SIGKILLs `child` unless it has exited already, then reaps it. Never panics.
pub(crate) fn kill_and_reap(child: &mut Child) {
    if let Ok(Some(_)) = child.try_wait() {
        return;
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Directories to remove when the process exits (see [`remove_at_exit`]).
static EXIT_DIRS: std::sync::Mutex<Vec<std::path::PathBuf>> = std::sync::Mutex::new(Vec::new());

extern "C" fn remove_exit_dirs() {
    let dirs = std::mem::take(&mut *EXIT_DIRS.lock().unwrap_or_else(|e| e.into_inner()));
    for dir in dirs {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// Removes `dirs` when the process exits normally (`exit`, which the test harness calls), for
/// servers kept in statics, which are never dropped.
pub(crate) fn remove_at_exit(dirs: impl IntoIterator<Item = std::path::PathBuf>) {
    static REGISTERED: std::sync::Once = std::sync::Once::new();
    EXIT_DIRS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .extend(dirs);
    REGISTERED.call_once(|| {
        // SAFETY: `remove_exit_dirs` is a plain `extern "C" fn` with no arguments that only
        // touches a static; registering it has no other effect.
        unsafe {
            libc::atexit(remove_exit_dirs);
        }
    });
}
