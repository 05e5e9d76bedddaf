//! Leader election against real redis-servers and a Redis Cluster.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use latchkey_redis::{Client, Election, Leader};
use latchkey_test_support::{FaultProxy, RedisCluster, RedisServer, SentinelGroup};
use redis::AsyncCommands;

use crate::helpers::{builder, client, cluster_url, evalsha_calls, eventually, numsub, read};

/// A leader as `(value, term)`, to compare with [`seen`].
fn leader(value: &str, term: u64) -> Option<(String, u64)> {
    Some((value.to_owned(), term))
}

/// A leader as [`leader`] makes them.
fn seen(leader: Option<Leader>) -> Option<(String, u64)> {
    leader.map(|l| (l.value, l.term))
}

/// The next change of an observer's stream (within a hang guard).
async fn next_change<S>(changes: &mut S) -> Option<(String, u64)>
where
    S: futures_util::Stream<Item = latchkey_redis::Result<Option<Leader>>> + Unpin,
{
    let change = tokio::time::timeout(Duration::from_secs(10), changes.next())
        .await
        .expect("a change within the hang guard")
        .expect("the stream goes on")
        .expect("no error");
    seen(change)
}

/// A client whose leases (10 s) outlast every test step, so nothing expires unless a test
/// makes it.
async fn patient_client(server: &RedisServer) -> Client {
    builder(server)
        .watchdog_timeout(Duration::from_secs(10))
        .connect()
        .await
        .expect("connect")
}

/// Waits until `n` clients are registered in the wait queue of election `name`.
async fn wait_for_queue(server: &RedisServer, name: &str, n: u64) {
    let conn = server.conn().await;
    let key = format!("latchkey_election_queue:{{{name}}}");
    assert!(
        eventually(Duration::from_secs(10), || {
            let (mut conn, key) = (conn.clone(), key.clone());
            async move { conn.zcard::<_, u64>(&key).await.unwrap() == n }
        })
        .await,
        "{n} standbys registered"
    );
}

/// Standbys lead in the order they arrived, and each hand-over wakes one standby only: the
/// scripts run from the first resignation on are the resignations and one campaign per
/// standby, plus at most one parked retry per standby per 2 s (a stampede would add a campaign
/// of every standby still waiting at every hand-over).
#[tokio::test]
async fn standbys_lead_in_arrival_order_one_woken_per_hand_over() {
    let server = RedisServer::spawn();
    let first = patient_client(&server).await;
    let leadership = first.election("order").campaign("first").await.unwrap();
    let first_term = leadership.term();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..4u64 {
        let c = patient_client(&server).await;
        let order = order.clone();
        tasks.push(tokio::spawn(async move {
            let leadership = c.election("order").campaign(format!("s{i}")).await.unwrap();
            order.lock().unwrap().push((i, leadership.term()));
            leadership.resign().await.unwrap();
        }));
        wait_for_queue(&server, "order", i + 1).await;
    }
    let mut conn = server.conn().await;
    let before = evalsha_calls(&mut conn).await;
    let started = Instant::now();
    leadership.resign().await.unwrap();
    for t in tasks {
        t.await.unwrap();
    }
    let elapsed = started.elapsed();
    let calls = evalsha_calls(&mut conn).await - before;
    let order = order.lock().unwrap().clone();
    assert_eq!(
        order.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
        vec![0, 1, 2, 3]
    );
    let terms: Vec<u64> = order.iter().map(|(_, t)| *t).collect();
    assert!(
        terms[0] > first_term && terms.windows(2).all(|w| w[1] > w[0]),
        "one term per leader, in order: {first_term} then {terms:?}"
    );
    let periodic = 4 * (elapsed.as_secs_f64() / 2.0).ceil() as u64;
    assert!(
        calls <= 1 + 4 * 2 + periodic,
        "{calls} scripts in {elapsed:?}: more than one standby woken per hand-over"
    );
    assert_eq!(seen(first.election("order").leader().await.unwrap()), None);
}

/// A resignation hands the election over at once (long before the 10 s lease could run out),
/// with a larger term; `leader()` shows the new leader's value and term.
#[tokio::test]
async fn resign_hands_over_at_once_with_a_larger_term() {
    let server = RedisServer::spawn();
    let a = patient_client(&server).await;
    let b = patient_client(&server).await;
    let ea = a.election("handover");
    let eb = b.election("handover");
    let la = ea.campaign("a:1").await.unwrap();
    assert_eq!(la.value(), "a:1");
    assert_eq!(seen(eb.leader().await.unwrap()), leader("a:1", la.term()));
    assert!(eb
        .try_campaign("b:1", Duration::ZERO)
        .await
        .unwrap()
        .is_none());
    let standby = tokio::spawn(async move { eb.campaign("b:1").await.unwrap() });
    wait_for_queue(&server, "handover", 1).await;
    let term_a = la.term();
    la.resign().await.unwrap();
    let lb = tokio::time::timeout(Duration::from_secs(5), standby)
        .await
        .expect("handed over well within the lease")
        .unwrap();
    assert!(lb.term() > term_a);
    assert_eq!(seen(ea.leader().await.unwrap()), leader("b:1", lb.term()));
    assert_eq!(
        b.tracked_lock_count(),
        1,
        "the watchdog keeps the leadership"
    );
    drop(lb);
    assert!(
        eventually(Duration::from_secs(5), || {
            let ea = ea.clone();
            async move { ea.leader().await.unwrap().is_none() }
        })
        .await,
        "a dropped leadership resigns"
    );
    assert_eq!(b.tracked_lock_count(), 0);
}

/// A leader cut off from Redis (its connection black-holed, as a crashed or partitioned node)
/// is replaced within its lease, and hears `lost()` before the standby leads; the term grows
/// across the expiry.
#[tokio::test]
async fn a_cut_off_leader_hears_lost_before_a_standby_leads_within_the_lease() {
    let server = RedisServer::spawn();
    let proxy = FaultProxy::start(&server.addr());
    let a = builder(proxy.url().as_str())
        .watchdog_timeout(Duration::from_secs(1))
        .command_timeout(Duration::from_millis(200))
        .connect()
        .await
        .unwrap();
    let b = client(&server).await;
    let la = a.election("cutoff").campaign("a").await.unwrap();
    let eb = b.election("cutoff");
    let standby = tokio::spawn(async move { eb.campaign("b").await.unwrap() });
    wait_for_queue(&server, "cutoff", 1).await;
    proxy.blackhole(true);
    let lb = tokio::time::timeout(Duration::from_secs(10), standby)
        .await
        .expect("the standby leads once the lease has run out")
        .unwrap();
    // The old leader's lease ran out on its own clock before it did in Redis.
    assert!(la.is_lost(), "lost() fired before the standby led");
    assert!(lb.term() > la.term());
    proxy.blackhole(false);
    let err = la.resign().await.unwrap_err();
    assert!(err.is_not_owner(), "{err}");
    assert_eq!(
        seen(b.election("cutoff").leader().await.unwrap()),
        leader("b", lb.term())
    );
}

/// An observer sees every change in order: no leader, a leader, its new value, its
/// resignation, the next leader, that leader's expiry, the next — even when they come faster
/// than it reads. A late observer starts from the current state.
#[tokio::test]
async fn observe_sees_every_term_in_order_including_no_leader() {
    let server = RedisServer::spawn();
    let proxy = FaultProxy::start(&server.addr());
    let watcher = client(&server).await;
    let mut changes = Box::pin(watcher.election("watched").observe());
    assert_eq!(next_change(&mut changes).await, None);

    let a = client(&server).await;
    let b = builder(proxy.url().as_str())
        .watchdog_timeout(Duration::from_secs(1))
        .command_timeout(Duration::from_millis(200))
        .connect()
        .await
        .unwrap();
    let proxy_c = FaultProxy::start(&server.addr());
    let c = builder(proxy_c.url().as_str())
        .watchdog_timeout(Duration::from_secs(1))
        .command_timeout(Duration::from_millis(200))
        .connect()
        .await
        .unwrap();
    // Back to back, without waiting for the observer.
    let mut la = a.election("watched").campaign("a").await.unwrap();
    let term_a = la.term();
    la.proclaim("a2").await.unwrap();
    la.resign().await.unwrap();
    let lb = b.election("watched").campaign("b").await.unwrap();
    let term_b = lb.term();
    let lost = lb.lost();
    proxy.blackhole(true);
    let lc = c.election("watched").campaign("c").await.unwrap();
    let term_c = lc.term();
    assert!(
        term_a < term_b && term_b < term_c,
        "{term_a} {term_b} {term_c}"
    );
    lost.await;
    let mut seen = Vec::new();
    while seen.last() != Some(&leader("c", term_c)) {
        seen.push(next_change(&mut changes).await);
    }
    assert_eq!(
        seen,
        vec![
            leader("a", term_a),
            leader("a2", term_a),
            None,
            leader("b", term_b),
            None,
            leader("c", term_c)
        ]
    );
    let mut late = Box::pin(watcher.election("watched").observe());
    assert_eq!(next_change(&mut late).await, leader("c", term_c));
    // An expiry publishes nothing: the poll sees it.
    proxy_c.blackhole(true);
    lc.lost().await;
    assert_eq!(next_change(&mut changes).await, None);
    assert_eq!(next_change(&mut late).await, None);
    drop((changes, late));
    assert!(
        eventually(Duration::from_secs(5), || {
            let watcher = watcher.clone();
            async move { watcher.subscription_count() == 0 }
        })
        .await,
        "a dropped stream leaves no subscription"
    );
}

/// A campaign dropped while it waits leaves nothing: no leadership, no renewal, no
/// subscription, no wait-queue entry, and no hand-over reserved for it (the next campaign
/// after the leader resigns leads at once).
#[tokio::test]
async fn a_cancelled_campaign_leaves_nothing_behind() {
    let server = RedisServer::spawn();
    let a = patient_client(&server).await;
    let b = patient_client(&server).await;
    let conn = server.conn().await;
    let la = a.election("cancel").campaign("a").await.unwrap();
    let eb = b.election("cancel");
    let waiting = tokio::time::timeout(Duration::from_millis(300), eb.campaign("b")).await;
    assert!(waiting.is_err(), "still waiting when dropped");
    assert_eq!(b.tracked_lock_count(), 0);
    assert!(
        eventually(Duration::from_secs(5), || {
            let (b, mut conn) = (b.clone(), conn.clone());
            async move {
                let queued: u64 = conn
                    .zcard("latchkey_election_queue:{cancel}")
                    .await
                    .unwrap();
                b.subscription_count() == 0
                    && queued == 0
                    && numsub(&mut conn, "latchkey_election_channel:{cancel}").await == 0
            }
        })
        .await,
        "the cancelled standby left the queue and the channel"
    );
    la.resign().await.unwrap();
    let c = patient_client(&server).await;
    let lc = c
        .election("cancel")
        .try_campaign("c", Duration::ZERO)
        .await
        .unwrap();
    assert!(lc.is_some(), "nothing reserved for the cancelled standby");
}

/// Dropping a campaign at any point (before, during or after its script) never leaves a
/// leadership behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_campaign_at_any_point_never_strands_a_leadership() {
    let server = RedisServer::spawn();
    let a = client(&server).await;
    let election = a.election("anypoint");
    for i in 0..40u64 {
        let cut = Duration::from_micros(i * 150);
        let _ = tokio::time::timeout(cut, election.campaign("a")).await;
    }
    assert!(
        eventually(Duration::from_secs(5), || {
            let (a, election) = (a.clone(), election.clone());
            async move { a.tracked_lock_count() == 0 && election.leader().await.unwrap().is_none() }
        })
        .await,
        "every granted leadership was resigned"
    );
    let b = client(&server).await;
    assert!(b
        .election("anypoint")
        .try_campaign("b", Duration::ZERO)
        .await
        .unwrap()
        .is_some());
}

/// A leader that lost its leadership (here: the key deleted behind its back, before its
/// watchdog noticed) cannot proclaim or resign: typed errors, and the new leader's value and
/// term are untouched.
#[tokio::test]
async fn proclaim_by_a_leader_that_lost_is_refused_and_changes_nothing() {
    let server = RedisServer::spawn();
    let a = patient_client(&server).await;
    let b = patient_client(&server).await;
    let mut conn = server.conn().await;
    let mut la = a.election("fenced").campaign("a").await.unwrap();
    let term_a = la.term();
    la.proclaim("a-draining").await.unwrap();
    assert_eq!(la.value(), "a-draining");
    let _: () = conn.del("latchkey_election:{fenced}").await.unwrap();
    let lb = b
        .election("fenced")
        .try_campaign("b", Duration::ZERO)
        .await
        .unwrap()
        .expect("the election was free");
    let err = la.proclaim("a-again").await.unwrap_err();
    assert!(err.is_not_owner(), "{err}");
    assert_eq!(la.value(), "a-draining");
    let err = la.resign().await.unwrap_err();
    assert!(err.is_not_owner(), "{err}");
    assert_eq!(
        seen(b.election("fenced").leader().await.unwrap()),
        leader("b", lb.term())
    );
    assert!(lb.term() > term_a, "{} after {term_a}", lb.term());
}

/// Bad names and values are typed errors before anything is sent; keys of other types are
/// typed errors and are never written.
#[tokio::test]
async fn bad_input_is_rejected_and_changes_nothing() {
    let server = RedisServer::spawn();
    let a = client(&server).await;
    let mut conn = server.conn().await;
    for name in ["", "latchkey_x", "{x}"] {
        let election = a.election(name);
        let err = election.campaign("v").await.unwrap_err();
        assert!(err.is_invalid_argument(), "{name:?}: {err}");
        let err = election.leader().await.unwrap_err();
        assert!(err.is_invalid_argument(), "{name:?}: {err}");
        let mut changes = Box::pin(election.observe());
        let err = changes.next().await.unwrap().unwrap_err();
        assert!(err.is_invalid_argument(), "{name:?}: {err}");
        assert!(changes.next().await.is_none(), "a bad name ends the stream");
    }
    let election = a.election("values");
    let err = election.campaign("").await.unwrap_err();
    assert!(
        err.is_invalid_argument() && err.to_string().contains("empty"),
        "{err}"
    );
    let long = "v".repeat(Election::MAX_VALUE_LEN + 1);
    let err = election
        .try_campaign(long.as_str(), Duration::ZERO)
        .await
        .unwrap_err();
    assert!(
        err.is_invalid_argument() && err.to_string().contains("limit"),
        "{err}"
    );
    let err = election.try_campaign("v", Duration::MAX).await.unwrap_err();
    assert!(err.is_invalid_argument(), "{err}");
    let mut lv = election.campaign("v").await.unwrap();
    let err = lv.proclaim("").await.unwrap_err();
    assert!(err.is_invalid_argument(), "{err}");
    assert_eq!(
        seen(election.leader().await.unwrap()),
        leader("v", lv.term())
    );
    lv.resign().await.unwrap();
    // The term counter and the change log outlive the leadership by the lease (1 s) + 60 s,
    // then expire: they do not stay forever.
    for key in [
        "latchkey_election_term:{values}",
        "latchkey_election_log:{values}",
    ] {
        let ttl: i64 = conn.pttl(key).await.unwrap();
        assert!(ttl > 55_000 && ttl <= 61_000, "{key} expires in {ttl} ms");
    }
    let _: () = conn
        .del(&[
            "latchkey_election:{values}",
            "latchkey_election_term:{values}",
            "latchkey_election_log:{values}",
        ])
        .await
        .unwrap();
    let keys = crate::helpers::data_keys(&mut conn).await;
    assert!(keys.is_empty(), "nothing else was written: {keys:?}");

    // Keys of other types: typed errors, nothing written.
    let _: () = conn
        .set("latchkey_election:{occupied}", "precious")
        .await
        .unwrap();
    let err = a.election("occupied").campaign("v").await.unwrap_err();
    assert!(err.is_wrong_type(), "{err}");
    let err = a.election("occupied").leader().await.unwrap_err();
    assert!(err.is_wrong_type(), "{err}");
    let v: String = conn.get("latchkey_election:{occupied}").await.unwrap();
    assert_eq!(v, "precious");
    for (key, name) in [
        ("latchkey_election_term:{termless}", "termless"),
        ("latchkey_election_log:{logless}", "logless"),
    ] {
        let _: () = conn.hset(key, "x", "y").await.unwrap();
        let err = a.election(name).campaign("v").await.unwrap_err();
        assert!(err.is_wrong_type(), "{name}: {err}");
        let exists: bool = conn
            .exists(format!("latchkey_election:{{{name}}}"))
            .await
            .unwrap();
        assert!(!exists, "{name}: no leader written");
        let kind: String = redis::cmd("TYPE")
            .arg(key)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(kind, "hash", "{name}: the foreign key is untouched");
    }
}

/// On a cluster: elections spread over the shards hand over, fence with terms and are
/// observed through sharded pub/sub.
#[tokio::test]
async fn elections_on_a_cluster() {
    let cluster = RedisCluster::spawn(3, 0);
    let url = cluster_url(&cluster.primaries());
    let a = builder(url.as_str()).connect().await.unwrap();
    let b = builder(url.as_str()).connect().await.unwrap();
    for name in ["c-one", "c-two", "c-three", "c-{tagged}:four"] {
        let mut changes = Box::pin(b.election(name).observe());
        assert_eq!(next_change(&mut changes).await, None, "{name}");
        let la = a.election(name).campaign("a").await.unwrap();
        let term_a = la.term();
        let eb = b.election(name);
        let standby = tokio::spawn(async move { eb.campaign("b").await.unwrap() });
        assert_eq!(
            next_change(&mut changes).await,
            leader("a", term_a),
            "{name}"
        );
        // Let the standby register before the resignation.
        tokio::time::sleep(Duration::from_millis(100)).await;
        la.resign().await.unwrap();
        let lb = tokio::time::timeout(Duration::from_secs(10), standby)
            .await
            .expect("handed over")
            .unwrap();
        let term_b = lb.term();
        assert!(term_b > term_a, "{name}: {term_b} after {term_a}");
        assert_eq!(next_change(&mut changes).await, None, "{name}");
        assert_eq!(
            next_change(&mut changes).await,
            leader("b", term_b),
            "{name}"
        );
        assert_eq!(
            seen(a.election(name).leader().await.unwrap()),
            leader("b", term_b)
        );
        lb.resign().await.unwrap();
        assert_eq!(next_change(&mut changes).await, None, "{name}");
    }
}

/// Through Sentinel: campaign, hand-over on resignation, observers and `leader()`.
#[tokio::test]
async fn elections_through_sentinel() {
    let group = SentinelGroup::spawn(1, 3);
    let url = group.url();
    let a = builder(url.as_str()).connect().await.unwrap();
    let b = builder(url.as_str()).connect().await.unwrap();
    let mut changes = Box::pin(b.election("watched").observe());
    assert_eq!(next_change(&mut changes).await, None);
    let la = a.election("watched").campaign("a").await.unwrap();
    assert_eq!(next_change(&mut changes).await, leader("a", la.term()));
    let eb = b.election("watched");
    let standby = tokio::spawn(async move { eb.campaign("b").await.unwrap() });
    wait_for_queue(group.primary(), "watched", 1).await;
    la.resign().await.unwrap();
    let lb = tokio::time::timeout(Duration::from_secs(10), standby)
        .await
        .expect("handed over")
        .unwrap();
    assert_eq!(next_change(&mut changes).await, None);
    assert_eq!(next_change(&mut changes).await, leader("b", lb.term()));
    assert_eq!(
        seen(a.election("watched").leader().await.unwrap()),
        leader("b", lb.term())
    );
}

/// A resignation sent to the demoted primary (the client had not yet heard of the failover)
/// never reaches the promoted replica; when the client follows the switch it resigns again
/// there, for that term only, so the standbys need not wait for the lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resignation_lost_with_the_demoted_primary_is_made_again_on_the_new_one() {
    let group = SentinelGroup::spawn(1, 3);
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
    let key = "latchkey_election:{resend}";
    let leadership = client.election("resend").campaign("a").await.unwrap();
    let first_term = leadership.term();
    let replica = group.replicas()[0];
    assert!(
        eventually(Duration::from_secs(10), || async {
            read::<i64>(replica, &["EXISTS", key]) == 1
        })
        .await,
        "the replica has the leadership"
    );
    for proxy in &proxies {
        proxy.blackhole(true);
    }
    let (old, new) = group.manual_failover(Duration::from_secs(60));
    let server = |addr: &str| group.servers().iter().find(|s| s.addr() == addr).unwrap();
    leadership.resign().await.unwrap();
    assert_eq!(read::<i64>(server(&old), &["EXISTS", key]), 0);
    assert_eq!(
        read::<i64>(server(&new), &["EXISTS", key]),
        1,
        "the promoted replica still has the leadership"
    );
    for proxy in &proxies {
        proxy.blackhole(false);
    }
    assert!(
        eventually(Duration::from_secs(15), || async {
            read::<i64>(server(&new), &["EXISTS", key]) == 0
        })
        .await,
        "the leadership stayed on the new primary"
    );
    // Guarded by the term: a later leadership of the same handle is not ended by it.
    let again = client.election("resend").campaign("a").await.unwrap();
    assert!(again.term() > first_term);
    assert_eq!(read::<i64>(server(&new), &["EXISTS", key]), 1);
    again.resign().await.unwrap();
}

/// Handles, leaderships and leaders move across tasks and threads; the observer stream can be
/// polled from a spawned task.
#[test]
fn the_election_types_are_send_and_sync() {
    fn check<T: Send + Sync + 'static>() {}
    check::<Election>();
    check::<latchkey_redis::Leadership>();
    check::<Leader>();
    fn stream_is_send<S: futures_util::Stream + Send + 'static>(_: &S) {}
    fn observed(election: &Election) {
        stream_is_send(&election.observe());
    }
    let _ = observed;
}
