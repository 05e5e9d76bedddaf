//! A fair lock: waiters are served in the order they arrived, across every client.
//!
//! With a plain lock, whoever retries first after a release wins, so under steady contention an
//! unlucky client can wait far longer than the others. A fair lock keeps one queue in Redis
//! (Redisson's `RFairLock` layout): the lock goes only to the head of the queue, and a release
//! wakes only that waiter. A waiter that gives up leaves the queue; one that dies without a word
//! is skipped once its entry goes stale (the thread wait time, 30 s by default).
//!
//! Here a holder keeps the lock while five clients line up one after another; then it lets go
//! and the example checks that they got the lock in the order they queued.
//!
//! Run: `cargo run -p latchkey-redis --example fair_lock` (uses `REDIS_URL`, default
//! `redis://127.0.0.1:6379`).

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use latchkey_redis::Client;

const NAMESPACE: &str = "latchkey-example-fair-lock";
const WAITERS: usize = 5;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = support::redis_url();
    let outcome = run(&url).await;
    support::clean_up(&url, NAMESPACE).await?;
    outcome
}

async fn run(url: &str) -> Result<(), Box<dyn std::error::Error>> {
    let holder = Client::builder(url).namespace(NAMESPACE).connect().await?;
    let printer = holder.fair_lock("printer");
    let first = printer.lock().await?;
    println!("the holder has the printer");

    let served = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for waiter in 0..WAITERS {
        // A client of its own per waiter, as separate processes would have.
        let client = Client::builder(url).namespace(NAMESPACE).connect().await?;
        let served = served.clone();
        waiters.push(tokio::spawn(async move {
            let guard = client.fair_lock("printer").lock().await?;
            println!(
                "waiter {waiter} got the printer (token {})",
                guard.fencing_token()
            );
            served.lock().unwrap().push(waiter);
            tokio::time::sleep(Duration::from_millis(50)).await; // print something
            guard.unlock().await
        }));
        // Wait until this waiter is in the queue before the next one arrives, so that the
        // arrival order is known.
        while printer.queue().await?.len() <= waiter {
            if waiters.last().is_some_and(|w| w.is_finished()) {
                return Err(format!("waiter {waiter} stopped before it queued").into());
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        println!("waiter {waiter} queued");
    }

    first.unlock().await?;
    println!("the holder let go");
    for waiter in waiters {
        waiter.await??;
    }

    let order = served.lock().unwrap().clone();
    println!("served in order {order:?}");
    if order != (0..WAITERS).collect::<Vec<_>>() {
        return Err("waiters were not served in arrival order".into());
    }
    println!("first come, first served");
    Ok(())
}
