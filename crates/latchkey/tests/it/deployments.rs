//! Where users run Redis: Sentinel, TLS, ACL users.

use std::time::Duration;

use latchkey_redis::Client;
use latchkey_test_support::{FaultProxy, RedisServer, SentinelGroup, TlsFiles};

use crate::helpers::{eventually, read, retry, retry_while};

/// The documented minimal ACL for locks (see the README's "ACL" section).
const LOCK_ACL: &str = "app on >app-secret ~* &redisson_lock__channel:* \
    -@all +evalsha +eval +script|load +ping +subscribe +unsubscribe +exists +hget +pttl \
    +type +hset +hexists +hincrby +hgetall +pexpire +incr +get +set +del +publish \
    +zadd +zrem +zrange +zcard +zscore +hlen +hdel +time";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_failover_under_a_held_lock_and_a_waiter() {
    let mut group = SentinelGroup::spawn(1, 3);
    let url = group.url();
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
    // Besides connection errors, a grant may be undone as not replicated while the failover is
    // under way (`ReplicaSync::Auto` takes a primary that lost its replicas for a suspect one,
    // for the loss grace, unless it knows it for a fresh promotion): the waiter tries again.
    let waiter = tokio::spawn({
        let lock = b.lock("failover");
        async move {
            let transient = |e: &latchkey_redis::Error| e.is_connection() || e.is_not_replicated();
            retry_while(transient, || {
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
        assert!(err.is_config(), "{url}: {err}");
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
    assert!(err.is_connection(), "{err:?}");
    // The message says what failed; why (the certificate) is in its `source()`.
    let mut why = String::new();
    let mut cause = std::error::Error::source(&err);
    while let Some(e) = cause {
        why.push_str(&e.to_string());
        cause = e.source();
    }
    assert!(why.contains("certificate"), "says why: {err:?}");
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
    assert!(err.is_auth(), "{err:?}");
    assert!(err.is_permission_denied(), "{err:?}");

    let err = Client::connect(format!("redis://nopub:wrong@127.0.0.1:{}", server.port()))
        .await
        .unwrap_err();
    assert!(err.is_auth_failed(), "{err:?}");
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
    assert!(err.is_not_replicated(), "{err}");
    assert!(
        !client.lock("unsynced").is_locked().await.unwrap(),
        "undone"
    );

    // Off: no waiting.
    let plain = Client::builder(primary.url())
        .replica_sync(latchkey_redis::ReplicaSync::Off)
        .connect()
        .await
        .unwrap();
    assert_eq!(plain.replica_sync(), None);
    let err = Client::builder(primary.url())
        .replica_sync(latchkey_redis::ReplicaSync::Require {
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
    let url = group.url();
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
    assert_eq!(status.holders[0].owner, guard.owner_id());
    guard.unlock().await.unwrap();
}

/// The names of the keys on `server` that match `pattern`, sorted.
fn keys(server: &RedisServer, pattern: &str) -> Vec<String> {
    let mut keys: Vec<String> = read(server, &["KEYS", pattern]);
    keys.sort();
    keys
}

/// A client that demands one replica's acknowledgement for every acquire.
async fn require_one_replica(primary: &RedisServer, timeout: Duration) -> Client {
    let client = Client::builder(primary.url())
        .replica_sync(latchkey_redis::ReplicaSync::Require {
            replicas: 1,
            timeout,
        })
        .connect()
        .await
        .unwrap();
    assert_eq!(client.replica_sync(), Some((1, timeout)));
    client
}

#[tokio::test]
async fn every_lock_family_acquire_is_undone_when_no_replica_acknowledges() {
    let primary = RedisServer::spawn();
    let replica = RedisServer::builder().replica_of(&primary.addr()).spawn();
    replica.wait_until_synced(Duration::from_secs(30));
    let client = require_one_replica(&primary, Duration::from_millis(300)).await;
    let semaphore = client.semaphore("sem");
    assert!(semaphore.try_set_permits(3).await.unwrap());
    let permits = client.permit_semaphore("psem");
    assert!(permits.try_set_permits(3).await.unwrap());
    let before = keys(&primary, "*");

    let fair = client.fair_lock("fair");
    let rw = client.rw_lock("rw");
    let waits = primary.command_calls("wait");
    // A replica that does not answer: every acquire is granted on the primary, WAITed for in
    // vain, undone and reported.
    replica.pause_process();
    let errors = [
        ("fair lock", fair.lock().await.map(drop)),
        ("write lock", rw.write().lock().await.map(drop)),
        ("read lock", rw.read().lock().await.map(drop)),
        ("semaphore", semaphore.acquire(2).await.map(drop)),
        ("permit semaphore", permits.acquire(2).await.map(drop)),
    ];
    // Read the state while the replica is still paused: nothing may be left held.
    let after = keys(&primary, "*");
    let fair_exists: i64 = read(&primary, &["EXISTS", "fair"]);
    let rw_exists: i64 = read(&primary, &["EXISTS", "rw"]);
    let read_leases = keys(&primary, "*rwlock_timeout*");
    let fair_queue: i64 = read(&primary, &["LLEN", "redisson_lock_queue:{fair}"]);
    let sem_available: i64 = read(&primary, &["GET", "sem"]);
    let psem_available: i64 = read(&primary, &["GET", "psem"]);
    let psem_leases: i64 = read(&primary, &["ZCARD", "{psem}:timeout"]);
    replica.resume_process();

    for (what, result) in errors {
        match result {
            Err(e) => assert!(e.is_not_replicated(), "{what}: {e}"),
            Ok(()) => panic!("{what}: granted although no replica acknowledged it"),
        }
    }
    assert_eq!(fair_exists, 0, "the fair lock hold was undone");
    assert_eq!(fair_queue, 0, "the fair lock queue is empty");
    assert_eq!(rw_exists, 0, "the read and write holds were undone");
    assert!(
        read_leases.is_empty(),
        "read lease keys left: {read_leases:?}"
    );
    assert_eq!(sem_available, 3, "the semaphore permits were given back");
    assert_eq!(
        psem_available, 3,
        "the permit semaphore permits were given back"
    );
    assert_eq!(psem_leases, 0, "no permit lease is left");
    // Only the fencing counters the write grants advanced are new (tokens never go back).
    let mut expected = before.clone();
    expected.extend(["latchkey_rwlock_token:{rw}", "redisson_lock_token:{fair}"].map(String::from));
    expected.sort();
    assert_eq!(after, expected, "keys before the acquires: {before:?}");
    assert!(
        primary.command_calls("wait") >= waits + 5,
        "every acquire sent a WAIT"
    );
    // Through the API too, and nothing is left to renew.
    assert!(!fair.is_locked().await.unwrap());
    assert!(!rw.is_locked().await.unwrap());
    assert_eq!(semaphore.available_permits().await.unwrap(), 3);
    assert_eq!(permits.available_permits().await.unwrap(), 3);
    assert_eq!(permits.leased().await.unwrap(), 0);
    assert_eq!(client.tracked_lock_count(), 0);
}

#[tokio::test]
async fn every_lock_family_acquire_waits_until_the_replica_has_it() {
    let primary = RedisServer::spawn();
    let replica = RedisServer::builder().replica_of(&primary.addr()).spawn();
    replica.wait_until_synced(Duration::from_secs(30));
    let client = require_one_replica(&primary, Duration::from_secs(2)).await;
    let semaphore = client.semaphore("sem");
    assert!(semaphore.try_set_permits(3).await.unwrap());
    let permits = client.permit_semaphore("psem");
    assert!(permits.try_set_permits(3).await.unwrap());
    // Load the acquire scripts: the first use of a script on a server finds it missing
    // (NOSCRIPT) after the pipelined WAIT ran, and runs the pipeline again.
    client
        .lock("warm")
        .lock()
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
    client
        .fair_lock("warm-fair")
        .lock()
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
    let warm = client.rw_lock("warm-rw");
    warm.write().lock().await.unwrap().unlock().await.unwrap();
    warm.read().lock().await.unwrap().unlock().await.unwrap();
    semaphore.acquire(1).await.unwrap().release().await.unwrap();
    permits.acquire(1).await.unwrap().release().await.unwrap();
    let waits = primary.command_calls("wait");

    // Each acquire returns only once the replica acknowledged it, so the replica is read right
    // away, without waiting for replication to catch up.
    let lock = client.lock("lock");
    let lock_guard = lock.lock().await.unwrap();
    let holds: Option<i64> = read(&replica, &["HGET", "lock", lock_guard.owner_id()]);
    assert_eq!(holds, Some(1), "lock");

    let fair = client.fair_lock("fair");
    let fair_guard = fair.lock().await.unwrap();
    let holds: Option<i64> = read(&replica, &["HGET", "fair", fair_guard.owner_id()]);
    assert_eq!(holds, Some(1), "fair lock");

    let rw = client.rw_lock("rw");
    let write_guard = rw.write().lock().await.unwrap();
    let mode: Option<String> = read(&replica, &["HGET", "rw", "mode"]);
    let holds: Option<i64> = read(&replica, &["HGET", "rw", write_guard.owner_id()]);
    assert_eq!(
        (mode.as_deref(), holds),
        (Some("write"), Some(1)),
        "write lock"
    );

    let shared = client.rw_lock("shared");
    let read_guard = shared.read().lock().await.unwrap();
    let mode: Option<String> = read(&replica, &["HGET", "shared", "mode"]);
    let holds: Option<i64> = read(&replica, &["HGET", "shared", read_guard.owner_id()]);
    let lease: i64 = read(
        &replica,
        &[
            "EXISTS",
            &format!("{{shared}}:{}:rwlock_timeout:1", read_guard.owner_id()),
        ],
    );
    assert_eq!(
        (mode.as_deref(), holds, lease),
        (Some("read"), Some(1), 1),
        "read lock"
    );

    let taken = semaphore.acquire(2).await.unwrap();
    let available: i64 = read(&replica, &["GET", "sem"]);
    assert_eq!(available, 1, "semaphore");

    let leased = permits.acquire(2).await.unwrap();
    let available: i64 = read(&replica, &["GET", "psem"]);
    let leases: i64 = read(&replica, &["ZCARD", "{psem}:timeout"]);
    assert_eq!((available, leases), (1, 2), "permit semaphore");

    assert_eq!(
        primary.command_calls("wait") - waits,
        6,
        "one WAIT per acquire, pipelined with it"
    );
    lock_guard.unlock().await.unwrap();
    fair_guard.unlock().await.unwrap();
    write_guard.unlock().await.unwrap();
    read_guard.unlock().await.unwrap();
    taken.release().await.unwrap();
    leased.release().await.unwrap();
    assert_eq!(semaphore.available_permits().await.unwrap(), 3);
    assert_eq!(permits.available_permits().await.unwrap(), 3);
}

#[tokio::test]
async fn auto_replica_sync_covers_every_lock_family_acquire() {
    let primary = RedisServer::spawn();
    let mut replica = RedisServer::builder().replica_of(&primary.addr()).spawn();
    replica.wait_until_synced(Duration::from_secs(30));
    let grace = Duration::from_millis(500);
    let client = Client::builder(primary.url())
        .replica_loss_grace(grace)
        .connect()
        .await
        .unwrap();
    assert_eq!(client.replica_sync(), Some((1, Duration::from_secs(1))));
    let semaphore = client.semaphore("sem");
    assert!(semaphore.try_set_permits(3).await.unwrap());
    let permits = client.permit_semaphore("psem");
    assert!(permits.try_set_permits(3).await.unwrap());

    // A replica that is connected but silent: the grant is undone, as with `Require`.
    replica.pause_process();
    let fair = client.fair_lock("fair").lock().await.map(drop);
    let sem = semaphore.acquire(1).await.map(drop);
    let available: i64 = read(&primary, &["GET", "sem"]);
    let fair_exists: i64 = read(&primary, &["EXISTS", "fair"]);
    replica.resume_process();
    let fair = fair.expect_err("fair lock granted without the replica");
    let sem = sem.expect_err("semaphore permits taken without the replica");
    assert!(fair.is_not_replicated(), "{fair}");
    assert!(sem.is_not_replicated(), "{sem}");
    assert_eq!((fair_exists, available), (0, 3), "both were undone");

    // No replica at all. Losing every replica is what a failover looks like from the demoted
    // primary: grants are undone for the replica loss grace. After it the loss is taken for
    // real: the first acquire may find that out by one WAIT; after it, every kind of acquire
    // goes on without waiting (and nothing is undone).
    replica.kill();
    primary.wait_until_replicas(0, Duration::from_secs(10));
    let refused = client.fair_lock("fair").lock().await.unwrap_err();
    assert!(refused.is_not_replicated(), "{refused}");
    assert_eq!(read::<i64>(&primary, &["EXISTS", "fair"]), 0, "undone");
    tokio::time::sleep(grace).await;
    let before = primary.command_calls("wait");
    let rw = client.rw_lock("rw");
    let fair = client.fair_lock("fair").lock().await.unwrap();
    let write = rw.write().lock().await.unwrap();
    write.unlock().await.unwrap();
    let read_hold = rw.read().lock().await.unwrap();
    let taken = semaphore.acquire(1).await.unwrap();
    let leased = permits.acquire(1).await.unwrap();
    let waits = primary.command_calls("wait") - before;
    assert!(
        waits <= 1,
        "with no replica left, acquires must go on without waiting, yet {waits} of 5 sent a WAIT"
    );
    fair.unlock().await.unwrap();
    read_hold.unlock().await.unwrap();
    taken.release().await.unwrap();
    leased.release().await.unwrap();
}

/// A release sent to the demoted primary — the client had not yet heard of the failover —
/// never reaches the promoted replica, which would keep the hold for the rest of its lease.
/// When the client follows the switch it releases again there, guarded by the hold's fencing
/// token so that no later grant is touched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_lost_with_the_demoted_primary_is_made_again_on_the_new_one() {
    let group = SentinelGroup::spawn(1, 3);
    // The client reaches the sentinels through proxies, so that it can be made deaf to them.
    let proxies: Vec<FaultProxy> = group
        .sentinels()
        .iter()
        .map(|sentinel| FaultProxy::start(&sentinel.addr()))
        .collect();
    let hosts: Vec<String> = proxies.iter().map(FaultProxy::addr).collect();
    let url = format!(
        "redis+sentinel://{}/{}",
        hosts.join(","),
        group.master_name()
    );
    let client = Client::connect(url).await.unwrap();
    // Waited for: the replica has the hold before the acquire returns.
    let guard = client.lock("resend").lock().await.unwrap();

    for proxy in &proxies {
        proxy.blackhole(true);
    }
    let (old, new) = group.manual_failover(Duration::from_secs(60));
    let server = |addr: &str| group.servers().iter().find(|s| s.addr() == addr).unwrap();
    // The client still talks to the demoted primary, which takes the release.
    guard.unlock().await.unwrap();
    assert_eq!(read::<i64>(server(&old), &["EXISTS", "resend"]), 0);
    assert_eq!(
        read::<i64>(server(&new), &["EXISTS", "resend"]),
        1,
        "the promoted replica still has the hold"
    );

    // The client hears the sentinels again, follows the switch and releases again there, long
    // before the hold's 30 s lease would have ended it.
    for proxy in &proxies {
        proxy.blackhole(false);
    }
    assert!(
        eventually(Duration::from_secs(15), || async {
            read::<i64>(server(&new), &["EXISTS", "resend"]) == 0
        })
        .await,
        "the hold stayed on the new primary"
    );
    // The fencing guard: a later grant is never released by the re-send.
    let again = client.lock("resend").lock().await.unwrap();
    assert_eq!(read::<i64>(server(&new), &["EXISTS", "resend"]), 1);
    again.unlock().await.unwrap();
}
