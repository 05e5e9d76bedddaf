//! The counting semaphore, compatible with Redisson's `RSemaphore`.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::client::{Client, Object};
use crate::error::{Error, Result};
use crate::keys::{check_name, named_debug, SemaphoreKeys};
use crate::metrics::{self, Op};
use crate::pubsub::WakePolicy;
use crate::replica::AcquireCall;
use crate::scripts::{Invoke, SEM_ACQUIRE, SEM_ADD_PERMITS, SEM_RELEASE, SEM_SET_PERMITS};
use crate::task::{detached_try, Task};
use crate::wait::{deadline_after, unbounded, unexpected, Attempt};
use redis::{FromRedisValue, Script};

/// The most permits a semaphore can have in all: published as [`Semaphore::MAX_PERMITS`] and
/// [`PermitSemaphore::MAX_PERMITS`](crate::PermitSemaphore::MAX_PERMITS).
pub(crate) const MAX_PERMITS: u32 = i32::MAX as u32;

/// Checks a permit count for an acquire or release: 1 to [`MAX_PERMITS`].
pub(crate) fn check_permits(n: u32) -> Result<()> {
    if n == 0 {
        return Err(Error::invalid(
            "permits",
            "zero permits; acquire or release at least one",
        ));
    }
    check_total(n)
}

/// Checks a number of permits to set up: at most [`MAX_PERMITS`].
pub(crate) fn check_total(n: u32) -> Result<()> {
    if n > MAX_PERMITS {
        return Err(Error::invalid(
            "permits",
            format!("{n} is more than the maximum {MAX_PERMITS}"),
        ));
    }
    Ok(())
}

/// Runs `script` on a semaphore's three keys (its count, its total record or its leases, its
/// channel) with `args`, then the publish command: the scripts that set up or count permits.
pub(crate) async fn permits_script<T: FromRedisValue + Send>(
    semaphore: &impl Object,
    script: &Script,
    keys: [&Arc<str>; 3],
    args: &[i64],
    context: &'static str,
) -> Result<T> {
    check_name(semaphore.name())?;
    let mut invocation = script.invocation();
    for key in keys {
        invocation.key(&**key);
    }
    for arg in args {
        invocation.arg(arg);
    }
    invocation.arg(semaphore.client().inner.conn.publish_command());
    semaphore.script(&invocation, context).await
}

/// What the reply of an add-permits script (of either semaphore) to `delta` means.
pub(crate) fn added(reply: &[i64], delta: i32) -> Result<()> {
    match reply {
        [1, _] => Ok(()),
        [-1, total] => Err(Error::invalid(
            "permits",
            format!(
                "cannot take {} permits away from a semaphore of {total}",
                -i64::from(delta)
            ),
        )),
        [-2, total] => Err(Error::invalid(
            "permits",
            format!("{total} + {delta} permits is more than the maximum {MAX_PERMITS}"),
        )),
        other => Err(unexpected("the semaphore script", other)),
    }
}

/// The answer to an acquire of a semaphore whose permits were never set: wait for them (setting
/// them up publishes on the channel), or fail.
pub(crate) fn not_initialized<G>(wait_for_init: bool, name: &str) -> Result<Attempt<G>> {
    if wait_for_init {
        return Ok(Attempt::retry_after_ms(-1));
    }
    let name = name.to_owned();
    Err(Error::NotInitialized { name })
}

/// A distributed counting semaphore, kept in Redis in Redisson's `RSemaphore` layout.
///
/// Made by [`Client::semaphore`]. The available permits are a Redis string at key `name`;
/// waiters listen on `redisson_sc:{name}`, where every release publishes the new available count,
/// so Redisson (Java) clients and latchkey clients can share a semaphore. latchkey also records
/// the semaphore's total permits at `latchkey_semaphore_total:{name}` to detect over-release by
/// [`Semaphore::release`].
///
/// Permits are not owned: [`Semaphore::acquire`] hands out a [`Permits`] guard that gives them
/// back when released or dropped, but [`Permits::forget`] keeps them taken, and
/// [`Semaphore::release`] gives back permits taken anywhere (as in Redisson). Permits of a client
/// that crashes are never given back; use a [`PermitSemaphore`](crate::PermitSemaphore) when that
/// matters.
///
/// # Over-release
///
/// Permits a [`Permits`] guard holds are always given back, by [`Permits::release`] or by
/// dropping the guard: they were taken out of the count, so that release is never refused.
///
/// [`Semaphore::release`] (permits given back without a guard) fails with
/// [`Error::OverRelease`] and changes nothing when more permits would be available than the
/// semaphore's total. The total is set by [`Semaphore::try_set_permits`] and moved by
/// [`Semaphore::add_permits`]. A semaphore set up by a Redisson client has no total record, so
/// every release is accepted there, as in Redisson.
///
/// # Numbers of permits
///
/// A number of permits asked for, set, held or leased is a `u32` (at most
/// [`Semaphore::MAX_PERMITS`]), here and on [`PermitSemaphore`](crate::PermitSemaphore). Two
/// numbers are signed: the delta of [`Semaphore::add_permits`] (`i32`, Redisson's `int`: it may
/// take permits away) and [`Semaphore::available_permits`] (`i64`): a reading of a counter that
/// any client may have driven negative or, outside latchkey, past `i32`.
///
/// # Mixed with Redisson
///
/// Redisson clients change the available count directly (`addPermits`, `release`,
/// `trySetPermits` after a delete, `setPermits`, `drainPermits`) and never update latchkey's
/// total record. latchkey does not lose permits over it: a guard's release lands whatever the
/// count is, and when latchkey sees more permits available than its record (on an acquire, a
/// guard's release or [`Semaphore::add_permits`]) it raises the record to that count. The record
/// is then a lower bound of the real total, so [`Semaphore::release`] (no guard) may still be
/// refused after a Redisson client added permits that latchkey has not seen yet: the error says
/// so and nothing changes; [`Semaphore::add_permits`] adds the permits whatever the record says
/// (and adds them to the record too).
///
/// # Examples
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> latchkey_redis::Result<()> {
/// let client = latchkey_redis::Client::connect("redis://127.0.0.1:6379").await?;
/// let semaphore = client.semaphore("downloads");
/// semaphore.try_set_permits(3).await?;
///
/// let permits = semaphore.acquire(1).await?;
/// // … at most 3 of these run at once, across every process …
/// permits.release().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Semaphore {
    inner: Arc<SemaphoreInner>,
}

#[derive(Clone)]
struct SemaphoreInner {
    client: Client,
    name: String,
    keys: SemaphoreKeys,
    /// Acquires wait for the permits to be set rather than fail (see [`Semaphore::wait_for_init`]).
    wait_for_init: bool,
}

named_debug!(Semaphore);
crate::client::object!(Semaphore);

impl Client {
    /// A counting semaphore named `name`, in Redisson's `RSemaphore` layout.
    ///
    /// Making the handle sends nothing; the name is checked when the handle is used. Set the
    /// permits up once with [`Semaphore::try_set_permits`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(client: latchkey_redis::Client) -> latchkey_redis::Result<()> {
    /// let semaphore = client.semaphore("downloads");
    /// semaphore.try_set_permits(3).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn semaphore(&self, name: impl Into<String>) -> Semaphore {
        let (client, name) = (self.clone(), name.into());
        let keys = SemaphoreKeys::new(client.namespace(), &name);
        Semaphore {
            inner: Arc::new(SemaphoreInner {
                client,
                name,
                keys,
                wait_for_init: false,
            }),
        }
    }
}

/// How a release is checked against latchkey's record of the semaphore's total.
#[derive(Clone, Copy)]
enum Release {
    /// Permits a guard holds: they were taken out of the count, so giving them back is always
    /// right, whatever Redisson clients did to the count meanwhile. Never refused.
    Held,
    /// Permits given back without a guard ([`Semaphore::release`]): refused when more would be
    /// available than the record of the total.
    Checked,
}

impl Semaphore {
    /// The most permits a semaphore can have in all (`i32::MAX`): Redisson reads the counts as
    /// Java `int`s, so larger totals would break Java clients sharing the semaphore. The same
    /// value as [`PermitSemaphore::MAX_PERMITS`](crate::PermitSemaphore::MAX_PERMITS).
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(latchkey_redis::Semaphore::MAX_PERMITS, i32::MAX as u32);
    /// ```
    pub const MAX_PERMITS: u32 = MAX_PERMITS;

    /// The semaphore's name as given to [`Client::semaphore`], without the client's
    /// [namespace](crate::ClientBuilder::namespace): under the namespace `billing`, `name()` is
    /// `downloads` and the semaphore is kept at `billing:downloads` in Redis. The name is checked
    /// (length, reserved prefixes, a whole hash tag) as given, whatever the namespace.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(client: latchkey_redis::Client) {
    /// assert_eq!(client.semaphore("downloads").name(), "downloads");
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// This handle, its acquires waiting for the permits to be set (by another service, say:
    /// a Java one that calls `trySetPermits`) instead of failing at once with
    /// [`Error::NotInitialized`]. Sends nothing.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(client: latchkey_redis::Client) -> latchkey_redis::Result<()> {
    /// // Set up by another service; wait for it rather than fail.
    /// let slots = client.semaphore("exports").wait_for_init();
    /// let permits = slots.acquire(1).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn wait_for_init(self) -> Semaphore {
        let mut inner = SemaphoreInner::clone(&self.inner);
        inner.wait_for_init = true;
        Semaphore {
            inner: Arc::new(inner),
        }
    }

    /// The count, the total record and the channel.
    fn keys(&self) -> [&Arc<str>; 3] {
        let k = &self.inner.keys;
        [&k.count, &k.total, &k.channel]
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
    /// [`Error::InvalidArgument`] for a bad name or more than [`Semaphore::MAX_PERMITS`];
    /// [`Error::WrongType`] if a key holds another type; connection errors.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(client: latchkey_redis::Client) -> latchkey_redis::Result<()> {
    /// let semaphore = client.semaphore("downloads");
    /// if semaphore.try_set_permits(3).await? {
    ///     println!("set up with 3 permits");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    #[tracing::instrument(level = "debug", name = "try_set_permits", skip_all, fields(primitive = "semaphore", name = %self.inner.name))]
    pub async fn try_set_permits(&self, permits: u32) -> Result<bool> {
        check_name(&self.inner.name)?;
        check_total(permits)?;
        let (args, context) = ([permits.into()], "setting semaphore permits");
        let set: i64 = permits_script(self, &SEM_SET_PERMITS, self.keys(), &args, context).await?;
        Ok(set == 1)
    }

    /// Adds `delta` permits to the semaphore (or takes `-delta` away), changing both the
    /// available count and the total. Waiters are woken.
    ///
    /// Taking permits away while they are held may leave the available count below zero;
    /// acquirers then wait until enough are released. A semaphore that does not exist yet is
    /// created with `delta` permits. A total record below the available count (a Redisson client
    /// added permits) is first raised to that count.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: one script call, applied or not.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] (nothing changed) if the total would go below zero or above
    /// [`Semaphore::MAX_PERMITS`] (for a Redisson-made semaphore without a total record: if the available
    /// count would go below zero); [`Error::WrongType`]; connection errors.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(client: latchkey_redis::Client) -> latchkey_redis::Result<()> {
    /// let semaphore = client.semaphore("downloads");
    /// semaphore.add_permits(2).await?; // two more downloads at once
    /// semaphore.add_permits(-1).await?; // one fewer
    /// # Ok(())
    /// # }
    /// ```
    #[tracing::instrument(level = "debug", name = "add_permits", skip_all, fields(primitive = "semaphore", name = %self.inner.name))]
    pub async fn add_permits(&self, delta: i32) -> Result<()> {
        let (args, context) = (
            [delta.into(), MAX_PERMITS.into()],
            "adding semaphore permits",
        );
        let reply: Vec<i64> =
            permits_script(self, &SEM_ADD_PERMITS, self.keys(), &args, context).await?;
        added(&reply, delta)
    }

    /// The number of permits available now (0 if the semaphore was never set up). Below zero
    /// when permits were taken away with [`Semaphore::add_permits`] while they were held.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a read.
    ///
    /// # Errors
    ///
    /// [`Error::WrongType`] if the key is not a string; connection errors.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(semaphore: latchkey_redis::Semaphore) -> latchkey_redis::Result<()> {
    /// println!("{} permits free", semaphore.available_permits().await?);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn available_permits(&self) -> Result<i64> {
        let cmd = redis::cmd("GET").arg(&*self.inner.keys.count).clone();
        let n: Option<i64> = self.read(&cmd, "reading a semaphore").await?;
        Ok(n.unwrap_or(0))
    }

    /// Takes `n` permits, waiting as long as it takes. They are given back when the returned
    /// guard is released or dropped.
    ///
    /// Waiters sleep until a release is published on the semaphore's channel (at most 2 s
    /// between attempts, in case a message is lost). The semaphore is not fair:
    /// a request for fewer permits may overtake one for more.
    ///
    /// # Redis stalls
    ///
    /// Unlike the locks and the [`PermitSemaphore`](crate::PermitSemaphore), an acquire that times
    /// out ([`Error::Timeout`]) is not made again: Redisson's semaphore is a bare count, so permits
    /// the timed-out call took after all cannot be told apart or given back, and every retry during
    /// the stall could take more. After the error, check the count ([`Semaphore::available_permits`]).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe. Dropping the future leaves no permit taken and no subscription behind: if
    /// the acquire script already ran when the future was dropped, the permits are given back by
    /// the client's background task.
    ///
    /// # Errors
    ///
    /// [`Error::NotInitialized`] at once if the permits were never set (unless the handle
    /// [waits for them](Self::wait_for_init)); [`Error::InvalidArgument`] for a bad name or `n`
    /// of 0 or above [`Semaphore::MAX_PERMITS`];
    /// [`Error::WrongType`] if the key is not a count; connection errors;
    /// [`Error::NotReplicated`] with replica sync (see
    /// [`ClientBuilder::replica_sync`](crate::ClientBuilder::replica_sync)) when too few replicas
    /// acknowledged the permits taken in time: they were given back
    /// ([`Error::is_not_replicated`]).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(semaphore: latchkey_redis::Semaphore) -> latchkey_redis::Result<()> {
    /// let permits = semaphore.acquire(2).await?;
    /// // … work that needs two permits …
    /// permits.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn acquire(&self, n: u32) -> Result<Permits> {
        Ok(unbounded(self.acquire_until(n, None).await?))
    }

    /// Takes `n` permits, waiting at most `wait`; `Ok(None)` if they did not become available
    /// in time. `Duration::ZERO` tries once without waiting.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`Semaphore::acquire`].
    ///
    /// # Errors
    ///
    /// As [`Semaphore::acquire`], and [`Error::InvalidArgument`] if `wait` is too large to add to
    /// the clock.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(semaphore: latchkey_redis::Semaphore) -> latchkey_redis::Result<()> {
    /// use std::time::Duration;
    /// match semaphore.try_acquire(1, Duration::from_millis(500)).await? {
    ///     Some(permits) => permits.release().await?,
    ///     None => println!("busy, try later"),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_acquire(&self, n: u32, wait: Duration) -> Result<Option<Permits>> {
        let deadline = deadline_after(wait, "`acquire`")?;
        self.acquire_until(n, Some(deadline)).await
    }

    /// Gives `n` permits back, whoever took them, and wakes waiters (Redisson's `release`).
    /// Use it for permits kept with [`Permits::forget`]; a [`Permits`] guard releases its own.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: one script call, applied or not.
    ///
    /// # Errors
    ///
    /// [`Error::OverRelease`] (nothing changed) if more permits would be available than the
    /// semaphore's total as latchkey recorded it (see [Mixed with
    /// Redisson](Semaphore#mixed-with-redisson)); [`Error::InvalidArgument`] for `n` of 0 or above
    /// [`Semaphore::MAX_PERMITS`];
    /// [`Error::WrongType`]; connection errors.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(semaphore: latchkey_redis::Semaphore) -> latchkey_redis::Result<()> {
    /// let n = semaphore.acquire(1).await?.forget(); // hand the permit to another process …
    /// semaphore.release(n).await?; // … which gives it back later
    /// # Ok(())
    /// # }
    /// ```
    pub async fn release(&self, n: u32) -> Result<()> {
        self.give_back(n, Release::Checked).await
    }

    /// Gives `n` permits back, checked as `kind` says (a guard's are never refused: see
    /// [`Release::Held`]), in a `release` span.
    async fn give_back(&self, n: u32, kind: Release) -> Result<()> {
        let span = metrics::span(Op::Release, "semaphore", &self.inner.name, None);
        let (inner, client) = (&self.inner, &self.inner.client.inner);
        let release = async {
            if let Release::Checked = kind {
                check_name(&inner.name)?;
                check_permits(n)?;
            }
            let task = self.release_task(n, kind);
            let reply: Vec<i64> = task
                .run_detached(&client.conn, &client.background, &inner.name)
                .await?;
            match reply.as_slice() {
                [1, _] => Ok(()),
                [0, total] => Err(Error::OverRelease {
                    name: inner.name.clone(),
                    released: n,
                    // latchkey's own record, at most MAX_PERMITS; clamped, never wrapped.
                    total: u32::try_from((*total).clamp(0, i64::from(MAX_PERMITS)))
                        .unwrap_or(MAX_PERMITS),
                }),
                other => Err(unexpected("the semaphore script", other)),
            }
        };
        metrics::traced(span, release).await
    }

    fn release_task(&self, n: u32, kind: Release) -> Task {
        let inner = &self.inner;
        Task {
            script: &SEM_RELEASE,
            keys: self.keys().map(Arc::clone).to_vec(),
            args: vec![
                n.to_string(),
                inner.client.inner.conn.publish_command().to_owned(),
                match kind {
                    Release::Held => "held",
                    Release::Checked => "check",
                }
                .to_owned(),
            ],
            context: "releasing semaphore permits",
            lost: Some(format!(
                "{n} permits of semaphore `{}` stay taken; give them back with Semaphore::release",
                inner.name
            )),
            // A count: sent twice, it would give the permits back twice.
            resend: false,
        }
    }

    async fn acquire_until(&self, n: u32, deadline: Option<Instant>) -> Result<Option<Permits>> {
        let span = metrics::acquire_span("semaphore", &self.inner.name, deadline);
        let acquire = async {
            check_name(&self.inner.name)?;
            check_permits(n)?;
            let waiting = self.waiting(&self.inner.keys.channel, WakePolicy::Count, "semaphore");
            waiting
                .run(deadline, |_| {
                    // Run detached: if the caller is gone when the answer comes, the guard is
                    // dropped in the task that finishes the call, which gives the permits back.
                    let semaphore = self.clone();
                    detached_try(Box::pin(async move { semaphore.attempt(n).await }))
                })
                .await
        };
        tracing::Instrument::instrument(acquire, span).await
    }
    async fn attempt(&self, n: u32) -> Result<Attempt<Permits>> {
        let inner = &self.inner;
        // With replica sync, permits taken that too few replicas acknowledged are given back
        // (the release script adds the `n` permits just taken to the available count again and
        // wakes waiters), and the attempt fails with NotReplicated. The `n` permits were just
        // taken out of the count, so they are given back as held permits: never refused.
        let reply: Vec<i64> = inner
            .client
            .inner
            .acquire_script(
                AcquireCall {
                    script: &SEM_ACQUIRE,
                    keys: &[&*inner.keys.count, &*inner.keys.total],
                    args: &[n.to_string()],
                    context: "acquiring semaphore permits",
                    name: &inner.name,
                },
                |reply: &Vec<i64>| reply.first() == Some(&1),
                || self.release_task(n, Release::Held),
            )
            .await?;
        match reply.as_slice() {
            [1, _] => Ok(Attempt::Granted(Permits {
                semaphore: self.clone(),
                n,
                released: false,
            })),
            // Woken for permits that are not enough for this request: let the next local waiter
            // (maybe a smaller request) try them.
            [0, available] => Ok(Attempt::Wait {
                retry_after: None,
                short: *available > 0,
            }),
            [-1] => not_initialized(inner.wait_for_init, &inner.name),
            other => Err(unexpected("the semaphore script", other)),
        }
    }
}

/// Permits taken from a [`Semaphore`]. Releasing the guard (explicitly with
/// [`Permits::release`], or by dropping it) gives them back; [`Permits::forget`] keeps them
/// taken.
///
/// The guard owns what it needs (`'static`, `Send`, `Sync`). Dropping it never blocks: the
/// release is handed to the client's background task. The release of a guard is never refused
/// for the count (whatever Redisson clients did to it); if it fails all the same (Redis
/// unreachable, the key overwritten with something else), a dropped guard's release logs a
/// `tracing` warning naming the semaphore and the permits left taken.
#[must_use = "dropping the guard gives the permits back at once"]
pub struct Permits {
    semaphore: Semaphore,
    n: u32,
    released: bool,
}

impl fmt::Debug for Permits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Permits")
            .field("semaphore", &self.semaphore.inner.name)
            .field("n", &self.n)
            .finish()
    }
}

impl Permits {
    /// How many permits this guard holds.
    pub fn count(&self) -> u32 {
        self.n
    }

    /// The semaphore the permits were taken from.
    pub fn semaphore(&self) -> &Semaphore {
        &self.semaphore
    }

    /// Never lost: a plain semaphore's permits have no lease (for [`Guard`](crate::Guard)).
    pub(crate) fn is_lost(&self) -> bool {
        false
    }

    /// Never resolves (for [`Guard`](crate::Guard)).
    pub(crate) fn lost(&self) -> crate::Lost {
        crate::Lost::new(std::future::pending())
    }

    /// Keeps the permits taken and returns how many there are: they stay taken until somebody
    /// calls [`Semaphore::release`].
    pub fn forget(mut self) -> u32 {
        self.released = true;
        self.n
    }

    /// Gives the permits back now and waits for Redis to confirm it.
    ///
    /// The permits are added to the available count whatever it is now (a Redisson client may
    /// have added, set or drained permits meanwhile): a guard's release is never refused as an
    /// over-release.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before it completes still gives the permits back: the release then
    /// finishes in a task of its own.
    ///
    /// # Errors
    ///
    /// [`Error::WrongType`] if the key was overwritten with something that is not a count;
    /// connection errors. The permits stay taken then; give them back with
    /// [`Semaphore::release`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(semaphore: latchkey_redis::Semaphore) -> latchkey_redis::Result<()> {
    /// let permits = semaphore.acquire(1).await?;
    /// permits.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn release(mut self) -> Result<()> {
        self.released = true;
        self.semaphore.give_back(self.n, Release::Held).await
    }
}

impl Drop for Permits {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let client = &self.semaphore.inner.client.inner;
        let task = self.semaphore.release_task(self.n, Release::Held);
        if client.background.send(task).is_err() {
            // Only when the runtime is going away: the guard keeps the client alive.
            tracing::warn!(
                semaphore = %self.semaphore.inner.name,
                permits = self.n,
                "latchkey could not hand a dropped guard's release to the background task; \
                 its permits stay taken; give them back with Semaphore::release"
            );
        }
    }
}

crate::guard::forward_guard!(
    /// Permits are a [`Guard`](crate::Guard): their name is the semaphore's; they have no fencing
    /// token (several holders at once) and no lease, so they are never lost (`lost()` never
    /// resolves); `unlock` gives them back.
    Permits,
    |permits| &permits.semaphore.inner.name,
    None,
    permits.release()
);
