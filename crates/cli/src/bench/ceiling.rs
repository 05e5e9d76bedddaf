//! `ceiling`: what the same server and client stack can do at all — EVALSHA of a trivial
//! script, one round trip at a time and pipelined.

use std::time::Instant;

use anyhow::Result;
use serde::Serialize;

use super::measure::{sequential, Latency};
use super::Setup;
use crate::connect;

/// Scripts per pipelined batch.
const BATCH: u64 = 256;

/// The machine's raw limit, measured in the same run.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Ceiling {
    /// Sequential EVALSHA round trips per second (one connection, one at a time).
    pub sequential_per_s: f64,
    /// Their latency.
    pub sequential_latency: Latency,
    /// Pipelined EVALSHA per second (one connection, batches of 256).
    pub pipelined_per_s: f64,
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
    Ok(Ceiling {
        sequential_per_s: seq.rate(),
        sequential_latency: Latency::of(&mut seq.samples),
        pipelined_per_s: (piped.count * BATCH) as f64 / piped.elapsed.as_secs_f64().max(1e-9),
    })
}
