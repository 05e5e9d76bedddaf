//! The holds layer: the registry of every hold of a client, and the watchdog, one background
//! task per client that keeps every held lock alive and notices lost ones. (The releases that
//! dropped guards hand over run in the client's task queue, [`crate::task`].)
//!
//! Every lock this client holds is an entry of the [`Registry`]: one per grant, since every
//! acquire is an owner of its own (re-entered guards share their hold's entry). Every third of the watchdog timeout the
//! task renews all entries held without an explicit lease, and checks the others, in batched
//! script calls of up to [`RENEW_BATCH`] locks each. An entry Redis reports gone is removed and
//! its `lost` signal fires; so does an entry whose lease has run out while renewals failed.
//!
//! An entry is removed from the registry *before* its release script is sent, so no renewal is
//! ever started for a lock after its unlock; a renewal already in flight cannot resurrect it,
//! because the renew script only extends a hash that still has the owner's field.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::join_all;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::client_info::Registration;
use crate::conn::Conn;
use crate::error::{lock, Error, Result};
use crate::metrics::{self, Site};
use crate::scripts;
use crate::scripts::Invoke;

/// The longest lease latchkey accepts (365 days).
pub const MAX_LEASE: Duration = Duration::from_secs(365 * 24 * 3600);

/// How long a fencing counter (or an election's term counter and change log) outlives the
/// grant that last wrote it: then it expires with its object idle. Tokens keep increasing
/// across its expiry (see `next_token` in `scripts/prelude.lua`).
pub(crate) const COUNTER_IDLE: Duration = Duration::from_secs(60);

/// Checks a lease: at least one millisecond and at most [`MAX_LEASE`].
pub(crate) fn check_lease(lease: Duration) -> Result<u64> {
    let problem = if lease < Duration::from_millis(1) {
        "is shorter than one millisecond; give a positive lease".to_owned()
    } else if lease > MAX_LEASE {
        format!("is longer than the maximum {MAX_LEASE:?}")
    } else {
        return Ok(lease.as_millis() as u64);
    };
    Err(Error::invalid("lease", format!("{lease:?} {problem}")))
}

/// The most locks renewed by one script call.
pub(crate) const RENEW_BATCH: usize = 100;

/// How a hold's lease is kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Lease {
    /// Renewed by the watchdog every third of the watchdog timeout.
    Watchdog,
    /// A fixed lease: the hold ends when it runs out.
    Fixed(Duration),
}

impl Lease {
    /// The lease in milliseconds: the watchdog timeout for a watchdog lease.
    pub(crate) fn ms(self, watchdog_timeout: Duration) -> u64 {
        match self {
            Lease::Watchdog => watchdog_timeout.as_millis() as u64,
            Lease::Fixed(d) => d.as_millis() as u64,
        }
    }
}

/// Identifies one hold in the registry.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub(crate) struct HoldKey {
    /// What kind of hold (`"lock"`, `"read"`, `"write"`, …): one owner may hold a key in
    /// several ways at once.
    pub(crate) kind: &'static str,
    /// The Redis key of the object.
    pub(crate) key: Arc<str>,
    /// The owner field.
    pub(crate) field: Arc<str>,
}

/// How the watchdog renews (or only checks) a hold: the batched renew script, with `keys`, and
/// as ARGV the hold's `field`, the lease in ms (0: only check) and `kind`, if any. The script
/// answers, per hold, 1 while the owner still holds it, 0 once it is gone.
#[derive(Debug)]
pub(crate) struct Renewal {
    pub(crate) script: &'static redis::Script,
    pub(crate) keys: Vec<Arc<str>>,
    pub(crate) field: Arc<str>,
    pub(crate) kind: Option<&'static str>,
}

impl Renewal {
    /// The renewal of the hold of `field` in the lock hash `key` (`scripts/lock_renew.lua`: the
    /// lock's, the fair lock's, the election's, a RedLock node's).
    pub(crate) fn of(key: &Arc<str>, field: &Arc<str>) -> Arc<Renewal> {
        Renewal::with(&scripts::LOCK_RENEW, key, field)
    }

    /// The renewal of the hold of `field` in `key` by `script`, which takes the key, the field
    /// and the lease (also a permit's lease, `scripts/psem_renew.lua`).
    pub(crate) fn with(
        script: &'static redis::Script,
        key: &Arc<str>,
        field: &Arc<str>,
    ) -> Arc<Renewal> {
        let (keys, field) = (vec![key.clone()], field.clone());
        Arc::new(Renewal {
            script,
            keys,
            field,
            kind: None,
        })
    }
}

/// What a guard keeps to find its hold again: the hold's generation in the registry (unique
/// per grant), its `lost` signal and how long its lease is known to last.
#[derive(Clone, Debug)]
pub(crate) struct Ticket {
    pub(crate) gen: u64,
    pub(crate) lost: CancellationToken,
    /// The lease's known end: nanoseconds after `granted`, moved by every confirmed renewal.
    valid_for: Arc<AtomicU64>,
    granted: Instant,
}

impl Ticket {
    /// Whether the hold is lost: signalled by the watchdog, or its lease's known end has
    /// passed although the watchdog loop has not run yet (a process resumed after a pause
    /// sees it at once, before its first write).
    pub(crate) fn is_lost(&self) -> bool {
        self.lost.is_cancelled()
            || Instant::now()
                .saturating_duration_since(self.granted)
                .as_nanos() as u64
                >= self.valid_for.load(Ordering::Acquire)
    }
}

#[derive(Debug)]
struct Held {
    key: HoldKey,
    /// Renewed by the watchdog (a watchdog lease), rather than only checked (a fixed lease).
    renew: bool,
    /// Latest time at which the lease in Redis is known to run at least until `valid_until`.
    valid_until: Instant,
    /// `valid_until` as the guards' tickets read it (see [`Ticket::is_lost`]).
    valid_for: Arc<AtomicU64>,
    granted: Instant,
    lost: CancellationToken,
    /// The user-visible name, for logs.
    name: Arc<str>,
    renewal: Arc<Renewal>,
}

/// The holds of one client (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct Registry {
    state: Mutex<State>,
    /// Pokes the watchdog when a hold with an earlier deadline appears.
    changed: Notify,
    /// Whether metrics carry the lock name (`ClientBuilder::metrics_name_label`).
    name_label: bool,
}

/// The registry's map, by generation: hashed on every acquire and release, where std's
/// SipHash was 7% of a lock+unlock pair's instructions (callgrind).
type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

#[derive(Debug, Default)]
struct State {
    next_gen: u64,
    held: FastMap<u64, Held>,
    /// Every hold's `valid_until` (with its generation, unique), in order: the watchdog finds
    /// the expired holds and the earliest deadline without scanning every hold.
    deadlines: BTreeSet<(Instant, u64)>,
    /// When the watchdog loop's current sleep ends (`None` before it first sleeps): a grant
    /// whose deadline comes later needs no wake-up, the loop sees it when it wakes.
    wakes_at: Option<Instant>,
    /// Whether the client's registration (see [`crate::client_info`]) lives until the loop's
    /// next refresh; a grant while it does not wakes the loop to register at once.
    registered: bool,
}

impl State {
    /// The earliest deadline of any hold.
    fn earliest(&self) -> Option<Instant> {
        self.deadlines.first().map(|(at, _)| *at)
    }

    /// Moves the deadline of hold `gen` (if it is still held) to `valid_until`.
    fn set_deadline(&mut self, gen: u64, valid_until: Instant) {
        let Some(held) = self.held.get_mut(&gen) else {
            return;
        };
        let old = std::mem::replace(&mut held.valid_until, valid_until);
        held.valid_for.store(
            valid_until
                .saturating_duration_since(held.granted)
                .as_nanos() as u64,
            Ordering::Release,
        );
        if old != valid_until {
            self.deadlines.remove(&(old, gen));
            self.deadlines.insert((valid_until, gen));
        }
    }

    /// Forgets hold `gen`, with its deadline.
    fn remove(&mut self, gen: u64) -> Option<Held> {
        let held = self.held.remove(&gen)?;
        self.deadlines.remove(&(held.valid_until, gen));
        Some(held)
    }
}

impl Registry {
    /// The same registry, its metrics labelled with lock names if `name_label`.
    pub(crate) fn with_name_label(self, name_label: bool) -> Registry {
        Registry { name_label, ..self }
    }

    /// Where the metrics of the hold `key` (named `name`) are recorded.
    fn site(&self, key: &HoldKey, name: &str) -> Site {
        Site::with(self.name_label, metrics::primitive_of_kind(key.kind), name)
    }

    /// Number of holds tracked.
    pub(crate) fn len(&self) -> usize {
        lock(&self.state).held.len()
    }

    /// Records a hold granted by a script sent at `sent_at`: its lease is known to last until
    /// `sent_at` + the lease (the watchdog timeout for a watchdog lease). Every grant is a hold
    /// of its own (a new owner id per acquire), so nothing is ever merged or replaced.
    pub(crate) fn acquired(
        &self,
        key: HoldKey,
        name: &str,
        lease: Lease,
        watchdog_timeout: Duration,
        sent_at: Instant,
        renewal: Arc<Renewal>,
    ) -> Ticket {
        let (renew, valid_until) = match lease {
            Lease::Watchdog => (true, sent_at + watchdog_timeout),
            Lease::Fixed(d) => (false, sent_at + d),
        };
        let mut state = lock(&self.state);
        state.next_gen += 1;
        let gen = state.next_gen;
        // The watchdog sleeps until the earliest deadline or its next tick, whichever comes
        // first: it needs waking only when this grant's deadline comes before that. A
        // watchdog-lease grant (deadline a whole watchdog timeout away) usually comes after
        // the next tick, so the usual acquire wakes nothing.
        let poke = state.wakes_at.is_none_or(|at| valid_until < at) || !state.registered;
        let lost = CancellationToken::new();
        let valid_for = Arc::new(AtomicU64::new(
            valid_until.saturating_duration_since(sent_at).as_nanos() as u64,
        ));
        state.deadlines.insert((valid_until, gen));
        state.held.insert(
            gen,
            Held {
                key,
                renew,
                valid_until,
                valid_for: valid_for.clone(),
                granted: sent_at,
                lost: lost.clone(),
                name: Arc::from(name),
                renewal,
            },
        );
        drop(state);
        if poke {
            self.changed.notify_one();
        }
        Ticket {
            gen,
            lost,
            valid_for,
            granted: sent_at,
        }
    }

    /// Forgets the hold of `ticket`, before its release is sent (so no renewal outlives the
    /// release). Returns whether it was still held: a lost hold has nothing to release.
    pub(crate) fn released(&self, ticket: &Ticket) -> bool {
        lock(&self.state).remove(ticket.gen).is_some()
    }

    /// Marks hold `gen` lost (if it is still held) and forgets it.
    fn lose(&self, gen: u64, why: &str) {
        if let Some(held) = lock(&self.state).remove(gen) {
            self.lost(held, why, "gone");
        }
    }

    /// Reports `held`, forgotten already, lost for `reason` (`why` in words).
    fn lost(&self, held: Held, why: &str, reason: &'static str) {
        tracing::warn!(lock = %held.name, "latchkey lock lost: {why}");
        self.site(&held.key, &held.name)
            .count(metrics::LOST, &[("reason", reason)], 1);
        held.lost.cancel();
    }

    /// The holds to renew or check now.
    fn snapshot(&self, watchdog_timeout: Duration) -> Vec<RenewItem> {
        lock(&self.state)
            .held
            .iter()
            .map(|(gen, held)| RenewItem {
                key: held.key.clone(),
                renewal: held.renewal.clone(),
                gen: *gen,
                name: held.name.clone(),
                lease_ms: if held.renew {
                    watchdog_timeout.as_millis() as u64
                } else {
                    0
                },
            })
            .collect()
    }

    /// Adds one to counter `metric` for each hold of `items`: one increment per primitive
    /// without the name label (a tick of 50k holds is a handful of increments).
    fn count<'i>(&self, metric: &'static str, items: impl IntoIterator<Item = &'i RenewItem>) {
        let mut counts: Vec<(&'static str, u64)> = Vec::new();
        for item in items {
            if self.name_label {
                self.site(&item.key, &item.name).count(metric, &[], 1);
                continue;
            }
            let primitive = metrics::primitive_of_kind(item.key.kind);
            match counts.iter_mut().find(|(p, _)| *p == primitive) {
                Some((_, n)) => *n += 1,
                None => counts.push((primitive, 1)),
            }
        }
        for (primitive, n) in counts {
            Site::with(false, primitive, "").count(metric, &[], n);
        }
    }

    /// Records a confirmed renewal sent at `sent_at`.
    fn renewed(&self, item: &RenewItem, sent_at: Instant, watchdog_timeout: Duration) {
        if item.lease_ms == 0 {
            return;
        }
        let now = Instant::now();
        let mut state = lock(&self.state);
        // A hold whose known lease ended before the answer came is not extended: `is_lost`
        // has said so already, and the loop loses it.
        let extended = state
            .held
            .get(&item.gen)
            .filter(|held| held.valid_until > now)
            .map(|held| held.valid_until.max(sent_at + watchdog_timeout));
        if let Some(valid_until) = extended {
            state.set_deadline(item.gen, valid_until);
        }
    }

    /// Loses every hold whose lease has run out by `now`; returns the earliest deadline left.
    fn expire(&self, now: Instant) -> Option<Instant> {
        self.expire_in(&mut lock(&self.state), now)
    }

    /// Loses every hold whose lease has run out by `now` and returns when the watchdog loop
    /// must wake next: at the earliest deadline left or at `tick`, whichever comes first. Until
    /// then, only a grant with an earlier deadline wakes it (see `acquired_until`).
    fn sleep_until(&self, now: Instant, tick: Instant) -> Instant {
        // One critical section: a grant recorded between computing the wake-up and publishing
        // it would see the loop's previous wake-up and might not wake it.
        let mut state = lock(&self.state);
        let wake = self
            .expire_in(&mut state, now)
            .map_or(tick, |d| d.min(tick));
        state.wakes_at = Some(wake);
        wake
    }

    fn expire_in(&self, state: &mut State, now: Instant) -> Option<Instant> {
        // One critical section: a grant that extends a hold between finding it expired and
        // losing it would otherwise be lost with it. Only the expired holds are visited.
        while let Some(&(at, gen)) = state.deadlines.first() {
            if at > now {
                break;
            }
            state.deadlines.pop_first();
            if let Some(held) = state.held.remove(&gen) {
                let why = "its lease ran out before it could be renewed";
                self.lost(held, why, "expired");
            }
        }
        state.earliest()
    }
}

#[derive(Clone, Debug)]
struct RenewItem {
    key: HoldKey,
    renewal: Arc<Renewal>,
    gen: u64,
    /// The user-visible name, for metrics.
    name: Arc<str>,
    lease_ms: u64,
}

/// The watchdog task: it renews and checks the holds of `registry` every `period` until
/// `shutdown`, and keeps the client's `registration` alive while it holds anything.
pub(crate) async fn renew_loop(
    conn: Conn,
    registry: Arc<Registry>,
    registration: Arc<Registration>,
    watchdog_timeout: Duration,
    period: Duration,
    renew_timeout: Duration,
    shutdown: CancellationToken,
) {
    let mut next_tick = Instant::now() + period;
    // The registration lives a watchdog timeout from its last refresh: refreshed at every
    // tick while the client holds something, and at once for a grant after it lapsed.
    let mut registered_at = None::<Instant>;
    loop {
        let wake_at = registry.sleep_until(Instant::now(), next_tick);
        tokio::select! {
            biased;
            _ = shutdown.cancelled() => return,
            _ = registry.changed.notified() => {}
            _ = tokio::time::sleep_until(wake_at) => {}
        }
        let now = Instant::now();
        let due = registered_at.is_none_or(|at| now >= at + period);
        if due && registry.len() > 0 {
            registered_at = Some(now);
            tokio::spawn(registration.clone().refresh(conn.clone(), watchdog_timeout));
        }
        // Lapses before the next tick's refresh could come: the next grant wakes the loop.
        let lasts = registered_at.is_some_and(|at| now + period < at + watchdog_timeout);
        lock(&registry.state).registered = lasts;
        if now < next_tick {
            continue;
        }
        next_tick = Instant::now() + period;
        // A lease that ends at this tick (the usual case: a lease is a whole number of periods
        // from the renewal that set it) is lost now, not after this tick's renewals have been
        // answered or timed out.
        registry.expire(Instant::now());
        let items = registry.snapshot(watchdog_timeout);
        // Group by script (kind of hold) and, on a cluster, by hash slot (one script call may
        // only touch one slot), then batches of at most RENEW_BATCH holds.
        let cluster = conn.is_cluster();
        let mut by_script: HashMap<(&'static str, u16), Vec<RenewItem>> = HashMap::new();
        for item in items {
            let slot = if cluster {
                crate::keys::key_slot(item.key.key.as_bytes())
            } else {
                0
            };
            by_script
                .entry((item.renewal.script.get_hash(), slot))
                .or_default()
                .push(item);
        }
        let batches = by_script
            .values()
            .flat_map(|items| items.chunks(RENEW_BATCH))
            .map(|batch| {
                let conn = &conn;
                let registry = &registry;
                async move {
                    let sent_at = Instant::now();
                    let mut invocation = batch[0].renewal.script.invocation();
                    for RenewItem { renewal, lease_ms, .. } in batch {
                        for key in &renewal.keys {
                            invocation.key(&**key);
                        }
                        invocation.arg(&*renewal.field).arg(lease_ms).arg(renewal.kind);
                    }
                    let result: crate::Result<Vec<i64>> = conn
                        .script_within(&invocation, "renewing locks", "", renew_timeout)
                        .await;
                    match result {
                        Ok(flags) => {
                            let renewed = batch.iter().zip(&flags).filter(|(_, f)| **f == 1);
                            registry.count(metrics::RENEWALS, renewed.map(|(item, _)| item));
                            for (item, flag) in batch.iter().zip(flags) {
                                if flag == 1 {
                                    registry.renewed(item, sent_at, watchdog_timeout);
                                } else {
                                    registry.lose(item.gen, "it is gone from redis");
                                }
                            }
                        }
                        Err(e) => {
                            // Keep trying; holds whose lease runs out meanwhile are lost by `expire`
                            // (a warning then): one failed round is not for an operator yet.
                            tracing::debug!(error = %e.chain(), "latchkey watchdog could not renew");
                            registry.count(metrics::RENEWAL_FAILURES, batch);
                        }
                    }
                }
            });
        // While the renewals are under way, leases keep running out on time.
        let renewals = join_all(batches);
        tokio::pin!(renewals);
        loop {
            let earliest = registry.expire(Instant::now());
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => return,
                _ = &mut renewals => break,
                _ = tokio::time::sleep_until(earliest.unwrap_or(next_tick)) => {}
            }
        }
    }
}

#[cfg(test)]
#[path = "watchdog_tests.rs"]
mod registry_tests;
