//! Where users run Redis: Sentinel, TLS, ACL users.

use std::time::Duration;

use latchkey::Client;
use latchkey_test_support::{RedisServer, SentinelGroup, TlsFiles};

/// The documented minimal ACL for locks (see the README's "ACL" section).
const LOCK_ACL: &str = "app on >app-secret ~* &redisson_lock__channel:* \
    -@all +evalsha +eval +script|load +ping +subscribe +unsubscribe +exists +hget +pttl \
    +type +hset +hexists +hincrby +hgetall +pexpire +incr +get +set +del +publish \
    +zadd +zrem +zrange +zcard +hdel +time";

async fn retry<T, F, Fut>(mut op: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = latchkey::Result<T>>,
{
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        match op().await {
            Ok(v) => return v,
            Err(e) if e.is_connection() && std::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("{e}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_failover_under_a_held_lock_and_a_waiter() {
    let mut group = SentinelGroup::spawn(1, 3);
    let hosts: Vec<String> = group.sentinels().iter().map(|s| s.addr()).collect();
    let url = format!(
        "redis+sentinel://{}/{}",
        hosts.join(","),
        group.master_name()
    );
    let connect = || {
        Client::builder(url.clone())
            .watchdog_timeout(Duration::from_secs(4))
            .command_timeout(Duration::from_secs(1))
            .connect_timeout(Duration::from_secs(2))
            .connect()
    };
    let a = connect().await.unwrap();
    let b = connect().await.unwrap();
    let guard = a.lock("failover").lock().await.unwrap();
    let token = guard.fencing_token();
    let waiter = tokio::spawn({
        let lock = b.lock("failover");
        async move {
            retry(|| {
                let lock = lock.clone();
                async move { lock.lock().await }
            })
            .await
        }
    });
    // Let the write reach the replica, then kill the primary.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let old = group.kill_primary();
    let new = group.wait_for_failover(Duration::from_secs(60));
    assert_ne!(old, new);

    // The holder may or may not still hold it (replication is asynchronous). Its release is
    // a clean answer either way: done, not the owner any more, or Redis not reachable yet (the
    // lock then expires with its 4 s lease, as nothing renews it).
    match guard.unlock().await {
        Ok(()) => {}
        Err(e) => assert!(e.is_not_owner() || e.is_connection(), "{e}"),
    }
    let got = tokio::time::timeout(Duration::from_secs(90), waiter)
        .await
        .expect("the waiter gets the lock after the failover")
        .unwrap();
    assert!(got.fencing_token() >= token);
    got.unlock().await.unwrap();
    // The client works against the new primary.
    let again = retry(|| {
        let a = a.clone();
        async move { a.lock("after-failover").lock().await }
    })
    .await;
    again.unlock().await.unwrap();
}

#[tokio::test]
async fn sentinel_urls_are_checked() {
    for url in [
        "redis+sentinel://127.0.0.1:1",
        "redis+sentinel://127.0.0.1:1/",
        "redis+sentinel:///mymaster",
        "redis+sentinel://127.0.0.1:1/mymaster/notanumber",
    ] {
        let err = Client::connect(url).await.unwrap_err();
        assert!(
            matches!(err, latchkey::Error::Config { .. }),
            "{url}: {err}"
        );
    }
}

#[tokio::test]
async fn tls_with_a_private_ca_and_verification() {
    let files = TlsFiles::generate();
    let server = RedisServer::builder().tls(&files).spawn();
    let url = format!("rediss://127.0.0.1:{}", server.port());
    let ca = std::fs::read(files.ca_cert()).unwrap();
    let client = Client::builder(url.clone())
        .tls_root_certificate(ca)
        .connect()
        .await
        .unwrap();
    let lock = client.lock("tls");
    let guard = lock.lock().await.unwrap();
    // Waiting works over TLS too (the subscriber connection is TLS as well).
    let waiter = tokio::spawn({
        let lock = client.lock("tls");
        async move { lock.lock().await.unwrap() }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    guard.unlock().await.unwrap();
    waiter.await.unwrap().unlock().await.unwrap();

    // A certificate from another CA is refused, quickly and clearly.
    let other = TlsFiles::generate_other_ca();
    let err = Client::builder(url)
        .tls_root_certificate(std::fs::read(other.ca_cert()).unwrap())
        .connect_timeout(Duration::from_secs(2))
        .connect()
        .await
        .unwrap_err();
    assert!(err.is_connection(), "{err}");
    assert!(err.to_string().contains("certificate"), "says why: {err}");
}

#[tokio::test]
async fn an_acl_user_with_the_documented_permissions_can_lock_and_wait() {
    let server = RedisServer::builder().acl_user(LOCK_ACL).spawn();
    let url = format!("redis://app:app-secret@127.0.0.1:{}", server.port());
    let a = Client::builder(url.clone()).connect().await.unwrap();
    let b = Client::builder(url).connect().await.unwrap();
    let guard = a.lock("acl").lock().await.unwrap();
    let waiter = tokio::spawn({
        let lock = b.lock("acl");
        async move { lock.lock().await.unwrap() }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let status = a.lock("acl").status().await.unwrap();
    assert_eq!(status.holders.len(), 1);
    guard.unlock().await.unwrap();
    let got = waiter.await.unwrap();
    assert!(a.lock("acl").force_unlock().await.unwrap());
    drop(got);
}

#[tokio::test]
async fn missing_permissions_and_wrong_passwords_fail_at_once() {
    let server = RedisServer::builder()
        .acl_user("nopub on >pw ~* &* +@all -publish")
        .spawn();
    let url = format!("redis://nopub:pw@127.0.0.1:{}", server.port());
    let client = Client::connect(url).await.unwrap();
    let guard = client.lock("noperm").lock().await.unwrap();
    let err = guard.unlock().await.unwrap_err();
    assert!(err.is_auth(), "{err}");
    assert!(
        matches!(err, latchkey::Error::PermissionDenied { .. }),
        "{err}"
    );

    let err = Client::connect(format!("redis://nopub:wrong@127.0.0.1:{}", server.port()))
        .await
        .unwrap_err();
    assert!(matches!(err, latchkey::Error::AuthFailed { .. }), "{err}");
}

#[tokio::test]
async fn replica_synced_acquires_are_undone_when_no_replica_acknowledges() {
    let primary = RedisServer::spawn();
    let replica = RedisServer::builder().replica_of(&primary.addr()).spawn();
    replica.wait_until_synced(Duration::from_secs(30));
    let client = Client::connect(primary.url()).await.unwrap();
    assert_eq!(
        client.replica_sync(),
        Some((1, Duration::from_secs(1))),
        "on by default"
    );
    let guard = client.lock("synced").lock().await.unwrap();
    guard.unlock().await.unwrap();

    // A replica that does not answer: the acquire is undone and reported.
    replica.pause_process();
    let err = client.lock("unsynced").lock().await.unwrap_err();
    replica.resume_process();
    assert!(
        matches!(err, latchkey::Error::NotReplicated { .. }),
        "{err}"
    );
    assert!(
        !client.lock("unsynced").is_locked().await.unwrap(),
        "undone"
    );

    // Off: no waiting.
    let plain = Client::builder(primary.url())
        .replica_sync(latchkey::ReplicaSync::Off)
        .connect()
        .await
        .unwrap();
    assert_eq!(plain.replica_sync(), None);
    let err = Client::builder(primary.url())
        .replica_sync(latchkey::ReplicaSync::Require {
            replicas: 0,
            timeout: Duration::from_secs(1),
        })
        .connect()
        .await
        .unwrap_err();
    assert!(err.is_invalid_argument(), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_synced_lock_survives_the_failover_of_its_primary() {
    let mut group = SentinelGroup::spawn(1, 3);
    let hosts: Vec<String> = group.sentinels().iter().map(|s| s.addr()).collect();
    let url = format!(
        "redis+sentinel://{}/{}",
        hosts.join(","),
        group.master_name()
    );
    let client = Client::builder(url.clone())
        .watchdog_timeout(Duration::from_secs(30))
        .connect()
        .await
        .unwrap();
    assert!(client.replica_sync().is_some());
    let lock = client.lock("durable");
    let guard = lock.lock().await.unwrap();
    // Acknowledged by the replica: kill the primary at once.
    group.kill_primary();
    group.wait_for_failover(Duration::from_secs(60));
    let status = retry(|| {
        let lock = lock.clone();
        async move { lock.status().await }
    })
    .await;
    assert_eq!(status.holders.len(), 1, "the lock survived the failover");
    assert_eq!(status.holders[0].owner, lock.owner_id());
    guard.unlock().await.unwrap();
}
