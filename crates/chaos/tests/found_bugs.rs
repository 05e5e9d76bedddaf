//! Library bugs the fault-injection runs found, each kept as a focused regression test.
//! (The bugs found by the bad-input catalogue are tested in
//! `crates/latchkey/tests/it/bad_input.rs`.)

use std::time::Duration;

use latchkey_redis::Client;
use latchkey_test_support::RedisServer;

/// Found by the `sentinel_failover` scenario, where every hand-off after the failover took
/// 1–1.6 s instead of ~2 ms.
///
/// `ReplicaSync::Auto` (the default) is documented as: "If a later primary has no replica at
/// all (say, after a failover promoted the only one), acquires go on without waiting." It used
/// to send `WAIT 1 1000` on every acquire anyway, which with no replica blocks for the whole
/// second (with the lock already granted), and only then see that no replica was connected: a
/// busy lock changed hands less than once a second. Now the first acquire that finds the
/// replicas gone may wait once; the ones after it must not.
#[tokio::test]
async fn auto_replica_sync_stops_waiting_once_the_replica_is_gone() {
    let primary = RedisServer::spawn();
    let mut replica = RedisServer::builder().replica_of(&primary.addr()).spawn();
    replica.wait_until_synced(Duration::from_secs(60));
    let grace = Duration::from_millis(500);
    let client = Client::builder(primary.url())
        .replica_loss_grace(grace)
        .connect()
        .await
        .unwrap();
    assert!(
        client.replica_sync().is_some(),
        "Auto mode saw the replica at connect time"
    );
    client
        .lock("warm")
        .lock()
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();

    replica.kill();
    primary.wait_until_replicas(0, Duration::from_secs(10));
    // Losing every replica looks like a demotion by a failover: refused for the grace period
    // (see `ClientBuilder::replica_loss_grace`), then taken for real.
    let refused = client.lock("l").lock().await.unwrap_err();
    assert!(refused.is_not_replicated(), "{refused}");
    tokio::time::sleep(grace).await;
    let before = primary.command_calls("wait");
    for i in 0..5 {
        client
            .lock(format!("l{i}"))
            .lock()
            .await
            .unwrap()
            .unlock()
            .await
            .unwrap();
    }
    let waits = primary.command_calls("wait") - before;
    assert!(
        waits <= 1,
        "with no replica left, acquires must go on without waiting, yet {waits} of 5 acquires sent a WAIT (1 s each)"
    );
}

/// Found by the `proxy_blackhole` soak (duplicate fencing tokens 3, 47 and 55).
///
/// An acquire sent into a network black hole is answered only when the black hole lifts,
/// after more than a lease but within the command timeout. Redis granted it for a full lease
/// from *its* point of view; the client counts the lease from the send, so it reports the hold
/// lost at once (rightly: it cannot prove more). Its unlock is `NotOwner`, and releases what is
/// left of the hold (the owner id is that acquire's alone); the next acquire, another owner,
/// gets the lock with a *new* fencing token, so fenced storage can refuse a late write of the
/// first hold.
#[tokio::test]
async fn a_late_grant_reported_lost_is_released_and_the_next_hold_fenced_anew() {
    let server = RedisServer::spawn();
    let proxy = latchkey_test_support::FaultProxy::start(&server.addr());
    let client = Client::builder(proxy.url())
        .watchdog_timeout(Duration::from_secs(1))
        .command_timeout(Duration::from_secs(3))
        .connect()
        .await
        .unwrap();
    let lock = client.lock("late");
    lock.lock().await.unwrap().unlock().await.unwrap(); // scripts loaded
    proxy.blackhole(true);
    let acquire = tokio::spawn({
        let lock = lock.clone();
        async move { lock.lock().await }
    });
    // Lift the black hole after more than a lease (1 s), within the command timeout (3 s).
    tokio::time::sleep(Duration::from_millis(1600)).await;
    proxy.blackhole(false);
    let first = acquire
        .await
        .unwrap()
        .expect("granted once the black hole lifted");
    let first_token = first.fencing_token();
    // Granted more than a lease after it was sent: reported lost at once.
    tokio::time::timeout(Duration::from_secs(5), first.lost())
        .await
        .expect("the late grant is reported lost");
    assert!(first.unlock().await.unwrap_err().is_not_owner());
    let second = lock.lock().await.unwrap();
    let second_token = second.fencing_token();
    second.unlock().await.unwrap();
    assert!(
        second_token > first_token,
        "the hold after the lost one got the same fencing token {second_token} ({first_token} before)"
    );
}
