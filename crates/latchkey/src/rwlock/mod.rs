//! The read-write lock, compatible with Redisson's `RReadWriteLock`: many readers or one writer.
//! See [`RwLock`] for the layout, the leases and the policy.

mod read_guard;
mod write_guard;

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::client::{Client, Object};
use crate::error::Result;
use crate::guard::{attempt_hold, lock_methods, Claim, Holds};
use crate::keys::{check_name, named_debug, RwLockKeys};
use crate::pubsub::WakePolicy;
use crate::replica::AcquireCall;
use crate::scripts::{Invoke, READ_UNLOCK_MESSAGE, UNLOCK_MESSAGE};
use crate::scripts::{
    RW_FORCE_UNLOCK, RW_LEAVE, RW_READ_ACQUIRE, RW_READ_RELEASE, RW_RENEW, RW_WRITE_ACQUIRE,
    RW_WRITE_RELEASE,
};
use crate::task::{detached_try, LeaveOnDrop, Place, Task};
use crate::wait::{unexpected, Attempt};
use crate::watchdog::{Lease, Renewal, COUNTER_IDLE};

pub use read_guard::ReadGuard;
pub use write_guard::WriteGuard;

/// A distributed read-write lock: any number of readers, or one writer, kept in Redis in
/// Redisson's `RReadWriteLock` layout.
///
/// Made by [`Client::rw_lock`]; take the read side with [`RwLock::read`] and the write side
/// with [`RwLock::write`]. As with [`Lock`](crate::Lock), every acquire is an owner of its own:
/// two writes exclude each other whatever handle, clone, task or future they come from, as
/// `Arc<tokio::sync::RwLock>`'s do. Re-entry is explicit ([`WriteGuard::reenter`],
/// [`ReadGuard::reenter`]), and so is the downgrade of a write hold to a read hold
/// ([`WriteGuard::downgrade`]). Asking for the write lock while holding a read guard waits for
/// that read guard, as `tokio::sync::RwLock` does: release it first.
///
/// Writers are preferred: a waiting writer holds back new readers, so writers do not starve
/// under a steady stream of readers (see below).
///
/// # Layout (Redisson's)
///
/// One hash at key `name`: field `mode` is `"read"` or `"write"`; field `<owner>` counts the
/// owner's read holds; field `<owner>:write` counts its write holds (a latchkey owner has one of
/// each at most). Read hold `i` of an owner
/// has its own lease key `{name}:<owner>:rwlock_timeout:<i>`; the hash's TTL is the longest
/// lease of any hold. Waiters listen on `redisson_rwlock:{name}`: a write unlock publishes
/// `"1"` (Redisson's `READ_UNLOCK_MESSAGE`: every waiter may retry) and a read unlock that frees
/// the lock publishes `"0"` (`UNLOCK_MESSAGE`), as Redisson does. latchkey adds a fencing counter
/// `latchkey_rwlock_token:{name}` and the pending writers `latchkey_rwlock_writers:{name}` (a zset
/// of write fields → Redis server time at which the mark goes stale). Every key and channel
/// shares the hash tag `{name}`.
///
/// # Leases
///
/// Each reader's holds have their own lease keys, and the watchdog renews only the reader's own
/// keys (Redisson's renewal extends every reader's keys, so one live reader keeps a crashed
/// reader's holds alive). Every acquire and release script drops the fields of readers whose
/// lease keys have all expired, so a crashed reader holds up writers for at most its own lease.
///
/// # Policy: writer preference
///
/// A writer that has to wait marks itself pending; while a live writer is pending, new readers
/// wait even though the lock is in read mode, so a steady stream of overlapping readers cannot
/// starve writers: the current readers finish, the writer goes, then the waiting readers. The
/// mark is refreshed by each attempt of the writer, removed when it gets the lock or gives up
/// (which wakes the readers it held back), and goes stale by itself if the writer vanished: two
/// seconds after its next attempt was due, at most four seconds after its last one. A
/// downgrade never waits. The flip side: under a steady stream of writers, readers wait until no
/// writer is pending. Redisson (Java) readers do not know the mark and are not held back by it.
///
/// # Examples
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> latchkey_redis::Result<()> {
/// let client = latchkey_redis::Client::connect("redis://127.0.0.1:6379").await?;
/// let config = client.rw_lock("config");
///
/// let read = config.read().lock().await?; // shared with other readers
/// read.unlock().await?;
///
/// let write = config.write().lock().await?; // alone
/// write.unlock().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RwLock {
    inner: Arc<RwInner>,
}

struct RwInner {
    client: Client,
    name: String,
    keys: RwLockKeys,
}

named_debug!(RwLock);

impl Client {
    /// A read-write lock named `name`: a handle shared freely, every acquire through it an
    /// owner of its own.
    ///
    /// Making the handle sends nothing; the name is checked when the handle is used.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(client: latchkey_redis::Client) -> latchkey_redis::Result<()> {
    /// let config = client.rw_lock("config");
    /// let guard = config.read().lock().await?;
    /// guard.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn rw_lock(&self, name: impl Into<String>) -> RwLock {
        let (client, name) = (self.clone(), name.into());
        let keys = RwLockKeys::new(client.namespace(), &name);
        RwLock {
            inner: Arc::new(RwInner { client, name, keys }),
        }
    }
}

/// One write attempt: the wait loop's answer, and the pending mark of a writer that was marked
/// by it.
struct WriteAttempt {
    attempt: Attempt<WriteGuard>,
    mark: Option<LeaveOnDrop>,
}

impl RwLock {
    /// The lock's name as given to [`Client::rw_lock`], without the client's
    /// [namespace](crate::ClientBuilder::namespace): under the namespace `billing`, `name()` is
    /// `config` and the lock is kept at `billing:config` in Redis. The name is checked
    /// (length, reserved prefixes, a whole hash tag) as given, whatever the namespace.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(client: latchkey_redis::Client) {
    /// assert_eq!(client.rw_lock("config").name(), "config");
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The read side of this lock.
    pub fn read(&self) -> ReadLock {
        ReadLock { rw: self.clone() }
    }

    /// The write side of this lock.
    pub fn write(&self) -> WriteLock {
        WriteLock { rw: self.clone() }
    }

    /// Whether anybody holds the lock, for reading or writing (one `EXISTS`).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a read.
    ///
    /// # Errors
    ///
    /// Connection errors, [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a bad name.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(config: latchkey_redis::RwLock) -> latchkey_redis::Result<()> {
    /// if config.is_locked().await? {
    ///     println!("somebody reads or writes {}", config.name());
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn is_locked(&self) -> Result<bool> {
        self.read().exists().await
    }

    /// Deletes the lock whoever holds it (every read and write hold) and wakes every waiter.
    /// Returns whether there was a lock. Holders lose it (their watchdog notices and fires
    /// `lost()`). For operators and tests; a key of another type is left alone.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: one script call, applied or not.
    ///
    /// # Errors
    ///
    /// [`Error::WrongType`](crate::Error::WrongType) if the key is not a read-write lock, connection errors.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(config: latchkey_redis::RwLock) -> latchkey_redis::Result<()> {
    /// let existed = config.force_unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    #[tracing::instrument(level = "debug", name = "force_unlock", skip_all, fields(primitive = "rwlock", name = %self.inner.name))]
    pub async fn force_unlock(&self) -> Result<bool> {
        check_name(&self.inner.name)?;
        let inner = &self.inner;
        let mut invocation = RW_FORCE_UNLOCK.invocation();
        invocation
            .key(&*inner.keys.hash)
            .key(&*inner.keys.channel)
            .key(&*inner.keys.lease_prefix)
            .arg(READ_UNLOCK_MESSAGE)
            .arg(inner.client.inner.conn.publish_command());
        let deleted: i64 = self.read().script(&invocation, "force-unlocking").await?;
        Ok(deleted == 1)
    }

    /// The script call that clears the pending-writer mark of `field`.
    fn leave_task(&self, field: &str) -> Task {
        let inner = &self.inner;
        Task::new(
            &RW_LEAVE,
            vec![
                inner.keys.hash.clone(),
                inner.keys.writers.clone(),
                inner.keys.channel.clone(),
            ],
            vec![
                field.to_owned(),
                READ_UNLOCK_MESSAGE.to_owned(),
                inner.client.inner.conn.publish_command().to_owned(),
            ],
            "leaving a read-write lock's pending writers",
        )
    }
}

/// The read side of a [`RwLock`]: shared with other readers, excluded by a writer.
///
/// Made by [`RwLock::read`]; cheap to clone.
#[derive(Clone, Debug)]
pub struct ReadLock {
    rw: RwLock,
}

/// The write side of a [`RwLock`]: excludes readers and other writers.
///
/// Made by [`RwLock::write`]; cheap to clone.
#[derive(Clone, Debug)]
pub struct WriteLock {
    rw: RwLock,
}

lock_methods! {
    ReadLock -> ReadGuard;
    /// Acquires a read hold, waiting as long as it takes: while a writer holds the lock, or
    /// while a writer waits for it (writer preference). The lease is the client's watchdog
    /// timeout, renewed by the watchdog until the guard is released. The fencing token is the
    /// last writer's.
    ///
    /// # Redis stalls
    ///
    /// If a call to Redis times out ([`Error::Timeout`](crate::Error::Timeout)) while the wait
    /// has time left, the attempt is made again after a short pause, within the wait (a grant
    /// the timed-out call made after all is this call's own, and is taken by the next attempt).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe. Dropping the future leaves no hold, subscription or renewal behind: a hold
    /// granted by a script that was already running is released by the client's background
    /// task.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a bad name, [`Error::WrongType`](crate::Error::WrongType) if a key of the lock holds
    /// another type (or the hash is not a read-write lock; nothing is changed then), connection
    /// errors ([`Error::is_connection`](crate::Error::is_connection)) if Redis cannot be reached.
    /// [`Error::NotReplicated`](crate::Error::NotReplicated) with replica sync (see
    /// [`ClientBuilder::replica_sync`](crate::ClientBuilder::replica_sync)) when too few replicas
    /// acknowledged the grant in time: the read hold was released again
    /// ([`Error::is_not_replicated`](crate::Error::is_not_replicated)).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(config: latchkey_redis::RwLock) -> latchkey_redis::Result<()> {
    /// let guard = config.read().lock().await?;
    /// // … read …
    /// guard.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    lock;
    /// Tries to acquire a read hold, waiting at most `wait`; `Ok(None)` if it could not in time.
    /// `Duration::ZERO` tries once. The lease is renewed by the watchdog.
    try_lock;
}

impl ReadLock {
    /// The read-write lock this is the read side of.
    pub fn rw_lock(&self) -> &RwLock {
        &self.rw
    }

    /// The lock's name (see [`RwLock::name`]).
    pub fn name(&self) -> &str {
        self.rw.name()
    }

    async fn acquire(&self, lease: Lease, deadline: Option<Instant>) -> Result<Option<ReadGuard>> {
        check_name(self.name())?;
        let claim = Claim::new(self);
        let waiting = self.waiting(&self.rw.inner.keys.channel, WakePolicy::All, "read_lock");
        Box::pin(waiting.run(deadline, |_turn| {
            let claim = claim.clone();
            detached_try(Box::pin(async move { read_attempt(claim, lease).await }))
        }))
        .await
    }
}

/// One read acquire script call of `claim` (run detached by the caller). `claim` is a new
/// owner, or the owner of a write hold it downgrades.
async fn read_attempt(claim: Claim<ReadLock>, lease: Lease) -> Result<Attempt<ReadGuard>> {
    let rw = &claim.held().rw;
    let keys = &rw.inner.keys;
    let read_prefix = keys.read_prefix(claim.owner());
    let call_keys = [
        &*keys.hash,
        &*keys.token,
        &*keys.writers,
        &*read_prefix,
        &*keys.lease_prefix,
    ];
    // With replica sync, a grant too few replicas acknowledged is undone by the release
    // script: the read hold goes (the lock is deleted if it was the last hold), which wakes
    // the waiters; the attempt then fails with NotReplicated.
    attempt_hold(
        &claim,
        lease,
        AcquireCall {
            script: &RW_READ_ACQUIRE,
            keys: &call_keys,
            args: &[],
            context: "acquiring a read lock",
            name: &rw.inner.name,
        },
        |lease_ms| {
            vec![
                lease_ms.to_string(),
                claim.owner().to_string(),
                format!("{}:write", claim.owner()),
                COUNTER_IDLE.as_millis().to_string(),
            ]
        },
        |core| ReadGuard { core },
        |reply| match reply {
            [0, retry_after] => Ok(Attempt::retry_after_ms(*retry_after)),
            other => Err(unexpected("the read-write lock script", other)),
        },
    )
    .await
}

lock_methods! {
    WriteLock -> WriteGuard;
    /// Acquires the write lock, waiting as long as it takes for readers and other writers to
    /// leave. While it waits, new readers are held back (writer preference). The lease is the
    /// client's watchdog timeout, renewed by the watchdog until the guard is released.
    ///
    /// Every call is an owner of its own: it waits for every other hold, including this
    /// process's own read and write guards (see [`WriteGuard::reenter`]).
    ///
    /// # Redis stalls
    ///
    /// If a call to Redis times out ([`Error::Timeout`](crate::Error::Timeout)) while the wait
    /// has time left, the attempt is made again after a short pause, within the wait (a grant
    /// the timed-out call made after all is this call's own, and is taken by the next attempt).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe. Dropping the future leaves no hold, pending-writer mark, subscription or
    /// renewal behind: the mark is cleared by the client's background task (letting the readers
    /// it held back go), and a hold granted by a script that was already running is released
    /// there too.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a bad name, [`Error::WrongType`](crate::Error::WrongType) if a key of the lock holds another type, connection errors
    /// ([`Error::is_connection`](crate::Error::is_connection)) if Redis cannot be reached.
    /// [`Error::NotReplicated`](crate::Error::NotReplicated) with replica sync (see
    /// [`ClientBuilder::replica_sync`](crate::ClientBuilder::replica_sync)) when too few replicas
    /// acknowledged the grant in time: the write hold was released again
    /// ([`Error::is_not_replicated`](crate::Error::is_not_replicated)).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(config: latchkey_redis::RwLock) -> latchkey_redis::Result<()> {
    /// let guard = config.write().lock().await?;
    /// // … write …
    /// guard.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    lock;
    /// Tries to acquire the write lock, waiting at most `wait`; `Ok(None)` if it could not in
    /// time (its pending mark is then cleared at once). `Duration::ZERO` tries once without
    /// marking itself pending. The lease is renewed by the watchdog.
    try_lock;
}

impl WriteLock {
    /// The read-write lock this is the write side of.
    pub fn rw_lock(&self) -> &RwLock {
        &self.rw
    }

    /// The lock's name (see [`RwLock::name`]).
    pub fn name(&self) -> &str {
        self.rw.name()
    }

    async fn acquire(&self, lease: Lease, deadline: Option<Instant>) -> Result<Option<WriteGuard>> {
        check_name(self.name())?;
        let claim = Claim::new(self);
        // A writer's pending mark: dropped without being disarmed (give-up, error,
        // cancellation), it clears the mark.
        let place = Place::default();
        let waiting = self.waiting(&self.rw.inner.keys.channel, WakePolicy::All, "write_lock");
        let granted = Box::pin(waiting.run(deadline, |turn| {
            let (claim, place) = (claim.clone(), &place);
            async move {
                let WriteAttempt { attempt, mark } =
                    detached_try(Box::pin(write_attempt(claim, lease, turn.park))).await?;
                place.keep_first(mark);
                Ok(attempt)
            }
        }))
        .await?;
        if granted.is_some() {
            place.disarm();
        }
        Ok(granted)
    }

    /// Whether anybody holds the write lock (the lock's `mode` is `"write"`).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a read.
    ///
    /// # Errors
    ///
    /// Connection errors, [`Error::WrongType`](crate::Error::WrongType) if the key is not a hash.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(config: latchkey_redis::RwLock) -> latchkey_redis::Result<()> {
    /// if config.write().is_locked().await? {
    ///     println!("somebody writes");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn is_locked(&self) -> Result<bool> {
        let cmd = redis::cmd("HGET")
            .arg(&*self.rw.inner.keys.hash)
            .arg("mode")
            .clone();
        let mode: Option<String> = self.read(&cmd, "reading a lock's mode").await?;
        Ok(mode.as_deref() == Some("write"))
    }
}

/// One write acquire script call of `claim` (run detached by the caller). `park` is how long
/// the caller will wait before its next attempt if this one fails (zero: it will not wait, and
/// is not marked pending).
async fn write_attempt(
    claim: Claim<WriteLock>,
    lease: Lease,
    park: Duration,
) -> Result<WriteAttempt> {
    let write = claim.held();
    let keys = &write.rw.inner.keys;
    let call_keys = [
        &*keys.hash,
        &*keys.token,
        &*keys.writers,
        &*keys.lease_prefix,
    ];
    // With replica sync, a grant too few replicas acknowledged is undone by the release
    // script (the lock is deleted, or turns back to read mode for a downgrading holder), which
    // wakes the waiters; the attempt then fails with NotReplicated. A write grant already
    // removed this writer's pending mark.
    let mut mark = None;
    let attempt = attempt_hold(
        &claim,
        lease,
        AcquireCall {
            script: &RW_WRITE_ACQUIRE,
            keys: &call_keys,
            args: &[],
            context: "acquiring a write lock",
            name: &write.rw.inner.name,
        },
        |lease_ms| {
            vec![
                lease_ms.to_string(),
                claim.field().to_string(),
                (park.as_millis() as u64).to_string(),
                COUNTER_IDLE.as_millis().to_string(),
            ]
        },
        |core| WriteGuard { core },
        |reply| match reply {
            [0, retry_after] => {
                let leave = || write.rw.leave_task(claim.field());
                mark = (!park.is_zero())
                    .then(|| LeaveOnDrop::new(&write.rw.inner.client.inner.background, leave()));
                Ok(Attempt::retry_after_ms(*retry_after))
            }
            other => Err(unexpected("the read-write lock script", other)),
        },
    )
    .await?;
    Ok(WriteAttempt { attempt, mark })
}

crate::client::object!(ReadLock, rw.inner);

impl Holds for ReadLock {
    const KIND: &'static str = "rw_read";

    fn key(&self) -> &Arc<str> {
        &self.rw.inner.keys.hash
    }

    fn renewal(&self, field: &Arc<str>) -> Arc<Renewal> {
        let read_prefix = self.rw.inner.keys.read_prefix(field);
        rw_renewal(self.key(), read_prefix, field, "r")
    }

    fn release_task(&self, field: &str) -> Task {
        let inner = &self.rw.inner;
        Task::new(
            &RW_READ_RELEASE,
            vec![
                inner.keys.hash.clone(),
                inner.keys.channel.clone(),
                inner.keys.read_prefix(field),
                inner.keys.lease_prefix.clone(),
            ],
            vec![
                UNLOCK_MESSAGE.to_owned(),
                field.to_owned(),
                inner.client.inner.conn.publish_command().to_owned(),
            ],
            "releasing a read lock",
        )
    }
}

crate::client::object!(WriteLock, rw.inner);

impl Holds for WriteLock {
    const KIND: &'static str = "rw_write";

    fn key(&self) -> &Arc<str> {
        &self.rw.inner.keys.hash
    }

    fn field(&self, owner: &str) -> Arc<str> {
        Arc::from(format!("{owner}:write"))
    }

    fn renewal(&self, field: &Arc<str>) -> Arc<Renewal> {
        // The read prefix is unused for a write hold; the renew script takes two keys per hold.
        rw_renewal(self.key(), self.key().clone(), field, "w")
    }

    fn release_task(&self, field: &str) -> Task {
        let inner = &self.rw.inner;
        Task::new(
            &RW_WRITE_RELEASE,
            vec![
                inner.keys.hash.clone(),
                inner.keys.channel.clone(),
                inner.keys.lease_prefix.clone(),
            ],
            vec![
                READ_UNLOCK_MESSAGE.to_owned(),
                field.to_owned(),
                inner.client.inner.conn.publish_command().to_owned(),
            ],
            "releasing a write lock",
        )
    }
}

/// The renewal of a read (`"r"`) or a write (`"w"`) hold (`scripts/rw_renew.lua`): both kinds
/// share the script, so they are renewed in the same batches.
fn rw_renewal(
    key: &Arc<str>,
    read_prefix: Arc<str>,
    field: &Arc<str>,
    kind: &'static str,
) -> Arc<Renewal> {
    Arc::new(Renewal {
        script: &RW_RENEW,
        keys: vec![key.clone(), read_prefix],
        field: field.clone(),
        kind: Some(kind),
    })
}
