//! Owner identity as Rust shares values: clones of a handle, and futures of one task, exclude
//! each other as `Arc<tokio::sync::Mutex>` does.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use latchkey_redis::Client;
use latchkey_test_support::{FaultProxy, RedisServer};
use redis::AsyncCommands;

use crate::helpers::client;

/// Runs `tasks` tasks, each taking `enter` 3 times through its own clone and staying inside
/// 30 ms; returns the most tasks seen inside at once and the failed releases.
async fn clones_inside_at_once<F, Fut, G>(tasks: usize, enter: F) -> (usize, usize)
where
    F: Fn() -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = latchkey_redis::Result<G>> + Send,
    G: latchkey_redis::Guard + 'static,
{
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(AtomicUsize::new(0));
    let mut handles = Vec::new();
    for _ in 0..tasks {
        let (enter, inside, most, failed) =
            (enter.clone(), inside.clone(), most.clone(), failed.clone());
        handles.push(tokio::spawn(async move {
            for _ in 0..3 {
                let guard = enter().await.unwrap();
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(30)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                if guard.unlock().await.is_err() {
                    failed.fetch_add(1, Ordering::SeqCst);
                }
            }
        }));
    }
    for handle in handles {
        handle.await.unwrap();
    }
    (most.load(Ordering::SeqCst), failed.load(Ordering::SeqCst))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn clones_of_a_lock_handle_exclude_each_other() {
    let server = RedisServer::spawn();
    let client = client(&server).await;
    let lock = client.lock("orders");
    let (most, failed) = clones_inside_at_once(4, move || {
        let lock = lock.clone();
        async move { lock.lock().await }
    })
    .await;
    assert_eq!(
        (most, failed),
        (1, 0),
        "clones of one handle are one lock each, not one owner"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn clones_of_every_owner_primitive_exclude_each_other() {
    let server = RedisServer::spawn();
    let client = client(&server).await;
    let fair = client.fair_lock("fair-orders");
    let (most, failed) = clones_inside_at_once(4, move || {
        let fair = fair.clone();
        async move { fair.lock().await }
    })
    .await;
    assert_eq!((most, failed), (1, 0), "fair lock");
    let rw = client.rw_lock("rw-orders");
    let (most, failed) = clones_inside_at_once(4, move || {
        let rw = rw.clone();
        async move { rw.write().lock().await }
    })
    .await;
    assert_eq!((most, failed), (1, 0), "write lock");
    let election = client.election("leader");
    let (most, failed) = clones_inside_at_once(3, move || {
        let election = election.clone();
        async move { election.campaign("node").await }
    })
    .await;
    assert_eq!((most, failed), (1, 0), "election");
}

/// Two futures of one task polled together (`join!`, `FuturesUnordered`) are two owners: they
/// never both get the lock.
#[tokio::test]
async fn futures_of_one_task_polled_together_are_two_owners() {
    let server = RedisServer::spawn();
    let client = client(&server).await;
    let lock = client.lock("joined");
    let (a, b) = tokio::join!(
        lock.try_lock(Duration::from_millis(300)),
        lock.try_lock(Duration::from_millis(300))
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    assert!(
        a.is_some() != b.is_some(),
        "exactly one of two joined acquires gets the lock"
    );
    drop((a, b));

    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let mut all = futures_util::stream::FuturesUnordered::new();
    for _ in 0..3 {
        let (lock, inside, most) = (lock.clone(), inside.clone(), most.clone());
        all.push(async move {
            let guard = lock.lock().await.unwrap();
            most.fetch_max(inside.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(30)).await;
            inside.fetch_sub(1, Ordering::SeqCst);
            guard.unlock().await.unwrap();
        });
    }
    while futures_util::StreamExt::next(&mut all).await.is_some() {}
    assert_eq!(
        most.load(Ordering::SeqCst),
        1,
        "one section at a time in one task"
    );
}

/// The write lock's downgrade is explicit: the read hold is the writer's, taken without letting
/// another writer in; readers join it once the write hold is gone.
#[tokio::test]
async fn a_write_hold_downgrades_explicitly() {
    let server = RedisServer::spawn();
    let client = client(&server).await;
    let rw = client.rw_lock("downgraded");
    let write = rw.write().lock().await.unwrap();
    let token = write.fencing_token();
    let owner = write.owner_id().strip_suffix(":write").unwrap().to_owned();
    assert!(rw.read().try_lock(Duration::ZERO).await.unwrap().is_none());
    let read = write.downgrade().await.unwrap();
    assert_eq!(read.owner_id(), owner, "the read hold is the writer's");
    assert_eq!(
        read.fencing_token(),
        token,
        "it fences with the write's token"
    );
    let other = rw.read().try_lock(Duration::ZERO).await.unwrap();
    assert!(other.is_some(), "other readers join a downgraded lock");
    assert!(rw.write().try_lock(Duration::ZERO).await.unwrap().is_none());
    read.unlock().await.unwrap();
    other.unwrap().unlock().await.unwrap();
    assert!(!rw.is_locked().await.unwrap());
}

/// An attempt whose answer is lost (a stall longer than the command timeout) is sent again: the
/// retry finds the hold the first sending granted — its own owner id's, nobody else's — and
/// takes it as its grant: one hold in Redis, the token the counter holds, nothing left after
/// the unlock. (Before: a retry that raced a re-entry of the same handle reset its count,
/// freeing a hold a guard still believed it held.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_sent_again_takes_its_own_grant_and_only_that() {
    let server = RedisServer::spawn();
    let proxy = FaultProxy::start(&server.addr());
    let client = Client::builder(proxy.url())
        .command_timeout(Duration::from_millis(300))
        .watchdog_timeout(Duration::from_secs(5))
        .connect()
        .await
        .unwrap();
    let mut conn = server.conn().await;
    let lock = client.lock("retried");
    // The server knows the scripts (else every stalled EVALSHA would only learn NOSCRIPT).
    lock.lock().await.unwrap().unlock().await.unwrap();
    proxy.set_delay(Duration::from_millis(500));
    let acquire = tokio::spawn({
        let lock = lock.clone();
        async move { lock.try_lock(Duration::from_secs(20)).await }
    });
    // The first sending reaches Redis after its answer was given up on.
    assert!(
        crate::helpers::eventually(Duration::from_secs(10), || {
            let mut conn = conn.clone();
            async move { conn.exists::<_, bool>("retried").await.unwrap() }
        })
        .await
    );
    proxy.set_delay(Duration::ZERO);
    let guard = acquire
        .await
        .unwrap()
        .unwrap()
        .expect("the retry takes the grant");
    let fields: HashMap<String, u64> = conn.hgetall("retried").await.unwrap();
    assert_eq!(fields, HashMap::from([(guard.owner_id().to_owned(), 1)]));
    let counter: u64 = conn.get("redisson_lock_token:{retried}").await.unwrap();
    assert_eq!(guard.fencing_token(), counter);
    assert!(
        lock.try_lock(Duration::ZERO).await.unwrap().is_none(),
        "held"
    );
    guard.unlock().await.unwrap();
    assert!(!conn.exists::<_, bool>("retried").await.unwrap());
}

/// An acquire that gives up after an attempt whose answer was lost releases what that attempt
/// may have granted, in the background: the lock is free long before its 30 s lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_that_gives_up_after_a_lost_answer_strands_no_hold() {
    let server = RedisServer::spawn();
    let proxy = FaultProxy::start(&server.addr());
    let client = Client::builder(proxy.url())
        .command_timeout(Duration::from_millis(200))
        .connect()
        .await
        .unwrap();
    let conn = server.conn().await;
    let lock = client.lock("given-up");
    lock.lock().await.unwrap().unlock().await.unwrap();
    proxy.set_delay(Duration::from_millis(400));
    let err = lock.try_lock(Duration::from_millis(300)).await.unwrap_err();
    assert!(err.is_uncertain(), "{err}");
    assert!(
        crate::helpers::eventually(Duration::from_secs(5), || {
            let mut conn = conn.clone();
            async move { conn.exists::<_, bool>("given-up").await.unwrap() }
        })
        .await,
        "the late attempt granted the lock"
    );
    proxy.set_delay(Duration::ZERO);
    assert!(
        crate::helpers::eventually(Duration::from_secs(10), || {
            let mut conn = conn.clone();
            async move { !conn.exists::<_, bool>("given-up").await.unwrap() }
        })
        .await,
        "the stray hold was released, not left to its 30 s lease"
    );
}

/// A release that arrives late (its answer given up on, the connection replaced) carries its
/// own owner id, which no later acquire ever uses: it cannot free a later hold, of this handle
/// or any other. Sent here by hand, the release script of the first hold finds nothing of its
/// owner and changes nothing.
#[tokio::test]
async fn a_late_release_cannot_free_a_later_hold() {
    let server = RedisServer::spawn();
    let client = client(&server).await;
    let mut conn = server.conn().await;
    let lock = client.lock("late");
    let first = lock.lock().await.unwrap();
    let first_owner = first.owner_id().to_owned();
    first.unlock().await.unwrap();
    let second = lock.lock().await.unwrap();
    assert_ne!(
        second.owner_id(),
        first_owner,
        "every acquire is a new owner"
    );
    // The release script as the library sends it: its fast path, the prelude, the rest.
    let release = concat!(
        include_str!("../../scripts/lock_release.fast.lua"),
        include_str!("../../scripts/prelude.lua"),
        include_str!("../../scripts/handoff_prelude.lua"),
        include_str!("../../scripts/lock_release.lua"),
    );
    let released: i64 = redis::Script::new(release)
        .key("late")
        .key("redisson_lock__channel:{late}")
        .key("latchkey_lock_queue:{late}")
        .key("latchkey_lock_alive:{late}")
        .key("latchkey_lock_handoff:{late}")
        .arg("0")
        .arg(&first_owner)
        .arg(200)
        .arg("publish")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        released, -1,
        "not the late release's owner: nothing changes"
    );
    let fields: HashMap<String, u64> = conn.hgetall("late").await.unwrap();
    assert_eq!(fields, HashMap::from([(second.owner_id().to_owned(), 1)]));
    second.unlock().await.unwrap();
}

/// Used once each and finished on 100 names, the lock, fair lock, read-write lock and election
/// leave no key without an expiry: counters, change logs and wait queues all expire once their
/// object is idle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_names_leave_no_key_without_an_expiry() {
    let server = RedisServer::spawn();
    let client = client(&server).await;
    let mut tasks = Vec::new();
    for i in 0..100 {
        let client = client.clone();
        tasks.push(tokio::spawn(async move {
            let lock = client.lock(format!("lock-{i}"));
            let held = lock.lock().await.unwrap();
            // A waiter that gives up: the wait queue and its registration are written too.
            assert!(lock
                .try_lock(Duration::from_millis(20))
                .await
                .unwrap()
                .is_none());
            held.unlock().await.unwrap();
            client
                .fair_lock(format!("fair-{i}"))
                .lock()
                .await
                .unwrap()
                .unlock()
                .await
                .unwrap();
            let rw = client.rw_lock(format!("rw-{i}"));
            rw.write().lock().await.unwrap().unlock().await.unwrap();
            rw.read().lock().await.unwrap().unlock().await.unwrap();
            let election = client.election(format!("election-{i}"));
            election
                .campaign("node")
                .await
                .unwrap()
                .resign()
                .await
                .unwrap();
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let mut conn = server.conn().await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(!keys.is_empty(), "the counters are there, with an expiry");
    let mut persistent = Vec::new();
    for key in &keys {
        let ttl: i64 = conn.pttl(key).await.unwrap();
        if ttl == -1 {
            persistent.push(key.clone());
        }
    }
    assert!(
        persistent.is_empty(),
        "keys without an expiry: {persistent:?}"
    );
}

/// Fencing tokens and terms keep increasing after their counter expired (the object idle) or
/// was lost, and a Redisson `RFencedLock` (`INCR` of the same counter) still shares it.
#[tokio::test]
async fn tokens_never_go_back_across_a_counters_expiry() {
    let server = RedisServer::spawn();
    let client = client(&server).await;
    let mut conn = server.conn().await;
    let lock = client.lock("fenced");
    let first = lock.lock().await.unwrap();
    let t1 = first.fencing_token();
    first.unlock().await.unwrap();
    // The counter expires (as it does a minute after the lock went idle).
    let ttl: i64 = conn.pttl("redisson_lock_token:{fenced}").await.unwrap();
    assert!(ttl > 0, "the counter has an expiry: {ttl}");
    let _: () = conn.del("redisson_lock_token:{fenced}").await.unwrap();
    let second = lock.lock().await.unwrap();
    assert!(
        second.fencing_token() > t1,
        "{} after {t1}",
        second.fencing_token()
    );
    let t2 = second.fencing_token();
    second.unlock().await.unwrap();
    // A Redisson RFencedLock takes the lock: it INCRs the shared counter.
    let java: u64 = conn.incr("redisson_lock_token:{fenced}", 1).await.unwrap();
    assert_eq!(java, t2.get() + 1);
    let third = lock.lock().await.unwrap();
    assert!(third.fencing_token() > java);
    third.unlock().await.unwrap();

    let rw = client.rw_lock("rw-fenced");
    let w1 = rw.write().lock().await.unwrap().fencing_token();
    let _: () = conn.del("latchkey_rwlock_token:{rw-fenced}").await.unwrap();
    let w2 = rw.write().lock().await.unwrap();
    assert!(w2.fencing_token() > w1);
    drop(w2);

    let election = client.election("termed");
    let term1 = election.campaign("a").await.unwrap();
    let t = term1.term();
    term1.resign().await.unwrap();
    let _: () = conn
        .del(&[
            "latchkey_election_term:{termed}",
            "latchkey_election_log:{termed}",
        ])
        .await
        .unwrap();
    let term2 = election.campaign("b").await.unwrap();
    assert!(term2.term() > t, "{} after {t}", term2.term());
    term2.resign().await.unwrap();
}
