//! The metrics latchkey records (read back with `metrics-util`'s debugging recorder) and its
//! tracing spans (read back with a small collecting layer), against a real redis-server.
//!
//! Each test installs its recorder for its own thread only (`set_default_local_recorder`): the
//! tests run on a current-thread runtime, so the client's background tasks (watchdog, pub/sub
//! hub, queue agent) record on the same thread, and tests running in parallel do not mix.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use latchkey_redis::Client;
use latchkey_test_support::RedisServer;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use redis::AsyncCommands;
use tracing_subscriber::layer::SubscriberExt;

use crate::helpers::{builder, client, eventually, numsub};

/// A metric as the test reads it: its name and its labels, sorted.
type Series = (String, Vec<(String, String)>);

/// What the recorder holds, added up over snapshots (a snapshot of the debugging recorder
/// drains what it read).
struct Recorded {
    snapshotter: Snapshotter,
    counters: HashMap<Series, u64>,
    histograms: HashMap<Series, Vec<f64>>,
    gauges: HashMap<Series, Vec<f64>>,
}

impl Recorded {
    fn new(recorder: &DebuggingRecorder) -> Recorded {
        Recorded {
            snapshotter: recorder.snapshotter(),
            counters: HashMap::new(),
            histograms: HashMap::new(),
            gauges: HashMap::new(),
        }
    }

    fn update(&mut self) {
        for (key, _, _, value) in self.snapshotter.snapshot().into_vec() {
            let key = key.key();
            let mut labels: Vec<(String, String)> = key
                .labels()
                .map(|l| (l.key().to_owned(), l.value().to_owned()))
                .collect();
            labels.sort();
            let series = (key.name().to_owned(), labels);
            match value {
                DebugValue::Counter(n) => *self.counters.entry(series).or_default() += n,
                DebugValue::Histogram(values) => self
                    .histograms
                    .entry(series)
                    .or_default()
                    .extend(values.into_iter().map(f64::from)),
                DebugValue::Gauge(value) => {
                    self.gauges.entry(series).or_default().push(value.into())
                }
            }
        }
    }

    /// The counter `name` with exactly `labels`.
    fn counter(&mut self, name: &str, labels: &[(&str, &str)]) -> u64 {
        self.update();
        self.counters
            .get(&series(name, labels))
            .copied()
            .unwrap_or(0)
    }

    /// The values recorded in histogram `name` with exactly `labels`.
    fn histogram(&mut self, name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
        self.update();
        self.histograms
            .get(&series(name, labels))
            .cloned()
            .unwrap_or_default()
    }

    /// The values gauge `name` with exactly `labels` was seen with.
    fn gauge(&mut self, name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
        self.update();
        self.gauges
            .get(&series(name, labels))
            .cloned()
            .unwrap_or_default()
    }

    /// Every series recorded so far.
    fn series(&mut self) -> Vec<Series> {
        self.update();
        let mut all: Vec<Series> = self.counters.keys().cloned().collect();
        all.extend(self.histograms.keys().cloned());
        all.extend(self.gauges.keys().cloned());
        all
    }
}

fn series(name: &str, labels: &[(&str, &str)]) -> Series {
    let mut labels: Vec<(String, String)> = labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    labels.sort();
    (name.to_owned(), labels)
}

const LOCK_ACQUIRED: &[(&str, &str)] = &[("primitive", "lock"), ("outcome", "acquired")];

#[tokio::test]
async fn two_acquires_of_a_lock_count_two_acquisitions() {
    let recorder = DebuggingRecorder::new();
    let _local = metrics::set_default_local_recorder(&recorder);
    let mut recorded = Recorded::new(&recorder);
    let server = RedisServer::spawn();
    let client = client(&server).await;
    let lock = client.lock("metrics-two");

    lock.lock().await.unwrap().unlock().await.unwrap();
    let guard = lock
        .try_lock(Duration::from_secs(1))
        .await
        .unwrap()
        .unwrap();
    guard.unlock().await.unwrap();

    assert_eq!(
        recorded.counter("latchkey_acquires_total", LOCK_ACQUIRED),
        2
    );
    let durations = recorded.histogram("latchkey_acquire_duration_seconds", LOCK_ACQUIRED);
    assert_eq!(durations.len(), 2, "{durations:?}");
    assert!(
        durations.iter().all(|d| *d >= 0.0 && *d < 30.0),
        "{durations:?}"
    );
    let holds = recorded.histogram("latchkey_hold_duration_seconds", &[("primitive", "lock")]);
    assert_eq!(holds.len(), 2, "{holds:?}");
    // Nobody else held it: neither call waited.
    assert_eq!(
        recorded.counter(
            "latchkey_acquires_contended_total",
            &[("primitive", "lock")]
        ),
        0
    );
    assert!(recorded
        .histogram("latchkey_acquire_wait_seconds", LOCK_ACQUIRED)
        .is_empty());
}

#[tokio::test]
async fn every_primitive_counts_its_acquires_under_its_own_label() {
    let recorder = DebuggingRecorder::new();
    let _local = metrics::set_default_local_recorder(&recorder);
    let mut recorded = Recorded::new(&recorder);
    let servers = latchkey_test_support::RedisServers::spawn(3);
    let mut nodes = Vec::new();
    for url in servers.urls() {
        nodes.push(crate::helpers::client(&url).await);
    }
    let client = nodes[0].clone();

    client
        .fair_lock("m-fair")
        .lock()
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
    let rw = client.rw_lock("m-rw");
    rw.read().lock().await.unwrap().unlock().await.unwrap();
    rw.write().lock().await.unwrap().unlock().await.unwrap();
    let semaphore = client.semaphore("m-sem");
    assert!(semaphore.try_set_permits(1).await.unwrap());
    semaphore.acquire(1).await.unwrap().release().await.unwrap();
    let permits = client.permit_semaphore("m-psem");
    assert!(permits.try_set_permits(1).await.unwrap());
    permits.acquire(1).await.unwrap().release().await.unwrap();
    let latch = client.count_down_latch("m-latch");
    assert!(latch.try_set_count(1).await.unwrap());
    latch.count_down().await.unwrap();
    latch.wait().await.unwrap();
    let pair = latchkey_redis::MultiLock::new([client.lock("m-a"), client.lock("m-b")]).unwrap();
    pair.lock().await.unwrap().unlock().await.unwrap();
    let redlock = latchkey_redis::RedLock::new("m-red", nodes.clone()).unwrap();
    redlock.lock().await.unwrap().unlock().await.unwrap();

    for primitive in [
        "fair_lock",
        "read_lock",
        "write_lock",
        "semaphore",
        "permit_semaphore",
        "latch",
        "multi_lock",
        "redlock",
    ] {
        let acquired = [("primitive", primitive), ("outcome", "acquired")];
        assert_eq!(
            recorded.counter("latchkey_acquires_total", &acquired),
            1,
            "{primitive}"
        );
    }
    // The multi-lock's two locks are counted as locks too.
    assert_eq!(
        recorded.counter("latchkey_acquires_total", LOCK_ACQUIRED),
        2
    );
}

#[tokio::test]
async fn a_timed_out_try_lock_counts_a_timeout_and_a_contended_acquire() {
    let recorder = DebuggingRecorder::new();
    let _local = metrics::set_default_local_recorder(&recorder);
    let mut recorded = Recorded::new(&recorder);
    let server = RedisServer::spawn();
    let holder = client(&server).await;
    let waiter = client(&server).await;

    let held = holder.lock("metrics-busy").lock().await.unwrap();
    let got = waiter
        .lock("metrics-busy")
        .try_lock(Duration::from_millis(200))
        .await
        .unwrap();
    assert!(got.is_none());

    let timeout = &[("primitive", "lock"), ("outcome", "timeout")];
    assert_eq!(
        recorded.counter("latchkey_acquires_total", LOCK_ACQUIRED),
        1
    );
    assert_eq!(recorded.counter("latchkey_acquires_total", timeout), 1);
    assert_eq!(
        recorded.counter(
            "latchkey_acquires_contended_total",
            &[("primitive", "lock")]
        ),
        1
    );
    let waited = recorded.histogram("latchkey_acquire_wait_seconds", timeout);
    assert_eq!(waited.len(), 1, "{waited:?}");
    // It waited out its 200 ms (less the first attempt's round trip).
    assert!(waited[0] >= 0.1, "{waited:?}");
    held.unlock().await.unwrap();
}

#[tokio::test]
async fn a_waiter_woken_by_a_release_counts_a_received_hand_off() {
    let recorder = DebuggingRecorder::new();
    let _local = metrics::set_default_local_recorder(&recorder);
    let mut recorded = Recorded::new(&recorder);
    let server = RedisServer::spawn();
    let holder = client(&server).await;
    let waiter = client(&server).await;

    let holding = holder.lock("metrics-handoff");
    let held = holding.lock().await.unwrap();
    let lock = waiter.lock("metrics-handoff");
    let waiting = tokio::spawn(async move { lock.lock().await.map(|g| g.fencing_token()) });
    // Once the waiter's client is registered in the lock's wait queue, the release hands the
    // lock to that client (publishes its wake id). The first refused attempt registers it
    // before it subscribes, so wait for the server to have the subscription too: a hand-off
    // published before it is not received (the waiter's retry right after subscribing takes
    // the reserved lock instead, and counts no received hand-off).
    let conn = server.conn().await;
    assert!(
        eventually(Duration::from_secs(5), || {
            let (holding, mut conn) = (&holding, conn.clone());
            async move {
                holding.status().await.unwrap().waiting_clients == 1
                    && numsub(&mut conn, "redisson_lock__channel:{metrics-handoff}").await == 1
            }
        })
        .await
    );
    held.unlock().await.unwrap();
    waiting.await.unwrap().unwrap();

    assert!(recorded.counter("latchkey_handoffs_total", &[("event", "received")]) >= 1);
    assert_eq!(
        recorded.counter(
            "latchkey_acquires_contended_total",
            &[("primitive", "lock")]
        ),
        1
    );
    assert_eq!(
        recorded.counter("latchkey_acquires_total", LOCK_ACQUIRED),
        2
    );
}

#[tokio::test]
async fn a_killed_subscriber_connection_counts_a_reconnect_and_resubscriptions() {
    let recorder = DebuggingRecorder::new();
    let _local = metrics::set_default_local_recorder(&recorder);
    let mut recorded = Recorded::new(&recorder);
    let server = RedisServer::spawn();
    let holder = client(&server).await;
    let waiter = client(&server).await;

    let held = holder.lock("metrics-reconnect").lock().await.unwrap();
    let lock = waiter.lock("metrics-reconnect");
    let waiting = tokio::spawn(async move { lock.lock().await.map(|g| g.fencing_token()) });
    assert!(
        eventually(Duration::from_secs(5), || async {
            waiter.subscription_count() == 1
        })
        .await
    );
    assert_eq!(recorded.counter("latchkey_pubsub_reconnects_total", &[]), 0);

    let mut conn = server.conn().await;
    let killed: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("pubsub")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(killed, 1);
    let mut reconnects = 0;
    assert!(
        eventually(Duration::from_secs(5), || {
            reconnects = recorded.counter("latchkey_pubsub_reconnects_total", &[]);
            std::future::ready(reconnects >= 1)
        })
        .await
    );
    assert_eq!(reconnects, 1);
    // The waiter's one channel was subscribed again on the new connection.
    assert_eq!(
        recorded.counter("latchkey_pubsub_resubscriptions_total", &[]),
        1
    );
    held.unlock().await.unwrap();
    waiting.await.unwrap().unwrap();
}

#[tokio::test]
async fn the_watchdog_counts_renewals_and_a_lost_hold() {
    let recorder = DebuggingRecorder::new();
    let _local = metrics::set_default_local_recorder(&recorder);
    let mut recorded = Recorded::new(&recorder);
    let server = RedisServer::spawn();
    // A 1 s watchdog timeout: a renewal every third of a second.
    let client = client(&server).await;
    let lock = client.lock("metrics-lost");
    let guard = lock.lock().await.unwrap();

    let renewals = |recorded: &mut Recorded| {
        recorded.counter("latchkey_watchdog_renewals_total", &[("primitive", "lock")])
    };
    let mut seen = 0;
    assert!(
        eventually(Duration::from_secs(5), || {
            seen = renewals(&mut recorded);
            std::future::ready(seen >= 2)
        })
        .await,
        "renewals: {seen}"
    );
    assert_eq!(
        recorded.counter(
            "latchkey_holds_lost_total",
            &[("primitive", "lock"), ("reason", "gone")]
        ),
        0
    );

    // Somebody deletes the lock: the watchdog's next renewal finds it gone.
    let mut conn = server.conn().await;
    let _: () = conn.del("metrics-lost").await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("the watchdog notices the deleted lock");
    assert_eq!(
        recorded.counter(
            "latchkey_holds_lost_total",
            &[("primitive", "lock"), ("reason", "gone")]
        ),
        1
    );
    assert!(guard.unlock().await.unwrap_err().is_not_owner());
}

#[tokio::test]
async fn a_fixed_lease_that_runs_out_counts_an_expired_hold() {
    let recorder = DebuggingRecorder::new();
    let _local = metrics::set_default_local_recorder(&recorder);
    let mut recorded = Recorded::new(&recorder);
    let server = RedisServer::spawn();
    let client = client(&server).await;
    let options = latchkey_redis::LockOptions::new().lease(Duration::from_millis(300));
    let guard = client
        .lock("metrics-expired")
        .lock_with(options)
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("the lease runs out");
    let expired = [("primitive", "lock"), ("reason", "expired")];
    assert_eq!(recorded.counter("latchkey_holds_lost_total", &expired), 1);
    let gone = [("primitive", "lock"), ("reason", "gone")];
    assert_eq!(recorded.counter("latchkey_holds_lost_total", &gone), 0);
}

#[tokio::test]
async fn queue_offers_deliveries_redeliveries_and_dead_letters_are_counted() {
    let recorder = DebuggingRecorder::new();
    let _local = metrics::set_default_local_recorder(&recorder);
    let mut recorded = Recorded::new(&recorder);
    let server = RedisServer::spawn();
    let client = builder(&server).connect().await.unwrap();
    let delayed = client.delayed_queue::<String>("metrics-q");
    let queue = client.blocking_queue::<String>("metrics-q");

    delayed
        .offer(&"now".to_owned(), Duration::ZERO)
        .await
        .unwrap();
    delayed
        .offer(&"soon".to_owned(), Duration::from_millis(100))
        .await
        .unwrap();
    assert_eq!(recorded.counter("latchkey_queue_offered_total", &[]), 2);

    // Claimed, released, claimed again: two deliveries, the second a redelivery.
    let first = queue.poll(Duration::from_secs(5)).await.unwrap().unwrap();
    assert_eq!(first.item(), "now");
    assert!(first.nack().await.unwrap().is_released());
    let again = queue.poll(Duration::from_secs(5)).await.unwrap().unwrap();
    assert_eq!(again.item(), "now");
    assert_eq!(again.attempt(), 2);
    assert!(again.ack().await.unwrap().is_acked());
    // The delayed item comes due and is popped.
    let soon = queue
        .poll_at_most_once(Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(soon.as_deref(), Some("soon"));

    assert_eq!(
        recorded.counter("latchkey_queue_delivered_total", &[("mode", "claim")]),
        2
    );
    assert_eq!(
        recorded.counter("latchkey_queue_delivered_total", &[("mode", "pop")]),
        1
    );
    assert_eq!(recorded.counter("latchkey_queue_redelivered_total", &[]), 1);
    assert_eq!(
        recorded.counter("latchkey_queue_acked_total", &[("outcome", "finished")]),
        1
    );
    // The transfer agent moved the delayed item: its lateness is recorded, and the depths.
    let lateness = recorded.histogram("latchkey_queue_lateness_seconds", &[]);
    assert_eq!(lateness.len(), 1, "{lateness:?}");
    assert!(lateness[0] >= 0.0 && lateness[0] < 5.0, "{lateness:?}");
    assert!(!recorded
        .gauge("latchkey_queue_depth", &[("state", "delayed")])
        .is_empty());

    // An item that does not decode as the consumer's type is dead-lettered, and the call goes
    // on with the next item (none here).
    let numbers = client.blocking_queue::<u32>("metrics-q");
    queue.put(&"not a number".to_owned()).await.unwrap();
    let none = numbers.poll(Duration::from_millis(500)).await.unwrap();
    assert!(
        none.is_none(),
        "the undecodable item is set aside: {none:?}"
    );
    assert_eq!(
        recorded.counter("latchkey_queue_dead_lettered_total", &[]),
        1
    );
    assert_eq!(queue.dead_letter_len().await.unwrap(), 1);
}

#[tokio::test]
async fn the_name_label_is_absent_by_default_and_present_when_opted_in() {
    let recorder = DebuggingRecorder::new();
    let _local = metrics::set_default_local_recorder(&recorder);
    let mut recorded = Recorded::new(&recorder);
    let server = RedisServer::spawn();

    let plain = client(&server).await;
    plain
        .lock("orders")
        .lock()
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
    let series = recorded.series();
    assert!(!series.is_empty());
    assert!(
        series
            .iter()
            .all(|(_, labels)| labels.iter().all(|(k, _)| k != "name")),
        "{series:?}"
    );

    let named = builder(&server)
        .metrics_name_label(true)
        .watchdog_timeout(Duration::from_secs(1))
        .connect()
        .await
        .unwrap();
    named
        .lock("orders")
        .lock()
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
    let labelled = [
        ("primitive", "lock"),
        ("name", "orders"),
        ("outcome", "acquired"),
    ];
    assert_eq!(recorded.counter("latchkey_acquires_total", &labelled), 1);
    // The unlabelled series is still the first client's one acquire.
    assert_eq!(
        recorded.counter("latchkey_acquires_total", LOCK_ACQUIRED),
        1
    );
}

/// One span as the collecting layer saw it: its name and every field recorded on it.
#[derive(Clone, Debug, Default)]
struct SeenSpan {
    name: &'static str,
    fields: HashMap<String, String>,
}

/// A `tracing` layer that keeps every span it is told about, with its fields.
#[derive(Clone, Default)]
struct Collect {
    spans: Arc<Mutex<Spans>>,
}

/// Every span seen, in order, and where the span of each live id is (the registry reuses the
/// ids of closed spans).
#[derive(Default)]
struct Spans {
    seen: Vec<SeenSpan>,
    live: HashMap<u64, usize>,
}

struct Fields<'a>(&'a mut HashMap<String, String>);

impl tracing::field::Visit for Fields<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Collect {
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        id: &tracing::span::Id,
        _: tracing_subscriber::layer::Context<'_, S>,
    ) {
        let mut span = SeenSpan {
            name: attrs.metadata().name(),
            fields: HashMap::new(),
        };
        attrs.record(&mut Fields(&mut span.fields));
        let mut spans = self.spans.lock().unwrap();
        let at = spans.seen.len();
        spans.seen.push(span);
        spans.live.insert(id.into_u64(), at);
    }

    fn on_record(
        &self,
        id: &tracing::span::Id,
        values: &tracing::span::Record<'_>,
        _: tracing_subscriber::layer::Context<'_, S>,
    ) {
        let mut spans = self.spans.lock().unwrap();
        if let Some(at) = spans.live.get(&id.into_u64()).copied() {
            values.record(&mut Fields(&mut spans.seen[at].fields));
        }
    }
}

impl Collect {
    fn named(&self, name: &str) -> Vec<SeenSpan> {
        let spans = self.spans.lock().unwrap();
        spans
            .seen
            .iter()
            .filter(|s| s.name == name)
            .cloned()
            .collect()
    }
}

#[tokio::test]
async fn lock_and_unlock_run_in_spans_with_name_token_and_outcome() {
    let collect = Collect::default();
    // Two live dispatchers: with only one, tracing-core computes the interest of a span call
    // site from the default of the thread that reaches it first — another test's thread,
    // without a subscriber — and caches "never" for every thread.
    let _second = tracing::Dispatch::new(tracing::subscriber::NoSubscriber::default());
    let dispatch = tracing::Dispatch::new(tracing_subscriber::registry().with(collect.clone()));
    let _default = tracing::dispatcher::set_default(&dispatch);
    tracing::callsite::rebuild_interest_cache();
    let server = RedisServer::spawn();
    let client: Client = client(&server).await;
    let lock = client.lock("traced");

    let guard = lock.lock().await.unwrap();
    let token = guard.fencing_token();
    guard.unlock().await.unwrap();
    let busy = client.lock("traced-busy");
    let _held = busy.lock().await.unwrap();
    let other = crate::helpers::client(&server).await;
    assert!(other
        .lock("traced-busy")
        .try_lock(Duration::from_millis(50))
        .await
        .unwrap()
        .is_none());

    let locks = collect.named("lock");
    let traced = locks
        .iter()
        .find(|s| s.fields.get("name").map(String::as_str) == Some("traced"))
        .unwrap_or_else(|| panic!("no lock span for `traced`: {locks:?}"));
    assert_eq!(traced.fields["primitive"], "lock");
    assert_eq!(traced.fields["outcome"], "acquired");
    assert_eq!(traced.fields["token"], token.to_string());

    let unlocks = collect.named("unlock");
    let unlocked = unlocks
        .iter()
        .find(|s| s.fields.get("name").map(String::as_str) == Some("traced"))
        .unwrap_or_else(|| panic!("no unlock span for `traced`: {unlocks:?}"));
    assert_eq!(unlocked.fields["outcome"], "released");
    assert_eq!(unlocked.fields["token"], token.to_string());

    let tries = collect.named("try_lock");
    assert_eq!(tries.len(), 1, "{tries:?}");
    assert_eq!(tries[0].fields["name"], "traced-busy");
    assert_eq!(tries[0].fields["wait"], "50ms");
    assert_eq!(tries[0].fields["outcome"], "timeout");
    assert!(!tries[0].fields.contains_key("token"), "{tries:?}");
}
