//! Replica-synced acquires (see [`ClientBuilder::replica_sync`](crate::ClientBuilder::replica_sync)):
//! the one implementation that every lock-family acquire goes through — [`Lock`](crate::Lock),
//! [`FairLock`](crate::FairLock), both sides of [`RwLock`](crate::RwLock),
//! [`Semaphore`](crate::Semaphore) and [`PermitSemaphore`](crate::PermitSemaphore).
//!
//! An acquire script that may wait for replicas is pipelined with `WAIT replicas timeout` on the
//! same connection (`WAIT` cannot run inside a script). When the script granted something and
//! fewer replicas than required acknowledged it, the grant is undone by the primitive's own
//! release script and the acquire fails with [`Error::NotReplicated`]. A script that granted
//! nothing (the lock is held, too few permits) is not affected by the `WAIT`'s answer.
//!
//! On a Redis Cluster every shard has its own primary and replicas: the pipeline goes to the
//! primary that owns the slot of the script's first key, and auto mode keeps its "this primary
//! has no replica" state per shard (as the slot ranges that primary served when it was found
//! without replicas), so one shard losing its replica does not stop the waits on the others.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::{FromRedisValue, Script};
use tokio::time::Instant;

use crate::conn::{Conn, Verdict};
use crate::connect::{cluster_shards, connected_replicas};
use crate::error::{Error, Result};
use crate::keys::key_slot;
use crate::sentinel_watch::Follow;
use crate::task::Task;

/// How long auto replica sync stops waiting after it found the primary without replicas.
const REPLICA_RECHECK: Duration = Duration::from_secs(5);

/// How long auto replica sync refuses grants on a primary that had replicas and lost them all,
/// before it takes the loss for real and carries on without waiting. Losing every replica at
/// once is what a failover looks like from the demoted primary, which keeps taking writes until
/// the sentinels reconfigure it; that takes seconds (Sentinel's `down-after-milliseconds` plus
/// its reconfiguration), well within this.
pub(crate) const REPLICA_LOSS_GRACE: Duration = Duration::from_secs(15);

/// Every slot: what a single server or a Sentinel-managed primary serves.
const ALL_SLOTS: (u16, u16) = (0, 16383);

fn lock_ignoring_poison<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether an acquire waits for replicas to acknowledge it (see
/// [`ClientBuilder::replica_sync`](crate::ClientBuilder::replica_sync)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReplicaSync {
    /// Follow each acquire with `WAIT 1 <1 s>` when the primary had replicas at connect time
    /// (on a cluster: when any shard had replicas; each acquire then waits on its own shard's
    /// primary). If a later primary has no replica at all (say, after a failover promoted the
    /// only one), acquires on it go on without waiting; on a cluster this is decided per shard.
    /// The default.
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

/// Slots whose primary auto replica sync found without replicas: acquires on them do not wait
/// for replicas until `until`, when the replica count is read again (one `INFO`, not a
/// blocking `WAIT`). Off a cluster there is at most one, covering every slot.
#[derive(Debug, Clone)]
pub(crate) struct AbsentReplicas {
    /// The slot ranges the primary served when it was found without replicas.
    slots: Vec<(u16, u16)>,
    until: Instant,
}

impl AbsentReplicas {
    /// The slots of a primary just found without replicas, not waited for until the next
    /// recheck.
    pub(crate) fn from_now(slots: Vec<(u16, u16)>) -> AbsentReplicas {
        AbsentReplicas {
            slots,
            until: Instant::now() + REPLICA_RECHECK,
        }
    }

    fn covers(&self, slot: u16) -> bool {
        self.slots.iter().any(|&(lo, hi)| lo <= slot && slot <= hi)
    }

    fn overlaps(&self, other: &[(u16, u16)]) -> bool {
        self.slots
            .iter()
            .any(|&(lo, hi)| other.iter().any(|&(olo, ohi)| lo <= ohi && olo <= hi))
    }
}

/// A primary found without replicas after it had some (see [`Replicas::grant_decision`]).
#[derive(Debug)]
pub(crate) struct LostReplicas {
    /// The slot (0 off a cluster).
    key: u16,
    /// The Sentinel primary's address, if any.
    primary: Option<Arc<str>>,
    since: Instant,
}

/// What [`Replicas::grant_decision`] decided.
#[derive(Debug, PartialEq, Eq)]
enum Decision {
    Keep,
    Undo,
    /// Undo, then drop the connection to this primary.
    UndoAndMove(Arc<str>),
    /// The grant was made on a primary the client has left since (a failover moved it while
    /// the answer was on its way): it cannot be undone there, and it is not taken. That server
    /// has been demoted; it drops its data when it follows the new primary.
    Abandon,
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

/// What a client knows of the replicas of its primaries, and whether its acquires wait for
/// them (see [`ReplicaSync`]). Owned by the client; every lock-family acquire goes through
/// [`Replicas::acquire_script`].
#[derive(Debug)]
pub(crate) struct Replicas {
    /// `(replicas, timeout)` when acquires wait for replicas.
    sync: Option<(u32, Duration)>,
    /// Whether the replica sync was asked for explicitly ([`ReplicaSync::Require`]): then a
    /// primary that lost its replicas fails acquires instead of carrying on without them.
    required: bool,
    /// The primaries auto mode found without replicas (on a cluster, by the slots of each such
    /// shard; elsewhere all slots): acquires on them do not wait for replicas until the entry's
    /// time, when the replica count is read again (one `INFO`, not a blocking `WAIT`).
    absent: Arc<Mutex<Vec<AbsentReplicas>>>,
    /// Primaries found without replicas after they had some, refused for a grace period.
    lost: Mutex<Vec<LostReplicas>>,
    /// The Sentinel primary this client last saw with replicas.
    primary_with_replicas: Arc<Mutex<Option<Arc<str>>>>,
    /// See [`ClientBuilder::replica_loss_grace`](crate::ClientBuilder::replica_loss_grace).
    loss_grace: Duration,
}

impl Replicas {
    /// The state of a client just connected on `conn`: in auto mode, whether its primaries
    /// have replicas (one `INFO` per primary).
    pub(crate) async fn detect(
        conn: &Conn,
        mode: ReplicaSync,
        watchdog_timeout: Duration,
        loss_grace: Duration,
    ) -> Result<Replicas> {
        // Wait at most a quarter of the watchdog lease: the wait eats into it.
        let auto_wait = (1, (watchdog_timeout / 4).min(Duration::from_secs(1)));
        let mut absent = Vec::new();
        let replica_sync = match mode {
            ReplicaSync::Off => None,
            ReplicaSync::Require { replicas, timeout } => Some((replicas, timeout)),
            // Waits if any shard's primary has replicas (`INFO`, as off a cluster); the shards
            // without replicas are not waited for until they are checked again.
            ReplicaSync::Auto if conn.is_cluster() => {
                let shards = match cluster_shards(conn, None).await {
                    Ok(shards) => shards,
                    Err(e) if e.is_auth() => Vec::new(),
                    Err(e) => return Err(e),
                };
                let counts = futures_util::future::join_all(
                    shards
                        .iter()
                        .map(|shard| connected_replicas(conn, shard.slots[0].0)),
                )
                .await;
                let mut any = false;
                let mut unknown = false;
                for (shard, count) in shards.into_iter().zip(counts) {
                    match count {
                        Ok(n) if n > 0 => any = true,
                        Ok(_) => absent.push(AbsentReplicas::from_now(shard.slots)),
                        // A user without INFO (a tight ACL) cannot tell: no replica sync.
                        Err(e) if e.is_auth() => unknown = true,
                        Err(e) => return Err(e),
                    }
                }
                (any && !unknown).then_some(auto_wait)
            }
            // The slot does not matter off a cluster.
            ReplicaSync::Auto => match connected_replicas(conn, 0).await {
                Ok(n) if n > 0 => Some(auto_wait),
                // A sentinel that has not heard of a failover yet may have named the demoted
                // primary, which has lost its replicas: wait for replicas unless the sentinels
                // vouch for it, so that the first grant there is checked (and undone).
                // On Sentinel, auto mode stays on: a primary without replicas may have been
                // promoted just now, and gets one soon (the demoted primary, reconfigured);
                // every grant there checks `ROLE` on the way (see `Replicas::acquire_script`), so
                // waiting starts with the first grant after a replica joined. And a sentinel
                // that has not heard of a failover yet may have named the demoted primary:
                // unless the sentinels vouch for it, its first grant is waited for (and undone).
                Ok(_) => match (conn.sentinel_primary(), conn.sentinels()) {
                    (Some(primary), Some(sentinels)) => {
                        if sentinels.verdict(&primary).await == Verdict::Confirmed {
                            absent.push(AbsentReplicas::from_now(vec![(0, 16383)]));
                        }
                        Some(auto_wait)
                    }
                    _ => None,
                },
                // A user without INFO (a tight ACL) cannot tell: no replica sync.
                Err(e) if e.is_auth() => None,
                Err(e) => return Err(e),
            },
        };
        Ok(Replicas::new(conn, mode, replica_sync, absent, loss_grace))
    }

    /// The state of a lazy client, which cannot ask a server that is not there: it waits for
    /// replicas only with [`ReplicaSync::Require`].
    pub(crate) fn lazy(conn: &Conn, mode: ReplicaSync, loss_grace: Duration) -> Replicas {
        let sync = match mode {
            ReplicaSync::Require { replicas, timeout } => Some((replicas, timeout)),
            ReplicaSync::Auto | ReplicaSync::Off => None,
        };
        Replicas::new(conn, mode, sync, Vec::new(), loss_grace)
    }

    fn new(
        conn: &Conn,
        mode: ReplicaSync,
        sync: Option<(u32, Duration)>,
        absent: Vec<AbsentReplicas>,
        loss_grace: Duration,
    ) -> Replicas {
        // The primary this client has seen with replicas: the one it connected to, unless it
        // found none there.
        let primary_with_replicas = if absent.is_empty() {
            sync.and(conn.sentinel_primary())
        } else {
            None
        };
        Replicas {
            sync,
            required: matches!(mode, ReplicaSync::Require { .. }),
            absent: Arc::new(Mutex::new(absent)),
            lost: Mutex::new(Vec::new()),
            primary_with_replicas: Arc::new(Mutex::new(primary_with_replicas)),
            loss_grace,
        }
    }

    /// `(replicas, timeout)` when acquires wait for replicas.
    pub(crate) fn sync(&self) -> Option<(u32, Duration)> {
        self.sync
    }

    /// What the Sentinel watcher calls when a replica attached to `primary`: it has been seen
    /// with a replica (losing it later is a loss), and acquires wait for replicas again from
    /// the next one on.
    pub(crate) fn joined_callback(&self) -> Arc<dyn Fn(&str) + Send + Sync> {
        let (absent, seen) = (self.absent.clone(), self.primary_with_replicas.clone());
        Arc::new(move |primary: &str| {
            *lock_ignoring_poison(&seen) = Some(Arc::from(primary));
            lock_ignoring_poison(&absent).clear();
        })
    }
    /// `(replicas, timeout)` if an acquire on `slot` should wait for replicas now. In auto
    /// mode, a primary found without replicas is not waited for; its replica count is read
    /// again (one `INFO`) every [`REPLICA_RECHECK`]. On a cluster this is decided per shard:
    /// `slot` picks the shard (elsewhere it does not matter).
    pub(crate) async fn replica_wait(
        &self,
        conn: &Conn,
        slot: u16,
    ) -> Result<Option<(u32, Duration)>> {
        let Some(sync) = self.sync else {
            return Ok(None);
        };
        if self.required {
            return Ok(Some(sync));
        }
        let absent_until = lock_ignoring_poison(&self.absent)
            .iter()
            .find(|absent| absent.covers(slot))
            .map(|absent| absent.until);
        match absent_until {
            None => Ok(Some(sync)),
            Some(until) if Instant::now() < until => Ok(None),
            Some(_) => {
                if connected_replicas(conn, slot).await? > 0 {
                    lock_ignoring_poison(&self.absent).retain(|a| !a.covers(slot));
                    self.replicas_seen(conn, slot);
                    Ok(Some(sync))
                } else {
                    self.replicas_gone(conn, slot).await;
                    Ok(None)
                }
            }
        }
    }

    /// Records that the primary of `slot` has no replica: acquires on its slots (every slot
    /// off a cluster) stop waiting for [`REPLICA_RECHECK`]. On a cluster, that primary's slot
    /// ranges are read with `CLUSTER NODES`; if they cannot be, only `slot` is recorded.
    async fn replicas_gone(&self, conn: &Conn, slot: u16) {
        let slots = if conn.is_cluster() {
            match cluster_shards(conn, Some(slot)).await {
                Ok(shards) => shards
                    .into_iter()
                    .find(|shard| shard.slots.iter().any(|&(lo, hi)| lo <= slot && slot <= hi))
                    .map_or_else(|| vec![(slot, slot)], |shard| shard.slots),
                Err(_) => vec![(slot, slot)],
            }
        } else {
            vec![ALL_SLOTS]
        };
        let mut absent = lock_ignoring_poison(&self.absent);
        absent.retain(|a| !a.overlaps(&slots));
        absent.push(AbsentReplicas::from_now(slots));
    }

    /// What to do with a grant on `slot` that `acked` of the `replicas` asked for acknowledged.
    ///
    /// Enough acknowledgements: keep it. Too few with [`ReplicaSync::Require`](crate::ReplicaSync):
    /// undo it. Too few in auto mode: undo it while the primary still has a replica (it was
    /// just slow or unreachable). A primary without any replica now is suspect: it may have
    /// just been demoted by a failover (its only replica promoted) and still take writes that
    /// nobody else will see. Its grants are undone while
    /// - the sentinels (Sentinel deployments) name another primary, or too few of them answer:
    ///   the connection is dropped too, so the next attempt goes where the sentinels point;
    /// - the loss is younger than the replica loss grace (see
    ///   [`ClientBuilder::replica_loss_grace`](crate::ClientBuilder::replica_loss_grace)), unless this client has never seen
    ///   that primary with a replica (a primary just promoted by a failover starts without
    ///   one, and the sentinels vouch for it).
    ///
    /// After that the loss is taken for real: the grant stands, a warning is logged, and
    /// acquires on its slots stop waiting for replicas (rechecked every [`REPLICA_RECHECK`]).
    ///
    /// `ran_on` is the Sentinel primary the grant was made on; if the client has left it since,
    /// the grant is abandoned (see [`Decision::Abandon`]).
    async fn grant_decision(
        &self,
        conn: &Conn,
        slot: u16,
        replicas: u32,
        acked: i64,
        ran_on: &Option<Arc<str>>,
    ) -> Result<Decision> {
        let decision = async {
            if acked >= i64::from(replicas) {
                if acked > 0 {
                    self.replicas_seen_on(conn, slot, ran_on.clone());
                }
                return Ok(Decision::Keep);
            }
            if self.required {
                return Ok(Decision::Undo);
            }
            if ran_on.is_some() && conn.sentinel_primary() != *ran_on {
                return Ok(Decision::Abandon);
            }
            if connected_replicas(conn, slot).await? > 0 {
                self.replicas_seen_on(conn, slot, ran_on.clone());
                return Ok(Decision::Undo);
            }
            if let Some(primary) = ran_on.clone() {
                let verdict = match conn.sentinels() {
                    Some(sentinels) => sentinels.verdict(&primary).await,
                    None => Verdict::Unknown,
                };
                if verdict != Verdict::Confirmed {
                    return Ok(Decision::UndoAndMove(primary));
                }
            }
            let lost_for = {
                let key = self.loss_key(conn, slot);
                let mut lost = lock_ignoring_poison(&self.lost);
                let primary = ran_on.clone();
                match lost.iter().find(|l| l.key == key) {
                    // A different primary than the one that had replicas: a fresh promotion.
                    Some(l) if l.primary != primary => None,
                    Some(l) => Some(l.since.elapsed()),
                    None if self.first_sight(&primary) => None,
                    None => {
                        lost.push(LostReplicas {
                            key,
                            primary,
                            since: Instant::now(),
                        });
                        Some(Duration::ZERO)
                    }
                }
            };
            match lost_for {
                Some(lost_for) if lost_for < self.loss_grace => Ok(Decision::Undo),
                Some(lost_for) => {
                    tracing::warn!(
                        slot,
                        lost_for = ?lost_for,
                        "latchkey: the primary lost every replica and still is the primary; \
                         acquires on it no longer wait for replicas"
                    );
                    self.replicas_gone(conn, slot).await;
                    Ok(Decision::Keep)
                }
                None => {
                    self.replicas_gone(conn, slot).await;
                    Ok(Decision::Keep)
                }
            }
        }
        .await?;
        // Checked last: the connection may move while the decision is being made.
        if ran_on.is_some() && conn.sentinel_primary() != *ran_on {
            return Ok(Decision::Abandon);
        }
        Ok(decision)
    }

    /// The slot a replica loss is recorded under: the slot itself on a cluster, 0 elsewhere.
    fn loss_key(&self, conn: &Conn, slot: u16) -> u16 {
        if conn.is_cluster() {
            slot
        } else {
            0
        }
    }

    /// Replicas answered on `slot`: forget a loss recorded there, and remember the primary.
    fn replicas_seen(&self, conn: &Conn, slot: u16) {
        self.replicas_seen_on(conn, slot, conn.sentinel_primary());
    }

    /// [`Replicas::replicas_seen`] for replicas that answered `primary` (a Sentinel primary's
    /// address).
    fn replicas_seen_on(&self, conn: &Conn, slot: u16, primary: Option<Arc<str>>) {
        let key = self.loss_key(conn, slot);
        {
            let mut lost = lock_ignoring_poison(&self.lost);
            if !lost.is_empty() {
                lost.retain(|l| l.key != key);
            }
        }
        if primary.is_some() {
            let mut seen = lock_ignoring_poison(&self.primary_with_replicas);
            if *seen != primary {
                *seen = primary;
            }
        }
    }

    /// Whether `primary` (a Sentinel primary's address) is not the one this client last saw
    /// with replicas: then its having none is no loss.
    fn first_sight(&self, primary: &Option<Arc<str>>) -> bool {
        primary.is_some() && *lock_ignoring_poison(&self.primary_with_replicas) != *primary
    }

    /// Runs an acquire script and returns its reply, waiting for replicas as the client's
    /// replica sync asks (see [`Replicas::replica_wait`]).
    ///
    /// `granted` tells from the reply whether the script granted something (a hold, permits).
    /// If it did and too few replicas acknowledged it (see [`Replicas::grant_decision`]), the script
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
        // The shard that owns the object (every key of it shares one slot); not needed, and
        // not computed, without replica sync.
        let slot = match self.sync {
            Some(_) => call.keys.first().map_or(0, |key| key_slot(key.as_bytes())),
            None => 0,
        };
        let (reply, decision, replicas, wait, acked) = match self.replica_wait(conn, slot).await? {
            Some((replicas, wait)) => {
                let (reply, acked, ran_on): (T, i64, _) = conn
                    .script_then_wait(
                        call.script,
                        call.keys,
                        call.args,
                        (replicas, wait),
                        call.context,
                        call.name,
                    )
                    .await?;
                if acked > 0 && acked >= i64::from(replicas) {
                    self.replicas_seen_on(conn, slot, ran_on.clone());
                }
                // Nothing granted (held, queued, too few permits): the WAIT's answer does not
                // matter.
                if !granted(&reply) {
                    return Ok(reply);
                }
                let decision = self
                    .grant_decision(conn, slot, replicas, acked, &ran_on)
                    .await?;
                (reply, decision, replicas, wait, acked)
            }
            // Auto mode on a primary found without replicas: `ROLE` rides along (no extra round
            // trip), so that replicas that came back, or a primary that is one no more, are
            // noticed at the first grant rather than at the next recheck.
            None if self.sync.is_some() => {
                let (reply, role, ran_on): (T, redis::Value, _) = conn
                    .script_then(
                        call.script,
                        call.keys,
                        call.args,
                        &redis::cmd("ROLE"),
                        Duration::ZERO,
                        call.context,
                        call.name,
                    )
                    .await?;
                if role_replicas(&role).is_some_and(|n| n > 0) {
                    self.replicas_seen_on(conn, slot, ran_on.clone());
                }
                if !granted(&reply) {
                    return Ok(reply);
                }
                let moved = ran_on.is_some() && conn.sentinel_primary() != ran_on;
                let (replicas, wait) = self.sync.unwrap_or((1, Duration::from_secs(1)));
                let (decision, acked) = match role_replicas(&role) {
                    // Granted by a primary the client has left since.
                    _ if moved => (Decision::Abandon, 0),
                    // A primary this client saw with replicas has lost them: the loss rule.
                    Some(0) if ran_on.is_some() && !self.first_sight(&ran_on) => (
                        self.grant_decision(conn, slot, replicas, 0, &ran_on)
                            .await?,
                        0,
                    ),
                    Some(0) => return Ok(reply),
                    // Replicas joined since: wait for this grant now, then as usual.
                    Some(_) => {
                        lock_ignoring_poison(&self.absent).retain(|a| !a.covers(slot));
                        let acked: i64 = conn
                            .query_on_slot(
                                slot,
                                redis::cmd("WAIT")
                                    .arg(replicas)
                                    .arg(wait.as_millis() as u64),
                                call.context,
                                call.name,
                            )
                            .await?;
                        (
                            self.grant_decision(conn, slot, replicas, acked, &ran_on)
                                .await?,
                            acked,
                        )
                    }
                    // Not a primary any more (or an answer we cannot read): never keep it.
                    None => match ran_on {
                        Some(primary) => (Decision::UndoAndMove(primary), 0),
                        None => (Decision::Undo, 0),
                    },
                };
                (reply, decision, replicas, wait, acked)
            }
            None => {
                let args: Vec<&str> = call.args.iter().map(String::as_str).collect();
                return conn
                    .evalsha(call.script, call.keys, &args, call.context, call.name)
                    .await;
            }
        };
        if decision == Decision::Keep {
            return Ok(reply);
        }
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
            acknowledged: u32::try_from(acked.max(0)).unwrap_or(u32::MAX),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn role_replies_give_the_replica_count_of_a_primary_only() {
        use redis::Value::{Array, BulkString, Int};
        let bulk = |s: &str| BulkString(s.as_bytes().to_vec());
        let replica = Array(vec![bulk("127.0.0.1"), bulk("6380"), bulk("123")]);
        let primary = Array(vec![bulk("master"), Int(123), Array(vec![replica])]);
        assert_eq!(role_replicas(&primary), Some(1));
        let alone = Array(vec![bulk("master"), Int(5), Array(vec![])]);
        assert_eq!(role_replicas(&alone), Some(0));
        let demoted = Array(vec![
            bulk("slave"),
            bulk("127.0.0.1"),
            Int(6380),
            bulk("connected"),
            Int(123),
        ]);
        assert_eq!(role_replicas(&demoted), None);
        assert_eq!(role_replicas(&redis::Value::Nil), None);
    }

    #[test]
    fn absent_replicas_cover_their_ranges() {
        let absent = AbsentReplicas::from_now(vec![(0, 10), (100, 200)]);
        assert!(absent.covers(0) && absent.covers(10) && absent.covers(150));
        assert!(!absent.covers(11) && !absent.covers(201));
        assert!(absent.overlaps(&[(5, 5)]) && absent.overlaps(&[(200, 300)]));
        assert!(!absent.overlaps(&[(11, 99), (201, 16383)]));
    }
}
