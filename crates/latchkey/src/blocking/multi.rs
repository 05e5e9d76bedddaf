//! The blocking locks over several locks or servers: [`MultiLock`] and [`RedLock`], over their
//! async counterparts. Their parts may belong to different blocking clients: the operations run
//! on the runtime of the first, and every client's runtime is kept running while the handle or
//! a guard made from it lives.

use std::fmt;
use std::time::{Duration, Instant};

use super::{Client, Lock, Rooted, Rt};
use crate::error::{Error, Result};
use crate::LockOptions;

/// The runtimes of every part, kept running while a value made from them lives.
#[derive(Clone)]
struct Runtimes {
    _alive: Vec<Rt>,
}

impl fmt::Debug for Runtimes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("..")
    }
}

/// Several locks held together, for synchronous code: the blocking form of
/// [`latchkey::MultiLock`](crate::MultiLock). All of them or none; a waiter never holds one
/// while it waits for another.
///
/// # Examples
///
/// ```no_run
/// # fn main() -> latchkey::Result<()> {
/// use latchkey::blocking::{Client, MultiLock};
///
/// let client = Client::connect("redis://127.0.0.1:6379")?;
/// let both = MultiLock::new([client.lock("account:1"), client.lock("account:2")])?;
/// let guard = both.lock()?;
/// // … move money between the two accounts …
/// guard.unlock()?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct MultiLock {
    // Declared first: dropped before the runtimes it runs on.
    inner: Rooted<crate::MultiLock>,
    runtimes: Runtimes,
}

impl MultiLock {
    /// A multi-lock over `locks` (at least one), which may come from different clients.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] if `locks` is empty.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(client: latchkey::blocking::Client) -> latchkey::Result<()> {
    /// let pair = latchkey::blocking::MultiLock::new([client.lock("a"), client.lock("b")])?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(locks: impl IntoIterator<Item = Lock>) -> Result<MultiLock> {
        let locks: Vec<Lock> = locks.into_iter().collect();
        let Some(first) = locks.first() else {
            return Err(Error::invalid("locks", "no locks; give at least one"));
        };
        let rt = first.rooted().rt().clone();
        let runtimes = Runtimes {
            _alive: locks.iter().map(|l| l.rooted().rt().clone()).collect(),
        };
        let multi = {
            let _entered = rt.enter();
            crate::MultiLock::new(locks.iter().map(|l| (**l.rooted()).clone()))?
        };
        Ok(MultiLock {
            inner: rt.make(|| multi),
            runtimes,
        })
    }

    fn root(&self, guard: crate::MultiLockGuard) -> MultiLockGuard {
        MultiLockGuard {
            inner: self.inner.rt().make(|| guard),
            _runtimes: self.runtimes.clone(),
        }
    }

    /// Acquires every lock, waiting as long as it takes.
    ///
    /// # Errors
    ///
    /// As [`latchkey::MultiLock::lock`](crate::MultiLock::lock), and
    /// [`Error::Config`] when called inside a Tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(both: latchkey::blocking::MultiLock) -> latchkey::Result<()> {
    /// let guard = both.lock()?;
    /// guard.unlock()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn lock(&self) -> Result<MultiLockGuard> {
        let guard = self.inner.run(self.inner.lock())?;
        Ok(self.root(guard))
    }

    /// Acquires every lock, waiting at most `wait`; `Ok(None)` if they were not all free in
    /// time (nothing is held then).
    ///
    /// # Errors
    ///
    /// As [`latchkey::MultiLock::try_lock`](crate::MultiLock::try_lock), and
    /// [`Error::Config`] when called inside a Tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(both: latchkey::blocking::MultiLock) -> latchkey::Result<()> {
    /// use std::time::Duration;
    /// if let Some(guard) = both.try_lock(Duration::from_secs(1))? {
    ///     guard.unlock()?;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_lock(&self, wait: Duration) -> Result<Option<MultiLockGuard>> {
        let guard = self.inner.run(self.inner.try_lock(wait))?;
        Ok(guard.map(|g| self.root(g)))
    }

    /// Acquires every lock with [`LockOptions`](crate::LockOptions).
    ///
    /// # Errors
    ///
    /// As [`latchkey::MultiLock::lock_with`](crate::MultiLock::lock_with), and
    /// [`Error::Config`] when called inside a Tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(both: latchkey::blocking::MultiLock) -> latchkey::Result<()> {
    /// use std::time::Duration;
    /// let guard = both.lock_with(latchkey::LockOptions::new().lease(Duration::from_secs(10)))?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn lock_with(&self, options: LockOptions) -> Result<MultiLockGuard> {
        let guard = self.inner.run(self.inner.lock_with(options))?;
        Ok(self.root(guard))
    }

    /// Like [`MultiLock::lock_with`], but a wait that runs out is `Ok(None)`.
    ///
    /// # Errors
    ///
    /// As [`latchkey::MultiLock::try_lock_with`](crate::MultiLock::try_lock_with), and
    /// [`Error::Config`] when called inside a Tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(both: latchkey::blocking::MultiLock) -> latchkey::Result<()> {
    /// use std::time::Duration;
    /// let options = latchkey::LockOptions::new().wait(Duration::ZERO);
    /// if let Some(guard) = both.try_lock_with(options)? {
    ///     guard.unlock()?;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_lock_with(&self, options: LockOptions) -> Result<Option<MultiLockGuard>> {
        let guard = self.inner.run(self.inner.try_lock_with(options))?;
        Ok(guard.map(|g| self.root(g)))
    }
}

/// A hold of every lock of a blocking [`MultiLock`]: the blocking form of
/// [`latchkey::MultiLockGuard`](crate::MultiLockGuard). Dropping it releases every lock
/// without blocking.
///
/// # Examples
///
/// ```no_run
/// # fn f(both: latchkey::blocking::MultiLock) -> latchkey::Result<()> {
/// let guard = both.lock()?;
/// println!("tokens {:?}", guard.fencing_tokens());
/// guard.unlock()?;
/// # Ok(())
/// # }
/// ```
#[must_use = "dropping the guard releases the locks at once"]
#[derive(Debug)]
pub struct MultiLockGuard {
    inner: Rooted<crate::MultiLockGuard>,
    _runtimes: Runtimes,
}

impl MultiLockGuard {
    /// The fencing token of each lock, in the order the locks were given.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(both: latchkey::blocking::MultiLock) -> latchkey::Result<()> {
    /// let tokens = both.lock()?.fencing_tokens();
    /// # Ok(())
    /// # }
    /// ```
    pub fn fencing_tokens(&self) -> Vec<u64> {
        self.inner.fencing_tokens()
    }

    /// Whether any of the holds is known to be lost. Does not wait.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(both: latchkey::blocking::MultiLock) -> latchkey::Result<()> {
    /// let guard = both.lock()?;
    /// assert!(!guard.is_lost());
    /// # Ok(())
    /// # }
    /// ```
    pub fn is_lost(&self) -> bool {
        self.inner.is_lost()
    }

    /// Waits up to `timeout` for any of the holds to be lost; whether one was.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] when called inside a Tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(both: latchkey::blocking::MultiLock) -> latchkey::Result<()> {
    /// use std::time::Duration;
    /// let guard = both.lock()?;
    /// if guard.wait_lost(Duration::from_secs(1))? {
    ///     eprintln!("a lock was lost");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn wait_lost(&self, timeout: Duration) -> Result<bool> {
        self.inner.rt().wait_lost(self.inner.lost(), timeout)
    }

    /// Releases every lock now and waits for Redis to confirm it.
    ///
    /// # Errors
    ///
    /// As [`latchkey::MultiLockGuard::unlock`](crate::MultiLockGuard::unlock), and
    /// [`Error::Config`] when called inside a Tokio runtime (the guard is
    /// then dropped, which hands the releases to the runtime).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(both: latchkey::blocking::MultiLock) -> latchkey::Result<()> {
    /// both.lock()?.unlock()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn unlock(self) -> Result<()> {
        self.inner.consume(|guard| guard.unlock())
    }
}

/// A lock over independent Redis servers (the Redlock algorithm), for synchronous code: the
/// blocking form of [`latchkey::RedLock`](crate::RedLock), over one blocking client per server.
///
/// # Examples
///
/// ```no_run
/// # fn main() -> latchkey::Result<()> {
/// use latchkey::blocking::{Client, RedLock};
///
/// let mut nodes = Vec::new();
/// for url in ["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"] {
///     nodes.push(Client::connect_lazy(latchkey::Client::builder(url))?);
/// }
/// let guard = RedLock::new("reports:nightly", nodes)?.lock()?;
/// guard.unlock()?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct RedLock {
    inner: Rooted<crate::RedLock>,
    runtimes: Runtimes,
}

/// Settings of a blocking [`RedLock`], made with [`RedLock::builder`]: those of
/// [`latchkey::RedLockBuilder`](crate::RedLockBuilder).
///
/// # Examples
///
/// ```no_run
/// # fn f(nodes: Vec<latchkey::blocking::Client>) -> latchkey::Result<()> {
/// use std::time::Duration;
/// let lock = latchkey::blocking::RedLock::builder("reports:nightly", nodes)
///     .per_node_timeout(Duration::from_millis(100))
///     .build()?;
/// # Ok(())
/// # }
/// ```
#[must_use = "a builder does nothing until `build` is called"]
#[derive(Debug)]
pub struct RedLockBuilder {
    name: String,
    clients: Vec<Client>,
    per_node_timeout: Option<Duration>,
    retry_delay: Option<Duration>,
    fencing: Option<bool>,
}

impl RedLockBuilder {
    /// How long one node may take to answer an acquire (see
    /// [`latchkey::RedLockBuilder::per_node_timeout`](crate::RedLockBuilder::per_node_timeout)).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(nodes: Vec<latchkey::blocking::Client>) -> latchkey::Result<()> {
    /// use std::time::Duration;
    /// let lock = latchkey::blocking::RedLock::builder("reports:nightly", nodes)
    ///     .per_node_timeout(Duration::from_millis(100))
    ///     .build()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn per_node_timeout(mut self, timeout: Duration) -> RedLockBuilder {
        self.per_node_timeout = Some(timeout);
        self
    }

    /// The pause between two rounds of a waiting acquire (see
    /// [`latchkey::RedLockBuilder::retry_delay`](crate::RedLockBuilder::retry_delay)).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(nodes: Vec<latchkey::blocking::Client>) -> latchkey::Result<()> {
    /// use std::time::Duration;
    /// let lock = latchkey::blocking::RedLock::builder("reports:nightly", nodes)
    ///     .retry_delay(Duration::from_millis(50))
    ///     .build()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn retry_delay(mut self, delay: Duration) -> RedLockBuilder {
        self.retry_delay = Some(delay);
        self
    }

    /// Whether holds get fencing tokens (see
    /// [`latchkey::RedLockBuilder::fencing`](crate::RedLockBuilder::fencing)).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(nodes: Vec<latchkey::blocking::Client>) -> latchkey::Result<()> {
    /// let lock = latchkey::blocking::RedLock::builder("reports:nightly", nodes)
    ///     .fencing(false)
    ///     .build()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn fencing(mut self, on: bool) -> RedLockBuilder {
        self.fencing = Some(on);
        self
    }

    /// The RedLock.
    ///
    /// # Errors
    ///
    /// As [`latchkey::RedLockBuilder::build`](crate::RedLockBuilder::build).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(nodes: Vec<latchkey::blocking::Client>) -> latchkey::Result<()> {
    /// let lock = latchkey::blocking::RedLock::builder("reports:nightly", nodes).build()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn build(self) -> Result<RedLock> {
        let asyncs: Vec<crate::Client> =
            self.clients.iter().map(|c| c.as_async().clone()).collect();
        let mut builder = crate::RedLock::builder(self.name, asyncs);
        if let Some(timeout) = self.per_node_timeout {
            builder = builder.per_node_timeout(timeout);
        }
        if let Some(delay) = self.retry_delay {
            builder = builder.retry_delay(delay);
        }
        if let Some(on) = self.fencing {
            builder = builder.fencing(on);
        }
        let Some(first) = self.clients.first() else {
            // Refused for too few nodes, with the async builder's own message.
            return Err(builder
                .build()
                .err()
                .unwrap_or_else(|| Error::invalid("redlock nodes", "no nodes")));
        };
        let rt = first.rt().clone();
        let redlock = {
            let _entered = rt.enter();
            builder.build()?
        };
        Ok(RedLock {
            inner: rt.make(|| redlock),
            runtimes: Runtimes {
                _alive: self.clients.iter().map(|c| c.rt().clone()).collect(),
            },
        })
    }
}

impl RedLock {
    /// A RedLock named `name` over one blocking client per server, with default settings.
    ///
    /// # Errors
    ///
    /// As [`latchkey::RedLock::new`](crate::RedLock::new).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(a: latchkey::blocking::Client, b: latchkey::blocking::Client, c: latchkey::blocking::Client) -> latchkey::Result<()> {
    /// let lock = latchkey::blocking::RedLock::new("reports:nightly", [a, b, c])?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(
        name: impl Into<String>,
        clients: impl IntoIterator<Item = Client>,
    ) -> Result<RedLock> {
        RedLock::builder(name, clients).build()
    }

    /// A [`RedLockBuilder`] for a RedLock named `name` over one blocking client per server.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(nodes: Vec<latchkey::blocking::Client>) -> latchkey::Result<()> {
    /// let lock = latchkey::blocking::RedLock::builder("reports:nightly", nodes).build()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn builder(
        name: impl Into<String>,
        clients: impl IntoIterator<Item = Client>,
    ) -> RedLockBuilder {
        RedLockBuilder {
            name: name.into(),
            clients: clients.into_iter().collect(),
            per_node_timeout: None,
            retry_delay: None,
            fencing: None,
        }
    }

    fn root(&self, guard: crate::RedLockGuard) -> RedLockGuard {
        RedLockGuard {
            inner: self.inner.rt().make(|| guard),
            _runtimes: self.runtimes.clone(),
        }
    }

    /// The lock's name as given.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(lock: latchkey::blocking::RedLock) {
    /// println!("{}", lock.name());
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        self.inner.name()
    }

    /// How many nodes the lock spans.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(lock: latchkey::blocking::RedLock) {
    /// assert!(lock.node_count() >= 3);
    /// # }
    /// ```
    pub fn node_count(&self) -> usize {
        self.inner.node_count()
    }

    /// How many nodes must grant the lock.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(lock: latchkey::blocking::RedLock) {
    /// assert_eq!(lock.quorum(), lock.node_count() / 2 + 1);
    /// # }
    /// ```
    pub fn quorum(&self) -> usize {
        self.inner.quorum()
    }

    /// The indexes of the nodes currently known to be down (see
    /// [`latchkey::RedLock::down_nodes`](crate::RedLock::down_nodes)).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(lock: latchkey::blocking::RedLock) {
    /// println!("down: {:?}", lock.down_nodes());
    /// # }
    /// ```
    pub fn down_nodes(&self) -> Vec<usize> {
        self.inner.down_nodes()
    }

    /// Acquires the lock on a quorum of nodes, waiting as long as it takes.
    ///
    /// # Errors
    ///
    /// As [`latchkey::RedLock::lock`](crate::RedLock::lock), and
    /// [`Error::Config`] when called inside a Tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(lock: latchkey::blocking::RedLock) -> latchkey::Result<()> {
    /// let guard = lock.lock()?;
    /// guard.unlock()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn lock(&self) -> Result<RedLockGuard> {
        let guard = self.inner.run(self.inner.lock())?;
        Ok(self.root(guard))
    }

    /// Acquires the lock, waiting at most `wait`; `Ok(None)` if no quorum was granted in time.
    ///
    /// # Errors
    ///
    /// As [`latchkey::RedLock::try_lock`](crate::RedLock::try_lock), and
    /// [`Error::Config`] when called inside a Tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(lock: latchkey::blocking::RedLock) -> latchkey::Result<()> {
    /// use std::time::Duration;
    /// if let Some(guard) = lock.try_lock(Duration::from_secs(1))? {
    ///     guard.unlock()?;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_lock(&self, wait: Duration) -> Result<Option<RedLockGuard>> {
        let guard = self.inner.run(self.inner.try_lock(wait))?;
        Ok(guard.map(|g| self.root(g)))
    }

    /// Acquires the lock with [`LockOptions`](crate::LockOptions).
    ///
    /// # Errors
    ///
    /// As [`latchkey::RedLock::lock_with`](crate::RedLock::lock_with), and
    /// [`Error::Config`] when called inside a Tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(lock: latchkey::blocking::RedLock) -> latchkey::Result<()> {
    /// use std::time::Duration;
    /// let guard = lock.lock_with(latchkey::LockOptions::new().lease(Duration::from_secs(10)))?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn lock_with(&self, options: LockOptions) -> Result<RedLockGuard> {
        let guard = self.inner.run(self.inner.lock_with(options))?;
        Ok(self.root(guard))
    }

    /// Like [`RedLock::lock_with`], but a wait that runs out is `Ok(None)`.
    ///
    /// # Errors
    ///
    /// As [`latchkey::RedLock::try_lock_with`](crate::RedLock::try_lock_with), and
    /// [`Error::Config`] when called inside a Tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(lock: latchkey::blocking::RedLock) -> latchkey::Result<()> {
    /// use std::time::Duration;
    /// let options = latchkey::LockOptions::new().wait(Duration::ZERO);
    /// if let Some(guard) = lock.try_lock_with(options)? {
    ///     guard.unlock()?;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn try_lock_with(&self, options: LockOptions) -> Result<Option<RedLockGuard>> {
        let guard = self.inner.run(self.inner.try_lock_with(options))?;
        Ok(guard.map(|g| self.root(g)))
    }
}

/// A hold of a blocking [`RedLock`] on a quorum of nodes: the blocking form of
/// [`latchkey::RedLockGuard`](crate::RedLockGuard). Dropping it releases the lock on every node
/// without blocking.
///
/// # Examples
///
/// ```no_run
/// # fn f(lock: latchkey::blocking::RedLock) -> latchkey::Result<()> {
/// let guard = lock.lock()?;
/// println!("granted by nodes {:?}", guard.nodes());
/// guard.unlock()?;
/// # Ok(())
/// # }
/// ```
#[must_use = "dropping the guard releases the lock at once"]
#[derive(Debug)]
pub struct RedLockGuard {
    inner: Rooted<crate::RedLockGuard>,
    _runtimes: Runtimes,
}

impl RedLockGuard {
    /// The fencing token of this hold; `None` when fencing is turned off.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(lock: latchkey::blocking::RedLock) -> latchkey::Result<()> {
    /// let token = lock.lock()?.fencing_token();
    /// # Ok(())
    /// # }
    /// ```
    pub fn fencing_token(&self) -> Option<u64> {
        self.inner.fencing_token()
    }

    /// The owner id of this hold on every node.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(lock: latchkey::blocking::RedLock) -> latchkey::Result<()> {
    /// println!("{}", lock.lock()?.owner_id());
    /// # Ok(())
    /// # }
    /// ```
    pub fn owner_id(&self) -> &str {
        self.inner.owner_id()
    }

    /// The indexes of the nodes that granted the lock.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(lock: latchkey::blocking::RedLock) -> latchkey::Result<()> {
    /// let guard = lock.lock()?;
    /// assert!(guard.nodes().len() >= lock.quorum());
    /// # Ok(())
    /// # }
    /// ```
    pub fn nodes(&self) -> Vec<usize> {
        self.inner.nodes()
    }

    /// The end of the validity computed at acquire time (see
    /// [`latchkey::RedLockGuard::valid_until`](crate::RedLockGuard::valid_until)).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(lock: latchkey::blocking::RedLock) -> latchkey::Result<()> {
    /// let guard = lock.lock()?;
    /// println!("valid for {:?}", guard.valid_until() - std::time::Instant::now());
    /// # Ok(())
    /// # }
    /// ```
    pub fn valid_until(&self) -> Instant {
        self.inner.valid_until().into_std()
    }

    /// Whether the quorum is known to be lost. Does not wait.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(lock: latchkey::blocking::RedLock) -> latchkey::Result<()> {
    /// assert!(!lock.lock()?.is_lost());
    /// # Ok(())
    /// # }
    /// ```
    pub fn is_lost(&self) -> bool {
        self.inner.is_lost()
    }

    /// Waits up to `timeout` for the quorum to be lost; whether it was.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] when called inside a Tokio runtime.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(lock: latchkey::blocking::RedLock) -> latchkey::Result<()> {
    /// use std::time::Duration;
    /// let guard = lock.lock()?;
    /// if guard.wait_lost(Duration::from_secs(1))? {
    ///     eprintln!("quorum lost");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn wait_lost(&self, timeout: Duration) -> Result<bool> {
        self.inner.rt().wait_lost(self.inner.lost(), timeout)
    }

    /// Releases the lock on every node and waits for the answers.
    ///
    /// # Errors
    ///
    /// As [`latchkey::RedLockGuard::unlock`](crate::RedLockGuard::unlock), and
    /// [`Error::Config`] when called inside a Tokio runtime (the guard is
    /// then dropped, which hands the releases to the runtimes).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(lock: latchkey::blocking::RedLock) -> latchkey::Result<()> {
    /// lock.lock()?.unlock()?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn unlock(self) -> Result<()> {
        self.inner.consume(|guard| guard.unlock())
    }
}
