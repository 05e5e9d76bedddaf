//! The fair lock against a real redis-server.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use latchkey_redis::{FairLock, LockOptions};
use latchkey_test_support::RedisServer;
use redis::AsyncCommands;

use crate::helpers::{builder, client, eventually, numsub};

fn queue_key(name: &str) -> String {
    format!("redisson_lock_queue:{{{name}}}")
}

fn deadlines_key(name: &str) -> String {
    format!("redisson_lock_timeout:{{{name}}}")
}

async fn queue(conn: &mut redis::aio::MultiplexedConnection, name: &str) -> Vec<String> {
    conn.lrange(queue_key(name), 0, -1).await.unwrap()
}

/// The client part of a queue entry (an owner id `<client id>:<n>`, or Redisson's
/// `<uuid>:<thread id>`).
fn client_of(entry: &str) -> &str {
    entry.rsplit_once(':').unwrap().0
}

/// Waits until the queue of `name` holds one entry per client of `expected`, in that order (an
/// owner id is drawn per acquire: only its client part is known before it queues).
async fn queue_clients_become(server: &RedisServer, name: &str, expected: &[&str]) -> bool {
    let conn = server.conn().await;
    eventually(Duration::from_secs(10), || {
        let mut conn = conn.clone();
        async move {
            let entries = queue(&mut conn, name).await;
            entries
                .iter()
                .map(|e| client_of(e))
                .eq(expected.iter().copied())
        }
    })
    .await
}

/// Waits until the queue of `name` is exactly `expected`.
async fn queue_becomes(server: &RedisServer, name: &str, expected: &[&str]) -> bool {
    let conn = server.conn().await;
    eventually(Duration::from_secs(10), || {
        let mut conn = conn.clone();
        async move { queue(&mut conn, name).await == expected }
    })
    .await
}

async fn server_ms(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    let (s, us): (u64, u64) = redis::cmd("TIME").query_async(conn).await.unwrap();
    s * 1000 + us / 1000
}

/// The messages (channel, payload) published on `channels` while `action` ran, in order.
async fn published_during(
    server: &RedisServer,
    channels: &[&str],
    action: impl std::future::Future<Output = ()>,
) -> Vec<(String, String)> {
    let mut raw = server.client().get_async_pubsub().await.unwrap();
    for channel in channels.iter().chain(&["end-marker"]) {
        raw.subscribe(*channel).await.unwrap();
    }
    action.await;
    let mut conn = server.conn().await;
    let _: () = conn.publish("end-marker", "end").await.unwrap();
    let mut stream = raw.on_message();
    let mut got = Vec::new();
    loop {
        let msg = stream.next().await.unwrap();
        let channel = msg.get_channel_name().to_owned();
        if channel == "end-marker" {
            return got;
        }
        got.push((channel, msg.get_payload::<String>().unwrap()));
    }
}

/// Spawns a waiter that records `index` in `order` when it gets the lock, then releases it.
fn spawn_waiter(
    lock: FairLock,
    index: usize,
    order: Arc<Mutex<Vec<usize>>>,
) -> tokio::task::JoinHandle<latchkey_redis::FencingToken> {
    tokio::spawn(async move {
        let guard = lock.lock().await.unwrap();
        order.lock().unwrap().push(index);
        let token = guard.fencing_token();
        tokio::time::sleep(Duration::from_millis(10)).await;
        guard.unlock().await.unwrap();
        token
    })
}

/// Eight waiters on four clients queue behind a holder and get the lock in arrival order, each
/// woken on its own channel with Redisson's unlock message and each with a larger fencing token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_waiters_get_the_lock_in_arrival_order() {
    let server = RedisServer::spawn();
    let holder = client(&server).await;
    let guard = holder.fair_lock("fifo").lock().await.unwrap();
    let first_token = guard.fencing_token();
    // 4 clients with 2 handles each: fairness holds across clients and within one.
    let clients = [
        client(&server).await,
        client(&server).await,
        client(&server).await,
        client(&server).await,
    ];
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut waiting_clients = Vec::new();
    let mut tasks = Vec::new();
    for i in 0..8 {
        let waiter = &clients[(i * 3) % 4];
        waiting_clients.push(waiter.id().to_owned());
        tasks.push(spawn_waiter(waiter.fair_lock("fifo"), i, order.clone()));
        let expected: Vec<&str> = waiting_clients.iter().map(String::as_str).collect();
        assert!(
            queue_clients_become(&server, "fifo", &expected).await,
            "waiter {i} queued behind the others"
        );
    }
    // Every waiter has queued: its wake channel is named after its entry.
    let mut conn = server.conn().await;
    let entries = queue(&mut conn, "fifo").await;
    let channels: Vec<String> = entries
        .iter()
        .map(|owner| format!("redisson_lock__channel:{{fifo}}:{owner}"))
        .collect();
    let channels: Vec<&str> = channels.iter().map(String::as_str).collect();
    let mut tokens = Vec::new();
    let told = published_during(&server, &channels, async {
        guard.unlock().await.unwrap();
        for t in tasks {
            tokens.push(t.await.unwrap());
        }
    })
    .await;
    // Each waiter is woken on its own channel, with Redisson's unlock message (no grants).
    assert!(told.iter().all(|(_, m)| m == "0"), "{told:?}");
    for channel in &channels {
        assert!(
            told.iter().any(|(c, _)| c == channel),
            "{channel} was woken: {told:?}"
        );
    }
    assert_eq!(*order.lock().unwrap(), (0..8).collect::<Vec<_>>());
    // Every holder got a larger token than the one before.
    let mut last = first_token;
    for token in tokens {
        assert!(token > last, "{token} after {last}");
        last = token;
    }
    assert!(queue(&mut conn, "fifo").await.is_empty());
    let left: bool = conn.exists(deadlines_key("fifo")).await.unwrap();
    assert!(!left, "no deadline left behind");
    assert!(!holder.fair_lock("fifo").is_locked().await.unwrap());
}

#[tokio::test]
async fn a_waiter_cancelled_mid_queue_leaves_at_once_and_is_skipped() {
    let server = RedisServer::spawn();
    let holder = client(&server).await;
    let a = client(&server).await;
    let c = client(&server).await;
    let guard = holder.fair_lock("skip").lock().await.unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));

    let first = a.fair_lock("skip");
    let first_task = spawn_waiter(first.clone(), 0, order.clone());
    assert!(queue_clients_become(&server, "skip", &[a.id()]).await);

    // The middle waiter runs on a client of its own, which goes away with the task.
    let middle_client = client(&server).await;
    let middle_client_id = middle_client.id().to_owned();
    let middle = middle_client.fair_lock("skip");
    let middle_task = spawn_waiter(middle, 1, order.clone());
    drop(middle_client);
    assert!(queue_clients_become(&server, "skip", &[a.id(), &middle_client_id]).await);

    let last = c.fair_lock("skip");
    let last_task = spawn_waiter(last.clone(), 2, order.clone());
    assert!(queue_clients_become(&server, "skip", &[a.id(), &middle_client_id, c.id()]).await);
    let mut conn = server.conn().await;
    let entries = queue(&mut conn, "skip").await;

    // Kill the middle waiter (its future and its client are dropped): it leaves the queue at
    // once, long before the default 30 s thread wait time.
    middle_task.abort();
    assert!(middle_task.await.unwrap_err().is_cancelled());
    assert!(
        queue_becomes(&server, "skip", &[&entries[0], &entries[2]]).await,
        "the cancelled waiter left the queue"
    );

    guard.unlock().await.unwrap();
    first_task.await.unwrap();
    last_task.await.unwrap();
    assert_eq!(*order.lock().unwrap(), vec![0, 2]);
}

#[tokio::test]
async fn a_vanished_waiter_goes_stale_after_the_thread_wait_time_and_the_queue_moves_on() {
    let server = RedisServer::spawn();
    let holder = client(&server).await;
    let ghost_client = client(&server).await;
    let b = client(&server).await;
    let mut conn = server.conn().await;
    let timeout = Duration::from_secs(1);
    let guard = holder.fair_lock("ghost").lock().await.unwrap();

    // The ghost queues, then vanishes like a killed process: its future is leaked, so it never
    // attempts again and never leaves.
    let ghost = ghost_client
        .fair_lock("ghost")
        .with_thread_wait_time(timeout)
        .unwrap();
    let mut ghost_wait = Box::pin(async move { ghost.lock().await });
    let ghost_queue = [ghost_client.id()];
    tokio::select! {
        _ = &mut ghost_wait => panic!("the lock is held"),
        queued = queue_clients_become(&server, "ghost", &ghost_queue) => assert!(queued),
    }
    std::mem::forget(ghost_wait);

    let behind = b.fair_lock("ghost").with_thread_wait_time(timeout).unwrap();
    let waiter = tokio::spawn(async move { behind.lock().await.unwrap() });
    assert!(queue_clients_become(&server, "ghost", &[ghost_client.id(), b.id()]).await);
    let behind_owner = queue(&mut conn, "ghost").await[1].clone();

    // The holder leaves; the release wakes the ghost, which never comes. Its entry goes stale
    // by the server clock and the waiter behind it takes the lock: nobody else has to act.
    guard.unlock().await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(30), waiter)
        .await
        .expect("the queue did not get stuck behind the ghost")
        .unwrap();
    assert!(queue(&mut conn, "ghost").await.is_empty());
    let fields: std::collections::HashMap<String, u64> = conn.hgetall("ghost").await.unwrap();
    assert_eq!(
        fields.keys().collect::<Vec<_>>(),
        vec![&behind_owner],
        "only the live waiter holds the lock"
    );
    assert_eq!(
        got.owner_id(),
        behind_owner,
        "under the owner id it queued with"
    );
    got.unlock().await.unwrap();
}

/// Without `with_thread_wait_time`, the first queued waiter's place is kept for the holder's remaining
/// lease + FairLock::DEFAULT_THREAD_WAIT_TIME (30 s), Redisson's chain with latchkey's default: its deadline
/// in Redis is at most that far past the server clock, and more than the 2 s a live waiter may
/// park between attempts.
#[tokio::test]
async fn a_waiter_place_lasts_the_default_thread_wait_time() {
    assert_eq!(
        latchkey_redis::FairLock::DEFAULT_THREAD_WAIT_TIME,
        Duration::from_secs(30)
    );
    let server = RedisServer::spawn();
    let a = client(&server).await;
    let b = client(&server).await;
    let mut conn = server.conn().await;
    let guard = a.fair_lock("default-timeout").lock().await.unwrap();
    let waiter = b.fair_lock("default-timeout");
    let task = tokio::spawn(async move { waiter.lock().await.unwrap().unlock().await });
    assert!(queue_clients_become(&server, "default-timeout", &[b.id()]).await);
    let owner = queue(&mut conn, "default-timeout").await.remove(0);
    let deadline: u64 = conn
        .zscore(deadlines_key("default-timeout"), &owner)
        .await
        .unwrap();
    let left = deadline.saturating_sub(server_ms(&mut conn).await);
    // The holder's lease is the 1 s watchdog timeout of these clients.
    assert!(
        left > 30_000 - 2_000 && left <= 31_000,
        "the waiter's place lasts {left} ms, not the lease + the 30 s default"
    );
    let ttl: i64 = conn.pttl(queue_key("default-timeout")).await.unwrap();
    assert!(
        ttl > 2_000 && ttl <= 30_000,
        "the queue expires in {ttl} ms"
    );
    guard.unlock().await.unwrap();
    task.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_dead_entry_at_the_head_cannot_block_a_free_lock() {
    let server = RedisServer::spawn();
    let a = client(&server).await;
    let mut conn = server.conn().await;
    let lock = a.fair_lock("dead-head");

    // A live entry of somebody else (a Java client, say) is ahead: even a free lock is not
    // taken out of turn.
    let now = server_ms(&mut conn).await;
    let _: () = conn
        .rpush(queue_key("dead-head"), "java-uuid:1")
        .await
        .unwrap();
    let _: () = conn
        .zadd(deadlines_key("dead-head"), "java-uuid:1", now + 60_000)
        .await
        .unwrap();
    assert!(lock.try_lock(Duration::ZERO).await.unwrap().is_none());
    assert_eq!(
        lock.queue().await.unwrap(),
        vec!["java-uuid:1"],
        "not queued"
    );

    // Once its deadline has passed (by the server clock) it is dropped, and the lock is free.
    let _: () = conn
        .zadd(deadlines_key("dead-head"), "java-uuid:1", now - 1)
        .await
        .unwrap();
    // An entry without any deadline at the head is dropped too.
    let _: () = conn
        .lpush(queue_key("dead-head"), "no-deadline:1")
        .await
        .unwrap();
    let guard = lock
        .try_lock(Duration::ZERO)
        .await
        .unwrap()
        .expect("stale entries do not count");
    assert!(lock.queue().await.unwrap().is_empty());
    let left: bool = conn.exists(deadlines_key("dead-head")).await.unwrap();
    assert!(!left);
    guard.unlock().await.unwrap();
}

#[tokio::test]
async fn a_waiter_that_gives_up_leaves_the_queue_at_once() {
    let server = RedisServer::spawn();
    let a = client(&server).await;
    let b = client(&server).await;
    let c = client(&server).await;
    let mut conn = server.conn().await;
    let guard = a.fair_lock("give-up").lock().await.unwrap();

    let started = Instant::now();
    let gave_up = b
        .fair_lock("give-up")
        .try_lock(Duration::from_millis(300))
        .await
        .unwrap();
    assert!(gave_up.is_none());
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert!(
        queue_becomes(&server, "give-up", &[]).await,
        "b left at once, long before the 30 s thread wait time"
    );
    let err = b
        .fair_lock("give-up")
        .lock_with(LockOptions::new().wait(Duration::from_millis(100)))
        .await
        .unwrap_err();
    assert!(err.is_wait_timed_out() && err.is_timeout(), "{err}");
    assert!(queue_becomes(&server, "give-up", &[]).await);
    assert!(
        eventually(Duration::from_secs(5), || {
            let b = b.clone();
            async move { b.subscription_count() == 0 }
        })
        .await
    );

    // A waiter that queued after a quitter is served normally.
    let waiter = tokio::spawn({
        let lock = c.fair_lock("give-up");
        async move { lock.lock().await.unwrap() }
    });
    assert!(
        eventually(Duration::from_secs(5), || {
            let mut conn = conn.clone();
            async move { queue(&mut conn, "give-up").await.len() == 1 }
        })
        .await
    );
    guard.unlock().await.unwrap();
    let got = waiter.await.unwrap();
    got.unlock().await.unwrap();
    assert!(queue(&mut conn, "give-up").await.is_empty());
}

#[tokio::test]
async fn a_dropped_waiting_future_leaves_nothing_behind() {
    let server = RedisServer::spawn();
    let a = client(&server).await;
    let b = client(&server).await;
    let mut conn = server.conn().await;
    let guard = a.fair_lock("cancel").lock().await.unwrap();
    let lock_b = b.fair_lock("cancel");
    let mut waiting = Box::pin(tokio::time::timeout(
        Duration::from_millis(300),
        lock_b.lock(),
    ));
    let b_queue = [b.id()];
    tokio::select! {
        _ = &mut waiting => panic!("gave up before it queued"),
        queued = queue_clients_become(&server, "cancel", &b_queue) => assert!(queued),
    }
    // Its wake channel is named after its queue entry.
    let owner = queue(&mut conn, "cancel").await.remove(0);
    let channel = format!("redisson_lock__channel:{{cancel}}:{owner}");
    assert!((&mut waiting).await.is_err(), "still waiting when dropped");
    drop(waiting);
    assert!(
        queue_becomes(&server, "cancel", &[]).await,
        "no queue entry"
    );
    guard.unlock().await.unwrap();
    assert!(!lock_b.is_locked().await.unwrap(), "no hold");
    assert_eq!(b.tracked_lock_count(), 0, "no renewal");
    assert!(
        eventually(Duration::from_secs(5), || {
            let b = b.clone();
            async move { b.subscription_count() == 0 }
        })
        .await,
        "no subscription"
    );
    assert!(
        eventually(Duration::from_secs(5), || {
            let mut conn = conn.clone();
            let channel = channel.clone();
            async move { numsub(&mut conn, &channel).await == 0 }
        })
        .await
    );
    let left: bool = conn.exists(deadlines_key("cancel")).await.unwrap();
    assert!(!left);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_at_any_point_never_strands_a_hold_or_a_queue_entry() {
    let server = RedisServer::spawn();
    let a = client(&server).await;
    let b = client(&server).await;
    let lock = a.fair_lock("cancel-race");
    let mut completed = 0;
    // Free lock: drops land before, during and after the acquire script.
    for step in 0..100u64 {
        if let Ok(guard) = tokio::time::timeout(Duration::from_micros(step * 10), lock.lock()).await
        {
            completed += 1;
            drop(guard.unwrap());
        }
    }
    // Held lock: drops land around the queueing script and the subscription.
    let held = b.fair_lock("cancel-race").lock().await.unwrap();
    for step in 0..100u64 {
        let waited = tokio::time::timeout(Duration::from_micros(step * 30), lock.lock()).await;
        assert!(waited.is_err(), "the lock is held");
    }
    held.unlock().await.unwrap();
    assert!(
        queue_becomes(&server, "cancel-race", &[]).await,
        "every queue entry was removed ({completed} completed)"
    );
    // With no holder and no queue, a try without waiting succeeds.
    let other = b.fair_lock("cancel-race");
    assert!(
        eventually(Duration::from_secs(10), || {
            let other = other.clone();
            async move {
                match other.try_lock(Duration::ZERO).await.unwrap() {
                    Some(g) => {
                        g.unlock().await.unwrap();
                        true
                    }
                    None => false,
                }
            }
        })
        .await,
        "every hold was released"
    );
    assert!(
        eventually(Duration::from_secs(5), || {
            let a = a.clone();
            async move { a.tracked_lock_count() == 0 }
        })
        .await
    );
}

/// Nine handles on three clients run ten non-atomic increments each under the lock: none is
/// lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_exclusion_under_contention() {
    let server = RedisServer::spawn();
    const ROUNDS: u64 = 10;
    let mut tasks = Vec::new();
    for _ in 0..3 {
        let client = client(&server).await;
        for _ in 0..3 {
            let lock = client.fair_lock("counter-lock");
            let mut conn = server.conn().await;
            tasks.push(tokio::spawn(async move {
                for _ in 0..ROUNDS {
                    let guard = lock.lock().await.unwrap();
                    // A deliberately non-atomic read-modify-write: only the lock keeps it exact.
                    let v: Option<u64> = conn.get("counter").await.unwrap();
                    tokio::task::yield_now().await;
                    let _: () = conn.set("counter", v.unwrap_or(0) + 1).await.unwrap();
                    guard.unlock().await.unwrap();
                }
            }));
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
    let mut conn = server.conn().await;
    let v: u64 = conn.get("counter").await.unwrap();
    assert_eq!(v, 9 * ROUNDS);
    let exists: bool = conn.exists("counter-lock").await.unwrap();
    assert!(!exists, "the lock key is gone after the last unlock");
    assert!(queue(&mut conn, "counter-lock").await.is_empty());
}

/// Re-entry is explicit: `reenter()` makes one more guard of the same hold (one hold count of 1
/// in Redis, under the guard's owner id), released by the last guard. A second acquire through
/// the same handle or a clone is an owner of its own and is excluded.
#[tokio::test]
async fn reenter_shares_the_hold_and_tokens_are_shared_with_the_plain_lock() {
    let server = RedisServer::spawn();
    let a = client(&server).await;
    let mut conn = server.conn().await;
    let lock = a.fair_lock("shared-name");
    let first = lock.lock().await.unwrap();
    let second = first.reenter();
    assert_eq!(first.owner_id(), second.owner_id());
    assert_eq!(client_of(first.owner_id()), a.id());
    assert_eq!(first.fencing_token(), second.fencing_token());
    let fields: std::collections::HashMap<String, u64> = conn.hgetall("shared-name").await.unwrap();
    assert_eq!(
        fields,
        [(first.owner_id().to_owned(), 1)].into(),
        "Redisson's hash layout, one hold count of 1"
    );
    // Another acquire through the same handle or a clone is excluded, and leaves no entry.
    assert!(lock.try_lock(Duration::ZERO).await.unwrap().is_none());
    assert!(lock
        .clone()
        .try_lock(Duration::from_millis(100))
        .await
        .unwrap()
        .is_none());
    assert!(queue_becomes(&server, "shared-name", &[]).await);
    // The plain lock of the same name is the same hash: they exclude each other.
    assert!(a
        .lock("shared-name")
        .try_lock(Duration::ZERO)
        .await
        .unwrap()
        .is_none());
    second.unlock().await.unwrap();
    assert!(lock.is_locked().await.unwrap());
    let token = first.fencing_token();
    first.unlock().await.unwrap();
    assert!(!lock.is_locked().await.unwrap());
    assert_eq!(a.tracked_lock_count(), 0);

    let plain = a.lock("shared-name").lock().await.unwrap();
    assert!(plain.fencing_token() > token, "one fencing counter");
    let token = plain.fencing_token();
    plain.unlock().await.unwrap();
    let again = lock.lock().await.unwrap();
    assert!(again.fencing_token() > token);
    again.unlock().await.unwrap();
    // The shared counter outlives the holds by the lease (1 s) + 60 s, then expires.
    let ttl: i64 = conn
        .pttl("redisson_lock_token:{shared-name}")
        .await
        .unwrap();
    assert!(
        ttl > 55_000 && ttl <= 61_000,
        "the counter expires in {ttl} ms"
    );
}

#[tokio::test]
async fn watchdog_keeps_the_lock_and_lost_fires_when_it_is_forced_away() {
    let server = RedisServer::spawn();
    let a = client(&server).await; // watchdog timeout 1 s
    let b = client(&server).await;
    let lock = a.fair_lock("watched");
    let guard = lock.lock().await.unwrap();
    tokio::time::sleep(Duration::from_millis(3500)).await;
    assert!(!guard.is_lost());
    let mut conn = server.conn().await;
    let count: u64 = conn.hget("watched", guard.owner_id()).await.unwrap();
    assert_eq!(count, 1);
    let left = lock.remaining_lease().await.unwrap().unwrap();
    assert!(left <= Duration::from_secs(1));
    assert!(b
        .fair_lock("watched")
        .try_lock(Duration::ZERO)
        .await
        .unwrap()
        .is_none());

    let lost = guard.lost();
    assert!(b.fair_lock("watched").force_unlock().await.unwrap());
    tokio::time::timeout(Duration::from_secs(10), lost)
        .await
        .expect("lost() fires once the lock is gone");
    assert!(guard.is_lost());
    assert!(guard.unlock().await.unwrap_err().is_not_owner());
    assert_eq!(a.tracked_lock_count(), 0);

    // A fixed lease is not renewed.
    let fixed = lock
        .lock_with(LockOptions::new().lease(Duration::from_millis(300)))
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(10), fixed.lost())
        .await
        .expect("a fixed lease runs out");
    assert!(fixed.unlock().await.unwrap_err().is_not_owner());
}

#[tokio::test]
async fn a_release_wakes_only_the_head_waiter_on_its_own_channel() {
    let server = RedisServer::spawn();
    let a = client(&server).await;
    let mut conn = server.conn().await;
    let guard = a.fair_lock("heads").lock().await.unwrap();
    // Two Java-style waiters (RedissonFairLock layout), live for a minute.
    let now = server_ms(&mut conn).await;
    for (i, owner) in ["java-uuid:1", "java-uuid:2"].iter().enumerate() {
        let _: () = conn.rpush(queue_key("heads"), owner).await.unwrap();
        let _: () = conn
            .zadd(deadlines_key("heads"), owner, now + 60_000 + i as u64)
            .await
            .unwrap();
    }
    let got = published_during(
        &server,
        &[
            "redisson_lock__channel:{heads}:java-uuid:1",
            "redisson_lock__channel:{heads}:java-uuid:2",
            "redisson_lock__channel:{heads}",
        ],
        async { guard.unlock().await.unwrap() },
    )
    .await;
    assert_eq!(
        got,
        vec![(
            "redisson_lock__channel:{heads}:java-uuid:1".to_owned(),
            "0".to_owned()
        )],
        "only the head was told, with Redisson's unlock message"
    );
    // The head has not taken the lock yet: a newcomer still waits its turn.
    assert!(a
        .fair_lock("heads")
        .try_lock(Duration::ZERO)
        .await
        .unwrap()
        .is_none());
}

#[tokio::test]
async fn bad_input_is_rejected_and_changes_nothing() {
    let server = RedisServer::spawn();
    let a = client(&server).await;
    let mut conn = server.conn().await;

    let err = a.fair_lock("").lock().await.unwrap_err();
    assert!(err.is_invalid_argument(), "{err}");
    for wait in [Duration::from_millis(10), latchkey_redis::MAX_LEASE * 2] {
        let err = a
            .fair_lock("bad-wait-time")
            .with_thread_wait_time(wait)
            .unwrap_err();
        assert!(
            err.is_invalid_argument() && err.to_string().contains("thread wait time"),
            "{err}"
        );
    }
    let err = a
        .fair_lock("bad-lease")
        .lock_with(LockOptions::new().lease(Duration::ZERO))
        .await
        .unwrap_err();
    assert!(err.is_invalid_argument(), "{err}");
    let err = a
        .fair_lock("bad-wait")
        .try_lock(Duration::MAX)
        .await
        .unwrap_err();
    assert!(err.is_invalid_argument(), "{err}");
    let keys = crate::helpers::data_keys(&mut conn).await;
    assert!(keys.is_empty(), "nothing was written: {keys:?}");

    // Keys of other types: typed error, nothing written.
    let _: () = conn.set("occupied", "precious").await.unwrap();
    let err = a.fair_lock("occupied").lock().await.unwrap_err();
    assert!(err.is_wrong_type(), "{err}");
    let err = a.fair_lock("occupied").force_unlock().await.unwrap_err();
    assert!(err.is_wrong_type(), "{err}");
    let v: String = conn.get("occupied").await.unwrap();
    assert_eq!(v, "precious");
    let _: () = conn.set(queue_key("queueless"), "x").await.unwrap();
    let err = a.fair_lock("queueless").lock().await.unwrap_err();
    assert!(err.is_wrong_type(), "{err}");
    let exists: bool = conn.exists("queueless").await.unwrap();
    assert!(!exists, "the lock was not taken");
}

#[test]
fn handles_and_guards_are_send_and_sync() {
    fn check<T: Send + Sync + 'static>() {}
    check::<latchkey_redis::FairLock>();
    check::<latchkey_redis::FairLockGuard>();
}

// ---------------------------------------------------------------------------------------------
// Mixed queues: latchkey and Redisson (Java) waiters on one fair lock.
// ---------------------------------------------------------------------------------------------

/// A waiter that speaks Redisson's `RedissonFairLock` protocol, written for these tests from a
/// reading of its source (the `tryLockInnerAsync` variant that returns a wait, `unlockInnerAsync`
/// and `RedissonLock.lock`'s retry loop). It is not latchkey's code: it is the other side that
/// latchkey's scripts must keep working for.
///
/// The protocol, as read: deadlines are the Java host's clock in ms; only the head of the queue
/// is ever dropped as stale; a newcomer's deadline is the tail's (or, with an empty queue, the
/// lock's expiry) + W; the waiter that takes the lock lowers every queued deadline by W; a
/// waiter never refreshes its own; a release publishes `0` on the head's own channel.
struct RedissonWaiter {
    server_client: redis::Client,
    conn: redis::aio::MultiplexedConnection,
    name: String,
    /// `<uuid>:<thread id>`, Redisson's lock name of a thread.
    id: String,
    /// Redisson's `threadWaitTime`, ms.
    wait_ms: u64,
    /// The lease the Java side asks for, ms.
    lease_ms: u64,
}

/// Redisson's acquire, in Lua written here. KEYS: the lock hash, the queue, the deadlines.
/// ARGV: lease ms, thread id, W ms, the caller's clock ms. Returns nil once the caller holds the
/// lock, else how long it parks before trying again (negative: until a message comes).
const REDISSON_ACQUIRE: &str = r#"
local lease, me, w, now = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
-- Drop stale entries, from the head only; the others' deadlines are left as they are.
while true do
    local first = redis.call('lindex', KEYS[2], 0)
    if not first then break end
    local d = tonumber(redis.call('zscore', KEYS[3], first))
    if d and d > now then break end
    redis.call('zrem', KEYS[3], first)
    redis.call('lpop', KEYS[2])
end
local first = redis.call('lindex', KEYS[2], 0)
if redis.call('exists', KEYS[1]) == 0 and (not first or first == me) then
    if first == me then redis.call('lpop', KEYS[2]) end
    redis.call('zrem', KEYS[3], me)
    -- Served: everybody still queued moves one link up the chain.
    for _, other in ipairs(redis.call('zrange', KEYS[3], 0, -1)) do
        redis.call('zincrby', KEYS[3], -w, other)
    end
    redis.call('hset', KEYS[1], me, 1)
    redis.call('pexpire', KEYS[1], lease)
    return nil
end
if redis.call('hexists', KEYS[1], me) == 1 then
    redis.call('hincrby', KEYS[1], me, 1)
    redis.call('pexpire', KEYS[1], lease)
    return nil
end
-- With the lock free, a newcomer clears live heads that have not taken it.
while true do
    local head = redis.call('lindex', KEYS[2], 0)
    if not head or head == me then break end
    local d = tonumber(redis.call('zscore', KEYS[3], head))
    if d and d > now and redis.call('exists', KEYS[1]) == 0 then
        redis.call('lpop', KEYS[2])
        redis.call('zrem', KEYS[3], head)
    else
        break
    end
end
local mine = redis.call('zscore', KEYS[3], me)
if mine then
    -- Already queued: the wait is estimated from its own deadline, never refreshed.
    return tonumber(mine) - w - now
end
local last = redis.call('lindex', KEYS[2], -1)
local last_deadline = last and last ~= me and tonumber(redis.call('zscore', KEYS[3], last))
local ttl
if last_deadline then
    ttl = last_deadline - now
else
    ttl = redis.call('pttl', KEYS[1])
end
if redis.call('zadd', KEYS[3], ttl + w + now, me) == 1 then
    redis.call('rpush', KEYS[2], me)
end
return ttl
"#;

/// Redisson's release, in Lua written here. KEYS: the lock hash, the queue, the deadlines, the
/// channel prefix. ARGV: the unlock message, lease ms, thread id, the caller's clock ms.
const REDISSON_RELEASE: &str = r#"
local now = tonumber(ARGV[4])
while true do
    local first = redis.call('lindex', KEYS[2], 0)
    if not first then break end
    local d = tonumber(redis.call('zscore', KEYS[3], first))
    if d and d > now then break end
    redis.call('zrem', KEYS[3], first)
    redis.call('lpop', KEYS[2])
end
local function tell_head()
    local head = redis.call('lindex', KEYS[2], 0)
    if head then redis.call('publish', KEYS[4] .. ':' .. head, ARGV[1]) end
end
if redis.call('exists', KEYS[1]) == 0 then
    tell_head()
    return 1
end
if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then return nil end
if redis.call('hincrby', KEYS[1], ARGV[3], -1) > 0 then
    redis.call('pexpire', KEYS[1], ARGV[2])
    return 0
end
redis.call('del', KEYS[1])
tell_head()
return 1
"#;

/// The Java host's clock, in ms.
fn java_clock_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

impl RedissonWaiter {
    async fn new(server: &RedisServer, name: &str, thread: u32, wait: Duration) -> RedissonWaiter {
        RedissonWaiter {
            server_client: server.client(),
            conn: server.conn().await,
            name: name.to_owned(),
            id: format!("6f1c2a7e-0d4b-4c39-9a51-java{thread:08}:{thread}"),
            wait_ms: wait.as_millis() as u64,
            lease_ms: 30_000,
        }
    }

    /// One acquire attempt: `None` when the lock is held afterwards, else the park in ms.
    async fn try_acquire(&mut self) -> Option<i64> {
        redis::Script::new(REDISSON_ACQUIRE)
            .key(&self.name)
            .key(queue_key(&self.name))
            .key(deadlines_key(&self.name))
            .arg(self.lease_ms)
            .arg(&self.id)
            .arg(self.wait_ms)
            .arg(java_clock_ms())
            .invoke_async(&mut self.conn)
            .await
            .unwrap()
    }

    /// `RLock.lock()`: try; on failure subscribe to its own channel, then try again after each
    /// message or once the computed wait has passed (a negative wait: only on a message).
    async fn lock(&mut self) {
        if self.try_acquire().await.is_none() {
            return;
        }
        let channel = format!("redisson_lock__channel:{{{}}}:{}", self.name, self.id);
        let mut pubsub = self.server_client.get_async_pubsub().await.unwrap();
        pubsub.subscribe(&channel).await.unwrap();
        let mut messages = pubsub.on_message();
        loop {
            let Some(ttl) = self.try_acquire().await else {
                return;
            };
            if ttl >= 0 {
                let _ =
                    tokio::time::timeout(Duration::from_millis(ttl as u64), messages.next()).await;
            } else {
                messages.next().await;
            }
        }
    }

    async fn unlock(&mut self) {
        let released: Option<i64> = redis::Script::new(REDISSON_RELEASE)
            .key(&self.name)
            .key(queue_key(&self.name))
            .key(deadlines_key(&self.name))
            .key(format!("redisson_lock__channel:{{{}}}", self.name))
            .arg("0")
            .arg(self.lease_ms)
            .arg(&self.id)
            .arg(java_clock_ms())
            .invoke_async(&mut self.conn)
            .await
            .unwrap();
        assert!(released.is_some(), "{} held the lock", self.id);
    }
}

/// A Redisson waiter that records `label` in `order` when it gets the lock, holds it 20 ms and
/// releases it.
fn spawn_redisson_waiter(
    mut waiter: RedissonWaiter,
    label: &'static str,
    order: Arc<Mutex<Vec<&'static str>>>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        waiter.lock().await;
        order.lock().unwrap().push(label);
        tokio::time::sleep(Duration::from_millis(20)).await;
        waiter.unlock().await;
    })
}

/// The same for a latchkey waiter.
fn spawn_latchkey_waiter(
    lock: FairLock,
    label: &'static str,
    order: Arc<Mutex<Vec<&'static str>>>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let guard = lock.lock().await.unwrap();
        order.lock().unwrap().push(label);
        tokio::time::sleep(Duration::from_millis(20)).await;
        guard.unlock().await.unwrap();
    })
}

/// The deadlines of the queue of `name`, in queue order.
async fn deadlines(conn: &mut redis::aio::MultiplexedConnection, name: &str) -> Vec<(String, f64)> {
    let mut out = Vec::new();
    for id in queue(conn, name).await {
        let d: Option<f64> = conn.zscore(deadlines_key(name), &id).await.unwrap();
        out.push((id, d.expect("every queued entry has a deadline")));
    }
    out
}

/// Redisson's chain: every deadline is at least W past the one ahead of it (a few ms of slack
/// for the rounding of two clocks read at different moments).
fn assert_chained(deadlines: &[(String, f64)], wait: Duration) {
    let w = wait.as_millis() as f64;
    for pair in deadlines.windows(2) {
        assert!(
            pair[1].1 >= pair[0].1 + w - 5.0,
            "{} is not chained W behind {}: {deadlines:?}",
            pair[1].0,
            pair[0].0
        );
    }
}

/// Waits for a waiter task, at most `bound`.
async fn served_within(task: tokio::task::JoinHandle<()>, bound: Duration, who: &str) {
    tokio::time::timeout(bound, task)
        .await
        .unwrap_or_else(|_| panic!("{who} was not served within {bound:?}"))
        .unwrap();
}

/// Issue 12, item 2, exactly: a latchkey holder; Redisson waiters R1 and R2 queue; a latchkey
/// waiter L queues; Redisson waiter R3 queues. Before the fix L's deadline was "now + its
/// timeout" instead of chained from R2's, the two Redisson grants lowered R3's below the clock,
/// R2's release dropped R3 from the queue without a word, and R3 sat waiting (for minutes)
/// while the lock was free and the queue empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_12_redisson_waiters_behind_a_latchkey_waiter_are_served_in_order() {
    let server = RedisServer::spawn();
    let name = "mixed";
    // Redisson's default threadWaitTime, set on the latchkey side as the docs say.
    let w = Duration::from_secs(300);
    let holder_client = client(&server).await;
    let waiter_client = client(&server).await;
    let mut conn = server.conn().await;
    let holder = holder_client
        .fair_lock(name)
        .with_thread_wait_time(w)
        .unwrap()
        .lock()
        .await
        .unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));

    let r1 = RedissonWaiter::new(&server, name, 1, w).await;
    let r1_id = r1.id.clone();
    let r1_task = spawn_redisson_waiter(r1, "R1", order.clone());
    assert!(queue_becomes(&server, name, &[&r1_id]).await);
    let r2 = RedissonWaiter::new(&server, name, 2, w).await;
    let r2_id = r2.id.clone();
    let r2_task = spawn_redisson_waiter(r2, "R2", order.clone());
    assert!(queue_becomes(&server, name, &[&r1_id, &r2_id]).await);
    let l = waiter_client
        .fair_lock(name)
        .with_thread_wait_time(w)
        .unwrap();
    let l_task = spawn_latchkey_waiter(l, "L", order.clone());
    let l_queue = [client_of(&r1_id), client_of(&r2_id), waiter_client.id()];
    assert!(queue_clients_become(&server, name, &l_queue).await);
    let l_id = queue(&mut conn, name).await.remove(2);
    let r3 = RedissonWaiter::new(&server, name, 3, w).await;
    let r3_id = r3.id.clone();
    let r3_task = spawn_redisson_waiter(r3, "R3", order.clone());
    assert!(queue_becomes(&server, name, &[&r1_id, &r2_id, &l_id, &r3_id]).await);
    assert_chained(&deadlines(&mut conn, name).await, w);
    // L refreshes its place while it waits (every 2 s at most): the chain must survive that.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_chained(&deadlines(&mut conn, name).await, w);

    holder.unlock().await.unwrap();
    // A few ms each when the chain holds; R3 would wait for minutes otherwise.
    let bound = Duration::from_secs(10);
    served_within(r1_task, bound, "R1").await;
    served_within(r2_task, bound, "R2").await;
    served_within(l_task, bound, "L").await;
    served_within(r3_task, bound, "R3").await;
    assert_eq!(*order.lock().unwrap(), ["R1", "R2", "L", "R3"]);
    let locked: bool = conn.exists(name).await.unwrap();
    assert!(!locked, "the lock is free at the end");
    assert!(
        queue(&mut conn, name).await.is_empty(),
        "the queue is empty"
    );
    let left: bool = conn.exists(deadlines_key(name)).await.unwrap();
    assert!(!left, "no deadline left behind");
}

/// Latchkey waiters behind a Redisson holder and between Redisson waiters: each latchkey entry is
/// chained W behind the one ahead, a latchkey grant lowers the deadlines behind it by W as a
/// Redisson grant does, and everyone is served in arrival order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latchkey_waiters_keep_redisson_s_deadline_chain() {
    let server = RedisServer::spawn();
    let name = "mixed-chain";
    let w = Duration::from_secs(300);
    let a = client(&server).await;
    let b = client(&server).await;
    let mut conn = server.conn().await;
    let mut holder = RedissonWaiter::new(&server, name, 10, w).await;
    assert!(
        holder.try_acquire().await.is_none(),
        "the Java side holds the lock"
    );
    let order = Arc::new(Mutex::new(Vec::new()));

    // L1 holds the lock, once it is its turn, until told to release it.
    let l1 = a.fair_lock(name).with_thread_wait_time(w).unwrap();
    let (granted_tx, granted_rx) = tokio::sync::oneshot::channel();
    let (release_tx, release_rx) = tokio::sync::oneshot::channel::<()>();
    let l1_task = tokio::spawn({
        let order = order.clone();
        async move {
            let guard = l1.lock().await.unwrap();
            order.lock().unwrap().push("L1");
            granted_tx.send(()).unwrap();
            release_rx.await.unwrap();
            guard.unlock().await.unwrap();
        }
    });
    assert!(queue_clients_become(&server, name, &[a.id()]).await);
    let l1_id = queue(&mut conn, name).await.remove(0);
    let first = deadlines(&mut conn, name).await;
    let now = server_ms(&mut conn).await as f64;
    let lease: i64 = conn.pttl(name).await.unwrap();
    assert!(
        first[0].1 >= now + lease as f64 + w.as_millis() as f64 - 50.0,
        "the first waiter's deadline is the lock's expiry + W: {first:?}, now {now}, lease {lease}"
    );
    let r2 = RedissonWaiter::new(&server, name, 2, w).await;
    let r2_id = r2.id.clone();
    let r2_task = spawn_redisson_waiter(r2, "R2", order.clone());
    assert!(queue_becomes(&server, name, &[&l1_id, &r2_id]).await);
    let l3 = b.fair_lock(name).with_thread_wait_time(w).unwrap();
    let l3_task = spawn_latchkey_waiter(l3, "L3", order.clone());
    let l3_queue = [a.id(), client_of(&r2_id), b.id()];
    assert!(queue_clients_become(&server, name, &l3_queue).await);
    assert_eq!(
        queue(&mut conn, name).await[..2],
        [l1_id.clone(), r2_id.clone()]
    );
    let before = deadlines(&mut conn, name).await;
    assert_chained(&before, w);

    holder.unlock().await;
    tokio::time::timeout(Duration::from_secs(10), granted_rx)
        .await
        .expect("L1 was woken and took the lock")
        .unwrap();
    let r2_before: f64 = before[1].1;
    let r2_after: f64 = conn.zscore(deadlines_key(name), &r2_id).await.unwrap();
    // Within a few ms: L1's refreshes may round the lock's expiry a ms up, and R2 with it.
    let expected = r2_before - w.as_millis() as f64;
    assert!(
        (r2_after - expected).abs() <= 5.0,
        "L1's grant lowered R2's deadline by W, as a Redisson grant does: {r2_before} -> {r2_after}"
    );
    release_tx.send(()).unwrap();
    let bound = Duration::from_secs(10);
    served_within(l1_task, bound, "L1").await;
    served_within(r2_task, bound, "R2").await;
    served_within(l3_task, bound, "L3").await;
    assert_eq!(*order.lock().unwrap(), ["L1", "R2", "L3"]);
    let locked: bool = conn.exists(name).await.unwrap();
    assert!(!locked, "the lock is free at the end");
    assert!(
        queue(&mut conn, name).await.is_empty(),
        "the queue is empty"
    );
}

/// A latchkey waiter that gives up takes its link out of the chain as a Redisson waiter does:
/// the deadlines behind it go down by W, so a later Redisson newcomer is still chained right.
#[tokio::test]
async fn a_latchkey_waiter_that_gives_up_lowers_the_deadlines_behind_it() {
    let server = RedisServer::spawn();
    let name = "mixed-leave";
    let w = Duration::from_secs(300);
    let a = client(&server).await;
    let mut conn = server.conn().await;
    // A fixed lease: the lock's expiry stays put, so the quitter's refreshes do not move the
    // chain (a renewed lease would raise it, and the entries behind with it).
    let holder = a
        .fair_lock(name)
        .lock_with(LockOptions::new().lease(Duration::from_secs(60)))
        .await
        .unwrap();
    let quitter = a.fair_lock(name).with_thread_wait_time(w).unwrap();
    let quitting = tokio::spawn(async move { quitter.try_lock(Duration::from_secs(2)).await });
    assert!(queue_clients_become(&server, name, &[a.id()]).await);
    let mut java = RedissonWaiter::new(&server, name, 7, w).await;
    assert!(
        java.try_acquire().await.is_some(),
        "queued behind the quitter"
    );
    let java_before: f64 = conn.zscore(deadlines_key(name), &java.id).await.unwrap();
    assert!(quitting.await.unwrap().unwrap().is_none(), "gave up");
    assert!(queue_becomes(&server, name, &[&java.id]).await);
    let java_after: f64 = conn.zscore(deadlines_key(name), &java.id).await.unwrap();
    // Within the rounding of the server clock to whole ms between the quitter's refreshes.
    let expected = java_before - w.as_millis() as f64;
    assert!(
        (java_after - expected).abs() <= 5.0,
        "lowered by W: {java_before} -> {java_after}"
    );
    holder.unlock().await.unwrap();
}

#[tokio::test]
async fn thread_wait_time_is_checked_when_set() {
    let server = RedisServer::spawn();
    let a = client(&server).await;
    for wait in [
        Duration::ZERO,
        Duration::from_millis(299),
        latchkey_redis::MAX_LEASE * 2,
    ] {
        let err = a
            .fair_lock("bad-wait-time")
            .with_thread_wait_time(wait)
            .unwrap_err();
        assert!(
            err.is_invalid_argument() && err.to_string().contains("thread wait time"),
            "{err}"
        );
    }
    let lock = a
        .fair_lock("bad-wait-time")
        .with_thread_wait_time(Duration::from_secs(300))
        .unwrap();
    assert_eq!(lock.thread_wait_time(), Duration::from_secs(300));
    lock.lock().await.unwrap().unlock().await.unwrap();
}

/// A waiter cut off from Redis while it is queued gives up with a connection error, and its
/// leave cannot be sent; once Redis can be reached again, the client's background task sends
/// the leave again and the entry goes at once, instead of holding the queue up until its
/// deadline (a thread wait time: 30 s here). The chaos suite's Redis restarts found a fair lock
/// whose queue stood still for a minute this way.
#[tokio::test]
async fn a_waiter_cut_off_from_redis_leaves_the_queue_once_redis_is_back() {
    let server = RedisServer::spawn();
    let proxy = latchkey_test_support::FaultProxy::start(&server.addr());
    let holder = client(&server).await;
    // Its commands give up after 200 ms: the leave fails well before Redis is back.
    let cut = builder(proxy.url().as_str())
        .command_timeout(Duration::from_millis(200))
        .connect()
        .await
        .unwrap();
    let held = holder.fair_lock("cut-off").lock().await.unwrap();
    let lock = cut.fair_lock("cut-off");
    let waiting = tokio::spawn(async move {
        let options = LockOptions::new().wait(Duration::from_secs(60));
        lock.lock_with(options).await.map(drop)
    });
    assert!(queue_clients_become(&server, "cut-off", &[cut.id()]).await);

    proxy.refuse(true);
    proxy.drop_connections();
    let err = tokio::time::timeout(Duration::from_secs(20), waiting)
        .await
        .expect("the cut-off waiter gives up")
        .unwrap()
        .unwrap_err();
    assert!(err.is_connection(), "{err}");
    // Its leave could not reach Redis: the entry is still there.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(queue_clients_become(&server, "cut-off", &[cut.id()]).await);

    proxy.refuse(false);
    assert!(
        queue_becomes(&server, "cut-off", &[]).await,
        "the leave was sent again once Redis could be reached"
    );
    // The release finds nobody queued: a newcomer takes the lock at once.
    held.unlock().await.unwrap();
    let other = client(&server).await;
    assert!(other
        .fair_lock("cut-off")
        .try_lock(Duration::ZERO)
        .await
        .unwrap()
        .is_some());
}

/// A waiter whose queueing attempt was answered too late (the answer lost to the command
/// timeout, the script run all the same) leaves the queue when it gives up, as one whose answer
/// came does: its entry does not hold the queue up until its deadline (30 s here).
#[tokio::test]
async fn a_waiter_whose_answers_were_lost_leaves_the_queue_when_it_gives_up() {
    let server = RedisServer::spawn();
    let proxy = latchkey_test_support::FaultProxy::start(&server.addr());
    let holder = client(&server).await;
    let slow = builder(proxy.url().as_str())
        .command_timeout(Duration::from_millis(200))
        .connect()
        .await
        .unwrap();
    let held = holder.fair_lock("late-answers").lock().await.unwrap();
    // Every answer now comes after the command timeout: each attempt is uncertain.
    proxy.set_delay(Duration::from_millis(400));
    let err = slow
        .fair_lock("late-answers")
        .lock_with(LockOptions::new().wait(Duration::from_millis(1500)))
        .await
        .unwrap_err();
    assert!(err.is_uncertain(), "{err}");
    // The answers come in time again: the leave, sent again until then, goes through.
    proxy.set_delay(Duration::ZERO);
    assert!(
        queue_becomes(&server, "late-answers", &[]).await,
        "the waiter left the queue it had joined"
    );
    held.unlock().await.unwrap();
}

/// A waiter whose first attempt queued it but whose connection was cut before the answer came
/// (a restart, a reset) fails with a connection error and leaves the queue all the same.
#[tokio::test]
async fn a_waiter_cut_off_before_its_first_answer_leaves_the_queue() {
    let server = RedisServer::spawn();
    let proxy = latchkey_test_support::FaultProxy::start(&server.addr());
    let holder = client(&server).await;
    let cut = client(proxy.url().as_str()).await;
    let held = holder.fair_lock("first-answer").lock().await.unwrap();
    // Requests and answers each take 400 ms through the proxy: the attempt's script runs, and
    // its answer is still in the proxy when the connection is cut.
    proxy.set_delay(Duration::from_millis(400));
    let lock = cut.fair_lock("first-answer");
    let waiting = tokio::spawn(async move { lock.lock().await.map(drop) });
    let mut conn = server.conn().await;
    let queued = eventually(Duration::from_secs(10), || {
        let mut conn = conn.clone();
        async move { !queue(&mut conn, "first-answer").await.is_empty() }
    })
    .await;
    assert!(queued);
    proxy.drop_connections();
    let err = waiting.await.unwrap().unwrap_err();
    assert!(err.is_connection(), "{err}");
    assert_eq!(queue(&mut conn, "first-answer").await.len(), 1);
    // The leave goes out on a new connection (still slow, within the command timeout).
    assert!(
        queue_becomes(&server, "first-answer", &[]).await,
        "the waiter left the queue its lost attempt had put it in"
    );
    held.unlock().await.unwrap();
}
