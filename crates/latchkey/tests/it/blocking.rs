//! `latchkey::blocking` against a real redis-server: plain `#[test]` functions on plain
//! threads, as synchronous code uses it.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use latchkey::blocking::{self, Client};
use latchkey::LockOptions;
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
fn handles_and_guards_are_send_and_sync() {
    fn check<T: Send + Sync + 'static>() {}
    check::<Client>();
    check::<blocking::Lock>();
    check::<blocking::LockGuard>();
    check::<blocking::FairLock>();
    check::<blocking::FairLockGuard>();
    check::<blocking::RwLock>();
    check::<blocking::ReadLock>();
    check::<blocking::WriteLock>();
    check::<blocking::ReadGuard>();
    check::<blocking::WriteGuard>();
    check::<blocking::Semaphore>();
    check::<blocking::Permits>();
    check::<blocking::PermitSemaphore>();
    check::<blocking::LeasedPermits>();
    check::<blocking::CountDownLatch>();
    check::<blocking::MultiLock>();
    check::<blocking::MultiLockGuard>();
    check::<blocking::RedLock>();
    check::<blocking::RedLockGuard>();
    check::<blocking::DelayedQueue<String>>();
    check::<blocking::BlockingQueue<String>>();
    check::<blocking::Delivery<String>>();
}

#[test]
fn locks_and_unlocks() {
    let server = RedisServer::spawn();
    let client = client(&server);
    let lock = client.lock("orders:1");
    assert!(!lock.is_locked().unwrap());

    let guard = lock.lock().unwrap();
    assert_eq!(guard.name(), "orders:1");
    assert!(exists(&server, "orders:1"));
    assert!(lock.is_locked().unwrap());
    assert_eq!(lock.hold_count().unwrap(), 1);
    assert!(lock.remaining_lease().unwrap().is_some());
    let status = lock.status().unwrap();
    assert_eq!(status.holders.len(), 1);
    assert_eq!(status.holders[0].owner, lock.owner_id());
    assert_eq!(status.fencing_token, Some(guard.fencing_token()));
    assert_eq!(client.tracked_lock_count(), 1);

    // Another owner of the same name is excluded.
    let other = client.lock("orders:1");
    assert!(other.try_lock(Duration::ZERO).unwrap().is_none());
    let err = other
        .lock_with(LockOptions::new().wait(Duration::from_millis(50)))
        .unwrap_err();
    assert!(err.is_wait_timed_out(), "{err}");

    let first_token = guard.fencing_token();
    guard.unlock().unwrap();
    assert!(!exists(&server, "orders:1"));
    assert_eq!(client.tracked_lock_count(), 0);

    let next = other.try_lock(Duration::ZERO).unwrap().expect("free now");
    assert!(next.fencing_token() > first_token);
    next.unlock().unwrap();

    // Handles keep the client's runtime: they work with the client itself dropped.
    drop(client);
    let again = other.lock().unwrap();
    assert!(exists(&server, "orders:1"));
    again.unlock().unwrap();
}

#[test]
fn two_threads_exclude_each_other() {
    let server = RedisServer::spawn();
    let client = client(&server);
    let inside = Arc::new(AtomicBool::new(false));
    let entries = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..2)
        .map(|_| {
            // One handle (one owner) per thread.
            let lock = client.lock("counter");
            let inside = inside.clone();
            let entries = entries.clone();
            thread::spawn(move || {
                for _ in 0..15 {
                    let guard = lock.lock().unwrap();
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
    drop(lock.lock().unwrap());
    assert!(eventually(PATIENCE, || !exists(&server, "stalled")));

    let guard = lock.lock().unwrap();
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
    let guard = lock.lock().unwrap();
    // The caller's thread is blocked well past the lease; the runtime thread renews.
    thread::sleep(Duration::from_millis(2500));
    assert!(!guard.is_lost());
    assert!(exists(&server, "long-job"), "the lock expired while held");
    let other = client.lock("long-job");
    assert!(other.try_lock(Duration::ZERO).unwrap().is_none());
    guard.unlock().unwrap();
    assert!(!exists(&server, "long-job"));
}

#[test]
fn wait_lost_sees_a_force_unlocked_hold() {
    let server = RedisServer::spawn();
    let client = client(&server);
    let lock = client.lock("victim");
    let guard = lock.lock().unwrap();
    assert!(!guard.wait_lost(Duration::from_millis(100)).unwrap());
    assert!(client.lock("victim").force_unlock().unwrap());
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
    let guard = lock.lock().unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (connect_err, lock_err, unlock_err) = runtime.block_on(async {
        let connect_err = Client::connect(server.url()).unwrap_err();
        let lock_err = client.lock("other").try_lock(Duration::ZERO).unwrap_err();
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
    lock.lock().unwrap().unlock().unwrap();
}

#[test]
fn dropping_the_client_keeps_held_locks_until_their_guards_go_then_releases_them() {
    let server = RedisServer::spawn();
    let client = client(&server); // 1 s lease
    let lock = client.lock("outlived");
    let guard = lock.lock().unwrap();
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
    let guard = client.lock("stalled-exit").lock().unwrap();
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
    let guard = client.lock("async-drop").lock().unwrap();
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
    client.lock("x").lock().unwrap().unlock().unwrap();
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

#[test]
fn fair_lock_grants_in_request_order() {
    let server = RedisServer::spawn();
    let client = client(&server);
    let holder = client.fair_lock("printer").lock().unwrap();
    let (tx, rx) = mpsc::channel();
    let observer = client.fair_lock("printer");
    let mut waiters = Vec::new();
    for (who, queued) in [("b", 1), ("c", 2)] {
        let lock = client.fair_lock("printer");
        let tx = tx.clone();
        waiters.push(thread::spawn(move || {
            let guard = lock.lock().unwrap();
            tx.send(who).unwrap();
            guard.unlock().unwrap();
        }));
        assert!(
            eventually(PATIENCE, || observer.queue().unwrap().len() == queued),
            "{who} did not queue"
        );
    }
    holder.unlock().unwrap();
    let order: Vec<&str> = (0..2).map(|_| rx.recv_timeout(PATIENCE).unwrap()).collect();
    assert_eq!(order, ["b", "c"]);
    for waiter in waiters {
        waiter.join().unwrap();
    }
}

#[test]
fn read_write_lock_shares_reads_and_excludes_a_writer() {
    let server = RedisServer::spawn();
    let client = client(&server);
    let (a, b) = (client.rw_lock("cache"), client.rw_lock("cache"));
    let read_a = a.read().lock().unwrap();
    let read_b = b
        .read()
        .try_lock(Duration::ZERO)
        .unwrap()
        .expect("reads share");
    assert!(a.is_locked().unwrap());
    assert_eq!(a.read().hold_count().unwrap(), 1);
    let writer = client.rw_lock("cache");
    assert!(writer.write().try_lock(Duration::ZERO).unwrap().is_none());

    // A writer waiting in another thread gets the lock when both readers are gone.
    let waiting = thread::spawn(move || {
        let guard = writer.write().lock().unwrap();
        let token = guard.fencing_token();
        (guard, token)
    });
    read_a.unlock().unwrap();
    drop(read_b);
    let (write, _) = waiting.join().unwrap();
    assert!(a.read().try_lock(Duration::ZERO).unwrap().is_none());
    assert!(client.rw_lock("cache").write().is_locked().unwrap());
    write.unlock().unwrap();
    assert!(!a.is_locked().unwrap());
}

#[test]
fn semaphore_permits_are_taken_and_given_back() {
    let server = RedisServer::spawn();
    let client = client(&server);
    let semaphore = client.semaphore("pool");
    assert!(semaphore.try_set_permits(2).unwrap());
    let two = semaphore.acquire(2).unwrap();
    assert_eq!(two.count(), 2);
    assert_eq!(semaphore.available_permits().unwrap(), 0);
    assert!(semaphore
        .try_acquire(1, Duration::from_millis(50))
        .unwrap()
        .is_none());

    // Another thread waits for a permit; the release wakes it.
    let waiter = {
        let semaphore = semaphore.clone();
        thread::spawn(move || semaphore.acquire(1).unwrap().forget())
    };
    two.release().unwrap();
    assert_eq!(waiter.join().unwrap(), 1);
    assert_eq!(semaphore.available_permits().unwrap(), 1);
    semaphore.release(1).unwrap();
    assert_eq!(semaphore.available_permits().unwrap(), 2);

    // Dropped permits come back.
    drop(semaphore.acquire(2).unwrap());
    assert!(eventually(PATIENCE, || semaphore
        .available_permits()
        .unwrap()
        == 2));
}

#[test]
fn permit_semaphore_leases_and_gives_back_permits() {
    let server = RedisServer::spawn();
    let client = client(&server);
    let slots = client.permit_semaphore("slots");
    assert!(slots.try_set_permits(1).unwrap());
    let permits = slots.acquire(1).unwrap();
    assert_eq!(permits.ids().len(), 1);
    assert_eq!(slots.leased().unwrap(), 1);
    assert!(slots.try_acquire(1, Duration::ZERO).unwrap().is_none());
    // The lease (the 1 s watchdog timeout) is renewed while the caller sleeps past it.
    thread::sleep(Duration::from_millis(1500));
    assert!(!permits.is_lost());
    assert!(!permits.wait_lost(Duration::from_millis(50)).unwrap());
    assert_eq!(slots.available_permits().unwrap(), 0);
    permits.release().unwrap();
    assert_eq!(slots.leased().unwrap(), 0);

    let ids = slots.acquire(1).unwrap().forget();
    assert_eq!(slots.available_permits().unwrap(), 0);
    slots.release(&ids).unwrap();
    assert_eq!(slots.available_permits().unwrap(), 1);
}

#[test]
fn latch_counted_down_by_other_threads_opens() {
    let server = RedisServer::spawn();
    let client = client(&server);
    let latch = client.count_down_latch("ready");
    assert!(latch.try_set_count(3).unwrap());
    assert!(!latch.wait_for(Duration::from_millis(50)).unwrap());
    let workers: Vec<_> = (0..3)
        .map(|i| {
            let latch = latch.clone();
            thread::spawn(move || {
                thread::sleep(Duration::from_millis(20 * i));
                latch.count_down().unwrap()
            })
        })
        .collect();
    latch.wait().unwrap();
    assert_eq!(latch.count().unwrap(), 0);
    let mut left: Vec<u64> = workers.into_iter().map(|w| w.join().unwrap()).collect();
    left.sort_unstable();
    assert_eq!(left, [0, 1, 2]);
}

#[test]
fn queues_offer_poll_ack_and_redeliver() {
    let server = RedisServer::spawn();
    let client = Client::from_builder(builder(&server)).expect("connect");
    let delayed = client.delayed_queue::<String>("jobs");
    let queue = client.blocking_queue::<String>("jobs");

    let id = delayed
        .offer(&"later".to_owned(), Duration::from_millis(200))
        .unwrap();
    assert_eq!(delayed.len().unwrap(), 1);
    assert_eq!(delayed.pending(10).unwrap()[0].id, id);
    assert!(queue.poll(Duration::ZERO).unwrap().is_none(), "not due yet");
    let delivery = queue.poll_reliable(PATIENCE).unwrap().expect("due");
    assert_eq!(*delivery, "later");
    assert_eq!(delivery.id(), &id);
    assert_eq!(delivery.attempt(), 1);
    assert_eq!(queue.in_flight().unwrap(), 1);
    assert!(delivery.ack().unwrap().is_acked());
    assert_eq!(queue.in_flight().unwrap(), 0);
    assert!(delayed.is_empty().unwrap());

    // A nacked item comes back; a dropped delivery too.
    queue.put(&"retry".to_owned()).unwrap();
    let first = queue.take_reliable().unwrap();
    assert!(first.nack().unwrap().is_released());
    let second = queue.take_reliable().unwrap();
    assert_eq!(second.attempt(), 2);
    drop(second);
    let third = queue
        .poll_reliable(PATIENCE)
        .unwrap()
        .expect("given back on drop");
    assert_eq!((third.item().as_str(), third.attempt()), ("retry", 3));
    assert!(third.ack().unwrap().is_acked());

    // Plain take from another thread, woken by a put.
    let taker = {
        let queue = queue.clone();
        thread::spawn(move || queue.take().unwrap())
    };
    thread::sleep(Duration::from_millis(50));
    queue.put(&"hello".to_owned()).unwrap();
    assert_eq!(taker.join().unwrap(), "hello");
    assert!(queue.is_empty().unwrap());
}

#[test]
fn multi_lock_holds_all_or_none() {
    let server = RedisServer::spawn();
    let client = client(&server);
    let both = blocking::MultiLock::new([client.lock("a"), client.lock("b")]).unwrap();
    assert!(blocking::MultiLock::new([])
        .unwrap_err()
        .is_invalid_argument());
    let guard = both.lock().unwrap();
    assert_eq!(guard.fencing_tokens().len(), 2);
    assert!(exists(&server, "a") && exists(&server, "b"));
    assert!(client.lock("b").try_lock(Duration::ZERO).unwrap().is_none());
    guard.unlock().unwrap();
    assert!(!exists(&server, "a") && !exists(&server, "b"));

    // Busy `b`: a bounded wait gives up and leaves `a` free.
    let b = client.lock("b").lock().unwrap();
    assert!(both.try_lock(Duration::from_millis(100)).unwrap().is_none());
    assert!(!exists(&server, "a"));
    drop(b);
}

#[test]
fn redlock_over_three_servers() {
    let servers = RedisServers::spawn(3);
    let nodes: Vec<Client> = servers
        .urls()
        .iter()
        .map(|url| {
            Client::from_builder(builder(url).watchdog_timeout(Duration::from_secs(1))).unwrap()
        })
        .collect();
    let lock = blocking::RedLock::builder("report", nodes)
        .per_node_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    assert_eq!((lock.node_count(), lock.quorum()), (3, 2));
    let guard = lock.lock().unwrap();
    let granted = guard.nodes();
    assert!(granted.len() >= lock.quorum(), "{granted:?}");
    assert!(guard.fencing_token().is_some());
    // Renewed past the 1 s lease while this thread sleeps.
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
