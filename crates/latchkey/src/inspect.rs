//! Reads for operators: what a name holds ([`Client::inspect`]) and which names exist
//! ([`Client::scan_names`]). The Redisson layouts (and the scheduler's) are recognized here, so
//! that tools (the `latchkey` command's `status` and `list`) need not know them.

use std::collections::BTreeSet;
use std::time::Duration;

use redis::{FromRedisValue, Value};

use crate::client::Client;
use crate::error::Result;
use crate::keys::{
    check_name, object_name, prefix_name, FairLockKeys, LockKeys, PermitSemaphoreKeys, RwLockKeys,
    SemaphoreKeys,
};
use crate::lock::{holders, lease, token, Holder};
use crate::permit_semaphore::PermitId;
use crate::rate_limit::{RateConfig, RateType};
use crate::scripts;
use crate::scripts::Invoke;
use crate::wait::unexpected;

/// How many keys one `SCAN` call is asked to look at.
const SCAN_COUNT: u32 = 1000;

/// The prefix of a scheduler group's index, the one key that says a group exists
/// (`latchkey_jobs:{<group>}`, see `scheduler.rs`).
const JOB_INDEX: &str = "latchkey_jobs";

/// Which primitive a name holds, as [`Client::inspect`] recognizes it from its Redisson layout.
///
/// A fair lock and a lock share their layout (a hash of owners): a lock with owners in the fair
/// lock's queue is a [`Kind::FairLock`], one without is a [`Kind::Lock`]. A semaphore, a permit
/// semaphore without leased permits and a count-down latch are all a count: they show as a
/// [`Kind::Semaphore`]. A rate limiter is a hash with `rate`, `interval` and `type` fields
/// (Redisson's `RRateLimiter` config). A scheduler group keeps nothing under its own name: it is
/// recognized by its index (`latchkey_jobs:{<group>}`), when the name holds nothing else.
///
/// # Examples
///
/// ```
/// assert_eq!(latchkey_redis::Kind::RwLock.as_str(), "rw_lock");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Kind {
    /// A reentrant lock ([`Lock`](crate::Lock)), or a fair lock nobody waits for.
    Lock,
    /// A fair lock ([`FairLock`](crate::FairLock)) with owners in its queue.
    FairLock,
    /// A read-write lock ([`RwLock`](crate::RwLock)).
    RwLock,
    /// A semaphore ([`Semaphore`](crate::Semaphore)): a count of available permits.
    Semaphore,
    /// A permit semaphore ([`PermitSemaphore`](crate::PermitSemaphore)) with leased permits.
    PermitSemaphore,
    /// A sliding-window rate limiter ([`RateLimiter`](crate::RateLimiter), Redisson's
    /// `RRateLimiter`) whose rate is set.
    RateLimiter,
    /// A group of scheduled jobs (`Client::scheduler`, cargo feature `scheduler`) that some
    /// node registered.
    JobGroup,
}

impl Kind {
    /// A short lowercase name: `lock`, `fair_lock`, `rw_lock`, `semaphore`, `permit_semaphore`,
    /// `rate_limiter`, `jobs` (a job group).
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(latchkey_redis::Kind::FairLock.as_str(), "fair_lock");
    /// assert_eq!(latchkey_redis::Kind::JobGroup.as_str(), "jobs");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Lock => "lock",
            Kind::FairLock => "fair_lock",
            Kind::RwLock => "rw_lock",
            Kind::Semaphore => "semaphore",
            Kind::PermitSemaphore => "permit_semaphore",
            Kind::RateLimiter => "rate_limiter",
            Kind::JobGroup => "jobs",
        }
    }

    /// Whether this is a lock of some kind (not a semaphore, rate limiter or job group).
    ///
    /// # Examples
    ///
    /// ```
    /// assert!(latchkey_redis::Kind::RwLock.is_lock());
    /// assert!(!latchkey_redis::Kind::Semaphore.is_lock());
    /// ```
    pub fn is_lock(self) -> bool {
        matches!(self, Kind::Lock | Kind::FairLock | Kind::RwLock)
    }
}

/// The mode a read-write lock is held in.
///
/// # Examples
///
/// ```
/// assert_eq!(latchkey_redis::RwMode::Read.as_str(), "read");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RwMode {
    /// Held by one or more readers.
    Read,
    /// Held by a writer (which may also hold read locks).
    Write,
}

impl RwMode {
    /// `read` or `write`.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(latchkey_redis::RwMode::Write.as_str(), "write");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            RwMode::Read => "read",
            RwMode::Write => "write",
        }
    }
}

/// One leased permit of a permit semaphore, in an [`Inspection`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeasedPermit {
    /// The permit's id.
    pub id: PermitId,
    /// Time left on its lease (zero when it ended and is not reclaimed yet).
    pub remaining_lease: Duration,
}

/// What a name holds, from [`Client::inspect`]: its kind and a snapshot of its state, read in
/// one atomic script call. Fields that do not apply to the kind are empty or `None`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Inspection {
    /// The name, as given (without the client's namespace).
    pub name: String,
    /// The primitive found.
    pub kind: Kind,
    /// Locks: the owners and their hold counts (the hash fields as stored: the writer of a
    /// read-write lock is `<owner>:write`). Empty when free, and for semaphores.
    pub holders: Vec<Holder>,
    /// Read-write locks: the mode it is held in; `None` when free and for other kinds.
    pub rw_mode: Option<RwMode>,
    /// Locks: the time left on the lease; `None` when free or without expiry.
    pub remaining_lease: Option<Duration>,
    /// Locks: the fencing token of the latest holder; `None` if not taken by latchkey in the
    /// last minute or so (the counter expires with its lock idle).
    pub fencing_token: Option<crate::FencingToken>,
    /// Locks: how many latchkey clients wait for it; read-write locks: how many writers wait.
    pub waiting_clients: u64,
    /// Fair locks: the owners in line, first in line first (at most 1000).
    pub fair_queue: Vec<String>,
    /// Semaphores: the permits available now (negative after permits were taken away while
    /// held). Rate limiters of [`RateType::Overall`]: the permits the window has left now
    /// (negative when the rate was lowered under the grants in the window); `None` for
    /// [`RateType::PerClient`], whose clients each have a window of their own.
    pub available_permits: Option<i64>,
    /// Semaphores: the total set with `try_set_permits` by latchkey, if recorded.
    pub total_permits: Option<u64>,
    /// Permit semaphores: the leased permits (at most 1000), earliest lease end first.
    pub leased_permits: Vec<LeasedPermit>,
    /// Rate limiters: the rate in place, as [`RateLimiter::rate`](crate::RateLimiter::rate)
    /// reads it.
    pub rate: Option<RateConfig>,
    /// Job groups: how many jobs are registered (`Scheduler::jobs` reads them).
    pub jobs: Option<u64>,
}

impl Inspection {
    fn new(name: &str, kind: Kind) -> Inspection {
        Inspection {
            name: name.to_owned(),
            kind,
            holders: Vec::new(),
            rw_mode: None,
            remaining_lease: None,
            fencing_token: None,
            waiting_clients: 0,
            fair_queue: Vec::new(),
            available_permits: None,
            total_permits: None,
            leased_permits: Vec::new(),
            rate: None,
            jobs: None,
        }
    }
}

fn parse<T: FromRedisValue>(value: Value) -> Result<T> {
    redis::from_redis_value(value).map_err(|e| unexpected("the inspect script", e))
}

impl Client {
    /// Reads what the name `name` holds, whichever primitive it is: a lock, a fair lock, a
    /// read-write lock, a semaphore, a permit semaphore or a rate limiter (recognized from their
    /// Redisson layouts, see [`Kind`]), or a scheduler's job group, with its holders, lease,
    /// fencing token, waiting clients, permits, rate or number of jobs. `Ok(None)` when nothing
    /// is kept under the name. One read-only script call (and for a rate limiter of
    /// [`RateType::Overall`], a second one that counts its window's permits): a snapshot for
    /// tools and dashboards, not something to decide on (it may be stale as soon as it is
    /// read).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a read.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a bad name,
    /// [`Error::WrongType`](crate::Error::WrongType) when the key holds something else (a list,
    /// a string that is not a count, a hash with a `rate` that is not a number…) or a rate
    /// limiter's window does, connection errors.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(client: latchkey_redis::Client) -> latchkey_redis::Result<()> {
    /// if let Some(found) = client.inspect("orders:1001").await? {
    ///     println!("{} is a {} held by {} owner(s)", found.name, found.kind.as_str(), found.holders.len());
    /// }
    /// if let Some(config) = client.inspect("geocoder").await?.and_then(|found| found.rate) {
    ///     println!("geocoder: {} per {:?}", config.rate, config.interval);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn inspect(&self, name: &str) -> Result<Option<Inspection>> {
        check_name(name)?;
        let namespace = self.namespace();
        let lock = LockKeys::new(namespace, name);
        let fair = FairLockKeys::new(namespace, name);
        let rw = RwLockKeys::new(namespace, name);
        let semaphore = SemaphoreKeys::new(namespace, name);
        let permits = PermitSemaphoreKeys::new(namespace, name);
        let jobs = prefix_name(JOB_INDEX, &object_name(namespace, name));
        let mut invocation = scripts::INSPECT.invocation();
        invocation
            .key(&*lock.hash)
            .key(&*lock.token)
            .key(&*lock.queue)
            .key(&*fair.queue)
            .key(&*rw.token)
            .key(&*rw.writers)
            .key(&*semaphore.total)
            .key(&*permits.leases)
            .key(&jobs);
        let reply: Vec<Value> = self
            .inner
            .conn
            .script(&invocation, "inspecting a name", name)
            .await?;
        let mut parts = reply.into_iter();
        let tag: String = parse(parts.next().unwrap_or(Value::Nil))?;
        let mut next = || parts.next().unwrap_or(Value::Nil);
        let found = match tag.as_str() {
            "none" => return Ok(None),
            "lock" => {
                let owners: Vec<(String, u64)> = parse(next())?;
                let pttl: i64 = parse(next())?;
                let last: i64 = parse(next())?;
                let waiting: u64 = parse(next())?;
                let queue: Vec<String> = parse(next())?;
                let kind = if queue.is_empty() {
                    Kind::Lock
                } else {
                    Kind::FairLock
                };
                Inspection {
                    holders: holders(owners),
                    remaining_lease: lease(pttl),
                    fencing_token: token(last),
                    waiting_clients: waiting,
                    fair_queue: queue,
                    ..Inspection::new(name, kind)
                }
            }
            "rwlock" => {
                let owners: Vec<(String, u64)> = parse(next())?;
                let pttl: i64 = parse(next())?;
                let last: i64 = parse(next())?;
                let writers: u64 = parse(next())?;
                let mode: String = parse(next())?;
                Inspection {
                    holders: holders(owners),
                    rw_mode: match mode.as_str() {
                        "read" => Some(RwMode::Read),
                        "write" => Some(RwMode::Write),
                        _ => None,
                    },
                    remaining_lease: lease(pttl),
                    fencing_token: token(last),
                    waiting_clients: writers,
                    ..Inspection::new(name, Kind::RwLock)
                }
            }
            "semaphore" => {
                let available: i64 = parse(next())?;
                let total: i64 = parse(next())?;
                Inspection {
                    available_permits: Some(available),
                    total_permits: u64::try_from(total).ok(),
                    ..Inspection::new(name, Kind::Semaphore)
                }
            }
            "permit_semaphore" => {
                let available: i64 = parse(next())?;
                let leases: Vec<(Vec<u8>, f64)> = parse(next())?;
                let now: i64 = parse(next())?;
                let leased_permits = leases
                    .into_iter()
                    .filter_map(|(id, end)| {
                        let id = <[u8; 16]>::try_from(id.as_slice()).ok()?;
                        let left = (end as i64).saturating_sub(now).max(0);
                        Some(LeasedPermit {
                            id: PermitId(id),
                            remaining_lease: Duration::from_millis(left as u64),
                        })
                    })
                    .collect();
                Inspection {
                    available_permits: Some(available),
                    leased_permits,
                    ..Inspection::new(name, Kind::PermitSemaphore)
                }
            }
            "rate_limiter" => {
                let rate: u64 = parse(next())?;
                let interval: u64 = parse(next())?;
                let rate_type: String = parse(next())?;
                let keep_alive: u64 = parse(next())?;
                // Redisson's scripts read anything but "1" as overall.
                let rate_type = if rate_type == "1" {
                    RateType::PerClient
                } else {
                    RateType::Overall
                };
                let mut config = RateConfig::new(rate_type, rate, Duration::from_millis(interval));
                if keep_alive > 0 {
                    config = config.with_keep_alive(Duration::from_millis(keep_alive));
                }
                // A per-client window is this client's own: not one an operator looks for.
                let available_permits = match rate_type {
                    RateType::PerClient => None,
                    RateType::Overall => match self.rate_limiter(name).available_permits().await {
                        Ok(left) => Some(left),
                        // Deleted or expired since the first read.
                        Err(error) if error.is_rate_not_set() => return Ok(None),
                        Err(error) => return Err(error),
                    },
                };
                Inspection {
                    rate: Some(config),
                    available_permits,
                    ..Inspection::new(name, Kind::RateLimiter)
                }
            }
            "jobs" => Inspection {
                jobs: Some(parse(next())?),
                ..Inspection::new(name, Kind::JobGroup)
            },
            _ => return Err(unexpected("the inspect script", tag)),
        };
        Ok(Some(found))
    }

    /// The names of the objects whose names match the glob `pattern` (Redis `MATCH` syntax:
    /// `*`, `?`, `[abc]`, `\` to escape), sorted, found with `SCAN … MATCH … COUNT` (never
    /// `KEYS`, which blocks the server): on a Redis Cluster on every primary, on Sentinel on the
    /// primary. Under a [namespace](crate::ClientBuilder::namespace) only that namespace's
    /// objects are found, and their names come without it.
    ///
    /// The keys latchkey and Redisson derive from an object's name (fencing counters, wait
    /// queues, read leases, permit leases, a rate limiter's windows, queues' keys) are not
    /// names: they are left out, so each object is listed once. Scheduler job groups keep no
    /// key under their own name: a second scan finds their indexes (`MATCH latchkey_jobs:*`,
    /// matched against `pattern` here), and their names are listed too. What a name holds is
    /// read with [`Client::inspect`]; a matching key of a kind latchkey does not keep (a plain
    /// list, say) is listed too, and [`Client::inspect`] tells it apart. A scan sees every key
    /// that exists from its start to its end; keys made or deleted meanwhile may or may not be
    /// seen.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: reads only.
    ///
    /// # Errors
    ///
    /// Connection errors; on a cluster, also when the slot map cannot be read.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(client: latchkey_redis::Client) -> latchkey_redis::Result<()> {
    /// for name in client.scan_names("orders:*").await? {
    ///     if let Some(found) = client.inspect(&name).await? {
    ///         println!("{name}: {}", found.kind.as_str());
    ///     }
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn scan_names(&self, pattern: &str) -> Result<Vec<String>> {
        let full = match self.namespace() {
            Some(ns) => format!("{}:{pattern}", escape_glob(ns)),
            None => pattern.to_owned(),
        };
        let keys = self.scan_keys(&full, pattern).await?;
        let prefix = self.namespace().map(|ns| format!("{ns}:"));
        let without_namespace = |key: String| match &prefix {
            Some(prefix) => key.strip_prefix(prefix.as_str()).map(str::to_owned),
            None => Some(key),
        };
        let names: BTreeSet<String> = keys.into_iter().filter_map(without_namespace).collect();
        let mut objects: BTreeSet<String> = names
            .iter()
            .filter(|name| !is_derived(name, &names) && check_name(name).is_ok())
            .cloned()
            .collect();
        let indexes = self.scan_keys(&format!("{JOB_INDEX}:*"), pattern).await?;
        objects.extend(
            indexes
                .iter()
                .filter_map(|key| job_group_of(key))
                .filter_map(|object| without_namespace(object.to_owned()))
                .filter(|group| {
                    glob_match(pattern.as_bytes(), group.as_bytes()) && check_name(group).is_ok()
                }),
        );
        Ok(objects.into_iter().collect())
    }

    /// The keys that match `pattern` (the whole key, namespace included), on every primary;
    /// `name` is for errors.
    async fn scan_keys(&self, pattern: &str, name: &str) -> Result<BTreeSet<String>> {
        let mut keys = BTreeSet::new();
        for slot in self.inner.conn.primary_slots().await? {
            let mut cursor: u64 = 0;
            loop {
                let mut scan = redis::cmd("SCAN");
                scan.arg(cursor)
                    .arg("MATCH")
                    .arg(pattern)
                    .arg("COUNT")
                    .arg(SCAN_COUNT);
                let (next, batch): (u64, Vec<Vec<u8>>) = self
                    .inner
                    .conn
                    .query_on(Some(slot), &scan, "scanning for names", name)
                    .await?;
                keys.extend(
                    batch
                        .into_iter()
                        .filter_map(|key| String::from_utf8(key).ok()),
                );
                if next == 0 {
                    break;
                }
                cursor = next;
            }
        }
        Ok(keys)
    }
}

/// `s` with the glob characters of Redis `MATCH` escaped.
fn escape_glob(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Whether `text` matches the glob `pattern` as Redis `MATCH` reads it (`stringmatchlen` in
/// Redis' `util.c`): `*`, `?`, `[abc]`, `[^abc]`, `[a-z]`, and `\` to escape.
fn glob_match(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (pattern, text);
    while let Some(&c) = p.first() {
        match c {
            b'*' => {
                let rest = &p[p.iter().take_while(|&&b| b == b'*').count()..];
                return rest.is_empty() || (0..=t.len()).any(|i| glob_match(rest, &t[i..]));
            }
            b'?' => {
                let Some((_, tail)) = t.split_first() else {
                    return false;
                };
                (p, t) = (&p[1..], tail);
            }
            b'[' => {
                let Some((&ch, tail)) = t.split_first() else {
                    return false;
                };
                let (matched, rest) = glob_class(&p[1..], ch);
                if !matched {
                    return false;
                }
                (p, t) = (rest, tail);
            }
            _ => {
                // `\x` is `x`; a `\` that ends the pattern is itself.
                let (literal, rest) = match p {
                    [b'\\', escaped, rest @ ..] => (*escaped, rest),
                    [literal, rest @ ..] => (*literal, rest),
                    [] => unreachable!("the pattern has a first byte"),
                };
                match t.split_first() {
                    Some((&ch, tail)) if ch == literal => (p, t) = (rest, tail),
                    _ => return false,
                }
            }
        }
    }
    t.is_empty()
}

/// A `[…]` class of a glob, from after its `[`: whether `ch` is in it, and the pattern after
/// its `]` (nothing when it is not closed, as Redis reads it).
fn glob_class(mut p: &[u8], ch: u8) -> (bool, &[u8]) {
    let negated = p.first() == Some(&b'^');
    if negated {
        p = &p[1..];
    }
    let mut matched = false;
    loop {
        match p {
            [] => break,
            [b'\\', escaped, rest @ ..] => {
                matched |= *escaped == ch;
                p = rest;
            }
            [b']', rest @ ..] => {
                p = rest;
                break;
            }
            [start, b'-', end, rest @ ..] => {
                matched |= (*start.min(end)..=*start.max(end)).contains(&ch);
                p = rest;
            }
            [literal, rest @ ..] => {
                matched |= *literal == ch;
                p = rest;
            }
        }
    }
    (matched != negated, p)
}

/// The object name (namespace included) of the job group whose index is `key`
/// (`latchkey_jobs:{<group>}`, or `latchkey_jobs:<group>` for a name with a hash tag of its
/// own); `None` for another key.
fn job_group_of(key: &str) -> Option<&str> {
    let object = key.strip_prefix(JOB_INDEX)?.strip_prefix(':')?;
    object_of(object)
}

/// The object name in `head`, a key made from it by Redisson's `suffixName` or `prefixName`:
/// `{<name>}` for a name without `{`, else the name itself; `None` for anything else.
fn object_of(head: &str) -> Option<&str> {
    match head.strip_prefix('{').and_then(|h| h.strip_suffix('}')) {
        Some(inner) if !inner.contains(['{', '}']) => Some(inner),
        _ if head.contains('{') => Some(head),
        _ => None,
    }
}

/// Whether `name` is a key derived from an object's name rather than an object: a reserved
/// prefix (`redisson_…`, `latchkey_…`: fencing counters, wait queues, queues' keys), a
/// read-write lock's read lease (`{X}:<owner>:rwlock_timeout:<n>`), or, when `X` was found too,
/// a permit semaphore's leases (`{X}:timeout`) or a rate limiter's windows (`{X}:value`,
/// `{X}:permits`, and `{X}:value:<client id>`, `{X}:permits:<client id>` per client).
fn is_derived(name: &str, names: &BTreeSet<String>) -> bool {
    if name.starts_with("redisson_") || name.starts_with("latchkey_") {
        return true;
    }
    if let Some((head, n)) = name.rsplit_once(":rwlock_timeout:") {
        if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) && head.contains(':') {
            return true;
        }
    }
    let per_client = |suffix: &str| {
        name.rsplit_once(suffix)
            .filter(|(_, id)| !id.is_empty())
            .map(|(head, _)| head)
    };
    [
        name.strip_suffix(":timeout"),
        name.strip_suffix(":value"),
        name.strip_suffix(":permits"),
        per_client(":value:"),
        per_client(":permits:"),
    ]
    .into_iter()
    .flatten()
    .filter_map(object_of)
    .any(|object| names.contains(object))
}

#[cfg(test)]
#[path = "inspect_tests.rs"]
mod tests;
