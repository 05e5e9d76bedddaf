//! Redis Cluster: hash-tagged keys, sharded pub/sub wake-ups, slot-grouped renewal, failover.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use latchkey_redis::{Client, ReplicaSync};
use latchkey_test_support::{RedisCluster, RedisServer};

use crate::helpers::{cluster_url, eventually, retry_on_cluster};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_across_all_shards_renew_wake_and_survive_a_failover() {
    let cluster = RedisCluster::spawn(3, 1);
    // Replica sync is tested below; with a 1 s watchdog, auto mode would give each WAIT only
    // 250 ms, which a loaded machine can miss.
    let connect = || {
        Client::builder(cluster_url(&cluster.primaries()))
            .watchdog_timeout(Duration::from_secs(1))
            .replica_sync(ReplicaSync::Off)
            .connect()
    };
    let a = connect().await.unwrap();
    let b = connect().await.unwrap();

    // Names spread over every primary.
    let names: Vec<String> = (0..24).map(|i| format!("order:{i}")).collect();
    let shards: HashSet<String> = names
        .iter()
        .map(|n| cluster.node_for_key(n).addr())
        .collect();
    assert_eq!(shards.len(), 3, "the names cover every shard");

    // Hold them all past three watchdog periods: renewal runs per slot (no CROSSSLOT).
    let mut guards = Vec::new();
    for name in &names {
        guards.push(a.lock(name.as_str()).lock().await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(3500)).await;
    for (name, guard) in names.iter().zip(&guards) {
        assert!(!guard.is_lost(), "{name} kept by the watchdog");
        assert!(b
            .lock(name.as_str())
            .try_lock(Duration::ZERO)
            .await
            .unwrap()
            .is_none());
    }

    // Waiters on every shard are woken by sharded unlock notices, long before the TTL.
    let mut waiters = Vec::new();
    for name in names.iter().take(6) {
        let lock = b.lock(name.as_str());
        waiters.push(tokio::spawn(async move {
            let started = Instant::now();
            let guard = lock.lock().await.unwrap();
            (started.elapsed(), guard)
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The waiters listen on sharded channels, on the shard that owns the lock.
    let channel = format!("redisson_lock__channel:{{{}}}", names[0]);
    let owner = cluster.node_for_key(&names[0]);
    let sharded = owner.cmd_sync(&["PUBSUB", "SHARDNUMSUB", &channel]);
    let classic = owner.cmd_sync(&["PUBSUB", "NUMSUB", &channel]);
    let count = |v: &redis::Value| -> i64 {
        let (_, n): (String, i64) = redis::from_redis_value_ref(v).unwrap();
        n
    };
    assert_eq!(count(&sharded), 1, "one sharded subscriber: {sharded:?}");
    assert_eq!(count(&classic), 0, "no broadcast subscription: {classic:?}");
    for guard in guards.drain(..6) {
        guard.unlock().await.unwrap();
    }
    for waiter in waiters {
        let (_, guard) = waiter.await.unwrap();
        guard.unlock().await.unwrap();
    }

    // A manual failover while locks are held: the replica takes over with the lock data, and
    // the clients keep working.
    cluster.failover(0);
    for guard in guards {
        match guard.unlock().await {
            Ok(()) => {}
            Err(e) => assert!(e.is_not_owner() || e.is_connection(), "{e}"),
        }
    }
    for name in &names {
        let lock = b.lock(name.as_str());
        let guard = retry_on_cluster(|| {
            let lock = lock.clone();
            async move { lock.lock().await }
        })
        .await;
        guard.unlock().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_exclusion_on_a_cluster() {
    let cluster = RedisCluster::spawn(3, 0);
    let mut tasks = Vec::new();
    for _ in 0..3 {
        let client = Client::connect(cluster_url(&cluster.primaries()))
            .await
            .unwrap();
        // Auto replica sync: acquires wait on primaries that have replicas (none here).
        assert_eq!(client.replica_sync(), Some((1, Duration::from_secs(1))));
        for _ in 0..2 {
            let lock = client.lock("cluster-counter");
            let client = cluster.client();
            tasks.push(tokio::spawn(async move {
                let mut conn = client.get_async_connection().await.unwrap();
                for _ in 0..20 {
                    let guard = lock.lock().await.unwrap();
                    let v: Option<u64> = redis::cmd("GET")
                        .arg("{cluster-counter}:value")
                        .query_async(&mut conn)
                        .await
                        .unwrap();
                    let _: () = redis::cmd("SET")
                        .arg("{cluster-counter}:value")
                        .arg(v.unwrap_or(0) + 1)
                        .query_async(&mut conn)
                        .await
                        .unwrap();
                    guard.unlock().await.unwrap();
                }
            }));
        }
    }
    for task in tasks {
        task.await.unwrap();
    }
    let mut conn = cluster.async_conn().await;
    let v: u64 = redis::cmd("GET")
        .arg("{cluster-counter}:value")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(v, 120);
    assert!(
        all_wait_calls(&cluster).iter().all(|&calls| calls == 0),
        "no shard has a replica to wait for: {:?}",
        all_wait_calls(&cluster)
    );
}

#[tokio::test]
async fn names_with_their_own_hash_tag_stay_in_one_slot() {
    let cluster = RedisCluster::spawn(3, 0);
    let client = Client::connect(cluster_url(&cluster.primaries()))
        .await
        .unwrap();
    let lock = client.lock("orders{eu}:1");
    let guard = lock.lock().await.unwrap();
    let waiter = tokio::spawn({
        let lock = Client::connect(cluster_url(&cluster.primaries()))
            .await
            .unwrap()
            .lock("orders{eu}:1");
        async move { lock.lock().await.unwrap() }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let first = guard.fencing_token();
    guard.unlock().await.unwrap();
    let second = waiter.await.unwrap();
    let last = second.fencing_token();
    assert!(last > first, "{last} after {first}");
    second.unlock().await.unwrap();
    // The fencing counter is in the name's own slot, next to the lock.
    let node = cluster.node_for_key("eu");
    let token = node.cmd_sync(&["GET", "redisson_lock_token:orders{eu}:1"]);
    assert_eq!(
        token,
        redis::Value::BulkString(last.get().to_string().into_bytes())
    );
}

/// One shard of a cluster: node indices of its primary and replica, and lock names whose keys
/// live there (in different slots).
struct Shard {
    primary: usize,
    replica: usize,
    names: Vec<String>,
}

/// The shards of a cluster with one replica per primary, each with two names in two slots.
fn shards(cluster: &RedisCluster, prefix: &str) -> Vec<Shard> {
    let index = |node: &RedisServer| {
        cluster
            .nodes()
            .iter()
            .position(|n| n.port() == node.port())
            .unwrap()
    };
    let mut shards: Vec<Shard> = cluster
        .primaries()
        .into_iter()
        .map(|primary| {
            let replica = cluster
                .replicas()
                .into_iter()
                .find(|r| {
                    r.info("replication").get("master_port") == Some(&primary.port().to_string())
                })
                .expect("every primary has a replica");
            Shard {
                primary: index(primary),
                replica: index(replica),
                names: Vec::new(),
            }
        })
        .collect();
    assert_eq!(shards.len(), 3);
    for i in 0.. {
        if shards.iter().all(|s| s.names.len() == 2) {
            break;
        }
        let name = format!("{prefix}:{i}");
        let owner = index(cluster.node_for_key(&name));
        let shard = shards.iter_mut().find(|s| s.primary == owner).unwrap();
        let slot = cluster.key_slot(&name);
        if shard.names.len() < 2 && shard.names.iter().all(|n| cluster.key_slot(n) != slot) {
            shard.names.push(name);
        }
    }
    shards
}

/// `WAIT` calls of every node, by node index (0 for a node that is not running).
fn all_wait_calls(cluster: &RedisCluster) -> Vec<u64> {
    let calls = |n: &RedisServer| {
        if n.is_running() {
            n.command_calls("wait")
        } else {
            0
        }
    };
    cluster.nodes().iter().map(calls).collect()
}

/// The hold count `replica` (read with `READONLY` on its own connection) has for `owner` on
/// the lock `name`.
async fn hold_on_replica(replica: &RedisServer, name: &str, owner: &str) -> Option<i64> {
    let mut conn = replica.conn().await;
    let _: () = redis::cmd("READONLY").query_async(&mut conn).await.unwrap();
    redis::cmd("HGET")
        .arg(name)
        .arg(owner)
        .query_async(&mut conn)
        .await
        .unwrap()
}

async fn require_one_replica(cluster: &RedisCluster, timeout: Duration) -> Client {
    let client = Client::builder(cluster_url(&cluster.primaries()))
        .command_timeout(Duration::from_secs(1))
        .replica_sync(ReplicaSync::Require {
            replicas: 1,
            timeout,
        })
        .connect()
        .await
        .unwrap();
    assert_eq!(client.replica_sync(), Some((1, timeout)));
    client
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn required_replica_sync_waits_on_the_shard_that_owns_the_lock() {
    let cluster = RedisCluster::spawn(3, 1);
    let shards = shards(&cluster, "synced");
    let node = |i: usize| &cluster.nodes()[i];
    let client = require_one_replica(&cluster, Duration::from_secs(3)).await;

    // Each acquire WAITs on its own shard's primary, for that shard's replica: with the
    // replica paused it does not return; once the replica is back, the replica has the hold.
    // The first pause outlasts the command timeout (1 s): a WAIT may take longer than that.
    let mut guards = Vec::new();
    for (i, shard) in shards.iter().enumerate() {
        let name = shard.names[0].clone();
        let lock = client.lock(name.as_str());
        let before = all_wait_calls(&cluster);
        node(shard.replica).pause_process();
        let acquire = tokio::spawn({
            let lock = lock.clone();
            async move { lock.lock().await }
        });
        let pause = if i == 0 { 1300 } else { 400 };
        tokio::time::sleep(Duration::from_millis(pause)).await;
        let returned_early = acquire.is_finished();
        node(shard.replica).resume_process();
        let guard = acquire.await.unwrap().unwrap();
        assert!(
            !returned_early,
            "{name}: returned while its shard's replica was paused"
        );
        assert_eq!(
            hold_on_replica(node(shard.replica), &name, guard.owner_id()).await,
            Some(1),
            "{name}: the replica of its shard has the hold"
        );
        let after = all_wait_calls(&cluster);
        for (i, (b, a)) in before.iter().zip(&after).enumerate() {
            if i == shard.primary {
                assert!(a > b, "{name}: WAIT ran on its shard's primary");
            } else {
                assert_eq!(a, b, "{name}: no WAIT on node {i}");
            }
        }
        guards.push(guard);
    }
    for guard in guards {
        guard.unlock().await.unwrap();
    }

    // A shard whose replica does not answer: its acquire is undone and reported, nothing is
    // left held; the other shards go on granting (and replicating) at the same time.
    let client = require_one_replica(&cluster, Duration::from_secs(1)).await;
    let (stalled, healthy) = shards.split_first().unwrap();
    node(stalled.replica).pause_process();
    let failed = client.lock(stalled.names[0].as_str()).lock().await;
    let left: i64 = redis::from_redis_value_ref(
        &node(stalled.primary).cmd_sync(&["EXISTS", &stalled.names[0]]),
    )
    .unwrap();
    let mut granted = Vec::new();
    for shard in healthy {
        let lock = client.lock(shard.names[1].as_str());
        granted.push((shard, lock.lock().await));
    }
    node(stalled.replica).resume_process();
    match failed {
        Err(e) => assert!(e.is_not_replicated(), "{e}"),
        Ok(_) => panic!("granted although the shard's replica was paused"),
    }
    assert_eq!(left, 0, "the unreplicated hold was undone on the primary");
    assert!(!client
        .lock(stalled.names[0].as_str())
        .is_locked()
        .await
        .unwrap());
    for (shard, result) in granted {
        let guard = result.unwrap_or_else(|e| panic!("{}: {e}", shard.names[1]));
        assert_eq!(
            hold_on_replica(node(shard.replica), &shard.names[1], guard.owner_id()).await,
            Some(1)
        );
        guard.unlock().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_replica_sync_is_decided_per_shard() {
    let mut cluster = RedisCluster::spawn(3, 1);
    let shards = shards(&cluster, "auto");
    let grace = Duration::from_secs(1);
    let client = Client::builder(cluster_url(&cluster.primaries()))
        .replica_loss_grace(grace)
        .connect()
        .await
        .unwrap();
    assert_eq!(
        client.replica_sync(),
        Some((1, Duration::from_secs(1))),
        "on when the cluster has replicas"
    );

    // Locks on `names` (one per shard) WAIT on their own shard's primary, and only there;
    // returns which nodes ran a WAIT.
    async fn waits_for(client: &Client, cluster: &RedisCluster, names: &[&str]) -> Vec<bool> {
        let before = all_wait_calls(cluster);
        for name in names {
            client
                .lock(*name)
                .lock()
                .await
                .unwrap()
                .unlock()
                .await
                .unwrap();
        }
        let after = all_wait_calls(cluster);
        before.iter().zip(&after).map(|(b, a)| a > b).collect()
    }
    let first: Vec<&str> = shards.iter().map(|s| s.names[0].as_str()).collect();
    let waited = waits_for(&client, &cluster, &first).await;
    for (i, waited) in waited.iter().enumerate() {
        let primary = shards.iter().any(|s| s.primary == i);
        assert_eq!(*waited, primary, "node {i} (a primary: {primary})");
    }

    // One shard loses its replica. A primary that loses every replica at once may be a
    // demoted one (a failover): its grants are undone for the grace period, then the loss is
    // taken for real; that shard (every slot of it) stops waiting, the others go on waiting.
    let (lost, kept) = shards.split_first().unwrap();
    cluster.kill(lost.replica);
    let primary = &cluster.nodes()[lost.primary];
    primary.wait_until_replicas(0, Duration::from_secs(10));
    let refused = client
        .lock(lost.names[0].as_str())
        .lock()
        .await
        .unwrap_err();
    assert!(refused.is_not_replicated(), "{refused}");
    assert!(!client
        .lock(lost.names[0].as_str())
        .is_locked()
        .await
        .unwrap());
    tokio::time::sleep(grace).await;
    let guard = client.lock(lost.names[0].as_str()).lock().await.unwrap();
    guard.unlock().await.unwrap();
    let waited = waits_for(&client, &cluster, &[lost.names[0].as_str()]).await;
    assert!(
        !waited[lost.primary],
        "no more WAIT on the shard without a replica"
    );
    let waited = waits_for(&client, &cluster, &[lost.names[1].as_str()]).await;
    assert!(!waited[lost.primary], "nor on another slot of it");
    let others: Vec<&str> = kept.iter().map(|s| s.names[1].as_str()).collect();
    let waited = waits_for(&client, &cluster, &others).await;
    for shard in kept {
        assert!(waited[shard.primary], "the shards with replicas still wait");
    }
}

/// The number of sharded subscribers of `channel` on `node`.
fn shard_subscribers(node: &RedisServer, channel: &str) -> i64 {
    let reply = node.cmd_sync(&["PUBSUB", "SHARDNUMSUB", channel]);
    let (_, n): (String, i64) = redis::from_redis_value_ref(&reply).unwrap();
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharded_subscriptions_follow_a_failover() {
    let cluster = RedisCluster::spawn(3, 1);
    let connect = || {
        Client::builder(cluster_url(&cluster.primaries()))
            .replica_sync(ReplicaSync::Off)
            .connect()
    };
    let holder = connect().await.unwrap();
    let waiter = connect().await.unwrap();
    let name = "failover:sub";
    let channel = format!("redisson_lock__channel:{{{name}}}");
    let guard = holder.lock(name).lock().await.unwrap();
    let lock = waiter.lock(name);
    let waiting = tokio::spawn(async move { lock.lock().await.unwrap() });
    let old_primary = cluster.node_for_key(name).port();
    assert!(
        eventually(Duration::from_secs(10), || async {
            shard_subscribers(cluster.node_for_key(name), &channel) == 1
        })
        .await,
        "the waiter subscribed on the primary"
    );

    // Fail over the shard that owns the lock: promote the replica of its primary.
    let replica = cluster
        .replicas()
        .iter()
        .position(|replica| {
            let role = replica.cmd_sync(&["ROLE"]);
            let (_, _, port): (String, String, u16) = redis::from_redis_value_ref(&match role {
                redis::Value::Array(items) => redis::Value::Array(items[..3].to_vec()),
                other => other,
            })
            .unwrap();
            port == old_primary
        })
        .expect("the owning primary has a replica");
    let new_primary = cluster.failover(replica);
    assert_ne!(new_primary.port(), old_primary);
    // The demoted primary ended the subscription when it lost the slot; the client makes it
    // again in the shard (on its new primary, or on the demoted one, now a replica, to which
    // the shard's messages are replicated).
    let old_node = cluster
        .nodes()
        .iter()
        .find(|n| n.port() == old_primary)
        .unwrap();
    assert!(
        eventually(Duration::from_secs(10), || async {
            shard_subscribers(new_primary, &channel) + shard_subscribers(old_node, &channel) == 1
        })
        .await,
        "the subscription was not made again in the shard"
    );
    // The hold was replicated before the failover: the release on the new primary hands the
    // lock to the waiter.
    guard.unlock().await.unwrap();
    waiting.await.unwrap().unlock().await.unwrap();
    assert!(
        eventually(Duration::from_secs(10), || async {
            waiter.subscription_count() == 0
        })
        .await
    );
}

/// Moves `slot` from the primary `from` to the primary `to`, keys included, as a resharding
/// tool does (`SETSLOT IMPORTING/MIGRATING`, `MIGRATE`, `SETSLOT NODE` on every primary).
fn migrate_slot(cluster: &RedisCluster, slot: u16, from: &RedisServer, to: &RedisServer) {
    let id = |node: &RedisServer| -> String {
        redis::from_redis_value_ref(&node.cmd_sync(&["CLUSTER", "MYID"])).unwrap()
    };
    let (from_id, to_id, slot) = (id(from), id(to), slot.to_string());
    to.cmd_sync(&["CLUSTER", "SETSLOT", &slot, "IMPORTING", &from_id]);
    from.cmd_sync(&["CLUSTER", "SETSLOT", &slot, "MIGRATING", &to_id]);
    let keys: Vec<String> =
        redis::from_redis_value_ref(&from.cmd_sync(&["CLUSTER", "GETKEYSINSLOT", &slot, "1000"]))
            .unwrap();
    for key in keys {
        let port = to.port().to_string();
        from.cmd_sync(&["MIGRATE", "127.0.0.1", &port, &key, "0", "5000"]);
    }
    for node in cluster.primaries() {
        node.cmd_sync(&["CLUSTER", "SETSLOT", &slot, "NODE", &to_id]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharded_subscriptions_follow_a_migrated_slot() {
    let cluster = RedisCluster::spawn(3, 0);
    let connect = || {
        Client::builder(cluster_url(&cluster.primaries()))
            .replica_sync(ReplicaSync::Off)
            .connect()
    };
    let holder = connect().await.unwrap();
    let waiter = connect().await.unwrap();
    let name = "migrated:sub";
    let channel = format!("redisson_lock__channel:{{{name}}}");
    let guard = holder.lock(name).lock().await.unwrap();
    let lock = waiter.lock(name);
    let waiting = tokio::spawn(async move { lock.lock().await.unwrap() });
    let from = cluster.node_for_key(name);
    assert!(
        eventually(Duration::from_secs(10), || async {
            shard_subscribers(from, &channel) == 1
        })
        .await,
        "the waiter subscribed on the owner"
    );
    let to = *cluster
        .primaries()
        .iter()
        .find(|n| n.port() != from.port())
        .unwrap();
    migrate_slot(&cluster, cluster.key_slot(name), from, to);
    // The old owner ends the subscription with the slot; the client follows the slot (MOVED).
    assert!(
        eventually(Duration::from_secs(10), || async {
            shard_subscribers(to, &channel) == 1
        })
        .await,
        "the subscription did not follow the slot"
    );
    assert_eq!(shard_subscribers(from, &channel), 0);
    guard.unlock().await.unwrap();
    waiting.await.unwrap().unlock().await.unwrap();
}
