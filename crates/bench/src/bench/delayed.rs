//! `delayed`: 5000 items with delays uniform in 0.5–3 s through a delayed queue; how late each
//! is taken, and whether any is lost or delivered twice. Then the rate of one `offer_all` of
//! 100,000 items.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use rand::Rng;
use serde::{Deserialize, Serialize};

use super::measure::Latency;
use super::Setup;
use crate::connect;
use crate::stats::Samples;
use crate::ui::count_bar;

/// Items offered.
pub const ITEMS: u32 = 5000;
/// Shortest delay, in ms.
const MIN_DELAY_MS: u64 = 500;
/// Longest delay, in ms.
const MAX_DELAY_MS: u64 = 3000;
/// Producer tasks (one client).
const PRODUCERS: u32 = 16;
/// Consumer clients, and consumer tasks on each.
const CONSUMER_CLIENTS: usize = 2;
const CONSUMERS_PER_CLIENT: usize = 4;
/// How long after the last due time items may still come before they count as lost.
const GRACE: Duration = Duration::from_secs(5);
/// Items of the one `offer_all` call (due in an hour: nobody takes them).
pub const BATCH_ITEMS: u32 = 100_000;

#[derive(Serialize, Deserialize)]
struct Item {
    seq: u32,
    due_ms: u64,
}

/// What the workload found.
#[derive(Clone, Debug, Serialize)]
pub struct DelayedResult {
    /// Items offered.
    pub items: u32,
    /// How long offering them took, in seconds.
    pub offer_seconds: f64,
    /// Items per second of one `offer_all` call with [`BATCH_ITEMS`] items.
    pub offer_all_per_s: f64,
    /// Lateness: taken − due (early items count as 0 here and in `early`).
    pub lateness: Latency,
    /// Items taken before their due time (should be 0).
    pub early: u64,
    /// Items never taken.
    pub lost: u64,
    /// Items taken more than once.
    pub duplicates: u64,
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// Runs the workload.
pub async fn run(setup: &Setup) -> Result<DelayedResult> {
    let name = format!("{}:delayed", setup.prefix);
    let stop = Arc::new(AtomicBool::new(false));
    let taken = Arc::new(AtomicU64::new(0));
    let bar = count_bar(u64::from(ITEMS), "delayed latchkey");

    // Consumers first: their clients' transfer agents move items as they come due.
    let mut consumers = tokio::task::JoinSet::new();
    let mut consumer_clients = Vec::new();
    for _ in 0..CONSUMER_CLIENTS {
        let client = connect::client(&setup.url, None).await?;
        for _ in 0..CONSUMERS_PER_CLIENT {
            let queue = client.blocking_queue::<Item>(name.clone());
            let stop = stop.clone();
            let taken = taken.clone();
            let bar = bar.clone();
            consumers.spawn(async move {
                let mut got = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    if let Some(item) = queue.poll(Duration::from_millis(200)).await? {
                        got.push((item.seq, now_us() as i64 - (item.due_ms * 1000) as i64));
                        taken.fetch_add(1, Ordering::Relaxed);
                        bar.inc(1);
                    }
                }
                anyhow::Ok(got)
            });
        }
        consumer_clients.push(client);
    }

    let producer = connect::client(&setup.url, None).await?;
    let started = std::time::Instant::now();
    let mut producers = tokio::task::JoinSet::new();
    let mut last_due_ms = 0;
    let mut plans: Vec<Vec<Item>> = (0..PRODUCERS).map(|_| Vec::new()).collect();
    {
        let mut rng = rand::rng();
        let base_ms = now_us() / 1000;
        for seq in 0..ITEMS {
            let due_ms = base_ms + rng.random_range(MIN_DELAY_MS..=MAX_DELAY_MS);
            last_due_ms = last_due_ms.max(due_ms);
            plans[(seq % PRODUCERS) as usize].push(Item { seq, due_ms });
        }
    }
    for plan in plans {
        let queue = producer.delayed_queue::<Item>(name.clone());
        producers.spawn(async move {
            for item in plan {
                let when = UNIX_EPOCH + Duration::from_millis(item.due_ms);
                queue.offer_at(&item, when).await?;
            }
            anyhow::Ok(())
        });
    }
    while let Some(done) = producers.join_next().await {
        done.context("a producer panicked")??;
    }
    let offer_seconds = started.elapsed().as_secs_f64();

    // Wait for every item, or until the grace period after the last due time is over.
    let give_up_us = (last_due_ms * 1000) + GRACE.as_micros() as u64;
    while taken.load(Ordering::Relaxed) < u64::from(ITEMS) && now_us() < give_up_us {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let mut seen = vec![0u32; ITEMS as usize];
    let mut lateness = Samples::new();
    let mut early = 0;
    while let Some(done) = consumers.join_next().await {
        for (seq, late_us) in done.context("a consumer panicked")?? {
            if let Some(count) = seen.get_mut(seq as usize) {
                *count += 1;
            }
            if late_us < 0 {
                early += 1;
            }
            lateness.push(Duration::from_micros(late_us.max(0) as u64));
        }
    }
    bar.finish_and_clear();
    drop(consumer_clients);

    // One batch on a queue of its own, with no consumer.
    let batch = producer.delayed_queue::<Item>(format!("{name}:batch"));
    let items: Vec<(Item, Duration)> = (0..BATCH_ITEMS)
        .map(|seq| (Item { seq, due_ms: 0 }, Duration::from_secs(3600)))
        .collect();
    let started = std::time::Instant::now();
    batch.offer_all(items).await.context("offer_all")?;
    let offer_all_per_s = f64::from(BATCH_ITEMS) / started.elapsed().as_secs_f64();
    let waiting = batch.len().await?;
    if waiting != u64::from(BATCH_ITEMS) {
        bail!("offer_all of {BATCH_ITEMS} items left {waiting} waiting");
    }
    let lost = seen.iter().filter(|&&n| n == 0).count() as u64;
    let duplicates = seen.iter().map(|&n| u64::from(n.saturating_sub(1))).sum();
    Ok(DelayedResult {
        items: ITEMS,
        offer_seconds,
        offer_all_per_s,
        lateness: Latency::of(&mut lateness),
        early,
        lost,
        duplicates,
    })
}
