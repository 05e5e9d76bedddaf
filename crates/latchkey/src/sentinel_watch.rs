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
//!
//! The watcher is compiled with the `sentinel` feature; the re-sends and [`Follow`] always are
//! (replica sync follows a primary the sentinels disown through them).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[cfg(feature = "sentinel")]
use futures_util::StreamExt;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::conn::Conn;
#[cfg(feature = "sentinel")]
use crate::conn::Verdict;
use crate::error::lock;
use crate::task::Task;

/// How long a lock's last release is kept to be sent again after a failover. A release sent to
/// the demoted primary in the second or so before the client follows the switch may never have
/// reached the promoted replica; this covers that window many times over.
const RESEND_WINDOW: Duration = Duration::from_secs(10);

/// The most releases kept (the oldest are dropped first).
const RESEND_CAPACITY: usize = 4096;

/// The last releases of locks made in the past [`RESEND_WINDOW`] on a Sentinel deployment, to
/// be sent again, guarded by their fencing token (`scripts/lock_release_resend.lua`), to the
/// new primary when the client follows a failover. Elsewhere nothing is recorded.
#[derive(Debug)]
pub(crate) struct Resends {
    enabled: bool,
    recent: Mutex<VecDeque<(Instant, Task)>>,
}

impl Resends {
    pub(crate) fn new(enabled: bool) -> Resends {
        Resends {
            enabled,
            recent: Mutex::new(VecDeque::new()),
        }
    }

    /// Keeps `make()`'s release (the guarded re-send of a lock's last release) for a while;
    /// `make` is called only on a Sentinel deployment, and may have nothing to re-send.
    pub(crate) fn record(&self, make: impl FnOnce() -> Option<Task>) {
        if !self.enabled {
            return;
        }
        let Some(task) = make() else {
            return;
        };
        let now = Instant::now();
        let mut recent = lock(&self.recent);
        while recent
            .front()
            .is_some_and(|(at, _)| now.duration_since(*at) > RESEND_WINDOW)
            || recent.len() >= RESEND_CAPACITY
        {
            recent.pop_front();
        }
        recent.push_back((now, task));
    }

    /// The releases made in the past [`RESEND_WINDOW`], taken out.
    fn take_recent(&self) -> Vec<Task> {
        let now = Instant::now();
        let mut recent = lock(&self.recent);
        recent
            .drain(..)
            .filter(|(at, _)| now.duration_since(*at) <= RESEND_WINDOW)
            .map(|(_, task)| task)
            .collect()
    }
}

/// What following a failover takes: the connection, the hub's reconnect, the recent releases.
#[derive(Clone)]
pub(crate) struct Follow {
    pub(crate) conn: Conn,
    pub(crate) hub_reconnect: Arc<dyn Fn() + Send + Sync>,
    pub(crate) resends: Arc<Resends>,
    /// The last primary followed away from, and when: every sentinel announces the same
    /// switch, and it is followed once.
    pub(crate) last_moved: Arc<Mutex<Option<(String, Instant)>>>,
}

impl Follow {
    /// The primary at `old` (whatever primary, if unknown) is one no more: drop the connection
    /// to it, reconnect the hub, and send the recent releases again to the new primary, once
    /// the client is connected to another server than `old` (within [`RESEND_WINDOW`]).
    pub(crate) fn primary_moved(&self, old: Option<&str>) {
        if let Some(old) = old {
            let mut last = lock(&self.last_moved);
            if last
                .as_ref()
                .is_some_and(|(addr, at)| addr == old && at.elapsed() < RESEND_WINDOW)
                && self.conn.sentinel_primary().as_deref() != Some(old)
            {
                return;
            }
            *last = Some((old.to_owned(), Instant::now()));
        }
        self.conn.forget_primary(old);
        (self.hub_reconnect)();
        let tasks = self.resends.take_recent();
        if tasks.is_empty() {
            return;
        }
        let conn = self.conn.clone();
        let old = old.map(str::to_owned);
        tokio::spawn(async move {
            let deadline = Instant::now() + RESEND_WINDOW;
            loop {
                let ping = conn
                    .query::<String>(&redis::cmd("PING"), "following a failover", "")
                    .await;
                let now = conn.sentinel_primary();
                if ping.is_ok() && now.is_some() && now.as_deref() != old.as_deref() {
                    break;
                }
                if Instant::now() >= deadline {
                    tracing::warn!(
                        releases = tasks.len(),
                        "latchkey: the new primary could not be reached to release again; \
                         those locks stay held until their leases end"
                    );
                    return;
                }
                // A sentinel that has not heard of the switch yet may name the old primary.
                conn.forget_primary(old.as_deref());
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            for task in tasks {
                match task.run::<i64>(&conn, "").await {
                    Ok(1) => tracing::info!(
                        context = task.context,
                        "latchkey: a release lost with the old primary was made again"
                    ),
                    Ok(_) => {}
                    // Nothing to act on: the hold ends with its lease.
                    Err(e) => tracing::info!(
                        error = %e.chain(),
                        "latchkey: releasing again on the new primary failed; the lock ends with its lease"
                    ),
                }
            }
        });
    }
}

#[cfg(feature = "sentinel")]
/// How often the watcher makes sure its sentinel still answers.
const HEALTH_CHECK_EVERY: Duration = Duration::from_secs(3);

#[cfg(feature = "sentinel")]
/// The longest pause between two attempts to reach a sentinel.
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// The sentinels' events that say a live replica was attached to a primary: a demoted primary
/// reconfigured, a replica repointed during a failover. (`+slave` is not one: the sentinels
/// announce it for a dead demoted primary too, as bookkeeping at the switch.)
#[cfg(feature = "sentinel")]
const REPLICA_EVENTS: [&str; 2] = ["+convert-to-slave", "+slave-reconf-done"];

/// Starts the watcher for the Sentinel-monitored `conn` (nothing for other deployments).
/// `moved` is called after the command connection was dropped because the primary moved;
/// `replica_joined` with the primary's address when the sentinels attached a replica to it.
pub(crate) fn start(
    follow: Follow,
    replica_joined: Arc<dyn Fn(&str) + Send + Sync>,
    shutdown: CancellationToken,
) {
    #[cfg(not(feature = "sentinel"))]
    let _ = (follow, replica_joined, shutdown);
    #[cfg(feature = "sentinel")]
    {
        let Some(target) = follow.conn.sentinels() else {
            return;
        };
        // Every sentinel is listened to: some events (`+convert-to-slave`) come only from the
        // sentinel that acted.
        let urls = target.sentinels.clone();
        tokio::spawn(async move {
            let listeners = urls.iter().map(|url| listen(url, &follow, &replica_joined));
            tokio::select! {
                _ = shutdown.cancelled() => {}
                _ = futures_util::future::join_all(listeners) => {}
            }
        });
    }
}

#[cfg(feature = "sentinel")]
/// Listens to the sentinel at `url`, reconnecting for as long as the client lives.
async fn listen(url: &str, follow: &Follow, replica_joined: &Arc<dyn Fn(&str) + Send + Sync>) {
    let conn = &follow.conn;
    let Some(target) = conn.sentinels() else {
        return;
    };
    let (master, timeout) = (
        target.master.clone(),
        target.connect_timeout + target.command_timeout,
    );
    let mut backoff = Duration::from_millis(50);
    loop {
        let subscribed = async {
            let mut pubsub = redis::Client::open(url)?.get_async_pubsub().await?;
            pubsub.subscribe("+switch-master").await?;
            pubsub.subscribe(&REPLICA_EVENTS[..]).await?;
            redis::RedisResult::Ok(pubsub)
        };
        let pubsub = match tokio::time::timeout(timeout, subscribed).await {
            Ok(Ok(pubsub)) => pubsub,
            _ => {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
                continue;
            }
        };
        backoff = Duration::from_millis(50);
        // Events published before the subscription are lost: compare with the sentinels' word.
        check(follow).await;
        let (mut sink, mut messages) = pubsub.split();
        let mut health = tokio::time::interval(HEALTH_CHECK_EVERY);
        health.reset();
        loop {
            let message = tokio::select! {
                message = messages.next() => match message {
                    Some(message) => message,
                    None => break,
                },
                _ = health.tick() => {
                    // A connection that went quiet may have lost an event: reconnect (and
                    // check again) unless the sentinel still answers.
                    match tokio::time::timeout(timeout, sink.ping::<redis::Value>()).await {
                        Ok(Ok(_)) => continue,
                        _ => break,
                    }
                }
            };
            let payload: String = message.get_payload().unwrap_or_default();
            if message.get_channel_name() != "+switch-master" {
                // `<type> <name> <ip> <port> @ <master name> <master ip> <master port>`
                let mut after_at = payload.split(" @ ").nth(1).unwrap_or("").split_whitespace();
                if after_at.next() == Some(master.as_str()) {
                    if let (Some(ip), Some(port)) = (after_at.next(), after_at.next()) {
                        replica_joined(&format!("{ip}:{port}"));
                    }
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
                follow.primary_moved(Some(old.as_str()).filter(|old| !old.is_empty()));
            }
        }
    }
}

#[cfg(feature = "sentinel")]
/// Follows the switch if the sentinels name another primary than the connected one.
async fn check(follow: &Follow) {
    let conn = &follow.conn;
    let (Some(primary), Some(target)) = (conn.sentinel_primary(), conn.sentinels()) else {
        return;
    };
    if target.verdict(&primary).await == Verdict::Moved {
        follow.primary_moved(Some(&primary));
    }
}
