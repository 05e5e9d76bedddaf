//! The blocking lock handles and their guards: [`Lock`], [`FairLock`], [`RwLock`] (with
//! [`ReadLock`] and [`WriteLock`]) over their async counterparts.

use std::time::Duration;

use super::Rooted;
use crate::error::Result;
use crate::{LockOptions, LockStatus};

/// The four acquire methods of a blocking lock handle (`lock`, `try_lock`, `lock_with`,
/// `try_lock_with`), each running the async handle's method of the same name.
macro_rules! acquire_methods {
    ($handle:ident -> $guard:ident, $example:literal) => {
        impl $handle {
            /// Acquires the lock, waiting as long as it takes. The lease is the client's
            /// watchdog timeout, renewed by the client's runtime until the guard is released.
            ///
            /// # Errors
            ///
            #[doc = concat!("As [`latchkey::", stringify!($handle), "::lock`](crate::", stringify!($handle), "::lock),")]
            /// and [`Error::Config`](crate::Error::Config) when called inside a Tokio runtime.
            ///
            /// # Examples
            ///
            /// ```no_run
            /// # fn f(client: latchkey::blocking::Client) -> latchkey::Result<()> {
            #[doc = concat!("let guard = ", $example, ".lock()?;")]
            /// // … the critical section …
            /// guard.unlock()?;
            /// # Ok(())
            /// # }
            /// ```
            pub fn lock(&self) -> Result<$guard> {
                let guard = self.inner.run(self.inner.lock())?;
                Ok($guard::root(self.inner.rt().make(|| guard)))
            }

            /// Tries to acquire the lock, waiting at most `wait`; `Ok(None)` if it was not free
            /// in time. `Duration::ZERO` tries once without waiting.
            ///
            /// # Errors
            ///
            #[doc = concat!("As [`latchkey::", stringify!($handle), "::try_lock`](crate::", stringify!($handle), "::try_lock),")]
            /// and [`Error::Config`](crate::Error::Config) when called inside a Tokio runtime.
            ///
            /// # Examples
            ///
            /// ```no_run
            /// # fn f(client: latchkey::blocking::Client) -> latchkey::Result<()> {
            /// use std::time::Duration;
            #[doc = concat!("match ", $example, ".try_lock(Duration::from_millis(500))? {")]
            ///     Some(guard) => guard.unlock()?,
            ///     None => println!("busy, try later"),
            /// }
            /// # Ok(())
            /// # }
            /// ```
            pub fn try_lock(&self, wait: Duration) -> Result<Option<$guard>> {
                let guard = self.inner.run(self.inner.try_lock(wait))?;
                Ok(guard.map(|g| $guard::root(self.inner.rt().make(|| g))))
            }

            /// Acquires the lock with [`LockOptions`](crate::LockOptions): a fixed lease (no
            /// watchdog) and/or a bounded wait.
            ///
            /// # Errors
            ///
            #[doc = concat!("As [`latchkey::", stringify!($handle), "::lock_with`](crate::", stringify!($handle), "::lock_with)")]
            /// ([`Error::WaitTimedOut`](crate::Error::WaitTimedOut) when the wait runs out),
            /// and [`Error::Config`](crate::Error::Config) when called inside a Tokio runtime.
            ///
            /// # Examples
            ///
            /// ```no_run
            /// # fn f(client: latchkey::blocking::Client) -> latchkey::Result<()> {
            /// use std::time::Duration;
            /// use latchkey::LockOptions;
            ///
            /// let options = LockOptions::new()
            ///     .lease(Duration::from_secs(10))
            ///     .wait(Duration::from_secs(1));
            #[doc = concat!("let guard = ", $example, ".lock_with(options)?;")]
            /// # Ok(())
            /// # }
            /// ```
            pub fn lock_with(&self, options: LockOptions) -> Result<$guard> {
                let guard = self.inner.run(self.inner.lock_with(options))?;
                Ok($guard::root(self.inner.rt().make(|| guard)))
            }

            #[doc = concat!("Like [`", stringify!($handle), "::lock_with`], but a wait that runs out is `Ok(None)`")]
            /// rather than an error.
            ///
            /// # Errors
            ///
            #[doc = concat!("As [`latchkey::", stringify!($handle), "::try_lock_with`](crate::", stringify!($handle), "::try_lock_with),")]
            /// and [`Error::Config`](crate::Error::Config) when called inside a Tokio runtime.
            ///
            /// # Examples
            ///
            /// ```no_run
            /// # fn f(client: latchkey::blocking::Client) -> latchkey::Result<()> {
            /// use std::time::Duration;
            /// use latchkey::LockOptions;
            ///
            /// let options = LockOptions::new().lease(Duration::from_secs(5)).wait(Duration::ZERO);
            #[doc = concat!("if let Some(guard) = ", $example, ".try_lock_with(options)? {")]
            ///     guard.unlock()?;
            /// }
            /// # Ok(())
            /// # }
            /// ```
            pub fn try_lock_with(&self, options: LockOptions) -> Result<Option<$guard>> {
                let guard = self.inner.run(self.inner.try_lock_with(options))?;
                Ok(guard.map(|g| $guard::root(self.inner.rt().make(|| g))))
            }
        }
    };
}

/// A blocking lock guard over the async guard `$inner`: `name`, `fencing_token`, `is_lost`,
/// `wait_lost`, `unlock` and the release on drop.
macro_rules! guard {
    ($(#[$doc:meta])* $guard:ident($inner:ty), $example:literal) => {
        $(#[$doc])*
        ///
        /// Dropping the guard releases the hold without blocking: the async guard is dropped
        /// within the client's runtime, which sends the release, and the drop returns at once.
        ///
        /// # Examples
        ///
        /// ```no_run
        /// # fn f(client: latchkey::blocking::Client) -> latchkey::Result<()> {
        #[doc = concat!("let guard = ", $example, ".lock()?;")]
        /// println!("holding it with token {}", guard.fencing_token());
        /// drop(guard); // the release is handed to the client's runtime; returns at once
        /// # Ok(())
        /// # }
        /// ```
        #[must_use = "dropping the guard releases the lock at once"]
        #[derive(Debug)]
        pub struct $guard {
            inner: Rooted<$inner>,
        }

        impl $guard {
            fn root(inner: Rooted<$inner>) -> $guard {
                $guard { inner }
            }

            /// The name of the lock, as given to the client's factory.
            ///
            /// # Examples
            ///
            /// ```no_run
            /// # fn f(client: latchkey::blocking::Client) -> latchkey::Result<()> {
            #[doc = concat!("let guard = ", $example, ".lock()?;")]
            /// println!("holding {}", guard.name());
            /// # Ok(())
            /// # }
            /// ```
            pub fn name(&self) -> &str {
                crate::Guard::name(&*self.inner)
            }

            /// The fencing token of this hold: strictly larger than the token of every earlier
            /// holder of the lock (re-entered holds share their holder's token). Give it to the
            /// storage you write to, and have the storage refuse writes with a smaller token
            /// than one it has seen.
            ///
            /// # Examples
            ///
            /// ```no_run
            /// # fn f(client: latchkey::blocking::Client) -> latchkey::Result<()> {
            #[doc = concat!("let guard = ", $example, ".lock()?;")]
            /// let token = guard.fencing_token();
            /// # Ok(())
            /// # }
            /// ```
            pub fn fencing_token(&self) -> u64 {
                self.inner.fencing_token()
            }

            /// Whether the hold is known to be lost: the watchdog found it gone or owned by
            /// someone else, renewals failed until the lease ran out, or a fixed lease ran out.
            /// Does not wait.
            ///
            /// # Examples
            ///
            /// ```no_run
            /// # fn f(client: latchkey::blocking::Client) -> latchkey::Result<()> {
            #[doc = concat!("let guard = ", $example, ".lock()?;")]
            /// for step in 0..10 {
            ///     if guard.is_lost() {
            ///         eprintln!("lock lost, stopping at step {step}");
            ///         break;
            ///     }
            ///     // … one step of the work …
            /// }
            /// # Ok(())
            /// # }
            /// ```
            pub fn is_lost(&self) -> bool {
                self.inner.is_lost()
            }

            /// Waits up to `timeout` for the hold to be lost (see [`Self::is_lost`]); whether
            /// it was. Returns `Ok(true)` at once for a hold already lost.
            ///
            /// # Errors
            ///
            /// [`Error::Config`](crate::Error::Config) when called inside a Tokio runtime.
            ///
            /// # Examples
            ///
            /// ```no_run
            /// # fn f(client: latchkey::blocking::Client) -> latchkey::Result<()> {
            /// use std::time::Duration;
            #[doc = concat!("let guard = ", $example, ".lock()?;")]
            /// // A supervisor thread could watch the hold like this:
            /// if guard.wait_lost(Duration::from_secs(5))? {
            ///     eprintln!("lock lost");
            /// }
            /// # Ok(())
            /// # }
            /// ```
            pub fn wait_lost(&self, timeout: Duration) -> Result<bool> {
                self.inner.rt().wait_lost(self.inner.lost(), timeout)
            }

            /// Releases this hold now and waits for Redis to confirm it. The guard is consumed,
            /// so a hold cannot be released twice.
            ///
            /// # Errors
            ///
            /// [`Error::NotOwner`](crate::Error::NotOwner) if the hold was already gone
            /// (expired, lost, force-unlocked); connection errors (the hold then expires with
            /// its lease). [`Error::Config`](crate::Error::Config) when called inside a Tokio
            /// runtime: the guard is dropped then, which hands its release to the runtime.
            ///
            /// # Examples
            ///
            /// ```no_run
            /// # fn f(client: latchkey::blocking::Client) -> latchkey::Result<()> {
            #[doc = concat!("let guard = ", $example, ".lock()?;")]
            /// guard.unlock()?;
            /// # Ok(())
            /// # }
            /// ```
            pub fn unlock(self) -> Result<()> {
                self.inner.consume(|guard| guard.unlock())
            }
        }
    };
}

/// A reentrant lock in Redis, for synchronous code: the blocking form of
/// [`latchkey::Lock`](crate::Lock), made with [`Client::lock`](super::Client::lock).
///
/// Clones share ownership (a clone re-enters the holds of the handle it was cloned from); make
/// another handle with [`Client::lock`](super::Client::lock) for a new owner of the same name.
///
/// # Examples
///
/// ```no_run
/// # fn main() -> latchkey::Result<()> {
/// let client = latchkey::blocking::Client::connect("redis://127.0.0.1:6379")?;
/// let lock = client.lock("orders:1001");
/// let guard = lock.lock()?;
/// // … the critical section …
/// guard.unlock()?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct Lock {
    inner: Rooted<crate::Lock>,
}

impl Lock {
    pub(super) fn from_rooted(inner: Rooted<crate::Lock>) -> Lock {
        Lock { inner }
    }

    /// The async handle inside (for [`MultiLock`](super::MultiLock)).
    pub(super) fn rooted(&self) -> &Rooted<crate::Lock> {
        &self.inner
    }

    /// The lock's name as given to [`Client::lock`](super::Client::lock).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(client: latchkey::blocking::Client) {
    /// assert_eq!(client.lock("printer").name(), "printer");
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        self.inner.name()
    }

    /// The owner id of this handle (`<client id>:<n>`), the hash field that counts its holds.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(client: latchkey::blocking::Client) {
    /// let lock = client.lock("printer");
    /// assert!(lock.owner_id().starts_with(client.id()));
    /// # }
    /// ```
    pub fn owner_id(&self) -> &str {
        self.inner.owner_id()
    }

    /// Whether anybody holds the lock (one `EXISTS`).
    ///
    /// # Errors
    ///
    /// As [`latchkey::Lock::is_locked`](crate::Lock::is_locked), and
    /// [`Error::Config`](crate::Error::Config) when called inside a Tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(lock: latchkey::blocking::Lock) -> latchkey::Result<()> {
    /// if lock.is_locked()? {
    ///     println!("somebody holds {}", lock.name());
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn is_locked(&self) -> Result<bool> {
        self.inner.run(self.inner.is_locked())
    }

    /// How many holds this handle (and its clones) has on the lock; 0 if it holds none.
    ///
    /// # Errors
    ///
    /// As [`latchkey::Lock::hold_count`](crate::Lock::hold_count), and
    /// [`Error::Config`](crate::Error::Config) when called inside a Tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(lock: latchkey::blocking::Lock) -> latchkey::Result<()> {
    /// let outer = lock.lock()?;
    /// let inner = lock.lock()?; // re-entered
    /// assert_eq!(lock.hold_count()?, 2);
    /// # Ok(())
    /// # }
    /// ```
    pub fn hold_count(&self) -> Result<u64> {
        self.inner.run(self.inner.hold_count())
    }

    /// The time until the lock expires, whoever holds it; `None` if nobody holds it.
    ///
    /// # Errors
    ///
    /// As [`latchkey::Lock::remaining_lease`](crate::Lock::remaining_lease), and
    /// [`Error::Config`](crate::Error::Config) when called inside a Tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(lock: latchkey::blocking::Lock) -> latchkey::Result<()> {
    /// if let Some(left) = lock.remaining_lease()? {
    ///     println!("expires in {left:?}");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn remaining_lease(&self) -> Result<Option<Duration>> {
        self.inner.run(self.inner.remaining_lease())
    }

    /// A snapshot of the lock's state: holders, remaining lease, last fencing token, waiters.
    ///
    /// # Errors
    ///
    /// As [`latchkey::Lock::status`](crate::Lock::status), and
    /// [`Error::Config`](crate::Error::Config) when called inside a Tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(lock: latchkey::blocking::Lock) -> latchkey::Result<()> {
    /// for holder in lock.status()?.holders {
    ///     println!("{} holds it {} time(s)", holder.owner, holder.holds);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn status(&self) -> Result<LockStatus> {
        self.inner.run(self.inner.status())
    }

    /// Deletes the lock whoever holds it and wakes its waiters; whether there was a lock. For
    /// operators and tests.
    ///
    /// # Errors
    ///
    /// As [`latchkey::Lock::force_unlock`](crate::Lock::force_unlock), and
    /// [`Error::Config`](crate::Error::Config) when called inside a Tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(lock: latchkey::blocking::Lock) -> latchkey::Result<()> {
    /// let existed = lock.force_unlock()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn force_unlock(&self) -> Result<bool> {
        self.inner.run(self.inner.force_unlock())
    }
}

acquire_methods!(Lock -> LockGuard, "client.lock(\"orders:1001\")");

guard! {
    /// One hold of a blocking [`Lock`]: the blocking form of [`latchkey::LockGuard`](crate::LockGuard).
    LockGuard(crate::LockGuard), "client.lock(\"orders:1001\")"
}

/// A fair lock in Redis, for synchronous code: the blocking form of
/// [`latchkey::FairLock`](crate::FairLock), made with
/// [`Client::fair_lock`](super::Client::fair_lock). Waiters get it in the order they asked.
///
/// # Examples
///
/// ```no_run
/// # fn main() -> latchkey::Result<()> {
/// let client = latchkey::blocking::Client::connect("redis://127.0.0.1:6379")?;
/// let guard = client.fair_lock("printer").lock()?;
/// // … print …
/// guard.unlock()?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct FairLock {
    inner: Rooted<crate::FairLock>,
}

impl FairLock {
    pub(super) fn from_rooted(inner: Rooted<crate::FairLock>) -> FairLock {
        FairLock { inner }
    }

    /// The lock's name as given to [`Client::fair_lock`](super::Client::fair_lock).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(client: latchkey::blocking::Client) {
    /// assert_eq!(client.fair_lock("printer").name(), "printer");
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        self.inner.name()
    }

    /// The owner id of this handle (`<client id>:<n>`).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(client: latchkey::blocking::Client) {
    /// assert!(client.fair_lock("printer").owner_id().starts_with(client.id()));
    /// # }
    /// ```
    pub fn owner_id(&self) -> &str {
        self.inner.owner_id()
    }

    /// This handle with another wait time per queued waiter (see
    /// [`latchkey::FairLock::with_thread_wait_time`](crate::FairLock::with_thread_wait_time)).
    ///
    /// # Errors
    ///
    /// As [`latchkey::FairLock::with_thread_wait_time`](crate::FairLock::with_thread_wait_time).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(client: latchkey::blocking::Client) -> latchkey::Result<()> {
    /// use std::time::Duration;
    /// let lock = client.fair_lock("printer").with_thread_wait_time(Duration::from_secs(10))?;
    /// assert_eq!(lock.thread_wait_time(), Duration::from_secs(10));
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_thread_wait_time(self, wait: Duration) -> Result<FairLock> {
        let (lock, rt) = self.inner.into_parts();
        let lock = {
            let _entered = rt.enter();
            lock.with_thread_wait_time(wait)?
        };
        Ok(FairLock::from_rooted(rt.make(|| lock)))
    }

    /// The wait time per queued waiter of this handle.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(client: latchkey::blocking::Client) {
    /// println!("{:?}", client.fair_lock("printer").thread_wait_time());
    /// # }
    /// ```
    pub fn thread_wait_time(&self) -> Duration {
        self.inner.thread_wait_time()
    }

    /// Whether anybody holds the lock (one `EXISTS`).
    ///
    /// # Errors
    ///
    /// As [`latchkey::FairLock::is_locked`](crate::FairLock::is_locked), and
    /// [`Error::Config`](crate::Error::Config) when called inside a Tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(lock: latchkey::blocking::FairLock) -> latchkey::Result<()> {
    /// println!("held: {}", lock.is_locked()?);
    /// # Ok(())
    /// # }
    /// ```
    pub fn is_locked(&self) -> Result<bool> {
        self.inner.run(self.inner.is_locked())
    }

    /// How many holds this handle (and its clones) has on the lock.
    ///
    /// # Errors
    ///
    /// As [`latchkey::FairLock::hold_count`](crate::FairLock::hold_count), and
    /// [`Error::Config`](crate::Error::Config) when called inside a Tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(lock: latchkey::blocking::FairLock) -> latchkey::Result<()> {
    /// assert_eq!(lock.hold_count()?, 0);
    /// # Ok(())
    /// # }
    /// ```
    pub fn hold_count(&self) -> Result<u64> {
        self.inner.run(self.inner.hold_count())
    }

    /// The time until the lock expires, whoever holds it; `None` if nobody holds it.
    ///
    /// # Errors
    ///
    /// As [`latchkey::FairLock::remaining_lease`](crate::FairLock::remaining_lease), and
    /// [`Error::Config`](crate::Error::Config) when called inside a Tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(lock: latchkey::blocking::FairLock) -> latchkey::Result<()> {
    /// println!("{:?}", lock.remaining_lease()?);
    /// # Ok(())
    /// # }
    /// ```
    pub fn remaining_lease(&self) -> Result<Option<Duration>> {
        self.inner.run(self.inner.remaining_lease())
    }

    /// The owner ids waiting in the lock's queue, first in line first.
    ///
    /// # Errors
    ///
    /// As [`latchkey::FairLock::queue`](crate::FairLock::queue), and
    /// [`Error::Config`](crate::Error::Config) when called inside a Tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(lock: latchkey::blocking::FairLock) -> latchkey::Result<()> {
    /// println!("{} waiting", lock.queue()?.len());
    /// # Ok(())
    /// # }
    /// ```
    pub fn queue(&self) -> Result<Vec<String>> {
        self.inner.run(self.inner.queue())
    }

    /// Deletes the lock whoever holds it; whether there was a lock. For operators and tests.
    ///
    /// # Errors
    ///
    /// As [`latchkey::FairLock::force_unlock`](crate::FairLock::force_unlock), and
    /// [`Error::Config`](crate::Error::Config) when called inside a Tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(lock: latchkey::blocking::FairLock) -> latchkey::Result<()> {
    /// lock.force_unlock()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn force_unlock(&self) -> Result<bool> {
        self.inner.run(self.inner.force_unlock())
    }
}

acquire_methods!(FairLock -> FairLockGuard, "client.fair_lock(\"printer\")");

guard! {
    /// One hold of a blocking [`FairLock`]: the blocking form of
    /// [`latchkey::FairLockGuard`](crate::FairLockGuard).
    FairLockGuard(crate::FairLockGuard), "client.fair_lock(\"printer\")"
}

/// A read-write lock in Redis, for synchronous code: the blocking form of
/// [`latchkey::RwLock`](crate::RwLock), made with [`Client::rw_lock`](super::Client::rw_lock).
/// Take its read side with [`RwLock::read`] and its write side with [`RwLock::write`].
///
/// # Examples
///
/// ```no_run
/// # fn main() -> latchkey::Result<()> {
/// let client = latchkey::blocking::Client::connect("redis://127.0.0.1:6379")?;
/// let cache = client.rw_lock("cache");
/// let reading = cache.read().lock()?; // many readers at once
/// reading.unlock()?;
/// let writing = cache.write().lock()?; // one writer, no readers
/// writing.unlock()?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct RwLock {
    inner: Rooted<crate::RwLock>,
}

impl RwLock {
    pub(super) fn from_rooted(inner: Rooted<crate::RwLock>) -> RwLock {
        RwLock { inner }
    }

    /// The lock's name as given to [`Client::rw_lock`](super::Client::rw_lock).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(client: latchkey::blocking::Client) {
    /// assert_eq!(client.rw_lock("cache").name(), "cache");
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        self.inner.name()
    }

    /// The owner id of this handle (`<client id>:<n>`), shared by its read and write sides.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(client: latchkey::blocking::Client) {
    /// assert!(client.rw_lock("cache").owner_id().starts_with(client.id()));
    /// # }
    /// ```
    pub fn owner_id(&self) -> &str {
        self.inner.owner_id()
    }

    /// The read side: shared holds.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(client: latchkey::blocking::Client) -> latchkey::Result<()> {
    /// let reading = client.rw_lock("cache").read().lock()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn read(&self) -> ReadLock {
        ReadLock {
            inner: self.inner.map(crate::RwLock::read),
        }
    }

    /// The write side: an exclusive hold.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(client: latchkey::blocking::Client) -> latchkey::Result<()> {
    /// let writing = client.rw_lock("cache").write().lock()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn write(&self) -> WriteLock {
        WriteLock {
            inner: self.inner.map(crate::RwLock::write),
        }
    }

    /// Whether anybody holds the lock, for reading or writing.
    ///
    /// # Errors
    ///
    /// As [`latchkey::RwLock::is_locked`](crate::RwLock::is_locked), and
    /// [`Error::Config`](crate::Error::Config) when called inside a Tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(cache: latchkey::blocking::RwLock) -> latchkey::Result<()> {
    /// println!("held: {}", cache.is_locked()?);
    /// # Ok(())
    /// # }
    /// ```
    pub fn is_locked(&self) -> Result<bool> {
        self.inner.run(self.inner.is_locked())
    }

    /// Deletes the lock whoever holds it; whether there was a lock. For operators and tests.
    ///
    /// # Errors
    ///
    /// As [`latchkey::RwLock::force_unlock`](crate::RwLock::force_unlock), and
    /// [`Error::Config`](crate::Error::Config) when called inside a Tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(cache: latchkey::blocking::RwLock) -> latchkey::Result<()> {
    /// cache.force_unlock()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn force_unlock(&self) -> Result<bool> {
        self.inner.run(self.inner.force_unlock())
    }
}

/// The read side of a blocking [`RwLock`]: the blocking form of
/// [`latchkey::ReadLock`](crate::ReadLock).
///
/// # Examples
///
/// ```no_run
/// # fn f(client: latchkey::blocking::Client) -> latchkey::Result<()> {
/// let reading = client.rw_lock("cache").read().lock()?;
/// reading.unlock()?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct ReadLock {
    inner: Rooted<crate::ReadLock>,
}

impl ReadLock {
    /// The lock's name.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(client: latchkey::blocking::Client) {
    /// assert_eq!(client.rw_lock("cache").read().name(), "cache");
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        self.inner.rw_lock().name()
    }

    /// How many read holds this handle has.
    ///
    /// # Errors
    ///
    /// As [`latchkey::ReadLock::hold_count`](crate::ReadLock::hold_count), and
    /// [`Error::Config`](crate::Error::Config) when called inside a Tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(client: latchkey::blocking::Client) -> latchkey::Result<()> {
    /// let read = client.rw_lock("cache").read();
    /// let guard = read.lock()?;
    /// assert_eq!(read.hold_count()?, 1);
    /// # Ok(())
    /// # }
    /// ```
    pub fn hold_count(&self) -> Result<u64> {
        self.inner.run(self.inner.hold_count())
    }
}

acquire_methods!(ReadLock -> ReadGuard, "client.rw_lock(\"cache\").read()");

guard! {
    /// A read hold of a blocking [`RwLock`]: the blocking form of
    /// [`latchkey::ReadGuard`](crate::ReadGuard).
    ReadGuard(crate::ReadGuard), "client.rw_lock(\"cache\").read()"
}

/// The write side of a blocking [`RwLock`]: the blocking form of
/// [`latchkey::WriteLock`](crate::WriteLock).
///
/// # Examples
///
/// ```no_run
/// # fn f(client: latchkey::blocking::Client) -> latchkey::Result<()> {
/// let writing = client.rw_lock("cache").write().lock()?;
/// writing.unlock()?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct WriteLock {
    inner: Rooted<crate::WriteLock>,
}

impl WriteLock {
    /// The lock's name.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(client: latchkey::blocking::Client) {
    /// assert_eq!(client.rw_lock("cache").write().name(), "cache");
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        self.inner.rw_lock().name()
    }

    /// How many write holds this handle has.
    ///
    /// # Errors
    ///
    /// As [`latchkey::WriteLock::hold_count`](crate::WriteLock::hold_count), and
    /// [`Error::Config`](crate::Error::Config) when called inside a Tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(client: latchkey::blocking::Client) -> latchkey::Result<()> {
    /// let write = client.rw_lock("cache").write();
    /// assert_eq!(write.hold_count()?, 0);
    /// # Ok(())
    /// # }
    /// ```
    pub fn hold_count(&self) -> Result<u64> {
        self.inner.run(self.inner.hold_count())
    }

    /// Whether anybody holds the write side.
    ///
    /// # Errors
    ///
    /// As [`latchkey::WriteLock::is_locked`](crate::WriteLock::is_locked), and
    /// [`Error::Config`](crate::Error::Config) when called inside a Tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(client: latchkey::blocking::Client) -> latchkey::Result<()> {
    /// println!("written to: {}", client.rw_lock("cache").write().is_locked()?);
    /// # Ok(())
    /// # }
    /// ```
    pub fn is_locked(&self) -> Result<bool> {
        self.inner.run(self.inner.is_locked())
    }
}

acquire_methods!(WriteLock -> WriteGuard, "client.rw_lock(\"cache\").write()");

guard! {
    /// The write hold of a blocking [`RwLock`]: the blocking form of
    /// [`latchkey::WriteGuard`](crate::WriteGuard).
    WriteGuard(crate::WriteGuard), "client.rw_lock(\"cache\").write()"
}
