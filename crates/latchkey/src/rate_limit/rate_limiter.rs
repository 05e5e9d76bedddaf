//! The sliding-window rate limiter, compatible with Redisson's `RRateLimiter`.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::keys::{check_name, named_debug, object_name, suffix_name};
use crate::metrics::{self, Op, Site};
use crate::scripts::{
    Invoke, RATE_ACQUIRE, RATE_AVAILABLE, RATE_GIVE_BACK, RATE_RELEASE, RATE_SET, RATE_TRY_SET,
};
use crate::task::{detached_try, Task};
use crate::wait::{deadline_after, unexpected};

use super::{until_admitted, Meter, Turn};

/// Who shares a [`RateLimiter`]'s budget (Redisson's `RateType`).
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// use latchkey_redis::RateType;
///
/// # async fn f(client: latchkey_redis::Client) -> latchkey_redis::Result<()> {
/// // 100 calls a second for the whole fleet …
/// client.rate_limiter("geocoder").try_set_rate(RateType::Overall, 100, Duration::from_secs(1)).await?;
/// // … or 10 a second for each client (each latchkey `Client`, each Redisson instance).
/// client.rate_limiter("exports").try_set_rate(RateType::PerClient, 10, Duration::from_secs(1)).await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RateType {
    /// One budget that every client shares (Redisson's `OVERALL`, stored as `0`).
    Overall,
    /// A budget of its own for each client: each latchkey [`Client`] (by its
    /// [id](Client::id)) and each Redisson instance gets `rate` permits per interval (Redisson's
    /// `PER_CLIENT`, stored as `1`). The rate and interval are shared.
    PerClient,
}

impl RateType {
    /// The value of the config's `type` field: the Java enum's ordinal.
    fn wire(self) -> &'static str {
        match self {
            RateType::Overall => "0",
            RateType::PerClient => "1",
        }
    }
}

/// A [`RateLimiter`]'s rate: `rate` permits per `interval`, shared as `rate_type` says, and an
/// optional keep-alive time. What [`RateLimiter::rate`] reads and
/// [`RateLimiter::try_set_rate_with`] / [`RateLimiter::set_rate_with`] write.
///
/// The interval and the keep-alive time are kept in whole milliseconds, as Redisson keeps them
/// (a finer part is dropped).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use latchkey_redis::{RateConfig, RateType};
///
/// let config = RateConfig::new(RateType::Overall, 100, Duration::from_secs(1))
///     .with_keep_alive(Duration::from_secs(3600));
/// assert_eq!(config.rate, 100);
/// assert_eq!(config.keep_alive, Some(Duration::from_secs(3600)));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct RateConfig {
    /// Who shares the budget.
    pub rate_type: RateType,
    /// Permits per interval: 1 to [`RateLimiter::MAX_RATE`].
    pub rate: u64,
    /// The length of the sliding window: 1 ms to [`RateLimiter::MAX_INTERVAL`].
    pub interval: Duration,
    /// With a keep-alive time, the limiter (its config and windows) is deleted when it has not
    /// been used for that long; each acquire and release starts it again (Redisson's
    /// `keepAliveTime`). At least the interval, at most [`RateLimiter::MAX_INTERVAL`].
    pub keep_alive: Option<Duration>,
}

impl RateConfig {
    /// `rate` permits per `interval`, shared as `rate_type` says, without a keep-alive time.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use latchkey_redis::{RateConfig, RateType};
    ///
    /// let config = RateConfig::new(RateType::PerClient, 10, Duration::from_secs(1));
    /// assert_eq!(config.keep_alive, None);
    /// ```
    pub fn new(rate_type: RateType, rate: u64, interval: Duration) -> RateConfig {
        RateConfig {
            rate_type,
            rate,
            interval,
            keep_alive: None,
        }
    }

    /// This config with a keep-alive time (see [`RateConfig::keep_alive`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use latchkey_redis::{RateConfig, RateType};
    ///
    /// let config = RateConfig::new(RateType::Overall, 10, Duration::from_secs(1))
    ///     .with_keep_alive(Duration::from_secs(600));
    /// assert_eq!(config.keep_alive, Some(Duration::from_secs(600)));
    /// ```
    pub fn with_keep_alive(self, keep_alive: Duration) -> RateConfig {
        RateConfig {
            keep_alive: Some(keep_alive),
            ..self
        }
    }

    /// The interval and keep-alive time in whole milliseconds (0: no keep-alive), or the
    /// error for a config that cannot be set.
    pub(super) fn check(&self) -> Result<(u64, u64)> {
        if self.rate == 0 {
            return Err(Error::invalid(
                "rate",
                "a rate of zero would never grant a permit; give at least 1",
            ));
        }
        if self.rate > RateLimiter::MAX_RATE {
            return Err(Error::invalid(
                "rate",
                format!(
                    "{} is more than the maximum {} (the scripts count in doubles)",
                    self.rate,
                    RateLimiter::MAX_RATE
                ),
            ));
        }
        let interval = whole_ms("interval", self.interval)?;
        let keep_alive = match self.keep_alive {
            None => 0,
            Some(keep_alive) if keep_alive < self.interval => {
                return Err(Error::invalid(
                    "keep-alive time",
                    format!(
                        "{keep_alive:?} is shorter than the interval {:?}: the window would be \
                         deleted while it still counts; give at least the interval, or none",
                        self.interval
                    ),
                ));
            }
            Some(keep_alive) => whole_ms("keep-alive time", keep_alive)?,
        };
        Ok((interval, keep_alive))
    }
}

/// `d` in whole milliseconds, from 1 ms to [`RateLimiter::MAX_INTERVAL`].
fn whole_ms(what: &'static str, d: Duration) -> Result<u64> {
    if d < Duration::from_millis(1) {
        return Err(Error::invalid(
            what,
            format!("{d:?} is less than a millisecond, Redisson's unit; give at least 1 ms"),
        ));
    }
    if d > RateLimiter::MAX_INTERVAL {
        return Err(Error::invalid(
            what,
            format!(
                "{d:?} is longer than the maximum {:?}",
                RateLimiter::MAX_INTERVAL
            ),
        ));
    }
    Ok(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Checks a number of permits to take or give back: at least one.
fn check_permits(n: u32) -> Result<()> {
    if n == 0 {
        return Err(Error::invalid(
            "permits",
            "zero permits; take or give back at least one",
        ));
    }
    Ok(())
}

/// A distributed rate limiter: at most `rate` permits per sliding `interval`, kept in Redis in
/// Redisson's `RRateLimiter` layout, so that Java (Redisson) and Rust services can share one
/// limit.
///
/// Made by [`Client::rate_limiter`]; the rate is set once, by whichever service comes first,
/// with [`RateLimiter::try_set_rate`] (or replaced with [`RateLimiter::set_rate`]). Then
/// [`RateLimiter::acquire`] waits until the window has room and [`RateLimiter::try_acquire`]
/// gives up when it will not have room in time. Every grant is logged with its time; its
/// permits come back exactly one interval later (a sliding window, not fixed buckets), so no
/// span of `interval` ever holds more than `rate` permits. A waiter sleeps until the time the
/// server computed for enough permits to come back (plus a few milliseconds of jitter) and asks
/// once more: one script call each time room comes back, never a poll.
///
/// For a per-user or per-API-key limit, or a high rate (each grant here is a member of a sorted
/// set until it comes back: 10,000 per second is 10,000 members per second of window), use a
/// [`GcraLimiter`](crate::GcraLimiter): one small key per limited entity, O(1) per decision.
///
/// # Layout (Redisson's, since Redisson 3.21)
///
/// | key | type | holds |
/// | --- | --- | --- |
/// | `<name>` | hash | `rate`, `interval` (ms), `type` (`0` overall, `1` per client), `keepAliveTime` (ms, `0`: none) |
/// | `{<name>}:value` | string | permits left in the window |
/// | `{<name>}:permits` | sorted set | the window's grants: member = 1 byte (16), 16 random bytes, the permits as a 4-byte unsigned int (the server's byte order); score = the grant's time in ms |
/// | `{<name>}:value:<client id>`, `{<name>}:permits:<client id>` | | the same, one pair per client, for [`RateType::PerClient`] |
///
/// A name with its own hash tag keeps it (`orders{eu}:value`), as Redisson's `suffixName`
/// does; under a [namespace](crate::ClientBuilder::namespace) `<name>` is `<namespace>:<name>`.
/// latchkey's client id is [`Client::id`], a UUID as Redisson's. `release` and the keep-alive
/// time are those of Redisson 4 (`release`) and of Redisson since October 2024
/// (`keepAliveTime`); a Redisson that predates them simply does not use them.
///
/// # Clocks, and sharing with Redisson
///
/// Redisson stamps each grant with the **caller's** clock (`System.currentTimeMillis()` on the
/// Java host) and decides with that clock which grants are an interval old. latchkey stamps and
/// decides with the **Redis server's** clock (`TIME`, inside the script): latchkey clients
/// agree with each other whatever their own clocks say, and their grants come back exactly
/// `interval` after they were made.
///
/// Mixed, the window is as exact as the clocks agree. Call *D* the largest difference between
/// the clocks taking part: the Redis server's (for every latchkey client) and each Java host's.
/// A grant stamped by one clock may be counted as an interval old by another up to *D* early,
/// so Java and Rust services together admit at most `rate` permits in any span of
/// `interval − D` (a clock ahead by a whole interval or more would count every grant as old at
/// once: the limit is then gone).
/// Java hosts whose clocks run *N* ms off the Redis server's make *D* = *N* (or the largest
/// such *N*, or the gap between two Java hosts if that is larger); a clock that is late only
/// costs its own service waits, never the limit. With NTP (a few ms), a limit of 100 per second
/// stays 100 per 0.99 s or better. With latchkey clients only, *D* = 0 whatever the client
/// clocks: only a step of the server's clock moves grants (forward: early; back: late). The
/// wait latchkey is told on a refusal is computed from the server's clock too.
///
/// On top of Redisson's rules, latchkey's acquire counts the window again from the log when
/// its counter is missing, above the rate, or short of what the log explains (a key deleted or
/// expired apart from the other), so such a state mends at the next acquire instead of lasting.
///
/// # Cancel safety
///
/// Every operation is one script call. A dropped [`RateLimiter::acquire`] or
/// [`RateLimiter::try_acquire`] takes nothing: dropped while it sleeps, it has nothing; dropped
/// while its script is on its way, the call is finished in the background and, if it granted,
/// that very grant is given back (its log entry removed, its permits added back: exactly as if
/// it never happened, Redisson clients included). The one exception is a call that ends with
/// [`Error::Timeout`]: its answer is lost, so a grant it may have made stays counted until it
/// comes back with the window.
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// use latchkey_redis::RateType;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> latchkey_redis::Result<()> {
/// let client = latchkey_redis::Client::connect("redis://127.0.0.1:6379").await?;
/// let limiter = client.rate_limiter("geocoder");
/// limiter.try_set_rate(RateType::Overall, 100, Duration::from_secs(1)).await?;
///
/// limiter.acquire(1).await?; // waits for room in the window
/// // … call the geocoding API: at most 100 calls per second, across every process …
/// if !limiter.try_acquire(1, Duration::from_millis(200)).await? {
///     println!("over the limit: try again later");
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RateLimiter {
    inner: Arc<RateLimiterInner>,
}

struct RateLimiterInner {
    client: Client,
    name: String,
    /// Redisson's five keys, in Redisson's order: the config, the counter, this client's
    /// counter, the log, this client's log.
    keys: [Arc<str>; 5],
}

named_debug!(RateLimiter);

impl Client {
    /// A rate limiter named `name`, in Redisson's `RRateLimiter` layout.
    ///
    /// Making the handle sends nothing; the name is checked when the handle is used. Set the
    /// rate once with [`RateLimiter::try_set_rate`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use latchkey_redis::RateType;
    ///
    /// # async fn f(client: latchkey_redis::Client) -> latchkey_redis::Result<()> {
    /// let limiter = client.rate_limiter("geocoder");
    /// limiter.try_set_rate(RateType::Overall, 100, Duration::from_secs(1)).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn rate_limiter(&self, name: impl Into<String>) -> RateLimiter {
        let name = name.into();
        let object = object_name(self.namespace(), &name);
        let value = suffix_name(&object, "value");
        let permits = suffix_name(&object, "permits");
        let keys = [
            Arc::from(suffix_name(&value, self.id())),
            Arc::from(suffix_name(&permits, self.id())),
        ];
        let [client_value, client_permits] = keys;
        RateLimiter {
            inner: Arc::new(RateLimiterInner {
                client: self.clone(),
                name,
                keys: [
                    Arc::from(object),
                    Arc::from(value),
                    client_value,
                    Arc::from(permits),
                    client_permits,
                ],
            }),
        }
    }
}

impl RateLimiter {
    /// The largest rate (2^53 − 1): the scripts count in Lua numbers, doubles, which hold every
    /// integer up to it exactly.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(latchkey_redis::RateLimiter::MAX_RATE, (1 << 53) - 1);
    /// ```
    pub const MAX_RATE: u64 = (1 << 53) - 1;

    /// The longest interval and keep-alive time: 365 days.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// assert_eq!(latchkey_redis::RateLimiter::MAX_INTERVAL, Duration::from_secs(365 * 24 * 3600));
    /// ```
    pub const MAX_INTERVAL: Duration = Duration::from_secs(365 * 24 * 3600);

    /// The limiter's name as given to [`Client::rate_limiter`], without the client's
    /// [namespace](crate::ClientBuilder::namespace).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(client: latchkey_redis::Client) {
    /// assert_eq!(client.rate_limiter("geocoder").name(), "geocoder");
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Sets the rate — `rate` permits per `interval`, shared as `rate_type` says — unless it
    /// is set already (Redisson's `trySetRate`). Returns whether this call set it. The window
    /// is not touched.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: one script call, applied or not.
    ///
    /// # Errors
    ///
    /// As [`RateLimiter::try_set_rate_with`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use latchkey_redis::RateType;
    ///
    /// # async fn f(limiter: latchkey_redis::RateLimiter) -> latchkey_redis::Result<()> {
    /// if limiter.try_set_rate(RateType::Overall, 100, Duration::from_secs(1)).await? {
    ///     println!("set up: 100 per second");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_set_rate(
        &self,
        rate_type: RateType,
        rate: u64,
        interval: Duration,
    ) -> Result<bool> {
        self.try_set_rate_with(RateConfig::new(rate_type, rate, interval))
            .await
    }

    /// Sets the rate as `config` says (with its keep-alive time, if any) unless it is set
    /// already. Returns whether this call set it: `false` means another config is in place,
    /// which [`RateLimiter::rate`] reads. As Redisson's `trySetRate`, fields missing from a
    /// config that is there are filled in; the window is not touched.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: one script call, applied or not.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] (nothing sent) for a bad name, a rate of 0 or above
    /// [`RateLimiter::MAX_RATE`], an interval under 1 ms or above
    /// [`RateLimiter::MAX_INTERVAL`], a keep-alive time shorter than the interval or above the
    /// maximum; [`Error::WrongType`] (nothing changed) if the name holds something else than a
    /// hash; connection errors.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use latchkey_redis::{RateConfig, RateType};
    ///
    /// # async fn f(limiter: latchkey_redis::RateLimiter) -> latchkey_redis::Result<()> {
    /// let config = RateConfig::new(RateType::Overall, 100, Duration::from_secs(1))
    ///     .with_keep_alive(Duration::from_secs(3600)); // gone after an idle hour
    /// limiter.try_set_rate_with(config).await?;
    /// # Ok(())
    /// # }
    /// ```
    #[tracing::instrument(level = "debug", name = "try_set_rate", skip_all, fields(primitive = "rate_limiter", name = %self.inner.name))]
    pub async fn try_set_rate_with(&self, config: RateConfig) -> Result<bool> {
        check_name(&self.inner.name)?;
        let (interval, keep_alive) = config.check()?;
        let inner = &self.inner;
        let mut invocation = RATE_TRY_SET.invocation();
        invocation
            .key(&*inner.keys[0])
            .arg(config.rate)
            .arg(interval)
            .arg(config.rate_type.wire())
            .arg(keep_alive);
        let set: i64 = inner
            .client
            .inner
            .conn
            .script(&invocation, "setting a rate limiter's rate", &inner.name)
            .await?;
        Ok(set == 1)
    }

    /// Sets the rate, replacing the one in place (Redisson's `setRate`): the window starts
    /// again, empty, so every permit of the new rate is available at once.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: one script call, applied or not.
    ///
    /// # Errors
    ///
    /// As [`RateLimiter::set_rate_with`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use latchkey_redis::RateType;
    ///
    /// # async fn f(limiter: latchkey_redis::RateLimiter) -> latchkey_redis::Result<()> {
    /// limiter.set_rate(RateType::Overall, 200, Duration::from_secs(1)).await?; // raise it
    /// # Ok(())
    /// # }
    /// ```
    pub async fn set_rate(&self, rate_type: RateType, rate: u64, interval: Duration) -> Result<()> {
        self.set_rate_with(RateConfig::new(rate_type, rate, interval))
            .await
    }

    /// Sets the rate as `config` says, replacing the config in place (its keep-alive time
    /// too: without one, the limiter no longer expires) and starting the window again: this
    /// client's window of the new type is deleted, and both of its windows when the type
    /// changed. Other clients' per-client windows are not known to this one; they stay until
    /// they expire or those clients set the rate.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: one script call, applied or not.
    ///
    /// # Errors
    ///
    /// As [`RateLimiter::try_set_rate_with`]; [`Error::WrongType`] (nothing changed) also if a
    /// window key holds another type.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use latchkey_redis::{RateConfig, RateType};
    ///
    /// # async fn f(limiter: latchkey_redis::RateLimiter) -> latchkey_redis::Result<()> {
    /// limiter
    ///     .set_rate_with(RateConfig::new(RateType::PerClient, 10, Duration::from_secs(1)))
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    #[tracing::instrument(level = "debug", name = "set_rate", skip_all, fields(primitive = "rate_limiter", name = %self.inner.name))]
    pub async fn set_rate_with(&self, config: RateConfig) -> Result<()> {
        check_name(&self.inner.name)?;
        let (interval, keep_alive) = config.check()?;
        let inner = &self.inner;
        let mut invocation = RATE_SET.invocation();
        for key in &inner.keys {
            invocation.key(&**key);
        }
        invocation
            .arg(config.rate)
            .arg(interval)
            .arg(config.rate_type.wire())
            .arg(keep_alive);
        let _: i64 = inner
            .client
            .inner
            .conn
            .script(&invocation, "setting a rate limiter's rate", &inner.name)
            .await?;
        Ok(())
    }

    /// The rate in place, `None` if it was never set (or the limiter expired or was deleted).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a read.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad name; [`Error::WrongType`] if the name holds
    /// something else than a hash; [`Error::Redis`] if the config's numbers do not fit (not
    /// written by latchkey or Redisson); connection errors.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(limiter: latchkey_redis::RateLimiter) -> latchkey_redis::Result<()> {
    /// if let Some(config) = limiter.rate().await? {
    ///     println!("{} per {:?} ({:?})", config.rate, config.interval, config.rate_type);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn rate(&self) -> Result<Option<RateConfig>> {
        check_name(&self.inner.name)?;
        let fields: HashMap<String, String> = self
            .inner
            .client
            .inner
            .conn
            .query(
                redis::cmd("HGETALL").arg(&*self.inner.keys[0]),
                "reading a rate limiter's rate",
                &self.inner.name,
            )
            .await?;
        let (Some(rate), Some(interval), Some(rate_type)) = (
            fields.get("rate"),
            fields.get("interval"),
            fields.get("type"),
        ) else {
            return Ok(None);
        };
        let number = |text: &String| {
            text.parse::<u64>()
                .map_err(|_| unexpected("the rate limiter config", &fields))
        };
        let keep_alive = match fields.get("keepAliveTime").map(number).transpose()? {
            None | Some(0) => None,
            Some(ms) => Some(Duration::from_millis(ms)),
        };
        Ok(Some(RateConfig {
            // Redisson's scripts read anything but "1" as overall.
            rate_type: if rate_type == "1" {
                RateType::PerClient
            } else {
                RateType::Overall
            },
            rate: number(rate)?,
            interval: Duration::from_millis(number(interval)?),
            keep_alive,
        }))
    }

    /// The permits the window has left now (for this client, with [`RateType::PerClient`]).
    /// Below zero when the rate was lowered (by a Redisson client keeping its window) under
    /// the grants still in the window. Unlike Redisson's `availablePermits`, it writes
    /// nothing.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a read.
    ///
    /// # Errors
    ///
    /// [`Error::RateNotSet`] if the rate was never set; [`Error::InvalidArgument`] for a bad
    /// name; [`Error::WrongType`] if a key holds another type; connection errors.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(limiter: latchkey_redis::RateLimiter) -> latchkey_redis::Result<()> {
    /// println!("{} calls left in this second", limiter.available_permits().await?);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn available_permits(&self) -> Result<i64> {
        check_name(&self.inner.name)?;
        let reply: Vec<i64> = self
            .script(&RATE_AVAILABLE, &[], "counting a rate limiter's permits")
            .await?;
        match reply.as_slice() {
            [1, left] => Ok(*left),
            [-1] => Err(self.not_set()),
            other => Err(unexpected("the rate limiter script", other)),
        }
    }

    /// Takes `permits` permits, waiting until the window has room for them.
    ///
    /// A refusal tells when enough permits come back (the oldest grants of the window that make
    /// up the difference, by the server's clock); the caller sleeps until then, plus a jitter
    /// of up to a tenth of the wait (1 to 20 ms), and tries once more. Permits given back with
    /// [`RateLimiter::release`] are found at the next try, not at once.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a dropped future leaves no permit taken. Dropped while it sleeps it holds
    /// nothing; dropped while its script is on its way, the script finishes in the background
    /// and a grant it made is given back, exactly (see [Cancel
    /// safety](RateLimiter#cancel-safety)).
    ///
    /// # Errors
    ///
    /// [`Error::RateNotSet`] if the rate was never set; [`Error::InvalidArgument`] (nothing
    /// changed) for a bad name, zero permits, or more permits than the rate (they could never be
    /// granted); [`Error::WrongType`] (nothing changed) if a key holds another type; connection
    /// errors. [`Error::Timeout`] leaves it uncertain whether the permits were taken.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(limiter: latchkey_redis::RateLimiter) -> latchkey_redis::Result<()> {
    /// for batch in 0..10 {
    ///     limiter.acquire(5).await?; // five requests' worth
    ///     println!("sending batch {batch}");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn acquire(&self, permits: u32) -> Result<()> {
        if self.acquire_until(permits, None).await? {
            Ok(())
        } else {
            unreachable!("an unbounded wait only ends with the permits")
        }
    }

    /// Takes `permits` permits, waiting at most `wait` for room; `Ok(false)` if there is none
    /// in time. It gives up at once, without sleeping out `wait`, when the window will not
    /// have room before then (unless somebody releases permits first). `Duration::ZERO` tries
    /// once (Redisson's `tryAcquire(permits)`).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`RateLimiter::acquire`].
    ///
    /// # Errors
    ///
    /// As [`RateLimiter::acquire`], and [`Error::InvalidArgument`] if `wait` is too large to
    /// add to the clock.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    ///
    /// # async fn f(limiter: latchkey_redis::RateLimiter) -> latchkey_redis::Result<()> {
    /// if limiter.try_acquire(1, Duration::ZERO).await? {
    ///     println!("within the limit");
    /// } else {
    ///     println!("429 Too Many Requests");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_acquire(&self, permits: u32, wait: Duration) -> Result<bool> {
        let deadline = deadline_after(wait, "`acquire`")?;
        self.acquire_until(permits, Some(deadline)).await
    }

    /// Gives `permits` permits back to the window (Redisson 4's `release`): the oldest grants
    /// of the window leave its log first, whoever made them, and their permits are available
    /// again at once. Returns how many came back: fewer than `permits` when the window holds
    /// fewer (unlike Redisson, which then counts permits that were never taken, up to the
    /// rate).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: one script call, applied or not.
    ///
    /// # Errors
    ///
    /// [`Error::RateNotSet`] if the rate was never set; [`Error::InvalidArgument`] for a bad
    /// name or zero permits; [`Error::WrongType`] (nothing changed) if a key holds another type;
    /// connection errors.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(limiter: latchkey_redis::RateLimiter) -> latchkey_redis::Result<()> {
    /// limiter.acquire(1).await?;
    /// // … the request was cancelled before it was sent: let somebody else have the permit.
    /// limiter.release(1).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn release(&self, permits: u32) -> Result<u32> {
        let span = metrics::span(Op::Release, "rate_limiter", &self.inner.name, None);
        metrics::traced(span, async {
            check_name(&self.inner.name)?;
            check_permits(permits)?;
            let reply: Vec<i64> = self
                .script(
                    &RATE_RELEASE,
                    &[permits.to_string()],
                    "releasing rate limiter permits",
                )
                .await?;
            match reply.as_slice() {
                [1, given] => Ok(u32::try_from(*given).unwrap_or(permits)),
                [-1] => Err(self.not_set()),
                other => Err(unexpected("the rate limiter script", other)),
            }
        })
        .await
    }

    /// Deletes the limiter: its config and its windows (this client's, for a per-client
    /// limiter), as Redisson's `delete`. Returns whether anything was deleted.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: one command, applied or not.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad name; connection errors.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(limiter: latchkey_redis::RateLimiter) -> latchkey_redis::Result<()> {
    /// limiter.delete().await?;
    /// assert!(limiter.rate().await?.is_none());
    /// # Ok(())
    /// # }
    /// ```
    #[tracing::instrument(level = "debug", name = "delete", skip_all, fields(primitive = "rate_limiter", name = %self.inner.name))]
    pub async fn delete(&self) -> Result<bool> {
        check_name(&self.inner.name)?;
        let mut del = redis::cmd("DEL");
        for key in &self.inner.keys {
            del.arg(&**key);
        }
        let deleted: i64 = self
            .inner
            .client
            .inner
            .conn
            .query(&del, "deleting a rate limiter", &self.inner.name)
            .await?;
        Ok(deleted > 0)
    }

    /// Runs `script` with the five keys and `args`.
    async fn script(
        &self,
        script: &'static redis::Script,
        args: &[String],
        context: &'static str,
    ) -> Result<Vec<i64>> {
        let inner = &self.inner;
        let mut invocation = script.invocation();
        for key in &inner.keys {
            invocation.key(&**key);
        }
        for arg in args {
            invocation.arg(arg);
        }
        inner
            .client
            .inner
            .conn
            .script(&invocation, context, &inner.name)
            .await
    }

    fn not_set(&self) -> Error {
        Error::RateNotSet {
            name: self.inner.name.clone(),
        }
    }

    async fn acquire_until(&self, permits: u32, deadline: Option<Instant>) -> Result<bool> {
        let span = metrics::acquire_span("rate_limiter", &self.inner.name, deadline);
        let acquire = async {
            check_name(&self.inner.name)?;
            check_permits(permits)?;
            let meter = Meter {
                site: Site::new(&self.inner.client, "rate_limiter", &self.inner.name),
            };
            let admitted =
                until_admitted(&meter, permits, deadline, || self.attempt(permits)).await?;
            Ok(admitted.is_ok())
        };
        tracing::Instrument::instrument(acquire, span).await
    }

    /// One acquire script call, run detached: if the caller is gone when the answer comes, the
    /// [`Grant`] is dropped in the task that finishes the call, which gives it back.
    fn attempt(&self, permits: u32) -> impl Future<Output = Result<Turn<(), ()>>> + Send {
        let limiter = self.clone();
        let decided = detached_try(Box::pin(async move {
            limiter.attempt_inner(permits, random_part()).await
        }));
        async move {
            Ok(match decided.await? {
                Turn::Admitted(grant) => {
                    grant.keep();
                    Turn::Admitted(())
                }
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

    async fn attempt_inner(&self, permits: u32, random: String) -> Result<Turn<Grant, ()>> {
        let reply = self
            .script(
                &RATE_ACQUIRE,
                &[permits.to_string(), random.clone()],
                "acquiring rate limiter permits",
            )
            .await?;
        match reply.as_slice() {
            [1, _left] => Ok(Turn::Admitted(Grant {
                limiter: self.clone(),
                permits,
                random: Some(random),
            })),
            [0, wait_ms, _left] => Ok(Turn::Refused {
                retry_after: Duration::from_millis(u64::try_from(*wait_ms).unwrap_or(1).max(1)),
                refusal: (),
            }),
            [-1] => Err(self.not_set()),
            [-2, rate] => Err(Error::invalid(
                "permits",
                format!(
                    "{permits} is more than the rate of rate limiter `{}` ({rate} per interval): \
                     they could never be granted",
                    self.inner.name
                ),
            )),
            other => Err(unexpected("the rate limiter script", other)),
        }
    }
}

/// The random part of a grant's log member: 16 bytes, as Redisson's (which are any bytes; these
/// are letters and digits, about 95 random bits, so that they travel as text).
fn random_part() -> String {
    use rand::distr::{Alphanumeric, SampleString};
    Alphanumeric.sample_string(&mut rand::rng(), 16)
}

/// A grant nobody has taken yet: dropped without [`Grant::keep`] (its caller went away while
/// the script ran), it is given back in the background, by its log member.
struct Grant {
    limiter: RateLimiter,
    permits: u32,
    /// `None` once kept.
    random: Option<String>,
}

impl Grant {
    /// The caller has the grant: nothing to give back.
    fn keep(mut self) {
        self.random = None;
    }
}

impl Drop for Grant {
    fn drop(&mut self) {
        let Some(random) = self.random.take() else {
            return;
        };
        let inner = &self.limiter.inner;
        let task = Task::new(
            &RATE_GIVE_BACK,
            inner.keys.to_vec(),
            vec![self.permits.to_string(), random],
            "giving back a rate limiter grant nobody waited for",
        );
        // Refused only when the runtime is going away: the permits come back with the window.
        let _ = inner.client.inner.background.send(task);
    }
}
