//! A rate limit in front of an axum router: each API key (the `x-api-key` header), or each client
//! address for requests without one, is held to 1 request a second with bursts of 3, in Redis,
//! so every replica of the service shares the same budget per key.
//!
//! `RateLimitLayer` returns a typed `RateLimitError`; axum's `HandleErrorLayer` turns it into
//! `429 Too Many Requests` with `Retry-After` (whole seconds, rounded up) and the `RateLimit-*`
//! headers, or `503` when Redis cannot decide. The example serves on a free port of 127.0.0.1,
//! sends its own requests over plain TCP, prints what came back and exits.
//!
//! Run: `cargo run -p latchkey-redis --features tower --example axum_rate_limit` (uses
//! `REDIS_URL`, default `redis://127.0.0.1:6379`).

mod support;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use axum::error_handling::HandleErrorLayer;
use axum::extract::{ConnectInfo, Request};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use latchkey_redis::{Client, Quota, RateLimitError, RateLimitLayer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tower::ServiceBuilder;

const NAMESPACE: &str = "latchkey-example-axum-rate-limit";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = support::redis_url();
    let outcome = run(&url).await;
    support::clean_up(&url, NAMESPACE).await?;
    outcome
}

/// The key of a request: its API key, else the address of the client that sent it.
fn api_key_or_peer(req: &Request) -> Option<String> {
    if let Some(key) = req.headers().get("x-api-key") {
        return key.to_str().ok().map(|key| format!("key:{key}"));
    }
    let ConnectInfo(peer) = req.extensions().get::<ConnectInfo<SocketAddr>>()?;
    Some(format!("ip:{}", peer.ip()))
}

/// What the application answers when the rate limit layer turns a request away.
async fn rejected(err: RateLimitError<Infallible>) -> Response {
    match err {
        RateLimitError::Limited(limited) => {
            let decision = limited.decision();
            let reset = decision.reset_after();
            let reset_secs = reset.as_secs() + u64::from(reset.subsec_nanos() > 0);
            let headers = [
                ("retry-after", limited.retry_after_secs().to_string()),
                ("ratelimit-limit", decision.limit().to_string()),
                ("ratelimit-remaining", decision.remaining().to_string()),
                ("ratelimit-reset", reset_secs.to_string()),
            ];
            (StatusCode::TOO_MANY_REQUESTS, headers, "slow down\n").into_response()
        }
        RateLimitError::Redis(err) => {
            eprintln!("rate limit not decided: {}", err.chain());
            StatusCode::SERVICE_UNAVAILABLE.into_response()
        }
        RateLimitError::Inner(never) => match never {},
        _ => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

async fn run(url: &str) -> Result<(), Box<dyn std::error::Error>> {
    let client = Client::builder(url).namespace(NAMESPACE).connect().await?;
    let limiter = client.gcra_limiter("api", Quota::per_second(1).with_burst(3));
    let app = Router::new().route("/", get(|| async { "hello\n" })).layer(
        ServiceBuilder::new()
            .layer(HandleErrorLayer::new(rejected))
            .layer(RateLimitLayer::new(limiter, api_key_or_peer)),
    );

    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let server = tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
    });
    println!("serving on http://{addr}");

    // A noisy key sends 5 requests at once: the burst of 3 goes through, the rest wait.
    let mut noisy = Vec::new();
    for i in 1..=5 {
        let reply = get_root(addr, Some("noisy")).await?;
        println!("key noisy, request {i}: {}", reply.summary());
        noisy.push(reply);
    }
    let quiet = get_root(addr, Some("quiet")).await?;
    println!("key quiet: {}", quiet.summary());
    let anonymous = get_root(addr, None).await?;
    println!("no key (limited by address): {}", anonymous.summary());

    // A client that waits as long as Retry-After says is let in.
    let retry_after: u64 = noisy
        .last()
        .and_then(|reply| reply.header("retry-after"))
        .ok_or("no Retry-After on the last refusal")?
        .parse()?;
    tokio::time::sleep(Duration::from_secs(retry_after)).await;
    let again = get_root(addr, Some("noisy")).await?;
    println!("key noisy after {retry_after} s: {}", again.summary());

    server.abort();
    let statuses: Vec<u16> = noisy.iter().map(|reply| reply.status).collect();
    if statuses == [200, 200, 200, 429, 429]
        && quiet.status == 200
        && anonymous.status == 200
        && again.status == 200
    {
        println!(
            "the per-key limit held: 3 of 5 admitted, the others told to retry in {retry_after} s"
        );
        Ok(())
    } else {
        Err(format!(
            "unexpected statuses: noisy {statuses:?}, quiet {}, no key {}, after the wait {}",
            quiet.status, anonymous.status, again.status
        )
        .into())
    }
}

/// A response as the example's client reads it.
struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn summary(&self) -> String {
        let mut line = self.status.to_string();
        for name in [
            "retry-after",
            "ratelimit-limit",
            "ratelimit-remaining",
            "ratelimit-reset",
        ] {
            if let Some(value) = self.header(name) {
                line.push_str(&format!(", {name}: {value}"));
            }
        }
        line
    }
}

/// `GET /` over a connection of its own (HTTP/1.1, `Connection: close`), with an API key if
/// one is given.
async fn get_root(addr: SocketAddr, api_key: Option<&str>) -> std::io::Result<Reply> {
    let mut stream = TcpStream::connect(addr).await?;
    let mut request = format!("GET / HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    if let Some(key) = api_key {
        request.push_str(&format!("x-api-key: {key}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await?;
    let text = String::from_utf8_lossy(&raw);
    let head = text.split("\r\n\r\n").next().unwrap_or_default();
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|line| line.split(' ').nth(1))
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("not an HTTP response: {text:?}")))?;
    let headers = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_owned(), value.trim().to_owned()))
        .collect();
    Ok(Reply { status, headers })
}
