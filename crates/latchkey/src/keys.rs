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
    if name.is_empty() {
        return Err(Error::invalid(
            "name",
            "the name is empty; give a non-empty name",
        ));
    }
    if name.starts_with("redisson_") || name.starts_with("latchkey_") {
        return Err(Error::invalid(
            "name",
            format!(
                "`{name}` starts with a prefix reserved for the keys latchkey and Redisson derive \
                 from object names (`redisson_`, `latchkey_`); choose another name"
            ),
        ));
    }
    if name == "{}" {
        return Err(Error::invalid(
            "name",
            "`{}` is an empty hash tag, not a name; give a name with text in it",
        ));
    }
    if let Some(tag) = whole_name_hash_tag(name) {
        return Err(Error::invalid(
            "name",
            format!(
                "`{name}` is one hash tag and would share its derived keys (fencing counter, \
                 channel, queues) with the object `{tag}`; name it `{tag}`, which already keeps \
                 all its keys in one cluster slot, or put text outside the braces"
            ),
        ));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(Error::invalid(
            "name",
            format!(
                "the name is {} bytes long; the limit is {MAX_NAME_LEN} bytes",
                name.len()
            ),
        ));
    }
    Ok(())
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
fn prefix_name(prefix: &str, name: &str) -> String {
    if name.contains('{') {
        format!("{prefix}:{name}")
    } else {
        format!("{prefix}:{{{name}}}")
    }
}

/// `{<name>}:<suffix>`, or `<name>:<suffix>` when `name` already has a `{`: Redisson's
/// `suffixName`.
fn suffix_name(name: &str, suffix: &str) -> String {
    if name.contains('{') {
        format!("{name}:{suffix}")
    } else {
        format!("{{{name}}}:{suffix}")
    }
}

/// The name an object called `name` has in Redis: `<namespace>:<name>`, or `name`.
fn object_name(namespace: Option<&str>, name: &str) -> String {
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

/// The keys and channel of a reentrant lock (and of each node of a RedLock).
#[derive(Debug)]
pub(crate) struct LockKeys {
    /// The Redisson lock hash: owner field → hold count. The object's name itself.
    pub(crate) hash: Arc<str>,
    /// The fencing counter, `redisson_lock_token:{name}`.
    pub(crate) token: Arc<str>,
    /// The unlock channel, `redisson_lock__channel:{name}`.
    pub(crate) channel: Arc<str>,
    /// latchkey's wait queue (zset of client wake ids by arrival).
    pub(crate) queue: Arc<str>,
    /// latchkey's waiter liveness (hash of client wake id → registered until).
    pub(crate) alive: Arc<str>,
    /// latchkey's hand-off reservation.
    pub(crate) hand_off: Arc<str>,
}

impl LockKeys {
    /// The keys of the lock `name` of a client with `namespace`.
    pub(crate) fn new(namespace: Option<&str>, name: &str) -> LockKeys {
        let object = object_name(namespace, name);
        let key = |prefix: &str| Arc::from(prefix_name(prefix, &object));
        LockKeys {
            token: key("redisson_lock_token"),
            channel: key("redisson_lock__channel"),
            queue: key("latchkey_lock_queue"),
            alive: key("latchkey_lock_alive"),
            hand_off: key("latchkey_lock_handoff"),
            hash: Arc::from(object),
        }
    }
}

/// The keys and channels of a leader election (latchkey's own; Redisson has no election).
#[derive(Debug)]
pub(crate) struct ElectionKeys {
    /// The leader key: a hash with one field, the leader's owner id, holding
    /// `<term>:<value>` (a held lock's layout), `latchkey_election:{name}`.
    pub(crate) leader: Arc<str>,
    /// The term counter (never expires).
    pub(crate) term: Arc<str>,
    /// The change log: the last changes, for observers (never expires).
    pub(crate) log: Arc<str>,
    /// The wait queue (zset of client wake ids by arrival).
    pub(crate) queue: Arc<str>,
    /// The waiters' liveness (hash of client wake id → registered until).
    pub(crate) alive: Arc<str>,
    /// The hand-off reservation.
    pub(crate) hand_off: Arc<str>,
    /// The channel waiters are woken on (one at a time).
    pub(crate) channel: Arc<str>,
    /// The channel every change is published on, for observers.
    pub(crate) observe: Arc<str>,
}

impl ElectionKeys {
    /// The keys of the election `name` of a client with `namespace`.
    pub(crate) fn new(namespace: Option<&str>, name: &str) -> ElectionKeys {
        let object = object_name(namespace, name);
        let key = |prefix: &str| Arc::from(prefix_name(prefix, &object));
        ElectionKeys {
            leader: key("latchkey_election"),
            term: key("latchkey_election_term"),
            log: key("latchkey_election_log"),
            queue: key("latchkey_election_queue"),
            alive: key("latchkey_election_alive"),
            hand_off: key("latchkey_election_handoff"),
            channel: key("latchkey_election_channel"),
            observe: key("latchkey_election_observe"),
        }
    }
}

/// The keys and channels of a fair lock (Redisson's `RedissonFairLock`).
#[derive(Debug)]
pub(crate) struct FairLockKeys {
    /// The lock hash, as for a [`LockKeys::hash`].
    pub(crate) hash: Arc<str>,
    /// The fencing counter (shared with the reentrant lock of the same name).
    pub(crate) token: Arc<str>,
    /// The waiters' queue, `redisson_lock_queue:{name}`.
    pub(crate) queue: Arc<str>,
    /// The waiters' deadlines, `redisson_lock_timeout:{name}`.
    pub(crate) deadlines: Arc<str>,
    /// `redisson_lock__channel:{name}`: each waiter's wake channel is `<this>:<owner>`.
    pub(crate) channel_prefix: Arc<str>,
}

impl FairLockKeys {
    /// The keys of the fair lock `name` of a client with `namespace`.
    pub(crate) fn new(namespace: Option<&str>, name: &str) -> FairLockKeys {
        let object = object_name(namespace, name);
        let key = |prefix: &str| Arc::from(prefix_name(prefix, &object));
        FairLockKeys {
            token: key("redisson_lock_token"),
            queue: key("redisson_lock_queue"),
            deadlines: key("redisson_lock_timeout"),
            channel_prefix: key("redisson_lock__channel"),
            hash: Arc::from(object),
        }
    }

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

/// The keys and channel of a semaphore (Redisson's `RedissonSemaphore`).
#[derive(Debug)]
pub(crate) struct SemaphoreKeys {
    /// The count of available permits: the object's name itself.
    pub(crate) count: Arc<str>,
    /// latchkey's record of the total, `latchkey_semaphore_total:{name}`.
    pub(crate) total: Arc<str>,
    /// The release channel, `redisson_sc:{name}`.
    pub(crate) channel: Arc<str>,
}

impl SemaphoreKeys {
    /// The keys of the semaphore `name` of a client with `namespace`.
    pub(crate) fn new(namespace: Option<&str>, name: &str) -> SemaphoreKeys {
        let object = object_name(namespace, name);
        SemaphoreKeys {
            total: Arc::from(prefix_name("latchkey_semaphore_total", &object)),
            channel: Arc::from(prefix_name("redisson_sc", &object)),
            count: Arc::from(object),
        }
    }
}

/// The keys and channel of a permit semaphore (Redisson's
/// `RedissonPermitExpirableSemaphore`).
#[derive(Debug)]
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

/// The keys and channels of a delayed queue and its blocking queue (see the table in the
/// [`DelayedQueue`](crate::DelayedQueue) docs).
#[derive(Debug)]
pub(crate) struct QueueKeys {
    pub(crate) delayed: Arc<str>,
    pub(crate) ready: Arc<str>,
    pub(crate) items: Arc<str>,
    pub(crate) unacked: Arc<str>,
    pub(crate) attempts: Arc<str>,
    pub(crate) dead: Arc<str>,
    /// Item id → why it was dead-lettered.
    pub(crate) dead_reason: Arc<str>,
    /// Item id → due time (ms since the epoch), until the item is finished.
    pub(crate) due: Arc<str>,
    pub(crate) delay_channel: Arc<str>,
    pub(crate) ready_channel: Arc<str>,
}

impl QueueKeys {
    /// The keys of the queue `name` of a client with `namespace`.
    pub(crate) fn new(namespace: Option<&str>, name: &str) -> QueueKeys {
        let object = object_name(namespace, name);
        let key = |prefix: &str| Arc::from(prefix_name(prefix, &object));
        QueueKeys {
            delayed: key("latchkey_delay_queue_timeout"),
            ready: key("latchkey_queue"),
            items: key("latchkey_queue_items"),
            unacked: key("latchkey_queue_unacked"),
            attempts: key("latchkey_queue_attempts"),
            dead: key("latchkey_queue_dead"),
            dead_reason: key("latchkey_queue_dead_reason"),
            due: key("latchkey_queue_due"),
            delay_channel: key("latchkey_delay_queue_channel"),
            ready_channel: key("latchkey_queue_channel"),
        }
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
mod tests {
    use super::*;

    #[test]
    fn derived_names_keep_one_hash_tag() {
        assert_eq!(
            prefix_name("redisson_lock_token", "a"),
            "redisson_lock_token:{a}"
        );
        assert_eq!(
            prefix_name("redisson_lock_token", "a{b}"),
            "redisson_lock_token:a{b}"
        );
        assert_eq!(suffix_name("a", "timeout"), "{a}:timeout");
        assert_eq!(suffix_name("x{a}", "timeout"), "x{a}:timeout");
    }

    #[test]
    fn slots_follow_hash_tags() {
        // Values from the Redis Cluster specification and `CLUSTER KEYSLOT`.
        assert_eq!(key_slot(b"123456789"), 12739);
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_eq!(key_slot(b"foo{}{bar}"), key_slot(b"foo{}{bar}"));
        assert_eq!(key_slot(b"redisson_lock__channel:{a}"), key_slot(b"a"));
    }

    /// Redisson's names, byte for byte (Java clients share these keys), and latchkey's own.
    #[test]
    fn every_primitive_has_redissons_names() {
        let lock = LockKeys::new(None, "orders");
        let names = [
            &lock.hash,
            &lock.token,
            &lock.channel,
            &lock.queue,
            &lock.alive,
            &lock.hand_off,
        ];
        assert_eq!(
            names.map(|n| &**n),
            [
                "orders",
                "redisson_lock_token:{orders}",
                "redisson_lock__channel:{orders}",
                "latchkey_lock_queue:{orders}",
                "latchkey_lock_alive:{orders}",
                "latchkey_lock_handoff:{orders}",
            ]
        );

        let fair = FairLockKeys::new(None, "printer");
        let names = [&fair.hash, &fair.token, &fair.queue, &fair.deadlines];
        assert_eq!(
            names.map(|n| &**n),
            [
                "printer",
                "redisson_lock_token:{printer}",
                "redisson_lock_queue:{printer}",
                "redisson_lock_timeout:{printer}",
            ]
        );
        assert_eq!(
            &*fair.channel("c1:7"),
            "redisson_lock__channel:{printer}:c1:7"
        );

        let rw = RwLockKeys::new(None, "config");
        let names = [
            &rw.hash,
            &rw.token,
            &rw.writers,
            &rw.channel,
            &rw.lease_prefix,
        ];
        assert_eq!(
            names.map(|n| &**n),
            [
                "config",
                "latchkey_rwlock_token:{config}",
                "latchkey_rwlock_writers:{config}",
                "redisson_rwlock:{config}",
                "{config}",
            ]
        );
        assert_eq!(&*rw.read_prefix("c1:7"), "{config}:c1:7:rwlock_timeout");

        let sem = SemaphoreKeys::new(None, "downloads");
        assert_eq!(
            [&sem.count, &sem.total, &sem.channel].map(|n| &**n),
            [
                "downloads",
                "latchkey_semaphore_total:{downloads}",
                "redisson_sc:{downloads}",
            ]
        );

        let psem = PermitSemaphoreKeys::new(None, "workers");
        assert_eq!(
            [&psem.permits, &psem.leases, &psem.channel].map(|n| &**n),
            ["workers", "{workers}:timeout", "redisson_sc:{workers}"]
        );

        let queue = QueueKeys::new(None, "jobs");
        let names = [
            &queue.delayed,
            &queue.ready,
            &queue.items,
            &queue.unacked,
            &queue.attempts,
            &queue.dead,
            &queue.dead_reason,
            &queue.due,
            &queue.delay_channel,
            &queue.ready_channel,
        ];
        assert_eq!(
            names.map(|n| &**n),
            [
                "latchkey_delay_queue_timeout:{jobs}",
                "latchkey_queue:{jobs}",
                "latchkey_queue_items:{jobs}",
                "latchkey_queue_unacked:{jobs}",
                "latchkey_queue_attempts:{jobs}",
                "latchkey_queue_dead:{jobs}",
                "latchkey_queue_dead_reason:{jobs}",
                "latchkey_queue_due:{jobs}",
                "latchkey_delay_queue_channel:{jobs}",
                "latchkey_queue_channel:{jobs}",
            ]
        );
    }

    /// The namespace is part of the object's name, so every derived name follows it, and an
    /// object's own hash tag is kept.
    #[test]
    fn one_rule_for_namespaces_and_hash_tags() {
        let lock = LockKeys::new(Some("billing"), "orders");
        assert_eq!(&*lock.hash, "billing:orders");
        assert_eq!(&*lock.token, "redisson_lock_token:{billing:orders}");
        let tagged = LockKeys::new(Some("billing"), "orders:{eu}");
        assert_eq!(&*tagged.hash, "billing:orders:{eu}");
        assert_eq!(&*tagged.token, "redisson_lock_token:billing:orders:{eu}");
        let rw = RwLockKeys::new(Some("ns"), "cfg{x}");
        assert_eq!(&*rw.lease_prefix, "ns:cfg{x}");
        assert_eq!(&*rw.read_prefix("o"), "ns:cfg{x}:o:rwlock_timeout");
        assert_eq!(
            &*PermitSemaphoreKeys::new(Some("ns"), "w").leases,
            "{ns:w}:timeout"
        );
        let queue = QueueKeys::new(Some("ns"), "jobs:{eu}");
        assert_eq!(&*queue.ready, "latchkey_queue:ns:jobs:{eu}");
        assert_eq!(
            LatchKeys::new(Some("ns"), "ready", false).channel,
            "redisson_countdownlatch__channel__{ns:ready}"
        );
        // Every key of an object is in the object's slot.
        for (namespace, name) in [(None, "a"), (Some("ns"), "b"), (None, "c:{tag}")] {
            let lock = LockKeys::new(namespace, name);
            let slot = key_slot(lock.hash.as_bytes());
            for key in [
                &lock.token,
                &lock.channel,
                &lock.queue,
                &lock.alive,
                &lock.hand_off,
            ] {
                assert_eq!(key_slot(key.as_bytes()), slot, "{key}");
            }
        }
    }

    /// Every key and channel of an election is latchkey's own and in the election's slot.
    #[test]
    fn election_keys_share_one_slot() {
        let keys = ElectionKeys::new(Some("ns"), "jobs");
        assert_eq!(&*keys.leader, "latchkey_election:{ns:jobs}");
        assert_eq!(&*keys.term, "latchkey_election_term:{ns:jobs}");
        assert_eq!(&*keys.observe, "latchkey_election_observe:{ns:jobs}");
        for (namespace, name) in [(None, "a"), (Some("ns"), "b"), (None, "c:{tag}")] {
            let keys = ElectionKeys::new(namespace, name);
            let slot = key_slot(keys.leader.as_bytes());
            for key in [
                &keys.term,
                &keys.log,
                &keys.queue,
                &keys.alive,
                &keys.hand_off,
                &keys.channel,
                &keys.observe,
            ] {
                assert_eq!(key_slot(key.as_bytes()), slot, "{key}");
            }
        }
    }

    #[test]
    fn the_latch_channel_is_redissons_unless_that_leaves_the_keys_slot() {
        let channel = |name: &str, cluster: bool| LatchKeys::new(None, name, cluster).channel;
        for cluster in [false, true] {
            assert_eq!(
                channel("ready", cluster),
                "redisson_countdownlatch__channel__{ready}"
            );
        }
        assert_eq!(
            channel("orders{eu}:1", false),
            "redisson_countdownlatch__channel__{orders{eu}:1}"
        );
        let tagged = channel("orders{eu}:1", true);
        assert_eq!(tagged, "redisson_countdownlatch__channel__orders{eu}:1");
        assert_eq!(key_slot(tagged.as_bytes()), key_slot(b"eu"));
        // A `{` without a closing brace is no hash tag: Redisson's channel shares the slot.
        assert_eq!(
            channel("a{b", true),
            "redisson_countdownlatch__channel__{a{b}"
        );
    }

    #[test]
    fn names_are_checked() {
        assert!(check_name("").unwrap_err().is_invalid_argument());
        assert!(check_name(&"x".repeat(MAX_NAME_LEN + 1))
            .unwrap_err()
            .is_invalid_argument());
        assert!(check_name(&"x".repeat(MAX_NAME_LEN)).is_ok());
        assert!(check_name("redisson_lock_token:{a}")
            .unwrap_err()
            .is_invalid_argument());
        assert!(check_name("latchkey_lock_queue:{a}")
            .unwrap_err()
            .is_invalid_argument());
        assert!(check_name("orders:{1001}").is_ok());
        assert!(check_name("{1001}:orders").is_ok());
        assert!(check_name("{a}{b}").is_ok());
        for whole_tag in ["{a}", "{}", "{a}b}", "{orders:1001}"] {
            assert!(
                check_name(whole_tag).unwrap_err().is_invalid_argument(),
                "{whole_tag}"
            );
        }
    }
}
