//! The permit-expirable semaphore, compatible with Redisson's `RPermitExpirableSemaphore`.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::client::{Client, Object};
use crate::error::{Error, Result};
use crate::guard::Lost;
use crate::keys::{check_name, named_debug, PermitSemaphoreKeys};
use crate::metrics::{self, Op};
use crate::pubsub::WakePolicy;
use crate::replica::AcquireCall;
use crate::scripts::{
    PSEM_ACQUIRE, PSEM_ADD_PERMITS, PSEM_COUNT, PSEM_RELEASE, PSEM_RENEW, PSEM_SET_PERMITS,
};
use crate::semaphore::{
    added, check_permits, check_total, not_initialized, permits_script, MAX_PERMITS,
};
use crate::task::{detached_try, Task};
use crate::wait::{checked_options, deadline_after, or_timed_out, unbounded, unexpected, Attempt};
use crate::watchdog::{HoldKey, Lease, Renewal, Ticket};

/// The id of one permit of a [`PermitSemaphore`]: 16 random bytes, shown as 32 lowercase hex
/// digits (as Redisson shows them), and stored as the raw bytes in Redis.
///
/// # Examples
///
/// ```
/// use latchkey_redis::PermitId;
///
/// let id: PermitId = "00112233445566778899aabbccddeeff".parse()?;
/// assert_eq!(id.to_string(), "00112233445566778899aabbccddeeff");
/// assert!("not hex".parse::<PermitId>().is_err());
/// # Ok::<(), latchkey_redis::Error>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PermitId(pub(crate) [u8; 16]);

impl PermitId {
    fn random() -> PermitId {
        PermitId(rand::random())
    }

    /// The 16 bytes of the id.
    pub fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }
}

impl fmt::Display for PermitId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for byte in self.0 {
            write!(f, "{byte:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for PermitId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PermitId({self})")
    }
}

impl FromStr for PermitId {
    type Err = Error;

    /// Parses 32 hex digits.
    fn from_str(s: &str) -> Result<PermitId> {
        let bad = || {
            Error::invalid(
                "permit id",
                format!("`{s}` is not a permit id; give 32 hex digits"),
            )
        };
        if s.len() != 32 || !s.is_ascii() {
            return Err(bad());
        }
        let mut bytes = [0u8; 16];
        for (i, byte) in bytes.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
        }
        Ok(PermitId(bytes))
    }
}

/// Options for [`PermitSemaphore::acquire_with`] and [`PermitSemaphore::try_acquire_with`].
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use latchkey_redis::PermitOptions;
///
/// // Lease the permits for 10 s (no watchdog), wait at most 2 s for them.
/// let options = PermitOptions::new()
///     .lease(Duration::from_secs(10))
///     .wait(Duration::from_secs(2));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[must_use]
pub struct PermitOptions {
    lease: Option<Duration>,
    wait: Option<Duration>,
}

impl PermitOptions {
    /// Default options: watchdog lease, wait as long as it takes.
    pub fn new() -> PermitOptions {
        PermitOptions::default()
    }

    /// A fixed lease: the permits come back this long after they are taken unless released
    /// first, and the watchdog does not renew them. Between 1 ms and
    /// [`MAX_LEASE`](crate::MAX_LEASE).
    pub fn lease(mut self, lease: Duration) -> PermitOptions {
        self.lease = Some(lease);
        self
    }

    /// The longest time to wait for the permits. `Duration::ZERO` tries once.
    pub fn wait(mut self, wait: Duration) -> PermitOptions {
        self.wait = Some(wait);
        self
    }
}

/// A distributed semaphore whose permits have ids and leases, kept in Redis in Redisson's
/// `RPermitExpirableSemaphore` layout.
///
/// Made by [`Client::permit_semaphore`]. Each permit taken gets a random [`PermitId`] and a lease:
/// by default the client's watchdog timeout, renewed by the watchdog while the guard lives, or a
/// fixed lease ([`PermitOptions::lease`]). Permits held by a client that crashes or loses Redis
/// come back by themselves when their lease ends, without anybody's help: every script of the
/// semaphore first reclaims ended leases. Lease ends come from the Redis server's clock.
///
/// Layout: the available count is a string at `name`; the leases are a sorted set at
/// `{name}:timeout` (permit id as 16 raw bytes, scored by the lease end in ms); waiters listen on
/// `redisson_sc:{name}`. Redisson clients score leases with their own clocks; keep the clocks
/// close when Java and Rust share a semaphore.
///
/// # Examples
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> latchkey_redis::Result<()> {
/// let client = latchkey_redis::Client::connect("redis://127.0.0.1:6379").await?;
/// let semaphore = client.permit_semaphore("workers");
/// semaphore.try_set_permits(3).await?;
///
/// let permits = semaphore.acquire(1).await?;
/// println!("working under permit {}", permits.ids()[0]);
/// permits.release().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct PermitSemaphore {
    inner: Arc<PermitSemaphoreInner>,
}

#[derive(Clone)]
struct PermitSemaphoreInner {
    client: Client,
    name: String,
    keys: PermitSemaphoreKeys,
    /// Acquires wait for the permits to be set rather than fail (see
    /// [`PermitSemaphore::wait_for_init`]).
    wait_for_init: bool,
}

named_debug!(PermitSemaphore);
crate::client::object!(PermitSemaphore);

impl Client {
    /// A permit-expirable semaphore named `name`, in Redisson's `RPermitExpirableSemaphore`
    /// layout.
    ///
    /// Making the handle sends nothing; the name is checked when the handle is used. Set the
    /// permits up once with [`PermitSemaphore::try_set_permits`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(client: latchkey_redis::Client) -> latchkey_redis::Result<()> {
    /// let semaphore = client.permit_semaphore("workers");
    /// semaphore.try_set_permits(3).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn permit_semaphore(&self, name: impl Into<String>) -> PermitSemaphore {
        let (client, name) = (self.clone(), name.into());
        let keys = PermitSemaphoreKeys::new(client.namespace(), &name);
        PermitSemaphore {
            inner: Arc::new(PermitSemaphoreInner {
                client,
                name,
                keys,
                wait_for_init: false,
            }),
        }
    }
}

impl PermitSemaphore {
    /// The most permits a permit semaphore can have in all (`i32::MAX`), as for Redisson's
    /// `RPermitExpirableSemaphore`; the same value as [`Semaphore::MAX_PERMITS`](crate::Semaphore::MAX_PERMITS).
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(latchkey_redis::PermitSemaphore::MAX_PERMITS, i32::MAX as u32);
    /// ```
    pub const MAX_PERMITS: u32 = MAX_PERMITS;

    /// The semaphore's name as given to [`Client::permit_semaphore`], without the client's
    /// [namespace](crate::ClientBuilder::namespace): under the namespace `billing`, `name()` is
    /// `workers` and the semaphore is kept at `billing:workers` in Redis. The name is checked
    /// (length, reserved prefixes, a whole hash tag) as given, whatever the namespace.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(client: latchkey_redis::Client) {
    /// assert_eq!(client.permit_semaphore("workers").name(), "workers");
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    fn keys(&self) -> [&Arc<str>; 3] {
        let k = &self.inner.keys;
        [&k.permits, &k.leases, &k.channel]
    }

    /// This handle, its acquires waiting for the permits to be set (by another service, say:
    /// a Java one that calls `trySetPermits`) instead of failing at once with
    /// [`Error::NotInitialized`]. Sends nothing.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(client: latchkey_redis::Client) -> latchkey_redis::Result<()> {
    /// let workers = client.permit_semaphore("workers").wait_for_init();
    /// let permits = workers.acquire(1).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn wait_for_init(self) -> PermitSemaphore {
        let mut inner = PermitSemaphoreInner::clone(&self.inner);
        inner.wait_for_init = true;
        PermitSemaphore {
            inner: Arc::new(inner),
        }
    }

    /// Sets the semaphore up with `permits` permits, unless it exists already. Returns whether
    /// it was set up by this call. Waiters are woken.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: one script call, applied or not.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad name or more than [`PermitSemaphore::MAX_PERMITS`];
    /// [`Error::WrongType`] if a key holds another type; connection errors.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(semaphore: latchkey_redis::PermitSemaphore) -> latchkey_redis::Result<()> {
    /// semaphore.try_set_permits(3).await?;
    /// # Ok(())
    /// # }
    /// ```
    #[tracing::instrument(level = "debug", name = "try_set_permits", skip_all, fields(primitive = "permit_semaphore", name = %self.inner.name))]
    pub async fn try_set_permits(&self, permits: u32) -> Result<bool> {
        check_name(&self.inner.name)?;
        check_total(permits)?;
        let (args, context) = ([permits.into()], "setting semaphore permits");
        let set: i64 = permits_script(self, &PSEM_SET_PERMITS, self.keys(), &args, context).await?;
        Ok(set == 1)
    }

    /// Adds `delta` permits (or takes `-delta` away). The total is the available count plus
    /// the permits leased out; taking permits away while they are leased may leave the
    /// available count below zero until enough come back. Waiters are woken.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: one script call, applied or not.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] (nothing changed) if the total would go below zero or above
    /// [`PermitSemaphore::MAX_PERMITS`]; [`Error::WrongType`]; connection errors.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(semaphore: latchkey_redis::PermitSemaphore) -> latchkey_redis::Result<()> {
    /// semaphore.add_permits(2).await?;
    /// # Ok(())
    /// # }
    /// ```
    #[tracing::instrument(level = "debug", name = "add_permits", skip_all, fields(primitive = "permit_semaphore", name = %self.inner.name))]
    pub async fn add_permits(&self, delta: i32) -> Result<()> {
        let (args, context) = (
            [delta.into(), MAX_PERMITS.into()],
            "adding semaphore permits",
        );
        let reply: Vec<i64> =
            permits_script(self, &PSEM_ADD_PERMITS, self.keys(), &args, context).await?;
        added(&reply, delta)
    }

    /// The available count and the number of permits leased out.
    async fn counts(&self) -> Result<(i64, u32)> {
        let context = "counting semaphore permits";
        let (available, leased): (i64, i64) =
            permits_script(self, &PSEM_COUNT, self.keys(), &[], context).await?;
        let leased = u32::try_from(leased)
            .map_err(|_| unexpected("the permit count script", (available, leased)))?;
        Ok((available, leased))
    }

    /// The number of permits available now, after reclaiming ended leases (0 if the semaphore
    /// was never set up).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: one script call (it only reclaims ended leases).
    ///
    /// # Errors
    ///
    /// [`Error::WrongType`]; connection errors.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(semaphore: latchkey_redis::PermitSemaphore) -> latchkey_redis::Result<()> {
    /// println!("{} permits free", semaphore.available_permits().await?);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn available_permits(&self) -> Result<i64> {
        Ok(self.counts().await?.0)
    }

    /// The number of permits leased out now (leases that have not ended), by every client. A
    /// count that does not fit a `u32` (a corrupted set) is an [`Error::Redis`] "unexpected
    /// reply", never a wrapped number.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: one script call (it only reclaims ended leases).
    ///
    /// # Errors
    ///
    /// [`Error::WrongType`]; connection errors.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(semaphore: latchkey_redis::PermitSemaphore) -> latchkey_redis::Result<()> {
    /// println!("{} permits out", semaphore.leased().await?);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn leased(&self) -> Result<u32> {
        Ok(self.counts().await?.1)
    }

    /// Takes `n` permits, waiting as long as it takes. Their leases are renewed by the watchdog
    /// until the guard is released or dropped.
    ///
    /// Waiters sleep until a release is published on the semaphore's channel or the next lease
    /// out ends (at most 2 s between attempts). The semaphore is not fair.
    ///
    /// # Redis stalls
    ///
    /// If a call to Redis times out ([`Error::Timeout`]) while the wait has time left, the attempt
    /// is made again after a short pause, within the wait: a stall shorter than the wait is waited
    /// through. Permits that the timed-out call leased after all (under ids only it knew) are given
    /// back by id, by a release queued behind it; the retry leases new ids.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe. Dropping the future leaves no permit taken, no renewal and no subscription
    /// behind: if the acquire script already ran, the permits are given back by the client's
    /// background task.
    ///
    /// # Errors
    ///
    /// [`Error::NotInitialized`] at once if the permits were never set (unless the handle
    /// [waits for them](Self::wait_for_init)); [`Error::InvalidArgument`] for a bad name or `n`
    /// of 0 or above [`PermitSemaphore::MAX_PERMITS`];
    /// [`Error::WrongType`]; connection errors; [`Error::NotReplicated`] with replica sync (see
    /// [`ClientBuilder::replica_sync`](crate::ClientBuilder::replica_sync)) when too few replicas
    /// acknowledged the permits taken in time: they were given back by id
    /// ([`Error::is_not_replicated`]).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(semaphore: latchkey_redis::PermitSemaphore) -> latchkey_redis::Result<()> {
    /// let permits = semaphore.acquire(2).await?;
    /// permits.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn acquire(&self, n: u32) -> Result<LeasedPermits> {
        Ok(unbounded(
            self.acquire_until(n, Lease::Watchdog, None).await?,
        ))
    }

    /// Takes `n` permits, waiting at most `wait`; `Ok(None)` if they did not become available in
    /// time. `Duration::ZERO` tries once. The leases are renewed by the watchdog.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`PermitSemaphore::acquire`].
    ///
    /// # Errors
    ///
    /// As [`PermitSemaphore::acquire`], and [`Error::InvalidArgument`] if `wait` is too large
    /// to add to the clock.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(semaphore: latchkey_redis::PermitSemaphore) -> latchkey_redis::Result<()> {
    /// use std::time::Duration;
    /// if let Some(permits) = semaphore.try_acquire(1, Duration::from_secs(1)).await? {
    ///     permits.release().await?;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_acquire(&self, n: u32, wait: Duration) -> Result<Option<LeasedPermits>> {
        let deadline = deadline_after(wait, "`acquire`")?;
        self.acquire_until(n, Lease::Watchdog, Some(deadline)).await
    }

    /// Takes `n` permits with [`PermitOptions`]: a fixed lease (no watchdog) and/or a bounded
    /// wait.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`PermitSemaphore::acquire`].
    ///
    /// # Errors
    ///
    /// As [`PermitSemaphore::acquire`]; [`Error::WaitTimedOut`] if a wait was given and ran out;
    /// [`Error::InvalidArgument`] for a lease out of range or a wait too large.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(semaphore: latchkey_redis::PermitSemaphore) -> latchkey_redis::Result<()> {
    /// use std::time::Duration;
    /// use latchkey_redis::PermitOptions;
    ///
    /// // The permit comes back after 30 s even if this process dies.
    /// let permits = semaphore
    ///     .acquire_with(1, PermitOptions::new().lease(Duration::from_secs(30)))
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn acquire_with(&self, n: u32, options: PermitOptions) -> Result<LeasedPermits> {
        let started = std::time::Instant::now();
        let granted = self.try_acquire_with(n, options).await?;
        or_timed_out(granted, &self.inner.name, started)
    }

    /// Like [`PermitSemaphore::acquire_with`], but a wait that runs out is `Ok(None)`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`PermitSemaphore::acquire`].
    ///
    /// # Errors
    ///
    /// As [`PermitSemaphore::acquire_with`], except for running out of time.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(semaphore: latchkey_redis::PermitSemaphore) -> latchkey_redis::Result<()> {
    /// use std::time::Duration;
    /// use latchkey_redis::PermitOptions;
    ///
    /// let options = PermitOptions::new().lease(Duration::from_secs(5)).wait(Duration::ZERO);
    /// if let Some(permits) = semaphore.try_acquire_with(1, options).await? {
    ///     permits.release().await?;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_acquire_with(
        &self,
        n: u32,
        options: PermitOptions,
    ) -> Result<Option<LeasedPermits>> {
        let (lease, deadline) = checked_options(options.lease, options.wait, "`acquire`")?;
        self.acquire_until(n, lease, deadline).await
    }

    /// Gives permits back by id, whoever took them (for ids kept with
    /// [`LeasedPermits::forget`]). Known ids are released even if others are not.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: one script call, applied or not.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownPermit`] naming the first id that was never issued, already released, or
    /// whose lease ended (the other ids are released); [`Error::InvalidArgument`] for no ids;
    /// [`Error::WrongType`]; connection errors.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(semaphore: latchkey_redis::PermitSemaphore) -> latchkey_redis::Result<()> {
    /// let ids = semaphore.acquire(1).await?.forget();
    /// // … later, maybe in another process …
    /// semaphore.release(&ids).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn release(&self, ids: &[PermitId]) -> Result<()> {
        let span = metrics::span(Op::Release, "permit_semaphore", &self.inner.name, None);
        metrics::traced(span, self.release_ids(ids)).await
    }

    async fn release_ids(&self, ids: &[PermitId]) -> Result<()> {
        check_name(&self.inner.name)?;
        if ids.is_empty() {
            return Err(Error::invalid(
                "permit ids",
                "no permit ids; give at least one",
            ));
        }
        let client = &self.inner.client.inner;
        let unknown: Vec<String> = self
            .release_task(ids)
            .run_detached(&client.conn, &client.background, &self.inner.name)
            .await?;
        match unknown.into_iter().next() {
            None => Ok(()),
            Some(permit) => Err(Error::UnknownPermit {
                name: self.inner.name.clone(),
                permit,
            }),
        }
    }

    fn release_task(&self, ids: &[PermitId]) -> Task {
        Task::new(
            &PSEM_RELEASE,
            self.keys().map(Arc::clone).to_vec(),
            std::iter::once(self.inner.client.inner.conn.publish_command().to_owned())
                .chain(ids.iter().map(PermitId::to_string))
                .collect(),
            "releasing semaphore permits",
        )
    }

    async fn acquire_until(
        &self,
        n: u32,
        lease: Lease,
        deadline: Option<Instant>,
    ) -> Result<Option<LeasedPermits>> {
        let span = metrics::acquire_span("permit_semaphore", &self.inner.name, deadline);
        let acquire = async {
            check_name(&self.inner.name)?;
            check_permits(n)?;
            let waiting = self.waiting(
                &self.inner.keys.channel,
                WakePolicy::Count,
                "permit_semaphore",
            );
            waiting
                .run(deadline, |_| {
                    // Run detached: if the caller is gone when the answer comes, the guard is
                    // dropped in the task that finishes the call, which gives the permits back.
                    let semaphore = self.clone();
                    detached_try(Box::pin(async move { semaphore.attempt(n, lease).await }))
                })
                .await
        };
        tracing::Instrument::instrument(acquire, span).await
    }
    async fn attempt(&self, n: u32, lease: Lease) -> Result<Attempt<LeasedPermits>> {
        let inner = &self.inner;
        let client = &inner.client.inner;
        let watchdog_timeout = client.config.watchdog_timeout;
        let lease_ms = lease.ms(watchdog_timeout);
        let ids: Vec<PermitId> = (0..n).map(|_| PermitId::random()).collect();
        let keys = self.keys().map(|key| &**key);
        let args: Vec<String> = [
            lease_ms.to_string(),
            client.conn.publish_command().to_owned(),
        ]
        .into_iter()
        .chain(ids.iter().map(PermitId::to_string))
        .collect();
        let sent_at = Instant::now();
        // With replica sync, permits granted that too few replicas acknowledged are given back
        // by id (the release script drops exactly these ids' leases and returns their permits
        // to the available count, waking waiters), and the attempt fails with NotReplicated.
        // Nothing was registered with the watchdog yet, so no renewal outlives the undo.
        let reply: Vec<i64> = match client
            .acquire_script(
                AcquireCall {
                    script: &PSEM_ACQUIRE,
                    keys: &keys,
                    args: &args,
                    context: "acquiring semaphore permits",
                    name: &inner.name,
                },
                |reply: &Vec<i64>| reply.first() == Some(&1),
                || self.release_task(&ids),
            )
            .await
        {
            Ok(reply) => reply,
            Err(err) if err.is_uncertain() => {
                // Give back whatever the timed-out call leased, should it have run.
                let _ = client.background.send(self.release_task(&ids));
                return Ok(Attempt::Stalled(err));
            }
            Err(err) => return Err(err),
        };
        match reply.as_slice() {
            [1, _] => {
                let tickets = ids
                    .iter()
                    .map(|id| {
                        let hold = HoldKey {
                            kind: "permit",
                            key: inner.keys.leases.clone(),
                            field: Arc::from(id.to_string()),
                        };
                        let ticket = client.registry.acquired(
                            hold.clone(),
                            &inner.name,
                            lease,
                            watchdog_timeout,
                            sent_at,
                            Renewal::with(&PSEM_RENEW, &inner.keys.leases, &hold.field),
                        );
                        (hold, ticket)
                    })
                    .collect();
                Ok(Attempt::Granted(LeasedPermits {
                    semaphore: self.clone(),
                    ids,
                    tickets,
                    lease,
                    released: false,
                }))
            }
            // A lease that ends publishes nothing: wake up when the next one ends, to reclaim
            // it. Permits that are not enough for this request go to the next local waiter.
            [0, available, next_end] => Ok(Attempt::Wait {
                retry_after: u64::try_from(*next_end)
                    .ok()
                    .map(|ms| Duration::from_millis(ms + 1)),
                short: *available > 0,
            }),
            [-1] => not_initialized(inner.wait_for_init, &inner.name),
            other => Err(unexpected("the semaphore script", other)),
        }
    }
}

/// Permits taken from a [`PermitSemaphore`], each with its id and lease. Releasing the guard
/// (explicitly with [`LeasedPermits::release`], or by dropping it) gives them back;
/// [`LeasedPermits::forget`] hands the ids over instead.
///
/// The guard owns what it needs (`'static`, `Send`, `Sync`). Dropping it never blocks: the
/// release is handed to the client's background task.
#[must_use = "dropping the guard gives the permits back at once"]
pub struct LeasedPermits {
    semaphore: PermitSemaphore,
    ids: Vec<PermitId>,
    tickets: Vec<(HoldKey, Ticket)>,
    lease: Lease,
    released: bool,
}

impl fmt::Debug for LeasedPermits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeasedPermits")
            .field("semaphore", &self.semaphore.inner.name)
            .field("ids", &self.ids)
            .field("lease", &self.lease)
            .field("lost", &self.is_lost())
            .finish()
    }
}

impl LeasedPermits {
    /// The ids of the permits, one per permit.
    pub fn ids(&self) -> &[PermitId] {
        &self.ids
    }

    /// How many permits this guard holds (as many as were asked for, a `u32`).
    pub fn count(&self) -> u32 {
        // At most the `n: u32` of the acquire that made the guard.
        u32::try_from(self.ids.len()).unwrap_or(u32::MAX)
    }

    /// The semaphore the permits were taken from.
    pub fn semaphore(&self) -> &PermitSemaphore {
        &self.semaphore
    }

    /// Whether the lease of any of the permits is known to have ended (see
    /// [`LeasedPermits::lost`]).
    pub fn is_lost(&self) -> bool {
        self.tickets.iter().any(|(_, t)| t.is_lost())
    }

    /// Resolves when the lease of any of the permits is lost: a fixed lease ran out, the watchdog
    /// found the permit gone, or renewals failed until the lease ran out. The future owns what it
    /// needs, so it can be raced against the work with `tokio::select!`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only waits.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(semaphore: latchkey_redis::PermitSemaphore) -> latchkey_redis::Result<()> {
    /// # async fn job() {}
    /// let permits = semaphore.acquire(1).await?;
    /// tokio::select! {
    ///     _ = permits.lost() => eprintln!("permit lost, stopping"),
    ///     _ = job() => permits.release().await?,
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn lost(&self) -> Lost {
        let waits: Vec<_> = self
            .tickets
            .iter()
            .map(|(_, t)| Box::pin(t.lost.clone().cancelled_owned()))
            .collect();
        Lost::new(async move {
            futures_util::future::select_all(waits).await;
        })
    }

    /// Stops renewing the leases and returns the ids: the permits stay taken until
    /// [`PermitSemaphore::release`] is called with them or their lease ends (for a watchdog
    /// lease, one watchdog timeout from its last renewal).
    pub fn forget(mut self) -> Vec<PermitId> {
        self.released = true;
        self.stop_renewals();
        std::mem::take(&mut self.ids)
    }

    /// Removes the holds from the watchdog, before the release is sent (so no renewal outlives
    /// the release).
    fn stop_renewals(&self) {
        let client = &self.semaphore.inner.client.inner;
        for (_, ticket) in &self.tickets {
            // Stale or not, the release script is sent for every id: it reports unknown ones.
            let _ = client.registry.released(ticket);
        }
    }

    /// Gives the permits back now and waits for Redis to confirm it.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before it completes still gives the permits back: the release then
    /// finishes in a task of its own.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownPermit`] if the lease of a permit had ended (the others are released);
    /// connection errors (the permits come back when their leases end).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(semaphore: latchkey_redis::PermitSemaphore) -> latchkey_redis::Result<()> {
    /// let permits = semaphore.acquire(1).await?;
    /// permits.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn release(mut self) -> Result<()> {
        self.released = true;
        self.stop_renewals();
        self.semaphore.release(&self.ids).await
    }
}

impl Drop for LeasedPermits {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        self.stop_renewals();
        let client = &self.semaphore.inner.client.inner;
        let _ = client
            .background
            .send(self.semaphore.release_task(&self.ids));
    }
}

crate::guard::forward_guard!(
    /// Permits are a [`Guard`](crate::Guard): their name is the semaphore's, they have no fencing token (several
    /// holders at once), they are lost when any permit's lease is, and `unlock` releases them.
    LeasedPermits,
    |guard| &guard.semaphore.inner.name,
    None,
    guard.release()
);
