//! Waiters and scripts across Redis Cluster failovers (3 primaries, 1 replica each).

use std::time::{Duration, Instant};

use latchkey_redis::{Client, ReplicaSync};
use latchkey_test_support::{RedisCluster, RedisServer};

use crate::helpers::{cluster_url, eventually, retry_on_cluster};

/// The index in `cluster.replicas()` of the replica of the primary that owns `key`.
fn replica_of_owner(cluster: &RedisCluster, key: &str) -> usize {
    let owner = cluster.node_for_key(key).port();
    cluster
        .replicas()
        .iter()
        .position(|replica| {
            let role = replica.cmd_sync(&["ROLE"]);
            let redis::Value::Array(items) = role else {
                return false;
            };
            let port: Option<u16> = items
                .get(2)
                .and_then(|v| redis::from_redis_value_ref(v).ok());
            port == Some(owner)
        })
        .expect("the owning primary has a replica")
}

/// The number of sharded subscribers of `channel` on `node`.
fn shard_subscribers(node: &RedisServer, channel: &str) -> i64 {
    let reply = node.cmd_sync(&["PUBSUB", "SHARDNUMSUB", channel]);
    let (_, n): (String, i64) = redis::from_redis_value_ref(&reply).unwrap();
    n
}

/// A waiter parked before `CLUSTER FAILOVER` of the shard that owns its lock is woken by the
/// release made after it, through its sharded subscription, as one parked after the failover
/// is — every time, over ten failovers. A waiter that missed the release's message would wake
/// only at the end of its 2 s park, 0–2 s after the release: a wake-up later than 500 ms
/// counts as missed (three in four misses show, and ten rounds are run). The rounds go round
/// the three shards (a shard failed over a moment before cannot be failed over again at
/// once: its primaries would not vote yet).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_parked_across_a_failover_is_woken_by_the_release() {
    let cluster = RedisCluster::spawn(3, 1);
    let connect = || {
        Client::builder(cluster_url(&cluster.primaries()))
            .replica_sync(ReplicaSync::Off)
            .connect()
    };
    let holder = connect().await.unwrap();
    let waiter = connect().await.unwrap();
    // One name per shard.
    let mut names: Vec<String> = Vec::new();
    for i in 0.. {
        let name = format!("failover:wake:{i}");
        let owner = cluster.node_for_key(&name).port();
        if names
            .iter()
            .all(|n| cluster.node_for_key(n).port() != owner)
        {
            names.push(name);
        }
        if names.len() == 3 {
            break;
        }
    }
    let mut late = Vec::new();
    for round in 0..10 {
        let name = names[round % names.len()].as_str();
        let channel = format!("redisson_lock__channel:{{{name}}}");
        let lock = holder.lock(name);
        let guard = retry_on_cluster(|| lock.lock()).await;
        let waiting = tokio::spawn({
            let lock = waiter.lock(name);
            async move {
                let guard = retry_on_cluster(|| lock.lock()).await;
                (Instant::now(), guard)
            }
        });
        assert!(
            eventually(Duration::from_secs(10), || async {
                cluster
                    .nodes()
                    .iter()
                    .map(|node| shard_subscribers(node, &channel))
                    .sum::<i64>()
                    == 1
            })
            .await,
            "round {round}: the waiter subscribed"
        );
        let replica = replica_of_owner(&cluster, name);
        cluster.failover(replica);
        // Released at once: the subscription may still be on its way to the new owner.
        let released_at = Instant::now();
        guard.unlock().await.unwrap();
        let (woken_at, got) = waiting.await.unwrap();
        let delay = woken_at.duration_since(released_at);
        if delay >= Duration::from_millis(500) {
            late.push((round, delay));
        }
        if std::env::var("SHOW").is_ok() {
            eprintln!("round {round}: woken {delay:?} after the release");
        }
        got.unlock().await.unwrap();
    }
    assert!(
        late.is_empty(),
        "waiters woken by their park's end, not the release's message: {late:?}"
    );
}

/// A promoted replica knows none of the scripts (Redis does not replicate `SCRIPT LOAD`), nor
/// does a node whose script cache was flushed: every script call, the acquire pipelined with
/// `WAIT` under replica sync included, is sent again whole on the same connection. (Before, a
/// pipelined acquire after `CLUSTER FAILOVER` could fail with `NOSCRIPT`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_unknown_to_a_new_primary_are_sent_whole() {
    let cluster = RedisCluster::spawn(3, 1);
    let client = Client::builder(cluster_url(&cluster.primaries()))
        .replica_sync(ReplicaSync::Require {
            replicas: 1,
            timeout: Duration::from_secs(2),
        })
        .connect()
        .await
        .unwrap();
    let name = "failover:scripts";
    let lock = client.lock(name);
    for round in 0..3 {
        let guard = retry_on_cluster(|| lock.lock()).await;
        cluster.failover(replica_of_owner(&cluster, name));
        // The hold taken before the failover is released on the new primary, which has never
        // run the release script.
        guard.unlock().await.unwrap();
        // And the pipelined acquire (EVALSHA + WAIT) on a node that forgot every script.
        cluster.node_for_key(name).cmd_sync(&["SCRIPT", "FLUSH"]);
        let guard = lock
            .lock()
            .await
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        cluster.node_for_key(name).cmd_sync(&["SCRIPT", "FLUSH"]);
        guard.unlock().await.unwrap();
    }
}
