//! The blocking queue: consumers of the items a [`DelayedQueue`](super::DelayedQueue) makes
//! ready (or that are put in directly), with at-least-once `take` and at-most-once
//! `take_at_most_once`.

use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::{FromRedisValue, Value};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::time::Instant;

use super::{
    check_delay, check_visibility, encode, Core, ItemId, When, DEFAULT_VISIBILITY_TIMEOUT,
    QUEUE_ACK, QUEUE_DEAD, QUEUE_EXTEND, QUEUE_REQUEUE, QUEUE_TAKE,
};
use crate::client::{Client, Object};
use crate::codec::{Codec, Json};
use crate::error::Result;
use crate::keys::check_name;
use crate::metrics::{self, Op};
use crate::pubsub::WakePolicy;
use crate::scripts::Invoke;
use crate::task::Task;
use crate::wait::{deadline_after, unbounded, unexpected, Attempt, Waiting};

/// The longest a waiting consumer sleeps between two attempts. A message on the ready channel
/// normally wakes it long before; this bounds the wait when a message is lost.
const CONSUMER_PARK: Duration = Duration::from_secs(2);

/// A queue of ready items in Redis, shared by any number of consumers in any number of
/// processes: the destination of the [`DelayedQueue`](crate::DelayedQueue) of the same name.
///
/// Made by [`Client::blocking_queue`]. Handles are cheap to clone.
///
/// # Two ways to consume
///
/// * [`BlockingQueue::take`] / [`BlockingQueue::poll`] return a [`Delivery`] and keep the item in
///   Redis, invisible to other consumers, until it is acknowledged with [`Delivery::ack`]:
///   **at least once**. A delivery that is dropped or released ([`Delivery::nack`]) goes back to
///   the head of the queue at once; one whose consumer died comes back after the visibility
///   timeout ([`BlockingQueue::with_visibility_timeout`], default
///   [`BlockingQueue::DEFAULT_VISIBILITY_TIMEOUT`]), counted by [`Delivery::attempt`].
///   Duplicates happen only in that case (or when processing outlives the visibility timeout),
///   so make the processing idempotent or check [`Delivery::attempt`]. An item delivered
///   [`with_max_deliveries`](BlockingQueue::with_max_deliveries) times without an ack goes to
///   the dead letters instead of being delivered again.
/// * [`BlockingQueue::take_at_most_once`] / [`BlockingQueue::poll_at_most_once`] remove the item
///   from Redis and return it: **at most once** (Redisson's `take`/`poll`). If the process
///   crashes (or the reply is lost) after Redis removed the item and before the caller got it,
///   it is gone. Dropping the future is safe, though: an item already removed for a caller who
///   went away is put back at the head of the queue.
///
/// Waiting consumers are woken through pub/sub when items are pushed (and look again at least
/// every 2 s in case a message was lost). Blocking commands (`BLPOP`, `BLMOVE`) are not used, so
/// waiting consumers share the client's connections and cost nothing while idle.
///
/// Items that cannot be decoded are moved to the dead letters (the hash
/// `latchkey_queue_dead:{name}`, id → payload, with the codec's error in
/// `latchkey_queue_dead_reason:{name}`; see [`BlockingQueue::dead_letters`]), never lost and
/// never delivered again, and the consumer goes on to the next item: a bad item never ends a
/// `while let Ok(delivery) = queue.take().await` loop.
///
/// # Delivery from the delayed queue
///
/// Every client with a handle for the queue (delayed or blocking) runs a transfer agent that
/// moves due items to this queue in bounded batches (at most 1000 per script call, repeated
/// until none is due, so even 100 000 items due at once never block Redis for long), woken by a
/// timer armed for the earliest due time, by pub/sub when an earlier item arrives, and by a
/// fallback poll every second, so delivery never depends on a message arriving. The same agent
/// returns deliveries whose visibility timeout ran out. The transfer is atomic and idempotent:
/// agents of several clients racing each other move every item exactly once. An agent starts
/// with the client's first handle for the queue name and runs until the client shuts down (the
/// last clone of the client and of its handles is dropped).
///
/// # Examples
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> latchkey_redis::Result<()> {
/// use std::time::Duration;
///
/// let client = latchkey_redis::Client::connect("redis://127.0.0.1:6379").await?;
/// let queue = client
///     .blocking_queue::<String>("emails")
///     .with_visibility_timeout(Duration::from_secs(60))?;
/// while let Ok(delivery) = queue.take().await {
///     println!("sending {}", *delivery);
///     delivery.ack().await?;
/// }
/// # Ok(())
/// # }
/// ```
pub struct BlockingQueue<T, C = Json> {
    core: Arc<Core>,
    codec: Arc<C>,
    visibility: Duration,
    /// Deliveries of an item after which it goes to the dead letters; `None`: no bound.
    max_deliveries: Option<u32>,
    _items: PhantomData<fn(T) -> T>,
}

impl<T, C> Clone for BlockingQueue<T, C> {
    fn clone(&self) -> Self {
        BlockingQueue {
            core: self.core.clone(),
            codec: self.codec.clone(),
            visibility: self.visibility,
            max_deliveries: self.max_deliveries,
            _items: PhantomData,
        }
    }
}

/// An item moved to a queue's dead letters, from [`BlockingQueue::dead_letters`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeadLetter {
    /// The item's id.
    pub id: ItemId,
    /// The item as stored (encoded).
    pub payload: Vec<u8>,
    /// Why it was dead-lettered: the codec's error, or the deliveries without an ack.
    pub reason: String,
}

/// What one look at the queue found.
enum Found<R> {
    Item(R),
    Empty,
    /// The item found went to the dead letters: look again at once.
    DeadLettered,
}

impl<T, C> fmt::Debug for BlockingQueue<T, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BlockingQueue")
            .field("name", &self.core.name)
            .field("item", &std::any::type_name::<T>())
            .field("visibility_timeout", &self.visibility)
            .field("max_deliveries", &self.max_deliveries)
            .finish()
    }
}

impl Client {
    /// The blocking queue named `name` whose items are `T`, stored as JSON: the destination of
    /// [`Client::delayed_queue`] with the same name.
    ///
    /// Making the handle sends nothing; the name is checked when the handle is used. Inside a
    /// tokio runtime it starts this client's transfer agent for the queue (otherwise the first
    /// use does).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(client: latchkey_redis::Client) -> latchkey_redis::Result<()> {
    /// let queue = client.blocking_queue::<String>("reminders");
    /// let next = queue.take().await?;
    /// next.ack().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn blocking_queue<T>(&self, name: impl Into<String>) -> BlockingQueue<T>
    where
        T: Serialize + DeserializeOwned,
    {
        self.blocking_queue_with_codec(name, Json)
    }

    /// The blocking queue named `name` whose items are decoded with `codec`.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(client: latchkey_redis::Client) -> latchkey_redis::Result<()> {
    /// let queue = client.blocking_queue_with_codec::<u64, _>("ids", latchkey_redis::Json);
    /// # Ok(())
    /// # }
    /// ```
    pub fn blocking_queue_with_codec<T, C>(
        &self,
        name: impl Into<String>,
        codec: C,
    ) -> BlockingQueue<T, C>
    where
        C: Codec<T>,
    {
        BlockingQueue {
            core: Core::new(self.clone(), name.into()),
            codec: Arc::new(codec),
            visibility: DEFAULT_VISIBILITY_TIMEOUT,
            max_deliveries: None,
            _items: PhantomData,
        }
    }
}

/// The queue's limits, on `BlockingQueue<()>` so that `BlockingQueue::MAX_ITEM_SIZE` names them
/// without an item type; they are the same for every item type and codec.
impl BlockingQueue<()> {
    /// The largest encoded item a queue accepts (1 MiB), the same as
    /// [`DelayedQueue::MAX_ITEM_SIZE`](crate::DelayedQueue::MAX_ITEM_SIZE). Larger items are
    /// rejected with [`Error::InvalidArgument`](crate::Error::InvalidArgument) before anything
    /// is sent; keep big payloads elsewhere and queue a reference to them.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(latchkey_redis::BlockingQueue::MAX_ITEM_SIZE, 1024 * 1024);
    /// ```
    pub const MAX_ITEM_SIZE: usize = super::MAX_ITEM_SIZE;

    /// How long a reliable delivery stays invisible to other consumers unless acknowledged,
    /// released or extended, unless set with [`BlockingQueue::with_visibility_timeout`] (30 s).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// assert_eq!(latchkey_redis::BlockingQueue::DEFAULT_VISIBILITY_TIMEOUT, Duration::from_secs(30));
    /// ```
    pub const DEFAULT_VISIBILITY_TIMEOUT: Duration = DEFAULT_VISIBILITY_TIMEOUT;
}

impl<T: Send + 'static, C: Codec<T>> BlockingQueue<T, C> {
    /// The queue's name.
    pub fn name(&self) -> &str {
        &self.core.name
    }

    /// This handle with another visibility timeout for its reliable deliveries (default
    /// [`BlockingQueue::DEFAULT_VISIBILITY_TIMEOUT`], 30 s): how long a delivery stays invisible
    /// to other consumers before it is delivered again, unless acknowledged, released or
    /// extended first. The value is checked here, not when a reliable delivery is taken.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) unless `timeout` is between
    /// 1 ms and [`MAX_LEASE`](crate::MAX_LEASE); nothing is returned then (the handle is
    /// consumed; clone it first to keep it).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(client: latchkey_redis::Client) -> latchkey_redis::Result<()> {
    /// use std::time::Duration;
    /// let queue = client
    ///     .blocking_queue::<String>("slow-jobs")
    ///     .with_visibility_timeout(Duration::from_secs(600))?;
    /// assert_eq!(queue.visibility_timeout(), Duration::from_secs(600));
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_visibility_timeout(mut self, timeout: Duration) -> Result<Self> {
        check_visibility(timeout)?;
        self.visibility = timeout;
        Ok(self)
    }

    /// The visibility timeout of this handle's reliable deliveries (see
    /// [`BlockingQueue::with_visibility_timeout`]).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(client: latchkey_redis::Client) {
    /// let queue = client.blocking_queue::<String>("jobs");
    /// assert_eq!(queue.visibility_timeout(), latchkey_redis::BlockingQueue::DEFAULT_VISIBILITY_TIMEOUT);
    /// # }
    /// ```
    pub fn visibility_timeout(&self) -> Duration {
        self.visibility
    }

    /// The visibility timeout in milliseconds, as the scripts take it (in range: checked when
    /// set).
    fn visibility_ms(&self) -> u64 {
        self.visibility.as_millis() as u64
    }

    /// Appends `item` to the queue, ready at once (behind items of the delayed queue that are
    /// already overdue). Returns its id.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future does not cancel a put it has started (once polled): the item is
    /// queued unless an error occurs. Only the id is lost with the future.
    ///
    /// # Errors
    ///
    /// As [`DelayedQueue::offer`](crate::DelayedQueue::offer).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(queue: latchkey_redis::BlockingQueue<String>) -> latchkey_redis::Result<()> {
    /// queue.put(&"now".to_owned()).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn put(&self, item: &T) -> Result<ItemId> {
        check_name(&self.core.name)?;
        let payload = encode(&*self.codec, item)?;
        self.core.offer_one(When::In, 0, payload).await
    }

    /// Takes the item at the head of the queue as a [`Delivery`], waiting as long as it takes.
    /// The item stays in Redis, invisible to other consumers, until the delivery is acknowledged
    /// ([`Delivery::ack`]), released ([`Delivery::nack`], or dropped), or its visibility timeout
    /// runs out — then it is delivered again: at least once (see the type docs). An item that
    /// cannot be decoded, or that was delivered
    /// [`max_deliveries`](BlockingQueue::with_max_deliveries) times already, goes to the dead
    /// letters, and the call goes on with the next item.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: if the future is dropped after Redis handed an item over, the delivery is
    /// released and the item goes back to the head of the queue at once.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a bad name;
    /// [`Error::WrongType`](crate::Error::WrongType); connection errors (retry later; after
    /// [`Error::Timeout`](crate::Error::Timeout) an item may have been handed over, and it is
    /// delivered again after the visibility timeout).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(queue: latchkey_redis::BlockingQueue<String>) -> latchkey_redis::Result<()> {
    /// while let Ok(delivery) = queue.take().await {
    ///     println!("{} (attempt {})", delivery.item(), delivery.attempt());
    ///     delivery.ack().await?;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn take(&self) -> Result<Delivery<T>> {
        let visibility = self.visibility_ms();
        let claim = || self.claim_once(visibility);
        Ok(unbounded(self.receive(Op::Take, None, claim).await?))
    }

    /// Like [`BlockingQueue::take`], waiting at most `timeout`; `Ok(None)` if no item came.
    /// `Duration::ZERO` looks once without waiting.
    ///
    /// # Cancel safety
    ///
    /// As [`BlockingQueue::take`].
    ///
    /// # Errors
    ///
    /// As [`BlockingQueue::take`]; [`Error::InvalidArgument`](crate::Error::InvalidArgument) if
    /// `timeout` overflows the clock.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(queue: latchkey_redis::BlockingQueue<String>) -> latchkey_redis::Result<()> {
    /// use std::time::Duration;
    /// if let Some(delivery) = queue.poll(Duration::from_secs(1)).await? {
    ///     delivery.ack().await?;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn poll(&self, timeout: Duration) -> Result<Option<Delivery<T>>> {
        let visibility = self.visibility_ms();
        let deadline = deadline_after(timeout, "`take`")?;
        self.receive(Op::Poll, Some((timeout, deadline)), || {
            self.claim_once(visibility)
        })
        .await
    }

    /// Takes the item at the head of the queue, waiting as long as it takes for one, and removes
    /// it from Redis: **at most once** (Redisson's `take`). If this process dies, or the reply
    /// is lost, after Redis removed the item, the item is gone; use [`BlockingQueue::take`]
    /// unless losing an item is fine. An item that cannot be decoded goes to the dead letters,
    /// and the call goes on with the next item.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: no item is lost when the future is dropped. An item that Redis already
    /// handed over for this call is put back at the head of the queue.
    ///
    /// # Errors
    ///
    /// As [`BlockingQueue::take`] (after [`Error::Timeout`](crate::Error::Timeout) the item may
    /// have been taken and lost).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(queue: latchkey_redis::BlockingQueue<String>) -> latchkey_redis::Result<()> {
    /// let item: String = queue.take_at_most_once().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn take_at_most_once(&self) -> Result<T> {
        Ok(unbounded(
            self.receive(Op::Take, None, || self.pop_once()).await?,
        ))
    }

    /// Like [`BlockingQueue::take_at_most_once`], waiting at most `timeout`; `Ok(None)` if no
    /// item came. `Duration::ZERO` looks once without waiting.
    ///
    /// # Cancel safety
    ///
    /// As [`BlockingQueue::take_at_most_once`].
    ///
    /// # Errors
    ///
    /// As [`BlockingQueue::take_at_most_once`];
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) if `timeout` overflows the clock.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(queue: latchkey_redis::BlockingQueue<String>) -> latchkey_redis::Result<()> {
    /// use std::time::Duration;
    /// if let Some(item) = queue.poll_at_most_once(Duration::from_secs(1)).await? {
    ///     println!("{item}");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn poll_at_most_once(&self, timeout: Duration) -> Result<Option<T>> {
        let deadline = deadline_after(timeout, "`take`")?;
        self.receive(Op::Poll, Some((timeout, deadline)), || self.pop_once())
            .await
    }

    /// This handle with a bound on deliveries: an item delivered `max` times without an ack
    /// (its consumers crashed, or it was released each time) goes to the dead letters instead
    /// of being delivered again, with the reason. Checked here, not when the queue is used.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a bound of 0; nothing is
    /// returned then (the handle is consumed).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(client: latchkey_redis::Client) -> latchkey_redis::Result<()> {
    /// let queue = client.blocking_queue::<String>("emails").with_max_deliveries(5)?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_max_deliveries(mut self, max: u32) -> Result<Self> {
        if max == 0 {
            return Err(crate::Error::invalid(
                "max deliveries",
                "0 would deliver nothing; give at least 1",
            ));
        }
        self.max_deliveries = Some(max);
        Ok(self)
    }

    /// The items in the dead letters (at most `limit`), with why they are there: items that
    /// cannot be decoded, and items delivered too often without an ack. Read-only.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: reads.
    ///
    /// # Errors
    ///
    /// [`Error::WrongType`](crate::Error::WrongType) if a dead-letter key holds another type;
    /// connection errors.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(queue: latchkey_redis::BlockingQueue<String>) -> latchkey_redis::Result<()> {
    /// for dead in queue.dead_letters(10).await? {
    ///     eprintln!("{}: {}", dead.id.as_str(), dead.reason);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn dead_letters(&self, limit: usize) -> Result<Vec<DeadLetter>> {
        let core = &self.core;
        let context = "reading dead letters";
        let mut scan = redis::cmd("HSCAN");
        scan.arg(&*core.keys.dead)
            .arg(0)
            .arg("COUNT")
            .arg(limit.max(1));
        let (_, letters): (u64, Vec<(String, Vec<u8>)>) = core.read(&scan, context).await?;
        let letters: Vec<_> = letters.into_iter().take(limit).collect();
        if letters.is_empty() {
            return Ok(Vec::new());
        }
        let mut hmget = redis::cmd("HMGET");
        hmget.arg(&*core.keys.dead_reason);
        for (id, _) in &letters {
            hmget.arg(id);
        }
        let reasons: Vec<Option<String>> = core.read(&hmget, context).await?;
        Ok(letters
            .into_iter()
            .zip(reasons)
            .map(|((id, payload), reason)| DeadLetter {
                id: ItemId(id),
                payload,
                reason: reason.unwrap_or_default(),
            })
            .collect())
    }

    /// Attempts until one finds an item or the deadline (of a wait of the given length)
    /// passes, sleeping in between until a message on the ready channel (or
    /// [`CONSUMER_PARK`]): the one wait loop (see `wait.rs`). Runs in the span of `op`.
    async fn receive<R, F, Fut>(
        &self,
        op: Op,
        wait: Option<(Duration, Instant)>,
        mut attempt: F,
    ) -> Result<Option<R>>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<Found<R>>>,
    {
        let span = self.core.span(op, wait.map(|(wait, _)| wait));
        let deadline = wait.map(|(_, deadline)| deadline);
        let waiting = Waiting {
            max_park: CONSUMER_PARK,
            pass_on_unused_wake: true,
            ..Waiting::new(
                &self.core.client.inner.hub,
                &self.core.keys.ready_channel,
                WakePolicy::Count,
            )
        };
        let receiving = async {
            self.core.ready_to_use()?;
            waiting
                .run(deadline, |_| {
                    let found = attempt();
                    async move {
                        Ok(match found.await? {
                            Found::Item(found) => Attempt::Granted(found),
                            Found::Empty => Attempt::retry_after_ms(-1),
                            // Another item may be ready behind it: look again at once.
                            Found::DeadLettered => Attempt::retry_after_ms(0),
                        })
                    }
                })
                .await
        };
        let received = tracing::Instrument::instrument(receiving, span.clone()).await;
        let outcome = match &received {
            Ok(Some(_)) => "delivered",
            Ok(None) => "timeout",
            Err(_) => "error",
        };
        span.record("outcome", outcome);
        received
    }

    /// One `pop`, run detached: if the caller is gone when the item arrives, dropping the
    /// [`Popped`] in the task that finishes the call puts the item back.
    async fn pop_once(&self) -> Result<Found<T>> {
        let (core, codec) = (self.core.clone(), self.codec.clone());
        let popped = crate::task::detached(Box::pin(async move {
            let taken = take_script::<(Vec<u8>, Vec<u8>, i64)>(&core, "pop", 0).await?;
            let Some((id, payload, due_ms)) = taken else {
                return Ok(Found::Empty);
            };
            let id = ItemId(String::from_utf8_lossy(&id).into_owned());
            core.site()
                .count(metrics::QUEUE_DELIVERED, &[("mode", "pop")], 1);
            match codec.decode(&payload) {
                Ok(item) => Ok(Found::Item(Popped {
                    core,
                    id,
                    payload,
                    due_ms,
                    item: Some(item),
                })),
                Err(e) => {
                    dead_letter(&core, &id, &payload, &e.to_string()).await?;
                    Ok(Found::DeadLettered)
                }
            }
        }))
        .await??;
        Ok(match popped {
            Found::Item(popped) => Found::Item(popped.into_item()),
            Found::Empty => Found::Empty,
            Found::DeadLettered => Found::DeadLettered,
        })
    }

    /// One `claim`, run detached: if the caller is gone when the item arrives, dropping the
    /// [`Delivery`] in the task that finishes the call releases it.
    async fn claim_once(&self, visibility_ms: u64) -> Result<Found<Delivery<T>>> {
        let (core, codec) = (self.core.clone(), self.codec.clone());
        let max_deliveries = self.max_deliveries;
        crate::task::detached(Box::pin(async move {
            let taken: Option<(Vec<u8>, Vec<u8>, i64, i64)> =
                take_script(&core, "claim", visibility_ms).await?;
            let Some((id, payload, attempt, due_ms)) = taken else {
                return Ok(Found::Empty);
            };
            let id = ItemId(String::from_utf8_lossy(&id).into_owned());
            core.agent()
                .wake_by(Instant::now() + Duration::from_millis(visibility_ms));
            let site = core.site();
            site.count(metrics::QUEUE_DELIVERED, &[("mode", "claim")], 1);
            if attempt > 1 {
                site.count(metrics::QUEUE_REDELIVERED, &[], 1);
            }
            if let Some(max) = max_deliveries.filter(|max| attempt > i64::from(*max)) {
                let reason = format!("delivered {max} times without an ack (max_deliveries)");
                dead_letter(&core, &id, &payload, &reason).await?;
                return Ok(Found::DeadLettered);
            }
            match codec.decode(&payload) {
                Ok(item) => Ok(Found::Item(Delivery {
                    item,
                    id,
                    attempt: attempt.max(0) as u64,
                    due: (due_ms >= 0).then(|| UNIX_EPOCH + Duration::from_millis(due_ms as u64)),
                    core,
                    settled: false,
                })),
                Err(e) => {
                    dead_letter(&core, &id, &payload, &e.to_string()).await?;
                    Ok(Found::DeadLettered)
                }
            }
        }))
        .await?
    }

    /// How many items are ready to be taken. Rarely, this counts an id left behind by an item
    /// that was put back and then finished by a late [`Delivery::ack`]; the next take skips it.
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
    /// # async fn f(queue: latchkey_redis::BlockingQueue<String>) -> latchkey_redis::Result<()> {
    /// println!("{} ready", queue.len().await?);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn len(&self) -> Result<u64> {
        self.core
            .count("LLEN", &self.core.keys.ready, "counting a blocking queue")
            .await
    }

    /// Whether no item is ready to be taken.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a read.
    ///
    /// # Errors
    ///
    /// As [`BlockingQueue::len`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(queue: latchkey_redis::BlockingQueue<String>) -> latchkey_redis::Result<()> {
    /// assert!(queue.is_empty().await?);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn is_empty(&self) -> Result<bool> {
        Ok(self.len().await? == 0)
    }

    /// How many reliable deliveries are out and not yet acknowledged (by any consumer).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a read.
    ///
    /// # Errors
    ///
    /// As [`BlockingQueue::len`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(queue: latchkey_redis::BlockingQueue<String>) -> latchkey_redis::Result<()> {
    /// println!("{} in flight", queue.in_flight().await?);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn in_flight(&self) -> Result<u64> {
        self.core
            .count(
                "ZCARD",
                &self.core.keys.unacked,
                "counting unacknowledged deliveries",
            )
            .await
    }

    /// How many items were moved to the dead-letter hash because they could not be decoded.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a read.
    ///
    /// # Errors
    ///
    /// As [`BlockingQueue::len`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(queue: latchkey_redis::BlockingQueue<String>) -> latchkey_redis::Result<()> {
    /// if queue.dead_letter_len().await? > 0 {
    ///     eprintln!("some items could not be decoded");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn dead_letter_len(&self) -> Result<u64> {
        self.core
            .count("HLEN", &self.core.keys.dead, "counting dead letters")
            .await
    }
}

/// Runs the take script; `None` when the ready list is empty, else the `N` parts of the reply.
async fn take_script<R: FromRedisValue>(
    core: &Core,
    mode: &str,
    visibility_ms: u64,
) -> Result<Option<R>> {
    let keys = &core.keys;
    loop {
        let mut invocation = QUEUE_TAKE.invocation();
        invocation
            .key(&*keys.ready)
            .key(&*keys.items)
            .key(&*keys.unacked)
            .key(&*keys.attempts)
            .key(&*keys.due)
            .arg(mode)
            .arg(visibility_ms);
        let reply: Value = core.script(&invocation, "taking from a queue").await?;
        return match reply {
            Value::Nil => Ok(None),
            // Only leftover ids of finished items were skipped: look again.
            Value::Array(parts) if parts.is_empty() => continue,
            other => redis::from_redis_value_ref(&other)
                .map(Some)
                .map_err(|_| unexpected("the take script", other)),
        };
    }
}

/// Moves an undecodable item to the dead-letter hash (logging if that fails: for a popped item
/// the payload is then lost; a claimed one stays unacknowledged and comes back).
/// Moves the item `id` to the dead letters with `reason`. An error leaves it where it was (in
/// flight, for a claim: delivered again after the visibility timeout).
async fn dead_letter(core: &Core, id: &ItemId, payload: &[u8], reason: &str) -> Result<()> {
    let keys = &core.keys;
    let mut invocation = QUEUE_DEAD.invocation();
    invocation
        .key(&*keys.dead)
        .key(&*keys.items)
        .key(&*keys.unacked)
        .key(&*keys.attempts)
        .key(&*keys.due)
        .key(&*keys.dead_reason)
        .arg(id.as_str())
        .arg(payload)
        .arg(reason);
    let _: i64 = core.script(&invocation, "dead-lettering an item").await?;
    core.site().count(metrics::QUEUE_DEAD_LETTERED, &[], 1);
    tracing::warn!(queue = %core.name, item = %id, reason, "latchkey queue item moved to the dead letters");
    Ok(())
}

/// An item popped for a caller: dropped before [`Popped::into_item`], it goes back to the head
/// of the queue.
struct Popped<T> {
    core: Arc<Core>,
    id: ItemId,
    payload: Vec<u8>,
    /// The due time the take script removed with the item (-1: none), put back with it.
    due_ms: i64,
    item: Option<T>,
}

impl<T> Popped<T> {
    fn into_item(mut self) -> T {
        self.item.take().expect("a popped item is handed over once")
    }
}

impl<T> Drop for Popped<T> {
    fn drop(&mut self) {
        if self.item.is_none() {
            return;
        }
        let core = self.core.clone();
        let id = self.id.clone();
        let payload = std::mem::take(&mut self.payload);
        let due_ms = self.due_ms;
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::error!(queue = %core.name, item = %id, "latchkey could not put back an item taken for a caller that went away: no runtime");
            return;
        };
        runtime.spawn(async move {
            let mut invocation = QUEUE_REQUEUE.invocation();
            for key in core.requeue_keys() {
                invocation.key(&*key);
            }
            invocation
                .arg("popped")
                .arg(id.as_str())
                .arg(&payload[..])
                .arg(0)
                .arg(core.client.inner.conn.publish_command())
                .arg(due_ms);
            let result: Result<i64> = core.script(&invocation, "putting back an item").await;
            if let Err(e) = result {
                tracing::error!(queue = %core.name, item = %id, error = %e.chain(), "latchkey could not put back an item taken for a caller that went away");
            }
        });
    }
}

/// What [`Delivery::ack`] did.
///
/// An enum rather than a `bool` (which `delivery.ack().await?;` silently drops) or an error
/// (a duplicate delivery is a normal outcome of at-least-once delivery, not a failure to stop a
/// worker loop on): `#[must_use]`, so ignoring it is a compiler warning.
///
/// # Examples
///
/// ```no_run
/// # async fn f(queue: latchkey_redis::BlockingQueue<String>) -> latchkey_redis::Result<()> {
/// use latchkey_redis::Ack;
///
/// let delivery = queue.take().await?;
/// match delivery.ack().await? {
///     Ack::Acked => {}
///     Ack::AlreadyFinished => eprintln!("processed twice: another delivery finished it first"),
/// }
/// # Ok(())
/// # }
/// ```
#[must_use = "`AlreadyFinished` means another delivery of the item finished it first"]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Ack {
    /// This call finished the item: it is never delivered again.
    Acked,
    /// The item was finished already, through another delivery of it (made after this one's
    /// visibility timeout ran out) or by removing it: this delivery was no longer the item's
    /// only one, and the work may have been done twice.
    AlreadyFinished,
}

impl Ack {
    /// Whether this call finished the item ([`Ack::Acked`]).
    ///
    /// # Examples
    ///
    /// ```
    /// assert!(latchkey_redis::Ack::Acked.is_acked());
    /// assert!(!latchkey_redis::Ack::AlreadyFinished.is_acked());
    /// ```
    pub fn is_acked(self) -> bool {
        self == Ack::Acked
    }
}

/// What [`Delivery::nack`] or [`Delivery::nack_after`] did (see [`Ack`] for why an enum).
///
/// # Examples
///
/// ```no_run
/// # async fn f(queue: latchkey_redis::BlockingQueue<String>) -> latchkey_redis::Result<()> {
/// use latchkey_redis::Nack;
///
/// let delivery = queue.take().await?;
/// if delivery.nack().await? == Nack::NotOwned {
///     eprintln!("the item had come back already (visibility timeout) or was finished");
/// }
/// # Ok(())
/// # }
/// ```
#[must_use = "`NotOwned` means the delivery no longer held the item"]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Nack {
    /// The item was given back by this call.
    Released,
    /// This delivery no longer held the item: it was finished, or its visibility timeout ran
    /// out and it came back already. Nothing changed.
    NotOwned,
}

impl Nack {
    /// Whether this call gave the item back ([`Nack::Released`]).
    ///
    /// # Examples
    ///
    /// ```
    /// assert!(latchkey_redis::Nack::Released.is_released());
    /// assert!(!latchkey_redis::Nack::NotOwned.is_released());
    /// ```
    pub fn is_released(self) -> bool {
        self == Nack::Released
    }
}

/// A delivery of one item, from [`BlockingQueue::take`] or [`BlockingQueue::poll`].
///
/// The item stays in Redis, invisible to other consumers, until the delivery is settled:
/// [`Delivery::ack`] when done with it (the item is finished), [`Delivery::nack`] or
/// [`Delivery::nack_after`] to give it back. Dropping an unsettled delivery gives the item back
/// at once (through the client's background task; `Drop` never blocks). If the process dies, the
/// item comes back after the visibility timeout. Reach the item through `Deref`,
/// [`Delivery::item`] or [`Delivery::item_mut`].
#[must_use = "an unsettled delivery goes back to the queue when dropped; call `ack` when done"]
pub struct Delivery<T> {
    item: T,
    id: ItemId,
    attempt: u64,
    due: Option<SystemTime>,
    core: Arc<Core>,
    settled: bool,
}

impl<T> fmt::Debug for Delivery<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Delivery")
            .field("queue", &self.core.name)
            .field("id", &self.id)
            .field("attempt", &self.attempt)
            .field("due", &self.due)
            .finish_non_exhaustive()
    }
}

impl<T> Deref for Delivery<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.item
    }
}

impl<T> DerefMut for Delivery<T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.item
    }
}

impl<T> Delivery<T> {
    /// The item.
    pub fn item(&self) -> &T {
        &self.item
    }

    /// The item, mutably.
    pub fn item_mut(&mut self) -> &mut T {
        &mut self.item
    }

    /// The item's id (the same on every delivery of the item).
    pub fn id(&self) -> &ItemId {
        &self.id
    }

    /// Which reliable delivery of the item this is: 1 the first time, more after the item came
    /// back (released, or its consumer did not acknowledge it in time).
    pub fn attempt(&self) -> u64 {
        self.attempt
    }

    /// When the item was due, by the Redis server's clock: the time its delay ended (for an
    /// item put in directly, the time it was put in), or, after [`Delivery::nack_after`], the
    /// end of that delay. A redelivery after a visibility timeout or a [`Delivery::nack`]
    /// keeps it, so `SystemTime::now()` minus it is how late this delivery is (give or take the
    /// clock skew between this host and Redis). `None` for an item offered by a latchkey
    /// version that did not record it.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(queue: latchkey_redis::BlockingQueue<String>) -> latchkey_redis::Result<()> {
    /// use std::time::SystemTime;
    ///
    /// let delivery = queue.take().await?;
    /// if let Some(due) = delivery.due_time() {
    ///     let late = SystemTime::now().duration_since(due).unwrap_or_default();
    ///     println!("attempt {}, {late:?} after it was due", delivery.attempt());
    /// }
    /// let _ = delivery.ack().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn due_time(&self) -> Option<SystemTime> {
        self.due
    }

    /// The requeue task for this delivery.
    fn requeue_task(&self, delay_us: u64) -> Task {
        Task::new(
            &QUEUE_REQUEUE,
            self.core.requeue_keys(),
            vec![
                "claimed".to_owned(),
                self.id.to_string(),
                self.attempt.to_string(),
                delay_us.to_string(),
                self.core.client.inner.conn.publish_command().to_owned(),
            ],
            "releasing a queue delivery",
        )
    }

    /// Acknowledges the delivery: the item is finished and never delivered again. Returns
    /// [`Ack::Acked`] if this call finished it, [`Ack::AlreadyFinished`] if it was finished
    /// already (another delivery of the same item, made after this one's visibility timeout ran
    /// out, was acknowledged first, or the item was removed): the work may then have been done
    /// twice. [`Ack`] is `#[must_use]`, so `delivery.ack().await?;` alone is a warning: look at
    /// it, or write `let _ = …` where a duplicate does not matter.
    ///
    /// Any delivery of the item may acknowledge it, even one whose visibility timeout ran out.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future does not cancel the acknowledgement once the future has been polled;
    /// dropped before that, the delivery is released as on drop.
    ///
    /// # Errors
    ///
    /// [`Error::WrongType`](crate::Error::WrongType), connection errors: the item is then
    /// delivered again after its visibility timeout (unless the acknowledgement was applied and
    /// only its reply was lost, [`Error::Timeout`](crate::Error::Timeout)).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(queue: latchkey_redis::BlockingQueue<String>) -> latchkey_redis::Result<()> {
    /// use latchkey_redis::Ack;
    ///
    /// let delivery = queue.take().await?;
    /// // … process it …
    /// if delivery.ack().await? == Ack::AlreadyFinished {
    ///     eprintln!("another consumer finished this item too: processing must be idempotent");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn ack(mut self) -> Result<Ack> {
        self.settled = true;
        let core = self.core.clone();
        let id = self.id.clone();
        let span = core.span(Op::Ack, None);
        let acked = crate::task::detached(Box::pin(tracing::Instrument::instrument(
            async move {
                let keys = &core.keys;
                let mut invocation = QUEUE_ACK.invocation();
                invocation
                    .key(&*keys.unacked)
                    .key(&*keys.items)
                    .key(&*keys.attempts)
                    .key(&*keys.due)
                    .arg(id.as_str());
                let finished: i64 = core.script(&invocation, "acknowledging a delivery").await?;
                let (ack, outcome) = match finished {
                    1 => (Ack::Acked, "finished"),
                    _ => (Ack::AlreadyFinished, "already_finished"),
                };
                core.site()
                    .count(metrics::QUEUE_ACKED, &[("outcome", outcome)], 1);
                metrics::record_outcome(outcome);
                Ok(ack)
            },
            span.clone(),
        )))
        .await?;
        if acked.is_err() {
            span.record("outcome", "error");
        }
        acked
    }

    /// Gives the item back at once, to the head of the queue, for another consumer (or this
    /// one) to take. Returns [`Nack::NotOwned`] if this delivery no longer held the item
    /// (acknowledged, or its visibility timeout ran out and it came back already), else
    /// [`Nack::Released`]. Dropping the delivery does the same without waiting.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future does not cancel the release once the future has been polled;
    /// dropped before that, the delivery is released at once as on drop.
    ///
    /// # Errors
    ///
    /// [`Error::WrongType`](crate::Error::WrongType), connection errors: the item then comes back
    /// after its visibility timeout.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(queue: latchkey_redis::BlockingQueue<String>) -> latchkey_redis::Result<()> {
    /// let delivery = queue.take().await?;
    /// let _ = delivery.nack().await?; // not now; whether it was still ours does not matter
    /// # Ok(())
    /// # }
    /// ```
    pub async fn nack(self) -> Result<Nack> {
        self.release(0).await
    }

    /// Gives the item back to the delayed queue, ready again `delay` from now (Redis clock):
    /// a retry with back-off. Returns [`Nack::NotOwned`] if this delivery no longer held the
    /// item (it then keeps the due time it has), else [`Nack::Released`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the future does not cancel the release once the future has been polled;
    /// dropped before that, the delivery is released at once as on drop.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a delay over
    /// [`DelayedQueue::MAX_DELAY`](crate::DelayedQueue::MAX_DELAY) (the item is then given back at once, as on drop);
    /// otherwise as [`Delivery::nack`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(queue: latchkey_redis::BlockingQueue<String>) -> latchkey_redis::Result<()> {
    /// use std::time::Duration;
    /// let delivery = queue.take().await?;
    /// let backoff = Duration::from_secs(1 << delivery.attempt().min(10));
    /// let _ = delivery.nack_after(backoff).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn nack_after(self, delay: Duration) -> Result<Nack> {
        let delay_us = check_delay(delay)?;
        self.release(delay_us).await
    }

    async fn release(mut self, delay_us: u64) -> Result<Nack> {
        self.settled = true;
        let task = self.requeue_task(delay_us);
        let core = self.core.clone();
        let span = core.span(Op::Nack, None);
        let releasing = async move {
            let released: i64 = task.run(&core.client.inner.conn, &core.name).await?;
            Ok(if released == 1 {
                Nack::Released
            } else {
                Nack::NotOwned
            })
        };
        let released = crate::task::detached(Box::pin(tracing::Instrument::instrument(
            releasing,
            span.clone(),
        )))
        .await?;
        span.record(
            "outcome",
            match &released {
                Ok(Nack::Released) => "released",
                Ok(Nack::NotOwned) => "not_held",
                Err(_) => "error",
            },
        );
        released
    }

    /// Keeps the item invisible for `timeout` from now (Redis clock), for processing that takes
    /// longer than expected. Returns `false` if this delivery no longer holds the item (it was
    /// acknowledged, released, or its visibility timeout ran out and it came back).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: one script call, applied or not; calling it again is harmless.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a timeout under 1 ms or
    /// over [`MAX_LEASE`](crate::MAX_LEASE), [`Error::WrongType`](crate::Error::WrongType),
    /// connection errors.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(queue: latchkey_redis::BlockingQueue<String>) -> latchkey_redis::Result<()> {
    /// use std::time::Duration;
    /// let delivery = queue.take().await?;
    /// assert!(delivery.extend(Duration::from_secs(120)).await?);
    /// # Ok(())
    /// # }
    /// ```
    #[tracing::instrument(level = "debug", name = "extend", skip_all, fields(primitive = "queue", name = %self.core.name))]
    pub async fn extend(&self, timeout: Duration) -> Result<bool> {
        let timeout_ms = check_visibility(timeout)?;
        let keys = &self.core.keys;
        let mut invocation = QUEUE_EXTEND.invocation();
        invocation
            .key(&*keys.unacked)
            .key(&*keys.attempts)
            .arg(self.id.as_str())
            .arg(self.attempt)
            .arg(timeout_ms);
        let extended: i64 = self
            .core
            .script(&invocation, "extending a delivery")
            .await?;
        Ok(extended == 1)
    }
}

impl<T> Drop for Delivery<T> {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        let task = self.requeue_task(0);
        let _ = self.core.client.inner.background.send(task);
    }
}
