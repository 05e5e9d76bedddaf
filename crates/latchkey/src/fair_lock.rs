//! The fair lock, compatible with Redisson's `RFairLock`: waiters get the lock in the order they
//! asked for it, across every client. See [`FairLock`] for the design.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use tokio::time::Instant;

use crate::client::{Client, Object};
use crate::error::{check_range, Result};
use crate::guard::{attempt_hold, lock_guard, lock_methods, lock_reads, Claim, Holds};
use crate::keys::{check_name, named_debug, FairLockKeys};
use crate::pubsub::WakePolicy;
use crate::replica::AcquireCall;
use crate::scripts::{Invoke, UNLOCK_MESSAGE};
use crate::scripts::{FAIR_ACQUIRE, FAIR_FORCE_UNLOCK, FAIR_LEAVE, FAIR_RELEASE};
use crate::task::{detached_try, LeaveOnDrop, Place, Task};
use crate::wait::{unexpected, Attempt, Waiting, MAX_PARK};
use crate::watchdog::{Lease, COUNTER_IDLE, MAX_LEASE};

/// A distributed lock that waiters get in arrival order (first come, first served), kept in
/// Redis in Redisson's `RFairLock` layout.
///
/// Made by [`Client::fair_lock`]. As with [`Lock`](crate::Lock), every acquire is an owner of
/// its own (clones of the handle, tasks and futures exclude each other), and re-entry is
/// explicit ([`FairLockGuard::reenter`]).
///
/// Every waiter, on any client, joins one queue in Redis; the lock goes to the head of the
/// queue only, and a release wakes that waiter alone, on its own channel. A newcomer never jumps
/// the queue:
/// [`FairLock::try_lock`] with `Duration::ZERO` fails while others wait, even if the lock is
/// free for a moment. A waiter that gives up leaves the queue at once; a waiter that vanishes
/// without leaving is dropped once it has not been heard of for the
/// [thread wait time](FairLock::with_thread_wait_time).
///
/// # Why the queue cannot get stuck
///
/// * A waiter refreshes its entry's deadline with every attempt (to at least the Redis server
///   time + the lock's remaining lease + one thread wait time per place up to its own, see
///   below), and it attempts at least every third of the thread wait time; so a live waiter's
///   entry never goes stale, however long it waits.
/// * Every script that reads the queue (acquire, release, leave, force-unlock) first drops
///   stale entries by the server clock, and wakes the new head if the lock is free. A waiter
///   that vanished without a word (process killed, future leaked) therefore blocks the queue
///   for about one thread wait time once its turn has come (plus the lease the lock had left
///   when it queued), even if nobody holds the lock: the other waiters' own polls purge it.
///   Several vanished waiters in a row take one thread wait time each, as in Redisson: each
///   one's deadline is chained W past the one ahead (measured: two waiters killed at once with
///   W = 2 s and a 1 s lease held the queue up for about 5 s).
/// * A waiter that gives up (its wait ran out, its future was dropped, an error) removes its
///   entry at once through the client's background task, and wakes the next waiter if it was
///   first. An acquire script still in flight when the caller went away is followed by the
///   same clean-up (or by a release, if it granted the lock).
/// * A lost wake-up message costs at most one poll: waiters never park longer than two seconds
///   (or a third of the thread wait time), nor longer than the holder's lease.
///
/// # Mixing with Redisson
///
/// Redisson (Java) `RFairLock` waiters can share the queue: they use the same keys and channel,
/// and latchkey keeps the deadline chain their scripts rely on. In Redisson a waiter's deadline
/// is the deadline of the waiter ahead of it + `threadWaitTime` (W), and whoever is served or
/// gives up lowers every deadline behind it by W; a Redisson waiter never refreshes its own, and
/// one whose deadline passes while it is first in line is dropped without being told (it then
/// waits for the rest of the wait it last computed, up to minutes, even if the lock is free).
/// latchkey therefore chains its own entries the same way (tail + W), lowers the deadlines
/// behind by W when it grants the lock or a waiter leaves, and only ever raises its own deadline
/// when it refreshes, so every waiter of either kind is served in arrival order.
///
/// This needs **the same W on both sides**: Redisson's default is 5 minutes, latchkey's
/// [30 seconds](FairLock::DEFAULT_THREAD_WAIT_TIME). Either call
/// `.with_thread_wait_time(Duration::from_secs(300))?` on every latchkey handle of a lock that Java
/// code also uses (a killed latchkey waiter then stalls the queue for up to 5 minutes, as a
/// killed Java one does), or build the Java side with
/// `new RedissonFairLock(commandExecutor, name, 30000)`. Redisson computes its deadlines with the
/// Java host's clock and latchkey with the Redis server's, so keep the clocks in sync (NTP): a
/// skew of S shortens or lengthens every Java waiter's slack by S.
///
/// # Layout
///
/// All keys and channels share the hash tag `{name}`: the lock hash `name` (field `<client id>:<n>`
/// → hold count; shared with Redisson's `RLock`/`RFairLock`), the fencing counter
/// `redisson_lock_token:{name}`, the queue `redisson_lock_queue:{name}` (list of owner ids),
/// the deadlines `redisson_lock_timeout:{name}` (zset owner id → Redis server time in ms), and
/// one wake channel per waiter, `redisson_lock__channel:{name}:<owner id>` (message `"0"`).
///
/// # Examples
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> latchkey_redis::Result<()> {
/// let client = latchkey_redis::Client::connect("redis://127.0.0.1:6379").await?;
/// let lock = client.fair_lock("printer");
///
/// let guard = lock.lock().await?; // queued behind everyone who asked earlier
/// // … the critical section …
/// guard.unlock().await?; // wakes the next in line, and only it
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct FairLock {
    inner: Arc<FairInner>,
}

#[derive(Clone)]
struct FairInner {
    client: Client,
    name: String,
    keys: FairLockKeys,
    thread_wait_time: Duration,
}

named_debug!(FairLock, "thread_wait_time" => thread_wait_time);
crate::client::object!(FairLock);

impl Client {
    /// A fair lock named `name`, with the
    /// [default thread wait time](FairLock::DEFAULT_THREAD_WAIT_TIME): a handle shared freely,
    /// every acquire through it an owner of its own.
    ///
    /// Making the handle sends nothing; the name is checked when the handle is used.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(client: latchkey_redis::Client) -> latchkey_redis::Result<()> {
    /// let lock = client.fair_lock("printer");
    /// let guard = lock.lock().await?;
    /// guard.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn fair_lock(&self, name: impl Into<String>) -> FairLock {
        let (client, name) = (self.clone(), name.into());
        let keys = FairLockKeys::new(client.namespace(), &name);
        let thread_wait_time = FairLock::DEFAULT_THREAD_WAIT_TIME;
        FairLock {
            inner: Arc::new(FairInner {
                client,
                name,
                keys,
                thread_wait_time,
            }),
        }
    }
}

/// One fair-lock attempt: the wait loop's answer, and the queue entry of a waiter that was
/// queued by it.
struct FairAttempt {
    attempt: Attempt<FairLockGuard>,
    entry: Option<LeaveOnDrop>,
}

lock_reads!(FairLock);

lock_methods! {
    FairLock -> FairLockGuard;
    /// Acquires the lock, waiting for every earlier waiter to have had it. The lease is the
    /// client's watchdog timeout, renewed by the watchdog until the guard is released.
    ///
    /// Every call is an owner of its own: it queues behind anybody else who holds or waits for
    /// the lock, including another guard of this process (see [`FairLockGuard::reenter`]).
    ///
    /// # Redis stalls
    ///
    /// If a call to Redis times out ([`Error::Timeout`](crate::Error::Timeout)) while the wait
    /// has time left, the attempt is made again after a short pause, within the wait (a grant the
    /// timed-out call made after all is this call's own, and is taken by the next attempt). The
    /// place in the queue is kept meanwhile.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe. Dropping the future leaves no hold, queue entry, subscription or renewal
    /// behind: the queue entry is removed by the client's background task (waking the next
    /// waiter if this one was first), and a hold granted by a script that was already running
    /// is released there too.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a bad name, [`Error::WrongType`](crate::Error::WrongType) if one
    /// of the lock's keys holds another type (nothing is changed then), connection errors
    /// ([`Error::is_connection`](crate::Error::is_connection)) if Redis cannot be reached.
    /// [`Error::NotReplicated`](crate::Error::NotReplicated) with replica sync (see
    /// [`ClientBuilder::replica_sync`](crate::ClientBuilder::replica_sync)) when too few replicas
    /// acknowledged the grant in time: the hold was released again, which wakes the next in line
    /// ([`Error::is_not_replicated`](crate::Error::is_not_replicated)).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(lock: latchkey_redis::FairLock) -> latchkey_redis::Result<()> {
    /// let guard = lock.lock().await?;
    /// // … the critical section …
    /// guard.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    lock;
    /// Tries to acquire the lock, waiting at most `wait`; `Ok(None)` if it was not this handle's
    /// turn in time (its queue entry is then removed at once). `Duration::ZERO` tries once
    /// without queueing: it fails while anybody holds the lock or waits for it. The lease is
    /// renewed by the watchdog.
    try_lock;
}

impl FairLock {
    /// The thread wait time (Redisson's `threadWaitTime`) unless set with
    /// [`FairLock::with_thread_wait_time`]: 30 seconds, the same as the default watchdog lease,
    /// so that a killed process holds up the lock for about as long whether it held the lock or
    /// waited for it.
    ///
    /// **Redisson's default is 5 minutes.** Java and Rust waiters can share one queue only if both
    /// sides use the same value: set `with_thread_wait_time(Duration::from_secs(300))` on the latchkey
    /// side (or build the Java `RedissonFairLock` with 30 000 ms). See [`FairLock`], "Mixing with
    /// Redisson".
    ///
    /// Redisson needs 5 minutes because its waiters never refresh their place while they wait;
    /// latchkey's do, at least every 2 seconds, so a much shorter value costs a live waiter
    /// nothing. A killed waiter, though, blocks every waiter behind it until its place goes stale,
    /// about one thread wait time after its turn came, which with 5 minutes would stall the lock for
    /// minutes after every crash of a waiting process.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// assert_eq!(latchkey_redis::FairLock::DEFAULT_THREAD_WAIT_TIME, Duration::from_secs(30));
    /// ```
    pub const DEFAULT_THREAD_WAIT_TIME: Duration = Duration::from_secs(30);

    /// The shortest thread wait time accepted (300 ms): live waiters refresh their
    /// place every third of it.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// assert_eq!(latchkey_redis::FairLock::MIN_THREAD_WAIT_TIME, Duration::from_millis(300));
    /// ```
    pub const MIN_THREAD_WAIT_TIME: Duration = Duration::from_millis(300);

    /// The lock's name as given to [`Client::fair_lock`], without the client's
    /// [namespace](crate::ClientBuilder::namespace): under the namespace `billing`, `name()` is
    /// `printer` and the lock is kept at `billing:printer` in Redis. The name is checked
    /// (length, reserved prefixes, a whole hash tag) as given, whatever the namespace.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(client: latchkey_redis::Client) {
    /// assert_eq!(client.fair_lock("printer").name(), "printer");
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// This handle with another thread wait time, Redisson's `threadWaitTime` (default
    /// [`FairLock::DEFAULT_THREAD_WAIT_TIME`], 30 s): the spacing of the queued waiters'
    /// deadlines, and so how long a waiter that vanished without leaving holds up the queue once
    /// its turn has come. The value is checked here, not when the lock is used.
    ///
    /// A live waiter refreshes its place with every attempt and attempts at least every third of
    /// this time, so it never loses its place however long it waits. **When Java (Redisson)
    /// clients use the same lock, set the value of their `threadWaitTime`** (5 minutes unless
    /// their `RedissonFairLock` was built with another): see [`FairLock`], "Mixing with
    /// Redisson".
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) unless `wait` is between
    /// [`FairLock::MIN_THREAD_WAIT_TIME`] and [`MAX_LEASE`]; nothing is returned then (the
    /// handle is consumed; clone it first to keep it).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(client: latchkey_redis::Client) -> latchkey_redis::Result<()> {
    /// use std::time::Duration;
    /// // Shared with Java services that use Redisson's default.
    /// let lock = client
    ///     .fair_lock("printer")
    ///     .with_thread_wait_time(Duration::from_secs(300))?;
    /// assert_eq!(lock.thread_wait_time(), Duration::from_secs(300));
    /// let guard = lock.lock().await?;
    /// guard.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_thread_wait_time(self, wait: Duration) -> Result<FairLock> {
        let range = FairLock::MIN_THREAD_WAIT_TIME..=MAX_LEASE;
        let hint = format!("use between {:?} and {MAX_LEASE:?}", range.start());
        check_range("thread wait time", wait, range, &hint)?;
        let mut inner = FairInner::clone(&self.inner);
        inner.thread_wait_time = wait;
        Ok(FairLock {
            inner: Arc::new(inner),
        })
    }

    /// The thread wait time of this handle (see [`FairLock::with_thread_wait_time`]).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(client: latchkey_redis::Client) {
    /// let lock = client.fair_lock("printer");
    /// assert_eq!(lock.thread_wait_time(), latchkey_redis::FairLock::DEFAULT_THREAD_WAIT_TIME);
    /// # }
    /// ```
    pub fn thread_wait_time(&self) -> Duration {
        self.inner.thread_wait_time
    }

    /// The longest this handle's waiters park between attempts: they must refresh their place
    /// well within the thread wait time.
    fn park_cap(&self) -> Duration {
        MAX_PARK.min(self.inner.thread_wait_time / 3)
    }

    /// The acquire loop. Callers box its future: it nests deeply enough to overflow the default
    /// recursion limit of a user's crate when awaited inline.
    fn acquire(
        &self,
        lease: Lease,
        deadline: Option<Instant>,
    ) -> std::pin::Pin<Box<dyn Future<Output = Result<Option<FairLockGuard>>> + Send + '_>> {
        Box::pin(async move {
            check_name(&self.inner.name)?;
            let claim = Claim::new(self);
            // This acquire's wake channel: a release wakes the head of the queue on its own.
            let channel = self.inner.keys.channel(claim.owner());
            // The caller's place in the queue. Dropped without being disarmed (give-up, error,
            // cancellation), it leaves the queue.
            let place = Place::default();
            let waiting = Waiting {
                max_park: self.park_cap(),
                ..self.waiting(&channel, WakePolicy::All, "fair_lock")
            };
            let granted = waiting
                .run(deadline, |turn| {
                    let (place, claim) = (&place, claim.clone());
                    async move {
                        // Run detached: if the caller is gone when the answer comes, the guard or
                        // queue entry it carries is dropped in the task that finishes the call,
                        // which releases the hold or leaves the queue.
                        let FairAttempt { attempt, entry } =
                            detached_try(attempt(claim, lease, turn.park).boxed()).await?;
                        place.keep_first(entry);
                        Ok(attempt)
                    }
                })
                .await?;
            if granted.is_some() {
                place.disarm();
            }
            Ok(granted)
        })
    }

    /// The script call that removes the queue entry of `owner`.
    fn leave_task(&self, owner: &str) -> Task {
        let inner = &self.inner;
        Task::new(
            &FAIR_LEAVE,
            self.queue_keys(),
            vec![
                owner.to_owned(),
                UNLOCK_MESSAGE.to_owned(),
                inner.client.inner.conn.publish_command().to_owned(),
                (inner.thread_wait_time.as_millis() as u64).to_string(),
            ],
            "leaving a fair lock's queue",
        )
    }

    /// KEYS of the release and leave scripts: the lock, its queue and the wake channels' prefix.
    fn queue_keys(&self) -> Vec<Arc<str>> {
        let keys = &self.inner.keys;
        vec![
            keys.hash.clone(),
            keys.queue.clone(),
            keys.deadlines.clone(),
            keys.channel_prefix.clone(),
        ]
    }

    /// The owner ids waiting in the queue, first in line first (entries that went stale and
    /// were not purged yet included).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a read.
    ///
    /// # Errors
    ///
    /// Connection errors, [`Error::WrongType`](crate::Error::WrongType) if the queue key is not a list.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(lock: latchkey_redis::FairLock) -> latchkey_redis::Result<()> {
    /// let waiting = lock.queue().await?;
    /// println!("{} waiting, next: {:?}", waiting.len(), waiting.first());
    /// # Ok(())
    /// # }
    /// ```
    #[tracing::instrument(level = "debug", name = "queue", skip_all, fields(primitive = "fair_lock", name = %self.inner.name))]
    pub async fn queue(&self) -> Result<Vec<String>> {
        let cmd = redis::cmd("LRANGE")
            .arg(&*self.inner.keys.queue)
            .arg(0)
            .arg(-1)
            .clone();
        self.read(&cmd, "reading a fair lock's queue").await
    }

    /// Deletes the lock whoever holds it and wakes the first waiter. Returns whether there was
    /// a lock. Holders lose it (their watchdog notices and fires [`FairLockGuard::lost`]); the
    /// queue is kept. For operators and tests; a key of another type is left alone.
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
    /// # async fn f(lock: latchkey_redis::FairLock) -> latchkey_redis::Result<()> {
    /// let existed = lock.force_unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    #[tracing::instrument(level = "debug", name = "force_unlock", skip_all, fields(primitive = "fair_lock", name = %self.inner.name))]
    pub async fn force_unlock(&self) -> Result<bool> {
        check_name(&self.inner.name)?;
        let mut invocation = FAIR_FORCE_UNLOCK.invocation();
        for key in self.queue_keys() {
            invocation.key(&*key);
        }
        invocation
            .arg(UNLOCK_MESSAGE)
            .arg(self.inner.client.inner.conn.publish_command());
        let deleted: i64 = self.script(&invocation, "force-unlocking").await?;
        Ok(deleted == 1)
    }
}

/// One acquire script call of `claim` (run detached by the caller).
async fn attempt(claim: Claim<FairLock>, lease: Lease, park: Duration) -> Result<FairAttempt> {
    let lock = claim.held();
    let inner = &lock.inner;
    let client = &inner.client.inner;
    let keys = [
        &*inner.keys.hash,
        &*inner.keys.token,
        &*inner.keys.queue,
        &*inner.keys.deadlines,
        &*inner.keys.channel_prefix,
    ];
    let args = |lease_ms: u64| {
        vec![
            lease_ms.to_string(),
            claim.owner().to_string(),
            (inner.thread_wait_time.as_millis() as u64).to_string(),
            (park.as_millis() as u64).to_string(),
            UNLOCK_MESSAGE.to_owned(),
            client.conn.publish_command().to_owned(),
            COUNTER_IDLE.as_millis().to_string(),
        ]
    };
    // With replica sync, a grant too few replicas acknowledged is undone: the release script
    // gives back the hold just granted, which wakes the next in line; the attempt then fails
    // with NotReplicated, and the caller's queue entry (removed by the grant) is cleaned up as
    // for any other error.
    let leave = || LeaveOnDrop::new(&client.background, lock.leave_task(claim.owner()));
    let mut entry = None;
    let attempt = attempt_hold(
        &claim,
        lease,
        AcquireCall {
            script: &FAIR_ACQUIRE,
            keys: &keys,
            args: &[],
            context: "acquiring a fair lock",
            name: &inner.name,
        },
        args,
        |core| FairLockGuard { core },
        |reply| match reply {
            [0, retry_after, queued] => {
                entry = (*queued == 1).then(leave);
                Ok(Attempt::retry_after_ms(*retry_after))
            }
            other => Err(unexpected("the fair lock script", other)),
        },
    )
    .await;
    if let Ok(Attempt::Stalled(_)) | Err(crate::Error::Unreachable { .. }) = &attempt {
        // The answer was lost (a timeout; a connection cut after the script was sent): the
        // caller may be queued. Leaving is harmless if it is not; after an error, at once.
        entry = Some(leave());
    }
    let attempt = attempt?;
    Ok(FairAttempt { attempt, entry })
}

lock_guard!(
    /// One hold of a [`FairLock`]. Releasing it (explicitly with [`FairLockGuard::unlock`], or by
    /// dropping it and every guard [re-entered](FairLockGuard::reenter) from it) wakes the first
    /// waiter in line.
    ///
    /// The guard owns what it needs (`'static`, `Send`, `Sync`), so it can move into a spawned task.
    /// Dropping it never blocks: the release is handed to the client's background task.
    #[must_use = "dropping the guard releases the lock at once"]
    FairLockGuard(FairLock),
    "client.fair_lock(\"orders:1001\").lock()",
    lock
);

impl Holds for FairLock {
    const KIND: &'static str = "fair_lock";

    fn key(&self) -> &Arc<str> {
        &self.inner.keys.hash
    }

    fn release_task(&self, field: &str) -> Task {
        let inner = &self.inner;
        Task::new(
            &FAIR_RELEASE,
            self.queue_keys(),
            vec![
                UNLOCK_MESSAGE.to_owned(),
                field.to_owned(),
                inner.client.inner.conn.publish_command().to_owned(),
            ],
            "releasing a fair lock",
        )
    }
}
