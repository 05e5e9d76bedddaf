//! The blocking [`CountDownLatch`], over the async one.

use std::time::Duration;

use super::Rooted;
use crate::error::Result;

/// A count-down latch in Redis, for synchronous code: the blocking form of
/// [`latchkey::CountDownLatch`](crate::CountDownLatch), made with
/// [`Client::count_down_latch`](super::Client::count_down_latch). Threads (or processes) wait
/// until others have counted it down to zero.
///
/// # Examples
///
/// ```no_run
/// # fn main() -> latchkey::Result<()> {
/// let client = latchkey::blocking::Client::connect("redis://127.0.0.1:6379")?;
/// let ready = client.count_down_latch("workers-ready");
/// ready.try_set_count(3)?;
/// // each of three workers, when ready:
/// ready.count_down()?;
/// // the coordinator:
/// ready.wait()?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct CountDownLatch {
    inner: Rooted<crate::CountDownLatch>,
}

impl CountDownLatch {
    pub(super) fn from_rooted(inner: Rooted<crate::CountDownLatch>) -> CountDownLatch {
        CountDownLatch { inner }
    }

    /// The latch's name as given to
    /// [`Client::count_down_latch`](super::Client::count_down_latch).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(client: latchkey::blocking::Client) {
    /// assert_eq!(client.count_down_latch("workers-ready").name(), "workers-ready");
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        self.inner.name()
    }

    /// Arms the latch with `count`, unless it has a count already; whether this call set it.
    ///
    /// # Errors
    ///
    /// As [`latchkey::CountDownLatch::try_set_count`](crate::CountDownLatch::try_set_count),
    /// and [`Error::Config`](crate::Error::Config) when called inside a Tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(latch: latchkey::blocking::CountDownLatch) -> latchkey::Result<()> {
    /// if !latch.try_set_count(3)? {
    ///     println!("already armed with {}", latch.count()?);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_set_count(&self, count: u64) -> Result<bool> {
        self.inner.run(self.inner.try_set_count(count))
    }

    /// Counts the latch down by one and returns the count left; at zero the waiters are
    /// released.
    ///
    /// # Errors
    ///
    /// As [`latchkey::CountDownLatch::count_down`](crate::CountDownLatch::count_down), and
    /// [`Error::Config`](crate::Error::Config) when called inside a Tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(latch: latchkey::blocking::CountDownLatch) -> latchkey::Result<()> {
    /// let left = latch.count_down()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn count_down(&self) -> Result<u64> {
        self.inner.run(self.inner.count_down())
    }

    /// The count now (0 for an open latch).
    ///
    /// # Errors
    ///
    /// As [`latchkey::CountDownLatch::count`](crate::CountDownLatch::count), and
    /// [`Error::Config`](crate::Error::Config) when called inside a Tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(latch: latchkey::blocking::CountDownLatch) -> latchkey::Result<()> {
    /// println!("{} to go", latch.count()?);
    /// # Ok(())
    /// # }
    /// ```
    pub fn count(&self) -> Result<u64> {
        self.inner.run(self.inner.count())
    }

    /// Waits until the count is zero, as long as it takes.
    ///
    /// # Errors
    ///
    /// As [`latchkey::CountDownLatch::wait`](crate::CountDownLatch::wait), and
    /// [`Error::Config`](crate::Error::Config) when called inside a Tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(latch: latchkey::blocking::CountDownLatch) -> latchkey::Result<()> {
    /// latch.wait()?;
    /// println!("everybody is ready");
    /// # Ok(())
    /// # }
    /// ```
    pub fn wait(&self) -> Result<()> {
        self.inner.run(self.inner.wait())
    }

    /// Waits at most `timeout` for the count to be zero; whether it was.
    ///
    /// # Errors
    ///
    /// As [`latchkey::CountDownLatch::wait_for`](crate::CountDownLatch::wait_for), and
    /// [`Error::Config`](crate::Error::Config) when called inside a Tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(latch: latchkey::blocking::CountDownLatch) -> latchkey::Result<()> {
    /// use std::time::Duration;
    /// if !latch.wait_for(Duration::from_secs(5))? {
    ///     eprintln!("still waiting for {}", latch.count()?);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn wait_for(&self, timeout: Duration) -> Result<bool> {
        self.inner.run(self.inner.wait_for(timeout))
    }
}
