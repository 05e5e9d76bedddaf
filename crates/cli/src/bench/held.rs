//! `held`: what an acquire costs while the client holds many locks (a lock per active job or
//! session), what each held lock costs in memory, and how many renewal script calls the
//! watchdog makes per tick.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use futures_util::stream::{self, StreamExt, TryStreamExt};
use latchkey::{Lock, LockGuard};
use serde::Serialize;

use super::commands;
use super::measure::{sequential, Latency};
use super::{Setup, SOLO_NAMES};
use crate::connect;

/// How many locks the client holds while the pairs run, one step after another.
pub const HELD_COUNTS: [usize; 3] = [100, 10_000, 50_000];

/// The watchdog timeout of the holding client: a renewal tick every second.
const WATCHDOG: Duration = Duration::from_secs(3);

/// How long the idle client is watched to count its renewal calls (three ticks).
const IDLE_WATCH: Duration = Duration::from_secs(3);

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
    let client = connect::client(&setup.url, Some(WATCHDOG)).await?;
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

        let before = commands::snapshot(&mut admin).await?;
        tokio::time::sleep(IDLE_WATCH).await;
        let after = commands::snapshot(&mut admin).await?;
        let renewals = commands::delta(&before, &after)
            .get("evalsha")
            .copied()
            .unwrap_or(0);
        let ticks = IDLE_WATCH.as_secs_f64() / (WATCHDOG.as_secs_f64() / 3.0);

        sequential(None, "pairs", setup.warmup, pair).await?;
        let label = format!("held {held} latchkey");
        let mut measured = sequential(Some(&label), "pairs", setup.duration, pair).await?;
        runs.push(HeldRun {
            held,
            per_second: measured.rate(),
            latency: Latency::of(&mut measured.samples),
            bytes_per_held_lock,
            renew_calls_per_tick: renewals as f64 / ticks,
        });
    }
    drop(guards);
    Ok(runs)
}
