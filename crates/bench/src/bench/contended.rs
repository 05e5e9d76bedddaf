//! The `contended` workload's frame, shared by latchkey and the peers: reset the counter, warm
//! up, count commands around the measured window (the clients run through it without a
//! restart), and check the counter.

use std::future::Future;
use std::time::Duration;

use anyhow::Result;
use redis::AsyncCommands;

use super::commands::{self, Plain};
use super::measure::{concurrent_window, Windowed};
use super::{server_cpu, Commands, CounterCheck, Run, Setup};
use crate::connect;

/// Clients (one task each, separate connections) on the one lock.
pub const CLIENTS: usize = 8;

/// What a library's `PING`s are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pings {
    /// Health checks of its connections (latchkey's pub/sub connections send one every 5 s):
    /// they come with time, not with sections, so they are reported apart.
    HealthChecks,
    /// Part of its operations (redisson's pool checks every connection it hands out with a
    /// `PING`): counted with the section's commands.
    PerOperation,
}

/// Runs the workload: `make(t)` is worker `t`'s lock + GET + SET + unlock, returning how long
/// it waited for the lock. Each section sends exactly one GET and one SET of its own.
pub async fn measure<M, F, Fut>(
    setup: &Setup,
    library: &'static str,
    counter: &str,
    plain: Plain,
    pings: Pings,
    make: M,
) -> Result<Run>
where
    M: Fn(usize) -> F,
    F: FnMut(u64) -> Fut + Send + 'static,
    Fut: Future<Output = Result<Duration>> + Send,
{
    let mut admin = connect::plain(&setup.url).await?;
    let _: () = admin.set(counter, 0).await?;
    let label = format!("contended {library}");
    // The commands and CPU are read at the window's edges while the clients keep going: the
    // steady state, not the clients' start (see `concurrent_window`).
    let edge = || {
        let mut admin = admin.clone();
        let url = setup.url.clone();
        async move {
            let calls = commands::snapshot(&mut admin).await?;
            let cpu = server_cpu(&url).await?;
            anyhow::Ok((calls, cpu))
        }
    };
    let Windowed {
        window: mut measured,
        total: expected,
        start: (before, cpu_before),
        end: (after, cpu_after),
    } = concurrent_window(
        Some(&label),
        "sections",
        setup.warmup,
        setup.duration,
        CLIENTS,
        &make,
        edge,
    )
    .await?;
    let cpu = (cpu_before, cpu_after);
    let found: Option<i64> = admin.get(counter).await?;
    let _: () = admin.del(counter).await?;

    let deltas = commands::delta(&before, &after);
    let sent = commands::client_sent(&deltas, plain, measured.count, measured.count);
    // The pub/sub connections' health checks (a PING every 5 s per client) come with time, not
    // with sections: reported on their own, not divided by the sections.
    let health_checks = match pings {
        Pings::HealthChecks => sent.get("ping").copied().unwrap_or(0),
        Pings::PerOperation => 0,
    };
    let total: u64 = sent.values().sum::<u64>() - health_checks;
    let found = found.unwrap_or(0);
    let mut run = Run::new(library, "", &mut measured).with_cpu(cpu);
    run.commands = Some(Commands {
        per_section: total as f64 / (run.count.max(1)) as f64,
        edge_allowance: 2.0 * CLIENTS as f64 / (run.count.max(1)) as f64,
        health_checks,
        client_sent: sent,
        all_deltas: deltas,
    });
    run.counter = Some(CounterCheck {
        expected,
        found,
        ok: found == expected as i64,
    });
    Ok(run)
}
