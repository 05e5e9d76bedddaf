//! The blocking queues: [`DelayedQueue`] (the producer side), [`BlockingQueue`] (the consumer
//! side) and the reliable [`Delivery`], over their async counterparts.

use std::borrow::Borrow;
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::time::{Duration, SystemTime};

use super::Rooted;
use crate::error::Result;
use crate::{Codec, ItemId, Json, PendingItem};

/// A durable delayed queue in Redis, for synchronous code: the blocking form of
/// [`latchkey::DelayedQueue`](crate::DelayedQueue), made with
/// [`Client::delayed_queue`](super::Client::delayed_queue). Items offered with a delay become
/// ready for the [`BlockingQueue`] of the same name when it has passed.
///
/// # Examples
///
/// ```no_run
/// # fn main() -> latchkey::Result<()> {
/// use std::time::Duration;
///
/// let client = latchkey::blocking::Client::connect("redis://127.0.0.1:6379")?;
/// let reminders = client.delayed_queue::<String>("reminders");
/// reminders.offer(&"stand up".to_owned(), Duration::from_secs(3600))?;
/// # Ok(())
/// # }
/// ```
pub struct DelayedQueue<T, C = Json> {
    inner: Rooted<crate::DelayedQueue<T, C>>,
}

impl<T, C> Clone for DelayedQueue<T, C> {
    fn clone(&self) -> Self {
        DelayedQueue {
            inner: self.inner.clone(),
        }
    }
}

impl<T, C> fmt::Debug for DelayedQueue<T, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("blocking::DelayedQueue")
            .field(&*self.inner)
            .finish()
    }
}

impl<T, C: Codec<T>> DelayedQueue<T, C> {
    pub(super) fn from_rooted(inner: Rooted<crate::DelayedQueue<T, C>>) -> DelayedQueue<T, C> {
        DelayedQueue { inner }
    }

    /// The queue's name (shared with its [`BlockingQueue`]).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(client: latchkey::blocking::Client) {
    /// assert_eq!(client.delayed_queue::<String>("reminders").name(), "reminders");
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        self.inner.name()
    }

    /// Adds `item`, ready after `delay`; returns its id.
    ///
    /// # Errors
    ///
    /// As [`latchkey::DelayedQueue::offer`](crate::DelayedQueue::offer), and
    /// [`Error::Config`](crate::Error::Config) when called inside a Tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(queue: latchkey::blocking::DelayedQueue<String>) -> latchkey::Result<()> {
    /// use std::time::Duration;
    /// let id = queue.offer(&"stand up".to_owned(), Duration::from_secs(60))?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn offer(&self, item: &T, delay: Duration) -> Result<ItemId> {
        self.inner.run(self.inner.offer(item, delay))
    }

    /// Adds `item`, ready at `when` (by the Redis server's clock); returns its id.
    ///
    /// # Errors
    ///
    /// As [`latchkey::DelayedQueue::offer_at`](crate::DelayedQueue::offer_at), and
    /// [`Error::Config`](crate::Error::Config) when called inside a Tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(queue: latchkey::blocking::DelayedQueue<String>) -> latchkey::Result<()> {
    /// use std::time::{Duration, SystemTime};
    /// let at = SystemTime::now() + Duration::from_secs(60);
    /// queue.offer_at(&"stand up".to_owned(), at)?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn offer_at(&self, item: &T, when: SystemTime) -> Result<ItemId> {
        self.inner.run(self.inner.offer_at(item, when))
    }

    /// Adds `item`, ready after `secs` seconds (fractions allowed); returns its id.
    ///
    /// # Errors
    ///
    /// As [`latchkey::DelayedQueue::offer_after_secs`](crate::DelayedQueue::offer_after_secs),
    /// and [`Error::Config`](crate::Error::Config) when called inside a Tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(queue: latchkey::blocking::DelayedQueue<String>) -> latchkey::Result<()> {
    /// queue.offer_after_secs(&"stand up".to_owned(), 1.5)?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn offer_after_secs(&self, item: &T, secs: f64) -> Result<ItemId> {
        self.inner.run(self.inner.offer_after_secs(item, secs))
    }

    /// Adds every `(item, delay)` of `items` in one script call; returns their ids in order.
    ///
    /// # Errors
    ///
    /// As [`latchkey::DelayedQueue::offer_all`](crate::DelayedQueue::offer_all), and
    /// [`Error::Config`](crate::Error::Config) when called inside a Tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(queue: latchkey::blocking::DelayedQueue<u32>) -> latchkey::Result<()> {
    /// use std::time::Duration;
    /// let ids = queue.offer_all((0..100).map(|n| (n, Duration::from_millis(10 * n as u64))))?;
    /// assert_eq!(ids.len(), 100);
    /// # Ok(())
    /// # }
    /// ```
    pub fn offer_all<I, B>(&self, items: I) -> Result<Vec<ItemId>>
    where
        I: IntoIterator<Item = (B, Duration)>,
        B: Borrow<T>,
    {
        self.inner.run(self.inner.offer_all(items))
    }

    /// Removes the waiting item `id`; whether it was there.
    ///
    /// # Errors
    ///
    /// As [`latchkey::DelayedQueue::remove`](crate::DelayedQueue::remove), and
    /// [`Error::Config`](crate::Error::Config) when called inside a Tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(queue: latchkey::blocking::DelayedQueue<String>) -> latchkey::Result<()> {
    /// use std::time::Duration;
    /// let id = queue.offer(&"stand up".to_owned(), Duration::from_secs(60))?;
    /// assert!(queue.remove(&id)?);
    /// # Ok(())
    /// # }
    /// ```
    pub fn remove(&self, id: &ItemId) -> Result<bool> {
        self.inner.run(self.inner.remove(id))
    }

    /// How many items wait for their delay to pass.
    ///
    /// # Errors
    ///
    /// As [`latchkey::DelayedQueue::len`](crate::DelayedQueue::len), and
    /// [`Error::Config`](crate::Error::Config) when called inside a Tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(queue: latchkey::blocking::DelayedQueue<String>) -> latchkey::Result<()> {
    /// println!("{} waiting", queue.len()?);
    /// # Ok(())
    /// # }
    /// ```
    pub fn len(&self) -> Result<u64> {
        self.inner.run(self.inner.len())
    }

    /// Whether no item waits for its delay to pass.
    ///
    /// # Errors
    ///
    /// As [`latchkey::DelayedQueue::is_empty`](crate::DelayedQueue::is_empty), and
    /// [`Error::Config`](crate::Error::Config) when called inside a Tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(queue: latchkey::blocking::DelayedQueue<String>) -> latchkey::Result<()> {
    /// if queue.is_empty()? {
    ///     println!("nothing scheduled");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn is_empty(&self) -> Result<bool> {
        self.inner.run(self.inner.is_empty())
    }

    /// Up to `limit` waiting items, the soonest due first.
    ///
    /// # Errors
    ///
    /// As [`latchkey::DelayedQueue::pending`](crate::DelayedQueue::pending), and
    /// [`Error::Config`](crate::Error::Config) when called inside a Tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(queue: latchkey::blocking::DelayedQueue<String>) -> latchkey::Result<()> {
    /// for pending in queue.pending(10)? {
    ///     println!("{} due at {:?}: {}", pending.id, pending.due, pending.item);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn pending(&self, limit: usize) -> Result<Vec<PendingItem<T>>> {
        self.inner.run(self.inner.pending(limit))
    }
}

/// The consumer side of a delayed queue, for synchronous code: the blocking form of
/// [`latchkey::BlockingQueue`](crate::BlockingQueue), made with
/// [`Client::blocking_queue`](super::Client::blocking_queue).
///
/// # Examples
///
/// ```no_run
/// # fn main() -> latchkey::Result<()> {
/// let client = latchkey::blocking::Client::connect("redis://127.0.0.1:6379")?;
/// let jobs = client.blocking_queue::<String>("jobs");
/// loop {
///     let job = jobs.take_reliable()?;
///     println!("working on {}", *job);
///     job.ack()?;
/// }
/// # }
/// ```
pub struct BlockingQueue<T, C = Json> {
    inner: Rooted<crate::BlockingQueue<T, C>>,
}

impl<T, C> Clone for BlockingQueue<T, C> {
    fn clone(&self) -> Self {
        BlockingQueue {
            inner: self.inner.clone(),
        }
    }
}

impl<T, C> fmt::Debug for BlockingQueue<T, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("blocking::BlockingQueue")
            .field(&*self.inner)
            .finish()
    }
}

impl<T: Send + 'static, C: Codec<T>> BlockingQueue<T, C> {
    pub(super) fn from_rooted(inner: Rooted<crate::BlockingQueue<T, C>>) -> BlockingQueue<T, C> {
        BlockingQueue { inner }
    }

    fn root(&self, delivery: crate::Delivery<T>) -> Delivery<T> {
        Delivery {
            inner: self.inner.rt().make(|| delivery),
        }
    }

    /// The queue's name.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(client: latchkey::blocking::Client) {
    /// assert_eq!(client.blocking_queue::<String>("jobs").name(), "jobs");
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        self.inner.name()
    }

    /// This handle with another visibility timeout for its reliable deliveries (see
    /// [`latchkey::BlockingQueue::with_visibility_timeout`](crate::BlockingQueue::with_visibility_timeout)).
    ///
    /// # Errors
    ///
    /// As [`latchkey::BlockingQueue::with_visibility_timeout`](crate::BlockingQueue::with_visibility_timeout).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(client: latchkey::blocking::Client) -> latchkey::Result<()> {
    /// use std::time::Duration;
    /// let queue = client
    ///     .blocking_queue::<String>("slow-jobs")
    ///     .with_visibility_timeout(Duration::from_secs(600))?;
    /// assert_eq!(queue.visibility_timeout(), Duration::from_secs(600));
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_visibility_timeout(self, timeout: Duration) -> Result<Self> {
        let (queue, rt) = self.inner.into_parts();
        let queue = {
            let _entered = rt.enter();
            queue.with_visibility_timeout(timeout)?
        };
        Ok(BlockingQueue::from_rooted(rt.make(|| queue)))
    }

    /// The visibility timeout of this handle's reliable deliveries.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(client: latchkey::blocking::Client) {
    /// let queue = client.blocking_queue::<String>("jobs");
    /// assert_eq!(queue.visibility_timeout(), latchkey::BlockingQueue::DEFAULT_VISIBILITY_TIMEOUT);
    /// # }
    /// ```
    pub fn visibility_timeout(&self) -> Duration {
        self.inner.visibility_timeout()
    }

    /// Appends `item`, ready at once; returns its id.
    ///
    /// # Errors
    ///
    /// As [`latchkey::BlockingQueue::put`](crate::BlockingQueue::put), and
    /// [`Error::Config`](crate::Error::Config) when called inside a Tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(queue: latchkey::blocking::BlockingQueue<String>) -> latchkey::Result<()> {
    /// queue.put(&"resize image 7".to_owned())?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn put(&self, item: &T) -> Result<ItemId> {
        self.inner.run(self.inner.put(item))
    }

    /// Takes the next ready item, waiting as long as it takes. The item is gone from the queue
    /// once returned; use [`BlockingQueue::take_reliable`] to acknowledge it when done instead.
    ///
    /// # Errors
    ///
    /// As [`latchkey::BlockingQueue::take`](crate::BlockingQueue::take), and
    /// [`Error::Config`](crate::Error::Config) when called inside a Tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(queue: latchkey::blocking::BlockingQueue<String>) -> latchkey::Result<()> {
    /// let item = queue.take()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn take(&self) -> Result<T> {
        self.inner.run(self.inner.take())
    }

    /// Takes the next ready item, waiting at most `timeout`; `Ok(None)` if none came.
    ///
    /// # Errors
    ///
    /// As [`latchkey::BlockingQueue::poll`](crate::BlockingQueue::poll), and
    /// [`Error::Config`](crate::Error::Config) when called inside a Tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(queue: latchkey::blocking::BlockingQueue<String>) -> latchkey::Result<()> {
    /// use std::time::Duration;
    /// if let Some(item) = queue.poll(Duration::from_secs(1))? {
    ///     println!("{item}");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn poll(&self, timeout: Duration) -> Result<Option<T>> {
        self.inner.run(self.inner.poll(timeout))
    }

    /// Takes the next ready item as a [`Delivery`] to acknowledge when done, waiting as long
    /// as it takes. Unacknowledged, it comes back after the visibility timeout.
    ///
    /// # Errors
    ///
    /// As [`latchkey::BlockingQueue::take_reliable`](crate::BlockingQueue::take_reliable), and
    /// [`Error::Config`](crate::Error::Config) when called inside a Tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(queue: latchkey::blocking::BlockingQueue<String>) -> latchkey::Result<()> {
    /// let job = queue.take_reliable()?;
    /// println!("working on {}", *job);
    /// job.ack()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn take_reliable(&self) -> Result<Delivery<T>> {
        let delivery = self.inner.run(self.inner.take_reliable())?;
        Ok(self.root(delivery))
    }

    /// Like [`BlockingQueue::take_reliable`], waiting at most `timeout`; `Ok(None)` if no item
    /// came.
    ///
    /// # Errors
    ///
    /// As [`latchkey::BlockingQueue::poll_reliable`](crate::BlockingQueue::poll_reliable), and
    /// [`Error::Config`](crate::Error::Config) when called inside a Tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(queue: latchkey::blocking::BlockingQueue<String>) -> latchkey::Result<()> {
    /// use std::time::Duration;
    /// if let Some(job) = queue.poll_reliable(Duration::from_secs(1))? {
    ///     job.ack()?;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn poll_reliable(&self, timeout: Duration) -> Result<Option<Delivery<T>>> {
        let delivery = self.inner.run(self.inner.poll_reliable(timeout))?;
        Ok(delivery.map(|d| self.root(d)))
    }

    /// How many items are ready to take.
    ///
    /// # Errors
    ///
    /// As [`latchkey::BlockingQueue::len`](crate::BlockingQueue::len), and
    /// [`Error::Config`](crate::Error::Config) when called inside a Tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(queue: latchkey::blocking::BlockingQueue<String>) -> latchkey::Result<()> {
    /// println!("{} ready", queue.len()?);
    /// # Ok(())
    /// # }
    /// ```
    pub fn len(&self) -> Result<u64> {
        self.inner.run(self.inner.len())
    }

    /// Whether no item is ready to take.
    ///
    /// # Errors
    ///
    /// As [`latchkey::BlockingQueue::is_empty`](crate::BlockingQueue::is_empty), and
    /// [`Error::Config`](crate::Error::Config) when called inside a Tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(queue: latchkey::blocking::BlockingQueue<String>) -> latchkey::Result<()> {
    /// if queue.is_empty()? {
    ///     println!("idle");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn is_empty(&self) -> Result<bool> {
        self.inner.run(self.inner.is_empty())
    }

    /// How many reliable deliveries are out, not yet acknowledged.
    ///
    /// # Errors
    ///
    /// As [`latchkey::BlockingQueue::in_flight`](crate::BlockingQueue::in_flight), and
    /// [`Error::Config`](crate::Error::Config) when called inside a Tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(queue: latchkey::blocking::BlockingQueue<String>) -> latchkey::Result<()> {
    /// println!("{} in flight", queue.in_flight()?);
    /// # Ok(())
    /// # }
    /// ```
    pub fn in_flight(&self) -> Result<u64> {
        self.inner.run(self.inner.in_flight())
    }

    /// How many items were set aside as dead letters.
    ///
    /// # Errors
    ///
    /// As [`latchkey::BlockingQueue::dead_letter_len`](crate::BlockingQueue::dead_letter_len),
    /// and [`Error::Config`](crate::Error::Config) when called inside a Tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(queue: latchkey::blocking::BlockingQueue<String>) -> latchkey::Result<()> {
    /// println!("{} dead letters", queue.dead_letter_len()?);
    /// # Ok(())
    /// # }
    /// ```
    pub fn dead_letter_len(&self) -> Result<u64> {
        self.inner.run(self.inner.dead_letter_len())
    }
}

/// An item taken with [`BlockingQueue::take_reliable`]: the blocking form of
/// [`latchkey::Delivery`](crate::Delivery). Acknowledge it with [`Delivery::ack`] when done;
/// dropping it unsettled gives the item back at once without blocking (the requeue is handed
/// to the client's runtime). Reach the item through `Deref`, [`Delivery::item`] or
/// [`Delivery::item_mut`].
///
/// # Examples
///
/// ```no_run
/// # fn f(queue: latchkey::blocking::BlockingQueue<String>) -> latchkey::Result<()> {
/// let job = queue.take_reliable()?;
/// if job.is_empty() {
///     job.nack()?; // give it back for another try
/// } else {
///     job.ack()?;
/// }
/// # Ok(())
/// # }
/// ```
#[must_use = "an unsettled delivery goes back to the queue when dropped; call `ack` when done"]
pub struct Delivery<T> {
    inner: Rooted<crate::Delivery<T>>,
}

impl<T> fmt::Debug for Delivery<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("blocking::Delivery")
            .field(&*self.inner)
            .finish()
    }
}

impl<T> Deref for Delivery<T> {
    type Target = T;

    fn deref(&self) -> &T {
        self.inner.item()
    }
}

impl<T> DerefMut for Delivery<T> {
    fn deref_mut(&mut self) -> &mut T {
        self.inner.item_mut()
    }
}

impl<T> Delivery<T> {
    /// The item.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(job: latchkey::blocking::Delivery<String>) {
    /// println!("{}", job.item());
    /// # }
    /// ```
    pub fn item(&self) -> &T {
        self.inner.item()
    }

    /// The item, mutably.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(mut job: latchkey::blocking::Delivery<String>) {
    /// job.item_mut().push_str(" (seen)");
    /// # }
    /// ```
    pub fn item_mut(&mut self) -> &mut T {
        self.inner.item_mut()
    }

    /// The item's id (the same on every delivery of the item).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(job: latchkey::blocking::Delivery<String>) {
    /// println!("item {}", job.id());
    /// # }
    /// ```
    pub fn id(&self) -> &ItemId {
        self.inner.id()
    }

    /// Which reliable delivery of the item this is: 1 the first time, more after it came back.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(job: latchkey::blocking::Delivery<String>) {
    /// if job.attempt() > 3 {
    ///     eprintln!("item {} keeps failing", job.id());
    /// }
    /// # }
    /// ```
    pub fn attempt(&self) -> u64 {
        self.inner.attempt()
    }

    /// When the item was due, by the Redis server's clock (see
    /// [`latchkey::Delivery::due_time`](crate::Delivery::due_time)).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(job: latchkey::blocking::Delivery<String>) {
    /// if let Some(due) = job.due_time() {
    ///     let late = std::time::SystemTime::now().duration_since(due).unwrap_or_default();
    ///     println!("{late:?} late");
    /// }
    /// # }
    /// ```
    pub fn due_time(&self) -> Option<std::time::SystemTime> {
        self.inner.due_time()
    }
}

impl<T: Send + 'static> Delivery<T> {
    /// Acknowledges the delivery: the item is finished and never delivered again.
    ///
    /// # Errors
    ///
    /// As [`latchkey::Delivery::ack`](crate::Delivery::ack), and
    /// [`Error::Config`](crate::Error::Config) when called inside a Tokio runtime (the
    /// delivery is then dropped: the item goes back to the queue).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(job: latchkey::blocking::Delivery<String>) -> latchkey::Result<()> {
    /// if !job.ack()?.is_acked() {
    ///     eprintln!("the item had already come back to the queue");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn ack(self) -> Result<crate::Ack> {
        self.inner.consume(|delivery| delivery.ack())
    }

    /// Gives the item back to the queue now, for another delivery.
    ///
    /// # Errors
    ///
    /// As [`latchkey::Delivery::nack`](crate::Delivery::nack), and
    /// [`Error::Config`](crate::Error::Config) when called inside a Tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(job: latchkey::blocking::Delivery<String>) -> latchkey::Result<()> {
    /// job.nack()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn nack(self) -> Result<crate::Nack> {
        self.inner.consume(|delivery| delivery.nack())
    }

    /// Gives the item back to the queue, ready again after `delay` (a retry with back-off).
    ///
    /// # Errors
    ///
    /// As [`latchkey::Delivery::nack_after`](crate::Delivery::nack_after), and
    /// [`Error::Config`](crate::Error::Config) when called inside a Tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(job: latchkey::blocking::Delivery<String>) -> latchkey::Result<()> {
    /// use std::time::Duration;
    /// let backoff = Duration::from_secs(2u64.pow(job.attempt().min(10) as u32));
    /// job.nack_after(backoff)?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn nack_after(self, delay: Duration) -> Result<crate::Nack> {
        self.inner.consume(|delivery| delivery.nack_after(delay))
    }

    /// Keeps the item invisible to other consumers for `timeout` from now, for work that takes
    /// longer than expected; whether this delivery still held it.
    ///
    /// # Errors
    ///
    /// As [`latchkey::Delivery::extend`](crate::Delivery::extend), and
    /// [`Error::Config`](crate::Error::Config) when called inside a Tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(job: latchkey::blocking::Delivery<String>) -> latchkey::Result<()> {
    /// use std::time::Duration;
    /// job.extend(Duration::from_secs(120))?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn extend(&self, timeout: Duration) -> Result<bool> {
        self.inner.run(self.inner.extend(timeout))
    }
}
