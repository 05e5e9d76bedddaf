//! Following a Sentinel failover at once rather than at the next connection error.
//!
//! A primary that the sentinels demote keeps its clients' connections and keeps taking writes
//! until the sentinels reconfigure it as a replica, seconds later; a client that only moved on
//! connection errors would go on locking there while fresh clients lock on the new primary.
//! The watcher listens to the sentinels' `+switch-master` event (one sentinel at a time, the
//! next one when it fails) and, whenever it (re)subscribes, also asks the sentinels who the
//! primary is, so an event missed while it was away still counts. When the primary moved, the
//! command connection is dropped (the next command asks the sentinels again) and the pub/sub
//! hub reconnects, waking every waiter.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use tokio_util::sync::CancellationToken;

use crate::conn::{Conn, Verdict};

/// The longest pause between two attempts to reach a sentinel.
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// The sentinels' events that say a replica was attached to a primary (a demoted primary
/// reconfigured, a replica discovered or repointed).
const REPLICA_EVENTS: [&str; 3] = ["+convert-to-slave", "+slave", "+slave-reconf-done"];

/// Starts the watcher for the Sentinel-monitored `conn` (nothing for other deployments).
/// `moved` is called after the command connection was dropped because the primary moved;
/// `replica_joined` when the sentinels attached a replica to this group's primary.
pub(crate) fn start(
    conn: Conn,
    moved: Arc<dyn Fn() + Send + Sync>,
    replica_joined: Arc<dyn Fn() + Send + Sync>,
    shutdown: CancellationToken,
) {
    if conn.sentinels().is_none() {
        return;
    }
    tokio::spawn(async move {
        tokio::select! {
            _ = shutdown.cancelled() => {}
            _ = watch(conn, moved, replica_joined) => {}
        }
    });
}

async fn watch(
    conn: Conn,
    moved: Arc<dyn Fn() + Send + Sync>,
    replica_joined: Arc<dyn Fn() + Send + Sync>,
) {
    let Some(target) = conn.sentinels() else {
        return;
    };
    let (urls, master, timeout) = (
        target.sentinels.clone(),
        target.master.clone(),
        target.connect_timeout + target.command_timeout,
    );
    let mut backoff = Duration::from_millis(50);
    for url in urls.iter().cycle() {
        let subscribed = async {
            let mut pubsub = redis::Client::open(url.as_str())?
                .get_async_pubsub()
                .await?;
            pubsub.subscribe("+switch-master").await?;
            pubsub.subscribe(&REPLICA_EVENTS[..]).await?;
            redis::RedisResult::Ok(pubsub)
        };
        let mut pubsub = match tokio::time::timeout(timeout, subscribed).await {
            Ok(Ok(pubsub)) => pubsub,
            _ => {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
                continue;
            }
        };
        backoff = Duration::from_millis(50);
        // Events published before the subscription are lost: compare with the sentinels' word.
        check(&conn, &moved).await;
        let mut messages = pubsub.on_message();
        while let Some(message) = messages.next().await {
            let payload: String = message.get_payload().unwrap_or_default();
            if message.get_channel_name() != "+switch-master" {
                // `<type> <name> <ip> <port> @ <master name> <master ip> <master port>`
                let mut after_at = payload.split(" @ ").nth(1).unwrap_or("").split_whitespace();
                if after_at.next() == Some(master.as_str()) {
                    replica_joined();
                }
                continue;
            }
            // `<master name> <old ip> <old port> <new ip> <new port>`
            let mut words = payload.split_whitespace();
            if words.next() == Some(master.as_str()) {
                let old = match (words.next(), words.next()) {
                    (Some(ip), Some(port)) => format!("{ip}:{port}"),
                    _ => String::new(),
                };
                tracing::info!(
                    master = %master,
                    event = %payload,
                    "latchkey: the sentinels switched the primary"
                );
                primary_moved(&conn, &moved, Some(&old));
            }
        }
    }
}

/// Drops the connection if the sentinels name another primary than the connected one.
async fn check(conn: &Conn, moved: &Arc<dyn Fn() + Send + Sync>) {
    let (Some(primary), Some(target)) = (conn.sentinel_primary(), conn.sentinels()) else {
        return;
    };
    if target.verdict(&primary).await == Verdict::Moved {
        primary_moved(conn, moved, Some(&primary));
    }
}

/// Forgets the connection to `old` (to whatever primary when it is unknown) and tells `moved`.
fn primary_moved(conn: &Conn, moved: &Arc<dyn Fn() + Send + Sync>, old: Option<&str>) {
    let old = old.filter(|old| !old.is_empty());
    conn.forget_primary(old);
    moved();
}
