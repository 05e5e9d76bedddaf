use std::time::Duration;

use latchkey_test_support::SentinelGroup;
use redis::Value;

#[test]
fn sentinel_promotes_a_replica_when_the_primary_dies() {
    let mut group = SentinelGroup::spawn(2, 3);
    assert_eq!(group.master_name(), "mymaster");
    assert_eq!(group.quorum(), 2);
    assert_eq!(group.sentinels().len(), 3);
    assert_eq!(group.sentinel_urls().len(), 3);
    let first = group.servers()[0].addr();
    assert_eq!(group.current_primary_addr(), first);
    assert_eq!(group.primary().addr(), first);
    assert_eq!(group.replicas().len(), 2);

    // Write and make sure both replicas have it before the primary dies.
    let primary = group.primary();
    primary.cmd_sync(&["SET", "before-failover", "1"]);
    assert_eq!(primary.cmd_sync(&["WAIT", "2", "10000"]), Value::Int(2));
    let replica_addrs: Vec<String> = group.replicas().iter().map(|r| r.addr()).collect();

    let killed = group.kill_primary();
    assert_eq!(killed, first);
    let promoted = group.wait_for_failover(Duration::from_secs(90));
    assert_ne!(promoted, first);
    assert!(
        replica_addrs.contains(&promoted),
        "{promoted} was not a replica"
    );
    assert_eq!(group.current_primary_addr(), promoted);
    let new_primary = group.primary();
    assert_eq!(new_primary.info("replication")["role"], "master");
    assert_eq!(
        new_primary.cmd_sync(&["GET", "before-failover"]),
        Value::BulkString(b"1".to_vec())
    );
    // The new primary accepts writes.
    assert_eq!(
        new_primary.cmd_sync(&["SET", "after-failover", "1"]),
        Value::Okay
    );
}
