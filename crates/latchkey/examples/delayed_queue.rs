//! A delayed-queue worker: jobs due later, acknowledged when done, retried with back-off when
//! they fail, and set aside as dead letters when they keep failing.
//!
//! A producer offers jobs to a `DelayedQueue`; each becomes ready in the `BlockingQueue` of the
//! same name when its delay is up. The worker takes them with `poll` (or `take`): the job stays in
//! Redis, invisible to other workers, until it is settled. `ack` finishes it; `nack_after`
//! gives it back for a retry later. A worker that dies mid-job settles nothing, and the job
//! comes back after the visibility timeout: at least once, so make jobs idempotent. A job that
//! always fails would come back forever, so after a few attempts the worker moves it to a queue
//! of dead letters for a human. A payload the worker cannot decode is set aside by the library
//! (its dead-letter hash, counted by `dead_letter_len`): the worker never sees it.
//!
//! Run: `cargo run -p latchkey-redis --example delayed_queue` (uses `REDIS_URL`, default
//! `redis://127.0.0.1:6379`).

mod support;

use std::time::Duration;

use latchkey_redis::Client;
use serde::{Deserialize, Serialize};

const NAMESPACE: &str = "latchkey-example-delayed-queue";
const MAX_ATTEMPTS: u64 = 3;

#[derive(Debug, Serialize, Deserialize)]
struct Job {
    id: u32,
    /// How the job behaves: "ok", "flaky" (fails once), "crash" (its first worker dies),
    /// "poison" (always fails).
    kind: String,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = support::redis_url();
    let outcome = run(&url).await;
    support::clean_up(&url, NAMESPACE).await?;
    outcome
}

async fn run(url: &str) -> Result<(), Box<dyn std::error::Error>> {
    let client = Client::builder(url).namespace(NAMESPACE).connect().await?;
    let jobs = client.delayed_queue::<Job>("jobs");
    let offers = [("ok", 300), ("flaky", 100), ("crash", 0), ("poison", 200)];
    for (id, (kind, delay_ms)) in (1..).zip(offers) {
        let job = Job {
            id,
            kind: kind.to_owned(),
        };
        jobs.offer(&job, Duration::from_millis(delay_ms)).await?;
    }
    // Somebody offers a payload that is not a job.
    client
        .delayed_queue::<String>("jobs")
        .offer(&"garbage".into(), Duration::ZERO)
        .await?;
    println!("offered 4 jobs and 1 bad payload");

    // A job whose worker dies comes back after 1 s (30 s by default).
    let ready = client
        .blocking_queue::<Job>("jobs")
        .with_visibility_timeout(Duration::from_secs(1))?;
    let dead = client.blocking_queue::<Job>("jobs-dead");
    let (mut done, mut dead_lettered) = (0, 0);
    while done + dead_lettered < 4 {
        let Some(delivery) = ready.poll(Duration::from_secs(5)).await? else {
            return Err("no job came within 5 s".into());
        };
        let (job, attempt) = (delivery.item(), delivery.attempt());
        println!("job {} ({}), attempt {attempt}", job.id, job.kind);
        if job.kind == "crash" && attempt == 1 {
            println!("  the worker dies mid-job: the job comes back after the visibility timeout");
            std::mem::forget(delivery); // what a killed process does: settle nothing
            continue;
        }
        let failed = job.kind == "poison" || (job.kind == "flaky" && attempt == 1);
        if !failed {
            // `AlreadyFinished`: another delivery of the job (after a visibility timeout)
            // finished it first.
            let ours = delivery.ack().await?.is_acked();
            println!("  done, acknowledged (finished by this delivery: {ours})");
            done += 1;
        } else if attempt < MAX_ATTEMPTS {
            let backoff = Duration::from_millis(100 << attempt);
            println!("  failed, retry in {} ms", backoff.as_millis());
            // `NotOwned` would mean the job had already come back to the queue by itself.
            let _ = delivery.nack_after(backoff).await?;
        } else {
            dead.put(delivery.item()).await?;
            let _ = delivery.ack().await?;
            println!("  failed {attempt} times: moved to the dead letters");
            dead_lettered += 1;
        }
    }
    let set_aside = ready.dead_letter_len().await?;
    println!(
        "finished: {done} done, {dead_lettered} dead-lettered, {set_aside} undecodable set aside"
    );
    Ok(())
}
