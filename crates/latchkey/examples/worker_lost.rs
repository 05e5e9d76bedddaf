//! A worker that runs a job under a lock and stops as soon as the lock is lost.
//!
//! Holding a lock is not forever: an operator may force it open, Redis may restart without
//! persistence or fail over to a replica that never saw it, or a fixed lease may run out. After
//! that somebody else can take the lock, and a worker that carries on is no longer protected.
//! Every guard has `lost()`, a future that resolves when the hold is known to be gone; race it
//! against the job with `tokio::select!` and the job is dropped (cancelled) at that moment.
//!
//! Three runs: the watchdog keeps a lock through a job longer than its timeout; a second
//! connection force-unlocks the lock mid-job; a fixed lease (no watchdog) runs out mid-job.
//!
//! Run: `cargo run -p latchkey-redis --example worker_lost` (uses `REDIS_URL`, default
//! `redis://127.0.0.1:6379`).

mod support;

use std::time::Duration;

use latchkey_redis::{Client, Guard, LockOptions};

const NAMESPACE: &str = "latchkey-example-worker-lost";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = support::redis_url();
    let outcome = run(&url).await;
    support::clean_up(&url, NAMESPACE).await?;
    outcome
}

/// The job: ten steps of 120 ms. Dropping the future stops it between two steps.
async fn job(run: &str) {
    for step in 1..=10 {
        tokio::time::sleep(Duration::from_millis(120)).await;
        println!("  [{run}] step {step}/10 done");
    }
}

/// Runs the job under `guard`; returns whether it finished.
async fn run_guarded(run: &str, guard: impl Guard) -> latchkey_redis::Result<bool> {
    tokio::select! {
        _ = guard.lost() => {
            println!("  [{run}] lock lost: job stopped");
            Ok(false)
        }
        _ = job(run) => {
            guard.unlock().await?;
            println!("  [{run}] job finished, lock released");
            Ok(true)
        }
    }
}

async fn run(url: &str) -> Result<(), Box<dyn std::error::Error>> {
    // A 1 s watchdog timeout (30 s by default): renewals, and the check that the lock is
    // still ours, every third of a second, so a loss is noticed within that.
    let worker = Client::builder(url)
        .namespace(NAMESPACE)
        .watchdog_timeout(Duration::from_secs(1))
        .connect()
        .await?;
    let lock = worker.lock("nightly-report");

    println!("1. watchdog on, a 1.2 s job, 1 s watchdog timeout");
    let finished = run_guarded("watchdog", lock.lock().await?).await?;
    if !finished {
        return Err("the watchdog should keep the lock for as long as the job runs".into());
    }

    println!("2. an operator force-unlocks the lock from another connection mid-job");
    let operator = Client::builder(url).namespace(NAMESPACE).connect().await?;
    let guard = lock.lock().await?;
    let force = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(350)).await;
        let existed = operator.lock("nightly-report").force_unlock().await?;
        println!("  [operator] force_unlock: lock existed = {existed}");
        Ok::<(), latchkey_redis::Error>(())
    });
    let finished = run_guarded("forced", guard).await?;
    force.await??;
    if finished {
        return Err("the worker should stop once the lock is gone".into());
    }

    println!("3. a fixed 500 ms lease (no watchdog) and a 1.2 s job");
    let guard = lock
        .lock_with(LockOptions::new().lease(Duration::from_millis(500)))
        .await?;
    let finished = run_guarded("lease", guard).await?;
    if finished {
        return Err("the worker should stop when its lease runs out".into());
    }

    println!("worker stopped on both losses");
    Ok(())
}
