//! Rate limits: a limit shared by every process (and by Java services using Redisson's
//! `RRateLimiter`), and per-key limits for an API.
//!
//! A limit kept in each process would let 4 workers call a 20-per-second partner API 4 times
//! too often. With a `RateLimiter` they share one budget, wherever they run: the example counts
//! the calls made in the first second and in 3 seconds. Then a `GcraLimiter` holds each API key
//! to 5 requests a second with bursts of 5: a noisy key is refused with a `Retry-After` while a
//! quiet one is not.
//!
//! Run: `cargo run -p latchkey-redis --example rate_limit` (uses `REDIS_URL`, default
//! `redis://127.0.0.1:6379`).

mod support;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use latchkey_redis::{Client, Quota, RateType};

const NAMESPACE: &str = "latchkey-example-rate-limit";
const RATE: u64 = 20;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = support::redis_url();
    let outcome = run(&url).await;
    support::clean_up(&url, NAMESPACE).await?;
    outcome
}

async fn run(url: &str) -> Result<(), Box<dyn std::error::Error>> {
    let client = Client::builder(url).namespace(NAMESPACE).connect().await?;
    let limiter = client.rate_limiter("partner-api");
    // The first process to get here sets the rate; the others (Java ones too) find it.
    limiter
        .try_set_rate(RateType::Overall, RATE, Duration::from_secs(1))
        .await?;

    // Four workers call the API as fast as the shared limit lets them, for 3 seconds.
    let calls = Arc::new(AtomicU32::new(0));
    let first_second = Arc::new(AtomicU32::new(0));
    let started = Instant::now();
    let end = started + Duration::from_secs(3);
    let mut workers = Vec::new();
    for _ in 0..4 {
        let (limiter, calls, first_second) = (limiter.clone(), calls.clone(), first_second.clone());
        workers.push(tokio::spawn(async move {
            loop {
                let left = end.saturating_duration_since(Instant::now());
                if left.is_zero() || !limiter.try_acquire(1, left).await? {
                    return Ok::<_, latchkey_redis::Error>(());
                }
                calls.fetch_add(1, Ordering::Relaxed); // the API call
                if started.elapsed() < Duration::from_secs(1) {
                    first_second.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    for worker in workers {
        worker.await??;
    }
    let (calls, first) = (
        calls.load(Ordering::Relaxed),
        first_second.load(Ordering::Relaxed),
    );
    println!("shared limit of {RATE}/s: {first} calls in the first second, {calls} in 3 s");

    // Per-key limits: one small Redis key per API key.
    let per_key = client.gcra_limiter("requests", Quota::per_second(5));
    let mut noisy_refused = 0;
    for _ in 0..8 {
        let decision = per_key.check("key-noisy", 1).await?;
        if let Some(after) = decision.retry_after() {
            noisy_refused += 1;
            println!("key-noisy: 429, Retry-After {after:?}");
        }
    }
    let quiet = per_key.check("key-quiet", 1).await?;
    println!(
        "key-noisy refused {noisy_refused} of 8; key-quiet admitted: {} ({} left)",
        quiet.is_admitted(),
        quiet.remaining()
    );

    let held = u64::from(first) <= RATE && u64::from(calls) <= 3 * RATE && noisy_refused >= 1;
    if held && quiet.is_admitted() {
        println!("the limits held");
        Ok(())
    } else {
        Err("a limit was exceeded".into())
    }
}
