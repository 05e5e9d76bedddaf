//! The reentrant lock, compatible with Redisson's `RLock`.

use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use tokio::time::Instant;

use crate::client::Client;
use crate::error::Result;
use crate::guard::{
    attempt_hold, grant_lease, holds, lock_guard, lock_methods, lock_reads, take_grant,
    takes_grants, GuardCore,
};
use crate::keys::{check_name, named_debug, LockKeys};
use crate::metrics::Site;
use crate::pubsub::{Dispose, WakePolicy};
use crate::replica::AcquireCall;
use crate::scripts;
use crate::task::{detached, Task};
use crate::wait::{unexpected, Attempt, HandOff, Waiting};
use crate::watchdog::{check_lease, HoldKey, Lease, LockRenewal};

/// How long a lock handed off to a waiting client stays reserved for it.
pub(crate) const HAND_OFF_RESERVATION: Duration = Duration::from_millis(200);

/// How long a lock may pass from waiter to waiter by grants on release: then one release
/// frees it instead, so that Redisson clients, which are not in latchkey's wait queue, get
/// their chance at it at least this often.
pub(crate) const MAX_GRANT_STREAK: Duration = Duration::from_secs(1);

/// How long latchkey waiters hold back after a streak of grants ends, so that a Redisson
/// client's retry on the unlock message can win the free lock.
pub(crate) const GRANT_PAUSE: Duration = Duration::from_millis(10);

impl Client {
    /// A reentrant lock named `name`, with a new owner id (`<client id>:<n>`).
    ///
    /// Making the handle sends nothing; the name is checked when the handle is used. Clones of the
    /// handle share its owner id, so they re-enter each other's holds; call `client.lock(name)`
    /// again, or [`Lock::new_owner`], for another owner.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(client: latchkey::Client) -> latchkey::Result<()> {
    /// let lock = client.lock("orders:1001");
    /// let guard = lock.lock().await?;
    /// assert_eq!(lock.hold_count().await?, 1);
    /// guard.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn lock(&self, name: impl Into<String>) -> Lock {
        Lock::new(self.clone(), name.into())
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
    /// The fencing token of the latest holder; `None` if the lock was never taken by latchkey.
    pub fencing_token: Option<u64>,
    /// How many latchkey clients are registered as waiting.
    pub waiting_clients: u64,
}

/// One holder in a [`LockStatus`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holder {
    /// The owner id (`<client id>:<n>` for latchkey and Redisson clients).
    pub owner: String,
    /// How many holds it has.
    pub holds: u64,
}

/// Options for [`Lock::lock_with`] and [`Lock::try_lock_with`].
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use latchkey::LockOptions;
///
/// // Hold for at most 10 s (no watchdog), wait at most 2 s for it.
/// let options = LockOptions::new()
///     .lease(Duration::from_secs(10))
///     .wait(Duration::from_secs(2));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[must_use]
pub struct LockOptions {
    lease: Option<Duration>,
    wait: Option<Duration>,
}

impl LockOptions {
    /// Default options: watchdog lease, wait as long as it takes.
    pub fn new() -> LockOptions {
        LockOptions::default()
    }

    /// The fixed lease, if one was given (read by the multi-lock and RedLock).
    pub(crate) fn lease_value(&self) -> Option<Duration> {
        self.lease
    }

    /// The lease kind these options ask for, checked.
    pub(crate) fn checked_lease(&self) -> Result<Lease> {
        match self.lease {
            Some(lease) => {
                check_lease(lease)?;
                Ok(Lease::Fixed(lease))
            }
            None => Ok(Lease::Watchdog),
        }
    }

    /// The wait, if one was given (read by the multi-lock and RedLock).
    pub(crate) fn wait_value(&self) -> Option<Duration> {
        self.wait
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

/// A distributed reentrant lock, kept in Redis in Redisson's `RLock` layout.
///
/// # Clones share the owner
///
/// **Cloning a handle does not make a new owner.** A clone has the same owner id, so it
/// re-enters the holds of the original (a `lock()` on a clone while the original holds the lock
/// returns at once, with the hold count raised), from any task or thread. To exclude each other,
/// two tasks need two owners: [`Lock::new_owner`] (or `client.lock(name)` again) gives a
/// handle for the same name with a new owner id.
///
/// Made by [`Client::lock`]. The identity of the owner is the handle: every `Lock` made by
/// `client.lock(name)` has its own owner id, and its clones share it, so a clone re-enters a
/// hold of the original (and is released by the matching guard), whichever task or thread it is
/// used from. Two handles for the same name exclude each other, even within one client.
///
/// The lock is a Redis hash at key `name` whose field `<client id>:<n>` counts the holds; its
/// TTL is the lease. A fencing counter at `redisson_lock_token:{name}` gives each new holder a
/// larger token. Waiters listen on `redisson_lock__channel:{name}`, so Redisson (Java) clients
/// and latchkey clients can share a lock.
///
/// # Examples
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> latchkey::Result<()> {
/// let client = latchkey::Client::connect("redis://127.0.0.1:6379").await?;
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
    hold: HoldKey,
    token_key: Arc<str>,
    channel: Arc<str>,
    queue_key: Arc<str>,
    alive_key: Arc<str>,
    hand_off_key: Arc<str>,
    /// The prefix of the clients' grant channels (see `LockKeys::grants`).
    grant_prefix: Arc<str>,
    /// This client's grant channel for the lock.
    grant_channel: Arc<str>,
}

named_debug!(Lock, "owner" => hold.field);

/// What a granted attempt does to the caller's client's place in the lock's wait queue.
#[derive(Clone, Copy)]
enum Queue {
    /// Leave it: no other waiter of the client waits for the lock.
    Leave,
    /// Stay: other waiters of the client still wait.
    Stay,
    /// The client is not in the queue.
    NotRegistered,
}

lock_reads!(Lock);

lock_methods! {
    Lock -> LockGuard;
    /// Acquires the lock, waiting as long as it takes. The lease is the client's watchdog
    /// timeout, renewed by the watchdog until the guard is released.
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
    /// # async fn f(lock: latchkey::Lock) -> latchkey::Result<()> {
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
    pub(crate) fn new(client: Client, name: String) -> Lock {
        let keys = LockKeys::new(client.namespace(), &name);
        let field = client.next_owner();
        let grant_channel = Arc::from(format!("{}{}", keys.grants, client.inner.wake_id));
        Lock {
            inner: Arc::new(LockInner {
                client,
                name,
                hold: HoldKey {
                    kind: "lock",
                    key: keys.hash,
                    field: Arc::from(field),
                },
                token_key: keys.token,
                channel: keys.channel,
                queue_key: keys.queue,
                alive_key: keys.alive,
                hand_off_key: keys.hand_off,
                grant_channel,
                grant_prefix: keys.grants,
            }),
        }
    }

    /// The lock's name as given to [`Client::lock`], without the client's
    /// [namespace](crate::ClientBuilder::namespace): under the namespace `billing`, `name()` is
    /// `printer` and the lock is kept at `billing:printer` in Redis. The name is checked
    /// (length, reserved prefixes, a whole hash tag) as given, whatever the namespace.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(client: latchkey::Client) {
    /// assert_eq!(client.lock("printer").name(), "printer");
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The owner id of this handle (`<client id>:<n>`), the hash field that counts its holds.
    pub fn owner_id(&self) -> &str {
        &self.inner.hold.field
    }

    /// A handle for the same lock with a **new owner** id: unlike a clone, it does not re-enter
    /// this handle's holds but waits for them like any other owner. The same as calling
    /// [`Client::lock`] with the name again. Sends nothing.
    ///
    /// # Examples
    ///
    /// Two owners in one process exclude each other:
    ///
    /// ```no_run
    /// # async fn f(client: latchkey::Client) -> latchkey::Result<()> {
    /// use std::time::Duration;
    ///
    /// let lock = client.lock("orders:1001");
    /// let guard = lock.lock().await?;
    ///
    /// let same_owner = lock.clone();
    /// let again = same_owner.lock().await?; // re-enters: the hold count is 2
    ///
    /// let other_owner = lock.new_owner();
    /// assert!(other_owner.try_lock(Duration::ZERO).await?.is_none()); // excluded
    /// # drop((guard, again));
    /// # Ok(())
    /// # }
    /// ```
    pub fn new_owner(&self) -> Lock {
        self.inner.client.lock(self.inner.name.clone())
    }

    async fn acquire(&self, lease: Lease, deadline: Option<Instant>) -> Result<Option<LockGuard>> {
        check_name(&self.inner.name)?;
        let leave = || self.leave_task();
        let waiting = Waiting {
            on_leave: Some(&leave),
            grants: takes_grants(&self.inner.client, lease).then(|| {
                let lock = self.clone();
                Dispose(Arc::new(move |token| lock.give_back_task(token)))
            }),
            grant_channel: Some(&self.inner.grant_channel),
            site: Some(Site::new(&self.inner.client, "lock", &self.inner.name)),
            ..Waiting::new(
                &self.inner.client.inner.hub,
                &self.inner.channel,
                WakePolicy::Lock,
            )
        };
        waiting
            .run(deadline, |turn| {
                // Nobody of this client waits for the lock (no subscription, no other waiter):
                // the client is not in the lock's wait queue, and a grant has nothing to drop
                // there.
                let queue = match (turn.others, turn.subscribed) {
                    (0, false) => Queue::NotRegistered,
                    (0, true) => Queue::Leave,
                    _ => Queue::Stay,
                };
                let handed = turn
                    .hand_off
                    .and_then(|hand_off| self.take_hand_off(hand_off));
                async move {
                    match handed {
                        Some(guard) => Ok(Attempt::Granted(guard)),
                        None => {
                            let grant = turn.grant_seq.map(|seq| (seq, turn.private_grant));
                            self.attempt(lease, turn.park, queue, grant).await
                        }
                    }
                }
            })
            .await
    }

    /// Takes a grant on release (see [`take_grant`]).
    fn take_hand_off(&self, hand_off: HandOff) -> Option<LockGuard> {
        let renewal = LockRenewal::of(&self.inner.hold);
        take_grant(self, hand_off, |token| self.give_back_task(token), renewal)
            .map(|core| LockGuard { core })
    }

    /// The clean-up run when this client's last waiter for the lock gives up: unregister the
    /// client, and pass on a hand-off that was meant for it.
    fn leave_task(&self) -> Task {
        let inner = &self.inner;
        Task::new(
            &scripts::LOCK_LEAVE,
            self.queue_keys(),
            vec![
                inner.client.inner.wake_id.to_string(),
                HAND_OFF_RESERVATION.as_millis().to_string(),
                scripts::UNLOCK_MESSAGE.to_owned(),
                inner.client.inner.conn.publish_command().to_owned(),
            ],
            "leaving a lock's wait queue",
        )
    }

    /// KEYS of the release and leave scripts: the lock and its wait queue.
    fn queue_keys(&self) -> Vec<Arc<str>> {
        let inner = &self.inner;
        [
            &inner.hold.key,
            &inner.channel,
            &inner.queue_key,
            &inner.alive_key,
            &inner.hand_off_key,
        ]
        .into_iter()
        .cloned()
        .collect()
    }

    /// The guarded release of this handle's last hold, granted with `token`, sent again to a new
    /// primary after a failover (see `scripts/lock_release_resend.lua`).
    fn resend_task(&self, token: u64) -> Task {
        let inner = &self.inner;
        Task::new(
            &scripts::LOCK_RELEASE_RESEND,
            vec![
                inner.hold.key.clone(),
                inner.token_key.clone(),
                inner.channel.clone(),
            ],
            vec![
                inner.hold.field.to_string(),
                token.to_string(),
                scripts::UNLOCK_MESSAGE.to_owned(),
                inner.client.inner.conn.publish_command().to_owned(),
            ],
            "releasing a lock again after a failover",
        )
    }

    /// The release script call for one hold, with `lease_ms` left on remaining holds.
    fn release_task(&self, lease_ms: u64) -> Task {
        self.release_call(lease_ms, None, "releasing a lock")
    }

    /// Gives back a grant on release with `token` that no waiter took: released only while it
    /// is still that grant, which passes the lock on.
    fn give_back_task(&self, token: u64) -> Task {
        self.release_call(1, Some(token), "giving back a lock granted on release")
    }

    fn release_call(&self, lease_ms: u64, token: Option<u64>, context: &'static str) -> Task {
        let inner = &self.inner;
        let mut keys = self.queue_keys();
        keys.push(inner.token_key.clone());
        keys.push(inner.grant_prefix.clone());
        Task::new(
            &scripts::LOCK_RELEASE,
            keys,
            vec![
                scripts::UNLOCK_MESSAGE.to_owned(),
                lease_ms.to_string(),
                inner.hold.field.to_string(),
                HAND_OFF_RESERVATION.as_millis().to_string(),
                inner.client.inner.conn.publish_command().to_owned(),
                token.map(|t| t.to_string()).unwrap_or_default(),
                MAX_GRANT_STREAK.as_millis().to_string(),
                GRANT_PAUSE.as_millis().to_string(),
                // For telling Redisson's waiters from latchkey's at the end of a streak. Not
                // for a give-back: it is made under the hub's lock (when a grant comes for a
                // waiter that is gone), which `listens` takes; "" only makes the end of a
                // streak more careful.
                if token.is_none() && inner.client.inner.hub.listens(&inner.channel) {
                    inner.client.inner.wake_id.to_string()
                } else {
                    String::new()
                },
            ],
            context,
        )
    }

    /// One acquire script call, run detached (see [`detached`]) so that a caller who goes away
    /// cannot strand a hold: if the caller is gone when the answer comes, the guard is dropped
    /// in the task that finishes the call, which releases the hold.
    ///
    /// `park` is how long the caller will wait before its next attempt if this one fails (zero:
    /// it will not wait); `queue` is what a grant does to the client's place in the wait queue.
    async fn attempt(
        &self,
        lease: Lease,
        park: Duration,
        queue: Queue,
        grant: Option<(u64, bool)>,
    ) -> Result<Attempt<LockGuard>> {
        let lock = self.clone();
        // Boxed (as a `dyn Future`, which also keeps the callers' `Send` checks shallow): the
        // attempt future is large, and a spawned future is moved several times.
        detached(async move { lock.attempt_inner(lease, park, queue, grant).await }.boxed()).await?
    }

    async fn attempt_inner(
        &self,
        lease: Lease,
        park: Duration,
        queue: Queue,
        grant: Option<(u64, bool)>,
    ) -> Result<Attempt<LockGuard>> {
        let inner = &self.inner;
        let client = &inner.client.inner;
        let keys = [
            &*inner.hold.key,
            &*inner.token_key,
            &*inner.queue_key,
            &*inner.alive_key,
            &*inner.hand_off_key,
        ];
        let args = |lease_ms: u64| {
            vec![
                lease_ms.to_string(),
                inner.hold.field.to_string(),
                client.wake_id.to_string(),
                (park.as_millis() as u64).to_string(),
                match queue {
                    Queue::Leave => "0",
                    Queue::Stay => "1",
                    Queue::NotRegistered => "2",
                }
                .to_owned(),
                grant.map_or_else(String::new, |(seq, private)| {
                    let private = if private { "c" } else { "" };
                    format!("{seq}{private}:{}", grant_lease(park).as_millis())
                }),
            ]
        };
        let renewal = || LockRenewal::of(&inner.hold);
        attempt_hold(
            self,
            lease,
            AcquireCall {
                script: &scripts::LOCK_ACQUIRE,
                keys: &keys,
                args: &[],
                context: "acquiring a lock",
                name: &inner.name,
            },
            args,
            renewal,
            |core| LockGuard { core },
            |reply| match reply {
                [0, retry_after] => Ok(Attempt::retry_after_ms(*retry_after)),
                other => Err(unexpected("the lock script", other)),
            },
        )
        .await
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
    /// # async fn f(lock: latchkey::Lock) -> latchkey::Result<()> {
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
        let mut invocation = scripts::LOCK_STATUS.prepare_invoke();
        invocation
            .key(&*self.inner.hold.key)
            .key(&*self.inner.token_key)
            .key(&*self.inner.queue_key);
        let (holders, pttl, token, waiting): (Vec<(String, u64)>, i64, i64, u64) = self
            .inner
            .client
            .inner
            .conn
            .script(&invocation, "reading a lock's status", &self.inner.name)
            .await?;
        Ok(LockStatus {
            holders: holders
                .into_iter()
                .map(|(owner, holds)| Holder { owner, holds })
                .collect(),
            remaining_lease: (pttl >= 0).then(|| Duration::from_millis(pttl as u64)),
            fencing_token: (token >= 0).then_some(token as u64),
            waiting_clients: waiting,
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
    /// # async fn f(lock: latchkey::Lock) -> latchkey::Result<()> {
    /// let existed = lock.force_unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    #[tracing::instrument(level = "debug", name = "force_unlock", skip_all, fields(primitive = "lock", name = %self.inner.name))]
    pub async fn force_unlock(&self) -> Result<bool> {
        check_name(&self.inner.name)?;
        let mut invocation = scripts::LOCK_FORCE_UNLOCK.prepare_invoke();
        invocation
            .key(&*self.inner.hold.key)
            .key(&*self.inner.channel)
            .arg(scripts::UNLOCK_MESSAGE)
            .arg(self.inner.client.inner.conn.publish_command());
        let deleted: i64 = self
            .inner
            .client
            .inner
            .conn
            .script(&invocation, "force-unlocking", &self.inner.name)
            .await?;
        Ok(deleted == 1)
    }
}

/// One hold of a [`Lock`]. Releasing it (explicitly with [`LockGuard::unlock`], or by dropping
/// it) gives the hold back; the lock is free once every hold is given back.
///
/// The guard owns what it needs (`'static`, `Send`, `Sync`), so it can move into a spawned task.
/// Dropping it never blocks: the release is handed to the client's background task.
#[must_use = "dropping the guard releases the lock at once"]
pub struct LockGuard {
    core: GuardCore<Lock>,
}

lock_guard!(LockGuard, "client.lock(\"orders:1001\").lock()");

impl LockGuard {
    /// The lock this guard holds.
    pub fn lock(&self) -> &Lock {
        self.core.held()
    }
}

holds!(
    Lock,
    [inner],
    hold,
    |lock: &Lock, lease_ms| lock.release_task(lease_ms),
    resend = |lock: &Lock, token| lock.resend_task(token)
);
