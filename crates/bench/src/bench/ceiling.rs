//! `ceiling`: what the same server and client stack can do at all — EVALSHA of a trivial
//! script, one round trip at a time and pipelined — and, when `redis-benchmark` (the C client
//! that ships with redis-server) is installed, what the machine does one round trip at a time
//! without any Rust client in the way.

use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::Serialize;

use super::measure::{sequential, Latency};
use super::Setup;
use crate::connect;

/// Scripts per pipelined batch.
const BATCH: u64 = 256;

/// The machine's raw limit, measured in the same run.
#[derive(Clone, Debug, Serialize)]
pub struct Ceiling {
    /// Sequential EVALSHA round trips per second (one connection, one at a time).
    pub sequential_per_s: f64,
    /// Their latency.
    pub sequential_latency: Latency,
    /// Pipelined EVALSHA per second (one connection, batches of 256).
    pub pipelined_per_s: f64,
    /// The same sequential EVALSHA from `redis-benchmark -c 1` (C, one connection): the
    /// machine's round-trip limit whatever the client library.
    pub c_client: CClient,
}

/// The C client's sequential figure, or why it is missing.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CClient {
    /// Round trips per second.
    Measured {
        /// Sequential EVALSHA per second.
        sequential_per_s: f64,
    },
    /// Not run (not installed, TLS or credentials, or it failed).
    Skipped {
        /// Why.
        why: String,
    },
}

/// Measures both figures.
pub async fn measure(setup: &Setup) -> Result<Ceiling> {
    let mut conn = connect::plain(&setup.url).await?;
    let script = redis::Script::new("return 1");
    let sha = script.prepare_invoke().load_async(&mut conn).await?;
    let key = format!("{}:ceiling", setup.prefix);
    let call = || {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(&sha).arg(1).arg(&key);
        cmd
    };
    let round_trip = |_: u64| {
        let mut conn = conn.clone();
        let cmd = call();
        async move {
            let started = Instant::now();
            let _: i64 = cmd.query_async(&mut conn).await?;
            Ok(started.elapsed())
        }
    };
    sequential(None, "round trips", setup.warmup, round_trip).await?;
    let mut seq = sequential(
        Some("ceiling sequential EVALSHA"),
        "round trips",
        setup.duration,
        round_trip,
    )
    .await?;
    let batch = |_: u64| {
        let mut conn = conn.clone();
        let mut pipe = redis::pipe();
        for _ in 0..BATCH {
            pipe.add_command(call());
        }
        async move {
            let started = Instant::now();
            let _: Vec<i64> = pipe.query_async(&mut conn).await?;
            Ok(started.elapsed())
        }
    };
    sequential(None, "batches", setup.warmup, batch).await?;
    let piped = sequential(
        Some("ceiling pipelined EVALSHA"),
        "batches",
        setup.duration,
        batch,
    )
    .await?;
    let c_client = match c_client(&setup.url, &sha, &key, setup.duration).await {
        Ok(sequential_per_s) => CClient::Measured { sequential_per_s },
        Err(e) => CClient::Skipped {
            why: format!("{e:#}"),
        },
    };
    Ok(Ceiling {
        sequential_per_s: seq.rate(),
        sequential_latency: Latency::of(&mut seq.samples),
        pipelined_per_s: (piped.count * BATCH) as f64 / piped.elapsed.as_secs_f64().max(1e-9),
        c_client,
    })
}

/// Sequential `EVALSHA sha 1 key` per second from `redis-benchmark -c 1 -P 1` for about
/// `duration`. Plain `redis://` servers only (no TLS, no credentials on the command line).
async fn c_client(url: &str, sha: &str, key: &str, duration: Duration) -> Result<f64> {
    let info = redis::IntoConnectionInfo::into_connection_info(url)?;
    let redis::ConnectionAddr::Tcp(host, port) = info.addr().clone() else {
        bail!("redis-benchmark is only run against plain TCP servers");
    };
    let settings = info.redis_settings();
    if settings.password().is_some() || settings.username().is_some() {
        bail!("redis-benchmark is not run against servers that need credentials");
    }
    // 15k round trips/s is a fast loopback: size the run to take about `duration` there.
    let requests = (duration.as_secs_f64() * 15_000.0).max(1000.0) as u64;
    let output = tokio::process::Command::new("redis-benchmark")
        .args([
            "-h",
            &host,
            "-p",
            &port.to_string(),
            "-n",
            &requests.to_string(),
        ])
        .args(["-c", "1", "-P", "1", "--csv", "EVALSHA", sha, "1", key])
        .stdin(Stdio::null())
        .output()
        .await
        .context("redis-benchmark is not installed (Debian: redis-tools)")?;
    if !output.status.success() {
        bail!(
            "redis-benchmark failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    let text = String::from_utf8_lossy(&output.stdout);
    parse_csv_rate(&text).with_context(|| format!("unexpected redis-benchmark output: {text}"))
}

/// The requests per second from `redis-benchmark --csv` output: the second field of the first
/// data line (`"test","rps",…`; older versions print no header).
fn parse_csv_rate(text: &str) -> Option<f64> {
    text.lines()
        .filter_map(|line| line.split(',').nth(1))
        .map(|field| field.trim().trim_matches('"'))
        .find_map(|field| field.parse::<f64>().ok())
}

#[cfg(test)]
mod tests {
    use super::parse_csv_rate;

    #[test]
    fn csv_rate_is_read_with_and_without_a_header() {
        let v7 =
            "\"test\",\"rps\",\"avg_latency_ms\"\n\"EVALSHA abc 1 k\",\"13568.52\",\"0.072\"\n";
        assert_eq!(parse_csv_rate(v7), Some(13568.52));
        assert_eq!(parse_csv_rate("\"PING\",\"15010.51\"\n"), Some(15010.51));
        assert_eq!(parse_csv_rate("garbage"), None);
    }
}
