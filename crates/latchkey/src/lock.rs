//! The reentrant lock, compatible with Redisson's `RLock`.

use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use tokio::time::Instant;

use crate::client::{Client, Object};
use crate::error::Result;
use crate::guard::{attempt_hold, lock_guard, lock_methods, lock_reads, Claim, Holds};
use crate::keys::{check_name, named_debug, LockKeys};
use crate::pubsub::WakePolicy;
use crate::replica::AcquireCall;
use crate::scripts::{self, Invoke};
use crate::task::{detached_try, Task};
use crate::wait::{checked_options, unexpected, Attempt, Waiting};
use crate::watchdog::{Lease, COUNTER_IDLE};

/// How long a lock handed off to a waiting client stays reserved for it.
pub(crate) const HAND_OFF_RESERVATION: Duration = Duration::from_millis(200);

impl Client {
    /// A lock named `name`: a handle that acquires it, shared freely (clones are the same
    /// handle, and every acquire through any of them is an owner of its own).
    ///
    /// Making the handle sends nothing; the name is checked when the handle is used.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(client: latchkey_redis::Client) -> latchkey_redis::Result<()> {
    /// let lock = client.lock("orders:1001");
    /// let guard = lock.lock().await?;
    /// assert!(lock.is_locked().await?);
    /// guard.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn lock(&self, name: impl Into<String>) -> Lock {
        let (client, name) = (self.clone(), name.into());
        let keys = LockKeys::new(client.namespace(), &name);
        Lock {
            inner: Arc::new(LockInner { client, name, keys }),
        }
    }
}

/// A snapshot of a lock's state, from [`Lock::status`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockStatus {
    /// Who holds the lock (empty when it is free). Usually one owner; a Redisson read lock or a
    /// foreign tool may show more.
    pub holders: Vec<Holder>,
    /// Time left on the lease; `None` when free or without expiry.
    pub remaining_lease: Option<Duration>,
    /// The fencing token of the latest holder; `None` if the lock was not taken by latchkey in
    /// the last minute or so (the counter expires with its lock idle).
    pub fencing_token: Option<crate::FencingToken>,
    /// How many latchkey clients are registered as waiting.
    pub waiting_clients: u64,
}

/// One holder in a [`LockStatus`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holder {
    /// The owner id (`<client id>:<n>` for latchkey and Redisson clients).
    pub owner: String,
    /// How many holds it has: 1 for a latchkey owner (its re-entries are counted by its
    /// guards); a Redisson thread counts its re-entries here.
    pub holds: u64,
}

/// The holders in a flat list of `(owner, holds)`, as the status and inspect scripts give them.
pub(crate) fn holders(flat: Vec<(String, u64)>) -> Vec<Holder> {
    flat.into_iter()
        .map(|(owner, holds)| Holder { owner, holds })
        .collect()
}

/// A remaining lease from a `PTTL` (negative: none).
pub(crate) fn lease(pttl: i64) -> Option<Duration> {
    (pttl >= 0).then(|| Duration::from_millis(pttl as u64))
}

/// A fencing token from a counter read (negative: none).
pub(crate) fn token(value: i64) -> Option<crate::FencingToken> {
    (value >= 0).then(|| crate::FencingToken::new(value as u64))
}

/// Options for [`Lock::lock_with`] and [`Lock::try_lock_with`].
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use latchkey_redis::LockOptions;
///
/// // Hold for at most 10 s (no watchdog), wait at most 2 s for it.
/// let options = LockOptions::new()
///     .lease(Duration::from_secs(10))
///     .wait(Duration::from_secs(2));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[must_use]
pub struct LockOptions {
    /// The fixed lease, if one was given (read by the multi-lock too).
    pub(crate) lease: Option<Duration>,
    /// The wait, if one was given.
    pub(crate) wait: Option<Duration>,
}

impl LockOptions {
    /// Default options: watchdog lease, wait as long as it takes.
    pub fn new() -> LockOptions {
        LockOptions::default()
    }

    /// The lease and the deadline these options ask for, checked.
    pub(crate) fn checked(&self) -> Result<(Lease, Option<Instant>)> {
        checked_options(self.lease, self.wait, "`lock()`")
    }

    /// A fixed lease: the lock expires this long after it is taken unless released first, and
    /// the watchdog does not renew it. Between 1 ms and [`MAX_LEASE`](crate::MAX_LEASE).
    pub fn lease(mut self, lease: Duration) -> LockOptions {
        self.lease = Some(lease);
        self
    }

    /// The longest time to wait for the lock. `Duration::ZERO` tries once.
    pub fn wait(mut self, wait: Duration) -> LockOptions {
        self.wait = Some(wait);
        self
    }
}

/// A distributed lock, kept in Redis in Redisson's `RLock` layout.
///
/// Made by [`Client::lock`]. Share it as you would an `Arc<tokio::sync::Mutex>`: clone it into
/// tasks, keep it in application state. **Every acquire is an owner of its own**, whichever
/// handle or clone it is made through, so two acquires always exclude each other — two tasks,
/// two requests, or two futures of one task polled together (`join!`, `select!`).
///
/// Re-entry is explicit: code that holds the lock and calls code that needs it passes the
/// guard, or a guard made by [`LockGuard::reenter`] (no round trip); the hold is released when
/// its last guard is. Another `lock()` while holding the lock is another owner, and waits for
/// the first (as a second `lock()` of a `tokio::sync::Mutex` in the same task would).
///
/// The lock is a Redis hash at key `name` whose field `<client id>:<n>` (the acquire's owner
/// id) holds the hold count; its TTL is the lease. A fencing counter at
/// `redisson_lock_token:{name}` gives each new holder a larger token. Waiters listen on
/// `redisson_lock__channel:{name}`, so Redisson (Java) clients and latchkey clients can share a
/// lock.
///
/// # Examples
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> latchkey_redis::Result<()> {
/// let client = latchkey_redis::Client::connect("redis://127.0.0.1:6379").await?;
/// let lock = client.lock("orders:1001");
///
/// let guard = lock.lock().await?;
/// let token = guard.fencing_token(); // pass it to the storage you write to
/// // … the critical section …
/// guard.unlock().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Lock {
    inner: Arc<LockInner>,
}

struct LockInner {
    client: Client,
    name: String,
    keys: LockKeys,
}

named_debug!(Lock);
crate::client::object!(Lock);

lock_reads!(Lock);

lock_methods! {
    Lock -> LockGuard;
    /// Acquires the lock, waiting as long as it takes. The lease is the client's watchdog
    /// timeout, renewed by the watchdog until the guard is released.
    ///
    /// Every call is an owner of its own: it waits while anybody else holds the lock, including
    /// another guard of this process (see [`LockGuard::reenter`] for re-entry).
    ///
    /// # Redis stalls
    ///
    /// If a call to Redis times out ([`Error::Timeout`](crate::Error::Timeout)) while the wait
    /// has time left, the attempt is made again after a short pause, within the wait: a stall
    /// shorter than the wait is waited through (without a limit, any stall). That is safe: a
    /// grant that the timed-out call made after all belongs to this call's owner id alone, and
    /// the next attempt takes it as its grant. If the wait ends first, that hold is released in
    /// the background.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe. Dropping the future leaves no hold, subscription or renewal behind: if the
    /// acquire script already ran when the future was dropped, the hold it granted is released
    /// by the client's background task.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a bad name, [`Error::WrongType`](crate::Error::WrongType) if the key holds another
    /// type, connection errors ([`Error::is_connection`](crate::Error::is_connection)) if Redis cannot be reached.
    /// [`Error::NotReplicated`](crate::Error::NotReplicated) with replica sync (see
    /// [`ClientBuilder::replica_sync`](crate::ClientBuilder::replica_sync)) when too few replicas
    /// acknowledged the grant in time: the hold was released again ([`Error::is_not_replicated`](crate::Error::is_not_replicated)).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(lock: latchkey_redis::Lock) -> latchkey_redis::Result<()> {
    /// let guard = lock.lock().await?;
    /// // … the critical section …
    /// guard.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    lock;
    /// Tries to acquire the lock, waiting at most `wait`; `Ok(None)` if it was not free in time.
    /// `Duration::ZERO` tries once without waiting. The lease is renewed by the watchdog.
    try_lock;
}

impl Lock {
    /// The lock's name as given to [`Client::lock`], without the client's
    /// [namespace](crate::ClientBuilder::namespace): under the namespace `billing`, `name()` is
    /// `printer` and the lock is kept at `billing:printer` in Redis. The name is checked
    /// (length, reserved prefixes, a whole hash tag) as given, whatever the namespace.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(client: latchkey_redis::Client) {
    /// assert_eq!(client.lock("printer").name(), "printer");
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    async fn acquire(&self, lease: Lease, deadline: Option<Instant>) -> Result<Option<LockGuard>> {
        check_name(&self.inner.name)?;
        let leave = || self.leave_task();
        let waiting = Waiting {
            on_leave: Some(&leave),
            ..self.waiting(&self.inner.keys.channel, WakePolicy::Lock, "lock")
        };
        let claim = Claim::new(self);
        waiting
            .run(deadline, |turn| {
                let (claim, queue) = (claim.clone(), turn.queue());
                // Boxed (as a `dyn Future`, which also keeps the callers' `Send` checks
                // shallow), and run detached: a caller who goes away cannot strand a hold (see
                // `task::detached`).
                detached_try(async move { attempt(claim, lease, turn.park, queue).await }.boxed())
            })
            .await
    }

    /// The clean-up run when this client's last waiter for the lock gives up: unregister the
    /// client, and pass on a hand-off that was meant for it.
    fn leave_task(&self) -> Task {
        let inner = &self.inner;
        Task::new(
            &scripts::LOCK_LEAVE,
            inner.keys.release_keys(),
            vec![
                inner.client.inner.wake_id.to_string(),
                HAND_OFF_RESERVATION.as_millis().to_string(),
                scripts::UNLOCK_MESSAGE.to_owned(),
                inner.client.inner.conn.publish_command().to_owned(),
            ],
            "leaving a lock's wait queue",
        )
    }

    /// A snapshot of the lock's state: holders and their hold counts, remaining lease, the last
    /// fencing token handed out, and how many latchkey clients wait. One read-only script call.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a read.
    ///
    /// # Errors
    ///
    /// [`Error::WrongType`](crate::Error::WrongType) if the key is not a lock, connection errors.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(lock: latchkey_redis::Lock) -> latchkey_redis::Result<()> {
    /// let status = lock.status().await?;
    /// for holder in &status.holders {
    ///     println!("{} holds it {} time(s)", holder.owner, holder.holds);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    #[tracing::instrument(level = "debug", name = "status", skip_all, fields(primitive = "lock", name = %self.inner.name))]
    pub async fn status(&self) -> Result<LockStatus> {
        check_name(&self.inner.name)?;
        let mut invocation = scripts::LOCK_STATUS.invocation();
        invocation
            .key(&*self.inner.keys.hash)
            .key(&*self.inner.keys.token)
            .key(&*self.inner.keys.queue);
        let (owners, pttl, last, waiting_clients): (Vec<(String, u64)>, i64, i64, u64) =
            self.script(&invocation, "reading a lock's status").await?;
        Ok(LockStatus {
            holders: holders(owners),
            remaining_lease: lease(pttl),
            fencing_token: token(last),
            waiting_clients,
        })
    }

    /// Deletes the lock whoever holds it and wakes its waiters. Returns whether there was a lock.
    /// Holders lose the lock (their watchdog notices and fires [`LockGuard::lost`]). For
    /// operators and tests; a key of another type is left alone.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: one script call, applied or not.
    ///
    /// # Errors
    ///
    /// [`Error::WrongType`](crate::Error::WrongType) if the key is not a lock, connection errors.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(lock: latchkey_redis::Lock) -> latchkey_redis::Result<()> {
    /// let existed = lock.force_unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    #[tracing::instrument(level = "debug", name = "force_unlock", skip_all, fields(primitive = "lock", name = %self.inner.name))]
    pub async fn force_unlock(&self) -> Result<bool> {
        check_name(&self.inner.name)?;
        let mut invocation = scripts::LOCK_FORCE_UNLOCK.invocation();
        invocation
            .key(&*self.inner.keys.hash)
            .key(&*self.inner.keys.channel)
            .arg(scripts::UNLOCK_MESSAGE)
            .arg(self.inner.client.inner.conn.publish_command());
        let deleted: i64 = self.script(&invocation, "force-unlocking").await?;
        Ok(deleted == 1)
    }
}

/// One acquire script call of `claim` (run detached by the caller).
///
/// `park` is how long the caller will wait before its next attempt if this one fails (zero: it
/// will not wait); `queue` is what a grant does to the client's place in the wait queue.
async fn attempt(
    claim: Claim<Lock>,
    lease: Lease,
    park: Duration,
    queue: &'static str,
) -> Result<Attempt<LockGuard>> {
    let lock = claim.held();
    let inner = &lock.inner;
    let client = &inner.client.inner;
    let k = &inner.keys;
    let keys = [&*k.hash, &*k.token, &*k.queue, &*k.alive, &*k.hand_off];
    let args = |lease_ms: u64| {
        vec![
            lease_ms.to_string(),
            claim.field().to_string(),
            client.wake_id.to_string(),
            (park.as_millis() as u64).to_string(),
            queue.to_owned(),
            (lease_ms + COUNTER_IDLE.as_millis() as u64).to_string(),
        ]
    };
    attempt_hold(
        &claim,
        lease,
        AcquireCall {
            script: &scripts::LOCK_ACQUIRE,
            keys: &keys,
            args: &[],
            context: "acquiring a lock",
            name: &inner.name,
        },
        args,
        |core| LockGuard { core },
        |reply| match reply {
            [0, retry_after] => Ok(Attempt::retry_after_ms(*retry_after)),
            other => Err(unexpected("the lock script", other)),
        },
    )
    .await
}

lock_guard!(
    /// One hold of a [`Lock`]. Releasing it (explicitly with [`LockGuard::unlock`], or by dropping
    /// it, and every guard [re-entered](LockGuard::reenter) from it) frees the lock.
    ///
    /// The guard owns what it needs (`'static`, `Send`, `Sync`), so it can move into a spawned task.
    /// Dropping it never blocks: the release is handed to the client's background task.
    #[must_use = "dropping the guard releases the lock at once"]
    LockGuard(Lock),
    "client.lock(\"orders:1001\").lock()",
    lock
);

impl Holds for Lock {
    const KIND: &'static str = "lock";

    fn key(&self) -> &Arc<str> {
        &self.inner.keys.hash
    }

    fn release_task(&self, field: &str) -> Task {
        let inner = &self.inner;
        Task::new(
            &scripts::LOCK_RELEASE,
            inner.keys.release_keys(),
            vec![
                scripts::UNLOCK_MESSAGE.to_owned(),
                field.to_owned(),
                HAND_OFF_RESERVATION.as_millis().to_string(),
                inner.client.inner.conn.publish_command().to_owned(),
            ],
            "releasing a lock",
        )
    }

    /// The guarded release of a hold granted with `token`, sent again to a new primary after
    /// a failover (see `scripts/lock_release_resend.lua`).
    fn resend_task(&self, field: &str, token: u64) -> Option<Task> {
        let keys = &self.inner.keys;
        Some(Task::new(
            &scripts::LOCK_RELEASE_RESEND,
            vec![keys.hash.clone(), keys.token.clone(), keys.channel.clone()],
            vec![
                field.to_owned(),
                token.to_string(),
                scripts::UNLOCK_MESSAGE.to_owned(),
                self.inner.client.inner.conn.publish_command().to_owned(),
            ],
            "releasing a lock again after a failover",
        ))
    }
}
