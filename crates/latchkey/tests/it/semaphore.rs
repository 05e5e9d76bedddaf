//! The semaphore and the permit-expirable semaphore against a real redis-server.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use latchkey_redis::{Client, Error, PermitId, PermitOptions};
use latchkey_test_support::{FaultProxy, RedisServer};
use redis::AsyncCommands;

use crate::helpers::{client, eventually};

/// Counts holders: `enter` returns the number inside after entering and records the maximum.
#[derive(Default)]
struct Occupancy {
    inside: AtomicUsize,
    max: AtomicUsize,
    entries: AtomicUsize,
}

impl Occupancy {
    fn enter(&self) {
        let now = self.inside.fetch_add(1, Ordering::SeqCst) + 1;
        self.max.fetch_max(now, Ordering::SeqCst);
        self.entries.fetch_add(1, Ordering::SeqCst);
    }
    fn leave(&self) {
        self.inside.fetch_sub(1, Ordering::SeqCst);
    }
}

// ---------------------------------------------------------------------------------------------
// Semaphore
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_tasks_on_three_permits_never_exceed_three_holders() {
    let server = RedisServer::spawn();
    let clients = [client(&server).await, client(&server).await];
    assert!(clients[0]
        .semaphore("pool")
        .try_set_permits(3)
        .await
        .unwrap());
    let occupancy = Arc::new(Occupancy::default());
    const ROUNDS: usize = 5;
    let mut tasks = Vec::new();
    for i in 0..20 {
        let semaphore = clients[i % 2].semaphore("pool");
        let occupancy = occupancy.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let permits = semaphore.acquire(1).await.unwrap();
                occupancy.enter();
                tokio::time::sleep(Duration::from_millis(5)).await;
                occupancy.leave();
                permits.release().await.unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let max = occupancy.max.load(Ordering::SeqCst);
    assert!(max <= 3, "{max} tasks held a permit at once");
    assert!(max >= 1);
    assert_eq!(occupancy.entries.load(Ordering::SeqCst), 20 * ROUNDS);
    assert_eq!(
        clients[0]
            .semaphore("pool")
            .available_permits()
            .await
            .unwrap(),
        3
    );
}

#[tokio::test]
async fn acquire_many_release_and_counts() {
    let server = RedisServer::spawn();
    let client = client(&server).await;
    let semaphore = client.semaphore("counts");
    assert_eq!(
        semaphore.available_permits().await.unwrap(),
        0,
        "never set up"
    );
    assert!(semaphore.try_set_permits(5).await.unwrap());
    assert!(!semaphore.try_set_permits(9).await.unwrap(), "set once");
    assert_eq!(semaphore.available_permits().await.unwrap(), 5);

    let three = semaphore.acquire(3).await.unwrap();
    assert_eq!(three.count(), 3);
    assert_eq!(semaphore.available_permits().await.unwrap(), 2);
    assert!(semaphore
        .try_acquire(3, Duration::ZERO)
        .await
        .unwrap()
        .is_none());
    assert!(
        semaphore
            .try_acquire(3, Duration::from_millis(200))
            .await
            .unwrap()
            .is_none(),
        "a bounded wait ends without the permits"
    );
    assert_eq!(
        semaphore.available_permits().await.unwrap(),
        2,
        "a failed try takes nothing"
    );
    three.release().await.unwrap();
    assert_eq!(semaphore.available_permits().await.unwrap(), 5);

    // Redisson layout: the count is a plain string at the name.
    let mut conn = server.conn().await;
    let raw: String = conn.get("counts").await.unwrap();
    assert_eq!(raw, "5");
}

/// A semaphore whose permits were never set fails fast (it would otherwise wait for ever),
/// changing nothing; a `wait_for_init()` handle waits instead, and gets its permit once another
/// client sets the semaphore up.
#[tokio::test]
async fn an_unset_semaphore_fails_fast_unless_waiting_for_init() {
    let server = RedisServer::spawn();
    let client = client(&server).await;
    let other = crate::helpers::client(&server).await;
    let mut conn = server.conn().await;
    let semaphore = client.semaphore("unset");
    let started = Instant::now();
    let err = semaphore.acquire(1).await.unwrap_err();
    assert!(err.is_not_initialized(), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "at once: {:?}",
        started.elapsed()
    );
    let keys = crate::helpers::data_keys(&mut conn).await;
    assert!(keys.is_empty(), "nothing was written: {keys:?}");

    let waiter = tokio::spawn({
        let semaphore = semaphore.clone().wait_for_init();
        async move { semaphore.acquire(1).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiter.is_finished(), "it waits for the permits to be set");
    assert!(other.semaphore("unset").try_set_permits(2).await.unwrap());
    let permits = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("woken once the permits were set")
        .unwrap()
        .unwrap();
    assert_eq!(permits.count(), 1);
    assert_eq!(semaphore.available_permits().await.unwrap(), 1);
    permits.release().await.unwrap();
    assert_eq!(semaphore.available_permits().await.unwrap(), 2);
}

#[tokio::test]
async fn invalid_counts_are_rejected_before_io() {
    let server = RedisServer::spawn();
    let client = client(&server).await;
    let semaphore = client.semaphore("bad");
    assert!(semaphore
        .acquire(0)
        .await
        .unwrap_err()
        .is_invalid_argument());
    assert!(semaphore
        .release(0)
        .await
        .unwrap_err()
        .is_invalid_argument());
    assert!(semaphore
        .try_set_permits(u32::MAX)
        .await
        .unwrap_err()
        .is_invalid_argument());
    assert!(client
        .semaphore("")
        .available_permits()
        .await
        .unwrap_err()
        .is_invalid_argument());
}

#[tokio::test]
async fn over_release_is_a_typed_error_and_changes_nothing() {
    let server = RedisServer::spawn();
    let client = client(&server).await;
    let semaphore = client.semaphore("over");
    semaphore.try_set_permits(2).await.unwrap();
    let err = semaphore.release(1).await.unwrap_err();
    match err {
        Error::OverRelease {
            released, total, ..
        } => {
            assert_eq!((released, total), (1, 2));
        }
        other => panic!("expected OverRelease, got {other:?}"),
    }
    assert_eq!(semaphore.available_permits().await.unwrap(), 2);

    // Permits kept with `forget` may be released by anyone, once.
    let n = semaphore.acquire(2).await.unwrap().forget();
    assert_eq!(semaphore.available_permits().await.unwrap(), 0);
    semaphore.release(n).await.unwrap();
    assert!(matches!(
        semaphore.release(1).await.unwrap_err(),
        Error::OverRelease { .. }
    ));
    assert_eq!(semaphore.available_permits().await.unwrap(), 2);
}

#[tokio::test]
async fn add_permits_moves_available_and_total_and_rejects_negative_totals() {
    let server = RedisServer::spawn();
    let client = client(&server).await;
    let semaphore = client.semaphore("grow");
    semaphore.try_set_permits(1).await.unwrap();
    semaphore.add_permits(2).await.unwrap();
    assert_eq!(semaphore.available_permits().await.unwrap(), 3);

    // Taking permits away while they are held leaves the available count below zero …
    let held = semaphore.acquire(3).await.unwrap();
    semaphore.add_permits(-2).await.unwrap();
    assert_eq!(semaphore.available_permits().await.unwrap(), -2);
    // … and a total below zero is refused, with nothing changed.
    assert!(semaphore
        .add_permits(-2)
        .await
        .unwrap_err()
        .is_invalid_argument());
    assert_eq!(semaphore.available_permits().await.unwrap(), -2);
    held.release().await.unwrap();
    assert_eq!(semaphore.available_permits().await.unwrap(), 1);
    assert!(matches!(
        semaphore.release(1).await.unwrap_err(),
        Error::OverRelease { total: 1, .. }
    ));
    // A semaphore made by add_permits has a total too.
    let fresh = client.semaphore("fresh");
    fresh.add_permits(2).await.unwrap();
    assert!(matches!(
        fresh.release(1).await.unwrap_err(),
        Error::OverRelease { total: 2, .. }
    ));
    assert!(client
        .semaphore("never")
        .add_permits(-1)
        .await
        .unwrap_err()
        .is_invalid_argument());
}

#[tokio::test]
async fn a_waiter_is_woken_by_the_release_message() {
    let server = RedisServer::spawn();
    let (a, b) = (client(&server).await, client(&server).await);
    a.semaphore("wake").try_set_permits(1).await.unwrap();
    let held = a.semaphore("wake").acquire(1).await.unwrap();

    let waiter = b.semaphore("wake");
    let waiting = tokio::spawn(async move {
        let permits = waiter.acquire(1).await.unwrap();
        let got_at = Instant::now();
        permits.release().await.unwrap();
        got_at
    });
    // Let the waiter subscribe and park.
    assert!(
        eventually(Duration::from_secs(10), || async {
            b.subscription_count() == 1
        })
        .await
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    let released_at = Instant::now();
    held.release().await.unwrap();
    let got_at = waiting.await.unwrap();
    // Without the message the waiter would sleep until its 2 s fallback poll.
    assert!(
        got_at.duration_since(released_at) < Duration::from_millis(1900),
        "woken by the message, not the fallback poll"
    );
}

#[tokio::test]
async fn a_larger_request_does_not_block_a_smaller_one_behind_it() {
    let server = RedisServer::spawn();
    let client = client(&server).await;
    let semaphore = client.semaphore("sizes");
    semaphore.try_set_permits(3).await.unwrap();
    let all = semaphore.acquire(3).await.unwrap();

    let big = {
        let semaphore = semaphore.clone();
        tokio::spawn(async move { semaphore.acquire(3).await.unwrap() })
    };
    assert!(
        eventually(Duration::from_secs(10), || async {
            client.subscription_count() == 1
        })
        .await
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    let small = {
        let semaphore = semaphore.clone();
        tokio::spawn(async move {
            let permits = semaphore.acquire(1).await.unwrap();
            (Instant::now(), permits)
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    // Give one permit back: "1" is published, which wakes the head waiter (the big request);
    // it cannot use it and passes the wake-up to the small one behind it.
    let released_at = Instant::now();
    semaphore.release(all.forget() - 2).await.unwrap();
    let (got_at, one) = small.await.unwrap();
    assert!(
        got_at.duration_since(released_at) < Duration::from_millis(1900),
        "the small request was woken by the pass-on, not the fallback poll"
    );
    assert!(!big.is_finished());
    one.release().await.unwrap();
    semaphore.release(2).await.unwrap();
    big.await.unwrap().release().await.unwrap();
    assert_eq!(semaphore.available_permits().await.unwrap(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_acquires_leave_no_permit_and_no_subscription() {
    let server = RedisServer::spawn();
    let client = client(&server).await;
    let semaphore = client.semaphore("cancel");
    semaphore.try_set_permits(2).await.unwrap();

    // Waiters dropped while parked.
    let held = semaphore.acquire(2).await.unwrap();
    for _ in 0..5 {
        let semaphore = semaphore.clone();
        let attempt = tokio::time::timeout(Duration::from_millis(50), async move {
            semaphore.acquire(1).await
        })
        .await;
        assert!(attempt.is_err(), "nothing to take");
    }
    held.release().await.unwrap();

    // Acquires dropped at every point of their life, while permits are free: whatever the
    // script did is undone.
    for i in 0..40u64 {
        let semaphore = semaphore.clone();
        let task = tokio::spawn(async move {
            let _permits = semaphore.acquire(1).await;
            std::future::pending::<()>().await;
        });
        tokio::time::sleep(Duration::from_micros(i * 150)).await;
        task.abort();
    }
    let check = semaphore.clone();
    assert!(
        eventually(Duration::from_secs(10), || {
            let check = check.clone();
            async move { check.available_permits().await.unwrap() == 2 }
        })
        .await,
        "every permit came back; available = {}",
        semaphore.available_permits().await.unwrap()
    );
    assert!(
        eventually(Duration::from_secs(10), || async {
            client.subscription_count() == 0
        })
        .await,
        "no subscription left"
    );
}

#[tokio::test]
async fn wrong_types_are_typed_errors_and_change_nothing() {
    let server = RedisServer::spawn();
    let client = client(&server).await;
    let mut conn = server.conn().await;
    let _: () = conn.hset("taken", "f", "v").await.unwrap();
    let semaphore = client.semaphore("taken");
    assert!(semaphore.acquire(1).await.unwrap_err().is_wrong_type());
    assert!(semaphore.release(1).await.unwrap_err().is_wrong_type());
    assert!(semaphore
        .try_set_permits(1)
        .await
        .unwrap_err()
        .is_wrong_type());
    assert!(semaphore.add_permits(1).await.unwrap_err().is_wrong_type());
    assert!(semaphore
        .available_permits()
        .await
        .unwrap_err()
        .is_wrong_type());
    let _: () = conn.set("words", "not a number").await.unwrap();
    assert!(client
        .semaphore("words")
        .acquire(1)
        .await
        .unwrap_err()
        .is_wrong_type());
    let v: String = conn.hget("taken", "f").await.unwrap();
    assert_eq!(v, "v");
    let v: String = conn.get("words").await.unwrap();
    assert_eq!(v, "not a number");
    let exists: bool = conn
        .exists("latchkey_semaphore_total:{taken}")
        .await
        .unwrap();
    assert!(!exists);
}

#[tokio::test]
async fn releases_are_published_in_redissons_format() {
    let server = RedisServer::spawn();
    let client = client(&server).await;
    let mut pubsub = server.client().get_async_pubsub().await.unwrap();
    pubsub.subscribe("redisson_sc:{fmt}").await.unwrap();
    let mut messages = pubsub.on_message();
    let semaphore = client.semaphore("fmt");
    semaphore.try_set_permits(2).await.unwrap();
    let permits = semaphore.acquire(2).await.unwrap();
    permits.release().await.unwrap();
    let mut payloads = Vec::new();
    for _ in 0..2 {
        let msg = tokio::time::timeout(Duration::from_secs(10), messages.next())
            .await
            .unwrap()
            .unwrap();
        payloads.push(msg.get_payload::<String>().unwrap());
    }
    // trySetPermits publishes the permits, a release the new available count.
    assert_eq!(payloads, ["2", "2"]);
}

// ---------------------------------------------------------------------------------------------
// Semaphore shared with Redisson clients (issue 12)
// ---------------------------------------------------------------------------------------------

/// A Redisson (Java) client's RSemaphore operations, played with raw commands: each is one
/// script on the count at the semaphore's name, publishing on `redisson_sc:{name}` where
/// Redisson does. None of them knows latchkey's total record.
mod redisson {
    use redis::aio::MultiplexedConnection;

    async fn eval<T: redis::FromRedisValue>(
        conn: &mut MultiplexedConnection,
        body: &str,
        name: &str,
        n: i64,
    ) -> T {
        redis::cmd("EVAL")
            .arg(body)
            .arg(2)
            .arg(name)
            .arg(format!("redisson_sc:{{{name}}}"))
            .arg(n)
            .query_async(conn)
            .await
            .unwrap()
    }

    /// `addPermits(n)`: the count (0 if absent) plus `n`, published.
    pub async fn add_permits(conn: &mut MultiplexedConnection, name: &str, n: i64) {
        let () = eval(
            conn,
            "local now = tonumber(redis.call('get', KEYS[1]) or '0') + tonumber(ARGV[1]) \
             redis.call('set', KEYS[1], now) redis.call('publish', KEYS[2], now)",
            name,
            n,
        )
        .await;
    }

    /// `release(n)`: INCRBY, the new count published; no check of any kind.
    pub async fn release(conn: &mut MultiplexedConnection, name: &str, n: i64) {
        let () = eval(
            conn,
            "redis.call('publish', KEYS[2], redis.call('incrby', KEYS[1], ARGV[1]))",
            name,
            n,
        )
        .await;
    }

    /// `trySetPermits(n)`: sets the count only if the key is absent; whether it did.
    pub async fn try_set_permits(conn: &mut MultiplexedConnection, name: &str, n: i64) -> bool {
        eval(
            conn,
            "if redis.call('exists', KEYS[1]) == 1 then return 0 end \
             redis.call('set', KEYS[1], ARGV[1]) redis.call('publish', KEYS[2], ARGV[1]) return 1",
            name,
            n,
        )
        .await
    }

    /// `setPermits(n)`: the count becomes `n` (an RSemaphore does not know who holds what),
    /// published.
    pub async fn set_permits(conn: &mut MultiplexedConnection, name: &str, n: i64) {
        let () = eval(
            conn,
            "redis.call('set', KEYS[1], ARGV[1]) redis.call('publish', KEYS[2], ARGV[1])",
            name,
            n,
        )
        .await;
    }

    /// `drainPermits()`: takes every available permit (the count becomes 0); how many.
    pub async fn drain_permits(conn: &mut MultiplexedConnection, name: &str) -> i64 {
        eval(
            conn,
            "local had = redis.call('get', KEYS[1]) if not had then return 0 end \
             redis.call('set', KEYS[1], 0) return tonumber(had)",
            name,
            0,
        )
        .await
    }
}

/// Waits until the semaphore has `want` permits available (a dropped guard's release runs in
/// the background); panics with the count it saw otherwise.
async fn settles_at(semaphore: &latchkey_redis::Semaphore, want: i64) {
    let ok = eventually(Duration::from_secs(10), || {
        let semaphore = semaphore.clone();
        async move { semaphore.available_permits().await.unwrap() == want }
    })
    .await;
    assert!(
        ok,
        "expected {want} available, found {}",
        semaphore.available_permits().await.unwrap()
    );
}

#[tokio::test]
async fn redisson_add_permits_then_latchkey_acquires_and_releases_all_of_them() {
    let server = RedisServer::spawn();
    let client = client(&server).await;
    let mut conn = server.conn().await;
    let semaphore = client.semaphore("issue12");
    assert!(semaphore.try_set_permits(2).await.unwrap());
    redisson::add_permits(&mut conn, "issue12", 1).await;
    assert_eq!(semaphore.available_permits().await.unwrap(), 3);

    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(semaphore.acquire(1).await.unwrap());
    }
    assert_eq!(semaphore.available_permits().await.unwrap(), 0);
    for permits in held {
        permits.release().await.unwrap();
    }
    assert_eq!(semaphore.available_permits().await.unwrap(), 3);

    // Once more with dropped guards: the background releases land too.
    redisson::add_permits(&mut conn, "issue12", 1).await;
    let all = semaphore.acquire(4).await.unwrap();
    let one = semaphore.try_acquire(1, Duration::ZERO).await.unwrap();
    assert!(one.is_none(), "all four are out");
    drop(all);
    settles_at(&semaphore, 4).await;
}

#[tokio::test]
async fn redisson_release_does_not_make_latchkey_lose_a_permit() {
    let server = RedisServer::spawn();
    let client = client(&server).await;
    let mut conn = server.conn().await;
    let semaphore = client.semaphore("rel");
    semaphore.try_set_permits(2).await.unwrap();
    let kept = semaphore.acquire(1).await.unwrap();
    let dropped = semaphore.acquire(1).await.unwrap();
    // A Java client gives back a permit it never took (RSemaphore allows it).
    redisson::release(&mut conn, "rel", 1).await;
    assert_eq!(semaphore.available_permits().await.unwrap(), 1);
    kept.release().await.unwrap();
    assert_eq!(semaphore.available_permits().await.unwrap(), 2);
    drop(dropped);
    settles_at(&semaphore, 3).await;
    // The three are real permits now: latchkey can hold all of them at once.
    let three = semaphore.try_acquire(3, Duration::ZERO).await.unwrap();
    three.expect("three permits").release().await.unwrap();
}

#[tokio::test]
async fn redisson_try_set_permits_after_a_delete_does_not_make_latchkey_lose_a_permit() {
    let server = RedisServer::spawn();
    let client = client(&server).await;
    let mut conn = server.conn().await;
    let semaphore = client.semaphore("reset");
    semaphore.try_set_permits(2).await.unwrap();
    let kept = semaphore.acquire(1).await.unwrap();
    let dropped = semaphore.acquire(1).await.unwrap();
    assert!(
        !redisson::try_set_permits(&mut conn, "reset", 5).await,
        "set up already"
    );
    // A Java client deletes the semaphore (RSemaphore.delete) and sets it up again with 3.
    let _: () = conn.del("reset").await.unwrap();
    assert!(redisson::try_set_permits(&mut conn, "reset", 3).await);
    kept.release().await.unwrap();
    assert_eq!(semaphore.available_permits().await.unwrap(), 4);
    drop(dropped);
    settles_at(&semaphore, 5).await;
}

#[tokio::test]
async fn redisson_set_permits_does_not_make_latchkey_lose_a_permit() {
    let server = RedisServer::spawn();
    let client = client(&server).await;
    let mut conn = server.conn().await;
    let semaphore = client.semaphore("set");
    semaphore.try_set_permits(2).await.unwrap();
    let kept = semaphore.acquire(1).await.unwrap();
    let dropped = semaphore.acquire(1).await.unwrap();
    // With both permits out, a Java client sets the count to 4.
    redisson::set_permits(&mut conn, "set", 4).await;
    kept.release().await.unwrap();
    assert_eq!(semaphore.available_permits().await.unwrap(), 5);
    drop(dropped);
    settles_at(&semaphore, 6).await;
}

#[tokio::test]
async fn redisson_drain_permits_does_not_make_latchkey_lose_a_permit() {
    let server = RedisServer::spawn();
    let client = client(&server).await;
    let mut conn = server.conn().await;
    let semaphore = client.semaphore("drain");
    semaphore.try_set_permits(4).await.unwrap();
    let kept = semaphore.acquire(1).await.unwrap();
    let dropped = semaphore.acquire(1).await.unwrap();
    assert_eq!(redisson::drain_permits(&mut conn, "drain").await, 2);
    assert_eq!(semaphore.available_permits().await.unwrap(), 0);
    kept.release().await.unwrap();
    drop(dropped);
    settles_at(&semaphore, 2).await;
    // The Java client gives back the two it drained: all four are there again.
    redisson::release(&mut conn, "drain", 2).await;
    assert_eq!(semaphore.available_permits().await.unwrap(), 4);
    // A second drain while latchkey holds everything takes nothing; the guard still lands.
    let all = semaphore.acquire(4).await.unwrap();
    assert_eq!(redisson::drain_permits(&mut conn, "drain").await, 0);
    drop(all);
    settles_at(&semaphore, 4).await;
}

#[tokio::test]
async fn a_release_without_a_guard_is_checked_against_the_total_latchkey_has_seen() {
    let server = RedisServer::spawn();
    let client = client(&server).await;
    let mut conn = server.conn().await;
    let semaphore = client.semaphore("seen");
    semaphore.try_set_permits(2).await.unwrap();
    // latchkey takes the permit a Java client added, so its record grows to 3 …
    redisson::add_permits(&mut conn, "seen", 1).await;
    let n = semaphore.acquire(3).await.unwrap().forget();
    semaphore.release(n).await.unwrap();
    assert_eq!(semaphore.available_permits().await.unwrap(), 3);
    // … and a fourth is still an over-release.
    assert!(matches!(
        semaphore.release(1).await.unwrap_err(),
        Error::OverRelease { total: 3, .. }
    ));

    // A permit added while every permit is out is one latchkey has not seen: releasing
    // forgotten permits past the record is refused and changes nothing, and the error says
    // what to do; add_permits gives them back.
    let n = semaphore.acquire(3).await.unwrap().forget();
    redisson::add_permits(&mut conn, "seen", 1).await;
    let err = semaphore.release(n).await.unwrap_err();
    assert!(matches!(err, Error::OverRelease { total: 3, .. }), "{err}");
    assert!(err.to_string().contains("add_permits"), "{err}");
    assert_eq!(semaphore.available_permits().await.unwrap(), 1);
    semaphore.add_permits(3).await.unwrap();
    assert_eq!(semaphore.available_permits().await.unwrap(), 4);
}

/// Collects the `warn` events of the thread it is set on, as text.
#[derive(Clone, Default)]
struct Warnings(Arc<std::sync::Mutex<Vec<String>>>);

struct Fields<'a>(&'a mut String);

impl tracing::field::Visit for Fields<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        use std::fmt::Write;
        let _ = write!(self.0, "{}={value:?} ", field.name());
    }
}

impl tracing::Subscriber for Warnings {
    fn enabled(&self, metadata: &tracing::Metadata<'_>) -> bool {
        *metadata.level() <= tracing::Level::WARN
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut line = String::new();
        event.record(&mut Fields(&mut line));
        self.0.lock().unwrap().push(line);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

// Current-thread runtime: the background task runs on this thread, where the subscriber is set.
#[tokio::test]
async fn a_failed_background_release_is_a_warning_naming_the_semaphore_and_permits() {
    let warnings = Warnings::default();
    let _log = tracing::subscriber::set_default(warnings.clone());
    let server = RedisServer::spawn();
    let client = client(&server).await;
    let mut conn = server.conn().await;
    let semaphore = client.semaphore("spoilt");
    semaphore.try_set_permits(5).await.unwrap();
    let dropped = semaphore.acquire(2).await.unwrap();
    let kept = semaphore.acquire(1).await.unwrap();
    // Somebody overwrites the count with something that is not one: releases cannot land.
    let _: () = conn.set("spoilt", "not a count").await.unwrap();
    assert!(kept.release().await.unwrap_err().is_wrong_type());
    drop(dropped);
    let found = eventually(Duration::from_secs(10), || {
        let warnings = warnings.clone();
        async move {
            warnings.0.lock().unwrap().iter().any(|w| {
                w.contains("2 permits of semaphore `spoilt` stay taken")
                    && w.contains("holds data of another type")
            })
        }
    })
    .await;
    assert!(found, "warnings: {:?}", warnings.0.lock().unwrap());
    let v: String = conn.get("spoilt").await.unwrap();
    assert_eq!(v, "not a count", "the failed release changed nothing");
}

// ---------------------------------------------------------------------------------------------
// Permit-expirable semaphore
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn permit_semaphore_twenty_tasks_on_three_permits() {
    let server = RedisServer::spawn();
    let clients = [client(&server).await, client(&server).await];
    assert!(clients[0]
        .permit_semaphore("workers")
        .try_set_permits(3)
        .await
        .unwrap());
    let occupancy = Arc::new(Occupancy::default());
    const ROUNDS: usize = 5;
    let mut tasks = Vec::new();
    for i in 0..20 {
        let semaphore = clients[i % 2].permit_semaphore("workers");
        let occupancy = occupancy.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let permits = semaphore.acquire(1).await.unwrap();
                occupancy.enter();
                tokio::time::sleep(Duration::from_millis(5)).await;
                occupancy.leave();
                permits.release().await.unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let max = occupancy.max.load(Ordering::SeqCst);
    assert!(max <= 3, "{max} tasks held a permit at once");
    assert_eq!(occupancy.entries.load(Ordering::SeqCst), 20 * ROUNDS);
    let semaphore = clients[0].permit_semaphore("workers");
    assert_eq!(semaphore.available_permits().await.unwrap(), 3);
    assert_eq!(semaphore.leased().await.unwrap(), 0);
    assert_eq!(
        clients[0].tracked_lock_count() + clients[1].tracked_lock_count(),
        0
    );
}

/// The same for the permit semaphore: an unset one fails fast and changes nothing; a
/// `wait_for_init()` handle gets a permit once another client sets it up.
#[tokio::test]
async fn an_unset_permit_semaphore_fails_fast_unless_waiting_for_init() {
    let server = RedisServer::spawn();
    let client = client(&server).await;
    let other = crate::helpers::client(&server).await;
    let mut conn = server.conn().await;
    let semaphore = client.permit_semaphore("unset");
    let started = Instant::now();
    let err = semaphore.acquire(1).await.unwrap_err();
    assert!(err.is_not_initialized(), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "at once: {:?}",
        started.elapsed()
    );
    let keys = crate::helpers::data_keys(&mut conn).await;
    assert!(keys.is_empty(), "nothing was written: {keys:?}");

    let waiter = tokio::spawn({
        let semaphore = semaphore.clone().wait_for_init();
        async move { semaphore.acquire(1).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiter.is_finished(), "it waits for the permits to be set");
    assert!(other
        .permit_semaphore("unset")
        .try_set_permits(2)
        .await
        .unwrap());
    let permits = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("woken once the permits were set")
        .unwrap()
        .unwrap();
    assert_eq!(permits.count(), 1);
    assert_eq!(semaphore.leased().await.unwrap(), 1);
    assert_eq!(semaphore.available_permits().await.unwrap(), 1);
    permits.release().await.unwrap();
    assert_eq!(semaphore.available_permits().await.unwrap(), 2);
    assert_eq!(client.tracked_lock_count(), 0);
}

#[tokio::test]
async fn permit_ids_are_stored_in_redissons_layout() {
    let server = RedisServer::spawn();
    let client = client(&server).await;
    let semaphore = client.permit_semaphore("layout");
    semaphore.try_set_permits(4).await.unwrap();
    let permits = semaphore.acquire(2).await.unwrap();
    assert_eq!(permits.ids().len(), 2);
    assert_ne!(permits.ids()[0], permits.ids()[1]);
    let mut conn = server.conn().await;
    let available: String = conn.get("layout").await.unwrap();
    assert_eq!(available, "2");
    let members: Vec<Vec<u8>> = conn.zrange("{layout}:timeout", 0, -1).await.unwrap();
    let mut stored: Vec<Vec<u8>> = permits
        .ids()
        .iter()
        .map(|id| id.as_bytes().to_vec())
        .collect();
    stored.sort();
    let mut members = members;
    members.sort();
    assert_eq!(members, stored, "ids are stored as 16 raw bytes");
    let id = permits.ids()[0];
    assert_eq!(id.to_string().parse::<PermitId>().unwrap(), id);
    permits.release().await.unwrap();
    assert_eq!(semaphore.available_permits().await.unwrap(), 4);
}

#[tokio::test]
async fn expired_permits_come_back_and_their_ids_are_unknown() {
    let server = RedisServer::spawn();
    let client = client(&server).await;
    let semaphore = client.permit_semaphore("expiring");
    semaphore.try_set_permits(2).await.unwrap();
    let options = PermitOptions::new().lease(Duration::from_millis(400));
    let kept = semaphore.acquire_with(1, options).await.unwrap();
    let lost = kept.lost();
    let forgotten = semaphore.acquire_with(1, options).await.unwrap().forget();
    assert_eq!(semaphore.available_permits().await.unwrap(), 0);
    assert!(semaphore
        .try_acquire(1, Duration::ZERO)
        .await
        .unwrap()
        .is_none());

    // Nobody releases them: a waiter gets the permits when the leases end (no message is
    // published for that; the waiter wakes up at the lease end the script reported).
    let again = semaphore
        .try_acquire(2, Duration::from_secs(30))
        .await
        .unwrap()
        .expect("the permits came back");
    tokio::time::timeout(Duration::from_secs(10), lost)
        .await
        .expect("the end of a fixed lease is reported as lost");
    assert!(kept.is_lost());

    let err = semaphore.release(&forgotten).await.unwrap_err();
    match err {
        Error::UnknownPermit { permit, .. } => assert_eq!(permit, forgotten[0].to_string()),
        other => panic!("expected UnknownPermit, got {other:?}"),
    }
    assert!(matches!(
        kept.release().await.unwrap_err(),
        Error::UnknownPermit { .. }
    ));
    assert_eq!(
        semaphore.available_permits().await.unwrap(),
        0,
        "an expired release frees nothing"
    );
    again.release().await.unwrap();
    assert_eq!(semaphore.available_permits().await.unwrap(), 2);
    assert_eq!(client.tracked_lock_count(), 0);
}

#[tokio::test]
async fn unknown_permit_ids_are_a_typed_error() {
    let server = RedisServer::spawn();
    let client = client(&server).await;
    let semaphore = client.permit_semaphore("unknown");
    semaphore.try_set_permits(2).await.unwrap();
    let made_up: PermitId = "00112233445566778899aabbccddeeff".parse().unwrap();
    assert!(matches!(
        semaphore.release(&[made_up]).await.unwrap_err(),
        Error::UnknownPermit { .. }
    ));
    assert_eq!(
        semaphore.available_permits().await.unwrap(),
        2,
        "nothing changed"
    );

    // Released twice: the second time it is unknown, and the count is not inflated.
    let ids = semaphore.acquire(1).await.unwrap().forget();
    semaphore.release(&ids).await.unwrap();
    assert!(matches!(
        semaphore.release(&ids).await.unwrap_err(),
        Error::UnknownPermit { .. }
    ));
    assert_eq!(semaphore.available_permits().await.unwrap(), 2);
    assert!(semaphore
        .release(&[])
        .await
        .unwrap_err()
        .is_invalid_argument());
    assert!("xyz".parse::<PermitId>().unwrap_err().is_invalid_argument());
}

#[tokio::test]
async fn the_watchdog_keeps_leases_alive_while_the_guard_lives() {
    let server = RedisServer::spawn();
    let client = client(&server).await; // watchdog timeout 1 s
    let semaphore = client.permit_semaphore("renewed");
    semaphore.try_set_permits(1).await.unwrap();
    let permits = semaphore.acquire(1).await.unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(!permits.is_lost());
    assert_eq!(
        semaphore.leased().await.unwrap(),
        1,
        "still leased after 2.5 watchdog timeouts"
    );
    assert!(semaphore
        .try_acquire(1, Duration::ZERO)
        .await
        .unwrap()
        .is_none());
    permits.release().await.unwrap();
    assert_eq!(client.tracked_lock_count(), 0);
    assert_eq!(semaphore.available_permits().await.unwrap(), 1);
}

#[tokio::test]
async fn permits_of_a_client_cut_off_from_redis_come_back_by_themselves() {
    let server = RedisServer::spawn();
    let proxy = FaultProxy::start(&server.addr());
    let doomed = Client::builder(proxy.url())
        .watchdog_timeout(Duration::from_millis(600))
        .command_timeout(Duration::from_millis(500))
        .connect()
        .await
        .unwrap();
    let survivor = client(&server).await;
    survivor
        .permit_semaphore("crash")
        .try_set_permits(3)
        .await
        .unwrap();
    let held = doomed.permit_semaphore("crash").acquire(3).await.unwrap();
    let lost = held.lost();

    // The doomed client can no longer reach Redis: no renewal, no release.
    proxy.blackhole(true);
    let semaphore = survivor.permit_semaphore("crash");
    let permits = semaphore
        .try_acquire(3, Duration::from_secs(30))
        .await
        .unwrap()
        .expect("the permits came back when their leases ended");
    tokio::time::timeout(Duration::from_secs(10), lost)
        .await
        .expect("the cut-off client learns that its permits are lost");
    permits.release().await.unwrap();
    assert_eq!(semaphore.available_permits().await.unwrap(), 3);
    drop(held);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_permit_acquires_leave_nothing_behind() {
    let server = RedisServer::spawn();
    let client = client(&server).await;
    let semaphore = client.permit_semaphore("cancel");
    semaphore.try_set_permits(2).await.unwrap();
    for i in 0..40u64 {
        let semaphore = semaphore.clone();
        let task = tokio::spawn(async move {
            let _permits = semaphore.acquire(1).await;
            std::future::pending::<()>().await;
        });
        tokio::time::sleep(Duration::from_micros(i * 150)).await;
        task.abort();
    }
    let check = semaphore.clone();
    assert!(
        eventually(Duration::from_secs(10), || {
            let check = check.clone();
            async move {
                check.available_permits().await.unwrap() == 2 && check.leased().await.unwrap() == 0
            }
        })
        .await,
        "every permit came back"
    );
    assert!(
        eventually(Duration::from_secs(10), || async {
            client.tracked_lock_count() == 0
        })
        .await
    );
    assert!(
        eventually(Duration::from_secs(10), || async {
            client.subscription_count() == 0
        })
        .await
    );
}

#[tokio::test]
async fn permit_semaphore_wait_options_and_add_permits() {
    let server = RedisServer::spawn();
    let client = client(&server).await;
    let semaphore = client.permit_semaphore("opts");
    semaphore.try_set_permits(1).await.unwrap();
    let held = semaphore.acquire(1).await.unwrap();
    let err = semaphore
        .acquire_with(1, PermitOptions::new().wait(Duration::from_millis(100)))
        .await
        .unwrap_err();
    assert!(err.is_wait_timed_out());
    assert!(semaphore
        .acquire_with(1, PermitOptions::new().lease(Duration::ZERO))
        .await
        .unwrap_err()
        .is_invalid_argument());

    // One more permit wakes the waiter.
    let waiter = {
        let semaphore = semaphore.clone();
        tokio::spawn(async move { semaphore.acquire(1).await.unwrap() })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    semaphore.add_permits(1).await.unwrap();
    let second = waiter.await.unwrap();
    assert_eq!(semaphore.leased().await.unwrap(), 2);
    assert!(semaphore
        .add_permits(-3)
        .await
        .unwrap_err()
        .is_invalid_argument());
    semaphore.add_permits(-1).await.unwrap();
    assert_eq!(semaphore.available_permits().await.unwrap(), -1);
    held.release().await.unwrap();
    second.release().await.unwrap();
    assert_eq!(semaphore.available_permits().await.unwrap(), 1);
}

#[test]
fn handles_and_guards_are_send_and_sync() {
    fn check<T: Send + Sync + 'static>() {}
    check::<latchkey_redis::Semaphore>();
    check::<latchkey_redis::Permits>();
    check::<latchkey_redis::PermitSemaphore>();
    check::<latchkey_redis::LeasedPermits>();
    check::<PermitId>();
}
