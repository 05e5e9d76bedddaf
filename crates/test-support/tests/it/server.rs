use std::net::TcpListener;
use std::time::Duration;

use latchkey_test_support::{RedisServer, RedisServers};
use redis::{AsyncCommands, Value};

use crate::{config, eventually};

fn pid_exists(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

#[tokio::test]
async fn spawn_and_ping() {
    let server = RedisServer::spawn();
    assert!(server.is_running());
    assert!(server.pid() > 0);
    assert_eq!(server.addr(), format!("127.0.0.1:{}", server.port()));
    assert_eq!(server.url(), format!("redis://127.0.0.1:{}", server.port()));
    assert_eq!(
        server.cmd_sync(&["PING"]),
        Value::SimpleString("PONG".into())
    );

    let mut conn = server.conn().await;
    let pong: String = redis::cmd("PING").query_async(&mut conn).await.unwrap();
    assert_eq!(pong, "PONG");
    let () = conn.set("k", "v").await.unwrap();
    let v: String = conn.get("k").await.unwrap();
    assert_eq!(v, "v");

    // The configuration the crate promises.
    let save = server.cmd_sync(&["CONFIG", "GET", "save"]);
    assert_eq!(
        save,
        Value::Array(vec![
            Value::BulkString(b"save".to_vec()),
            Value::BulkString(b"".to_vec())
        ])
    );
    let info = server.info("persistence");
    assert_eq!(info["aof_enabled"], "0");
    assert!(server.dir().join("redis.log").exists());
    assert!(server.log().contains("Ready to accept connections"));
    // Error replies come back as values.
    assert!(matches!(
        server.cmd_sync(&["NO-SUCH-COMMAND"]),
        Value::ServerError(_)
    ));
}

#[tokio::test]
async fn restart_keeps_data_with_appendonly() {
    let mut server = RedisServer::builder().appendonly(true).spawn();
    let port = server.port();
    let old_pid = server.pid();
    {
        let mut conn = server.conn().await;
        let () = conn.set("durable", "yes").await.unwrap();
    }
    // SIGKILL: only the AOF (appendfsync always) can bring the key back.
    server.kill();
    assert!(!server.is_running());
    server.restart();
    assert!(server.is_running());
    assert_eq!(server.port(), port);
    assert_ne!(server.pid(), old_pid);
    let mut conn = server.conn().await;
    let v: Option<String> = conn.get("durable").await.unwrap();
    assert_eq!(v.as_deref(), Some("yes"));
}

#[tokio::test]
async fn restart_without_appendonly_loses_data() {
    let mut server = RedisServer::spawn();
    {
        let mut conn = server.conn().await;
        let () = conn.set("volatile", "1").await.unwrap();
    }
    server.restart();
    let mut conn = server.conn().await;
    let v: Option<String> = conn.get("volatile").await.unwrap();
    assert_eq!(v, None);
}

#[tokio::test]
async fn kill_stops_the_process() {
    let mut server = RedisServer::spawn();
    let pid = server.pid();
    server.kill();
    assert!(!server.is_running());
    assert!(!pid_exists(pid), "the killed process was not reaped");
    server.kill(); // idempotent
    assert!(server.try_cmd_sync(&["PING"]).is_err());
    let client = server.client();
    assert!(client
        .get_multiplexed_async_connection_with_config(&config(Duration::from_secs(2)))
        .await
        .is_err());
}

#[test]
fn shutdown_nosave_stops_the_process() {
    let mut server = RedisServer::spawn();
    let pid = server.pid();
    server.shutdown_nosave();
    assert!(!server.is_running());
    assert!(!pid_exists(pid));
    server.shutdown_nosave(); // no-op
}

#[test]
fn drop_kills_and_reaps() {
    let server = RedisServer::spawn();
    let pid = server.pid();
    let dir = server.dir().to_path_buf();
    assert!(pid_exists(pid));
    drop(server);
    assert!(!pid_exists(pid), "process {pid} survived the drop");
    assert!(!dir.exists(), "the temporary directory survived the drop");
}

#[test]
fn two_servers_are_independent() {
    let servers = RedisServers::spawn(2);
    assert_eq!(servers.len(), 2);
    assert_ne!(servers[0].port(), servers[1].port());
    assert_ne!(servers.urls()[0], servers.urls()[1]);
    servers[0].cmd_sync(&["SET", "only-here", "1"]);
    assert_eq!(servers[0].cmd_sync(&["EXISTS", "only-here"]), Value::Int(1));
    assert_eq!(servers[1].cmd_sync(&["EXISTS", "only-here"]), Value::Int(0));
}

#[tokio::test]
async fn pause_and_resume() {
    let server = RedisServer::spawn();
    let client = server.client();
    let mut conn = client
        .get_multiplexed_async_connection_with_config(&config(Duration::from_millis(300)))
        .await
        .unwrap();
    server.pause_process();
    assert!(server.is_running());
    let paused: redis::RedisResult<String> = redis::cmd("PING").query_async(&mut conn).await;
    assert!(paused.is_err(), "a paused server answered: {paused:?}");
    server.resume_process();
    let mut conn = server.conn().await;
    let pong: String = redis::cmd("PING").query_async(&mut conn).await.unwrap();
    assert_eq!(pong, "PONG");
}

#[tokio::test]
async fn password_and_acl_users() {
    let server = RedisServer::builder()
        .password("s3cr:t@pw")
        .acl_user("alice on >alicepw ~app:* +@all")
        .spawn();
    assert!(server
        .url()
        .starts_with("redis://default:s3cr%3At%40pw@127.0.0.1:"));
    // The admin connection authenticates.
    let mut conn = server.conn().await;
    let () = conn.set("app:x", "1").await.unwrap();

    // Without credentials the server refuses commands.
    let anonymous = redis::Client::open(format!("redis://{}", server.addr())).unwrap();
    let mut anon = anonymous.get_connection().unwrap();
    let denied: redis::RedisResult<String> = redis::cmd("GET").arg("app:x").query(&mut anon);
    assert!(denied.is_err());

    // The ACL user works within its key pattern only.
    let alice = redis::Client::open(format!("redis://alice:alicepw@{}", server.addr())).unwrap();
    let mut alice = alice.get_connection().unwrap();
    let v: String = redis::cmd("GET").arg("app:x").query(&mut alice).unwrap();
    assert_eq!(v, "1");
    let outside: redis::RedisResult<Option<String>> =
        redis::cmd("GET").arg("other").query(&mut alice);
    assert!(outside.is_err());
}

#[test]
fn replica_follows_primary() {
    let primary = RedisServer::spawn();
    let replica = RedisServer::builder().replica_of(&primary.addr()).spawn();
    replica.wait_until_synced(Duration::from_secs(30));
    primary.cmd_sync(&["SET", "replicated", "42"]);
    eventually(Duration::from_secs(30), "the key on the replica", || {
        replica.cmd_sync(&["GET", "replicated"]) == Value::BulkString(b"42".to_vec())
    });
    assert_eq!(replica.info("replication")["role"], "slave");
}

#[test]
fn taken_port_is_detected() {
    let listener = TcpListener::bind(("127.0.0.1", 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    let result = std::panic::catch_unwind(|| RedisServer::builder().port(port).spawn());
    let message = match result {
        Ok(_) => panic!("a server started on a taken port"),
        Err(payload) => payload
            .downcast_ref::<String>()
            .cloned()
            .unwrap_or_default(),
    };
    assert!(
        message.contains("could not bind") && message.contains("Address already in use"),
        "{message}"
    );
}

#[test]
fn extra_args_are_applied() {
    let server = RedisServer::builder()
        .arg("maxmemory-policy", "allkeys-lru")
        .arg("hz", "50")
        .spawn();
    assert_eq!(
        server.cmd_sync(&["CONFIG", "GET", "hz"]),
        Value::Array(vec![
            Value::BulkString(b"hz".to_vec()),
            Value::BulkString(b"50".to_vec())
        ])
    );
}
