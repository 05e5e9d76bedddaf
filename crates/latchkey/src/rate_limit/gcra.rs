//! The GCRA rate limiter: one small key per limited entity, O(1) per decision.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::keys::{check_name, named_debug, object_name, MAX_NAME_LEN};
use crate::metrics::Site;
use crate::scripts::{GCRA_CHECK, GCRA_REFUND};
use crate::task::{detached_try, Task};
use crate::wait::{deadline_after, unexpected};

use super::{until_admitted, Meter, Turn};

/// How fast a [`GcraLimiter`] lets each entity go: `rate` permits per `period`, evenly spaced
/// (one every `period / rate`, the *emission interval*), and bursts of up to `burst` permits
/// at once after a quiet spell (by default `burst` = `rate`). The vocabulary is the `governor`
/// crate's.
///
/// `burst` is the bucket's size: an entity idle for `burst` emission intervals may send
/// `burst` requests at once, then one per emission interval. A quota is checked when it is
/// used: a rate or burst of 0, a period under 1 µs or over [`GcraLimiter::MAX_PERIOD`], an
/// emission interval under 1 µs, or a bucket that takes longer than
/// [`GcraLimiter::MAX_PERIOD`] to empty are refused with [`Error::InvalidArgument`].
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use latchkey_redis::Quota;
///
/// let quota = Quota::per_second(10); // 10 a second, bursts of 10
/// assert_eq!(quota.emission_interval(), Duration::from_millis(100));
/// let strict = Quota::per_minute(60).with_burst(1); // one a second, no bursts
/// assert_eq!(strict.burst(), 1);
/// let daily = Quota::new(1000, Duration::from_secs(24 * 3600)).with_burst(100);
/// assert_eq!(daily.rate(), 1000);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Quota {
    rate: u32,
    period: Duration,
    burst: u32,
}

impl Quota {
    /// `rate` permits per `period`, with bursts of `rate`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let quota = latchkey_redis::Quota::new(5, Duration::from_secs(10));
    /// assert_eq!(quota.emission_interval(), Duration::from_secs(2));
    /// ```
    pub const fn new(rate: u32, period: Duration) -> Quota {
        Quota {
            rate,
            period,
            burst: rate,
        }
    }

    /// `rate` permits per second, with bursts of `rate`.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(latchkey_redis::Quota::per_second(100).burst(), 100);
    /// ```
    pub const fn per_second(rate: u32) -> Quota {
        Quota::new(rate, Duration::from_secs(1))
    }

    /// `rate` permits per minute, with bursts of `rate`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// assert_eq!(latchkey_redis::Quota::per_minute(60).emission_interval(), Duration::from_secs(1));
    /// ```
    pub const fn per_minute(rate: u32) -> Quota {
        Quota::new(rate, Duration::from_secs(60))
    }

    /// `rate` permits per hour, with bursts of `rate`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// assert_eq!(latchkey_redis::Quota::per_hour(3600).emission_interval(), Duration::from_secs(1));
    /// ```
    pub const fn per_hour(rate: u32) -> Quota {
        Quota::new(rate, Duration::from_secs(3600))
    }

    /// This quota with bursts of `burst` permits (the bucket's size; more or less than the
    /// rate).
    ///
    /// # Examples
    ///
    /// ```
    /// let quota = latchkey_redis::Quota::per_second(10).with_burst(50);
    /// assert_eq!((quota.rate(), quota.burst()), (10, 50));
    /// ```
    pub const fn with_burst(self, burst: u32) -> Quota {
        Quota { burst, ..self }
    }

    /// Permits per [`Quota::period`].
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(latchkey_redis::Quota::per_second(10).rate(), 10);
    /// ```
    pub const fn rate(&self) -> u32 {
        self.rate
    }

    /// The period [`Quota::rate`] is counted over.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// assert_eq!(latchkey_redis::Quota::per_minute(10).period(), Duration::from_secs(60));
    /// ```
    pub const fn period(&self) -> Duration {
        self.period
    }

    /// The most permits that may go at once.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(latchkey_redis::Quota::per_second(10).with_burst(3).burst(), 3);
    /// ```
    pub const fn burst(&self) -> u32 {
        self.burst
    }

    /// The steady spacing of permits: `period / rate` (zero for a rate of 0).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// assert_eq!(latchkey_redis::Quota::per_second(4).emission_interval(), Duration::from_millis(250));
    /// ```
    pub fn emission_interval(&self) -> Duration {
        if self.rate == 0 {
            return Duration::ZERO;
        }
        self.period / self.rate
    }

    /// The period in whole microseconds, the scripts' unit, or the error for a quota that
    /// cannot be used.
    pub(super) fn check(&self) -> Result<u64> {
        if self.rate == 0 {
            return Err(Error::invalid(
                "quota",
                "a rate of zero would never admit anything; give at least 1",
            ));
        }
        if self.burst == 0 {
            return Err(Error::invalid(
                "quota",
                "a burst of zero would never admit anything; give at least 1",
            ));
        }
        if self.period > GcraLimiter::MAX_PERIOD {
            return Err(Error::invalid(
                "quota",
                format!(
                    "the period {:?} is longer than the maximum {:?}",
                    self.period,
                    GcraLimiter::MAX_PERIOD
                ),
            ));
        }
        let period = u64::try_from(self.period.as_micros()).unwrap_or(u64::MAX);
        if period < u64::from(self.rate) {
            return Err(Error::invalid(
                "quota",
                format!(
                    "{} per {:?} is more than one permit per microsecond, the limiter's unit",
                    self.rate, self.period
                ),
            ));
        }
        let empties_in = u128::from(period) * u128::from(self.burst) / u128::from(self.rate);
        if empties_in > GcraLimiter::MAX_PERIOD.as_micros() {
            return Err(Error::invalid(
                "quota",
                format!(
                    "a burst of {} at {} per {:?} takes longer than {:?} to come back",
                    self.burst,
                    self.rate,
                    self.period,
                    GcraLimiter::MAX_PERIOD
                ),
            ));
        }
        Ok(period)
    }
}

/// A decision of a [`GcraLimiter`] about one entity: admitted or not, and what an HTTP
/// service puts in its rate limit headers (`Retry-After`, `RateLimit-Remaining`,
/// `RateLimit-Reset`).
///
/// # Examples
///
/// ```no_run
/// # async fn f(limiter: latchkey_redis::GcraLimiter) -> latchkey_redis::Result<()> {
/// let decision = limiter.check("api-key-42", 1).await?;
/// match decision.retry_after() {
///     None => println!("admitted; {} left now", decision.remaining()),
///     Some(after) => println!("429, Retry-After: {}", after.as_secs_f64().ceil()),
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RateDecision {
    admitted: bool,
    limit: u32,
    remaining: u32,
    retry_after: Duration,
    reset_after: Duration,
}

impl RateDecision {
    /// Whether the permits were taken.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(limiter: latchkey_redis::GcraLimiter) -> latchkey_redis::Result<()> {
    /// if !limiter.check("203.0.113.7", 1).await?.is_admitted() {
    ///     println!("slow down");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn is_admitted(&self) -> bool {
        self.admitted
    }

    /// The quota's burst: the most permits the entity may have at once.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(limiter: latchkey_redis::GcraLimiter) -> latchkey_redis::Result<()> {
    /// let decision = limiter.check("user:7", 1).await?;
    /// assert_eq!(decision.limit(), limiter.quota().burst());
    /// # Ok(())
    /// # }
    /// ```
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// The permits the entity could take right after this decision, one request after the
    /// other.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(limiter: latchkey_redis::GcraLimiter) -> latchkey_redis::Result<()> {
    /// println!("{} left", limiter.check("user:7", 1).await?.remaining());
    /// # Ok(())
    /// # }
    /// ```
    pub fn remaining(&self) -> u32 {
        self.remaining
    }

    /// For a refusal, how long until the same request would be admitted (by the server's
    /// clock, if nobody else takes the entity's permits meanwhile); `None` when admitted.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(limiter: latchkey_redis::GcraLimiter) -> latchkey_redis::Result<()> {
    /// if let Some(after) = limiter.check("user:7", 1).await?.retry_after() {
    ///     tokio::time::sleep(after).await;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn retry_after(&self) -> Option<Duration> {
        (!self.admitted).then_some(self.retry_after)
    }

    /// How long until the entity has its whole burst again (its key expires then).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(limiter: latchkey_redis::GcraLimiter) -> latchkey_redis::Result<()> {
    /// let reset = limiter.check("user:7", 1).await?.reset_after();
    /// println!("RateLimit-Reset: {}", reset.as_secs_f64().ceil());
    /// # Ok(())
    /// # }
    /// ```
    pub fn reset_after(&self) -> Duration {
        self.reset_after
    }
}

/// A distributed GCRA rate limiter (generic cell rate algorithm): per-entity limits (per user,
/// per API key, per address) over any number of entities, at any rate.
///
/// Made by [`Client::gcra_limiter`] with a [`Quota`]. Each entity (the `key` of each call) has
/// one Redis string, `latchkey_gcra:<length of name>:<name>:<key>`, holding its *theoretical
/// arrival time*: when its bucket is empty again, in microseconds by the Redis server's
/// clock. A decision is one script call, O(1) in time and memory whatever the rate (unlike the
/// sliding window of [`RateLimiter`](crate::RateLimiter), which logs every grant), and a
/// refusal writes nothing. The key expires when the bucket is empty, so idle entities cost
/// nothing. (`<length of name>` keeps the names of two limiters and their keys apart: `a` with
/// key `b:c` and `a:b` with key `c` are different keys.) On a Redis Cluster the keys spread
/// over the slots (a name or key with a `{hash tag}` keeps its tag).
///
/// Every client of one limiter must use the same quota: the quota travels with each call, and
/// each decision follows the quota it was given.
///
/// The clock is the server's (`TIME`), so clients agree whatever their own clocks say.
/// latchkey's GCRA is its own: Redisson and Java services do not share these keys.
///
/// # Cancel safety
///
/// A dropped [`GcraLimiter::check`], [`GcraLimiter::until_ready`] or
/// [`GcraLimiter::until_ready_within`] takes nothing: dropped while it sleeps, it has nothing;
/// dropped while its script is on its way, the call is finished in the background and permits
/// it took are given back (the entity's time moves back by their emission time, never before
/// now). A call that ends with [`Error::Timeout`] may have taken its permits.
///
/// # Examples
///
/// ```no_run
/// use latchkey_redis::Quota;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> latchkey_redis::Result<()> {
/// let client = latchkey_redis::Client::connect("redis://127.0.0.1:6379").await?;
/// // Each API key: 100 requests a minute, bursts of 20.
/// let limiter = client.gcra_limiter("api", Quota::per_minute(100).with_burst(20));
///
/// let decision = limiter.check("key-3f9a", 1).await?;
/// if let Some(after) = decision.retry_after() {
///     println!("429 Too Many Requests; Retry-After: {}", after.as_secs_f64().ceil());
/// }
///
/// // A background job waits its turn instead.
/// limiter.until_ready("key-3f9a", 1).await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct GcraLimiter {
    inner: Arc<GcraInner>,
}

struct GcraInner {
    client: Client,
    name: String,
    quota: Quota,
    /// `latchkey_gcra:<length of the object name>:<object name>:`; an entity's key follows.
    prefix: String,
}

named_debug!(GcraLimiter, "quota" => quota);

impl Client {
    /// A GCRA rate limiter named `name`, limiting each entity to `quota` (see
    /// [`GcraLimiter`]).
    ///
    /// Making the handle sends nothing; the name and the quota are checked when it is used.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use latchkey_redis::Quota;
    ///
    /// # async fn f(client: latchkey_redis::Client) -> latchkey_redis::Result<()> {
    /// let per_user = client.gcra_limiter("login", Quota::per_minute(5));
    /// if !per_user.check("alice", 1).await?.is_admitted() {
    ///     println!("too many login attempts");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn gcra_limiter(&self, name: impl Into<String>, quota: Quota) -> GcraLimiter {
        let name = name.into();
        let object = object_name(self.namespace(), &name);
        GcraLimiter {
            inner: Arc::new(GcraInner {
                client: self.clone(),
                prefix: format!("latchkey_gcra:{}:{object}:", object.len()),
                name,
                quota,
            }),
        }
    }
}

impl GcraLimiter {
    /// The longest period of a [`Quota`], and the longest a bucket may take to empty: 365
    /// days.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// assert_eq!(latchkey_redis::GcraLimiter::MAX_PERIOD, Duration::from_secs(365 * 24 * 3600));
    /// ```
    pub const MAX_PERIOD: Duration = Duration::from_secs(365 * 24 * 3600);

    /// The limiter's name as given to [`Client::gcra_limiter`], without the client's
    /// [namespace](crate::ClientBuilder::namespace).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(client: latchkey_redis::Client) {
    /// let limiter = client.gcra_limiter("api", latchkey_redis::Quota::per_second(10));
    /// assert_eq!(limiter.name(), "api");
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The quota each entity is held to.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use latchkey_redis::Quota;
    /// # fn f(client: latchkey_redis::Client) {
    /// let limiter = client.gcra_limiter("api", Quota::per_second(10));
    /// assert_eq!(limiter.quota(), Quota::per_second(10));
    /// # }
    /// ```
    pub fn quota(&self) -> Quota {
        self.inner.quota
    }

    /// Decides at once whether entity `key` may take `permits` permits now, and takes them if
    /// so. A refusal takes nothing and says when to retry
    /// ([`RateDecision::retry_after`]).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a dropped call takes nothing (see [Cancel
    /// safety](GcraLimiter#cancel-safety)).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] (nothing sent) for a bad name, a key longer than
    /// [`MAX_NAME_LEN`](crate::MAX_NAME_LEN), a bad quota (see [`Quota`]), zero permits or
    /// more than the burst (they could never be admitted); [`Error::WrongType`] (nothing
    /// changed) if the entity's key holds something else; connection errors.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(limiter: latchkey_redis::GcraLimiter) -> latchkey_redis::Result<()> {
    /// let decision = limiter.check("user:7", 1).await?;
    /// if decision.is_admitted() {
    ///     println!("go ahead ({} left)", decision.remaining());
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn check(&self, key: &str, permits: u32) -> Result<RateDecision> {
        let span = tracing::debug_span!(
            "check",
            primitive = "gcra_limiter",
            name = %self.inner.name,
            key,
            outcome = tracing::field::Empty
        );
        let deadline = Instant::now();
        tracing::Instrument::instrument(self.decide(key, permits, Some(deadline)), span).await
    }

    /// Takes `permits` permits for entity `key`, waiting as long as it takes: each refusal says
    /// when the permits will be there, and the call sleeps until then (plus a jitter of up to
    /// a tenth of the wait, 1 to 20 ms) and asks once more. Returns the admitting decision.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a dropped call takes nothing (see [Cancel
    /// safety](GcraLimiter#cancel-safety)).
    ///
    /// # Errors
    ///
    /// As [`GcraLimiter::check`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(limiter: latchkey_redis::GcraLimiter) -> latchkey_redis::Result<()> {
    /// for page in 0..100 {
    ///     limiter.until_ready("crawler:example.com", 1).await?;
    ///     println!("fetching page {page}");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn until_ready(&self, key: &str, permits: u32) -> Result<RateDecision> {
        let span = tracing::debug_span!(
            "until_ready",
            primitive = "gcra_limiter",
            name = %self.inner.name,
            key,
            outcome = tracing::field::Empty
        );
        tracing::Instrument::instrument(self.decide(key, permits, None), span).await
    }

    /// Takes `permits` permits for entity `key`, waiting at most `wait` for them. Returns the
    /// admitting decision, or the refusal (with its [`RateDecision::retry_after`]) when they
    /// will not be there in time: then at once, without sleeping out `wait`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a dropped call takes nothing (see [Cancel
    /// safety](GcraLimiter#cancel-safety)).
    ///
    /// # Errors
    ///
    /// As [`GcraLimiter::check`], and [`Error::InvalidArgument`] if `wait` is too large to add
    /// to the clock.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    ///
    /// # async fn f(limiter: latchkey_redis::GcraLimiter) -> latchkey_redis::Result<()> {
    /// let decision = limiter.until_ready_within("user:7", 1, Duration::from_millis(250)).await?;
    /// if !decision.is_admitted() {
    ///     println!("busy for another {:?}", decision.retry_after().unwrap());
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn until_ready_within(
        &self,
        key: &str,
        permits: u32,
        wait: Duration,
    ) -> Result<RateDecision> {
        let span = tracing::debug_span!(
            "until_ready_within",
            primitive = "gcra_limiter",
            name = %self.inner.name,
            key,
            wait = ?wait,
            outcome = tracing::field::Empty
        );
        let deadline = deadline_after(wait, "`until_ready`")?;
        tracing::Instrument::instrument(self.decide(key, permits, Some(deadline)), span).await
    }

    /// Forgets entity `key`'s use: it has its whole burst again. Returns whether it had used
    /// any (its key existed).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: one command, applied or not.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad name or key; connection errors.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(limiter: latchkey_redis::GcraLimiter) -> latchkey_redis::Result<()> {
    /// limiter.reset("alice").await?; // alice proved who she is: let her try again at once
    /// # Ok(())
    /// # }
    /// ```
    #[tracing::instrument(level = "debug", name = "reset", skip_all, fields(primitive = "gcra_limiter", name = %self.inner.name, key))]
    pub async fn reset(&self, key: &str) -> Result<bool> {
        check_name(&self.inner.name)?;
        check_key(key)?;
        let redis_key = self.key(key);
        let deleted: i64 = self
            .inner
            .client
            .inner
            .conn
            .query(
                redis::cmd("DEL").arg(&redis_key),
                "resetting a rate limit",
                &redis_key,
            )
            .await?;
        Ok(deleted > 0)
    }

    /// The Redis key of entity `key`.
    fn key(&self, key: &str) -> String {
        format!("{}{key}", self.inner.prefix)
    }

    /// Decisions until one admits or `deadline` cannot be met (`None`: no deadline).
    async fn decide(
        &self,
        key: &str,
        permits: u32,
        deadline: Option<Instant>,
    ) -> Result<RateDecision> {
        check_name(&self.inner.name)?;
        check_key(key)?;
        let period = self.inner.quota.check()?;
        if permits == 0 {
            return Err(Error::invalid("permits", "zero permits; take at least one"));
        }
        if permits > self.inner.quota.burst {
            return Err(Error::invalid(
                "permits",
                format!(
                    "{permits} is more than the burst {} of rate limiter `{}`: they could never \
                     be admitted",
                    self.inner.quota.burst, self.inner.name
                ),
            ));
        }
        let meter = Meter {
            site: Site::new(&self.inner.client, "gcra_limiter", &self.inner.name),
        };
        let redis_key: Arc<str> = Arc::from(self.key(key));
        let decided = until_admitted(&meter, permits, deadline, || {
            self.attempt(redis_key.clone(), permits, period)
        })
        .await?;
        Ok(decided.unwrap_or_else(|refusal| refusal))
    }

    /// One decision, run detached: if the caller is gone when it comes, the [`Admission`] is
    /// dropped in the task that finishes the call, which gives its permits back.
    fn attempt(
        &self,
        key: Arc<str>,
        permits: u32,
        period: u64,
    ) -> impl Future<Output = Result<Turn<RateDecision, RateDecision>>> + Send {
        let limiter = self.clone();
        let decided = detached_try(Box::pin(async move {
            limiter.attempt_inner(key, permits, period).await
        }));
        async move {
            Ok(match decided.await? {
                Turn::Admitted(admission) => Turn::Admitted(admission.keep()),
                Turn::Refused {
                    retry_after,
                    refusal,
                } => Turn::Refused {
                    retry_after,
                    refusal,
                },
            })
        }
    }

    async fn attempt_inner(
        &self,
        key: Arc<str>,
        permits: u32,
        period: u64,
    ) -> Result<Turn<Admission, RateDecision>> {
        let quota = self.inner.quota;
        let args = [
            permits.to_string(),
            period.to_string(),
            quota.rate.to_string(),
            quota.burst.to_string(),
        ];
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let reply: Vec<i64> = self
            .inner
            .client
            .inner
            .conn
            .evalsha(&GCRA_CHECK, &[&key], &args, "deciding a rate limit", &key)
            .await?;
        let &[admitted, remaining, retry_after, reset_after] = reply.as_slice() else {
            return Err(unexpected("the rate limit script", reply));
        };
        let micros = |n: i64| Duration::from_micros(u64::try_from(n).unwrap_or(0));
        let decision = RateDecision {
            admitted: admitted == 1,
            limit: quota.burst,
            remaining: u32::try_from(remaining.max(0)).unwrap_or(u32::MAX),
            retry_after: micros(retry_after),
            reset_after: micros(reset_after),
        };
        if !decision.admitted {
            return Ok(Turn::Refused {
                retry_after: decision.retry_after.max(Duration::from_micros(1)),
                refusal: decision,
            });
        }
        Ok(Turn::Admitted(Admission {
            limiter: self.clone(),
            decision,
            refund: Some(Task {
                // A count: sent twice, it would give the permits back twice.
                resend: false,
                ..Task::new(
                    &GCRA_REFUND,
                    vec![key],
                    vec![
                        permits.to_string(),
                        period.to_string(),
                        quota.rate.to_string(),
                    ],
                    "giving back a rate limit decision nobody waited for",
                )
            }),
        }))
    }
}

/// Checks an entity's key: at most [`MAX_NAME_LEN`] bytes.
fn check_key(key: &str) -> Result<()> {
    if key.len() > MAX_NAME_LEN {
        return Err(Error::invalid(
            "key",
            format!(
                "the key is {} bytes long; the limit is {MAX_NAME_LEN} bytes",
                key.len()
            ),
        ));
    }
    Ok(())
}

/// An admitting decision nobody has taken yet: dropped without [`Admission::keep`] (its caller
/// went away while the script ran), its permits are given back in the background.
struct Admission {
    limiter: GcraLimiter,
    decision: RateDecision,
    /// The refund; `None` once kept.
    refund: Option<Task>,
}

impl Admission {
    /// The caller has the decision: nothing to give back.
    fn keep(mut self) -> RateDecision {
        self.refund = None;
        self.decision
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        if let Some(refund) = self.refund.take() {
            // Refused only when the runtime is going away: the permits come back with time.
            let _ = self.limiter.inner.client.inner.background.send(refund);
        }
    }
}
