//! The one guard core under every lock guard ([`LockGuard`](crate::LockGuard),
//! [`FairLockGuard`](crate::FairLockGuard), [`ReadGuard`](crate::ReadGuard),
//! [`WriteGuard`](crate::WriteGuard)) and the public [`Guard`] trait they implement.
//!
//! A guard is a ticket in the client's hold registry (which the watchdog renews and which fires
//! `lost`), a lease, a fencing token and the primitive's release script. Releasing it — with
//! `unlock()` or by dropping it — first tells the registry (so no renewal outlives the release),
//! then runs the release script: detached for `unlock()` (finished in a task of its own if the
//! caller goes away), on the client's background task for a drop, which never blocks.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::keys::check_name;
use crate::metrics::{self, Op, Site};
use crate::replica::AcquireCall;
use crate::task::Task;
use crate::wait::{Attempt, HandOff, MAX_PARK};
use crate::watchdog::{confirm_at, HoldKey, Lease, Release, Renewal, Ticket};

/// A hold on a lock: what every lock guard of latchkey offers.
///
/// Implemented by [`LockGuard`](crate::LockGuard), [`FairLockGuard`](crate::FairLockGuard),
/// [`ReadGuard`](crate::ReadGuard) and [`WriteGuard`](crate::WriteGuard), so code that runs a
/// critical section can take any of them. Each guard has the same methods as inherent methods
/// too: importing the trait is only needed for generic code.
///
/// # Examples
///
/// ```no_run
/// use latchkey::Guard;
///
/// /// Runs `job` under any lock guard, stopping it if the hold is lost.
/// async fn run_guarded<G: Guard>(guard: G, job: impl std::future::Future<Output = ()>) -> latchkey::Result<()> {
///     let token = guard.fencing_token(); // pass it to the store you write to
///     tokio::select! {
///         _ = guard.lost() => Err(latchkey::Error::Closed),
///         _ = job => guard.unlock().await,
///     }
/// }
/// ```
pub trait Guard: fmt::Debug + Send + Sync + sealed::Sealed {
    /// The name of the lock, as given to the client's factory (without the namespace).
    fn name(&self) -> &str;

    /// The fencing token of this hold: strictly larger than the token of every earlier holder of
    /// the lock (re-entered holds share their holder's token).
    fn fencing_token(&self) -> u64;

    /// Whether the hold is known to be lost (see [`Guard::lost`]).
    fn is_lost(&self) -> bool;

    /// Resolves when the hold is lost: the watchdog found it gone or owned by someone else,
    /// renewals failed until the lease ran out, or a fixed lease ran out.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only waits.
    fn lost(&self) -> impl Future<Output = ()> + Send + 'static
    where
        Self: Sized;

    /// Releases the hold and waits for Redis to confirm it.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future still releases the hold.
    ///
    /// # Errors
    ///
    /// [`Error::NotOwner`] if the hold was already gone; connection errors.
    fn unlock(self) -> impl Future<Output = Result<()>> + Send
    where
        Self: Sized;
}

mod sealed {
    /// Only latchkey's guards implement [`Guard`](super::Guard).
    pub trait Sealed {}
}
pub(crate) use sealed::Sealed;

/// What the guard core needs of the primitive whose hold it keeps.
pub(crate) trait Holds: Send + Sync + 'static {
    fn client(&self) -> &Client;
    /// The name as the user gave it, for errors.
    fn name(&self) -> &str;
    /// The hold in the client's registry.
    fn hold(&self) -> &HoldKey;
    /// The release script call for one hold, leaving `lease_ms` on remaining holds.
    fn release_task(&self, lease_ms: u64) -> Task;
    /// For a lock's last hold: the release to make again on a new primary after a Sentinel
    /// failover, guarded by `token` (see `scripts/lock_release_resend.lua`).
    fn resend_task(&self, _token: u64) -> Option<Task> {
        None
    }

    /// One read-only command on the lock, within the command timeout (the name checked first).
    async fn read<T: redis::FromRedisValue + Send>(
        &self,
        cmd: &redis::Cmd,
        context: &'static str,
    ) -> Result<T> {
        check_name(self.name())?;
        self.client()
            .inner
            .conn
            .query(cmd, context, self.name())
            .await
    }

    /// Whether anybody holds the lock (one `EXISTS`).
    async fn exists(&self) -> Result<bool> {
        let cmd = redis::cmd("EXISTS").arg(&*self.hold().key).clone();
        Ok(self.read::<i64>(&cmd, "checking a lock").await? == 1)
    }

    /// How many holds this owner has (one `HGET` of its field).
    async fn holds(&self) -> Result<u64> {
        let cmd = redis::cmd("HGET")
            .arg(&*self.hold().key)
            .arg(&*self.hold().field)
            .clone();
        Ok(self
            .read::<Option<u64>>(&cmd, "reading a hold count")
            .await?
            .unwrap_or(0))
    }

    /// The lock's remaining lease, whoever holds it (one `PTTL`); `None` without one.
    async fn pttl(&self) -> Result<Option<Duration>> {
        let cmd = redis::cmd("PTTL").arg(&*self.hold().key).clone();
        let ms: i64 = self.read(&cmd, "reading a lease").await?;
        Ok(u64::try_from(ms).ok().map(Duration::from_millis))
    }
}

/// Implements [`Holds`] for a lock handle: `holds!(Type, [path to its inner], hold field,
/// |handle, lease_ms| release task)`, with an optional `resend = |handle, token| task`.
macro_rules! holds {
    ($handle:ty, [$($inner:ident).+], $hold:ident, $release:expr $(, resend = $resend:expr)?) => {
        impl crate::guard::Holds for $handle {
            fn client(&self) -> &crate::client::Client {
                &self.$($inner).+.client
            }

            fn name(&self) -> &str {
                &self.$($inner).+.name
            }

            fn hold(&self) -> &crate::watchdog::HoldKey {
                &self.$($inner).+.$hold
            }

            fn release_task(&self, lease_ms: u64) -> crate::task::Task {
                ($release)(self, lease_ms)
            }

            $(
                fn resend_task(&self, token: u64) -> Option<crate::task::Task> {
                    Some(($resend)(self, token))
                }
            )?
        }
    };
}
pub(crate) use holds;

/// The span of operation `op` on the lock `held` (see [`metrics::span`]).
pub(crate) fn op_span<H: Holds>(held: &H, op: Op, wait: Option<Duration>) -> tracing::Span {
    let primitive = metrics::primitive_of_kind(held.hold().kind);
    metrics::span(op, primitive, held.name(), wait)
}

/// The lease in milliseconds: the watchdog timeout for a watchdog lease.
pub(crate) fn lease_ms(lease: Lease, watchdog_timeout: Duration) -> u64 {
    match lease {
        Lease::Watchdog => watchdog_timeout.as_millis() as u64,
        Lease::Fixed(d) => d.as_millis() as u64,
    }
}

/// One acquire script call of a hold of `held`. Every lock-family acquire script takes the lease
/// in ms first and the `alone` flag last (this handle holds nothing and has no other attempt or
/// release under way, so a stranded hold of its own may be taken over), and answers
/// `{1, token, holds}` for a grant; the grant is recorded in the client's registry and made into
/// a guard with `guard`. Any other reply is handed to `refused`.
///
/// A grant too few replicas acknowledged (replica sync) is undone with the release script of
/// one hold. A timed-out call is [`Attempt::Stalled`] when the handle was alone (the next
/// attempt takes over what it may have granted), and an error otherwise.
pub(crate) async fn attempt_hold<H, G>(
    held: &H,
    lease: Lease,
    call: AcquireCall<'_>,
    args: impl FnOnce(u64) -> Vec<String>,
    renewal: impl FnOnce() -> Arc<dyn Renewal>,
    guard: impl FnOnce(GuardCore<H>) -> G,
    refused: impl FnOnce(&[i64]) -> Result<Attempt<G>>,
) -> Result<Attempt<G>>
where
    H: Holds + Clone,
{
    let client = &held.client().inner;
    let watchdog_timeout = client.config.watchdog_timeout;
    let lease_ms = lease_ms(lease, watchdog_timeout);
    // Held until the grant is recorded: a concurrent attempt of this handle is not "alone".
    let attempt = client.registry.begin_attempt(held.hold());
    let mut args = args(lease_ms);
    args.push(if attempt.alone { "1" } else { "0" }.to_owned());
    let sent_at = Instant::now();
    let reply: Vec<i64> = match client
        .acquire_script(
            AcquireCall {
                args: &args,
                ..call
            },
            |reply: &Vec<i64>| reply.first() == Some(&1),
            || held.release_task(lease_ms),
        )
        .await
    {
        Ok(reply) => reply,
        Err(err) if err.is_uncertain() && attempt.alone => return Ok(Attempt::Stalled(err)),
        Err(err) => return Err(err),
    };
    match reply.as_slice() {
        [1, token, holds] => {
            metrics::record_token(*token as u64);
            let ticket = client.registry.acquired(
                held.hold().clone(),
                held.name(),
                *holds as u64,
                lease,
                watchdog_timeout,
                sent_at,
                renewal(),
            );
            Ok(Attempt::Granted(guard(GuardCore::new(
                held.clone(),
                ticket,
                lease,
                *token as u64,
            ))))
        }
        other => refused(other),
    }
}

/// A grant on release lasts this long past the registration's life (its park and 2 s): the
/// time the message and the grantee have to start its section before the grant is confirmed.
const GRANT_SLACK: Duration = Duration::from_secs(3);

/// A grant on release is confirmed (renewed to the watchdog timeout) this long before its
/// lease could run out, if its holder still holds it.
const CONFIRM_BEFORE: Duration = Duration::from_millis(1500);

/// The lease of a grant on release to a registration whose attempt parks `park` (the lock's
/// and the fair lock's release scripts grant with it).
pub(crate) fn grant_lease(park: Duration) -> Duration {
    park + Duration::from_secs(2) + GRANT_SLACK
}

/// Whether an acquire with `lease` on `client` takes a lock granted on release (see
/// `scripts/lock_release.lua`, `scripts/fair_release.lua`): with the watchdog's lease, long
/// enough to outlast a grant's (the watchdog confirms it), and when nothing waits for replicas
/// or follows a Sentinel failover (a grant is made by the releaser's script, not by the
/// grantee's).
pub(crate) fn takes_grants(client: &Client, lease: Lease) -> bool {
    let client = &client.inner;
    lease == Lease::Watchdog
        && client.config.watchdog_timeout >= grant_lease(MAX_PARK)
        && client.replicas.sync().is_none()
        && client.conn.sentinels().is_none()
}

/// Takes a grant on release to a waiter of `held`: the hold is the handle's already, until at
/// least the registration's send time plus the grant's lease. A grant too close to its end is
/// given back with `give_back` (and the caller makes an ordinary attempt), and so is one to an
/// owner that holds the lock or has an acquire or release of it under way (a clone, another
/// task): the grant's hold may have been re-entered or taken over by then, which the ordinary
/// attempt sorts out (the give-back, guarded by the grant's token, leaves a take-over alone and
/// a re-entry's lease as it is). A taken grant is confirmed by the watchdog (renewed to its
/// timeout) before its short lease could run out.
pub(crate) fn take_grant<H: Holds + Clone>(
    held: &H,
    hand_off: HandOff,
    give_back: impl FnOnce(u64) -> Task,
    renewal: Arc<dyn Renewal>,
) -> Option<GuardCore<H>> {
    let client = &held.client().inner;
    let valid_until = hand_off.registered_at + grant_lease(hand_off.park);
    if valid_until < Instant::now() + CONFIRM_BEFORE || client.registry.busy(held.hold()) {
        client.hub.give_back(give_back(hand_off.token));
        return None;
    }
    let ticket = client.registry.acquired_until(
        held.hold().clone(),
        held.name(),
        1,
        Lease::Watchdog,
        hand_off.registered_at,
        valid_until,
        renewal,
    );
    confirm_at(
        client.conn.clone(),
        client.registry.clone(),
        held.hold().clone(),
        ticket.gen,
        valid_until - CONFIRM_BEFORE,
        client.config.watchdog_timeout,
        held.client().shutdown_token(),
    );
    Some(GuardCore::new(
        held.clone(),
        ticket,
        Lease::Watchdog,
        hand_off.token,
    ))
}

/// One hold of a primitive `H`: the shared part of every lock guard.
pub(crate) struct GuardCore<H: Holds> {
    held: H,
    ticket: Ticket,
    lease: Lease,
    fencing_token: u64,
    released: bool,
    /// When the grant was made, for `latchkey_hold_duration_seconds`.
    granted_at: Instant,
}

impl<H: Holds> GuardCore<H> {
    pub(crate) fn new(held: H, ticket: Ticket, lease: Lease, fencing_token: u64) -> GuardCore<H> {
        GuardCore {
            held,
            ticket,
            lease,
            fencing_token,
            released: false,
            granted_at: Instant::now(),
        }
    }

    /// The primitive handle this hold belongs to.
    pub(crate) fn held(&self) -> &H {
        &self.held
    }

    pub(crate) fn fencing_token(&self) -> u64 {
        self.fencing_token
    }

    pub(crate) fn is_lost(&self) -> bool {
        self.ticket.lost.is_cancelled()
    }

    pub(crate) fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        self.ticket.lost.clone().cancelled_owned()
    }

    /// Tells the registry this hold is being released and returns the release to send, if
    /// there is one to send (a lost hold has none).
    fn release(&mut self) -> Option<Task> {
        self.released = true;
        self.site()
            .observe(metrics::HOLD_DURATION, &[], self.granted_at.elapsed());
        let client = &self.held.client().inner;
        let release = client.registry.released(
            self.held.hold(),
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
            return None;
        };
        if last {
            let (held, token) = (&self.held, self.fencing_token);
            client.follow.resends.record(|| held.resend_task(token));
        }
        Some(self.held.release_task(lease_ms).releasing(mark))
    }

    /// Where this hold's metrics are recorded.
    fn site(&self) -> Site {
        let primitive = metrics::primitive_of_kind(self.held.hold().kind);
        Site::new(self.held.client(), primitive, self.held.name())
    }

    /// Releases the hold and waits for Redis to confirm it; the release runs detached, so it
    /// completes if this future is dropped. Runs in an `unlock` span.
    pub(crate) fn unlock(self) -> impl Future<Output = Result<()>> + Send {
        let primitive = metrics::primitive_of_kind(self.held.hold().kind);
        let span = metrics::span(Op::Unlock, primitive, self.held.name(), None);
        span.record("token", self.fencing_token);
        async move {
            let result = self.unlock_inner().await;
            metrics::record_outcome(match &result {
                Ok(()) => "released",
                Err(err) if err.is_not_owner() => "not_owner",
                Err(_) => "error",
            });
            result
        }
        .instrument(span)
    }

    async fn unlock_inner(mut self) -> Result<()> {
        let task = self.release();
        let not_owner = |held: &H| Error::NotOwner {
            name: held.name().to_owned(),
        };
        let Some(task) = task else {
            return Err(not_owner(&self.held));
        };
        let conn = &self.held.client().inner.conn;
        let left: i64 = task.run_detached(conn, self.held.name()).await?;
        if left < 0 {
            return Err(not_owner(&self.held));
        }
        Ok(())
    }

    pub(crate) fn debug(&self, f: &mut fmt::Formatter<'_>, kind: &str) -> fmt::Result {
        f.debug_struct(kind)
            .field("lock", &self.held.name())
            .field("fencing_token", &self.fencing_token)
            .field("lease", &self.lease)
            .field("lost", &self.is_lost())
            .finish()
    }
}

impl<H: Holds> Drop for GuardCore<H> {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        if let Some(task) = self.release() {
            let _ = self.held.client().inner.background.send(task);
        }
    }
}

/// The methods every lock guard has, delegating to its `core` field: `fencing_token`,
/// `is_lost`, `lost`, `unlock`, `Debug` and [`Guard`].
macro_rules! lock_guard {
    ($guard:ident, $example:literal) => {
        impl std::fmt::Debug for $guard {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                self.core.debug(f, stringify!($guard))
            }
        }

        impl $guard {
            /// The fencing token of this hold: strictly larger than the token of every earlier
            /// holder of this lock (re-entered holds share their holder's token). Give it to
            /// the storage you write to, and have the storage refuse writes with a token
            /// smaller than one it has seen.
            pub fn fencing_token(&self) -> u64 {
                self.core.fencing_token()
            }

            /// Whether the hold is known to be lost (see the `lost` method).
            pub fn is_lost(&self) -> bool {
                self.core.is_lost()
            }

            /// Resolves when the hold is lost: the watchdog found it gone or owned by someone
            /// else, renewals failed until the lease ran out, or a fixed lease ran out. After
            /// that the critical section is no longer protected. The future owns what it needs,
            /// so it can be raced against the work with `tokio::select!`.
            ///
            /// # Cancel safety
            ///
            /// Cancel safe: it only waits.
            ///
            /// # Examples
            ///
            /// ```no_run
            /// # async fn f(client: latchkey::Client) -> latchkey::Result<()> {
            /// # async fn long_job() {}
            #[doc = concat!("let guard = ", $example, ".await?;")]
            /// tokio::select! {
            ///     _ = guard.lost() => eprintln!("lock lost, stopping"),
            ///     _ = long_job() => guard.unlock().await?,
            /// }
            /// # Ok(())
            /// # }
            /// ```
            pub fn lost(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
                self.core.lost()
            }

            /// Releases this hold now and waits for Redis to confirm it. The guard is consumed,
            /// so a hold cannot be released twice.
            ///
            /// # Cancel safety
            ///
            /// Dropping the future before it completes still releases the hold: either the
            /// release script was already sent, or the guard's drop hands it to the background
            /// task.
            ///
            /// # Errors
            ///
            /// [`Error::NotOwner`](crate::Error::NotOwner) if the hold was already gone
            /// (expired, lost, force-unlocked): nothing is changed then, and a successor's hold
            /// is untouched. Connection errors if Redis cannot be reached; the hold then
            /// expires with its lease, unless this handle acquires again first: its next
            /// acquire takes the stranded hold over as a new hold (a new fencing token).
            ///
            /// # Examples
            ///
            /// ```no_run
            /// # async fn f(client: latchkey::Client) -> latchkey::Result<()> {
            #[doc = concat!("let guard = ", $example, ".await?;")]
            /// guard.unlock().await?;
            /// # Ok(())
            /// # }
            /// ```
            pub async fn unlock(self) -> crate::Result<()> {
                self.core.unlock().await
            }
        }

        impl crate::guard::Sealed for $guard {}

        impl crate::Guard for $guard {
            fn name(&self) -> &str {
                crate::guard::Holds::name(self.core.held())
            }

            fn fencing_token(&self) -> u64 {
                self.core.fencing_token()
            }

            fn is_lost(&self) -> bool {
                self.core.is_lost()
            }

            fn lost(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
                self.core.lost()
            }

            fn unlock(self) -> impl std::future::Future<Output = crate::Result<()>> + Send {
                self.core.unlock()
            }
        }
    };
}
pub(crate) use lock_guard;

/// The four acquire methods every lock handle has (`lock`, `try_lock`, `lock_with`,
/// `try_lock_with`), over its `acquire(lease, deadline)`. The docs of `lock` (what waiting means
/// for this kind of lock) and the first paragraph of `try_lock` are the handle's own.
macro_rules! lock_methods {
    (
        $handle:ident -> $guard:ident;
        $(#[$lock_doc:meta])*
        lock;
        $(#[$try_doc:meta])*
        try_lock;
    ) => {
        impl $handle {
            $(#[$lock_doc])*
            pub async fn lock(&self) -> crate::Result<$guard> {
                let span = crate::guard::op_span(self, crate::metrics::Op::Lock, None);
                let acquire = self.acquire(crate::watchdog::Lease::Watchdog, None);
                match tracing::Instrument::instrument(acquire, span).await? {
                    Some(guard) => Ok(guard),
                    None => unreachable!("an unbounded wait only ends with the lock"),
                }
            }

            $(#[$try_doc])*
            ///
            /// # Cancel safety
            ///
            #[doc = concat!("Cancel safe, as [`", stringify!($handle), "::lock`].")]
            ///
            /// # Errors
            ///
            #[doc = concat!("As [`", stringify!($handle), "::lock`], and")]
            /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) if `wait` is too large
            /// to add to the clock.
            ///
            /// # Examples
            ///
            /// ```no_run
            #[doc = concat!("# async fn f(lock: latchkey::", stringify!($handle), ") -> latchkey::Result<()> {")]
            /// use std::time::Duration;
            /// match lock.try_lock(Duration::from_millis(500)).await? {
            ///     Some(guard) => guard.unlock().await?,
            ///     None => println!("busy, try later"),
            /// }
            /// # Ok(())
            /// # }
            /// ```
            pub async fn try_lock(
                &self,
                wait: std::time::Duration,
            ) -> crate::Result<Option<$guard>> {
                let span = crate::guard::op_span(self, crate::metrics::Op::TryLock, Some(wait));
                let deadline = crate::wait::deadline_after(wait, "`lock()`")?;
                let acquire = self.acquire(crate::watchdog::Lease::Watchdog, Some(deadline));
                tracing::Instrument::instrument(acquire, span).await
            }

            /// Acquires the lock with [`LockOptions`](crate::LockOptions): a fixed lease (no
            /// watchdog) and/or a bounded wait.
            ///
            /// # Cancel safety
            ///
            #[doc = concat!("Cancel safe, as [`", stringify!($handle), "::lock`].")]
            ///
            /// # Errors
            ///
            #[doc = concat!("As [`", stringify!($handle), "::lock`];")]
            /// [`Error::WaitTimedOut`](crate::Error::WaitTimedOut) if a wait was given and ran
            /// out; [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a lease out of
            /// range or a wait too large.
            ///
            /// # Examples
            ///
            /// ```no_run
            #[doc = concat!("# async fn f(lock: latchkey::", stringify!($handle), ") -> latchkey::Result<()> {")]
            /// use std::time::Duration;
            /// use latchkey::LockOptions;
            ///
            /// let options = LockOptions::new()
            ///     .lease(Duration::from_secs(10))
            ///     .wait(Duration::from_secs(1));
            /// let guard = lock.lock_with(options).await?;
            /// # Ok(())
            /// # }
            /// ```
            pub async fn lock_with(&self, options: crate::LockOptions) -> crate::Result<$guard> {
                let started = std::time::Instant::now();
                self.acquire_with(crate::metrics::Op::LockWith, options)
                    .await?
                    .ok_or_else(|| crate::Error::WaitTimedOut {
                        name: self.name().to_owned(),
                        waited: started.elapsed(),
                    })
            }

            #[doc = concat!("Like [`", stringify!($handle), "::lock_with`], but a wait that runs out is `Ok(None)`")]
            /// rather than an error.
            ///
            /// # Cancel safety
            ///
            #[doc = concat!("Cancel safe, as [`", stringify!($handle), "::lock`].")]
            ///
            /// # Errors
            ///
            #[doc = concat!("As [`", stringify!($handle), "::lock_with`], except for running out of time.")]
            ///
            /// # Examples
            ///
            /// ```no_run
            #[doc = concat!("# async fn f(lock: latchkey::", stringify!($handle), ") -> latchkey::Result<()> {")]
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
            pub async fn try_lock_with(
                &self,
                options: crate::LockOptions,
            ) -> crate::Result<Option<$guard>> {
                self.acquire_with(crate::metrics::Op::TryLockWith, options).await
            }

            /// `lock_with` and `try_lock_with`, in the span of `op`.
            async fn acquire_with(
                &self,
                op: crate::metrics::Op,
                options: crate::LockOptions,
            ) -> crate::Result<Option<$guard>> {
                let span = crate::guard::op_span(self, op, options.wait_value());
                let lease = options.checked_lease()?;
                let deadline = options
                    .wait_value()
                    .map(|wait| crate::wait::deadline_after(wait, "`lock()`"))
                    .transpose()?;
                tracing::Instrument::instrument(self.acquire(lease, deadline), span).await
            }
        }
    };
}
pub(crate) use lock_methods;

/// `is_locked`, `hold_count` and `remaining_lease` of a reentrant lock handle, one command each.
macro_rules! lock_reads {
    ($handle:ident) => {
        impl $handle {
            /// Whether anybody holds the lock (one `EXISTS`).
            ///
            /// # Cancel safety
            ///
            /// Cancel safe: a read.
            ///
            /// # Errors
            ///
            /// Connection errors, [`Error::InvalidArgument`](crate::Error::InvalidArgument) for
            /// a bad name.
            ///
            /// # Examples
            ///
            /// ```no_run
            #[doc = concat!("# async fn f(lock: latchkey::", stringify!($handle), ") -> latchkey::Result<()> {")]
            /// if lock.is_locked().await? {
            ///     println!("somebody holds {}", lock.name());
            /// }
            /// # Ok(())
            /// # }
            /// ```
            #[tracing::instrument(level = "debug", name = "is_locked", skip_all, fields(name = %self.name()))]
            pub async fn is_locked(&self) -> crate::Result<bool> {
                crate::guard::Holds::exists(self).await
            }

            /// How many holds this handle (and its clones) has on the lock; 0 if it holds none.
            ///
            /// # Cancel safety
            ///
            /// Cancel safe: a read.
            ///
            /// # Errors
            ///
            /// Connection errors, [`Error::WrongType`](crate::Error::WrongType) if the key is not
            /// a hash.
            ///
            /// # Examples
            ///
            /// ```no_run
            #[doc = concat!("# async fn f(lock: latchkey::", stringify!($handle), ") -> latchkey::Result<()> {")]
            /// let outer = lock.lock().await?;
            /// let inner = lock.lock().await?; // re-entered
            /// assert_eq!(lock.hold_count().await?, 2);
            /// # Ok(())
            /// # }
            /// ```
            #[tracing::instrument(level = "debug", name = "hold_count", skip_all, fields(name = %self.name()))]
            pub async fn hold_count(&self) -> crate::Result<u64> {
                crate::guard::Holds::holds(self).await
            }

            /// The time until the lock expires, whoever holds it; `None` if nobody holds it (or
            /// it has no expiry).
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
            #[doc = concat!("# async fn f(lock: latchkey::", stringify!($handle), ") -> latchkey::Result<()> {")]
            /// if let Some(left) = lock.remaining_lease().await? {
            ///     println!("expires in {left:?}");
            /// }
            /// # Ok(())
            /// # }
            /// ```
            #[tracing::instrument(level = "debug", name = "remaining_lease", skip_all, fields(name = %self.name()))]
            pub async fn remaining_lease(&self) -> crate::Result<Option<std::time::Duration>> {
                crate::guard::Holds::pttl(self).await
            }
        }
    };
}
pub(crate) use lock_reads;
