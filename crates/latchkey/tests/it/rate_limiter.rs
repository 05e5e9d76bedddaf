//! The rate limiters against a real server: `RateLimiter` (Redisson's sliding window, shared
//! with a Redisson-protocol client written here) and `GcraLimiter` (one key per entity).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use latchkey_redis::{Client, Error, Quota, RateConfig, RateLimiter, RateType};
use latchkey_test_support::{RedisCluster, RedisServer};
use redis::aio::MultiplexedConnection;
use redis::AsyncCommands;

use crate::helpers::{
    builder, client, evalsha_calls, eventually, keyspace, now_ms, poll_then_drop, refused, retry,
};

const SECOND: Duration = Duration::from_secs(1);
const PATIENCE: Duration = Duration::from_secs(10);

/// One grant seen by a test: the host clock (ms) just before the call was sent and just after
/// its answer came, and its permits. The grant's stamp (the server's clock for latchkey, the
/// caller's for the Redisson-protocol client, one clock on this host) lies between the two.
#[derive(Clone, Copy, Debug)]
struct Seen {
    before: u64,
    after: u64,
    permits: u64,
}

/// The most permits granted in one span of `interval_ms` that the grants prove: for each grant
/// `i`, the grants sent at or after it and answered before `interval_ms` after it was sent have
/// their stamps in `[before_i, before_i + interval_ms)`, one window. Never more than the rate
/// (a sound check: latency only hides excess, never invents it).
fn most_in_one_window(grants: &[Seen], interval_ms: u64) -> u64 {
    grants
        .iter()
        .map(|start| {
            grants
                .iter()
                .filter(|g| g.before >= start.before && g.after < start.before + interval_ms)
                .map(|g| g.permits)
                .sum::<u64>()
        })
        .max()
        .unwrap_or(0)
}

// ---------------------------------------------------------------------------------------------
// A Redisson-protocol client, written here from a reading of Redisson's RRateLimiter: it keeps
// Redisson's keys, fields and packed members, and stamps grants with the caller's clock.
// ---------------------------------------------------------------------------------------------

/// Redisson's tryAcquire, as this test understands it. KEYS: config, value, client value,
/// permits, client permits. ARGV: permits, the caller's clock (ms), random bytes. Returns nil
/// when granted, else the suggested wait in ms.
const REDISSON_TRY_ACQUIRE: &str = r#"
local cfg = redis.call('hmget', KEYS[1], 'rate', 'interval', 'type', 'keepAliveTime')
assert(cfg[1] and cfg[2] and cfg[3], 'RateLimiter is not initialized')
local rate, interval = tonumber(cfg[1]), tonumber(cfg[2])
local counter_key, log_key = KEYS[2], KEYS[4]
if cfg[3] == '1' then
    counter_key, log_key = KEYS[3], KEYS[5]
end
local want, now = tonumber(ARGV[1]), tonumber(ARGV[2])
assert(rate >= want, 'Requested permits amount cannot exceed defined rate')
local function permits_of(member)
    local _, n = struct.unpack('Bc0I', member)
    return n
end
local member = struct.pack('Bc0I', #ARGV[3], ARGV[3], want)
local result = nil
local counter = redis.call('get', counter_key)
if not counter then
    redis.call('set', counter_key, rate)
    redis.call('zadd', log_key, now, member)
    redis.call('decrby', counter_key, want)
else
    counter = tonumber(counter)
    local old = redis.call('zrangebyscore', log_key, 0, now - interval)
    local back = 0
    for _, m in ipairs(old) do back = back + permits_of(m) end
    if back > 0 then
        redis.call('zremrangebyscore', log_key, 0, now - interval)
        if counter + back > rate then
            local used = 0
            for _, m in ipairs(redis.call('zrange', log_key, 0, -1)) do used = used + permits_of(m) end
            counter = rate - used
        else
            counter = counter + back
        end
        redis.call('set', counter_key, counter)
    end
    if counter < want then
        local first = redis.call('zrange', log_key, 0, 0, 'withscores')
        result = 3 + interval - (now - tonumber(first[2]))
    else
        redis.call('zadd', log_key, now, member)
        redis.call('decrby', counter_key, want)
    end
end
local keep = tonumber(cfg[4] or '0') or 0
if keep > 0 then
    redis.call('pexpire', KEYS[1], keep)
    redis.call('pexpire', counter_key, keep)
    redis.call('pexpire', log_key, keep)
else
    local ttl = redis.call('pttl', KEYS[1])
    if ttl > 0 then
        redis.call('pexpire', counter_key, ttl)
        redis.call('pexpire', log_key, ttl)
    end
end
return result
"#;

/// Redisson's trySetRate: each field set unless present; 1 when `type` was set by this call.
const REDISSON_TRY_SET_RATE: &str = r#"
redis.call('hsetnx', KEYS[1], 'rate', ARGV[1])
redis.call('hsetnx', KEYS[1], 'interval', ARGV[2])
redis.call('hsetnx', KEYS[1], 'keepAliveTime', ARGV[4])
local set = redis.call('hsetnx', KEYS[1], 'type', ARGV[3])
if set == 1 and tonumber(ARGV[4]) > 0 then
    redis.call('pexpire', KEYS[1], ARGV[4])
end
return set
"#;

/// A Redisson client of one limiter: its five keys (with its own client id) and a connection.
struct RedissonLimiter {
    keys: [String; 5],
    conn: MultiplexedConnection,
    /// How far this "Java host's" clock is ahead of this host's, in ms.
    clock_ahead: u64,
}

impl RedissonLimiter {
    async fn new(server: &RedisServer, name: &str) -> RedissonLimiter {
        let id = uuid::Uuid::new_v4().to_string();
        RedissonLimiter {
            keys: [
                name.to_owned(),
                format!("{{{name}}}:value"),
                format!("{{{name}}}:value:{id}"),
                format!("{{{name}}}:permits"),
                format!("{{{name}}}:permits:{id}"),
            ],
            conn: server.conn().await,
            clock_ahead: 0,
        }
    }

    /// This client with its clock `ms` ahead.
    fn ahead(self, ms: u64) -> RedissonLimiter {
        RedissonLimiter {
            clock_ahead: ms,
            ..self
        }
    }

    async fn try_set_rate(&mut self, rate_type: &str, rate: u64, interval_ms: u64) -> bool {
        let set: i64 = redis::Script::new(REDISSON_TRY_SET_RATE)
            .key(&self.keys[0])
            .arg(rate)
            .arg(interval_ms)
            .arg(rate_type)
            .arg(0)
            .invoke_async(&mut self.conn)
            .await
            .unwrap();
        set == 1
    }

    /// One tryAcquire stamped with this host's clock: `None` when granted, else the wait (ms).
    async fn try_acquire(&mut self, permits: u32) -> Option<i64> {
        let random: [u8; 16] = rand::random();
        let script = redis::Script::new(REDISSON_TRY_ACQUIRE);
        let mut invocation = script.prepare_invoke();
        for key in &self.keys {
            invocation.key(key);
        }
        invocation
            .arg(permits)
            .arg(now_ms() + self.clock_ahead)
            .arg(&random[..])
            .invoke_async(&mut self.conn)
            .await
            .unwrap()
    }
}

// ---------------------------------------------------------------------------------------------
// RateLimiter
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn a_window_admits_its_rate_then_waits_for_the_oldest_grant() {
    let server = RedisServer::spawn();
    let client = client(&server).await;
    let limiter = client.rate_limiter("api");
    assert!(limiter.rate().await.unwrap().is_none());
    let interval = Duration::from_millis(600);
    assert!(limiter
        .try_set_rate(RateType::Overall, 5, interval)
        .await
        .unwrap());
    assert!(!limiter
        .try_set_rate(RateType::PerClient, 50, SECOND)
        .await
        .unwrap());
    assert_eq!(
        limiter.rate().await.unwrap(),
        Some(RateConfig::new(RateType::Overall, 5, interval))
    );
    assert_eq!(limiter.available_permits().await.unwrap(), 5);

    let started = Instant::now();
    for _ in 0..5 {
        assert!(limiter.try_acquire(1, Duration::ZERO).await.unwrap());
    }
    assert!(!limiter.try_acquire(1, Duration::ZERO).await.unwrap());
    assert_eq!(limiter.available_permits().await.unwrap(), 0);
    // It will not have room within 100 ms: refused at once, not after 100 ms.
    let asked = Instant::now();
    assert!(!limiter
        .try_acquire(1, Duration::from_millis(100))
        .await
        .unwrap());
    assert!(
        asked.elapsed() < Duration::from_millis(90),
        "{:?}",
        asked.elapsed()
    );
    // The first grant comes back one interval after it was made.
    limiter.acquire(1).await.unwrap();
    let waited = started.elapsed();
    assert!(waited >= interval - Duration::from_millis(20), "{waited:?}");
    assert!(limiter.try_acquire(1, SECOND).await.unwrap());
}

#[tokio::test]
async fn the_layout_is_redissons() {
    let server = RedisServer::spawn();
    let client = client(&server).await;
    let limiter = client.rate_limiter("geo");
    let config = RateConfig::new(RateType::Overall, 10, Duration::from_secs(2))
        .with_keep_alive(Duration::from_secs(60));
    assert!(limiter.try_set_rate_with(config).await.unwrap());
    assert_eq!(limiter.rate().await.unwrap(), Some(config));
    let server_ms = || {
        let time: Vec<String> = crate::helpers::read(&server, &["TIME"]);
        time[0].parse::<u64>().unwrap() * 1000 + time[1].parse::<u64>().unwrap() / 1000
    };
    let before = server_ms();
    limiter.acquire(3).await.unwrap();
    let after = server_ms();

    let mut conn = server.conn().await;
    let fields: BTreeMap<String, String> = conn.hgetall("geo").await.unwrap();
    let expected: BTreeMap<String, String> = [
        ("rate", "10"),
        ("interval", "2000"),
        ("type", "0"),
        ("keepAliveTime", "60000"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    assert_eq!(fields, expected);
    let value: String = conn.get("{geo}:value").await.unwrap();
    assert_eq!(value, "7");
    let log: Vec<(Vec<u8>, f64)> = conn
        .zrange_withscores("{geo}:permits", 0, -1)
        .await
        .unwrap();
    assert_eq!(log.len(), 1);
    let (member, score) = &log[0];
    // One byte (the random part's length, 16), 16 random bytes, the permits (u32, the server's
    // byte order: little-endian here).
    assert_eq!(member.len(), 21, "{member:?}");
    assert_eq!(member[0], 16);
    assert_eq!(&member[17..], &3u32.to_le_bytes());
    // Stamped with the server's clock, in ms.
    let score = *score as u64;
    assert!(
        before <= score && score <= after,
        "{before} <= {score} <= {after}"
    );
    // The keep-alive time went on every key.
    for key in ["geo", "{geo}:value", "{geo}:permits"] {
        let ttl: i64 = conn.pttl(key).await.unwrap();
        assert!(ttl > 50_000 && ttl <= 60_000, "{key}: {ttl}");
    }
}

#[tokio::test]
async fn per_client_limiters_give_each_client_its_own_budget() {
    let server = RedisServer::spawn();
    let (a, b) = (client(&server).await, client(&server).await);
    let (la, lb) = (a.rate_limiter("exports"), b.rate_limiter("exports"));
    la.try_set_rate(RateType::PerClient, 3, Duration::from_secs(30))
        .await
        .unwrap();
    for limiter in [&la, &lb] {
        for _ in 0..3 {
            assert!(limiter.try_acquire(1, Duration::ZERO).await.unwrap());
        }
        assert!(!limiter.try_acquire(1, Duration::ZERO).await.unwrap());
    }
    let mut conn = server.conn().await;
    for id in [a.id(), b.id()] {
        let value: String = conn.get(format!("{{exports}}:value:{id}")).await.unwrap();
        assert_eq!(value, "0");
        let logged: u64 = conn
            .zcard(format!("{{exports}}:permits:{id}"))
            .await
            .unwrap();
        assert_eq!(logged, 3);
        // A client's own window expires an interval after its last use (Redisson's keeps a
        // pair of keys per client process ever started).
        for key in [
            format!("{{exports}}:value:{id}"),
            format!("{{exports}}:permits:{id}"),
        ] {
            let ttl: i64 = conn.pttl(&key).await.unwrap();
            assert!(ttl > 25_000 && ttl <= 30_000, "{key} expires in {ttl} ms");
        }
    }
    let overall: bool = conn.exists("{exports}:value").await.unwrap();
    assert!(!overall);
}

/// The issue's accuracy figure: 4 clients × 8 tasks hammering a 100/s limiter for 10 s admit
/// between 1,000 and 1,000 + one window's worth, and never more than 100 in one second.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn four_clients_of_eight_tasks_hammering_100_per_second_for_10_s() {
    let server = RedisServer::spawn();
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(client(&server).await);
    }
    clients[0]
        .rate_limiter("hammered")
        .try_set_rate(RateType::Overall, 100, SECOND)
        .await
        .unwrap();
    let grants = Arc::new(Mutex::new(Vec::new()));
    let start = Instant::now();
    let end = start + Duration::from_secs(10);
    let mut tasks = Vec::new();
    for i in 0..32 {
        let limiter = clients[i % 4].rate_limiter("hammered");
        let grants = grants.clone();
        tasks.push(tokio::spawn(async move {
            loop {
                let now = Instant::now();
                if now >= end {
                    break;
                }
                let before = now_ms();
                if !limiter.try_acquire(1, end - now).await.unwrap() {
                    break;
                }
                let after = now_ms();
                grants.lock().unwrap().push(Seen {
                    before,
                    after,
                    permits: 1,
                });
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let grants = grants.lock().unwrap().clone();
    let admitted = grants.len() as u64;
    let most = most_in_one_window(&grants, 1000);
    println!(
        "accuracy: {admitted} admitted in {:?} by 32 tasks (100/s); at most {most} in one \
         second",
        start.elapsed()
    );
    assert!(
        (1000..=1100).contains(&admitted),
        "{admitted} admitted in 10 s at 100/s"
    );
    assert!(most <= 100, "{most} admitted within one second");
}

/// Java (Redisson, its caller's clock) and Rust (latchkey, the server's clock) clients sharing
/// one limiter never admit more than the rate together: one host, so one clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_redisson_client_and_latchkey_clients_never_exceed_the_rate_together() {
    let server = RedisServer::spawn();
    let mut java = RedissonLimiter::new(&server, "shared").await;
    // The Java service sets the limiter up.
    assert!(java.try_set_rate("0", 20, 500).await);
    let client = client(&server).await;
    let limiter = client.rate_limiter("shared");
    assert_eq!(
        limiter.rate().await.unwrap(),
        Some(RateConfig::new(
            RateType::Overall,
            20,
            Duration::from_millis(500)
        ))
    );
    assert!(!limiter
        .try_set_rate(RateType::Overall, 99, SECOND)
        .await
        .unwrap());

    let grants = Arc::new(Mutex::new(Vec::new()));
    let end = Instant::now() + Duration::from_secs(4);
    let java_granted = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let mut java = RedissonLimiter::new(&server, "shared").await;
        let grants = grants.clone();
        let java_granted = java_granted.clone();
        tasks.push(tokio::spawn(async move {
            while Instant::now() < end {
                let permits = 1 + (rand::random::<u32>() % 2);
                let before = now_ms();
                match java.try_acquire(permits).await {
                    None => {
                        let after = now_ms();
                        java_granted.fetch_add(u64::from(permits), Ordering::Relaxed);
                        grants.lock().unwrap().push(Seen {
                            before,
                            after,
                            permits: u64::from(permits),
                        });
                    }
                    Some(wait) => {
                        assert!(wait > 0 && wait <= 503 + 50, "wait {wait}");
                        let wait = Duration::from_millis(wait as u64);
                        tokio::time::sleep(wait.min(end.saturating_duration_since(Instant::now())))
                            .await;
                    }
                }
            }
        }));
    }
    for i in 0..4 {
        let limiter = client.rate_limiter("shared");
        let grants = grants.clone();
        tasks.push(tokio::spawn(async move {
            loop {
                let now = Instant::now();
                if now >= end {
                    break;
                }
                let permits = 1 + (i % 3);
                let before = now_ms();
                if !limiter.try_acquire(permits, end - now).await.unwrap() {
                    break;
                }
                let after = now_ms();
                grants.lock().unwrap().push(Seen {
                    before,
                    after,
                    permits: u64::from(permits),
                });
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let grants = grants.lock().unwrap().clone();
    let total: u64 = grants.iter().map(|g| g.permits).sum();
    let java = java_granted.load(Ordering::Relaxed);
    let most = most_in_one_window(&grants, 500);
    println!(
        "interop: {total} permits in 4 s at 20 per 500 ms ({java} by the Redisson-protocol \
         client); at most {most} in one window"
    );
    assert!(most <= 20, "{most} permits within 500 ms");
    assert!(
        java > 0 && java < total,
        "both sides got permits: {java} of {total}"
    );
    // The window was used, not starved: 8 windows of 20.
    assert!(total >= 8 * 20 - 20, "{total}");

    // Both sides kept the invariant: the counter and the permits logged make the rate.
    let mut conn = server.conn().await;
    let counter: i64 = conn.get("{shared}:value").await.unwrap();
    let log: Vec<Vec<u8>> = conn.zrange("{shared}:permits", 0, -1).await.unwrap();
    let logged: i64 = log
        .iter()
        .map(|m| {
            assert!(m.len() == 21 && m[0] == 16, "{m:?}");
            i64::from(u32::from_le_bytes(m[17..].try_into().unwrap()))
        })
        .sum();
    assert_eq!(counter + logged, 20);
}

/// With a Java host's clock `D` ms ahead of the server's, Java and Rust together still admit
/// at most the rate in any span of `interval - D`, as `RateLimiter`'s docs say.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_a_java_clock_ahead_by_d_the_rate_holds_over_interval_minus_d() {
    const AHEAD: u64 = 150;
    let server = RedisServer::spawn();
    let client = client(&server).await;
    let limiter = client.rate_limiter("skewed");
    limiter
        .try_set_rate(RateType::Overall, 10, Duration::from_millis(500))
        .await
        .unwrap();
    let grants = Arc::new(Mutex::new(Vec::new()));
    let end = Instant::now() + Duration::from_secs(3);
    let mut tasks = Vec::new();
    for _ in 0..3 {
        let mut java = RedissonLimiter::new(&server, "skewed").await.ahead(AHEAD);
        let grants = grants.clone();
        tasks.push(tokio::spawn(async move {
            while Instant::now() < end {
                let before = now_ms();
                match java.try_acquire(1).await {
                    None => grants.lock().unwrap().push(Seen {
                        before,
                        after: now_ms(),
                        permits: 1,
                    }),
                    Some(wait) => {
                        tokio::time::sleep(Duration::from_millis(wait.clamp(1, 50) as u64)).await;
                    }
                }
            }
        }));
    }
    for _ in 0..3 {
        let limiter = limiter.clone();
        let grants = grants.clone();
        tasks.push(tokio::spawn(async move {
            loop {
                let now = Instant::now();
                if now >= end {
                    break;
                }
                let before = now_ms();
                if !limiter.try_acquire(1, end - now).await.unwrap() {
                    break;
                }
                grants.lock().unwrap().push(Seen {
                    before,
                    after: now_ms(),
                    permits: 1,
                });
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let grants = grants.lock().unwrap().clone();
    let within = most_in_one_window(&grants, 500 - AHEAD);
    let whole = most_in_one_window(&grants, 500);
    println!(
        "skew: {} permits in 3 s at 10 per 500 ms, a Java clock {AHEAD} ms ahead: at most \
         {within} in {} ms, {whole} in 500 ms",
        grants.len(),
        500 - AHEAD
    );
    assert!(within <= 10, "{within} permits within {} ms", 500 - AHEAD);
}

#[tokio::test]
async fn a_redisson_client_reads_latchkeys_grants_and_the_other_way_round() {
    let server = RedisServer::spawn();
    let client = client(&server).await;
    let limiter = client.rate_limiter("both");
    limiter
        .try_set_rate(RateType::Overall, 4, Duration::from_secs(30))
        .await
        .unwrap();
    let mut java = RedissonLimiter::new(&server, "both").await;
    limiter.acquire(3).await.unwrap();
    assert_eq!(java.try_acquire(1).await, None);
    // Full for both: each refuses, Redisson with a wait near the interval.
    let wait = java.try_acquire(1).await.expect("refused");
    assert!(wait > 29_000 && wait <= 30_003, "{wait}");
    assert!(!limiter.try_acquire(1, Duration::ZERO).await.unwrap());
    // latchkey gives back Redisson's grant too (the oldest first: its own 3, then Java's).
    assert_eq!(limiter.release(4).await.unwrap(), 4);
    assert_eq!(java.try_acquire(4).await, None);
    assert_eq!(limiter.available_permits().await.unwrap(), 0);
}

#[tokio::test]
async fn set_rate_replaces_the_config_and_starts_the_window_again() {
    let server = RedisServer::spawn();
    let client = client(&server).await;
    let limiter = client.rate_limiter("reports");
    limiter
        .try_set_rate_with(
            RateConfig::new(RateType::Overall, 2, Duration::from_secs(30))
                .with_keep_alive(Duration::from_secs(60)),
        )
        .await
        .unwrap();
    limiter.acquire(2).await.unwrap();
    assert!(!limiter.try_acquire(1, Duration::ZERO).await.unwrap());
    limiter
        .set_rate(RateType::Overall, 3, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(
        limiter.rate().await.unwrap(),
        Some(RateConfig::new(
            RateType::Overall,
            3,
            Duration::from_secs(30)
        ))
    );
    let mut conn = server.conn().await;
    // Without a keep-alive time the config no longer expires.
    let ttl: i64 = conn.pttl("reports").await.unwrap();
    assert_eq!(ttl, -1);
    assert!(limiter.try_acquire(3, Duration::ZERO).await.unwrap());
    // A change of type deletes both windows of this client.
    limiter
        .set_rate(RateType::PerClient, 3, Duration::from_secs(30))
        .await
        .unwrap();
    assert!(!conn.exists::<_, bool>("{reports}:value").await.unwrap());
    assert!(!conn.exists::<_, bool>("{reports}:permits").await.unwrap());
    assert_eq!(limiter.available_permits().await.unwrap(), 3);
    assert!(limiter.delete().await.unwrap());
    assert!(limiter.rate().await.unwrap().is_none());
    assert!(crate::helpers::data_keys(&mut conn).await.is_empty());
}

#[tokio::test]
async fn release_gives_back_the_oldest_grants_and_never_more_than_the_window_holds() {
    let server = RedisServer::spawn();
    let client = client(&server).await;
    let limiter = client.rate_limiter("calls");
    limiter
        .try_set_rate(RateType::Overall, 5, Duration::from_secs(30))
        .await
        .unwrap();
    limiter.acquire(2).await.unwrap();
    limiter.acquire(3).await.unwrap();
    assert_eq!(limiter.available_permits().await.unwrap(), 0);
    // Cuts the 3-permit grant down to 2 after giving back the 2-permit one.
    assert_eq!(limiter.release(3).await.unwrap(), 3);
    assert_eq!(limiter.available_permits().await.unwrap(), 3);
    let mut conn = server.conn().await;
    let log: Vec<Vec<u8>> = conn.zrange("{calls}:permits", 0, -1).await.unwrap();
    assert_eq!(log.len(), 1);
    assert_eq!(&log[0][17..], &2u32.to_le_bytes());
    // Only what the window holds comes back: the counter never passes the rate.
    assert_eq!(limiter.release(10).await.unwrap(), 2);
    assert_eq!(limiter.available_permits().await.unwrap(), 5);
    assert!(limiter.try_acquire(1, Duration::ZERO).await.unwrap());
    assert_eq!(limiter.available_permits().await.unwrap(), 4);
}

#[tokio::test]
async fn a_counter_lost_apart_from_its_log_is_counted_again() {
    let server = RedisServer::spawn();
    let client = client(&server).await;
    let limiter = client.rate_limiter("mend");
    limiter
        .try_set_rate(RateType::Overall, 5, Duration::from_secs(30))
        .await
        .unwrap();
    limiter.acquire(3).await.unwrap();
    let mut conn = server.conn().await;
    let _: () = conn.del("{mend}:value").await.unwrap();
    // Redisson would start the counter at the rate again (5 more); latchkey counts the log.
    assert_eq!(limiter.available_permits().await.unwrap(), 2);
    assert!(limiter.try_acquire(2, Duration::ZERO).await.unwrap());
    assert!(!limiter.try_acquire(1, Duration::ZERO).await.unwrap());
    // A counter that says less than the log explains (permits lost) is mended too.
    let _: () = conn.set("{mend}:value", -3).await.unwrap();
    let _: () = conn.del("{mend}:permits").await.unwrap();
    assert!(limiter.try_acquire(5, Duration::ZERO).await.unwrap());
}

#[tokio::test]
async fn bad_input_is_a_typed_error_and_changes_nothing() {
    let server = RedisServer::spawn();
    let client = client(&server).await;
    let mut conn = server.conn().await;
    let limiter = client.rate_limiter("strict");
    let invalid = Error::is_invalid_argument;

    // Not set yet.
    refused(&mut conn, limiter.acquire(1), Error::is_rate_not_set).await;
    refused(
        &mut conn,
        limiter.try_acquire(1, SECOND),
        Error::is_rate_not_set,
    )
    .await;
    refused(&mut conn, limiter.release(1), Error::is_rate_not_set).await;
    refused(
        &mut conn,
        limiter.available_permits(),
        Error::is_rate_not_set,
    )
    .await;

    // Rates that cannot be set.
    for (rate, interval) in [
        (0, SECOND),
        (RateLimiter::MAX_RATE + 1, SECOND),
        (5, Duration::ZERO),
        (5, Duration::from_micros(10)),
        (5, RateLimiter::MAX_INTERVAL + SECOND),
        (5, Duration::MAX),
    ] {
        refused(
            &mut conn,
            limiter.try_set_rate(RateType::Overall, rate, interval),
            invalid,
        )
        .await;
        refused(
            &mut conn,
            limiter.set_rate(RateType::Overall, rate, interval),
            invalid,
        )
        .await;
    }
    let short_keep_alive =
        RateConfig::new(RateType::Overall, 5, SECOND).with_keep_alive(Duration::from_millis(10));
    refused(
        &mut conn,
        limiter.try_set_rate_with(short_keep_alive),
        invalid,
    )
    .await;
    refused(
        &mut conn,
        client.rate_limiter("").try_acquire(1, SECOND),
        invalid,
    )
    .await;
    refused(
        &mut conn,
        client
            .rate_limiter("redisson_x")
            .try_set_rate(RateType::Overall, 1, SECOND),
        invalid,
    )
    .await;

    limiter
        .try_set_rate(RateType::Overall, 5, SECOND)
        .await
        .unwrap();
    limiter.acquire(2).await.unwrap();
    refused(&mut conn, limiter.acquire(0), invalid).await;
    refused(&mut conn, limiter.release(0), invalid).await;
    // More permits than the rate could never be granted.
    let err = refused(&mut conn, limiter.acquire(6), invalid).await;
    assert!(err.to_string().contains("could never be granted"), "{err}");
    refused(&mut conn, limiter.try_acquire(1, Duration::MAX), invalid).await;

    // Keys of another type.
    let _: () = conn.set("text", "hello").await.unwrap();
    let text = client.rate_limiter("text");
    refused(
        &mut conn,
        text.try_set_rate(RateType::Overall, 1, SECOND),
        Error::is_wrong_type,
    )
    .await;
    refused(
        &mut conn,
        text.set_rate(RateType::Overall, 1, SECOND),
        Error::is_wrong_type,
    )
    .await;
    refused(&mut conn, text.acquire(1), Error::is_wrong_type).await;
    refused(&mut conn, text.rate(), Error::is_wrong_type).await;
    refused(&mut conn, text.available_permits(), Error::is_wrong_type).await;
    refused(&mut conn, text.release(1), Error::is_wrong_type).await;

    // A lock's hash under the name: setting a rate there would break the lock.
    let held = client.lock("orders").lock().await.unwrap();
    let orders = client.rate_limiter("orders");
    for err in [
        orders
            .try_set_rate(RateType::Overall, 1, SECOND)
            .await
            .unwrap_err(),
        orders
            .set_rate(RateType::Overall, 1, SECOND)
            .await
            .unwrap_err(),
    ] {
        assert!(err.is_wrong_type(), "{err}");
    }
    assert!(!held.is_lost());
    held.unlock().await.unwrap();

    let _: () = conn.set("{strict}:permits", "not a log").await.unwrap();
    refused(&mut conn, limiter.acquire(1), Error::is_wrong_type).await;
    refused(&mut conn, limiter.release(1), Error::is_wrong_type).await;
    refused(
        &mut conn,
        limiter.set_rate(RateType::Overall, 5, SECOND),
        Error::is_wrong_type,
    )
    .await;
    let _: () = conn.del("{strict}:permits").await.unwrap();
    let _: () = conn.set("{strict}:value", "many").await.unwrap();
    refused(&mut conn, limiter.acquire(1), Error::is_wrong_type).await;
    let _: () = conn.del("{strict}:value").await.unwrap();
    let _: () = conn.hset("strict", "interval", "soon").await.unwrap();
    refused(&mut conn, limiter.acquire(1), Error::is_wrong_type).await;
}

/// An acquire dropped at every point — before its script is sent, while it is on its way,
/// after it answered, while it sleeps — leaves no permit taken.
#[tokio::test]
async fn a_dropped_acquire_leaves_no_permit_taken() {
    let server = RedisServer::spawn();
    let client = client(&server).await;
    let limiter = client.rate_limiter("dropped");
    limiter
        .try_set_rate(RateType::Overall, 3, Duration::from_secs(60))
        .await
        .unwrap();
    // Dropped after 0, 1, 2, … polls (more sparsely further on), until three in a row finished:
    // a busy machine takes more polls for a round trip.
    let (mut polls, mut in_a_row) = (0, 0);
    while in_a_row < 3 {
        assert!(polls < 1_000_000, "an acquire never finished");
        if let Some(granted) = poll_then_drop(limiter.try_acquire(1, Duration::ZERO), polls).await {
            assert!(granted.unwrap());
            in_a_row += 1;
            assert_eq!(limiter.release(1).await.unwrap(), 1);
        } else {
            in_a_row = 0;
        }
        let done = eventually(PATIENCE, || async {
            limiter.available_permits().await.unwrap() == 3
        })
        .await;
        assert!(done, "after a drop at poll {polls}, a permit stayed taken");
        polls += 1 + polls / 16;
    }
    let mut conn = server.conn().await;
    let logged: u64 = conn.zcard("{dropped}:permits").await.unwrap();
    assert_eq!(logged, 0);

    // A waiting acquire dropped while it sleeps.
    limiter.acquire(3).await.unwrap();
    let before = keyspace(&mut conn).await;
    let waiting = tokio::spawn({
        let limiter = limiter.clone();
        async move { limiter.acquire(1).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    waiting.abort();
    assert!(waiting.await.unwrap_err().is_cancelled());
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(keyspace(&mut conn).await, before);
}

/// A waiter sleeps until the window has room: one script call to be refused, one to be granted,
/// not a poll.
#[tokio::test]
async fn a_waiter_sleeps_until_the_time_it_was_told() {
    let server = RedisServer::spawn();
    let client = client(&server).await;
    let limiter = client.rate_limiter("patient");
    limiter
        .try_set_rate(RateType::Overall, 2, Duration::from_millis(800))
        .await
        .unwrap();
    limiter.acquire(2).await.unwrap();
    let mut conn = server.conn().await;
    let calls = evalsha_calls(&mut conn).await;
    let started = Instant::now();
    limiter.acquire(1).await.unwrap();
    assert!(
        started.elapsed() >= Duration::from_millis(700),
        "{:?}",
        started.elapsed()
    );
    let made = evalsha_calls(&mut conn).await - calls;
    assert!(made <= 3, "{made} script calls for one wait");
}

#[tokio::test]
async fn a_limit_survives_a_restart_with_aof() {
    let mut server = RedisServer::builder().appendonly(true).spawn();
    let client = client(&server).await;
    let limiter = client.rate_limiter("durable");
    limiter
        .try_set_rate(RateType::Overall, 3, Duration::from_secs(60))
        .await
        .unwrap();
    limiter.acquire(3).await.unwrap();
    let gcra = client.gcra_limiter("durable", Quota::per_hour(2));
    assert!(gcra.check("user", 2).await.unwrap().is_admitted());

    server.restart();
    assert!(!retry(|| limiter.try_acquire(1, Duration::ZERO)).await);
    assert_eq!(limiter.available_permits().await.unwrap(), 0);
    let decision = gcra.check("user", 1).await.unwrap();
    assert!(!decision.is_admitted());
    assert!(decision.retry_after().unwrap() > Duration::from_secs(1700));
}

#[tokio::test]
async fn a_limiter_with_a_keep_alive_time_is_deleted_when_idle() {
    let server = RedisServer::spawn();
    let client = client(&server).await;
    let limiter = client.rate_limiter("idle");
    limiter
        .try_set_rate_with(
            RateConfig::new(RateType::Overall, 5, Duration::from_millis(200))
                .with_keep_alive(Duration::from_millis(400)),
        )
        .await
        .unwrap();
    limiter.acquire(1).await.unwrap();
    let mut conn = server.conn().await;
    assert_eq!(crate::helpers::data_keys(&mut conn).await.len(), 3);
    let gone = eventually(PATIENCE, || async {
        crate::helpers::data_keys(&mut server.conn().await)
            .await
            .is_empty()
    })
    .await;
    assert!(gone, "the limiter's keys outlived its keep-alive time");
    let err = limiter.acquire(1).await.unwrap_err();
    assert!(err.is_rate_not_set(), "{err}");
}

#[test]
fn the_blocking_client_runs_an_acquire() {
    let server = RedisServer::spawn();
    let client = latchkey_redis::blocking::Client::from_builder(builder(&server)).unwrap();
    let limiter = client.rate_limiter("sync");
    assert!(client
        .run(limiter.try_set_rate(RateType::Overall, 2, Duration::from_millis(300)))
        .unwrap());
    let started = Instant::now();
    for _ in 0..3 {
        client.run(limiter.acquire(1)).unwrap();
    }
    assert!(started.elapsed() >= Duration::from_millis(250));
    let gcra = client.gcra_limiter("sync", Quota::per_second(10));
    assert!(client.run(gcra.check("k", 1)).unwrap().is_admitted());
}

#[tokio::test]
async fn the_readme_acl_line_serves_the_rate_limiters() {
    let readme = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"));
    let (_, section) = readme.split_once("\n### ACL\n").expect("an ACL section");
    let line = section
        .lines()
        .find(|line| line.starts_with("user "))
        .expect("the single-server line");
    let rules: Vec<&str> = line.split_whitespace().skip(2).collect();
    let server = RedisServer::spawn();
    let mut args = vec!["ACL", "SETUSER", "limited", "reset"];
    args.extend(rules.iter().copied().filter(|r| !r.starts_with('>')));
    args.push(">secret");
    server.cmd_sync(&args);
    let url = format!("redis://limited:secret@{}", server.addr());
    let client = Client::connect(url).await.unwrap();
    let limiter = client.rate_limiter("acl");
    limiter
        .try_set_rate(RateType::Overall, 2, Duration::from_millis(300))
        .await
        .unwrap();
    for _ in 0..3 {
        limiter.acquire(1).await.unwrap();
    }
    limiter.release(1).await.unwrap();
    limiter.available_permits().await.unwrap();
    limiter.rate().await.unwrap();
    limiter
        .set_rate(RateType::PerClient, 2, Duration::from_millis(300))
        .await
        .unwrap();
    poll_then_drop(limiter.acquire(1), 3).await;
    limiter.delete().await.unwrap();
    let gcra = client.gcra_limiter("acl", Quota::per_second(10).with_burst(1));
    gcra.check("k", 1).await.unwrap();
    gcra.until_ready("k", 1).await.unwrap();
    poll_then_drop(gcra.check("j", 1), 3).await;
    gcra.reset("k").await.unwrap();
}

/// On a cluster every script of a limiter reaches its slot: the five keys share the name's
/// slot (its own hash tag too), and GCRA keys spread over the shards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_limiters_work_on_a_cluster() {
    let cluster = RedisCluster::spawn(3, 0);
    let url = crate::helpers::cluster_url(&cluster.primaries());
    let client = Client::connect(url).await.unwrap();
    for name in ["plain", "orders{eu}:calls"] {
        let limiter = client.rate_limiter(name);
        limiter
            .try_set_rate(RateType::Overall, 3, Duration::from_secs(30))
            .await
            .unwrap();
        limiter.acquire(2).await.unwrap();
        assert_eq!(limiter.available_permits().await.unwrap(), 1);
        assert_eq!(limiter.release(1).await.unwrap(), 1);
        poll_then_drop(limiter.acquire(1), 3).await;
        limiter
            .set_rate(RateType::PerClient, 3, Duration::from_secs(30))
            .await
            .unwrap();
        assert!(limiter.try_acquire(3, Duration::ZERO).await.unwrap());
        if name.contains("{eu}") {
            // Redisson's suffixName keeps the name's own tag: this client's counter is there.
            let key = format!("orders{{eu}}:calls:value:{}", client.id());
            let left: String = crate::helpers::read(cluster.node_for_key("eu"), &["GET", &key]);
            assert_eq!(left, "0");
        }
        assert!(limiter.delete().await.unwrap());
    }

    let gcra = client.gcra_limiter("api", Quota::per_hour(10));
    for i in 0..30 {
        assert!(gcra
            .check(&format!("user:{i}"), 1)
            .await
            .unwrap()
            .is_admitted());
    }
    let shards_used = cluster
        .primaries()
        .iter()
        .filter(|node| crate::helpers::read::<i64>(node, &["DBSIZE"]) > 0)
        .count();
    assert!(shards_used > 1, "30 keys in {shards_used} shard(s)");
}

// ---------------------------------------------------------------------------------------------
// GcraLimiter
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn gcra_admits_a_burst_then_one_per_emission_interval() {
    let server = RedisServer::spawn();
    let client = client(&server).await;
    let limiter = client.gcra_limiter("burst", Quota::per_second(10).with_burst(5));
    for left in (0..5).rev() {
        let decision = limiter.check("k", 1).await.unwrap();
        assert!(decision.is_admitted());
        assert_eq!(decision.remaining(), left);
        assert_eq!(decision.limit(), 5);
        assert_eq!(decision.retry_after(), None);
    }
    let refused = limiter.check("k", 1).await.unwrap();
    assert!(!refused.is_admitted());
    assert_eq!(refused.remaining(), 0);
    let retry = refused.retry_after().unwrap();
    // One emission interval (100 ms) after the first of the burst, less the time since.
    assert!(
        retry > Duration::from_millis(50) && retry <= Duration::from_millis(100),
        "{retry:?}"
    );
    // The bucket is empty again after 5 emission intervals.
    let reset = refused.reset_after();
    assert!(
        reset > Duration::from_millis(450) && reset <= Duration::from_millis(500),
        "{reset:?}"
    );
    tokio::time::sleep(retry).await;
    assert!(limiter.check("k", 1).await.unwrap().is_admitted());
    assert!(!limiter.check("k", 1).await.unwrap().is_admitted());
}

#[tokio::test]
async fn gcra_retry_after_is_when_the_request_would_be_admitted() {
    let server = RedisServer::spawn();
    let client = client(&server).await;
    // 3 per second, bursts of 3: one cell every 333.3 ms.
    let limiter = client.gcra_limiter("retry", Quota::per_second(3));
    assert!(limiter.check("k", 3).await.unwrap().is_admitted());
    let two = limiter.check("k", 2).await.unwrap();
    let retry = two.retry_after().unwrap();
    assert!(
        retry > Duration::from_millis(600) && retry <= Duration::from_micros(666_667),
        "{retry:?}"
    );
    // A refusal writes nothing: the entity's time is as it was.
    let mut conn = server.conn().await;
    let key = "latchkey_gcra:5:retry:k";
    let before: String = conn.get(key).await.unwrap();
    assert!(!limiter.check("k", 1).await.unwrap().is_admitted());
    let after: String = conn.get(key).await.unwrap();
    assert_eq!(before, after);
    // until_ready_within gives up at once when the wait is too short, waits when it is not.
    let asked = Instant::now();
    let decision = limiter
        .until_ready_within("k", 2, Duration::from_millis(100))
        .await
        .unwrap();
    assert!(!decision.is_admitted());
    assert!(asked.elapsed() < Duration::from_millis(90));
    let decision = limiter.until_ready_within("k", 2, SECOND).await.unwrap();
    assert!(decision.is_admitted());
    assert!(
        asked.elapsed() >= Duration::from_millis(600),
        "{:?}",
        asked.elapsed()
    );
}

/// Per-key limits over 10,000 keys: each key has its own bucket (a decision for each, then
/// the rest of each one's burst, then a refusal for each: one small key each), and a few
/// hammered keys are each held to their own rate.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn gcra_holds_each_of_10k_keys_to_its_own_rate() {
    let server = RedisServer::spawn();
    let client = client(&server).await;
    // 50 an hour, bursts of 10: nothing comes back during the test.
    let limiter = client.gcra_limiter("users", Quota::per_hour(50).with_burst(10));
    let decide_all = |cost: u32| {
        futures_util::future::join_all((0..10_000).map(|i| {
            let limiter = limiter.clone();
            async move { limiter.check(&format!("user:{i}"), cost).await.unwrap() }
        }))
    };
    let started = Instant::now();
    let first = decide_all(3).await;
    println!(
        "gcra: 10,000 decisions on 10,000 keys in {:?}",
        started.elapsed()
    );
    assert!(first.iter().all(|d| d.is_admitted() && d.remaining() == 7));
    let mut conn = server.conn().await;
    let keys: u64 = redis::cmd("DBSIZE").query_async(&mut conn).await.unwrap();
    assert_eq!(keys, 10_000);
    let bytes: i64 = redis::cmd("MEMORY")
        .arg("USAGE")
        .arg("latchkey_gcra:5:users:user:42")
        .query_async(&mut conn)
        .await
        .unwrap();
    println!("gcra: one entity's key takes {bytes} bytes (MEMORY USAGE)");
    let rest = decide_all(7).await;
    assert!(rest.iter().all(|d| d.is_admitted() && d.remaining() == 0));
    let over = decide_all(1).await;
    assert!(over
        .iter()
        .all(|d| !d.is_admitted() && d.retry_after().unwrap() > Duration::from_secs(60)));

    // Four keys hammered by four tasks each for 2 s, at 50 a second with bursts of 10.
    let limiter = client.gcra_limiter("hammered", Quota::per_second(50).with_burst(10));
    let end = Instant::now() + Duration::from_secs(2);
    let admitted: Vec<Arc<AtomicU64>> = (0..4).map(|_| Arc::new(AtomicU64::new(0))).collect();
    let mut tasks = Vec::new();
    for (k, count) in admitted.iter().enumerate() {
        for _ in 0..4 {
            let limiter = limiter.clone();
            let count = count.clone();
            tasks.push(tokio::spawn(async move {
                loop {
                    let now = Instant::now();
                    if now >= end {
                        break;
                    }
                    let decision = limiter
                        .until_ready_within(&format!("key:{k}"), 1, end - now)
                        .await
                        .unwrap();
                    if !decision.is_admitted() {
                        break;
                    }
                    count.fetch_add(1, Ordering::Relaxed);
                }
            }));
        }
    }
    for task in tasks {
        task.await.unwrap();
    }
    for (k, count) in admitted.iter().enumerate() {
        let n = count.load(Ordering::Relaxed);
        println!("gcra: key:{k} admitted {n} in 2 s (50/s, burst 10)");
        // The burst, then 50 a second: 110 at most (one more for the boundary).
        assert!(n <= 10 + 100 + 1, "key:{k}: {n}");
        assert!(n >= 10 + 90, "key:{k}: {n}");
    }
}

#[tokio::test]
async fn gcra_keys_expire_when_their_bucket_is_empty() {
    let server = RedisServer::spawn();
    let client = client(&server).await;
    let limiter = client.gcra_limiter("brief", Quota::new(1, Duration::from_millis(300)));
    assert!(limiter.check("k", 1).await.unwrap().is_admitted());
    let mut conn = server.conn().await;
    let key = "latchkey_gcra:5:brief:k";
    let ttl: i64 = conn.pttl(key).await.unwrap();
    assert!(ttl > 0 && ttl <= 300, "{ttl}");
    let gone = eventually(PATIENCE, || async {
        !server.conn().await.exists::<_, bool>(key).await.unwrap()
    })
    .await;
    assert!(gone);
    assert!(limiter.check("k", 1).await.unwrap().is_admitted());
    assert!(limiter.reset("k").await.unwrap());
    assert!(!limiter.reset("k").await.unwrap());
}

#[tokio::test]
async fn gcra_key_names_keep_limiters_and_namespaces_apart() {
    let server = RedisServer::spawn();
    let client = client(&server).await;
    let billing = builder(&server)
        .namespace("billing")
        .connect()
        .await
        .unwrap();
    let quota = Quota::per_hour(1);
    assert!(client
        .gcra_limiter("a", quota)
        .check("b:c", 1)
        .await
        .unwrap()
        .is_admitted());
    assert!(client
        .gcra_limiter("a:b", quota)
        .check("c", 1)
        .await
        .unwrap()
        .is_admitted());
    assert!(billing
        .gcra_limiter("a", quota)
        .check("b:c", 1)
        .await
        .unwrap()
        .is_admitted());
    let mut conn = server.conn().await;
    let mut keys = crate::helpers::data_keys(&mut conn).await;
    keys.sort();
    assert_eq!(
        keys,
        [
            "latchkey_gcra:1:a:b:c",
            "latchkey_gcra:3:a:b:c",
            "latchkey_gcra:9:billing:a:b:c"
        ]
    );
}

#[tokio::test]
async fn gcra_bad_input_is_a_typed_error_and_changes_nothing() {
    let server = RedisServer::spawn();
    let client = client(&server).await;
    let mut conn = server.conn().await;
    let invalid = Error::is_invalid_argument;
    let limiter = client.gcra_limiter("api", Quota::per_second(10).with_burst(4));
    assert!(limiter.check("seen", 1).await.unwrap().is_admitted());

    refused(&mut conn, limiter.check("k", 0), invalid).await;
    let err = refused(&mut conn, limiter.check("k", 5), invalid).await;
    assert!(err.to_string().contains("could never"), "{err}");
    refused(&mut conn, limiter.until_ready("k", 5), invalid).await;
    refused(&mut conn, limiter.check(&"k".repeat(2000), 1), invalid).await;
    refused(
        &mut conn,
        limiter.until_ready_within("k", 1, Duration::MAX),
        invalid,
    )
    .await;
    for quota in [
        Quota::per_second(0),
        Quota::per_second(10).with_burst(0),
        Quota::per_second(2_000_000),
        Quota::new(10, Duration::ZERO),
        Quota::new(1, Duration::from_secs(400 * 24 * 3600)),
    ] {
        refused(
            &mut conn,
            client.gcra_limiter("api", quota).check("seen", 1),
            invalid,
        )
        .await;
    }
    refused(
        &mut conn,
        client
            .gcra_limiter("latchkey_x", Quota::per_second(1))
            .check("k", 1),
        invalid,
    )
    .await;

    let _: () = conn
        .hset("latchkey_gcra:3:api:hash", "f", "v")
        .await
        .unwrap();
    refused(&mut conn, limiter.check("hash", 1), Error::is_wrong_type).await;
    refused(
        &mut conn,
        limiter.until_ready("hash", 1),
        Error::is_wrong_type,
    )
    .await;
    let _: () = conn.set("latchkey_gcra:3:api:text", "soon").await.unwrap();
    let err = refused(&mut conn, limiter.check("text", 1), Error::is_wrong_type).await;
    assert!(err.to_string().contains("not a time"), "{err}");
}

/// A decision dropped at every point leaves nothing taken: an admission its caller never
/// learnt of is given back.
#[tokio::test]
async fn gcra_a_dropped_decision_takes_nothing() {
    let server = RedisServer::spawn();
    let client = client(&server).await;
    let limiter = client.gcra_limiter("dropped", Quota::per_hour(1));
    let key = "latchkey_gcra:7:dropped:k";
    // Dropped after 0, 1, 2, … polls (more sparsely further on), until three in a row finished:
    // a busy machine takes more polls for a round trip.
    let (mut polls, mut in_a_row) = (0, 0);
    while in_a_row < 3 {
        assert!(polls < 1_000_000, "a decision never finished");
        if let Some(decision) = poll_then_drop(limiter.check("k", 1), polls).await {
            assert!(decision.unwrap().is_admitted());
            in_a_row += 1;
            limiter.reset("k").await.unwrap();
        } else {
            in_a_row = 0;
        }
        let clear = eventually(PATIENCE, || async {
            !server.conn().await.exists::<_, bool>(key).await.unwrap()
        })
        .await;
        assert!(
            clear,
            "after a drop at poll {polls}, the permit stayed taken"
        );
        polls += 1 + polls / 16;
    }
    assert!(limiter.check("k", 1).await.unwrap().is_admitted());

    // A waiter dropped while it sleeps takes nothing either.
    let mut conn = server.conn().await;
    let before: String = conn.get(key).await.unwrap();
    let waiting = tokio::spawn({
        let limiter = limiter.clone();
        async move { limiter.until_ready("k", 1).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    waiting.abort();
    assert!(waiting.await.unwrap_err().is_cancelled());
    let after: String = conn.get(key).await.unwrap();
    assert_eq!(before, after);
}
