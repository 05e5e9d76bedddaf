//! The reentrant lock, compatible with Redisson's `RLock`.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::keys::{check_name, LockKeys};
use crate::pubsub::WakePolicy;
use crate::replica::AcquireCall;
use crate::scripts;
use crate::stall::pause_before_retry;
use crate::task::{detached, Task};
use crate::watchdog::{check_lease, HoldKey, Lease, LockRenewal, Release, Ticket};

/// The longest a waiter sleeps between attempts. Unlock messages normally wake it long before;
/// this bounds the stall when a message is lost or the lock was handed off to a client that
/// died while waiting.
const MAX_PARK: Duration = Duration::from_secs(2);

/// How long a lock handed off to a waiting client stays reserved for it.
pub(crate) const HAND_OFF_RESERVATION: Duration = Duration::from_millis(200);

impl Client {
    /// A reentrant lock named `name`, with a new owner id (`<client id>:<n>`).
    ///
    /// Making the handle sends nothing; the name is checked when the handle is used. Clones of the
    /// handle share its owner id, so they re-enter each other's holds.
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
}

impl fmt::Debug for Lock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lock")
            .field("name", &self.inner.name)
            .field("owner", &self.inner.hold.field)
            .finish()
    }
}

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

enum Attempt {
    Granted(LockGuard),
    /// Somebody else holds it; retry after this many ms at the latest (-1: no expiry).
    Held {
        retry_after: i64,
    },
    /// The script call timed out while this handle held nothing and had no other attempt or
    /// release under way: if the script ran after all, the hold it granted is stranded, and the
    /// next attempt takes it over as one fresh hold (the registry's `alone`), so trying again
    /// is safe.
    Stalled(Error),
}

impl Lock {
    pub(crate) fn new(client: Client, name: String) -> Lock {
        let keys = LockKeys::new(client.namespace(), &name);
        let field = client.next_owner();
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

    /// Acquires the lock, waiting as long as it takes. The lease is the client's watchdog
    /// timeout, renewed by the watchdog until the guard is released.
    ///
    /// If this handle (or a clone) already holds the lock, the hold count goes up and the call
    /// returns at once.
    ///
    /// # Redis stalls
    ///
    /// If a call to Redis times out ([`Error::Timeout`]) while the wait has time left, the attempt
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
    /// [`Error::InvalidArgument`] for a bad name, [`Error::WrongType`] if the key holds another
    /// type, connection errors ([`Error::is_connection`]) if Redis cannot be reached.
    /// [`Error::NotReplicated`] with replica sync (see
    /// [`ClientBuilder::replica_sync`](crate::ClientBuilder::replica_sync)) when too few replicas
    /// acknowledged the grant in time: the hold was released again ([`Error::is_not_replicated`]).
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
    pub async fn lock(&self) -> Result<LockGuard> {
        match self.acquire(Lease::Watchdog, None).await? {
            Some(guard) => Ok(guard),
            None => unreachable!("an unbounded wait only ends with the lock"),
        }
    }

    /// Tries to acquire the lock, waiting at most `wait`; `Ok(None)` if it was not free in time.
    /// `Duration::ZERO` tries once without waiting. The lease is renewed by the watchdog.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`Lock::lock`].
    ///
    /// # Errors
    ///
    /// As [`Lock::lock`], and [`Error::InvalidArgument`] if `wait` is too large to add to the
    /// clock.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(lock: latchkey::Lock) -> latchkey::Result<()> {
    /// use std::time::Duration;
    /// match lock.try_lock(Duration::from_millis(500)).await? {
    ///     Some(guard) => guard.unlock().await?,
    ///     None => println!("busy, try later"),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_lock(&self, wait: Duration) -> Result<Option<LockGuard>> {
        let deadline = deadline_after(wait)?;
        self.acquire(Lease::Watchdog, Some(deadline)).await
    }

    /// Acquires the lock with [`LockOptions`]: a fixed lease (no watchdog) and/or a bounded wait.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`Lock::lock`].
    ///
    /// # Errors
    ///
    /// As [`Lock::lock`]; [`Error::WaitTimedOut`] if a wait was given and ran out;
    /// [`Error::InvalidArgument`] for a lease out of range or a wait too large.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(lock: latchkey::Lock) -> latchkey::Result<()> {
    /// use std::time::Duration;
    /// use latchkey::LockOptions;
    ///
    /// let guard = lock
    ///     .lock_with(LockOptions::new().lease(Duration::from_secs(10)).wait(Duration::from_secs(1)))
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn lock_with(&self, options: LockOptions) -> Result<LockGuard> {
        let started = std::time::Instant::now();
        match self.try_lock_with(options).await? {
            Some(guard) => Ok(guard),
            None => Err(Error::WaitTimedOut {
                name: self.inner.name.clone(),
                waited: started.elapsed(),
            }),
        }
    }

    /// Like [`Lock::lock_with`], but a wait that runs out is `Ok(None)` rather than an error.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`Lock::lock`].
    ///
    /// # Errors
    ///
    /// As [`Lock::lock_with`], except for running out of time.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(lock: latchkey::Lock) -> latchkey::Result<()> {
    /// use std::time::Duration;
    /// use latchkey::LockOptions;
    ///
    /// let options = LockOptions::new().lease(Duration::from_secs(5)).wait(Duration::ZERO);
    /// if let Some(guard) = lock.try_lock_with(options).await? {
    ///     guard.unlock().await?;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_lock_with(&self, options: LockOptions) -> Result<Option<LockGuard>> {
        let lease = match options.lease {
            Some(lease) => {
                check_lease(lease)?;
                Lease::Fixed(lease)
            }
            None => Lease::Watchdog,
        };
        let deadline = options.wait.map(deadline_after).transpose()?;
        self.acquire(lease, deadline).await
    }

    async fn acquire(&self, lease: Lease, deadline: Option<Instant>) -> Result<Option<LockGuard>> {
        check_name(&self.inner.name)?;
        let hub = &self.inner.client.inner.hub;
        let channel = &*self.inner.channel;
        let will_wait = deadline.is_none_or(|d| d > Instant::now());
        // If this client already listens on the lock's channel, join its waiters first (no I/O):
        // then the first attempt is already covered, and no retry after subscribing is needed.
        let mut subscription = if will_wait {
            hub.try_join(channel, || Some(self.leave_task()))
        } else {
            None
        };
        let mut covered = subscription.is_some();
        loop {
            let others = hub
                .waiters_on(channel)
                .saturating_sub(usize::from(subscription.is_some()));
            // Nobody of this client waits for the lock (no subscription, no other waiter): the
            // client is not in the lock's wait queue, and a grant has nothing to drop there.
            let queue = match (others, subscription.is_some()) {
                (0, false) => Queue::NotRegistered,
                (0, true) => Queue::Leave,
                _ => Queue::Stay,
            };
            let retry_after = match self.attempt(lease, park_for(deadline), queue).await? {
                Attempt::Granted(guard) => {
                    if let Some(subscription) = subscription {
                        subscription.finish();
                    }
                    return Ok(Some(guard));
                }
                Attempt::Held { retry_after } => retry_after,
                Attempt::Stalled(err) => {
                    pause_before_retry(err, deadline).await?;
                    continue;
                }
            };
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return Ok(None);
            }
            let Some(waiting) = subscription.as_ref().filter(|_| covered) else {
                // Subscribe, then retry at once: an unlock between the failed attempt and the
                // subscription would otherwise go unnoticed.
                match hub
                    .subscribe(channel, WakePolicy::Lock, Some(self.leave_task()))
                    .await
                {
                    Ok(subscribed) => {
                        subscription = Some(subscribed);
                        covered = true;
                    }
                    // A stalled server: try again (subscribing changes nothing in Redis).
                    Err(err) => pause_before_retry(err, deadline).await?,
                }
                continue;
            };
            // Wait for an unlock message, but never longer than the holder's remaining lease (a
            // lost message costs at most the TTL) nor MAX_PARK.
            let park = match retry_after {
                ms if ms >= 0 => Duration::from_millis(ms as u64).min(MAX_PARK),
                _ => MAX_PARK, // the holder's lock has no expiry
            };
            let mut until = now + park;
            if let Some(d) = deadline {
                until = until.min(d);
            }
            waiting.wait_until(until).await;
        }
    }

    /// The clean-up run when this client's last waiter for the lock gives up: unregister the
    /// client, and pass on a hand-off that was meant for it.
    fn leave_task(&self) -> Task {
        let inner = &self.inner;
        Task {
            script: &scripts::LOCK_LEAVE,
            keys: vec![
                inner.hold.key.clone(),
                inner.channel.clone(),
                inner.queue_key.clone(),
                inner.alive_key.clone(),
                inner.hand_off_key.clone(),
            ],
            args: vec![
                inner.client.inner.wake_id.to_string(),
                HAND_OFF_RESERVATION.as_millis().to_string(),
                scripts::UNLOCK_MESSAGE.to_owned(),
                inner.client.inner.conn.publish_command().to_owned(),
            ],
            context: "leaving a lock's wait queue",
            release: None,
            lost: None,
        }
    }

    /// The guarded release of this handle's last hold, granted with `token`, sent again to a new
    /// primary after a failover (see `scripts/lock_release_resend.lua`).
    fn resend_task(&self, token: u64) -> Task {
        let inner = &self.inner;
        Task {
            script: &scripts::LOCK_RELEASE_RESEND,
            keys: vec![
                inner.hold.key.clone(),
                inner.token_key.clone(),
                inner.channel.clone(),
            ],
            args: vec![
                inner.hold.field.to_string(),
                token.to_string(),
                scripts::UNLOCK_MESSAGE.to_owned(),
                inner.client.inner.conn.publish_command().to_owned(),
            ],
            context: "releasing a lock again after a failover",
            release: None,
            lost: None,
        }
    }

    /// The release script call for one hold, with `lease_ms` left on remaining holds.
    fn release_task(&self, lease_ms: u64) -> Task {
        let inner = &self.inner;
        Task {
            script: &scripts::LOCK_RELEASE,
            keys: vec![
                inner.hold.key.clone(),
                inner.channel.clone(),
                inner.queue_key.clone(),
                inner.alive_key.clone(),
                inner.hand_off_key.clone(),
            ],
            args: vec![
                scripts::UNLOCK_MESSAGE.to_owned(),
                lease_ms.to_string(),
                inner.hold.field.to_string(),
                HAND_OFF_RESERVATION.as_millis().to_string(),
                inner.client.inner.conn.publish_command().to_owned(),
            ],
            context: "releasing a lock",
            release: None,
            lost: None,
        }
    }

    /// One acquire script call, run in its own task so that a caller who goes away cannot strand
    /// a hold: if the caller is gone when the answer comes, the guard is dropped there, which
    /// releases the hold.
    ///
    /// `park` is how long the caller will wait before its next attempt if this one fails (zero:
    /// it will not wait); `queue` is what a grant does to the client's place in the wait queue.
    async fn attempt(&self, lease: Lease, park: Duration, queue: Queue) -> Result<Attempt> {
        let lock = self.clone();
        detached(async move { lock.attempt_inner(lease, park, queue).await }).await?
    }

    async fn attempt_inner(&self, lease: Lease, park: Duration, queue: Queue) -> Result<Attempt> {
        let inner = &self.inner;
        let client = &inner.client.inner;
        let watchdog_timeout = client.config.watchdog_timeout;
        let lease_ms = match lease {
            Lease::Watchdog => watchdog_timeout.as_millis() as u64,
            Lease::Fixed(d) => d.as_millis() as u64,
        };
        // Held until the grant is recorded: a concurrent attempt of this handle is not "alone".
        let attempt = client.registry.begin_attempt(&inner.hold);
        let keys = [
            &*inner.hold.key,
            &*inner.token_key,
            &*inner.queue_key,
            &*inner.alive_key,
            &*inner.hand_off_key,
        ];
        let args = [
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
            if attempt.alone { "1" } else { "0" }.to_owned(),
        ];
        let sent_at = Instant::now();
        // With replica sync, a grant too few replicas acknowledged is undone by releasing the
        // hold just granted (one hold, this lease), and the attempt fails with NotReplicated.
        let reply: Vec<i64> = match client
            .acquire_script(
                AcquireCall {
                    script: &scripts::LOCK_ACQUIRE,
                    keys: &keys,
                    args: &args,
                    context: "acquiring a lock",
                    name: &inner.name,
                },
                |reply: &Vec<i64>| reply.first() == Some(&1),
                || self.release_task(lease_ms),
            )
            .await
        {
            Ok(reply) => reply,
            Err(err) if err.is_uncertain() && attempt.alone => return Ok(Attempt::Stalled(err)),
            Err(err) => return Err(err),
        };
        match reply.as_slice() {
            [1, token, holds] => {
                let ticket = client.registry.acquired(
                    inner.hold.clone(),
                    &inner.name,
                    *holds as u64,
                    lease,
                    watchdog_timeout,
                    sent_at,
                    Arc::new(LockRenewal {
                        key: inner.hold.key.clone(),
                        field: inner.hold.field.clone(),
                    }),
                );
                Ok(Attempt::Granted(LockGuard {
                    lock: self.clone(),
                    ticket,
                    lease,
                    fencing_token: *token as u64,
                    released: false,
                }))
            }
            [0, retry_after] => Ok(Attempt::Held {
                retry_after: *retry_after,
            }),
            other => Err(Error::Redis(redis::RedisError::from((
                redis::ErrorKind::UnexpectedReturnType,
                "unexpected reply from the lock script",
                format!("{other:?}"),
            )))),
        }
    }

    /// Whether anybody holds the lock (one `EXISTS`).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a read.
    ///
    /// # Errors
    ///
    /// Connection errors, [`Error::InvalidArgument`] for a bad name.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(lock: latchkey::Lock) -> latchkey::Result<()> {
    /// if lock.is_locked().await? {
    ///     println!("somebody holds {}", lock.name());
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn is_locked(&self) -> Result<bool> {
        check_name(&self.inner.name)?;
        let n: i64 = self
            .inner
            .client
            .inner
            .conn
            .query(
                redis::cmd("EXISTS").arg(&*self.inner.hold.key),
                "checking a lock",
                &self.inner.name,
            )
            .await?;
        Ok(n == 1)
    }

    /// How many holds this handle (and its clones) has on the lock; 0 if it holds none.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a read.
    ///
    /// # Errors
    ///
    /// Connection errors, [`Error::WrongType`] if the key is not a hash.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(lock: latchkey::Lock) -> latchkey::Result<()> {
    /// let outer = lock.lock().await?;
    /// let inner = lock.lock().await?; // re-entered
    /// assert_eq!(lock.hold_count().await?, 2);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn hold_count(&self) -> Result<u64> {
        check_name(&self.inner.name)?;
        let n: Option<u64> = self
            .inner
            .client
            .inner
            .conn
            .query(
                redis::cmd("HGET")
                    .arg(&*self.inner.hold.key)
                    .arg(&*self.inner.hold.field),
                "reading a hold count",
                &self.inner.name,
            )
            .await?;
        Ok(n.unwrap_or(0))
    }

    /// The time until the lock expires, whoever holds it; `None` if nobody holds it (or it has
    /// no expiry).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a read.
    ///
    /// # Errors
    ///
    /// Connection errors.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(lock: latchkey::Lock) -> latchkey::Result<()> {
    /// if let Some(left) = lock.remaining_lease().await? {
    ///     println!("expires in {left:?}");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn remaining_lease(&self) -> Result<Option<Duration>> {
        check_name(&self.inner.name)?;
        let ms: i64 = self
            .inner
            .client
            .inner
            .conn
            .query(
                redis::cmd("PTTL").arg(&*self.inner.hold.key),
                "reading a lease",
                &self.inner.name,
            )
            .await?;
        Ok((ms >= 0).then(|| Duration::from_millis(ms as u64)))
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
    /// [`Error::WrongType`] if the key is not a lock, connection errors.
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
    /// [`Error::WrongType`] if the key is not a lock, connection errors.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(lock: latchkey::Lock) -> latchkey::Result<()> {
    /// let existed = lock.force_unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
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

/// How long a waiter with this deadline may park between attempts (zero: it does not wait).
fn park_for(deadline: Option<Instant>) -> Duration {
    match deadline {
        None => MAX_PARK,
        Some(d) => d.saturating_duration_since(Instant::now()).min(MAX_PARK),
    }
}

fn deadline_after(wait: Duration) -> Result<Instant> {
    Instant::now().checked_add(wait).ok_or_else(|| {
        Error::invalid(
            "wait",
            format!("{wait:?} overflows the clock; use `lock()` to wait without a limit"),
        )
    })
}

/// One hold of a [`Lock`]. Releasing it (explicitly with [`LockGuard::unlock`], or by dropping
/// it) gives the hold back; the lock is free once every hold is given back.
///
/// The guard owns what it needs (`'static`, `Send`, `Sync`), so it can move into a spawned task.
/// Dropping it never blocks: the release is handed to the client's background task.
#[must_use = "dropping the guard releases the lock at once"]
pub struct LockGuard {
    lock: Lock,
    ticket: Ticket,
    lease: Lease,
    fencing_token: u64,
    released: bool,
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("lock", &self.lock.inner.name)
            .field("fencing_token", &self.fencing_token)
            .field("lease", &self.lease)
            .field("lost", &self.is_lost())
            .finish()
    }
}

impl LockGuard {
    /// The fencing token of this hold: strictly larger than the token of every earlier holder of
    /// this lock (re-entered holds share their holder's token). Give it to the storage you write
    /// to, and have the storage refuse writes with a token smaller than one it has seen.
    pub fn fencing_token(&self) -> u64 {
        self.fencing_token
    }

    /// The lock this guard holds.
    pub fn lock(&self) -> &Lock {
        &self.lock
    }

    /// Whether the hold is known to be lost (see [`LockGuard::lost`]).
    pub fn is_lost(&self) -> bool {
        self.ticket.lost.is_cancelled()
    }

    /// Resolves when the hold is lost: the watchdog found the lock gone or owned by someone else,
    /// renewals failed until the lease ran out, or a fixed lease ran out. After that the critical
    /// section is no longer protected. The future owns what it needs, so it can be raced against
    /// the work with `tokio::select!`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only waits.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(lock: latchkey::Lock) -> latchkey::Result<()> {
    /// # async fn long_job() {}
    /// let guard = lock.lock().await?;
    /// tokio::select! {
    ///     _ = guard.lost() => eprintln!("lock lost, stopping"),
    ///     _ = long_job() => guard.unlock().await?,
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        self.ticket.lost.clone().cancelled_owned()
    }

    /// Releases this hold now and waits for Redis to confirm it.
    ///
    /// The guard is consumed, so a hold cannot be released twice:
    ///
    /// ```compile_fail
    /// # async fn f(lock: latchkey::Lock) -> latchkey::Result<()> {
    /// let guard = lock.lock().await?;
    /// guard.unlock().await?;
    /// guard.unlock().await?; // error[E0382]: use of moved value: `guard`
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before it completes still releases the hold: either the release
    /// script was already sent, or the guard's drop hands it to the background task.
    ///
    /// # Errors
    ///
    /// [`Error::NotOwner`] if the hold was already gone (expired, lost, force-unlocked): nothing
    /// is changed then, and a successor's lock is untouched. Connection errors if Redis cannot
    /// be reached; the hold then expires with its lease, unless this handle acquires again
    /// first: its next acquire takes the stranded hold over as a new hold (one hold, a new
    /// fencing token).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(lock: latchkey::Lock) -> latchkey::Result<()> {
    /// let guard = lock.lock().await?;
    /// guard.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn unlock(mut self) -> Result<()> {
        self.released = true;
        let inner = &self.lock.inner;
        let client = &inner.client.inner;
        let release = client.registry.released(
            &inner.hold,
            &self.ticket,
            self.lease,
            client.config.watchdog_timeout,
        );
        let Release::Redis {
            lease_ms,
            mark,
            last,
        } = release
        else {
            return Err(Error::NotOwner {
                name: inner.name.clone(),
            });
        };
        if last {
            client
                .follow
                .resends
                .record(|| self.lock.resend_task(self.fencing_token));
        }
        // The release runs in its own task: if this future is dropped, the release still happens.
        let left: i64 = self
            .lock
            .release_task(lease_ms)
            .releasing(mark)
            .run_detached(&client.conn, &inner.name)
            .await?;
        if left < 0 {
            return Err(Error::NotOwner {
                name: inner.name.clone(),
            });
        }
        Ok(())
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let inner = &self.lock.inner;
        let client = &inner.client.inner;
        let release = client.registry.released(
            &inner.hold,
            &self.ticket,
            self.lease,
            client.config.watchdog_timeout,
        );
        if let Release::Redis {
            lease_ms,
            mark,
            last,
        } = release
        {
            if last {
                client
                    .follow
                    .resends
                    .record(|| self.lock.resend_task(self.fencing_token));
            }
            let _ = client
                .background
                .send(self.lock.release_task(lease_ms).releasing(mark));
        }
    }
}
