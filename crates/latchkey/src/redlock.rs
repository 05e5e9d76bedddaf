//! RedLock: one lock over N independent Redis servers, held by a majority of them.
//!
//! The algorithm is the one described at <https://redis.io/docs/latest/develop/use/patterns/distributed-locks/>
//! (Redisson's `RedissonRedLock`), with parallel requests, a fencing token and quorum renewal.

use std::collections::HashSet;
use std::fmt;
use std::future::Future;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use futures_util::future::join_all;
use futures_util::stream::{FuturesUnordered, StreamExt};
use redis::{IntoConnectionInfo, Script};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::client::{check_lease, check_name, Client};
use crate::error::{Error, Result};
use crate::lock::{LockKeys, LockOptions};
use crate::scripts::UNLOCK_MESSAGE;
use crate::semaphore::unexpected;
use crate::task::detached;
use crate::watchdog::{HoldKey, Lease, LockRenewal, Task, Ticket};

static REDLOCK_ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(crate::scripts::lua!("redlock_acquire.lua")));
static REDLOCK_FENCE: LazyLock<Script> =
    LazyLock::new(|| Script::new(crate::scripts::lua!("redlock_fence.lua")));
static REDLOCK_RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(crate::scripts::lua!("redlock_release.lua")));

/// The default bound on one node's answer (see [`RedLockBuilder::per_node_timeout`]).
pub const DEFAULT_PER_NODE_TIMEOUT: Duration = Duration::from_millis(50);

/// The default base delay between attempts (see [`RedLockBuilder::retry_delay`]).
pub const DEFAULT_RETRY_DELAY: Duration = Duration::from_millis(50);

/// How many attempts in a row may get answers from fewer than a majority of the nodes before
/// an acquire gives up with [`Error::QuorumUnavailable`].
const UNAVAILABLE_ATTEMPTS: u32 = 3;

/// A lock over N independent Redis servers (N odd, at least 3), granted when a majority of them
/// grant it: the RedLock algorithm.
///
/// Made by [`RedLock::new`] or [`RedLock::builder`] from one [`Client`] per server. On each node
/// the lock is a Redisson `RLock` hash at key `name` (field: a new owner id per acquire), so it
/// excludes Redisson's `RedissonRedLock` over `RLock`s of the same name, and latchkey
/// [`Lock`](crate::Lock)s of that name on those servers.
///
/// # How an acquire works
///
/// 1. The acquire script is sent to **every node in parallel**, each answer bounded by the
///    per-node timeout (default [`DEFAULT_PER_NODE_TIMEOUT`]), so a dead or stalled node costs at
///    most that long.
/// 2. It succeeds when at least `N/2 + 1` nodes granted it (and, with fencing, confirmed the
///    fencing token) and time is left: the validity is
///    `TTL − elapsed − drift`, with `drift = TTL/100 + 2 ms` and `elapsed` measured on the
///    monotonic clock from before the first request to after the last answer.
/// 3. Otherwise the lock is released on **all** nodes (including those that did not answer:
///    a late grant is undone), and the acquire retries after a random delay
///    (between ½ and 1½ times the retry delay), so that competing clients fall out of step.
///    When fewer than a majority of the nodes *answered at all* in 3 attempts in a row (or in
///    the last attempt before the wait ran out), it stops with [`Error::QuorumUnavailable`]:
///    waiting does not bring dead servers back. Dead servers refuse connections at once, so
///    this takes a few retry delays; stalled ones take 3 per-node timeouts.
///
/// With the default lease the hold is renewed by each node's client watchdog, on every node that
/// granted it; [`RedLockGuard::lost`] fires once fewer than a majority still hold it.
///
/// # Fencing tokens
///
/// Each node keeps a counter (`redisson_lock_token:{name}`, shared with [`Lock`](crate::Lock)),
/// incremented by every new hold of that node. A RedLock hold's token is the largest counter of
/// the nodes that granted it; before the acquire returns, a second parallel round raises the
/// counter of every granting node that is behind to that token, **while the hold is still in
/// place there**, and a majority must be at the token (a node that granted with the token as its
/// counter is; when every node is up the counters move in step and this round is skipped). Any two holds that got a token share at least one node that
/// confirmed both; whichever held that node later incremented past the other's token. So tokens
/// strictly increase in the order holders got the lock, even if a clock jump made two holds
/// overlap in time: storage that refuses a token smaller than one it has seen stays safe. This
/// assumes nodes do not lose their counters (see below). Fencing costs one more round trip; turn
/// it off with [`RedLockBuilder::fencing`] if nothing downstream checks tokens.
///
/// # What RedLock does not guarantee
///
/// * **Clocks.** A node expires a lease with its own clock. If a node's clock jumps forward (an
///   operator or NTP step, not slewing), a lease can end early there and a second client can win
///   a majority while the first still believes it holds the lock. Run the servers with slewing
///   time sync only. The client side uses the monotonic clock; a process paused (GC, swap,
///   SIGSTOP) longer than the validity can act on a lock it no longer holds — only the fencing
///   token protects the storage then.
/// * **Restarts.** A node that restarts without the lock key forgets the hold: with a majority
///   of 3 being 2, one restart plus one other client can give two holders. The operator must run
///   every node with `appendonly yes` and `appendfsync always`, or keep a restarted node out of
///   service for longer than the longest lease ([`MAX_LEASE`](crate::MAX_LEASE) for fixed leases,
///   the watchdog timeout otherwise) before it rejoins. The same goes for the fencing counters.
/// * **Replication.** Each node must be a standalone primary (or a primary whose failover cannot
///   lose acknowledged writes): a replica promoted after an asynchronous write loss is a node
///   that forgot the lock.
/// * **Reentrancy.** A RedLock is not reentrant: every acquire is a new owner, so acquiring it
///   again while holding it waits for yourself.
///
/// # Examples
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> latchkey::Result<()> {
/// use latchkey::{Client, RedLock};
///
/// let mut clients = Vec::new();
/// for url in ["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"] {
///     clients.push(Client::connect(url).await?);
/// }
/// let lock = RedLock::new("reports:nightly", clients)?;
///
/// let guard = lock.lock().await?;
/// let token = guard.fencing_token(); // pass it to the storage you write to
/// // … the critical section …
/// guard.unlock().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RedLock {
    inner: Arc<RedLockInner>,
}

struct RedLockInner {
    name: String,
    nodes: Vec<Node>,
    quorum: usize,
    per_node_timeout: Duration,
    retry_delay: Duration,
    fencing: bool,
}

struct Node {
    client: Client,
    key: Arc<str>,
    token_key: Arc<str>,
    channel: Arc<str>,
}

impl fmt::Debug for RedLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = &self.inner;
        f.debug_struct("RedLock")
            .field("name", &inner.name)
            .field("nodes", &inner.nodes.len())
            .field("quorum", &inner.quorum)
            .field("per_node_timeout", &inner.per_node_timeout)
            .field("retry_delay", &inner.retry_delay)
            .field("fencing", &inner.fencing)
            .finish()
    }
}

/// Settings of a [`RedLock`], made with [`RedLock::builder`].
///
/// # Examples
///
/// ```no_run
/// # fn f(clients: Vec<latchkey::Client>) -> latchkey::Result<()> {
/// use std::time::Duration;
///
/// let lock = latchkey::RedLock::builder("reports:nightly", clients)
///     .per_node_timeout(Duration::from_millis(20))
///     .retry_delay(Duration::from_millis(100))
///     .build()?;
/// # Ok(())
/// # }
/// ```
#[must_use = "a builder does nothing until `build` is called"]
pub struct RedLockBuilder {
    name: String,
    clients: Vec<Client>,
    per_node_timeout: Duration,
    retry_delay: Duration,
    fencing: bool,
}

impl fmt::Debug for RedLockBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedLockBuilder")
            .field("name", &self.name)
            .field("nodes", &self.clients.len())
            .field("per_node_timeout", &self.per_node_timeout)
            .field("retry_delay", &self.retry_delay)
            .field("fencing", &self.fencing)
            .finish()
    }
}

impl RedLockBuilder {
    /// How long one node may take to answer one request before it counts as failed (default
    /// [`DEFAULT_PER_NODE_TIMEOUT`]). Keep it much shorter than the lease: it bounds the time a
    /// dead node costs every acquire. Between 1 ms and 1 hour.
    pub fn per_node_timeout(mut self, timeout: Duration) -> RedLockBuilder {
        self.per_node_timeout = timeout;
        self
    }

    /// The base delay between two attempts when the lock is busy (default
    /// [`DEFAULT_RETRY_DELAY`]); each delay is random between ½ and 1½ times it. At most 1 hour.
    pub fn retry_delay(mut self, delay: Duration) -> RedLockBuilder {
        self.retry_delay = delay;
        self
    }

    /// Whether to compute fencing tokens (default `true`; see [`RedLock`]). Without them an
    /// acquire is one round trip shorter and [`RedLockGuard::fencing_token`] is `None`.
    pub fn fencing(mut self, on: bool) -> RedLockBuilder {
        self.fencing = on;
        self
    }

    /// Checks the settings and makes the [`RedLock`]. Sends nothing.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad name, fewer than 3 nodes, an even number of nodes,
    /// two clients for the same server address (`host:port`, whatever the database; names are
    /// compared as written, so `localhost` and `127.0.0.1` are not recognised as the same), or
    /// timeouts out of range.
    pub fn build(self) -> Result<RedLock> {
        check_name(&self.name)?;
        let n = self.clients.len();
        if n < 3 {
            return Err(Error::invalid(
                "redlock nodes",
                format!("{n} nodes; RedLock needs at least 3 independent servers"),
            ));
        }
        if n % 2 == 0 {
            return Err(Error::invalid(
                "redlock nodes",
                format!(
                    "{n} nodes; use an odd number (an even number tolerates no more failures than one node fewer)"
                ),
            ));
        }
        let mut seen = HashSet::new();
        for client in &self.clients {
            let addr = node_address(client.inner.config.url())?;
            if !seen.insert(addr.clone()) {
                return Err(Error::invalid(
                    "redlock nodes",
                    format!("{addr} is given twice; every node must be an independent server"),
                ));
            }
        }
        if self.per_node_timeout < Duration::from_millis(1)
            || self.per_node_timeout > Duration::from_secs(3600)
        {
            return Err(Error::invalid(
                "per-node timeout",
                format!(
                    "{:?} is out of range; use 1 ms to 1 hour",
                    self.per_node_timeout
                ),
            ));
        }
        if self.retry_delay > Duration::from_secs(3600) {
            return Err(Error::invalid(
                "retry delay",
                format!("{:?} is out of range; use at most 1 hour", self.retry_delay),
            ));
        }
        let keys = LockKeys::new(&self.name);
        let key: Arc<str> = Arc::from(keys.key);
        let token_key: Arc<str> = Arc::from(keys.token);
        let channel: Arc<str> = Arc::from(keys.channel);
        let nodes = self
            .clients
            .into_iter()
            .map(|client| Node {
                client,
                key: key.clone(),
                token_key: token_key.clone(),
                channel: channel.clone(),
            })
            .collect();
        Ok(RedLock {
            inner: Arc::new(RedLockInner {
                name: self.name,
                nodes,
                quorum: n / 2 + 1,
                per_node_timeout: self.per_node_timeout,
                retry_delay: self.retry_delay,
                fencing: self.fencing,
            }),
        })
    }
}

/// `host:port` (or the socket path) of a URL, for the distinct-nodes check.
fn node_address(url: &str) -> Result<String> {
    let info = url.into_connection_info().map_err(|e| Error::Config {
        reason: format!("cannot read a redis url: {e}"),
    })?;
    Ok(match info.addr() {
        redis::ConnectionAddr::Tcp(host, port)
        | redis::ConnectionAddr::TcpTls { host, port, .. } => {
            let host = host.trim_start_matches('[').trim_end_matches(']');
            format!("{}:{port}", host.to_ascii_lowercase())
        }
        redis::ConnectionAddr::Unix(path) => path.display().to_string(),
        other => format!("{other:?}"),
    })
}

/// What one node answered to the acquire script.
enum NodeReply {
    Granted { counter: u64 },
    Held,
    Failed(Error),
}

enum Attempt {
    Granted(RedLockGuard),
    /// Enough nodes answered, but not enough granted (or time ran out): retry.
    Busy,
    /// Fewer nodes than a majority answered.
    Unavailable {
        granted: usize,
    },
}

impl RedLock {
    /// A RedLock named `name` over one client per server, with default settings.
    ///
    /// # Errors
    ///
    /// As [`RedLockBuilder::build`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(a: latchkey::Client, b: latchkey::Client, c: latchkey::Client) -> latchkey::Result<()> {
    /// let lock = latchkey::RedLock::new("reports:nightly", [a, b, c])?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(
        name: impl Into<String>,
        clients: impl IntoIterator<Item = Client>,
    ) -> Result<RedLock> {
        RedLock::builder(name, clients).build()
    }

    /// A [`RedLockBuilder`] for a RedLock named `name` over one client per server.
    pub fn builder(
        name: impl Into<String>,
        clients: impl IntoIterator<Item = Client>,
    ) -> RedLockBuilder {
        RedLockBuilder {
            name: name.into(),
            clients: clients.into_iter().collect(),
            per_node_timeout: DEFAULT_PER_NODE_TIMEOUT,
            retry_delay: DEFAULT_RETRY_DELAY,
            fencing: true,
        }
    }

    /// The lock's name (its key on every node).
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// How many nodes there are.
    pub fn node_count(&self) -> usize {
        self.inner.nodes.len()
    }

    /// How many nodes must grant the lock: `N/2 + 1`.
    pub fn quorum(&self) -> usize {
        self.inner.quorum
    }

    /// Acquires the lock on a majority of the nodes, retrying as long as it is busy. The lease
    /// on each node is its client's watchdog timeout, renewed by the watchdog until the guard is
    /// released.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe. Dropping the future leaves nothing locked and no renewal behind: an attempt
    /// in flight completes in its own task, and a hold it got is released on every node by the
    /// clients' background tasks.
    ///
    /// # Errors
    ///
    /// [`Error::QuorumUnavailable`] when 3 attempts in a row get an answer from fewer than a
    /// majority of the nodes, each within the per-node timeout (whatever was granted is
    /// released first); [`Error::WrongType`] if a node holds another type at the key.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(lock: latchkey::RedLock) -> latchkey::Result<()> {
    /// let guard = lock.lock().await?;
    /// guard.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn lock(&self) -> Result<RedLockGuard> {
        match self.acquire(Lease::Watchdog, None).await? {
            Some(guard) => Ok(guard),
            None => unreachable!("an unbounded wait only ends with the lock"),
        }
    }

    /// Tries to acquire the lock, retrying for at most `wait`; `Ok(None)` if it stayed busy.
    /// `Duration::ZERO` makes one attempt.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`RedLock::lock`].
    ///
    /// # Errors
    ///
    /// As [`RedLock::lock`] (a wait that runs out while fewer than a majority of the nodes
    /// answer is [`Error::QuorumUnavailable`] too, not `Ok(None)`), and
    /// [`Error::InvalidArgument`] if `wait` is too large to add to the clock.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(lock: latchkey::RedLock) -> latchkey::Result<()> {
    /// use std::time::Duration;
    /// if let Some(guard) = lock.try_lock(Duration::from_millis(500)).await? {
    ///     guard.unlock().await?;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_lock(&self, wait: Duration) -> Result<Option<RedLockGuard>> {
        self.acquire(Lease::Watchdog, Some(deadline_after(wait)?))
            .await
    }

    /// Acquires the lock with [`LockOptions`]: a fixed lease (no watchdog; the guard's
    /// [`valid_until`](RedLockGuard::valid_until) is the end of the safe period) and/or a bounded
    /// wait.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`RedLock::lock`].
    ///
    /// # Errors
    ///
    /// As [`RedLock::lock`]; [`Error::WaitTimedOut`] if a wait was given and ran out;
    /// [`Error::InvalidArgument`] for a lease out of range or a wait too large.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(lock: latchkey::RedLock) -> latchkey::Result<()> {
    /// use std::time::Duration;
    /// use latchkey::LockOptions;
    ///
    /// let guard = lock
    ///     .lock_with(LockOptions::new().lease(Duration::from_secs(10)).wait(Duration::from_secs(2)))
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn lock_with(&self, options: LockOptions) -> Result<RedLockGuard> {
        let started = std::time::Instant::now();
        match self.try_lock_with(options).await? {
            Some(guard) => Ok(guard),
            None => Err(Error::WaitTimedOut {
                name: self.inner.name.clone(),
                waited: started.elapsed(),
            }),
        }
    }

    /// Like [`RedLock::lock_with`], but a wait that runs out is `Ok(None)`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`RedLock::lock`].
    ///
    /// # Errors
    ///
    /// As [`RedLock::lock_with`], except for running out of time.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(lock: latchkey::RedLock) -> latchkey::Result<()> {
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
    pub async fn try_lock_with(&self, options: LockOptions) -> Result<Option<RedLockGuard>> {
        let lease = match options.lease_value() {
            Some(lease) => {
                check_lease(lease)?;
                Lease::Fixed(lease)
            }
            None => Lease::Watchdog,
        };
        let deadline = options.wait_value().map(deadline_after).transpose()?;
        self.acquire(lease, deadline).await
    }

    async fn acquire(
        &self,
        lease: Lease,
        deadline: Option<Instant>,
    ) -> Result<Option<RedLockGuard>> {
        let inner = &self.inner;
        // One owner for the whole call: a late grant of an earlier attempt is simply kept.
        let owner: Arc<str> = Arc::from(inner.nodes[0].client.next_owner());
        let mut unavailable = 0;
        loop {
            let redlock = self.clone();
            let attempt_owner = owner.clone();
            let attempt = detached(Box::pin(async move {
                redlock.attempt(attempt_owner, lease).await
            }))
            .await??;
            match attempt {
                Attempt::Granted(guard) => return Ok(Some(guard)),
                Attempt::Unavailable { granted } => {
                    unavailable += 1;
                    // A stall can make live nodes miss one short per-node timeout; nodes that
                    // miss several attempts in a row are down.
                    if unavailable == UNAVAILABLE_ATTEMPTS
                        || deadline.is_some_and(|d| Instant::now() >= d)
                    {
                        return Err(Error::QuorumUnavailable {
                            acquired: granted,
                            nodes: inner.nodes.len(),
                            quorum: inner.quorum,
                        });
                    }
                }
                Attempt::Busy => unavailable = 0,
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return Ok(None);
            }
            let base = inner.retry_delay.as_micros() as u64;
            let delay = Duration::from_micros(if base == 0 {
                0
            } else {
                rand::random_range(base / 2..=base + base / 2)
            });
            let mut until = now + delay;
            if let Some(d) = deadline {
                until = until.min(d);
            }
            tokio::time::sleep_until(until).await;
        }
    }

    fn lease_ms(node: &Node, lease: Lease) -> u64 {
        match lease {
            Lease::Watchdog => node.client.inner.config.watchdog_timeout.as_millis() as u64,
            Lease::Fixed(d) => d.as_millis() as u64,
        }
    }

    /// One attempt on every node; run in its own task by [`RedLock::acquire`].
    async fn attempt(&self, owner: Arc<str>, lease: Lease) -> Result<Attempt> {
        let inner = &self.inner;
        let start = Instant::now();
        let requests = inner.nodes.iter().map(|node| {
            let owner = &owner;
            async move {
                let mut invocation = REDLOCK_ACQUIRE.prepare_invoke();
                invocation
                    .key(&*node.key)
                    .key(&*node.token_key)
                    .arg(RedLock::lease_ms(node, lease))
                    .arg(&**owner);
                let reply: Result<Vec<i64>> = node
                    .client
                    .inner
                    .conn
                    .script_within(
                        &invocation,
                        "acquiring a redlock",
                        &inner.name,
                        inner.per_node_timeout,
                    )
                    .await;
                match reply {
                    Ok(reply) => match reply.as_slice() {
                        [1, counter] => NodeReply::Granted {
                            counter: (*counter).max(0) as u64,
                        },
                        [0, _] => NodeReply::Held,
                        other => NodeReply::Failed(unexpected(
                            "unexpected reply from the redlock script",
                            other,
                        )),
                    },
                    Err(e) => NodeReply::Failed(e),
                }
            }
        });
        let replies = join_all(requests).await;
        let mut granted = Vec::new();
        let mut answered = 0;
        let mut wrong_type = None;
        for (i, reply) in replies.into_iter().enumerate() {
            match reply {
                NodeReply::Granted { counter } => {
                    granted.push((i, counter));
                    answered += 1;
                }
                NodeReply::Held => answered += 1,
                NodeReply::Failed(e) if e.is_wrong_type() => {
                    wrong_type.get_or_insert(e);
                }
                NodeReply::Failed(e) => {
                    tracing::debug!(node = i, error = %e.chain(), lock = %inner.name, "redlock node failed");
                }
            }
        }
        if let Some(e) = wrong_type {
            self.release_all(&owner).await;
            return Err(e);
        }

        let mut confirmed = granted.len();
        let mut fencing_token = None;
        if confirmed >= inner.quorum && inner.fencing {
            let token = granted.iter().map(|(_, c)| *c).max().unwrap_or(0);
            // A node whose counter is the token already confirmed it (it was read while the hold
            // was in place there); only the others are raised. With every node up the counters
            // move in step, and this round is skipped.
            let behind: Vec<(usize, u64)> = granted
                .iter()
                .copied()
                .filter(|(_, c)| *c < token)
                .collect();
            confirmed -= behind.len();
            if !behind.is_empty() {
                confirmed += self.fence(&owner, &behind, token).await;
            }
            fencing_token = Some(token);
        }

        // Validity: TTL − elapsed − drift, on the monotonic clock.
        let ttl = inner
            .nodes
            .iter()
            .map(|node| RedLock::lease_ms(node, lease))
            .min()
            .map_or(Duration::ZERO, Duration::from_millis);
        let drift = ttl / 100 + Duration::from_millis(2);
        let valid_until = start + ttl.saturating_sub(drift);
        if confirmed >= inner.quorum && Instant::now() < valid_until {
            return Ok(Attempt::Granted(self.grant(
                owner,
                lease,
                &granted,
                start,
                valid_until,
                fencing_token,
            )));
        }

        // Failed: undo every grant, on every node (a node that did not answer may have granted).
        self.release_all(&owner).await;
        if answered < inner.quorum {
            Ok(Attempt::Unavailable {
                granted: granted.len(),
            })
        } else {
            Ok(Attempt::Busy)
        }
    }

    /// Raises the fencing counter of every granting node to `token`; returns how many confirmed.
    async fn fence(&self, owner: &str, granted: &[(usize, u64)], token: u64) -> usize {
        let inner = &self.inner;
        let requests = granted.iter().map(|(i, _)| {
            let node = &inner.nodes[*i];
            async move {
                let mut invocation = REDLOCK_FENCE.prepare_invoke();
                invocation
                    .key(&*node.key)
                    .key(&*node.token_key)
                    .arg(owner)
                    .arg(token);
                node.client
                    .inner
                    .conn
                    .script_within::<i64>(
                        &invocation,
                        "fencing a redlock",
                        &inner.name,
                        inner.per_node_timeout,
                    )
                    .await
            }
        });
        join_all(requests)
            .await
            .into_iter()
            .filter(|r| matches!(r, Ok(1)))
            .count()
    }

    /// Registers the hold with the watchdog of every granting node and makes the guard.
    fn grant(
        &self,
        owner: Arc<str>,
        lease: Lease,
        granted: &[(usize, u64)],
        sent_at: Instant,
        valid_until: Instant,
        fencing_token: Option<u64>,
    ) -> RedLockGuard {
        let inner = &self.inner;
        let holds: Vec<(usize, HoldKey, Ticket)> = granted
            .iter()
            .map(|(i, _)| {
                let node = &inner.nodes[*i];
                let client = &node.client.inner;
                let hold = HoldKey {
                    kind: "redlock",
                    key: node.key.clone(),
                    field: owner.clone(),
                };
                let ticket = client.registry.acquired(
                    hold.clone(),
                    &inner.name,
                    1,
                    lease,
                    client.config.watchdog_timeout,
                    sent_at,
                    Arc::new(LockRenewal {
                        key: node.key.clone(),
                        field: owner.clone(),
                    }),
                );
                (*i, hold, ticket)
            })
            .collect();
        RedLockGuard {
            redlock: self.clone(),
            owner,
            holds,
            lease,
            fencing_token,
            valid_until,
            released: false,
        }
    }

    /// Sends the release script to every node in parallel; returns (released, answered).
    async fn release_all(&self, owner: &str) -> (usize, usize) {
        let inner = &self.inner;
        let requests = inner.nodes.iter().map(|node| async move {
            let mut invocation = REDLOCK_RELEASE.prepare_invoke();
            invocation
                .key(&*node.key)
                .key(&*node.channel)
                .arg(owner)
                .arg(UNLOCK_MESSAGE)
                .arg(node.client.inner.conn.publish_command());
            node.client
                .inner
                .conn
                .script_within::<i64>(
                    &invocation,
                    "releasing a redlock",
                    &inner.name,
                    inner.per_node_timeout,
                )
                .await
        });
        let replies = join_all(requests).await;
        let released = replies.iter().filter(|r| matches!(r, Ok(1))).count();
        let answered = replies.iter().filter(|r| r.is_ok()).count();
        (released, answered)
    }

    fn release_task(node: &Node, owner: &Arc<str>) -> Task {
        Task {
            script: &REDLOCK_RELEASE,
            keys: vec![node.key.clone(), node.channel.clone()],
            args: vec![
                owner.to_string(),
                UNLOCK_MESSAGE.to_owned(),
                node.client.inner.conn.publish_command().to_owned(),
            ],
            context: "releasing a redlock",
            release: None,
            lost: None,
        }
    }
}

/// Resolves when fewer than `quorum` of the node holds are left (their `lost` tokens fired), or
/// at `fixed_until`.
async fn quorum_lost(
    node_lost: Vec<CancellationToken>,
    quorum: usize,
    fixed_until: Option<Instant>,
) {
    let mut left = node_lost.len();
    let mut losses: FuturesUnordered<_> =
        node_lost.into_iter().map(|t| t.cancelled_owned()).collect();
    let expiry = async move {
        match fixed_until {
            Some(at) => tokio::time::sleep_until(at).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(expiry);
    while left >= quorum {
        tokio::select! {
            _ = &mut expiry => return,
            Some(()) = losses.next() => left -= 1,
            else => std::future::pending().await,
        }
    }
}

fn deadline_after(wait: Duration) -> Result<Instant> {
    Instant::now().checked_add(wait).ok_or_else(|| {
        Error::invalid(
            "wait",
            format!("{wait:?} overflows the clock; use `lock()` to wait without a limit"),
        )
    })
}

/// A [`RedLock`] held on a majority of its nodes. Releasing it (explicitly with
/// [`RedLockGuard::unlock`], or by dropping it) releases it on every node.
///
/// The guard owns what it needs (`'static`, `Send`, `Sync`). Dropping it never blocks: the
/// releases are handed to the clients' background tasks.
#[must_use = "dropping the guard releases the lock at once"]
pub struct RedLockGuard {
    redlock: RedLock,
    owner: Arc<str>,
    /// (node index, hold, ticket) of every node that granted the lock.
    holds: Vec<(usize, HoldKey, Ticket)>,
    lease: Lease,
    fencing_token: Option<u64>,
    valid_until: Instant,
    released: bool,
}

impl fmt::Debug for RedLockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedLockGuard")
            .field("lock", &self.redlock.inner.name)
            .field("owner", &self.owner)
            .field(
                "nodes",
                &self.holds.iter().map(|(i, _, _)| *i).collect::<Vec<_>>(),
            )
            .field("fencing_token", &self.fencing_token)
            .field("lease", &self.lease)
            .field("lost", &self.is_lost())
            .finish()
    }
}

impl RedLockGuard {
    /// The fencing token of this hold (see [`RedLock`]): larger than the token of every earlier
    /// holder. `None` when fencing is turned off.
    pub fn fencing_token(&self) -> Option<u64> {
        self.fencing_token
    }

    /// The owner id of this hold on every node (the hash field).
    pub fn owner_id(&self) -> &str {
        &self.owner
    }

    /// The indexes (in the order the clients were given) of the nodes that granted the lock.
    pub fn nodes(&self) -> Vec<usize> {
        self.holds.iter().map(|(i, _, _)| *i).collect()
    }

    /// The end of the validity computed at acquire time: start + TTL − drift on the monotonic
    /// clock, where TTL is the shortest lease of the nodes. For a fixed lease, the critical
    /// section is protected until then (and [`RedLockGuard::lost`] fires then). With the watchdog
    /// lease the renewals extend the holds beyond it; watch [`RedLockGuard::lost`] instead.
    pub fn valid_until(&self) -> Instant {
        self.valid_until
    }

    /// Whether the quorum is known to be lost (see [`RedLockGuard::lost`]).
    pub fn is_lost(&self) -> bool {
        let left = self
            .holds
            .iter()
            .filter(|(_, _, t)| !t.lost.is_cancelled())
            .count();
        left < self.redlock.inner.quorum
            || self.fixed_until().is_some_and(|at| Instant::now() >= at)
    }

    fn fixed_until(&self) -> Option<Instant> {
        matches!(self.lease, Lease::Fixed(_)).then_some(self.valid_until)
    }

    /// Resolves when the lock can no longer be trusted: fewer than a majority of the nodes still
    /// hold it (their watchdogs found it gone, or could not renew it in time), or a fixed lease's
    /// validity ended. The future owns what it needs, so it can be raced against the work with
    /// `tokio::select!`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only waits.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(lock: latchkey::RedLock) -> latchkey::Result<()> {
    /// # async fn job() {}
    /// let guard = lock.lock().await?;
    /// tokio::select! {
    ///     _ = guard.lost() => eprintln!("quorum lost, stopping"),
    ///     _ = job() => guard.unlock().await?,
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        let node_lost = self.holds.iter().map(|(_, _, t)| t.lost.clone()).collect();
        quorum_lost(node_lost, self.redlock.inner.quorum, self.fixed_until())
    }

    /// Removes the node holds from their watchdogs (before any release is sent).
    fn stop_renewals(&self) {
        for (i, hold, ticket) in &self.holds {
            let client = &self.redlock.inner.nodes[*i].client.inner;
            let _ =
                client
                    .registry
                    .released(hold, ticket, self.lease, client.config.watchdog_timeout);
        }
    }

    /// Releases the lock on every node now (in parallel, each bounded by the per-node timeout).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before it completes still releases the lock on every node: the
    /// releases run in their own task.
    ///
    /// # Errors
    ///
    /// [`Error::NotOwner`] if a majority of the nodes answered but fewer than a majority still
    /// held this lock (it had been lost); [`Error::QuorumUnavailable`] if fewer than a majority
    /// answered (the holds left there expire with their lease).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(lock: latchkey::RedLock) -> latchkey::Result<()> {
    /// let guard = lock.lock().await?;
    /// guard.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn unlock(mut self) -> Result<()> {
        self.released = true;
        self.stop_renewals();
        let redlock = self.redlock.clone();
        let owner = self.owner.clone();
        let (released, answered) =
            detached(Box::pin(async move { redlock.release_all(&owner).await })).await?;
        let inner = &self.redlock.inner;
        if released >= inner.quorum {
            Ok(())
        } else if answered >= inner.quorum {
            Err(Error::NotOwner {
                name: inner.name.clone(),
            })
        } else {
            Err(Error::QuorumUnavailable {
                acquired: released,
                nodes: inner.nodes.len(),
                quorum: inner.quorum,
            })
        }
    }
}

impl Drop for RedLockGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        self.stop_renewals();
        // Every node, not only those that granted: a late grant is undone too.
        for node in &self.redlock.inner.nodes {
            let _ = node
                .client
                .inner
                .background
                .send(RedLock::release_task(node, &self.owner));
        }
    }
}
