//! latchkey from synchronous code: `latchkey_redis::blocking`.
//!
//! Four threads take turns on one lock to update a shared record, then wait on a latch until
//! all of them are done; a delayed-queue item is sent and received on the way. No async code:
//! the blocking client runs its own runtime thread (renewals, wake-ups, releases).
//!
//! Run with a Redis server at `REDIS_URL` (default `redis://127.0.0.1:6379`):
//!
//! ```text
//! cargo run -p latchkey-redis --example blocking
//! ```

use std::thread;
use std::time::Duration;

use latchkey_redis::blocking::Client;

fn main() -> latchkey_redis::Result<()> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    let client = Client::connect(url)?;

    // A latch the main thread waits on until every worker has finished (named for this run:
    // a latch is deleted when it reaches zero, but an interrupted run would leave its count).
    // The handles are the async API's; `client.run` runs their operations and waits.
    const WORKERS: u64 = 4;
    let done = client.count_down_latch(format!("example:blocking:done:{}", client.id()));
    client.run(done.try_set_count(WORKERS))?;

    let workers: Vec<_> = (0..WORKERS)
        .map(|n| {
            // Every acquire is an owner of its own: the threads exclude each other, whether
            // they share a handle or not.
            let lock = client.lock("example:blocking:record");
            let (client, done) = (client.clone(), done.clone());
            thread::spawn(move || -> latchkey_redis::Result<()> {
                // Waits (woken by pub/sub) until the lock is free.
                let guard = client.hold(lock.lock())?;
                // A store would refuse writes with a token smaller than one it has seen.
                println!(
                    "worker {n}: writing with fencing token {}",
                    guard.fencing_token()
                );
                thread::sleep(Duration::from_millis(50)); // the critical section
                if guard.is_lost() {
                    eprintln!("worker {n}: lock lost, the write is not protected");
                }
                guard.unlock()?; // or just drop it: the release is handed to the runtime
                client.run(done.count_down())?;
                Ok(())
            })
        })
        .collect();

    // Meanwhile, a delayed item: offered now, ready in 200 ms.
    let delayed = client.delayed_queue::<String>("example:blocking:mail");
    client.run(delayed.offer(&"welcome".to_owned(), Duration::from_millis(200)))?;
    let inbox = client.blocking_queue::<String>("example:blocking:mail");
    if let Some(mail) = client.try_hold(inbox.poll(Duration::from_secs(5)))? {
        println!("received {:?} (delivery {})", mail.item(), mail.attempt());
        // Unacknowledged, it would be delivered again; `AlreadyFinished` would mean another
        // delivery of the same item finished it first.
        if !mail.consume(|mail| mail.ack())?.is_acked() {
            println!("another delivery finished it first");
        }
    }

    if client.run(done.wait_for(Duration::from_secs(30)))? {
        println!("all {WORKERS} workers finished");
    }
    for worker in workers {
        worker.join().expect("worker thread")?;
    }
    Ok(())
    // Dropping the client stops its runtime thread.
}
