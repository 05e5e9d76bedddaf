//! A blocking API for synchronous code, in the manner of `reqwest::blocking`.
//!
//! [`Client`] owns a private Tokio runtime whose worker thread runs the client's background
//! work (the watchdog that renews leases, the pub/sub connection that wakes waiters, the task
//! that finishes releases) whether or not the calling thread is blocked. Every method of the
//! blocking types runs the matching async operation on that runtime and waits for it, so the
//! types, the guarantees and the errors (one [`latchkey::Error`](crate::Error)) are those of the
//! async API: each blocking type wraps its async counterpart and adds no logic of its own.
//!
//! - Guards ([`LockGuard`], [`FairLockGuard`], [`ReadGuard`], [`WriteGuard`],
//!   [`MultiLockGuard`], [`RedLockGuard`], [`Permits`], [`LeasedPermits`], [`Delivery`])
//!   release on drop without blocking: the drop hands the release to the runtime, as the
//!   async guard's drop does, and returns at once, even with Redis stalled.
//! - A lost hold is seen with `is_lost()` (no wait) or `wait_lost(timeout)` (waits up to
//!   `timeout`), where async code awaits `lost()`.
//! - The runtime stops when the last of the client, the handles and the guards made from it
//!   is dropped. That drop first lets the releases already handed over finish, waiting at most
//!   the client's command timeout (plus one second): a guard dropped just before the client is
//!   released in Redis, not left to expire. Usually this takes one round trip.
//! - A blocking call made where a Tokio runtime is running (in async code, in a
//!   `spawn_blocking` closure, or under `Runtime::enter`) would block that runtime's thread or
//!   deadlock. It is refused: the call returns [`Error::Config`] saying
//!   to use the async API there, and sends nothing to Redis; a refused call that consumes its
//!   value (`unlock`, `release`, `ack`, `nack`) drops it, which hands its release over as a
//!   drop does (a refused `ack` gives the item back to the queue). Dropping blocking values
//!   there is fine: the last drop waits for the releases on a thread of its own.
//! - Several blocking clients in one `MultiLock` or `RedLock` run its operations on the first
//!   client's runtime: a node client connected lazily then keeps its connection task there, so
//!   keep the first client alive as long as the others are in use.
//!
//! # Examples
//!
//! ```no_run
//! use latchkey::blocking::Client;
//!
//! fn main() -> latchkey::Result<()> {
//!     let client = Client::connect("redis://127.0.0.1:6379")?;
//!     let lock = client.lock("orders:1001");
//!
//!     let guard = lock.lock()?; // waits for the lock; the watchdog renews it from now on
//!     let token = guard.fencing_token(); // pass it to the storage you write to
//!     println!("holding orders:1001 with token {token}");
//!     // … the critical section …
//!     guard.unlock()?; // or drop the guard: the release is handed to the runtime
//!     Ok(())
//! }
//! ```

use std::fmt;
use std::future::Future;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::runtime::{Handle, Runtime};

use crate::error::{Error, Result};
use crate::{Codec, Json};

mod latch;
mod lock;
mod multi;
mod queue;
mod semaphore;

pub use latch::CountDownLatch;
pub use lock::{
    FairLock, FairLockGuard, Lock, LockGuard, ReadGuard, ReadLock, RwLock, WriteGuard, WriteLock,
};
pub use multi::{MultiLock, MultiLockGuard, RedLock, RedLockBuilder, RedLockGuard};
pub use queue::{BlockingQueue, DelayedQueue, Delivery};
pub use semaphore::{LeasedPermits, PermitSemaphore, Permits, Semaphore};

/// How much longer than the command timeout the last drop waits for the runtime's tasks.
const DRAIN_MARGIN: Duration = Duration::from_secs(1);

/// The runtime of one blocking client, shared by the client and everything made from it.
struct Shared {
    runtime: Option<Runtime>,
    /// How long the last drop waits for the runtime's tasks to end.
    drain: Duration,
}

impl Drop for Shared {
    fn drop(&mut self) {
        let Some(runtime) = self.runtime.take() else {
            return;
        };
        // Every async value made on this runtime is gone (each wrapper drops its value before
        // its share of the runtime), so the client has shut down: its task queue finishes the
        // releases handed to it within the command timeout, and the other tasks stop. Wait for
        // that without `block_on`, which would panic if this drop runs in async code.
        let drain = self.drain;
        let runtime = Arc::new(std::sync::Mutex::new(Some(runtime)));
        let finish = {
            let runtime = runtime.clone();
            move || {
                let taken = runtime.lock().unwrap_or_else(|e| e.into_inner()).take();
                let Some(runtime) = taken else { return };
                let metrics = runtime.metrics();
                let deadline = Instant::now() + drain;
                while metrics.num_alive_tasks() > 0 && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(2));
                }
                runtime.shutdown_background();
            }
        };
        // Dropped in async code (a blocking value moved into a task), the wait must not hold
        // up that thread's other tasks: a thread of its own waits instead.
        if tokio::runtime::Handle::try_current().is_ok() {
            let spawned = std::thread::Builder::new()
                .name("latchkey-blocking-drain".into())
                .spawn(finish);
            if let Err(e) = spawned {
                // No thread to wait on: stop at once (releases not finished expire with their
                // leases).
                tracing::warn!(error = %e, "latchkey blocking client: no thread to finish on");
                let taken = runtime.lock().unwrap_or_else(|e| e.into_inner()).take();
                if let Some(runtime) = taken {
                    runtime.shutdown_background();
                }
            }
            return;
        }
        finish();
    }
}

/// A share of a blocking client's runtime.
#[derive(Clone)]
pub(crate) struct Rt(Arc<Shared>);

impl Rt {
    /// Starts a runtime with one worker thread; its last drop waits up to `drain` for the
    /// runtime's tasks.
    fn start(drain: Duration) -> Result<Rt> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("latchkey-blocking")
            .enable_all()
            .build()
            .map_err(|e| Error::Config {
                reason: format!("could not start the blocking client's runtime thread: {e}"),
            })?;
        Ok(Rt(Arc::new(Shared {
            runtime: Some(runtime),
            drain,
        })))
    }

    fn handle(&self) -> &Handle {
        self.0
            .runtime
            .as_ref()
            .expect("the runtime lives until the last share is dropped")
            .handle()
    }

    /// Runs `op` on this runtime and waits for its result.
    pub(crate) fn run<T>(&self, op: impl Future<Output = Result<T>>) -> Result<T> {
        self.wait(op)?
    }

    /// Runs `op` on this runtime and waits for it; refused inside a Tokio runtime.
    pub(crate) fn wait<T>(&self, op: impl Future<Output = T>) -> Result<T> {
        outside_runtime()?;
        Ok(self.handle().block_on(op))
    }

    /// Waits up to `timeout` for `lost`; whether it resolved.
    pub(crate) fn wait_lost(
        &self,
        lost: impl Future<Output = ()>,
        timeout: Duration,
    ) -> Result<bool> {
        self.wait(async move { tokio::time::timeout(timeout, lost).await.is_ok() })
    }

    /// Enters this runtime's context (for synchronous calls of async values that may spawn).
    pub(crate) fn enter(&self) -> tokio::runtime::EnterGuard<'_> {
        self.handle().enter()
    }

    /// Makes `value` (an async value) within this runtime's context.
    pub(crate) fn make<T>(&self, make: impl FnOnce() -> T) -> Rooted<T> {
        let value = {
            let _entered = self.handle().enter();
            make()
        };
        Rooted {
            value: Some(value),
            rt: self.clone(),
        }
    }
}

/// Fails with [`Error::Config`] when called where a Tokio runtime runs.
fn outside_runtime() -> Result<()> {
    if Handle::try_current().is_ok() {
        return Err(Error::Config {
            reason: "a `latchkey::blocking` call was made inside a Tokio runtime, where it would \
                     block the runtime's thread; use the async API (`latchkey::Client`) there"
                .to_owned(),
        });
    }
    Ok(())
}

/// An async value of latchkey kept with the runtime it was made on. It is dropped within the
/// runtime's context (a guard's drop hands its release to the runtime and returns at once),
/// before this share of the runtime is given up.
pub(crate) struct Rooted<T> {
    value: Option<T>,
    rt: Rt,
}

impl<T> Rooted<T> {
    /// The runtime this value runs on.
    pub(crate) fn rt(&self) -> &Rt {
        &self.rt
    }

    /// Takes the value out, with its runtime (to consume it: `unlock`, `ack`, …).
    pub(crate) fn into_parts(mut self) -> (T, Rt) {
        let value = self.value.take().expect("taken only once, by value");
        (value, self.rt.clone())
    }

    /// Runs `op` (an async operation of the value) on the value's runtime and waits for its
    /// result.
    pub(crate) fn run<R>(&self, op: impl Future<Output = Result<R>>) -> Result<R> {
        self.rt.run(op)
    }

    /// Another value on the same runtime, made from this one within the runtime's context.
    pub(crate) fn map<U>(&self, make: impl FnOnce(&T) -> U) -> Rooted<U> {
        self.rt.make(|| make(self))
    }

    /// Consumes the value with `op` on its runtime and waits for the result.
    pub(crate) fn consume<R, F>(self, op: impl FnOnce(T) -> F) -> Result<R>
    where
        F: Future<Output = Result<R>>,
    {
        let (value, rt) = self.into_parts();
        // Refused before the value is consumed: dropping it then hands it to the runtime.
        if let Err(e) = outside_runtime() {
            drop(rt.make(|| value));
            return Err(e);
        }
        rt.run(op(value))
    }
}

impl<T> Deref for Rooted<T> {
    type Target = T;

    fn deref(&self) -> &T {
        self.value.as_ref().expect("present until dropped or taken")
    }
}

impl<T> DerefMut for Rooted<T> {
    fn deref_mut(&mut self) -> &mut T {
        self.value.as_mut().expect("present until dropped or taken")
    }
}

impl<T: Clone> Clone for Rooted<T> {
    fn clone(&self) -> Self {
        self.map(T::clone)
    }
}

impl<T: fmt::Debug> fmt::Debug for Rooted<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.value {
            Some(value) => value.fmt(f),
            None => f.write_str("(taken)"),
        }
    }
}

impl<T> Drop for Rooted<T> {
    fn drop(&mut self) {
        if let Some(value) = self.value.take() {
            let _entered = self.rt.handle().enter();
            drop(value);
        }
    }
}

/// A client for synchronous code: a [`latchkey::Client`](crate::Client) with a runtime thread
/// of its own (see the [module docs](self)).
///
/// Cheap to clone. The handles and guards made from it keep its runtime running; the runtime
/// stops when the last of them and of the client's clones is dropped.
///
/// # Drop
///
/// Dropping the last of the client, its handles and guards waits for the releases already
/// handed over (by guards dropped earlier) to finish, at most the command timeout plus one
/// second (usually one round trip), then stops the runtime. Other drops return at once. If
/// the process exits without dropping them (`std::process::exit`, a kill), held locks are not
/// released: they expire with their lease, as they do for an async client.
///
/// # Examples
///
/// ```no_run
/// # fn main() -> latchkey::Result<()> {
/// let client = latchkey::blocking::Client::connect("redis://127.0.0.1:6379")?;
/// let guard = client.lock("orders:1001").lock()?;
/// // … the critical section …
/// guard.unlock()?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Client {
    inner: Rooted<crate::Client>,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("blocking::Client")
            .field(&*self.inner)
            .finish()
    }
}

impl Client {
    /// Starts a runtime thread and connects with default settings; see
    /// [`Client::from_builder`] for the others.
    ///
    /// # Errors
    ///
    /// As [`ClientBuilder::connect`](crate::ClientBuilder::connect), and
    /// [`Error::Config`] when called inside a Tokio runtime (use
    /// [`latchkey::Client::connect`](crate::Client::connect) there).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> latchkey::Result<()> {
    /// let client = latchkey::blocking::Client::connect("redis://127.0.0.1:6379")?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn connect(url: impl Into<String>) -> Result<Client> {
        Client::from_builder(crate::Client::builder(url))
    }

    /// Starts a runtime thread and connects with the settings of `builder` (made with
    /// [`latchkey::Client::builder`](crate::Client::builder)).
    ///
    /// # Errors
    ///
    /// As [`ClientBuilder::connect`](crate::ClientBuilder::connect), and
    /// [`Error::Config`] when called inside a Tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> latchkey::Result<()> {
    /// use std::time::Duration;
    ///
    /// let builder = latchkey::Client::builder("redis://127.0.0.1:6379")
    ///     .watchdog_timeout(Duration::from_secs(10))
    ///     .command_timeout(Duration::from_secs(2));
    /// let client = latchkey::blocking::Client::from_builder(builder)?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn from_builder(builder: crate::ClientBuilder) -> Result<Client> {
        outside_runtime()?;
        let rt = Rt::start(builder.command_timeout + DRAIN_MARGIN)?;
        let client = rt.run(builder.connect())?;
        Ok(Client {
            inner: rt.make(|| client),
        })
    }

    /// Like [`Client::from_builder`], without connecting first: the client connects on first
    /// use and reconnects as needed, so it can be made while its server is down (a RedLock
    /// node, say). See [`ClientBuilder::connect_lazy`](crate::ClientBuilder::connect_lazy).
    ///
    /// # Errors
    ///
    /// As [`ClientBuilder::connect_lazy`](crate::ClientBuilder::connect_lazy), and
    /// [`Error::Config`] when called inside a Tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> latchkey::Result<()> {
    /// let builder = latchkey::Client::builder("redis://10.0.0.1:6379");
    /// let node = latchkey::blocking::Client::connect_lazy(builder)?; // succeeds with the node down
    /// # Ok(())
    /// # }
    /// ```
    pub fn connect_lazy(builder: crate::ClientBuilder) -> Result<Client> {
        outside_runtime()?;
        let rt = Rt::start(builder.command_timeout + DRAIN_MARGIN)?;
        let client = {
            let _entered = rt.handle().enter();
            builder.connect_lazy()?
        };
        Ok(Client {
            inner: rt.make(|| client),
        })
    }

    /// The runtime this client runs on.
    pub(crate) fn rt(&self) -> &Rt {
        self.inner.rt()
    }

    /// The async client inside.
    pub(crate) fn as_async(&self) -> &crate::Client {
        &self.inner
    }

    /// This client's random id, the first half of every owner id it uses.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(client: latchkey::blocking::Client) {
    /// println!("client {}", client.id());
    /// # }
    /// ```
    pub fn id(&self) -> &str {
        self.inner.id()
    }

    /// The lease given to locks taken without one, renewed by the watchdog.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(client: latchkey::blocking::Client) {
    /// assert_eq!(client.watchdog_timeout(), latchkey::Client::DEFAULT_WATCHDOG_TIMEOUT);
    /// # }
    /// ```
    pub fn watchdog_timeout(&self) -> Duration {
        self.inner.watchdog_timeout()
    }

    /// The namespace set with [`ClientBuilder::namespace`](crate::ClientBuilder::namespace).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(client: latchkey::blocking::Client) {
    /// assert_eq!(client.namespace(), None);
    /// # }
    /// ```
    pub fn namespace(&self) -> Option<&str> {
        self.inner.namespace()
    }

    /// Whether acquires wait for replicas, and for how many (see
    /// [`ClientBuilder::replica_sync`](crate::ClientBuilder::replica_sync)).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(client: latchkey::blocking::Client) {
    /// if let Some((replicas, timeout)) = client.replica_sync() {
    ///     println!("acquires wait up to {timeout:?} for {replicas} replicas");
    /// }
    /// # }
    /// ```
    pub fn replica_sync(&self) -> Option<(u32, Duration)> {
        self.inner.replica_sync()
    }

    /// How many pub/sub channels this client is subscribed to right now.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(client: latchkey::blocking::Client) {
    /// println!("{} subscriptions", client.subscription_count());
    /// # }
    /// ```
    pub fn subscription_count(&self) -> usize {
        self.inner.subscription_count()
    }

    /// How many locks the watchdog currently tracks for this client.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(client: latchkey::blocking::Client) -> latchkey::Result<()> {
    /// let guard = client.lock("orders:1001").lock()?;
    /// assert_eq!(client.tracked_lock_count(), 1);
    /// # Ok(())
    /// # }
    /// ```
    pub fn tracked_lock_count(&self) -> usize {
        self.inner.tracked_lock_count()
    }

    /// A reentrant lock named `name` (see [`latchkey::Client::lock`](crate::Client::lock)).
    /// Each call makes a new owner: two handles exclude each other, clones of one handle share
    /// its holds.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(client: latchkey::blocking::Client) -> latchkey::Result<()> {
    /// let guard = client.lock("orders:1001").lock()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn lock(&self, name: impl Into<String>) -> Lock {
        Lock::from_rooted(self.inner.map(|c| c.lock(name)))
    }

    /// A fair lock named `name`, granted in the order of the requests (see
    /// [`latchkey::Client::fair_lock`](crate::Client::fair_lock)).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(client: latchkey::blocking::Client) -> latchkey::Result<()> {
    /// let guard = client.fair_lock("printer").lock()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn fair_lock(&self, name: impl Into<String>) -> FairLock {
        FairLock::from_rooted(self.inner.map(|c| c.fair_lock(name)))
    }

    /// A read-write lock named `name` (see
    /// [`latchkey::Client::rw_lock`](crate::Client::rw_lock)).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(client: latchkey::blocking::Client) -> latchkey::Result<()> {
    /// let cache = client.rw_lock("cache");
    /// let reading = cache.read().lock()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn rw_lock(&self, name: impl Into<String>) -> RwLock {
        RwLock::from_rooted(self.inner.map(|c| c.rw_lock(name)))
    }

    /// A counting semaphore named `name` (see
    /// [`latchkey::Client::semaphore`](crate::Client::semaphore)).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(client: latchkey::blocking::Client) -> latchkey::Result<()> {
    /// let connections = client.semaphore("db-connections");
    /// connections.try_set_permits(10)?;
    /// let permit = connections.acquire(1)?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn semaphore(&self, name: impl Into<String>) -> Semaphore {
        Semaphore::from_rooted(self.inner.map(|c| c.semaphore(name)))
    }

    /// A semaphore of leased, named permits called `name` (see
    /// [`latchkey::Client::permit_semaphore`](crate::Client::permit_semaphore)).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(client: latchkey::blocking::Client) -> latchkey::Result<()> {
    /// let slots = client.permit_semaphore("render-slots");
    /// slots.try_set_permits(4)?;
    /// let permits = slots.acquire(1)?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn permit_semaphore(&self, name: impl Into<String>) -> PermitSemaphore {
        PermitSemaphore::from_rooted(self.inner.map(|c| c.permit_semaphore(name)))
    }

    /// A count-down latch named `name` (see
    /// [`latchkey::Client::count_down_latch`](crate::Client::count_down_latch)).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(client: latchkey::blocking::Client) -> latchkey::Result<()> {
    /// let ready = client.count_down_latch("workers-ready");
    /// ready.try_set_count(3)?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn count_down_latch(&self, name: impl Into<String>) -> CountDownLatch {
        CountDownLatch::from_rooted(self.inner.map(|c| c.count_down_latch(name)))
    }

    /// A delayed queue named `name` whose items are `T`, stored as JSON (see
    /// [`latchkey::Client::delayed_queue`](crate::Client::delayed_queue)).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(client: latchkey::blocking::Client) -> latchkey::Result<()> {
    /// use std::time::Duration;
    /// let reminders = client.delayed_queue::<String>("reminders");
    /// reminders.offer(&"stand up".to_owned(), Duration::from_secs(3600))?;
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
    /// # fn f(client: latchkey::blocking::Client) {
    /// let ids = client.delayed_queue_with_codec::<u64, _>("ids", latchkey::Json);
    /// # }
    /// ```
    pub fn delayed_queue_with_codec<T, C: Codec<T>>(
        &self,
        name: impl Into<String>,
        codec: C,
    ) -> DelayedQueue<T, C> {
        DelayedQueue::from_rooted(self.inner.map(|c| c.delayed_queue_with_codec(name, codec)))
    }

    /// The consumer side of the delayed queue `name`, items `T` stored as JSON (see
    /// [`latchkey::Client::blocking_queue`](crate::Client::blocking_queue)).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(client: latchkey::blocking::Client) -> latchkey::Result<()> {
    /// let jobs = client.blocking_queue::<String>("jobs");
    /// let job = jobs.take()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn blocking_queue<T>(&self, name: impl Into<String>) -> BlockingQueue<T>
    where
        T: Serialize + DeserializeOwned + Send + 'static,
    {
        self.blocking_queue_with_codec(name, Json)
    }

    /// The consumer side of the delayed queue `name`, items encoded with `codec`.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(client: latchkey::blocking::Client) {
    /// let ids = client.blocking_queue_with_codec::<u64, _>("ids", latchkey::Json);
    /// # }
    /// ```
    pub fn blocking_queue_with_codec<T, C: Codec<T>>(
        &self,
        name: impl Into<String>,
        codec: C,
    ) -> BlockingQueue<T, C>
    where
        T: Send + 'static,
    {
        BlockingQueue::from_rooted(self.inner.map(|c| c.blocking_queue_with_codec(name, codec)))
    }
}
