//! A count-down latch as a barrier: no worker of a group starts phase 2 before every worker
//! finished phase 1, wherever the workers run.
//!
//! The latch is a count in Redis (Redisson's `RCountDownLatch` layout). Each worker counts down
//! when its phase 1 is done and then waits for the count to reach zero; the last count-down
//! wakes every waiter through pub/sub. The failure case: a worker that dies before counting
//! down leaves the count above zero for good (the count has no expiry), so a plain `wait()`
//! would hang forever. Waiting with `wait_for(timeout)` lets the others notice and give up.
//!
//! Round 1: four workers meet at the barrier. Round 2: one worker dies before counting down.
//!
//! Run: `cargo run -p latchkey-redis --example latch_barrier` (uses `REDIS_URL`, default
//! `redis://127.0.0.1:6379`).

mod support;

use std::time::Duration;

use latchkey_redis::Client;
use tokio::time::Instant;

const NAMESPACE: &str = "latchkey-example-latch-barrier";
const WORKERS: u64 = 4;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = support::redis_url();
    let outcome = run(&url).await;
    support::clean_up(&url, NAMESPACE).await?;
    outcome
}

async fn run(url: &str) -> Result<(), Box<dyn std::error::Error>> {
    let client = Client::builder(url).namespace(NAMESPACE).connect().await?;

    println!("round 1: {WORKERS} workers");
    let passed = round(&client, "round-1", None).await?;
    if passed != WORKERS {
        return Err("every worker should pass the barrier".into());
    }

    println!("round 2: worker 2 dies before counting down");
    let passed = round(&client, "round-2", Some(2)).await?;
    if passed != 0 {
        return Err("no worker may pass a barrier that never opened".into());
    }
    Ok(())
}

/// Runs the workers of one round; returns how many passed the barrier.
async fn round(client: &Client, name: &str, dies: Option<u64>) -> latchkey_redis::Result<u64> {
    let latch = client.count_down_latch(name);
    latch.try_set_count(WORKERS).await?; // the coordinator (or the first worker) arms it
    let start = Instant::now();
    let mut workers = Vec::new();
    for worker in 0..WORKERS {
        let latch = latch.clone();
        workers.push(tokio::spawn(async move {
            // Phase 1 takes each worker a different time.
            tokio::time::sleep(Duration::from_millis(100 * (worker + 1))).await;
            if dies == Some(worker) {
                println!("  worker {worker} died in phase 1");
                return Ok(false);
            }
            let left = latch.count_down().await?;
            let at = start.elapsed().as_millis();
            println!("  worker {worker} finished phase 1 at {at} ms ({left} to go)");
            if !latch.wait_for(Duration::from_secs(1)).await? {
                let missing = latch.count().await?;
                println!("  worker {worker} gave up: {missing} worker(s) never arrived");
                return Ok(false);
            }
            println!(
                "  worker {worker} starts phase 2 at {} ms",
                start.elapsed().as_millis()
            );
            Ok::<_, latchkey_redis::Error>(true)
        }));
    }
    let mut passed = 0;
    for worker in workers {
        passed += u64::from(worker.await.expect("worker panicked")?);
    }
    Ok(passed)
}
