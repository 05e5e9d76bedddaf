//! The durable delayed queue: items become ready for [`BlockingQueue`](super::BlockingQueue)
//! consumers when their delay has passed by the Redis server's clock.

use std::borrow::Borrow;
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::{
    check_delay, check_due, delay_from_secs_f64, encode, Core, ItemId, When, DELAY_PENDING,
    DELAY_REMOVE,
};
use crate::client::{Client, Object};
use crate::codec::{Codec, Json};
use crate::error::Result;
use crate::keys::check_name;
use crate::scripts::Invoke;
use crate::wait::unexpected;

/// A durable delayed queue: each item is kept in Redis until its delay has passed, then moves
/// to the ready list of the [`BlockingQueue`](crate::BlockingQueue) of the same name, where
/// consumers take it.
///
/// Made by [`Client::delayed_queue`]. Handles are cheap to clone and share the client.
///
/// * **Durable:** an offer is one script call; once it returns, the item is in Redis (as durable
///   as the server's persistence settings make it — use AOF with `appendfsync always` for no
///   loss on a crash). No state lives only in a client.
/// * **Server clock:** due times are computed by the script from the Redis server's `TIME`
///   (rounded up to the next millisecond), never from the client's clock, so items are never
///   ready early and clients with skewed clocks agree. [`DelayedQueue::offer_at`] takes an
///   absolute time, which is compared with the server clock.
/// * **Delivery:** every client that has a handle for the queue runs a transfer agent (see the
///   [`BlockingQueue`](crate::BlockingQueue) docs); items that came due while no client ran are
///   moved as soon as one starts. Items due at the same time are delivered in offer order when
///   offered by one client.
/// * **Distinct items:** every offer gets its own [`ItemId`]; offering equal items twice queues
///   two items.
/// * **Limits:** an encoded item is at most [`DelayedQueue::MAX_ITEM_SIZE`] bytes, a delay at
///   most [`DelayedQueue::MAX_DELAY`].
///
/// # Keys in Redis
///
/// A queue called `name` is kept in these keys, which all share the hash tag `{name}` (one
/// Redis Cluster slot). A name with its own hash tag keeps it, as for every object:
/// `jobs:{eu}` is kept in `latchkey_queue:jobs:{eu}` and so on, in the slot of `{eu}`.
///
/// | key | type | content |
/// |-----|------|---------|
/// | `latchkey_delay_queue_timeout:{name}` | zset | item id → due time (ms since the epoch, Redis clock) |
/// | `latchkey_queue:{name}` | list | ids of ready items, oldest first |
/// | `latchkey_queue_items:{name}` | hash | item id → payload (the encoded item) |
/// | `latchkey_queue_unacked:{name}` | zset | id of a reliable delivery → visibility deadline (ms) |
/// | `latchkey_queue_attempts:{name}` | hash | item id → reliable deliveries so far |
/// | `latchkey_queue_dead:{name}` | hash | item id → payload that could not be decoded |
/// | `latchkey_queue_due:{name}` | hash | item id → due time (ms), until the item is finished ([`Delivery::due_time`](crate::Delivery::due_time)) |
///
/// and two pub/sub channels: `latchkey_delay_queue_channel:{name}` (the due time of an item that
/// became the earliest, for the transfer agents) and `latchkey_queue_channel:{name}` (how many
/// ids were pushed to the ready list, for consumers).
///
/// The names follow Redisson's `RDelayedQueue` (`redisson_delay_queue_timeout:{name}`,
/// `redisson_delay_queue_channel:{name}`) with a `latchkey_` prefix rather than Redisson's own:
/// Redisson stores Java-codec values with a random prefix in its zset and raw values in the
/// destination list, and removes them with an O(n) `LREM` per item, so the two layouts cannot
/// share keys without corrupting each other.
///
/// Ids are `<16 hex digits of a process-wide counter><16 hex digits of the client id>`; the id
/// moves between the structures and the payload stays in the item hash until the item is
/// finished (taken, acknowledged or removed).
///
/// # Examples
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> latchkey_redis::Result<()> {
/// use std::time::Duration;
///
/// #[derive(serde::Serialize, serde::Deserialize)]
/// struct CloseOrder {
///     order: u64,
/// }
///
/// let client = latchkey_redis::Client::connect("redis://127.0.0.1:6379").await?;
/// let delayed = client.delayed_queue::<CloseOrder>("orders-to-close");
/// delayed.offer(&CloseOrder { order: 1001 }, Duration::from_secs(30 * 60)).await?;
///
/// // Elsewhere, a consumer:
/// let ready = client.blocking_queue::<CloseOrder>("orders-to-close");
/// let job = ready.take().await?;
/// # Ok(())
/// # }
/// ```
pub struct DelayedQueue<T, C = Json> {
    core: Arc<Core>,
    codec: Arc<C>,
    _items: PhantomData<fn(T) -> T>,
}

impl<T, C> Clone for DelayedQueue<T, C> {
    fn clone(&self) -> Self {
        DelayedQueue {
            core: self.core.clone(),
            codec: self.codec.clone(),
            _items: PhantomData,
        }
    }
}

impl<T, C> fmt::Debug for DelayedQueue<T, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DelayedQueue")
            .field("name", &self.core.name)
            .field("item", &std::any::type_name::<T>())
            .finish()
    }
}

/// An item waiting in a [`DelayedQueue`], as listed by [`DelayedQueue::pending`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PendingItem<T> {
    /// The item's id.
    pub id: ItemId,
    /// When it becomes ready, by the Redis server's clock.
    pub due: SystemTime,
    /// The item.
    pub item: T,
}

impl Client {
    /// A delayed queue named `name` whose items are `T`, stored as JSON.
    ///
    /// Making the handle sends nothing; the name is checked when the handle is used. Inside a
    /// tokio runtime it starts this client's transfer agent for the queue (otherwise the first
    /// use does).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(client: latchkey_redis::Client) -> latchkey_redis::Result<()> {
    /// use std::time::Duration;
    ///
    /// let queue = client.delayed_queue::<String>("reminders");
    /// queue.offer(&"stand up".to_owned(), Duration::from_secs(3600)).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn delayed_queue<T>(&self, name: impl Into<String>) -> DelayedQueue<T>
    where
        T: Serialize + DeserializeOwned,
    {
        self.delayed_queue_with_codec(name, Json)
    }

    /// A delayed queue named `name` whose items are encoded with `codec`.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(client: latchkey_redis::Client) -> latchkey_redis::Result<()> {
    /// let queue = client.delayed_queue_with_codec::<u64, _>("ids", latchkey_redis::Json);
    /// # Ok(())
    /// # }
    /// ```
    pub fn delayed_queue_with_codec<T, C>(
        &self,
        name: impl Into<String>,
        codec: C,
    ) -> DelayedQueue<T, C>
    where
        C: Codec<T>,
    {
        DelayedQueue {
            core: Core::new(self.clone(), name.into()),
            codec: Arc::new(codec),
            _items: PhantomData,
        }
    }
}

/// The queue's limits, on `DelayedQueue<()>` so that `DelayedQueue::MAX_DELAY` names them
/// without an item type; they are the same for every item type and codec.
impl DelayedQueue<()> {
    /// The largest encoded item a queue accepts (1 MiB), the same as
    /// [`BlockingQueue::MAX_ITEM_SIZE`](crate::BlockingQueue::MAX_ITEM_SIZE). Larger items are
    /// rejected with [`Error::InvalidArgument`](crate::Error::InvalidArgument) before anything
    /// is sent.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(latchkey_redis::DelayedQueue::MAX_ITEM_SIZE, 1024 * 1024);
    /// ```
    pub const MAX_ITEM_SIZE: usize = super::MAX_ITEM_SIZE;

    /// The longest delay a delayed queue accepts (3650 days). Longer delays, and due times
    /// further in the future, are rejected with
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// assert_eq!(latchkey_redis::DelayedQueue::MAX_DELAY, Duration::from_secs(3650 * 24 * 3600));
    /// ```
    pub const MAX_DELAY: Duration = super::MAX_DELAY;
}

impl<T, C: Codec<T>> DelayedQueue<T, C> {
    /// The queue's name (shared with its [`BlockingQueue`](crate::BlockingQueue)).
    pub fn name(&self) -> &str {
        &self.core.name
    }

    /// Queues `item` to become ready `delay` from now by the Redis server's clock. A zero delay
    /// makes it ready at once (behind items already overdue). Returns the item's id.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future does not cancel an offer it has started (once polled): the item is
    /// queued unless an error occurs (then it is not). Only the id is lost with the future.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a bad name, a delay over
    /// [`DelayedQueue::MAX_DELAY`](crate::DelayedQueue::MAX_DELAY) or an encoded item over
    /// [`DelayedQueue::MAX_ITEM_SIZE`](crate::DelayedQueue::MAX_ITEM_SIZE); [`Error::Codec`](crate::Error::Codec) if the
    /// item cannot be encoded (nothing is sent in these cases);
    /// [`Error::WrongType`](crate::Error::WrongType) if a key of the queue holds another type
    /// (nothing changes); connection errors. [`Error::Timeout`](crate::Error::Timeout) leaves the
    /// outcome uncertain.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(queue: latchkey_redis::DelayedQueue<String>) -> latchkey_redis::Result<()> {
    /// use std::time::Duration;
    /// let id = queue.offer(&"ping".to_owned(), Duration::from_millis(1500)).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn offer(&self, item: &T, delay: Duration) -> Result<ItemId> {
        check_name(&self.core.name)?;
        let time = check_delay(delay)?;
        let payload = encode(&*self.codec, item)?;
        self.core.offer_one(When::In, time, payload).await
    }

    /// Queues `item` to become ready at `when`, compared with the Redis server's clock. A time in
    /// the past makes it ready at once. Returns the item's id.
    ///
    /// # Cancel safety
    ///
    /// As [`DelayedQueue::offer`].
    ///
    /// # Errors
    ///
    /// As [`DelayedQueue::offer`]; [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a
    /// time before 1970 or more than [`DelayedQueue::MAX_DELAY`](crate::DelayedQueue::MAX_DELAY) ahead.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(queue: latchkey_redis::DelayedQueue<String>) -> latchkey_redis::Result<()> {
    /// use std::time::{Duration, SystemTime};
    /// let at = SystemTime::now() + Duration::from_secs(60);
    /// queue.offer_at(&"in a minute".to_owned(), at).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn offer_at(&self, item: &T, when: SystemTime) -> Result<ItemId> {
        check_name(&self.core.name)?;
        let time = check_due(when)?;
        let payload = encode(&*self.codec, item)?;
        self.core.offer_one(When::At, time, payload).await
    }

    /// Like [`DelayedQueue::offer`], with the delay in seconds as a float, for delays that come
    /// from configuration or other languages. Negative, NaN, infinite and too large values are
    /// rejected rather than panicking or wrapping.
    ///
    /// # Cancel safety
    ///
    /// As [`DelayedQueue::offer`].
    ///
    /// # Errors
    ///
    /// As [`DelayedQueue::offer`]; [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a
    /// negative, NaN or infinite delay.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(queue: latchkey_redis::DelayedQueue<String>) -> latchkey_redis::Result<()> {
    /// queue.offer_after_secs(&"soon".to_owned(), 2.5).await?;
    /// assert!(queue.offer_after_secs(&"never".to_owned(), f64::NAN).await.unwrap_err().is_invalid_argument());
    /// # Ok(())
    /// # }
    /// ```
    pub async fn offer_after_secs(&self, item: &T, secs: f64) -> Result<ItemId> {
        let delay = delay_from_secs_f64(secs)?;
        self.offer(item, delay).await
    }

    /// Queues many items, each with its own delay; returns their ids in order.
    ///
    /// Every item is checked and encoded before anything is sent, so bad input queues nothing.
    /// The items are then sent in order, in script calls of up to 1000 items (and 4 MiB) each:
    /// each call is atomic, the whole batch is not. Items with the same due time are delivered
    /// in the order given.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future does not cancel the offers it has started (once polled): every item
    /// is sent unless an error stops it.
    ///
    /// # Errors
    ///
    /// As [`DelayedQueue::offer`]. If an error occurs after some calls succeeded (a lost
    /// connection), the items of those calls are queued and the rest are not.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(queue: latchkey_redis::DelayedQueue<u32>) -> latchkey_redis::Result<()> {
    /// use std::time::Duration;
    /// let ids = queue
    ///     .offer_all((0..100).map(|n| (n, Duration::from_millis(10 * n as u64))))
    ///     .await?;
    /// assert_eq!(ids.len(), 100);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn offer_all<I, B>(&self, items: I) -> Result<Vec<ItemId>>
    where
        I: IntoIterator<Item = (B, Duration)>,
        B: Borrow<T>,
    {
        check_name(&self.core.name)?;
        let mut offers = Vec::new();
        for (item, delay) in items {
            offers.push((check_delay(delay)?, encode(&*self.codec, item.borrow())?));
        }
        self.core.offer(When::In, offers).await
    }

    /// Cancels an item that is still waiting for its due time. Returns `true` if it was
    /// removed, `false` if it is no longer waiting (already ready or taken, removed before, or
    /// unknown); nothing changes then.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future does not cancel a removal it has started (once polled).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a bad name,
    /// [`Error::WrongType`](crate::Error::WrongType), connection errors.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(queue: latchkey_redis::DelayedQueue<String>) -> latchkey_redis::Result<()> {
    /// use std::time::Duration;
    /// let id = queue.offer(&"maybe".to_owned(), Duration::from_secs(600)).await?;
    /// assert!(queue.remove(&id).await?);
    /// assert!(!queue.remove(&id).await?);
    /// # Ok(())
    /// # }
    /// ```
    #[tracing::instrument(level = "debug", name = "remove", skip_all, fields(primitive = "queue", name = %self.core.name))]
    pub async fn remove(&self, id: &ItemId) -> Result<bool> {
        check_name(&self.core.name)?;
        let core = self.core.clone();
        let id = id.clone();
        crate::task::detached(Box::pin(async move {
            let mut invocation = DELAY_REMOVE.invocation();
            invocation
                .key(&*core.keys.delayed)
                .key(&*core.keys.items)
                .key(&*core.keys.due)
                .arg(id.as_str());
            let removed: i64 = core
                .script(&invocation, "removing from a delayed queue")
                .await?;
            Ok(removed == 1)
        }))
        .await?
    }

    /// How many items wait for their due time (not counting ready or taken ones).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a read.
    ///
    /// # Errors
    ///
    /// [`Error::WrongType`](crate::Error::WrongType), connection errors.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(queue: latchkey_redis::DelayedQueue<String>) -> latchkey_redis::Result<()> {
    /// println!("{} items waiting", queue.len().await?);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn len(&self) -> Result<u64> {
        self.core
            .count("ZCARD", &self.core.keys.delayed, "counting a delayed queue")
            .await
    }

    /// Whether no item waits for its due time.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a read.
    ///
    /// # Errors
    ///
    /// As [`DelayedQueue::len`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(queue: latchkey_redis::DelayedQueue<String>) -> latchkey_redis::Result<()> {
    /// if queue.is_empty().await? {
    ///     println!("nothing scheduled");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn is_empty(&self) -> Result<bool> {
        Ok(self.len().await? == 0)
    }

    /// The earliest `limit` items waiting for their due time, earliest first, with their due
    /// times (read in one script call, so the list is consistent).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a read.
    ///
    /// # Errors
    ///
    /// [`Error::Codec`](crate::Error::Codec) if an item cannot be decoded,
    /// [`Error::WrongType`](crate::Error::WrongType), connection errors.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(queue: latchkey_redis::DelayedQueue<String>) -> latchkey_redis::Result<()> {
    /// for pending in queue.pending(10).await? {
    ///     println!("{} at {:?}: {}", pending.id, pending.due, pending.item);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn pending(&self, limit: usize) -> Result<Vec<PendingItem<T>>> {
        check_name(&self.core.name)?;
        let mut invocation = DELAY_PENDING.invocation();
        invocation
            .key(&*self.core.keys.delayed)
            .key(&*self.core.keys.items)
            .arg(limit.min(u32::MAX as usize));
        let reply: Vec<redis::Value> = self
            .core
            .script(&invocation, "listing a delayed queue")
            .await?;
        let mut pending = Vec::with_capacity(reply.len() / 3);
        for triple in reply.chunks(3) {
            let [redis::Value::BulkString(id), redis::Value::Int(due_ms), redis::Value::BulkString(payload)] =
                triple
            else {
                return Err(unexpected("the pending script", triple));
            };
            pending.push(PendingItem {
                id: ItemId(String::from_utf8_lossy(id).into_owned()),
                due: UNIX_EPOCH + Duration::from_millis((*due_ms).max(0) as u64),
                item: self.codec.decode(payload)?,
            });
        }
        Ok(pending)
    }
}
