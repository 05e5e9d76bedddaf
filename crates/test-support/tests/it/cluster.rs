use std::collections::HashSet;
use std::time::Duration;

use latchkey_test_support::RedisCluster;
use redis::{AsyncCommands, Value};

use crate::eventually;

#[tokio::test]
async fn cluster_comes_up_serves_keys_and_fails_over() {
    let mut cluster = RedisCluster::spawn(3, 1);
    assert_eq!(cluster.nodes().len(), 6);
    assert_eq!(cluster.primaries().len(), 3);
    assert_eq!(cluster.replicas().len(), 3);
    assert_eq!(cluster.urls().len(), 6);
    for node in cluster.nodes() {
        let info = node.cluster_info();
        assert_eq!(info["cluster_state"], "ok");
        assert_eq!(info["cluster_slots_assigned"], "16384");
    }

    // Keys spread over several primaries.
    let keys: Vec<String> = (0..12).map(|i| format!("key-{i}")).collect();
    let owners: HashSet<u16> = keys
        .iter()
        .map(|k| cluster.node_for_key(k).port())
        .collect();
    assert!(owners.len() >= 2, "all keys landed on one primary");

    let mut conn = cluster.async_conn().await;
    for key in &keys {
        let () = conn.set(key, format!("value of {key}")).await.unwrap();
    }
    for key in &keys {
        let v: String = conn.get(key).await.unwrap();
        assert_eq!(v, format!("value of {key}"));
        // The node the crate names for the key really holds it.
        let owner = cluster.node_for_key(key);
        assert_eq!(
            owner.cmd_sync(&["GET", key]),
            Value::BulkString(format!("value of {key}").into_bytes())
        );
    }

    // Manual failover: the chosen replica becomes a primary.
    let replica_port = cluster.replicas()[0].port();
    let promoted = cluster.failover(0);
    assert_eq!(promoted.port(), replica_port);
    assert_eq!(promoted.info("replication")["role"], "master");
    assert_eq!(cluster.primaries().len(), 3);
    assert!(cluster.primaries().iter().any(|n| n.port() == replica_port));

    // Kill a primary: its replica is promoted automatically and the cluster heals.
    let victim = cluster
        .nodes()
        .iter()
        .position(|n| n.port() == replica_port)
        .unwrap();
    cluster.kill(victim);
    assert!(!cluster.nodes()[victim].is_running());
    cluster.wait_healthy(Duration::from_secs(90));
    assert_eq!(cluster.primaries().len(), 3);

    // Every key is still readable through a fresh cluster connection.
    let mut conn = cluster.async_conn().await;
    for key in &keys {
        let v: String = conn.get(key).await.unwrap();
        assert_eq!(v, format!("value of {key}"));
    }

    // The killed node comes back as a replica.
    cluster.node_mut(victim).restart();
    eventually(
        Duration::from_secs(60),
        "the restarted node to rejoin",
        || cluster.replicas().len() == 3,
    );
    cluster.wait_healthy(Duration::from_secs(90));
}
