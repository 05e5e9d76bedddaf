//! RedLock: one lock over N independent Redis servers, held by a majority of them.
//!
//! The algorithm is the one described at <https://redis.io/docs/latest/develop/use/patterns/distributed-locks/>
//! (Redisson's `RedissonRedLock`), with parallel requests, a fencing token and quorum renewal.

use std::collections::HashSet;
use std::fmt;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures_util::future::join_all;
use futures_util::stream::{FuturesUnordered, StreamExt};
use redis::{FromRedisValue, IntoConnectionInfo};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::client::Client;
use crate::error::{check_range, lock, Error, Result, HOUR, MS};
use crate::guard::{FencingToken, Lost};
use crate::keys::{check_name, LockKeys};
use crate::lock::LockOptions;
use crate::metrics::{self, Op};
use crate::pubsub::sleep_until_opt;
use crate::scripts::{
    Invocation, Invoke, REDLOCK_ACQUIRE, REDLOCK_FENCE, REDLOCK_RELEASE, UNLOCK_MESSAGE,
};
use crate::task::{detached, Task};
use crate::wait::{deadline_after, or_timed_out, unbounded, unexpected};
use crate::watchdog::{HoldKey, Lease, Renewal, Ticket, COUNTER_IDLE};

/// How many attempts in a row may get answers from fewer than a majority of the nodes before
/// an acquire gives up with [`Error::QuorumUnavailable`].
const UNAVAILABLE_ATTEMPTS: u32 = 3;

/// The first delay before a node marked down is probed again; it doubles after every failed
/// probe, up to [`PROBE_MAX_DELAY`] (each delay random between ½ and 1½ times it).
const PROBE_FIRST_DELAY: Duration = Duration::from_millis(100);

/// The longest delay between two probes of a node marked down.
const PROBE_MAX_DELAY: Duration = Duration::from_secs(2);

/// A lock over N independent Redis servers (N odd, at least 3), granted when a majority of them
/// grant it: the RedLock algorithm.
///
/// Made by [`RedLock::new`] or [`RedLock::builder`] from one [`Client`] per server. On each node
/// the lock is a Redisson `RLock` hash (field: a new owner id per acquire) at the key
/// [`Client::lock`] would use: `name`, or `<namespace>:<name>` when the clients have a
/// [namespace](crate::ClientBuilder::namespace) (every node's client must have the same one).
/// So it excludes Redisson's `RedissonRedLock` over `RLock`s of that key, and latchkey
/// [`Lock`](crate::Lock)s of that name on those servers, while two namespaces' RedLocks of one
/// name do not meet.
///
/// # Starting with a node down
///
/// Build the nodes with [`ClientBuilder::connect_lazy`](crate::ClientBuilder::connect_lazy):
/// it makes a client without connecting (each connects on first use, and again after a
/// failure), so a service starts while a minority of the nodes is down, locks with the majority
/// from its first call, and uses a node again once it is up. ([`Client::connect`] fails while
/// its server is down.)
///
/// # How an acquire works
///
/// 1. The acquire script is sent to **every node in parallel** (but those known down, see
///    below), each answer bounded by the per-node timeout (default
///    [`RedLock::DEFAULT_PER_NODE_TIMEOUT`]), so a stalled node costs at most that long.
/// 2. It succeeds when at least `N/2 + 1` nodes granted it (and, with fencing, confirmed the
///    fencing token) and time is left: the validity is
///    `TTL − elapsed − drift`, with `drift = TTL/100 + 2 ms` and `elapsed` measured on the
///    monotonic clock from before the first request to after the last answer.
/// 3. Otherwise the lock is released on **every node asked** (including those that did not
///    answer: a late grant is undone), and the acquire retries after a random delay
///    (between ½ and 1½ times the retry delay), so that competing clients fall out of step.
///    When fewer than a majority of the nodes *answered at all* in 3 attempts in a row (or in
///    the last attempt before the wait ran out), it stops with [`Error::QuorumUnavailable`]:
///    waiting does not bring dead servers back. That takes a few retry delays when the servers
///    refuse connections, 3 per-node timeouts when they stall.
///
/// **Nodes known down.** A node whose last request could not reach it (connection refused,
/// reset or closed: [`Error::Unreachable`]) is marked down. Attempts skip it at once — it
/// counts as a node that did not grant, so it can never help make a quorum — while a background
/// probe `PING`s it with growing delays (100 ms doubling to 2 s, stopping when the RedLock and
/// its guards are dropped); once it answers, attempts ask it again. A skipped node was sent
/// nothing, so it holds nothing from that attempt and the release skips it too. Nodes are
/// skipped only while the others are a majority: otherwise every node is asked, since the
/// attempt cannot succeed without a down one. A node that does not answer in time is *not*
/// marked down (it may be stalled and grant late), so it keeps costing the per-node timeout.
/// The marks belong to the `RedLock` and its clones: build one per name and clone it, rather
/// than building a new one for every acquire.
///
/// With the default lease the hold is renewed by each node's client watchdog, on every node that
/// granted it; [`RedLockGuard::lost`] fires once fewer than a majority still hold it.
///
/// # Fencing tokens
///
/// Each node keeps a counter (`redisson_lock_token:{name}`, shared with [`Lock`](crate::Lock)),
/// moved by every new hold of that node to the larger of its last value + 1 and the attempt's
/// floor (the client's clock in microseconds, one value for every node of the attempt), and
/// expiring a minute after the hold's lease. A RedLock hold's token is the largest counter of
/// the nodes that granted it; when the counters of the granting nodes differ, a second parallel
/// round raises every node that is behind to that token, **while the hold is still in place
/// there**, and a majority must be at the token (a node that granted with the token as its
/// counter is; counters in step stay in step, and this round is skipped). Any two holds that
/// got a token share at least one node that confirmed both; whichever held that node later
/// moved past the other's token. So tokens strictly increase in the order holders got the
/// lock, even if a clock jump made two holds overlap in time: storage that refuses a token
/// smaller than one it has seen stays safe. A node that lost its counter (restarted empty, or
/// idle for a minute) starts again from the floor, which is later than any token of a hold
/// that ended before, as long as the clients' clocks agree to within that minute. Fencing
/// costs one more round trip when counters differ; turn it off with
/// [`RedLockBuilder::fencing`] if nothing downstream checks tokens.
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
/// # async fn main() -> latchkey_redis::Result<()> {
/// use latchkey_redis::{Client, RedLock};
///
/// let mut clients = Vec::new();
/// for url in ["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"] {
///     // Lazy: the service starts even if one of them is down.
///     clients.push(Client::builder(url).connect_lazy()?);
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
    /// The user's name (each node's keys follow its client's namespace).
    name: String,
    nodes: Vec<Node>,
    quorum: usize,
    settings: Settings,
    /// Cancelled when the last handle (and guard) is dropped: stops the node probes.
    closed: CancellationToken,
}

impl Drop for RedLockInner {
    fn drop(&mut self) {
        self.closed.cancel();
    }
}

struct Node {
    client: Client,
    /// The lock hash on this node: `<namespace>:<name>` or `<name>`.
    key: Arc<str>,
    token_key: Arc<str>,
    channel: Arc<str>,
    health: Mutex<Health>,
}

/// Whether a node is known down (its last request could not reach it), and whether a probe is
/// running to find it up again. One mutex, so that a node marked down always has a probe.
#[derive(Default)]
struct Health {
    down: bool,
    probing: bool,
}

impl fmt::Debug for RedLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = &self.inner;
        f.debug_struct("RedLock")
            .field("name", &inner.name)
            .field("nodes", &inner.nodes.len())
            .field("quorum", &inner.quorum)
            .field("settings", &inner.settings)
            .field("down_nodes", &self.down_nodes())
            .finish()
    }
}

/// Settings of a [`RedLock`], made with [`RedLock::builder`].
///
/// # Examples
///
/// ```no_run
/// # fn f(clients: Vec<latchkey_redis::Client>) -> latchkey_redis::Result<()> {
/// use std::time::Duration;
///
/// let lock = latchkey_redis::RedLock::builder("reports:nightly", clients)
///     .per_node_timeout(Duration::from_millis(20))
///     .retry_delay(Duration::from_millis(100))
///     .build()?;
/// # Ok(())
/// # }
/// ```
#[must_use = "a builder does nothing until `build` is called"]
#[derive(Debug)]
pub struct RedLockBuilder {
    name: String,
    clients: Vec<Client>,
    settings: Settings,
}

/// What a [`RedLockBuilder`] sets.
#[derive(Clone, Copy, Debug)]
struct Settings {
    per_node_timeout: Duration,
    retry_delay: Duration,
    fencing: bool,
}

impl RedLockBuilder {
    /// How long one node may take to answer one request before it counts as failed (default
    /// [`RedLock::DEFAULT_PER_NODE_TIMEOUT`]). Keep it much shorter than the lease: it bounds the time a
    /// stalled or unreachable node costs an acquire (a node found unreachable is then skipped
    /// until a probe finds it up, see [`RedLock`]). Between 1 ms and 1 hour.
    pub fn per_node_timeout(mut self, timeout: Duration) -> RedLockBuilder {
        self.settings.per_node_timeout = timeout;
        self
    }

    /// The base delay between two attempts when the lock is busy (default
    /// [`RedLock::DEFAULT_RETRY_DELAY`]); each delay is random between ½ and 1½ times it. At most 1 hour.
    pub fn retry_delay(mut self, delay: Duration) -> RedLockBuilder {
        self.settings.retry_delay = delay;
        self
    }

    /// Whether to compute fencing tokens (default `true`; see [`RedLock`]). Without them an
    /// acquire is one round trip shorter and [`RedLockGuard::fencing_token`] is `None`.
    pub fn fencing(mut self, on: bool) -> RedLockBuilder {
        self.settings.fencing = on;
        self
    }

    /// Checks the settings and makes the [`RedLock`]. Sends nothing.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad name, fewer than 3 nodes, an even number of nodes,
    /// two clients for the same server address (`host:port`, whatever the database; names are
    /// compared as written, so `localhost` and `127.0.0.1` are not recognised as the same),
    /// clients with different namespaces, or timeouts out of range.
    pub fn build(self) -> Result<RedLock> {
        check_name(&self.name)?;
        let n = self.clients.len();
        let problem = match n {
            0..=2 => Some("RedLock needs at least 3 independent servers"),
            _ if n.is_multiple_of(2) => Some(
                "use an odd number (an even number tolerates no more failures than one node fewer)",
            ),
            _ => None,
        };
        if let Some(problem) = problem {
            let reason = format!("{n} nodes; {problem}");
            return Err(Error::invalid("redlock nodes", reason));
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
        let timeout = self.settings.per_node_timeout;
        check_range("per-node timeout", timeout, MS..=HOUR, "use 1 ms to 1 hour")?;
        let delay = self.settings.retry_delay;
        check_range(
            "retry delay",
            delay,
            Duration::ZERO..=HOUR,
            "use at most 1 hour",
        )?;
        let namespace = self.clients[0].namespace();
        if let Some(other) = self.clients.iter().find(|c| c.namespace() != namespace) {
            return Err(Error::invalid(
                "redlock nodes",
                format!(
                    "the nodes' clients have different namespaces ({} and {}), so the lock would \
                     have a different key on each node; give every node's client the same namespace",
                    namespace_label(namespace),
                    namespace_label(other.namespace()),
                ),
            ));
        }
        let nodes = self
            .clients
            .into_iter()
            .map(|client| {
                // The same rule as `Client::lock`: the key follows the client's namespace.
                let keys = LockKeys::new(client.namespace(), &self.name);
                Node {
                    client,
                    key: keys.hash,
                    token_key: keys.token,
                    channel: keys.channel,
                    health: Mutex::new(Health::default()),
                }
            })
            .collect();
        Ok(RedLock {
            inner: Arc::new(RedLockInner {
                name: self.name,
                nodes,
                quorum: n / 2 + 1,
                settings: self.settings,
                closed: CancellationToken::new(),
            }),
        })
    }
}

/// A namespace for an error message.
fn namespace_label(namespace: Option<&str>) -> String {
    match namespace {
        Some(ns) => format!("`{ns}`"),
        None => "none".to_owned(),
    }
}

/// `host:port` (or the socket path) of a URL, for the distinct-nodes check.
fn node_address(url: &str) -> Result<String> {
    let info = url
        .into_connection_info()
        .map_err(|e| Error::config(format!("cannot read a redis url: {e}")))?;
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
    Granted {
        counter: u64,
    },
    Held,
    Failed(Error),
    /// Not asked: the node is known down (a failed vote; it holds nothing from this attempt).
    Skipped,
}

enum Attempt {
    Granted(RedLockGuard),
    /// Enough nodes answered, but not enough granted (or time ran out): retry.
    Busy {
        unreleased: Vec<usize>,
    },
    /// Fewer nodes than a majority answered.
    Unavailable {
        granted: usize,
        unreleased: Vec<usize>,
    },
}

/// What a release on several nodes found.
#[derive(Default)]
struct Released {
    /// How many nodes released a hold of the owner.
    released: usize,
    /// How many nodes answered.
    answered: usize,
    /// The nodes that did not answer: a hold may be left there (it expires with its lease).
    unanswered: Vec<usize>,
}

impl RedLock {
    /// The default bound on one node's answer (see [`RedLockBuilder::per_node_timeout`]): 50 ms.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// assert_eq!(latchkey_redis::RedLock::DEFAULT_PER_NODE_TIMEOUT, Duration::from_millis(50));
    /// ```
    pub const DEFAULT_PER_NODE_TIMEOUT: Duration = Duration::from_millis(50);

    /// The default base delay between attempts (see [`RedLockBuilder::retry_delay`]): 50 ms.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// assert_eq!(latchkey_redis::RedLock::DEFAULT_RETRY_DELAY, Duration::from_millis(50));
    /// ```
    pub const DEFAULT_RETRY_DELAY: Duration = Duration::from_millis(50);

    /// A RedLock named `name` over one client per server, with default settings.
    ///
    /// # Errors
    ///
    /// As [`RedLockBuilder::build`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn f(a: latchkey_redis::Client, b: latchkey_redis::Client, c: latchkey_redis::Client) -> latchkey_redis::Result<()> {
    /// let lock = latchkey_redis::RedLock::new("reports:nightly", [a, b, c])?;
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
            settings: Settings {
                per_node_timeout: RedLock::DEFAULT_PER_NODE_TIMEOUT,
                retry_delay: RedLock::DEFAULT_RETRY_DELAY,
                fencing: true,
            },
        }
    }

    /// The lock's name as given. Its key on every node follows the clients' namespace:
    /// `<namespace>:<name>`, or `name` without one.
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

    /// The indexes (in the order the clients were given) of the nodes known down right now:
    /// the last request could not reach them, and a background probe has not found them up
    /// yet. Attempts skip them while the other nodes are a majority (see [`RedLock`]).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(lock: latchkey_redis::RedLock) -> latchkey_redis::Result<()> {
    /// let guard = lock.lock().await?;
    /// for i in lock.down_nodes() {
    ///     eprintln!("redlock node {i} is down");
    /// }
    /// guard.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn down_nodes(&self) -> Vec<usize> {
        (self.inner.nodes.iter().enumerate())
            .filter(|(_, node)| lock(&node.health).down)
            .map(|(i, _)| i)
            .collect()
    }

    /// Acquires the lock on a majority of the nodes, retrying as long as it is busy. The lease
    /// on each node is its client's watchdog timeout, renewed by the watchdog until the guard is
    /// released.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe. Dropping the future leaves nothing locked and no renewal behind: an attempt
    /// in flight completes in a task of its own, and a hold it got is released on every node by the
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
    /// # async fn f(lock: latchkey_redis::RedLock) -> latchkey_redis::Result<()> {
    /// let guard = lock.lock().await?;
    /// guard.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn lock(&self) -> Result<RedLockGuard> {
        Ok(unbounded(self.acquire(Lease::Watchdog, None).await?))
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
    /// # async fn f(lock: latchkey_redis::RedLock) -> latchkey_redis::Result<()> {
    /// use std::time::Duration;
    /// if let Some(guard) = lock.try_lock(Duration::from_millis(500)).await? {
    ///     guard.unlock().await?;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_lock(&self, wait: Duration) -> Result<Option<RedLockGuard>> {
        self.acquire(Lease::Watchdog, Some(deadline_after(wait, "`lock()`")?))
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
    /// # async fn f(lock: latchkey_redis::RedLock) -> latchkey_redis::Result<()> {
    /// use std::time::Duration;
    /// use latchkey_redis::LockOptions;
    ///
    /// let guard = lock
    ///     .lock_with(LockOptions::new().lease(Duration::from_secs(10)).wait(Duration::from_secs(2)))
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn lock_with(&self, options: LockOptions) -> Result<RedLockGuard> {
        let started = std::time::Instant::now();
        let granted = self.try_lock_with(options).await?;
        or_timed_out(granted, &self.inner.name, started)
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
    /// # async fn f(lock: latchkey_redis::RedLock) -> latchkey_redis::Result<()> {
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
    pub async fn try_lock_with(&self, options: LockOptions) -> Result<Option<RedLockGuard>> {
        let (lease, deadline) = options.checked()?;
        self.acquire(lease, deadline).await
    }

    async fn acquire(
        &self,
        lease: Lease,
        deadline: Option<Instant>,
    ) -> Result<Option<RedLockGuard>> {
        let name = &self.inner.name;
        let site = metrics::Site::new(&self.inner.nodes[0].client, "redlock", name);
        metrics::lock_traced(site, deadline, name, self.acquire_quorum(lease, deadline)).await
    }

    async fn acquire_quorum(
        &self,
        lease: Lease,
        deadline: Option<Instant>,
    ) -> Result<Option<RedLockGuard>> {
        let inner = &self.inner;
        // One owner for the whole call: a late grant of an earlier attempt is simply kept.
        let owner: Arc<str> = Arc::from(inner.nodes[0].client.next_owner());
        // Nodes where an earlier attempt's release went unanswered: a hold of `owner` may be
        // there, so the guard releases them too.
        let mut unreleased: Vec<usize> = Vec::new();
        let mut unavailable = 0;
        loop {
            let (redlock, attempt_owner) = (self.clone(), owner.clone());
            let earlier = unreleased.clone();
            let attempt = detached(Box::pin(async move {
                redlock.attempt(attempt_owner, lease, earlier).await
            }))
            .await??;
            let more = match attempt {
                Attempt::Granted(guard) => return Ok(Some(guard)),
                Attempt::Unavailable {
                    granted,
                    unreleased,
                } => {
                    unavailable += 1;
                    // A stall can make live nodes miss one short per-node timeout; nodes that
                    // miss several attempts in a row are down.
                    if unavailable == UNAVAILABLE_ATTEMPTS
                        || deadline.is_some_and(|d| Instant::now() >= d)
                    {
                        return Err(self.unavailable(granted));
                    }
                    unreleased
                }
                Attempt::Busy { unreleased } => {
                    unavailable = 0;
                    unreleased
                }
            };
            unreleased.extend(more);
            unreleased.sort_unstable();
            unreleased.dedup();
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return Ok(None);
            }
            let until = now + jitter(inner.settings.retry_delay);
            tokio::time::sleep_until(deadline.map_or(until, |d| until.min(d))).await;
        }
    }

    /// Which nodes an attempt asks: every node not known down, or every node when those are
    /// fewer than a majority (then the attempt cannot succeed without a down node, and asking
    /// it costs nothing a failed attempt would not).
    fn nodes_to_ask(&self) -> Vec<bool> {
        let inner = &self.inner;
        let ask: Vec<bool> = inner.nodes.iter().map(|n| !lock(&n.health).down).collect();
        if ask.iter().filter(|&&a| a).count() >= inner.quorum {
            ask
        } else {
            vec![true; inner.nodes.len()]
        }
    }

    /// Notes what a request to node `i` found: a node that could not be reached is marked
    /// down (skipped by the next attempts, and probed in the background until it answers);
    /// a node that answered is up. A node that answers it cannot serve for now (`LOADING`,
    /// `READONLY`) is left as it was: the probe's `PING` would find it up at once.
    fn note(&self, i: usize, outcome: std::result::Result<(), &Error>) {
        let node = &self.inner.nodes[i];
        match outcome {
            Err(Error::Unreachable { source, .. }) if source.code().is_none() => {
                let mut health = lock(&node.health);
                if !health.down {
                    tracing::warn!(node = i, lock = %self.inner.name, "redlock node unreachable; skipping it until a probe finds it up");
                }
                health.down = true;
                if !health.probing {
                    health.probing = true;
                    drop(health);
                    tokio::spawn(probe(
                        Arc::downgrade(&self.inner),
                        i,
                        self.inner.closed.clone(),
                    ));
                }
            }
            Err(_) => {}
            Ok(()) => lock(&node.health).down = false,
        }
    }

    /// One attempt on every node (but those skipped, see [`RedLock::nodes_to_ask`]); run detached
    /// by [`RedLock::acquire`] (it finishes in a task of its own if the caller goes away). `earlier` are nodes where earlier attempts of the same
    /// acquire may have left a hold.
    async fn attempt(&self, owner: Arc<str>, lease: Lease, earlier: Vec<usize>) -> Result<Attempt> {
        let inner = &self.inner;
        let ask = self.nodes_to_ask();
        let start = Instant::now();
        // One token floor for every node (see redlock_acquire.lua): counters in step stay so.
        let floor = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64);
        let requests = inner.nodes.iter().zip(&ask).map(|(node, &ask)| {
            let owner = &owner;
            async move {
                if !ask {
                    return NodeReply::Skipped;
                }
                let mut invocation = REDLOCK_ACQUIRE.invocation();
                invocation
                    .key(&*node.key)
                    .key(&*node.token_key)
                    .arg(lease.ms(node.client.inner.config.watchdog_timeout))
                    .arg(&**owner)
                    .arg(COUNTER_IDLE.as_millis() as u64)
                    .arg(floor);
                match self
                    .on_node::<Vec<i64>>(node, &invocation, "acquiring a redlock")
                    .await
                {
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
                    self.note(i, Ok(()));
                    granted.push((i, counter));
                    answered += 1;
                }
                NodeReply::Held => {
                    self.note(i, Ok(()));
                    answered += 1;
                }
                NodeReply::Skipped => {}
                NodeReply::Failed(e) if e.is_wrong_type() => {
                    self.note(i, Ok(()));
                    wrong_type.get_or_insert(e);
                }
                NodeReply::Failed(e) => {
                    self.note(i, Err(&e));
                    tracing::debug!(node = i, error = %e.chain(), lock = %inner.name, "redlock node failed");
                }
            }
        }
        // Where a hold of `owner` may be: every node asked now (one that did not answer may
        // have granted late), and those an earlier attempt could not release. Never a node
        // only skipped: it was sent nothing.
        let asked = (0..inner.nodes.len()).filter(|&i| ask[i]);
        let mut reached: Vec<usize> = asked.chain(earlier).collect();
        reached.sort_unstable();
        reached.dedup();
        if let Some(e) = wrong_type {
            self.release_all(&owner, &reached).await;
            return Err(e);
        }

        let mut confirmed = granted.len();
        let mut fencing_token = None;
        if confirmed >= inner.quorum && inner.settings.fencing {
            let token = granted.iter().map(|(_, c)| *c).max().unwrap_or(0);
            // A node whose counter is the token already confirmed it (it was read while the hold
            // was in place there); only the others are raised. With every node up the counters
            // move in step (one floor for all), and this round is skipped.
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
            .map(|node| lease.ms(node.client.inner.config.watchdog_timeout))
            .min()
            .map_or(Duration::ZERO, Duration::from_millis);
        let drift = ttl / 100 + Duration::from_millis(2);
        let valid_until = start + ttl.saturating_sub(drift);
        if confirmed >= inner.quorum && Instant::now() < valid_until {
            // Registered with the watchdog of every granting node.
            let holds = granted
                .iter()
                .map(|&(i, _)| {
                    let node = &inner.nodes[i];
                    let client = &node.client.inner;
                    let ticket = client.registry.acquired(
                        HoldKey {
                            kind: "redlock",
                            key: node.key.clone(),
                            field: owner.clone(),
                        },
                        &inner.name,
                        lease,
                        client.config.watchdog_timeout,
                        start,
                        Renewal::of(&node.key, &owner),
                    );
                    (i, ticket)
                })
                .collect();
            return Ok(Attempt::Granted(RedLockGuard {
                redlock: self.clone(),
                owner,
                holds,
                reached,
                lease,
                fencing_token,
                valid_until,
                released: false,
            }));
        }

        // Failed: undo every grant, on every node reached (a node that did not answer may
        // have granted).
        let unreleased = self.release_all(&owner, &reached).await.unanswered;
        if answered < inner.quorum {
            Ok(Attempt::Unavailable {
                granted: granted.len(),
                unreleased,
            })
        } else {
            Ok(Attempt::Busy { unreleased })
        }
    }

    /// [`Error::QuorumUnavailable`] for an attempt that reached `acquired` nodes.
    fn unavailable(&self, acquired: usize) -> Error {
        let (nodes, quorum) = (self.inner.nodes.len(), self.inner.quorum);
        Error::QuorumUnavailable {
            acquired,
            nodes,
            quorum,
        }
    }

    /// Raises the fencing counter of every granting node to `token`; returns how many confirmed.
    async fn fence(&self, owner: &str, granted: &[(usize, u64)], token: u64) -> usize {
        let inner = &self.inner;
        let requests = granted.iter().map(|(i, _)| {
            let node = &inner.nodes[*i];
            async move {
                let mut invocation = REDLOCK_FENCE.invocation();
                invocation
                    .key(&*node.key)
                    .key(&*node.token_key)
                    .arg(owner)
                    .arg(token)
                    .arg(COUNTER_IDLE.as_millis() as u64);
                self.on_node::<i64>(node, &invocation, "fencing a redlock")
                    .await
            }
        });
        join_all(requests)
            .await
            .into_iter()
            .filter(|r| matches!(r, Ok(1)))
            .count()
    }

    /// Sends the release script to the nodes `nodes` in parallel.
    async fn release_all(&self, owner: &str, nodes: &[usize]) -> Released {
        let inner = &self.inner;
        let requests = nodes.iter().map(|&i| async move {
            let node = &inner.nodes[i];
            let mut invocation = REDLOCK_RELEASE.invocation();
            invocation
                .key(&*node.key)
                .key(&*node.channel)
                .arg(owner)
                .arg(UNLOCK_MESSAGE)
                .arg(node.client.inner.conn.publish_command());
            (
                i,
                self.on_node::<i64>(node, &invocation, "releasing a redlock")
                    .await,
            )
        });
        let mut out = Released::default();
        for (i, reply) in join_all(requests).await {
            self.note(i, reply.as_ref().map(|_| ()));
            match reply {
                Ok(n) => {
                    out.answered += 1;
                    out.released += usize::from(n == 1);
                }
                Err(_) => out.unanswered.push(i),
            }
        }
        out
    }

    /// Runs one script call on `node`, within the per-node timeout.
    async fn on_node<T: FromRedisValue + Send>(
        &self,
        node: &Node,
        invocation: &Invocation<'_>,
        context: &'static str,
    ) -> Result<T> {
        let (conn, name) = (&node.client.inner.conn, &self.inner.name);
        let timeout = self.inner.settings.per_node_timeout;
        conn.script_within(invocation, context, name, timeout).await
    }

    fn release_task(node: &Node, owner: &Arc<str>) -> Task {
        Task::new(
            &REDLOCK_RELEASE,
            vec![node.key.clone(), node.channel.clone()],
            vec![
                owner.to_string(),
                UNLOCK_MESSAGE.to_owned(),
                node.client.inner.conn.publish_command().to_owned(),
            ],
            "releasing a redlock",
        )
    }
}

/// Probes node `i` of a RedLock marked down, with growing delays, until it answers (then it
/// is used again) or the RedLock is dropped. Holds only a weak reference while it sleeps.
async fn probe(redlock: Weak<RedLockInner>, i: usize, closed: CancellationToken) {
    let mut delay = PROBE_FIRST_DELAY;
    loop {
        tokio::select! {
            _ = closed.cancelled() => return,
            _ = tokio::time::sleep(jitter(delay)) => {}
        }
        let Some(inner) = redlock.upgrade() else {
            return;
        };
        let node = &inner.nodes[i];
        {
            let mut health = lock(&node.health);
            if !health.down {
                // An attempt found it up meanwhile.
                health.probing = false;
                return;
            }
        }
        let reply: Result<redis::Value> = node
            .client
            .inner
            .conn
            .query(&redis::cmd("PING"), "probing a redlock node", &inner.name)
            .await;
        // Any answer, even an error reply, means the server is there again.
        if !matches!(&reply, Err(e) if e.is_connection()) {
            let mut health = lock(&node.health);
            health.down = false;
            health.probing = false;
            tracing::info!(node = i, lock = %inner.name, "redlock node answers again");
            return;
        }
        delay = (delay * 2).min(PROBE_MAX_DELAY);
    }
}

/// A delay random between ½ and 1½ times `base`, so that competing clients fall out of step.
fn jitter(base: Duration) -> Duration {
    let base = base.as_micros() as u64;
    Duration::from_micros(rand::random_range(base / 2..=base + base / 2))
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
    let expiry = sleep_until_opt(fixed_until);
    tokio::pin!(expiry);
    while left >= quorum {
        tokio::select! {
            _ = &mut expiry => return,
            Some(()) = losses.next() => left -= 1,
            else => std::future::pending().await,
        }
    }
}

/// A [`RedLock`] held on a majority of its nodes. Releasing it (explicitly with
/// [`RedLockGuard::unlock`], or by dropping it) releases it on every node where it may be held:
/// every node the acquire asked (not only those that granted), but no node it skipped as down.
///
/// The guard owns what it needs (`'static`, `Send`, `Sync`). Dropping it never blocks: the
/// releases are handed to the clients' background tasks.
#[must_use = "dropping the guard releases the lock at once"]
pub struct RedLockGuard {
    redlock: RedLock,
    owner: Arc<str>,
    /// (node index, ticket) of every node that granted the lock.
    holds: Vec<(usize, Ticket)>,
    /// Every node where a hold of `owner` may be: those the granting attempt asked, and those
    /// where an earlier attempt's release went unanswered (not the nodes skipped as down).
    reached: Vec<usize>,
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
            .field("nodes", &self.nodes())
            .field("fencing_token", &self.fencing_token)
            .field("lease", &self.lease)
            .field("lost", &self.is_lost())
            .finish()
    }
}

impl RedLockGuard {
    /// The fencing token of this hold (see [`RedLock`]): larger than the token of every earlier
    /// holder. `None` when fencing is turned off.
    pub fn fencing_token(&self) -> Option<FencingToken> {
        self.fencing_token.map(FencingToken::new)
    }

    /// The owner id of this hold on every node (the hash field).
    pub fn owner_id(&self) -> &str {
        &self.owner
    }

    /// The indexes (in the order the clients were given) of the nodes that granted the lock.
    pub fn nodes(&self) -> Vec<usize> {
        self.holds.iter().map(|(i, _)| *i).collect()
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
        let left = self.holds.iter().filter(|(_, t)| !t.is_lost()).count();
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
    /// # async fn f(lock: latchkey_redis::RedLock) -> latchkey_redis::Result<()> {
    /// # async fn job() {}
    /// let guard = lock.lock().await?;
    /// tokio::select! {
    ///     _ = guard.lost() => eprintln!("quorum lost, stopping"),
    ///     _ = job() => guard.unlock().await?,
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn lost(&self) -> Lost {
        let node_lost = self.holds.iter().map(|(_, t)| t.lost.clone()).collect();
        Lost::new(quorum_lost(
            node_lost,
            self.redlock.inner.quorum,
            self.fixed_until(),
        ))
    }

    /// Removes the node holds from their watchdogs (before any release is sent).
    fn stop_renewals(&self) {
        for (i, ticket) in &self.holds {
            let client = &self.redlock.inner.nodes[*i].client.inner;
            let _ = client.registry.released(ticket);
        }
    }

    /// Releases the lock now on every node where it may be held (every node the acquire asked;
    /// see [`RedLockGuard`]), in parallel, each bounded by the per-node timeout.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before it completes still releases the lock on those nodes: the
    /// releases finish in a task of their own.
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
    /// # async fn f(lock: latchkey_redis::RedLock) -> latchkey_redis::Result<()> {
    /// let guard = lock.lock().await?;
    /// guard.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn unlock(self) -> Result<()> {
        let span = metrics::span(Op::Unlock, "redlock", &self.redlock.inner.name, None);
        span.record("token", self.fencing_token);
        metrics::traced(span, self.unlock_all()).await
    }

    async fn unlock_all(mut self) -> Result<()> {
        self.released = true;
        self.stop_renewals();
        let (redlock, owner) = (self.redlock.clone(), self.owner.clone());
        let reached = std::mem::take(&mut self.reached);
        let Released {
            released, answered, ..
        } = detached(Box::pin(async move {
            redlock.release_all(&owner, &reached).await
        }))
        .await?;
        let inner = &self.redlock.inner;
        if released >= inner.quorum {
            Ok(())
        } else if answered >= inner.quorum {
            Err(Error::not_owner(&inner.name))
        } else {
            Err(self.redlock.unavailable(released))
        }
    }
}

impl Drop for RedLockGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        self.stop_renewals();
        // Every node reached, not only those that granted: a late grant is undone too.
        for &i in &self.reached {
            let node = &self.redlock.inner.nodes[i];
            let _ = node
                .client
                .inner
                .background
                .send(RedLock::release_task(node, &self.owner));
        }
    }
}

crate::guard::forward_guard!(
    RedLockGuard,
    |guard| &guard.redlock.inner.name,
    guard.fencing_token(),
    guard.unlock()
);
