//! A blocking API for synchronous code, in the manner of `reqwest::blocking`: the async API,
//! run on a runtime thread of the client's own.
//!
//! [`Client`] owns a private Tokio runtime whose worker thread runs the client's background
//! work (the watchdog that renews leases, the pub/sub connection that wakes waiters, the task
//! that finishes releases) whether or not the calling thread is blocked. It dereferences to the
//! async [`latchkey_redis::Client`](crate::Client), so every handle is the async one
//! (`client.lock(name)` is a [`Lock`](crate::Lock)); [`Client::run`] runs any of their async
//! operations on the runtime and waits for it, and [`Client::hold`] does the same for an
//! acquire, wrapping the guard in a [`Guard`]. The types, guarantees and errors are the async
//! API's; nothing is written twice.
//!
//! - A [`Guard`] (over any hold: [`LockGuard`](crate::LockGuard),
//!   [`Leadership`](crate::Leadership), [`Permits`](crate::Permits), a queue's
//!   [`Delivery`](crate::Delivery), …) keeps the runtime alive while it lives, and releases on
//!   drop without blocking: the drop hands the release to the runtime, as the async guard's drop
//!   does, and returns at once, even with Redis stalled.
//! - A lost hold is seen with `is_lost()` (no wait) or [`Guard::wait_lost`] (waits up to a
//!   timeout), where async code awaits `lost()`.
//! - The runtime stops when the last of the client and the guards made from it is dropped.
//!   That drop first lets the releases already handed over finish, waiting at most the client's
//!   command timeout (plus one second): a guard dropped just before the client is released in
//!   Redis, not left to expire. Usually this takes one round trip.
//! - A blocking call made where a Tokio runtime is running (in async code, in a
//!   `spawn_blocking` closure, or under `Runtime::enter`) would block that runtime's thread or
//!   deadlock. It is refused: the call returns [`Error::Config`] saying to use the async API
//!   there, and sends nothing to Redis; a refused call that consumes its guard drops it, which
//!   hands its release over as a drop does. Dropping blocking values there is fine: the last
//!   drop waits for the releases on a thread of its own.
//!
//! # Examples
//!
//! ```no_run
//! use latchkey_redis::blocking::Client;
//!
//! fn main() -> latchkey_redis::Result<()> {
//!     let client = Client::connect("redis://127.0.0.1:6379")?;
//!     let lock = client.lock("orders:1001"); // the async handle: making it sends nothing
//!
//!     let guard = client.hold(lock.lock())?; // waits; the watchdog renews it from now on
//!     let token = guard.fencing_token(); // pass it to the storage you write to
//!     println!("holding orders:1001 with token {token}");
//!     // … the critical section …
//!     guard.unlock()?; // or drop the guard: the release is handed to the runtime
//!
//!     let slots = client.semaphore("exports");
//!     client.run(slots.try_set_permits(3))?; // any other operation
//!     Ok(())
//! }
//! ```

use std::fmt;
use std::future::Future;
use std::ops::Deref;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::runtime::{Handle, Runtime};

use crate::error::{Error, Result};

/// How much longer than the command timeout the last drop waits for the runtime's tasks.
const DRAIN_MARGIN: Duration = Duration::from_secs(1);

/// The runtime of one blocking client, shared by the client and every guard made from it.
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
        let finish = move || {
            let metrics = runtime.metrics();
            let deadline = Instant::now() + drain;
            while metrics.num_alive_tasks() > 0 && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(2));
            }
            runtime.shutdown_background();
        };
        if Handle::try_current().is_err() {
            finish();
            return;
        }
        // Dropped in async code (a blocking value moved into a task), the wait must not hold
        // up that thread's other tasks: a thread of its own waits instead. Without a thread,
        // the runtime stops at once (releases not finished expire with their leases).
        let finish = Arc::new(Mutex::new(Some(finish)));
        let on_thread = finish.clone();
        let spawned = std::thread::Builder::new()
            .name("latchkey-blocking-drain".into())
            .spawn(move || {
                if let Some(finish) = on_thread.lock().unwrap_or_else(|e| e.into_inner()).take() {
                    finish();
                }
            });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "latchkey blocking client: no thread to finish on");
            drop(finish.lock().unwrap_or_else(|e| e.into_inner()).take());
        }
    }
}

/// A share of a blocking client's runtime.
#[derive(Clone)]
struct Rt(Arc<Shared>);

impl Rt {
    /// Starts a runtime with one worker thread; its last drop waits up to `drain` for the
    /// runtime's tasks.
    fn start(drain: Duration) -> Result<Rt> {
        outside_runtime()?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("latchkey-blocking")
            .enable_all()
            .build()
            .map_err(|e| {
                Error::config(format!(
                    "could not start the blocking client's runtime thread: {e}"
                ))
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

    /// Runs `op` on the runtime and waits for it; refused inside a runtime.
    fn wait<T>(&self, op: impl Future<Output = T>) -> Result<T> {
        outside_runtime()?;
        Ok(self.handle().block_on(op))
    }
}

/// Refuses a blocking call made where a Tokio runtime runs.
fn outside_runtime() -> Result<()> {
    if Handle::try_current().is_ok() {
        return Err(Error::config(
            "a `latchkey_redis::blocking` call was made inside a Tokio runtime, where it would \
             block the runtime's thread; use the async API (`latchkey_redis::Client`) there",
        ));
    }
    Ok(())
}

/// A latchkey client for synchronous code (see the [module docs](self)): the async
/// [`latchkey_redis::Client`](crate::Client) (which it dereferences to, for the handles) and a
/// runtime thread of its own that runs its operations.
///
/// Cloning it is cheap: the clones share the client and the runtime.
///
/// # Examples
///
/// ```no_run
/// # fn main() -> latchkey_redis::Result<()> {
/// let client = latchkey_redis::blocking::Client::connect("redis://127.0.0.1:6379")?;
/// let guard = client.hold(client.lock("orders:1001").lock())?;
/// guard.unlock()?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Client {
    // Dropped before the runtime share (field order): the client shuts down first.
    inner: crate::Client,
    rt: Rt,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("blocking::Client")
            .field(&self.inner)
            .finish()
    }
}

impl Deref for Client {
    type Target = crate::Client;

    fn deref(&self) -> &crate::Client {
        &self.inner
    }
}

impl Client {
    /// Connects to Redis at `url` with the default settings, on a runtime thread of its own.
    ///
    /// # Errors
    ///
    /// As [`ClientBuilder::connect`](crate::ClientBuilder::connect), and [`Error::Config`] when
    /// called inside a Tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> latchkey_redis::Result<()> {
    /// let client = latchkey_redis::blocking::Client::connect("redis://127.0.0.1:6379")?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn connect(url: impl Into<String>) -> Result<Client> {
        Client::from_builder(crate::Client::builder(url))
    }

    /// Connects with the settings of `builder` (watchdog timeout, namespace, TLS, …).
    ///
    /// # Errors
    ///
    /// As [`Client::connect`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> latchkey_redis::Result<()> {
    /// use std::time::Duration;
    /// let builder = latchkey_redis::Client::builder("redis://127.0.0.1:6379")
    ///     .watchdog_timeout(Duration::from_secs(10));
    /// let client = latchkey_redis::blocking::Client::from_builder(builder)?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn from_builder(builder: crate::ClientBuilder) -> Result<Client> {
        let rt = Rt::start(builder.command_timeout + DRAIN_MARGIN)?;
        let inner = rt.wait(builder.connect())??;
        Ok(Client { inner, rt })
    }

    /// Makes the client without connecting (see
    /// [`ClientBuilder::connect_lazy`](crate::ClientBuilder::connect_lazy)): for RedLock nodes
    /// that may be down when the program starts.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] or [`Error::Config`] for bad settings, and
    /// [`Error::Config`] when called inside a Tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> latchkey_redis::Result<()> {
    /// let node = latchkey_redis::Client::builder("redis://10.0.0.1:6379");
    /// let client = latchkey_redis::blocking::Client::connect_lazy(node)?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn connect_lazy(builder: crate::ClientBuilder) -> Result<Client> {
        let rt = Rt::start(builder.command_timeout + DRAIN_MARGIN)?;
        let inner = {
            let _entered = rt.handle().enter();
            builder.connect_lazy()?
        };
        Ok(Client { inner, rt })
    }

    /// The async client, to hand to async code (a clone shares its connection and runtime
    /// tasks, but not this client's runtime thread: keep this client alive while it is used).
    pub fn as_async(&self) -> &crate::Client {
        &self.inner
    }

    /// Runs `op`, an operation of the async API, on this client's runtime and waits for it.
    ///
    /// # Errors
    ///
    /// `op`'s own, and [`Error::Config`] when called inside a Tokio runtime (`op` is then
    /// dropped unpolled: nothing is sent).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(client: latchkey_redis::blocking::Client) -> latchkey_redis::Result<()> {
    /// let latch = client.count_down_latch("batch-42");
    /// client.run(latch.try_set_count(2))?;
    /// let left = client.run(latch.count_down())?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn run<T>(&self, op: impl Future<Output = Result<T>>) -> Result<T> {
        self.rt.wait(op)?
    }

    /// Runs `acquire` (an async acquire: `lock.lock()`, `semaphore.acquire(1)`,
    /// `election.campaign(value)`, `queue.take()`, …) and wraps what it grants in a [`Guard`]
    /// that keeps this client's runtime alive and releases on drop without blocking.
    ///
    /// # Errors
    ///
    /// As [`Client::run`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(client: latchkey_redis::blocking::Client) -> latchkey_redis::Result<()> {
    /// let config = client.rw_lock("config");
    /// let read = client.hold(config.read().lock())?;
    /// read.unlock()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn hold<G>(&self, acquire: impl Future<Output = Result<G>>) -> Result<Guard<G>> {
        let guard = self.run(acquire)?;
        Ok(self.guard(guard))
    }

    /// [`Client::hold`] for an acquire that may give up (`try_lock`, `try_acquire`, …):
    /// `Ok(None)` when it did.
    ///
    /// # Errors
    ///
    /// As [`Client::run`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(client: latchkey_redis::blocking::Client) -> latchkey_redis::Result<()> {
    /// use std::time::Duration;
    /// let lock = client.lock("orders:1001");
    /// match client.try_hold(lock.try_lock(Duration::from_millis(500)))? {
    ///     Some(guard) => guard.unlock()?,
    ///     None => println!("busy"),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_hold<G>(
        &self,
        acquire: impl Future<Output = Result<Option<G>>>,
    ) -> Result<Option<Guard<G>>> {
        Ok(self.run(acquire)?.map(|guard| self.guard(guard)))
    }

    /// Wraps a guard made elsewhere (by async code on this client) in a [`Guard`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(client: latchkey_redis::blocking::Client, guard: latchkey_redis::LockGuard) {
    /// let guard = client.guard(guard);
    /// # }
    /// ```
    pub fn guard<G>(&self, guard: G) -> Guard<G> {
        Guard {
            inner: Some(guard),
            rt: self.rt.clone(),
        }
    }
}

/// A hold kept for synchronous code (see the [module docs](self)): any guard of the async API
/// (`G`: [`LockGuard`](crate::LockGuard), [`Leadership`](crate::Leadership),
/// [`Permits`](crate::Permits), [`Delivery`](crate::Delivery), …), which it dereferences to,
/// and a share of its client's runtime, which it keeps alive.
///
/// Dropping it drops the async guard (which hands its release to the runtime, without
/// blocking), then its share of the runtime.
#[must_use = "dropping the guard releases what it holds at once"]
pub struct Guard<G> {
    // Dropped before the runtime share (see `Drop`).
    inner: Option<G>,
    rt: Rt,
}

impl<G: fmt::Debug> fmt::Debug for Guard<G> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("blocking::Guard").field(&self.inner).finish()
    }
}

impl<G> Deref for Guard<G> {
    type Target = G;

    fn deref(&self) -> &G {
        self.inner
            .as_ref()
            .expect("present until dropped or consumed")
    }
}

impl<G> Guard<G> {
    /// Runs `op` on the async guard, consuming it (`|delivery| delivery.ack()`,
    /// `|permits| permits.release()`, …), on the runtime, and waits for it.
    ///
    /// # Errors
    ///
    /// `op`'s own, and [`Error::Config`] when called inside a Tokio runtime: the guard is then
    /// dropped instead, which hands its release to the runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(client: latchkey_redis::blocking::Client) -> latchkey_redis::Result<()> {
    /// let inbox = client.blocking_queue::<String>("emails");
    /// let delivery = client.hold(inbox.take())?;
    /// println!("{}", delivery.item());
    /// delivery.consume(|delivery| delivery.ack())?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn consume<T, F>(mut self, op: impl FnOnce(G) -> F) -> Result<T>
    where
        F: Future<Output = Result<T>>,
    {
        outside_runtime()?;
        let inner = self
            .inner
            .take()
            .expect("present until dropped or consumed");
        self.rt.wait(op(inner))?
    }

    /// The async guard, without the runtime share: for async code on the same client (keep the
    /// blocking client alive while it is used).
    pub fn into_inner(mut self) -> G {
        self.inner
            .take()
            .expect("present until dropped or consumed")
    }
}

impl<G: crate::Guard> Guard<G> {
    /// Releases the hold and waits for Redis to confirm it (the async guard's `unlock`).
    ///
    /// # Errors
    ///
    /// As [`Guard::unlock`](crate::Guard::unlock), and [`Error::Config`] inside a Tokio runtime
    /// (the guard is then dropped, which hands its release to the runtime).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(client: latchkey_redis::blocking::Client) -> latchkey_redis::Result<()> {
    /// let guard = client.hold(client.fair_lock("payouts").lock())?;
    /// guard.unlock()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn unlock(self) -> Result<()> {
        self.consume(crate::Guard::unlock)
    }

    /// Waits up to `timeout` for the hold to be lost; whether it was (see
    /// [`Guard::lost`](crate::Guard::lost)).
    ///
    /// # Errors
    ///
    /// [`Error::Config`] inside a Tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(client: latchkey_redis::blocking::Client) -> latchkey_redis::Result<()> {
    /// use std::time::Duration;
    /// let guard = client.hold(client.lock("orders:1001").lock())?;
    /// if guard.wait_lost(Duration::from_secs(1))? {
    ///     eprintln!("lost the lock, stopping");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn wait_lost(&self, timeout: Duration) -> Result<bool> {
        let lost = crate::Guard::lost(&**self);
        self.rt
            .wait(async move { tokio::time::timeout(timeout, lost).await.is_ok() })
    }
}

impl<G> Drop for Guard<G> {
    fn drop(&mut self) {
        if let Some(inner) = self.inner.take() {
            // In the runtime's context: a release that needs a task finds it there.
            let _entered = self.rt.handle().enter();
            drop(inner);
        }
    }
}
