//! `latchkey-bench`: latchkey next to the Rust peers rslock and redisson (the crate) on fixed
//! workloads, with the same run's ceiling. Not published: it lives here so that installing the
//! `latchkey` command does not pull the peers.
//!
//! The workloads are in [`bench`]. Connecting, the private redis-server, the latency samples,
//! the progress bars and tables are the `latchkey` command's own modules, compiled here from
//! `crates/cli/src` (the command has no library to depend on, and should not grow one for this).

mod bench;
mod opt;

#[allow(dead_code)]
#[path = "../../cli/src/connect.rs"]
mod connect;
#[allow(dead_code)]
#[path = "../../cli/src/duration.rs"]
mod duration;
#[allow(dead_code)]
#[path = "../../cli/src/exit.rs"]
mod exit;
#[allow(dead_code)]
#[path = "../../cli/src/server.rs"]
mod server;
#[allow(dead_code)]
#[path = "../../cli/src/stats.rs"]
mod stats;
#[allow(dead_code)]
#[path = "../../cli/src/sys.rs"]
mod sys;
#[allow(dead_code)]
#[path = "../../cli/src/ui.rs"]
mod ui;

use std::future::Future;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::Parser;
use tokio::signal::unix::{signal, SignalKind};

fn main() -> ExitCode {
    let opt = match opt::BenchOpt::try_parse() {
        Ok(opt) => opt,
        // Help and version go to stdout and exit 0; usage errors exit 64.
        Err(error) => {
            let _ = error.print();
            return if error.use_stderr() {
                ExitCode::from(exit::USAGE)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    match run(opt) {
        Ok(code) => code,
        Err(error) => {
            let code = error
                .downcast_ref::<exit::Coded>()
                .map_or(exit::ERROR, |c| c.code);
            eprintln!("latchkey-bench: {}", exit::one_line(&*error));
            ExitCode::from(code)
        }
    }
}

/// Starts the private servers (on the main thread, before the runtime: the kernel kills them
/// if this process dies, a signal tied to the thread that started them), runs the workloads,
/// and stops the servers after the runtime is gone, including after Ctrl-C.
fn run(opt: opt::BenchOpt) -> Result<ExitCode> {
    // `rediss://` needs a rustls crypto provider; an error means one is installed already.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let targets = bench::targets(&opt)?;
    let mut runtime = if opt.multi_thread {
        tokio::runtime::Builder::new_multi_thread()
    } else {
        tokio::runtime::Builder::new_current_thread()
    };
    let runtime = runtime
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    // The workloads run in a spawned task, as an application's code does: waking `block_on`'s
    // own future goes through the runtime's wake-up descriptor (a syscall per wake-up), waking
    // a task does not, so a benchmark run in `block_on` would charge both libraries a system
    // call per round trip that applications never pay.
    let targets = Arc::new(targets);
    let shared = targets.clone();
    let result = runtime.block_on(async move {
        tokio::spawn(async move { interruptible(bench::run(opt, &shared)).await })
            .await
            .context("the benchmark task panicked")?
    });
    drop(runtime);
    drop(targets);
    result
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
