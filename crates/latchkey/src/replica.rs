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

use std::sync::Arc;
use std::time::Duration;

use redis::{FromRedisValue, Script};
use tokio::time::Instant;

use crate::client::{connected_replicas, Inner};
use crate::conn::{key_slot, Conn, Verdict};
use crate::error::{Error, Result};
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

fn lock_ignoring_poison<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
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

/// A primary found without replicas after it had some (see [`Inner::grant_decision`]).
#[derive(Debug)]
pub(crate) struct LostReplicas {
    /// The slot (0 off a cluster).
    key: u16,
    /// The Sentinel primary's address, if any.
    primary: Option<Arc<str>>,
    since: Instant,
}

/// What [`Inner::grant_decision`] decided.
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

/// One shard of a Redis Cluster: the slot ranges its primary serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Shard {
    pub(crate) slots: Vec<(u16, u16)>,
}

/// The shards in a `CLUSTER NODES` reply: one per primary that serves slots. (Not
/// `CLUSTER SLOTS`: it leaves out replicas whose offset the node has not heard of yet.)
pub(crate) fn parse_cluster_nodes(text: &str) -> Vec<Shard> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let flags = || fields.get(2).into_iter().flat_map(|f| f.split(','));
            if fields.len() < 9
                || !flags().any(|flag| flag == "master")
                || flags().any(|flag| matches!(flag, "fail" | "noaddr"))
            {
                return None;
            }
            let slots: Vec<(u16, u16)> = fields[8..]
                .iter()
                // `[slot->-node]` / `[slot-<-node]`: a slot being migrated or imported.
                .filter(|range| !range.starts_with('['))
                .filter_map(|range| match range.split_once('-') {
                    Some((lo, hi)) => Some((lo.parse().ok()?, hi.parse().ok()?)),
                    None => range.parse().ok().map(|slot| (slot, slot)),
                })
                .collect();
            (!slots.is_empty()).then_some(Shard { slots })
        })
        .collect()
}

/// The cluster's shards, as the primary of `slot` sees them (any node without a slot).
pub(crate) async fn cluster_shards(conn: &Conn, slot: Option<u16>) -> Result<Vec<Shard>> {
    let cmd = redis::cmd("CLUSTER").arg("NODES").clone();
    let context = "reading the cluster's shards";
    let reply: String = match slot {
        Some(slot) => conn.query_on_slot(slot, &cmd, context, "").await?,
        None => conn.query(&cmd, context, "").await?,
    };
    Ok(parse_cluster_nodes(&reply))
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

impl Inner {
    /// `(replicas, timeout)` if an acquire on `slot` should wait for replicas now. In auto
    /// mode, a primary found without replicas is not waited for; its replica count is read
    /// again (one `INFO`) every [`REPLICA_RECHECK`]. On a cluster this is decided per shard:
    /// `slot` picks the shard (elsewhere it does not matter).
    pub(crate) async fn replica_wait(&self, slot: u16) -> Result<Option<(u32, Duration)>> {
        let Some(sync) = self.replica_sync else {
            return Ok(None);
        };
        if self.replica_sync_required {
            return Ok(Some(sync));
        }
        let absent_until = lock_ignoring_poison(&self.replicas_absent)
            .iter()
            .find(|absent| absent.covers(slot))
            .map(|absent| absent.until);
        match absent_until {
            None => Ok(Some(sync)),
            Some(until) if Instant::now() < until => Ok(None),
            Some(_) => {
                if connected_replicas(&self.conn, slot).await? > 0 {
                    lock_ignoring_poison(&self.replicas_absent).retain(|a| !a.covers(slot));
                    self.replicas_seen(slot);
                    Ok(Some(sync))
                } else {
                    self.replicas_gone(slot).await;
                    Ok(None)
                }
            }
        }
    }

    /// Records that the primary of `slot` has no replica: acquires on its slots (every slot
    /// off a cluster) stop waiting for [`REPLICA_RECHECK`]. On a cluster, that primary's slot
    /// ranges are read with `CLUSTER NODES`; if they cannot be, only `slot` is recorded.
    async fn replicas_gone(&self, slot: u16) {
        let slots = if self.conn.is_cluster() {
            match cluster_shards(&self.conn, Some(slot)).await {
                Ok(shards) => shards
                    .into_iter()
                    .find(|shard| shard.slots.iter().any(|&(lo, hi)| lo <= slot && slot <= hi))
                    .map_or_else(|| vec![(slot, slot)], |shard| shard.slots),
                Err(_) => vec![(slot, slot)],
            }
        } else {
            vec![ALL_SLOTS]
        };
        let mut absent = lock_ignoring_poison(&self.replicas_absent);
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
        slot: u16,
        replicas: u32,
        acked: i64,
        ran_on: &Option<Arc<str>>,
    ) -> Result<Decision> {
        let decision = self
            .grant_decision_on(slot, replicas, acked, ran_on)
            .await?;
        // Checked last: the connection may move while the decision is being made.
        if ran_on.is_some() && self.conn.sentinel_primary() != *ran_on {
            return Ok(Decision::Abandon);
        }
        Ok(decision)
    }

    async fn grant_decision_on(
        &self,
        slot: u16,
        replicas: u32,
        acked: i64,
        ran_on: &Option<Arc<str>>,
    ) -> Result<Decision> {
        if acked >= i64::from(replicas) {
            if acked > 0 {
                self.replicas_seen_on(slot, ran_on.clone());
            }
            return Ok(Decision::Keep);
        }
        if self.replica_sync_required {
            return Ok(Decision::Undo);
        }
        if ran_on.is_some() && self.conn.sentinel_primary() != *ran_on {
            return Ok(Decision::Abandon);
        }
        if connected_replicas(&self.conn, slot).await? > 0 {
            self.replicas_seen_on(slot, ran_on.clone());
            return Ok(Decision::Undo);
        }
        if let Some(primary) = ran_on.clone() {
            let verdict = match self.conn.sentinels() {
                Some(sentinels) => sentinels.verdict(&primary).await,
                None => Verdict::Unknown,
            };
            if verdict != Verdict::Confirmed {
                return Ok(Decision::UndoAndMove(primary));
            }
        }
        let lost_for = {
            let key = self.loss_key(slot);
            let mut lost = lock_ignoring_poison(&self.replicas_lost);
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
            Some(lost_for) if lost_for < self.config.replica_loss_grace => Ok(Decision::Undo),
            Some(lost_for) => {
                tracing::warn!(
                    slot,
                    lost_for = ?lost_for,
                    "latchkey: the primary lost every replica and still is the primary; \
                     acquires on it no longer wait for replicas"
                );
                self.replicas_gone(slot).await;
                Ok(Decision::Keep)
            }
            None => {
                self.replicas_gone(slot).await;
                Ok(Decision::Keep)
            }
        }
    }

    /// The slot a replica loss is recorded under: the slot itself on a cluster, 0 elsewhere.
    fn loss_key(&self, slot: u16) -> u16 {
        if self.conn.is_cluster() {
            slot
        } else {
            0
        }
    }

    /// Replicas answered on `slot`: forget a loss recorded there, and remember the primary.
    fn replicas_seen(&self, slot: u16) {
        self.replicas_seen_on(slot, self.conn.sentinel_primary());
    }

    /// [`Inner::replicas_seen`] for replicas that answered `primary` (a Sentinel primary's
    /// address).
    fn replicas_seen_on(&self, slot: u16, primary: Option<Arc<str>>) {
        let key = self.loss_key(slot);
        {
            let mut lost = lock_ignoring_poison(&self.replicas_lost);
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
    /// replica sync asks (see [`Inner::replica_wait`]).
    ///
    /// `granted` tells from the reply whether the script granted something (a hold, permits).
    /// If it did and too few replicas acknowledged it (see [`Inner::must_undo`]), the script
    /// `undo()` returns — the primitive's release of exactly what was just granted — is run,
    /// and the acquire fails with [`Error::NotReplicated`]. Callers run this inside their
    /// detached attempt task, so the undo completes even if the caller goes away.
    pub(crate) async fn acquire_script<T: FromRedisValue>(
        &self,
        call: AcquireCall<'_>,
        granted: impl FnOnce(&T) -> bool,
        undo: impl FnOnce() -> Task,
    ) -> Result<T> {
        // The shard that owns the object (every key of it shares one slot); not needed, and
        // not computed, without replica sync.
        let slot = match self.replica_sync {
            Some(_) => call.keys.first().map_or(0, |key| key_slot(key.as_bytes())),
            None => 0,
        };
        let (reply, decision, replicas, wait, acked) = match self.replica_wait(slot).await? {
            Some((replicas, wait)) => {
                let (reply, acked, ran_on): (T, i64, _) = self
                    .conn
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
                    self.replicas_seen_on(slot, ran_on.clone());
                }
                // Nothing granted (held, queued, too few permits): the WAIT's answer does not
                // matter.
                if !granted(&reply) {
                    return Ok(reply);
                }
                let decision = self.grant_decision(slot, replicas, acked, &ran_on).await?;
                (reply, decision, replicas, wait, acked)
            }
            // Auto mode on a primary found without replicas: `ROLE` rides along (no extra round
            // trip), so that replicas that came back, or a primary that is one no more, are
            // noticed at the first grant rather than at the next recheck.
            None if self.replica_sync.is_some() => {
                let (reply, role, ran_on): (T, redis::Value, _) = self
                    .conn
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
                    self.replicas_seen_on(slot, ran_on.clone());
                }
                if !granted(&reply) {
                    return Ok(reply);
                }
                let moved = ran_on.is_some() && self.conn.sentinel_primary() != ran_on;
                let (replicas, wait) = self.replica_sync.unwrap_or((1, Duration::from_secs(1)));
                let (decision, acked) = match role_replicas(&role) {
                    // Granted by a primary the client has left since.
                    _ if moved => (Decision::Abandon, 0),
                    // A primary this client saw with replicas has lost them: the loss rule.
                    Some(0) if ran_on.is_some() && !self.first_sight(&ran_on) => {
                        (self.grant_decision(slot, replicas, 0, &ran_on).await?, 0)
                    }
                    Some(0) => return Ok(reply),
                    // Replicas joined since: wait for this grant now, then as usual.
                    Some(_) => {
                        lock_ignoring_poison(&self.replicas_absent).retain(|a| !a.covers(slot));
                        let acked: i64 = self
                            .conn
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
                            self.grant_decision(slot, replicas, acked, &ran_on).await?,
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
                let mut invocation = call.script.prepare_invoke();
                for key in call.keys {
                    invocation.key(*key);
                }
                for arg in call.args {
                    invocation.arg(arg);
                }
                return self.conn.script(&invocation, call.context, call.name).await;
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
            _ => undo().run::<redis::Value>(&self.conn, call.name).await,
        };
        if let Decision::UndoAndMove(primary) = decision {
            // Undone on the suspect primary; from now on, ask the sentinels where to go.
            tracing::info!(
                primary = %primary,
                "latchkey: the sentinels do not vouch for the primary; connecting again"
            );
            self.follow.primary_moved(Some(&primary));
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
    fn cluster_nodes_give_each_primary_its_slots() {
        let text = "\
07c3 127.0.0.1:30004@40004 slave e7d1 0 1426238317239 4 connected
67ed 127.0.0.1:30002@40002,host master - 0 1426238316232 2 connected 5461-10922
e7d1 127.0.0.1:30001@40001 myself,master - 0 0 1 connected 0-5460 12000 [5461->-67ed]
6ec2 127.0.0.1:30003@40003 master - 0 0 3 connected
9a1b 127.0.0.1:30005@40005 master,fail - 0 0 5 disconnected 12001-16383
";
        assert_eq!(
            parse_cluster_nodes(text),
            vec![
                Shard {
                    slots: vec![(5461, 10922)],
                },
                Shard {
                    slots: vec![(0, 5460), (12000, 12000)],
                },
            ]
        );
        assert!(parse_cluster_nodes("").is_empty());
    }

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
