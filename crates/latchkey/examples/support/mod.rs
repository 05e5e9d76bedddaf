//! What every example shares: where Redis is, and removing what an example made.
//!
//! Each example gives its client a namespace of its own (`latchkey-example-<name>`), so every
//! key it makes contains that namespace, and nothing else on the server is touched. A lock
//! leaves a key behind after it is released (its fencing counter,
//! `redisson_lock_token:{<namespace>:<name>}`, which expires only a minute after the last
//! hold), so each example ends by deleting every key of its namespace.

// Not every example uses every helper.
#![allow(dead_code)]

use redis::AsyncCommands;

/// The server the examples use: `REDIS_URL`, else `redis://127.0.0.1:6379`.
pub fn redis_url() -> String {
    std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned())
}

/// The servers of the RedLock example: `REDIS_URLS` (comma-separated), else three servers on
/// ports 6379, 6380 and 6381 of this machine.
pub fn redis_urls() -> Vec<String> {
    match std::env::var("REDIS_URLS") {
        Ok(urls) => urls.split(',').map(|url| url.trim().to_owned()).collect(),
        Err(_) => (6379..=6381)
            .map(|port| format!("redis://127.0.0.1:{port}"))
            .collect(),
    }
}

/// Deletes every key of `namespace` on the server at `url` (found with `SCAN`, never `KEYS`,
/// which would block a busy server) and says how many there were.
pub async fn clean_up(url: &str, namespace: &str) -> redis::RedisResult<()> {
    let mut conn = redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;
    let mut keys: Vec<String> = Vec::new();
    let mut found = conn
        .scan_match::<_, String>(format!("*{namespace}:*"))
        .await?;
    while let Some(key) = found.next_item().await {
        keys.push(key?);
    }
    drop(found);
    if !keys.is_empty() {
        let _: () = conn.del(&keys).await?;
    }
    println!("cleaned up {} key(s) of {namespace}", keys.len());
    Ok(())
}
