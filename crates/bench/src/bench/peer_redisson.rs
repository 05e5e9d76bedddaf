//! The same workloads with the second Rust peer, the crate `redisson` (0.1; a Rust library of
//! its own, not the Java Redisson), used as its README shows: one `AsyncRedissonClient` from
//! `RedissonConfig::single_server`, `client.get_lock(name)`, `lock().await` … `unlock().await`,
//! default configuration throughout. That is a pool of 10 connections per client (each
//! checkout sends a `PING`: the pool's check of the connection it hands out), a 30 s lease and
//! no watchdog (its watchdog starts only for a lease under one second), and a waiter that polls
//! every 100 ms. See BENCHMARKS.md, "The peers", for what it guarantees and what it does not.
//!
//! Not run on `fair` and `redlock3`: see [`NOT_RUN`]. On `many`, its default pool deadlocks:
//! see [`many`].

use std::time::Instant;

use anyhow::{anyhow, bail, Result};
use redis::{AsyncCommands, IntoConnectionInfo};
use redisson::{AsyncRLock, AsyncRedissonClient, RedissonConfig, RedissonError};

use super::commands::Plain;
use super::contended::{self, Pings};
use super::measure::{concurrent, sequential};
use super::{server_cpu, Run, Setup, MANY_NAMES_PER_TASK, MANY_TASKS, SOLO_NAMES};
use crate::connect;
use crate::duration::human;

/// The library's name in reports.
pub const NAME: &str = "redisson";

/// The workloads this peer is not run on, and why (shown under the table and in the JSON).
pub const NOT_RUN: &[(&str, &str)] = &[
    (
        "fair",
        "its fair lock (AsyncRFairLock) does not wait for a held lock: a waiter that reaches the \
         head of its queue tries the lock once and fails with LockAcquisitionError if it is \
         still held",
    ),
    (
        "redlock3",
        "its RedLock (AsyncRRedLock) leaves a renewal task running after every unlock (it ends \
         at its first renewal, about 10 s later, after one more script call per server), which \
         would run into the workloads measured after this one; and its lock() is not a waiting \
         lock (3 tries 200 ms apart, then an error)",
    ),
];

fn err(e: RedissonError) -> anyhow::Error {
    anyhow!("redisson: {e}")
}

/// A client with the crate's defaults, or with a pool of `pool` connections. `single_server`
/// keeps the URL's address but drops its user, password and database (it rebuilds the
/// connection settings from the configuration's own fields), so those are copied over.
pub async fn client(url: &str, pool: Option<u32>) -> Result<AsyncRedissonClient> {
    let info = url
        .into_connection_info()
        .map_err(|e| anyhow!("redisson: bad Redis URL {}: {e}", connect::redact(url)))?;
    let settings = info.redis_settings();
    let mut config = RedissonConfig::single_server(url);
    config.username = settings.username().map(str::to_owned);
    config.password = settings.password().map(str::to_owned);
    config.database = Some(settings.db());
    if let Some(pool) = pool {
        config = config.with_pool_size(pool);
    }
    AsyncRedissonClient::new(config).await.map_err(err)
}

/// One lock + unlock pair. `unlock` answers `false` for a release that succeeded (its script
/// returns 0 on a full release, and the client reads only a positive answer as success), so
/// its answer says nothing: the callers check afterwards that every lock is free.
async fn pair(lock: &AsyncRLock) -> Result<()> {
    lock.lock().await.map_err(err)?;
    lock.unlock().await.map_err(err)?;
    Ok(())
}

/// Fails if any of `locks` is still held in Redis.
async fn all_free(locks: &[AsyncRLock]) -> Result<()> {
    for (i, lock) in locks.iter().enumerate() {
        if lock.is_locked().await.map_err(err)? {
            bail!("redisson: lock #{i} is still held after its unlock()");
        }
    }
    Ok(())
}

/// `solo` with redisson: `lock` + `unlock` pairs in sequence on 64 rotating names.
pub async fn solo(setup: &Setup) -> Result<Run> {
    let client = client(&setup.url, None).await?;
    let locks: Vec<AsyncRLock> = (0..SOLO_NAMES)
        .map(|i| client.get_lock(&format!("{}:redisson:solo:{i}", setup.prefix)))
        .collect();
    let pair = |i: u64| {
        let lock = locks[(i % SOLO_NAMES) as usize].clone();
        async move {
            let started = Instant::now();
            pair(&lock).await?;
            Ok(started.elapsed())
        }
    };
    sequential(None, "pairs", setup.warmup, pair).await?;
    let cpu = server_cpu(&setup.url).await?;
    let mut measured = sequential(Some("solo redisson"), "pairs", setup.duration, pair).await?;
    let cpu = (cpu, server_cpu(&setup.url).await?);
    all_free(&locks).await?;
    client.shutdown().await.map_err(err)?;
    Ok(Run::new(NAME, "", &mut measured).with_cpu(cpu))
}

/// `many` with redisson: 64 tasks sharing one client, each with its own names. First with
/// the default pool of 10 connections; if that fails, again with a pool of 64 (variant
/// `pool 64`), and the failure is returned as a note for the report.
///
/// The default pool can deadlock when more tasks than it has connections use the client at
/// once (64 tasks here: at once, every time so far; 16 tasks on 10 connections within 4 s):
/// `get_connection` can wait for a pool slot while holding the client's connection-cache mutex
/// (when its per-thread cache entry is there), and a task that got a slot takes that mutex
/// before it returns the connection to its caller. Once every slot belongs to a task waiting
/// for the mutex, nothing moves until the pool's 3 s wait timeout fails the waiter.
pub async fn many(setup: &Setup) -> Result<(Run, Option<String>)> {
    let started = Instant::now();
    match many_with(setup, None).await {
        Ok(run) => Ok((run, None)),
        // The deadlock described above ends with deadpool's wait timeout; anything else is an
        // error.
        Err(e) if format!("{e:#}").contains("waiting for a slot") => {
            let after = started.elapsed();
            let mut run = many_with(setup, Some(MANY_TASKS as u32)).await?;
            run.variant = "pool 64";
            let note = format!(
                "with its default pool (10 connections) the 64 tasks failed {} into the \
                 workload: {e:#}. A task waits for a pool slot while it holds the client's \
                 connection-cache mutex, which the tasks holding the slots wait for; the pool's \
                 3 s wait timeout ends it with that error. Measured again with \
                 with_pool_size(64), one connection per task (variant `pool 64`)",
                human(after)
            );
            Ok((run, Some(note)))
        }
        Err(e) => Err(e),
    }
}

async fn many_with(setup: &Setup, pool: Option<u32>) -> Result<Run> {
    let client = client(&setup.url, pool).await?;
    let tag = pool.map_or("default".to_owned(), |n| format!("pool{n}"));
    let locks: Vec<Vec<AsyncRLock>> = (0..MANY_TASKS)
        .map(|t| {
            (0..MANY_NAMES_PER_TASK)
                .map(|j| client.get_lock(&format!("{}:redisson:many:{tag}:{t}:{j}", setup.prefix)))
                .collect()
        })
        .collect();
    let make = |t: usize| {
        let locks = locks[t].clone();
        move |i: u64| {
            let lock = locks[(i % MANY_NAMES_PER_TASK) as usize].clone();
            async move {
                let started = Instant::now();
                pair(&lock).await?;
                Ok(started.elapsed())
            }
        }
    };
    let measured = async {
        concurrent(None, "pairs", setup.warmup, MANY_TASKS, &make).await?;
        let cpu = server_cpu(&setup.url).await?;
        let label = format!("many redisson ({tag} pool)");
        let measured = concurrent(Some(&label), "pairs", setup.duration, MANY_TASKS, &make).await?;
        let cpu = (cpu, server_cpu(&setup.url).await?);
        all_free(&locks.concat()).await?;
        anyhow::Ok((measured, cpu))
    }
    .await;
    client.shutdown().await.map_err(err)?;
    let (mut measured, cpu) = measured?;
    Ok(Run::new(NAME, "", &mut measured).with_cpu(cpu))
}

/// `contended` with redisson: 8 clients (each with its own pool) on one lock, each through its
/// own `get_lock` of the same name.
pub async fn contended(setup: &Setup) -> Result<Run> {
    let name = format!("{}:contended:redisson", setup.prefix);
    let counter = format!("{name}:counter");
    let mut workers = Vec::new();
    for _ in 0..contended::CLIENTS {
        let client = client(&setup.url, None).await?;
        let lock = client.get_lock(&name);
        workers.push((client, lock, connect::plain(&setup.url).await?));
    }
    let make = |t: usize| {
        let (_, lock, conn) = &workers[t];
        let lock = lock.clone();
        let conn = conn.clone();
        let counter = counter.clone();
        move |_: u64| {
            let lock = lock.clone();
            let mut conn = conn.clone();
            let counter = counter.clone();
            async move {
                let asked = Instant::now();
                lock.lock().await.map_err(err)?;
                let waited = asked.elapsed();
                let value: Option<i64> = conn.get(&counter).await?;
                let _: () = conn.set(&counter, value.unwrap_or(0) + 1).await?;
                // Its answer says nothing (see `pair`); the counter check tells.
                lock.unlock().await.map_err(err)?;
                Ok(waited)
            }
        }
    };
    // Its scripts run neither GET nor SET, and it sends neither plainly: the GET and SET are
    // the workload's own. Its PINGs come with every pool checkout, so they are counted.
    let plain = Plain {
        get: false,
        set: false,
    };
    let run = contended::measure(setup, NAME, &counter, plain, Pings::PerOperation, make).await?;
    for (client, _, _) in &workers {
        client.shutdown().await.map_err(err)?;
    }
    Ok(run)
}
