//! Unit tests of the hold registry's state machine and of the watchdog loop's decisions,
//! without a Redis server where none is needed, under tokio's paused clock where time matters.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{renew_loop, HoldKey, Lease, LockRenewal, Registry, Release, Ticket, RENEW_BATCH};
use crate::conn::{Conn, Target};

/// The watchdog timeout of every test.
const WATCHDOG: Duration = Duration::from_secs(30);

fn hold(name: &str) -> HoldKey {
    HoldKey {
        kind: "lock",
        key: Arc::from(name),
        field: Arc::from("client-1:1"),
    }
}

/// Records a grant of `key` that Redis answered with `holds`, sent now.
fn grant(registry: &Registry, key: &HoldKey, holds: u64, lease: Lease) -> Ticket {
    registry.acquired(
        key.clone(),
        &key.key,
        holds,
        lease,
        WATCHDOG,
        Instant::now(),
        Arc::new(LockRenewal {
            key: key.key.clone(),
            field: key.field.clone(),
        }),
    )
}

/// `(lease_ms, last)` of a release that must go to Redis; panics on `Stale`.
/// Releases `ticket`'s hold of `key` and returns the release's `(lease_ms, last)`.
fn release_one(
    registry: &Arc<Registry>,
    key: &HoldKey,
    ticket: &Ticket,
    lease: Lease,
) -> (u64, bool) {
    expect_redis(registry.released(key, ticket, lease, WATCHDOG))
}

/// A new registry and the hold `a` in it.
fn fresh() -> (Arc<Registry>, HoldKey) {
    (Arc::new(Registry::new()), hold("a"))
}

fn expect_redis(release: Release) -> (u64, bool) {
    match release {
        Release::Redis { lease_ms, last, .. } => (lease_ms, last),
        Release::Stale => panic!("expected a release in redis, got Stale"),
    }
}

fn is_stale(release: &Release) -> bool {
    matches!(release, Release::Stale)
}

/// Records a grant of `key` that Redis answered with `holds`, for a script sent at `sent_at`.
fn grant_sent_at(registry: &Registry, key: &HoldKey, holds: u64, sent_at: Instant) -> Ticket {
    registry.acquired(
        key.clone(),
        &key.key,
        holds,
        Lease::Watchdog,
        WATCHDOG,
        sent_at,
        Arc::new(LockRenewal {
            key: key.key.clone(),
            field: key.field.clone(),
        }),
    )
}

#[tokio::test(start_paused = true)]
async fn a_fresh_grant_handled_after_the_re_entry_it_was_counted_in_joins_it() {
    // Two attempts of one owner (a cancelled one finishing in its own task, and the next):
    // Redis ran the first (1 hold), then the second (2 holds), but the second's answer is
    // recorded first.
    let (registry, key) = fresh();
    let first_sent = Instant::now();
    tokio::time::advance(Duration::from_millis(1)).await;
    let second_sent = Instant::now();
    tokio::time::advance(Duration::from_millis(1)).await;
    let second = grant_sent_at(&registry, &key, 2, second_sent);
    let first = grant_sent_at(&registry, &key, 1, first_sent);
    assert_eq!(first.gen, second.gen, "one hold, two guards");
    assert!(
        !second.lost.is_cancelled(),
        "the re-entry is not taken for lost"
    );
    assert_eq!(registry.len(), 1);
    assert!(
        !release_one(&registry, &key, &first, Lease::Watchdog).1,
        "the first release leaves the other hold"
    );
    assert!(
        release_one(&registry, &key, &second, Lease::Watchdog).1,
        "the second frees the lock: no hold is left in redis"
    );
    assert_eq!(registry.len(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_fresh_grant_sent_after_a_re_entry_was_recorded_replaces_it() {
    // The owner's hold vanished from Redis (forced unlock) after a re-entry was recorded; a
    // grant sent later is a new hold, and the old guards are lost.
    let (registry, key) = fresh();
    let reentry = grant_sent_at(&registry, &key, 2, Instant::now());
    tokio::time::advance(Duration::from_millis(1)).await;
    let fresh_grant = grant_sent_at(&registry, &key, 1, Instant::now());
    assert_ne!(fresh_grant.gen, reentry.gen);
    assert!(reentry.lost.is_cancelled(), "the old hold is lost");
    assert!(!fresh_grant.lost.is_cancelled());
    assert!(is_stale(&registry.released(
        &key,
        &reentry,
        Lease::Watchdog,
        WATCHDOG
    )));
    assert!(release_one(&registry, &key, &fresh_grant, Lease::Watchdog).1);
}

#[tokio::test(start_paused = true)]
async fn reentrant_holds_share_one_entry_and_only_the_last_release_frees() {
    let (registry, key) = fresh();
    let first = grant(&registry, &key, 1, Lease::Watchdog);
    let second = grant(&registry, &key, 2, Lease::Watchdog);
    let third = grant(&registry, &key, 3, Lease::Watchdog);
    assert_eq!(registry.len(), 1, "one entry for one owner's hold");
    assert_eq!(first.gen, second.gen);
    assert_eq!(first.gen, third.gen);

    let (lease_ms, last) = release_one(&registry, &key, &third, Lease::Watchdog);
    assert!(!last, "two guards left");
    assert_eq!(lease_ms, WATCHDOG.as_millis() as u64);
    let (_, last) = release_one(&registry, &key, &second, Lease::Watchdog);
    assert!(!last, "one guard left");
    assert_eq!(registry.len(), 1);
    let (_, last) = release_one(&registry, &key, &first, Lease::Watchdog);
    assert!(last, "the last guard's release frees the lock");
    assert_eq!(registry.len(), 0);
    assert!(
        !first.lost.is_cancelled(),
        "a released hold is not a lost one"
    );

    // A further release of a guard of the finished hold does nothing in Redis.
    assert!(is_stale(&registry.released(
        &key,
        &first,
        Lease::Watchdog,
        WATCHDOG
    )));
}

#[tokio::test(start_paused = true)]
async fn holds_of_different_kinds_or_owners_are_separate_entries() {
    let registry = Arc::new(Registry::new());
    let lock = hold("a");
    let read = HoldKey {
        kind: "read",
        ..lock.clone()
    };
    let other_owner = HoldKey {
        field: Arc::from("client-1:2"),
        ..lock.clone()
    };
    let t_lock = grant(&registry, &lock, 1, Lease::Watchdog);
    let t_read = grant(&registry, &read, 1, Lease::Watchdog);
    let t_other = grant(&registry, &other_owner, 1, Lease::Watchdog);
    assert_eq!(registry.len(), 3);
    assert_ne!(t_lock.gen, t_read.gen);
    assert_ne!(t_lock.gen, t_other.gen);

    let (_, last) = expect_redis(registry.released(&read, &t_read, Lease::Watchdog, WATCHDOG));
    assert!(last);
    assert_eq!(registry.len(), 2);
    // The read hold's ticket does not release the lock hold of the same key and owner.
    assert!(is_stale(&registry.released(
        &read,
        &t_read,
        Lease::Watchdog,
        WATCHDOG
    )));
    assert_eq!(registry.len(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_fresh_grant_replaces_an_unnoticed_expired_hold_and_stales_its_guards() {
    let (registry, key) = fresh();
    let old = grant(&registry, &key, 1, Lease::Watchdog);
    let old_reentry = grant(&registry, &key, 2, Lease::Watchdog);
    // Redis answers 1 to the next acquire: the old hold is gone there (it expired unnoticed).
    let new = grant(&registry, &key, 1, Lease::Watchdog);
    assert_ne!(old.gen, new.gen);
    assert!(
        old.lost.is_cancelled(),
        "the replaced hold is reported lost"
    );
    assert!(old_reentry.lost.is_cancelled());
    assert!(!new.lost.is_cancelled());
    assert_eq!(registry.len(), 1);

    // The old guards release nothing: their release would free the new hold.
    assert!(is_stale(&registry.released(
        &key,
        &old,
        Lease::Watchdog,
        WATCHDOG
    )));
    assert!(is_stale(&registry.released(
        &key,
        &old_reentry,
        Lease::Watchdog,
        WATCHDOG
    )));
    assert_eq!(registry.len(), 1, "the new hold is untouched");
    let (_, last) = release_one(&registry, &key, &new, Lease::Watchdog);
    assert!(last, "the new hold has a single guard");
}

#[tokio::test(start_paused = true)]
async fn a_reentry_without_a_local_entry_starts_a_new_entry() {
    // The last local guard was released (its script still in flight) when Redis counted one
    // more hold: the new guard is the only local one, and its release is the last.
    let (registry, key) = fresh();
    let first = grant(&registry, &key, 1, Lease::Watchdog);
    let release = registry.released(&key, &first, Lease::Watchdog, WATCHDOG);
    let (_, last) = expect_redis(release);
    assert!(last);
    let again = grant(&registry, &key, 2, Lease::Watchdog);
    assert_ne!(again.gen, first.gen);
    assert_eq!(registry.len(), 1);
    assert!(is_stale(&registry.released(
        &key,
        &first,
        Lease::Watchdog,
        WATCHDOG
    )));
    let (_, last) = release_one(&registry, &key, &again, Lease::Watchdog);
    assert!(last);
}

#[tokio::test(start_paused = true)]
async fn an_attempt_is_alone_only_without_holds_attempts_or_releases() {
    let (registry, key) = fresh();
    let other = hold("b");

    let first = registry.begin_attempt(&key);
    assert!(first.alone, "nothing else under way");
    let second = registry.begin_attempt(&key);
    assert!(!second.alone, "another attempt is under way");
    assert!(
        registry.begin_attempt(&other).alone,
        "another key is independent"
    );
    drop(first);
    assert!(!registry.begin_attempt(&key).alone, "the second still runs");
    drop(second);
    assert!(registry.begin_attempt(&key).alone, "both attempts ended");

    // Held: an attempt must not take the owner's own hold for a stranded one.
    let ticket = {
        let attempt = registry.begin_attempt(&key);
        assert!(attempt.alone);
        let ticket = grant(&registry, &key, 1, Lease::Watchdog);
        drop(attempt);
        ticket
    };
    assert!(!registry.begin_attempt(&key).alone, "the owner holds it");

    // Released, the release script not answered yet: still not alone.
    let Release::Redis { mark, last, .. } =
        registry.released(&key, &ticket, Lease::Watchdog, WATCHDOG)
    else {
        panic!("expected a release in redis");
    };
    assert!(last);
    assert_eq!(registry.len(), 0);
    assert!(
        !registry.begin_attempt(&key).alone,
        "a release is under way"
    );
    drop(mark);
    assert!(
        registry.begin_attempt(&key).alone,
        "the release was answered"
    );
}

#[tokio::test(start_paused = true)]
async fn two_releases_under_way_keep_the_attempt_from_being_alone_until_both_end() {
    let (registry, key) = fresh();
    let a = grant(&registry, &key, 1, Lease::Watchdog);
    let b = grant(&registry, &key, 2, Lease::Watchdog);
    let Release::Redis { mark: mark_b, .. } =
        registry.released(&key, &b, Lease::Watchdog, WATCHDOG)
    else {
        panic!("expected a release in redis");
    };
    let Release::Redis { mark: mark_a, .. } =
        registry.released(&key, &a, Lease::Watchdog, WATCHDOG)
    else {
        panic!("expected a release in redis");
    };
    drop(mark_a);
    assert!(
        !registry.begin_attempt(&key).alone,
        "one release is still under way"
    );
    drop(mark_b);
    assert!(registry.begin_attempt(&key).alone);
}

#[tokio::test(start_paused = true)]
async fn a_release_leaves_the_watchdog_lease_or_what_is_left_of_a_fixed_one() {
    let (registry, key) = fresh();
    let fixed = Lease::Fixed(Duration::from_secs(10));

    // Two fixed guards: the remaining one keeps what is left of the lease.
    let f1 = grant(&registry, &key, 1, fixed);
    let f2 = grant(&registry, &key, 2, fixed);
    tokio::time::advance(Duration::from_secs(4)).await;
    let (lease_ms, last) = release_one(&registry, &key, &f2, fixed);
    assert!(!last);
    assert_eq!(lease_ms, 6_000, "10 s lease, 4 s used");

    // A watchdog guard joins: the hold is renewed by the watchdog from then on.
    let w = grant(&registry, &key, 2, Lease::Watchdog);
    tokio::time::advance(Duration::from_secs(1)).await;
    let (lease_ms, last) = release_one(&registry, &key, &f1, fixed);
    assert!(!last);
    assert_eq!(
        lease_ms,
        WATCHDOG.as_millis() as u64,
        "a watchdog guard is left"
    );
    let (_, last) = release_one(&registry, &key, &w, Lease::Watchdog);
    assert!(last);
}

/// Grants the hold `a` with `first`, then re-enters it with `second`; after `after`, releases
/// guard number `released` (0 or 1) and returns the lease that release leaves on the other
/// guard's hold, whose release is then the last.
async fn lease_left(first: Lease, second: Lease, after: Duration, released: usize) -> u64 {
    let (registry, key) = fresh();
    let guards = [
        (grant(&registry, &key, 1, first), first),
        (grant(&registry, &key, 2, second), second),
    ];
    tokio::time::advance(after).await;
    let (ticket, lease) = &guards[released];
    let (lease_ms, last) = release_one(&registry, &key, ticket, *lease);
    assert!(!last, "one guard is left");
    let (ticket, lease) = &guards[1 - released];
    assert!(
        release_one(&registry, &key, ticket, *lease).1,
        "the other is the last"
    );
    lease_ms
}

#[tokio::test(start_paused = true)]
async fn a_watchdog_guard_released_before_a_fixed_one_leaves_the_fixed_remainder() {
    let fixed = Lease::Fixed(Duration::from_secs(10));
    let left = lease_left(Lease::Watchdog, fixed, Duration::from_millis(2_500), 0).await;
    assert_eq!(left, 7_500);
}

#[tokio::test(start_paused = true)]
async fn a_release_after_the_fixed_lease_ran_out_leaves_at_least_a_millisecond() {
    let fixed = Lease::Fixed(Duration::from_secs(1));
    let left = lease_left(fixed, fixed, Duration::from_secs(5), 1).await;
    assert_eq!(left, 1, "0 would make PEXPIRE delete the key");
}

#[tokio::test(start_paused = true)]
async fn expire_loses_exactly_the_holds_whose_lease_ran_out() {
    let registry = Arc::new(Registry::new());
    let start = Instant::now();
    let short = hold("short");
    let long = hold("long");
    let watched = hold("watched");
    let t_short = grant(&registry, &short, 1, Lease::Fixed(Duration::from_secs(2)));
    let t_long = grant(&registry, &long, 1, Lease::Fixed(Duration::from_secs(5)));
    let t_watched = grant(&registry, &watched, 1, Lease::Watchdog);

    assert_eq!(
        registry.expire(start + Duration::from_millis(1_999)),
        Some(start + Duration::from_secs(2)),
        "the earliest deadline is the short lease's"
    );
    assert_eq!(registry.len(), 3);
    assert!(!t_short.lost.is_cancelled());

    assert_eq!(
        registry.expire(start + Duration::from_secs(2)),
        Some(start + Duration::from_secs(5)),
        "a lease ends at its deadline; the next one is the long lease's"
    );
    assert!(t_short.lost.is_cancelled());
    assert!(!t_long.lost.is_cancelled());
    assert!(!t_watched.lost.is_cancelled());
    assert_eq!(registry.len(), 2);
    assert!(is_stale(&registry.released(
        &short,
        &t_short,
        Lease::Fixed(Duration::from_secs(2)),
        WATCHDOG
    )));

    assert_eq!(
        registry.expire(start + WATCHDOG),
        None,
        "an unrenewed watchdog hold runs out with its lease too"
    );
    assert!(t_long.lost.is_cancelled());
    assert!(t_watched.lost.is_cancelled());
    assert_eq!(registry.len(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_confirmed_renewal_extends_the_lease_from_when_it_was_sent() {
    let registry = Arc::new(Registry::new());
    let start = Instant::now();
    let key = hold("a");
    let ticket = grant(&registry, &key, 1, Lease::Watchdog);
    tokio::time::advance(Duration::from_secs(10)).await;
    let items = registry.snapshot(WATCHDOG);
    assert_eq!(items.len(), 1);
    let sent_at = Instant::now();
    // The answer comes a while after the script was sent: the lease counts from the send.
    tokio::time::advance(Duration::from_secs(3)).await;
    registry.renewed(&items[0], sent_at, WATCHDOG);
    assert_eq!(registry.expire(Instant::now()), Some(sent_at + WATCHDOG));
    assert_eq!(registry.expire(start + WATCHDOG), Some(sent_at + WATCHDOG));
    assert!(
        !ticket.lost.is_cancelled(),
        "renewed past the first lease's end"
    );

    // An older answer never shortens what a newer one established.
    registry.renewed(&items[0], start, WATCHDOG);
    assert_eq!(registry.expire(Instant::now()), Some(sent_at + WATCHDOG));
}

#[tokio::test(start_paused = true)]
async fn a_check_of_a_fixed_lease_does_not_extend_it() {
    let registry = Arc::new(Registry::new());
    let start = Instant::now();
    let key = hold("a");
    let ticket = grant(&registry, &key, 1, Lease::Fixed(Duration::from_secs(5)));
    let items = registry.snapshot(WATCHDOG);
    assert_eq!(items.len(), 1);
    assert_eq!(
        items[0].lease_ms, 0,
        "a fixed lease is checked, not renewed"
    );
    registry.renewed(&items[0], Instant::now(), WATCHDOG);
    assert_eq!(
        registry.expire(Instant::now()),
        Some(start + Duration::from_secs(5))
    );
    registry.expire(start + Duration::from_secs(5));
    assert!(ticket.lost.is_cancelled());
}

#[tokio::test(start_paused = true)]
async fn the_snapshot_renews_holds_with_a_watchdog_guard_and_checks_the_others() {
    let registry = Arc::new(Registry::new());
    let fixed = Lease::Fixed(Duration::from_secs(5));
    let w = hold("w");
    let f = hold("f");
    let mixed = hold("mixed");
    grant(&registry, &w, 1, Lease::Watchdog);
    grant(&registry, &f, 1, fixed);
    let m_fixed = grant(&registry, &mixed, 1, fixed);
    let m_watchdog = grant(&registry, &mixed, 2, Lease::Watchdog);
    let lease_of = |key: &HoldKey| {
        registry
            .snapshot(WATCHDOG)
            .into_iter()
            .find(|item| &item.key == key)
            .map(|item| item.lease_ms)
    };
    let wd_ms = WATCHDOG.as_millis() as u64;
    assert_eq!(lease_of(&w), Some(wd_ms));
    assert_eq!(lease_of(&f), Some(0));
    assert_eq!(lease_of(&mixed), Some(wd_ms));
    assert_eq!(registry.snapshot(WATCHDOG).len(), 3);

    // Once the watchdog guard is gone the mixed hold is only checked.
    expect_redis(registry.released(&mixed, &m_watchdog, Lease::Watchdog, WATCHDOG));
    assert_eq!(lease_of(&mixed), Some(0));
    expect_redis(registry.released(&mixed, &m_fixed, fixed, WATCHDOG));
    assert_eq!(lease_of(&mixed), None, "a released hold is not renewed");
}

#[tokio::test(start_paused = true)]
async fn an_answer_about_an_older_generation_does_not_touch_the_new_hold() {
    let (registry, key) = fresh();
    let old = grant(&registry, &key, 1, Lease::Watchdog);
    let stale_item = registry.snapshot(WATCHDOG).remove(0);
    // While the renewal was in flight the hold was lost and granted afresh.
    tokio::time::advance(Duration::from_secs(1)).await;
    let new = grant(&registry, &key, 1, Lease::Watchdog);
    let new_deadline = Instant::now() + WATCHDOG;
    assert!(old.lost.is_cancelled());

    // "Gone" for the old generation: the new hold stays.
    registry.lose(&stale_item.key, stale_item.gen, "it is gone from redis");
    assert!(!new.lost.is_cancelled());
    assert_eq!(registry.len(), 1);
    // "Renewed" for the old generation: the new hold's lease is not extended by it.
    tokio::time::advance(Duration::from_secs(20)).await;
    registry.renewed(&stale_item, Instant::now(), WATCHDOG);
    assert_eq!(registry.expire(Instant::now()), Some(new_deadline));

    // The same answers about the current generation do act.
    let current = registry.snapshot(WATCHDOG).remove(0);
    registry.lose(&current.key, current.gen, "it is gone from redis");
    assert!(new.lost.is_cancelled(), "the lost signal fires");
    assert_eq!(registry.len(), 0);
    assert!(is_stale(&registry.released(
        &key,
        &new,
        Lease::Watchdog,
        WATCHDOG
    )));
}

#[tokio::test(start_paused = true)]
async fn a_reentry_resets_the_lease_to_the_new_grants() {
    // Redis sets the key's expiry on every grant, re-entries included.
    let registry = Arc::new(Registry::new());
    let start = Instant::now();
    let key = hold("a");
    grant(&registry, &key, 1, Lease::Fixed(Duration::from_secs(60)));
    tokio::time::advance(Duration::from_secs(1)).await;
    grant(&registry, &key, 2, Lease::Fixed(Duration::from_secs(5)));
    assert_eq!(
        registry.expire(Instant::now()),
        Some(start + Duration::from_secs(6))
    );
}

#[tokio::test(start_paused = true)]
async fn a_grant_pokes_the_watchdog_only_when_its_deadline_comes_first() {
    let registry = Registry::new();
    let fixed = |secs| Lease::Fixed(Duration::from_secs(secs));
    let start = Instant::now();
    // The loop's next tick in this test.
    let tick = start + Duration::from_secs(8);
    grant(&registry, &hold("a"), 1, fixed(10));
    assert!(
        poked(&registry).await,
        "before the loop first sleeps, a grant wakes it"
    );
    assert_eq!(
        registry.sleep_until(Instant::now(), tick),
        tick,
        "the loop sleeps until its tick, which comes before a's deadline"
    );
    // Thousands of later deadlines: the loop sleeps on, no scan, no wake-up.
    for i in 0..5_000 {
        grant(&registry, &hold(&format!("later{i}")), 1, fixed(20));
    }
    assert!(
        !poked(&registry).await,
        "later deadlines do not wake the loop"
    );
    // The usual acquire: a watchdog lease, a whole watchdog timeout away.
    grant(&registry, &hold("watched"), 1, Lease::Watchdog);
    assert!(
        !poked(&registry).await,
        "a watchdog lease ends after the tick: it does not wake the loop"
    );
    let b_granted = Instant::now();
    grant(&registry, &hold("b"), 1, fixed(5));
    assert!(poked(&registry).await, "an earlier deadline wakes it");
    assert_eq!(
        registry.sleep_until(Instant::now(), tick),
        b_granted + Duration::from_secs(5),
        "the loop then sleeps until b's deadline"
    );
    grant(&registry, &hold("c"), 1, fixed(6));
    assert!(
        !poked(&registry).await,
        "a deadline after the new wake-up does not wake it"
    );
    // A re-entry that shortens the hold's lease counts as well.
    grant(&registry, &hold("b"), 2, fixed(1));
    assert!(poked(&registry).await, "a shorter re-entry wakes it");
    assert_eq!(registry.len(), 5_004);
    // The expired holds are found in deadline order, without scanning the others.
    tokio::time::advance(Duration::from_secs(10)).await;
    let earliest = registry.expire(Instant::now());
    assert_eq!(
        registry.len(),
        5_001,
        "a (10 s), b (1 s) and c (6 s) expired"
    );
    assert!(earliest.is_some_and(|at| at > Instant::now()));
}

/// Whether the watchdog loop was poked (a permit is waiting for it).
async fn poked(registry: &Registry) -> bool {
    tokio::time::timeout(Duration::from_millis(10), registry.changed.notified())
        .await
        .is_ok()
}

/// A command connection that has never connected, to `addr`; it connects when first used.
fn lazy_conn(addr: &str) -> Conn {
    let client = redis::Client::open(format!("redis://{addr}/")).expect("a valid url");
    let timeout = Duration::from_secs(1);
    Conn::sentinel(Target::Fixed(Box::new(client)), timeout, timeout, timeout)
}

/// The watchdog loop over a registry, renewing through a server that accepts connections and
/// never answers (a stalled process).
struct StalledLoop {
    registry: Arc<Registry>,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<()>,
    _listener: std::net::TcpListener,
}

impl StalledLoop {
    fn start() -> StalledLoop {
        let registry = Arc::new(Registry::new());
        let shutdown = CancellationToken::new();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let task = tokio::spawn(renew_loop(
            lazy_conn(&addr),
            registry.clone(),
            WATCHDOG,
            WATCHDOG / 3,
            Duration::from_secs(1),
            shutdown.clone(),
        ));
        StalledLoop {
            registry,
            shutdown,
            task,
            _listener: listener,
        }
    }

    /// Shuts the loop down; it stops even with a renewal in flight.
    async fn stop(self) {
        self.shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(5), self.task)
            .await
            .expect("the loop stops on shutdown")
            .expect("the loop did not panic");
    }
}

#[tokio::test(start_paused = true)]
async fn the_loop_loses_a_fixed_lease_hold_when_its_lease_runs_out() {
    // Nothing is sent: the hold is lost before the first renewal tick (at 10 s).
    let start = Instant::now();
    let rig = StalledLoop::start();
    let registry = rig.registry.clone();
    // Let the loop start sleeping toward its first tick, then give it an earlier deadline.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let ticket = grant(
        &registry,
        &hold("a"),
        1,
        Lease::Fixed(Duration::from_secs(4)),
    );
    tokio::time::sleep_until(start + Duration::from_millis(4_099)).await;
    assert!(!ticket.lost.is_cancelled(), "lost before its lease ran out");
    tokio::time::timeout(Duration::from_secs(1), ticket.lost.cancelled())
        .await
        .expect("the loop woke up for the hold's deadline, before its renewal tick");
    assert_eq!(Instant::now(), start + Duration::from_millis(4_100));
    assert_eq!(registry.len(), 0);

    rig.stop().await;
}

#[tokio::test(start_paused = true)]
async fn the_loop_loses_a_watchdog_hold_whose_renewals_go_unanswered() {
    // The server accepts connections and never answers (a stalled process): every renewal
    // times out, and the hold is lost when the lease of its grant runs out, not before.
    let rig = StalledLoop::start();
    let registry = rig.registry.clone();
    let granted_at = Instant::now();
    let ticket = grant(&registry, &hold("a"), 1, Lease::Watchdog);
    tokio::time::sleep_until(granted_at + WATCHDOG - Duration::from_millis(1)).await;
    assert!(
        !ticket.lost.is_cancelled(),
        "failed renewals alone do not lose a hold whose lease still runs"
    );
    assert_eq!(registry.len(), 1);
    tokio::time::timeout(Duration::from_secs(2), ticket.lost.cancelled())
        .await
        .expect("lost once the lease ran out");
    assert!(Instant::now() >= granted_at + WATCHDOG);
    assert_eq!(registry.len(), 0);
    rig.stop().await;
}

/// The key count of every `EVALSHA` in the server's slow log (which logs every command here).
async fn evalsha_key_counts(admin: &mut redis::aio::MultiplexedConnection) -> Vec<usize> {
    let entries: Vec<redis::Value> = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(-1)
        .query_async(admin)
        .await
        .expect("slowlog");
    entries
        .into_iter()
        .filter_map(|entry| {
            let redis::Value::Array(fields) = entry else {
                return None;
            };
            let args: Vec<String> = redis::from_redis_value_ref(fields.get(3)?).ok()?;
            if !args.first()?.eq_ignore_ascii_case("evalsha") {
                return None;
            }
            args.get(2)?.parse().ok()
        })
        .collect()
}

#[tokio::test]
async fn the_loop_renews_in_batches_and_loses_the_holds_redis_no_longer_has() {
    // A real server: the batches are counted in its slow log, the renewals seen in the TTLs.
    let server = latchkey_test_support::RedisServer::spawn();
    let mut admin = server.conn().await;
    let held = 250;
    for i in 0..held {
        redis::pipe()
            .hset(format!("k{i}"), "client-1:1", 1)
            .pexpire(format!("k{i}"), 1_000_000)
            .exec_async(&mut admin)
            .await
            .expect("setup");
    }
    redis::pipe()
        .hset("checked", "client-1:1", 1)
        .pexpire("checked", 1_000_000)
        .exec_async(&mut admin)
        .await
        .expect("setup");
    let manager = redis::aio::ConnectionManager::new(server.client())
        .await
        .expect("connect");
    // Loaded beforehand, so that no NOSCRIPT retry shows in the log.
    crate::scripts::LOCK_RENEW
        .prepare_invoke()
        .load_async(&mut admin)
        .await
        .expect("script load");
    for (name, value) in [
        ("slowlog-log-slower-than", "0"),
        ("slowlog-max-len", "100000"),
    ] {
        redis::cmd("CONFIG")
            .arg("SET")
            .arg(name)
            .arg(value)
            .exec_async(&mut admin)
            .await
            .expect("config");
    }
    redis::cmd("SLOWLOG")
        .arg("RESET")
        .exec_async(&mut admin)
        .await
        .expect("reset");

    let watchdog = Duration::from_secs(3);
    let registry = Arc::new(Registry::new());
    let grant = |name: &str, lease: Lease| {
        let key = hold(name);
        registry.acquired(
            key.clone(),
            name,
            1,
            lease,
            watchdog,
            Instant::now(),
            Arc::new(LockRenewal {
                key: key.key.clone(),
                field: key.field.clone(),
            }),
        )
    };
    let tickets: Vec<Ticket> = (0..held)
        .map(|i| grant(&format!("k{i}"), Lease::Watchdog))
        .collect();
    let checked = grant("checked", Lease::Fixed(Duration::from_secs(1_000)));
    let gone = grant("gone", Lease::Watchdog);

    let shutdown = CancellationToken::new();
    let task = tokio::spawn(renew_loop(
        Conn::single(manager, Duration::from_secs(5)),
        registry.clone(),
        watchdog,
        Duration::from_millis(200),
        Duration::from_secs(5),
        shutdown.clone(),
    ));
    tokio::time::timeout(Duration::from_secs(30), gone.lost.cancelled())
        .await
        .expect("a hold with no key in redis is lost at the first renewal");
    shutdown.cancel();
    task.await.expect("the loop did not panic");

    assert_eq!(registry.len(), held + 1);
    assert!(tickets.iter().all(|t| !t.lost.is_cancelled()));
    assert!(!checked.lost.is_cancelled());
    for i in 0..held {
        let ttl: i64 = redis::cmd("PTTL")
            .arg(format!("k{i}"))
            .query_async(&mut admin)
            .await
            .expect("pttl");
        assert!(
            (1..=3_000).contains(&ttl),
            "k{i} renewed to the watchdog timeout, ttl {ttl}"
        );
    }
    let ttl: i64 = redis::cmd("PTTL")
        .arg("checked")
        .query_async(&mut admin)
        .await
        .expect("pttl");
    assert!(
        ttl > 3_000,
        "a fixed lease is checked, never extended, ttl {ttl}"
    );

    // 252 holds in batches of at most RENEW_BATCH: 100 + 100 + 52 on the first tick, and
    // 100 + 100 + 51 on any later one (the gone hold is no longer renewed).
    let counts = evalsha_key_counts(&mut admin).await;
    let full = counts.iter().filter(|&&n| n == RENEW_BATCH).count();
    let first_rest = counts
        .iter()
        .filter(|&&n| n == held + 2 - 2 * RENEW_BATCH)
        .count();
    let later_rest = counts
        .iter()
        .filter(|&&n| n == held + 1 - 2 * RENEW_BATCH)
        .count();
    assert_eq!(first_rest, 1, "one first tick: {counts:?}");
    assert_eq!(full, 2 * (first_rest + later_rest), "{counts:?}");
    assert_eq!(full + first_rest + later_rest, counts.len(), "{counts:?}");
}
