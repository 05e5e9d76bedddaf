//! The durable delayed queue against a real redis-server.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use latchkey_redis::{Client, DelayedQueue, ItemId};
use latchkey_test_support::RedisServer;
use rand::seq::SliceRandom;
use rand::Rng;
use redis::AsyncCommands;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use crate::helpers::{evalsha_calls, eventually, now_ms, queue_client};

/// How long a test waits for something that must happen before it gives up (a liveness bound
/// for a hung test, never a speed assertion).
const PATIENCE: Duration = Duration::from_secs(60);

/// A test job: which one, when it was offered (wall clock, taken before the offer call) and
/// with which delay.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
struct Job {
    n: u64,
    offered_ms: u64,
    delay_ms: u64,
}

impl Job {
    fn due_ms(&self) -> u64 {
        self.offered_ms + self.delay_ms
    }
}

async fn zcard(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> u64 {
    conn.zcard(key).await.unwrap()
}

fn keys(name: &str) -> (String, String, String) {
    (
        format!("latchkey_delay_queue_timeout:{{{name}}}"),
        format!("latchkey_queue:{{{name}}}"),
        format!("latchkey_queue_items:{{{name}}}"),
    )
}

/// Spawns `tasks` consumers on `client` that `take()` jobs forever and report them with the
/// wall-clock time they arrived.
fn spawn_consumers(
    client: &Client,
    name: &str,
    tasks: usize,
    out: &mpsc::UnboundedSender<(Job, u64)>,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..tasks)
        .map(|_| {
            let queue = client.blocking_queue::<Job>(name);
            let out = out.clone();
            tokio::spawn(async move {
                loop {
                    let job = queue.take_at_most_once().await.expect("take");
                    if out.send((job, now_ms())).is_err() {
                        return;
                    }
                }
            })
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ten_thousand_items_with_mixed_delays_arrive_once_each_and_never_early() {
    const N: u64 = 10_000;
    let server = RedisServer::spawn();
    let producer = queue_client(&server).await;
    let consumers = [queue_client(&server).await, queue_client(&server).await];
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut tasks = Vec::new();
    for consumer in &consumers {
        tasks.extend(spawn_consumers(consumer, "mixed", 2, &tx));
    }

    let queue = producer.delayed_queue::<Job>("mixed");
    let mut rng = rand::rng();
    let delays: Vec<u64> = (0..N)
        .map(|n| match n % 4 {
            0 => 0,
            1 => rng.random_range(1..50),
            _ => rng.random_range(50..2000),
        })
        .collect();
    // 8000 through offer_all in batches of 500, 2000 one by one from concurrent tasks.
    let mut offers = Vec::new();
    for chunk in (0..8000u64).collect::<Vec<_>>().chunks(500) {
        let offered_ms = now_ms();
        let jobs: Vec<(Job, Duration)> = chunk
            .iter()
            .map(|&n| {
                let delay_ms = delays[n as usize];
                (
                    Job {
                        n,
                        offered_ms,
                        delay_ms,
                    },
                    Duration::from_millis(delay_ms),
                )
            })
            .collect();
        let ids = queue.offer_all(jobs).await.unwrap();
        assert_eq!(ids.len(), chunk.len());
    }
    for t in 0..4u64 {
        let queue = queue.clone();
        let delays = delays.clone();
        offers.push(tokio::spawn(async move {
            for n in (8000 + t * 500)..(8000 + (t + 1) * 500) {
                let delay_ms = delays[n as usize];
                let job = Job {
                    n,
                    offered_ms: now_ms(),
                    delay_ms,
                };
                queue
                    .offer(&job, Duration::from_millis(delay_ms))
                    .await
                    .unwrap();
            }
        }));
    }
    for offer in offers {
        offer.await.unwrap();
    }

    let mut seen: HashMap<u64, u64> = HashMap::new();
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while seen.len() < N as usize {
        let (job, at) = tokio::time::timeout_at(deadline, rx.recv())
            .await
            .unwrap_or_else(|_| panic!("only {} of {N} items arrived", seen.len()))
            .unwrap();
        assert!(
            at >= job.due_ms(),
            "job {} arrived at {at}, before its due time {}",
            job.n,
            job.due_ms()
        );
        assert!(
            seen.insert(job.n, at).is_none(),
            "job {} arrived twice",
            job.n
        );
    }
    // Nothing more comes: no duplicates were left in flight.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(rx.try_recv().is_err(), "an item arrived a second time");
    for task in tasks {
        task.abort();
    }
    let mut conn = server.conn().await;
    let (delayed, ready, items) = keys("mixed");
    assert_eq!(zcard(&mut conn, &delayed).await, 0);
    let ready_len: u64 = conn.llen(&ready).await.unwrap();
    assert_eq!(ready_len, 0);
    let left: u64 = conn.hlen(&items).await.unwrap();
    assert_eq!(left, 0, "every taken item's payload is gone");
}

#[tokio::test]
async fn items_arrive_in_due_order() {
    let server = RedisServer::spawn();
    let client = queue_client(&server).await;
    let delayed = client.delayed_queue::<u64>("order");
    let ready = client.blocking_queue::<u64>("order");

    // Offered in shuffled order, due 10 ms apart: they must come out sorted by due time.
    let mut delays: Vec<u64> = (1..=60).collect();
    delays.shuffle(&mut rand::rng());
    delayed
        .offer_all(delays.iter().map(|&d| (d, Duration::from_millis(10 * d))))
        .await
        .unwrap();
    let mut got = Vec::new();
    for _ in 0..60 {
        got.push(ready.take_at_most_once().await.unwrap());
    }
    assert_eq!(got, (1..=60).collect::<Vec<_>>());

    // Items due at the same time (no delay) keep their offer order.
    delayed
        .offer_all((0..500u64).map(|n| (n, Duration::ZERO)))
        .await
        .unwrap();
    let mut got = Vec::new();
    for _ in 0..500 {
        got.push(ready.take_at_most_once().await.unwrap());
    }
    assert_eq!(got, (0..500).collect::<Vec<_>>());

    // A zero delay does not overtake an overdue item still waiting for the transfer: the item
    // due first is taken first.
    let mut conn = server.conn().await;
    let (zset, _, items) = keys("order");
    let due_earlier = now_ms() - 1000;
    let _: () = conn
        .zadd(&zset, "0000000000000000manual", due_earlier)
        .await
        .unwrap();
    let _: () = conn
        .hset(&items, "0000000000000000manual", "7777")
        .await
        .unwrap();
    delayed.offer(&8888, Duration::ZERO).await.unwrap();
    assert_eq!(ready.take_at_most_once().await.unwrap(), 7777);
    assert_eq!(ready.take_at_most_once().await.unwrap(), 8888);
}

#[tokio::test]
async fn offer_at_uses_an_absolute_time_and_never_delivers_early() {
    let server = RedisServer::spawn();
    let client = queue_client(&server).await;
    let delayed = client.delayed_queue::<String>("absolute");
    let ready = client.blocking_queue::<String>("absolute");
    let at = SystemTime::now() + Duration::from_millis(400);
    delayed.offer_at(&"later".to_owned(), at).await.unwrap();
    delayed
        .offer_at(
            &"past".to_owned(),
            SystemTime::now() - Duration::from_secs(5),
        )
        .await
        .unwrap();
    assert_eq!(ready.take_at_most_once().await.unwrap(), "past");
    assert_eq!(ready.take_at_most_once().await.unwrap(), "later");
    assert!(SystemTime::now() >= at, "delivered before its due time");

    let started = Instant::now();
    delayed
        .offer_after_secs(&"float".to_owned(), 0.25)
        .await
        .unwrap();
    assert_eq!(ready.take_at_most_once().await.unwrap(), "float");
    assert!(started.elapsed() >= Duration::from_millis(250));
}

#[tokio::test]
async fn items_due_while_no_client_runs_are_delivered_when_one_starts() {
    let server = RedisServer::spawn();
    let mut conn = server.conn().await;
    let (zset, ready_key, _) = keys("offline");
    {
        let producer = queue_client(&server).await;
        let queue = producer.delayed_queue::<u64>("offline");
        queue
            .offer_all((0..100u64).map(|n| (n, Duration::from_millis(200 + n))))
            .await
            .unwrap();
        // The producer (and with it its transfer agent) goes away before anything is due.
    }
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(
        zcard(&mut conn, &zset).await,
        100,
        "nothing moved while no client ran"
    );
    let ready_len: u64 = conn.llen(&ready_key).await.unwrap();
    assert_eq!(ready_len, 0);

    // A consumer alone starts: its agent moves everything that came due.
    let consumer = queue_client(&server).await;
    let queue = consumer.blocking_queue::<u64>("offline");
    let mut got = Vec::new();
    for _ in 0..100 {
        got.push(queue.take_at_most_once().await.unwrap());
    }
    assert_eq!(got, (0..100).collect::<Vec<_>>());
}

#[tokio::test]
async fn a_producer_alone_moves_due_items_to_the_ready_list() {
    let server = RedisServer::spawn();
    let mut conn = server.conn().await;
    let producer = queue_client(&server).await;
    let queue = producer.delayed_queue::<u64>("producer-only");
    queue
        .offer_all((0..10u64).map(|n| (n, Duration::from_millis(100))))
        .await
        .unwrap();
    let (zset, ready_key, _) = keys("producer-only");
    assert!(
        eventually(PATIENCE, || {
            let mut conn = conn.clone();
            let ready_key = ready_key.clone();
            async move { conn.llen::<_, u64>(&ready_key).await.unwrap() == 10 }
        })
        .await
    );
    assert_eq!(zcard(&mut conn, &zset).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_transfer_agents_move_each_item_exactly_once() {
    const N: u64 = 5000;
    let server = RedisServer::spawn();
    // Four clients, four agents for the same queue, all woken for the same due time.
    let mut clients = Vec::new();
    let mut handles = Vec::new();
    for _ in 0..4 {
        let c = queue_client(&server).await;
        handles.push(c.delayed_queue::<u64>("race"));
        clients.push(c);
    }
    let ids: Vec<ItemId> = handles[0]
        .offer_all((0..N).map(|n| (n, Duration::from_millis(300))))
        .await
        .unwrap();
    assert_eq!(
        ids.iter().collect::<HashSet<_>>().len(),
        N as usize,
        "ids are unique"
    );

    let mut conn = server.conn().await;
    let (zset, ready_key, _) = keys("race");
    assert!(
        eventually(PATIENCE, || {
            let mut conn = conn.clone();
            let zset = zset.clone();
            async move { zcard(&mut conn, &zset).await == 0 }
        })
        .await
    );
    let ready: Vec<String> = conn.lrange(&ready_key, 0, -1).await.unwrap();
    assert_eq!(
        ready.len(),
        N as usize,
        "every item is in the ready list once"
    );
    assert_eq!(ready.iter().collect::<HashSet<_>>().len(), N as usize);
    let expected: HashSet<String> = ids.iter().map(|id| id.to_string()).collect();
    assert_eq!(ready.into_iter().collect::<HashSet<_>>(), expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_transfer_script_run_concurrently_moves_each_item_exactly_once() {
    // Drive the script itself from 8 connections at once on 20k due items (the agents' work,
    // without their timers), in batches of 700.
    const N: usize = 20_000;
    let server = RedisServer::spawn();
    let mut conn = server.conn().await;
    let (zset, ready_key, _) = keys("raw");
    let due = now_ms() - 10;
    let mut pipe = redis::pipe();
    for n in 0..N {
        pipe.zadd(&zset, format!("{n:08}"), due + (n % 7) as u64)
            .ignore();
    }
    let _: () = pipe.query_async(&mut conn).await.unwrap();
    let script = redis::Script::new(concat!(
        include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/prelude.lua")),
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/scripts/delay_transfer.lua"
        ))
    ));
    let script = Arc::new(script);
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let mut conn = server.conn().await;
        let script = script.clone();
        let zset = zset.clone();
        let ready_key = ready_key.clone();
        tasks.push(tokio::spawn(async move {
            let mut moved = 0;
            loop {
                let reply: Vec<i64> = script
                    .key(&zset)
                    .key(&ready_key)
                    .key("latchkey_queue_unacked:{raw}")
                    .key("latchkey_queue_channel:{raw}")
                    .arg(700)
                    .arg("publish")
                    .invoke_async(&mut conn)
                    .await
                    .unwrap();
                moved += reply[0];
                if reply[0] == 0 {
                    return moved;
                }
            }
        }));
    }
    let mut total = 0;
    for task in tasks {
        total += task.await.unwrap();
    }
    assert_eq!(total, N as i64);
    let ready: Vec<String> = conn.lrange(&ready_key, 0, -1).await.unwrap();
    assert_eq!(ready.len(), N);
    assert_eq!(ready.iter().collect::<HashSet<_>>().len(), N);
    // Batches are moved whole and in score order, so the list is sorted by due time.
    let scores: Vec<u64> = ready
        .iter()
        .map(|id| due + (id.parse::<usize>().unwrap() % 7) as u64)
        .collect();
    assert!(
        scores.windows(2).all(|w| w[0] <= w[1]),
        "ready list in due order"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_redis_restart_with_aof_loses_nothing() {
    const N: u64 = 2000;
    let mut server = RedisServer::builder().appendonly(true).spawn();
    let producer = queue_client(&server).await;
    let consumer = queue_client(&server).await;
    let delayed = producer.delayed_queue::<u64>("durable");
    let mut rng = rand::rng();
    let items: Vec<(u64, Duration)> = (0..N)
        .map(|n| (n, Duration::from_millis(rng.random_range(0..3000))))
        .collect();
    delayed.offer_all(items).await.unwrap();

    let ready = consumer
        .blocking_queue::<u64>("durable")
        .with_visibility_timeout(Duration::from_secs(1))
        .unwrap();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let worker = tokio::spawn(async move {
        loop {
            match ready.take().await {
                Ok(delivery) => {
                    let _ = tx.send(*delivery);
                    // An ack lost to the restart only means the item comes again.
                    let _ = delivery.ack().await;
                }
                Err(e) => {
                    assert!(e.is_connection() || e.is_redis(), "{e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    });

    tokio::time::sleep(Duration::from_millis(1000)).await;
    server.restart(); // SIGKILL, then start again on the same port and AOF

    let mut seen: HashMap<u64, u32> = HashMap::new();
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while seen.len() < N as usize {
        let n = tokio::time::timeout_at(deadline, rx.recv())
            .await
            .unwrap_or_else(|_| {
                panic!("only {} of {N} items arrived after the restart", seen.len())
            })
            .unwrap();
        *seen.entry(n).or_default() += 1;
    }
    let duplicates: u32 = seen.values().map(|c| c - 1).sum();
    println!("restart: {N} items delivered, {duplicates} delivered again (at-least-once)");
    worker.abort();
    let mut conn = server.conn().await;
    let (zset, _, _) = keys("durable");
    assert_eq!(zcard(&mut conn, &zset).await, 0);
}

#[tokio::test]
async fn bad_input_is_rejected_with_typed_errors_and_changes_nothing() {
    let server = RedisServer::spawn();
    let client = queue_client(&server).await;
    let queue = client.delayed_queue::<String>("strict");
    let item = "x".to_owned();

    for secs in [
        f64::NAN,
        -1.0,
        -0.001,
        f64::INFINITY,
        f64::NEG_INFINITY,
        1e300,
        1e12,
    ] {
        let err = queue.offer_after_secs(&item, secs).await.unwrap_err();
        assert!(err.is_invalid_argument(), "{secs}: {err}");
    }
    let err = queue
        .offer(&item, DelayedQueue::MAX_DELAY + Duration::from_secs(1))
        .await
        .unwrap_err();
    assert!(err.is_invalid_argument(), "{err}");
    let err = queue
        .offer_at(&item, UNIX_EPOCH - Duration::from_secs(1))
        .await
        .unwrap_err();
    assert!(err.is_invalid_argument(), "{err}");
    let err = queue
        .offer_at(
            &item,
            SystemTime::now() + DelayedQueue::MAX_DELAY + Duration::from_secs(3600),
        )
        .await
        .unwrap_err();
    assert!(err.is_invalid_argument(), "{err}");

    // Oversized: the JSON string is DelayedQueue::MAX_ITEM_SIZE + 2 bytes with its quotes.
    let big = "y".repeat(DelayedQueue::MAX_ITEM_SIZE);
    let err = queue.offer(&big, Duration::ZERO).await.unwrap_err();
    assert!(err.is_invalid_argument(), "{err}");
    // Just under the cap is fine.
    queue
        .offer(
            &"y".repeat(DelayedQueue::MAX_ITEM_SIZE - 2),
            Duration::from_secs(60),
        )
        .await
        .unwrap();
    assert_eq!(queue.len().await.unwrap(), 1);

    // One bad item in a batch: nothing of the batch is queued.
    let err = queue
        .offer_all([
            ("ok".to_owned(), Duration::ZERO),
            (big.clone(), Duration::ZERO),
            ("ok".to_owned(), Duration::ZERO),
        ])
        .await
        .unwrap_err();
    assert!(err.is_invalid_argument(), "{err}");
    let err = queue
        .offer_all([
            ("ok".to_owned(), Duration::ZERO),
            ("ok".to_owned(), DelayedQueue::MAX_DELAY * 2),
        ])
        .await
        .unwrap_err();
    assert!(err.is_invalid_argument(), "{err}");
    assert_eq!(queue.len().await.unwrap(), 1);
    assert_eq!(
        client
            .blocking_queue::<String>("strict")
            .len()
            .await
            .unwrap(),
        0
    );

    // An item the codec cannot encode (JSON object keys must be strings).
    let maps = client.delayed_queue::<HashMap<(u8, u8), u8>>("maps");
    let map: HashMap<(u8, u8), u8> = [((1, 2), 3)].into_iter().collect();
    let err = maps.offer(&map, Duration::ZERO).await.unwrap_err();
    assert!(err.is_codec(), "{err}");

    // Bad names.
    let err = client
        .delayed_queue::<String>("")
        .offer(&item, Duration::ZERO)
        .await
        .unwrap_err();
    assert!(err.is_invalid_argument(), "{err}");
    let long = "n".repeat(latchkey_redis::MAX_NAME_LEN + 1);
    assert!(client
        .delayed_queue::<String>(long)
        .len()
        .await
        .unwrap_err()
        .is_invalid_argument());

    // A key of the queue holding another type: WrongType, nothing written.
    let mut conn = server.conn().await;
    let (zset, ready_key, items) = keys("clash");
    let _: () = conn.set(&zset, "not a zset").await.unwrap();
    let clash = client.delayed_queue::<String>("clash");
    let err = clash
        .offer(&item, Duration::from_secs(1))
        .await
        .unwrap_err();
    assert!(err.is_wrong_type(), "{err}");
    let exists: bool = conn.exists(&items).await.unwrap();
    assert!(!exists, "no payload was written");
    let _: () = conn.del(&zset).await.unwrap();
    let _: () = conn.set(&ready_key, "not a list").await.unwrap();
    let err = clash.offer(&item, Duration::ZERO).await.unwrap_err();
    assert!(err.is_wrong_type(), "{err}");
    let exists: bool = conn.exists(&items).await.unwrap();
    assert!(!exists, "no payload was written");
    let value: String = conn.get(&ready_key).await.unwrap();
    assert_eq!(value, "not a list");
}

#[tokio::test]
async fn identical_payloads_are_distinct_items() {
    let server = RedisServer::spawn();
    let client = queue_client(&server).await;
    let delayed = client.delayed_queue::<String>("twins");
    let a = delayed
        .offer(&"same".to_owned(), Duration::from_millis(100))
        .await
        .unwrap();
    let b = delayed
        .offer(&"same".to_owned(), Duration::from_millis(100))
        .await
        .unwrap();
    assert_ne!(a, b);
    assert_eq!(delayed.len().await.unwrap(), 2);
    let ready = client.blocking_queue::<String>("twins");
    assert_eq!(ready.take_at_most_once().await.unwrap(), "same");
    assert_eq!(ready.take_at_most_once().await.unwrap(), "same");
    assert!(ready
        .poll_at_most_once(Duration::from_millis(200))
        .await
        .unwrap()
        .is_none());
}

#[tokio::test]
async fn pending_lists_and_remove_cancels_waiting_items() {
    let server = RedisServer::spawn();
    let client = queue_client(&server).await;
    let delayed: DelayedQueue<String> = client.delayed_queue("cancel");
    let before = SystemTime::now();
    let late = delayed
        .offer(&"late".to_owned(), Duration::from_secs(30))
        .await
        .unwrap();
    let early = delayed
        .offer(&"early".to_owned(), Duration::from_secs(10))
        .await
        .unwrap();
    let middle = delayed
        .offer(&"middle".to_owned(), Duration::from_secs(20))
        .await
        .unwrap();

    let pending = delayed.pending(10).await.unwrap();
    let order: Vec<&str> = pending.iter().map(|p| p.item.as_str()).collect();
    assert_eq!(order, ["early", "middle", "late"]);
    assert_eq!(pending[0].id, early);
    assert!(pending[0].due >= before + Duration::from_secs(10));
    assert!(pending.windows(2).all(|w| w[0].due <= w[1].due));
    assert_eq!(delayed.pending(1).await.unwrap().len(), 1);
    assert!(delayed.pending(0).await.unwrap().is_empty());

    assert!(delayed.remove(&middle).await.unwrap());
    assert!(!delayed.remove(&middle).await.unwrap(), "removed only once");
    assert_eq!(delayed.len().await.unwrap(), 2);
    let left: Vec<ItemId> = delayed
        .pending(10)
        .await
        .unwrap()
        .into_iter()
        .map(|p| p.id)
        .collect();
    assert_eq!(left, [early, late]);

    // Once ready, an item can no longer be removed from the delayed queue.
    let soon = delayed
        .offer(&"soon".to_owned(), Duration::ZERO)
        .await
        .unwrap();
    let ready = client.blocking_queue::<String>("cancel");
    assert!(
        eventually(PATIENCE, || {
            let ready = ready.clone();
            async move { ready.len().await.unwrap() == 1 }
        })
        .await
    );
    assert!(!delayed.remove(&soon).await.unwrap());
    assert_eq!(ready.take_at_most_once().await.unwrap(), "soon");
}

#[tokio::test]
async fn the_transfer_agent_stops_with_the_client() {
    let server = RedisServer::spawn();
    let mut conn = server.conn().await;
    {
        let c = queue_client(&server).await;
        let queue = c.delayed_queue::<u64>("agent-life");
        queue.offer(&1, Duration::from_secs(3600)).await.unwrap();
    }
    // The agent held its subscription; it is gone once the client is dropped.
    let channel = "latchkey_delay_queue_channel:{agent-life}";
    assert!(
        eventually(PATIENCE, || {
            let mut conn = conn.clone();
            async move {
                let (_, n): (String, i64) = redis::cmd("PUBSUB")
                    .arg("NUMSUB")
                    .arg(channel)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                n == 0
            }
        })
        .await
    );
    // And it runs no more transfers: the count of script calls stays put across more than a
    // fallback poll period. (A transfer already sent when the client went away may still
    // land: let it settle before counting.)
    tokio::time::sleep(Duration::from_millis(500)).await;
    let calls = evalsha_calls(&mut conn).await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(
        evalsha_calls(&mut conn).await,
        calls,
        "no script ran after the client was gone"
    );
    assert_eq!(
        zcard(&mut conn, "latchkey_delay_queue_timeout:{agent-life}").await,
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_thousand_items_due_at_once_move_in_bounded_batches() {
    const N: u64 = 100_000;
    let server = RedisServer::spawn();
    let client = queue_client(&server).await;
    let mut conn = server.conn().await;
    let queue = client.delayed_queue::<u64>("flood");
    queue
        .offer_all((0..N).map(|n| (n, Duration::from_secs(3))))
        .await
        .unwrap();
    let (zset, ready_key, _) = keys("flood");
    let waiting = zcard(&mut conn, &zset).await;
    let calls_before = evalsha_calls(&mut conn).await;
    let _: () = redis::cmd("SLOWLOG")
        .arg("RESET")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(
        eventually(PATIENCE, || {
            let mut conn = conn.clone();
            let zset = zset.clone();
            async move { zcard(&mut conn, &zset).await == 0 }
        })
        .await
    );
    let ready: Vec<String> = conn.lrange(&ready_key, 0, -1).await.unwrap();
    assert_eq!(ready.len(), N as usize);
    assert_eq!(ready.iter().collect::<HashSet<_>>().len(), N as usize);
    // Each transfer call moves at most 1000 items, so the flood took many calls, each short,
    // with other clients' commands served in between.
    let calls = evalsha_calls(&mut conn).await - calls_before;
    assert!(
        calls >= waiting / 1000,
        "{waiting} items moved in {calls} script calls"
    );
    let slowlog: Vec<redis::Value> = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(1000)
        .query_async(&mut conn)
        .await
        .unwrap();
    let longest_us = slowlog
        .iter()
        .filter_map(|entry| match entry {
            redis::Value::Array(fields) => match fields.get(2) {
                Some(redis::Value::Int(us)) => Some(*us),
                _ => None,
            },
            _ => None,
        })
        .max()
        .unwrap_or(0);
    println!(
        "flood: {waiting} due items moved in {calls} script calls; longest command over the slowlog threshold: {longest_us} us"
    );
}
