//! The durable delayed queue and the reliable blocking queue.
//!
//! The key layout is documented on [`DelayedQueue`] (public); the scripts in `scripts/delay_*.lua`
//! and `scripts/queue_*.lua` describe their KEYS and ARGV.
//!
//! Every item has a unique id (`<16 hex digits of a process-wide counter><16 hex digits of the
//! client id>`), so identical payloads are distinct items; the id is what moves between the
//! structures, and the payload stays in the item hash until the item is finished.
//!
//! # The transfer agent
//!
//! The first handle made for a queue name starts the client's transfer agent for that name: a
//! task that runs `scripts/delay_transfer.lua` (move due items, and deliveries whose visibility
//! timeout ran out, to the ready list; at most [`TRANSFER_BATCH`] of each per call, repeated
//! until none is left), then sleeps until the earliest due time or visibility deadline that the
//! script reported, until a message on the delay channel says that an earlier item arrived, or
//! for at most [`FALLBACK_POLL`]. It holds the command connection, its subscription and the
//! client's shutdown token, never the client itself, and stops when the client shuts down.
//! Every client that uses a queue runs one: the script is atomic and idempotent, so agents
//! racing each other move every item exactly once, and items are delivered while any producer
//! or consumer of the queue runs.

mod agent;
mod blocking;
mod delayed;

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::client::{Client, Object};
use crate::error::{check_range, Error, Result, MS};
use crate::keys::check_name;
pub(crate) use crate::keys::QueueKeys as Keys;
use crate::metrics::{self, Op, Site};
use crate::scripts::Invoke;
use crate::watchdog::MAX_LEASE;

pub use blocking::{Ack, BlockingQueue, DeadLetter, Delivery, Nack};
pub use delayed::{DelayedQueue, PendingItem};

/// The largest encoded item a queue accepts: published as [`BlockingQueue::MAX_ITEM_SIZE`] and
/// [`DelayedQueue::MAX_ITEM_SIZE`].
pub(crate) const MAX_ITEM_SIZE: usize = 1024 * 1024;

/// The longest delay a delayed queue accepts: published as [`DelayedQueue::MAX_DELAY`].
pub(crate) const MAX_DELAY: Duration = Duration::from_secs(3650 * 24 * 3600);

/// The default visibility timeout: published as [`BlockingQueue::DEFAULT_VISIBILITY_TIMEOUT`].
pub(crate) const DEFAULT_VISIBILITY_TIMEOUT: Duration = Duration::from_secs(30);

/// The most items one transfer script call moves from each zset.
pub(crate) const TRANSFER_BATCH: usize = 1000;

/// The longest a transfer agent sleeps between two transfers, whatever it was told.
pub(crate) const FALLBACK_POLL: Duration = Duration::from_secs(1);

/// The most items one offer script call carries.
const OFFER_BATCH: usize = 1000;
/// The most payload bytes one offer script call carries (a single larger item goes alone).
const OFFER_BATCH_BYTES: usize = 4 * 1024 * 1024;

pub(crate) use crate::scripts::{
    DELAY_OFFER, DELAY_PENDING, DELAY_REMOVE, DELAY_TRANSFER, QUEUE_ACK, QUEUE_DEAD, QUEUE_EXTEND,
    QUEUE_REQUEUE, QUEUE_TAKE,
};

/// The unique id of one queued item, returned when it is offered.
///
/// Two offers of the same payload are two items with two ids. Use the id to cancel an item with
/// [`DelayedQueue::remove`], and to recognise a redelivery ([`Delivery::id`]).
///
/// # Examples
///
/// ```no_run
/// # async fn f(queue: latchkey_redis::DelayedQueue<String>) -> latchkey_redis::Result<()> {
/// use std::time::Duration;
///
/// let id = queue.offer(&"remind me".to_owned(), Duration::from_secs(60)).await?;
/// println!("queued as {id}");
/// assert!(queue.remove(&id).await?);
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ItemId(String);

impl ItemId {
    /// The id as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ItemId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<ItemId> for String {
    fn from(id: ItemId) -> String {
        id.0
    }
}

/// The process-wide part of item ids: starts at the wall clock in µs, so ids of one client sort
/// in offer order (ties in due time are delivered in id order), even across restarts.
static SEQUENCE: LazyLock<AtomicU64> = LazyLock::new(|| {
    let micros = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64);
    AtomicU64::new(micros)
});

/// What every handle of one queue shares: the client, the name, the keys, the agent link.
pub(crate) struct Core {
    pub(crate) client: Client,
    pub(crate) name: String,
    pub(crate) keys: Keys,
    /// The client-id part of item ids.
    id_tag: String,
    agent: OnceLock<Arc<agent::Shared>>,
}

impl Object for Core {
    fn client(&self) -> &Client {
        &self.client
    }

    fn name(&self) -> &str {
        &self.name
    }
}

/// One item ready to be offered: id, delay in µs or due time in ms, payload.
pub(crate) struct Offer {
    pub(crate) id: ItemId,
    pub(crate) time: u64,
    pub(crate) payload: Vec<u8>,
}

/// How the times of an offer are meant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum When {
    /// Delays in microseconds from the Redis server's clock.
    In,
    /// Due times in milliseconds since the epoch.
    At,
}

impl Core {
    pub(crate) fn new(client: Client, name: String) -> Arc<Core> {
        let id_tag: String = client.id().chars().filter(|c| *c != '-').take(16).collect();
        let core = Arc::new(Core {
            keys: Keys::new(client.namespace(), &name),
            client,
            name,
            id_tag,
            agent: OnceLock::new(),
        });
        // Start the transfer agent now if we can (inside a runtime); otherwise on first use.
        if tokio::runtime::Handle::try_current().is_ok() && check_name(&core.name).is_ok() {
            core.agent();
        }
        core
    }

    /// The link to this client's transfer agent for the queue, starting it if needed. Must be
    /// called within a tokio runtime.
    pub(crate) fn agent(&self) -> &Arc<agent::Shared> {
        self.agent
            .get_or_init(|| agent::ensure(&self.client, &self.name, &self.keys))
    }

    /// Where this queue's metrics are recorded.
    pub(crate) fn site(&self) -> Site {
        Site::queue(self.client.inner.config.metrics_name_label, &self.name)
    }

    /// The span of operation `op` on this queue.
    pub(crate) fn span(&self, op: Op, wait: Option<Duration>) -> tracing::Span {
        metrics::span(op, "queue", &self.name, wait)
    }

    /// Checks the name and makes sure the agent runs: the start of every async method.
    pub(crate) fn ready_to_use(&self) -> Result<()> {
        check_name(&self.name)?;
        self.agent();
        Ok(())
    }

    pub(crate) fn new_id(&self) -> ItemId {
        let n = SEQUENCE.fetch_add(1, Ordering::Relaxed);
        ItemId(format!("{n:016x}{}", self.id_tag))
    }

    /// Offers `items` (time, payload) under new ids, which it returns: in batches of at most
    /// [`OFFER_BATCH`] items and [`OFFER_BATCH_BYTES`] bytes, one script call each, in order.
    /// Runs detached: once polled, every batch is sent even if the caller goes away (the rest
    /// finishes in a task of its own). No items: nothing is sent.
    pub(crate) async fn offer(
        self: &Arc<Core>,
        when: When,
        items: Vec<(u64, Vec<u8>)>,
    ) -> Result<Vec<ItemId>> {
        if items.is_empty() {
            return Ok(Vec::new());
        }
        self.ready_to_use()?;
        let offers: Vec<Offer> = items
            .into_iter()
            .map(|(time, payload)| Offer {
                id: self.new_id(),
                time,
                payload,
            })
            .collect();
        let ids = offers.iter().map(|o| o.id.clone()).collect();
        let core = self.clone();
        let span = self.span(Op::Offer, None);
        let sent = crate::task::detached(Box::pin(tracing::Instrument::instrument(
            async move {
                let mut start = 0;
                while start < offers.len() {
                    let mut end = start;
                    let mut bytes = 0;
                    while end < offers.len()
                        && end - start < OFFER_BATCH
                        && (end == start || bytes + offers[end].payload.len() <= OFFER_BATCH_BYTES)
                    {
                        bytes += offers[end].payload.len();
                        end += 1;
                    }
                    core.offer_batch(when, &offers[start..end]).await?;
                    start = end;
                }
                Ok(())
            },
            span.clone(),
        )))
        .await?;
        span.record("outcome", if sent.is_ok() { "offered" } else { "error" });
        sent.map(|()| ids)
    }

    async fn offer_batch(&self, when: When, batch: &[Offer]) -> Result<()> {
        let keys = &self.keys;
        let mut invocation = DELAY_OFFER.invocation();
        invocation
            .key(&*keys.delayed)
            .key(&*keys.items)
            .key(&*keys.ready)
            .key(&*keys.delay_channel)
            .key(&*keys.ready_channel)
            .key(&*keys.due)
            .arg(match when {
                When::In => "in",
                When::At => "at",
            });
        for offer in batch {
            invocation
                .arg(offer.id.as_str())
                .arg(offer.time)
                .arg(&offer.payload[..]);
        }
        invocation.arg(self.client.inner.conn.publish_command());
        let _: Vec<i64> = self
            .script(&invocation, "offering to a delayed queue")
            .await?;
        self.site()
            .count(metrics::QUEUE_OFFERED, &[], batch.len() as u64);
        Ok(())
    }

    /// One plain read command on the connection.
    pub(crate) async fn count(&self, cmd: &str, key: &str, context: &'static str) -> Result<u64> {
        self.read(redis::cmd(cmd).arg(key), context).await
    }

    /// Offers one item (see [`Core::offer`]) and returns its id.
    pub(crate) async fn offer_one(
        self: &Arc<Core>,
        when: When,
        time: u64,
        payload: Vec<u8>,
    ) -> Result<ItemId> {
        Ok(self.offer(when, vec![(time, payload)]).await?.remove(0))
    }

    /// KEYS of the requeue script (`scripts/queue_requeue.lua`).
    pub(crate) fn requeue_keys(&self) -> Vec<Arc<str>> {
        let k = &self.keys;
        let first = [&k.ready, &k.items, &k.unacked, &k.attempts, &k.delayed];
        let rest = [&k.ready_channel, &k.delay_channel, &k.due];
        first.into_iter().chain(rest).cloned().collect()
    }
}

/// Encodes an item and checks its size.
pub(crate) fn encode<T, C: crate::codec::Codec<T>>(codec: &C, item: &T) -> Result<Vec<u8>> {
    let payload = codec.encode(item)?;
    if payload.len() > MAX_ITEM_SIZE {
        return Err(Error::invalid(
            "item",
            format!(
                "the encoded item is {} bytes long; the limit is {MAX_ITEM_SIZE} bytes",
                payload.len()
            ),
        ));
    }
    Ok(payload)
}

/// Checks a delay and returns it in microseconds.
pub(crate) fn check_delay(delay: Duration) -> Result<u64> {
    if delay > MAX_DELAY {
        return Err(Error::invalid(
            "delay",
            format!("{delay:?} is longer than the maximum {MAX_DELAY:?}"),
        ));
    }
    Ok(delay.as_micros() as u64)
}

/// Converts a delay in seconds given as a float, rejecting what no `Duration` can be.
pub(crate) fn delay_from_secs_f64(secs: f64) -> Result<Duration> {
    let problem = if !secs.is_finite() {
        "is not a number of seconds; give a finite delay".to_owned()
    } else if secs < 0.0 {
        "is negative; give a delay of zero or more".to_owned()
    } else if secs > MAX_DELAY.as_secs_f64() {
        format!("is longer than the maximum {MAX_DELAY:?}")
    } else {
        return Ok(Duration::from_secs_f64(secs));
    };
    Err(Error::invalid("delay", format!("{secs} seconds {problem}")))
}

/// Checks a due time and returns it in milliseconds since the epoch, rounded up.
pub(crate) fn check_due(when: SystemTime) -> Result<u64> {
    let since_epoch = when.duration_since(UNIX_EPOCH).map_err(|_| {
        Error::invalid(
            "due time",
            "the time is before 1970-01-01 (the unix epoch); give a later time",
        )
    })?;
    if let Ok(ahead) = when.duration_since(SystemTime::now()) {
        if ahead > MAX_DELAY {
            return Err(Error::invalid(
                "due time",
                format!("the time is {ahead:?} ahead; the maximum is {MAX_DELAY:?}"),
            ));
        }
    }
    Ok(since_epoch.as_micros().div_ceil(1000) as u64)
}

/// Checks a visibility timeout and returns it in milliseconds.
pub(crate) fn check_visibility(timeout: Duration) -> Result<u64> {
    let hint = format!("use at least 1 ms and at most {MAX_LEASE:?}");
    check_range("visibility timeout", timeout, MS..=MAX_LEASE, &hint)?;
    Ok(timeout.as_millis() as u64)
}

#[cfg(test)]
#[path = "queue_tests.rs"]
mod tests;
