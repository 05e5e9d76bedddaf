//! `held`: what an acquire costs while the client holds many locks (a lock per active job or
//! session), what each held lock costs in memory, and how many renewal script calls the
//! watchdog makes per tick.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use futures_util::stream::{self, StreamExt, TryStreamExt};
use latchkey_redis::{Lock, LockGuard};
use serde::Serialize;

use super::commands;
use super::measure::{sequential, Latency};
use super::{Setup, SOLO_NAMES};
use crate::connect;

/// How many locks the client holds while the pairs run, one step after another.
pub const HELD_COUNTS: [usize; 3] = [100, 10_000, 50_000];

/// How long the idle client is watched to see its renewal ticks: longer than one tick period
/// (a third of the default 30 s watchdog timeout).
const IDLE_WATCH: Duration = Duration::from_secs(11);

/// How often `INFO commandstats` is read while watching: the calls of one tick come in a burst
/// much shorter than the period, so bursts of reads with calls are ticks.
const SAMPLE_EVERY: Duration = Duration::from_millis(200);

/// One step of `held`.
#[derive(Clone, Debug, Serialize)]
pub struct HeldRun {
    /// Locks the client held meanwhile.
    pub held: usize,
    /// Lock + unlock pairs per second on other names, in sequence.
    pub per_second: f64,
    /// Pair latency.
    pub latency: Latency,
    /// The process's resident memory growth per lock taken in this step, in bytes (guard,
    /// registry entry, renewal record).
    pub bytes_per_held_lock: f64,
    /// `EVALSHA` calls the idle client made per renewal tick (every call renews a batch).
    pub renew_calls_per_tick: f64,
}

/// Runs the steps of [`HELD_COUNTS`] with one client.
pub async fn held(setup: &Setup) -> Result<Vec<HeldRun>> {
    // The default watchdog (30 s): what a service runs with.
    let client = connect::client(&setup.url, None).await?;
    let mut admin = redis::Client::open(setup.url.as_str())?
        .get_multiplexed_async_connection()
        .await
        .context("the admin connection")?;
    let probes: Vec<Lock> = (0..SOLO_NAMES)
        .map(|i| client.lock(format!("{}:held:probe:{i}", setup.prefix)))
        .collect();
    let pair = |i: u64| {
        let lock = probes[(i % SOLO_NAMES) as usize].clone();
        async move {
            let started = Instant::now();
            lock.lock().await?.unlock().await?;
            Ok(started.elapsed())
        }
    };
    let mut guards: Vec<LockGuard> = Vec::new();
    let mut runs = Vec::new();
    for held in HELD_COUNTS {
        let from = guards.len();
        let rss = crate::sys::resident_bytes();
        let taken: Vec<LockGuard> = stream::iter(from..held)
            .map(|i| {
                let lock = client.lock(format!("{}:held:{i}", setup.prefix));
                async move { lock.lock().await }
            })
            .buffer_unordered(64)
            .try_collect()
            .await
            .with_context(|| format!("taking {held} locks"))?;
        guards.extend(taken);
        let grown = crate::sys::resident_bytes().saturating_sub(rss);
        let bytes_per_held_lock = grown as f64 / (held - from).max(1) as f64;

        let renew_calls_per_tick = renewal_bursts(&mut admin).await?;

        sequential(None, "pairs", setup.warmup, pair).await?;
        let label = format!("held {held} latchkey");
        let mut measured = sequential(Some(&label), "pairs", setup.duration, pair).await?;
        runs.push(HeldRun {
            held,
            per_second: measured.rate(),
            latency: Latency::of(&mut measured.samples),
            bytes_per_held_lock,
            renew_calls_per_tick,
        });
    }
    drop(guards);
    Ok(runs)
}

/// Watches the idle client for [`IDLE_WATCH`] and returns the `EVALSHA` calls of its renewal
/// ticks (bursts of calls between quiet samples), on average; 0 if no tick came.
async fn renewal_bursts(admin: &mut redis::aio::MultiplexedConnection) -> Result<f64> {
    let evalsha = |calls: &commands::Calls| calls.get("evalsha").copied().unwrap_or(0);
    let mut last = evalsha(&commands::snapshot(admin).await?);
    let (mut bursts, mut current) = (Vec::new(), 0u64);
    let until = Instant::now() + IDLE_WATCH;
    while Instant::now() < until {
        tokio::time::sleep(SAMPLE_EVERY).await;
        let now = evalsha(&commands::snapshot(admin).await?);
        let calls = now.saturating_sub(last);
        last = now;
        if calls > 0 {
            current += calls;
        } else if current > 0 {
            bursts.push(std::mem::take(&mut current));
        }
    }
    if current > 0 {
        bursts.push(current);
    }
    Ok(bursts.iter().sum::<u64>() as f64 / bursts.len().max(1) as f64)
}
