//! `limiter`: rate limiter decisions per second and what each costs Redis, at 10 and 10,000
//! permits per second, with `--tasks` tasks deciding at once on one limited name; and what a
//! limited key costs in memory.
//!
//! Run in the same run, one after another at each rate: latchkey's [`RateLimiter`] (Redisson's
//! sliding window, `try_acquire(1, 0)`), latchkey's [`GcraLimiter`] (`check(key, 1)` on one
//! key), the `redisson` crate's `AsyncRRateLimiter` (`try_acquire(1.0)`), and Redisson's own
//! `tryAcquire` script (`redisson_try_acquire.lua`, sent with `EVALSHA` and the caller's clock
//! as Redisson sends it) on a limiter in the same layout. At 10/s nearly every decision is a
//! refusal, at 10,000/s most are admissions (or all, when the machine decides fewer than
//! 10,000 a second): the two rates show what each costs.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use latchkey_redis::{Client, GcraLimiter, Quota, RateLimiter, RateType};
use redis::aio::MultiplexedConnection;
use redisson::AsyncRRateLimiter;
use serde::Serialize;

use super::commands::{self, Calls, Plain};
use super::measure::{concurrent, Latency, Measured};
use super::{peer_redisson, server_cpu, us, CpuMark, Setup};
use crate::connect;
use crate::stats::thousands;
use crate::ui::Table;

/// The rates measured, permits per [`INTERVAL`].
pub const RATES: [u64; 2] = [10, 10_000];

/// Every limiter's interval.
const INTERVAL: Duration = Duration::from_secs(1);

/// The distinct GCRA keys checked once each for the memory figure.
pub const GCRA_KEYS: u32 = 10_000;

/// Redisson's `RRateLimiter.tryAcquire`, written again from its source (see the script's
/// header).
static REDISSON_TRY_ACQUIRE: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new(include_str!("redisson_try_acquire.lua")));

/// `library` of the runs of Redisson's own script.
pub const REDISSON_SCRIPT: &str = "Redisson script";

/// One limiter at one rate.
#[derive(Clone, Debug, Serialize)]
pub struct LimiterRun {
    /// `latchkey`, `redisson` (the crate) or `Redisson script`.
    pub library: &'static str,
    /// `window`, `gcra` or `token bucket`.
    pub limiter: &'static str,
    /// Permits per second.
    pub rate: u64,
    /// Decisions made in the measured window.
    pub decisions: u64,
    /// The window, in seconds.
    pub seconds: f64,
    /// `decisions / seconds`.
    pub per_second: f64,
    /// Decisions that admitted, per second.
    pub admitted_per_s: f64,
    /// Decisions that admitted in the whole run, warm-up included.
    pub admitted_total: u64,
    /// How long a decision took.
    pub latency: Latency,
    /// CPU time the Redis server used per decision, in µs (`INFO cpu`, user + system).
    pub redis_cpu_us_per_op: f64,
    /// CPU time this process used per decision, in µs.
    pub client_cpu_us_per_op: f64,
    /// Commands clients sent per decision (see `commands.rs`: script calls, and the PINGs of
    /// a pool's checkouts).
    pub commands_per_decision: f64,
    /// Those commands, by name.
    pub client_sent: Calls,
    /// The limiter's keys right after the run: name (its role) and `MEMORY USAGE … SAMPLES 0`.
    pub keys: Vec<KeyMemory>,
    /// Members of the window's log (its sorted set) right after the run, for a window.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_members: Option<u64>,
}

/// One key of a limiter and its memory.
#[derive(Clone, Debug, Serialize)]
pub struct KeyMemory {
    /// What the key is (`config`, `value`, `permits`, `tat`, …).
    pub role: &'static str,
    /// `MEMORY USAGE`, bytes (0 when the key is gone).
    pub bytes: u64,
}

/// What one GCRA key costs.
#[derive(Clone, Debug, Serialize)]
pub struct GcraMemory {
    /// Distinct keys checked once each.
    pub keys: u32,
    /// `used_memory` after − before, bytes.
    pub used_memory_delta: i64,
    /// Of that, what the normal clients' buffers grew by (`MEMORY STATS` `clients.normal`):
    /// not the keys' cost, so left out of `bytes_per_key`.
    pub clients_delta: i64,
    /// `(used_memory_delta − clients_delta) / keys`.
    pub bytes_per_key: f64,
    /// `MEMORY USAGE` of one of them.
    pub memory_usage_one_key: u64,
    /// The length of that key's name, bytes (part of the above).
    pub key_name_len: usize,
}

/// Everything `limiter` found.
#[derive(Clone, Debug, Serialize)]
pub struct LimiterResult {
    /// Tasks deciding at once.
    pub tasks: u32,
    /// The runs, by rate, latchkey's window first.
    pub runs: Vec<LimiterRun>,
    /// The memory of GCRA keys.
    pub gcra_memory: GcraMemory,
    /// What the redisson crate's limiter is, and how it was measured.
    pub redisson_note: String,
    /// Whether the redisson crate's limiter wrote its refill time in any run (it never does:
    /// see [`refill_note`]); `None` when it did not run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redisson_refilled: Option<bool>,
}

/// What decides: one decision per call, `Ok(true)` when it admitted.
#[derive(Clone)]
enum Decider {
    Window(RateLimiter),
    Gcra(GcraLimiter),
    Crate(Arc<AsyncRRateLimiter>),
    Script {
        conn: MultiplexedConnection,
        keys: Arc<[String; 5]>,
    },
}

impl Decider {
    async fn decide(&self) -> Result<bool> {
        match self {
            Decider::Window(limiter) => Ok(limiter.try_acquire(1, Duration::ZERO).await?),
            Decider::Gcra(limiter) => Ok(limiter.check(GCRA_KEY, 1).await?.is_admitted()),
            Decider::Crate(limiter) => limiter
                .try_acquire(1.0)
                .await
                .map_err(|e| anyhow::anyhow!("redisson: {e}")),
            Decider::Script { conn, keys } => {
                let mut conn = conn.clone();
                let now_ms = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as u64);
                let random: [u8; 16] = rand::random();
                let mut invocation = REDISSON_TRY_ACQUIRE.prepare_invoke();
                for key in keys.iter() {
                    invocation.key(key);
                }
                let wait: Option<i64> = invocation
                    .arg(1)
                    .arg(now_ms)
                    .arg(&random[..])
                    .invoke_async(&mut conn)
                    .await?;
                Ok(wait.is_none())
            }
        }
    }
}

/// The one entity every task of a GCRA run decides for.
const GCRA_KEY: &str = "one";

/// Runs the workload: every limiter at every rate, then the GCRA memory figure.
pub async fn run(setup: &Setup, tasks: u32, peers: bool) -> Result<LimiterResult> {
    let mut admin = connect::plain(&setup.url).await?;
    let ours = connect::client(&setup.url, None).await?;
    // One pool connection per task: with fewer, its pool can deadlock (see
    // `peer_redisson::many`).
    let pool = tasks.max(10);
    let crate_client = if peers {
        Some(peer_redisson::client(&setup.url, Some(pool)).await?)
    } else {
        None
    };
    let script_conn = connect::plain(&setup.url).await?;
    let mut runs = Vec::new();
    let mut redisson_refilled = None;
    for rate in RATES {
        let base = format!("{}:limiter:{rate}", setup.prefix);

        let window = ours.rate_limiter(format!("{base}:window"));
        window
            .set_rate(RateType::Overall, rate, INTERVAL)
            .await
            .context("setting the window's rate")?;
        let keys = window_keys(window.name());
        let mut run = decide(
            setup,
            tasks,
            "latchkey",
            "window",
            rate,
            Decider::Window(window),
        )
        .await?;
        window_memory(&mut admin, &keys, &mut run).await?;
        runs.push(run);

        let quota = Quota::per_second(rate as u32);
        let gcra = ours.gcra_limiter(format!("{base}:gcra"), quota);
        let key = gcra_key(gcra.name(), GCRA_KEY);
        let mut run = decide(setup, tasks, "latchkey", "gcra", rate, Decider::Gcra(gcra)).await?;
        run.keys = vec![KeyMemory {
            role: "tat",
            bytes: memory_usage(&mut admin, &key).await?,
        }];
        runs.push(run);

        let Some(crate_client) = &crate_client else {
            continue;
        };
        let name = format!("{base}:redisson-crate");
        let limiter = crate_client.get_rate_limiter(&name, rate as f64, rate as f64);
        let mut run = decide(
            setup,
            tasks,
            peer_redisson::NAME,
            "token bucket",
            rate,
            Decider::Crate(Arc::new(limiter)),
        )
        .await?;
        run.keys = vec![
            KeyMemory {
                role: "tokens",
                bytes: memory_usage(&mut admin, &name).await?,
            },
            KeyMemory {
                role: "last_refill",
                bytes: memory_usage(&mut admin, &format!("{name}:last_refill")).await?,
            },
        ];
        let refilled: bool = redis::cmd("EXISTS")
            .arg(format!("{name}:last_refill"))
            .query_async(&mut admin)
            .await?;
        redisson_refilled = Some(redisson_refilled.unwrap_or(false) || refilled);
        runs.push(run);

        // The same layout as latchkey's window: latchkey sets the rate, Redisson's script
        // decides, as a Java service sharing the limiter would.
        let shared = ours.rate_limiter(format!("{base}:redisson-script"));
        shared
            .set_rate(RateType::Overall, rate, INTERVAL)
            .await
            .context("setting the rate of the limiter Redisson's script uses")?;
        let keys = window_keys(shared.name());
        let client_id = format!("{:032x}", rand::random::<u128>());
        let script_keys = [
            keys[0].1.clone(),
            keys[1].1.clone(),
            format!("{}:{client_id}", keys[1].1),
            keys[2].1.clone(),
            format!("{}:{client_id}", keys[2].1),
        ];
        let decider = Decider::Script {
            conn: script_conn.clone(),
            keys: Arc::new(script_keys),
        };
        let mut run = decide(setup, tasks, REDISSON_SCRIPT, "window", rate, decider).await?;
        window_memory(&mut admin, &keys, &mut run).await?;
        runs.push(run);
    }
    if let Some(client) = crate_client {
        client
            .shutdown()
            .await
            .map_err(|e| anyhow::anyhow!("redisson: {e}"))?;
    }
    let gcra_memory = gcra_memory(setup, &ours, &mut admin, tasks).await?;
    Ok(LimiterResult {
        tasks,
        runs,
        gcra_memory,
        redisson_note: format!(
            "its limiter (AsyncRRateLimiter from get_rate_limiter(name, rate, capacity = rate)) \
             is a token bucket whose script refills from a `<name>:last_refill` time (the \
             client's clock, whole seconds) that it writes only when it refills, and it refills \
             only from a time written before: the time is never written, so the bucket never \
             refills, and the limiter admits its capacity once and refuses everything after. \
             Its figures are the cost of its decisions, not of a working limit. Its client had \
             a pool of {pool} connections (one per task: its default 10 can deadlock under more \
             tasks, see `many`); each decision checks one out with a PING"
        ),
        redisson_refilled,
    })
}

/// Decisions by `tasks` tasks: a warm-up, then the measured window with the server's CPU and
/// the commands sent around it.
async fn decide(
    setup: &Setup,
    tasks: u32,
    library: &'static str,
    limiter: &'static str,
    rate: u64,
    decider: Decider,
) -> Result<LimiterRun> {
    let admitted = Arc::new(AtomicU64::new(0));
    let make = |_: usize| {
        let decider = decider.clone();
        let admitted = admitted.clone();
        move |_: u64| {
            let decider = decider.clone();
            let admitted = admitted.clone();
            async move {
                let started = Instant::now();
                if decider.decide().await? {
                    admitted.fetch_add(1, Ordering::Relaxed);
                }
                Ok(started.elapsed())
            }
        }
    };
    let tasks = tasks as usize;
    concurrent(None, "decisions", setup.warmup, tasks, &make)
        .await
        .with_context(|| format!("{library} {limiter} at {rate}/s"))?;
    let mut admin = connect::plain(&setup.url).await?;
    // The CPU is read on a connection of its own, outside the command count's edges.
    let cpu_before = server_cpu(&setup.url).await?;
    let calls_before = commands::snapshot(&mut admin).await?;
    let admitted_before = admitted.load(Ordering::Relaxed);
    let label = format!("limiter {library} {limiter} {rate}/s");
    let measured = concurrent(Some(&label), "decisions", setup.duration, tasks, &make)
        .await
        .with_context(|| format!("{library} {limiter} at {rate}/s"))?;
    let admitted_total = admitted.load(Ordering::Relaxed);
    let admitted = admitted_total - admitted_before;
    let calls_after = commands::snapshot(&mut admin).await?;
    let cpu_after = server_cpu(&setup.url).await?;
    let plain = Plain {
        get: false,
        set: false,
    };
    let client_sent =
        commands::client_sent(&commands::delta(&calls_before, &calls_after), plain, 0, 0);
    let mut run = limiter_run(
        library,
        limiter,
        rate,
        measured,
        admitted,
        (cpu_before, cpu_after),
        client_sent,
    );
    run.admitted_total = admitted_total;
    Ok(run)
}

fn limiter_run(
    library: &'static str,
    limiter: &'static str,
    rate: u64,
    mut measured: Measured,
    admitted: u64,
    (before, after): (CpuMark, CpuMark),
    client_sent: Calls,
) -> LimiterRun {
    let decisions = measured.count.max(1) as f64;
    let seconds = measured.elapsed.as_secs_f64();
    LimiterRun {
        library,
        limiter,
        rate,
        decisions: measured.count,
        seconds,
        per_second: measured.rate(),
        admitted_per_s: admitted as f64 / seconds.max(1e-9),
        admitted_total: admitted,
        latency: Latency::of(&mut measured.samples),
        redis_cpu_us_per_op: (after.server - before.server) * 1e6 / decisions,
        client_cpu_us_per_op: (after.client - before.client) * 1e6 / decisions,
        commands_per_decision: client_sent.values().sum::<u64>() as f64 / decisions,
        client_sent,
        keys: Vec::new(),
        log_members: None,
    }
}

/// The keys of an overall window limiter named `name` (no namespace, no hash tag in the name):
/// its config, counter and log, in Redisson's layout.
fn window_keys(name: &str) -> [(&'static str, String); 3] {
    [
        ("config", name.to_owned()),
        ("value", format!("{{{name}}}:value")),
        ("permits", format!("{{{name}}}:permits")),
    ]
}

/// The Redis key of GCRA entity `key` of limiter `name` (documented on `GcraLimiter`).
fn gcra_key(name: &str, key: &str) -> String {
    format!("latchkey_gcra:{}:{name}:{key}", name.len())
}

/// Records the memory of a window's keys and the members of its log.
async fn window_memory(
    admin: &mut MultiplexedConnection,
    keys: &[(&'static str, String); 3],
    run: &mut LimiterRun,
) -> Result<()> {
    for (role, key) in keys {
        let bytes = memory_usage(admin, key).await?;
        run.keys.push(KeyMemory { role, bytes });
    }
    let members: u64 = redis::cmd("ZCARD")
        .arg(&keys[2].1)
        .query_async(admin)
        .await?;
    run.log_members = Some(members);
    Ok(())
}

/// `MEMORY USAGE key SAMPLES 0` (every element counted); 0 when the key does not exist.
async fn memory_usage(admin: &mut MultiplexedConnection, key: &str) -> Result<u64> {
    let bytes: Option<u64> = redis::cmd("MEMORY")
        .arg("USAGE")
        .arg(key)
        .arg("SAMPLES")
        .arg(0)
        .query_async(admin)
        .await?;
    Ok(bytes.unwrap_or(0))
}

/// `MEMORY STATS` `total.allocated` (`used_memory`) and `clients.normal`, bytes.
async fn used_memory(admin: &mut MultiplexedConnection) -> Result<(i64, i64)> {
    let stats: Vec<redis::Value> = redis::cmd("MEMORY").arg("STATS").query_async(admin).await?;
    let field = |name: &str| -> Result<i64> {
        let at = stats
            .iter()
            .position(|v| {
                matches!(v, redis::Value::BulkString(b) if b == name.as_bytes())
                    || matches!(v, redis::Value::SimpleString(s) if s == name)
            })
            .with_context(|| format!("MEMORY STATS has no {name}"))?;
        match stats.get(at + 1) {
            Some(redis::Value::Int(n)) => Ok(*n),
            other => bail!("MEMORY STATS {name} is {other:?}"),
        }
    };
    Ok((field("total.allocated")?, field("clients.normal")?))
}

/// Checks [`GCRA_KEYS`] distinct keys once each and measures what they added to the server's
/// memory. The quota is 10 an hour so that every key lives (until its bucket is empty, 6
/// minutes) while it is measured; a key's size does not depend on the quota. The keys are
/// deleted afterwards.
async fn gcra_memory(
    setup: &Setup,
    client: &Client,
    admin: &mut MultiplexedConnection,
    tasks: u32,
) -> Result<GcraMemory> {
    let limiter = client.gcra_limiter(
        format!("{}:limiter:keys", setup.prefix),
        Quota::per_hour(10),
    );
    let names: Vec<String> = (0..GCRA_KEYS).map(|i| format!("user:{i:05}")).collect();
    let before = used_memory(admin).await?;
    // Each check in a task of its own, `tasks` at a time.
    let mut checks = tokio::task::JoinSet::new();
    let mut decisions = Vec::with_capacity(names.len());
    for key in &names {
        if checks.len() >= tasks as usize {
            if let Some(done) = checks.join_next().await {
                decisions.push(done.context("a GCRA check panicked")??);
            }
        }
        let (limiter, key) = (limiter.clone(), key.clone());
        checks.spawn(async move { limiter.check(&key, 1).await.map(|d| d.is_admitted()) });
    }
    while let Some(done) = checks.join_next().await {
        decisions.push(done.context("a GCRA check panicked")??);
    }
    let after = used_memory(admin).await?;
    if decisions.iter().any(|admitted| !admitted) {
        bail!("a first check of a fresh GCRA key was refused");
    }
    let one = gcra_key(limiter.name(), &names[0]);
    let memory_usage_one_key = memory_usage(admin, &one).await?;
    if memory_usage_one_key == 0 {
        bail!("the GCRA key `{one}` is not there: did its naming change?");
    }
    for chunk in names.chunks(1000) {
        let mut unlink = redis::cmd("UNLINK");
        for key in chunk {
            unlink.arg(gcra_key(limiter.name(), key));
        }
        let _: i64 = unlink.query_async(admin).await?;
    }
    let delta = after.0 - before.0;
    let clients_delta = after.1 - before.1;
    Ok(GcraMemory {
        keys: GCRA_KEYS,
        used_memory_delta: delta,
        clients_delta,
        bytes_per_key: (delta - clients_delta) as f64 / f64::from(GCRA_KEYS),
        memory_usage_one_key,
        key_name_len: one.len(),
    })
}

/// The text section of `limiter`.
pub fn render(result: &LimiterResult) -> String {
    let mut out = format!(
        "\nlimiter: {} tasks on one client per library, rates per 1 s; a decision is \
         try_acquire(1, 0) (window), check(key, 1) on one key (gcra), try_acquire(1.0) \
         (redisson's token bucket), or one EVALSHA of Redisson's tryAcquire script with the \
         client's clock ({REDISSON_SCRIPT}, on a window whose rate latchkey set)\n\n",
        result.tasks
    );
    let mut table = Table::new(
        &[
            "rate/s",
            "library",
            "limiter",
            "decisions/s",
            "admitted/s",
            "p50 / p99",
            "CPU/decision: Redis / client",
            "cmds/decision",
            "keys after the run",
            "÷ window",
            "Redis CPU ÷ window",
        ],
        3,
    );
    for run in &result.runs {
        let window = result
            .runs
            .iter()
            .find(|r| r.library == "latchkey" && r.limiter == "window" && r.rate == run.rate);
        let (ratio, cpu_ratio) = match window {
            Some(w) => (
                format!("{:.2}×", run.per_second / w.per_second.max(1e-9)),
                format!(
                    "{:.2}×",
                    run.redis_cpu_us_per_op / w.redis_cpu_us_per_op.max(1e-9)
                ),
            ),
            None => (String::new(), String::new()),
        };
        let bytes: u64 = run.keys.iter().map(|k| k.bytes).sum();
        let keys = match run.log_members {
            Some(n) => format!(
                "{} B ({} in log)",
                thousands(bytes as f64),
                thousands(n as f64)
            ),
            None => format!("{} B", thousands(bytes as f64)),
        };
        table.row(vec![
            thousands(run.rate as f64),
            run.library.to_owned(),
            run.limiter.to_owned(),
            thousands(run.per_second),
            thousands(run.admitted_per_s),
            format!("{} / {}", us(run.latency.p50_us), us(run.latency.p99_us)),
            format!(
                "{:.1} / {:.1} µs",
                run.redis_cpu_us_per_op, run.client_cpu_us_per_op
            ),
            format!("{:.2}", run.commands_per_decision),
            keys,
            ratio,
            cpu_ratio,
        ]);
    }
    out.push_str(&table.render());
    let g = &result.gcra_memory;
    out.push_str(&format!(
        "\nGCRA memory per limited key: {} keys checked once: used_memory {:+} B, of which \
         client buffers {:+} B, so {:.0} B per key; MEMORY USAGE of one: {} B (its name is {} \
         B)\n",
        thousands(f64::from(g.keys)),
        g.used_memory_delta,
        g.clients_delta,
        g.bytes_per_key,
        g.memory_usage_one_key,
        g.key_name_len
    ));
    if let Some(refilled) = result.redisson_refilled {
        out.push_str(&format!("\nredisson on limiter: {}", result.redisson_note));
        out.push_str(&refill_note(result, refilled));
    }
    out.push_str(
        "\n÷ window = the row's decisions/s over latchkey's window's at the same rate (same \
         run); Redis CPU ÷ window likewise for the Redis CPU per decision. keys after the run: \
         MEMORY USAGE (SAMPLES 0) of the limiter's keys right after the run; a window's log \
         holds one member per grant of the last interval.\n",
    );
    out
}

/// What this run saw of the redisson crate's refill: whether `<name>:last_refill` was ever
/// written, and what the limiter admitted in all.
fn refill_note(result: &LimiterResult, refilled: bool) -> String {
    let admitted: Vec<String> = result
        .runs
        .iter()
        .filter(|r| r.library == peer_redisson::NAME)
        .map(|r| {
            format!(
                "{} at {}/s",
                thousands(r.admitted_total as f64),
                thousands(r.rate as f64)
            )
        })
        .collect();
    format!(
        ". In this run `<name>:last_refill` was {}, and it admitted {} in all (warm-up and \
         window).\n",
        if refilled { "written" } else { "never written" },
        admitted.join(" and "),
    )
}
