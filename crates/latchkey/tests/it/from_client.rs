//! Clients built from the application's own redis-rs client (`ClientBuilder::from_redis_client`,
//! `from_cluster_client`, `from_sentinel_client`) on a single server, a cluster and a Sentinel
//! group: locks, waiters woken by pub/sub, and the connections one latchkey client opens.

use std::time::Duration;

use latchkey_redis::redis::{self, cluster::ClusterClient, ProtocolVersion};
use latchkey_redis::ClientBuilder;
use latchkey_test_support::{RedisCluster, RedisServer, SentinelGroup};

use crate::helpers::eventually;

/// The names of the clients connected to `server`, from `CLIENT LIST`, but the one asking.
fn connected(server: &RedisServer) -> usize {
    let list: String = crate::helpers::read(server, &["CLIENT", "LIST"]);
    list.lines().count() - 1
}

/// A lock taken and handed to a waiter of a second client through the release's message.
async fn lock_and_hand_over(a: &latchkey_redis::Client, b: &latchkey_redis::Client, name: &str) {
    let guard = a.lock(name).lock().await.unwrap();
    let waiting = tokio::spawn({
        let lock = b.lock(name);
        async move { lock.lock().await.unwrap() }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    guard.unlock().await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(1), waiting)
        .await
        .expect("woken by the release, not by its park")
        .unwrap();
    got.unlock().await.unwrap();
}

#[tokio::test]
async fn a_client_built_from_the_applications_redis_client() {
    let server = RedisServer::builder().password("s3cret").spawn();
    let url = format!("redis://:s3cret@{}/3", server.addr());
    let connect = || async {
        let redis = redis::Client::open(url.as_str()).unwrap();
        ClientBuilder::from_redis_client(redis)
            .namespace("app")
            .watchdog_timeout(Duration::from_secs(1))
            .connect()
            .await
            .unwrap()
    };
    let (a, b) = (connect().await, connect().await);
    lock_and_hand_over(&a, &b, "order").await;
    lock_and_hand_over(&b, &a, "order").await;
    let before = connected(&server);
    for i in 0..20 {
        lock_and_hand_over(&a, &b, &format!("order-{i}")).await;
        lock_and_hand_over(&b, &a, &format!("order-{i}")).await;
    }
    // Its database, its credentials, and the builder's namespace.
    let keys: Vec<String> = crate::helpers::read(&server, &["KEYS", "*"]);
    assert!(keys.is_empty(), "nothing in database 0: {keys:?}");
    // Two connections per client (commands, pub/sub), however many locks and waiters.
    assert_eq!(before, 4, "two connections for each of two clients");
    assert_eq!(connected(&server), before, "no connection per lock");
    // Another database of the same server is another lock of the same name (a MultiLock
    // over both is accepted); the same database twice is refused.
    let other_db = redis::Client::open(format!("redis://:s3cret@{}/4", server.addr())).unwrap();
    let c = ClientBuilder::from_redis_client(other_db)
        .connect()
        .await
        .unwrap();
    let both = latchkey_redis::MultiLock::new([a.lock("x"), c.lock("x")]).unwrap();
    both.lock().await.unwrap().unlock().await.unwrap();
    assert!(latchkey_redis::MultiLock::new([a.lock("x"), b.lock("x")])
        .unwrap_err()
        .is_invalid_argument());
    // A wrong password in the application's client is refused at connect, typed.
    let wrong = redis::Client::open(format!("redis://:nope@{}", server.addr())).unwrap();
    let err = ClientBuilder::from_redis_client(wrong)
        .connect()
        .await
        .unwrap_err();
    assert!(err.is_auth_failed(), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_built_from_the_applications_cluster_client() {
    let cluster = RedisCluster::spawn(3, 0);
    let nodes: Vec<String> = cluster.primaries().iter().map(|n| n.url()).collect();
    let connect = || async {
        let redis = ClusterClient::builder(nodes.clone())
            .use_protocol(ProtocolVersion::RESP3)
            .build()
            .unwrap();
        ClientBuilder::from_cluster_client(redis)
            .watchdog_timeout(Duration::from_secs(1))
            .connect()
            .await
            .unwrap()
    };
    let (a, b) = (connect().await, connect().await);
    // Names on every shard: commands and sharded subscriptions through the application's client.
    for i in 0..6 {
        lock_and_hand_over(&a, &b, &format!("shard-{i}")).await;
    }
    for i in 0..6 {
        lock_and_hand_over(&b, &a, &format!("shard-{i}")).await;
    }
    let before: Vec<usize> = cluster.nodes().iter().map(connected).collect();
    for i in 0..30 {
        lock_and_hand_over(&a, &b, &format!("order-{i}")).await;
        lock_and_hand_over(&b, &a, &format!("order-{i}")).await;
    }
    // Two connections per primary for each client (commands, and sharded pub/sub once it
    // waited), however many locks and waiters.
    assert_eq!(
        before,
        vec![4; 3],
        "two connections per primary for each of two clients"
    );
    let after: Vec<usize> = cluster.nodes().iter().map(connected).collect();
    assert_eq!(after, before, "no connection per lock");
    // A RESP2 client would never deliver a sharded message: refused, saying why.
    let resp2 = ClusterClient::builder(nodes.clone()).build().unwrap();
    let err = ClientBuilder::from_cluster_client(resp2)
        .connect()
        .await
        .unwrap_err();
    assert!(
        err.is_config() && err.to_string().contains("RESP3"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_built_from_the_applications_sentinel_client() {
    let group = SentinelGroup::spawn(1, 3);
    let connect = || async {
        let redis = redis::sentinel::SentinelClient::build(
            group.sentinel_urls(),
            group.master_name(),
            None,
            redis::sentinel::SentinelServerType::Master,
        )
        .unwrap();
        ClientBuilder::from_sentinel_client(redis, group.master_name())
            .watchdog_timeout(Duration::from_secs(1))
            .connect()
            .await
            .unwrap()
    };
    let primary_alone = connected(group.primary());
    let sentinels_alone: Vec<usize> = group.sentinels().iter().map(connected).collect();
    let (a, b) = (connect().await, connect().await);
    lock_and_hand_over(&a, &b, "sentinel-order").await;
    lock_and_hand_over(&b, &a, "sentinel-order").await;
    let primary_before = connected(group.primary());
    let sentinels_before: Vec<usize> = group.sentinels().iter().map(connected).collect();
    for i in 0..20 {
        lock_and_hand_over(&a, &b, &format!("order-{i}")).await;
        lock_and_hand_over(&b, &a, &format!("order-{i}")).await;
    }
    // Two connections to the primary for each client (commands, pub/sub); the sentinels'
    // own links come on top.
    assert_eq!(
        primary_before - primary_alone,
        4,
        "two connections to the primary for each of two clients (sentinels: {sentinels_alone:?} \
         before the clients, {sentinels_before:?} after)"
    );
    assert_eq!(
        connected(group.primary()),
        primary_before,
        "no connection per lock"
    );
    let sentinels_after: Vec<usize> = group.sentinels().iter().map(connected).collect();
    assert_eq!(
        sentinels_after, sentinels_before,
        "no sentinel connection per lock"
    );
    // Every sentinel was found from the first one: the client follows a failover.
    let guard = a.lock("followed").lock().await.unwrap();
    let mut group = group;
    let old = group.kill_primary();
    let new = group.wait_for_failover(Duration::from_secs(60));
    assert_ne!(old, new);
    drop(guard);
    assert!(
        eventually(Duration::from_secs(30), || {
            let b = b.clone();
            async move {
                match b.lock("after-failover").try_lock(Duration::ZERO).await {
                    Ok(Some(guard)) => guard.unlock().await.is_ok(),
                    _ => false,
                }
            }
        })
        .await,
        "the client follows the sentinels to the new primary"
    );
    // The builder's sentinel client goes to its first connect.
    let redis = redis::sentinel::SentinelClient::build(
        group.sentinel_urls(),
        group.master_name(),
        None,
        redis::sentinel::SentinelServerType::Master,
    )
    .unwrap();
    let builder = ClientBuilder::from_sentinel_client(redis, group.master_name());
    builder.clone().connect().await.unwrap();
    assert!(builder.connect().await.unwrap_err().is_config());
}
