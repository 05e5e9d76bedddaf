//! The count-down latch, compatible with Redisson's `RCountDownLatch`.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::client::{Client, Object};
use crate::error::{Error, Result};
use crate::keys::{check_name, named_debug, LatchKeys};
use crate::metrics::{self, Op};
use crate::pubsub::WakePolicy;
use crate::scripts::{LATCH_COUNT_DOWN, LATCH_SET_COUNT};
use crate::task::Task;
use crate::wait::{deadline_after, Attempt};

/// Redisson's `CountDownLatchPubSub.ZERO_COUNT_MESSAGE`: the latch opened.
const ZERO_COUNT_MESSAGE: &str = "0";
/// Redisson's `CountDownLatchPubSub.NEW_COUNT_MESSAGE`: a count was set.
const NEW_COUNT_MESSAGE: &str = "1";

/// A distributed count-down latch, kept in Redis in Redisson's `RCountDownLatch` layout.
///
/// Made by [`Client::count_down_latch`]. The count is a Redis string at key `name`; when
/// [`CountDownLatch::count_down`] brings it to zero the key is deleted and `"0"` is published on
/// `redisson_countdownlatch__channel__{name}`, which wakes every waiter of every client (Redisson
/// clients included). (On a Redis Cluster, a name with its own hash tag, `orders{eu}:1`,
/// publishes on `redisson_countdownlatch__channel__orders{eu}:1` instead, in the count's slot:
/// Redisson's channel would be in another slot, and Redisson's own latch fails there with
/// CROSSSLOT.) A latch without a count is open: [`CountDownLatch::wait`] returns at once, and
/// [`CountDownLatch::try_set_count`] can arm it again.
///
/// # Examples
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> latchkey_redis::Result<()> {
/// let client = latchkey_redis::Client::connect("redis://127.0.0.1:6379").await?;
/// let latch = client.count_down_latch("workers-ready");
/// latch.try_set_count(3).await?;
///
/// // In each of three workers:
/// latch.count_down().await?;
///
/// // In the coordinator:
/// latch.wait().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct CountDownLatch {
    inner: Arc<LatchInner>,
}

struct LatchInner {
    client: Client,
    /// The name the caller gave.
    name: String,
    /// The count's key: the name under the client's namespace.
    key: String,
    /// The channel counts and openings are published on (see [`LatchKeys`]).
    channel: String,
}

named_debug!(CountDownLatch);
crate::client::object!(CountDownLatch);

impl Client {
    /// A count-down latch named `name`, in Redisson's `RCountDownLatch` layout.
    ///
    /// Making the handle sends nothing; the name is checked when the handle is used.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(client: latchkey_redis::Client) -> latchkey_redis::Result<()> {
    /// let latch = client.count_down_latch("workers-ready");
    /// latch.try_set_count(3).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn count_down_latch(&self, name: impl Into<String>) -> CountDownLatch {
        let name = name.into();
        let keys = LatchKeys::new(self.namespace(), &name, self.inner.conn.is_cluster());
        CountDownLatch {
            inner: Arc::new(LatchInner {
                client: self.clone(),
                channel: keys.channel,
                key: keys.count,
                name,
            }),
        }
    }
}

impl CountDownLatch {
    /// The latch's name as given to [`Client::count_down_latch`], without the client's
    /// [namespace](crate::ClientBuilder::namespace): under the namespace `billing`, `name()` is
    /// `workers-ready` and the latch is kept at `billing:workers-ready` in Redis. The name is checked
    /// (length, reserved prefixes, a whole hash tag) as given, whatever the namespace.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(client: latchkey_redis::Client) {
    /// assert_eq!(client.count_down_latch("workers-ready").name(), "workers-ready");
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Arms the latch with `count`, unless it has a count already. Returns whether this call
    /// set it. A count of 0 sets nothing (the latch stays open) and returns whether it was open.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: one script call, applied or not.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad name or a count above `i64::MAX`;
    /// [`Error::WrongType`] if the key holds another type; connection errors.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(latch: latchkey_redis::CountDownLatch) -> latchkey_redis::Result<()> {
    /// if !latch.try_set_count(3).await? {
    ///     println!("already armed with {}", latch.count().await?);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    #[tracing::instrument(level = "debug", name = "try_set_count", skip_all, fields(primitive = "latch", name = %self.inner.name))]
    pub async fn try_set_count(&self, count: u64) -> Result<bool> {
        check_name(&self.inner.name)?;
        if count > i64::MAX as u64 {
            return Err(Error::invalid(
                "count",
                format!("{count} is more than the maximum {}", i64::MAX),
            ));
        }
        if count == 0 {
            return Ok(self.count().await? == 0);
        }
        let set: i64 = self
            .script(
                &LATCH_SET_COUNT,
                &[&count.to_string(), NEW_COUNT_MESSAGE],
                "setting a latch count",
            )
            .await?;
        Ok(set == 1)
    }

    /// Counts the latch down by one and returns the count left. At zero every waiter is woken.
    /// An open latch (no count) stays open and 0 is returned.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: one script call, applied or not (if the future is dropped while the script
    /// is in flight, it is unknown whether the count went down).
    ///
    /// # Errors
    ///
    /// [`Error::WrongType`] if the key is not a count; connection errors.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(latch: latchkey_redis::CountDownLatch) -> latchkey_redis::Result<()> {
    /// let left = latch.count_down().await?;
    /// println!("{left} to go");
    /// # Ok(())
    /// # }
    /// ```
    pub async fn count_down(&self) -> Result<u64> {
        let span = metrics::span(Op::CountDown, "latch", &self.inner.name, None);
        let count_down = async {
            check_name(&self.inner.name)?;
            let left: i64 = self
                .script(
                    &LATCH_COUNT_DOWN,
                    &[ZERO_COUNT_MESSAGE],
                    "counting a latch down",
                )
                .await?;
            Ok(left.max(0) as u64)
        };
        metrics::traced(span, count_down).await
    }

    /// The count left; 0 when the latch is open.
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
    /// # async fn f(latch: latchkey_redis::CountDownLatch) -> latchkey_redis::Result<()> {
    /// println!("{} to go", latch.count().await?);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn count(&self) -> Result<u64> {
        let cmd = redis::cmd("GET").arg(&self.inner.key).clone();
        let n: Option<i64> = self.read(&cmd, "reading a latch count").await?;
        Ok(n.unwrap_or(0).max(0) as u64)
    }

    /// Waits until the latch is open (its count reached zero, or it has none).
    ///
    /// Woken by the zero-count message; between messages it checks the count at least every 2 s,
    /// in case a message is lost.
    ///
    /// # Redis stalls
    ///
    /// A read or subscription that times out ([`Error::Timeout`]) is made again after a short pause
    /// while the wait has time left: a stall shorter than the wait is waited through.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads and listens; dropping the future drops its subscription.
    ///
    /// # Errors
    ///
    /// [`Error::WrongType`] if the key is not a count; connection errors.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(latch: latchkey_redis::CountDownLatch) -> latchkey_redis::Result<()> {
    /// latch.wait().await?;
    /// println!("every worker is ready");
    /// # Ok(())
    /// # }
    /// ```
    pub async fn wait(&self) -> Result<()> {
        let opened = self.wait_until(None).await?;
        debug_assert!(opened, "an unbounded wait only ends with the latch open");
        Ok(())
    }

    /// Waits at most `timeout` for the latch to open; returns whether it opened.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`CountDownLatch::wait`].
    ///
    /// # Errors
    ///
    /// As [`CountDownLatch::wait`], and [`Error::InvalidArgument`] if `timeout` is too large to
    /// add to the clock.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(latch: latchkey_redis::CountDownLatch) -> latchkey_redis::Result<()> {
    /// use std::time::Duration;
    /// if !latch.wait_for(Duration::from_secs(5)).await? {
    ///     println!("still {} to go", latch.count().await?);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn wait_for(&self, timeout: Duration) -> Result<bool> {
        let deadline = deadline_after(timeout, "`wait()`")?;
        self.wait_until(Some(deadline)).await
    }

    /// Runs one of the latch's scripts: KEYS are the count and the channel, ARGV `args` and the
    /// publish command.
    async fn script<T: redis::FromRedisValue + Send>(
        &self,
        script: &'static redis::Script,
        args: &[&str],
        context: &'static str,
    ) -> Result<T> {
        let inner = &self.inner;
        let mut args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        args.push(inner.client.inner.conn.publish_command().to_owned());
        Task::new(
            script,
            vec![
                Arc::from(inner.key.as_str()),
                Arc::from(inner.channel.as_str()),
            ],
            args,
            context,
        )
        .run(&inner.client.inner.conn, &inner.name)
        .await
    }

    async fn wait_until(&self, deadline: Option<Instant>) -> Result<bool> {
        let wait = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        let span = metrics::span(Op::Await, "latch", &self.inner.name, wait);
        tracing::Instrument::instrument(self.wait_until_inner(deadline), span).await
    }

    async fn wait_until_inner(&self, deadline: Option<Instant>) -> Result<bool> {
        let waiting = self.waiting(&self.inner.channel, WakePolicy::All, "latch");
        let opened = waiting.run(deadline, |_| async {
            Ok(match self.count().await {
                Ok(0) => Attempt::Granted(()),
                Ok(_) => Attempt::retry_after_ms(-1),
                // A read: always safe to repeat after a command timeout.
                Err(err) if err.is_uncertain() => Attempt::Stalled(err),
                Err(err) => return Err(err),
            })
        });
        Ok(opened.await?.is_some())
    }
}
