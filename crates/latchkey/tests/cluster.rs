//! Redis Cluster: hash-tagged keys, sharded pub/sub wake-ups, slot-grouped renewal, failover.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use latchkey::Client;
use latchkey_test_support::RedisCluster;

fn url(cluster: &RedisCluster) -> String {
    let hosts: Vec<String> = cluster.primaries().iter().map(|node| node.addr()).collect();
    format!("redis+cluster://{}", hosts.join(","))
}

async fn retry<T, F, Fut>(mut op: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = latchkey::Result<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match op().await {
            Ok(v) => return v,
            Err(e)
                if (e.is_connection() || matches!(e, latchkey::Error::Redis(_)))
                    && Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("{e}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_across_all_shards_renew_wake_and_survive_a_failover() {
    let cluster = RedisCluster::spawn(3, 1);
    let connect = || {
        Client::builder(url(&cluster))
            .watchdog_timeout(Duration::from_secs(1))
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
        let guard = retry(|| {
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
        let client = Client::connect(url(&cluster)).await.unwrap();
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
}

#[tokio::test]
async fn names_with_their_own_hash_tag_stay_in_one_slot() {
    let cluster = RedisCluster::spawn(3, 0);
    let client = Client::connect(url(&cluster)).await.unwrap();
    let lock = client.lock("orders{eu}:1");
    let guard = lock.lock().await.unwrap();
    let waiter = tokio::spawn({
        let lock = Client::connect(url(&cluster))
            .await
            .unwrap()
            .lock("orders{eu}:1");
        async move { lock.lock().await.unwrap() }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    guard.unlock().await.unwrap();
    waiter.await.unwrap().unlock().await.unwrap();
    let node = cluster.node_for_key("eu");
    let token = node.cmd_sync(&["GET", "redisson_lock_token:orders{eu}:1"]);
    assert_eq!(token, redis::Value::BulkString(b"2".to_vec()));
}
