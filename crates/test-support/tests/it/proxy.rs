use std::time::{Duration, Instant};

use latchkey_test_support::{FaultProxy, RedisServer};
use redis::AsyncCommands;

use crate::{config, eventually};

async fn connect(
    proxy: &FaultProxy,
    response_timeout: Duration,
) -> redis::aio::MultiplexedConnection {
    redis::Client::open(proxy.url())
        .unwrap()
        .get_multiplexed_async_connection_with_config(&config(response_timeout))
        .await
        .unwrap()
}

async fn ping(conn: &mut redis::aio::MultiplexedConnection) -> redis::RedisResult<String> {
    redis::cmd("PING").query_async(conn).await
}

#[tokio::test]
async fn proxy_passes_traffic() {
    let server = RedisServer::spawn();
    let proxy = FaultProxy::start(&server.addr());
    assert_eq!(proxy.url(), format!("redis://127.0.0.1:{}", proxy.port()));
    assert_eq!(proxy.upstream(), server.addr());
    let mut conn = connect(&proxy, Duration::from_secs(10)).await;
    assert_eq!(ping(&mut conn).await.unwrap(), "PONG");
    let big = "x".repeat(1 << 20);
    let () = conn.set("through-proxy", &big).await.unwrap();
    let back: String = conn.get("through-proxy").await.unwrap();
    assert_eq!(back, big);
    // The write really reached the server.
    let mut direct = server.conn().await;
    let len: usize = direct.strlen("through-proxy").await.unwrap();
    assert_eq!(len, big.len());
    assert_eq!(proxy.connection_count(), 1);
}

#[tokio::test]
async fn blackhole_makes_commands_time_out() {
    let server = RedisServer::spawn();
    let proxy = FaultProxy::start(&server.addr());
    let mut conn = connect(&proxy, Duration::from_millis(500)).await;
    assert_eq!(ping(&mut conn).await.unwrap(), "PONG");

    proxy.blackhole(true);
    let started = Instant::now();
    let result = ping(&mut conn).await;
    assert!(
        result.is_err(),
        "PING answered through a black hole: {result:?}"
    );
    assert!(started.elapsed() >= Duration::from_millis(450));
    // The connection stays open, and new connections are accepted but get no answer.
    assert_eq!(proxy.connection_count(), 1);
    let client = redis::Client::open(proxy.url()).unwrap();
    let fresh = client
        .get_multiplexed_async_connection_with_config(&config(Duration::from_millis(500)))
        .await;
    if let Ok(mut fresh) = fresh {
        assert!(ping(&mut fresh).await.is_err());
    }

    proxy.blackhole(false);
    let mut conn = connect(&proxy, Duration::from_secs(10)).await;
    assert_eq!(ping(&mut conn).await.unwrap(), "PONG");
}

#[tokio::test]
async fn delay_slows_every_round_trip() {
    let server = RedisServer::spawn();
    let proxy = FaultProxy::start(&server.addr());
    let mut conn = connect(&proxy, Duration::from_secs(30)).await;
    assert_eq!(ping(&mut conn).await.unwrap(), "PONG");

    let delay = Duration::from_millis(200);
    proxy.set_delay(delay);
    for _ in 0..2 {
        let started = Instant::now();
        assert_eq!(ping(&mut conn).await.unwrap(), "PONG");
        // Delayed once on the way in and once on the way out.
        assert!(started.elapsed() >= delay * 2, "{:?}", started.elapsed());
    }
    proxy.set_delay(Duration::ZERO);
    assert_eq!(ping(&mut conn).await.unwrap(), "PONG");
}

#[tokio::test]
async fn drop_connections_breaks_open_connections() {
    let server = RedisServer::spawn();
    let proxy = FaultProxy::start(&server.addr());
    let mut conn = connect(&proxy, Duration::from_secs(5)).await;
    assert_eq!(ping(&mut conn).await.unwrap(), "PONG");
    assert_eq!(proxy.connection_count(), 1);

    proxy.drop_connections();
    assert_eq!(proxy.connection_count(), 0);
    assert!(ping(&mut conn).await.is_err());
    // The server sees its side closed too.
    eventually(
        Duration::from_secs(10),
        "the server to drop the client",
        || server.info("clients")["connected_clients"] == "1",
    );

    // New connections still work.
    let mut conn = connect(&proxy, Duration::from_secs(5)).await;
    assert_eq!(ping(&mut conn).await.unwrap(), "PONG");
}

#[tokio::test]
async fn refuse_closes_new_connections() {
    let server = RedisServer::spawn();
    let proxy = FaultProxy::start(&server.addr());
    let mut open = connect(&proxy, Duration::from_secs(5)).await;

    proxy.refuse(true);
    let client = redis::Client::open(proxy.url()).unwrap();
    let refused = match client
        .get_multiplexed_async_connection_with_config(&config(Duration::from_secs(5)))
        .await
    {
        Ok(mut conn) => ping(&mut conn).await.is_err(),
        Err(_) => true,
    };
    assert!(refused, "a new connection worked while refusing");
    // Connections opened before are not affected.
    assert_eq!(ping(&mut open).await.unwrap(), "PONG");

    proxy.refuse(false);
    let mut conn = connect(&proxy, Duration::from_secs(5)).await;
    assert_eq!(ping(&mut conn).await.unwrap(), "PONG");
    assert_eq!(proxy.accepted_count(), 2);
}

#[tokio::test]
async fn upstream_down_closes_connections() {
    let mut server = RedisServer::spawn();
    let proxy = FaultProxy::start(&server.addr());
    let mut conn = connect(&proxy, Duration::from_secs(5)).await;
    assert_eq!(ping(&mut conn).await.unwrap(), "PONG");
    server.kill();
    assert!(ping(&mut conn).await.is_err());
    eventually(
        Duration::from_secs(10),
        "the proxy to close the connection",
        || proxy.connection_count() == 0,
    );
    drop(proxy);
}
