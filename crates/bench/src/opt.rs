//! The command line of `latchkey-bench`, as clap structs.

use std::time::Duration;

use clap::{Args, Parser, ValueEnum};

use crate::duration;

/// Measure latchkey and the Rust peers rslock and redisson (the crate) on fixed workloads.
///
/// Workloads: solo (one client, sequential lock+unlock pairs on 64 rotating names), many (64
/// tasks on one client, each on its own names), contended (8 clients on one lock, a GET + SET
/// increment inside), fair (contended with a fair lock; latchkey only), redlock3 (solo over 3
/// independent servers; latchkey and rslock), delayed (5000 items, delays 0.5-3 s), held
/// (pairs while one client holds 100, 10k and 50k locks; latchkey only), limiter (rate limiter
/// decisions at 10/s and 10,000/s: latchkey's window and GCRA, the redisson crate's limiter and
/// Redisson's own script; memory per limited key), scheduler (lateness of 1,000 jobs due at
/// once on 3 nodes, and Redis calls per second while idle), ceiling (sequential and pipelined
/// EVALSHA on the same server). The ceiling is always measured. The clients run
/// on one thread unless --multi-thread. Without --redis or REDIS_URL, starts private
/// redis-servers for the run.
#[derive(Debug, Parser)]
#[command(name = "latchkey-bench", version)]
pub struct BenchOpt {
    /// How to reach Redis.
    #[command(flatten)]
    pub connect: ConnectOpts,
    /// Workloads to run (default: all).
    #[arg(value_enum)]
    pub workloads: Vec<Workload>,
    /// Print the results as JSON on stdout (progress still goes to stderr).
    #[arg(long)]
    pub json: bool,
    /// How long each timed workload runs (after a short warm-up).
    #[arg(long, value_name = "DURATION", default_value = "3s", value_parser = duration::positive)]
    pub duration: Duration,
    /// Do not measure the peers (rslock, redisson).
    #[arg(long)]
    pub no_peer: bool,
    /// Run on tokio's multi-threaded runtime (one worker per CPU) instead of one thread. On a
    /// small machine that also runs Redis, the single thread leaves Redis a core of its own.
    #[arg(long)]
    pub multi_thread: bool,
    /// The 3 servers of redlock3, comma-separated. Default: 3 private redis-servers.
    #[arg(long, value_name = "URL,URL,URL", value_delimiter = ',')]
    pub redlock_redis: Vec<String>,
    /// Tasks deciding at once in `limiter` (one client per library, shared by the tasks).
    #[arg(long, value_name = "N", default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub tasks: u32,
    /// `scheduler`: the jobs due at once on the 3 nodes, each every `--scheduler-every`.
    #[arg(long, value_name = "N", default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub scheduler_jobs: u32,
    /// `scheduler`: the jobs' interval (at least 1 s: the scheduler's shortest).
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = job_interval)]
    pub scheduler_every: Duration,
    /// `scheduler`: the occurrences of every job that are measured.
    #[arg(long, value_name = "N", default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub scheduler_occurrences: u32,
    /// `scheduler`: how long each idle group is watched.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = duration::positive)]
    pub scheduler_idle: Duration,
}

/// How to reach Redis (the same flag as the `latchkey` command's, which `connect` reads).
#[derive(Clone, Debug, Args)]
pub struct ConnectOpts {
    /// Redis URL: redis://[user:password@]host:port[/db], rediss://… (TLS) or
    /// redis+sentinel://host:port[,host:port…]/master
    #[arg(long = "redis", env = "REDIS_URL", value_name = "URL")]
    pub redis: Option<String>,
}

/// A benchmark workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, ValueEnum)]
pub enum Workload {
    /// The same server's raw limit: sequential and pipelined EVALSHA.
    Ceiling,
    /// One client, sequential lock+unlock pairs on 64 rotating names.
    Solo,
    /// 64 tasks on one client, each on its own names.
    Many,
    /// 8 clients on one lock; a non-atomic GET + SET increment inside.
    Contended,
    /// `contended` with a fair lock (FIFO across clients).
    Fair,
    /// `solo` over 3 independent servers (RedLock), then without fencing and with 8 tasks.
    Redlock3,
    /// 5000 items with delays uniform in 0.5-3 s through a delayed queue.
    Delayed,
    /// Pairs while one client holds 100, 10k and 50k locks; renewal calls per tick, memory.
    Held,
    /// Rate limiter decisions at 10/s and 10,000/s with `--tasks` tasks, and memory per key.
    Limiter,
    /// 1,000 jobs due at once on 3 scheduler nodes: lateness, exactly once; idle calls/s.
    Scheduler,
}

/// A job interval: 1 s to an hour, as `--scheduler-every` takes it.
fn job_interval(text: &str) -> Result<Duration, String> {
    let d = duration::positive(text)?;
    if d < Duration::from_secs(1) || d > Duration::from_secs(3600) {
        return Err(format!(
            "`{text}` is out of range; the scheduler's jobs run every 1 s or more (up to an hour here)"
        ));
    }
    Ok(d)
}
