//! `latchkey_redis::blocking` against a real redis-server: plain `#[test]` functions on plain
//! threads, as synchronous code uses it.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use latchkey_redis::blocking::{self, Client};
use latchkey_redis::LockOptions;
use latchkey_test_support::{RedisServer, RedisServers};
use redis::Value;

use crate::helpers::builder;

/// How long a test waits for something that should happen soon.
const PATIENCE: Duration = Duration::from_secs(10);

/// A blocking client with the lock tests' 1 s watchdog timeout.
fn client(server: &RedisServer) -> Client {
    Client::from_builder(builder(server).watchdog_timeout(Duration::from_secs(1))).expect("connect")
}

/// Whether `key` exists, read on a connection of its own.
fn exists(server: &RedisServer, key: &str) -> bool {
    server.cmd_sync(&["EXISTS", key]) == Value::Int(1)
}

/// Whether `check` becomes true within `within` (checked every 10 ms).
fn eventually(within: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if check() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn the_client_and_its_guards_are_send_and_sync() {
    fn check<T: Send + Sync + 'static>() {}
    check::<Client>();
    check::<blocking::Guard<latchkey_redis::LockGuard>>();
    check::<blocking::Guard<latchkey_redis::LeasedPermits>>();
    check::<blocking::Guard<latchkey_redis::Delivery<String>>>();
}

#[test]
fn locks_and_unlocks() {
    let server = RedisServer::spawn();
    let client = client(&server);
    let lock = client.lock("orders:1");
    assert!(!client.run(lock.is_locked()).unwrap());

    let guard = client.hold(lock.lock()).unwrap();
    assert_eq!(latchkey_redis::Guard::name(&*guard), "orders:1");
    assert!(exists(&server, "orders:1"));
    assert!(client.run(lock.is_locked()).unwrap());
    assert!(client.run(lock.remaining_lease()).unwrap().is_some());
    let status = client.run(lock.status()).unwrap();
    assert_eq!(status.holders.len(), 1);
    assert_eq!(status.holders[0].owner, guard.owner_id());
    assert_eq!(status.fencing_token, Some(guard.fencing_token()));
    assert_eq!(client.tracked_lock_count(), 1);

    // Another acquire through the same handle is another owner: excluded.
    assert!(client
        .try_hold(lock.try_lock(Duration::ZERO))
        .unwrap()
        .is_none());
    let err = client
        .hold(lock.lock_with(LockOptions::new().wait(Duration::from_millis(50))))
        .unwrap_err();
    assert!(err.is_wait_timed_out(), "{err}");

    let first_token = guard.fencing_token();
    guard.unlock().unwrap();
    assert!(!exists(&server, "orders:1"));
    assert_eq!(client.tracked_lock_count(), 0);

    let next = client
        .try_hold(lock.try_lock(Duration::ZERO))
        .unwrap()
        .expect("free now");
    assert!(next.fencing_token() > first_token);
    next.unlock().unwrap();
}

#[test]
fn two_threads_exclude_each_other_through_one_handle() {
    let server = RedisServer::spawn();
    let client = client(&server);
    let lock = client.lock("counter");
    let inside = Arc::new(AtomicBool::new(false));
    let entries = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..2)
        .map(|_| {
            // Clones of one client and one handle: every acquire is an owner of its own.
            let (client, lock) = (client.clone(), lock.clone());
            let inside = inside.clone();
            let entries = entries.clone();
            thread::spawn(move || {
                for _ in 0..15 {
                    let guard = client.hold(lock.lock()).unwrap();
                    assert!(
                        !inside.swap(true, Ordering::SeqCst),
                        "two threads in the critical section"
                    );
                    entries.fetch_add(1, Ordering::SeqCst);
                    thread::sleep(Duration::from_millis(2));
                    inside.store(false, Ordering::SeqCst);
                    guard.unlock().unwrap();
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    assert_eq!(entries.load(Ordering::SeqCst), 30);
    assert!(!exists(&server, "counter"));
}

#[test]
fn a_dropped_guard_is_released_and_the_drop_does_not_wait_for_a_stalled_server() {
    let server = RedisServer::spawn();
    // The default 30 s lease: the lock is free again within the test only if it is released.
    let client = Client::from_builder(builder(&server).command_timeout(Duration::from_secs(3)))
        .expect("connect");
    let lock = client.lock("stalled");

    // Unstalled first: dropping the guard frees the lock for the next owner.
    drop(client.hold(lock.lock()).unwrap());
    assert!(eventually(PATIENCE, || !exists(&server, "stalled")));

    let guard = client.hold(lock.lock()).unwrap();
    server.pause_process();
    let started = Instant::now();
    drop(guard);
    let took = started.elapsed();
    thread::sleep(Duration::from_millis(200));
    server.resume_process();
    assert!(
        took < Duration::from_secs(1),
        "dropping the guard waited {took:?} for a stalled server (command timeout 3 s)"
    );
    assert!(
        eventually(PATIENCE, || !exists(&server, "stalled")),
        "the release handed over on drop was not made"
    );
}

#[test]
fn the_watchdog_renews_while_the_caller_sleeps() {
    let server = RedisServer::spawn();
    let client = client(&server); // 1 s lease, renewed every third of it
    let lock = client.lock("long-job");
    let guard = client.hold(lock.lock()).unwrap();
    // The caller's thread is blocked well past the lease; the runtime thread renews.
    thread::sleep(Duration::from_millis(2500));
    assert!(!guard.is_lost());
    assert!(exists(&server, "long-job"), "the lock expired while held");
    assert!(client
        .try_hold(lock.try_lock(Duration::ZERO))
        .unwrap()
        .is_none());
    guard.unlock().unwrap();
    assert!(!exists(&server, "long-job"));
}

#[test]
fn wait_lost_sees_a_force_unlocked_hold() {
    let server = RedisServer::spawn();
    let client = client(&server);
    let lock = client.lock("victim");
    let guard = client.hold(lock.lock()).unwrap();
    assert!(!guard.wait_lost(Duration::from_millis(100)).unwrap());
    assert!(client.run(lock.force_unlock()).unwrap());
    assert!(guard.wait_lost(PATIENCE).unwrap(), "the loss was not seen");
    assert!(guard.is_lost());
    let err = guard.unlock().unwrap_err();
    assert!(err.is_not_owner(), "{err}");
}

#[test]
fn a_call_inside_a_tokio_runtime_is_refused_with_a_config_error() {
    let server = RedisServer::spawn();
    let client = client(&server);
    let lock = client.lock("inside");
    let guard = client.hold(lock.lock()).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (connect_err, lock_err, unlock_err) = runtime.block_on(async {
        let connect_err = Client::connect(server.url()).unwrap_err();
        let lock_err = client
            .try_hold(client.lock("other").try_lock(Duration::ZERO))
            .unwrap_err();
        // Refused too; the guard is dropped, which hands its release to the client's runtime.
        let unlock_err = guard.unlock().unwrap_err();
        (connect_err, lock_err, unlock_err)
    });
    for err in [&connect_err, &lock_err, &unlock_err] {
        assert!(err.is_config(), "{err:?}");
        let message = err.to_string();
        assert!(
            message.contains("inside a Tokio runtime") && message.contains("async API"),
            "{message}"
        );
    }
    assert!(!exists(&server, "other"), "a refused call acquired");
    assert!(
        eventually(PATIENCE, || !exists(&server, "inside")),
        "the guard of a refused unlock was not released"
    );
    // Outside the runtime the same handles work.
    client.hold(lock.lock()).unwrap().unlock().unwrap();
}

#[test]
fn dropping_the_client_keeps_held_locks_until_their_guards_go_then_releases_them() {
    let server = RedisServer::spawn();
    let client = client(&server); // 1 s lease
    let lock = client.lock("outlived");
    let guard = client.hold(lock.lock()).unwrap();
    drop(lock);
    drop(client);
    // The guard keeps the runtime: the lock stays held and renewed past its lease.
    thread::sleep(Duration::from_millis(1500));
    assert!(!guard.is_lost());
    assert!(exists(&server, "outlived"));
    // The last value of the client: its drop hands the release over, and waits for it before
    // the runtime stops. The lock is free when the drop returns, not when its lease runs out.
    drop(guard);
    assert!(
        !exists(&server, "outlived"),
        "the release was stranded by the runtime's shutdown"
    );
}

#[test]
fn the_last_drop_waits_for_a_stalled_server_at_most_the_command_timeout() {
    let server = RedisServer::spawn();
    let client = Client::from_builder(builder(&server).command_timeout(Duration::from_secs(1)))
        .expect("connect");
    let guard = client.hold(client.lock("stalled-exit").lock()).unwrap();
    server.pause_process();
    drop(guard); // handed over; its release cannot be answered
    let started = Instant::now();
    drop(client);
    let took = started.elapsed();
    server.resume_process();
    // Bounded by the command timeout (1 s) plus the one-second margin, with slack for a loaded
    // machine: a stalled server does not hang the program's exit.
    assert!(
        took < Duration::from_secs(5),
        "the last drop waited {took:?} for a stalled server"
    );
}

/// The last drop made in async code (a blocking client moved into a task) does not hold up
/// that runtime's thread while the releases finish: a thread of its own waits for them, and
/// the release still reaches Redis once the server answers again.
#[test]
fn the_last_drop_in_async_code_does_not_block_the_runtime_thread() {
    let server = RedisServer::spawn();
    let client = Client::from_builder(builder(&server).command_timeout(Duration::from_secs(10)))
        .expect("connect");
    let guard = client.hold(client.lock("async-drop").lock()).unwrap();
    server.pause_process();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let took = runtime.block_on(async move {
        let started = Instant::now();
        drop(guard);
        drop(client);
        started.elapsed()
    });
    server.resume_process();
    // Waiting in place would have taken the 10 s command timeout with the server stalled.
    assert!(
        took < Duration::from_secs(5),
        "the drop held the runtime's thread for {took:?}"
    );
    let mut conn = redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let released = (0..100).any(|_| {
        let exists: bool = redis::Commands::exists(&mut conn, "async-drop").unwrap();
        if exists {
            std::thread::sleep(Duration::from_millis(100));
        }
        !exists
    });
    assert!(
        released,
        "the release handed over before the drop reached Redis"
    );
}

#[test]
fn an_idle_client_drops_without_waiting_out_the_command_timeout() {
    let server = RedisServer::spawn();
    let client = Client::from_builder(builder(&server).command_timeout(Duration::from_secs(5)))
        .expect("connect");
    client
        .hold(client.lock("x").lock())
        .unwrap()
        .unlock()
        .unwrap();
    let started = Instant::now();
    drop(client);
    let took = started.elapsed();
    // The drop waits for the runtime's tasks, which all stop with the client; waiting out the
    // drain bound (the 5 s command timeout + 1 s) would mean a task outlived its client.
    assert!(
        took < Duration::from_secs(4),
        "dropping an idle client took {took:?}"
    );
}

/// The other primitives through `run`, `hold` and `consume`: the async API, unchanged.
#[test]
fn every_primitive_runs_through_the_thin_layer() {
    let server = RedisServer::spawn();
    let client = client(&server);

    // Fair lock: waiters in other threads get it in request order.
    let fair = client.fair_lock("printer");
    let holder = client.hold(fair.lock()).unwrap();
    let (tx, rx) = mpsc::channel();
    let mut waiters = Vec::new();
    for (who, queued) in [("b", 1), ("c", 2)] {
        let (waiter, fair, tx) = (client.clone(), fair.clone(), tx.clone());
        waiters.push(thread::spawn(move || {
            let guard = waiter.hold(fair.lock()).unwrap();
            tx.send(who).unwrap();
            guard.unlock().unwrap();
        }));
        let observer = client.fair_lock("printer");
        assert!(
            eventually(PATIENCE, || client.run(observer.queue()).unwrap().len()
                == queued),
            "{who} did not queue"
        );
    }
    holder.unlock().unwrap();
    let order: Vec<&str> = (0..2).map(|_| rx.recv_timeout(PATIENCE).unwrap()).collect();
    assert_eq!(order, ["b", "c"]);
    for waiter in waiters {
        waiter.join().unwrap();
    }

    // Read-write lock: reads share, a write waits; a downgrade keeps the lock read.
    let cache = client.rw_lock("cache");
    let read = client.hold(cache.read().lock()).unwrap();
    let shared = client.hold(cache.read().lock()).unwrap();
    assert!(client
        .try_hold(cache.write().try_lock(Duration::ZERO))
        .unwrap()
        .is_none());
    read.unlock().unwrap();
    drop(shared);
    let write = client.hold(cache.write().lock()).unwrap();
    let read = client.guard(write.consume(|w| w.downgrade()).unwrap());
    assert!(!client.run(cache.write().is_locked()).unwrap());
    read.unlock().unwrap();
    assert!(!client.run(cache.is_locked()).unwrap());

    // Semaphores: permits come back on release and on drop.
    let pool = client.semaphore("pool");
    assert!(client.run(pool.try_set_permits(2)).unwrap());
    let two = client.hold(pool.acquire(2)).unwrap();
    assert_eq!(two.count(), 2);
    assert!(client
        .try_hold(pool.try_acquire(1, Duration::ZERO))
        .unwrap()
        .is_none());
    two.unlock().unwrap();
    drop(client.hold(pool.acquire(2)).unwrap());
    assert!(eventually(PATIENCE, || client
        .run(pool.available_permits())
        .unwrap()
        == 2));
    let slots = client.permit_semaphore("slots");
    assert!(client.run(slots.try_set_permits(1)).unwrap());
    let leased = client.hold(slots.acquire(1)).unwrap();
    assert!(!leased.wait_lost(Duration::from_millis(50)).unwrap());
    leased.unlock().unwrap();
    assert_eq!(client.run(slots.leased()).unwrap(), 0);

    // A latch counted down by other threads.
    let latch = client.count_down_latch("ready");
    assert!(client.run(latch.try_set_count(2)).unwrap());
    for _ in 0..2 {
        let (client, latch) = (client.clone(), latch.clone());
        thread::spawn(move || client.run(latch.count_down()).unwrap());
    }
    client.run(latch.wait()).unwrap();

    // Queues: a delivery is a held value; acking consumes it.
    let queue = client.blocking_queue::<String>("jobs");
    client.run(queue.put(&"hello".to_owned())).unwrap();
    let delivery = client.hold(queue.take()).unwrap();
    assert_eq!(delivery.item(), "hello");
    assert!(delivery.consume(|d| d.ack()).unwrap().is_acked());

    // A multi-lock over two names.
    let both = latchkey_redis::MultiLock::new([client.lock("a"), client.lock("b")]).unwrap();
    let guard = client.hold(both.lock()).unwrap();
    assert!(exists(&server, "a") && exists(&server, "b"));
    guard.unlock().unwrap();
    assert!(!exists(&server, "a") && !exists(&server, "b"));
}

/// RedLock nodes connected on one blocking client's runtime: one runtime thread serves them
/// all, and the guard keeps it alive.
#[test]
fn redlock_nodes_share_one_runtime() {
    let servers = RedisServers::spawn(3);
    let first = client(&servers[0]);
    let nodes: Vec<latchkey_redis::Client> = servers
        .urls()
        .iter()
        .map(|url| {
            first
                .run(
                    builder(url)
                        .watchdog_timeout(Duration::from_secs(1))
                        .connect(),
                )
                .unwrap()
        })
        .collect();
    let lock = latchkey_redis::RedLock::builder("report", nodes)
        .per_node_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let guard = first.hold(lock.lock()).unwrap();
    let granted = guard.nodes();
    assert!(granted.len() >= lock.quorum(), "{granted:?}");
    drop(first);
    // Renewed past the 1 s lease while this thread sleeps, on the runtime the guard keeps.
    thread::sleep(Duration::from_millis(1500));
    assert!(!guard.is_lost());
    for &node in &granted {
        assert!(
            exists(&servers[node], "report"),
            "node {node} lost the lock"
        );
    }
    guard.unlock().unwrap();
    for server in servers.iter() {
        assert!(!exists(server, "report"));
    }
}
