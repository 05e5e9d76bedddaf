//! The count-down latch against a real redis-server.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use latchkey_redis::Client;
use latchkey_test_support::RedisServer;
use redis::AsyncCommands;

use crate::helpers::{client, cluster_url, eventually};

#[tokio::test]
async fn counts_down_to_zero_and_can_be_armed_again() {
    let server = RedisServer::spawn();
    let client = client(&server).await;
    let latch = client.count_down_latch("ready");
    assert_eq!(
        latch.count().await.unwrap(),
        0,
        "a latch without a count is open"
    );
    assert!(latch.wait_for(Duration::ZERO).await.unwrap());
    assert!(latch.try_set_count(3).await.unwrap());
    assert!(!latch.try_set_count(5).await.unwrap(), "already armed");
    assert_eq!(latch.count().await.unwrap(), 3);
    assert_eq!(latch.count_down().await.unwrap(), 2);
    assert_eq!(latch.count_down().await.unwrap(), 1);
    assert!(
        !latch.wait_for(Duration::from_millis(100)).await.unwrap(),
        "still closed"
    );
    assert_eq!(latch.count_down().await.unwrap(), 0);
    assert_eq!(
        latch.count_down().await.unwrap(),
        0,
        "an open latch stays open"
    );
    let mut conn = server.conn().await;
    let exists: bool = conn.exists("ready").await.unwrap();
    assert!(!exists, "the key is deleted at zero, as Redisson does");
    assert!(latch.try_set_count(1).await.unwrap(), "armed again");
    assert!(
        !latch.try_set_count(0).await.unwrap(),
        "0 does not open an armed latch"
    );
    latch.count_down().await.unwrap();
    assert!(latch.try_set_count(0).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn waiters_of_several_clients_are_woken_by_the_last_count_down() {
    let server = RedisServer::spawn();
    let coordinator = client(&server).await;
    let latch = coordinator.count_down_latch("start");
    latch.try_set_count(3).await.unwrap();

    let mut waiters = Vec::new();
    let mut clients = Vec::new();
    for _ in 0..3 {
        let client = client(&server).await;
        for _ in 0..3 {
            let latch = client.count_down_latch("start");
            waiters.push(tokio::spawn(async move {
                latch.wait().await.unwrap();
                Instant::now()
            }));
        }
        clients.push(client);
    }
    for client in &clients {
        assert!(
            eventually(Duration::from_secs(10), || async {
                client.subscription_count() == 1
            })
            .await
        );
    }
    latch.count_down().await.unwrap();
    latch.count_down().await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        waiters.iter().all(|w| !w.is_finished()),
        "nobody passes before zero"
    );
    let opened_at = Instant::now();
    latch.count_down().await.unwrap();
    for waiter in waiters {
        let woke_at = waiter.await.unwrap();
        // Without the message a waiter would only notice at its 2 s fallback check.
        assert!(woke_at.duration_since(opened_at) < Duration::from_millis(1900));
    }
}

#[tokio::test]
async fn the_zero_count_message_is_redissons() {
    let server = RedisServer::spawn();
    let client = client(&server).await;
    let mut pubsub = server.client().get_async_pubsub().await.unwrap();
    pubsub
        .subscribe("redisson_countdownlatch__channel__{fmt}")
        .await
        .unwrap();
    let mut messages = pubsub.on_message();
    let latch = client.count_down_latch("fmt");
    latch.try_set_count(1).await.unwrap();
    latch.count_down().await.unwrap();
    let mut payloads = Vec::new();
    for _ in 0..2 {
        let msg = tokio::time::timeout(Duration::from_secs(10), messages.next())
            .await
            .unwrap()
            .unwrap();
        payloads.push(msg.get_payload::<String>().unwrap());
    }
    assert_eq!(
        payloads,
        ["1", "0"],
        "new-count message, then zero-count message"
    );
}

#[tokio::test]
async fn a_redisson_style_count_down_wakes_a_waiter() {
    let server = RedisServer::spawn();
    let client = client(&server).await;
    let latch = client.count_down_latch("java");
    latch.try_set_count(1).await.unwrap();
    let waiter = {
        let latch = latch.clone();
        tokio::spawn(async move { latch.wait_for(Duration::from_secs(30)).await.unwrap() })
    };
    assert!(
        eventually(Duration::from_secs(10), || async {
            client.subscription_count() == 1
        })
        .await
    );
    // What Redisson's countDown does, by hand.
    let mut conn = server.conn().await;
    let _: () = redis::pipe()
        .atomic()
        .cmd("DEL")
        .arg("java")
        .cmd("PUBLISH")
        .arg("redisson_countdownlatch__channel__{java}")
        .arg("0")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(waiter.await.unwrap());
}

#[tokio::test]
async fn a_dropped_wait_leaves_no_subscription() {
    let server = RedisServer::spawn();
    let client = client(&server).await;
    let latch = client.count_down_latch("dropped");
    latch.try_set_count(1).await.unwrap();
    let attempt = tokio::time::timeout(Duration::from_millis(200), latch.wait()).await;
    assert!(attempt.is_err());
    assert!(!latch.wait_for(Duration::from_millis(50)).await.unwrap());
    assert!(
        eventually(Duration::from_secs(10), || async {
            client.subscription_count() == 0
        })
        .await
    );
    assert_eq!(latch.count().await.unwrap(), 1, "waiting changes nothing");
}

#[tokio::test]
async fn wrong_types_are_typed_errors_and_change_nothing() {
    let server = RedisServer::spawn();
    let client = client(&server).await;
    let mut conn = server.conn().await;
    let _: () = conn.rpush("list", "x").await.unwrap();
    let latch = client.count_down_latch("list");
    assert!(latch.try_set_count(1).await.unwrap_err().is_wrong_type());
    assert!(latch.count_down().await.unwrap_err().is_wrong_type());
    assert!(latch.count().await.unwrap_err().is_wrong_type());
    assert!(latch.wait().await.unwrap_err().is_wrong_type());
    let _: () = conn.set("text", "abc").await.unwrap();
    assert!(client
        .count_down_latch("text")
        .count_down()
        .await
        .unwrap_err()
        .is_wrong_type());
    let len: usize = conn.llen("list").await.unwrap();
    assert_eq!(len, 1);
    let text: String = conn.get("text").await.unwrap();
    assert_eq!(text, "abc");
    assert!(client
        .count_down_latch("")
        .count()
        .await
        .unwrap_err()
        .is_invalid_argument());
}

#[test]
fn the_latch_is_send_and_sync() {
    fn check<T: Send + Sync + 'static>() {}
    check::<latchkey_redis::CountDownLatch>();
}

/// On a Redis Cluster, a latch whose name has its own hash tag (`orders{eu}:1`) publishes on a
/// channel in its key's slot: Redisson's `redisson_countdownlatch__channel__{orders{eu}:1}`
/// hashes `orders{eu`, another slot, and the scripts (which name the channel in `KEYS` and
/// publish with `spublish`) failed with CROSSSLOT. A name without one keeps Redisson's channel.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hash_tagged_latch_opens_on_a_cluster() {
    let cluster = latchkey_test_support::RedisCluster::spawn(3, 0);
    let url = cluster_url(&cluster.primaries());
    let setter = Client::connect(url.as_str()).await.unwrap();
    let waiter = Client::connect(url.as_str()).await.unwrap();
    for (name, channel) in [
        (
            "orders{eu}:1",
            "redisson_countdownlatch__channel__orders{eu}:1",
        ),
        ("orders:2", "redisson_countdownlatch__channel__{orders:2}"),
    ] {
        assert_eq!(cluster.key_slot(channel), cluster.key_slot(name));
        let latch = setter.count_down_latch(name);
        assert!(latch.try_set_count(2).await.unwrap(), "{name}");
        let waiting = {
            let latch = waiter.count_down_latch(name);
            tokio::spawn(async move { latch.wait().await })
        };
        assert_eq!(latch.count_down().await.unwrap(), 1, "{name}");
        // The waiter listens on the channel in the key's slot, where the scripts publish.
        let node = cluster.node_for_key(name);
        let subscribed = eventually(Duration::from_secs(30), || async {
            node.cmd_sync(&["PUBSUB", "SHARDNUMSUB", channel])
                == redis::Value::Array(vec![
                    redis::Value::BulkString(channel.as_bytes().to_vec()),
                    redis::Value::Int(1),
                ])
        })
        .await;
        assert!(subscribed, "{name}: nobody listens on {channel}");
        assert_eq!(latch.count_down().await.unwrap(), 0, "{name}");
        waiting.await.unwrap().unwrap();
        assert_eq!(latch.count().await.unwrap(), 0);
    }
}
