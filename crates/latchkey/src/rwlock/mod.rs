//! The read-write lock, compatible with Redisson's `RReadWriteLock`: many readers or one writer.
//! See [`RwLock`] for the layout, the leases and the policy.

mod read_guard;
mod write_guard;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::guard::{attempt_hold, holds, lock_methods, Holds};
use crate::keys::{check_name, named_debug, RwLockKeys};
use crate::metrics::Site;
use crate::pubsub::WakePolicy;
use crate::replica::AcquireCall;
use crate::scripts::{READ_UNLOCK_MESSAGE, UNLOCK_MESSAGE};
use crate::task::{detached, Task};
use crate::wait::{unexpected, Attempt, Waiting, MAX_PARK};
use crate::watchdog::{HoldKey, Lease, Renewal};

pub use read_guard::ReadGuard;
pub use write_guard::WriteGuard;

use crate::scripts::{
    RW_FORCE_UNLOCK, RW_LEAVE, RW_READ_ACQUIRE, RW_READ_RELEASE, RW_RENEW, RW_WRITE_ACQUIRE,
    RW_WRITE_RELEASE,
};

/// A distributed read-write lock: any number of readers, or one writer, kept in Redis in
/// Redisson's `RReadWriteLock` layout.
///
/// Made by [`Client::rw_lock`]; take the read side with [`RwLock::read`] and the write side
/// with [`RwLock::write`]. The owner is the handle: both sides of one handle (and its clones)
/// share an owner id, so they re-enter each other's holds and the holder of the write lock may
/// also read (downgrade). Reading and then asking to write is refused with
/// [`Error::UpgradeNotSupported`](crate::Error::UpgradeNotSupported) rather than deadlocking.
///
/// Writers are preferred: a waiting writer holds back new readers, so writers do not starve
/// under a steady stream of readers (see below).
///
/// # Layout (Redisson's)
///
/// One hash at key `name`: field `mode` is `"read"` or `"write"`; field `<owner>` counts the
/// owner's read holds; field `<owner>:write` counts its write holds. Read hold `i` of an owner
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
/// # Clones share the owner
///
/// **Cloning a handle does not make a new owner.** A clone has the same owner id, so it
/// re-enters the holds of the original (a `lock()` on a clone while the original holds the lock
/// returns at once, with the hold count raised), from any task or thread. To exclude each other,
/// two tasks need two owners: [`RwLock::new_owner`] (or `client.rw_lock(name)` again) gives a
/// handle for the same name with a new owner id.
///
/// # Policy: writer preference
///
/// A writer that has to wait marks itself pending; while a live writer is pending, new readers
/// wait even though the lock is in read mode, so a steady stream of overlapping readers cannot
/// starve writers: the current readers finish, the writer goes, then the waiting readers. The
/// mark is refreshed by each attempt of the writer, removed when it gets the lock or gives up
/// (which wakes the readers it held back), and goes stale by itself if the writer vanished: two
/// seconds after its next attempt was due, at most four seconds after its last one. Re-entering a read hold, and a read by the
/// holder of the write lock, never wait (that would deadlock). The flip side: under a steady
/// stream of writers, readers wait until no writer is pending. Redisson (Java) readers do not
/// know the mark and are not held back by it.
///
/// Upgrading (asking for the write lock while holding only a read hold) is refused with
/// [`Error::UpgradeNotSupported`](crate::Error::UpgradeNotSupported): two readers upgrading at once would wait for each other
/// forever. Downgrading (taking a read hold while holding the write lock) is allowed; once the
/// write holds are released, the lock stays in read mode for the remaining read holds.
///
/// # Examples
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> latchkey::Result<()> {
/// let client = latchkey::Client::connect("redis://127.0.0.1:6379").await?;
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
    /// The read side's registry key (field `<owner>`).
    read_hold: HoldKey,
    /// The write side's registry key (field `<owner>:write`).
    write_hold: HoldKey,
    token_key: Arc<str>,
    writers_key: Arc<str>,
    channel: Arc<str>,
    /// `{name}:<owner>:rwlock_timeout`: this owner's read lease keys are `<prefix>:<i>`.
    read_prefix: Arc<str>,
    /// `{name}`: the prefix of every reader's lease keys.
    lease_prefix: Arc<str>,
    /// Live [`PendingMark`] guards of this owner in this process.
    pending: AtomicUsize,
    /// Live [`ReadGuard`]s of this owner. When it is zero, read holds of this owner still in
    /// Redis are being released (their guards were dropped), so a write must wait for them
    /// rather than be refused as an upgrade.
    read_guards: AtomicUsize,
}

named_debug!(RwLock, "owner" => read_hold.field);

impl Client {
    /// A read-write lock named `name`, with a new owner id (`<client id>:<n>`).
    ///
    /// Making the handle sends nothing; the name is checked when the handle is used. Clones of
    /// the handle share its owner id, so they re-enter each other's holds; call
    /// `client.rw_lock(name)` again, or [`RwLock::new_owner`], for another owner.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(client: latchkey::Client) -> latchkey::Result<()> {
    /// let config = client.rw_lock("config");
    /// let guard = config.read().lock().await?;
    /// guard.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn rw_lock(&self, name: impl Into<String>) -> RwLock {
        RwLock::new(self.clone(), name.into())
    }
}

/// Which side an acquire is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Read,
    Write,
}

enum Granted {
    Read(ReadGuard),
    Write(WriteGuard),
}

/// One read-write lock attempt: the wait loop's answer, the pending mark of a writer that was
/// marked by it, and whether it was refused as an upgrade.
struct RwAttempt {
    attempt: Attempt<Granted>,
    mark: Option<PendingMark>,
    upgrade: bool,
}

impl RwLock {
    fn new(client: Client, name: String) -> RwLock {
        let owner = client.next_owner();
        let keys = RwLockKeys::new(client.namespace(), &name);
        let key = keys.hash.clone();
        RwLock {
            inner: Arc::new(RwInner {
                read_hold: HoldKey {
                    kind: "rw_read",
                    key: key.clone(),
                    field: Arc::from(owner.as_str()),
                },
                write_hold: HoldKey {
                    kind: "rw_write",
                    key,
                    field: Arc::from(format!("{owner}:write")),
                },
                read_prefix: keys.read_prefix(&owner),
                token_key: keys.token,
                writers_key: keys.writers,
                channel: keys.channel,
                lease_prefix: keys.lease_prefix,
                pending: AtomicUsize::new(0),
                read_guards: AtomicUsize::new(0),
                client,
                name,
            }),
        }
    }

    /// The lock's name as given to [`Client::rw_lock`], without the client's
    /// [namespace](crate::ClientBuilder::namespace): under the namespace `billing`, `name()` is
    /// `config` and the lock is kept at `billing:config` in Redis. The name is checked
    /// (length, reserved prefixes, a whole hash tag) as given, whatever the namespace.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(client: latchkey::Client) {
    /// assert_eq!(client.rw_lock("config").name(), "config");
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The owner id of this handle (`<client id>:<n>`): the hash field that counts its read
    /// holds; `<owner id>:write` counts its write holds.
    pub fn owner_id(&self) -> &str {
        &self.inner.read_hold.field
    }

    /// A handle for the same read-write lock with a **new owner** id: unlike a clone, it does
    /// not re-enter this handle's holds (its write waits for this handle's write). The same as
    /// calling [`Client::rw_lock`] with the name again. Sends nothing.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(client: latchkey::Client) -> latchkey::Result<()> {
    /// use std::time::Duration;
    ///
    /// let config = client.rw_lock("config");
    /// let write = config.write().lock().await?;
    /// let other_owner = config.new_owner();
    /// assert!(other_owner.write().try_lock(Duration::ZERO).await?.is_none()); // excluded
    /// # drop(write);
    /// # Ok(())
    /// # }
    /// ```
    pub fn new_owner(&self) -> RwLock {
        self.inner.client.rw_lock(self.inner.name.clone())
    }

    /// The read side of this lock (same owner).
    pub fn read(&self) -> ReadLock {
        ReadLock { rw: self.clone() }
    }

    /// The write side of this lock (same owner).
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
    /// # async fn f(config: latchkey::RwLock) -> latchkey::Result<()> {
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
    /// # async fn f(config: latchkey::RwLock) -> latchkey::Result<()> {
    /// let existed = config.force_unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    #[tracing::instrument(level = "debug", name = "force_unlock", skip_all, fields(primitive = "rwlock", name = %self.inner.name))]
    pub async fn force_unlock(&self) -> Result<bool> {
        check_name(&self.inner.name)?;
        let inner = &self.inner;
        let client = &inner.client.inner;
        let mut invocation = RW_FORCE_UNLOCK.prepare_invoke();
        invocation
            .key(&*inner.read_hold.key)
            .key(&*inner.channel)
            .key(&*inner.lease_prefix)
            .arg(READ_UNLOCK_MESSAGE)
            .arg(client.conn.publish_command());
        let deleted: i64 = client
            .conn
            .script(&invocation, "force-unlocking", &inner.name)
            .await?;
        Ok(deleted == 1)
    }

    /// The acquire loop. Callers box its future: it nests deeply enough to overflow the default
    /// recursion limit of a user's crate when awaited inline.
    async fn acquire(
        &self,
        side: Side,
        lease: Lease,
        deadline: Option<Instant>,
    ) -> Result<Option<Granted>> {
        check_name(&self.inner.name)?;
        // A writer's pending mark (dropped without being disarmed — give-up, error,
        // cancellation — it clears the mark), and the pause before an upgrade is tried again.
        let state = std::sync::Mutex::new((None::<PendingMark>, Duration::from_millis(10)));
        let primitive = match side {
            Side::Read => "read_lock",
            Side::Write => "write_lock",
        };
        let waiting = Waiting::new(
            &self.inner.client.inner.hub,
            &self.inner.channel,
            WakePolicy::All,
        )
        .metered(Site::new(&self.inner.client, primitive, &self.inner.name));
        let granted = waiting
            .run(deadline, |turn| {
                let state = &state;
                async move {
                    let RwAttempt {
                        attempt,
                        mark,
                        upgrade,
                    } = self.attempt(side, lease, turn.park).await?;
                    let mut state = state.lock().unwrap_or_else(|e| e.into_inner());
                    if mark.is_some() {
                        // Counted already: replacing the old mark never lets the count touch 0.
                        state.0 = mark;
                    }
                    if !upgrade {
                        return Ok(attempt);
                    }
                    if self.inner.read_guards.load(Ordering::Acquire) > 0 {
                        return Err(Error::UpgradeNotSupported {
                            name: self.inner.name.clone(),
                        });
                    }
                    // This owner's read holds are on their way out (dropped guards whose
                    // release the background task is sending): wait for them.
                    let settle = state.1;
                    state.1 = (settle * 2).min(MAX_PARK);
                    Ok(Attempt::Wait {
                        retry_after: Some(settle),
                        short: false,
                    })
                }
            })
            .await?;
        if granted.is_some() {
            let mark = state.lock().unwrap_or_else(|e| e.into_inner()).0.take();
            if let Some(mark) = mark {
                mark.disarm();
            }
        }
        Ok(granted)
    }

    /// One acquire script call, run detached: if the caller is gone when the answer comes, the
    /// guard or pending mark it carries is dropped in the task that finishes the call, which releases the hold or
    /// clears the mark.
    async fn attempt(&self, side: Side, lease: Lease, park: Duration) -> Result<RwAttempt> {
        let rw = self.clone();
        detached(Box::pin(async move {
            rw.attempt_inner(side, lease, park).await
        }))
        .await?
    }

    async fn attempt_inner(&self, side: Side, lease: Lease, park: Duration) -> Result<RwAttempt> {
        let inner = &self.inner;
        let renewal = |hold: &HoldKey, kind| -> Arc<dyn Renewal> {
            Arc::new(RwRenewal {
                key: hold.key.clone(),
                read_prefix: inner.read_prefix.clone(),
                field: hold.field.clone(),
                kind,
            })
        };
        let (mut mark, mut upgrade) = (None, false);
        // Not granted: a wait (a writer is marked pending unless it will not wait), or a read
        // holder asking for the write lock.
        let refused = |reply: &[i64]| match reply {
            [0, retry_after] => {
                mark = (side == Side::Write && !park.is_zero())
                    .then(|| PendingMark::new(self.clone()));
                Ok(Attempt::retry_after_ms(*retry_after))
            }
            [-1] if side == Side::Write => {
                upgrade = true;
                Ok(Attempt::retry_after_ms(-1))
            }
            other => Err(unexpected("the read-write lock script", other)),
        };
        // With replica sync, a grant too few replicas acknowledged is undone by the release
        // script of the side just granted: one read hold (its lease key goes, the lock is
        // deleted if it was the last hold) or one write hold (the lock is deleted, or turns back
        // to read mode for a downgrading holder); either wakes the waiters. The attempt then
        // fails with NotReplicated. A write grant already removed this writer's pending mark; a
        // refused upgrade ({-1}) or a wait ({0, …}) granted nothing and is not undone.
        let attempt = match side {
            Side::Read => {
                let keys = [
                    &*inner.read_hold.key,
                    &*inner.token_key,
                    &*inner.writers_key,
                    &*inner.read_prefix,
                    &*inner.lease_prefix,
                ];
                attempt_hold(
                    &self.read(),
                    lease,
                    AcquireCall {
                        script: &RW_READ_ACQUIRE,
                        keys: &keys,
                        args: &[],
                        context: "acquiring a read lock",
                        name: &inner.name,
                    },
                    |lease_ms| {
                        vec![
                            lease_ms.to_string(),
                            inner.read_hold.field.to_string(),
                            inner.write_hold.field.to_string(),
                        ]
                    },
                    || renewal(&inner.read_hold, RenewKind::Read),
                    |core| Granted::Read(ReadGuard::new(core)),
                    refused,
                )
                .await?
            }
            Side::Write => {
                let keys = [
                    &*inner.write_hold.key,
                    &*inner.token_key,
                    &*inner.writers_key,
                    &*inner.lease_prefix,
                ];
                attempt_hold(
                    &self.write(),
                    lease,
                    AcquireCall {
                        script: &RW_WRITE_ACQUIRE,
                        keys: &keys,
                        args: &[],
                        context: "acquiring a write lock",
                        name: &inner.name,
                    },
                    |lease_ms| {
                        vec![
                            lease_ms.to_string(),
                            inner.write_hold.field.to_string(),
                            inner.read_hold.field.to_string(),
                            (park.as_millis() as u64).to_string(),
                        ]
                    },
                    || renewal(&inner.write_hold, RenewKind::Write),
                    |core| Granted::Write(WriteGuard { core }),
                    refused,
                )
                .await?
            }
        };
        Ok(RwAttempt {
            attempt,
            mark,
            upgrade,
        })
    }

    /// The script call that clears this owner's pending-writer mark.
    fn leave_task(&self) -> Task {
        let inner = &self.inner;
        Task::new(
            &RW_LEAVE,
            vec![
                inner.write_hold.key.clone(),
                inner.writers_key.clone(),
                inner.channel.clone(),
            ],
            vec![
                inner.write_hold.field.to_string(),
                READ_UNLOCK_MESSAGE.to_owned(),
                inner.client.inner.conn.publish_command().to_owned(),
            ],
            "leaving a read-write lock's pending writers",
        )
    }

    /// The release script call for one read hold, with `lease_ms` left on remaining ones.
    fn read_release_task(&self, lease_ms: u64) -> Task {
        let inner = &self.inner;
        Task::new(
            &RW_READ_RELEASE,
            vec![
                inner.read_hold.key.clone(),
                inner.channel.clone(),
                inner.read_prefix.clone(),
                inner.lease_prefix.clone(),
            ],
            vec![
                UNLOCK_MESSAGE.to_owned(),
                lease_ms.to_string(),
                inner.read_hold.field.to_string(),
                inner.client.inner.conn.publish_command().to_owned(),
            ],
            "releasing a read lock",
        )
    }

    /// The release script call for one write hold, with `lease_ms` left on remaining ones.
    fn write_release_task(&self, lease_ms: u64) -> Task {
        let inner = &self.inner;
        Task::new(
            &RW_WRITE_RELEASE,
            vec![
                inner.write_hold.key.clone(),
                inner.channel.clone(),
                inner.lease_prefix.clone(),
            ],
            vec![
                READ_UNLOCK_MESSAGE.to_owned(),
                lease_ms.to_string(),
                inner.write_hold.field.to_string(),
                inner.client.inner.conn.publish_command().to_owned(),
            ],
            "releasing a write lock",
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
    /// while a writer waits for it (writer preference; re-entering a read hold and reading while
    /// holding the write lock never wait). The lease is the client's watchdog timeout, renewed by
    /// the watchdog until the guard is released.
    ///
    /// # Redis stalls
    ///
    /// If a call to Redis times out ([`Error::Timeout`](crate::Error::Timeout)) while the wait has time left, the attempt
    /// is made again after a short pause, within the wait: a stall shorter than the wait is waited
    /// through (without a limit, any stall). That is safe when this handle (its read side) held nothing and
    /// had no other acquire or release under way: a grant that the timed-out call made after all is
    /// then taken over by the next attempt as one fresh hold (new fencing token). A reentrant
    /// acquire (the handle already holds a read hold) returns the timeout instead, since repeating it
    /// could count one hold twice. The leases of held locks are unchanged.
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
    /// # async fn f(config: latchkey::RwLock) -> latchkey::Result<()> {
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

    async fn acquire(&self, lease: Lease, deadline: Option<Instant>) -> Result<Option<ReadGuard>> {
        match Box::pin(self.rw.acquire(Side::Read, lease, deadline)).await? {
            Some(Granted::Read(guard)) => Ok(Some(guard.delivered())),
            Some(Granted::Write(_)) => unreachable!("a read acquire grants a read hold"),
            None => Ok(None),
        }
    }

    /// How many read holds this handle (and its clones) has; 0 if none.
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
    /// # async fn f(config: latchkey::RwLock) -> latchkey::Result<()> {
    /// let guard = config.read().lock().await?;
    /// assert_eq!(config.read().hold_count().await?, 1);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn hold_count(&self) -> Result<u64> {
        self.holds().await
    }
}

lock_methods! {
    WriteLock -> WriteGuard;
    /// Acquires the write lock, waiting as long as it takes for readers and other writers to
    /// leave. While it waits, new readers are held back (writer preference). The lease is the
    /// client's watchdog timeout, renewed by the watchdog until the guard is released.
    ///
    /// If this handle (or a clone) already holds the write lock, the hold count goes up and the
    /// call returns at once.
    ///
    /// # Redis stalls
    ///
    /// If a call to Redis times out ([`Error::Timeout`](crate::Error::Timeout)) while the wait has time left, the attempt
    /// is made again after a short pause, within the wait: a stall shorter than the wait is waited
    /// through (without a limit, any stall). That is safe when this handle (its write side) held nothing and
    /// had no other acquire or release under way: a grant that the timed-out call made after all is
    /// then taken over by the next attempt as one fresh hold (new fencing token). A reentrant
    /// acquire (the handle already holds the write lock) returns the timeout instead, since repeating it
    /// could count one hold twice. The leases of held locks are unchanged.
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
    /// [`Error::UpgradeNotSupported`](crate::Error::UpgradeNotSupported) at once if this handle (or a clone) has a live read guard
    /// and no write hold (nothing is changed; release the read holds first). Read holds whose
    /// guards were already dropped are waited for instead, since their release is on its way. [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a bad
    /// name, [`Error::WrongType`](crate::Error::WrongType) if a key of the lock holds another type, connection errors
    /// ([`Error::is_connection`](crate::Error::is_connection)) if Redis cannot be reached.
    /// [`Error::NotReplicated`](crate::Error::NotReplicated) with replica sync (see
    /// [`ClientBuilder::replica_sync`](crate::ClientBuilder::replica_sync)) when too few replicas
    /// acknowledged the grant in time: the write hold was released again
    /// ([`Error::is_not_replicated`](crate::Error::is_not_replicated)).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(config: latchkey::RwLock) -> latchkey::Result<()> {
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

    async fn acquire(&self, lease: Lease, deadline: Option<Instant>) -> Result<Option<WriteGuard>> {
        match Box::pin(self.rw.acquire(Side::Write, lease, deadline)).await? {
            Some(Granted::Write(guard)) => Ok(Some(guard)),
            Some(Granted::Read(_)) => unreachable!("a write acquire grants a write hold"),
            None => Ok(None),
        }
    }

    /// How many write holds this handle (and its clones) has; 0 if none.
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
    /// # async fn f(config: latchkey::RwLock) -> latchkey::Result<()> {
    /// let guard = config.write().lock().await?;
    /// assert_eq!(config.write().hold_count().await?, 1);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn hold_count(&self) -> Result<u64> {
        self.holds().await
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
    /// # async fn f(config: latchkey::RwLock) -> latchkey::Result<()> {
    /// if config.write().is_locked().await? {
    ///     println!("somebody writes");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn is_locked(&self) -> Result<bool> {
        let cmd = redis::cmd("HGET")
            .arg(&*self.rw.inner.write_hold.key)
            .arg("mode")
            .clone();
        let mode: Option<String> = self.read(&cmd, "reading a lock's mode").await?;
        Ok(mode.as_deref() == Some("write"))
    }
}

holds!(
    ReadLock,
    [rw.inner],
    read_hold,
    |read: &ReadLock, lease_ms| read.rw.read_release_task(lease_ms)
);
holds!(
    WriteLock,
    [rw.inner],
    write_hold,
    |write: &WriteLock, lease_ms| write.rw.write_release_task(lease_ms)
);

/// A waiting writer's pending mark, as far as this process knows. Dropping it (rather than
/// [`PendingMark::disarm`]ing it after a grant) clears the owner's mark in Redis through the
/// background task, unless another writer of the same owner (a clone) still waits here.
struct PendingMark {
    rw: RwLock,
    armed: bool,
}

impl PendingMark {
    fn new(rw: RwLock) -> PendingMark {
        rw.inner.pending.fetch_add(1, Ordering::AcqRel);
        PendingMark { rw, armed: true }
    }

    /// The lock was granted: the acquire script removed the mark already.
    fn disarm(mut self) {
        self.armed = false;
        self.rw.inner.pending.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Drop for PendingMark {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        if self.rw.inner.pending.fetch_sub(1, Ordering::AcqRel) == 1 {
            let client = &self.rw.inner.client.inner;
            let _ = client.background.send(self.rw.leave_task());
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum RenewKind {
    Read,
    Write,
}

/// The renewal of a read or a write hold (`scripts/rw_renew.lua`): both kinds share the script,
/// so they are renewed in the same batches.
#[derive(Debug)]
struct RwRenewal {
    key: Arc<str>,
    read_prefix: Arc<str>,
    field: Arc<str>,
    kind: RenewKind,
}

impl Renewal for RwRenewal {
    fn script(&self) -> &'static redis::Script {
        &RW_RENEW
    }
    fn keys(&self) -> Vec<Arc<str>> {
        vec![self.key.clone(), self.read_prefix.clone()]
    }
    fn args(&self, lease_ms: u64) -> Vec<String> {
        let kind = match self.kind {
            RenewKind::Read => "r",
            RenewKind::Write => "w",
        };
        vec![
            self.field.to_string(),
            lease_ms.to_string(),
            kind.to_owned(),
        ]
    }
}
