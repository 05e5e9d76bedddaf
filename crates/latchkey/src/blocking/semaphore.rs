//! The blocking semaphores: [`Semaphore`] with its [`Permits`], [`PermitSemaphore`] with its
//! [`LeasedPermits`], over their async counterparts.

use std::time::Duration;

use super::Rooted;
use crate::error::Result;
use crate::{PermitId, PermitOptions};

/// A counting semaphore in Redis, for synchronous code: the blocking form of
/// [`latchkey::Semaphore`](crate::Semaphore), made with
/// [`Client::semaphore`](super::Client::semaphore).
///
/// # Examples
///
/// ```no_run
/// # fn main() -> latchkey::Result<()> {
/// let client = latchkey::blocking::Client::connect("redis://127.0.0.1:6379")?;
/// let connections = client.semaphore("db-connections");
/// connections.try_set_permits(10)?;
/// let permit = connections.acquire(1)?;
/// // … use one connection …
/// permit.release()?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct Semaphore {
    inner: Rooted<crate::Semaphore>,
}

impl Semaphore {
    pub(super) fn from_rooted(inner: Rooted<crate::Semaphore>) -> Semaphore {
        Semaphore { inner }
    }

    /// The semaphore's name as given to [`Client::semaphore`](super::Client::semaphore).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(client: latchkey::blocking::Client) {
    /// assert_eq!(client.semaphore("db-connections").name(), "db-connections");
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        self.inner.name()
    }

    /// Sets the number of permits, unless the semaphore has been set up already; whether this
    /// call set it.
    ///
    /// # Errors
    ///
    /// As [`latchkey::Semaphore::try_set_permits`](crate::Semaphore::try_set_permits), and
    /// [`Error::Config`](crate::Error::Config) when called inside a Tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(semaphore: latchkey::blocking::Semaphore) -> latchkey::Result<()> {
    /// semaphore.try_set_permits(10)?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_set_permits(&self, permits: u32) -> Result<bool> {
        self.inner.run(self.inner.try_set_permits(permits))
    }

    /// Adds `delta` permits (negative: takes them away).
    ///
    /// # Errors
    ///
    /// As [`latchkey::Semaphore::add_permits`](crate::Semaphore::add_permits), and
    /// [`Error::Config`](crate::Error::Config) when called inside a Tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(semaphore: latchkey::blocking::Semaphore) -> latchkey::Result<()> {
    /// semaphore.add_permits(2)?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn add_permits(&self, delta: i32) -> Result<()> {
        self.inner.run(self.inner.add_permits(delta))
    }

    /// How many permits are free now.
    ///
    /// # Errors
    ///
    /// As [`latchkey::Semaphore::available_permits`](crate::Semaphore::available_permits), and
    /// [`Error::Config`](crate::Error::Config) when called inside a Tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(semaphore: latchkey::blocking::Semaphore) -> latchkey::Result<()> {
    /// println!("{} free", semaphore.available_permits()?);
    /// # Ok(())
    /// # }
    /// ```
    pub fn available_permits(&self) -> Result<i64> {
        self.inner.run(self.inner.available_permits())
    }

    /// Takes `n` permits, waiting as long as it takes.
    ///
    /// # Errors
    ///
    /// As [`latchkey::Semaphore::acquire`](crate::Semaphore::acquire), and
    /// [`Error::Config`](crate::Error::Config) when called inside a Tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(semaphore: latchkey::blocking::Semaphore) -> latchkey::Result<()> {
    /// let permits = semaphore.acquire(2)?;
    /// assert_eq!(permits.count(), 2);
    /// # Ok(())
    /// # }
    /// ```
    pub fn acquire(&self, n: u32) -> Result<Permits> {
        let permits = self.inner.run(self.inner.acquire(n))?;
        Ok(Permits {
            inner: self.inner.rt().make(|| permits),
        })
    }

    /// Takes `n` permits, waiting at most `wait`; `Ok(None)` if they were not free in time.
    ///
    /// # Errors
    ///
    /// As [`latchkey::Semaphore::try_acquire`](crate::Semaphore::try_acquire), and
    /// [`Error::Config`](crate::Error::Config) when called inside a Tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(semaphore: latchkey::blocking::Semaphore) -> latchkey::Result<()> {
    /// use std::time::Duration;
    /// match semaphore.try_acquire(1, Duration::from_millis(100))? {
    ///     Some(permit) => permit.release()?,
    ///     None => println!("all in use"),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_acquire(&self, n: u32, wait: Duration) -> Result<Option<Permits>> {
        let permits = self.inner.run(self.inner.try_acquire(n, wait))?;
        Ok(permits.map(|p| Permits {
            inner: self.inner.rt().make(|| p),
        }))
    }

    /// Gives back `n` permits that were taken and forgotten (see [`Permits::forget`]).
    ///
    /// # Errors
    ///
    /// As [`latchkey::Semaphore::release`](crate::Semaphore::release), and
    /// [`Error::Config`](crate::Error::Config) when called inside a Tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(semaphore: latchkey::blocking::Semaphore) -> latchkey::Result<()> {
    /// let n = semaphore.acquire(1)?.forget();
    /// // … later, maybe in another process …
    /// semaphore.release(n)?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn release(&self, n: u32) -> Result<()> {
        self.inner.run(self.inner.release(n))
    }
}

/// Permits taken from a blocking [`Semaphore`]: the blocking form of
/// [`latchkey::Permits`](crate::Permits). Dropping them gives them back without blocking (the
/// release is handed to the client's runtime).
///
/// # Examples
///
/// ```no_run
/// # fn f(semaphore: latchkey::blocking::Semaphore) -> latchkey::Result<()> {
/// let permits = semaphore.acquire(1)?;
/// permits.release()?;
/// # Ok(())
/// # }
/// ```
#[must_use = "dropping the permits gives them back at once"]
#[derive(Debug)]
pub struct Permits {
    inner: Rooted<crate::Permits>,
}

impl Permits {
    /// How many permits these are.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(semaphore: latchkey::blocking::Semaphore) -> latchkey::Result<()> {
    /// assert_eq!(semaphore.acquire(3)?.count(), 3);
    /// # Ok(())
    /// # }
    /// ```
    pub fn count(&self) -> u32 {
        self.inner.count()
    }

    /// Keeps the permits taken without giving them back on drop; returns how many. Give them
    /// back later with [`Semaphore::release`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(semaphore: latchkey::blocking::Semaphore) -> latchkey::Result<()> {
    /// let n = semaphore.acquire(1)?.forget();
    /// assert_eq!(n, 1);
    /// # Ok(())
    /// # }
    /// ```
    pub fn forget(self) -> u32 {
        let (permits, rt) = self.inner.into_parts();
        let _entered = rt.enter();
        permits.forget()
    }

    /// Gives the permits back now and waits for Redis to confirm it.
    ///
    /// # Errors
    ///
    /// As [`latchkey::Permits::release`](crate::Permits::release), and
    /// [`Error::Config`](crate::Error::Config) when called inside a Tokio runtime (the permits
    /// are then given back as on drop).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(semaphore: latchkey::blocking::Semaphore) -> latchkey::Result<()> {
    /// semaphore.acquire(1)?.release()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn release(self) -> Result<()> {
        self.inner.consume(|permits| permits.release())
    }
}

/// A semaphore of leased, named permits in Redis, for synchronous code: the blocking form of
/// [`latchkey::PermitSemaphore`](crate::PermitSemaphore), made with
/// [`Client::permit_semaphore`](super::Client::permit_semaphore). A permit whose holder
/// vanishes comes back when its lease runs out; the client's runtime renews the leases of
/// permits taken without one.
///
/// # Examples
///
/// ```no_run
/// # fn main() -> latchkey::Result<()> {
/// let client = latchkey::blocking::Client::connect("redis://127.0.0.1:6379")?;
/// let slots = client.permit_semaphore("render-slots");
/// slots.try_set_permits(4)?;
/// let permits = slots.acquire(1)?;
/// println!("rendering with permit {}", permits.ids()[0]);
/// permits.release()?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct PermitSemaphore {
    inner: Rooted<crate::PermitSemaphore>,
}

impl PermitSemaphore {
    pub(super) fn from_rooted(inner: Rooted<crate::PermitSemaphore>) -> PermitSemaphore {
        PermitSemaphore { inner }
    }

    fn root(&self, permits: crate::LeasedPermits) -> LeasedPermits {
        LeasedPermits {
            inner: self.inner.rt().make(|| permits),
        }
    }

    /// The semaphore's name as given to
    /// [`Client::permit_semaphore`](super::Client::permit_semaphore).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(client: latchkey::blocking::Client) {
    /// assert_eq!(client.permit_semaphore("render-slots").name(), "render-slots");
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        self.inner.name()
    }

    /// Sets the number of permits, unless the semaphore has been set up already; whether this
    /// call set it.
    ///
    /// # Errors
    ///
    /// As [`latchkey::PermitSemaphore::try_set_permits`](crate::PermitSemaphore::try_set_permits),
    /// and [`Error::Config`](crate::Error::Config) when called inside a Tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(slots: latchkey::blocking::PermitSemaphore) -> latchkey::Result<()> {
    /// slots.try_set_permits(4)?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_set_permits(&self, permits: u32) -> Result<bool> {
        self.inner.run(self.inner.try_set_permits(permits))
    }

    /// Adds `delta` permits (negative: takes free ones away).
    ///
    /// # Errors
    ///
    /// As [`latchkey::PermitSemaphore::add_permits`](crate::PermitSemaphore::add_permits), and
    /// [`Error::Config`](crate::Error::Config) when called inside a Tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(slots: latchkey::blocking::PermitSemaphore) -> latchkey::Result<()> {
    /// slots.add_permits(1)?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn add_permits(&self, delta: i32) -> Result<()> {
        self.inner.run(self.inner.add_permits(delta))
    }

    /// How many permits are free now (expired leases count as free).
    ///
    /// # Errors
    ///
    /// As [`latchkey::PermitSemaphore::available_permits`](crate::PermitSemaphore::available_permits),
    /// and [`Error::Config`](crate::Error::Config) when called inside a Tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(slots: latchkey::blocking::PermitSemaphore) -> latchkey::Result<()> {
    /// println!("{} free", slots.available_permits()?);
    /// # Ok(())
    /// # }
    /// ```
    pub fn available_permits(&self) -> Result<i64> {
        self.inner.run(self.inner.available_permits())
    }

    /// How many permits are leased now.
    ///
    /// # Errors
    ///
    /// As [`latchkey::PermitSemaphore::leased`](crate::PermitSemaphore::leased), and
    /// [`Error::Config`](crate::Error::Config) when called inside a Tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(slots: latchkey::blocking::PermitSemaphore) -> latchkey::Result<()> {
    /// println!("{} leased", slots.leased()?);
    /// # Ok(())
    /// # }
    /// ```
    pub fn leased(&self) -> Result<u32> {
        self.inner.run(self.inner.leased())
    }

    /// Leases `n` permits, waiting as long as it takes; the runtime renews their lease.
    ///
    /// # Errors
    ///
    /// As [`latchkey::PermitSemaphore::acquire`](crate::PermitSemaphore::acquire), and
    /// [`Error::Config`](crate::Error::Config) when called inside a Tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(slots: latchkey::blocking::PermitSemaphore) -> latchkey::Result<()> {
    /// let permits = slots.acquire(2)?;
    /// assert_eq!(permits.ids().len(), 2);
    /// # Ok(())
    /// # }
    /// ```
    pub fn acquire(&self, n: u32) -> Result<LeasedPermits> {
        let permits = self.inner.run(self.inner.acquire(n))?;
        Ok(self.root(permits))
    }

    /// Leases `n` permits, waiting at most `wait`; `Ok(None)` if they were not free in time.
    ///
    /// # Errors
    ///
    /// As [`latchkey::PermitSemaphore::try_acquire`](crate::PermitSemaphore::try_acquire), and
    /// [`Error::Config`](crate::Error::Config) when called inside a Tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(slots: latchkey::blocking::PermitSemaphore) -> latchkey::Result<()> {
    /// use std::time::Duration;
    /// if let Some(permits) = slots.try_acquire(1, Duration::ZERO)? {
    ///     permits.release()?;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_acquire(&self, n: u32, wait: Duration) -> Result<Option<LeasedPermits>> {
        let permits = self.inner.run(self.inner.try_acquire(n, wait))?;
        Ok(permits.map(|p| self.root(p)))
    }

    /// Leases `n` permits with [`PermitOptions`](crate::PermitOptions): a fixed lease and/or
    /// a bounded wait.
    ///
    /// # Errors
    ///
    /// As [`latchkey::PermitSemaphore::acquire_with`](crate::PermitSemaphore::acquire_with),
    /// and [`Error::Config`](crate::Error::Config) when called inside a Tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(slots: latchkey::blocking::PermitSemaphore) -> latchkey::Result<()> {
    /// use std::time::Duration;
    /// use latchkey::PermitOptions;
    /// let permits = slots.acquire_with(1, PermitOptions::new().lease(Duration::from_secs(60)))?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn acquire_with(&self, n: u32, options: PermitOptions) -> Result<LeasedPermits> {
        let permits = self.inner.run(self.inner.acquire_with(n, options))?;
        Ok(self.root(permits))
    }

    /// Like [`PermitSemaphore::acquire_with`], but a wait that runs out is `Ok(None)`.
    ///
    /// # Errors
    ///
    /// As [`latchkey::PermitSemaphore::try_acquire_with`](crate::PermitSemaphore::try_acquire_with),
    /// and [`Error::Config`](crate::Error::Config) when called inside a Tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(slots: latchkey::blocking::PermitSemaphore) -> latchkey::Result<()> {
    /// use std::time::Duration;
    /// use latchkey::PermitOptions;
    /// let options = PermitOptions::new().wait(Duration::from_millis(100));
    /// if let Some(permits) = slots.try_acquire_with(1, options)? {
    ///     permits.release()?;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_acquire_with(
        &self,
        n: u32,
        options: PermitOptions,
    ) -> Result<Option<LeasedPermits>> {
        let permits = self.inner.run(self.inner.try_acquire_with(n, options))?;
        Ok(permits.map(|p| self.root(p)))
    }

    /// Gives back the permits `ids` (taken and forgotten, maybe by another process).
    ///
    /// # Errors
    ///
    /// As [`latchkey::PermitSemaphore::release`](crate::PermitSemaphore::release), and
    /// [`Error::Config`](crate::Error::Config) when called inside a Tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(slots: latchkey::blocking::PermitSemaphore) -> latchkey::Result<()> {
    /// let ids = slots.acquire(1)?.forget();
    /// slots.release(&ids)?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn release(&self, ids: &[PermitId]) -> Result<()> {
        self.inner.run(self.inner.release(ids))
    }
}

/// Permits leased from a blocking [`PermitSemaphore`]: the blocking form of
/// [`latchkey::LeasedPermits`](crate::LeasedPermits). Dropping them gives them back without
/// blocking (the release is handed to the client's runtime).
///
/// # Examples
///
/// ```no_run
/// # fn f(slots: latchkey::blocking::PermitSemaphore) -> latchkey::Result<()> {
/// let permits = slots.acquire(1)?;
/// permits.release()?;
/// # Ok(())
/// # }
/// ```
#[must_use = "dropping the permits gives them back at once"]
#[derive(Debug)]
pub struct LeasedPermits {
    inner: Rooted<crate::LeasedPermits>,
}

impl LeasedPermits {
    /// The ids of the permits.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(slots: latchkey::blocking::PermitSemaphore) -> latchkey::Result<()> {
    /// for id in slots.acquire(2)?.ids() {
    ///     println!("{id}");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn ids(&self) -> &[PermitId] {
        self.inner.ids()
    }

    /// How many permits these are.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(slots: latchkey::blocking::PermitSemaphore) -> latchkey::Result<()> {
    /// assert_eq!(slots.acquire(2)?.count(), 2);
    /// # Ok(())
    /// # }
    /// ```
    pub fn count(&self) -> u32 {
        self.inner.count()
    }

    /// Whether the lease is known to be lost (a permit expired or was taken away). Does not
    /// wait.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(slots: latchkey::blocking::PermitSemaphore) -> latchkey::Result<()> {
    /// let permits = slots.acquire(1)?;
    /// assert!(!permits.is_lost());
    /// # Ok(())
    /// # }
    /// ```
    pub fn is_lost(&self) -> bool {
        self.inner.is_lost()
    }

    /// Waits up to `timeout` for the lease to be lost; whether it was.
    ///
    /// # Errors
    ///
    /// [`Error::Config`](crate::Error::Config) when called inside a Tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(slots: latchkey::blocking::PermitSemaphore) -> latchkey::Result<()> {
    /// use std::time::Duration;
    /// let permits = slots.acquire(1)?;
    /// if permits.wait_lost(Duration::from_secs(1))? {
    ///     eprintln!("permit lost");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn wait_lost(&self, timeout: Duration) -> Result<bool> {
        self.inner.rt().wait_lost(self.inner.lost(), timeout)
    }

    /// Keeps the permits leased without giving them back on drop (and stops renewing them);
    /// returns their ids for [`PermitSemaphore::release`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(slots: latchkey::blocking::PermitSemaphore) -> latchkey::Result<()> {
    /// let ids = slots.acquire(1)?.forget();
    /// # Ok(())
    /// # }
    /// ```
    pub fn forget(self) -> Vec<PermitId> {
        let (permits, rt) = self.inner.into_parts();
        let _entered = rt.enter();
        permits.forget()
    }

    /// Gives the permits back now and waits for Redis to confirm it.
    ///
    /// # Errors
    ///
    /// As [`latchkey::LeasedPermits::release`](crate::LeasedPermits::release), and
    /// [`Error::Config`](crate::Error::Config) when called inside a Tokio runtime (the permits
    /// are then given back as on drop).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(slots: latchkey::blocking::PermitSemaphore) -> latchkey::Result<()> {
    /// slots.acquire(1)?.release()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn release(self) -> Result<()> {
        self.inner.consume(|permits| permits.release())
    }
}
