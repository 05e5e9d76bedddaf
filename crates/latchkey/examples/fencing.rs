//! Fencing a write to a store with the lock's fencing token.
//!
//! A lease-based lock cannot stop a holder that was paused (a GC pause, swap, a stopped VM) for
//! longer than its lease: when it wakes up it still believes it holds the lock, although the
//! lease ran out and somebody else took it. The fix is on the store's side: every hold comes
//! with a fencing token, strictly larger than the token of every earlier holder, and the store
//! remembers the largest token it accepted and refuses writes carrying an older one.
//!
//! Here worker A takes the lock with a 300 ms lease (no watchdog), then "pauses" for a second;
//! worker B takes the expired lock and writes; A wakes up and tries to write: refused.
//!
//! Run: `cargo run -p latchkey-redis --example fencing` (uses `REDIS_URL`, default
//! `redis://127.0.0.1:6379`).

mod support;

use std::sync::Mutex;
use std::time::Duration;

use latchkey_redis::{Client, FencingToken, LockOptions};

const NAMESPACE: &str = "latchkey-example-fencing";

/// A toy store (think: a database row, an object in a bucket) that accepts a write only if its
/// token is at least the largest token it has seen.
#[derive(Default)]
struct Store {
    /// The largest token accepted so far, and the value written with it.
    last: Mutex<Option<(FencingToken, String)>>,
}

impl Store {
    fn write(&self, token: FencingToken, value: &str) -> Result<(), String> {
        let mut last = self.last.lock().unwrap();
        if let Some((newest, _)) = &*last {
            if token < *newest {
                return Err(format!("token {token} is older than {newest}"));
            }
        }
        *last = Some((token, value.to_owned()));
        Ok(())
    }
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
    let store = Store::default();

    // Every acquire is an owner of its own, so one handle would do; two stand for the two
    // processes of a real deployment.
    let worker_a = client.lock("account:42");
    let worker_b = client.lock("account:42");

    // A fixed lease: nobody renews it, so it runs out while A is paused.
    let short = LockOptions::new().lease(Duration::from_millis(300));
    let guard_a = worker_a.lock_with(short).await?;
    let token_a = guard_a.fencing_token();
    println!("A holds the lock with token {token_a}, then pauses for 1 s");
    tokio::time::sleep(Duration::from_secs(1)).await; // the "GC pause": A's lease runs out

    let guard_b = worker_b.lock().await?;
    let token_b = guard_b.fencing_token();
    println!("B took the expired lock with token {token_b}");
    store.write(token_b, "written by B")?;
    println!("B's write with token {token_b} accepted");

    // A wakes up. Without a fencing token this write would silently overwrite B's.
    match store.write(token_a, "written by A") {
        Ok(()) => return Err("the store accepted a stale write".into()),
        Err(why) => println!("A's stale write refused: {why}"),
    }
    // A's lease is gone: releasing it says so (and does not touch B's hold).
    match guard_a.unlock().await {
        Err(e) if e.is_not_owner() => println!("A's unlock: {e}"),
        other => return Err(format!("A's unlock should say not owner: {other:?}").into()),
    }

    guard_b.unlock().await?;
    if let Some((token, value)) = &*store.last.lock().unwrap() {
        println!("final value: {value:?} (token {token})");
    }
    Ok(())
}
