//! The same workloads with the Rust peer `rslock` (Redlock over `SET NX PX`), in its default
//! configuration (3 tries per attempt, random retry delay up to 200 ms).

use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};
use redis::AsyncCommands;
use rslock::LockManager;

use super::commands::Plain;
use super::contended;
use super::measure::sequential;
use super::{many_run, server_cpu, Run, Setup, MANY_NAMES_PER_TASK, SOLO_NAMES};
use crate::connect;

/// The lease rslock locks get: as long as latchkey's watchdog lease, so none expires mid-run.
const TTL: Duration = Duration::from_secs(30);

/// The library's name in reports.
pub const NAME: &str = "rslock";

fn err(e: rslock::LockError) -> anyhow::Error {
    anyhow!("rslock: {e}")
}

/// `solo` with rslock: `acquire` + `release` pairs in sequence on 64 rotating names.
pub async fn solo(setup: &Setup) -> Result<Run> {
    solo_over(setup, std::slice::from_ref(&setup.url), "solo rslock").await
}

/// `redlock3` with rslock: `solo` over 3 servers.
pub async fn redlock3(setup: &Setup, urls: &[String]) -> Result<Run> {
    solo_over(setup, urls, "redlock3 rslock").await
}

async fn solo_over(setup: &Setup, urls: &[String], label: &str) -> Result<Run> {
    let manager = LockManager::new(urls.to_vec());
    let names: Vec<String> = (0..SOLO_NAMES)
        .map(|i| format!("{}:rslock:{label}:{i}", setup.prefix))
        .collect();
    let pair = |i: u64| {
        let manager = manager.clone();
        let name = names[(i % SOLO_NAMES) as usize].clone();
        async move {
            let started = Instant::now();
            let guard = manager.acquire(name.as_bytes(), TTL).await.map_err(err)?;
            guard.release().await;
            Ok(started.elapsed())
        }
    };
    sequential(None, "pairs", setup.warmup, pair).await?;
    let cpu = server_cpu(&setup.url).await?;
    let mut measured = sequential(Some(label), "pairs", setup.duration, pair).await?;
    let run = Run::new(NAME, "", &mut measured);
    // Over several servers the main server's CPU says nothing.
    if urls == std::slice::from_ref(&setup.url) {
        return Ok(run.with_cpu((cpu, server_cpu(&setup.url).await?)));
    }
    Ok(run)
}

/// `many` with rslock: 64 tasks sharing one `LockManager`, each with its own names.
pub async fn many(setup: &Setup) -> Result<Run> {
    let manager = LockManager::new(vec![setup.url.clone()]);
    let make = |t: usize| {
        let manager = manager.clone();
        let names: Vec<String> = (0..MANY_NAMES_PER_TASK)
            .map(|j| format!("{}:rslock:many:{t}:{j}", setup.prefix))
            .collect();
        move |i: u64| {
            let manager = manager.clone();
            let name = names[(i % MANY_NAMES_PER_TASK) as usize].clone();
            async move {
                let started = Instant::now();
                let guard = manager.acquire(name.as_bytes(), TTL).await.map_err(err)?;
                guard.release().await;
                Ok(started.elapsed())
            }
        }
    };
    many_run(setup, (NAME, ""), make).await
}

/// `contended` with rslock: 8 `LockManager`s (separate connections) on one lock.
pub async fn contended(setup: &Setup) -> Result<Run> {
    let name = format!("{}:contended:rslock", setup.prefix);
    let counter = format!("{name}:counter");
    let mut workers = Vec::new();
    for _ in 0..contended::CLIENTS {
        workers.push((
            LockManager::new(vec![setup.url.clone()]),
            connect::plain(&setup.url).await?,
        ));
    }
    let make = |t: usize| {
        let (manager, conn) = &workers[t];
        let manager = manager.clone();
        let conn = conn.clone();
        let name = name.clone();
        let counter = counter.clone();
        move |_: u64| {
            let manager = manager.clone();
            let mut conn = conn.clone();
            let name = name.clone();
            let counter = counter.clone();
            async move {
                let asked = Instant::now();
                let guard = manager.acquire(name.as_bytes(), TTL).await.map_err(err)?;
                let waited = asked.elapsed();
                let value: Option<i64> = conn.get(&counter).await?;
                let _: () = conn.set(&counter, value.unwrap_or(0) + 1).await?;
                guard.release().await;
                Ok(waited)
            }
        }
    };
    // rslock acquires with a plain `SET NX PX`; its unlock script runs GET and DEL, never SET.
    let plain = Plain {
        get: false,
        set: true,
    };
    // rslock sends no PING.
    let pings = contended::Pings::HealthChecks;
    contended::measure(setup, NAME, &counter, plain, pings, make).await
}
