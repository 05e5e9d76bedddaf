//! RedLock: one lock over three independent Redis servers, held once two of them grant it.
//!
//! A lock on one Redis server is only as available as that server, and one replicated with
//! failover can be granted twice (a replica promoted before it saw the lock forgets it).
//! RedLock asks N independent servers and holds the lock when a majority grant it, so it
//! survives a minority of them being down. "Independent" is the whole point: three databases
//! of one server, or a primary and its replicas, share their fate and count as one; run three
//! separate `redis-server`s (ideally on separate machines), each with `appendfsync always` or
//! kept out of service for a lease after a restart, or a restarted node forgets the holds.
//!
//! Here owner A takes the lock; owner B is refused while A holds it and gets it after A lets go.
//! Every hold has a fencing token, larger than every earlier holder's (see `fencing.rs`).
//!
//! Run: start three servers, e.g. `redis-server --port 6380 --save ''` (and 6381; 6379 is the
//! usual one), then `cargo run -p latchkey-redis --example redlock`. Other servers:
//! `REDIS_URLS=redis://host1:6379,redis://host2:6379,redis://host3:6379`.

mod support;

use std::time::Duration;

use latchkey_redis::{Client, RedLock};
use tokio::time::Instant;

const NAMESPACE: &str = "latchkey-example-redlock";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let urls = support::redis_urls();
    let outcome = run(&urls).await;
    for url in &urls {
        // A node that is down has nothing of ours to remove.
        if let Err(e) = support::clean_up(url, NAMESPACE).await {
            eprintln!("cannot clean up {url}: {e}");
        }
    }
    outcome
}

/// A RedLock over one lazy client per server: made without connecting, so it starts (and
/// locks with the others) while a minority of the servers is down.
fn redlock(urls: &[String]) -> latchkey_redis::Result<RedLock> {
    let mut nodes = Vec::new();
    for url in urls {
        nodes.push(Client::builder(url).namespace(NAMESPACE).connect_lazy()?);
    }
    // Refused for fewer than 3 nodes, an even count, or one server given twice.
    RedLock::new("nightly-report", nodes)
}

async fn run(urls: &[String]) -> Result<(), Box<dyn std::error::Error>> {
    println!("nodes: {}", urls.join(", "));
    // Two RedLocks are two owners (every acquire is a new owner: a RedLock is not reentrant).
    let owner_a = redlock(urls)?;
    let owner_b = redlock(urls)?;
    println!(
        "{} nodes, quorum {}",
        owner_a.node_count(),
        owner_a.quorum()
    );

    let guard_a = owner_a.lock().await?;
    let left = guard_a
        .valid_until()
        .saturating_duration_since(Instant::now());
    // A RedLock built with fencing (the default) gives every hold a token.
    let token_a = guard_a
        .fencing_token()
        .ok_or("a fenced RedLock gives tokens")?;
    println!(
        "A holds the lock on nodes {:?}, token {token_a}, valid for {} ms (renewed by the watchdog)",
        guard_a.nodes(),
        left.as_millis()
    );

    match owner_b.try_lock(Duration::from_millis(200)).await? {
        Some(_) => return Err("B got the lock while A held it".into()),
        None => println!("B is refused while A holds it"),
    }

    guard_a.unlock().await?;
    let guard_b = owner_b.lock().await?;
    let token_b = guard_b
        .fencing_token()
        .ok_or("a fenced RedLock gives tokens")?;
    println!("after A let go, B holds it with token {token_b}");
    if token_b <= token_a {
        return Err(format!("B's token {token_b} is not larger than A's {token_a}").into());
    }
    if !owner_a.down_nodes().is_empty() {
        println!(
            "nodes down (skipped and probed in the background): {:?}",
            owner_a.down_nodes()
        );
    }
    guard_b.unlock().await?;
    Ok(())
}
