//! The workloads, run with latchkey.

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use latchkey_redis::{Client, FairLock, Lock, RedLock};
use redis::aio::MultiplexedConnection;
use redis::AsyncCommands;

use super::contended;
use super::measure::{concurrent, sequential};
use super::{many_run, server_cpu, Run, Setup, MANY_NAMES_PER_TASK, SOLO_NAMES};
use crate::bench::commands::Plain;
use crate::connect;

/// How a solo pair gives the lock back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Release {
    /// `guard.unlock().await`: waits for Redis to confirm.
    Unlock,
    /// `drop(guard)`: the client's background task releases it.
    Drop,
}

/// `solo`: one client, lock+unlock pairs in sequence on 64 rotating names.
pub async fn solo(setup: &Setup, release: Release) -> Result<Run> {
    let client = connect::client(&setup.url, None).await?;
    let locks: Vec<Lock> = (0..SOLO_NAMES)
        .map(|i| client.lock(format!("{}:solo:{i}", setup.prefix)))
        .collect();
    let pair = |i: u64| {
        let lock = locks[(i % SOLO_NAMES) as usize].clone();
        async move {
            let started = Instant::now();
            let guard = lock.lock().await?;
            match release {
                Release::Unlock => guard.unlock().await?,
                Release::Drop => drop(guard),
            }
            Ok(started.elapsed())
        }
    };
    sequential(None, "pairs", setup.warmup, pair).await?;
    settle(&locks).await?;
    let (label, variant) = match release {
        Release::Unlock => ("solo latchkey unlock()", "unlock"),
        Release::Drop => ("solo latchkey drop", "drop"),
    };
    let cpu = server_cpu(&setup.url).await?;
    let mut measured = sequential(Some(label), "pairs", setup.duration, pair).await?;
    // A dropped guard's release is still on its way: the pairs are done when Redis has it.
    let settling = Instant::now();
    settle(&locks).await?;
    measured.elapsed += settling.elapsed();
    let cpu = (cpu, server_cpu(&setup.url).await?);
    Ok(Run::new("latchkey", variant, &mut measured).with_cpu(cpu))
}

/// Waits until none of `locks` is held any more (at most 5 s).
async fn settle(locks: &[Lock]) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(5);
    for lock in locks {
        while lock.is_locked().await? {
            if Instant::now() > deadline {
                bail!(
                    "the lock `{}` is still held 5 s after its guard was dropped",
                    lock.name()
                );
            }
            tokio::task::yield_now().await;
        }
    }
    Ok(())
}

/// `many`: 64 tasks on one client, each with its own names.
pub async fn many(setup: &Setup) -> Result<Run> {
    let client = connect::client(&setup.url, None).await?;
    let make = |t: usize| {
        let locks: Vec<Lock> = (0..MANY_NAMES_PER_TASK)
            .map(|j| client.lock(format!("{}:many:{t}:{j}", setup.prefix)))
            .collect();
        move |i: u64| {
            let lock = locks[(i % MANY_NAMES_PER_TASK) as usize].clone();
            async move {
                let started = Instant::now();
                lock.lock().await?.unlock().await?;
                Ok(started.elapsed())
            }
        }
    };
    many_run(setup, ("latchkey", ""), make).await
}

/// `many`'s floor: the same 64 tasks and names, each pair the two `EVALSHA` calls of a lock
/// pair with latchkey's keys and arguments (5 keys and 6 arguments, then 5 and 4) but scripts
/// that do nothing (`return {1, 1}`, `return 0`). What Redis spends on these is spent before a
/// lock script runs a command: the calls, their keys and arguments, Lua's setting up.
pub async fn many_floor(setup: &Setup) -> Result<Run> {
    let mut conn = connect::plain(&setup.url).await?;
    let acquire = redis::Script::new("return {1, 1}");
    let release = redis::Script::new("return 0");
    let acquire = acquire.prepare_invoke().load_async(&mut conn).await?;
    let release = release.prepare_invoke().load_async(&mut conn).await?;
    let owner = "0b5d7c8e-31f2-4a61-9c3e-5f0e2d7a9b14";
    let make = |t: usize| {
        let (conn, acquire, release) = (conn.clone(), acquire.clone(), release.clone());
        // Per name: the acquire's keys, then the release's.
        let keys: Vec<[Vec<String>; 2]> = (0..MANY_NAMES_PER_TASK)
            .map(|j| {
                let name = format!("{}:floor:{t}:{j}", setup.prefix);
                let key = |kind: &str| format!("{kind}:{{{name}}}");
                let queue = [
                    key("latchkey_lock_queue"),
                    key("latchkey_lock_alive"),
                    key("latchkey_lock_handoff"),
                ];
                [
                    [name.clone(), key("redisson_lock_token")].into_iter(),
                    [name.clone(), key("redisson_lock__channel")].into_iter(),
                ]
                .map(|head| head.chain(queue.iter().cloned()).collect())
            })
            .collect();
        move |i: u64| {
            let (mut conn, acquire, release) = (conn.clone(), acquire.clone(), release.clone());
            let [acquire_keys, release_keys] = keys[(i % MANY_NAMES_PER_TASK) as usize].clone();
            let field = format!("{owner}:{i}");
            async move {
                let started = Instant::now();
                let _: Vec<i64> = redis::cmd("EVALSHA")
                    .arg(&acquire)
                    .arg(5)
                    .arg(&acquire_keys)
                    .arg(&[30_000.to_string(), field.clone()])
                    // A client's wake id (62 bits), a first attempt's park (2 s), not queued,
                    // the counter's expiry.
                    .arg(&[4_611_686_018_427_387_904_u64, 2_000, 2, 90_000])
                    .query_async(&mut conn)
                    .await?;
                let _: i64 = redis::cmd("EVALSHA")
                    .arg(&release)
                    .arg(5)
                    .arg(&release_keys)
                    .arg(&["0", &field, "200", "publish"])
                    .query_async(&mut conn)
                    .await?;
                Ok(started.elapsed())
            }
        }
    };
    many_run(setup, ("latchkey", "floor"), make).await
}

/// The one lock of `contended` (a plain lock) or `fair` (a fair lock).
#[derive(Clone)]
enum OneLock {
    Plain(Lock),
    Fair(FairLock),
}

impl OneLock {
    /// One critical section: lock, `GET` + `SET` the counter (not atomic on purpose), unlock.
    /// Returns how long it waited for the lock.
    async fn section(&self, conn: &mut MultiplexedConnection, counter: &str) -> Result<Duration> {
        let asked = Instant::now();
        let waited;
        match self {
            OneLock::Plain(lock) => {
                let guard = lock.lock().await?;
                waited = asked.elapsed();
                increment(conn, counter).await?;
                guard.unlock().await?;
            }
            OneLock::Fair(lock) => {
                let guard = lock.lock().await?;
                waited = asked.elapsed();
                increment(conn, counter).await?;
                guard.unlock().await?;
            }
        }
        Ok(waited)
    }
}

async fn increment(conn: &mut MultiplexedConnection, counter: &str) -> Result<()> {
    let value: Option<i64> = conn.get(counter).await?;
    let _: () = conn.set(counter, value.unwrap_or(0) + 1).await?;
    Ok(())
}

/// `contended`: 8 clients on one lock, a GET + SET increment inside.
pub async fn contended(setup: &Setup) -> Result<Run> {
    let name = format!("{}:contended:latchkey", setup.prefix);
    sections(setup, &name, |client| {
        OneLock::Plain(client.lock(name.clone()))
    })
    .await
}

/// `fair`: `contended` with a fair lock (8 clients, FIFO across them).
pub async fn fair(setup: &Setup) -> Result<Run> {
    let name = format!("{}:fair:latchkey", setup.prefix);
    sections(setup, &name, |client| {
        OneLock::Fair(client.fair_lock(name.clone()))
    })
    .await
}

/// 8 clients (separate connections) doing critical sections on the lock `make` gives each.
async fn sections(setup: &Setup, name: &str, make: impl Fn(&Client) -> OneLock) -> Result<Run> {
    let counter = format!("{name}:counter");
    let mut workers = Vec::new();
    for _ in 0..contended::CLIENTS {
        let client = connect::client(&setup.url, None).await?;
        let lock = make(&client);
        let conn = connect::plain(&setup.url).await?;
        workers.push((client, lock, conn));
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
            async move { lock.section(&mut conn, &counter).await }
        }
    };
    let no_plain = Plain {
        get: false,
        set: false,
    };
    let pings = contended::Pings::HealthChecks;
    contended::measure(setup, "latchkey", &counter, no_plain, pings, make).await
}

/// A `redlock3` run: the workload itself, or one of two variants that show what fencing and
/// concurrency cost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RedLockRun {
    /// `solo` over 3 servers: one task, fenced (the default).
    Solo,
    /// The same without fencing tokens (one round trip less per acquire).
    Unfenced,
    /// 8 tasks at once, fenced, each on its own names.
    Tasks8,
}

impl RedLockRun {
    /// The run's `variant` in the report.
    pub fn variant(self) -> &'static str {
        match self {
            RedLockRun::Solo => "",
            RedLockRun::Unfenced => "unfenced",
            RedLockRun::Tasks8 => "8 tasks",
        }
    }
}

/// `redlock3`: `solo` over 3 independent servers, or one of its variants.
pub async fn redlock3(setup: &Setup, urls: &[String], run: RedLockRun) -> Result<Run> {
    let mut clients = Vec::new();
    for url in urls {
        clients.push(connect::client(url, None).await?);
    }
    let (tasks, fencing) = match run {
        RedLockRun::Solo => (1, true),
        RedLockRun::Unfenced => (1, false),
        RedLockRun::Tasks8 => (8, true),
    };
    let per_task = SOLO_NAMES / tasks as u64;
    let locks: Vec<RedLock> = (0..SOLO_NAMES)
        .map(|i| {
            RedLock::builder(format!("{}:redlock:{i}", setup.prefix), clients.clone())
                .fencing(fencing)
                .build()
        })
        .collect::<latchkey_redis::Result<_>>()
        .context("making the RedLocks")?;
    // Task `t` rotates over names t*per_task .. (t+1)*per_task: no two tasks share a lock.
    let make = |t: usize| {
        let locks = locks.clone();
        move |i: u64| {
            let lock = locks[(t as u64 * per_task + i % per_task) as usize].clone();
            async move {
                let started = Instant::now();
                lock.lock().await?.unlock().await?;
                Ok(started.elapsed())
            }
        }
    };
    let label = match run {
        RedLockRun::Solo => "redlock3 latchkey".to_owned(),
        other => format!("redlock3 latchkey, {}", other.variant()),
    };
    let mut measured = if tasks == 1 {
        sequential(None, "pairs", setup.warmup, make(0)).await?;
        sequential(Some(&label), "pairs", setup.duration, make(0)).await?
    } else {
        concurrent(None, "pairs", setup.warmup, tasks, &make).await?;
        concurrent(Some(&label), "pairs", setup.duration, tasks, &make).await?
    };
    Ok(Run::new("latchkey", run.variant(), &mut measured))
}
