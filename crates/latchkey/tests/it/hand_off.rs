//! Grants on release: the release script gives a free lock straight to the earliest live
//! latchkey waiter that takes grants, and announces it on the unlock channel; the waiter holds
//! the lock without another round trip. What must hold: the grantee holds it with a fresh
//! fencing token and a short lease that its watchdog confirms if it keeps the lock; a grant
//! nobody takes is given back at once (or lapses with its short lease when its client died);
//! Redisson listeners see only Java longs, and a streak of grants ends (after 1 s) with a
//! short pause in which they get their turn.

use std::time::Duration;

use latchkey::Client;
use latchkey_test_support::{FaultProxy, RedisCluster, RedisServer};
use redis::aio::MultiplexedConnection;
use redis::AsyncCommands;

use crate::helpers::{builder, cluster_url, eventually, Endpoint};

/// A client that takes grants on release: grants need a watchdog timeout at least as long
/// as a grant's lease (7 s), so the suite's 1 s clients never take them.
async fn granting_client(at: &(impl Endpoint + ?Sized)) -> Client {
    builder(at)
        .watchdog_timeout(Duration::from_secs(30))
        .connect()
        .await
        .expect("connect")
}

/// Loads the lock's scripts on the server (a first EVALSHA of a script the server lacks is
/// refused and sent again), so that script calls can be counted exactly afterwards.
async fn load_scripts(client: &Client) {
    let guard = client.lock("load-scripts").lock().await.unwrap();
    guard.unlock().await.unwrap();
}

/// Waits until the lock `name`'s waiter registrations name `owner` (a registration that
/// takes grants carries its owner field).
async fn registered_for_grants(conn: &MultiplexedConnection, name: &str, owner: &str) {
    let key = format!("latchkey_lock_alive:{{{name}}}");
    let owner = owner.to_owned();
    assert!(
        eventually(Duration::from_secs(10), || {
            let mut conn = conn.clone();
            let (key, owner) = (key.clone(), owner.clone());
            async move {
                let values: Vec<String> = conn.hvals(&key).await.unwrap();
                values.iter().any(|v| v.ends_with(&format!(":{owner}")))
            }
        })
        .await,
        "{owner} registered to take grants on {name}"
    );
}

/// Makes the lock's hand-off key say that grants have passed the lock on since a second ago
/// (server time), as a streak that is due to end; returns its start (server ms).
async fn streak_since_a_second_ago(conn: &mut MultiplexedConnection, hand_off_key: &str) -> u64 {
    let (seconds, micros): (u64, u64) = redis::cmd("TIME").query_async(conn).await.unwrap();
    let streak_start = seconds * 1000 + micros / 1000 - 1000;
    let _: () = conn
        .set_ex(hand_off_key, format!("g{streak_start}"), 30)
        .await
        .unwrap();
    streak_start
}

/// A waiter of `client` for the lock `name`, spawned, once it is registered to take grants:
/// its owner id and its task.
async fn registered_waiter(
    client: &Client,
    conn: &MultiplexedConnection,
    name: &str,
) -> (
    String,
    tokio::task::JoinHandle<latchkey::Result<latchkey::LockGuard>>,
) {
    let waiting = client.lock(name);
    let owner = waiting.owner_id().to_owned();
    let waiter = tokio::spawn(async move { waiting.lock().await });
    registered_for_grants(conn, name, &owner).await;
    (owner, waiter)
}

#[tokio::test]
async fn a_release_grants_the_lock_to_the_waiter_without_another_acquire() {
    let server = RedisServer::spawn();
    let mut conn = server.conn().await;
    let (a, b) = (
        granting_client(&server).await,
        granting_client(&server).await,
    );
    load_scripts(&a).await;
    let held = a.lock("handed").lock().await.unwrap();
    let (owner, waiter) = registered_waiter(&b, &conn, "handed").await;

    let calls_before = server.command_calls("evalsha");
    let token = held.fencing_token();
    held.unlock().await.unwrap();
    let granted = waiter.await.unwrap().unwrap();
    assert_eq!(
        server.command_calls("evalsha") - calls_before,
        1,
        "only the release ran a script: the waiter took the grant without an acquire"
    );
    assert_eq!(
        granted.fencing_token(),
        token + 1,
        "a grant is a new holder"
    );
    let holds: Option<u32> = conn.hget("handed", &owner).await.unwrap();
    assert_eq!(holds, Some(1), "the waiter's owner field holds it once");
    let pttl: i64 = conn.pttl("handed").await.unwrap();
    assert!(
        (1..=7_000).contains(&pttl),
        "a grant has a short lease (its registration's life and 3 s), not the watchdog's: {pttl}"
    );

    // Kept past the grant's lease, the hold is confirmed by the grantee's watchdog.
    tokio::time::sleep(Duration::from_millis(7_500)).await;
    assert!(!granted.is_lost(), "the grant was confirmed, not lost");
    let pttl: i64 = conn.pttl("handed").await.unwrap();
    assert!(pttl > 10_000, "confirmed to the watchdog timeout: {pttl}");
    granted.unlock().await.unwrap();
    let exists: bool = conn.exists("handed").await.unwrap();
    assert!(!exists);
}

#[tokio::test]
async fn a_grant_to_a_waiter_that_gave_up_is_given_back_at_once() {
    let server = RedisServer::spawn();
    let conn = server.conn().await;
    let (a, b) = (
        granting_client(&server).await,
        granting_client(&server).await,
    );
    let held = a.lock("given-back").lock().await.unwrap();
    // Two waiters of one client: the client stays in the queue when the first gives up, and
    // its registration is the last one made, the quitter's.
    let (stayer_owner, stays) = registered_waiter(&b, &conn, "given-back").await;
    let (quitter_owner, quits) = registered_waiter(&b, &conn, "given-back").await;
    quits.abort();
    assert!(quits.await.unwrap_err().is_cancelled());

    let token = held.fencing_token();
    held.unlock().await.unwrap();
    // The grant went to the quitter's registration; its client gave it back, and the stayer
    // (which registers again) gets the lock long before the grant's lease (7 s) would end.
    let got = tokio::time::timeout(Duration::from_secs(5), stays)
        .await
        .expect("the lock is not stranded with the quitter")
        .unwrap()
        .unwrap();
    assert_eq!(got.lock().owner_id(), stayer_owner);
    assert!(
        got.fencing_token() > token,
        "tokens only grow: {} after {token}",
        got.fencing_token()
    );
    let mut conn = conn.clone();
    let quitter_holds: Option<u32> = conn.hget("given-back", &quitter_owner).await.unwrap();
    assert_eq!(
        quitter_holds, None,
        "nothing is left held by the waiter that gave up"
    );
    got.unlock().await.unwrap();
    assert!(
        eventually(Duration::from_secs(5), || async {
            b.subscription_count() == 0 && b.tracked_lock_count() == 0
        })
        .await,
        "no subscription or renewal left behind"
    );
}

#[tokio::test]
async fn a_grant_to_a_client_that_died_lapses_with_its_short_lease() {
    let server = RedisServer::spawn();
    let conn = server.conn().await;
    let a = granting_client(&server).await;
    let held = a.lock("dead-grantee").lock().await.unwrap();
    // The doomed client reaches Redis through a proxy: cutting it is a process that died
    // while waiting, without leaving the queue.
    let proxy = FaultProxy::start(&server.addr());
    let doomed = granting_client(&proxy.url()).await;
    let (owner, _waiter) = registered_waiter(&doomed, &conn, "dead-grantee").await;
    proxy.refuse(true);
    proxy.drop_connections();

    let token = held.fencing_token();
    held.unlock().await.unwrap();
    let mut conn = conn.clone();
    let granted_to: Option<u32> = conn.hget("dead-grantee", &owner).await.unwrap();
    assert_eq!(
        granted_to,
        Some(1),
        "granted to the registration, still live"
    );
    let pttl: i64 = conn.pttl("dead-grantee").await.unwrap();
    assert!(
        (1..=7_000).contains(&pttl),
        "a grant to a dead client lapses with its short lease: {pttl}"
    );
    // Another client gets the lock once the grant lapsed: within its 7 s, not the watchdog's
    // 30 s, with the token after the lapsed grant's.
    let c = granting_client(&server).await;
    let got = c
        .lock("dead-grantee")
        .try_lock(Duration::from_secs(15))
        .await
        .unwrap()
        .expect("the lock lapsed from the dead grantee");
    assert_eq!(got.fencing_token(), token + 2);
    got.unlock().await.unwrap();
    drop(doomed);
}

/// A grant to a latchkey client is announced on that client's grant channel, one message
/// (`<token>:<seq>`) that only it reads: a listener on the lock's channel, as Redisson's, hears
/// nothing of it, and the lock's unlock message comes when the grantee releases.
#[tokio::test]
async fn a_grant_is_announced_on_the_grantees_own_channel_and_redisson_hears_nothing() {
    let server = RedisServer::spawn();
    let conn = server.conn().await;
    let (a, b) = (
        granting_client(&server).await,
        granting_client(&server).await,
    );
    let held = a.lock("longs").lock().await.unwrap();
    let (_, waiter) = registered_waiter(&b, &conn, "longs").await;

    let client = redis::Client::open(server.url()).unwrap();
    let mut pubsub = client.get_async_pubsub().await.unwrap();
    pubsub
        .psubscribe("redisson_lock__channel:{longs}*")
        .await
        .unwrap();
    let token = held.fencing_token();
    held.unlock().await.unwrap();
    let granted = waiter.await.unwrap().unwrap();
    assert_eq!(granted.fencing_token(), token + 1);
    let mut stream = pubsub.on_message();
    use futures_util::StreamExt;
    let message = tokio::time::timeout(Duration::from_secs(5), stream.next())
        .await
        .expect("the grant's announcement")
        .unwrap();
    let channel = message.get_channel_name().to_owned();
    assert!(
        channel.starts_with("redisson_lock__channel:{longs}:latchkey:"),
        "on the grantee's channel: {channel}"
    );
    let payload: String = message.get_payload().unwrap();
    assert!(
        payload.starts_with(&format!("{}:", token + 1)),
        "token and registration: {payload}"
    );
    // The lock stays held: nothing else is published until it is released.
    assert!(
        tokio::time::timeout(Duration::from_millis(200), stream.next())
            .await
            .is_err(),
        "nothing follows a grant"
    );
    granted.unlock().await.unwrap();
    let unlock = tokio::time::timeout(Duration::from_secs(5), stream.next())
        .await
        .expect("the release's unlock message")
        .unwrap();
    assert_eq!(unlock.get_channel_name(), "redisson_lock__channel:{longs}");
    assert_eq!(unlock.get_payload::<String>().unwrap(), "0");
}

#[tokio::test]
async fn a_streak_of_grants_ends_with_a_release_that_frees_the_lock() {
    let server = RedisServer::spawn();
    let mut conn = server.conn().await;
    let (a, b) = (
        granting_client(&server).await,
        granting_client(&server).await,
    );
    load_scripts(&a).await;
    let held = a.lock("streak").lock().await.unwrap();
    let (_, waiter) = registered_waiter(&b, &conn, "streak").await;
    // A listener that is no latchkey waiter (as a Redisson client's) may want the lock.
    let outsider = redis::Client::open(server.url()).unwrap();
    let mut outsider = outsider.get_async_pubsub().await.unwrap();
    outsider
        .subscribe("redisson_lock__channel:{streak}")
        .await
        .unwrap();
    // The lock has passed by grants for a second (since server time 1 s ago): the next
    // release frees it instead.
    streak_since_a_second_ago(&mut conn, "latchkey_lock_handoff:{streak}").await;
    let calls_before = server.command_calls("evalsha");
    let token = held.fencing_token();
    held.unlock().await.unwrap();
    let got = waiter.await.unwrap().unwrap();
    assert!(
        server.command_calls("evalsha") - calls_before >= 2,
        "the release freed the lock and the waiter acquired it itself, after the pause"
    );
    assert_eq!(got.fencing_token(), token + 1);
    let after: Option<String> = conn.get("latchkey_lock_handoff:{streak}").await.unwrap();
    assert!(
        after.as_deref().is_none_or(|r| !r.starts_with('g')),
        "the streak ended: {after:?}"
    );
    got.unlock().await.unwrap();
    drop(outsider);
}

/// When every listener on the unlock channel is a latchkey client (registered, or the
/// releaser's), nobody else can be waiting: a streak of grants goes on past its second.
#[tokio::test]
async fn a_streak_of_grants_goes_on_when_only_latchkey_clients_listen() {
    let server = RedisServer::spawn();
    let mut conn = server.conn().await;
    let (a, b) = (
        granting_client(&server).await,
        granting_client(&server).await,
    );
    load_scripts(&a).await;
    // The releaser's client listens too (a waiter of its own subscribed, and left).
    let first = a.lock("long-streak").lock().await.unwrap();
    let (_, early) = registered_waiter(&a, &conn, "long-streak").await;
    first.unlock().await.unwrap();
    let held = early.await.unwrap().unwrap();
    let (_, waiter) = registered_waiter(&b, &conn, "long-streak").await;
    let streak_start =
        streak_since_a_second_ago(&mut conn, "latchkey_lock_handoff:{long-streak}").await;
    let calls_before = server.command_calls("evalsha");
    let token = held.fencing_token();
    held.unlock().await.unwrap();
    let got = waiter.await.unwrap().unwrap();
    assert_eq!(
        server.command_calls("evalsha") - calls_before,
        1,
        "granted on release: no acquire of the waiter's own"
    );
    assert_eq!(got.fencing_token(), token + 1);
    let after: Option<String> = conn
        .get("latchkey_lock_handoff:{long-streak}")
        .await
        .unwrap();
    let restarted: u64 = after
        .as_deref()
        .and_then(|r| r.strip_prefix('g'))
        .and_then(|ms| ms.parse().ok())
        .unwrap_or_else(|| panic!("the streak goes on: {after:?}"));
    assert!(restarted > streak_start, "counted from this grant");
    got.unlock().await.unwrap();
}

#[tokio::test]
async fn grants_on_release_work_on_a_cluster() {
    let cluster = RedisCluster::spawn(3, 0);
    let url = cluster_url(&cluster.primaries());
    let (a, b) = (granting_client(&url).await, granting_client(&url).await);
    let held = a.lock("cluster-handed").lock().await.unwrap();
    let waiting = b.lock("cluster-handed");
    let waiter = tokio::spawn(async move { waiting.lock().await });
    // Registered (to take grants) once it subscribed and retried: wait for its registration.
    let node = cluster.node_for_key("cluster-handed").conn().await;
    assert!(
        eventually(Duration::from_secs(10), || {
            let mut node = node.clone();
            async move {
                let values: Vec<String> = node
                    .hvals("latchkey_lock_alive:{cluster-handed}")
                    .await
                    .unwrap();
                values.iter().any(|v| v.matches(':').count() >= 3)
            }
        })
        .await
    );
    let token = held.fencing_token();
    held.unlock().await.unwrap();
    let granted = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("granted")
        .unwrap()
        .unwrap();
    assert_eq!(granted.fencing_token(), token + 1);
    let pttl: i64 = node.clone().pttl("cluster-handed").await.unwrap();
    assert!((1..=7_000).contains(&pttl), "granted on release: {pttl}");
    granted.unlock().await.unwrap();
}

/// Latchkey clients pass the lock on by grants for as long as they keep queueing; a Redisson
/// client, which is not in latchkey's queue, still gets it: after 1 s of grants a release
/// frees the lock and latchkey waiters hold back for 10 ms, in which the Redisson client's
/// retry on the unlock message wins it.
#[tokio::test]
async fn a_redisson_waiter_gets_the_lock_while_latchkey_clients_pass_it_by_grants() {
    use crate::lock::{REDISSON_ACQUIRE, REDISSON_RELEASE};
    use futures_util::StreamExt;

    let server = RedisServer::spawn();
    let mut conn = server.conn().await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut workers = Vec::new();
    for _ in 0..3 {
        let client = granting_client(&server).await;
        let stop = stop.clone();
        workers.push(tokio::spawn(async move {
            let lock = client.lock("mixed");
            let mut sections = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let guard = lock.lock().await.unwrap();
                tokio::time::sleep(Duration::from_millis(3)).await;
                guard.unlock().await.unwrap();
                sections += 1;
            }
            sections
        }));
    }
    // Wait until the latchkey clients pass the lock on by grants.
    assert!(
        eventually(Duration::from_secs(10), || {
            let mut conn = conn.clone();
            async move {
                let streak: Option<String> =
                    conn.get("latchkey_lock_handoff:{mixed}").await.unwrap();
                streak.is_some_and(|s| s.starts_with('g'))
            }
        })
        .await,
        "grants on release pass the lock among the latchkey clients"
    );
    // The Redisson waiter: try; on a TTL, wait for an unlock message (or the TTL) and retry.
    let java_owner = "6f1c0c3e-0000-4000-8000-000000000002:1";
    let pubsub_client = redis::Client::open(server.url()).unwrap();
    let mut pubsub = pubsub_client.get_async_pubsub().await.unwrap();
    pubsub
        .subscribe("redisson_lock__channel:{mixed}")
        .await
        .unwrap();
    let mut messages = pubsub.on_message();
    let started = tokio::time::Instant::now();
    let acquired = loop {
        let ttl: Option<i64> = redis::cmd("EVAL")
            .arg(REDISSON_ACQUIRE)
            .arg(1)
            .arg("mixed")
            .arg(30_000)
            .arg(java_owner)
            .query_async(&mut conn)
            .await
            .unwrap();
        let Some(ttl) = ttl else {
            break true;
        };
        if started.elapsed() > Duration::from_secs(20) {
            break false;
        }
        let park = Duration::from_millis(ttl.clamp(1, 1_000) as u64);
        loop {
            match tokio::time::timeout(park, messages.next()).await {
                Ok(Some(message)) if message.get_payload::<i64>() == Ok(0) => break,
                Ok(Some(_)) => continue,
                _ => break,
            }
        }
    };
    assert!(
        acquired,
        "the Redisson waiter got the lock among latchkey waiters"
    );
    let released: Option<i64> = redis::cmd("EVAL")
        .arg(REDISSON_RELEASE)
        .arg(2)
        .arg("mixed")
        .arg("redisson_lock__channel:{mixed}")
        .arg(0)
        .arg(30_000)
        .arg(java_owner)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(released, Some(1));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for worker in workers {
        let sections = tokio::time::timeout(Duration::from_secs(10), worker)
            .await
            .expect("the latchkey clients carry on after the Redisson holder")
            .unwrap();
        assert!(sections > 0);
    }
}

/// The lock scripts as latchkey sends them (the prelude, the lock's helpers, the script), run
/// here with EVAL on hand-made states that the races below leave behind.
const RELEASE: &str = concat!(
    include_str!("../../scripts/lock_release.fast.lua"),
    include_str!("../../scripts/prelude.lua"),
    include_str!("../../scripts/lock_prelude.lua"),
    include_str!("../../scripts/lock_release.lua"),
);
const ACQUIRE: &str = concat!(
    include_str!("../../scripts/lock_acquire.fast.lua"),
    include_str!("../../scripts/prelude.lua"),
    include_str!("../../scripts/lock_prelude.lua"),
    include_str!("../../scripts/lock_acquire.lua"),
);
const KEYS: [&str; 7] = [
    "raced",
    "redisson_lock__channel:{raced}",
    "latchkey_lock_queue:{raced}",
    "latchkey_lock_alive:{raced}",
    "latchkey_lock_handoff:{raced}",
    "redisson_lock_token:{raced}",
    "redisson_lock__channel:{raced}:latchkey:",
];
const OWNER: &str = "6f1c0c3e-0000-4000-8000-00000000000a:1";
const WAKE_ID: &str = "123456789";

async fn release(conn: &mut MultiplexedConnection, give_back: Option<u64>) -> i64 {
    redis::cmd("EVAL")
        .arg(RELEASE)
        .arg(7)
        .arg(&KEYS)
        .arg("0")
        .arg(1)
        .arg(OWNER)
        .arg(200)
        .arg("publish")
        .arg(give_back.map(|t| t.to_string()).unwrap_or_default())
        .arg(1000)
        .arg(10)
        .arg("")
        .query_async(conn)
        .await
        .unwrap()
}

/// A grant nobody took, re-entered by its owner before it is given back (the owner's next
/// acquire landed first): the give-back takes one hold off and leaves the re-entry's lease —
/// it used to set the 1 ms lease of a grant being dropped, freeing a lock a guard still held.
/// A grant taken over since (the counter moved on) is not touched at all.
#[tokio::test]
async fn a_grant_given_back_after_a_reentry_keeps_the_reentrys_lease() {
    let server = RedisServer::spawn();
    let mut conn = server.conn().await;
    let _: () = conn.hset("raced", OWNER, 2).await.unwrap();
    let _: () = conn.pexpire("raced", 30_000).await.unwrap();
    let _: () = conn.set(KEYS[5], 5).await.unwrap();
    assert_eq!(
        release(&mut conn, Some(4)).await,
        -1,
        "a later grant: not ours"
    );
    let holds: u32 = conn.hget("raced", OWNER).await.unwrap();
    assert_eq!(holds, 2);
    assert_eq!(release(&mut conn, Some(5)).await, 1);
    let holds: u32 = conn.hget("raced", OWNER).await.unwrap();
    assert_eq!(holds, 1, "the re-entry's hold stays");
    let pttl: i64 = conn.pttl("raced").await.unwrap();
    assert!(pttl > 20_000, "the re-entry's lease stays: {pttl}");
}

/// A registration of the releasing owner itself (left over from an acquire by another path
/// while a sibling waiter of its client waits) takes no grant: the release reserves the lock
/// for the client and wakes it, instead of granting it to a waiter that is no more.
#[tokio::test]
async fn a_release_grants_nothing_to_the_releasers_own_registration() {
    let server = RedisServer::spawn();
    let mut conn = server.conn().await;
    let (seconds, _): (u64, u64) = redis::cmd("TIME").query_async(&mut conn).await.unwrap();
    let live = seconds * 1000 + 10_000;
    let _: () = conn.hset("raced", OWNER, 1).await.unwrap();
    let _: () = conn.zadd(KEYS[2], WAKE_ID, 1).await.unwrap();
    let _: () = conn
        .hset(KEYS[3], WAKE_ID, format!("{live}:7:5000:{OWNER}"))
        .await
        .unwrap();
    assert_eq!(release(&mut conn, None).await, 0);
    let exists: bool = conn.exists("raced").await.unwrap();
    assert!(!exists, "freed, not granted to the releaser");
    let reserved: Option<String> = conn.get(KEYS[4]).await.unwrap();
    assert_eq!(
        reserved.as_deref(),
        Some(WAKE_ID),
        "reserved for the client"
    );
}

/// An acquire that succeeds while other waiters of its client still wait (the client stays in
/// the queue) makes its own registration that takes grants a plain one.
#[tokio::test]
async fn an_acquire_that_stays_registered_drops_its_grant_terms() {
    let server = RedisServer::spawn();
    let mut conn = server.conn().await;
    let (seconds, _): (u64, u64) = redis::cmd("TIME").query_async(&mut conn).await.unwrap();
    let live = seconds * 1000 + 10_000;
    let _: () = conn.zadd(KEYS[2], WAKE_ID, 1).await.unwrap();
    let _: () = conn
        .hset(KEYS[3], WAKE_ID, format!("{live}:7:5000:{OWNER}"))
        .await
        .unwrap();
    let reply: Vec<i64> = redis::cmd("EVAL")
        .arg(ACQUIRE)
        .arg(5)
        .arg(&[KEYS[0], KEYS[5], KEYS[2], KEYS[3], KEYS[4]])
        .arg(30_000)
        .arg(OWNER)
        .arg(WAKE_ID)
        .arg(0)
        .arg("1")
        .arg("")
        .arg("1")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(reply[0], 1, "acquired: {reply:?}");
    let registration: String = conn.hget(KEYS[3], WAKE_ID).await.unwrap();
    assert_eq!(
        registration,
        live.to_string(),
        "still registered, without grant terms"
    );
}

/// A registration that does not ask for its client's grant channel (a client of an earlier
/// version during a rolling upgrade) is granted as before: announced on the lock's channel as
/// three negative Java longs (wake id, token, registration), which Redisson's listeners read as
/// messages that are not theirs (only 0 and 1 are). One that asks is announced on its client's
/// grant channel alone.
#[tokio::test]
async fn a_grant_is_announced_on_the_lock_channel_unless_the_registration_asks_for_its_own() {
    let server = RedisServer::spawn();
    let mut conn = server.conn().await;
    let client = redis::Client::open(server.url()).unwrap();
    let mut pubsub = client.get_async_pubsub().await.unwrap();
    pubsub
        .psubscribe("redisson_lock__channel:{raced}*")
        .await
        .unwrap();
    let mut stream = pubsub.into_on_message();
    use futures_util::StreamExt;
    for (marker, token) in [("", 1), ("c", 2)] {
        let (seconds, _): (u64, u64) = redis::cmd("TIME").query_async(&mut conn).await.unwrap();
        let live = seconds * 1000 + 10_000;
        let _: () = conn.hset("raced", OWNER, 1).await.unwrap();
        let _: () = conn.zadd(KEYS[2], "222", 1).await.unwrap();
        let _: () = conn
            .hset(KEYS[3], "222", format!("{live}:7{marker}:5000:other:1"))
            .await
            .unwrap();
        assert_eq!(release(&mut conn, None).await, 0);
        let holder: Option<u32> = conn.hget("raced", "other:1").await.unwrap();
        assert_eq!(holder, Some(1), "granted");
        let mut messages = Vec::new();
        let expected = if marker.is_empty() { 3 } else { 1 };
        while messages.len() < expected {
            let message = tokio::time::timeout(Duration::from_secs(5), stream.next())
                .await
                .expect("the grant's announcement")
                .unwrap();
            let payload: String = message.get_payload().unwrap();
            messages.push((message.get_channel_name().to_owned(), payload));
        }
        if marker.is_empty() {
            let lock_channel = "redisson_lock__channel:{raced}".to_owned();
            assert_eq!(
                messages,
                [
                    (lock_channel.clone(), "-222".to_owned()),
                    (lock_channel.clone(), format!("-{token}")),
                    (lock_channel, "-7".to_owned()),
                ],
                "Java longs, negative: never Redisson's 0 or 1"
            );
        } else {
            assert_eq!(
                messages,
                [(format!("{}222", KEYS[6]), format!("{token}:7"))]
            );
        }
        assert!(
            tokio::time::timeout(Duration::from_millis(100), stream.next())
                .await
                .is_err(),
            "nothing else: {messages:?}"
        );
        let _: () = conn.del(&["raced", KEYS[4]]).await.unwrap();
    }
}

/// Under an ACL that allows the lock's channel but not the clients' grant channels (narrower
/// than the README's `redisson_*`), a waiter still subscribes (to the lock's channel alone) and
/// is still granted the lock on release, announced on the lock's channel.
#[tokio::test]
async fn a_grant_channel_the_acl_refuses_falls_back_to_the_lock_channel() {
    let server = RedisServer::spawn();
    let conn = server.conn().await;
    server.cmd_sync(&[
        "ACL",
        "SETUSER",
        "narrow",
        "on",
        ">secret",
        "~*",
        "resetchannels",
        "&redisson_lock__channel:{narrow}",
        "+@all",
    ]);
    let url = format!("redis://narrow:secret@{}", server.addr());
    let connect = || async {
        latchkey::Client::builder(url.clone())
            .watchdog_timeout(Duration::from_secs(30))
            .connect()
            .await
            .expect("connect")
    };
    let (a, b) = (connect().await, connect().await);
    let held = a.lock("narrow").lock().await.unwrap();
    let (_, waiter) = registered_waiter(&b, &conn, "narrow").await;
    let mut c = conn.clone();
    let registration: Vec<String> = c.hvals("latchkey_lock_alive:{narrow}").await.unwrap();
    assert!(
        registration
            .iter()
            .all(|r| r.split(':').nth(1).is_some_and(|seq| !seq.ends_with('c'))),
        "no grant channel asked for: {registration:?}"
    );
    let token = held.fencing_token();
    held.unlock().await.unwrap();
    let granted = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("granted at once, not after a park")
        .unwrap()
        .unwrap();
    assert_eq!(granted.fencing_token(), token + 1, "granted on release");
    granted.unlock().await.unwrap();
}
