//! The transfer agent: one task per client and queue name that moves due items (and deliveries
//! whose visibility timeout ran out) to the ready list. See the `queue` module docs.

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{Keys, DELAY_TRANSFER, FALLBACK_POLL, TRANSFER_BATCH};
use crate::client::{Client, Inner};
use crate::conn::Conn;
use crate::error::{lock, Result};
use crate::metrics::{self, Site};
use crate::pubsub::{Subscription, WakePolicy};
use crate::scripts::Invoke;
use crate::wait::unexpected;

/// The first retry delay after a failed transfer; it doubles up to [`FALLBACK_POLL`].
const MIN_BACKOFF: Duration = Duration::from_millis(50);

/// How often an agent without a subscription tries to subscribe again.
const RESUBSCRIBE_EVERY: Duration = Duration::from_secs(5);

/// What the handles of a queue share with its agent.
#[derive(Debug)]
pub(crate) struct Shared {
    /// When the agent will transfer next, while it sleeps.
    armed: Mutex<Option<Instant>>,
    /// Wakes the agent early.
    kick: Notify,
}

impl Shared {
    /// Makes sure the agent transfers again no later than about `at` (a visibility deadline a
    /// consumer of this client just set): wakes it if it sleeps longer than that or is busy.
    pub(crate) fn wake_by(&self, at: Instant) {
        let armed = *lock(&self.armed);
        if armed.is_none_or(|armed| at < armed) {
            self.kick.notify_one();
        }
    }
}

/// Returns the link to `client`'s agent for queue `name`, starting the agent if none runs.
/// Must be called within a tokio runtime.
pub(crate) fn ensure(client: &Client, name: &str, keys: &Keys) -> Arc<Shared> {
    client.inner.agents.get_or_start(name, || {
        let shared = Arc::new(Shared {
            armed: Mutex::new(None),
            kick: Notify::new(),
        });
        let agent = Agent {
            conn: client.inner.conn.clone(),
            client: Arc::downgrade(&client.inner),
            name: name.to_owned(),
            keys: keys.clone(),
            shared: shared.clone(),
            site: Site::queue(client.inner.config.metrics_name_label, name),
        };
        tokio::spawn(agent.run(client.inner.shutdown.clone()));
        shared
    })
}

/// What the agent task owns: the connection and key names, never the client itself (a weak
/// reference is upgraded only for the moment of subscribing).
struct Agent {
    conn: Conn,
    client: Weak<Inner>,
    name: String,
    keys: Keys,
    shared: Arc<Shared>,
    /// Where the queue's transfer metrics are recorded.
    site: Site,
}

impl Agent {
    async fn run(self, shutdown: CancellationToken) {
        tokio::select! {
            biased;
            _ = shutdown.cancelled() => {}
            _ = self.work() => {}
        }
        if let Some(client) = self.client.upgrade() {
            client.agents.stopped(&self.name, &self.shared);
        }
    }

    /// Transfer, sleep until the next due time (or a message, a kick, the fallback poll),
    /// repeat; until the client shuts down.
    async fn work(&self) {
        let mut subscription = None;
        let mut backoff = MIN_BACKOFF;
        // The last failure, so a lasting one (a key of the wrong type) is logged once.
        let mut failing: Option<String> = None;
        let mut next_subscribe = Instant::now();
        loop {
            // Subscribed before the transfer: an item offered after the transfer read the
            // zset announces itself on the channel. Without a subscription (pub/sub refused or
            // unreachable) the agent polls, and tries again now and then.
            if subscription.is_none() && next_subscribe <= Instant::now() {
                subscription = self.subscribe().await;
                next_subscribe = Instant::now() + RESUBSCRIBE_EVERY;
            }
            let wake = match self.transfer().await {
                Ok(wake) => {
                    if failing.take().is_some() {
                        tracing::info!(queue = %self.name, "latchkey delayed queue transfer works again");
                    }
                    backoff = MIN_BACKOFF;
                    wake
                }
                Err(e) => {
                    let message = e.chain().to_string();
                    if failing.as_deref() == Some(message.as_str()) {
                        tracing::debug!(queue = %self.name, error = %e.chain(), "latchkey delayed queue transfer failed again");
                    } else {
                        tracing::warn!(queue = %self.name, error = %e.chain(), "latchkey delayed queue transfer failed; retrying");
                        failing = Some(message);
                    }
                    let at = Instant::now() + backoff;
                    backoff = (backoff * 2).min(FALLBACK_POLL);
                    at
                }
            };
            let wake = wake.min(Instant::now() + FALLBACK_POLL);
            *lock(&self.shared.armed) = Some(wake);
            tokio::select! {
                _ = self.shared.kick.notified() => {}
                _ = wait(subscription.as_ref(), wake) => {}
            }
            *lock(&self.shared.armed) = None;
        }
    }

    async fn subscribe(&self) -> Option<Subscription> {
        let inner = self.client.upgrade()?;
        match inner
            .hub
            .subscribe(&self.keys.delay_channel, WakePolicy::All, None)
            .await
        {
            Ok(subscription) => Some(subscription),
            Err(e) => {
                tracing::debug!(queue = %self.name, error = %e.chain(), "latchkey delayed queue agent could not subscribe; polling");
                None
            }
        }
    }

    /// Runs the transfer script until nothing due is left; returns when to run it again.
    async fn transfer(&self) -> Result<Instant> {
        loop {
            let keys = &self.keys;
            let mut invocation = DELAY_TRANSFER.invocation();
            invocation
                .key(&*keys.delayed)
                .key(&*keys.ready)
                .key(&*keys.unacked)
                .key(&*keys.ready_channel)
                .arg(TRANSFER_BATCH)
                .arg(self.conn.publish_command());
            let context = "moving due items of a delayed queue";
            let reply: Vec<i64> = self.conn.script(&invocation, context, &self.name).await?;
            let received = Instant::now();
            let [moved, redelivered, next_due, next_deadline, now_us, ready, delayed, unacked, ref late @ ..] =
                reply[..]
            else {
                return Err(unexpected("the transfer script", reply));
            };
            self.record(redelivered, [ready, delayed, unacked], late);
            if moved as usize >= TRANSFER_BATCH || redelivered as usize >= TRANSFER_BATCH {
                // More is due: let other commands in between, then go on.
                tokio::task::yield_now().await;
                continue;
            }
            // Server times in ms → local instants (the wait is measured from the reply, so the
            // agent wakes at or just after the due time, never before it).
            let local = |ms: i64| {
                (ms >= 0).then(|| {
                    received
                        + Duration::from_micros(
                            ms.saturating_mul(1000).saturating_sub(now_us).max(0) as u64,
                        )
                })
            };
            return Ok([local(next_due), local(next_deadline)]
                .into_iter()
                .flatten()
                .min()
                .unwrap_or(received + FALLBACK_POLL));
        }
    }
}

impl Agent {
    /// Records what a transfer reported: redeliveries, the depths, how late the moved items
    /// were (the transfer is off every caller's path: no round trip is added for this).
    fn record(&self, redelivered: i64, depths: [i64; 3], late_us: &[i64]) {
        let site = &self.site;
        if redelivered > 0 {
            site.count(metrics::QUEUE_EXPIRED, &[], redelivered as u64);
        }
        for (state, depth) in ["ready", "delayed", "unacked"].into_iter().zip(depths) {
            if depth >= 0 {
                site.set(metrics::QUEUE_DEPTH, &[("state", state)], depth as f64);
            }
        }
        for late in late_us {
            let late = Duration::from_micros(u64::try_from(*late).unwrap_or(0));
            site.observe(metrics::QUEUE_LATENESS, &[], late);
        }
    }
}

async fn wait(subscription: Option<&Subscription>, until: Instant) {
    match subscription {
        Some(subscription) => {
            subscription.wait_until(until).await;
        }
        None => tokio::time::sleep_until(until).await,
    }
}
