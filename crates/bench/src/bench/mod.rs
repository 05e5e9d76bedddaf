//! The workloads of `latchkey-bench`: latchkey next to the peers rslock and redisson (the Rust
//! crate) and the same run's ceiling, with the targets from the issue tracker (all of them
//! against rslock or the ceiling).

mod ceiling;
mod commands;
mod contended;
mod delayed;
mod held;
mod limiter;
mod measure;
mod ours;
mod peer;
mod peer_redisson;
mod scheduler;

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde::Serialize;

use crate::connect::{self, Target};
use crate::duration::human;
use crate::opt::{BenchOpt, ConnectOpts, Workload};
use crate::server::EmbeddedRedis;
use crate::stats::thousands;
use crate::ui::Table;
use ceiling::Ceiling;
use commands::Calls;
use delayed::DelayedResult;
use limiter::LimiterResult;
use measure::{Latency, Measured};
use scheduler::SchedulerResult;

/// `solo` and `redlock3` rotate over this many names.
pub const SOLO_NAMES: u64 = 64;
/// `many` runs this many tasks…
pub const MANY_TASKS: usize = 64;
/// …each over this many names of its own.
pub const MANY_NAMES_PER_TASK: u64 = 4;

/// The Redis servers of a run, started (if private) before the runtime.
#[derive(Debug)]
pub struct Targets {
    main: Target,
    redlock: Vec<Target>,
    redlock_skipped: Option<String>,
    workloads: Vec<Workload>,
}

/// What every workload needs.
#[derive(Debug)]
pub struct Setup {
    url: String,
    prefix: String,
    warmup: Duration,
    duration: Duration,
}

/// One library on one workload.
#[derive(Clone, Debug, Serialize)]
pub struct Run {
    /// `latchkey`, `rslock` or `redisson`.
    pub library: &'static str,
    /// `unlock` or `drop` for solo; `unfenced` or `8 tasks` for redlock3; `pool 64` for
    /// redisson's many when its default pool failed (see [`Report::peer_notes`]); empty
    /// otherwise.
    pub variant: &'static str,
    /// Pairs or critical sections completed in the measured window.
    pub count: u64,
    /// The measured window, in seconds.
    pub seconds: f64,
    /// `count / seconds`.
    pub per_second: f64,
    /// Pair latency, or (contended) the wait for the lock.
    pub latency: Latency,
    /// Operations per task, fewest first (how evenly the lock was shared).
    pub per_task: Vec<u64>,
    /// CPU time the (main) Redis server used per operation in the measured window, in µs
    /// (`INFO cpu`, user + system).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redis_cpu_us_per_op: Option<f64>,
    /// CPU time this process (the clients) used per operation in the measured window, in µs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_cpu_us_per_op: Option<f64>,
    /// `contended`: the commands clients sent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub commands: Option<Commands>,
    /// `contended`: the counter check.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub counter: Option<CounterCheck>,
}

impl Run {
    fn new(library: &'static str, variant: &'static str, measured: &mut Measured) -> Run {
        Run {
            library,
            variant,
            count: measured.count,
            seconds: measured.elapsed.as_secs_f64(),
            per_second: measured.rate(),
            latency: Latency::of(&mut measured.samples),
            per_task: measured.per_task.clone(),
            redis_cpu_us_per_op: None,
            client_cpu_us_per_op: None,
            commands: None,
            counter: None,
        }
    }

    /// Adds the server's and the clients' CPU time per operation, from two [`server_cpu`]
    /// readings.
    fn with_cpu(mut self, (before, after): (CpuMark, CpuMark)) -> Run {
        let per_op = |seconds: f64| Some(seconds * 1e6 / self.count.max(1) as f64);
        self.redis_cpu_us_per_op = per_op(after.server - before.server);
        self.client_cpu_us_per_op = per_op(after.client - before.client);
        self
    }
}

/// CPU time used so far, in seconds.
#[derive(Clone, Copy, Debug)]
pub struct CpuMark {
    server: f64,
    client: f64,
}

/// `many`'s run for one library (or variant): `MANY_TASKS` tasks made by `make`, a warm-up, then
/// the measured window with the server's CPU read at its edges.
pub async fn many_run<M, F, Fut>(
    setup: &Setup,
    (library, variant): (&'static str, &'static str),
    make: M,
) -> Result<Run>
where
    M: Fn(usize) -> F,
    F: FnMut(u64) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<Duration>> + Send,
{
    measure::concurrent(None, "pairs", setup.warmup, MANY_TASKS, &make).await?;
    let cpu = server_cpu(&setup.url).await?;
    let label = format!("many {library} {variant}");
    let mut measured = measure::concurrent(
        Some(label.trim_end()),
        "pairs",
        setup.duration,
        MANY_TASKS,
        &make,
    )
    .await?;
    let cpu = (cpu, server_cpu(&setup.url).await?);
    Ok(Run::new(library, variant, &mut measured).with_cpu(cpu))
}

/// The CPU time (user + system) the Redis server at `url`, and this process, have used so far.
pub async fn server_cpu(url: &str) -> Result<CpuMark> {
    let server = redis_cpu(url).await?;
    Ok(CpuMark {
        server,
        client: crate::sys::process_cpu().as_secs_f64(),
    })
}

/// The CPU time (user + system, seconds) a Redis server has used so far, from `INFO cpu`.
async fn redis_cpu(url: &str) -> Result<f64> {
    let mut conn = connect::plain(url).await?;
    let info: String = redis::cmd("INFO").arg("cpu").query_async(&mut conn).await?;
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    Ok(field("used_cpu_user:") + field("used_cpu_sys:"))
}

/// Redis commands of the `contended` workload.
#[derive(Clone, Debug, Serialize)]
pub struct Commands {
    /// Commands clients sent, per critical section, health-check PINGs aside.
    pub per_section: f64,
    /// How far `per_section` can be off from the steady state by the window's edges alone:
    /// each client has at most one command in flight at each edge, counted without its section
    /// or the other way round (2 × clients ÷ sections). A target is judged within it.
    pub edge_allowance: f64,
    /// Health-check PINGs sent in the window (they come with time, not with sections).
    pub health_checks: u64,
    /// Commands clients sent, by name (see `commands.rs` for how they are told apart).
    pub client_sent: Calls,
    /// Every `INFO commandstats` delta, commands run inside scripts included.
    pub all_deltas: Calls,
}

/// The final counter of `contended` against the number of critical sections.
#[derive(Clone, Debug, Serialize)]
pub struct CounterCheck {
    /// Critical sections run (warm-up included).
    pub expected: u64,
    /// The counter's value.
    pub found: i64,
    /// Whether they match.
    pub ok: bool,
}

/// A target from the issues, checked against a figure.
#[derive(Clone, Debug, Serialize)]
pub struct Check {
    /// Workload.
    pub workload: &'static str,
    /// What is compared.
    pub figure: &'static str,
    /// The target, as text.
    pub target: String,
    /// The figure.
    pub value: f64,
    /// Whether the target is met.
    pub met: bool,
}

/// Everything a run found.
#[derive(Debug, Serialize)]
pub struct Report {
    /// The command that made it.
    pub command: String,
    /// Where it ran.
    pub machine: Machine,
    /// The Redis it used.
    pub redis: String,
    /// Seconds per timed workload.
    pub duration_s: f64,
    /// The tokio runtime the clients ran on: `current-thread` or `multi-thread`.
    pub runtime: &'static str,
    /// The same run's limit.
    pub ceiling: Option<Ceiling>,
    /// `solo` (unlock and drop variants), with the peer.
    pub solo: Vec<Run>,
    /// `many`.
    pub many: Vec<Run>,
    /// `contended`.
    pub contended: Vec<Run>,
    /// `fair` (latchkey only: rslock has no fair lock, redisson's does not wait).
    pub fair: Vec<Run>,
    /// `redlock3`, with its `unfenced` and `8 tasks` variants (latchkey only).
    pub redlock3: Vec<Run>,
    /// Why redlock3 did not run, if it did not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redlock3_skipped: Option<String>,
    /// `delayed`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delayed: Option<DelayedResult>,
    /// `held`: pairs while the client holds 100, 10k and 50k locks.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub held: Vec<held::HeldRun>,
    /// `limiter`: decisions at 10/s and 10,000/s, and memory per limited key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limiter: Option<LimiterResult>,
    /// `scheduler`: lateness of jobs due at once on 3 nodes, and idle calls per second.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scheduler: Option<SchedulerResult>,
    /// What a peer could not do on a workload that ran: left out (it has the primitive but not
    /// what the workload needs), or measured otherwise than with its defaults, and why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub peer_notes: Vec<PeerNote>,
    /// The targets.
    pub checks: Vec<Check>,
    /// False if a correctness check failed (contended counter, delayed lost or duplicated,
    /// a scheduled occurrence missed or run twice).
    pub correct: bool,
}

/// What a peer could not do on a workload.
#[derive(Clone, Debug, Serialize)]
pub struct PeerNote {
    /// The workload.
    pub workload: &'static str,
    /// The peer.
    pub library: &'static str,
    /// What happened, and why.
    pub note: String,
}

/// The machine, for the record.
#[derive(Debug, Serialize)]
pub struct Machine {
    /// CPUs available.
    pub nproc: usize,
    /// The CPU model, from /proc/cpuinfo.
    pub cpu: String,
    /// 1, 5 and 15 minute load averages before the run.
    pub load_before: [f64; 3],
    /// And after it.
    pub load_after: [f64; 3],
    /// `INFO server` `redis_version`.
    pub redis_version: String,
}

/// Starts the servers the chosen workloads need: the main one (unless given) and, for
/// `redlock3`, three independent ones (unless given with `--redlock-redis`).
pub fn targets(opt: &BenchOpt) -> Result<Targets> {
    let mut workloads = if opt.workloads.is_empty() {
        vec![
            Workload::Ceiling,
            Workload::Solo,
            Workload::Many,
            Workload::Contended,
            Workload::Fair,
            Workload::Redlock3,
            Workload::Delayed,
            Workload::Held,
            Workload::Limiter,
            Workload::Scheduler,
        ]
    } else {
        opt.workloads.clone()
    };
    workloads.push(Workload::Ceiling); // every figure is shown as a fraction of it
    workloads.sort();
    workloads.dedup();
    if !opt.redlock_redis.is_empty() && opt.redlock_redis.len() != 3 {
        bail!("--redlock-redis needs exactly 3 URLs, comma-separated");
    }
    let main = Target::given_or_private(&opt.connect, false)?;
    let mut redlock = Vec::new();
    let mut redlock_skipped = None;
    if workloads.contains(&Workload::Redlock3) {
        if !opt.redlock_redis.is_empty() {
            for url in &opt.redlock_redis {
                redlock.push(Target::given_or_default(&ConnectOpts {
                    redis: Some(url.clone()),
                }));
            }
        } else {
            for _ in 0..3 {
                match EmbeddedRedis::start() {
                    Ok(server) => redlock.push(Target {
                        url: server.url(),
                        embedded: Some(server),
                    }),
                    Err(e) => {
                        redlock.clear();
                        redlock_skipped = Some(format!(
                            "redlock3 needs 3 independent servers: give them with --redlock-redis, \
                             or make redis-server available ({e:#})"
                        ));
                        break;
                    }
                }
            }
            if !redlock.is_empty() {
                let addrs: Vec<String> = redlock
                    .iter()
                    .filter_map(|t| t.embedded.as_ref().map(EmbeddedRedis::addr))
                    .collect();
                eprintln!(
                    "latchkey: started 3 more private redis-servers for redlock3 on {}",
                    addrs.join(", ")
                );
            }
        }
    }
    Ok(Targets {
        main,
        redlock,
        redlock_skipped,
        workloads,
    })
}

/// Runs the chosen workloads and prints the table (or JSON).
pub async fn run(opt: BenchOpt, targets: &Targets) -> Result<ExitCode> {
    let run_id: u32 = rand::random();
    let setup = Setup {
        url: targets.main.url.clone(),
        prefix: format!("latchkey-bench:{run_id:08x}"),
        warmup: (opt.duration / 6).min(Duration::from_millis(500)),
        duration: opt.duration,
    };
    let has = |w: Workload| targets.workloads.contains(&w);
    let peer = !opt.no_peer;
    let mut admin = connect::plain(&setup.url).await?;
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut admin)
        .await?;
    let redis_version = info
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .unwrap_or("?")
        .trim()
        .to_owned();
    let mut report = Report {
        command: command_line(),
        machine: Machine {
            nproc: std::thread::available_parallelism().map_or(0, |n| n.get()),
            cpu: cpu_model(),
            load_before: load_average(),
            load_after: [0.0; 3],
            redis_version,
        },
        redis: targets.main.describe(),
        duration_s: opt.duration.as_secs_f64(),
        runtime: if opt.multi_thread {
            "multi-thread"
        } else {
            "current-thread"
        },
        ceiling: None,
        solo: Vec::new(),
        many: Vec::new(),
        contended: Vec::new(),
        fair: Vec::new(),
        redlock3: Vec::new(),
        redlock3_skipped: None,
        delayed: None,
        held: Vec::new(),
        limiter: None,
        scheduler: None,
        peer_notes: Vec::new(),
        checks: Vec::new(),
        correct: true,
    };

    if has(Workload::Ceiling) {
        report.ceiling = Some(ceiling::measure(&setup).await.context("ceiling")?);
    }
    if has(Workload::Solo) {
        report.solo.push(
            ours::solo(&setup, ours::Release::Unlock)
                .await
                .context("solo")?,
        );
        report.solo.push(
            ours::solo(&setup, ours::Release::Drop)
                .await
                .context("solo")?,
        );
        if peer {
            report
                .solo
                .push(peer::solo(&setup).await.context("solo (rslock)")?);
            report.solo.push(
                peer_redisson::solo(&setup)
                    .await
                    .context("solo (redisson)")?,
            );
        }
    }
    if has(Workload::Many) {
        report.many.push(ours::many(&setup).await.context("many")?);
        report
            .many
            .push(ours::many_floor(&setup).await.context("many (floor)")?);
        if peer {
            report
                .many
                .push(peer::many(&setup).await.context("many (rslock)")?);
            let (run, note) = peer_redisson::many(&setup)
                .await
                .context("many (redisson)")?;
            report.many.push(run);
            if let Some(note) = note {
                report.peer_notes.push(PeerNote {
                    workload: "many",
                    library: peer_redisson::NAME,
                    note,
                });
            }
        }
    }
    if has(Workload::Contended) {
        report
            .contended
            .push(ours::contended(&setup).await.context("contended")?);
        if peer {
            report.contended.push(
                peer::contended(&setup)
                    .await
                    .context("contended (rslock)")?,
            );
            report.contended.push(
                peer_redisson::contended(&setup)
                    .await
                    .context("contended (redisson)")?,
            );
        }
    }
    if has(Workload::Fair) {
        report.fair.push(ours::fair(&setup).await.context("fair")?);
    }
    if has(Workload::Redlock3) {
        if targets.redlock.len() == 3 {
            let urls: Vec<String> = targets.redlock.iter().map(|t| t.url.clone()).collect();
            for run in [
                ours::RedLockRun::Solo,
                ours::RedLockRun::Unfenced,
                ours::RedLockRun::Tasks8,
            ] {
                report.redlock3.push(
                    ours::redlock3(&setup, &urls, run)
                        .await
                        .context("redlock3")?,
                );
            }
            if peer {
                report.redlock3.push(
                    peer::redlock3(&setup, &urls)
                        .await
                        .context("redlock3 (rslock)")?,
                );
            }
        } else {
            report.redlock3_skipped = targets.redlock_skipped.clone();
        }
    }
    if peer {
        for &(workload, why) in peer_redisson::NOT_RUN {
            let ran = match workload {
                "fair" => has(Workload::Fair),
                "redlock3" => has(Workload::Redlock3) && targets.redlock.len() == 3,
                _ => false,
            };
            if ran {
                report.peer_notes.push(PeerNote {
                    workload,
                    library: peer_redisson::NAME,
                    note: format!("not run: {why}"),
                });
            }
        }
    }
    if has(Workload::Delayed) {
        report.delayed = Some(delayed::run(&setup).await.context("delayed")?);
    }
    if has(Workload::Held) {
        report.held = held::held(&setup).await.context("held")?;
    }
    if has(Workload::Limiter) {
        report.limiter = Some(
            limiter::run(&setup, opt.tasks, peer)
                .await
                .context("limiter")?,
        );
    }
    if has(Workload::Scheduler) {
        let params = scheduler::Params {
            jobs: opt.scheduler_jobs,
            every: opt.scheduler_every,
            occurrences: opt.scheduler_occurrences,
            idle: opt.scheduler_idle,
        };
        report.scheduler = Some(scheduler::run(&setup, params).await.context("scheduler")?);
    }
    report.machine.load_after = load_average();
    if targets.main.embedded.is_none() {
        clean_up(&mut admin, &setup.prefix).await?;
    }

    report.checks = checks(&report);
    let mut broken = Vec::new();
    for (workload, runs) in [("contended", &report.contended), ("fair", &report.fair)] {
        for run in runs {
            if let Some(counter) = run.counter.as_ref().filter(|c| !c.ok) {
                broken.push(format!(
                    "{workload} ({}): the counter is {} after {} critical sections: mutual exclusion FAILED",
                    run.library, counter.found, counter.expected
                ));
            }
        }
    }
    if let Some(d) = report
        .delayed
        .as_ref()
        .filter(|d| d.lost > 0 || d.duplicates > 0)
    {
        broken.push(format!(
            "delayed: {} items lost, {} duplicated",
            d.lost, d.duplicates
        ));
    }
    if let Some(s) = report
        .scheduler
        .as_ref()
        .filter(|s| s.missing > 0 || s.duplicates > 0)
    {
        broken.push(format!(
            "scheduler: {} job occurrences did not run, {} ran more than once",
            s.missing, s.duplicates
        ));
    }
    report.correct = broken.is_empty();
    if opt.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", render(&report));
    }
    if !broken.is_empty() {
        bail!("{}", broken.join("; "));
    }
    Ok(ExitCode::SUCCESS)
}

/// Deletes the run's keys from a server that is not private (lock hashes are gone already;
/// fencing counters and queue keys are not).
async fn clean_up(admin: &mut redis::aio::MultiplexedConnection, prefix: &str) -> Result<()> {
    let pattern = format!("*{prefix}*");
    let mut cursor = 0u64;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(&pattern)
            .arg("COUNT")
            .arg(1000)
            .query_async(admin)
            .await?;
        if !keys.is_empty() {
            let _: () = redis::cmd("DEL").arg(&keys).query_async(admin).await?;
        }
        if next == 0 {
            return Ok(());
        }
        cursor = next;
    }
}

/// The targets of the issues, against this run's figures.
fn checks(report: &Report) -> Vec<Check> {
    let mut checks = Vec::new();
    let mut check = |workload, figure, target: String, value: f64, met: bool| {
        checks.push(Check {
            workload,
            figure,
            target,
            value,
            met,
        })
    };
    // Every target is a ratio against rslock or the ceiling measured in the same run: this
    // machine's round trip moves too much from run to run for absolute figures to mean much.
    if let Some((ours, peer, ratio)) = peer_ratio(&report.solo, "unlock") {
        check(
            "solo",
            "unlock() pairs/s ÷ rslock",
            "≥ 0.95×".into(),
            ratio,
            ratio >= 0.95,
        );
        if let (Some(a), Some(b)) = (ours.redis_cpu_us_per_op, peer.redis_cpu_us_per_op) {
            let cpu = a / b.max(1e-9);
            check(
                "solo",
                "Redis CPU per pair ÷ rslock",
                "≤ 2.5×".into(),
                cpu,
                cpu <= 2.5,
            );
        }
    }
    if let Some((ours, peer, ratio)) = peer_ratio(&report.many, "") {
        check(
            "many",
            "pairs/s ÷ rslock",
            "≥ 0.7×".into(),
            ratio,
            ratio >= 0.7,
        );
        if let (Some(a), Some(b)) = (ours.redis_cpu_us_per_op, peer.redis_cpu_us_per_op) {
            let cpu = a / b.max(1e-9);
            check(
                "many",
                "Redis CPU per pair ÷ rslock",
                "≤ 2.0×".into(),
                cpu,
                cpu <= 2.0,
            );
        }
    }
    if let Some((ours, _, ratio)) = peer_ratio(&report.contended, "") {
        check(
            "contended",
            "sections/s ÷ rslock",
            "≥ 1.0×".into(),
            ratio,
            ratio >= 1.0,
        );
        let mean = ours.per_task.iter().sum::<u64>() as f64 / ours.per_task.len().max(1) as f64;
        let fewest = ours.per_task.first().copied().unwrap_or(0) as f64 / mean.max(1e-9);
        check(
            "contended",
            "fewest sections of a client ÷ mean",
            "≥ 0.8".into(),
            fewest,
            fewest >= 0.8,
        );
        if let Some(c) = &ours.commands {
            check(
                "contended",
                "commands/section",
                "≤ 4.0".into(),
                c.per_section,
                c.per_section <= 4.0 + c.edge_allowance,
            );
        }
    }
    if let (Some(run), Some(ceiling)) = (find(&report.fair, "latchkey", ""), &report.ceiling) {
        let share = run.per_second / (ceiling.sequential_per_s / 4.0).max(1e-9);
        check(
            "fair",
            "sections/s ÷ ceiling quarter",
            "≥ 0.9".into(),
            share,
            share >= 0.9,
        );
        let spread = run.latency.p99_us / run.latency.p50_us.max(1.0);
        check(
            "fair",
            "wait p99 / p50",
            "≤ 3×".into(),
            spread,
            spread <= 3.0,
        );
    }
    if let Some((_, _, ratio)) = peer_ratio(&report.redlock3, "") {
        check(
            "redlock3",
            "pairs/s ÷ rslock",
            "≥ 1.0×".into(),
            ratio,
            ratio >= 1.0,
        );
    }
    if let (Some(few), Some(most)) = (report.held.first(), report.held.last()) {
        let ratio = most.per_second / few.per_second.max(1e-9);
        check(
            "held",
            "rate at most held / at fewest",
            "≥ 0.9×".into(),
            ratio,
            ratio >= 0.9,
        );
        let bound = most.held as f64 / 100.0 + 1.0;
        check(
            "held",
            "renewal calls per tick",
            format!("≤ {bound:.0} (N/100 + 1)"),
            most.renew_calls_per_tick,
            most.renew_calls_per_tick <= bound,
        );
    }
    if let Some(d) = &report.delayed {
        let p99_ms = d.lateness.p99_us / 1000.0;
        check(
            "delayed",
            "lateness p99 (ms)",
            "≤ 10 ms".into(),
            p99_ms,
            p99_ms <= 10.0,
        );
    }
    checks
}

/// latchkey's run `variant` and rslock's of the same workload, and the ratio of their rates.
fn peer_ratio<'a>(runs: &'a [Run], variant: &str) -> Option<(&'a Run, &'a Run, f64)> {
    let ours = find(runs, "latchkey", variant)?;
    let peer = find(runs, peer::NAME, "")?;
    Some((ours, peer, ours.per_second / peer.per_second.max(1e-9)))
}

fn find<'a>(runs: &'a [Run], library: &str, variant: &str) -> Option<&'a Run> {
    runs.iter()
        .find(|r| r.library == library && r.variant == variant)
}

/// The text report.
fn render(report: &Report) -> String {
    let m = &report.machine;
    let load = |l: [f64; 3]| format!("{:.2} {:.2} {:.2}", l[0], l[1], l[2]);
    let mut out = format!(
        "\n$ {}\nmachine: {} CPUs ({}), load {} before, {} after; redis {} ({}); clients on a \
         {} tokio runtime; {} per workload\n\n",
        report.command,
        m.nproc,
        m.cpu,
        load(m.load_before),
        load(m.load_after),
        m.redis_version,
        report.redis,
        report.runtime,
        human(Duration::from_secs_f64(report.duration_s)),
    );
    if let Some(c) = &report.ceiling {
        let c_client = match &c.c_client {
            ceiling::CClient::Measured { sequential_per_s } => format!(
                "; redis-benchmark (C, one connection): sequential EVALSHA {}/s",
                thousands(*sequential_per_s)
            ),
            ceiling::CClient::Skipped { why } => format!("; redis-benchmark not run: {why}"),
        };
        out.push_str(&format!(
            "ceiling (same server, same run): sequential EVALSHA {}/s (p50 {}), pipelined EVALSHA {}/s{c_client}\n\n",
            thousands(c.sequential_per_s),
            us(c.sequential_latency.p50_us),
            thousands(c.pipelined_per_s),
        ));
    }
    let mut table = Table::new(
        &[
            "workload",
            "figure",
            "latchkey",
            "rslock",
            "redisson",
            "÷ rslock",
            "÷ redisson",
            "of ceiling",
            "target",
            "",
        ],
        2,
    );
    let verdict = |workload: &str, figure: &str| -> [String; 2] {
        report
            .checks
            .iter()
            .find(|c| c.workload == workload && c.figure == figure)
            .map_or([String::new(), String::new()], |c| {
                [
                    c.target.clone(),
                    if c.met { "met".into() } else { "MISSED".into() },
                ]
            })
    };
    let rate = |run: Option<&Run>| run.map_or(String::new(), |r| thousands(r.per_second));
    let ratio = |ours: &Run, peer: Option<&Run>| {
        peer.map_or(String::new(), |p| {
            format!("{:.2}×", ours.per_second / p.per_second.max(1e-9))
        })
    };
    let of = |ours: &Run, limit: Option<f64>| {
        limit.map_or(String::new(), |l| {
            format!("{:.0}%", 100.0 * ours.per_second / l)
        })
    };
    let latency = |run: Option<&Run>| {
        run.map_or(String::new(), |r| {
            format!("{} / {}", us(r.latency.p50_us), us(r.latency.p99_us))
        })
    };
    let cpu = |run: Option<&Run>| {
        run.map_or(String::new(), |r| {
            match (r.redis_cpu_us_per_op, r.client_cpu_us_per_op) {
                (Some(server), Some(client)) => format!("{server:.1} / {client:.1} µs"),
                _ => String::new(),
            }
        })
    };
    // Redis CPU per operation ÷ the peer's.
    let cpu_ratio = |ours: Option<&Run>, peer: Option<&Run>| match (
        ours.and_then(|r| r.redis_cpu_us_per_op),
        peer.and_then(|r| r.redis_cpu_us_per_op),
    ) {
        (Some(a), Some(b)) => format!("{:.2}×", a / b.max(1e-9)),
        _ => String::new(),
    };
    // A row with both peers: workload and figure, latchkey's cell, the peers' cells (rslock,
    // redisson), then ÷ rslock, ÷ redisson, of ceiling, target, met.
    let row_peers = |cells: [&str; 2], ours: String, peers: [String; 2], rest: [String; 5]| {
        let [rslock, redisson] = peers;
        let mut row = vec![
            cells[0].to_owned(),
            cells[1].to_owned(),
            ours,
            rslock,
            redisson,
        ];
        row.extend(rest);
        row
    };
    // A row without redisson: rslock's cell, then ÷ rslock, of ceiling, target, met.
    let row = |cells: [&str; 2], ours: String, peer: String, rest: [String; 4]| {
        let [ratio, of, target, met] = rest;
        let rest = [ratio, String::new(), of, target, met];
        row_peers(cells, ours, [peer, String::new()], rest)
    };
    fn blank<const N: usize>() -> [String; N] {
        std::array::from_fn(|_| String::new())
    }
    // The tail of a row with both peers that has a target and no ratio.
    let judged = |[target, met]: [String; 2]| {
        let [a, b, c] = blank();
        [a, b, c, target, met]
    };
    let ceiling = report.ceiling.as_ref();
    let seq_pairs = ceiling.map(|c| c.sequential_per_s / 2.0);
    let piped_pairs = ceiling.map(|c| c.pipelined_per_s / 2.0);
    let seq_sections = ceiling.map(|c| c.sequential_per_s / 4.0);

    let peer_solo = find(&report.solo, peer::NAME, "");
    let redisson_solo = find(&report.solo, peer_redisson::NAME, "");
    // A dropped guard's release travels while the next acquire does: one round trip per pair.
    let seq_round_trips = ceiling.map(|c| c.sequential_per_s);
    let solo_rows = [
        ("unlock", "unlock()", "unlock() pairs/s ÷ rslock", seq_pairs),
        ("drop", "drop", "-", seq_round_trips),
    ];
    for (variant, label, figure, limit) in solo_rows {
        if let Some(ours) = find(&report.solo, "latchkey", variant) {
            let [target, met] = verdict("solo", figure);
            table.row(row_peers(
                ["solo", &format!("pairs/s, {label}")],
                rate(Some(ours)),
                [rate(peer_solo), rate(redisson_solo)],
                [
                    ratio(ours, peer_solo),
                    ratio(ours, redisson_solo),
                    of(ours, limit),
                    target,
                    met,
                ],
            ));
            table.row(row_peers(
                ["", &format!("pair p50 / p99, {label}")],
                latency(Some(ours)),
                [latency(peer_solo), latency(redisson_solo)],
                blank(),
            ));
            if variant == "unlock" && ours.redis_cpu_us_per_op.is_some() {
                table.row(row_peers(
                    ["", "CPU / pair: Redis / client, unlock()"],
                    cpu(Some(ours)),
                    [cpu(peer_solo), cpu(redisson_solo)],
                    judged(verdict("solo", "Redis CPU per pair ÷ rslock")),
                ));
            }
        }
    }
    let pairs = |table: &mut Table, workload: &str, runs: &[Run], limit, figure| {
        if let Some(ours) = find(runs, "latchkey", "") {
            let peer = find(runs, peer::NAME, "");
            // redisson's `many` is its `pool 64` run when the default pool failed (see the notes).
            let second = find(runs, peer_redisson::NAME, "")
                .or_else(|| find(runs, peer_redisson::NAME, "pool 64"));
            let marked = |r: Option<&Run>| match r {
                Some(r) if !r.variant.is_empty() => format!("{} ({})", rate(Some(r)), r.variant),
                _ => rate(r),
            };
            let [target, met] = verdict(workload, figure);
            table.row(row_peers(
                [workload, "pairs/s"],
                rate(Some(ours)),
                [rate(peer), marked(second)],
                [
                    ratio(ours, peer),
                    ratio(ours, second),
                    of(ours, limit),
                    target,
                    met,
                ],
            ));
            table.row(row_peers(
                ["", "pair p50 / p99"],
                latency(Some(ours)),
                [latency(peer), latency(second)],
                blank(),
            ));
            if ours.redis_cpu_us_per_op.is_some() {
                let [target, met] = verdict(workload, "Redis CPU per pair ÷ rslock");
                table.row(row_peers(
                    ["", "CPU / pair: Redis / client"],
                    cpu(Some(ours)),
                    [cpu(peer), cpu(second)],
                    [
                        cpu_ratio(Some(ours), peer),
                        String::new(),
                        String::new(),
                        target,
                        met,
                    ],
                ));
            }
            if let Some(floor) = find(runs, "latchkey", "floor") {
                table.row(row_peers(
                    ["", "floor: empty scripts, CPU / pair"],
                    cpu(Some(floor)),
                    blank(),
                    [
                        cpu_ratio(Some(floor), peer),
                        String::new(),
                        String::new(),
                        String::new(),
                        String::new(),
                    ],
                ));
            }
        }
    };
    pairs(
        &mut table,
        "many",
        &report.many,
        piped_pairs,
        "pairs/s ÷ rslock",
    );
    // Cells shared by `contended` and `fair`.
    let spread = |r: Option<&Run>| {
        r.map_or(String::new(), |r| {
            let min = r.per_task.first().copied().unwrap_or(0) as f64;
            let max = r.per_task.last().copied().unwrap_or(0) as f64;
            format!("{} – {}", thousands(min), thousands(max))
        })
    };
    let cmds = |r: Option<&Run>| {
        r.and_then(|r| r.commands.as_ref())
            .map_or(String::new(), |c| match c.health_checks {
                0 => format!("{:.3} ±{:.3}", c.per_section, c.edge_allowance),
                n => format!("{:.3} ±{:.3} (+{n} PING)", c.per_section, c.edge_allowance),
            })
    };
    let counter = |r: Option<&Run>| {
        r.and_then(|r| r.counter.as_ref())
            .map_or(String::new(), |c| {
                if c.ok {
                    format!("{} ok", thousands(c.found as f64))
                } else {
                    format!("{} ≠ {}", c.found, c.expected)
                }
            })
    };
    let counter_target = || {
        [
            String::new(),
            String::new(),
            "= sections".into(),
            String::new(),
        ]
    };
    if let Some(ours) = find(&report.contended, "latchkey", "") {
        let peer = find(&report.contended, peer::NAME, "");
        let second = find(&report.contended, peer_redisson::NAME, "");
        let peers = |cell: &dyn Fn(Option<&Run>) -> String| [cell(peer), cell(second)];
        let [target, met] = verdict("contended", "sections/s ÷ rslock");
        table.row(row_peers(
            ["contended", "sections/s"],
            rate(Some(ours)),
            peers(&rate),
            [
                ratio(ours, peer),
                ratio(ours, second),
                of(ours, seq_sections),
                target,
                met,
            ],
        ));
        table.row(row_peers(
            ["", "wait p50 / p99"],
            latency(Some(ours)),
            peers(&latency),
            blank(),
        ));
        let max = |r: Option<&Run>| r.map_or(String::new(), |r| us(r.latency.max_us));
        table.row(row_peers(
            ["", "wait max"],
            max(Some(ours)),
            peers(&max),
            blank(),
        ));
        table.row(row_peers(
            ["", "sections per client"],
            spread(Some(ours)),
            peers(&spread),
            judged(verdict("contended", "fewest sections of a client ÷ mean")),
        ));
        table.row(row_peers(
            ["", "CPU / section: Redis / client"],
            cpu(Some(ours)),
            peers(&cpu),
            blank(),
        ));
        table.row(row_peers(
            ["", "commands/section"],
            cmds(Some(ours)),
            peers(&cmds),
            judged(verdict("contended", "commands/section")),
        ));
        table.row(row_peers(
            ["", "final counter"],
            counter(Some(ours)),
            peers(&counter),
            judged(["= sections".into(), String::new()]),
        ));
    }
    if let Some(ours) = find(&report.fair, "latchkey", "") {
        let [target, met] = verdict("fair", "sections/s ÷ ceiling quarter");
        table.row(row(
            ["fair", "sections/s"],
            rate(Some(ours)),
            String::new(),
            [String::new(), of(ours, seq_sections), target, met],
        ));
        let [target, met] = verdict("fair", "wait p99 / p50");
        table.row(row(
            ["", "wait p50 / p99"],
            latency(Some(ours)),
            String::new(),
            [String::new(), String::new(), target, met],
        ));
        table.row(row(
            ["", "sections per client"],
            spread(Some(ours)),
            String::new(),
            blank(),
        ));
        table.row(row(
            ["", "commands/section"],
            cmds(Some(ours)),
            String::new(),
            blank(),
        ));
        table.row(row(
            ["", "final counter"],
            counter(Some(ours)),
            String::new(),
            counter_target(),
        ));
    }
    pairs(
        &mut table,
        "redlock3",
        &report.redlock3,
        seq_pairs,
        "pairs/s ÷ rslock",
    );
    for run in [ours::RedLockRun::Unfenced, ours::RedLockRun::Tasks8] {
        if let Some(ours) = find(&report.redlock3, "latchkey", run.variant()) {
            table.row(row(
                ["", &format!("pairs/s, {}", run.variant())],
                rate(Some(ours)),
                String::new(),
                blank(),
            ));
        }
    }
    for (i, h) in report.held.iter().enumerate() {
        let last = i + 1 == report.held.len();
        let [target, met] = if last {
            verdict("held", "rate at most held / at fewest")
        } else {
            [String::new(), String::new()]
        };
        table.row(row(
            [
                if i == 0 { "held" } else { "" },
                &format!(
                    "pairs/s with {} held (p50 {})",
                    thousands(h.held as f64),
                    us(h.latency.p50_us)
                ),
            ],
            thousands(h.per_second),
            String::new(),
            [String::new(), String::new(), target, met],
        ));
        let [target, met] = if last {
            verdict("held", "renewal calls per tick")
        } else {
            [String::new(), String::new()]
        };
        table.row(row(
            ["", "renewal calls/tick, bytes/lock"],
            format!(
                "{:.1}, {:.0}",
                h.renew_calls_per_tick, h.bytes_per_held_lock
            ),
            String::new(),
            [String::new(), String::new(), target, met],
        ));
    }
    if let Some(d) = &report.delayed {
        let [target, met] = verdict("delayed", "lateness p99 (ms)");
        let late = format!(
            "{} / {} / {}",
            us(d.lateness.p50_us),
            us(d.lateness.p99_us),
            us(d.lateness.max_us)
        );
        table.row(row(
            ["delayed", "lateness p50 / p99 / max"],
            late,
            String::new(),
            [String::new(), String::new(), target, met],
        ));
        table.row(row(
            ["", "offer_all items/s (one call, 100k)"],
            thousands(d.offer_all_per_s),
            String::new(),
            blank(),
        ));
        let lost = format!("{} / {} / {}", d.lost, d.duplicates, d.early);
        table.row(row(
            ["", "lost / duplicates / early"],
            lost,
            String::new(),
            [
                String::new(),
                String::new(),
                "0 / 0 / 0".into(),
                String::new(),
            ],
        ));
    }
    // The lock workloads' table, when one of them ran.
    let locks = !(report.solo.is_empty()
        && report.many.is_empty()
        && report.contended.is_empty()
        && report.fair.is_empty()
        && report.redlock3.is_empty()
        && report.held.is_empty())
        || report.delayed.is_some();
    if locks {
        out.push_str(&table.render());
    }
    if let Some(why) = &report.redlock3_skipped {
        out.push_str(&format!("\nredlock3 skipped: {why}\n"));
    }
    for n in &report.peer_notes {
        out.push_str(&format!("\n{} on {}: {}\n", n.library, n.workload, n.note));
    }
    if let Some(l) = &report.limiter {
        out.push_str(&limiter::render(l));
    }
    if let Some(s) = &report.scheduler {
        out.push_str(&scheduler::render(s));
    }
    if locks {
        out.push_str(
            "\n÷ rslock, ÷ redisson = latchkey's rate / the peer's (the peers have no \
             drop-to-release: both solo rows compare with their lock + unlock; redisson's pool sends \
             a PING before every script call, and its waiters poll every 100 ms). of ceiling: solo \
             unlock() and redlock3 against half the sequential EVALSHA rate (a pair is 2 round \
             trips), solo drop against the whole of it (the release travels with the next \
             acquire), many against half the pipelined rate, \
             contended and fair against a quarter of the sequential rate (acquire, GET, SET, \
             release in a row). CPU: user + system time per operation of the Redis server and of the bench process (the \
             clients); on a CPU row ÷ rslock is Redis CPU ÷ rslock's. many's floor: the same two \
             EVALSHA calls per pair with latchkey's keys and arguments and empty scripts, what a \
             pair costs Redis before a lock script runs a command.\n",
        );
    }
    let missed: Vec<String> = report
        .checks
        .iter()
        .filter(|c| !c.met)
        .map(|c| {
            format!(
                "{} {} ({}, target {})",
                c.workload,
                c.figure,
                num(c.value),
                c.target
            )
        })
        .collect();
    if report.checks.is_empty() {
        out.push_str("targets: none in these workloads\n");
    } else if missed.is_empty() {
        out.push_str(&format!("targets: all {} met\n", report.checks.len()));
    } else {
        out.push_str(&format!(
            "targets: {} of {} met; missed: {}\n",
            report.checks.len() - missed.len(),
            report.checks.len(),
            missed.join("; ")
        ));
    }
    out
}

/// Microseconds as `850 µs` / `12.3 ms`.
fn us(micros: f64) -> String {
    human(Duration::from_secs_f64(micros / 1e6))
}

fn num(value: f64) -> String {
    if value >= 100.0 {
        thousands(value)
    } else {
        format!("{value:.2}")
    }
}

fn command_line() -> String {
    let mut args = std::env::args();
    args.next();
    std::iter::once("latchkey".to_owned())
        .chain(args)
        .collect::<Vec<_>>()
        .join(" ")
}

fn load_average() -> [f64; 3] {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let mut parts = text.split_whitespace().map(|p| p.parse().unwrap_or(0.0));
    [
        parts.next().unwrap_or(0.0),
        parts.next().unwrap_or(0.0),
        parts.next().unwrap_or(0.0),
    ]
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|rest| rest.trim_start_matches([' ', '\t', ':']).trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".to_owned())
}
