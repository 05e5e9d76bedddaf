//! RedLock against 3 and 5 real, independent redis-servers.

use std::time::{Duration, Instant};

use latchkey_redis::{Client, Error, LockOptions, RedLock};
use latchkey_test_support::{free_port, FaultProxy, RedisServers};
use redis::AsyncCommands;

use crate::helpers::{builder, evalsha_calls, eventually};

/// A client of one RedLock node: the settings of `helpers::client` with 2 s command and connect
/// timeouts, so that a dead node fails its request well within a test's patience.
fn node_builder(url: &str) -> latchkey_redis::ClientBuilder {
    builder(url)
        .watchdog_timeout(Duration::from_secs(1))
        .command_timeout(Duration::from_secs(2))
        .connect_timeout(Duration::from_secs(2))
}

async fn node_client(url: &str) -> Client {
    node_builder(url).connect().await.expect("connect")
}

/// A node client that connects on first use (see `ClientBuilder::connect_lazy`).
fn lazy_client(url: &str) -> Client {
    node_builder(url).connect_lazy().expect("a lazy client")
}

async fn clients(servers: &RedisServers) -> Vec<Client> {
    let mut clients = Vec::new();
    for url in servers.urls() {
        clients.push(node_client(&url).await);
    }
    clients
}

/// A RedLock with a per-node timeout generous enough for a loaded test machine.
fn redlock(name: &str, clients: Vec<Client>) -> RedLock {
    RedLock::builder(name, clients)
        .per_node_timeout(Duration::from_millis(500))
        .retry_delay(Duration::from_millis(20))
        .build()
        .unwrap()
}

async fn held_on(servers: &RedisServers, key: &str) -> Vec<bool> {
    let mut out = Vec::new();
    for server in servers.iter() {
        if !server.is_running() {
            out.push(false);
            continue;
        }
        let mut conn = server.conn().await;
        out.push(conn.exists(key).await.unwrap());
    }
    out
}

#[tokio::test]
async fn node_sets_are_checked() {
    let servers = RedisServers::spawn(4);
    let all = clients(&servers).await;
    let err = RedLock::new("x", all[..2].to_vec()).unwrap_err();
    assert!(err.is_invalid_argument(), "{err}");
    let err = RedLock::new("x", all.clone()).unwrap_err();
    assert!(err.is_invalid_argument(), "even: {err}");
    let twice = vec![all[0].clone(), all[1].clone(), all[0].clone()];
    let err = RedLock::new("x", twice).unwrap_err();
    assert!(err.to_string().contains("twice"), "{err}");
    // Another client for the same server (another database even) is the same node.
    let same = node_client(&format!("{}/3", servers[1].url())).await;
    let err = RedLock::new("x", vec![all[0].clone(), all[1].clone(), same]).unwrap_err();
    assert!(err.is_invalid_argument(), "{err}");
    assert!(RedLock::new("", all[..3].to_vec())
        .unwrap_err()
        .is_invalid_argument());
    let lock = RedLock::new("x", all[..3].to_vec()).unwrap();
    assert_eq!((lock.node_count(), lock.quorum()), (3, 2));
}

#[tokio::test]
async fn locks_and_unlocks_every_node_of_three() {
    let servers = RedisServers::spawn(3);
    let lock = redlock("three", clients(&servers).await);
    let guard = lock.lock().await.unwrap();
    assert_eq!(guard.nodes(), vec![0, 1, 2]);
    assert_eq!(held_on(&servers, "three").await, [true, true, true]);
    assert!(guard.fencing_token().is_some());
    assert!(guard.valid_until() > tokio::time::Instant::now());
    // Redisson RLock layout on each node: a hash with the owner's field.
    let mut conn = servers[0].conn().await;
    let count: u64 = conn.hget("three", guard.owner_id()).await.unwrap();
    assert_eq!(count, 1);
    // Busy for everybody else.
    let other = redlock("three", clients(&servers).await);
    assert!(other.try_lock(Duration::ZERO).await.unwrap().is_none());
    assert!(other
        .try_lock(Duration::from_millis(200))
        .await
        .unwrap()
        .is_none());
    guard.unlock().await.unwrap();
    assert_eq!(held_on(&servers, "three").await, [false, false, false]);
    let guard = other.try_lock(Duration::ZERO).await.unwrap().expect("free");
    guard.unlock().await.unwrap();
}

#[tokio::test]
async fn one_node_of_three_killed_still_acquires() {
    let mut servers = RedisServers::spawn(3);
    let lock = redlock("one-down", clients(&servers).await);
    servers[1].kill();
    let guard = lock.lock().await.unwrap();
    assert_eq!(guard.nodes(), vec![0, 2]);
    assert_eq!(held_on(&servers, "one-down").await, [true, false, true]);
    guard.unlock().await.unwrap();
    assert_eq!(held_on(&servers, "one-down").await, [false, false, false]);
}

#[tokio::test]
async fn one_node_of_three_stalled_still_acquires_within_the_per_node_timeout() {
    let servers = RedisServers::spawn(3);
    let lock = redlock("stalled", clients(&servers).await);
    servers[2].pause_process();
    let guard = lock.lock().await;
    servers[2].resume_process();
    let guard = guard.unwrap();
    assert_eq!(guard.nodes(), vec![0, 1]);
    guard.unlock().await.unwrap();
    // The stalled node got the acquire late, and the unlock releases it there too.
    let check = &servers;
    assert!(
        eventually(Duration::from_secs(10), || async move {
            held_on(check, "stalled").await == [false, false, false]
        })
        .await
    );
}

#[tokio::test]
async fn one_node_of_five_killed_still_acquires() {
    let mut servers = RedisServers::spawn(5);
    let lock = redlock("five", clients(&servers).await);
    servers[3].kill();
    let guard = lock.lock().await.unwrap();
    assert_eq!(guard.nodes(), vec![0, 1, 2, 4]);
    guard.unlock().await.unwrap();
}

#[tokio::test]
async fn majority_of_five_killed_is_quorum_unavailable_and_leaves_nothing_locked() {
    let mut servers = RedisServers::spawn(5);
    let lock = redlock("majority-down", clients(&servers).await);
    for i in [0, 2, 4] {
        servers[i].kill();
    }
    let err = lock.lock().await.unwrap_err();
    match err {
        Error::QuorumUnavailable {
            acquired,
            nodes,
            quorum,
        } => {
            assert_eq!(
                (acquired, nodes, quorum),
                (2, 5, 3),
                "the two live nodes granted it"
            );
        }
        other => panic!("expected QuorumUnavailable, got {other:?}"),
    }
    assert!(lock
        .try_lock(Duration::from_secs(5))
        .await
        .unwrap_err()
        .is_quorum_unavailable());
    assert_eq!(
        held_on(&servers, "majority-down").await,
        [false; 5],
        "the grants of the live nodes were released"
    );
}

#[tokio::test]
async fn majority_of_three_stalled_is_quorum_unavailable_after_the_per_node_timeout() {
    let servers = RedisServers::spawn(3);
    let lock = redlock("majority-stalled", clients(&servers).await);
    servers[0].pause_process();
    servers[1].pause_process();
    let result = lock.lock().await;
    servers[0].resume_process();
    servers[1].resume_process();
    assert!(result.unwrap_err().is_quorum_unavailable());
    // The stalled nodes process the acquire and then the release when they resume.
    let check = &servers;
    assert!(
        eventually(Duration::from_secs(10), || async move {
            held_on(check, "majority-stalled").await == [false, false, false]
        })
        .await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mutual_exclusion_across_clients_with_increasing_fencing_tokens() {
    let servers = RedisServers::spawn(3);
    const ROUNDS: u64 = 10;
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let lock = redlock("counter", clients(&servers).await);
        let mut conn = servers[0].conn().await;
        tasks.push(tokio::spawn(async move {
            let mut tokens = Vec::new();
            for _ in 0..ROUNDS {
                let guard = lock.lock().await.unwrap();
                let token = guard.fencing_token().unwrap();
                // A deliberately non-atomic read-modify-write, with the order of tokens seen.
                let v: Option<u64> = conn.get("value").await.unwrap();
                let last: Option<u64> = conn.get("last-token").await.unwrap();
                tokio::task::yield_now().await;
                let _: () = conn.set("value", v.unwrap_or(0) + 1).await.unwrap();
                let _: () = conn.set("last-token", token.get()).await.unwrap();
                guard.unlock().await.unwrap();
                tokens.push((last, token));
            }
            tokens
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.unwrap());
    }
    let mut conn = servers[0].conn().await;
    let v: u64 = conn.get("value").await.unwrap();
    assert_eq!(v, 4 * ROUNDS);
    for (previous, token) in &all {
        if let Some(previous) = previous {
            assert!(*token > *previous, "token {token} after {previous}");
        }
    }
    let mut tokens: Vec<u64> = all.iter().map(|(_, t)| t.get()).collect();
    tokens.sort_unstable();
    tokens.dedup();
    assert_eq!(
        tokens.len() as u64,
        4 * ROUNDS,
        "every hold has its own token"
    );
}

#[tokio::test]
async fn fencing_tokens_grow_even_when_quorums_differ() {
    let mut servers = RedisServers::spawn(3);
    let lock = redlock("fenced", clients(&servers).await);
    let unfenced = RedLock::builder("plain", clients(&servers).await)
        .per_node_timeout(Duration::from_millis(500))
        .fencing(false)
        .build()
        .unwrap();
    // Push node 2's counter far ahead (an hour past its clock in µs, which tokens otherwise
    // follow): holds that include node 2 get large tokens.
    let mut conn = servers[2].conn().await;
    let (s, us): (u64, u64) = redis::cmd("TIME").query_async(&mut conn).await.unwrap();
    let ahead = s * 1_000_000 + us + 3_600_000_000;
    let _: () = conn
        .set("redisson_lock_token:{fenced}", ahead)
        .await
        .unwrap();
    let first = lock.lock().await.unwrap();
    let t1 = first.fencing_token().unwrap();
    assert!(t1 > ahead, "{t1} after {ahead}");
    first.unlock().await.unwrap();
    // Without node 2, the next quorum is {0, 1}: its token must still be larger.
    servers[2].kill();
    let second = lock.lock().await.unwrap();
    let t2 = second.fencing_token().unwrap();
    assert!(t2 > t1, "{t2} after {t1}");
    second.unlock().await.unwrap();
    let guard = unfenced.lock().await.unwrap();
    assert_eq!(guard.fencing_token(), None);
    guard.unlock().await.unwrap();
}

#[tokio::test]
async fn with_every_node_up_a_fenced_lock_and_unlock_is_two_round_trips() {
    let servers = RedisServers::spawn(3);
    let lock = redlock("steady", clients(&servers).await);
    // The first acquire loads the scripts; counters start in step.
    lock.lock().await.unwrap().unlock().await.unwrap();
    let mut conns = Vec::new();
    for server in servers.iter() {
        conns.push(server.conn().await);
    }
    let mut before = Vec::new();
    for conn in &mut conns {
        before.push(evalsha_calls(conn).await);
    }
    let guard = lock.lock().await.unwrap();
    let token = guard.fencing_token().unwrap();
    guard.unlock().await.unwrap();
    for (conn, before) in conns.iter_mut().zip(before) {
        assert_eq!(
            evalsha_calls(conn).await - before,
            2,
            "acquire and release only"
        );
    }
    let next = lock.lock().await.unwrap();
    assert!(next.fencing_token().unwrap() > token);
    next.unlock().await.unwrap();
}

#[tokio::test]
async fn the_watchdog_keeps_the_quorum_and_lost_fires_when_it_is_gone() {
    let mut servers = RedisServers::spawn(3);
    let lock = redlock("kept", clients(&servers).await); // watchdog timeout 1 s
    let guard = lock.lock().await.unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(!guard.is_lost());
    assert_eq!(held_on(&servers, "kept").await, [true, true, true]);
    servers[0].kill();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(!guard.is_lost(), "two of three still hold it");
    assert_eq!(held_on(&servers, "kept").await, [false, true, true]);
    servers[1].kill();
    tokio::time::timeout(Duration::from_secs(10), guard.lost())
        .await
        .expect("lost once a single node is left");
    assert!(guard.unlock().await.unwrap_err().is_quorum_unavailable());
}

#[tokio::test]
async fn a_fixed_lease_is_lost_at_the_end_of_its_validity() {
    let servers = RedisServers::spawn(3);
    let lock = redlock("fixed", clients(&servers).await);
    let guard = lock
        .lock_with(LockOptions::new().lease(Duration::from_millis(500)))
        .await
        .unwrap();
    let valid_until = guard.valid_until();
    tokio::time::timeout(Duration::from_secs(10), guard.lost())
        .await
        .expect("lost at the end of the validity");
    assert!(tokio::time::Instant::now() >= valid_until);
    assert!(
        eventually(Duration::from_secs(10), || async {
            held_on(&servers, "fixed").await == [false, false, false]
        })
        .await,
        "expired on every node"
    );
    assert!(guard.unlock().await.unwrap_err().is_not_owner());
    let err = lock
        .lock_with(LockOptions::new().lease(Duration::ZERO))
        .await
        .unwrap_err();
    assert!(err.is_invalid_argument());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_acquires_leave_nothing_locked() {
    let servers = RedisServers::spawn(3);
    let cs = clients(&servers).await;
    let lock = redlock("cancel", cs.clone());
    for i in 0..30u64 {
        let lock = lock.clone();
        let task = tokio::spawn(async move {
            let _guard = lock.lock().await;
            std::future::pending::<()>().await;
        });
        tokio::time::sleep(Duration::from_micros(i * 200)).await;
        task.abort();
    }
    assert!(
        eventually(Duration::from_secs(10), || async {
            held_on(&servers, "cancel").await == [false, false, false]
        })
        .await,
        "nothing left locked"
    );
    assert!(
        eventually(Duration::from_secs(10), || async {
            cs.iter().all(|c| c.tracked_lock_count() == 0)
        })
        .await
    );
    let guard = lock.try_lock(Duration::ZERO).await.unwrap().expect("free");
    guard.unlock().await.unwrap();
}

#[tokio::test]
async fn wrong_type_on_a_node_is_a_typed_error_and_nothing_stays_locked() {
    let servers = RedisServers::spawn(3);
    let mut conn = servers[1].conn().await;
    let _: () = conn.set("typed", "x").await.unwrap();
    let lock = redlock("typed", clients(&servers).await);
    assert!(lock.lock().await.unwrap_err().is_wrong_type());
    let mut c0 = servers[0].conn().await;
    assert!(!c0.exists::<_, bool>("typed").await.unwrap());
    let v: String = conn.get("typed").await.unwrap();
    assert_eq!(v, "x");
}

#[tokio::test]
async fn starts_with_one_node_down_locks_with_the_quorum_and_uses_the_node_once_it_is_up() {
    let mut servers = RedisServers::spawn(3);
    servers[1].kill();
    let urls = servers.urls();
    // A connected client cannot be made for the down node; a lazy one can.
    assert!(Client::connect(urls[1].as_str())
        .await
        .unwrap_err()
        .is_connection());
    let nodes: Vec<Client> = urls.iter().map(|url| lazy_client(url)).collect();
    let lock = RedLock::builder("start-down", nodes)
        .per_node_timeout(Duration::from_secs(5))
        .retry_delay(Duration::from_millis(20))
        .build()
        .unwrap();
    // The first call locks with the two live nodes, without waiting out the per-node timeout
    // on the refusing one (a hang guard: asking it until the timeout would take 5 s).
    let started = Instant::now();
    let guard = lock.lock().await.unwrap();
    assert!(
        started.elapsed() < Duration::from_millis(2500),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(guard.nodes(), vec![0, 2]);
    assert_eq!(lock.down_nodes(), vec![1]);
    assert_eq!(held_on(&servers, "start-down").await, [true, false, true]);
    guard.unlock().await.unwrap();
    assert_eq!(held_on(&servers, "start-down").await, [false, false, false]);

    // The node comes up: the lock uses it again (found by the background probe).
    servers[1].restart();
    let (lock, check) = (&lock, &servers);
    assert!(
        eventually(Duration::from_secs(15), || async move {
            let guard = lock.try_lock(Duration::ZERO).await.unwrap().expect("free");
            let everywhere = guard.nodes() == [0, 1, 2]
                && held_on(check, "start-down").await == [true, true, true];
            guard.unlock().await.unwrap();
            everywhere
        })
        .await,
        "the restarted node holds the lock again"
    );
    assert_eq!(held_on(&servers, "start-down").await, [false, false, false]);
}

#[tokio::test]
async fn a_refusing_node_is_skipped_without_waiting_for_the_per_node_timeout() {
    let servers = RedisServers::spawn(3);
    let proxy = FaultProxy::start(&servers[1].addr());
    let urls = [servers[0].url(), proxy.url(), servers[2].url()];
    let nodes: Vec<Client> = urls.iter().map(|url| lazy_client(url)).collect();
    let lock = RedLock::builder("skipped", nodes)
        .per_node_timeout(Duration::from_secs(5))
        .retry_delay(Duration::from_millis(20))
        .build()
        .unwrap();
    let guard = lock.lock().await.unwrap();
    assert_eq!(guard.nodes(), vec![0, 1, 2]);
    guard.unlock().await.unwrap();

    // The middle node refuses: the next acquire finds it unreachable and marks it down.
    proxy.refuse(true);
    proxy.drop_connections();
    let guard = lock.lock().await.unwrap();
    assert_eq!(guard.nodes(), vec![0, 2]);
    assert_eq!(lock.down_nodes(), vec![1]);
    guard.unlock().await.unwrap();

    // Now anything sent to it would hang: asking it would cost the 5 s per-node timeout (the
    // bound is a hang guard, not a speed assertion). A down node is skipped instead, by the
    // acquire and by the unlock, while the probe keeps finding it unusable.
    proxy.blackhole(true);
    proxy.refuse(false);
    for _ in 0..3 {
        let started = Instant::now();
        // Were the node asked, no attempt could finish within the 1 s lease: a hang guard.
        let guard = tokio::time::timeout(Duration::from_secs(20), lock.lock())
            .await
            .expect("the down node was asked")
            .unwrap();
        assert_eq!(guard.nodes(), vec![0, 2]);
        guard.unlock().await.unwrap();
        assert!(
            started.elapsed() < Duration::from_millis(2500),
            "the down node was asked: {:?}",
            started.elapsed()
        );
        assert_eq!(held_on(&servers, "skipped").await, [false, false, false]);
    }

    // Once it answers again it is used again.
    proxy.blackhole(false);
    let (lock, check) = (&lock, &servers);
    assert!(
        eventually(Duration::from_secs(15), || async move {
            let guard = lock.try_lock(Duration::ZERO).await.unwrap().expect("free");
            let everywhere =
                guard.nodes() == [0, 1, 2] && held_on(check, "skipped").await == [true, true, true];
            guard.unlock().await.unwrap();
            everywhere
        })
        .await,
        "the node is used again"
    );
    assert!(lock.down_nodes().is_empty());
}

#[tokio::test]
async fn with_a_majority_down_nothing_is_skipped_and_there_is_no_quorum() {
    let servers = RedisServers::spawn(1);
    let dead = [free_port(), free_port()].map(|port| format!("redis://127.0.0.1:{port}"));
    let nodes = vec![
        lazy_client(&dead[0]),
        lazy_client(&servers[0].url()),
        lazy_client(&dead[1]),
    ];
    let lock = redlock("majority-refused", nodes);
    for _ in 0..3 {
        let err = lock.lock().await.unwrap_err();
        assert!(err.is_quorum_unavailable(), "{err}");
    }
    let mut conn = servers[0].conn().await;
    assert!(!conn.exists::<_, bool>("majority-refused").await.unwrap());
    assert_eq!(lock.down_nodes(), vec![0, 2]);
}

#[tokio::test]
async fn the_probe_of_a_down_node_runs_while_the_lock_lives_and_stops_with_it() {
    let servers = RedisServers::spawn(2);
    let port = free_port();
    let nodes = vec![
        lazy_client(&servers[0].url()),
        lazy_client(&format!("redis://127.0.0.1:{port}")),
        lazy_client(&servers[1].url()),
    ];
    let lock = redlock("probed", nodes);
    lock.lock().await.unwrap().unlock().await.unwrap();
    assert_eq!(lock.down_nodes(), vec![1]);
    // Something listens on the port now (and never answers): the probe connects to it.
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .unwrap();
    let (probe, _) = tokio::time::timeout(Duration::from_secs(15), listener.accept())
        .await
        .expect("the down node is probed")
        .unwrap();
    drop(probe);
    // Dropping the lock (the last owner of the clients) stops the probe. Connections already
    // on their way are let through first.
    drop(lock);
    while let Ok(Ok(_)) = tokio::time::timeout(Duration::from_millis(1500), listener.accept()).await
    {
    }
    // Probes are at most 3 s apart (2 s ± half); none comes in twice that.
    assert!(
        tokio::time::timeout(Duration::from_secs(6), listener.accept())
            .await
            .is_err(),
        "a probe outlived its lock"
    );
}

#[tokio::test]
async fn two_namespaces_hold_redlocks_of_one_name_at_once() {
    let servers = RedisServers::spawn(3);
    let mut tenants = Vec::new();
    for namespace in ["tenant-a", "tenant-b"] {
        let mut nodes = Vec::new();
        for url in servers.urls() {
            nodes.push(
                Client::builder(url)
                    .namespace(namespace)
                    .connect()
                    .await
                    .unwrap(),
            );
        }
        tenants.push(nodes);
    }
    let a = redlock("jobs", tenants[0].clone());
    let b = redlock("jobs", tenants[1].clone());
    assert_eq!((a.name(), b.name()), ("jobs", "jobs"));
    let guard_a = a
        .try_lock(Duration::ZERO)
        .await
        .unwrap()
        .expect("a is free");
    let guard_b = b
        .try_lock(Duration::ZERO)
        .await
        .unwrap()
        .expect("b does not collide with a");
    assert_eq!(held_on(&servers, "tenant-a:jobs").await, [true; 3]);
    assert_eq!(held_on(&servers, "tenant-b:jobs").await, [true; 3]);
    assert_eq!(held_on(&servers, "jobs").await, [false; 3]);
    // The same tenant still excludes itself, and its `Lock` of that name.
    let a_again = redlock("jobs", tenants[0].clone());
    assert!(a_again.try_lock(Duration::ZERO).await.unwrap().is_none());
    assert!(tenants[0][0]
        .lock("jobs")
        .try_lock(Duration::ZERO)
        .await
        .unwrap()
        .is_none());
    guard_a.unlock().await.unwrap();
    guard_b.unlock().await.unwrap();
    assert_eq!(held_on(&servers, "tenant-a:jobs").await, [false; 3]);

    // Nodes whose clients disagree on the namespace would key the lock differently on each.
    let mixed = vec![
        tenants[0][0].clone(),
        tenants[1][1].clone(),
        tenants[0][2].clone(),
    ];
    let err = RedLock::new("jobs", mixed).unwrap_err();
    assert!(err.is_invalid_argument(), "{err}");
    assert!(err.to_string().contains("namespace"), "{err}");
}

#[test]
fn lazy_clients_are_single_servers_made_within_a_runtime() {
    let err = Client::builder("redis://127.0.0.1:1")
        .connect_lazy()
        .unwrap_err();
    assert!(err.to_string().contains("runtime"), "{err}");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _entered = runtime.enter();
    for url in [
        "redis+cluster://127.0.0.1:1,127.0.0.1:2",
        "redis+sentinel://127.0.0.1:1/mymaster",
    ] {
        let err = Client::builder(url).connect_lazy().unwrap_err();
        assert!(err.is_config(), "{url}: {err}");
    }
    let err = Client::builder("redis://127.0.0.1:1")
        .namespace("no spaces")
        .connect_lazy()
        .unwrap_err();
    assert!(err.is_invalid_argument(), "{err}");
    let client = Client::builder("redis://127.0.0.1:1")
        .connect_lazy()
        .unwrap();
    assert_eq!(client.namespace(), None);
}

#[test]
fn handles_and_guards_are_send_and_sync() {
    fn check<T: Send + Sync + 'static>() {}
    check::<RedLock>();
    check::<latchkey_redis::RedLockGuard>();
}
