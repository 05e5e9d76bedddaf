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

use std::time::Duration;

use redis::{FromRedisValue, Script};
use tokio::time::Instant;

use crate::client::{connected_replicas, Inner};
use crate::error::{Error, Result};
use crate::watchdog::Task;

/// How long auto replica sync stops waiting after it found the primary without replicas.
const REPLICA_RECHECK: Duration = Duration::from_secs(5);

fn lock_ignoring_poison<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
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
    /// `(replicas, timeout)` if an acquire should wait for replicas now. In auto mode, a
    /// primary found without replicas is not waited for; its replica count is read again (one
    /// `INFO`) every [`REPLICA_RECHECK`].
    pub(crate) async fn replica_wait(&self) -> Result<Option<(u32, Duration)>> {
        let Some(sync) = self.replica_sync else {
            return Ok(None);
        };
        if self.replica_sync_required {
            return Ok(Some(sync));
        }
        let absent_until = *lock_ignoring_poison(&self.replicas_absent_until);
        match absent_until {
            None => Ok(Some(sync)),
            Some(until) if Instant::now() < until => Ok(None),
            Some(_) => {
                if connected_replicas(&self.conn).await? > 0 {
                    *lock_ignoring_poison(&self.replicas_absent_until) = None;
                    Ok(Some(sync))
                } else {
                    *lock_ignoring_poison(&self.replicas_absent_until) =
                        Some(Instant::now() + REPLICA_RECHECK);
                    Ok(None)
                }
            }
        }
    }

    /// Whether a grant that `acked` of the `replicas` asked for acknowledged must be undone.
    ///
    /// Enough acknowledgements: no. Too few with [`ReplicaSync::Require`](crate::ReplicaSync):
    /// yes. Too few in auto mode: yes while the primary still has a replica (it was just slow
    /// or unreachable); a primary without any replica now cannot do better, so the grant
    /// stands, and acquires stop waiting for replicas for [`REPLICA_RECHECK`].
    async fn must_undo(&self, replicas: u32, acked: i64) -> Result<bool> {
        if acked >= i64::from(replicas) {
            return Ok(false);
        }
        if self.replica_sync_required {
            return Ok(true);
        }
        let present = connected_replicas(&self.conn).await? > 0;
        if !present {
            *lock_ignoring_poison(&self.replicas_absent_until) =
                Some(Instant::now() + REPLICA_RECHECK);
        }
        Ok(present)
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
        let Some((replicas, wait)) = self.replica_wait().await? else {
            let mut invocation = call.script.prepare_invoke();
            for key in call.keys {
                invocation.key(*key);
            }
            for arg in call.args {
                invocation.arg(arg);
            }
            return self.conn.script(&invocation, call.context, call.name).await;
        };
        let (reply, acked): (T, i64) = self
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
        // Nothing granted (held, queued, too few permits): the WAIT's answer does not matter.
        if !granted(&reply) || !self.must_undo(replicas, acked).await? {
            return Ok(reply);
        }
        // The grant is on the primary only (or on too few replicas): undo it with the release
        // script of what was just granted, so that a failover to a replica that never saw it
        // cannot give the same lock or permits to somebody else while our caller believes it
        // holds them. Nothing was recorded yet (no guard, no watchdog entry), so the release
        // script alone undoes it. If the undo itself fails, its error is returned instead: a
        // lease-bound grant then ends with its lease.
        let task = undo();
        let mut invocation = task.script.prepare_invoke();
        for key in &task.keys {
            invocation.key(&**key);
        }
        for arg in &task.args {
            invocation.arg(arg);
        }
        self.conn
            .script::<redis::Value>(&invocation, "undoing an unreplicated acquire", call.name)
            .await?;
        Err(Error::NotReplicated {
            name: call.name.to_owned(),
            timeout: wait,
            required: replicas,
            acknowledged: u32::try_from(acked.max(0)).unwrap_or(u32::MAX),
        })
    }
}
