//! The delayed queue and the reliable blocking queue on Redis Cluster: every key and channel of
//! a queue in one slot (no CROSSSLOT), notices published with SPUBLISH on the owning shard, and
//! transfer agents that wake there.
//!
//! One 3-primary cluster without replicas is shared by the tests of this module; every test uses
//! its own queue names.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use latchkey_redis::Client;
use latchkey_test_support::{RedisCluster, RedisServer};
use rand::seq::SliceRandom;
use redis::aio::MultiplexedConnection;
use redis::{AsyncCommands, Value};
use serde::{Deserialize, Serialize};

use crate::helpers::{cluster_url, eventually, now_ms, queue_client};

/// How long a test waits for something that must happen before it gives up (a liveness bound
/// for a hung test, never a speed assertion).
const PATIENCE: Duration = Duration::from_secs(20);

/// The payload a test publishes to end an [`observe`]r.
const STOP: &str = "observer-stop";

/// The key prefixes of one queue (see the `DelayedQueue` docs).
const KEY_PREFIXES: [&str; 8] = [
    "latchkey_delay_queue_timeout",
    "latchkey_queue",
    "latchkey_queue_items",
    "latchkey_queue_unacked",
    "latchkey_queue_attempts",
    "latchkey_queue_dead",
    "latchkey_queue_dead_reason",
    "latchkey_queue_due",
];

static CLUSTER: OnceLock<RedisCluster> = OnceLock::new();

/// The cluster shared by the tests of this file, started by the first test that asks.
async fn cluster() -> &'static RedisCluster {
    tokio::task::spawn_blocking(|| {
        let mut started = false;
        let cluster = CLUSTER.get_or_init(|| {
            started = true;
            RedisCluster::spawn(3, 0)
        });
        if started {
            cluster.remove_dirs_at_exit();
        }
        cluster
    })
    .await
    .expect("start the cluster")
}

/// A client of the cluster, seeded with every primary.
async fn client() -> Client {
    queue_client(&cluster_url(&primaries().await)).await
}

/// `<prefix>:{<name>}`: a key or channel of a queue whose name has no hash tag.
fn derived(prefix: &str, name: &str) -> String {
    format!("{prefix}:{{{name}}}")
}

/// Queue names `<prefix>-<i>`, one for each primary, each with the primary that owns its keys
/// (found with `CLUSTER KEYSLOT` of its ready list and the slot table).
async fn names_on_every_shard(prefix: &str) -> Vec<(String, &'static RedisServer)> {
    let cluster = cluster().await;
    let prefix = prefix.to_owned();
    tokio::task::spawn_blocking(move || {
        let primaries = cluster.primaries().len();
        assert_eq!(primaries, 3, "three primaries");
        let mut found: Vec<(String, &'static RedisServer)> = Vec::new();
        for i in 0..1000 {
            let name = format!("{prefix}-{i}");
            let slot = cluster.key_slot(&derived("latchkey_queue", &name));
            let node = cluster.node_for_slot(slot);
            if !found.iter().any(|(_, n)| n.port() == node.port()) {
                found.push((name, node));
            }
            if found.len() == primaries {
                break;
            }
        }
        assert_eq!(found.len(), primaries, "names for every shard: {found:?}");
        found
    })
    .await
    .unwrap()
}

/// The primaries, asked off the runtime's threads.
async fn primaries() -> Vec<&'static RedisServer> {
    let cluster = cluster().await;
    tokio::task::spawn_blocking(move || cluster.primaries())
        .await
        .unwrap()
}

async fn keyslot(conn: &mut MultiplexedConnection, key: &str) -> i64 {
    redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(key)
        .query_async(conn)
        .await
        .unwrap()
}

/// The keys on `node` whose names contain `needle`.
async fn keys_on(node: &RedisServer, needle: &str) -> BTreeSet<String> {
    let mut conn = node.conn().await;
    let all: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut conn)
        .await
        .unwrap();
    all.into_iter().filter(|k| k.contains(needle)).collect()
}

/// `PUBSUB SHARDNUMSUB` (sharded) or `PUBSUB NUMSUB` (classic) of `channel` on `node`.
async fn subscribers(conn: &mut MultiplexedConnection, which: &str, channel: &str) -> i64 {
    let (_, n): (String, i64) = redis::cmd("PUBSUB")
        .arg(which)
        .arg(channel)
        .query_async(conn)
        .await
        .unwrap();
    n
}

/// `INFO commandstats` of `node`: command name → calls.
async fn command_calls(node: &RedisServer) -> HashMap<String, u64> {
    let mut conn = node.conn().await;
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut conn)
        .await
        .unwrap();
    info.lines()
        .filter_map(|line| {
            let (name, rest) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest
                .strip_prefix("calls=")?
                .split(',')
                .next()?
                .parse()
                .ok()?;
            Some((name.to_owned(), calls))
        })
        .collect()
}

fn text(value: &Value) -> String {
    match value {
        Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        Value::SimpleString(s) => s.clone(),
        other => panic!("not a string: {other:?}"),
    }
}

/// Subscribes a plain connection (not latchkey's) to `channels` on `node` with SSUBSCRIBE and
/// returns a task that collects `(channel, message)` until [`STOP`] arrives. Subscribed when
/// this returns.
async fn observe(
    node: &'static RedisServer,
    channels: Vec<String>,
) -> tokio::task::JoinHandle<Vec<(String, String)>> {
    let mut con = tokio::task::spawn_blocking(move || {
        let mut con = node.client().get_connection().unwrap();
        con.set_read_timeout(Some(PATIENCE)).unwrap();
        con.send_packed_command(&redis::cmd("SSUBSCRIBE").arg(&channels).get_packed_command())
            .unwrap();
        for channel in &channels {
            let Value::Array(reply) = con.recv_response().unwrap() else {
                panic!("no SSUBSCRIBE confirmation for {channel}");
            };
            assert_eq!(text(&reply[0]), "ssubscribe");
        }
        con
    })
    .await
    .unwrap();
    tokio::task::spawn_blocking(move || {
        let mut got = Vec::new();
        loop {
            let reply = con
                .recv_response()
                .expect("the observer got its stop message");
            let Value::Array(parts) = reply else {
                panic!("not a message: {reply:?}");
            };
            assert_eq!(text(&parts[0]), "smessage", "{parts:?}");
            let (channel, message) = (text(&parts[1]), text(&parts[2]));
            if message == STOP {
                return got;
            }
            got.push((channel, message));
        }
    })
}

/// A test job: which queue and which item.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq, Hash)]
struct Job {
    queue: String,
    n: u64,
}

/// When an offered item is due, by the wall clock: no earlier than `lo` (the clock read before
/// the offer call plus the delay) and no later than `hi` (read after the call, plus the delay,
/// plus the millisecond the server rounds up).
#[derive(Clone, Copy, Debug)]
struct Due {
    lo: u64,
    hi: u64,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delayed_items_on_every_shard_arrive_once_never_early_in_due_order() {
    const BATCH: u64 = 20;
    const SINGLE: u64 = 10;
    const N: u64 = BATCH + SINGLE;
    let queues = names_on_every_shard("shards").await;
    let producer = client().await;
    let consumer = client().await;

    // Consumers wait on every queue before anything is offered: they must be woken.
    let mut consumers = Vec::new();
    for (name, _) in &queues {
        let queue = consumer.blocking_queue::<Job>(name.clone());
        consumers.push(tokio::spawn(async move {
            let mut got = Vec::new();
            for _ in 0..N {
                let job = tokio::time::timeout(PATIENCE, queue.take_at_most_once())
                    .await
                    .unwrap_or_else(|_| panic!("only {} items arrived", got.len()))
                    .unwrap();
                got.push((job, now_ms()));
            }
            got
        }));
    }
    let delayed: Vec<_> = queues
        .iter()
        .map(|(name, _)| producer.delayed_queue::<Job>(name.clone()))
        .collect();

    // Both clients' transfer agents listen for due-time notices, and the waiting consumer for
    // ready notices, with sharded subscriptions on the shard that owns the queue, and nothing
    // listens through classic pub/sub.
    for (name, node) in &queues {
        let mut conn = node.conn().await;
        let delay_channel = derived("latchkey_delay_queue_channel", name);
        let ready_channel = derived("latchkey_queue_channel", name);
        assert!(
            eventually(PATIENCE, || {
                let (mut conn, delay_channel, ready_channel) =
                    (conn.clone(), delay_channel.clone(), ready_channel.clone());
                async move {
                    subscribers(&mut conn, "SHARDNUMSUB", &delay_channel).await == 2
                        && subscribers(&mut conn, "SHARDNUMSUB", &ready_channel).await == 1
                }
            })
            .await,
            "sharded subscribers of {name}: {} agents, {} consumers",
            subscribers(&mut conn, "SHARDNUMSUB", &delay_channel).await,
            subscribers(&mut conn, "SHARDNUMSUB", &ready_channel).await
        );
        for other in primaries().await {
            let mut conn = other.conn().await;
            for channel in [&delay_channel, &ready_channel] {
                assert_eq!(subscribers(&mut conn, "NUMSUB", channel).await, 0);
            }
        }
    }
    let mut observers = Vec::new();
    for (name, node) in &queues {
        observers.push(
            observe(
                node,
                vec![
                    derived("latchkey_delay_queue_channel", name),
                    derived("latchkey_queue_channel", name),
                ],
            )
            .await,
        );
    }

    // Per queue: 20 items in one call, delays 50..240 ms shuffled, then 10 one by one with
    // delays 55..280 ms.
    let mut due: HashMap<Job, Due> = HashMap::new();
    let mut rng = rand::rng();
    for (queue, (name, _)) in delayed.iter().zip(&queues) {
        let mut delays: Vec<u64> = (0..BATCH).map(|n| 50 + 10 * n).collect();
        delays.shuffle(&mut rng);
        let jobs: Vec<(Job, u64)> = delays
            .iter()
            .enumerate()
            .map(|(n, &d)| {
                let job = Job {
                    queue: name.clone(),
                    n: n as u64,
                };
                (job, d)
            })
            .collect();
        let before = now_ms();
        let ids = queue
            .offer_all(
                jobs.iter()
                    .map(|(job, d)| (job.clone(), Duration::from_millis(*d))),
            )
            .await
            .unwrap();
        let after = now_ms();
        assert_eq!(ids.len(), BATCH as usize);
        for (job, d) in jobs {
            due.insert(
                job,
                Due {
                    lo: before + d,
                    hi: after + d + 1,
                },
            );
        }
    }
    for n in BATCH..N {
        for (queue, (name, _)) in delayed.iter().zip(&queues) {
            let d = 55 + 25 * (n - BATCH);
            let job = Job {
                queue: name.clone(),
                n,
            };
            let before = now_ms();
            queue.offer(&job, Duration::from_millis(d)).await.unwrap();
            let after = now_ms();
            due.insert(
                job,
                Due {
                    lo: before + d,
                    hi: after + d + 1,
                },
            );
        }
    }

    let mut lateness = Vec::new();
    for ((name, node), task) in queues.iter().zip(consumers) {
        let got = task.await.unwrap();
        // Exactly once: every item of this queue, none twice, none of another queue.
        let ns: HashSet<u64> = got.iter().map(|(job, _)| job.n).collect();
        assert_eq!(ns, (0..N).collect(), "{name}: every item once");
        for (job, taken_ms) in &got {
            assert_eq!(&job.queue, name, "an item of another queue");
            let due = due[job];
            assert!(
                *taken_ms >= due.lo,
                "{name}: item {} taken at {taken_ms}, before it was due at {}",
                job.n,
                due.lo
            );
            lateness.push(taken_ms.saturating_sub(due.hi));
        }
        // In due order: no item is taken after one that was certainly due later.
        for (i, (earlier, _)) in got.iter().enumerate() {
            for (later, _) in &got[i + 1..] {
                assert!(
                    due[later].hi >= due[earlier].lo,
                    "{name}: item {} (due {:?}) was taken after item {} (due {:?})",
                    later.n,
                    due[later],
                    earlier.n,
                    due[earlier]
                );
            }
        }
        // Nothing is left: no duplicate in flight, and no key of the queue on any node.
        let ready = consumer.blocking_queue::<Job>(name.clone());
        assert_eq!(
            ready
                .poll_at_most_once(Duration::from_millis(200))
                .await
                .unwrap(),
            None
        );
        for other in primaries().await {
            let left = keys_on(other, &format!("{{{name}}}")).await;
            assert!(
                left.is_empty(),
                "{name}: keys left on {}: {left:?}",
                other.addr()
            );
        }
        let mut conn = node.conn().await;
        let _: i64 = conn
            .spublish(derived("latchkey_queue_channel", name), STOP)
            .await
            .unwrap();
    }
    lateness.sort_unstable();
    let worst = *lateness.last().unwrap();
    println!(
        "lateness after the due time: median {} ms, worst {worst} ms",
        lateness[lateness.len() / 2]
    );
    // Agents woken by the sharded due-time notice and consumers by the sharded ready notice
    // deliver within milliseconds; an agent left to its 1 s fallback poll or a consumer to its
    // 2 s park would show here.
    assert!(worst < 900, "an item arrived {worst} ms after it was due");

    // The notices went to sharded subscribers on the owning shard: due times on the delay
    // channel, and on the ready channel counts adding up to one announcement per item (each
    // item moved to the ready list once, though two agents raced for it).
    for ((name, _), observer) in queues.iter().zip(observers) {
        let seen = observer.await.unwrap();
        let delay_channel = derived("latchkey_delay_queue_channel", name);
        let ready_channel = derived("latchkey_queue_channel", name);
        let (min_lo, max_hi) = due
            .iter()
            .filter(|(job, _)| &job.queue == name)
            .fold((u64::MAX, 0), |(lo, hi), (_, d)| {
                (lo.min(d.lo), hi.max(d.hi))
            });
        let due_notices: Vec<u64> = seen
            .iter()
            .filter(|(channel, _)| *channel == delay_channel)
            .map(|(_, m)| m.parse().unwrap())
            .collect();
        assert!(!due_notices.is_empty(), "{name}: no due-time notice");
        for notice in &due_notices {
            assert!(
                (min_lo..=max_hi).contains(notice),
                "{name}: due-time notice {notice} outside {min_lo}..={max_hi}"
            );
        }
        let announced: u64 = seen
            .iter()
            .filter(|(channel, _)| *channel == ready_channel)
            .map(|(_, m)| m.parse::<u64>().unwrap())
            .sum();
        assert_eq!(announced, N, "{name}: ready notices");
    }
    for node in primaries().await {
        let calls = command_calls(node).await;
        assert!(
            calls.get("spublish").copied().unwrap_or(0) > 0,
            "{}: no SPUBLISH: {calls:?}",
            node.addr()
        );
        assert_eq!(
            calls.get("publish"),
            None,
            "{}: a classic PUBLISH",
            node.addr()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_is_ready_at_once_on_every_shard() {
    const N: u64 = 20;
    let queues = names_on_every_shard("at-once").await;
    let client = client().await;
    for (name, _) in &queues {
        let delayed = client.delayed_queue::<u64>(name.clone());
        let queue = client.blocking_queue::<u64>(name.clone());
        // Ready when `put` (or a zero-delay offer) returns, not only once a transfer agent has
        // moved it: a look without waiting finds it.
        for n in 0..N {
            queue.put(&n).await.unwrap();
            assert_eq!(
                queue.poll_at_most_once(Duration::ZERO).await.unwrap(),
                Some(n),
                "{name}: put item {n} was not ready at once"
            );
            delayed.offer(&(N + n), Duration::ZERO).await.unwrap();
            assert_eq!(
                queue.poll_at_most_once(Duration::ZERO).await.unwrap(),
                Some(N + n),
                "{name}: zero-delay item {} was not ready at once",
                N + n
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reliable_deliveries_on_every_shard_come_back_until_acknowledged() {
    let queues = names_on_every_shard("reliable").await;
    let client = client().await;
    let mut tasks = Vec::new();
    for (name, node) in queues {
        let client = client.clone();
        tasks.push(tokio::spawn(async move {
            let short = Duration::from_millis(300);
            let delayed = client.delayed_queue::<String>(name.clone());
            // A visibility timeout far longer than the test: what comes back within it was
            // given back, not timed out.
            let patient = client
                .blocking_queue::<String>(name.clone())
                .with_visibility_timeout(Duration::from_secs(60))
                .unwrap();
            let hasty = client
                .blocking_queue::<String>(name.clone())
                .with_visibility_timeout(short)
                .unwrap();
            let mut conn = node.conn().await;
            let unacked = derived("latchkey_queue_unacked", &name);

            let id = delayed
                .offer(&format!("job of {name}"), Duration::from_millis(100))
                .await
                .unwrap();
            let first = tokio::time::timeout(PATIENCE, patient.take())
                .await
                .unwrap()
                .unwrap();
            assert_eq!(first.id(), &id);
            assert_eq!(first.attempt(), 1);
            assert_eq!(*first, format!("job of {name}"));
            assert_eq!(patient.in_flight().await.unwrap(), 1);
            let deadline: Option<f64> = conn.zscore(&unacked, id.as_str()).await.unwrap();
            assert!(
                deadline.is_some(),
                "{name}: the delivery is in the unacked zset"
            );
            assert!(
                patient.poll(Duration::ZERO).await.unwrap().is_none(),
                "{name}: invisible while out"
            );

            // Dropped without acknowledgement: given back at once, long before the 60 s
            // visibility timeout.
            drop(first);
            let second = tokio::time::timeout(PATIENCE, patient.take())
                .await
                .unwrap_or_else(|_| panic!("{name}: the dropped delivery was not given back"))
                .unwrap();
            assert_eq!(second.id(), &id);
            assert_eq!(second.attempt(), 2);
            assert!(second.nack().await.unwrap().is_released());

            // A consumer that dies before acknowledging: back after the visibility timeout.
            let claimed_after = Instant::now();
            let third = hasty.take().await.unwrap();
            assert_eq!(third.id(), &id);
            assert_eq!(third.attempt(), 3);
            std::mem::forget(third);
            let fourth = tokio::time::timeout(PATIENCE, patient.take())
                .await
                .unwrap()
                .unwrap();
            assert!(
                claimed_after.elapsed() >= short,
                "{name}: redelivered before the visibility timeout ran out"
            );
            assert_eq!(fourth.id(), &id);
            assert_eq!(fourth.attempt(), 4);

            // Acknowledged: gone for good.
            assert!(fourth.ack().await.unwrap().is_acked());
            assert_eq!(patient.len().await.unwrap(), 0);
            assert_eq!(patient.in_flight().await.unwrap(), 0);
            assert_eq!(delayed.len().await.unwrap(), 0);
            assert!(patient
                .poll(Duration::from_millis(400))
                .await
                .unwrap()
                .is_none());
            let left = keys_on(node, &format!("{{{name}}}")).await;
            assert!(left.is_empty(), "{name}: keys left: {left:?}");
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn items_due_while_no_client_runs_are_delivered_when_a_client_starts() {
    const N: u64 = 10;
    let queues = names_on_every_shard("offline").await;
    {
        let producer = client().await;
        for (name, _) in &queues {
            let queue = producer.delayed_queue::<u64>(name.clone());
            queue
                .offer_all((0..N).map(|n| (n, Duration::from_millis(200 + 10 * n))))
                .await
                .unwrap();
        }
        // The producer, and with it its transfer agents, goes away before anything is due.
    }
    // Past the last due time (290 ms).
    tokio::time::sleep(Duration::from_millis(700)).await;
    for (name, node) in &queues {
        let mut conn = node.conn().await;
        let waiting: u64 = conn
            .zcard(derived("latchkey_delay_queue_timeout", name))
            .await
            .unwrap();
        assert_eq!(waiting, N, "{name}: nothing moved while no client ran");
        let ready: u64 = conn.llen(derived("latchkey_queue", name)).await.unwrap();
        assert_eq!(ready, 0, "{name}: nothing moved while no client ran");
    }

    // A fresh consumer alone starts: its agents move everything that came due.
    let consumer = client().await;
    for (name, node) in &queues {
        let queue = consumer.blocking_queue::<u64>(name.clone());
        let mut got = Vec::new();
        for _ in 0..N {
            got.push(
                tokio::time::timeout(PATIENCE, queue.take_at_most_once())
                    .await
                    .unwrap()
                    .unwrap(),
            );
        }
        assert_eq!(got, (0..N).collect::<Vec<_>>(), "{name}: in due order");
        assert!(queue
            .poll_at_most_once(Duration::ZERO)
            .await
            .unwrap()
            .is_none());
        let left = keys_on(node, &format!("{{{name}}}")).await;
        assert!(left.is_empty(), "{name}: keys left: {left:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_with_their_own_hash_tag_keep_every_key_in_one_slot() {
    let client = client().await;
    for name in ["jobs:{eu}", "jobs:{us}", "mail:{eu}"] {
        let delayed = client.delayed_queue::<u64>(name);
        let numbers = client.blocking_queue::<u64>(name);
        let words = client.blocking_queue::<String>(name);

        // A waiting consumer is woken by the sharded ready notice of a put.
        let waiting = {
            let numbers = numbers.clone();
            tokio::spawn(async move { numbers.take_at_most_once().await })
        };
        let deadline = Instant::now() + PATIENCE;
        let channels = loop {
            let channels = shard_channels(name).await;
            if channels.len() == 2 {
                break channels;
            }
            assert!(
                Instant::now() < deadline,
                "{name}: the agent's and the consumer's channels: {channels:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        numbers.put(&1).await.unwrap();
        assert_eq!(
            tokio::time::timeout(PATIENCE, waiting)
                .await
                .unwrap()
                .unwrap()
                .unwrap(),
            1
        );

        // Every script runs: offer, pending, remove, transfer, take, requeue, extend, ack,
        // dead-letter.
        let started = Instant::now();
        delayed.offer(&2, Duration::from_millis(100)).await.unwrap();
        let far = delayed.offer(&99, Duration::from_secs(3600)).await.unwrap();
        let cancelled = delayed.offer(&98, Duration::from_secs(3600)).await.unwrap();
        assert!(delayed.remove(&cancelled).await.unwrap());
        assert!(!delayed.remove(&cancelled).await.unwrap());
        let pending = delayed.pending(10).await.unwrap();
        let pending: Vec<_> = pending.iter().map(|p| (p.id.clone(), p.item)).collect();
        assert_eq!(
            pending.last(),
            Some(&(far.clone(), 99)),
            "{name}: {pending:?}"
        );
        assert!(pending.iter().all(|(id, _)| *id != cancelled));
        assert_eq!(
            tokio::time::timeout(PATIENCE, numbers.take_at_most_once())
                .await
                .unwrap()
                .unwrap(),
            2
        );
        assert!(started.elapsed() >= Duration::from_millis(100));

        numbers.put(&4).await.unwrap();
        let delivery = numbers.take().await.unwrap();
        assert_eq!(*delivery, 4);
        assert!(delivery.extend(Duration::from_secs(60)).await.unwrap());
        drop(delivery);
        let delivery = tokio::time::timeout(PATIENCE, numbers.take())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(delivery.attempt(), 2);
        assert!(delivery
            .nack_after(Duration::from_millis(50))
            .await
            .unwrap()
            .is_released());
        let held = tokio::time::timeout(PATIENCE, numbers.take())
            .await
            .unwrap()
            .unwrap();
        assert_eq!((*held, held.attempt()), (4, 3));

        words.put(&"not a number".to_owned()).await.unwrap();
        let none = numbers.poll_at_most_once(Duration::ZERO).await.unwrap();
        assert_eq!(
            none, None,
            "{name}: the bad item is dead-lettered, not delivered"
        );
        assert_eq!(numbers.dead_letter_len().await.unwrap(), 1);
        let acked = numbers.put(&5).await.unwrap();
        let delivery = numbers.take().await.unwrap();
        assert_eq!(delivery.id(), &acked);
        assert!(delivery.ack().await.unwrap().is_acked());
        numbers.put(&6).await.unwrap();

        // Now every key of the queue exists: a waiting item (99), a ready one (6), one in
        // flight (4) and a dead letter. All of them, and the channels, share one slot.
        assert_eq!(delayed.len().await.unwrap(), 1);
        assert_eq!(numbers.len().await.unwrap(), 1);
        assert_eq!(numbers.in_flight().await.unwrap(), 1);
        let mut found: Vec<(u16, String, String)> = Vec::new();
        for node in primaries().await {
            let mut conn = node.conn().await;
            for key in keys_on(node, name).await {
                let slot = keyslot(&mut conn, &key).await as u16;
                found.push((slot, key, node.addr()));
            }
        }
        let prefixes: BTreeSet<&str> = found
            .iter()
            .map(|(_, key, _)| key.split_once(':').unwrap().0)
            .collect();
        assert_eq!(
            prefixes,
            KEY_PREFIXES.into_iter().collect(),
            "{name}: the queue's keys: {found:?}"
        );
        assert_eq!(found.len(), KEY_PREFIXES.len(), "{name}: {found:?}");
        let slots: BTreeSet<u16> = found.iter().map(|(slot, _, _)| *slot).collect();
        assert_eq!(
            slots.len(),
            1,
            "{name}: keys in more than one slot: {found:?}"
        );
        let slot = *slots.first().unwrap();
        for (channel_slot, channel) in &channels {
            assert_eq!(*channel_slot, slot, "{name}: {channel} in another slot");
        }
        // The slot of the name's own hash tag, as for every other object (Redisson's rule).
        let tag = &name[name.find('{').unwrap()..];
        let mut conn = primaries().await[0].conn().await;
        assert_eq!(
            keyslot(&mut conn, tag).await as u16,
            slot,
            "{name}: the queue is not in the slot of its hash tag {tag}: {found:?}"
        );
        drop(held);
    }
}

/// The shard channels with subscribers whose names contain `name`, on any primary, with their
/// slots.
async fn shard_channels(name: &str) -> BTreeSet<(u16, String)> {
    let mut channels = BTreeSet::new();
    for node in primaries().await {
        let mut conn = node.conn().await;
        let listed: Vec<String> = redis::cmd("PUBSUB")
            .arg("SHARDCHANNELS")
            .query_async(&mut conn)
            .await
            .unwrap();
        for channel in listed.into_iter().filter(|c| c.contains(name)) {
            let slot = keyslot(&mut conn, &channel).await as u16;
            channels.insert((slot, channel));
        }
    }
    channels
}
