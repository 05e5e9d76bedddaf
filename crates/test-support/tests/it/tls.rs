use std::time::Duration;

use latchkey_test_support::{RedisServer, TlsFiles};
use redis::{AsyncCommands, ClientTlsConfig, TlsCertificates, Value};

use crate::config;

async fn ping(client: &redis::Client) -> redis::RedisResult<String> {
    let mut conn = client
        .get_multiplexed_async_connection_with_config(&config(Duration::from_secs(5)))
        .await?;
    redis::cmd("PING").query_async(&mut conn).await
}

#[tokio::test]
async fn tls_server_accepts_its_ca_and_rejects_another() {
    let files = TlsFiles::generate();
    for path in [
        files.ca_cert(),
        files.server_cert(),
        files.server_key(),
        files.client_cert(),
        files.client_key(),
    ] {
        assert!(path.exists(), "{} missing", path.display());
    }
    let server = RedisServer::builder().tls(&files).spawn();
    assert!(server.is_tls());
    assert_eq!(
        server.url(),
        format!("rediss://127.0.0.1:{}", server.port())
    );
    assert_eq!(
        server.cmd_sync(&["PING"]),
        Value::SimpleString("PONG".into())
    );

    // Admin connection (CA + client certificate).
    let mut conn = server.conn().await;
    let () = conn.set("tls-key", "1").await.unwrap();

    // Trusting the CA without a client certificate is enough (tls-auth-clients optional).
    let root_only = redis::Client::build_with_tls(server.url(), files.root_certificates()).unwrap();
    assert_eq!(ping(&root_only).await.unwrap(), "PONG");
    let full = redis::Client::build_with_tls(server.url(), files.certificates()).unwrap();
    assert_eq!(ping(&full).await.unwrap(), "PONG");

    // A client trusting another CA rejects the server's certificate.
    let other = TlsFiles::generate_other_ca();
    let wrong_root =
        redis::Client::build_with_tls(server.url(), other.root_certificates()).unwrap();
    assert!(ping(&wrong_root).await.is_err());

    // The server rejects a client certificate from another CA.
    let wrong_client = redis::Client::build_with_tls(
        server.url(),
        TlsCertificates {
            client_tls: Some(ClientTlsConfig {
                client_cert: std::fs::read(other.client_cert()).unwrap(),
                client_key: std::fs::read(other.client_key()).unwrap(),
            }),
            root_cert: Some(std::fs::read(files.ca_cert()).unwrap()),
        },
    )
    .unwrap();
    assert!(ping(&wrong_client).await.is_err());

    // Plain TCP does not get an answer.
    let plain = redis::Client::open(format!("redis://{}", server.addr())).unwrap();
    assert!(ping(&plain).await.is_err());
}

#[test]
fn tls_server_restarts_after_files_are_dropped() {
    let files = TlsFiles::generate();
    let mut server = RedisServer::builder().tls(&files).appendonly(true).spawn();
    server.cmd_sync(&["SET", "k", "v"]);
    drop(files);
    server.restart();
    assert_eq!(
        server.cmd_sync(&["GET", "k"]),
        Value::BulkString(b"v".to_vec())
    );
}
