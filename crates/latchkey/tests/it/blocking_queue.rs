//! The blocking queue (at-least-once `take`, at-most-once `take_at_most_once`) against a real
//! redis-server.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use latchkey_redis::{BlockingQueue, DelayedQueue, Delivery, ItemId};
use latchkey_test_support::RedisServer;
use rand::Rng;
use redis::AsyncCommands;

use crate::helpers::queue_client;

/// A liveness bound for a hung test, never a speed assertion.
const PATIENCE: Duration = Duration::from_secs(60);

#[test]
fn handles_and_deliveries_are_send_sync_and_static() {
    fn check<T: Send + Sync + 'static>() {}
    check::<BlockingQueue<String>>();
    check::<DelayedQueue<String>>();
    check::<Delivery<String>>();
    check::<ItemId>();
}

#[tokio::test]
async fn take_waits_for_an_item_and_poll_gives_up() {
    let server = RedisServer::spawn();
    let client = queue_client(&server).await;
    let queue = client.blocking_queue::<String>("jobs");
    assert!(queue
        .poll_at_most_once(Duration::ZERO)
        .await
        .unwrap()
        .is_none());
    let started = Instant::now();
    assert!(queue
        .poll_at_most_once(Duration::from_millis(200))
        .await
        .unwrap()
        .is_none());
    assert!(started.elapsed() >= Duration::from_millis(200));

    let waiter = {
        let queue = queue.clone();
        tokio::spawn(async move { queue.take_at_most_once().await.unwrap() })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    // Put by another client: the waiter is woken through pub/sub.
    let other = queue_client(&server).await;
    other
        .blocking_queue::<String>("jobs")
        .put(&"hello".to_owned())
        .await
        .unwrap();
    assert_eq!(
        tokio::time::timeout(PATIENCE, waiter)
            .await
            .unwrap()
            .unwrap(),
        "hello"
    );
    assert!(queue.is_empty().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_waiting_consumers_share_items_without_duplicates() {
    const N: u64 = 2000;
    let server = RedisServer::spawn();
    let producer = queue_client(&server).await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut tasks = Vec::new();
    for _ in 0..2 {
        let c = queue_client(&server).await;
        for _ in 0..8 {
            let queue = c.blocking_queue::<u64>("shared");
            let tx = tx.clone();
            tasks.push(tokio::spawn(async move {
                loop {
                    let n = queue.take_at_most_once().await.unwrap();
                    if tx.send(n).is_err() {
                        return;
                    }
                }
            }));
        }
    }
    let queue = producer.blocking_queue::<u64>("shared");
    for n in 0..N {
        queue.put(&n).await.unwrap();
    }
    let mut seen = HashSet::new();
    while seen.len() < N as usize {
        let n = tokio::time::timeout(PATIENCE, rx.recv())
            .await
            .unwrap()
            .unwrap();
        assert!(seen.insert(n), "{n} taken twice");
    }
    for task in tasks {
        task.abort();
    }
}

#[tokio::test]
async fn a_dropped_delivery_is_delivered_again_at_once() {
    let server = RedisServer::spawn();
    let client = queue_client(&server).await;
    let queue = client.blocking_queue::<String>("redo");
    let id = queue.put(&"job".to_owned()).await.unwrap();

    let first = queue.take().await.unwrap();
    assert_eq!(first.id(), &id);
    assert_eq!(first.attempt(), 1);
    assert_eq!(*first, "job");
    assert_eq!(queue.in_flight().await.unwrap(), 1);
    assert!(
        queue.poll(Duration::ZERO).await.unwrap().is_none(),
        "invisible while out"
    );
    drop(first); // the consumer gives up without acknowledging

    let second = tokio::time::timeout(PATIENCE, queue.take())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(second.id(), &id);
    assert_eq!(second.attempt(), 2);
    let third_try = second.nack().await.unwrap();
    assert_eq!(third_try, latchkey_redis::Nack::Released);
    let third = queue.take().await.unwrap();
    assert_eq!(third.attempt(), 3);
    assert!(third.ack().await.unwrap().is_acked());
    assert_eq!(queue.in_flight().await.unwrap(), 0);
    assert!(queue
        .poll(Duration::from_millis(100))
        .await
        .unwrap()
        .is_none());
    let mut conn = server.conn().await;
    let left: u64 = conn.hlen("latchkey_queue_items:{redo}").await.unwrap();
    assert_eq!(left, 0);
    let attempts: bool = conn.exists("latchkey_queue_attempts:{redo}").await.unwrap();
    assert!(!attempts, "the attempt count is gone with the item");
}

#[tokio::test]
async fn a_consumer_that_dies_before_ack_has_its_item_redelivered_after_the_visibility_timeout() {
    let server = RedisServer::spawn();
    let visibility = Duration::from_millis(400);
    let survivor = queue_client(&server).await;
    let queue = survivor
        .blocking_queue::<u64>("crash")
        .with_visibility_timeout(visibility)
        .unwrap();
    let id = queue.put(&42).await.unwrap();

    let taken_at;
    {
        // The dying consumer: its process goes away without running any destructor.
        let doomed = queue_client(&server).await;
        let doomed_queue = doomed
            .blocking_queue::<u64>("crash")
            .with_visibility_timeout(visibility)
            .unwrap();
        // Measured before the take: the item is claimed after this instant.
        taken_at = Instant::now();
        let delivery = doomed_queue.take().await.unwrap();
        assert_eq!(delivery.id(), &id);
        std::mem::forget(delivery);
    }
    let again = tokio::time::timeout(PATIENCE, queue.take())
        .await
        .unwrap()
        .unwrap();
    assert!(
        taken_at.elapsed() >= visibility,
        "redelivered only after the visibility timeout"
    );
    assert_eq!(again.id(), &id);
    assert_eq!(*again, 42);
    assert_eq!(again.attempt(), 2);
    assert!(again.ack().await.unwrap().is_acked());
}

#[tokio::test]
async fn a_late_ack_finishes_the_item_and_the_second_delivery_sees_it() {
    let server = RedisServer::spawn();
    let client = queue_client(&server).await;
    let queue = client
        .blocking_queue::<u64>("late")
        .with_visibility_timeout(Duration::from_millis(200))
        .unwrap();
    queue.put(&7).await.unwrap();
    let slow = queue.take().await.unwrap();
    // The slow consumer overruns its visibility timeout: the item goes out again.
    let fast = tokio::time::timeout(PATIENCE, queue.take())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(fast.id(), slow.id());
    assert!(
        !slow.extend(Duration::from_secs(10)).await.unwrap(),
        "no longer its delivery"
    );
    assert!(
        slow.ack().await.unwrap().is_acked(),
        "any delivery may finish the item"
    );
    assert_eq!(
        fast.ack().await.unwrap(),
        latchkey_redis::Ack::AlreadyFinished,
        "already finished"
    );
    assert_eq!(queue.in_flight().await.unwrap(), 0);

    // extend keeps a delivery out past its first timeout.
    queue.put(&8).await.unwrap();
    let held = queue.take().await.unwrap();
    assert!(held.extend(Duration::from_secs(30)).await.unwrap());
    assert!(queue
        .poll(Duration::from_millis(600))
        .await
        .unwrap()
        .is_none());
    assert!(held.ack().await.unwrap().is_acked());
}

#[tokio::test]
async fn nack_after_returns_the_item_through_the_delayed_queue() {
    let server = RedisServer::spawn();
    let client = queue_client(&server).await;
    let queue = client.blocking_queue::<u64>("retry");
    let delayed = client.delayed_queue::<u64>("retry");
    queue.put(&1).await.unwrap();
    let delivery = queue.take().await.unwrap();
    let released_at = Instant::now();
    assert!(delivery
        .nack_after(Duration::from_millis(300))
        .await
        .unwrap()
        .is_released());
    assert_eq!(delayed.len().await.unwrap(), 1);
    let again = queue.take().await.unwrap();
    assert!(released_at.elapsed() >= Duration::from_millis(300));
    assert_eq!(again.attempt(), 2);
    assert!(again.ack().await.unwrap().is_acked());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dropped_take_futures_lose_nothing() {
    const N: u64 = 400;
    let server = RedisServer::spawn();
    let producer = queue_client(&server).await;
    let consumer = queue_client(&server).await;
    let put = producer.blocking_queue::<u64>("cancel");
    let reliable = consumer.blocking_queue::<u64>("cancel");
    let plain = reliable.clone();
    let feeder = tokio::spawn(async move {
        for n in 0..N {
            put.put(&n).await.unwrap();
            if n % 16 == 0 {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
    });

    // Takes abandoned after a random short time, alternating plain and reliable.
    let mut got: HashMap<u64, u32> = HashMap::new();
    let mut abandoned = 0;
    let mut round = 0u64;
    let started = Instant::now();
    while got.len() < N as usize && started.elapsed() < PATIENCE {
        round += 1;
        let patience = Duration::from_micros(rand::rng().random_range(0..1500));
        if round.is_multiple_of(2) {
            match tokio::time::timeout(patience, plain.take_at_most_once()).await {
                Ok(n) => *got.entry(n.unwrap()).or_default() += 1,
                Err(_) => abandoned += 1,
            }
        } else {
            match tokio::time::timeout(patience, reliable.take()).await {
                Ok(delivery) => {
                    let delivery = delivery.unwrap();
                    *got.entry(*delivery).or_default() += 1;
                    let _ = delivery.ack().await.unwrap();
                }
                Err(_) => abandoned += 1,
            }
        }
    }
    feeder.await.unwrap();
    println!("{abandoned} takes abandoned");
    assert!(abandoned > 0, "the test abandoned no take");
    assert_eq!(got.len(), N as usize, "every item was taken");
    assert!(got.values().all(|&c| c == 1), "no item was taken twice");
    assert!(reliable
        .poll_at_most_once(Duration::from_millis(200))
        .await
        .unwrap()
        .is_none());
    assert_eq!(reliable.in_flight().await.unwrap(), 0);
}

/// An item that cannot be decoded goes to the dead letters, with the codec's error, and the
/// consumer goes on to the next item: a `while let Ok(delivery) = queue.take().await` worker
/// loop does not end on it.
#[tokio::test]
async fn an_item_that_cannot_be_decoded_is_dead_lettered_and_the_loop_goes_on() {
    let server = RedisServer::spawn();
    let client = queue_client(&server).await;
    let words = client.blocking_queue::<String>("mixed-up");
    let numbers = client.blocking_queue::<u64>("mixed-up");
    words.put(&"not a number".to_owned()).await.unwrap();
    numbers.put(&5).await.unwrap();
    words.put(&"nor this".to_owned()).await.unwrap();
    numbers.put(&6).await.unwrap();

    // The lossy pop skips the bad item too.
    assert_eq!(numbers.take_at_most_once().await.unwrap(), 5);
    let mut got = Vec::new();
    while let Ok(Some(delivery)) = numbers.poll(Duration::from_millis(300)).await {
        got.push(*delivery);
        assert!(delivery.ack().await.unwrap().is_acked());
    }
    assert_eq!(got, [6], "the worker loop went past the bad item");
    assert_eq!(numbers.dead_letter_len().await.unwrap(), 2);
    assert_eq!(numbers.in_flight().await.unwrap(), 0);
    assert!(numbers.is_empty().await.unwrap());
    let dead = numbers.dead_letters(10).await.unwrap();
    let payloads: HashSet<Vec<u8>> = dead.iter().map(|d| d.payload.clone()).collect();
    assert_eq!(
        payloads,
        HashSet::from([b"\"not a number\"".to_vec(), b"\"nor this\"".to_vec()])
    );
    for letter in &dead {
        assert!(
            letter.reason.contains("codec") || letter.reason.contains("invalid type"),
            "the reason names the decode error: {letter:?}"
        );
    }
}

/// An item delivered `max_deliveries` times without an ack goes to the dead letters on the
/// next delivery instead, with the reason.
#[tokio::test]
async fn an_item_delivered_too_often_goes_to_the_dead_letters() {
    let server = RedisServer::spawn();
    let client = queue_client(&server).await;
    let queue = client
        .blocking_queue::<String>("poison")
        .with_max_deliveries(2)
        .unwrap();
    assert!(client
        .blocking_queue::<String>("poison")
        .with_max_deliveries(0)
        .unwrap_err()
        .is_invalid_argument());
    queue.put(&"crashes the worker".to_owned()).await.unwrap();
    queue.put(&"fine".to_owned()).await.unwrap();
    for attempt in 1..=2 {
        let delivery = queue.take().await.unwrap();
        assert_eq!(
            (delivery.item().as_str(), delivery.attempt()),
            ("crashes the worker", attempt)
        );
        assert!(delivery.nack().await.unwrap().is_released());
    }
    let next = queue.take().await.unwrap();
    assert_eq!(
        next.item(),
        "fine",
        "the third delivery went to the dead letters"
    );
    assert!(next.ack().await.unwrap().is_acked());
    let dead = queue.dead_letters(10).await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].payload, b"\"crashes the worker\"");
    assert!(dead[0].reason.contains("2 times"), "{:?}", dead[0].reason);
    assert!(queue.poll(Duration::ZERO).await.unwrap().is_none());
}

#[tokio::test]
async fn wrong_key_types_and_bad_settings_are_typed_errors() {
    let server = RedisServer::spawn();
    let client = queue_client(&server).await;
    let mut conn = server.conn().await;
    let _: () = conn.hset("latchkey_queue:{typed}", "a", "b").await.unwrap();
    let queue = client.blocking_queue::<u64>("typed");
    assert!(queue.take_at_most_once().await.unwrap_err().is_wrong_type());
    assert!(queue
        .poll_at_most_once(Duration::ZERO)
        .await
        .unwrap_err()
        .is_wrong_type());
    assert!(queue.put(&1).await.unwrap_err().is_wrong_type());
    assert!(queue.len().await.unwrap_err().is_wrong_type());
    let exists: bool = conn.exists("latchkey_queue_items:{typed}").await.unwrap();
    assert!(!exists, "nothing was written");

    let ok = client.blocking_queue::<u64>("settings");
    assert!(ok
        .clone()
        .with_visibility_timeout(Duration::ZERO)
        .unwrap_err()
        .is_invalid_argument());
    assert!(ok
        .poll_at_most_once(Duration::MAX)
        .await
        .unwrap_err()
        .is_invalid_argument());
    assert!(client
        .blocking_queue::<u64>("")
        .take_at_most_once()
        .await
        .unwrap_err()
        .is_invalid_argument());
    ok.put(&1).await.unwrap();
    let delivery = ok.take().await.unwrap();
    assert!(delivery
        .extend(Duration::ZERO)
        .await
        .unwrap_err()
        .is_invalid_argument());
    assert!(delivery.ack().await.unwrap().is_acked());
}

#[tokio::test]
async fn waiting_consumers_leave_no_subscription_behind() {
    let server = RedisServer::spawn();
    let client = queue_client(&server).await;
    let queue = client.blocking_queue::<u64>("tidy");
    let waiters: Vec<_> = (0..5)
        .map(|_| {
            let queue = queue.clone();
            tokio::spawn(async move { queue.take_at_most_once().await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    for waiter in &waiters {
        waiter.abort();
    }
    for waiter in waiters {
        let _ = waiter.await;
    }
    drop(queue);
    // The ready channel is dropped after the linger; the agent's delay channel stays while the
    // client lives.
    let deadline = Instant::now() + PATIENCE;
    while client.subscription_count() > 1 {
        assert!(
            Instant::now() < deadline,
            "subscriptions left: {}",
            client.subscription_count()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A delivery carries when its item was due (the Redis clock's due time, kept across
/// redeliveries, moved by `nack_after`) and its attempt number; the due hash is emptied with
/// the item.
#[tokio::test]
async fn a_delivery_carries_its_due_time_and_attempt() {
    use std::time::{SystemTime, UNIX_EPOCH};

    let server = RedisServer::spawn();
    let client = queue_client(&server).await;
    let delayed = client.delayed_queue::<u64>("due");
    let queue = client.blocking_queue::<u64>("due");
    let mut conn = server.conn().await;
    let redis_ms = |time: Vec<u64>| time[0] * 1000 + time[1] / 1000;
    let before: Vec<u64> = redis::cmd("TIME").query_async(&mut conn).await.unwrap();
    let before = UNIX_EPOCH + Duration::from_millis(redis_ms(before));
    delayed.offer(&1, Duration::from_millis(300)).await.unwrap();

    let first = tokio::time::timeout(PATIENCE, queue.take())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first.attempt(), 1);
    let due = first.due_time().expect("a due time");
    let after: Vec<u64> = redis::cmd("TIME").query_async(&mut conn).await.unwrap();
    let after = UNIX_EPOCH + Duration::from_millis(redis_ms(after));
    assert!(
        due >= before + Duration::from_millis(300) && due <= after,
        "due 300 ms after the offer by the Redis clock: {due:?} in {before:?}..{after:?}"
    );
    drop(first); // given back: the redelivery keeps the due time
    let second = tokio::time::timeout(PATIENCE, queue.take())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(second.attempt(), 2);
    assert_eq!(second.due_time(), Some(due));

    let released: Vec<u64> = redis::cmd("TIME").query_async(&mut conn).await.unwrap();
    let released = UNIX_EPOCH + Duration::from_millis(redis_ms(released));
    assert!(second
        .nack_after(Duration::from_millis(200))
        .await
        .unwrap()
        .is_released());
    let third = tokio::time::timeout(PATIENCE, queue.take())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(third.attempt(), 3);
    let moved = third.due_time().expect("a due time");
    assert!(
        moved >= released + Duration::from_millis(200),
        "nack_after moves it: {moved:?}"
    );
    assert!(moved <= SystemTime::now() + Duration::from_secs(5));
    assert_eq!(third.ack().await.unwrap(), latchkey_redis::Ack::Acked);
    let left: bool = conn.exists("latchkey_queue_due:{due}").await.unwrap();
    assert!(!left, "the due time is gone with the item");

    // An item put in directly was due when it was put in; a plain take keeps no due time.
    queue.put(&2).await.unwrap();
    let direct = queue.take().await.unwrap();
    assert!(direct.due_time().is_some());
    assert!(direct.ack().await.unwrap().is_acked());
    queue.put(&3).await.unwrap();
    assert_eq!(queue.take_at_most_once().await.unwrap(), 3);
    let left: bool = conn.exists("latchkey_queue_due:{due}").await.unwrap();
    assert!(!left, "a popped item's due time goes with it");
}

/// `ack` tells a delivery that finished the item from one whose item was finished already;
/// `nack` tells a delivery that still held the item from one that did not.
#[tokio::test]
async fn ack_and_nack_say_whether_the_item_was_still_theirs() {
    let server = RedisServer::spawn();
    let client = queue_client(&server).await;
    let queue = client
        .blocking_queue::<u64>("owned")
        .with_visibility_timeout(Duration::from_millis(200))
        .unwrap();
    queue.put(&1).await.unwrap();
    let stale = queue.take().await.unwrap();
    // Its visibility timeout runs out: the item goes out again.
    let fresh = tokio::time::timeout(PATIENCE, queue.take())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stale.id(), fresh.id());
    let nack = stale.nack().await.unwrap();
    assert_eq!(
        nack,
        latchkey_redis::Nack::NotOwned,
        "no longer its delivery"
    );
    assert!(!nack.is_released());
    assert_eq!(fresh.ack().await.unwrap(), latchkey_redis::Ack::Acked);

    queue.put(&2).await.unwrap();
    let first = queue.take().await.unwrap();
    let second = tokio::time::timeout(PATIENCE, queue.take())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(second.ack().await.unwrap(), latchkey_redis::Ack::Acked);
    let late = first.ack().await.unwrap();
    assert_eq!(late, latchkey_redis::Ack::AlreadyFinished);
    assert!(!late.is_acked());
}
