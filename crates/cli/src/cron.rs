//! `latchkey cron`: a command run on a schedule, each occurrence on one node of a fleet; and
//! `latchkey jobs`: the jobs of a group.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::{anyhow, Context, Result};
use latchkey_redis::{Client, JobInfo, JobOptions, JobRun, Run, Schedule};
use serde_json::json;

use crate::connect::{self, redact, Target};
use crate::duration::human;
use crate::exit::{self, coded};
use crate::opt::{CronOpt, JobsOpt};
use crate::run::{spawn_command, status_code, stop_command, Signals, TOKEN_ENV};
use crate::status::who;
use crate::sys;

/// The environment variable that carries the occurrence's due time (RFC 3339, UTC).
pub const DUE_ENV: &str = "LATCHKEY_DUE_TIME";
/// The environment variable that carries the job's name.
pub const JOB_ENV: &str = "LATCHKEY_JOB";
/// The environment variable that carries the attempt (1, more for a retry).
pub const ATTEMPT_ENV: &str = "LATCHKEY_ATTEMPT";

/// `t` as RFC 3339 in UTC, to the millisecond.
fn rfc3339(t: SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(t).to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// Runs `latchkey cron` until SIGTERM or SIGINT. Errors of latchkey itself exit
/// [`exit::RUN_FAILED`], as `run`'s do.
pub async fn run(opt: CronOpt) -> Result<ExitCode> {
    match cron(opt).await {
        Ok(code) => Ok(ExitCode::from(code)),
        Err(error) if error.downcast_ref::<exit::Coded>().is_some() => Err(error),
        Err(error) => Err(coded(exit::RUN_FAILED, error)),
    }
}

fn schedule(opt: &CronOpt) -> Result<Schedule> {
    match (&opt.every, &opt.cron) {
        (Some(every), None) => Ok(Schedule::every(*every)?),
        (None, Some(cron)) => {
            let tz: latchkey_redis::chrono_tz::Tz = opt
                .tz
                .parse()
                .map_err(|_| anyhow!("unknown time zone `{}` (--tz)", opt.tz))?;
            Ok(Schedule::cron(cron)?.in_time_zone(tz))
        }
        _ => Err(anyhow!("give --every or --cron")),
    }
}

async fn cron(opt: CronOpt) -> Result<u8> {
    let target = Target::given_or_default(&opt.connect);
    let schedule = schedule(&opt).map_err(|e| coded(exit::USAGE, e))?;
    let mut signals = Signals::new()?;
    sys::become_subreaper();
    let watchdog = opt.watchdog.unwrap_or(Client::DEFAULT_WATCHDOG_TIMEOUT);
    let client = connect::client(&target.url, Some(watchdog)).await?;
    let scheduler = client.scheduler(opt.group.clone());
    scheduler.shutdown_grace(opt.grace);
    let mut options = JobOptions::new().missed(opt.missed).overlap(opt.overlap);
    if let Some(max) = opt.max_runtime {
        // The run's future is dropped then: the command gets SIGTERM first, see `one_run`.
        options = options.max_runtime(max + opt.grace + Duration::from_secs(1));
    }
    if opt.verbose {
        eprintln!(
            "latchkey: running `{}` of group `{}` ({schedule}) on {}",
            opt.job,
            opt.group,
            redact(&target.url)
        );
    }
    let opt = Arc::new(opt);
    let job = opt.clone();
    scheduler.job(opt.job.clone(), schedule, options, move |run: Run| {
        let opt = job.clone();
        async move { one_run(&opt, run).await }
    })?;
    let signalled = std::sync::Mutex::new(None);
    let stop = async {
        let signo = signals.recv().await;
        *signalled.lock().unwrap_or_else(|e| e.into_inner()) = Some(signo);
    };
    scheduler
        .run_until(stop)
        .await
        .with_context(|| format!("running the job `{}`", opt.job))?;
    let signo = signalled.lock().unwrap_or_else(|e| e.into_inner()).take();
    Ok(signo.map_or(0, |signo| exit::SIGNAL_BASE + signo as u8))
}

/// One occurrence on this node: the command, stopped if the claim is lost or it runs past
/// --max-runtime. Its exit status is the run's outcome.
async fn one_run(opt: &CronOpt, run: Run) -> std::result::Result<(), String> {
    let token = run.fencing_token().get();
    let env = [
        (TOKEN_ENV, token.to_string()),
        (DUE_ENV, rfc3339(run.due())),
        (JOB_ENV, opt.job.clone()),
        (ATTEMPT_ENV, run.attempt().to_string()),
    ];
    if opt.verbose {
        eprintln!(
            "latchkey: running `{}` due {} (token {token}, attempt {})",
            opt.job,
            rfc3339(run.due()),
            run.attempt()
        );
    }
    let child = spawn_command(&opt.command, &env).map_err(|(_, e)| e.to_string())?;
    let pid = child.id().unwrap_or(0);
    // The scheduler drops this future when the claim is lost or the shutdown grace is over:
    // the command is then stopped in a task of its own (SIGTERM, SIGKILL after --grace).
    let mut supervised = Supervised {
        child: Some(child),
        grace: opt.grace,
    };
    let child = supervised.child.as_mut().expect("just spawned");
    let limit = async {
        match opt.max_runtime {
            Some(max) => tokio::time::sleep(max).await,
            None => std::future::pending().await,
        }
    };
    let outcome = tokio::select! {
        status = child.wait() => {
            let code = status_code(status.map_err(|e| format!("waiting for the command: {e}"))?);
            if code == 0 { Ok(()) } else { Err(format!("exit {code}")) }
        }
        () = run.lost() => {
            eprintln!(
                "latchkey: LOST the claim of `{}` due {} (token {token}) while the command ran: \
                 another node may run it now. Sending SIGTERM to the command (pid {pid}) and its \
                 processes.",
                opt.job,
                rfc3339(run.due())
            );
            stop_command(child, opt.grace).await;
            Err("lost".to_owned())
        }
        () = limit => {
            eprintln!(
                "latchkey: `{}` ran past --max-runtime {}; sending SIGTERM to the command (pid {pid})",
                opt.job,
                human(opt.max_runtime.unwrap_or_default())
            );
            stop_command(child, opt.grace).await;
            Err("timed out".to_owned())
        }
    };
    supervised.child = None;
    if opt.verbose {
        eprintln!(
            "latchkey: `{}` due {} ended: {}",
            opt.job,
            rfc3339(run.due()),
            outcome
                .as_ref()
                .map_or_else(String::clone, |()| "ok".to_owned())
        );
    }
    outcome
}

/// Runs `latchkey jobs`: the group's jobs as a table or JSON.
pub async fn jobs(opt: JobsOpt) -> Result<ExitCode> {
    let target = Target::given_or_default(&opt.connect);
    let client = connect::client(&target.url, None).await?;
    let jobs = client
        .scheduler(opt.group.clone())
        .jobs()
        .await
        .with_context(|| format!("reading the job group `{}`", opt.group))?;
    if opt.json {
        let mut rows = Vec::new();
        for job in &jobs {
            rows.push(job_json(&client, job).await);
        }
        println!("{}", serde_json::Value::Array(rows));
        return Ok(ExitCode::SUCCESS);
    }
    if jobs.is_empty() {
        eprintln!("no jobs in group `{}`", opt.group);
        return Ok(ExitCode::SUCCESS);
    }
    for job in &jobs {
        println!("{}", job_text(&client, job).await);
    }
    Ok(ExitCode::SUCCESS)
}

async fn run_text(client: &Client, run: &JobRun) -> String {
    let info = client.client_info(&run.owner).await.ok().flatten();
    let mut text = format!(
        "due {} token {} attempt {} on {}",
        rfc3339(run.due),
        run.token,
        run.attempt,
        who(info.as_ref())
    );
    if let (Some(outcome), Some(finished)) = (&run.outcome, run.finished) {
        text.push_str(&format!(": {outcome} at {}", rfc3339(finished)));
    }
    text
}

/// A job's lines, as `latchkey jobs` (and `latchkey status GROUP`) prints them.
pub async fn job_text(client: &Client, job: &JobInfo) -> String {
    let mut out = format!("job       {}\nschedule  {}\n", job.name, job.schedule);
    match job.next_due {
        Some(next) => out.push_str(&format!("next      {}\n", rfc3339(next))),
        None => out.push_str("next      none\n"),
    }
    if let Some(run) = &job.running {
        out.push_str(&format!("running   {}\n", run_text(client, run).await));
    }
    if let Some(run) = &job.last {
        out.push_str(&format!("last      {}\n", run_text(client, run).await));
    }
    if job.skipped > 0 {
        out.push_str(&format!("skipped   {} occurrence(s)\n", job.skipped));
    }
    out
}

async fn run_json(client: &Client, run: &Option<JobRun>) -> serde_json::Value {
    let Some(run) = run else {
        return serde_json::Value::Null;
    };
    let info = client.client_info(&run.owner).await.ok().flatten();
    json!({
        "owner": run.owner,
        "client": crate::status::client_json(info.as_ref()),
        "token": run.token.get(),
        "attempt": run.attempt,
        "due": rfc3339(run.due),
        "started": rfc3339(run.started),
        "finished": run.finished.map(rfc3339),
        "outcome": run.outcome,
    })
}

/// A job as one JSON object, as `latchkey jobs --json` (and `status GROUP --json`) prints it.
pub async fn job_json(client: &Client, job: &JobInfo) -> serde_json::Value {
    json!({
        "job": job.name,
        "schedule": job.schedule,
        "next_due": job.next_due.map(rfc3339),
        "running": run_json(client, &job.running).await,
        "last": run_json(client, &job.last).await,
        "skipped": job.skipped,
    })
}

/// A run's command, stopped in the background if the run's future is dropped before the
/// command ended (its claim was lost, or the node stopped and the grace ran out): a command
/// must never go on while another node runs the same occurrence.
struct Supervised {
    child: Option<tokio::process::Child>,
    grace: Duration,
}

impl Drop for Supervised {
    fn drop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if matches!(child.try_wait(), Ok(Some(_))) {
            return;
        }
        let grace = self.grace;
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move { stop_command(&mut child, grace).await });
            }
            // No runtime to wait in: stop it at once.
            Err(_) => {
                let _ = child.start_kill();
            }
        }
    }
}
