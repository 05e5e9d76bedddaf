//! Names: every key and channel of every object, derived from the object's name in one place.
//!
//! One rule for all of them. An object called `name` on a client with a
//! [namespace](crate::ClientBuilder::namespace) `ns` is kept at `ns:name` ([`object_name`]),
//! else at `name`; every key and channel of the object is derived from that with Redisson's
//! rules, `<prefix>:{<object>}` ([`prefix_name`]) and `{<object>}:<suffix>` ([`suffix_name`]),
//! which keep an object's own hash tag (`<prefix>:<object>` when it has a `{`). So Java and Rust
//! clients find the same keys, and every key and channel of one object lands in the Redis
//! Cluster slot of the object itself. (The latch channel is Redisson's one exception, see
//! [`LatchKeys`].) The names Redisson uses are kept byte for byte; latchkey's own keys start
//! with `latchkey_`, and object names may not start with either prefix ([`check_name`]).

use std::sync::Arc;

use crate::error::{Error, Result};

/// The longest object name latchkey accepts, in bytes.
///
/// Longer names are rejected with [`Error::InvalidArgument`] before anything is sent.
pub const MAX_NAME_LEN: usize = 1024;

/// Checks an object name: non-empty, at most [`MAX_NAME_LEN`] bytes, no reserved prefix, and
/// not one whole hash tag (see [`whole_name_hash_tag`]).
pub(crate) fn check_name(name: &str) -> Result<()> {
    let reason = if name.is_empty() {
        "the name is empty; give a non-empty name".to_owned()
    } else if name.starts_with("redisson_") || name.starts_with("latchkey_") {
        format!(
            "`{name}` starts with a prefix reserved for the keys latchkey and Redisson derive \
             from object names (`redisson_`, `latchkey_`); choose another name"
        )
    } else if name == "{}" {
        "`{}` is an empty hash tag, not a name; give a name with text in it".to_owned()
    } else if let Some(tag) = whole_name_hash_tag(name) {
        format!(
            "`{name}` is one hash tag and would share its derived keys (fencing counter, \
             channel, queues) with the object `{tag}`; name it `{tag}`, which already keeps \
             all its keys in one cluster slot, or put text outside the braces"
        )
    } else if name.len() > MAX_NAME_LEN {
        format!(
            "the name is {} bytes long; the limit is {MAX_NAME_LEN} bytes",
            name.len()
        )
    } else {
        return Ok(());
    };
    Err(Error::invalid("name", reason))
}

/// `Some(X)` when `name` is `{X}` and `X` has no `{`: Redisson's `prefixName` / `suffixName`
/// derive the same keys for `{X}` and for `X` (`prefix:{X}`), so the two would share their
/// fencing counter, channels and queues. Such names are refused.
fn whole_name_hash_tag(name: &str) -> Option<&str> {
    let tag = name.strip_prefix('{')?.strip_suffix('}')?;
    (!tag.contains('{')).then_some(tag)
}

/// `<prefix>:{<name>}`, or `<prefix>:<name>` when `name` already has a `{` (its own hash tag):
/// Redisson's `prefixName`.
pub(crate) fn prefix_name(prefix: &str, name: &str) -> String {
    if name.contains('{') {
        format!("{prefix}:{name}")
    } else {
        format!("{prefix}:{{{name}}}")
    }
}

/// `{<name>}:<suffix>`, or `<name>:<suffix>` when `name` already has a `{`: Redisson's
/// `suffixName`.
pub(crate) fn suffix_name(name: &str, suffix: &str) -> String {
    if name.contains('{') {
        format!("{name}:{suffix}")
    } else {
        format!("{{{name}}}:{suffix}")
    }
}

/// The name an object called `name` has in Redis: `<namespace>:<name>`, or `name`.
pub(crate) fn object_name(namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(ns) => format!("{ns}:{name}"),
        None => name.to_owned(),
    }
}

/// The Redis Cluster hash slot of `key` (CRC16 of its hash tag, modulo 16384).
pub(crate) fn key_slot(key: &[u8]) -> u16 {
    let tag = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            rest.iter()
                .position(|&b| b == b'}')
                .filter(|&close| close > 0)
                .map(|close| &rest[..close])
        })
        .unwrap_or(key);
    crc16::State::<crc16::XMODEM>::calculate(tag) % 16384
}

/// A struct of the keys and channels of one kind of object, and its `new` (for the object `name`
/// of a client with `namespace`): the object's own name in the field named in brackets, if any,
/// and in each other field the key `<prefix>:{object}` ([`prefix_name`]).
macro_rules! prefixed_keys {
    (
        $(#[$doc:meta])*
        $keys:ident $([$(#[$object_doc:meta])* $object:ident])? {
            $($(#[$field_doc:meta])* $field:ident: $prefix:literal,)+
        }
    ) => {
        $(#[$doc])*
        #[derive(Clone, Debug)]
        pub(crate) struct $keys {
            $($(#[$object_doc])* pub(crate) $object: Arc<str>,)?
            $($(#[$field_doc])* pub(crate) $field: Arc<str>,)+
        }

        impl $keys {
            pub(crate) fn new(namespace: Option<&str>, name: &str) -> $keys {
                let object = object_name(namespace, name);
                $keys {
                    $($field: Arc::from(prefix_name($prefix, &object)),)+
                    $($object: Arc::from(object),)?
                }
            }
        }
    };
}

prefixed_keys! {
    /// The keys and channel of a reentrant lock (and of each node of a RedLock).
    LockKeys [
        /// The Redisson lock hash: owner field → hold count. The object's name itself.
        hash
    ] {
        /// The fencing counter, `redisson_lock_token:{name}`.
        token: "redisson_lock_token",
        /// The unlock channel, `redisson_lock__channel:{name}`.
        channel: "redisson_lock__channel",
        /// latchkey's wait queue (zset of client wake ids by arrival).
        queue: "latchkey_lock_queue",
        /// latchkey's waiter liveness (hash of client wake id → registered until).
        alive: "latchkey_lock_alive",
        /// latchkey's hand-off reservation.
        hand_off: "latchkey_lock_handoff",
    }
}

impl LockKeys {
    /// The KEYS of the release and leave scripts: the hash, the channel and the wait queue.
    pub(crate) fn release_keys(&self) -> Vec<Arc<str>> {
        let queue = [&self.queue, &self.alive, &self.hand_off];
        [&self.hash, &self.channel]
            .into_iter()
            .chain(queue)
            .cloned()
            .collect()
    }
}

prefixed_keys! {
    /// The keys and channels of a leader election (latchkey's own; Redisson has no election).
    ElectionKeys {
        /// The leader key: a hash with one field, the leader's owner id, holding
        /// `<term>:<value>` (a held lock's layout), `latchkey_election:{name}`.
        leader: "latchkey_election",
        /// The term counter (expires with the election idle).
        term: "latchkey_election_term",
        /// The change log: the last changes, for observers (expires with the election idle).
        log: "latchkey_election_log",
        /// The wait queue (zset of client wake ids by arrival).
        queue: "latchkey_election_queue",
        /// The waiters' liveness (hash of client wake id → registered until).
        alive: "latchkey_election_alive",
        /// The hand-off reservation.
        hand_off: "latchkey_election_handoff",
        /// The channel waiters are woken on (one at a time).
        channel: "latchkey_election_channel",
        /// The channel every change is published on, for observers.
        observe: "latchkey_election_observe",
    }
}

prefixed_keys! {
    /// The keys and channels of a fair lock (Redisson's `RedissonFairLock`).
    FairLockKeys [
        /// The lock hash, as for a [`LockKeys::hash`].
        hash
    ] {
        /// The fencing counter (shared with the reentrant lock of the same name).
        token: "redisson_lock_token",
        /// The waiters' queue, `redisson_lock_queue:{name}`.
        queue: "redisson_lock_queue",
        /// The waiters' deadlines, `redisson_lock_timeout:{name}`.
        deadlines: "redisson_lock_timeout",
        /// `redisson_lock__channel:{name}`: each waiter's wake channel is `<this>:<owner>`.
        channel_prefix: "redisson_lock__channel",
    }
}

impl FairLockKeys {
    /// The wake channel of the waiter `owner`: `redisson_lock__channel:{name}:<owner>`.
    pub(crate) fn channel(&self, owner: &str) -> Arc<str> {
        Arc::from(format!("{}:{owner}", self.channel_prefix))
    }
}

/// The keys and channel of a read-write lock (Redisson's `RedissonReadWriteLock`).
#[derive(Debug)]
pub(crate) struct RwLockKeys {
    /// The lock hash (mode, owners' hold counts).
    pub(crate) hash: Arc<str>,
    /// latchkey's fencing counter.
    pub(crate) token: Arc<str>,
    /// latchkey's count of waiting writers.
    pub(crate) writers: Arc<str>,
    /// The unlock channel, `redisson_rwlock:{name}`.
    pub(crate) channel: Arc<str>,
    /// `{name}` (or `name` when it has its own hash tag): every reader's lease keys are
    /// `<this>:<owner>:rwlock_timeout:<i>`.
    pub(crate) lease_prefix: Arc<str>,
}

impl RwLockKeys {
    /// The keys of the read-write lock `name` of a client with `namespace`.
    pub(crate) fn new(namespace: Option<&str>, name: &str) -> RwLockKeys {
        let object = object_name(namespace, name);
        let key = |prefix: &str| Arc::from(prefix_name(prefix, &object));
        RwLockKeys {
            token: key("latchkey_rwlock_token"),
            writers: key("latchkey_rwlock_writers"),
            channel: key("redisson_rwlock"),
            // `suffix_name` without the suffix and its `:`.
            lease_prefix: Arc::from(suffix_name(&object, "").trim_end_matches(':')),
            hash: Arc::from(object),
        }
    }

    /// The prefix of the read lease keys of `owner`, `{name}:<owner>:rwlock_timeout`: its
    /// leases are `<this>:<i>`.
    pub(crate) fn read_prefix(&self, owner: &str) -> Arc<str> {
        Arc::from(format!("{}:{owner}:rwlock_timeout", self.lease_prefix))
    }
}

prefixed_keys! {
    /// The keys and channel of a semaphore (Redisson's `RedissonSemaphore`).
    SemaphoreKeys [
        /// The count of available permits: the object's name itself.
        count
    ] {
        /// latchkey's record of the total, `latchkey_semaphore_total:{name}`.
        total: "latchkey_semaphore_total",
        /// The release channel, `redisson_sc:{name}`.
        channel: "redisson_sc",
    }
}

/// The keys and channel of a permit semaphore (Redisson's
/// `RedissonPermitExpirableSemaphore`).
#[derive(Clone, Debug)]
pub(crate) struct PermitSemaphoreKeys {
    /// The available permits: the object's name itself.
    pub(crate) permits: Arc<str>,
    /// The leased permits and their deadlines, `{name}:timeout`.
    pub(crate) leases: Arc<str>,
    /// The release channel, `redisson_sc:{name}`.
    pub(crate) channel: Arc<str>,
}

impl PermitSemaphoreKeys {
    /// The keys of the permit semaphore `name` of a client with `namespace`.
    pub(crate) fn new(namespace: Option<&str>, name: &str) -> PermitSemaphoreKeys {
        let object = object_name(namespace, name);
        PermitSemaphoreKeys {
            leases: Arc::from(suffix_name(&object, "timeout")),
            channel: Arc::from(prefix_name("redisson_sc", &object)),
            permits: Arc::from(object),
        }
    }
}

/// The key and channel of a count-down latch (Redisson's `RedissonCountDownLatch`).
#[derive(Debug)]
pub(crate) struct LatchKeys {
    /// The count: the object's name itself.
    pub(crate) count: String,
    /// The channel counts and openings are published on.
    pub(crate) channel: String,
}

impl LatchKeys {
    /// The keys of the latch `name` of a client with `namespace`, on a Redis Cluster if
    /// `cluster`.
    ///
    /// Redisson's `getChannelName` is `redisson_countdownlatch__channel__{<name>}` for every key (it
    /// does not use `prefixName`). That channel is kept everywhere it shares the key's Redis
    /// Cluster slot, which is on every deployment but a cluster, and on a cluster for every key
    /// without a `}`. A key with its own hash tag (`orders{eu}:1`) would put Redisson's channel in
    /// another slot than the count (`orders{eu` is hashed, not `eu`), and the scripts, which publish
    /// with `spublish` and name the channel in `KEYS`, would fail with `CROSSSLOT` (Redisson's own
    /// latch fails so on a cluster). There the channel is
    /// `redisson_countdownlatch__channel__<name>`, which keeps the key's hash tag.
    pub(crate) fn new(namespace: Option<&str>, name: &str, cluster: bool) -> LatchKeys {
        const PREFIX: &str = "redisson_countdownlatch__channel__";
        let count = object_name(namespace, name);
        let redisson = format!("{PREFIX}{{{count}}}");
        let channel = if !cluster || key_slot(redisson.as_bytes()) == key_slot(count.as_bytes()) {
            redisson
        } else {
            format!("{PREFIX}{count}")
        };
        LatchKeys { count, channel }
    }
}

prefixed_keys! {
    /// The keys and channels of a delayed queue and its blocking queue (see the table in the
    /// [`DelayedQueue`](crate::DelayedQueue) docs).
    QueueKeys {
        delayed: "latchkey_delay_queue_timeout",
        ready: "latchkey_queue",
        items: "latchkey_queue_items",
        unacked: "latchkey_queue_unacked",
        attempts: "latchkey_queue_attempts",
        dead: "latchkey_queue_dead",
        /// Item id → why it was dead-lettered.
        dead_reason: "latchkey_queue_dead_reason",
        /// Item id → due time (ms since the epoch), until the item is finished.
        due: "latchkey_queue_due",
        delay_channel: "latchkey_delay_queue_channel",
        ready_channel: "latchkey_queue_channel",
    }
}

/// `Debug` for a handle: its type and name (`self.inner.name`), and the listed fields.
macro_rules! named_debug {
    ($handle:ident $(, $field:literal => $($path:ident).+)*) => {
        impl std::fmt::Debug for $handle {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($handle))
                    .field("name", &self.inner.name)
                    $(.field($field, &self.inner.$($path).+))*
                    .finish()
            }
        }
    };
}
pub(crate) use named_debug;

#[cfg(test)]
#[path = "keys_tests.rs"]
mod tests;
