//! A read-write lock around a cache refresh: many readers at once, or one refresher alone.
//!
//! The cache is two Redis keys, a version and a body, that a refresher rewrites one after the
//! other (a real refresh may write many keys, files or rows). A reader that looks in between
//! sees the new version with the old body: a torn read. A plain lock would fix that but make
//! every reader wait for every other reader; a read-write lock lets the readers share and makes
//! only the refresher exclusive. Waiting refreshers are preferred, so a steady stream of readers
//! cannot starve them.
//!
//! The same run twice: without the lock (torn reads are likely), then with it (none).
//!
//! Run: `cargo run -p latchkey-redis --example rw_cache` (uses `REDIS_URL`, default
//! `redis://127.0.0.1:6379`).

mod support;

use std::time::Duration;

use latchkey_redis::Client;
use redis::AsyncCommands;
use tokio::time::Instant;

const NAMESPACE: &str = "latchkey-example-rw-cache";
const VERSION: &str = "latchkey-example-rw-cache:cache:version";
const BODY: &str = "latchkey-example-rw-cache:cache:body";
const READERS: usize = 4;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = support::redis_url();
    let outcome = run(&url).await;
    support::clean_up(&url, NAMESPACE).await?;
    outcome
}

async fn run(url: &str) -> Result<(), Box<dyn std::error::Error>> {
    let client = Client::builder(url).namespace(NAMESPACE).connect().await?;
    let cache = redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;

    let torn = round(&client, &cache, false).await?;
    println!("without the lock: {torn} torn read(s)");
    let torn = round(&client, &cache, true).await?;
    println!("with the read-write lock: {torn} torn read(s)");
    if torn > 0 {
        return Err("a reader saw a half-refreshed cache under the lock".into());
    }
    Ok(())
}

/// 0.6 s of four readers and one refresher; returns the number of torn reads.
async fn round(
    client: &Client,
    cache: &redis::aio::MultiplexedConnection,
    locked: bool,
) -> Result<usize, Box<dyn std::error::Error>> {
    let mut redis = cache.clone();
    let _: () = redis.mset(&[(VERSION, "0"), (BODY, "prices v0")]).await?;
    let until = Instant::now() + Duration::from_millis(600);

    // The refresher: a handle of its own, as another process would have (every acquire is an
    // owner of its own in any case).
    let lock = client.rw_lock("prices");
    let mut redis = cache.clone();
    let refresher = tokio::spawn(async move {
        let mut version = 0;
        while Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(100)).await;
            version += 1;
            let guard = if locked {
                Some(lock.write().lock().await?)
            } else {
                None
            };
            let _: () = redis.set(VERSION, version).await?;
            tokio::time::sleep(Duration::from_millis(20)).await; // fetching the new prices
            let _: () = redis.set(BODY, format!("prices v{version}")).await?;
            if let Some(guard) = guard {
                guard.unlock().await?;
            }
        }
        Ok::<_, Box<dyn std::error::Error + Send + Sync>>(version)
    });

    let mut readers = Vec::new();
    for _ in 0..READERS {
        let lock = client.rw_lock("prices");
        let mut redis = cache.clone();
        readers.push(tokio::spawn(async move {
            let (mut reads, mut torn) = (0, 0);
            while Instant::now() < until {
                let guard = if locked {
                    Some(lock.read().lock().await?)
                } else {
                    None
                };
                let version: u64 = redis.get(VERSION).await?;
                tokio::time::sleep(Duration::from_millis(5)).await; // using the cache
                let body: String = redis.get(BODY).await?;
                if let Some(guard) = guard {
                    guard.unlock().await?;
                }
                reads += 1;
                torn += usize::from(body != format!("prices v{version}"));
            }
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>((reads, torn))
        }));
    }

    let refreshes = refresher.await?.map_err(|e| e.to_string())?;
    let (mut reads, mut torn) = (0, 0);
    for reader in readers {
        let (r, t) = reader.await?.map_err(|e| e.to_string())?;
        (reads, torn) = (reads + r, torn + t);
    }
    println!("{refreshes} refreshes, {reads} reads by {READERS} readers");
    Ok(torn)
}
