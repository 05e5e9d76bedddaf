//! The command line, as clap structs.

use std::ffi::OsString;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use latchkey_redis::RateLimiter;

use crate::duration;
use crate::exit;

const ABOUT: &str = "Distributed locks kept in Redis (Redisson-compatible), from the shell: run a \
command under a lock or only while leading an election, inspect and release locks, show and set \
rate limits, use delayed queues, watch the demo.";

/// The `latchkey` command.
#[derive(Debug, Parser)]
#[command(name = "latchkey", version, about = ABOUT, after_help = exit::TABLE)]
pub struct Opt {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a command while holding a lock: a distributed `flock`.
    ///
    /// Takes the lock (renewed by the watchdog while the command runs), runs the command with
    /// the lock's fencing token in LATCHKEY_FENCING_TOKEN, releases the lock when it exits,
    /// and exits with its status. SIGTERM (and SIGINT, SIGHUP, SIGQUIT that did not come from
    /// the terminal, which delivers those to the command itself) is forwarded to the command.
    /// If the lock is lost while the command runs, the command gets SIGTERM, then SIGKILL
    /// after --grace, and latchkey exits 76.
    #[command(
        after_help = exit::TABLE,
        override_usage = "latchkey run [OPTIONS] <LOCK> -- <COMMAND> [ARGS]..."
    )]
    Run(RunOpt),
    /// Run a command only while this process leads an election: one active node of many.
    ///
    /// Campaigns (standbys wait in line; the first in line leads as soon as the leader resigns,
    /// or within its lease when it dies), runs the command with the term in LATCHKEY_TERM
    /// (also LATCHKEY_FENCING_TOKEN) while it leads, and resigns when it exits, handing over to
    /// the next standby. If the leadership is lost while the command runs, the command gets
    /// SIGTERM, then SIGKILL after --grace, and latchkey exits 76. Signals are passed on as by
    /// `run`.
    #[command(
        after_help = exit::TABLE,
        override_usage = "latchkey elect [OPTIONS] <ELECTION> -- <COMMAND> [ARGS]..."
    )]
    Elect(ElectOpt),
    /// Show an election's leader and term; with --watch, every change until interrupted.
    Leader(LeaderOpt),
    /// Run a command on a schedule, on exactly one node of a fleet per occurrence.
    ///
    /// Run the same `latchkey cron` on every node: each occurrence (every --every, or on the
    /// --cron schedule) is claimed by one of them, which runs the command with the run's
    /// fencing token in LATCHKEY_FENCING_TOKEN, the occurrence's due time in LATCHKEY_DUE_TIME
    /// (RFC 3339, UTC), LATCHKEY_JOB and LATCHKEY_ATTEMPT. A node that dies while it runs an
    /// occurrence stops renewing its claim; another node runs it again once the claim's lease
    /// (--watchdog) has run out, with a higher token. If the claim is lost while the command
    /// runs, the command gets SIGTERM, then SIGKILL after --grace, as with `run`. SIGTERM or
    /// SIGINT stops latchkey: it claims nothing more, lets a command that runs finish within
    /// --grace, and hands the occurrence back otherwise.
    #[command(
        after_help = exit::TABLE,
        override_usage = "latchkey cron [OPTIONS] <JOB> (--every <DURATION> | --cron <EXPRESSION>) -- <COMMAND> [ARGS]..."
    )]
    Cron(CronOpt),
    /// Show the scheduled jobs of a group: schedule, next occurrence, the run going on and the
    /// last one (with the node that ran it).
    Jobs(JobsOpt),
    /// Show locks, semaphores, rate limiters and job groups: holders, hold counts, remaining
    /// lease, fencing token, waiting clients; a fair lock's queue, a read-write lock's mode, a
    /// semaphore's permits, a rate limiter's rate and permits left, a job group's jobs.
    ///
    /// The kind is recognized from what is kept under each name. With --watch, a live view
    /// (redrawn in place on a terminal, a snapshot per read otherwise) until Ctrl-C.
    Status(StatusOpt),
    /// List the locks, semaphores, rate limiters and job groups that exist, with kind, holder
    /// count, lease and a detail (a lock's first holder, a limiter's rate, a group's jobs).
    ///
    /// Uses SCAN (never KEYS), on every primary of a cluster. The keys derived from a name
    /// (fencing counters, queues, leases, a limiter's windows) are not listed.
    List(ListOpt),
    /// Show a rate limiter's rate and the permits its window has left; with --set, set the rate.
    ///
    /// The limiter is Redisson's RRateLimiter layout, as the library's `Client::rate_limiter`
    /// keeps it: Java and Rust services that share it see the new rate at their next call.
    /// --set replaces the config in place (--per-client and --keep-alive included: without
    /// them, the limiter is overall and never expires) and restarts the window, empty: every
    /// permit of the new rate is available at once. Per-client windows of other clients are
    /// not restarted. A name that holds something else (a lock, a semaphore) is refused and
    /// left as it is.
    #[command(after_help = exit::TABLE)]
    Limit(LimitOpt),
    /// Release a lock whoever holds it (its holders see their lock lost).
    Release(ReleaseOpt),
    /// Offer items to a delayed queue, take ready items, show a queue's counts.
    #[command(subcommand)]
    Queue(QueueCommand),
    /// Workers deduct stock from one Redis counter: first without a lock (oversold), then
    /// with latchkey (exact).
    ///
    /// Without --redis or REDIS_URL, starts a private redis-server for the run.
    Demo(DemoOpt),
    /// The benchmarks moved to the `latchkey-bench` crate; this only says how to run them.
    #[command(hide = true, disable_help_flag = true)]
    Bench(BenchMovedOpt),
}

/// How to reach Redis; flattened into every subcommand.
#[derive(Clone, Debug, Args)]
pub struct ConnectOpts {
    /// Redis URL: redis://[user:password@]host:port[/db], rediss://… (TLS) or
    /// redis+sentinel://host:port[,host:port…]/master
    #[arg(long = "redis", env = "REDIS_URL", value_name = "URL")]
    pub redis: Option<String>,
}

/// Options of `latchkey run`.
#[derive(Debug, Args)]
pub struct RunOpt {
    /// How to reach Redis.
    #[command(flatten)]
    pub connect: ConnectOpts,
    /// The lock's name (the Redis key of a Redisson RLock).
    pub lock: String,
    /// Give up if the lock is not free within this long (`0`: try once) and exit 75. Default:
    /// wait as long as it takes.
    #[arg(long, value_name = "DURATION", value_parser = duration::wait)]
    pub wait: Option<Duration>,
    /// Hold the lock for at most this long instead of renewing it: when the lease runs out the
    /// lock is lost and the command is stopped. Default: renewed by the watchdog while the
    /// command runs.
    #[arg(long, value_name = "DURATION", value_parser = duration::lease)]
    pub lease: Option<Duration>,
    /// The watchdog's lease: how long the lock outlives this process if it dies without
    /// releasing it. Renewed every third of it. Default: the library's default, 30s.
    #[arg(long, value_name = "DURATION", value_parser = duration::watchdog)]
    pub watchdog: Option<Duration>,
    /// When the lock is lost: how long the command has between SIGTERM and SIGKILL.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = duration::grace)]
    pub grace: Duration,
    /// Use a fair lock: waiters get the lock first come, first served.
    #[arg(long)]
    pub fair: bool,
    /// Say on stderr when the lock is taken and released.
    #[arg(short, long)]
    pub verbose: bool,
    /// The command to run and its arguments (after `--`).
    #[arg(
        value_name = "COMMAND",
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    pub command: Vec<OsString>,
}

/// Options of `latchkey elect`.
#[derive(Debug, Args)]
pub struct ElectOpt {
    /// How to reach Redis.
    #[command(flatten)]
    pub connect: ConnectOpts,
    /// The election's name.
    pub election: String,
    /// What `latchkey leader` shows of this process while it leads. Default: <host name>:<pid>.
    #[arg(long, value_name = "VALUE")]
    pub value: Option<String>,
    /// Give up if this process does not lead within this long (`0`: try once) and exit 75.
    /// Default: wait as a standby as long as it takes.
    #[arg(long, value_name = "DURATION", value_parser = duration::wait)]
    pub wait: Option<Duration>,
    /// The leadership's lease: how long a leader that dies keeps the standbys waiting.
    /// Renewed every third of it. Default: the library's default, 30s.
    #[arg(long, value_name = "DURATION", value_parser = duration::watchdog)]
    pub watchdog: Option<Duration>,
    /// When the leadership is lost: how long the command has between SIGTERM and SIGKILL.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = duration::grace)]
    pub grace: Duration,
    /// Say on stderr when this process leads and resigns.
    #[arg(short, long)]
    pub verbose: bool,
    /// The command to run and its arguments (after `--`).
    #[arg(
        value_name = "COMMAND",
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    pub command: Vec<OsString>,
}

/// Options of `latchkey cron`.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("schedule").required(true).args(["every", "cron"])))]
pub struct CronOpt {
    /// How to reach Redis.
    #[command(flatten)]
    pub connect: ConnectOpts,
    /// The job's name.
    pub job: String,
    /// Run every DURATION, at its multiples since the Unix epoch (every 5m: :00, :05, …).
    #[arg(long, value_name = "DURATION", value_parser = duration::positive)]
    pub every: Option<Duration>,
    /// Run on a cron schedule: five fields (minute hour day month weekday) or six with
    /// seconds first, e.g. "0 */5 * * * *".
    #[arg(long, value_name = "EXPRESSION")]
    pub cron: Option<String>,
    /// The time zone the --cron schedule is read in (an IANA name, e.g. Europe/Paris).
    #[arg(long, value_name = "ZONE", default_value = "UTC")]
    pub tz: String,
    /// The job group: the jobs one fleet runs together.
    #[arg(long, value_name = "GROUP", default_value = "cron")]
    pub group: String,
    /// Occurrences missed while no node ran (or a run took longer): `skip`, `once` (run once
    /// for all of them), or `each:N` (each, up to N).
    #[arg(long, value_name = "POLICY", default_value = "once", value_parser = missed)]
    pub missed: latchkey_redis::Missed,
    /// An occurrence due while a run goes on: `skip` it, or `queue` it after the run.
    #[arg(long, value_name = "POLICY", default_value = "skip", value_parser = overlap)]
    pub overlap: latchkey_redis::Overlap,
    /// Stop a run after this long (SIGTERM, then SIGKILL after --grace). Default: no limit.
    #[arg(long, value_name = "DURATION", value_parser = duration::positive)]
    pub max_runtime: Option<Duration>,
    /// The claim's lease: how long an occurrence whose node died waits before another node
    /// runs it again. Renewed every third of it. Default: the library's default, 30s.
    #[arg(long, value_name = "DURATION", value_parser = duration::watchdog)]
    pub watchdog: Option<Duration>,
    /// When a run is stopped (claim lost, --max-runtime, shutdown): how long the command has
    /// between SIGTERM and SIGKILL.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = duration::grace)]
    pub grace: Duration,
    /// Say on stderr when this node runs an occurrence, and how it ended.
    #[arg(short, long)]
    pub verbose: bool,
    /// The command to run and its arguments (after `--`).
    #[arg(
        value_name = "COMMAND",
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    pub command: Vec<OsString>,
}

fn missed(text: &str) -> Result<latchkey_redis::Missed, String> {
    match text {
        "skip" => Ok(latchkey_redis::Missed::Skip),
        "once" => Ok(latchkey_redis::Missed::RunOnce),
        _ => match text.strip_prefix("each:").map(str::parse::<u32>) {
            Some(Ok(max)) if max > 0 => Ok(latchkey_redis::Missed::RunEach { max }),
            _ => Err(format!("`{text}`: use skip, once or each:N (N at least 1)")),
        },
    }
}

fn overlap(text: &str) -> Result<latchkey_redis::Overlap, String> {
    match text {
        "skip" => Ok(latchkey_redis::Overlap::Skip),
        "queue" => Ok(latchkey_redis::Overlap::Queue),
        _ => Err(format!("`{text}`: use skip or queue")),
    }
}

/// Options of `latchkey jobs`.
#[derive(Debug, Args)]
pub struct JobsOpt {
    /// How to reach Redis.
    #[command(flatten)]
    pub connect: ConnectOpts,
    /// The job group (`latchkey cron`'s default group is `cron`).
    #[arg(default_value = "cron")]
    pub group: String,
    /// Print JSON (an array of jobs) instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// Options of `latchkey leader`.
#[derive(Debug, Args)]
pub struct LeaderOpt {
    /// How to reach Redis.
    #[command(flatten)]
    pub connect: ConnectOpts,
    /// The election's name.
    pub election: String,
    /// Follow the changes (a line each: new leader, new value, no leader) until interrupted.
    #[arg(long)]
    pub watch: bool,
    /// Print JSON (one object per line) on stdout.
    #[arg(long)]
    pub json: bool,
}

/// Options of `latchkey status`.
#[derive(Debug, Args)]
pub struct StatusOpt {
    /// How to reach Redis.
    #[command(flatten)]
    pub connect: ConnectOpts,
    /// The names of the locks, semaphores, rate limiters or job groups.
    #[arg(value_name = "NAME", required = true)]
    pub names: Vec<String>,
    /// Print JSON on stdout: one object per name, one per line.
    #[arg(long, conflicts_with = "watch")]
    pub json: bool,
    /// Keep showing them, refreshed in place (Redis is read twice a second), until Ctrl-C.
    #[arg(short, long)]
    pub watch: bool,
}

/// Options of `latchkey limit`.
#[derive(Debug, Args)]
pub struct LimitOpt {
    /// How to reach Redis.
    #[command(flatten)]
    pub connect: ConnectOpts,
    /// The rate limiter's name.
    pub name: String,
    /// Set the rate: RATE permits per INTERVAL (`100/1s`, `5/500ms`, `1000/1h`), replacing the
    /// config and restarting the window.
    #[arg(long, value_name = "RATE/INTERVAL", value_parser = rate_spec)]
    pub set: Option<RateSpec>,
    /// With --set: a budget of RATE per INTERVAL for each client (each latchkey client, each
    /// Redisson instance) instead of one shared by all.
    #[arg(long, requires = "set")]
    pub per_client: bool,
    /// With --set: delete the limiter (config and windows) once unused for this long (at
    /// least the interval). Default: kept until deleted.
    #[arg(long, value_name = "DURATION", requires = "set", value_parser = duration::positive)]
    pub keep_alive: Option<Duration>,
    /// Print JSON on stdout: one object.
    #[arg(long)]
    pub json: bool,
}

/// A rate as `--set` gives it: `rate` permits per `interval`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateSpec {
    /// Permits per interval, 1 to `RateLimiter::MAX_RATE`.
    pub rate: u64,
    /// The window, whole milliseconds from 1 ms to `RateLimiter::MAX_INTERVAL`.
    pub interval: Duration,
}

/// Parses `RATE/INTERVAL` within the library's limits, so that a bad rate is refused before
/// anything is sent.
fn rate_spec(text: &str) -> Result<RateSpec, String> {
    let example = "e.g. 100/1s for 100 permits a second";
    let (rate, interval) = text
        .split_once('/')
        .ok_or_else(|| format!("`{text}` is not RATE/INTERVAL; write {example}"))?;
    let rate: u64 = rate
        .trim()
        .parse()
        .map_err(|_| format!("`{rate}` is not a number of permits; write {example}"))?;
    if rate == 0 {
        return Err("a rate of 0 would never grant a permit; give at least 1".to_owned());
    }
    if rate > RateLimiter::MAX_RATE {
        return Err(format!(
            "{rate} is more than the maximum rate, {}",
            RateLimiter::MAX_RATE
        ));
    }
    let interval = duration::parse(interval)?;
    if interval < Duration::from_millis(1) || interval > RateLimiter::MAX_INTERVAL {
        return Err(format!(
            "the interval must be 1ms to {} days",
            RateLimiter::MAX_INTERVAL.as_secs() / 86_400
        ));
    }
    if !interval.subsec_nanos().is_multiple_of(1_000_000) {
        return Err(format!(
            "the interval {interval:?} is not a whole number of milliseconds, the unit the \
             limiter keeps"
        ));
    }
    Ok(RateSpec { rate, interval })
}

/// Options of `latchkey list`.
#[derive(Debug, Args)]
pub struct ListOpt {
    /// How to reach Redis.
    #[command(flatten)]
    pub connect: ConnectOpts,
    /// Only names matching this glob (`*`, `?`, `[abc]`; `\` escapes).
    #[arg(default_value = "*")]
    pub pattern: String,
    /// Print a JSON array on stdout.
    #[arg(long)]
    pub json: bool,
}

/// Options of `latchkey release`.
#[derive(Debug, Args)]
pub struct ReleaseOpt {
    /// How to reach Redis.
    #[command(flatten)]
    pub connect: ConnectOpts,
    /// The lock's name.
    pub lock: String,
    /// Required: release the lock whoever holds it.
    #[arg(long, required = true)]
    pub force: bool,
    /// Do not ask for confirmation (needed when stdin is not a terminal).
    #[arg(short, long)]
    pub yes: bool,
}

/// `latchkey queue …`.
#[derive(Debug, Subcommand)]
pub enum QueueCommand {
    /// Offer an item (JSON) to a delayed queue; it becomes ready after --delay.
    Offer(QueueOfferOpt),
    /// Take the next ready item, print it (JSON) on stdout, and acknowledge it (an item whose
    /// acknowledgement failed is delivered again after the visibility timeout).
    Take(QueueTakeOpt),
    /// Show how many items wait, are ready, are being processed and are dead letters.
    Stats(QueueStatsOpt),
}

/// Options of `latchkey queue offer`.
#[derive(Debug, Args)]
pub struct QueueOfferOpt {
    /// How to reach Redis.
    #[command(flatten)]
    pub connect: ConnectOpts,
    /// The queue's name.
    pub queue: String,
    /// The item: a JSON value (`{"order":1001}`, `42`, `"text"`), or any text with --text.
    pub item: String,
    /// Take ITEM as a plain string rather than JSON.
    #[arg(long)]
    pub text: bool,
    /// How long until the item becomes ready.
    #[arg(long, value_name = "DURATION", default_value = "0", value_parser = duration::delay)]
    pub delay: Duration,
}

/// Options of `latchkey queue take`.
#[derive(Debug, Args)]
pub struct QueueTakeOpt {
    /// How to reach Redis.
    #[command(flatten)]
    pub connect: ConnectOpts,
    /// The queue's name.
    pub queue: String,
    /// Wait at most this long for an item (`0`: look once) and exit 75 if none came. Default:
    /// wait as long as it takes.
    #[arg(long, value_name = "DURATION", value_parser = duration::wait)]
    pub timeout: Option<Duration>,
}

/// Options of `latchkey queue stats`.
#[derive(Debug, Args)]
pub struct QueueStatsOpt {
    /// How to reach Redis.
    #[command(flatten)]
    pub connect: ConnectOpts,
    /// The queue's name.
    pub queue: String,
    /// Print JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

/// Options of `latchkey demo`.
#[derive(Debug, Args)]
pub struct DemoOpt {
    /// How to reach Redis.
    #[command(flatten)]
    pub connect: ConnectOpts,
    /// Units in stock at the start.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub stock: u64,
    /// Concurrent workers (spread over --clients).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub workers: u64,
    /// Clients (separate connections), like separate service instances.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=64))]
    pub clients: u64,
}

/// `latchkey bench …`: whatever follows, to repeat it in the pointer to `latchkey-bench`.
#[derive(Debug, Args)]
pub struct BenchMovedOpt {
    /// The arguments given.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub args: Vec<OsString>,
}
