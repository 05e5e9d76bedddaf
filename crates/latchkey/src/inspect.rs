//! Reads for operators: what a name holds ([`Client::inspect`]) and which names exist
//! ([`Client::scan_names`]). The Redisson layouts are recognized here, so that tools (the
//! `latchkey` command's `status` and `list`) need not know them.

use std::collections::BTreeSet;
use std::time::Duration;

use redis::{FromRedisValue, Value};

use crate::client::Client;
use crate::error::Result;
use crate::keys::{
    check_name, FairLockKeys, LockKeys, PermitSemaphoreKeys, RwLockKeys, SemaphoreKeys,
};
use crate::lock::{holders, lease, token, Holder};
use crate::permit_semaphore::PermitId;
use crate::scripts;
use crate::scripts::Invoke;
use crate::wait::unexpected;

/// How many keys one `SCAN` call is asked to look at.
const SCAN_COUNT: u32 = 1000;

/// Which primitive a name holds, as [`Client::inspect`] recognizes it from its Redisson layout.
///
/// A fair lock and a lock share their layout (a hash of owners): a lock with owners in the fair
/// lock's queue is a [`Kind::FairLock`], one without is a [`Kind::Lock`]. A semaphore, a permit
/// semaphore without leased permits and a count-down latch are all a count: they show as a
/// [`Kind::Semaphore`].
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
}

impl Kind {
    /// A short lowercase name: `lock`, `fair_lock`, `rw_lock`, `semaphore`, `permit_semaphore`.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(latchkey_redis::Kind::FairLock.as_str(), "fair_lock");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Lock => "lock",
            Kind::FairLock => "fair_lock",
            Kind::RwLock => "rw_lock",
            Kind::Semaphore => "semaphore",
            Kind::PermitSemaphore => "permit_semaphore",
        }
    }

    /// Whether this is a lock of some kind (not a semaphore).
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
    /// held).
    pub available_permits: Option<i64>,
    /// Semaphores: the total set with `try_set_permits` by latchkey, if recorded.
    pub total_permits: Option<u64>,
    /// Permit semaphores: the leased permits (at most 1000), earliest lease end first.
    pub leased_permits: Vec<LeasedPermit>,
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
        }
    }
}

fn parse<T: FromRedisValue>(value: Value) -> Result<T> {
    redis::from_redis_value(value).map_err(|e| unexpected("the inspect script", e))
}

impl Client {
    /// Reads what the name `name` holds, whichever primitive it is: a lock, a fair lock, a
    /// read-write lock, a semaphore or a permit semaphore (recognized from their Redisson
    /// layouts, see [`Kind`]), with its holders, lease, fencing token, waiting clients or
    /// permits. `Ok(None)` when nothing is kept under the name. One read-only script call: a
    /// snapshot for tools and dashboards, not something to decide on (it may be stale as soon
    /// as it is read).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a read.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a bad name,
    /// [`Error::WrongType`](crate::Error::WrongType) when the key holds something else (a list,
    /// a string that is not a count…), connection errors.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn f(client: latchkey_redis::Client) -> latchkey_redis::Result<()> {
    /// if let Some(found) = client.inspect("orders:1001").await? {
    ///     println!("{} is a {} held by {} owner(s)", found.name, found.kind.as_str(), found.holders.len());
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
        let mut invocation = scripts::INSPECT.invocation();
        invocation
            .key(&*lock.hash)
            .key(&*lock.token)
            .key(&*lock.queue)
            .key(&*fair.queue)
            .key(&*rw.token)
            .key(&*rw.writers)
            .key(&*semaphore.total)
            .key(&*permits.leases);
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
                            id: PermitId::from_bytes(id),
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
    /// queues, read leases, permit leases, queues' keys) are not names: they are left out, so
    /// each object is listed once. What a name holds is read with [`Client::inspect`]; a
    /// matching key of a kind latchkey does not keep (a plain list, say) is listed too, and
    /// [`Client::inspect`] tells it apart. A scan sees every key that exists from its start to
    /// its end; keys made or deleted meanwhile may or may not be seen.
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
        let mut keys = BTreeSet::new();
        for slot in self.inner.conn.primary_slots().await? {
            let mut cursor: u64 = 0;
            loop {
                let mut scan = redis::cmd("SCAN");
                scan.arg(cursor)
                    .arg("MATCH")
                    .arg(&full)
                    .arg("COUNT")
                    .arg(SCAN_COUNT);
                let (next, batch): (u64, Vec<Vec<u8>>) = self
                    .inner
                    .conn
                    .query_on(Some(slot), &scan, "scanning for names", pattern)
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
        let prefix = self.namespace().map(|ns| format!("{ns}:"));
        let names: BTreeSet<String> = keys
            .into_iter()
            .filter_map(|key| match &prefix {
                Some(prefix) => key.strip_prefix(prefix.as_str()).map(str::to_owned),
                None => Some(key),
            })
            .collect();
        Ok(names
            .iter()
            .filter(|name| !is_derived(name, &names) && check_name(name).is_ok())
            .cloned()
            .collect())
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

/// Whether `name` is a key derived from an object's name rather than an object: a reserved
/// prefix (`redisson_…`, `latchkey_…`: fencing counters, wait queues, queues' keys), a
/// read-write lock's read lease (`{X}:<owner>:rwlock_timeout:<n>`), or a permit semaphore's
/// leases (`{X}:timeout`) when `X` was found too.
fn is_derived(name: &str, names: &BTreeSet<String>) -> bool {
    if name.starts_with("redisson_") || name.starts_with("latchkey_") {
        return true;
    }
    if let Some((head, n)) = name.rsplit_once(":rwlock_timeout:") {
        if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) && head.contains(':') {
            return true;
        }
    }
    if let Some(object) = name.strip_suffix(":timeout") {
        let object = match object.strip_prefix('{').and_then(|o| o.strip_suffix('}')) {
            Some(inner) if !inner.contains('{') => inner,
            _ => object,
        };
        return names.contains(object);
    }
    false
}

#[cfg(test)]
#[path = "inspect_tests.rs"]
mod tests;
