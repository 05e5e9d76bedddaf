//! A semaphore as a connection budget: at most N tasks, across every process, talk to a
//! database at once.
//!
//! Each task takes a permit before it opens a connection and gives it back after; when all N
//! are out, the next task waits. The permits here are *leased* (`PermitSemaphore`, Redisson's
//! `RPermitExpirableSemaphore`): a process that dies holding a permit does not shrink the budget
//! for good, as it would with a plain counting semaphore; its permit comes back when the lease
//! ends. Live holders' leases are renewed by the watchdog.
//!
//! Here a "crashed" worker leaves one of 3 permits behind with a 1 s lease, then 8 tasks share
//! the budget; the example counts how many run at once.
//!
//! Run: `cargo run -p latchkey-redis --example semaphore_budget` (uses `REDIS_URL`, default
//! `redis://127.0.0.1:6379`).

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use latchkey_redis::{Client, PermitOptions};

const NAMESPACE: &str = "latchkey-example-semaphore-budget";
const BUDGET: u32 = 3;
const TASKS: usize = 8;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = support::redis_url();
    let outcome = run(&url).await;
    support::clean_up(&url, NAMESPACE).await?;
    outcome
}

async fn run(url: &str) -> Result<(), Box<dyn std::error::Error>> {
    let client = Client::builder(url).namespace(NAMESPACE).connect().await?;
    let budget = client.permit_semaphore("db-connections");
    // Only the first process to get here sets the budget up; the others find it in place.
    budget.try_set_permits(BUDGET).await?;

    // A worker takes a permit with a 1 s lease and "crashes": `forget` stops looking after the
    // permit without giving it back, which is all a dead process leaves behind.
    let crashed = budget
        .acquire_with(1, PermitOptions::new().lease(Duration::from_secs(1)))
        .await?;
    println!("a worker died holding permit {}", crashed.forget()[0]);
    println!("available now: {}", budget.available_permits().await?);

    let running = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for task in 0..TASKS {
        let (budget, running, most) = (budget.clone(), running.clone(), most.clone());
        tasks.push(tokio::spawn(async move {
            let permit = budget.acquire(1).await?;
            let now = running.fetch_add(1, Ordering::SeqCst) + 1;
            most.fetch_max(now, Ordering::SeqCst);
            println!("task {task}: connected ({now} running)");
            tokio::time::sleep(Duration::from_millis(300)).await; // the query
            running.fetch_sub(1, Ordering::SeqCst);
            permit.release().await
        }));
    }
    for task in tasks {
        task.await??;
    }

    let most = most.load(Ordering::SeqCst);
    println!("at most {most} of {TASKS} tasks connected at once (budget {BUDGET})");
    if most > BUDGET as usize {
        return Err("the budget was exceeded".into());
    }
    let available = budget.available_permits().await?;
    println!("available at the end: {available} (the dead worker's permit came back)");
    if available != i64::from(BUDGET) {
        return Err("a permit is missing".into());
    }
    Ok(())
}
