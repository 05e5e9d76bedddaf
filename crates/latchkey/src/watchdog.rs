//! The holds layer: the registry of every hold of a client, and the watchdog, one background
//! task per client that keeps every held lock alive and notices lost ones. (The releases that
//! dropped guards hand over run in the client's task queue, [`crate::task`].)
//!
//! Every lock this client holds is an entry of the [`Registry`], keyed by lock key and owner
//! field, with a count of the guards that share the hold. Every third of the watchdog timeout the
//! task renews all entries held without an explicit lease, and checks the others, in batched
//! script calls of up to [`RENEW_BATCH`] locks each. An entry Redis reports gone is removed and
//! its `lost` signal fires; so does an entry whose lease has run out while renewals failed.
//!
//! An entry is removed from the registry *before* its release script is sent, so no renewal is
//! ever started for a lock after its unlock; a renewal already in flight cannot resurrect it,
//! because the renew script only extends a hash that still has the owner's field.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::join_all;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::conn::Conn;
use crate::error::{Error, Result};
use crate::metrics::{self, Site};
use crate::scripts;

/// The longest lease latchkey accepts (365 days).
pub const MAX_LEASE: Duration = Duration::from_secs(365 * 24 * 3600);

/// Checks a lease: at least one millisecond and at most [`MAX_LEASE`].
pub(crate) fn check_lease(lease: Duration) -> Result<u64> {
    if lease < Duration::from_millis(1) {
        return Err(Error::invalid(
            "lease",
            format!("{lease:?} is shorter than one millisecond; give a positive lease"),
        ));
    }
    if lease > MAX_LEASE {
        return Err(Error::invalid(
            "lease",
            format!("{lease:?} is longer than the maximum {MAX_LEASE:?}"),
        ));
    }
    Ok(lease.as_millis() as u64)
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

/// How the watchdog renews (or checks) one kind of hold, in batches.
///
/// The batched script of a kind takes, for each hold in the batch, `keys()` in KEYS (always the
/// same number per hold) and `args(lease_ms)` in ARGV (always the same number per hold), with
/// `lease_ms == 0` meaning "check, do not extend". It returns one integer per hold: 1 while the
/// owner still holds it, 0 once it is gone.
pub(crate) trait Renewal: Send + Sync + std::fmt::Debug {
    /// The batched renew script.
    fn script(&self) -> &'static redis::Script;
    /// This hold's keys.
    fn keys(&self) -> Vec<Arc<str>>;
    /// This hold's arguments.
    fn args(&self, lease_ms: u64) -> Vec<String>;
}

/// The renewal of a reentrant lock hash (`scripts/lock_renew.lua`).
#[derive(Debug)]
pub(crate) struct LockRenewal {
    pub(crate) key: Arc<str>,
    pub(crate) field: Arc<str>,
}

impl LockRenewal {
    /// The renewal of `hold`, a field of a lock hash (the lock's, the fair lock's).
    pub(crate) fn of(hold: &HoldKey) -> Arc<dyn Renewal> {
        Arc::new(LockRenewal {
            key: hold.key.clone(),
            field: hold.field.clone(),
        })
    }
}

impl Renewal for LockRenewal {
    fn script(&self) -> &'static redis::Script {
        &scripts::LOCK_RENEW
    }
    fn keys(&self) -> Vec<Arc<str>> {
        vec![self.key.clone()]
    }
    fn args(&self, lease_ms: u64) -> Vec<String> {
        vec![self.field.to_string(), lease_ms.to_string()]
    }
}

/// What a guard keeps to find its hold again.
#[derive(Clone, Debug)]
pub(crate) struct Ticket {
    pub(crate) gen: u64,
    pub(crate) lost: CancellationToken,
}

#[derive(Debug)]
struct Held {
    gen: u64,
    guards: u32,
    watchdog_guards: u32,
    /// Latest time at which the lease in Redis is known to run at least until `valid_until`.
    valid_until: Instant,
    lost: CancellationToken,
    /// The user-visible name, for logs.
    name: Arc<str>,
    renewal: Arc<dyn Renewal>,
    /// Recorded from a re-entry (Redis counted more than one hold) with no entry before it:
    /// the fresh grant under it may still be on its way (two attempts of one owner whose
    /// answers are handled in the other order), and joins this entry when it comes.
    awaiting_first: bool,
    /// When this entry was recorded.
    recorded_at: Instant,
}

/// The holds of one client (see the module docs).
#[derive(Debug)]
pub(crate) struct Registry {
    state: Mutex<State>,
    /// Pokes the watchdog when a hold with an earlier deadline appears.
    changed: Notify,
    /// Whether metrics carry the lock name (`ClientBuilder::metrics_name_label`).
    name_label: bool,
}

/// The registry's maps: keyed by lock keys and owner fields, hashed on every acquire and
/// release, where std's SipHash was 7% of a lock+unlock pair's instructions (callgrind).
type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

#[derive(Debug, Default)]
struct State {
    next_gen: u64,
    held: FastMap<HoldKey, Held>,
    /// Every hold's `valid_until` (with its generation, unique), in order: the watchdog finds
    /// the expired holds and the earliest deadline without scanning every hold.
    deadlines: BTreeMap<(Instant, u64), HoldKey>,
    /// Acquire attempts under way, per hold.
    in_flight: FastMap<HoldKey, u32>,
    /// Release scripts sent (or about to be) and not answered yet, per hold.
    releasing: FastMap<HoldKey, u32>,
    /// When the watchdog loop's current sleep ends (`None` before it first sleeps): a grant
    /// whose deadline comes later needs no wake-up, the loop sees it when it wakes.
    wakes_at: Option<Instant>,
}

impl State {
    /// The earliest deadline of any hold.
    fn earliest(&self) -> Option<Instant> {
        self.deadlines.first_key_value().map(|((at, _), _)| *at)
    }

    /// Moves the deadline of the hold at `key` (which must be held) to `valid_until`.
    fn set_deadline(&mut self, key: &HoldKey, valid_until: Instant) {
        let Some(held) = self.held.get_mut(key) else {
            return;
        };
        let gen = held.gen;
        let old = std::mem::replace(&mut held.valid_until, valid_until);
        if old != valid_until {
            let key = self
                .deadlines
                .remove(&(old, gen))
                .unwrap_or_else(|| key.clone());
            self.deadlines.insert((valid_until, gen), key);
        }
    }

    /// Forgets the hold at `key`, with its deadline.
    fn remove(&mut self, key: &HoldKey) -> Option<Held> {
        let held = self.held.remove(key)?;
        self.deadlines.remove(&(held.valid_until, held.gen));
        Some(held)
    }
}

/// A release of a hold under way (see [`Registry::released`]); ends when dropped, which its
/// holder does once the release script has been answered (or has failed, or was never sent).
///
/// While it lasts, an acquire of the same owner is not "alone": the owner's field in Redis may
/// still be the hold being released, which must not be taken over as stranded (the release
/// arriving after the take-over would free the new hold).
#[derive(Debug)]
pub(crate) struct ReleaseMark {
    registry: Arc<Registry>,
    key: HoldKey,
}

impl Drop for ReleaseMark {
    fn drop(&mut self) {
        let mut state = self.registry.state();
        if let Some(n) = state.releasing.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                state.releasing.remove(&self.key);
            }
        }
    }
}

/// An acquire attempt under way (see [`Registry::begin_attempt`]); ends when dropped.
#[derive(Debug)]
pub(crate) struct AttemptMark<'a> {
    registry: &'a Registry,
    key: HoldKey,
    /// Nothing else of this owner holds or is acquiring the lock.
    pub(crate) alone: bool,
}

impl Drop for AttemptMark<'_> {
    fn drop(&mut self) {
        let mut state = self.registry.state();
        if let Some(n) = state.in_flight.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                state.in_flight.remove(&self.key);
            }
        }
    }
}

/// What the release of a guard has to do in Redis.
#[derive(Debug)]
pub(crate) enum Release {
    /// This guard's hold is stale (the lock was lost, maybe re-acquired by a newer hold):
    /// nothing to do in Redis.
    Stale,
    /// Release one hold in Redis, leaving `lease_ms` on the remaining holds if any; keep `mark`
    /// until the release script has been answered.
    Redis {
        lease_ms: u64,
        mark: ReleaseMark,
        /// Whether this is the owner's last hold (the release frees the lock).
        last: bool,
    },
}

impl Registry {
    pub(crate) fn new() -> Registry {
        Registry {
            state: Mutex::new(State::default()),
            changed: Notify::new(),
            name_label: false,
        }
    }

    /// The same registry, its metrics labelled with lock names if `name_label`.
    pub(crate) fn with_name_label(self, name_label: bool) -> Registry {
        Registry { name_label, ..self }
    }

    /// Where the metrics of the hold `key` (named `name`) are recorded.
    fn site(&self, key: &HoldKey, name: &str) -> Site {
        Site::with(self.name_label, metrics::primitive_of_kind(key.kind), name)
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // Every critical section is a few infallible map updates: poisoning cannot leave it torn.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Marks an acquire attempt for `key` as under way, and tells whether the owner holds
    /// nothing, has no other attempt under way and no release under way: then any hold Redis
    /// has for it is stranded. Keep the mark until the attempt's grant is recorded with
    /// [`Registry::acquired`].
    pub(crate) fn begin_attempt(&self, key: &HoldKey) -> AttemptMark<'_> {
        let mut state = self.state();
        let others = state.in_flight.get(key).copied().unwrap_or(0);
        let alone =
            others == 0 && !state.held.contains_key(key) && !state.releasing.contains_key(key);
        *state.in_flight.entry(key.clone()).or_default() += 1;
        AttemptMark {
            registry: self,
            key: key.clone(),
            alone,
        }
    }

    /// Whether this owner holds `key`, or has an acquire or a release of it under way: then a
    /// grant on release to it is not taken as a new hold (see `Lock::take_hand_off`).
    pub(crate) fn busy(&self, key: &HoldKey) -> bool {
        let state = self.state();
        state.held.contains_key(key)
            || state.in_flight.contains_key(key)
            || state.releasing.contains_key(key)
    }

    /// Number of holds tracked.
    pub(crate) fn len(&self) -> usize {
        self.state().held.len()
    }

    /// Records a hold granted by a script sent at `sent_at`. `holds` is the hold count Redis
    /// reported after the grant: 1 means a fresh grant, which replaces (and marks lost) any
    /// older local entry for the same owner, unless that entry is a re-entry recorded after
    /// this grant was sent, which counted it (see `Held::awaiting_first`).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn acquired(
        &self,
        key: HoldKey,
        name: &str,
        holds: u64,
        lease: Lease,
        watchdog_timeout: Duration,
        sent_at: Instant,
        renewal: Arc<dyn Renewal>,
    ) -> Ticket {
        let lease_len = match lease {
            Lease::Watchdog => watchdog_timeout,
            Lease::Fixed(d) => d,
        };
        self.acquired_until(
            key,
            name,
            holds,
            lease,
            sent_at,
            sent_at + lease_len,
            renewal,
        )
    }

    /// Records a hold granted by a script sent at `sent_at` whose lease is known to last until
    /// `valid_until` (see [`Registry::acquired`]).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn acquired_until(
        &self,
        key: HoldKey,
        name: &str,
        holds: u64,
        lease: Lease,
        sent_at: Instant,
        valid_until: Instant,
        renewal: Arc<dyn Renewal>,
    ) -> Ticket {
        let watchdog = u32::from(lease == Lease::Watchdog);
        let mut state = self.state();
        state.next_gen += 1;
        let gen = state.next_gen;
        // The watchdog sleeps until the earliest deadline or its next tick, whichever comes
        // first: it needs waking only when this grant's deadline comes before that. A
        // watchdog-lease grant (deadline a whole watchdog timeout away) usually comes after
        // the next tick, so the usual acquire wakes nothing.
        let poke = state.wakes_at.is_none_or(|at| valid_until < at);
        if holds > 1 {
            if let Some(held) = state.held.get_mut(&key) {
                held.guards += 1;
                held.watchdog_guards += watchdog;
                let ticket = Ticket {
                    gen: held.gen,
                    lost: held.lost.clone(),
                };
                state.set_deadline(&key, valid_until);
                drop(state);
                if poke {
                    self.changed.notify_one();
                }
                return ticket;
            }
        }
        if holds == 1 {
            // The fresh grant under a re-entry that was recorded first: sent before that entry
            // was recorded, it ran in Redis before the re-entry (which counted it). It is one
            // more guard of the same hold, not a newer hold replacing a lost one.
            if let Some(held) = state
                .held
                .get_mut(&key)
                .filter(|held| held.awaiting_first && sent_at < held.recorded_at)
            {
                held.awaiting_first = false;
                held.guards += 1;
                held.watchdog_guards += watchdog;
                // The re-entry's deadline stays: its script ran later, and set the lease.
                return Ticket {
                    gen: held.gen,
                    lost: held.lost.clone(),
                };
            }
        }
        let held = Held {
            gen,
            guards: 1,
            watchdog_guards: watchdog,
            valid_until,
            lost: CancellationToken::new(),
            name: Arc::from(name),
            renewal,
            awaiting_first: holds > 1,
            recorded_at: Instant::now(),
        };
        let ticket = Ticket {
            gen,
            lost: held.lost.clone(),
        };
        if let Some(old) = state.remove(&key) {
            // The old hold ended without us noticing (it expired); its guards are stale now.
            self.site(&key, &old.name)
                .count(metrics::LOST, &[("reason", "expired")], 1);
            old.lost.cancel();
        }
        state.deadlines.insert((valid_until, gen), key.clone());
        state.held.insert(key, held);
        drop(state);
        if poke {
            self.changed.notify_one();
        }
        ticket
    }

    /// Forgets one guard of a hold. Returns what must be done in Redis.
    pub(crate) fn released(
        self: &Arc<Self>,
        key: &HoldKey,
        ticket: &Ticket,
        lease: Lease,
        watchdog_timeout: Duration,
    ) -> Release {
        let mut state = self.state();
        let Some(held) = state.held.get_mut(key) else {
            return Release::Stale;
        };
        if held.gen != ticket.gen {
            return Release::Stale;
        }
        held.guards -= 1;
        if lease == Lease::Watchdog {
            held.watchdog_guards -= 1;
        }
        let lease_ms = if held.watchdog_guards > 0 {
            watchdog_timeout.as_millis() as u64
        } else {
            // Keep what is left of the fixed lease (at least a millisecond).
            held.valid_until
                .saturating_duration_since(Instant::now())
                .as_millis()
                .max(1) as u64
        };
        let last = held.guards == 0;
        if last {
            state.remove(key);
        }
        *state.releasing.entry(key.clone()).or_default() += 1;
        Release::Redis {
            last,
            lease_ms,
            mark: ReleaseMark {
                registry: self.clone(),
                key: key.clone(),
            },
        }
    }

    /// Marks a hold lost (if it is still the same generation) and forgets it.
    fn lose(&self, key: &HoldKey, gen: u64, why: &str) {
        let mut state = self.state();
        if state.held.get(key).is_some_and(|h| h.gen == gen) {
            let held = state.remove(key).expect("checked above");
            tracing::warn!(lock = %held.name, "latchkey lock lost: {why}");
            self.site(key, &held.name)
                .count(metrics::LOST, &[("reason", "gone")], 1);
            held.lost.cancel();
        }
    }

    /// The holds to renew or check now.
    fn snapshot(&self, watchdog_timeout: Duration) -> Vec<RenewItem> {
        self.state()
            .held
            .iter()
            .map(|(key, held)| RenewItem {
                key: key.clone(),
                renewal: held.renewal.clone(),
                gen: held.gen,
                name: held.name.clone(),
                lease_ms: if held.watchdog_guards > 0 {
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
        let mut state = self.state();
        let extended = state
            .held
            .get(&item.key)
            .filter(|held| held.gen == item.gen)
            .map(|held| held.valid_until.max(sent_at + watchdog_timeout));
        if let Some(valid_until) = extended {
            state.set_deadline(&item.key, valid_until);
        }
    }

    /// Loses every hold whose lease has run out by `now`; returns the earliest deadline left.
    fn expire(&self, now: Instant) -> Option<Instant> {
        self.expire_in(&mut self.state(), now)
    }

    /// Loses every hold whose lease has run out by `now` and returns when the watchdog loop
    /// must wake next: at the earliest deadline left or at `tick`, whichever comes first. Until
    /// then, only a grant with an earlier deadline wakes it (see `acquired_until`).
    fn sleep_until(&self, now: Instant, tick: Instant) -> Instant {
        // One critical section: a grant recorded between computing the wake-up and publishing
        // it would see the loop's previous wake-up and might not wake it.
        let mut state = self.state();
        let wake = self
            .expire_in(&mut state, now)
            .map_or(tick, |d| d.min(tick));
        state.wakes_at = Some(wake);
        wake
    }

    fn expire_in(&self, state: &mut State, now: Instant) -> Option<Instant> {
        // One critical section: a grant that extends a hold between finding it expired and
        // losing it would otherwise be lost with it. Only the expired holds are visited.
        while let Some(entry) = state.deadlines.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let ((_, gen), key) = entry.remove_entry();
            if state.held.get(&key).is_some_and(|held| held.gen == gen) {
                let held = state.held.remove(&key).expect("checked above");
                tracing::warn!(
                    lock = %held.name,
                    "latchkey lock lost: its lease ran out before it could be renewed"
                );
                self.site(&key, &held.name)
                    .count(metrics::LOST, &[("reason", "expired")], 1);
                held.lost.cancel();
            }
        }
        state.earliest()
    }
}

/// Renews the hold at `key` of generation `gen` at `at`, unless it was renewed since (its
/// lease then lasts past `at` by more than half the watchdog timeout) or is gone. For a hold
/// granted with a lease shorter than the watchdog's period (a grant on release): one script
/// call, and only if the hold lasts that long.
pub(crate) fn confirm_at(
    conn: Conn,
    registry: Arc<Registry>,
    key: HoldKey,
    gen: u64,
    at: Instant,
    watchdog_timeout: Duration,
    shutdown: CancellationToken,
) {
    tokio::spawn(async move {
        tokio::select! {
            biased;
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep_until(at) => {}
        }
        let item = {
            let state = registry.state();
            let Some(held) = state.held.get(&key).filter(|held| held.gen == gen) else {
                return;
            };
            if held.watchdog_guards == 0 || held.valid_until > at + watchdog_timeout / 2 {
                return;
            }
            RenewItem {
                key: key.clone(),
                renewal: held.renewal.clone(),
                gen,
                name: held.name.clone(),
                lease_ms: watchdog_timeout.as_millis() as u64,
            }
        };
        let sent_at = Instant::now();
        let mut invocation = item.renewal.script().prepare_invoke();
        for key in item.renewal.keys() {
            invocation.key(&*key);
        }
        for arg in item.renewal.args(item.lease_ms) {
            invocation.arg(arg);
        }
        let timeout = conn.timeout();
        let result: Result<Vec<i64>> = tokio::select! {
            biased;
            _ = shutdown.cancelled() => return,
            result = conn.script_within(&invocation, "confirming a grant", "", timeout) => result,
        };
        match result.as_deref() {
            Ok([1]) => registry.renewed(&item, sent_at, watchdog_timeout),
            Ok(_) => registry.lose(&item.key, gen, "it is gone from redis"),
            // The watchdog's next tick renews it, or `expire` finds its lease ran out.
            Err(e) => tracing::warn!(error = %e.chain(), "latchkey could not confirm a grant"),
        }
    });
}

#[derive(Clone, Debug)]
struct RenewItem {
    key: HoldKey,
    renewal: Arc<dyn Renewal>,
    gen: u64,
    /// The user-visible name, for metrics.
    name: Arc<str>,
    lease_ms: u64,
}

/// Starts the watchdog task: it renews and checks the holds of `registry` until `shutdown`.
pub(crate) fn start(
    conn: Conn,
    registry: Arc<Registry>,
    watchdog_timeout: Duration,
    command_timeout: Duration,
    shutdown: CancellationToken,
) {
    let period = watchdog_timeout / 3;
    tokio::spawn(renew_loop(
        conn,
        registry,
        watchdog_timeout,
        period,
        command_timeout.min(period),
        shutdown,
    ));
}

async fn renew_loop(
    conn: Conn,
    registry: Arc<Registry>,
    watchdog_timeout: Duration,
    period: Duration,
    renew_timeout: Duration,
    shutdown: CancellationToken,
) {
    let mut next_tick = Instant::now() + period;
    loop {
        let wake_at = registry.sleep_until(Instant::now(), next_tick);
        tokio::select! {
            biased;
            _ = shutdown.cancelled() => return,
            _ = registry.changed.notified() => continue,
            _ = tokio::time::sleep_until(wake_at) => {}
        }
        if Instant::now() < next_tick {
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
                .entry((item.renewal.script().get_hash(), slot))
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
                    let mut invocation = batch[0].renewal.script().prepare_invoke();
                    for item in batch {
                        for key in item.renewal.keys() {
                            invocation.key(&*key);
                        }
                        for arg in item.renewal.args(item.lease_ms) {
                            invocation.arg(arg);
                        }
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
                                    registry.lose(&item.key, item.gen, "it is gone from redis");
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
mod lease_tests {
    use super::*;

    #[test]
    fn leases_are_checked() {
        assert!(check_lease(Duration::ZERO)
            .unwrap_err()
            .is_invalid_argument());
        assert!(check_lease(Duration::from_micros(999))
            .unwrap_err()
            .is_invalid_argument());
        assert!(check_lease(MAX_LEASE + Duration::from_secs(1))
            .unwrap_err()
            .is_invalid_argument());
        assert_eq!(
            check_lease(MAX_LEASE).unwrap(),
            MAX_LEASE.as_millis() as u64
        );
        assert_eq!(check_lease(Duration::from_secs(2)).unwrap(), 2000);
    }
}

#[cfg(test)]
#[path = "watchdog_tests.rs"]
mod registry_tests;
