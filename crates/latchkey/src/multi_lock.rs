//! The multi-lock: several locks taken all together or not at all (Redisson's `RedissonMultiLock`).

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use tokio::time::Instant;

use crate::client::Object;
use crate::error::{Error, Result};
use crate::guard::{FencingToken, Holds, Lost};
use crate::lock::{Lock, LockGuard, LockOptions};
use crate::metrics::{self, Op};
use crate::wait::{deadline_after, or_timed_out, unbounded};

/// Several [`Lock`]s held together: all of them or none.
///
/// The locks may live on different clients and different Redis servers. An acquire never
/// returns a partial hold: when one lock cannot be taken, every lock taken so far is released
/// before the call waits or returns.
///
/// # Deadlock freedom
///
/// A waiter never holds one lock while it waits for another. It first tries every lock at once
/// without waiting. If one is busy, it releases what it took, waits (by pub/sub, like
/// [`Lock::lock`]) for the busy lock alone, then tries the others again without waiting while it
/// holds that one, and so on. Two multi-locks over the same locks in different orders therefore
/// cannot deadlock each other, as they could if each took its locks one by one while waiting.
///
/// # Examples
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> latchkey_redis::Result<()> {
/// use latchkey_redis::{Client, MultiLock};
///
/// let a = Client::connect("redis://10.0.0.1:6379").await?;
/// let b = Client::connect("redis://10.0.0.2:6379").await?;
/// let both = MultiLock::new([a.lock("account:1"), b.lock("account:2")])?;
///
/// let guard = both.lock().await?;
/// // … move money between the two accounts …
/// guard.unlock().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct MultiLock {
    locks: Arc<[Lock]>,
}

/// One round of trying every lock without waiting.
enum Round {
    All(Vec<LockGuard>),
    /// This lock was busy; everything taken in the round was released.
    Busy(usize),
}

impl MultiLock {
    /// A multi-lock over `locks` (at least one, each once).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] if `locks` is empty, or names one lock twice (the same name
    /// on clients of the same URL): every acquire is an owner of its own, so the set could
    /// never be held. Nothing is sent.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(client: latchkey_redis::Client) -> latchkey_redis::Result<()> {
    /// let pair = latchkey_redis::MultiLock::new([client.lock("a"), client.lock("b")])?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(locks: impl IntoIterator<Item = Lock>) -> Result<MultiLock> {
        let locks: Arc<[Lock]> = locks.into_iter().collect();
        if locks.is_empty() {
            return Err(Error::invalid("locks", "no locks; give at least one"));
        }
        let mut seen = std::collections::HashSet::new();
        for lock in locks.iter() {
            let client = Object::client(lock);
            let key = Holds::key(lock);
            if !seen.insert((client.inner.config.url().to_owned(), key.clone())) {
                return Err(Error::invalid(
                    "locks",
                    format!(
                        "`{}` is given twice; give each lock once (a multi-lock is one owner of \
                         every lock in it)",
                        lock.name()
                    ),
                ));
            }
        }
        Ok(MultiLock { locks })
    }

    /// The locks, in the order given.
    pub fn locks(&self) -> &[Lock] {
        &self.locks
    }

    /// Acquires every lock, waiting as long as it takes. Leases are renewed by the watchdogs.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe. Dropping the future leaves no hold behind: locks taken so far are released
    /// (by the clients' background tasks if need be), as for [`Lock::lock`].
    ///
    /// # Errors
    ///
    /// The first error of any lock (see [`Lock::lock`]); the locks taken are released first.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(locks: latchkey_redis::MultiLock) -> latchkey_redis::Result<()> {
    /// let guard = locks.lock().await?;
    /// guard.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn lock(&self) -> Result<MultiLockGuard> {
        Ok(unbounded(self.acquire(None, None).await?))
    }

    /// Tries to acquire every lock, waiting at most `wait`; `Ok(None)` if they were not all free
    /// in time (nothing is held then). `Duration::ZERO` tries once.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`MultiLock::lock`].
    ///
    /// # Errors
    ///
    /// As [`MultiLock::lock`], and [`Error::InvalidArgument`] if `wait` is too large to add to
    /// the clock.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(locks: latchkey_redis::MultiLock) -> latchkey_redis::Result<()> {
    /// use std::time::Duration;
    /// if let Some(guard) = locks.try_lock(Duration::from_secs(1)).await? {
    ///     guard.unlock().await?;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_lock(&self, wait: Duration) -> Result<Option<MultiLockGuard>> {
        self.acquire(None, Some(deadline_after(wait, "`lock()`")?))
            .await
    }

    /// Acquires every lock with [`LockOptions`]: a fixed lease for each lock (no watchdog) and/or
    /// a bounded wait for the whole set.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`MultiLock::lock`].
    ///
    /// # Errors
    ///
    /// As [`MultiLock::lock`]; [`Error::WaitTimedOut`] if a wait was given and ran out;
    /// [`Error::InvalidArgument`] for a lease out of range or a wait too large.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(locks: latchkey_redis::MultiLock) -> latchkey_redis::Result<()> {
    /// use std::time::Duration;
    /// use latchkey_redis::LockOptions;
    ///
    /// let options = LockOptions::new().lease(Duration::from_secs(10)).wait(Duration::from_secs(1));
    /// let guard = locks.lock_with(options).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn lock_with(&self, options: LockOptions) -> Result<MultiLockGuard> {
        let started = std::time::Instant::now();
        let granted = self.try_lock_with(options).await?;
        or_timed_out(granted, &self.names(), started)
    }

    /// Like [`MultiLock::lock_with`], but a wait that runs out is `Ok(None)`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`MultiLock::lock`].
    ///
    /// # Errors
    ///
    /// As [`MultiLock::lock_with`], except for running out of time.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(locks: latchkey_redis::MultiLock) -> latchkey_redis::Result<()> {
    /// use std::time::Duration;
    /// use latchkey_redis::LockOptions;
    ///
    /// if let Some(guard) = locks.try_lock_with(LockOptions::new().wait(Duration::ZERO)).await? {
    ///     guard.unlock().await?;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_lock_with(&self, options: LockOptions) -> Result<Option<MultiLockGuard>> {
        let (_, deadline) = options.checked()?;
        self.acquire(options.lease, deadline).await
    }

    fn names(&self) -> String {
        let names: Vec<&str> = self.locks.iter().map(Lock::name).collect();
        names.join(", ")
    }

    async fn acquire(
        &self,
        lease: Option<Duration>,
        deadline: Option<Instant>,
    ) -> Result<Option<MultiLockGuard>> {
        let names = self.names();
        let client = Object::client(&self.locks[0]);
        let site = metrics::Site::new(client, "multi_lock", &names);
        metrics::lock_traced(site, deadline, &names, self.acquire_all(lease, deadline)).await
    }

    async fn acquire_all(
        &self,
        lease: Option<Duration>,
        deadline: Option<Instant>,
    ) -> Result<Option<MultiLockGuard>> {
        // First every lock without waiting; later, holding the one that was busy, the others.
        let mut held = None;
        loop {
            let busy = match self.round(lease, held).await? {
                Round::All(guards) => return Ok(Some(self.guard(guards))),
                Round::Busy(index) => index,
            };
            // Holding nothing, wait for the lock that was busy …
            let wait = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if wait.is_some_and(|left| left.is_zero()) {
                return Ok(None);
            }
            let options = LockOptions { lease, wait };
            // Boxed: a lock's acquire future is deep, and a multi-lock nests several of them.
            let Some(first) = Box::pin(self.locks[busy].try_lock_with(options)).await? else {
                return Ok(None);
            };
            // … then, holding it, try the others without waiting.
            held = Some((busy, first));
        }
    }

    fn guard(&self, guards: Vec<LockGuard>) -> MultiLockGuard {
        MultiLockGuard {
            guards,
            names: self.names(),
        }
    }

    /// Tries every lock (but `held`, already taken) at once without waiting. On any failure
    /// everything taken, `held` included, is released before returning.
    async fn round(
        &self,
        lease: Option<Duration>,
        held: Option<(usize, LockGuard)>,
    ) -> Result<Round> {
        let options = LockOptions {
            lease,
            wait: Some(Duration::ZERO),
        };
        let held_index = held.as_ref().map(|(i, _)| *i);
        let attempts = self.locks.iter().enumerate().map(|(i, lock)| async move {
            if Some(i) == held_index {
                return Ok(None);
            }
            Box::pin(lock.try_lock_with(options)).await
        });
        let results = join_all(attempts).await;
        let (mut held, mut busy, mut error) = (held, None, None);
        let mut guards = Vec::with_capacity(self.locks.len());
        for (i, result) in results.into_iter().enumerate() {
            match result {
                Ok(Some(guard)) => guards.push(guard),
                Ok(None) if Some(i) == held_index => {
                    guards.push(held.take().expect("held once").1);
                }
                Ok(None) => {
                    busy.get_or_insert(i);
                }
                Err(e) => {
                    error.get_or_insert(e);
                }
            }
        }
        if error.is_none() && busy.is_none() {
            return Ok(Round::All(guards));
        }
        // Never keep part of the set: give back what this round took.
        release_all(guards).await;
        match error {
            Some(e) => Err(e),
            None => Ok(Round::Busy(busy.expect("a lock was busy"))),
        }
    }
}

async fn release_all(guards: Vec<LockGuard>) {
    for result in join_all(guards.into_iter().map(LockGuard::unlock)).await {
        if let Err(e) = result {
            tracing::debug!(error = %e.chain(), "latchkey multi-lock could not release a lock it took");
        }
    }
}

/// Every lock of a [`MultiLock`], held together. Releasing it (explicitly with
/// [`MultiLockGuard::unlock`], or by dropping it) releases every lock.
///
/// The guard owns what it needs (`'static`, `Send`, `Sync`). Dropping it never blocks: the
/// releases are handed to the clients' background tasks.
#[must_use = "dropping the guard releases the locks at once"]
#[derive(Debug)]
pub struct MultiLockGuard {
    guards: Vec<LockGuard>,
    /// The locks' names, comma-separated ([`Guard::name`](crate::Guard::name)).
    names: String,
}

impl MultiLockGuard {
    /// The guard of each lock, in the order the locks were given.
    pub fn guards(&self) -> &[LockGuard] {
        &self.guards
    }

    /// The fencing token of each lock, in the order the locks were given. (The multi-lock has
    /// no token of its own: [`Guard::fencing_token`](crate::Guard::fencing_token) is `None`.)
    pub fn fencing_tokens(&self) -> Vec<FencingToken> {
        self.guards.iter().map(LockGuard::fencing_token).collect()
    }

    /// Whether any of the locks is known to be lost.
    pub fn is_lost(&self) -> bool {
        self.guards.iter().any(LockGuard::is_lost)
    }

    /// Resolves when any of the locks is lost (see [`LockGuard::lost`]).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only waits.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(locks: latchkey_redis::MultiLock) -> latchkey_redis::Result<()> {
    /// # async fn job() {}
    /// let guard = locks.lock().await?;
    /// tokio::select! {
    ///     _ = guard.lost() => eprintln!("a lock was lost, stopping"),
    ///     _ = job() => guard.unlock().await?,
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn lost(&self) -> Lost {
        let waits: Vec<Lost> = self.guards.iter().map(LockGuard::lost).collect();
        Lost::new(async move {
            futures_util::future::select_all(waits).await;
        })
    }

    /// Releases every lock now and waits for Redis to confirm it.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before it completes still releases every lock (see
    /// [`LockGuard::unlock`]).
    ///
    /// # Errors
    ///
    /// The first error of the locks' releases ([`Error::NotOwner`] if a lock had been lost);
    /// every lock is released (or left to expire) regardless.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(locks: latchkey_redis::MultiLock) -> latchkey_redis::Result<()> {
    /// let guard = locks.lock().await?;
    /// guard.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn unlock(self) -> Result<()> {
        let span = metrics::span(Op::Unlock, "multi_lock", &self.names, None);
        let unlock = async {
            let results = join_all(self.guards.into_iter().map(LockGuard::unlock)).await;
            results.into_iter().collect::<Result<Vec<()>>>().map(|_| ())
        };
        metrics::traced(span, unlock).await
    }
}

crate::guard::forward_guard!(MultiLockGuard, |guard| &guard.names, None, guard.unlock());
