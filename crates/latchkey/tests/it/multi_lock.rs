//! The multi-lock against real redis-servers.

use std::time::Duration;

use latchkey_redis::{LockOptions, MultiLock};
use latchkey_test_support::{RedisServer, RedisServers};
use redis::AsyncCommands;

use crate::helpers::{client, eventually};

#[tokio::test]
async fn takes_locks_on_two_servers_together() {
    let servers = RedisServers::spawn(2);
    let (a, b) = (client(&servers[0]).await, client(&servers[1]).await);
    let multi = MultiLock::new([a.lock("acct:1"), b.lock("acct:2")]).unwrap();
    let guard = multi.lock().await.unwrap();
    assert_eq!(guard.guards().len(), 2);
    assert_eq!(guard.fencing_tokens().len(), 2);
    assert!(multi.locks()[0].is_locked().await.unwrap());
    assert!(multi.locks()[1].is_locked().await.unwrap());
    // Each lock lives on its own server.
    let mut c0 = servers[0].conn().await;
    let mut c1 = servers[1].conn().await;
    assert!(c0.exists::<_, bool>("acct:1").await.unwrap());
    assert!(c1.exists::<_, bool>("acct:2").await.unwrap());
    guard.unlock().await.unwrap();
    assert!(!multi.locks()[0].is_locked().await.unwrap());
    assert!(!multi.locks()[1].is_locked().await.unwrap());
    assert!(MultiLock::new(Vec::new())
        .unwrap_err()
        .is_invalid_argument());
}

/// Every acquire is an owner of its own, so a set naming one lock twice could never be held:
/// refused when it is made, whether the same handle, a clone or another handle of the same
/// client names it twice.
#[tokio::test]
async fn the_same_lock_twice_is_refused() {
    let server = RedisServer::spawn();
    let a = client(&server).await;
    let lock = a.lock("twice");
    for locks in [
        [lock.clone(), lock.clone()],
        [a.lock("twice"), a.lock("twice")],
    ] {
        let err = MultiLock::new(locks).unwrap_err();
        assert!(err.is_invalid_argument(), "{err}");
    }
    let err = MultiLock::new([a.lock("other"), lock.clone(), a.lock("twice")]).unwrap_err();
    assert!(err.is_invalid_argument(), "{err}");
    // Nothing was sent.
    let mut conn = server.conn().await;
    let keys = crate::helpers::data_keys(&mut conn).await;
    assert!(keys.is_empty(), "{keys:?}");
}

#[tokio::test]
async fn never_returns_a_partial_hold() {
    let server = RedisServer::spawn();
    let (a, b) = (client(&server).await, client(&server).await);
    let blocker = b.lock("m2").lock().await.unwrap();
    let multi = MultiLock::new([a.lock("m1"), a.lock("m2"), a.lock("m3")]).unwrap();

    assert!(multi.try_lock(Duration::ZERO).await.unwrap().is_none());
    assert!(multi
        .try_lock(Duration::from_millis(300))
        .await
        .unwrap()
        .is_none());
    let err = multi
        .lock_with(LockOptions::new().wait(Duration::from_millis(100)))
        .await
        .unwrap_err();
    assert!(err.is_wait_timed_out());
    // Nothing of the set is held after a failure.
    assert!(!multi.locks()[0].is_locked().await.unwrap());
    assert!(!multi.locks()[2].is_locked().await.unwrap());
    assert_eq!(a.tracked_lock_count(), 0);

    // It gets the whole set once the blocker is released.
    let waiting = {
        let multi = multi.clone();
        tokio::spawn(async move { multi.lock().await.unwrap() })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        !multi.locks()[0].is_locked().await.unwrap(),
        "no lock is held while it waits"
    );
    blocker.unlock().await.unwrap();
    let guard = waiting.await.unwrap();
    for (lock, held) in multi.locks().iter().zip(guard.guards()) {
        let holders = lock.status().await.unwrap().holders;
        assert_eq!(holders.len(), 1, "{}: {holders:?}", lock.name());
        assert_eq!(holders[0].owner, held.owner_id());
        assert_eq!(holders[0].holds, 1);
    }
    guard.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn opposite_orders_do_not_deadlock_and_exclude_each_other() {
    let server = RedisServer::spawn();
    const ROUNDS: u64 = 15;
    let mut tasks = Vec::new();
    for i in 0..4 {
        let client = client(&server).await;
        let (x, y) = if i % 2 == 0 {
            ("left", "right")
        } else {
            ("right", "left")
        };
        let multi = MultiLock::new([client.lock(x), client.lock(y)]).unwrap();
        let mut conn = server.conn().await;
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let guard = multi.lock().await.unwrap();
                let v: Option<u64> = conn.get("shared").await.unwrap();
                tokio::task::yield_now().await;
                let _: () = conn.set("shared", v.unwrap_or(0) + 1).await.unwrap();
                guard.unlock().await.unwrap();
            }
            client
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let mut conn = server.conn().await;
    let v: u64 = conn.get("shared").await.unwrap();
    assert_eq!(v, 4 * ROUNDS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_acquire_leaves_no_lock_behind() {
    let servers = RedisServers::spawn(2);
    let (a, b) = (client(&servers[0]).await, client(&servers[1]).await);
    let multi = MultiLock::new([a.lock("c1"), b.lock("c2")]).unwrap();
    for i in 0..30u64 {
        let multi = multi.clone();
        let task = tokio::spawn(async move {
            let _guard = multi.lock().await;
            std::future::pending::<()>().await;
        });
        tokio::time::sleep(Duration::from_micros(i * 200)).await;
        task.abort();
    }
    // A waiter dropped while it waits for a busy lock.
    let other = client(&servers[1]).await;
    let held = other.lock("c2").lock().await.unwrap();
    assert!(
        tokio::time::timeout(Duration::from_millis(200), multi.lock())
            .await
            .is_err()
    );
    held.unlock().await.unwrap();

    let check = multi.clone();
    assert!(
        eventually(Duration::from_secs(10), || {
            let check = check.clone();
            async move {
                !check.locks()[0].is_locked().await.unwrap()
                    && !check.locks()[1].is_locked().await.unwrap()
            }
        })
        .await,
        "no lock left"
    );
    assert!(
        eventually(Duration::from_secs(10), || async {
            a.tracked_lock_count() == 0 && b.tracked_lock_count() == 0
        })
        .await
    );
    assert!(
        eventually(Duration::from_secs(10), || async {
            a.subscription_count() == 0 && b.subscription_count() == 0
        })
        .await
    );
    let guard = multi
        .try_lock(Duration::ZERO)
        .await
        .unwrap()
        .expect("free again");
    guard.unlock().await.unwrap();
}

#[tokio::test]
async fn an_error_of_one_lock_releases_the_others() {
    let server = RedisServer::spawn();
    let client = client(&server).await;
    let mut conn = server.conn().await;
    let _: () = conn.set("not-a-lock", "x").await.unwrap();
    let multi = MultiLock::new([client.lock("fine"), client.lock("not-a-lock")]).unwrap();
    assert!(multi.lock().await.unwrap_err().is_wrong_type());
    assert!(!multi.locks()[0].is_locked().await.unwrap());
    assert_eq!(client.tracked_lock_count(), 0);
}

#[tokio::test]
async fn fixed_leases_and_lost() {
    let server = RedisServer::spawn();
    let client = client(&server).await;
    let multi = MultiLock::new([client.lock("l1"), client.lock("l2")]).unwrap();
    let guard = multi
        .lock_with(LockOptions::new().lease(Duration::from_millis(300)))
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(10), guard.lost())
        .await
        .expect("a fixed lease ends");
    assert!(guard.is_lost());
    assert!(guard.unlock().await.unwrap_err().is_not_owner());
    assert!(multi
        .lock_with(LockOptions::new().lease(Duration::ZERO))
        .await
        .unwrap_err()
        .is_invalid_argument());
}

#[test]
fn the_multi_lock_is_send_and_sync() {
    fn check<T: Send + Sync + 'static>() {}
    check::<MultiLock>();
    check::<latchkey_redis::MultiLockGuard>();
}
