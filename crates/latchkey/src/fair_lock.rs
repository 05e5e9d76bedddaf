//! The fair lock, compatible with Redisson's `RFairLock`: waiters get the lock in the order they
//! asked for it, across every client. See [`FairLock`] for the design.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use tokio::time::Instant;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::guard::{
    attempt_hold, grant_lease, holds, lock_guard, lock_methods, lock_reads, take_grant,
    takes_grants, GuardCore, Holds,
};
use crate::keys::{check_name, named_debug, FairLockKeys};
use crate::metrics::Site;
use crate::pubsub::{Dispose, WakePolicy};
use crate::replica::AcquireCall;
use crate::scripts::UNLOCK_MESSAGE;
use crate::task::{detached, Task};
use crate::wait::{unexpected, Attempt, HandOff, Waiting, MAX_PARK};
use crate::watchdog::{HoldKey, Lease, LockRenewal, MAX_LEASE};

use crate::scripts::{FAIR_ACQUIRE, FAIR_FORCE_UNLOCK, FAIR_LEAVE, FAIR_RELEASE};

/// A distributed reentrant lock that waiters get in arrival order (first come, first served),
/// kept in Redis in Redisson's `RFairLock` layout.
///
/// Made by [`Client::fair_lock`]. As with [`Lock`](crate::Lock), the owner is the handle: clones
/// share the owner id and re-enter each other's holds; two handles exclude each other.
///
/// Every waiter, on any client, joins one queue in Redis; the lock goes to the head of the
/// queue only, and a release passes it to that waiter alone: a latchkey waiter of a
/// [`lock()`](FairLock::lock) or [`try_lock`](FairLock::try_lock) (the watchdog's lease, on a
/// client with a watchdog timeout of at least 7 s, without replica sync or Sentinel) is
/// *granted* the lock by the release script itself and holds it when the message comes, with no
/// acquire of its own; any other head (a Redisson waiter, a fixed lease) is woken and acquires.
/// See "Grants on release" below. A newcomer never jumps the queue:
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
/// # Grants on release
///
/// A waiter that takes grants registers its terms with each attempt that queues it
/// (`latchkey_fair_grants:{name}`, live until its next attempt is overdue). When the last hold
/// ends, the release script checks the live head of the queue: if it registered, the lock
/// becomes its own at once (one hold, a new fencing token, a short lease of its park + 5 s), it
/// leaves the queue as its own acquire would (the deadlines behind it go down by W), and
/// `<token>:<registration>` on its channel tells it. Its watchdog confirms the hold (renews it to
/// the watchdog timeout) 1.5 s before that short lease could end. A grant that reaches a waiter
/// already gone (its future dropped) is given back at once, guarded by its token, which passes
/// the lock on; a grant to a process that died lapses with its short lease. A head that did not
/// register (a Redisson waiter, an older latchkey) is woken with Redisson's `0` as before, and a
/// Redisson release wakes a latchkey head the same way, so the order is the same for both kinds.
/// This saves the grantee's acquire round trip on every contended hand-off.
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
/// A Java waiter that joins while a latchkey grantee still holds the lock on its short grant
/// lease (see "Grants on release") chains its deadline from that lease (≤ 7 s) rather than the
/// watchdog timeout; it stays queued as long as the grantee's hold lasts less than that + W,
/// which with the 5 minutes below is any hold shorter than 5 minutes.
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
/// # Clones share the owner
///
/// **Cloning a handle does not make a new owner.** A clone has the same owner id, so it
/// re-enters the holds of the original (a `lock()` on a clone while the original holds the lock
/// returns at once, with the hold count raised), from any task or thread. To exclude each other,
/// two tasks need two owners: [`FairLock::new_owner`] (or `client.fair_lock(name)` again) gives a
/// handle for the same name with a new owner id.
///
/// # Layout
///
/// All keys and channels share the hash tag `{name}`: the lock hash `name` (field `<client id>:<n>` → hold
/// count; shared with Redisson's `RLock`/`RFairLock`), the fencing counter
/// `redisson_lock_token:{name}`, the queue `redisson_lock_queue:{name}` (list of owner ids),
/// the deadlines `redisson_lock_timeout:{name}` (zset owner id → Redis server time in ms), and
/// one wake channel per waiter, `redisson_lock__channel:{name}:<owner id>` (message `"0"`, or
/// `<token>:<registration>` for a grant), and latchkey's grant registrations
/// `latchkey_fair_grants:{name}` (hash owner id → terms).
///
/// # Examples
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> latchkey::Result<()> {
/// let client = latchkey::Client::connect("redis://127.0.0.1:6379").await?;
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

struct FairInner {
    client: Client,
    name: String,
    hold: HoldKey,
    token_key: Arc<str>,
    queue_key: Arc<str>,
    deadlines_key: Arc<str>,
    channel_prefix: Arc<str>,
    /// latchkey's grant registrations (see `scripts/fair_acquire.lua`).
    grants_key: Arc<str>,
    /// This owner's wake channel.
    channel: Arc<str>,
    thread_wait_time: Duration,
    /// Live [`QueueEntry`] guards of this owner in this process (clones share the entry).
    queued: Arc<AtomicUsize>,
}

named_debug!(FairLock, "owner" => hold.field, "thread_wait_time" => thread_wait_time);

impl Client {
    /// A fair lock named `name`, with a new owner id (`<client id>:<n>`) and the
    /// [default thread wait time](FairLock::DEFAULT_THREAD_WAIT_TIME).
    ///
    /// Making the handle sends nothing; the name is checked when the handle is used. Clones of
    /// the handle share its owner id, so they re-enter each other's holds; call
    /// `client.fair_lock(name)` again, or [`FairLock::new_owner`], for another owner.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(client: latchkey::Client) -> latchkey::Result<()> {
    /// let lock = client.fair_lock("printer");
    /// let guard = lock.lock().await?;
    /// guard.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn fair_lock(&self, name: impl Into<String>) -> FairLock {
        FairLock::new(self.clone(), name.into())
    }
}

/// One fair-lock attempt: the wait loop's answer, and the queue entry of a waiter that was
/// queued by it.
struct FairAttempt {
    attempt: Attempt<FairLockGuard>,
    entry: Option<QueueEntry>,
}

lock_reads!(FairLock);

lock_methods! {
    FairLock -> FairLockGuard;
    /// Acquires the lock, waiting for every earlier waiter to have had it. The lease is the
    /// client's watchdog timeout, renewed by the watchdog until the guard is released.
    ///
    /// If this handle (or a clone) already holds the lock, the hold count goes up and the call
    /// returns at once.
    ///
    /// # Redis stalls
    ///
    /// If a call to Redis times out ([`Error::Timeout`](crate::Error::Timeout)) while the wait has time left, the attempt
    /// is made again after a short pause, within the wait: a stall shorter than the wait is waited
    /// through (without a limit, any stall). That is safe when this handle (or a clone) held nothing and
    /// had no other acquire or release under way: a grant that the timed-out call made after all is
    /// then taken over by the next attempt as one fresh hold (new fencing token). A reentrant
    /// acquire (the handle already holds the lock) returns the timeout instead, since repeating it
    /// could count one hold twice. The leases of held locks are unchanged.
    /// The place in the queue is kept meanwhile.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe. Dropping the future leaves no hold, queue entry, subscription or renewal
    /// behind: the queue entry is removed by the client's background task (waking the next
    /// waiter if this one was first), and a hold granted by a script that was already running
    /// is released there too; a grant on release that reaches it after the drop is given back
    /// (passed on to the next in line) the same way.
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
    /// # async fn f(lock: latchkey::FairLock) -> latchkey::Result<()> {
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
    fn new(client: Client, name: String) -> FairLock {
        let field = client.next_owner();
        let keys = FairLockKeys::new(client.namespace(), &name);
        FairLock {
            inner: Arc::new(FairInner {
                channel: keys.channel(&field),
                hold: HoldKey {
                    kind: "fair_lock",
                    key: keys.hash,
                    field: Arc::from(field.as_str()),
                },
                token_key: keys.token,
                queue_key: keys.queue,
                deadlines_key: keys.deadlines,
                channel_prefix: keys.channel_prefix,
                grants_key: keys.grants,
                thread_wait_time: FairLock::DEFAULT_THREAD_WAIT_TIME,
                queued: Arc::new(AtomicUsize::new(0)),
                client,
                name,
            }),
        }
    }

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
    /// assert_eq!(latchkey::FairLock::DEFAULT_THREAD_WAIT_TIME, Duration::from_secs(30));
    /// ```
    pub const DEFAULT_THREAD_WAIT_TIME: Duration = Duration::from_secs(30);

    /// The shortest thread wait time accepted (300 ms): live waiters refresh their
    /// place every third of it.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// assert_eq!(latchkey::FairLock::MIN_THREAD_WAIT_TIME, Duration::from_millis(300));
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
    /// # fn f(client: latchkey::Client) {
    /// assert_eq!(client.fair_lock("printer").name(), "printer");
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The owner id of this handle (`<client id>:<n>`): the hash field that counts its holds,
    /// and its entry in the wait queue.
    pub fn owner_id(&self) -> &str {
        &self.inner.hold.field
    }

    /// A handle for the same fair lock with a **new owner** id and this handle's thread wait
    /// time: unlike a clone, it does not re-enter this handle's holds but queues behind them
    /// like any other owner. Sends nothing.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(client: latchkey::Client) -> latchkey::Result<()> {
    /// use std::time::Duration;
    ///
    /// let lock = client.fair_lock("printer");
    /// let guard = lock.lock().await?;
    /// let other_owner = lock.new_owner();
    /// assert!(other_owner.try_lock(Duration::ZERO).await?.is_none()); // excluded
    /// # drop(guard);
    /// # Ok(())
    /// # }
    /// ```
    pub fn new_owner(&self) -> FairLock {
        let fresh = self.inner.client.fair_lock(self.inner.name.clone());
        if fresh.inner.thread_wait_time == self.inner.thread_wait_time {
            return fresh;
        }
        fresh
            .with_thread_wait_time(self.inner.thread_wait_time)
            .expect("this handle's thread wait time was checked when it was set")
    }

    /// This handle with another thread wait time, Redisson's `threadWaitTime` (default
    /// [`FairLock::DEFAULT_THREAD_WAIT_TIME`], 30 s): the spacing of the queued waiters'
    /// deadlines, and so how long a waiter that vanished without leaving holds up the queue once
    /// its turn has come. The same owner (owner id) is returned, with the new setting; the
    /// value is checked here, not when the lock is used.
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
    /// # async fn f(client: latchkey::Client) -> latchkey::Result<()> {
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
        check_thread_wait_time(wait)?;
        let inner = &self.inner;
        Ok(FairLock {
            inner: Arc::new(FairInner {
                client: inner.client.clone(),
                name: inner.name.clone(),
                hold: inner.hold.clone(),
                token_key: inner.token_key.clone(),
                queue_key: inner.queue_key.clone(),
                deadlines_key: inner.deadlines_key.clone(),
                channel_prefix: inner.channel_prefix.clone(),
                grants_key: inner.grants_key.clone(),
                channel: inner.channel.clone(),
                thread_wait_time: wait,
                queued: inner.queued.clone(),
            }),
        })
    }

    /// The thread wait time of this handle (see [`FairLock::with_thread_wait_time`]).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(client: latchkey::Client) {
    /// let lock = client.fair_lock("printer");
    /// assert_eq!(lock.thread_wait_time(), latchkey::FairLock::DEFAULT_THREAD_WAIT_TIME);
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
        Box::pin(self.acquire_inner(lease, deadline))
    }

    async fn acquire_inner(
        &self,
        lease: Lease,
        deadline: Option<Instant>,
    ) -> Result<Option<FairLockGuard>> {
        check_name(&self.inner.name)?;
        // The caller's place in the queue. Dropped without being disarmed (give-up, error,
        // cancellation), it leaves the queue.
        let entry: std::sync::Mutex<Option<QueueEntry>> = std::sync::Mutex::new(None);
        let waiting = Waiting {
            max_park: self.park_cap(),
            grants: takes_grants(&self.inner.client, lease).then(|| {
                let lock = self.clone();
                Dispose(Arc::new(move |token| lock.give_back_task(token)))
            }),
            site: Some(Site::new(&self.inner.client, "fair_lock", &self.inner.name)),
            ..Waiting::new(
                &self.inner.client.inner.hub,
                &self.inner.channel,
                WakePolicy::Fair,
            )
        };
        let granted = waiting
            .run(deadline, |turn| {
                let entry = &entry;
                let handed = turn
                    .hand_off
                    .and_then(|hand_off| self.take_hand_off(hand_off));
                async move {
                    if let Some(guard) = handed {
                        // The grant took the owner out of the queue in Redis.
                        return Ok(Attempt::Granted(guard));
                    }
                    let FairAttempt {
                        attempt,
                        entry: queued,
                    } = self.attempt(lease, turn.park, turn.grant_seq).await?;
                    if queued.is_some() {
                        // The new entry is counted already, so replacing the old one never lets
                        // the count touch zero.
                        *entry.lock().unwrap_or_else(|e| e.into_inner()) = queued;
                    }
                    Ok(attempt)
                }
            })
            .await?;
        if granted.is_some() {
            if let Some(entry) = entry.lock().unwrap_or_else(|e| e.into_inner()).take() {
                entry.disarm();
            }
        }
        Ok(granted)
    }

    /// One acquire script call, run detached: if the caller is gone when the answer comes, the
    /// guard or queue entry it carries is dropped in the task that finishes the call, which releases the hold or
    /// leaves the queue.
    ///
    /// `grant` is the registration number with which the caller, if it queues, takes the lock
    /// granted on release (see `scripts/fair_release.lua`); `None`: it takes no grant.
    async fn attempt(
        &self,
        lease: Lease,
        park: Duration,
        grant: Option<u64>,
    ) -> Result<FairAttempt> {
        let lock = self.clone();
        detached(async move { lock.attempt_inner(lease, park, grant).await }.boxed()).await?
    }

    async fn attempt_inner(
        &self,
        lease: Lease,
        park: Duration,
        grant: Option<u64>,
    ) -> Result<FairAttempt> {
        let inner = &self.inner;
        let client = &inner.client.inner;
        let keys = [
            &*inner.hold.key,
            &*inner.token_key,
            &*inner.queue_key,
            &*inner.deadlines_key,
            &*inner.channel_prefix,
            &*inner.grants_key,
        ];
        let args = |lease_ms: u64| {
            vec![
                lease_ms.to_string(),
                inner.hold.field.to_string(),
                (inner.thread_wait_time.as_millis() as u64).to_string(),
                (park.as_millis() as u64).to_string(),
                UNLOCK_MESSAGE.to_owned(),
                client.conn.publish_command().to_owned(),
                grant.map_or_else(String::new, |seq| {
                    format!("{seq}:{}", grant_lease(park).as_millis())
                }),
            ]
        };
        let renewal = || LockRenewal::of(&inner.hold);
        // With replica sync, a grant too few replicas acknowledged is undone: the release script
        // gives back the one hold just granted, which wakes the next in line if the lock is
        // free again; the attempt then fails with NotReplicated, and the caller's queue entry
        // (removed by the grant) is cleaned up as for any other error.
        let mut entry = None;
        let attempt = attempt_hold(
            self,
            lease,
            AcquireCall {
                script: &FAIR_ACQUIRE,
                keys: &keys,
                args: &[],
                context: "acquiring a fair lock",
                name: &inner.name,
            },
            args,
            renewal,
            |core| FairLockGuard { core },
            |reply| match reply {
                [0, retry_after, queued] => {
                    entry = (*queued == 1).then(|| QueueEntry::new(self.clone()));
                    Ok(Attempt::retry_after_ms(*retry_after))
                }
                other => Err(unexpected("the fair lock script", other)),
            },
        )
        .await?;
        Ok(FairAttempt { attempt, entry })
    }

    /// The script call that removes this owner's queue entry.
    fn leave_task(&self) -> Task {
        let inner = &self.inner;
        Task::new(
            &FAIR_LEAVE,
            self.queue_keys(),
            vec![
                inner.hold.field.to_string(),
                UNLOCK_MESSAGE.to_owned(),
                inner.client.inner.conn.publish_command().to_owned(),
                (inner.thread_wait_time.as_millis() as u64).to_string(),
            ],
            "leaving a fair lock's queue",
        )
    }

    /// The release script call for one hold, with `lease_ms` left on remaining holds.
    fn release_task(&self, lease_ms: u64) -> Task {
        self.release_call(lease_ms, None, "releasing a fair lock")
    }

    /// Gives back a grant on release with `token` that no waiter took: released only while it
    /// is still that grant, which passes the lock on to the next in line.
    fn give_back_task(&self, token: u64) -> Task {
        self.release_call(1, Some(token), "giving back a fair lock granted on release")
    }

    fn release_call(&self, lease_ms: u64, token: Option<u64>, context: &'static str) -> Task {
        let inner = &self.inner;
        let mut keys = self.queue_keys();
        keys.push(inner.token_key.clone());
        Task::new(
            &FAIR_RELEASE,
            keys,
            vec![
                UNLOCK_MESSAGE.to_owned(),
                lease_ms.to_string(),
                inner.hold.field.to_string(),
                inner.client.inner.conn.publish_command().to_owned(),
                token.map(|t| t.to_string()).unwrap_or_default(),
            ],
            context,
        )
    }

    /// Takes a grant on release (see [`take_grant`]).
    fn take_hand_off(&self, hand_off: HandOff) -> Option<FairLockGuard> {
        let renewal = LockRenewal::of(&self.inner.hold);
        take_grant(self, hand_off, |token| self.give_back_task(token), renewal)
            .map(|core| FairLockGuard { core })
    }

    /// KEYS of the release and leave scripts: the lock, its queue, the wake channels' prefix
    /// and the grant registrations.
    fn queue_keys(&self) -> Vec<Arc<str>> {
        let inner = &self.inner;
        vec![
            inner.hold.key.clone(),
            inner.queue_key.clone(),
            inner.deadlines_key.clone(),
            inner.channel_prefix.clone(),
            inner.grants_key.clone(),
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
    /// # async fn f(lock: latchkey::FairLock) -> latchkey::Result<()> {
    /// let waiting = lock.queue().await?;
    /// println!("{} waiting, next: {:?}", waiting.len(), waiting.first());
    /// # Ok(())
    /// # }
    /// ```
    #[tracing::instrument(level = "debug", name = "queue", skip_all, fields(primitive = "fair_lock", name = %self.inner.name))]
    pub async fn queue(&self) -> Result<Vec<String>> {
        let cmd = redis::cmd("LRANGE")
            .arg(&*self.inner.queue_key)
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
    /// # async fn f(lock: latchkey::FairLock) -> latchkey::Result<()> {
    /// let existed = lock.force_unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    #[tracing::instrument(level = "debug", name = "force_unlock", skip_all, fields(primitive = "fair_lock", name = %self.inner.name))]
    pub async fn force_unlock(&self) -> Result<bool> {
        check_name(&self.inner.name)?;
        let client = &self.inner.client.inner;
        let inner = &self.inner;
        let mut invocation = FAIR_FORCE_UNLOCK.prepare_invoke();
        invocation
            .key(&*inner.hold.key)
            .key(&*inner.queue_key)
            .key(&*inner.deadlines_key)
            .key(&*inner.channel_prefix)
            .arg(UNLOCK_MESSAGE)
            .arg(client.conn.publish_command());
        let deleted: i64 = client
            .conn
            .script(&invocation, "force-unlocking", &self.inner.name)
            .await?;
        Ok(deleted == 1)
    }
}

/// A waiter's place in the queue, as far as this process knows. Dropping it (rather than
/// [`QueueEntry::disarm`]ing it after a grant) removes the owner's entry in Redis through the
/// background task, unless another waiter of the same owner (a clone) is still queued here.
struct QueueEntry {
    lock: FairLock,
    armed: bool,
}

impl QueueEntry {
    fn new(lock: FairLock) -> QueueEntry {
        lock.inner.queued.fetch_add(1, Ordering::AcqRel);
        QueueEntry { lock, armed: true }
    }

    /// The lock was granted: the acquire script removed the entry already.
    fn disarm(mut self) {
        self.armed = false;
        self.lock.inner.queued.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Drop for QueueEntry {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        if self.lock.inner.queued.fetch_sub(1, Ordering::AcqRel) == 1 {
            let client = &self.lock.inner.client.inner;
            let _ = client.background.send(self.lock.leave_task());
        }
    }
}

/// One hold of a [`FairLock`]. Releasing it (explicitly with [`FairLockGuard::unlock`], or by
/// dropping it) gives the hold back; once every hold is given back, the first waiter in line is
/// woken.
///
/// The guard owns what it needs (`'static`, `Send`, `Sync`), so it can move into a spawned task.
/// Dropping it never blocks: the release is handed to the client's background task.
#[must_use = "dropping the guard releases the lock at once"]
pub struct FairLockGuard {
    core: GuardCore<FairLock>,
}

lock_guard!(FairLockGuard, "client.fair_lock(\"orders:1001\").lock()");

impl FairLockGuard {
    /// The lock this guard holds.
    pub fn lock(&self) -> &FairLock {
        self.core.held()
    }
}

holds!(FairLock, [inner], hold, |lock: &FairLock, lease_ms| lock
    .release_task(lease_ms));

fn check_thread_wait_time(wait: Duration) -> Result<()> {
    let min = FairLock::MIN_THREAD_WAIT_TIME;
    if wait < min || wait > MAX_LEASE {
        return Err(Error::invalid(
            "thread wait time",
            format!("{wait:?} is out of range; use between {min:?} and {MAX_LEASE:?}"),
        ));
    }
    Ok(())
}
