//! Which Redis a command talks to, and connecting to it.

use std::time::Duration;

use anyhow::{Context, Result};
use latchkey_redis::Client;

use crate::opt::ConnectOpts;
use crate::server::EmbeddedRedis;

/// The Redis of `run`, `status`, `release` and `queue` when none is given.
pub const DEFAULT_URL: &str = "redis://127.0.0.1:6379";

/// The Redis a command uses: a URL, and the private server behind it if latchkey started one.
#[derive(Debug)]
pub struct Target {
    /// The URL to connect to.
    pub url: String,
    /// The private server, stopped when the target is dropped.
    pub embedded: Option<EmbeddedRedis>,
}

impl Target {
    /// The URL given with `--redis` / `REDIS_URL`, else [`DEFAULT_URL`].
    pub fn given_or_default(connect: &ConnectOpts) -> Target {
        Target {
            url: connect
                .redis
                .clone()
                .unwrap_or_else(|| DEFAULT_URL.to_owned()),
            embedded: None,
        }
    }

    /// The URL given, else a private `redis-server` started now (and said so on stderr).
    pub fn given_or_private(connect: &ConnectOpts, quiet: bool) -> Result<Target> {
        if let Some(url) = &connect.redis {
            return Ok(Target {
                url: url.clone(),
                embedded: None,
            });
        }
        let server = EmbeddedRedis::start()?;
        if !quiet {
            eprintln!(
                "latchkey: no --redis or REDIS_URL given: started a private redis-server {} on {} \
                 (no persistence); it is stopped when this command ends",
                server.version(),
                server.addr()
            );
        }
        Ok(Target {
            url: server.url(),
            embedded: Some(server),
        })
    }

    /// How to name this Redis in output: the address of a private server, or the URL without
    /// its password.
    pub fn describe(&self) -> String {
        match &self.embedded {
            Some(server) => format!(
                "private redis-server {} on {}",
                server.version(),
                server.addr()
            ),
            None => redact(&self.url),
        }
    }
}

/// Connects a latchkey client, with the URL in the error.
pub async fn client(url: &str, watchdog: Option<Duration>) -> Result<Client> {
    let mut builder = Client::builder(url);
    if let Some(watchdog) = watchdog {
        builder = builder.watchdog_timeout(watchdog);
    }
    builder.connect().await.with_context(|| {
        if url == DEFAULT_URL {
            format!(
                "connecting to Redis at {url} (the default; give another with --redis URL or \
                 REDIS_URL)"
            )
        } else {
            format!("connecting to Redis at {}", redact(url))
        }
    })
}

/// A plain multiplexed connection, for the commands latchkey itself does not send.
pub async fn plain(url: &str) -> Result<redis::aio::MultiplexedConnection> {
    let client =
        redis::Client::open(url).with_context(|| format!("bad Redis URL {}", redact(url)))?;
    let connecting = client.get_multiplexed_async_connection();
    tokio::time::timeout(Duration::from_secs(5), connecting)
        .await
        .map_err(|_| anyhow::anyhow!("timed out"))
        .and_then(|r| r.map_err(anyhow::Error::from))
        .with_context(|| format!("connecting to Redis at {}", redact(url)))
}

/// Hides a password in a URL.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            format!("{}://***@{}", &url[..scheme], &url[at + 1..])
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hides_passwords() {
        assert_eq!(redact("redis://u:p@h:1/0"), "redis://***@h:1/0");
        assert_eq!(redact("redis://h:1"), "redis://h:1");
    }
}
