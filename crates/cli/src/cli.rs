//! `run(opt)`: picks the runtime and the Redis for a subcommand and runs it.

use std::future::Future;
use std::process::ExitCode;

use anyhow::{Context, Result};
use tokio::signal::unix::{signal, SignalKind};

use crate::connect::Target;
use crate::exit;
use crate::opt::{Command, Opt};
use crate::{cron, demo, elect, limit, list, queue, release, run as run_cmd, status};

/// Runs one subcommand to completion and returns its exit code.
///
/// Private servers are started here, on the main thread, before the runtime (the kernel kills
/// them if latchkey dies: that signal is tied to the thread that started them), and stopped
/// after the runtime is gone, including after Ctrl-C.
pub fn run(opt: Opt) -> Result<ExitCode> {
    // `rediss://` needs a rustls crypto provider; an error means one is installed already.
    let _ = rustls::crypto::ring::default_provider().install_default();
    match opt.command {
        Command::Run(opt) => current_thread()?.block_on(run_cmd::run(opt)),
        Command::Elect(opt) => current_thread()?.block_on(elect::run(opt)),
        Command::Leader(opt) => current_thread()?.block_on(elect::leader(opt)),
        Command::Cron(opt) => current_thread()?.block_on(cron::run(opt)),
        Command::Jobs(opt) => current_thread()?.block_on(cron::jobs(opt)),
        Command::Status(opt) => current_thread()?.block_on(status::run(opt)),
        Command::List(opt) => current_thread()?.block_on(list::run(opt)),
        Command::Limit(opt) => current_thread()?.block_on(limit::run(opt)),
        Command::Release(opt) => current_thread()?.block_on(release::run(opt)),
        Command::Queue(opt) => current_thread()?.block_on(queue::run(opt)),
        Command::Demo(opt) => {
            let target = Target::given_or_private(&opt.connect, false)?;
            let runtime = multi_thread()?;
            let result = runtime.block_on(interruptible(demo::run(opt, &target)));
            drop(runtime);
            drop(target);
            result
        }
        Command::Bench(opt) => Err(exit::coded(exit::USAGE, bench_moved(&opt.args))),
    }
}

/// `latchkey bench` is gone: the benchmarks are the `latchkey-bench` crate of latchkey's source
/// tree, so that installing this command does not pull the peer they measure (rslock).
fn bench_moved(args: &[std::ffi::OsString]) -> anyhow::Error {
    let mut command = "cargo run --release -p latchkey-bench --".to_owned();
    for arg in args {
        command.push(' ');
        command.push_str(&arg.to_string_lossy());
    }
    anyhow::anyhow!(
        "the benchmarks are not part of the `latchkey` command any more; in a checkout of \
         latchkey's source, run `{command}` (see BENCHMARKS.md)"
    )
}

fn current_thread() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
}

fn multi_thread() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
}

/// Runs `work` until it ends or SIGINT / SIGTERM arrives; then the work is dropped and the
/// error carries exit code 128 + the signal.
async fn interruptible(work: impl Future<Output = Result<ExitCode>>) -> Result<ExitCode> {
    let mut interrupt = signal(SignalKind::interrupt()).context("installing a SIGINT handler")?;
    let mut terminate = signal(SignalKind::terminate()).context("installing a SIGTERM handler")?;
    let signo = tokio::select! {
        result = work => return result,
        _ = interrupt.recv() => libc::SIGINT,
        _ = terminate.recv() => libc::SIGTERM,
    };
    Err(exit::coded(
        exit::SIGNAL_BASE + signo as u8,
        anyhow::anyhow!("interrupted; stopped the run and cleaned up"),
    ))
}
