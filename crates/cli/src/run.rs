//! `latchkey run`: a command under a lock.

use std::future::Future;
use std::io;
use std::process::{ExitCode, ExitStatus, Stdio};

use anyhow::{anyhow, Context, Result};
use latchkey_redis::{Client, Guard, LockOptions};
use tokio::process::{Child, Command};
use tokio::signal::unix::{signal, Signal, SignalKind};

use crate::connect::{self, redact, Target};
use crate::duration::human;
use crate::exit::{self, coded};
use crate::opt::RunOpt;
use crate::sys;

/// The environment variable that carries the fencing token to the command.
pub const TOKEN_ENV: &str = "LATCHKEY_FENCING_TOKEN";
/// The environment variable that carries the lock's name to the command.
pub const LOCK_ENV: &str = "LATCHKEY_LOCK";

/// Runs `latchkey run`. Errors of latchkey itself exit [`exit::RUN_FAILED`], so that they are
/// not mistaken for the command's own status.
pub async fn run(opt: RunOpt) -> Result<ExitCode> {
    match run_inner(opt).await {
        Ok(code) => Ok(ExitCode::from(code)),
        Err(error) if error.downcast_ref::<exit::Coded>().is_some() => Err(error),
        Err(error) => Err(coded(exit::RUN_FAILED, error)),
    }
}

async fn run_inner(opt: RunOpt) -> Result<u8> {
    let target = Target::given_or_default(&opt.connect);
    let mut signals = Signals::new()?;
    sys::become_subreaper();
    let client = connect::client(&target.url, Some(watchdog(&opt))).await?;
    let lock = client.lock(opt.lock.clone());
    let mut options = LockOptions::new();
    if let Some(lease) = opt.lease {
        options = options.lease(lease);
    }
    // The plain and the fair lock's guards both implement `latchkey_redis::Guard`.
    if opt.fair {
        let fair = client.fair_lock(opt.lock.clone());
        let acquire = async {
            match opt.wait {
                Some(wait) => fair.try_lock_with(options.wait(wait)).await,
                None => fair.lock_with(options).await.map(Some),
            }
        };
        hold(&opt, &target, &lock, &mut signals, acquire).await
    } else {
        let acquire = async {
            match opt.wait {
                Some(wait) => lock.try_lock_with(options.wait(wait)).await,
                None => lock.lock_with(options).await.map(Some),
            }
        };
        hold(&opt, &target, &lock, &mut signals, acquire).await
    }
}

/// Takes the lock with `acquire` (interrupted by a signal, it exits), then runs the command
/// under it and releases it.
async fn hold<G: Guard>(
    opt: &RunOpt,
    target: &Target,
    lock: &latchkey_redis::Lock,
    signals: &mut Signals,
    acquire: impl Future<Output = latchkey_redis::Result<Option<G>>>,
) -> Result<u8> {
    let guard = tokio::select! {
        acquired = acquire => acquired.with_context(|| format!("taking the lock `{}`", opt.lock))?,
        signo = signals.recv() => {
            eprintln!("latchkey: interrupted while waiting for the lock `{}`", opt.lock);
            return Ok(exit::SIGNAL_BASE + signo as u8);
        }
    };
    let Some(guard) = guard else {
        let holder = match lock.status().await {
            Ok(status) => describe_holders(&status),
            Err(_) => String::new(),
        };
        let gave_up = match opt.wait {
            Some(wait) if !wait.is_zero() => format!("gave up after {} (--wait)", human(wait)),
            _ => "tried once (--wait 0)".to_owned(),
        };
        return Err(coded(
            exit::BUSY,
            anyhow!("the lock `{}` is busy{holder}; {gave_up}", opt.lock),
        ));
    };
    // Both lock guards have a token.
    let token = guard
        .fencing_token()
        .map_or(0, latchkey_redis::FencingToken::get);
    if opt.verbose {
        eprintln!(
            "latchkey: took the lock `{}` on {} (fencing token {token})",
            opt.lock,
            redact(&target.url)
        );
    }

    let mut child = match spawn(opt, token) {
        Ok(child) => child,
        Err((code, error)) => {
            let _ = guard.unlock().await;
            return Err(coded(code, error));
        }
    };
    let pid = child.id().unwrap_or(0);
    match supervise(&mut child, signals, guard.lost()).await? {
        Ended::Exited(status) => Ok(release(opt, guard, status).await),
        Ended::Lost => Ok(stop_after_loss(opt, &mut child, pid).await),
    }
}

/// How a supervised command ended.
pub(crate) enum Ended {
    /// It exited by itself with this status.
    Exited(ExitStatus),
    /// The hold it ran under was lost first; it still runs (stop it with [`stop_command`]).
    Lost,
}

/// Waits for `child` to exit, passing signals on to it (see [`forward`]), unless `lost`
/// resolves first.
pub(crate) async fn supervise(
    child: &mut Child,
    signals: &mut Signals,
    lost: impl Future<Output = ()>,
) -> Result<Ended> {
    let pid = child.id().unwrap_or(0);
    tokio::pin!(lost);
    loop {
        tokio::select! {
            status = child.wait() => {
                return Ok(Ended::Exited(status.context("waiting for the command")?));
            }
            signo = signals.recv() => forward(pid, signo),
            () = &mut lost => return Ok(Ended::Lost),
        }
    }
}

/// Starts the command with the token in its environment.
/// The watchdog lease of `run`: `--watchdog`, or the library's default.
fn watchdog(opt: &RunOpt) -> std::time::Duration {
    opt.watchdog.unwrap_or(Client::DEFAULT_WATCHDOG_TIMEOUT)
}

fn spawn(opt: &RunOpt, token: u64) -> std::result::Result<Child, (u8, anyhow::Error)> {
    spawn_command(
        &opt.command,
        &[(TOKEN_ENV, token.to_string()), (LOCK_ENV, opt.lock.clone())],
    )
}

/// Starts `argv` with `env` added to its environment, tied to latchkey's life; an error
/// carries the exit code to report ([`exit::NOT_FOUND`], [`exit::CANNOT_EXECUTE`]).
pub(crate) fn spawn_command(
    argv: &[std::ffi::OsString],
    env: &[(&str, String)],
) -> std::result::Result<Child, (u8, anyhow::Error)> {
    let program = &argv[0];
    let mut command = Command::new(program);
    command
        .args(&argv[1..])
        .envs(env.iter().map(|(name, value)| (*name, value)))
        .stdin(Stdio::inherit())
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit());
    // If latchkey is killed, the lock is no longer renewed: the command must not run on
    // unprotected.
    sys::die_with_parent(command.as_std_mut(), libc::SIGTERM);
    command.spawn().map_err(|e| {
        let name = program.to_string_lossy();
        match e.kind() {
            io::ErrorKind::NotFound => (exit::NOT_FOUND, anyhow!("command not found: {name}")),
            io::ErrorKind::PermissionDenied => (
                exit::CANNOT_EXECUTE,
                anyhow!("cannot execute {name}: permission denied"),
            ),
            _ => (exit::CANNOT_EXECUTE, anyhow!("cannot execute {name}: {e}")),
        }
    })
}

/// The lock was lost while the command ran: SIGTERM, then SIGKILL after the grace period.
async fn stop_after_loss(opt: &RunOpt, child: &mut Child, pid: u32) -> u8 {
    let why = match opt.lease {
        Some(lease) => format!(
            "its --lease of {} ran out (or it was released by force)",
            human(lease)
        ),
        None => "Redis no longer has it (released by force, expired while renewals failed, \
                 or the server lost its data)"
            .to_owned(),
    };
    eprintln!(
        "latchkey: LOST the lock `{}` while the command ran: {why}. Another holder may be \
         running now. Sending SIGTERM to the command (pid {pid}) and its processes.",
        opt.lock
    );
    stop_command(child, opt.grace).await;
    exit::LOST
}

/// Stops the command and every process below latchkey: SIGTERM, then SIGKILL after `grace`.
pub(crate) async fn stop_command(child: &mut Child, grace: std::time::Duration) {
    signal_tree(libc::SIGTERM);
    let deadline = tokio::time::Instant::now() + grace;
    let mut exited = false;
    loop {
        if !exited {
            if let Ok(Ok(_)) = tokio::time::timeout_at(deadline, child.wait()).await {
                exited = true;
            }
        }
        // Processes the command left behind are stopped too (latchkey is their subreaper).
        if exited && sys::descendants().is_empty() {
            break;
        }
        if tokio::time::Instant::now() >= deadline {
            eprintln!(
                "latchkey: the command did not stop within {} (--grace); sending SIGKILL",
                human(grace)
            );
            signal_tree(libc::SIGKILL);
            let _ = child.wait().await;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// The command exited: release the lock and pass its status on.
async fn release(opt: &RunOpt, guard: impl Guard, status: ExitStatus) -> u8 {
    let code = status_code(status);
    match guard.unlock().await {
        Ok(()) => {
            if opt.verbose {
                eprintln!("latchkey: released the lock `{}`", opt.lock);
            }
            code
        }
        Err(e) if e.is_not_owner() => {
            eprintln!(
                "latchkey: LOST the lock `{}` before the command finished (it exited with {code}); \
                 its work may have overlapped with another holder's",
                opt.lock
            );
            exit::LOST
        }
        Err(e) => {
            let left = opt.lease.unwrap_or(watchdog(opt));
            eprintln!(
                "latchkey: could not release the lock `{}`: {}; it expires by itself within {}",
                opt.lock,
                exit::one_line(&e),
                human(left)
            );
            code
        }
    }
}

/// Sends `signal` to every process below latchkey: the command and whatever it started.
fn signal_tree(signal: i32) {
    for pid in sys::descendants() {
        let _ = sys::send_signal(pid, signal);
    }
}

/// The shell's convention: the exit code, or 128 + the signal that killed the process.
pub(crate) fn status_code(status: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => code as u8,
        (None, Some(signo)) => exit::SIGNAL_BASE.saturating_add(signo as u8),
        (None, None) => exit::RUN_FAILED,
    }
}

/// Passes a signal on to the command. SIGINT, SIGQUIT and SIGHUP are not passed on while
/// latchkey runs in the terminal's foreground: the terminal sent them to the command as well,
/// and a second copy would make it see two Ctrl-C.
fn forward(pid: u32, signo: i32) {
    let from_terminal = signo != libc::SIGTERM && sys::in_terminal_foreground();
    if !from_terminal && pid != 0 {
        let _ = sys::send_signal(pid, signo);
    }
}

/// " (held by a:1, 12.3 s left)" for the busy message.
fn describe_holders(status: &latchkey_redis::LockStatus) -> String {
    if status.holders.is_empty() {
        return String::new();
    }
    let owners: Vec<&str> = status.holders.iter().map(|h| h.owner.as_str()).collect();
    match status.remaining_lease {
        Some(left) => format!(" (held by {}, {} left)", owners.join(", "), human(left)),
        None => format!(" (held by {}, no expiry)", owners.join(", ")),
    }
}

/// The signals `run` handles: installed before the lock is taken, so that none of them can
/// kill latchkey while it holds the lock.
pub(crate) struct Signals {
    interrupt: Signal,
    terminate: Signal,
    hangup: Signal,
    quit: Signal,
}

impl Signals {
    pub(crate) fn new() -> Result<Signals> {
        let install = |kind: SignalKind| signal(kind).context("installing a signal handler");
        Ok(Signals {
            interrupt: install(SignalKind::interrupt())?,
            terminate: install(SignalKind::terminate())?,
            hangup: install(SignalKind::hangup())?,
            quit: install(SignalKind::quit())?,
        })
    }

    /// The next signal's number.
    pub(crate) async fn recv(&mut self) -> i32 {
        tokio::select! {
            _ = self.interrupt.recv() => libc::SIGINT,
            _ = self.terminate.recv() => libc::SIGTERM,
            _ = self.hangup.recv() => libc::SIGHUP,
            _ = self.quit.recv() => libc::SIGQUIT,
        }
    }
}
