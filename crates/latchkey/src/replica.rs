//! Replica-synced acquires (see [`ClientBuilder::replica_sync`](crate::ClientBuilder::replica_sync)):
//! the one implementation that every lock-family acquire goes through — [`Lock`](crate::Lock),
//! [`FairLock`](crate::FairLock), both sides of [`RwLock`](crate::RwLock),
//! [`Semaphore`](crate::Semaphore), [`PermitSemaphore`](crate::PermitSemaphore) and
//! [`Election`](crate::Election).
//!
//! An acquire script that may wait for replicas is pipelined with `WAIT replicas timeout` on the
//! same connection (`WAIT` cannot run inside a script). When the script granted something and
//! fewer replicas than required acknowledged it, [`Memory::decide`] says what to do with the
//! grant — keep it, undo it with the primitive's own release script (the acquire then fails
//! with [`Error::NotReplicated`]), undo it and follow the sentinels elsewhere, or abandon it on a
//! primary the client has left — from the facts the client gathers one at a time, as the
//! decision asks for them ([`Step`]). The decision is a pure function of those facts and of
//! what the client remembers of each shard, tested by one table.
//!
//! In auto mode, a shard (a Redis Cluster primary's slots; off a cluster, the one primary)
//! found without replicas is not waited for; its replica count is read again (`INFO`) every
//! [`REPLICA_RECHECK`], so replicas added later are waited for from then on. On Sentinel, where
//! a primary may be promoted or demoted at any time, `ROLE` rides along with every acquire on
//! such a shard instead, so that a replica that joined, or a primary that is one no more, is
//! noticed at the first grant.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::{FromRedisValue, Script};
use tokio::time::Instant;

use crate::conn::{Conn, Verdict};
use crate::connect::{cluster_shards, connected_replicas};
use crate::error::{lock, Error, Result};
use crate::keys::key_slot;
use crate::scripts::Invoke;
use crate::sentinel_watch::Follow;
use crate::task::Task;
use crate::wait::unexpected;

/// How long auto replica sync stops waiting after it found a primary without replicas.
const REPLICA_RECHECK: Duration = Duration::from_secs(5);

/// How long auto replica sync refuses grants on a primary that had replicas and lost them all,
/// before it takes the loss for real and carries on without waiting. Losing every replica at
/// once is what a failover looks like from the demoted primary, which keeps taking writes until
/// the sentinels reconfigure it; that takes seconds (Sentinel's `down-after-milliseconds` plus
/// its reconfiguration), well within this.
pub(crate) const REPLICA_LOSS_GRACE: Duration = Duration::from_secs(15);

/// Every slot: what a single server or a Sentinel-managed primary serves.
const ALL_SLOTS: (u16, u16) = (0, 16383);

/// Whether an acquire waits for replicas to acknowledge it (see
/// [`ClientBuilder::replica_sync`](crate::ClientBuilder::replica_sync)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReplicaSync {
    /// Follow each acquire with `WAIT 1 <1 s>` on a primary that has replicas (on a cluster,
    /// the shard that owns the object). A primary without replicas (a development server, or
    /// a failover that promoted the only one) is not waited for, and is checked again every
    /// few seconds, so replicas added later are waited for from then on. A primary that had
    /// replicas and lost them all is refused for the
    /// [replica loss grace](crate::ClientBuilder::replica_loss_grace) first (it may have just
    /// been demoted by a failover). The default.
    Auto,
    /// Never wait for replicas.
    Off,
    /// Always wait for `replicas` replicas, up to `timeout` (on a cluster, replicas of the
    /// shard that owns the object).
    Require {
        /// How many replicas must acknowledge.
        replicas: u32,
        /// How long to wait for them.
        timeout: Duration,
    },
}

/// One call of an acquire script: the script, its KEYS and ARGV, and names for errors.
pub(crate) struct AcquireCall<'a> {
    pub(crate) script: &'static Script,
    pub(crate) keys: &'a [&'a str],
    pub(crate) args: &'a [String],
    /// What is being done (`"acquiring a lock"`), for error messages.
    pub(crate) context: &'static str,
    /// The object's name, for error messages and [`Error::NotReplicated`].
    pub(crate) name: &'a str,
}

/// Slots whose primary was found without replicas: acquires on them do not wait until `until`,
/// when the replica count is read again. Off a cluster there is at most one, covering every
/// slot.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Absent {
    /// The slot ranges the primary served when it was found without replicas.
    slots: Vec<(u16, u16)>,
    until: Instant,
}

impl Absent {
    fn covers(&self, slot: u16) -> bool {
        self.slots.iter().any(|&(lo, hi)| lo <= slot && slot <= hi)
    }
}

/// A primary found without replicas after it had some.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Lost {
    /// The slot (0 off a cluster).
    key: u16,
    /// The Sentinel primary's address, if any.
    primary: Option<Arc<str>>,
    since: Instant,
}

/// What a client remembers of the replicas of its primaries (the state of the machine).
#[derive(Debug, Default)]
pub(crate) struct Memory {
    /// Shards found without replicas, not waited for until their recheck.
    absent: Vec<Absent>,
    /// Primaries that lost every replica, refused for the loss grace.
    lost: Vec<Lost>,
    /// The Sentinel primary this client last saw with replicas.
    primary_with_replicas: Option<Arc<str>>,
}

/// Whether an acquire on a shard waits for replicas ([`Memory::waits`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Waits {
    Yes,
    /// Not now: the shard has no replica (until its recheck).
    No,
    /// The shard's recheck is due: read its replica count first.
    Recheck,
}

/// What rode along with an acquire script that granted something.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Tail {
    /// `WAIT`'s answer: how many replicas acknowledged the grant.
    Acked(i64),
    /// `ROLE`'s answer, on a Sentinel primary found without replicas: how many replicas the
    /// primary has (`None`: the server is no primary any more, or the answer cannot be read).
    Role(Option<usize>),
}

/// What is known of a grant, gathered as [`Memory::decide`] asks for it.
#[derive(Debug, Clone)]
pub(crate) struct Facts {
    /// The replica sync was asked for explicitly ([`ReplicaSync::Require`]).
    pub(crate) required: bool,
    /// How many replicas must acknowledge a grant.
    pub(crate) wanted: u32,
    /// What rode along with the script (`WAIT`, asked for with [`Step::NeedWait`] after `ROLE`).
    pub(crate) tail: Tail,
    /// The shard (a slot; 0 off a cluster).
    pub(crate) key: u16,
    /// The Sentinel primary the grant was made on (`None` off Sentinel).
    pub(crate) ran_on: Option<Arc<str>>,
    /// The client has left that primary since (a failover moved it).
    pub(crate) moved: bool,
    /// How many replicas the primary has now (asked for with [`Step::NeedReplicas`]).
    pub(crate) replicas_now: Option<u32>,
    /// What the sentinels say of the primary (asked for with [`Step::NeedVerdict`]).
    pub(crate) verdict: Option<Verdict>,
}

/// What to do with a grant ([`Memory::decide`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Keep it; `gone`: the shard has no replica, stop waiting on it (until its recheck).
    Keep {
        gone: bool,
    },
    Undo,
    /// Undo, then drop the connection to this primary and ask the sentinels again.
    UndoAndMove(Arc<str>),
    /// The grant was made on a primary the client has left since: it cannot be undone there,
    /// and it is not taken. That server has been demoted; it drops its data when it follows
    /// the new primary.
    Abandon,
}

/// The next step of a decision: decided, or a fact to gather first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Step {
    Done(Decision),
    NeedWait,
    NeedReplicas,
    NeedVerdict(Arc<str>),
}

impl Memory {
    /// Whether an acquire on `slot` waits for replicas now.
    pub(crate) fn waits(&self, slot: u16, now: Instant) -> Waits {
        match self.absent.iter().find(|absent| absent.covers(slot)) {
            None => Waits::Yes,
            Some(absent) if now < absent.until => Waits::No,
            Some(_) => Waits::Recheck,
        }
    }

    /// Replicas answered on shard `key` (`primary`, on Sentinel): forget a loss recorded there
    /// and the shard's absence, and remember the primary as one seen with replicas.
    pub(crate) fn seen(&mut self, key: u16, slot: u16, primary: Option<Arc<str>>) {
        self.lost.retain(|l| l.key != key);
        self.absent.retain(|a| !a.covers(slot));
        if primary.is_some() {
            self.primary_with_replicas = primary;
        }
    }

    /// The primary serving `slots` has no replica: acquires on them stop waiting until `now` +
    /// [`REPLICA_RECHECK`].
    pub(crate) fn gone(&mut self, slots: Vec<(u16, u16)>, now: Instant) {
        let overlap = |&(lo, hi): &(u16, u16)| slots.iter().any(|&(l, h)| lo <= h && l <= hi);
        self.absent.retain(|a| !a.slots.iter().any(overlap));
        self.absent.push(Absent {
            slots,
            until: now + REPLICA_RECHECK,
        });
    }

    /// Whether `primary` (a Sentinel primary) is not the one this client last saw with
    /// replicas: then its having none is no loss (a primary just promoted starts without one).
    fn first_sight(&self, primary: &Option<Arc<str>>) -> bool {
        primary.is_some() && self.primary_with_replicas != *primary
    }

    /// The next step for a grant, from `facts` (see [`Facts`]): kept if enough replicas
    /// acknowledged it; else undone if the sync is required, abandoned if the client left its
    /// primary. After `ROLE`: undone (and moved, on Sentinel) if the server is no primary,
    /// kept if it is a fresh promotion without replicas, waited for if replicas joined. Then
    /// undone if the primary still has a replica (it was slow), undone and moved if the
    /// sentinels do not vouch for the primary, undone while a loss of every replica is younger
    /// than `grace`, and kept after that (the loss taken for real) or when the primary is a
    /// fresh promotion.
    pub(crate) fn decide(&mut self, facts: &Facts, grace: Duration, now: Instant) -> Step {
        if let Tail::Acked(acked) = facts.tail {
            if acked >= i64::from(facts.wanted) {
                if acked > 0 {
                    self.seen(facts.key, facts.key, facts.ran_on.clone());
                }
                return Step::Done(Decision::Keep { gone: false });
            }
        }
        if facts.required {
            return Step::Done(Decision::Undo);
        }
        if facts.moved {
            return Step::Done(Decision::Abandon);
        }
        match facts.tail {
            Tail::Role(None) => {
                return Step::Done(match &facts.ran_on {
                    Some(primary) => Decision::UndoAndMove(primary.clone()),
                    None => Decision::Undo,
                })
            }
            // A primary never seen with replicas: its having none is no loss.
            Tail::Role(Some(0)) if self.first_sight(&facts.ran_on) => {
                return Step::Done(Decision::Keep { gone: false })
            }
            // Replicas joined since: wait for this grant now.
            Tail::Role(Some(n)) if n > 0 => return Step::NeedWait,
            // A primary this client saw with replicas has lost them: the loss rule.
            _ => {}
        }
        let Some(replicas) = facts.replicas_now else {
            return Step::NeedReplicas;
        };
        if replicas > 0 {
            self.seen(facts.key, facts.key, facts.ran_on.clone());
            return Step::Done(Decision::Undo);
        }
        if let Some(primary) = &facts.ran_on {
            match &facts.verdict {
                None => return Step::NeedVerdict(primary.clone()),
                Some(Verdict::Confirmed) => {}
                Some(_) => return Step::Done(Decision::UndoAndMove(primary.clone())),
            }
        }
        let lost_for = match self.lost.iter().find(|l| l.key == facts.key) {
            // A different primary than the one that had replicas: a fresh promotion.
            Some(l) if l.primary != facts.ran_on => None,
            Some(l) => Some(now.saturating_duration_since(l.since)),
            None if self.first_sight(&facts.ran_on) => None,
            None => {
                self.lost.push(Lost {
                    key: facts.key,
                    primary: facts.ran_on.clone(),
                    since: now,
                });
                Some(Duration::ZERO)
            }
        };
        Step::Done(match lost_for {
            Some(lost_for) if lost_for < grace => Decision::Undo,
            _ => Decision::Keep { gone: true },
        })
    }
}

/// How many replicas a `ROLE` reply of a primary lists; `None` if the server is no primary.
fn role_replicas(role: &redis::Value) -> Option<usize> {
    let redis::Value::Array(items) = role else {
        return None;
    };
    let is_master = matches!(items.first(), Some(redis::Value::BulkString(r)) if r == b"master");
    match items.get(2) {
        Some(redis::Value::Array(replicas)) if is_master => Some(replicas.len()),
        _ => None,
    }
}

/// What a client knows of the replicas of its primaries, and whether its acquires wait for
/// them (see [`ReplicaSync`]). Owned by the client; every lock-family acquire goes through
/// [`Replicas::acquire_script`].
#[derive(Debug)]
pub(crate) struct Replicas {
    /// `(replicas, timeout)` when acquires (may) wait for replicas (in auto mode: on primaries
    /// that have them).
    pub(crate) sync: Option<(u32, Duration)>,
    /// [`ReplicaSync::Require`]: a primary that lost its replicas fails acquires.
    required: bool,
    memory: Arc<Mutex<Memory>>,
    /// See [`ClientBuilder::replica_loss_grace`](crate::ClientBuilder::replica_loss_grace).
    loss_grace: Duration,
}

impl Replicas {
    /// The state of a client just connected on `conn`: in auto mode, which of its primaries
    /// have replicas (one `INFO` per primary).
    pub(crate) async fn detect(
        conn: &Conn,
        mode: ReplicaSync,
        watchdog_timeout: Duration,
        loss_grace: Duration,
    ) -> Result<Replicas> {
        let mut replicas = Replicas::new(mode, watchdog_timeout, loss_grace);
        if mode != ReplicaSync::Auto {
            return Ok(replicas);
        }
        let now = Instant::now();
        let mut memory = Memory::default();
        // The shards to check: every primary of a cluster, or the one primary.
        let shards = if conn.is_cluster() {
            match cluster_shards(conn, None).await {
                Ok(shards) => shards,
                // A user without CLUSTER NODES (a tight ACL) cannot tell: no replica sync.
                Err(e) if e.is_auth() => {
                    replicas.sync = None;
                    return Ok(replicas);
                }
                Err(e) => return Err(e),
            }
        } else {
            vec![vec![ALL_SLOTS]]
        };
        for slots in shards {
            match connected_replicas(conn, slots[0].0).await {
                Ok(n) if n > 0 => memory.primary_with_replicas = conn.sentinel_primary(),
                Ok(_) => {
                    // A sentinel that has not heard of a failover yet may have named the
                    // demoted primary, which has lost its replicas: unless the sentinels vouch
                    // for it, its first grant is waited for (and undone: its loss counts).
                    let suspect = match (conn.sentinel_primary(), conn.sentinels()) {
                        (Some(primary), Some(sentinels))
                            if sentinels.verdict(&primary).await != Verdict::Confirmed =>
                        {
                            Some(primary)
                        }
                        _ => None,
                    };
                    match suspect {
                        Some(primary) => memory.primary_with_replicas = Some(primary),
                        None => memory.gone(slots, now),
                    }
                }
                // A user without INFO (a tight ACL) cannot tell: no replica sync.
                Err(e) if e.is_auth() => {
                    replicas.sync = None;
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        replicas.memory = Arc::new(Mutex::new(memory));
        Ok(replicas)
    }

    /// The state of a lazy client, which cannot ask a server that is not there: in auto mode
    /// every shard is checked at its first acquire.
    pub(crate) fn lazy(
        mode: ReplicaSync,
        watchdog_timeout: Duration,
        loss_grace: Duration,
    ) -> Replicas {
        let replicas = Replicas::new(mode, watchdog_timeout, loss_grace);
        if mode == ReplicaSync::Auto {
            // Due for a recheck at once.
            lock(&replicas.memory).absent.push(Absent {
                slots: vec![ALL_SLOTS],
                until: Instant::now(),
            });
        }
        replicas
    }

    fn new(mode: ReplicaSync, watchdog_timeout: Duration, loss_grace: Duration) -> Replicas {
        // Auto waits at most a quarter of the watchdog lease: the wait eats into it.
        let sync = match mode {
            ReplicaSync::Off => None,
            ReplicaSync::Require { replicas, timeout } => Some((replicas, timeout)),
            ReplicaSync::Auto => Some((1, (watchdog_timeout / 4).min(Duration::from_secs(1)))),
        };
        Replicas {
            sync,
            required: matches!(mode, ReplicaSync::Require { .. }),
            memory: Arc::new(Mutex::new(Memory::default())),
            loss_grace,
        }
    }

    /// What the Sentinel watcher calls when a replica attached to `primary`: it has been seen
    /// with a replica (losing it later is a loss), and acquires wait for replicas again from
    /// the next one on.
    pub(crate) fn joined_callback(&self) -> Arc<dyn Fn(&str) + Send + Sync> {
        let memory = self.memory.clone();
        Arc::new(move |primary: &str| {
            let mut memory = lock(&memory);
            memory.primary_with_replicas = Some(Arc::from(primary));
            memory.absent.clear();
        })
    }

    /// Records that the primary of `slot` has no replica (on a cluster, its slot ranges, read
    /// with `CLUSTER NODES`; `slot` alone if they cannot be read).
    async fn gone(&self, conn: &Conn, slot: u16) {
        let slots = if conn.is_cluster() {
            match cluster_shards(conn, Some(slot)).await {
                Ok(shards) => shards
                    .into_iter()
                    .find(|shard| shard.iter().any(|&(lo, hi)| lo <= slot && slot <= hi))
                    .unwrap_or_else(|| vec![(slot, slot)]),
                Err(_) => vec![(slot, slot)],
            }
        } else {
            vec![ALL_SLOTS]
        };
        lock(&self.memory).gone(slots, Instant::now());
    }

    /// Runs an acquire script and returns its reply, waiting for replicas as the client's
    /// replica sync asks.
    ///
    /// `granted` tells from the reply whether the script granted something (a hold, permits).
    /// If it did and too few replicas acknowledged it (see [`Memory::decide`]), the script
    /// `undo()` returns — the primitive's release of exactly what was just granted — is run,
    /// and the acquire fails with [`Error::NotReplicated`]. Callers run this inside their
    /// detached attempt task, so the undo completes even if the caller goes away.
    pub(crate) async fn acquire_script<T: FromRedisValue + Send>(
        &self,
        conn: &Conn,
        follow: &Follow,
        call: AcquireCall<'_>,
        granted: impl FnOnce(&T) -> bool,
        undo: impl FnOnce() -> Task,
    ) -> Result<T> {
        let mut invocation = call.script.invocation();
        for key in call.keys {
            invocation.key(*key);
        }
        for arg in call.args {
            invocation.arg(arg);
        }
        // Without waiting for replicas: the script alone.
        let plain = conn.script(&invocation, call.context, call.name);
        let Some((replicas, wait)) = self.sync else {
            return plain.await;
        };
        let wait_cmd = || {
            let mut cmd = redis::cmd("WAIT");
            cmd.arg(replicas).arg(wait.as_millis() as u64);
            cmd
        };
        // The shard that owns the object (every key of it shares one slot).
        let slot = call.keys.first().map_or(0, |key| key_slot(key.as_bytes()));
        // The key a shard's loss is recorded under: the slot on a cluster, 0 elsewhere.
        let key = if conn.is_cluster() { slot } else { 0 };
        let mut waits = lock(&self.memory).waits(slot, Instant::now());
        if waits == Waits::Recheck && !self.required {
            if connected_replicas(conn, slot).await? > 0 {
                lock(&self.memory).seen(key, slot, conn.sentinel_primary());
                waits = Waits::Yes;
            } else {
                self.gone(conn, slot).await;
                waits = Waits::No;
            }
        }
        // What rides along: `WAIT` where the shard has replicas (or they are required); on a
        // Sentinel primary found without replicas `ROLE` (no extra round trip), so that
        // replicas that came back, or a primary that is one no more, are noticed at the first
        // grant rather than at the next recheck.
        let role = !self.required && waits != Waits::Yes;
        let (tail, extra) = match role {
            false => (wait_cmd(), wait * 2),
            true if conn.sentinels().is_some() => (redis::cmd("ROLE"), Duration::ZERO),
            true => return plain.await,
        };
        let (reply, answer, ran_on): (T, redis::Value, _) = conn
            .script_then((&invocation, slot), &tail, extra, call.context, call.name)
            .await?;
        let tail = if role {
            let found = role_replicas(&answer);
            if found.is_some_and(|n| n > 0) {
                lock(&self.memory).seen(key, slot, ran_on.clone());
            }
            Tail::Role(found)
        } else {
            let acked = redis::from_redis_value_ref(&answer);
            Tail::Acked(acked.map_err(|_| unexpected("the WAIT reply", &answer))?)
        };
        if !granted(&reply) {
            // Nothing granted (held, queued, too few permits): what rode along does not matter.
            return Ok(reply);
        }
        let moved = || ran_on.is_some() && conn.sentinel_primary() != ran_on;
        let mut facts = Facts {
            required: self.required,
            wanted: replicas,
            tail,
            key,
            ran_on: ran_on.clone(),
            moved: false,
            replicas_now: None,
            verdict: None,
        };
        let decision = loop {
            facts.moved = moved();
            let step = lock(&self.memory).decide(&facts, self.loss_grace, Instant::now());
            match step {
                Step::Done(decision) => break decision,
                Step::NeedWait => {
                    let (cmd, context) = (wait_cmd(), call.context);
                    facts.tail =
                        Tail::Acked(conn.query_on(Some(slot), &cmd, context, call.name).await?);
                }
                Step::NeedReplicas => {
                    facts.replicas_now = Some(connected_replicas(conn, slot).await?)
                }
                Step::NeedVerdict(primary) => {
                    facts.verdict = Some(match conn.sentinels() {
                        Some(sentinels) => sentinels.verdict(&primary).await,
                        None => Verdict::Unknown,
                    })
                }
            }
        };
        if decision == (Decision::Keep { gone: true }) {
            if lock(&self.memory).lost.iter().any(|l| l.key == key) {
                tracing::warn!(
                    slot,
                    "latchkey: the primary lost every replica and still is the primary; \
                     acquires on it no longer wait for replicas"
                );
            }
            self.gone(conn, slot).await;
        }
        // Checked last: the connection may move while the decision is being made.
        let decision = match decision {
            Decision::Keep { gone: false } => return Ok(reply),
            _ if moved() => Decision::Abandon,
            Decision::Keep { .. } => return Ok(reply),
            decision => decision,
        };
        // The grant is on the primary only (or on too few replicas): undo it with the release
        // script of what was just granted, so that a failover to a replica that never saw it
        // cannot give the same lock or permits to somebody else while our caller believes it
        // holds them. Nothing was recorded yet (no guard, no watchdog entry), so the release
        // script alone undoes it. If the undo itself fails, its error is returned instead: a
        // lease-bound grant then ends with its lease.
        let undone = match decision {
            // Not on the server that made the grant: leave it to that server's demotion.
            Decision::Abandon => Ok(redis::Value::Nil),
            _ => undo().run::<redis::Value>(conn, call.name).await,
        };
        if let Decision::UndoAndMove(primary) = decision {
            // Undone on the suspect primary; from now on, ask the sentinels where to go.
            tracing::info!(
                primary = %primary,
                "latchkey: the sentinels do not vouch for the primary; connecting again"
            );
            follow.primary_moved(Some(&primary));
        }
        undone?;
        Err(Error::NotReplicated {
            name: call.name.to_owned(),
            timeout: wait,
            required: replicas,
            acknowledged: match facts.tail {
                Tail::Acked(acked) => u32::try_from(acked.max(0)).unwrap_or(u32::MAX),
                Tail::Role(_) => 0,
            },
        })
    }
}

#[cfg(test)]
#[path = "replica_tests.rs"]
mod tests;
