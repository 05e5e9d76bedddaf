//! The one guard core under every lock guard ([`LockGuard`](crate::LockGuard),
//! [`FairLockGuard`](crate::FairLockGuard), [`ReadGuard`](crate::ReadGuard),
//! [`WriteGuard`](crate::WriteGuard), [`Leadership`](crate::Leadership)), the public [`Guard`]
//! trait every hold of latchkey implements, and [`FencingToken`].
//!
//! # Owners
//!
//! Every acquire is an owner of its own: it draws a new owner id (`<client id>:<n>`, the hash
//! field Redisson's layout counts holds under) and keeps it for all its attempts. Two acquires
//! therefore exclude each other whatever handle, clone, task or future they come from, as
//! `Arc<tokio::sync::Mutex>` does. Re-entry is explicit: [`LockGuard::reenter`](crate::LockGuard::reenter)
//! and the like make one more guard of the same hold, without a round trip; the hold is
//! released in Redis when its last guard is.
//!
//! Since an owner id is never used by more than one acquire, an attempt that is sent again
//! (after a timeout, a reconnection, `NOSCRIPT`) finds either nothing of its own or the hold
//! its first sending granted, which it takes as its grant: no take-over of another acquire's
//! hold can happen, and no late release can free a later hold. An acquire that ends without a
//! guard after an attempt whose answer was lost releases its owner id's hold, if there is one,
//! in the background ([`Claim`]).
//!
//! A guard is a ticket in the client's hold registry (which the watchdog renews and which fires
//! `lost`), a lease, a fencing token and the primitive's release script. Releasing the last
//! guard of a hold — with `unlock()` or by dropping it — first tells the registry (so no
//! renewal outlives the release), then runs the release script: detached for `unlock()`
//! (finished in a task of its own if the caller goes away), on the client's background task for
//! a drop, which never blocks.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use crate::client::Object;
use crate::error::{Error, Result};
use crate::metrics::{self, Op, Site};
use crate::replica::AcquireCall;
use crate::task::Task;
use crate::wait::Attempt;
use crate::watchdog::{HoldKey, Lease, Renewal, Ticket};

/// A fencing token: a number strictly larger than that of every earlier holder of the same
/// object (lock, leadership). Give it to the storage you write to with every write, and have
/// the storage refuse a write whose token is smaller than the largest it has seen: a holder
/// that lost its hold without noticing (a long pause, a partition) can then no longer write.
///
/// # Examples
///
/// ```no_run
/// # async fn f(client: latchkey_redis::Client) -> latchkey_redis::Result<()> {
/// let guard = client.lock("orders:1001").lock().await?;
/// let token: u64 = guard.fencing_token().get(); // send it along with each write
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FencingToken(u64);

impl FencingToken {
    pub(crate) fn new(token: u64) -> FencingToken {
        FencingToken(token)
    }

    /// The token as a number.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(guard: latchkey_redis::LockGuard) {
    /// let token = guard.fencing_token();
    /// println!("writing with token {}", token.get());
    /// # }
    /// ```
    pub fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl From<FencingToken> for u64 {
    fn from(token: FencingToken) -> u64 {
        token.0
    }
}

impl PartialEq<u64> for FencingToken {
    fn eq(&self, other: &u64) -> bool {
        self.0 == *other
    }
}

impl PartialOrd<u64> for FencingToken {
    fn partial_cmp(&self, other: &u64) -> Option<std::cmp::Ordering> {
        self.0.partial_cmp(other)
    }
}

/// The future of [`Guard::lost`]: resolves when the hold is lost. It owns what it needs
/// (`'static`), so it can be raced against the work in `tokio::select!` while the guard is
/// used, or moved into another task.
#[must_use = "futures do nothing unless polled"]
pub struct Lost(Pin<Box<dyn Future<Output = ()> + Send + Sync + 'static>>);

impl Lost {
    pub(crate) fn new(future: impl Future<Output = ()> + Send + Sync + 'static) -> Lost {
        Lost(Box::pin(future))
    }
}

impl Future for Lost {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.0.as_mut().poll(cx)
    }
}

impl fmt::Debug for Lost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Lost")
    }
}

/// A hold of latchkey: what every guard offers.
///
/// Implemented by the lock guards ([`LockGuard`](crate::LockGuard),
/// [`FairLockGuard`](crate::FairLockGuard), [`ReadGuard`](crate::ReadGuard),
/// [`WriteGuard`](crate::WriteGuard)), [`MultiLockGuard`](crate::MultiLockGuard),
/// [`RedLockGuard`](crate::RedLockGuard), [`Leadership`](crate::Leadership),
/// [`Permits`](crate::Permits) (never lost: a plain semaphore's permits have no lease) and
/// [`LeasedPermits`](crate::LeasedPermits), so code that runs a critical section can take any
/// of them, also as `&dyn Guard` (every method but `unlock`, which consumes the guard). Each
/// type has the same methods as inherent methods too: importing the trait is only needed for
/// generic code.
///
/// # Examples
///
/// ```no_run
/// use latchkey_redis::Guard;
///
/// /// Runs `job` under any hold, stopping it if the hold is lost.
/// async fn run_guarded<G: Guard>(guard: G, job: impl std::future::Future<Output = ()>) -> latchkey_redis::Result<()> {
///     let token = guard.fencing_token(); // pass it to the store you write to
///     tokio::select! {
///         _ = guard.lost() => Err(latchkey_redis::Error::Closed),
///         _ = job => guard.unlock().await,
///     }
/// }
///
/// /// Logs any hold.
/// fn describe(guard: &dyn Guard) -> String {
///     format!("{} (token {:?}, lost: {})", guard.name(), guard.fencing_token(), guard.is_lost())
/// }
/// ```
pub trait Guard: fmt::Debug + Send + Sync + sealed::Sealed {
    /// The name of the object held, as given to the client's factory (without the namespace).
    fn name(&self) -> &str;

    /// The fencing token of this hold (see [`FencingToken`]); `None` for holds that have none
    /// (permits, several locks at once, a RedLock built without fencing).
    fn fencing_token(&self) -> Option<FencingToken>;

    /// Whether the hold is known to be lost (see [`Guard::lost`]).
    fn is_lost(&self) -> bool;

    /// Resolves when the hold is lost: the watchdog found it gone or owned by someone else,
    /// renewals failed until the lease ran out, or a fixed lease ran out.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only waits.
    fn lost(&self) -> Lost;

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
pub(crate) trait Holds: Object + Clone + Send + Sync + 'static {
    /// What kind of hold (`"lock"`, `"rw_read"`, …), for the registry and metrics.
    const KIND: &'static str;
    /// The Redis key of the object.
    fn key(&self) -> &Arc<str>;
    /// The hash field an owner's hold is counted under: the owner id (the default), or a
    /// field derived from it (the write side of a read-write lock).
    fn field(&self, owner: &str) -> Arc<str> {
        Arc::from(owner)
    }
    /// How the watchdog renews the hold of `field`: as a lock hash's field, unless the
    /// primitive keeps its holds otherwise.
    fn renewal(&self, field: &Arc<str>) -> Arc<Renewal> {
        Renewal::of(self.key(), field)
    }
    /// The release script call of the hold of `field`.
    fn release_task(&self, field: &str) -> Task;
    /// For a lock's hold: the release to make again on a new primary after a Sentinel
    /// failover, guarded by `token` (see `scripts/lock_release_resend.lua`).
    fn resend_task(&self, _field: &str, _token: u64) -> Option<Task> {
        None
    }

    /// Whether anybody holds the lock (one `EXISTS`).
    async fn exists(&self) -> Result<bool> {
        let cmd = redis::cmd("EXISTS").arg(&**self.key()).clone();
        Ok(self.read::<i64>(&cmd, "checking a lock").await? == 1)
    }

    /// The lock's remaining lease, whoever holds it (one `PTTL`); `None` without one.
    async fn pttl(&self) -> Result<Option<Duration>> {
        let cmd = redis::cmd("PTTL").arg(&**self.key()).clone();
        let ms: i64 = self.read(&cmd, "reading a lease").await?;
        Ok(u64::try_from(ms).ok().map(Duration::from_millis))
    }
}

/// The span of operation `op` on `held` (see [`metrics::span`]).
pub(crate) fn op_span<H: Holds>(held: &H, op: Op, wait: Option<Duration>) -> tracing::Span {
    metrics::span(op, metrics::primitive_of_kind(H::KIND), held.name(), wait)
}

/// One acquire call's owner: its id, the hash field its hold is counted under, and the release
/// it owes if it ends without a guard after an attempt whose answer it did not get (a
/// timeout, a lost connection, or a caller that went away while the attempt was in flight).
/// Cloned into each attempt; the release is sent to the background task when the last clone
/// goes. Holds of an owner id are only ever its own (no other acquire uses it), so that
/// release can never free anybody else's hold.
#[derive(Clone)]
pub(crate) struct Claim<H: Holds>(Arc<ClaimInner<H>>);

struct ClaimInner<H: Holds> {
    held: H,
    owner: Arc<str>,
    field: Arc<str>,
    /// An attempt was sent whose answer has not been seen, or was lost.
    may_hold: AtomicBool,
    /// An attempt's answer was lost: every later refusal leaves `may_hold` set.
    uncertain: AtomicBool,
    /// A guard was made: it releases the hold.
    granted: AtomicBool,
}

impl<H: Holds> Claim<H> {
    /// A new owner id of `held`'s client.
    pub(crate) fn new(held: &H) -> Claim<H> {
        Claim::with_owner(held, &held.client().next_owner())
    }

    /// The owner id `owner` of a hold this acquire builds on (a downgrade's write hold, whose
    /// only guard the downgrade consumes: no later hold takes this owner id).
    pub(crate) fn with_owner(held: &H, owner: &str) -> Claim<H> {
        let owner: Arc<str> = Arc::from(owner);
        Claim(Arc::new(ClaimInner {
            field: held.field(&owner),
            owner,
            held: held.clone(),
            may_hold: AtomicBool::new(false),
            uncertain: AtomicBool::new(false),
            granted: AtomicBool::new(false),
        }))
    }

    /// The primitive handle the claim acquires.
    pub(crate) fn held(&self) -> &H {
        &self.0.held
    }

    /// The owner id.
    pub(crate) fn owner(&self) -> &Arc<str> {
        &self.0.owner
    }

    /// The hash field of the owner's hold.
    pub(crate) fn field(&self) -> &Arc<str> {
        &self.0.field
    }
}

impl<H: Holds> Drop for ClaimInner<H> {
    fn drop(&mut self) {
        if *self.may_hold.get_mut() && !*self.granted.get_mut() {
            let task = self.held.release_task(&self.field);
            let _ = self.held.client().inner.background.send(task);
        }
    }
}

/// One acquire script call of `claim`'s hold of `held`. Every lock-family acquire script takes
/// the lease in ms first, and answers `{1, token}` for a grant (its owner's hold, whether this
/// call or an earlier sending of the same attempt made it); the grant is recorded in the
/// client's registry and made into a guard with `guard`. Any other reply is handed to
/// `refused`.
///
/// A grant too few replicas acknowledged (replica sync) is undone with the release script. A
/// call whose answer was lost (a timeout) is [`Attempt::Stalled`]: the next attempt takes the
/// grant it may have made, and the claim releases it if there is none.
pub(crate) async fn attempt_hold<H, G>(
    claim: &Claim<H>,
    lease: Lease,
    call: AcquireCall<'_>,
    args: impl FnOnce(u64) -> Vec<String>,
    guard: impl FnOnce(GuardCore<H>) -> G,
    refused: impl FnOnce(&[i64]) -> Result<Attempt<G>>,
) -> Result<Attempt<G>>
where
    H: Holds,
{
    let state = &claim.0;
    let held = &state.held;
    let client = &held.client().inner;
    let watchdog_timeout = client.config.watchdog_timeout;
    let lease_ms = lease.ms(watchdog_timeout);
    let args = args(lease_ms);
    let sent_at = Instant::now();
    state.may_hold.store(true, Ordering::Release);
    let reply: Vec<i64> = match client
        .acquire_script(
            AcquireCall {
                args: &args,
                ..call
            },
            |reply: &Vec<i64>| reply.first() == Some(&1),
            || held.release_task(claim.field()),
        )
        .await
    {
        Ok(reply) => reply,
        Err(err) if err.is_uncertain() => {
            state.uncertain.store(true, Ordering::Release);
            return Ok(Attempt::Stalled(err));
        }
        Err(err) => return Err(err),
    };
    match reply.as_slice() {
        [1, token] => {
            state.granted.store(true, Ordering::Release);
            tracing::Span::current().record("token", *token as u64);
            let key = HoldKey {
                kind: H::KIND,
                key: held.key().clone(),
                field: claim.field().clone(),
            };
            let ticket = client.registry.acquired(
                key,
                held.name(),
                lease,
                watchdog_timeout,
                sent_at,
                held.renewal(claim.field()),
            );
            Ok(Attempt::Granted(guard(GuardCore(Arc::new(Hold {
                held: held.clone(),
                field: claim.field().clone(),
                ticket,
                lease,
                fencing_token: *token as u64,
                granted_at: Instant::now(),
                released: false,
            })))))
        }
        other => {
            if !state.uncertain.load(Ordering::Acquire) {
                state.may_hold.store(false, Ordering::Release);
            }
            refused(other)
        }
    }
}

/// One hold, shared by its guard and the guards that re-entered it.
struct Hold<H: Holds> {
    held: H,
    field: Arc<str>,
    ticket: Ticket,
    lease: Lease,
    fencing_token: u64,
    /// When the grant was made, for `latchkey_hold_duration_seconds`.
    granted_at: Instant,
    /// Released by `unlock()`: nothing left for the drop to do.
    released: bool,
}

impl<H: Holds> Hold<H> {
    /// Tells the registry this hold is being released and returns the release to send, and
    /// whether the hold was still held (not lost). A lost hold is released all the same: its
    /// owner id is its own alone, so the release can only remove what is left of it (a grant
    /// that came too late to be kept, a hold whose renewals failed), never anybody else's.
    fn release(&mut self) -> (Task, bool) {
        self.released = true;
        let primitive = metrics::primitive_of_kind(H::KIND);
        Site::new(self.held.client(), primitive, self.held.name()).observe(
            metrics::HOLD_DURATION,
            &[],
            self.granted_at.elapsed(),
        );
        let client = &self.held.client().inner;
        let held = client.registry.released(&self.ticket);
        if held {
            let (holds, field, token) = (&self.held, &self.field, self.fencing_token);
            client
                .follow
                .resends
                .record(|| holds.resend_task(field, token));
        }
        (self.held.release_task(&self.field), held)
    }

    async fn unlock(mut self) -> Result<()> {
        let (task, held) = self.release();
        let client = &self.held.client().inner;
        let left: i64 = task
            .run_detached(&client.conn, &client.background, self.held.name())
            .await?;
        if !held || left < 0 {
            return Err(Error::not_owner(self.held.name()));
        }
        Ok(())
    }
}

impl<H: Holds> Drop for Hold<H> {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let (task, _) = self.release();
        let _ = self.held.client().inner.background.send(task);
    }
}

/// A guard of a hold of a primitive `H`: the shared part of every lock guard.
pub(crate) struct GuardCore<H: Holds>(Arc<Hold<H>>);

impl<H: Holds> GuardCore<H> {
    /// The primitive handle this hold belongs to.
    pub(crate) fn held(&self) -> &H {
        &self.0.held
    }

    /// The hash field of this hold (the owner id, for most primitives).
    pub(crate) fn field(&self) -> &Arc<str> {
        &self.0.field
    }

    pub(crate) fn fencing_token(&self) -> FencingToken {
        FencingToken(self.0.fencing_token)
    }

    pub(crate) fn is_lost(&self) -> bool {
        self.0.ticket.is_lost()
    }

    pub(crate) fn lost(&self) -> Lost {
        Lost::new(self.0.ticket.lost.clone().cancelled_owned())
    }

    /// One more guard of the same hold.
    pub(crate) fn reenter(&self) -> GuardCore<H> {
        GuardCore(self.0.clone())
    }

    /// How many guards share this hold.
    pub(crate) fn guards(&self) -> usize {
        Arc::strong_count(&self.0)
    }

    /// Forgets this hold without the release its last guard would send: for a primitive that
    /// ended it in Redis itself (a job's run that recorded its outcome). Its renewals stop.
    #[cfg(feature = "scheduler")]
    pub(crate) fn forget(self) {
        if let Ok(mut hold) = Arc::try_unwrap(self.0) {
            hold.released = true;
            hold.held.client().inner.registry.released(&hold.ticket);
        }
    }

    /// Releases this guard; the last guard of the hold releases it in Redis and waits for
    /// Redis to confirm it (the release runs detached, so it completes if this future is
    /// dropped). Runs in an `unlock` span.
    pub(crate) fn unlock(self) -> impl Future<Output = Result<()>> + Send {
        let primitive = metrics::primitive_of_kind(H::KIND);
        let span = metrics::span(Op::Unlock, primitive, self.0.held.name(), None);
        span.record("token", self.0.fencing_token);
        async move {
            let result = match Arc::try_unwrap(self.0) {
                Ok(hold) => hold.unlock().await,
                Err(shared) if shared.ticket.is_lost() => Err(Error::not_owner(shared.held.name())),
                Err(_) => Ok(()),
            };
            metrics::record_outcome(match &result {
                Ok(()) => "released",
                Err(err) if err.is_not_owner() => "not_owner",
                Err(_) => "error",
            });
            result
        }
        .instrument(span)
    }

    pub(crate) fn debug(&self, f: &mut fmt::Formatter<'_>, kind: &str) -> fmt::Result {
        f.debug_struct(kind)
            .field("lock", &self.0.held.name())
            .field("owner", &self.0.field)
            .field("fencing_token", &self.0.fencing_token)
            .field("lease", &self.0.lease)
            .field("guards", &self.guards())
            .field("lost", &self.is_lost())
            .finish()
    }
}

/// A lock guard type, declared with the attributes given, over a [`GuardCore`] of `$held` in
/// its `core` field, and the methods every lock guard has, delegating to it: `fencing_token`,
/// `is_lost`, `lost`, `reenter`, `unlock`, `Debug` and [`Guard`]; with `$accessor`, the
/// handle's accessor.
macro_rules! lock_guard {
    ($(#[$attr:meta])* $guard:ident($held:ty), $example:literal $(, $accessor:ident)?) => {
        $(#[$attr])*
        pub struct $guard {
            pub(crate) core: crate::guard::GuardCore<$held>,
        }

        $(
            impl $guard {
                /// The handle this guard holds a lock of.
                pub fn $accessor(&self) -> &$held {
                    self.core.held()
                }
            }
        )?

        impl std::fmt::Debug for $guard {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                self.core.debug(f, stringify!($guard))
            }
        }

        impl $guard {
            /// The fencing token of this hold: strictly larger than the token of every earlier
            /// holder of this lock (re-entered guards share their hold's token). Give it to the
            /// storage you write to, and have the storage refuse writes with a token smaller
            /// than one it has seen.
            pub fn fencing_token(&self) -> crate::FencingToken {
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
            /// # async fn f(client: latchkey_redis::Client) -> latchkey_redis::Result<()> {
            /// # async fn long_job() {}
            #[doc = concat!("let guard = ", $example, ".await?;")]
            /// tokio::select! {
            ///     _ = guard.lost() => eprintln!("lock lost, stopping"),
            ///     _ = long_job() => guard.unlock().await?,
            /// }
            /// # Ok(())
            /// # }
            /// ```
            pub fn lost(&self) -> crate::Lost {
                self.core.lost()
            }

            /// Re-enters the hold: one more guard of it, with the same owner id, fencing token
            /// and lease, without a round trip. The hold is released in Redis when its last
            /// guard is (by `unlock()` or by dropping it). This is how code that already holds
            /// the lock calls code that takes it too: pass the guard, or a re-entered one,
            /// rather than acquiring again (another acquire is another owner, and waits).
            ///
            /// # Examples
            ///
            /// ```no_run
            /// # async fn f(client: latchkey_redis::Client) -> latchkey_redis::Result<()> {
            #[doc = concat!("let outer = ", $example, ".await?;")]
            /// let inner = outer.reenter();
            /// assert_eq!(inner.fencing_token(), outer.fencing_token());
            /// inner.unlock().await?; // still held by `outer`
            /// outer.unlock().await?; // released
            /// # Ok(())
            /// # }
            /// ```
            pub fn reenter(&self) -> $guard {
                $guard {
                    core: self.core.reenter(),
                }
            }

            /// The owner id of this hold (`<client id>:<n>`), as `latchkey status` shows it:
            /// every acquire is an owner of its own.
            pub fn owner_id(&self) -> &str {
                self.core.field()
            }

            /// Releases this guard and waits for Redis to confirm the release. The guard is
            /// consumed, so a hold cannot be released twice. A re-entered hold is released in
            /// Redis by its last guard; the others return at once.
            ///
            /// # Cancel safety
            ///
            /// Dropping the future before it completes still releases the hold: either the
            /// release script was already sent, or the guard's drop hands it to the background
            /// task.
            ///
            /// # Errors
            ///
            /// [`Error::NotOwner`](crate::Error::NotOwner) if the hold was lost (expired,
            /// force-unlocked, or reported lost by the watchdog): a successor's hold is
            /// untouched (its owner id is another), and what is left of this one in Redis, if
            /// anything, is released. Connection errors if Redis cannot be reached; the
            /// client's background task then sends the release again until Redis answers (for
            /// up to a minute; after that the hold expires with its lease).
            ///
            /// # Examples
            ///
            /// ```no_run
            /// # async fn f(client: latchkey_redis::Client) -> latchkey_redis::Result<()> {
            #[doc = concat!("let guard = ", $example, ".await?;")]
            /// guard.unlock().await?;
            /// # Ok(())
            /// # }
            /// ```
            pub async fn unlock(self) -> crate::Result<()> {
                self.core.unlock().await
            }
        }

        crate::guard::forward_guard!(
            $guard,
            |guard| crate::client::Object::name(guard.core.held()),
            Some(guard.core.fencing_token()),
            guard.core.unlock()
        );
    };
}
pub(crate) use lock_guard;

/// [`Guard`] for a guard type that has inherent `is_lost` and `lost` methods: its name is
/// `$name`, its fencing token `$token`, and `unlock` is `$unlock` (with `$this` the guard).
macro_rules! forward_guard {
    ($(#[$doc:meta])* $guard:ident, |$this:ident| $name:expr, $token:expr, $unlock:expr) => {
        impl crate::guard::Sealed for $guard {}

        $(#[$doc])*
        impl crate::Guard for $guard {
            fn name(&self) -> &str {
                let $this = self;
                $name
            }

            #[allow(unused_variables)]
            fn fencing_token(&self) -> Option<crate::FencingToken> {
                let $this = self;
                $token
            }

            fn is_lost(&self) -> bool {
                $guard::is_lost(self)
            }

            fn lost(&self) -> crate::Lost {
                $guard::lost(self)
            }

            fn unlock(self) -> impl std::future::Future<Output = crate::Result<()>> + Send {
                let $this = self;
                $unlock
            }
        }
    };
}
pub(crate) use forward_guard;

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
                Ok(crate::wait::unbounded(tracing::Instrument::instrument(acquire, span).await?))
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
            #[doc = concat!("# async fn f(lock: latchkey_redis::", stringify!($handle), ") -> latchkey_redis::Result<()> {")]
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
            #[doc = concat!("# async fn f(lock: latchkey_redis::", stringify!($handle), ") -> latchkey_redis::Result<()> {")]
            /// use std::time::Duration;
            /// use latchkey_redis::LockOptions;
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
                let granted = self.acquire_with(crate::metrics::Op::LockWith, options).await?;
                crate::wait::or_timed_out(granted, self.name(), started)
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
            #[doc = concat!("# async fn f(lock: latchkey_redis::", stringify!($handle), ") -> latchkey_redis::Result<()> {")]
            /// use std::time::Duration;
            /// use latchkey_redis::LockOptions;
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
                let span = crate::guard::op_span(self, op, options.wait);
                let (lease, deadline) = options.checked()?;
                tracing::Instrument::instrument(self.acquire(lease, deadline), span).await
            }
        }
    };
}
pub(crate) use lock_methods;

/// `is_locked` and `remaining_lease` of a lock handle, one command each.
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
            #[doc = concat!("# async fn f(lock: latchkey_redis::", stringify!($handle), ") -> latchkey_redis::Result<()> {")]
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
            #[doc = concat!("# async fn f(lock: latchkey_redis::", stringify!($handle), ") -> latchkey_redis::Result<()> {")]
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
