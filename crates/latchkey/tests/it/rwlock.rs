//! The read-write lock against a real redis-server.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use latchkey_redis::LockOptions;
use latchkey_test_support::RedisServer;
use redis::AsyncCommands;

use crate::helpers::{client, eventually};

fn writers_key(name: &str) -> String {
    format!("latchkey_rwlock_writers:{{{name}}}")
}

fn lease_key(name: &str, owner: &str, i: u32) -> String {
    format!("{{{name}}}:{owner}:rwlock_timeout:{i}")
}

async fn fields(
    conn: &mut redis::aio::MultiplexedConnection,
    name: &str,
) -> HashMap<String, String> {
    conn.hgetall(name).await.unwrap()
}

/// Waits until `count` writers are marked pending on `name`.
async fn pending_writers_become(server: &RedisServer, name: &str, count: usize) -> bool {
    let conn = server.conn().await;
    eventually(Duration::from_secs(10), || {
        let mut conn = conn.clone();
        async move {
            let n: usize = conn.zcard(writers_key(name)).await.unwrap();
            n == count
        }
    })
    .await
}

#[tokio::test]
async fn readers_share_and_a_writer_excludes_everybody() {
    let server = RedisServer::spawn();
    let clients = [
        client(&server).await,
        client(&server).await,
        client(&server).await,
    ];
    let other = client(&server).await;
    let mut readers = Vec::new();
    for c in &clients {
        readers.push(c.rw_lock("doc").read().lock().await.unwrap());
    }
    let rw = other.rw_lock("doc");
    assert!(rw.is_locked().await.unwrap());
    assert!(!rw.write().is_locked().await.unwrap());
    assert!(rw.write().try_lock(Duration::ZERO).await.unwrap().is_none());
    for r in readers {
        r.unlock().await.unwrap();
    }
    assert!(
        !rw.is_locked().await.unwrap(),
        "the last reader deleted the key"
    );

    let writer = rw.write().lock().await.unwrap();
    assert!(rw.write().is_locked().await.unwrap());
    for c in &clients {
        let peer = c.rw_lock("doc");
        assert!(peer
            .read()
            .try_lock(Duration::ZERO)
            .await
            .unwrap()
            .is_none());
        assert!(peer
            .write()
            .try_lock(Duration::ZERO)
            .await
            .unwrap()
            .is_none());
    }
    writer.unlock().await.unwrap();
    assert!(!rw.is_locked().await.unwrap());
    for c in &clients {
        assert_eq!(c.tracked_lock_count(), 0);
    }
    assert_eq!(other.tracked_lock_count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_and_writers_under_contention_never_overlap_wrongly() {
    let server = RedisServer::spawn();
    const ROUNDS: u64 = 8;
    let readers_in = Arc::new(AtomicUsize::new(0));
    let writers_in = Arc::new(AtomicUsize::new(0));
    let max_readers = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..3 {
        let client = client(&server).await;
        // A writer: non-atomic increments, only the write lock keeps them exact.
        let rw = client.rw_lock("contended");
        let mut conn = server.conn().await;
        let (readers_in_w, writers_in_w) = (readers_in.clone(), writers_in.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let guard = rw.write().lock().await.unwrap();
                assert_eq!(writers_in_w.fetch_add(1, Ordering::SeqCst), 0, "one writer");
                assert_eq!(
                    readers_in_w.load(Ordering::SeqCst),
                    0,
                    "no reader with a writer"
                );
                let v: Option<u64> = conn.get("counter").await.unwrap();
                tokio::task::yield_now().await;
                let _: () = conn.set("counter", v.unwrap_or(0) + 1).await.unwrap();
                writers_in_w.fetch_sub(1, Ordering::SeqCst);
                guard.unlock().await.unwrap();
            }
        }));
        // Two readers: the value does not change while they read.
        for _ in 0..2 {
            let rw = client.rw_lock("contended");
            let mut conn = server.conn().await;
            let (readers_in, writers_in, max_readers) =
                (readers_in.clone(), writers_in.clone(), max_readers.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..ROUNDS {
                    let guard = rw.read().lock().await.unwrap();
                    let now_in = readers_in.fetch_add(1, Ordering::SeqCst) + 1;
                    max_readers.fetch_max(now_in, Ordering::SeqCst);
                    assert_eq!(
                        writers_in.load(Ordering::SeqCst),
                        0,
                        "no writer with readers"
                    );
                    let before: Option<u64> = conn.get("counter").await.unwrap();
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    let after: Option<u64> = conn.get("counter").await.unwrap();
                    assert_eq!(before, after, "nobody wrote during a read");
                    readers_in.fetch_sub(1, Ordering::SeqCst);
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
    assert_eq!(v, 3 * ROUNDS);
    let exists: bool = conn.exists("contended").await.unwrap();
    assert!(!exists, "the lock key is gone after the last unlock");
    let marks: bool = conn.exists(writers_key("contended")).await.unwrap();
    assert!(!marks, "no pending writer left behind");
}

/// Both sides re-enter with `reenter()`: one hold (a count of 1 in Redis, one lease key for a
/// read), released by its last guard. Another acquire through the same handle or a clone is an
/// owner of its own: a second reader beside the first, but a writer is excluded.
#[tokio::test]
async fn both_sides_reenter_in_redissons_layout() {
    let server = RedisServer::spawn();
    let a = client(&server).await;
    let b = client(&server).await;
    let mut conn = server.conn().await;
    let rw = a.rw_lock("layout");

    let r1 = rw.read().lock().await.unwrap();
    let owner = r1.owner_id().to_owned();
    assert_eq!(owner.rsplit_once(':').unwrap().0, a.id());
    let r2 = r1.reenter();
    assert_eq!(r2.owner_id(), owner);
    let f = fields(&mut conn, "layout").await;
    assert_eq!(f.get("mode").map(String::as_str), Some("read"));
    assert_eq!(f.get(&owner).map(String::as_str), Some("1"));
    let ttl: i64 = conn.pttl(lease_key("layout", &owner, 1)).await.unwrap();
    assert!(ttl > 0 && ttl <= 1000, "the read hold has its lease: {ttl}");
    let second: bool = conn.exists(lease_key("layout", &owner, 2)).await.unwrap();
    assert!(!second, "re-entry takes no second hold in Redis");
    // Another read through a clone of the handle is another owner, reading beside the first.
    let r3 = rw.clone().read().lock().await.unwrap();
    assert_ne!(r3.owner_id(), owner);
    let f = fields(&mut conn, "layout").await;
    assert_eq!(f.get(r3.owner_id()).map(String::as_str), Some("1"));
    r3.unlock().await.unwrap();
    r2.unlock().await.unwrap();
    let kept: bool = conn.exists(lease_key("layout", &owner, 1)).await.unwrap();
    assert!(kept, "the hold lasts until its last guard is released");
    assert!(rw.is_locked().await.unwrap());
    r1.unlock().await.unwrap();
    assert!(!rw.is_locked().await.unwrap());

    let w1 = rw.write().lock().await.unwrap();
    let w2 = w1.reenter();
    assert_eq!(
        w1.fencing_token(),
        w2.fencing_token(),
        "re-entry keeps the token"
    );
    assert!(w1.owner_id().ends_with(":write"), "{}", w1.owner_id());
    let f = fields(&mut conn, "layout").await;
    assert_eq!(f.get("mode").map(String::as_str), Some("write"));
    assert_eq!(f.get(w1.owner_id()).map(String::as_str), Some("1"));
    // Another acquire through the same handle or a clone is excluded, read or write.
    assert!(rw.write().try_lock(Duration::ZERO).await.unwrap().is_none());
    assert!(rw
        .clone()
        .write()
        .try_lock(Duration::ZERO)
        .await
        .unwrap()
        .is_none());
    assert!(rw.read().try_lock(Duration::ZERO).await.unwrap().is_none());
    w2.unlock().await.unwrap();
    assert!(b
        .rw_lock("layout")
        .read()
        .try_lock(Duration::ZERO)
        .await
        .unwrap()
        .is_none());
    let token = w1.fencing_token();
    w1.unlock().await.unwrap();
    assert!(!rw.is_locked().await.unwrap());

    // Reads see the latest write token; the next write gets a larger one.
    let read = b.rw_lock("layout").read().lock().await.unwrap();
    assert_eq!(read.fencing_token(), token);
    read.unlock().await.unwrap();
    let next = b.rw_lock("layout").write().lock().await.unwrap();
    assert!(next.fencing_token() > token);
    next.unlock().await.unwrap();
    // The fencing counter outlives the holds by the lease (1 s) + 60 s, then expires.
    let ttl: i64 = conn.pttl("latchkey_rwlock_token:{layout}").await.unwrap();
    assert!(
        ttl > 55_000 && ttl <= 61_000,
        "the counter expires in {ttl} ms"
    );
    assert_eq!(a.tracked_lock_count(), 0);
    assert_eq!(b.tracked_lock_count(), 0);
}

/// The writer downgrades its hold to a read hold without letting go (no other acquire, of the
/// same handle or not, gets in meanwhile); readers then join, a writer still waits.
#[tokio::test]
async fn a_writer_may_downgrade_and_readers_join_after_it() {
    let server = RedisServer::spawn();
    let a = client(&server).await;
    let b = client(&server).await;
    let mut conn = server.conn().await;
    let rw = a.rw_lock("downgrade");
    let other = b.rw_lock("downgrade");

    let write = rw.write().lock().await.unwrap();
    let token = write.fencing_token();
    let owner = write.owner_id().strip_suffix(":write").unwrap().to_owned();
    // A read is another acquire, even through the writer's own handle: excluded.
    assert!(rw.read().try_lock(Duration::ZERO).await.unwrap().is_none());
    assert!(other
        .read()
        .try_lock(Duration::ZERO)
        .await
        .unwrap()
        .is_none());
    let read = write.downgrade().await.unwrap();
    assert_eq!(read.owner_id(), owner, "the writer's own read hold");
    assert_eq!(
        read.fencing_token(),
        token,
        "a read's token is the last writer's"
    );
    assert!(!read.is_lost());
    let f = fields(&mut conn, "downgrade").await;
    assert_eq!(
        f.get("mode").map(String::as_str),
        Some("read"),
        "downgraded: {f:?}"
    );
    assert_eq!(f.get(&owner).map(String::as_str), Some("1"));
    assert!(
        !f.contains_key(&format!("{owner}:write")),
        "the write hold is gone: {f:?}"
    );
    let joined = other
        .read()
        .try_lock(Duration::ZERO)
        .await
        .unwrap()
        .expect("readers join a downgraded lock");
    let third = b.rw_lock("downgrade");
    assert!(third
        .write()
        .try_lock(Duration::ZERO)
        .await
        .unwrap()
        .is_none());
    read.unlock().await.unwrap();
    joined.unlock().await.unwrap();
    assert!(!rw.is_locked().await.unwrap());
    assert_eq!(a.tracked_lock_count(), 0);
}

/// Upgrades are not detected: a write asked for while the same process holds a read waits for
/// that read like any other (as tokio's `RwLock` does). A write that may not wait is refused and
/// changes nothing; a waiting one gets the lock once the read is released.
#[tokio::test]
async fn a_write_waits_for_a_read_held_by_the_same_process() {
    let server = RedisServer::spawn();
    let a = client(&server).await;
    let mut conn = server.conn().await;
    let rw = a.rw_lock("upgrade");
    let read = rw.read().lock().await.unwrap();
    let before = fields(&mut conn, "upgrade").await;
    assert!(rw.write().try_lock(Duration::ZERO).await.unwrap().is_none());
    assert!(
        pending_writers_become(&server, "upgrade", 0).await,
        "no pending mark"
    );
    assert_eq!(fields(&mut conn, "upgrade").await, before);
    // A write that may wait does, and gets the lock once the read is released.
    let writer = tokio::spawn({
        let rw = rw.clone();
        async move { rw.write().lock().await.unwrap() }
    });
    assert!(pending_writers_become(&server, "upgrade", 1).await);
    assert!(!writer.is_finished(), "the write waits for the read");
    read.unlock().await.unwrap();
    let write = tokio::time::timeout(Duration::from_secs(10), writer)
        .await
        .expect("the write got the lock once the read was released")
        .unwrap();
    write.unlock().await.unwrap();
    // A read guard that was just dropped (its release still on the way) is waited for.
    for _ in 0..20 {
        let read = rw.read().lock().await.unwrap();
        drop(read);
        let write = rw.write().lock().await.unwrap();
        write.unlock().await.unwrap();
    }
}

#[tokio::test]
async fn a_crashed_reader_does_not_pin_the_lock() {
    let server = RedisServer::spawn();
    let a = client(&server).await;
    let b = client(&server).await;
    let c = client(&server).await;
    let mut conn = server.conn().await;

    // A reader with a short lease vanishes without unlocking.
    let crashed = a.rw_lock("pinned");
    let guard = crashed
        .read()
        .lock_with(LockOptions::new().lease(Duration::from_millis(400)))
        .await
        .unwrap();
    let crashed_owner = guard.owner_id().to_owned();
    std::mem::forget(guard);
    // A live reader keeps reading, renewed by its watchdog well past the crashed one's lease.
    let live = b.rw_lock("pinned").read().lock().await.unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let gone: bool = conn
        .exists(lease_key("pinned", &crashed_owner, 1))
        .await
        .unwrap();
    assert!(
        !gone,
        "the live reader's renewals did not extend the crashed reader's lease"
    );
    assert!(!live.is_lost());

    // A writer waits for the live reader only.
    let writer = tokio::spawn({
        let rw = c.rw_lock("pinned");
        async move { rw.write().lock().await.unwrap() }
    });
    assert!(pending_writers_become(&server, "pinned", 1).await);
    let f = fields(&mut conn, "pinned").await;
    assert!(
        !f.contains_key(&crashed_owner),
        "the crashed reader was dropped: {f:?}"
    );
    live.unlock().await.unwrap();
    let w = tokio::time::timeout(Duration::from_secs(30), writer)
        .await
        .expect("the writer got the lock")
        .unwrap();
    w.unlock().await.unwrap();
}

#[tokio::test]
async fn the_watchdog_renews_read_and_write_holds() {
    let server = RedisServer::spawn();
    let a = client(&server).await; // watchdog timeout 1 s
    let b = client(&server).await;
    let mut conn = server.conn().await;
    let rw = a.rw_lock("renewed");

    let read = rw.read().lock().await.unwrap();
    let owner = read.owner_id().to_owned();
    tokio::time::sleep(Duration::from_millis(3500)).await;
    assert!(!read.is_lost());
    let ttl: i64 = conn.pttl(lease_key("renewed", &owner, 1)).await.unwrap();
    assert!(ttl > 0 && ttl <= 1000, "read lease renewed: {ttl}");
    assert!(b
        .rw_lock("renewed")
        .write()
        .try_lock(Duration::ZERO)
        .await
        .unwrap()
        .is_none());
    read.unlock().await.unwrap();

    let write = rw.write().lock().await.unwrap();
    tokio::time::sleep(Duration::from_millis(3500)).await;
    assert!(!write.is_lost());
    let f = fields(&mut conn, "renewed").await;
    assert_eq!(f.get(write.owner_id()).map(String::as_str), Some("1"));
    assert!(b
        .rw_lock("renewed")
        .read()
        .try_lock(Duration::ZERO)
        .await
        .unwrap()
        .is_none());
    write.unlock().await.unwrap();
    assert_eq!(a.tracked_lock_count(), 0);
    assert!(!rw.is_locked().await.unwrap());
}

#[tokio::test]
async fn lost_fires_for_read_and_write_holds_that_are_forced_away() {
    let server = RedisServer::spawn();
    let a = client(&server).await;
    let b = client(&server).await;
    let mut conn = server.conn().await;
    let rw = a.rw_lock("forced");
    let read = rw.read().lock().await.unwrap();
    let owner = read.owner_id().to_owned();
    let lost = read.lost();
    assert!(b.rw_lock("forced").force_unlock().await.unwrap());
    let left: bool = conn.exists(lease_key("forced", &owner, 1)).await.unwrap();
    assert!(!left, "force-unlock removes the read leases too");
    tokio::time::timeout(Duration::from_secs(10), lost)
        .await
        .expect("lost() fires for the read hold");
    assert!(read.unlock().await.unwrap_err().is_not_owner());

    let write = rw.write().lock().await.unwrap();
    let lost = write.lost();
    assert!(b.rw_lock("forced").force_unlock().await.unwrap());
    tokio::time::timeout(Duration::from_secs(10), lost)
        .await
        .expect("lost() fires for the write hold");
    assert!(write.unlock().await.unwrap_err().is_not_owner());
    assert!(!b.rw_lock("forced").force_unlock().await.unwrap());
    assert_eq!(a.tracked_lock_count(), 0);
}

#[tokio::test]
async fn a_pending_writer_holds_back_new_readers_but_not_reentry() {
    let server = RedisServer::spawn();
    let a = client(&server).await;
    let b = client(&server).await;
    let c = client(&server).await;
    let reader = a.rw_lock("preference");
    let first = reader.read().lock().await.unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));

    let writer = tokio::spawn({
        let rw = b.rw_lock("preference");
        let order = order.clone();
        async move {
            let w = rw.write().lock().await.unwrap();
            order.lock().unwrap().push("write");
            tokio::time::sleep(Duration::from_millis(50)).await;
            w.unlock().await.unwrap();
        }
    });
    assert!(pending_writers_become(&server, "preference", 1).await);

    // A new reader waits behind the pending writer, although the lock is in read mode.
    let newcomer = c.rw_lock("preference");
    assert!(newcomer
        .read()
        .try_lock(Duration::ZERO)
        .await
        .unwrap()
        .is_none());
    let late_reader = tokio::spawn({
        let order = order.clone();
        async move {
            let r = newcomer.read().lock().await.unwrap();
            order.lock().unwrap().push("read");
            r.unlock().await.unwrap();
        }
    });
    // Another acquire through the reader's own handle is a newcomer too, held back...
    assert!(reader
        .read()
        .try_lock(Duration::ZERO)
        .await
        .unwrap()
        .is_none());
    // ... but the current reader may re-enter its hold (explicitly, in the process).
    let again = first.reenter();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        order.lock().unwrap().is_empty(),
        "nobody got in while the reader reads"
    );
    again.unlock().await.unwrap();
    first.unlock().await.unwrap();
    writer.await.unwrap();
    late_reader.await.unwrap();
    assert_eq!(*order.lock().unwrap(), vec!["write", "read"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writers_do_not_starve_under_a_steady_stream_of_readers() {
    let server = RedisServer::spawn();
    let writer_client = client(&server).await;
    let stop = Arc::new(AtomicBool::new(false));
    let readers_in = Arc::new(AtomicUsize::new(0));
    // Set once the writer's pending mark is visible in Redis, and once the writer got in.
    let mark_seen = Arc::new(AtomicBool::new(false));
    let writer_got = Arc::new(AtomicBool::new(false));
    let writer_in = Arc::new(AtomicBool::new(false));
    let overtaken = Arc::new(AtomicUsize::new(0));
    let mut readers = Vec::new();
    // Four readers, each holding 150 ms and coming back at once, started 40 ms apart: their
    // holds overlap, so the lock never leaves read mode unless new readers are held back.
    for i in 0..4u64 {
        let c = client(&server).await;
        let (stop, readers_in, writer_in) = (stop.clone(), readers_in.clone(), writer_in.clone());
        let (mark_seen, writer_got, overtaken) =
            (mark_seen.clone(), writer_got.clone(), overtaken.clone());
        readers.push(tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(40 * i)).await;
            let rw = c.rw_lock("stream");
            let mut reads = 0u64;
            while !stop.load(Ordering::SeqCst) {
                let asked_after_mark = mark_seen.load(Ordering::SeqCst);
                let guard = rw.read().lock().await.unwrap();
                assert!(
                    !writer_in.load(Ordering::SeqCst),
                    "no reader with the writer"
                );
                if asked_after_mark && !writer_got.load(Ordering::SeqCst) {
                    overtaken.fetch_add(1, Ordering::SeqCst);
                }
                readers_in.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(150)).await;
                readers_in.fetch_sub(1, Ordering::SeqCst);
                guard.unlock().await.unwrap();
                reads += 1;
            }
            reads
        }));
    }
    // Let the stream get going, then ask for the write lock.
    assert!(
        eventually(Duration::from_secs(10), || {
            let readers_in = readers_in.clone();
            async move { readers_in.load(Ordering::SeqCst) >= 2 }
        })
        .await
    );
    let watcher = tokio::spawn({
        let conn = server.conn().await;
        let mark_seen = mark_seen.clone();
        async move {
            let seen = eventually(Duration::from_secs(30), || {
                let mut conn = conn.clone();
                async move {
                    let n: usize = conn.zcard(writers_key("stream")).await.unwrap();
                    n > 0
                }
            })
            .await;
            mark_seen.store(seen, Ordering::SeqCst);
        }
    });
    let rw = writer_client.rw_lock("stream");
    let got = tokio::time::timeout(Duration::from_secs(60), rw.write().lock())
        .await
        .expect("the writer got the lock while readers kept coming")
        .unwrap();
    writer_got.store(true, Ordering::SeqCst);
    writer_in.store(true, Ordering::SeqCst);
    assert_eq!(
        readers_in.load(Ordering::SeqCst),
        0,
        "no reader with the writer"
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    writer_in.store(false, Ordering::SeqCst);
    got.unlock().await.unwrap();
    watcher.await.unwrap();
    // The readers carry on after the writer.
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::SeqCst);
    let mut total = 0;
    for r in readers {
        total += r.await.unwrap();
    }
    assert!(total >= 8, "the readers kept reading ({total} reads)");
    assert_eq!(
        overtaken.load(Ordering::SeqCst),
        0,
        "no reader that asked after the writer was marked pending got in before it"
    );
}

#[tokio::test]
async fn a_writer_that_gives_up_lets_the_readers_it_held_back_go() {
    let server = RedisServer::spawn();
    let a = client(&server).await;
    let b = client(&server).await;
    let c = client(&server).await;
    let held = a.rw_lock("quitter").read().lock().await.unwrap();

    // A writer waits (the reader holds), holding back a new reader, then gives up.
    let writer = tokio::spawn({
        let rw = b.rw_lock("quitter");
        async move {
            rw.write()
                .try_lock(Duration::from_millis(800))
                .await
                .unwrap()
        }
    });
    assert!(pending_writers_become(&server, "quitter", 1).await);
    let reader = tokio::spawn({
        let rw = c.rw_lock("quitter");
        async move { rw.read().lock().await.unwrap() }
    });
    assert!(
        eventually(Duration::from_secs(5), || {
            let c = c.clone();
            async move { c.subscription_count() == 1 }
        })
        .await,
        "the new reader waits"
    );
    assert!(writer.await.unwrap().is_none(), "the writer gave up");
    // Its mark is cleared at once (not left to go stale), and the held-back reader gets in.
    assert!(
        pending_writers_become(&server, "quitter", 0).await,
        "the mark was cleared"
    );
    let r = tokio::time::timeout(Duration::from_secs(30), reader)
        .await
        .expect("the reader got in")
        .unwrap();
    r.unlock().await.unwrap();
    held.unlock().await.unwrap();
}

#[tokio::test]
async fn a_dropped_waiting_writer_leaves_nothing_behind() {
    let server = RedisServer::spawn();
    let a = client(&server).await;
    let b = client(&server).await;
    let conn = server.conn().await;
    let held = a.rw_lock("cancel").read().lock().await.unwrap();
    let rw = b.rw_lock("cancel");
    let waiting = tokio::time::timeout(Duration::from_millis(300), rw.write().lock()).await;
    assert!(waiting.is_err(), "still waiting when dropped");
    assert!(
        pending_writers_become(&server, "cancel", 0).await,
        "no pending mark"
    );
    // So a new reader is not held back.
    let joined = a
        .rw_lock("cancel")
        .read()
        .try_lock(Duration::ZERO)
        .await
        .unwrap()
        .expect("no mark holds readers back");
    joined.unlock().await.unwrap();
    held.unlock().await.unwrap();
    assert!(!rw.is_locked().await.unwrap(), "no hold");
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
            async move {
                let v: (String, i64) = redis::cmd("PUBSUB")
                    .arg("NUMSUB")
                    .arg("redisson_rwlock:{cancel}")
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                v.1 == 0
            }
        })
        .await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_at_any_point_never_strands_a_hold_or_a_mark() {
    let server = RedisServer::spawn();
    let a = client(&server).await;
    let b = client(&server).await;
    let rw = a.rw_lock("cancel-race");
    for step in 0..60u64 {
        let wait = Duration::from_micros(step * 10);
        if let Ok(guard) = tokio::time::timeout(wait, rw.read().lock()).await {
            drop(guard.unwrap());
        }
        if let Ok(guard) = tokio::time::timeout(wait, rw.write().lock()).await {
            drop(guard.unwrap());
        }
    }
    // Waiting writers dropped around their marking script.
    let held = b.rw_lock("cancel-race").read().lock().await.unwrap();
    for step in 0..60u64 {
        let waited =
            tokio::time::timeout(Duration::from_micros(step * 30), rw.write().lock()).await;
        assert!(waited.is_err(), "a reader holds the lock");
    }
    held.unlock().await.unwrap();
    assert!(
        pending_writers_become(&server, "cancel-race", 0).await,
        "every mark cleared"
    );
    let other = b.rw_lock("cancel-race");
    assert!(
        eventually(Duration::from_secs(10), || {
            let other = other.clone();
            async move {
                match other.write().try_lock(Duration::ZERO).await.unwrap() {
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

#[tokio::test]
async fn unlock_messages_are_redissons() {
    let server = RedisServer::spawn();
    let a = client(&server).await;
    let mut conn = server.conn().await;
    let mut raw = server.client().get_async_pubsub().await.unwrap();
    raw.subscribe("redisson_rwlock:{messages}").await.unwrap();
    raw.subscribe("end-marker").await.unwrap();
    let rw = a.rw_lock("messages");

    let w = rw.write().lock().await.unwrap();
    w.unlock().await.unwrap();
    let r1 = rw.read().lock().await.unwrap();
    let r2 = a.rw_lock("messages").read().lock().await.unwrap();
    r1.unlock().await.unwrap(); // another reader is left: nothing to tell
    r2.unlock().await.unwrap(); // the lock is free now
    let _: () = conn.publish("end-marker", "end").await.unwrap();

    let mut stream = raw.on_message();
    let mut got = Vec::new();
    loop {
        let msg = stream.next().await.unwrap();
        if msg.get_channel_name() == "end-marker" {
            break;
        }
        got.push(msg.get_payload::<String>().unwrap());
    }
    assert_eq!(
        got,
        vec!["1", "0"],
        "write unlock: READ_UNLOCK_MESSAGE; last read unlock: UNLOCK_MESSAGE"
    );
}

/// Redisson's `RedissonReadLock.tryLockInnerAsync` logic for a fresh read hold, in its key
/// layout (written for this test).
const JAVA_READ_ACQUIRE: &str = "\
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false or mode == 'read' then
    if mode == false then redis.call('hset', KEYS[1], 'mode', 'read') end
    local ind = redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('set', KEYS[2] .. ':' .. ind, 1, 'px', ARGV[1])
    redis.call('pexpire', KEYS[1], math.max(redis.call('pttl', KEYS[1]), ARGV[1]))
    return nil
end
return redis.call('pttl', KEYS[1])";

#[tokio::test]
async fn redisson_readers_and_latchkey_share_the_layout() {
    let server = RedisServer::spawn();
    let a = client(&server).await;
    let mut conn = server.conn().await;
    let java_owner = "6f1c0c3e-0000-4000-8000-000000000001:1";
    let r: Option<i64> = redis::cmd("EVAL")
        .arg(JAVA_READ_ACQUIRE)
        .arg(2)
        .arg("mixed")
        .arg(format!("{{mixed}}:{java_owner}:rwlock_timeout"))
        .arg(30_000)
        .arg(java_owner)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(r, None, "the java reader got in");

    let rw = a.rw_lock("mixed");
    assert!(rw.write().try_lock(Duration::ZERO).await.unwrap().is_none());
    let ours = rw.read().lock().await.unwrap();
    ours.unlock().await.unwrap();
    assert!(
        rw.is_locked().await.unwrap(),
        "the java reader still holds it"
    );
    assert!(rw.write().try_lock(Duration::ZERO).await.unwrap().is_none());

    // Once the java reader's lease key is gone (its process died), it no longer counts.
    let _: () = conn
        .del(format!("{{mixed}}:{java_owner}:rwlock_timeout:1"))
        .await
        .unwrap();
    let w = rw
        .write()
        .try_lock(Duration::ZERO)
        .await
        .unwrap()
        .expect("a reader without a live lease is dropped");
    // And the java reader sees our write hold.
    let r: Option<i64> = redis::cmd("EVAL")
        .arg(JAVA_READ_ACQUIRE)
        .arg(2)
        .arg("mixed")
        .arg(format!("{{mixed}}:{java_owner}:rwlock_timeout"))
        .arg(30_000)
        .arg(java_owner)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(
        r.is_some_and(|ttl| ttl > 0),
        "redisson waits for our writer: {r:?}"
    );
    w.unlock().await.unwrap();
}

#[tokio::test]
async fn bad_input_is_rejected_and_changes_nothing() {
    let server = RedisServer::spawn();
    let a = client(&server).await;
    let mut conn = server.conn().await;

    let err = a.rw_lock("").read().lock().await.unwrap_err();
    assert!(err.is_invalid_argument(), "{err}");
    let err = a
        .rw_lock("bad-lease")
        .write()
        .lock_with(LockOptions::new().lease(Duration::ZERO))
        .await
        .unwrap_err();
    assert!(err.is_invalid_argument(), "{err}");
    let err = a
        .rw_lock("bad-wait")
        .read()
        .try_lock(Duration::MAX)
        .await
        .unwrap_err();
    assert!(err.is_invalid_argument(), "{err}");
    let keys = crate::helpers::data_keys(&mut conn).await;
    assert!(keys.is_empty(), "nothing was written: {keys:?}");

    let _: () = conn.set("occupied", "precious").await.unwrap();
    for err in [
        a.rw_lock("occupied").read().lock().await.unwrap_err(),
        a.rw_lock("occupied").write().lock().await.unwrap_err(),
        a.rw_lock("occupied").force_unlock().await.unwrap_err(),
    ] {
        assert!(err.is_wrong_type(), "{err}");
    }
    let v: String = conn.get("occupied").await.unwrap();
    assert_eq!(v, "precious");

    // A plain lock's hash under the name is not a read-write lock: refused, untouched.
    let plain = a.lock("plain").lock().await.unwrap();
    let err = a.rw_lock("plain").read().lock().await.unwrap_err();
    assert!(err.is_wrong_type(), "{err}");
    let err = a.rw_lock("plain").write().lock().await.unwrap_err();
    assert!(err.is_wrong_type(), "{err}");
    let count: u64 = conn.hget("plain", plain.owner_id()).await.unwrap();
    assert_eq!(count, 1, "the plain lock's hold is untouched");
    plain.unlock().await.unwrap();

    // A pending-writers key of another type: nothing written.
    let _: () = conn.set(writers_key("markless"), "x").await.unwrap();
    let err = a.rw_lock("markless").read().lock().await.unwrap_err();
    assert!(err.is_wrong_type(), "{err}");
    let exists: bool = conn.exists("markless").await.unwrap();
    assert!(!exists);
}

#[test]
fn handles_and_guards_are_send_and_sync() {
    fn check<T: Send + Sync + 'static>() {}
    check::<latchkey_redis::RwLock>();
    check::<latchkey_redis::ReadLock>();
    check::<latchkey_redis::WriteLock>();
    check::<latchkey_redis::ReadGuard>();
    check::<latchkey_redis::WriteGuard>();
}

/// Only the last guard of a write hold downgrades it: while a re-entered guard holds it for
/// writing, a downgrade is refused and changes nothing (two downgrades of one hold gave two
/// read guards for one read hold in Redis, and the first one's release freed both).
#[tokio::test]
async fn a_downgrade_while_re_entered_guards_hold_the_write_is_refused() {
    let server = RedisServer::spawn();
    let client = client(&server).await;
    let rw = client.rw_lock("shared-downgrade");
    let write = rw.write().lock().await.unwrap();
    let again = write.reenter();
    let err = write.downgrade().await.unwrap_err();
    assert!(err.is_invalid_argument(), "{err}");
    // Still held for writing, by the re-entered guard: no reader gets in.
    assert!(rw.write().is_locked().await.unwrap());
    assert!(rw.read().try_lock(Duration::ZERO).await.unwrap().is_none());
    // The hold's last guard downgrades it; readers join.
    let read = again.downgrade().await.unwrap();
    let other = rw.read().try_lock(Duration::ZERO).await.unwrap().unwrap();
    other.unlock().await.unwrap();
    read.unlock().await.unwrap();
    assert!(!rw.is_locked().await.unwrap());
}
