//! The Lua scripts, kept as files in `scripts/` and sent with EVALSHA: every script of the
//! library is declared here, once.

use std::collections::HashMap;
use std::sync::LazyLock;

use redis::{Cmd, Script, ToRedisArgs};

/// The source of a script: the prelude (`scripts/prelude.lua`: the helpers every script may use),
/// then the files of `scripts/` named, in order (a family's helpers, then the script). A command
/// Redis refuses is reported on a line of this text.
///
/// A hot script may do without the prelude (`bare "name.lua"`): each helper is a closure made
/// anew on every call (about 1.5 µs of Redis CPU per call for the prelude). Or it may have a
/// fast path (`fast "name.fast.lua",`) put before the prelude: Lua runs a script's text from the
/// top, so the usual case returns before the helpers are defined.
macro_rules! lua {
    (bare $file:literal) => {
        include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/", $file))
    };
    ($(fast $fast:literal,)? $($file:literal),+) => {
        concat!(
            $(include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/", $fast)),)?
            include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/prelude.lua")),
            $(include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/", $file))),+
        )
    };
}
/// The registry: a `static NAME: LazyLock<Script>` per script (`NAME = "file.lua";`, or a family's
/// helpers first: `NAME = "family.lua", "file.lua";`), and [`SOURCES`], every script's text.
macro_rules! scripts {
    ($($(#[$doc:meta])* $name:ident = $($kind:ident)? $($file:literal),+;)+) => {
        $(
            $(#[$doc])*
            pub(crate) static $name: LazyLock<Script> =
                LazyLock::new(|| Script::new(lua!($($kind)? $($file),+)));
        )+

        /// Every script latchkey runs, as sent: to name the command on the line where Redis
        /// refused one.
        pub(crate) const SOURCES: &[&str] = &[$(lua!($($kind)? $($file),+)),+];
    };
}

scripts! {
    /// Acquire a lock.
    LOCK_ACQUIRE = fast "lock_acquire.fast.lua", "lock_acquire.lua";

    /// Release a lock's hold, handing the lock on to a waiting client.
    LOCK_RELEASE = fast "lock_release.fast.lua", "handoff_prelude.lua", "lock_release.lua";

    /// Register what a client is (host, process, program, version, name).
    CLIENT_REGISTER = bare "client_register.lua";

    /// Register a job of a scheduler group.
    #[cfg(feature = "scheduler")]
    SCHED_REGISTER = "sched_prelude.lua", "sched_register.lua";

    /// Claim an occurrence of a job (or a retry, or a skip).
    #[cfg(feature = "scheduler")]
    SCHED_CLAIM = "sched_prelude.lua", "sched_claim.lua";

    /// End a job's run, recording its outcome or handing it back.
    #[cfg(feature = "scheduler")]
    SCHED_FINISH = "sched_prelude.lua", "sched_finish.lua";

    /// Release a lock's last hold again on a new primary after a failover, if it is still the
    /// latest grant.
    LOCK_RELEASE_RESEND = "lock_release_resend.lua";

    /// Renew or check a batch of held locks.
    LOCK_RENEW = "lock_renew.lua";

    /// Unregister a client whose last waiter gave up, passing on a hand-off meant for it.
    LOCK_LEAVE = "handoff_prelude.lua", "lock_leave.lua";

    /// Read a lock's state in one snapshot.
    LOCK_STATUS = "lock_status.lua";

    /// Delete a lock whoever holds it.
    LOCK_FORCE_UNLOCK = "lock_force_unlock.lua";

    /// Acquire or re-enter a fair lock, queueing the caller in arrival order.
    FAIR_ACQUIRE = "fair_prelude.lua", "fair_acquire.lua";

    /// Release one hold of a fair lock, waking the head of its queue.
    FAIR_RELEASE = "fair_prelude.lua", "fair_release.lua";

    /// Take a fair-lock waiter that gave up out of the queue.
    FAIR_LEAVE = "fair_prelude.lua", "fair_leave.lua";

    /// Delete a fair lock whoever holds it.
    FAIR_FORCE_UNLOCK = "fair_prelude.lua", "fair_force_unlock.lua";

    /// Acquire or re-enter the read side of a read-write lock.
    RW_READ_ACQUIRE = "rw_prelude.lua", "rw_read_acquire.lua";

    /// Acquire or re-enter the write side of a read-write lock.
    RW_WRITE_ACQUIRE = "rw_prelude.lua", "rw_write_acquire.lua";

    /// Release one read hold of a read-write lock.
    RW_READ_RELEASE = "rw_prelude.lua", "rw_read_release.lua";

    /// Release one write hold of a read-write lock.
    RW_WRITE_RELEASE = "rw_prelude.lua", "rw_write_release.lua";

    /// Renew or check a batch of read and write holds.
    RW_RENEW = "rw_prelude.lua", "rw_renew.lua";

    /// Take the pending mark of a writer that gave up.
    RW_LEAVE = "rw_prelude.lua", "rw_leave.lua";

    /// Delete a read-write lock whoever holds it.
    RW_FORCE_UNLOCK = "rw_prelude.lua", "rw_force_unlock.lua";

    /// Campaign in an election: lead it, or wait in its queue.
    ELECTION_CAMPAIGN = "handoff_prelude.lua", "election_prelude.lua", "election_campaign.lua";

    /// Resign an election's leadership, handing it over to the next waiter.
    ELECTION_RESIGN = "handoff_prelude.lua", "election_prelude.lua", "election_resign.lua";

    /// Change the leader's value while it still leads.
    ELECTION_PROCLAIM = "handoff_prelude.lua", "election_prelude.lua", "election_proclaim.lua";

    /// Read an election's leader, term and change log in one snapshot.
    ELECTION_OBSERVE = "handoff_prelude.lua", "election_prelude.lua", "election_observe.lua";

    /// Unregister a client whose last campaign gave up, passing on a hand-off meant for it.
    ELECTION_LEAVE = "handoff_prelude.lua", "election_prelude.lua", "election_leave.lua";

    /// Take permits from a semaphore.
    SEM_ACQUIRE = "sem_acquire.lua";

    /// Give permits back to a semaphore.
    SEM_RELEASE = "sem_release.lua";

    /// Set up a semaphore's permits unless it is set up already.
    SEM_SET_PERMITS = "sem_set_permits.lua";

    /// Add permits to a semaphore, or take some away.
    SEM_ADD_PERMITS = "sem_add_permits.lua";

    /// Take leased permits from a permit-expirable semaphore.
    PSEM_ACQUIRE = "psem_prelude.lua", "psem_acquire.lua";

    /// Give leased permits back by id.
    PSEM_RELEASE = "psem_prelude.lua", "psem_release.lua";

    /// Set up a permit-expirable semaphore's permits unless it is set up already.
    PSEM_SET_PERMITS = "psem_prelude.lua", "psem_set_permits.lua";

    /// Add permits to a permit-expirable semaphore, or take some away.
    PSEM_ADD_PERMITS = "psem_prelude.lua", "psem_add_permits.lua";

    /// Count a permit-expirable semaphore's permits.
    PSEM_COUNT = "psem_prelude.lua", "psem_count.lua";

    /// Renew or check a batch of permit leases.
    PSEM_RENEW = "psem_prelude.lua", "psem_renew.lua";

    /// Set a count-down latch's count unless it is set already.
    LATCH_SET_COUNT = "latch_set_count.lua";

    /// Count a count-down latch down by one.
    LATCH_COUNT_DOWN = "latch_count_down.lua";

    /// RedLock: take the lock on one node.
    REDLOCK_ACQUIRE = fast "redlock_acquire.fast.lua", "redlock_acquire.lua";

    /// RedLock: raise one node's fencing counter to a quorum hold's token.
    REDLOCK_FENCE = "redlock_fence.lua";

    /// RedLock: release the lock on one node.
    REDLOCK_RELEASE = fast "redlock_release.fast.lua", "redlock_release.lua";

    /// Offer items to a delayed queue.
    DELAY_OFFER = "queue_prelude.lua", "delay_offer.lua";

    /// Move due items and timed-out deliveries to the ready list.
    DELAY_TRANSFER = "delay_transfer.lua";

    /// Cancel an item still waiting for its due time.
    DELAY_REMOVE = "queue_prelude.lua", "delay_remove.lua";

    /// Read the earliest waiting items.
    DELAY_PENDING = "queue_prelude.lua", "delay_pending.lua";

    /// Take the head of the ready list.
    QUEUE_TAKE = "queue_prelude.lua", "queue_take.lua";

    /// Acknowledge a delivery.
    QUEUE_ACK = "queue_prelude.lua", "queue_ack.lua";

    /// Put an item back.
    QUEUE_REQUEUE = "queue_prelude.lua", "queue_requeue.lua";

    /// Extend a delivery's visibility timeout.
    QUEUE_EXTEND = "queue_prelude.lua", "queue_extend.lua";

    /// Dead-letter an item that cannot be decoded.
    QUEUE_DEAD = "queue_prelude.lua", "queue_dead.lua";

    /// Read which primitive a name holds and its state (read-only, for operators).
    INSPECT = "inspect.lua";

    /// Set a rate limiter's rate unless it is set already.
    RATE_TRY_SET = "rate_prelude.lua", "rate_try_set.lua";

    /// Set a rate limiter's rate, replacing the one set.
    RATE_SET = "rate_prelude.lua", "rate_set.lua";

    /// Take permits from a rate limiter's window.
    RATE_ACQUIRE = "rate_prelude.lua", "rate_acquire.lua";

    /// Give permits back to a rate limiter's window, oldest grants first.
    RATE_RELEASE = "rate_prelude.lua", "rate_release.lua";

    /// Give back one grant of a rate limiter whose caller went away.
    RATE_GIVE_BACK = "rate_prelude.lua", "rate_give_back.lua";

    /// Count the permits a rate limiter's window has left (read-only).
    RATE_AVAILABLE = "rate_prelude.lua", "rate_available.lua";

    /// Decide one request of a GCRA rate limit.
    GCRA_CHECK = bare "gcra_check.lua";

    /// Give back the permits of a GCRA decision whose caller went away.
    GCRA_REFUND = bare "gcra_refund.lua";
}

/// Every script's source by its SHA1: what is sent whole (`EVAL`) to a server that does not know
/// the script.
pub(crate) static BY_HASH: LazyLock<HashMap<&'static str, &'static str>> = LazyLock::new(|| {
    SOURCES
        .iter()
        .map(|source| {
            let hash: &'static str = Script::new(source).get_hash().to_owned().leak();
            (hash, *source)
        })
        .collect()
});

/// The command that runs the script of `hash` with `keys` and `args`: `EVALSHA`, or, `whole`,
/// `EVAL` with the script's source (which also caches it on that server), built at its final
/// size.
pub(crate) fn eval_cmd<'a>(
    hash: &str,
    whole: bool,
    keys: impl ExactSizeIterator<Item = &'a [u8]> + Clone,
    args: impl ExactSizeIterator<Item = &'a [u8]> + Clone,
) -> Cmd {
    let (command, script) = match (whole, BY_HASH.get(hash)) {
        (true, Some(source)) => ("EVAL", *source),
        _ => ("EVALSHA", hash),
    };
    let bytes = script.len()
        + 20
        + keys
            .clone()
            .chain(args.clone())
            .map(<[u8]>::len)
            .sum::<usize>();
    let mut cmd = Cmd::with_capacity(3 + keys.len() + args.len(), bytes);
    cmd.arg(command).arg(script).arg(keys.len());
    for part in keys.chain(args) {
        cmd.arg(part);
    }
    cmd
}

/// Whether `err` says the server does not know a script (`NOSCRIPT`): a new primary after a
/// failover (Redis does not replicate `SCRIPT LOAD`), a flushed cache. The call is then sent
/// again with the script whole, on the same connection, to the same node (a `SCRIPT LOAD`
/// routed by a cluster connection might reach other nodes than the call).
pub(crate) fn is_noscript(err: &redis::RedisError) -> bool {
    err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
}

/// A script call being put together: the script, its KEYS and its ARGV (see [`Invoke`]).
pub(crate) struct Invocation<'a> {
    script: &'a Script,
    keys: Vec<Vec<u8>>,
    args: Vec<Vec<u8>>,
}

impl Invocation<'_> {
    /// Adds a key (`KEYS[i]`).
    pub(crate) fn key(&mut self, key: impl ToRedisArgs) -> &mut Self {
        key.write_redis_args(&mut self.keys);
        self
    }

    /// Adds an argument (`ARGV[i]`).
    pub(crate) fn arg(&mut self, arg: impl ToRedisArgs) -> &mut Self {
        arg.write_redis_args(&mut self.args);
        self
    }

    /// `EVALSHA`, or `EVAL` with the source when `whole` (see [`eval_cmd`]).
    pub(crate) fn cmd(&self, whole: bool) -> Cmd {
        eval_cmd(
            self.script.get_hash(),
            whole,
            self.keys.iter().map(Vec::as_slice),
            self.args.iter().map(Vec::as_slice),
        )
    }
}

/// Starts an [`Invocation`] of a script, as redis' `prepare_invoke` does.
pub(crate) trait Invoke {
    fn invocation(&self) -> Invocation<'_>;
}

impl Invoke for Script {
    fn invocation(&self) -> Invocation<'_> {
        Invocation {
            script: self,
            keys: Vec::new(),
            args: Vec::new(),
        }
    }
}

/// Redisson's unlock message (`LockPubSub.UNLOCK_MESSAGE`).
pub(crate) const UNLOCK_MESSAGE: &str = "0";
/// Redisson's read-unlock message (`LockPubSub.READ_UNLOCK_MESSAGE`): wake every waiter.
pub(crate) const READ_UNLOCK_MESSAGE: &str = "1";

#[cfg(test)]
#[path = "scripts_tests.rs"]
mod tests;
