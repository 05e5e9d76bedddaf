//! The helpers every module of the suite shares: clients made the same way, waiting for
//! something in the background, retrying through a failover, and reading a server directly.

use std::future::Future;
use std::task::Poll;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use latchkey_redis::{Client, ClientBuilder};
use latchkey_test_support::RedisServer;
use redis::aio::MultiplexedConnection;

pub use latchkey_test_support::eventually;

/// Something a client can be pointed at: a server or a URL.
pub trait Endpoint {
    /// The URL a client connects to.
    fn url(&self) -> String;
}

impl Endpoint for RedisServer {
    fn url(&self) -> String {
        RedisServer::url(self)
    }
}

impl Endpoint for str {
    fn url(&self) -> String {
        self.to_owned()
    }
}

impl Endpoint for String {
    fn url(&self) -> String {
        self.clone()
    }
}

/// The `redis+cluster://` URL seeded with `nodes`.
pub fn cluster_url(nodes: &[&RedisServer]) -> String {
    let hosts: Vec<String> = nodes.iter().map(|node| node.addr()).collect();
    format!("redis+cluster://{}", hosts.join(","))
}

/// The settings every test client starts from: a pub/sub channel nobody waits on is dropped
/// after 50 ms (not the default's seconds), so tests that check for subscriptions left
/// behind see them go quickly.
pub fn builder(at: &(impl Endpoint + ?Sized)) -> ClientBuilder {
    Client::builder(at.url()).subscription_linger(Duration::from_millis(50))
}

/// The client of the lock tests: [`builder`] with a 1 s watchdog timeout, so that renewals
/// (every third of it) and the expiry of a vanished holder happen within a test's patience.
pub async fn client(at: &(impl Endpoint + ?Sized)) -> Client {
    builder(at)
        .watchdog_timeout(Duration::from_secs(1))
        .connect()
        .await
        .expect("connect")
}

/// A client with a 30 s watchdog timeout: its holds outlive a test's checks (a hold that a
/// cancelled operation stranded stays, so only a real release clears it), and its waiters take
/// locks granted on release (which needs a watchdog timeout of at least 7 s).
pub async fn long_lease_client(at: &(impl Endpoint + ?Sized)) -> Client {
    builder(at)
        .watchdog_timeout(Duration::from_secs(30))
        .connect()
        .await
        .expect("connect")
}

/// Polls `operation` `polls` times, yielding to the runtime between polls (so that its I/O
/// moves on), then drops it unless it finished: its output if it did. `polls == 0` drops it
/// before it is ever polled. Cancellation tests sweep `polls` to drop an operation before its
/// script is sent, while it is in flight and after it answered, without relying on timers.
pub async fn poll_then_drop<F: Future>(operation: F, polls: usize) -> Option<F::Output> {
    let mut operation = std::pin::pin!(operation);
    for _ in 0..polls {
        let polled = std::future::poll_fn(|cx| Poll::Ready(operation.as_mut().poll(cx))).await;
        if let Poll::Ready(output) = polled {
            return Some(output);
        }
        tokio::task::yield_now().await;
    }
    None
}

/// The client of the queue tests: [`builder`] with the default watchdog timeout (a queue
/// holds no lock; its agents run on the default settings, as a user's would).
pub async fn queue_client(at: &(impl Endpoint + ?Sized)) -> Client {
    builder(at).connect().await.expect("connect")
}

/// Whether `check` keeps returning `true` for the whole of `within` (checked every 20 ms, and
/// once more at the end): `false` as soon as it returns `false`. The opposite of
/// [`eventually`], which waits for a check to *become* true: this one asserts that something
/// *stays* so, e.g. that a change is not undone in the background.
pub async fn holds_for<F, Fut>(within: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    loop {
        if !check().await {
            return false;
        }
        if Instant::now() > deadline {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Runs `op` until it succeeds, for up to 60 s, while it fails with a connection error (a
/// primary being replaced); panics on any other error, or when the time is up.
pub async fn retry<T, F, Fut>(op: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = latchkey_redis::Result<T>>,
{
    retry_while(latchkey_redis::Error::is_connection, op).await
}

/// [`retry`] through a cluster's failover, where Redis also answers with errors of its own
/// (`CLUSTERDOWN`, `TRYAGAIN`, `MOVED` to a node not yet known) until the shard has a primary
/// again.
pub async fn retry_on_cluster<T, F, Fut>(op: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = latchkey_redis::Result<T>>,
{
    retry_while(|e| e.is_connection() || e.is_redis(), op).await
}

/// [`retry`] while `transient` says the error is one to wait out.
pub async fn retry_while<T, F, Fut>(
    transient: impl Fn(&latchkey_redis::Error) -> bool,
    mut op: F,
) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = latchkey_redis::Result<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match op().await {
            Ok(v) => return v,
            Err(e) if transient(&e) && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("{e}"),
        }
    }
}

/// Reads `args` on `server` (a primary or a replica) as a `T`; panics with the reply if it is
/// not one.
pub fn read<T: redis::FromRedisValue>(server: &RedisServer, args: &[&str]) -> T {
    let reply = server.cmd_sync(args);
    redis::from_redis_value_ref(&reply)
        .unwrap_or_else(|e| panic!("{args:?} on {}: {e} ({reply:?})", server.addr()))
}

/// How many clients are subscribed to `channel` (`PUBSUB NUMSUB`).
pub async fn numsub(conn: &mut MultiplexedConnection, channel: &str) -> i64 {
    let v: (String, i64) = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(channel)
        .query_async(conn)
        .await
        .unwrap();
    v.1
}

/// How many scripts the server has run so far (`EVALSHA` and `EVAL` calls, from `INFO
/// commandstats`).
pub async fn evalsha_calls(conn: &mut MultiplexedConnection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .unwrap();
    info.lines()
        .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
        .filter_map(|l| l.split("calls=").nth(1))
        .filter_map(|s| s.split(',').next())
        .map(|s| s.parse::<u64>().unwrap())
        .sum()
}

/// This host's clock in ms since the Unix epoch.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// The keys of `conn`'s database but the clients' registrations (`latchkey_client:{<id>}`,
/// which a client keeps while it holds anything and which expire by themselves).
pub async fn data_keys(conn: &mut redis::aio::MultiplexedConnection) -> Vec<String> {
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query_async(conn).await.unwrap();
    keys.into_iter()
        .filter(|key| !key.starts_with("latchkey_client:"))
        .collect()
}

/// Every data key with its type and `DUMP`: a snapshot to compare before and after a call.
pub type Keyspace = std::collections::BTreeMap<String, (String, Option<Vec<u8>>)>;

/// The keyspace of `conn`'s server (client registrations aside), see [`Keyspace`].
pub async fn keyspace(conn: &mut MultiplexedConnection) -> Keyspace {
    let mut out = Keyspace::new();
    for key in data_keys(conn).await {
        let kind: String = redis::cmd("TYPE")
            .arg(&key)
            .query_async(conn)
            .await
            .unwrap();
        let dump: Option<Vec<u8>> = redis::cmd("DUMP")
            .arg(&key)
            .query_async(conn)
            .await
            .unwrap();
        out.insert(key, (kind, dump));
    }
    out
}

/// Runs `op`, which must fail with an error `expected` accepts, and checks that the keyspace
/// is the same afterwards.
pub async fn refused<T: std::fmt::Debug>(
    conn: &mut MultiplexedConnection,
    op: impl Future<Output = latchkey_redis::Result<T>>,
    expected: impl Fn(&latchkey_redis::Error) -> bool,
) -> latchkey_redis::Error {
    let before = keyspace(conn).await;
    let err = op.await.expect_err("the call must fail");
    assert!(expected(&err), "unexpected error: {err:?} ({err})");
    assert_eq!(keyspace(conn).await, before, "nothing may change ({err})");
    err
}
