//! `scheduler`: how late the occurrences of many jobs due at the same instant start, on 3
//! nodes of one group (3 clients, each a task of this process, as 3 processes of a service
//! would be on one machine), whether each ran exactly once; and what an idle group costs Redis,
//! in calls per second.
//!
//! Lateness is the handler's start minus the occurrence's due time, on the server's clock
//! (this machine's clock plus the offset measured against `TIME` at the start).

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use latchkey_redis::Run;
use redis::aio::MultiplexedConnection;
use serde::Serialize;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::commands::{self, Calls};
use super::measure::Latency;
use super::{us, Setup};
use crate::connect;
use crate::duration::human;
use crate::stats::{thousands, Samples};
use crate::ui::{count_bar, Table};

/// Nodes of each group.
pub const NODES: usize = 3;

/// Jobs of the first idle group (the second has `--scheduler-jobs`).
pub const IDLE_JOBS: u32 = 100;

/// The idle groups' jobs run about hourly: see [`idle_interval`].
const IDLE_EVERY: Duration = Duration::from_secs(3600);

/// How long the command count must stand still before a group counts as settled (every node
/// has registered its jobs).
const QUIET: Duration = Duration::from_millis(500);

/// The longest a group may take to settle.
const SETTLE_AT_MOST: Duration = Duration::from_secs(60);

/// What `scheduler` found.
#[derive(Clone, Debug, Serialize)]
pub struct SchedulerResult {
    /// Nodes of the group.
    pub nodes: usize,
    /// Jobs, all due at the same instants.
    pub jobs: u32,
    /// Their interval, in seconds.
    pub every_s: f64,
    /// Occurrences of each job measured.
    pub occurrences: u32,
    /// Runs expected: jobs × occurrences.
    pub expected: u64,
    /// Runs of the measured occurrences seen (duplicates included).
    pub ran: u64,
    /// Job occurrences that did not run.
    pub missing: u64,
    /// Runs beyond the first of a job occurrence.
    pub duplicates: u64,
    /// Runs that started before their due time (by the offset clock; should be 0).
    pub early: u64,
    /// Runs per node, fewest first.
    pub per_node: Vec<u64>,
    /// Handler start − due time.
    pub lateness: Latency,
    /// The server's clock minus this machine's, µs.
    pub clock_offset_us: i64,
    /// How long the nodes took to register the jobs, ms: from their start to the last script
    /// call before the group went quiet (every job in the group's index, then no script call
    /// for 500 ms).
    pub registered_ms: u64,
    /// Redis commands the nodes sent per occurrence run, while the measured occurrences ran:
    /// the commands no script can run (`evalsha`, `ping`, …, see `commands.rs`) and `zrange`
    /// (a node's read of the group's index; no scheduler script runs it).
    pub sent_per_occurrence: f64,
    /// Those commands, by name.
    pub sent: Calls,
    /// Every command per occurrence run (`INFO commandstats`, those run inside scripts
    /// included; `info`, the measuring, left out).
    pub calls_per_occurrence: f64,
    /// Those commands, by name.
    pub calls: Calls,
    /// The idle groups.
    pub idle: Vec<IdleRun>,
}

/// An idle group watched for a while.
#[derive(Clone, Debug, Serialize)]
pub struct IdleRun {
    /// Nodes of the group.
    pub nodes: usize,
    /// Jobs of the group.
    pub jobs: u32,
    /// Their interval, in seconds (about an hour, with no occurrence near).
    pub every_s: f64,
    /// How long it was watched, in seconds.
    pub seconds: f64,
    /// Redis commands in that time (`INFO commandstats`, `info` left out).
    pub calls: u64,
    /// `calls / seconds`.
    pub calls_per_s: f64,
    /// The commands, by name.
    pub by_command: Calls,
}

/// The settings of the due phase.
#[derive(Clone, Copy, Debug)]
pub struct Params {
    /// Jobs of the group.
    pub jobs: u32,
    /// Their interval.
    pub every: Duration,
    /// Occurrences measured.
    pub occurrences: u32,
    /// How long each idle group is watched.
    pub idle: Duration,
}

/// One run of a handler.
#[derive(Clone, Copy, Debug)]
struct Record {
    node: usize,
    job: u32,
    due_ms: i64,
    late_us: i64,
}

/// Runs the due phase, then the idle groups.
pub async fn run(setup: &Setup, params: Params) -> Result<SchedulerResult> {
    let mut result = due(setup, params).await?;
    let mut sizes = vec![IDLE_JOBS, params.jobs];
    sizes.dedup();
    for jobs in sizes {
        result.idle.push(idle(setup, jobs, params.idle).await?);
    }
    Ok(result)
}

/// Microseconds since the epoch on this machine's clock.
fn local_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

/// The server's clock minus this machine's, µs (against the middle of the `TIME` round trip).
async fn clock_offset(admin: &mut MultiplexedConnection) -> Result<i64> {
    let sent = local_us();
    let (s, us): (i64, i64) = redis::cmd("TIME").query_async(admin).await?;
    let back = local_us();
    Ok(s * 1_000_000 + us - (sent + back) / 2)
}

/// A group's nodes: each a client of its own running the scheduler in a task.
struct Nodes {
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<latchkey_redis::Result<()>>>,
}

impl Nodes {
    /// Starts [`NODES`] nodes of `group`, each registering `jobs` jobs `job00000`… every
    /// `every`, run by `handler(node, job, run)`.
    async fn start<H, Fut>(
        url: &str,
        group: &str,
        jobs: u32,
        every: Duration,
        handler: H,
    ) -> Result<Nodes>
    where
        H: Fn(usize, u32, Run) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = Result<(), String>> + Send + 'static,
    {
        let (stop, stopped) = watch::channel(false);
        let mut tasks = Vec::with_capacity(NODES);
        for node in 0..NODES {
            let client = connect::client(url, None).await?;
            let scheduler = client.scheduler(group);
            for job in 0..jobs {
                let handler = handler.clone();
                scheduler
                    .every(format!("job{job:05}"), every, move |run: Run| {
                        handler(node, job, run)
                    })
                    .context("registering a job")?;
            }
            let mut stopped = stopped.clone();
            tasks.push(tokio::spawn(async move {
                let result = scheduler
                    .run_until(async move {
                        let _ = stopped.wait_for(|stop| *stop).await;
                    })
                    .await;
                drop(client);
                result
            }));
        }
        Ok(Nodes { stop, tasks })
    }

    /// Fails with a node's error if one has ended (a node runs until it is stopped).
    async fn check(&mut self) -> Result<()> {
        if let Some(i) = self.tasks.iter().position(JoinHandle::is_finished) {
            let task = self.tasks.swap_remove(i);
            task.await
                .context("a scheduler node panicked")?
                .context("a scheduler node failed")?;
            bail!("a scheduler node stopped by itself");
        }
        Ok(())
    }

    /// Stops the nodes (they let their runs finish) and waits for them.
    async fn stop(self) -> Result<()> {
        let _ = self.stop.send(true);
        for task in self.tasks {
            task.await
                .context("a scheduler node panicked")?
                .context("a scheduler node failed")?;
        }
        Ok(())
    }
}

/// The group's index key (`latchkey_jobs:{<group>}`), for a group name without a hash tag.
fn index_key(group: &str) -> String {
    format!("latchkey_jobs:{{{group}}}")
}

/// Waits until the group's index holds `jobs` jobs and then until no script call has come for
/// [`QUIET`] (every node has registered; at most [`SETTLE_AT_MOST`]). Returns when the last
/// script call was seen.
async fn settle(
    admin: &mut MultiplexedConnection,
    nodes: &mut Nodes,
    group: &str,
    jobs: u32,
) -> Result<Instant> {
    let started = Instant::now();
    loop {
        let indexed: u64 = redis::cmd("ZCARD")
            .arg(index_key(group))
            .query_async(admin)
            .await?;
        if indexed >= u64::from(jobs) {
            break;
        }
        nodes.check().await?;
        if started.elapsed() > SETTLE_AT_MOST {
            bail!(
                "the group's index `{}` holds {indexed} of {jobs} jobs after {SETTLE_AT_MOST:?} \
                 (slow nodes, or the library names the index otherwise now)",
                index_key(group)
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let evalsha = |calls: &Calls| calls.get("evalsha").copied().unwrap_or(0);
    let mut last = evalsha(&commands::snapshot(admin).await?);
    let mut quiet_since = Instant::now();
    while quiet_since.elapsed() < QUIET && started.elapsed() < SETTLE_AT_MOST {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let now = evalsha(&commands::snapshot(admin).await?);
        if now != last {
            last = now;
            quiet_since = Instant::now();
        }
    }
    Ok(quiet_since)
}

/// The calls of `after − before`, `info` (the measuring) left out.
fn calls_between(before: &Calls, after: &Calls) -> Calls {
    let mut delta = commands::delta(before, after);
    delta.remove("info");
    delta
}

/// The due phase: `jobs` jobs every `every` on [`NODES`] nodes, `occurrences` occurrences.
async fn due(setup: &Setup, params: Params) -> Result<SchedulerResult> {
    let Params {
        jobs,
        every,
        occurrences,
        ..
    } = params;
    let group = format!("{}:scheduler:due", setup.prefix);
    let mut admin = connect::plain(&setup.url).await?;
    let offset_us = clock_offset(&mut admin).await?;
    let server_us = move || local_us() + offset_us;
    let every_ms = every.as_millis() as i64;

    // Start just after an instant of the schedule (the multiples of the interval since the
    // epoch): the nodes have a whole interval to register the jobs before the next one.
    let now_ms = server_us() / 1000;
    let start_ms = (now_ms / every_ms + 1) * every_ms;
    tokio::time::sleep(Duration::from_millis((start_ms - now_ms + 20) as u64)).await;

    let records: Arc<Mutex<Vec<Record>>> = Arc::new(Mutex::new(Vec::new()));
    let handler = {
        let records = records.clone();
        move |node: usize, job: u32, run: Run| {
            // The handler starts here: its lateness, first.
            let late_us = server_us() - system_us(run.due());
            let due_ms = system_us(run.due()).div_euclid(1000);
            records
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(Record {
                    node,
                    job,
                    due_ms,
                    late_us,
                });
            async { Ok::<(), String>(()) }
        }
    };
    let started = Instant::now();
    let mut nodes = Nodes::start(&setup.url, &group, jobs, every, handler).await?;
    let registered = settle(&mut admin, &mut nodes, &group, jobs).await?;
    let registered_ms = registered.duration_since(started).as_millis() as u64;

    // The first instant measured is the first one after the group settled (with 100 ms to
    // spare), so that every job is due then, however long registering took.
    let now_ms = server_us() / 1000;
    let first_ms = ((now_ms + 100) / every_ms + 1) * every_ms;
    let dues: Vec<i64> = (0..i64::from(occurrences))
        .map(|k| first_ms + k * every_ms)
        .collect();
    let last_ms = *dues.last().expect("at least one occurrence");
    let expected = u64::from(jobs) * u64::from(occurrences);
    let bar = count_bar(expected, "scheduler latchkey");
    let calls_before = commands::snapshot(&mut admin).await?;

    // Until every measured run has come, or the occurrence after the last measured one is
    // near; then until the runs' ends are recorded (script calls stop), as long as that
    // occurrence is still ahead.
    let measured = |records: &[Record]| {
        records
            .iter()
            .filter(|r| (first_ms..=last_ms).contains(&r.due_ms))
            .count() as u64
    };
    let give_up_ms = last_ms + every_ms - 200;
    loop {
        let seen = measured(&records.lock().unwrap_or_else(|e| e.into_inner()));
        bar.set_position(seen.min(expected));
        if seen >= expected || server_us() / 1000 >= give_up_ms {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    bar.finish_and_clear();
    let evalsha = |calls: &Calls| calls.get("evalsha").copied().unwrap_or(0);
    let mut calls_after = commands::snapshot(&mut admin).await?;
    loop {
        if server_us() / 1000 >= give_up_ms {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = commands::snapshot(&mut admin).await?;
        let still = evalsha(&now) != evalsha(&calls_after);
        calls_after = now;
        if !still {
            break;
        }
    }
    nodes.stop().await?;
    let records = std::mem::take(&mut *records.lock().unwrap_or_else(|e| e.into_inner()));

    let mut seen: HashMap<(u32, i64), u64> = HashMap::new();
    let mut lateness = Samples::new();
    let mut per_node = vec![0u64; NODES];
    let mut early = 0;
    for r in records
        .iter()
        .filter(|r| (first_ms..=last_ms).contains(&r.due_ms))
    {
        *seen.entry((r.job, r.due_ms)).or_default() += 1;
        per_node[r.node] += 1;
        if r.late_us < 0 {
            early += 1;
        }
        lateness.push(Duration::from_micros(r.late_us.max(0) as u64));
    }
    let mut missing = 0;
    let mut duplicates = 0;
    for job in 0..jobs {
        for due in &dues {
            match seen.get(&(job, *due)).copied().unwrap_or(0) {
                0 => missing += 1,
                n => duplicates += n - 1,
            }
        }
    }
    per_node.sort_unstable();
    let calls = calls_between(&calls_before, &calls_after);
    let ran = per_node.iter().sum::<u64>();
    let no_plain = commands::Plain {
        get: false,
        set: false,
    };
    let mut sent = commands::client_sent(&calls, no_plain, 0, 0);
    if let Some(&n) = calls.get("zrange") {
        sent.insert("zrange".to_owned(), n);
    }
    Ok(SchedulerResult {
        nodes: NODES,
        jobs,
        every_s: every.as_secs_f64(),
        occurrences,
        expected,
        ran,
        missing,
        duplicates,
        early,
        per_node,
        lateness: Latency::of(&mut lateness),
        clock_offset_us: offset_us,
        registered_ms,
        sent_per_occurrence: sent.values().sum::<u64>() as f64 / ran.max(1) as f64,
        sent,
        calls_per_occurrence: calls.values().sum::<u64>() as f64 / ran.max(1) as f64,
        calls,
        idle: Vec::new(),
    })
}

/// A time as µs since the epoch.
fn system_us(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

/// An interval of about [`IDLE_EVERY`] whose next occurrence is well after the watch ends
/// (occurrences fall on the multiples of the interval since the epoch, so an hourly job could
/// come due in the middle of the watch).
fn idle_interval(now_ms: i64, watch: Duration) -> Duration {
    let clear = watch.as_millis() as i64 + SETTLE_AT_MOST.as_millis() as i64 + 10_000;
    let mut every = IDLE_EVERY.as_millis() as i64;
    while (now_ms / every + 1) * every - now_ms < clear {
        every += 1000;
    }
    Duration::from_millis(every as u64)
}

/// An idle group: `jobs` jobs every hour or so on [`NODES`] nodes, watched for `watch` once
/// every node has registered.
async fn idle(setup: &Setup, jobs: u32, watch: Duration) -> Result<IdleRun> {
    let group = format!("{}:scheduler:idle:{jobs}", setup.prefix);
    let mut admin = connect::plain(&setup.url).await?;
    let offset_us = clock_offset(&mut admin).await?;
    let every = idle_interval((local_us() + offset_us) / 1000, watch);
    let handler = |_: usize, _: u32, _: Run| async { Ok::<(), String>(()) };
    let mut nodes = Nodes::start(&setup.url, &group, jobs, every, handler).await?;
    settle(&mut admin, &mut nodes, &group, jobs).await?;
    let bar = count_bar(
        watch.as_secs().max(1),
        &format!("scheduler idle {jobs} jobs"),
    );
    let before = commands::snapshot(&mut admin).await?;
    let started = Instant::now();
    let ticks = watch.as_secs().max(1);
    for _ in 0..ticks {
        tokio::time::sleep(watch / ticks as u32).await;
        bar.inc(1);
    }
    let after = commands::snapshot(&mut admin).await?;
    let seconds = started.elapsed().as_secs_f64();
    bar.finish_and_clear();
    nodes.stop().await?;
    let by_command = calls_between(&before, &after);
    let calls = by_command.values().sum::<u64>();
    Ok(IdleRun {
        nodes: NODES,
        jobs,
        every_s: every.as_secs_f64(),
        seconds,
        calls,
        calls_per_s: calls as f64 / seconds.max(1e-9),
        by_command,
    })
}

/// `name 12, other 3` for the commands with the most calls first.
fn by_name(calls: &Calls, per: f64) -> String {
    let mut sorted: Vec<(&String, &u64)> = calls.iter().collect();
    sorted.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    sorted
        .iter()
        .map(|(name, n)| {
            let n = **n as f64 / per;
            if n >= 100.0 {
                format!("{name} {}", thousands(n))
            } else {
                format!("{name} {n:.2}")
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The text section of `scheduler`.
pub fn render(s: &SchedulerResult) -> String {
    let mut out = format!(
        "\nscheduler: {} jobs every {} on {} nodes (a client each, one process), all due at \
         the same instants; {} occurrences measured; lateness = handler start − due, on the \
         server's clock (offset {} µs)\n\n",
        thousands(f64::from(s.jobs)),
        human(Duration::from_secs_f64(s.every_s)),
        s.nodes,
        s.occurrences,
        s.clock_offset_us
    );
    let mut table = Table::new(&["figure", "latchkey", "expected"], 1);
    table.row(vec![
        "lateness p50 / p99 / max".into(),
        format!(
            "{} / {} / {}",
            us(s.lateness.p50_us),
            us(s.lateness.p99_us),
            us(s.lateness.max_us)
        ),
        String::new(),
    ]);
    table.row(vec![
        "runs (missing / duplicates / early)".into(),
        format!(
            "{} ({} / {} / {})",
            thousands(s.ran as f64),
            s.missing,
            s.duplicates,
            s.early
        ),
        format!("{} (0 / 0 / 0)", thousands(s.expected as f64)),
    ]);
    table.row(vec![
        "runs per node".into(),
        s.per_node
            .iter()
            .map(|n| thousands(*n as f64))
            .collect::<Vec<_>>()
            .join(" / "),
        String::new(),
    ]);
    table.row(vec![
        format!(
            "registering {} × {} jobs",
            s.nodes,
            thousands(f64::from(s.jobs))
        ),
        format!("{} ms", thousands(s.registered_ms as f64)),
        String::new(),
    ]);
    table.row(vec![
        "Redis calls per occurrence: sent / all".into(),
        format!(
            "{:.2} / {:.2}",
            s.sent_per_occurrence, s.calls_per_occurrence
        ),
        String::new(),
    ]);
    for idle in &s.idle {
        table.row(vec![
            format!(
                "idle, {} jobs every {} s: calls/s",
                thousands(f64::from(idle.jobs)),
                thousands(idle.every_s)
            ),
            format!("{:.2}", idle.calls_per_s),
            String::new(),
        ]);
    }
    out.push_str(&table.render());
    out.push_str(&format!(
        "\nscheduler commands sent per occurrence: {}\nscheduler commands per occurrence, \
         inside scripts included: {}\n",
        by_name(&s.sent, s.ran.max(1) as f64),
        by_name(&s.calls, s.ran.max(1) as f64)
    ));
    for idle in &s.idle {
        let calls = if idle.by_command.is_empty() {
            "none".to_owned()
        } else {
            by_name(&idle.by_command, 1.0)
        };
        out.push_str(&format!(
            "scheduler idle, {} jobs on {} nodes, {:.1} s watched: {}\n",
            thousands(f64::from(idle.jobs)),
            idle.nodes,
            idle.seconds,
            calls
        ));
    }
    out
}
