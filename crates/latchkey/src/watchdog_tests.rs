//! Unit tests of the hold registry's state machine and of the watchdog loop's decisions,
//! without a Redis server where none is needed, under tokio's paused clock where time matters.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{
    check_lease, renew_loop, HoldKey, Lease, Registry, Renewal, Ticket, MAX_LEASE, RENEW_BATCH,
};
use crate::client_info::Registration;
use crate::conn::{Conn, Target};
use crate::error::lock;

/// The watchdog timeout of every test.
const WATCHDOG: Duration = Duration::from_secs(30);

fn hold(name: &str) -> HoldKey {
    HoldKey {
        kind: "lock",
        key: Arc::from(name),
        field: Arc::from("client-1:1"),
    }
}

/// Records a grant of `key`, sent now.
fn grant(registry: &Registry, key: &HoldKey, lease: Lease) -> Ticket {
    registry.acquired(
        key.clone(),
        &key.key,
        lease,
        WATCHDOG,
        Instant::now(),
        Renewal::of(&key.key, &key.field),
    )
}

#[tokio::test(start_paused = true)]
async fn every_grant_is_an_entry_of_its_own_released_once() {
    let registry = Registry::default();
    let key = hold("a");
    // Two grants of the same key and field (which a new owner per acquire never makes, but
    // the registry does not rely on it): two entries, released one by one.
    let first = grant(&registry, &key, Lease::Watchdog);
    let second = grant(&registry, &key, Lease::Watchdog);
    assert_ne!(first.gen, second.gen);
    assert_eq!(registry.len(), 2);
    assert!(registry.released(&first), "held: the release goes to redis");
    assert!(!registry.released(&first), "released once only");
    assert!(!second.lost.is_cancelled(), "the other entry is untouched");
    assert!(registry.released(&second));
    assert_eq!(registry.len(), 0);
}

#[tokio::test(start_paused = true)]
async fn expire_loses_exactly_the_holds_whose_lease_ran_out() {
    let registry = Arc::new(Registry::default());
    let start = Instant::now();
    let short = hold("short");
    let long = hold("long");
    let watched = hold("watched");
    let t_short = grant(&registry, &short, Lease::Fixed(Duration::from_secs(2)));
    let t_long = grant(&registry, &long, Lease::Fixed(Duration::from_secs(5)));
    let t_watched = grant(&registry, &watched, Lease::Watchdog);

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
    assert!(
        !registry.released(&t_short),
        "a lost hold has nothing to release"
    );

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
    let registry = Arc::new(Registry::default());
    let start = Instant::now();
    let key = hold("a");
    let ticket = grant(&registry, &key, Lease::Watchdog);
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

/// A process paused past its lease sees the hold lost as soon as it resumes, before the
/// watchdog loop has had a turn: `is_lost` reads the lease's known end itself.
#[tokio::test(start_paused = true)]
async fn is_lost_is_true_once_the_known_lease_has_passed_before_the_loop_runs() {
    let registry = Arc::new(Registry::default());
    let key = hold("a");
    let ticket = grant(&registry, &key, Lease::Watchdog);
    tokio::time::advance(Duration::from_secs(10)).await;
    let items = registry.snapshot(WATCHDOG);
    let sent_at = Instant::now();
    registry.renewed(&items[0], sent_at, WATCHDOG);
    // Past the first lease's end, within the renewed one: held.
    tokio::time::advance(WATCHDOG - Duration::from_secs(5)).await;
    assert!(!ticket.is_lost(), "renewed");
    // Past the renewed end, with no loop to signal it: lost all the same.
    tokio::time::advance(Duration::from_secs(6)).await;
    assert!(!ticket.lost.is_cancelled(), "no loop ran");
    assert!(ticket.is_lost());

    // A renewal sent in time but answered after the known end does not bring it back.
    registry.renewed(&items[0], Instant::now() - Duration::from_secs(1), WATCHDOG);
    assert!(ticket.is_lost(), "lost stays lost");

    let fixed = grant(&registry, &hold("b"), Lease::Fixed(Duration::from_secs(2)));
    assert!(!fixed.is_lost());
    tokio::time::advance(Duration::from_secs(2)).await;
    assert!(fixed.is_lost(), "a fixed lease ends when it ends");
}

#[tokio::test(start_paused = true)]
async fn a_check_of_a_fixed_lease_does_not_extend_it() {
    let registry = Arc::new(Registry::default());
    let start = Instant::now();
    let key = hold("a");
    let ticket = grant(&registry, &key, Lease::Fixed(Duration::from_secs(5)));
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
async fn the_snapshot_renews_watchdog_holds_and_checks_fixed_ones() {
    let registry = Arc::new(Registry::default());
    let w = hold("w");
    let f = hold("f");
    let t_w = grant(&registry, &w, Lease::Watchdog);
    grant(&registry, &f, Lease::Fixed(Duration::from_secs(5)));
    let lease_of = |key: &HoldKey| {
        registry
            .snapshot(WATCHDOG)
            .into_iter()
            .find(|item| &item.key == key)
            .map(|item| item.lease_ms)
    };
    assert_eq!(lease_of(&w), Some(WATCHDOG.as_millis() as u64));
    assert_eq!(lease_of(&f), Some(0));
    assert!(registry.released(&t_w));
    assert_eq!(lease_of(&w), None, "a released hold is not renewed");
}

#[tokio::test(start_paused = true)]
async fn an_answer_about_a_released_hold_does_not_touch_a_newer_one() {
    let registry = Arc::new(Registry::default());
    let key = hold("a");
    let old = grant(&registry, &key, Lease::Watchdog);
    let stale_item = registry.snapshot(WATCHDOG).remove(0);
    // While the renewal was in flight the hold was released and a new one granted.
    assert!(registry.released(&old));
    tokio::time::advance(Duration::from_secs(1)).await;
    let new = grant(&registry, &key, Lease::Watchdog);
    let new_deadline = Instant::now() + WATCHDOG;

    // "Gone" for the old hold: the new hold stays.
    registry.lose(stale_item.gen, "it is gone from redis");
    assert!(!new.lost.is_cancelled());
    assert_eq!(registry.len(), 1);
    // "Renewed" for the old hold: the new hold's lease is not extended by it.
    tokio::time::advance(Duration::from_secs(20)).await;
    registry.renewed(&stale_item, Instant::now(), WATCHDOG);
    assert_eq!(registry.expire(Instant::now()), Some(new_deadline));

    // The same answers about the current hold do act.
    let current = registry.snapshot(WATCHDOG).remove(0);
    registry.lose(current.gen, "it is gone from redis");
    assert!(new.lost.is_cancelled(), "the lost signal fires");
    assert_eq!(registry.len(), 0);
    assert!(!registry.released(&new));
}

#[tokio::test(start_paused = true)]
async fn a_grant_pokes_the_watchdog_only_when_its_deadline_comes_first() {
    let registry = Registry::default();
    // As the loop leaves it once it has registered the client (an unregistered client's
    // grant wakes the loop to register: see the next test).
    lock(&registry.state).registered = true;
    let fixed = |secs| Lease::Fixed(Duration::from_secs(secs));
    let start = Instant::now();
    // The loop's next tick in this test.
    let tick = start + Duration::from_secs(8);
    grant(&registry, &hold("a"), fixed(10));
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
        grant(&registry, &hold(&format!("later{i}")), fixed(20));
    }
    assert!(
        !poked(&registry).await,
        "later deadlines do not wake the loop"
    );
    // The usual acquire: a watchdog lease, a whole watchdog timeout away.
    grant(&registry, &hold("watched"), Lease::Watchdog);
    assert!(
        !poked(&registry).await,
        "a watchdog lease ends after the tick: it does not wake the loop"
    );
    let b_granted = Instant::now();
    grant(&registry, &hold("b"), fixed(5));
    assert!(poked(&registry).await, "an earlier deadline wakes it");
    assert_eq!(
        registry.sleep_until(Instant::now(), tick),
        b_granted + Duration::from_secs(5),
        "the loop then sleeps until b's deadline"
    );
    grant(&registry, &hold("c"), fixed(6));
    assert!(
        !poked(&registry).await,
        "a deadline after the new wake-up does not wake it"
    );
    assert_eq!(registry.len(), 5_004);
    // The expired holds are found in deadline order, without scanning the others.
    tokio::time::advance(Duration::from_secs(10)).await;
    let earliest = registry.expire(Instant::now());
    assert_eq!(
        registry.len(),
        5_001,
        "a (10 s), b (5 s) and c (6 s) expired"
    );
    assert!(earliest.is_some_and(|at| at > Instant::now()));
}

/// Whether the watchdog loop was poked (a permit is waiting for it).
/// A grant while the client's registration is not alive (never made, or lapsed while the
/// client held nothing) wakes the loop, which registers the client at once, whatever the
/// grant's deadline.
#[tokio::test(start_paused = true)]
async fn a_grant_of_an_unregistered_client_pokes_the_watchdog() {
    let registry = Registry::default();
    let tick = Instant::now() + Duration::from_secs(8);
    grant(&registry, &hold("a"), Lease::Fixed(Duration::from_secs(20)));
    assert!(
        poked(&registry).await,
        "the first grant registers the client"
    );
    registry.sleep_until(Instant::now(), tick);
    lock(&registry.state).registered = true;
    grant(&registry, &hold("b"), Lease::Fixed(Duration::from_secs(20)));
    assert!(
        !poked(&registry).await,
        "registered: a later deadline sleeps on"
    );
    lock(&registry.state).registered = false;
    grant(&registry, &hold("c"), Lease::Fixed(Duration::from_secs(20)));
    assert!(
        poked(&registry).await,
        "lapsed: the next grant registers again"
    );
}

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
        let registry = Arc::new(Registry::default());
        let shutdown = CancellationToken::new();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let task = tokio::spawn(renew_loop(
            lazy_conn(&addr),
            registry.clone(),
            Arc::new(Registration::new("test-client", None)),
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
    let ticket = grant(&registry, &hold("a"), Lease::Fixed(Duration::from_secs(4)));
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
    let ticket = grant(&registry, &hold("a"), Lease::Watchdog);
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
            // The client's registration, which the loop refreshes too, is not a renewal.
            if args.get(3)?.starts_with("latchkey_client:") {
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
    let registry = Arc::new(Registry::default());
    let grant = |name: &str, lease: Lease| {
        let key = hold(name);
        registry.acquired(
            key.clone(),
            name,
            lease,
            watchdog,
            Instant::now(),
            Renewal::of(&key.key, &key.field),
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
        Arc::new(Registration::new("test-client", None)),
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
