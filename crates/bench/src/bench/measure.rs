//! Timed loops: one task in sequence, or many tasks at once, for a fixed time.

use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde::Serialize;

use crate::stats::Samples;
use crate::ui::TimedBar;

/// What a timed loop did.
#[derive(Debug)]
pub struct Measured {
    /// Operations completed.
    pub count: u64,
    /// From the start until the last operation completed.
    pub elapsed: Duration,
    /// One sample per operation (what the operation returned).
    pub samples: Samples,
    /// Operations per task (one entry for a sequential loop).
    pub per_task: Vec<u64>,
}

impl Measured {
    /// Operations per second.
    pub fn rate(&self) -> f64 {
        self.count as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// Percentiles of the samples, in microseconds.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Latency {
    /// Median.
    pub p50_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// Largest.
    pub max_us: f64,
}

impl Latency {
    /// The percentiles of `samples`.
    pub fn of(samples: &mut Samples) -> Latency {
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        Latency {
            p50_us: us(samples.percentile(50.0)),
            p99_us: us(samples.percentile(99.0)),
            max_us: us(samples.max()),
        }
    }
}

/// Runs `op(i)` for i = 0, 1, … one after another for `duration`. Each operation returns the
/// sample to record (usually its own latency). With a label, shows a progress bar.
pub async fn sequential<F, Fut>(
    label: Option<&str>,
    unit: &'static str,
    duration: Duration,
    mut op: F,
) -> Result<Measured>
where
    F: FnMut(u64) -> Fut,
    Fut: Future<Output = Result<Duration>>,
{
    let counter = Arc::new(AtomicU64::new(0));
    let bar = label.map(|l| TimedBar::start(l, duration, counter.clone(), unit));
    let mut samples = Samples::new();
    let started = Instant::now();
    let deadline = started + duration;
    let mut count = 0;
    while Instant::now() < deadline {
        samples.push(op(count).await?);
        count += 1;
        counter.store(count, Ordering::Relaxed);
    }
    let elapsed = started.elapsed();
    drop(bar);
    Ok(Measured {
        count,
        elapsed,
        samples,
        per_task: vec![count],
    })
}

/// Runs `tasks` tasks at once for `duration`; task `t` runs `make(t)(i)` for i = 0, 1, … in
/// sequence. Operations still running at the deadline complete and count; the elapsed time
/// ends with the last of them.
pub async fn concurrent<M, F, Fut>(
    label: Option<&str>,
    unit: &'static str,
    duration: Duration,
    tasks: usize,
    make: M,
) -> Result<Measured>
where
    M: Fn(usize) -> F,
    F: FnMut(u64) -> Fut + Send + 'static,
    Fut: Future<Output = Result<Duration>> + Send,
{
    let counter = Arc::new(AtomicU64::new(0));
    let bar = label.map(|l| TimedBar::start(l, duration, counter.clone(), unit));
    let started = Instant::now();
    let deadline = started + duration;
    let mut set = tokio::task::JoinSet::new();
    for t in 0..tasks {
        let mut op = make(t);
        let counter = counter.clone();
        set.spawn(async move {
            let mut samples = Samples::new();
            let mut i = 0;
            while Instant::now() < deadline {
                samples.push(op(i).await?);
                i += 1;
                counter.fetch_add(1, Ordering::Relaxed);
            }
            anyhow::Ok(samples)
        });
    }
    let mut samples = Samples::new();
    let mut per_task = Vec::with_capacity(tasks);
    while let Some(done) = set.join_next().await {
        let task = done.context("a benchmark task panicked")??;
        per_task.push(task.len() as u64);
        samples.extend(task);
    }
    let elapsed = started.elapsed();
    drop(bar);
    per_task.sort_unstable();
    Ok(Measured {
        count: samples.len() as u64,
        elapsed,
        samples,
        per_task,
    })
}

/// What [`concurrent_window`] measured: the window, every operation of the whole run, and what
/// the two edge calls returned.
#[derive(Debug)]
pub struct Windowed<T> {
    /// The operations that completed inside the window (their count, samples and per-task
    /// counts), and the window's length.
    pub window: Measured,
    /// Every operation completed, warm-up and after the window included.
    pub total: u64,
    /// What `edge` returned when the window opened.
    pub start: T,
    /// What `edge` returned when it closed.
    pub end: T,
}

/// Runs `tasks` tasks at once, as [`concurrent`], through a warm-up of `warmup` and then a
/// measured window of `duration`, without stopping in between; `edge` runs at each edge of the
/// window while the tasks keep going (it snapshots the server's counters). What is counted is
/// the steady state: an operation counts if it completes inside the window, and the commands
/// of operations in flight at the two edges balance out, where a run started cold would add its
/// start-up (first subscriptions, the first waiters queueing at once) to every figure. The
/// tasks stop after the window; operations under way then complete and count in the total.
pub async fn concurrent_window<M, F, Fut, E, EFut, T>(
    label: Option<&str>,
    unit: &'static str,
    warmup: Duration,
    duration: Duration,
    tasks: usize,
    make: M,
    mut edge: E,
) -> Result<Windowed<T>>
where
    M: Fn(usize) -> F,
    F: FnMut(u64) -> Fut + Send + 'static,
    Fut: Future<Output = Result<Duration>> + Send,
    E: FnMut() -> EFut,
    EFut: Future<Output = Result<T>>,
{
    const WARMING: u8 = 0;
    const WINDOW: u8 = 1;
    const STOPPED: u8 = 2;
    let phase = Arc::new(AtomicU8::new(WARMING));
    let counter = Arc::new(AtomicU64::new(0));
    let mut set = tokio::task::JoinSet::new();
    for t in 0..tasks {
        let mut op = make(t);
        let (phase, counter) = (phase.clone(), counter.clone());
        set.spawn(async move {
            let mut samples = Samples::new();
            let mut total = 0u64;
            let mut i = 0;
            while phase.load(Ordering::Acquire) != STOPPED {
                let sample = op(i).await?;
                i += 1;
                total += 1;
                if phase.load(Ordering::Acquire) == WINDOW {
                    samples.push(sample);
                    counter.fetch_add(1, Ordering::Relaxed);
                }
            }
            anyhow::Ok((samples, total))
        });
    }
    tokio::time::sleep(warmup).await;
    let start = edge().await?;
    let started = Instant::now();
    phase.store(WINDOW, Ordering::Release);
    let bar = label.map(|l| TimedBar::start(l, duration, counter.clone(), unit));
    tokio::time::sleep(duration).await;
    phase.store(STOPPED, Ordering::Release);
    let elapsed = started.elapsed();
    drop(bar);
    let end = edge().await?;
    let mut samples = Samples::new();
    let mut per_task = Vec::with_capacity(tasks);
    let mut total = 0;
    while let Some(done) = set.join_next().await {
        let (task, ops) = done.context("a benchmark task panicked")??;
        per_task.push(task.len() as u64);
        samples.extend(task);
        total += ops;
    }
    per_task.sort_unstable();
    Ok(Windowed {
        window: Measured {
            count: samples.len() as u64,
            elapsed,
            samples,
            per_task,
        },
        total,
        start,
        end,
    })
}
