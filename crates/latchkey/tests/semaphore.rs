//! The semaphore and the permit-expirable semaphore against a real redis-server.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use latchkey::{Client, Error, PermitId, PermitOptions};
use latchkey_test_support::{eventually, FaultProxy, RedisServer};
use redis::AsyncCommands;

async fn client(url: &str) -> Client {
    Client::builder(url)
        .watchdog_timeout(Duration::from_secs(1))
        .subscription_linger(Duration::from_millis(50))
        .connect()
        .await
        .expect("connect")
}

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
    let clients = [client(&server.url()).await, client(&server.url()).await];
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
    assert_eq!(clients[0].semaphore("pool").available().await.unwrap(), 3);
}

#[tokio::test]
async fn acquire_many_release_and_counts() {
    let server = RedisServer::spawn();
    let client = client(&server.url()).await;
    let semaphore = client.semaphore("counts");
    assert_eq!(semaphore.available().await.unwrap(), 0, "never set up");
    assert!(semaphore.try_set_permits(5).await.unwrap());
    assert!(!semaphore.try_set_permits(9).await.unwrap(), "set once");
    assert_eq!(semaphore.available().await.unwrap(), 5);

    let three = semaphore.acquire(3).await.unwrap();
    assert_eq!(three.count(), 3);
    assert_eq!(semaphore.available().await.unwrap(), 2);
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
        semaphore.available().await.unwrap(),
        2,
        "a failed try takes nothing"
    );
    three.release().await.unwrap();
    assert_eq!(semaphore.available().await.unwrap(), 5);

    // Redisson layout: the count is a plain string at the name.
    let mut conn = server.conn().await;
    let raw: String = conn.get("counts").await.unwrap();
    assert_eq!(raw, "5");
}

#[tokio::test]
async fn invalid_counts_are_rejected_before_io() {
    let server = RedisServer::spawn();
    let client = client(&server.url()).await;
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
        .available()
        .await
        .unwrap_err()
        .is_invalid_argument());
}

#[tokio::test]
async fn over_release_is_a_typed_error_and_changes_nothing() {
    let server = RedisServer::spawn();
    let client = client(&server.url()).await;
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
    assert_eq!(semaphore.available().await.unwrap(), 2);

    // Permits kept with `forget` may be released by anyone, once.
    let n = semaphore.acquire(2).await.unwrap().forget();
    assert_eq!(semaphore.available().await.unwrap(), 0);
    semaphore.release(n).await.unwrap();
    assert!(matches!(
        semaphore.release(1).await.unwrap_err(),
        Error::OverRelease { .. }
    ));
    assert_eq!(semaphore.available().await.unwrap(), 2);
}

#[tokio::test]
async fn add_permits_moves_available_and_total_and_rejects_negative_totals() {
    let server = RedisServer::spawn();
    let client = client(&server.url()).await;
    let semaphore = client.semaphore("grow");
    semaphore.try_set_permits(1).await.unwrap();
    semaphore.add_permits(2).await.unwrap();
    assert_eq!(semaphore.available().await.unwrap(), 3);

    // Taking permits away while they are held leaves the available count below zero …
    let held = semaphore.acquire(3).await.unwrap();
    semaphore.add_permits(-2).await.unwrap();
    assert_eq!(semaphore.available().await.unwrap(), -2);
    // … and a total below zero is refused, with nothing changed.
    assert!(semaphore
        .add_permits(-2)
        .await
        .unwrap_err()
        .is_invalid_argument());
    assert_eq!(semaphore.available().await.unwrap(), -2);
    held.release().await.unwrap();
    assert_eq!(semaphore.available().await.unwrap(), 1);
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
    let (a, b) = (client(&server.url()).await, client(&server.url()).await);
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
    let client = client(&server.url()).await;
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
    assert_eq!(semaphore.available().await.unwrap(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_acquires_leave_no_permit_and_no_subscription() {
    let server = RedisServer::spawn();
    let client = client(&server.url()).await;
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
            async move { check.available().await.unwrap() == 2 }
        })
        .await,
        "every permit came back; available = {}",
        semaphore.available().await.unwrap()
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
    let client = client(&server.url()).await;
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
    assert!(semaphore.available().await.unwrap_err().is_wrong_type());
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
    let client = client(&server.url()).await;
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
// Permit-expirable semaphore
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn permit_semaphore_twenty_tasks_on_three_permits() {
    let server = RedisServer::spawn();
    let clients = [client(&server.url()).await, client(&server.url()).await];
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
    assert_eq!(semaphore.available().await.unwrap(), 3);
    assert_eq!(semaphore.leased().await.unwrap(), 0);
    assert_eq!(
        clients[0].tracked_lock_count() + clients[1].tracked_lock_count(),
        0
    );
}

#[tokio::test]
async fn permit_ids_are_stored_in_redissons_layout() {
    let server = RedisServer::spawn();
    let client = client(&server.url()).await;
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
    assert_eq!(semaphore.available().await.unwrap(), 4);
}

#[tokio::test]
async fn expired_permits_come_back_and_their_ids_are_unknown() {
    let server = RedisServer::spawn();
    let client = client(&server.url()).await;
    let semaphore = client.permit_semaphore("expiring");
    semaphore.try_set_permits(2).await.unwrap();
    let options = PermitOptions::new().lease(Duration::from_millis(400));
    let kept = semaphore.acquire_with(1, options).await.unwrap();
    let lost = kept.lost();
    let forgotten = semaphore.acquire_with(1, options).await.unwrap().forget();
    assert_eq!(semaphore.available().await.unwrap(), 0);
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
        semaphore.available().await.unwrap(),
        0,
        "an expired release frees nothing"
    );
    again.release().await.unwrap();
    assert_eq!(semaphore.available().await.unwrap(), 2);
    assert_eq!(client.tracked_lock_count(), 0);
}

#[tokio::test]
async fn unknown_permit_ids_are_a_typed_error() {
    let server = RedisServer::spawn();
    let client = client(&server.url()).await;
    let semaphore = client.permit_semaphore("unknown");
    semaphore.try_set_permits(2).await.unwrap();
    let made_up: PermitId = "00112233445566778899aabbccddeeff".parse().unwrap();
    assert!(matches!(
        semaphore.release(&[made_up]).await.unwrap_err(),
        Error::UnknownPermit { .. }
    ));
    assert_eq!(semaphore.available().await.unwrap(), 2, "nothing changed");

    // Released twice: the second time it is unknown, and the count is not inflated.
    let ids = semaphore.acquire(1).await.unwrap().forget();
    semaphore.release(&ids).await.unwrap();
    assert!(matches!(
        semaphore.release(&ids).await.unwrap_err(),
        Error::UnknownPermit { .. }
    ));
    assert_eq!(semaphore.available().await.unwrap(), 2);
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
    let client = client(&server.url()).await; // watchdog timeout 1 s
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
    assert_eq!(semaphore.available().await.unwrap(), 1);
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
    let survivor = client(&server.url()).await;
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
    assert_eq!(semaphore.available().await.unwrap(), 3);
    drop(held);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_permit_acquires_leave_nothing_behind() {
    let server = RedisServer::spawn();
    let client = client(&server.url()).await;
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
            async move { check.available().await.unwrap() == 2 && check.leased().await.unwrap() == 0 }
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
    let client = client(&server.url()).await;
    let semaphore = client.permit_semaphore("opts");
    semaphore.try_set_permits(1).await.unwrap();
    let held = semaphore.acquire(1).await.unwrap();
    let err = semaphore
        .acquire_with(1, PermitOptions::new().wait(Duration::from_millis(100)))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::WaitTimedOut { .. }));
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
    assert_eq!(semaphore.available().await.unwrap(), -1);
    held.release().await.unwrap();
    second.release().await.unwrap();
    assert_eq!(semaphore.available().await.unwrap(), 1);
}

#[test]
fn handles_and_guards_are_send_and_sync() {
    fn check<T: Send + Sync + 'static>() {}
    check::<latchkey::Semaphore>();
    check::<latchkey::Permits>();
    check::<latchkey::PermitSemaphore>();
    check::<latchkey::LeasedPermits>();
    check::<PermitId>();
}
